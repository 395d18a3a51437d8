"""The emitter's send queue: bounded, one lane per correlation key, served by worker threads.

Correlation decides what to send (:class:`~.correlator.Send`); this module makes the
requests. The sends of one key form a lane, worked strictly in order by one worker at a time,
so a series patch never overtakes the create it patches. Different keys never wait on each
other: a failed send waits for its retry **parked**, holding no worker, and the lanes behind
it go on. At most ``capacity`` sends wait (queued or parked, as client-go's 1000-slot queue);
a send that finds no room is dropped with a log line and a counter.

The workers also run the correlator's timers when they are due (their wait ends at the next
due time, at most a minute away); hosts that tick themselves build the emitter with
``timers=False``.
"""

from __future__ import annotations

import collections
import heapq
import itertools
import threading
import time
from collections.abc import Callable

from ..._core import threads
from ..._core.redact import redact
from .correlator import Correlator, Purpose, Send, Sent
from .event import Event, EventKey

#: client-go's number of sending workers (since v0.37).
EVENT_WORKERS = 8
#: How long an idle worker waits before it looks at the timers again.
_IDLE_WAIT = 60.0


#: What the emitter does with fewer workers than asked for (the log line of ADR 0140).
_FEWER_WORKERS = (
    "Kubernetes Events are sent by the workers running; with none, they wait in the outbox"
)


class Dispatcher:
    """Sends a correlator's requests from ``workers`` threads, key by key.

    ``sleep``: when given, a worker waits for a retry by calling it (holding the worker and
    its lane), as a test that records the waits needs; by default a send waiting for its
    retry is parked until the retry is due and the worker moves on to other lanes.
    ``monotonic`` is the clock of parked retries (seconds).
    """

    def __init__(
        self,
        correlator: Correlator,
        *,
        workers: int = EVENT_WORKERS,
        capacity: int = 1000,
        sleep: Callable[[float], None] | None = None,
        timers: bool = True,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self.correlator = correlator
        self.workers = workers
        self.capacity = capacity
        self.timers = timers
        self._sleep = sleep
        self._monotonic = monotonic
        self._cond = threading.Condition(threading.Lock())
        self._lanes: dict[EventKey, collections.deque[Send]] = {}
        self._ready: collections.deque[EventKey] = collections.deque()
        self._parked: list[tuple[float, int, EventKey]] = []
        self._seq = itertools.count()
        self._busy: set[EventKey] = set()
        #: sends not yet done: waiting (queued or parked) plus in flight
        self._pending = 0
        #: sends waiting: queued or parked (bounded by ``capacity``)
        self._waiting = 0
        self._stopping = False
        self._started = False
        self._threads: list[threading.Thread] = []
        #: times a worker could not be started (ADR 0140): fewer workers serve the lanes;
        #: with none, the next submit tries again (what waits meanwhile stays in the outbox)
        self.refusals = 0

    # -- admission ----------------------------------------------------------------------------
    @property
    def lock(self) -> threading.Condition:
        """Held by the emitter while it correlates and submits, so both are one step."""
        return self._cond

    def has_room(self) -> bool:
        """Whether one more send fits (call with :attr:`lock` held)."""
        return self._waiting < self.capacity

    def submit(self, send: Send) -> bool:
        """Queue ``send`` behind the earlier sends of its key (call with :attr:`lock` held).
        False, with a log line, when ``capacity`` sends are already waiting."""
        if not self.has_room():
            event = send.event
            self.correlator.log.error(
                "unable to record event: too many queued events, dropped event",
                name=event.name if event else "",
                namespace=event.namespace if event else "",
                reason=event.reason if event else "",
                purpose=send.purpose.value,
            )
            return False
        lane = self._lanes.get(send.key)
        if lane is None:
            lane = self._lanes[send.key] = collections.deque()
        if send.purpose is not Purpose.RECORD and any(s.purpose is send.purpose for s in lane):
            return True  # the same timer send is already waiting in this lane
        lane.append(send)
        if self._started and not self._threads and not self._stopping:
            self._top_up()
        if len(lane) == 1 and send.key not in self._busy:
            self._ready.append(send.key)
        self._pending += 1
        self._waiting += 1
        self._cond.notify()
        return True

    def run_timers(self) -> None:
        """Queue the timers' sends if they are due (call with :attr:`lock` held)."""
        if self.correlator.clock() < self.correlator.next_due:
            return
        for send in self.correlator.due_sends():
            if not self.submit(send):
                # not an Event lost: a refresh comes again, an unfinished series stays cached
                self.correlator.log.warning("timer send skipped: queue full")

    # -- inspection ---------------------------------------------------------------------------
    def queued(self) -> list[Event]:
        """The Events of the recorded sends still waiting, in lane order (for tests)."""
        with self._cond:
            return [
                s.event
                for lane in self._lanes.values()
                for s in lane
                if s.event is not None and s.purpose is Purpose.RECORD
            ]

    @property
    def threads(self) -> list[threading.Thread]:
        return list(self._threads)

    # -- workers ------------------------------------------------------------------------------
    def start(self) -> None:
        with self._cond:
            if self._started or self._stopping:
                return
            self._started = True
            self._top_up()

    def _top_up(self) -> None:
        """Start the workers missing (with :attr:`lock` held); stop at the first the process
        refuses (ADR 0140): the lanes are served by those running, and with none, the next
        :meth:`submit` tries again."""
        for n in range(len(self._threads), self.workers):
            thread = threading.Thread(
                target=self._work, name=f"lifecycle-k8s-events-{n}", daemon=True
            )
            if not threads.start(thread, _FEWER_WORKERS, log=not self.refusals):
                self.refusals += 1
                return
            self._threads.append(thread)

    def _work(self) -> None:
        while True:
            with self._cond:
                key = self._next_lane()
                if key is None:
                    return
                send = self._lanes[key].popleft()
                self._busy.add(key)
                self._waiting -= 1
            sent, final = self._try(send)
            with self._cond:
                if not final and sent is Sent.RETRY and send.retried:
                    if self._stopping:  # no further try
                        self.correlator.counters.add("gave_up")
                    elif not self.correlator.gives_up(send):
                        self._busy.discard(key)
                        self._park(key, send)
                        continue
            try:
                send.answer(sent)  # outside the lock: an acknowledgement may mark the outbox
            finally:
                # done only once answered: flush() returning means every answer was given,
                # and the lane's next send waits for this one's acknowledgement
                with self._cond:
                    self._busy.discard(key)
                    self._done(key)

    def _park(self, key: EventKey, send: Send) -> None:
        """Put ``send`` back at the head of its lane until its retry is due; the lane (and
        only it) waits, no worker does."""
        self._lanes[key].appendleft(send)
        self._waiting += 1
        due = self._monotonic() + self.correlator.retry_delay(send)
        heapq.heappush(self._parked, (due, next(self._seq), key))
        self._cond.notify_all()

    def _next_lane(self) -> EventKey | None:
        """Wait for a lane whose next send may go now (None: stop). Runs due timers."""
        while not self._stopping:
            now = self._monotonic()
            while self._parked and self._parked[0][0] <= now:
                _, _, key = heapq.heappop(self._parked)
                self._ready.append(key)
            if self.timers:
                try:
                    self.run_timers()
                except Exception as e:
                    self.correlator.log.error("event timers failed", error=redact(repr(e)))
            if self._ready:
                return self._ready.popleft()
            self._cond.wait(self._wait_seconds(now))
        return None

    def _wait_seconds(self, now: float) -> float:
        wait = _IDLE_WAIT
        if self._parked:
            wait = min(wait, self._parked[0][0] - now)
        if self.timers:
            due = (self.correlator.next_due - self.correlator.clock()).total_seconds()
            wait = min(wait, due)
        return max(wait, 0.001)

    def _try(self, send: Send) -> tuple[Sent, bool]:
        """One try (or, with a host-supplied sleep, every try) of ``send``; whether the
        outcome is final."""
        try:
            if self._sleep is None or not send.retried:
                return self.correlator.try_send(send), False
            # a host-supplied sleep: this worker waits for each retry itself
            return self.correlator.deliver(send), True
        except Exception as e:  # a worker must outlive a broken sink
            self.correlator.log.error("event worker failed", error=redact(repr(e)))
            return Sent.RETRY, True  # not delivered: its transition stays in the outbox

    def _done(self, key: EventKey) -> None:
        lane = self._lanes[key]
        if lane:
            self._ready.append(key)
        else:
            del self._lanes[key]
        self._pending -= 1
        self._cond.notify_all()

    # -- draining -----------------------------------------------------------------------------
    def flush(self, timeout: float | None) -> bool:
        """Wait until every send is done; False if ``timeout`` ran out."""
        with self._cond:
            return self._cond.wait_for(lambda: self._pending == 0, timeout)

    def stop(self, join_timeout: float, interrupt: Callable[[], None] | None = None) -> None:
        """Stop the workers: sends still waiting are dropped and counted (``gave_up`` for one
        that was already tried, ``dropped_on_close`` for the others); ``interrupt`` (the
        sink's close) then ends the requests in flight, so every worker is joined within
        ``join_timeout``."""
        dropped: list[Send] = []
        with self._cond:
            self._stopping = True
            for lane in self._lanes.values():
                for send in lane:
                    tried = send.tries or send.forbidden_since is not None
                    counter = "gave_up" if tried else "dropped_on_close"
                    if send.purpose is Purpose.RECORD:
                        self.correlator.counters.add(counter)
                    self._pending -= 1
                    self._waiting -= 1
                    dropped.append(send)
                lane.clear()
            self._lanes = {k: v for k, v in self._lanes.items() if k in self._busy}
            self._ready.clear()
            self._parked.clear()
            self._cond.notify_all()
            threads = list(self._threads)
        for send in dropped:  # never sent: their transitions stay in the outbox
            send.answer(Sent.RETRY)
        held = self.correlator.release_held()
        left = sum(1 for s in dropped if s.purpose is Purpose.RECORD)
        if left or held:
            self.correlator.log.warning(
                "emitter closed; Events not sent stay undelivered",
                queued=left,
                counted_in_memory=held,
            )
        deadline = self._monotonic() + join_timeout
        if interrupt is not None:
            with self._cond:
                busy = bool(self._busy)
            # a last moment for an answer on its way, then what is still in flight is cut
            if busy:
                with self._cond:
                    self._cond.wait_for(lambda: not self._busy, min(0.05, join_timeout / 4))
            interrupt()
        for thread in threads:
            thread.join(max(deadline - self._monotonic(), 0.0))
