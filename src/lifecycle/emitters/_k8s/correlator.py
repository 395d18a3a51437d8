"""client-go's events/v1 broadcaster (``tools/events/event_broadcaster.go``), reproduced.

Under one lock, an Event whose correlation key is not cached is cached and **created**; the
second Event of a cached key sets ``series={count: 2}`` on the cached Event and **patches**
it (a patch that finds nothing creates instead); later ones count in memory only. Every 30
minutes cached series are re-patched; every 6 minutes a series idle for more than 6 minutes
gets a final patch and is evicted, and a singleton older than 6 minutes is evicted.

Correlation (:meth:`Correlator.correlate`, :meth:`Correlator.due_sends`) only decides, under
the lock, which requests to make: a :class:`Send`. Making one (:meth:`Correlator.try_send`)
happens outside the lock, so a slow request never holds up correlation; the emitter hands
sends to its worker threads, :meth:`Correlator.record` and :meth:`Correlator.tick` make them
on the caller's thread. A successful send keeps the API server's reply as the cached copy
unless the key's series moved while the request was in flight.

Sends are retried on transport errors up to 12 tries, 10 s (+ up to 25 %) apart, exactly as
``wait.Jitter(10s, 0.25)`` spaces them; server rejections are dropped. The clock, the sleep
and the jitter source are injected, so tests drive time and never sleep.
"""

from __future__ import annotations

import enum
import random
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import attrs

from ..._core.redact import redact
from ..._log import get_logger
from .event import Event, EventKey, EventSeries

#: Told once how a recorded Event ended (``"delivered"``, ``"refused"``, ``"failed"``): the
#: emitter's acknowledgement of the transition it came from (ADR 0121).
Done = Callable[[str], None]
DELIVERED, REFUSED, FAILED = "delivered", "refused", "failed"

FINISH_TIME = timedelta(minutes=6)
REFRESH_TIME = timedelta(minutes=30)
MAX_TRIES_PER_EVENT = 12
RETRY_INTERVAL = 10.0
RETRY_JITTER = 0.25
#: Correlation keys cached at most (client-go's core correlator's LRU size): beyond it the
#: oldest key is dropped, counted (``cache_evicted``) and logged.
MAX_CACHED = 4096

Clock = Callable[[], datetime]

_log = get_logger("lifecycle.emitters.kubernetes")


def utc_now() -> datetime:
    return datetime.now(UTC)


# -- the sink port -------------------------------------------------------------------------
class SinkError(Exception):
    """Base of the errors a sink raises to say what the API server answered."""


class Rejected(SinkError):
    """The server answered with an error status (client-go's ``StatusError``): a 4xx is a
    refusal for good (dropped, counted), except AlreadyExists: on the create of an Event its
    name (derived from the transition id) is there already, which is delivered; on the
    create of a series it is retried. A 5xx is the server failing, not refusing: retried."""

    def __init__(self, message: str, status: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason

    @property
    def already_exists(self) -> bool:
        return self.reason == "AlreadyExists"

    @property
    def server_failed(self) -> bool:
        """A 5xx: the server could not answer, the Event may be accepted next time."""
        return self.status >= 500


class NotFound(Rejected):
    """404: on a patch the Event was evicted (TTL) and is created instead."""

    def __init__(self, message: str, reason: str = "NotFound") -> None:
        super().__init__(message, 404, reason)


class RequestConstructionError(SinkError):
    """The request could not be built; it would be built the same next time: dropped."""


class EventSink(Protocol):
    """Where Events go. Raise :class:`NotFound`, :class:`Rejected` or
    :class:`RequestConstructionError` for the answers that are not retried; anything else
    (a transport error, a timeout, an unexpected answer) is retried.

    Return the API server's reply (the Event as stored), or ``None`` when the sink cannot tell:
    the correlator then keeps its own copy."""

    def create(self, event: Event) -> Event | None: ...

    def patch(self, event: Event, patch: Mapping[str, Any]) -> Event | None: ...


# -- counters ------------------------------------------------------------------------------
@attrs.frozen(slots=True)
class EmitterStats:
    """A snapshot of what the emitter did. Drops are never silent: each has a counter."""

    enqueued: int = 0
    #: the queue was full (client-go: 1000 slots): dropped
    dropped_queue_full: int = 0
    #: a transition id seen before (outbox redelivery): not sent again
    duplicates: int = 0
    #: an Event that could not be built (bad type): dropped
    invalid: int = 0
    created: int = 0
    #: a create answered AlreadyExists: the Event (named from its transition id) was there,
    #: a redelivery of one that landed before a crash -- counted as delivered
    already_delivered: int = 0
    patched: int = 0
    #: a series patch found nothing (the Event was evicted) and created it instead
    recreated: int = 0
    #: emissions of a cached series counted in memory only
    counted_in_memory: int = 0
    #: server rejections (4xx/5xx answers): dropped
    rejected: int = 0
    #: transport errors or unexpected answers (each failed try)
    transport_errors: int = 0
    #: sends abandoned after the last try
    gave_up: int = 0
    #: cache entries dropped by the finish timer
    evicted: int = 0
    #: still queued when the emitter was closed (its transition stays in the outbox)
    dropped_on_close: int = 0
    #: transitions acknowledged delivered, refused (marked, not retried), failed (left in the
    #: outbox, sent again by the next redelivery)
    acked: int = 0
    acked_refused: int = 0
    acked_failed: int = 0
    #: replies longer than the sink's ``max_reply_bytes``: cut, the Event kept as sent
    oversized_replies: int = 0
    #: requests cut at their total deadline (a server too slow to answer): retried
    deadlines: int = 0
    #: correlation cache entries dropped to stay within ``max_cached`` (their series end)
    cache_evicted: int = 0
    #: the host could not supply the regarded object's uid (a uid the library derived, such
    #: as a NodeClaim's ``<pod uid>-claim``, is then left out of the Event): sent without it
    unresolved_uids: int = 0

    @property
    def dropped(self) -> int:
        """Everything that never reached the API server."""
        return (
            self.dropped_queue_full
            + self.invalid
            + self.rejected
            + self.gave_up
            + self.dropped_on_close
        )


class Counters:
    """Thread-safe counters behind :class:`EmitterStats`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values = {f.name: 0 for f in attrs.fields(EmitterStats)}

    def add(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._values[name] += n

    def snapshot(self) -> EmitterStats:
        with self._lock:
            return EmitterStats(**self._values)


#: Distinct Event names an outage counts (beyond that its ``events`` figure is a floor).
_OUTAGE_NAMES = 10_000


class _Outage:
    """Failed tries since the server last answered (one log line starts it, one ends it)."""

    __slots__ = ("events", "gave_up", "started", "tries")

    def __init__(self, started: float) -> None:
        self.started = started
        self.tries = 0
        self.gave_up = 0
        self.events: set[str] = set()


# -- one send ------------------------------------------------------------------------------
class Sent(enum.Enum):
    CREATED = "created"
    #: a create answered AlreadyExists for an Event that is not a series: it is there
    EXISTS = "exists"
    PATCHED = "patched"
    RECREATED = "recreated"
    REJECTED = "rejected"
    INVALID = "invalid"
    RETRY = "retry"
    #: a timer send found nothing left to do when its turn came (evicted, or no longer idle)
    SKIPPED = "skipped"


def record_event(sink: EventSink, event: Event) -> tuple[Sent, Exception | None, Event | None]:
    """client-go's ``recordEvent``: patch a series (create it if the patch finds nothing),
    create anything else; say whether the failure, if any, is worth another try, and what
    the server answered (``None`` when unknown or failed)."""
    is_series = event.series is not None
    error: Exception | None = None
    if is_series:
        try:
            return Sent.PATCHED, None, sink.patch(event, event.series_patch())
        except NotFound as e:
            error = e
        except Exception as e:
            error = e
    if not is_series or isinstance(error, NotFound):
        try:
            reply = sink.create(event)
            return (Sent.RECREATED if is_series else Sent.CREATED), None, reply
        except Exception as e:
            error = e
    assert error is not None
    if isinstance(error, RequestConstructionError):
        return Sent.INVALID, error, None
    if isinstance(error, Rejected):
        # Creating a series whose patch found nothing, and the Event now exists: it was
        # created twice in a very short time; another try patches it.
        if error.already_exists and is_series:
            return Sent.RETRY, error, None
        if error.already_exists:  # the name is the transition's: it landed before
            return Sent.EXISTS, None, None
        if error.server_failed:
            return Sent.RETRY, error, None
        return Sent.REJECTED, error, None
    return Sent.RETRY, error, None


class Purpose(enum.Enum):
    """Why a request is made."""

    #: a recorded Event's create, or the patch that makes it a series: retried
    RECORD = "record"
    #: the 30-minute re-patch of a cached series: one try
    REFRESH = "refresh"
    #: the final patch of a series idle for 6 minutes, which is then evicted: one try
    FINISH = "finish"


@attrs.define(slots=True, eq=False)
class Send:
    """One request the correlator decided to make, for the Event cached under ``key``.

    A :attr:`Purpose.RECORD` send carries the Event as correlation left it (a create, or the
    series patch of count 2); a timer send reads the cached Event when its turn comes, so it
    patches the latest in-memory count. ``tries`` counts failed tries so far."""

    key: EventKey
    purpose: Purpose
    event: Event | None = None
    tries: int = 0
    #: told how the send ended: the recorded transitions' acknowledgements (a timer send
    #: carries those counted in memory since the last patch of its key)
    done: list[Done] = attrs.Factory(list)

    def answer(self, sent: Sent) -> None:
        """Tell each ``done`` how this send ended (once), and forget them."""
        if not self.done:
            return
        outcome = outcome_of(sent)
        done, self.done = self.done, []
        for d in done:
            d(outcome)

    @property
    def retried(self) -> bool:
        """Whether a failed try is tried again (timer sends try once per tick)."""
        return self.purpose is Purpose.RECORD


def outcome_of(sent: Sent) -> str:
    """The acknowledgement a final :class:`Sent` gives its transitions."""
    if sent in (Sent.CREATED, Sent.EXISTS, Sent.PATCHED, Sent.RECREATED):
        return DELIVERED
    if sent in (Sent.REJECTED, Sent.INVALID):
        return REFUSED
    return FAILED


# -- the broadcaster -----------------------------------------------------------------------
class Correlator:
    """The broadcaster's cache, send loop and timers, without goroutines.

    :meth:`correlate` and :meth:`due_sends` decide under the lock; :meth:`try_send` makes one
    request outside it. :meth:`record` (``recordToSink``) and :meth:`tick` (the finish and
    refresh timers, when the clock says they are due) do both on the caller's thread, with
    retries spaced by the injected ``sleep``.
    """

    def __init__(
        self,
        sink: EventSink,
        *,
        clock: Clock = utc_now,
        sleep: Callable[[float], None] = time.sleep,
        jitter: Callable[[], float] = random.random,
        max_tries: int = MAX_TRIES_PER_EVENT,
        retry_interval: float = RETRY_INTERVAL,
        counters: Counters | None = None,
        logger: Any = None,
        cancelled: Callable[[], bool] = lambda: False,
        max_cached: int = MAX_CACHED,
    ) -> None:
        if max_cached < 1:
            raise ValueError(f"max_cached must be at least 1, got {max_cached}")
        self.max_cached = max_cached
        if max_tries < 1:
            raise ValueError(f"max_tries must be at least 1, got {max_tries}")
        self.sink = sink
        self.clock = clock
        self.sleep = sleep
        self.jitter = jitter
        self.max_tries = max_tries
        self.retry_interval = retry_interval
        self.counters = counters if counters is not None else Counters()
        #: checked after each retry sleep: a cancelled correlator stops retrying (``ctx.Done``)
        self.cancelled = cancelled
        self.log = logger if logger is not None else _log
        self._lock = threading.Lock()
        self._cache: dict[EventKey, Event] = {}
        #: acknowledgements of transitions counted in memory, told when a patch carries them
        self._held: dict[EventKey, list[Done]] = {}
        self._outage: _Outage | None = None
        self._evictions = 0
        start = clock()
        self._next_finish = start + FINISH_TIME
        self._next_refresh = start + REFRESH_TIME

    # -- inspection ---------------------------------------------------------------------------
    def cached(self) -> list[Event]:
        """The cached Events (with their in-memory series counts)."""
        with self._lock:
            return list(self._cache.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._cache)

    @property
    def next_due(self) -> datetime:
        """When :meth:`tick` next has work to do."""
        with self._lock:
            return min(self._next_finish, self._next_refresh)

    # -- recordToSink -------------------------------------------------------------------------
    def record(self, event: Event) -> None:
        """Correlate ``event`` and send what the API should see (create, patch, or nothing),
        on the caller's thread."""
        send = self.correlate(event)
        if send is not None:
            self.deliver(send)

    def correlate(self, event: Event, done: Done | None = None) -> Send | None:
        """Cache ``event`` under its key and say which request the API should see: a create
        for a new key, a series patch (count 2) for its second Event, nothing (an in-memory
        count) after that. Never waits on the API server. ``done`` is told how the Event
        ended: with its request's outcome, or for an in-memory count with the outcome of the
        next patch of its key (a refresh, a finish, the emitter's close)."""
        with self._lock:
            key = event.key
            cached = self._cache.get(key)
            acks = [done] if done is not None else []
            dropped: list[tuple[EventKey, list[Done]]] = []
            send: Send | None
            if cached is None:
                self._cache[key] = event
                if len(self._cache) > self.max_cached:
                    dropped = self._bound()
                send = Send(key, Purpose.RECORD, event, done=acks)
            elif cached.series is not None:
                series = EventSeries(cached.series.count + 1, self.clock())
                self._cache[key] = attrs.evolve(cached, series=series)
                self.counters.add("counted_in_memory")
                if done is not None:
                    self._held.setdefault(key, []).append(done)
                send = None
            else:
                to_send = attrs.evolve(cached, series=EventSeries(2, self.clock()))
                self._cache[key] = to_send
                send = Send(key, Purpose.RECORD, to_send, done=acks)
        if dropped:
            self._dropped(dropped)
        return send

    def _bound(self) -> list[tuple[EventKey, list[Done]]]:
        """Drop the oldest keys beyond ``max_cached`` (call with the lock held)."""
        dropped = []
        while len(self._cache) > self.max_cached:
            key = next(iter(self._cache))
            del self._cache[key]
            dropped.append((key, self._held.pop(key, [])))
        return dropped

    def _dropped(self, dropped: list[tuple[EventKey, list[Done]]]) -> None:
        """Count and log keys dropped from the cache; their unpatched counts failed."""
        self.counters.add("cache_evicted", len(dropped))
        self._evictions += len(dropped)
        if self._evictions == len(dropped) or self._evictions % 1000 < len(dropped):
            self.log.warning(
                "event cache full; oldest series dropped",
                max_cached=self.max_cached,
                dropped_so_far=self._evictions,
            )
        for _, acks in dropped:
            for d in acks:
                d(FAILED)

    def held(self) -> list[Send]:
        """A refresh send for each key holding in-memory counts not yet patched (the
        emitter's close sends them, so a shutdown delivers its series counts)."""
        with self._lock:
            return [Send(key, Purpose.REFRESH) for key, acks in self._held.items() if acks]

    def release_held(self) -> int:
        """Tell every held in-memory count it failed (closing: never patched); how many."""
        with self._lock:
            held, self._held = self._held, {}
        n = 0
        for acks in held.values():
            for d in acks:
                d(FAILED)
                n += 1
        return n

    def retry_delay(self) -> float:
        """Seconds before the next try: ``wait.Jitter(retry_interval, 0.25)``."""
        return self.retry_interval * (1 + RETRY_JITTER * self.jitter())

    def deliver(self, send: Send) -> Sent:
        """Make ``send`` on the caller's thread: a recorded Event up to ``max_tries`` times,
        ``sleep`` apart; a timer send once."""
        while True:
            sent = self.try_send(send)
            if sent is not Sent.RETRY or not send.retried:
                return sent
            if self.gives_up(send):
                return sent
            self.sleep(self.retry_delay())
            if self.cancelled():
                self.counters.add("gave_up")
                return sent

    def gives_up(self, send: Send) -> bool:
        """After a failed try of ``send``: count it, and say (and count, and log) whether it
        was the last one."""
        send.tries += 1
        if send.tries < self.max_tries and not self.cancelled():
            return False
        self.counters.add("gave_up")
        event = send.event
        with self._lock:
            outage = self._outage
            if outage is not None:
                outage.gave_up += 1
        if outage is None:  # an outage logs its give-ups in the line that ends it
            self.log.error(
                "unable to write event (retry limit exceeded)",
                name=event.name if event else "",
                namespace=event.namespace if event else "",
                reason=event.reason if event else "",
                tries=send.tries,
            )
        return True

    def try_send(self, send: Send) -> Sent:
        """One try of ``send``. A timer send reads the cached Event now (skipped when it was
        evicted, or when a final patch's series is no longer idle). On success the server's
        reply becomes the cached copy unless the key moved while the request was in flight;
        a final patch that is not to be retried evicts the key (unless it moved)."""
        held: list[Done] = []
        if send.purpose is Purpose.RECORD:
            event = send.event
        else:
            with self._lock:
                event = self._cache.get(send.key)
                if event is None or event.series is None:
                    return Sent.SKIPPED
                if send.purpose is Purpose.FINISH and not self._idle(event, self.clock()):
                    return Sent.SKIPPED
                held = self._held.pop(send.key, [])  # the counts this patch carries
            send.event = event
        assert event is not None
        sent, reply = self._send(event)
        evicted = False
        with self._lock:
            unmoved = self._cache.get(send.key) is event
            if unmoved and reply is not None:
                kept = self._adopt(event, reply)
                if kept is not None:
                    self._cache[send.key] = kept
            if held and sent is Sent.RETRY and send.purpose is not Purpose.FINISH:
                self._held.setdefault(send.key, [])[:0] = held  # the next patch carries them
                held = []
            if send.purpose is Purpose.FINISH and sent is not Sent.RETRY and unmoved:
                del self._cache[send.key]
                self.counters.add("evicted")
                evicted = True
            if send.purpose is Purpose.FINISH and sent is Sent.RETRY and held:
                self._held.setdefault(send.key, [])[:0] = held
                held = []
        if held:
            outcome = outcome_of(sent)
            for d in held:
                d(outcome)
        if evicted:
            self._fail_held(send.key)
        return sent

    def _fail_held(self, key: EventKey) -> None:
        """A key left the cache: the counts it still holds will never be patched."""
        with self._lock:
            acks = self._held.pop(key, [])
        for d in acks:
            d(FAILED)

    def _adopt(self, sent: Event, reply: Event) -> Event | None:
        """The reply as the cached copy of ``sent``, or ``None`` when it does not correlate
        as ``sent`` does (the key would change): then our copy is kept."""
        if sent.regarding.store_version:  # never on the wire: carry it over
            regarding = attrs.evolve(reply.regarding, store_version=sent.regarding.store_version)
            reply = attrs.evolve(reply, regarding=regarding)
        return reply if reply.key == sent.key else None

    def _send(self, event: Event) -> tuple[Sent, Event | None]:
        sent, error, reply = record_event(self.sink, event)
        self.counters.add(
            {
                Sent.CREATED: "created",
                Sent.EXISTS: "already_delivered",
                Sent.PATCHED: "patched",
                Sent.RECREATED: "recreated",
                Sent.REJECTED: "rejected",
                Sent.INVALID: "invalid",
                Sent.RETRY: "transport_errors",
            }[sent]
        )
        if sent is Sent.RETRY:
            self._failing(event, error)
        else:
            self._answered()
            if error is not None:
                self.log.error(
                    "unable to write event (will not retry)",
                    name=event.name,
                    namespace=event.namespace,
                    reason=event.reason,
                    error=redact(str(error).strip()),
                )
        return sent, reply

    # -- outages ------------------------------------------------------------------------------
    def _failing(self, event: Event, error: Exception | None) -> None:
        """A try failed in a way worth retrying: the first one starts an outage (one WARNING
        line), the later ones are counted in it."""
        with self._lock:
            outage = self._outage
            if outage is None:
                outage = self._outage = _Outage(time.monotonic())
            outage.tries += 1
            if len(outage.events) < _OUTAGE_NAMES:  # bounded: a count, not a log of names
                outage.events.add(event.name)
            first = outage.tries == 1
        if first:
            self.log.warning(
                "API server unreachable; Events wait and are retried",
                name=event.name,
                namespace=event.namespace,
                reason=event.reason,
                error=redact(str(error).strip()),
            )

    def _answered(self) -> None:
        """The server answered: an outage in progress ends (one WARNING line, with counts)."""
        if self._outage is None:  # read without the lock: the common case costs nothing
            return
        with self._lock:
            outage, self._outage = self._outage, None
        if outage is not None:
            self.log.warning(
                "API server reachable again",
                seconds=round(time.monotonic() - outage.started, 3),
                failed_tries=outage.tries,
                events=len(outage.events),
                gave_up=outage.gave_up,
            )

    @property
    def outage(self) -> bool:
        """Whether the last try failed in a way worth retrying (an outage is in progress)."""
        return self._outage is not None

    def end_outage(self, why: str) -> None:
        """Closing during an outage: its line says so, with its counts."""
        with self._lock:
            outage, self._outage = self._outage, None
        if outage is not None:
            self.log.warning(
                f"API server outage unresolved at {why}",
                seconds=round(time.monotonic() - outage.started, 3),
                failed_tries=outage.tries,
                events=len(outage.events),
                gave_up=outage.gave_up,
            )

    # -- timers -------------------------------------------------------------------------------
    def tick(self) -> None:
        """Run the finish (6 min) and refresh (30 min) timers if the clock says they are due,
        making their requests on the caller's thread (one try each)."""
        for send in self.due_sends():
            self.deliver(send)

    def due_sends(self) -> list[Send]:
        """The timers that are due, decided under the lock: evict the singletons older than 6
        minutes, and return the sends of the final and refresh patches (made by the caller).

        Each timer next fires one period after it ran (``wait.Until`` is sliding). Finish runs
        first, so a series it closes is not re-patched by a refresh due at the same tick.
        """
        with self._lock:
            now = self.clock()
            sends: list[Send] = []
            finishing: set[EventKey] = set()
            if now >= self._next_finish:
                sends += self._finish_sends(now)
                finishing = {s.key for s in sends}
                self._next_finish = now + FINISH_TIME
            if now >= self._next_refresh:
                sends += [s for s in self._refresh_sends() if s.key not in finishing]
                self._next_refresh = now + REFRESH_TIME
            return sends

    def refresh(self) -> None:
        """``refreshExistingEventSeries``: re-patch every cached series (one try each), so
        its count reaches the API and its TTL moves on; the server's reply is kept as the
        cached copy unless the series moved meanwhile."""
        with self._lock:
            sends = self._refresh_sends()
        for send in sends:
            self.deliver(send)

    def finish(self) -> None:
        """``finishSeries``: a series idle for more than 6 minutes gets its final patch and is
        evicted (kept for the next tick if the patch should be retried); a singleton whose
        ``eventTime`` is more than 6 minutes old is evicted."""
        with self._lock:
            sends = self._finish_sends(self.clock())
        for send in sends:
            self.deliver(send)

    def _refresh_sends(self) -> list[Send]:
        return [
            Send(key, Purpose.REFRESH)
            for key, event in self._cache.items()
            if event.series is not None
        ]

    def _finish_sends(self, now: datetime) -> list[Send]:
        sends = []
        for key, event in list(self._cache.items()):
            if event.series is not None:
                if self._idle(event, now):
                    sends.append(Send(key, Purpose.FINISH))
            elif event.event_time < now - FINISH_TIME:
                del self._cache[key]
                self.counters.add("evicted")
        return sends

    @staticmethod
    def _idle(event: Event, now: datetime) -> bool:
        return event.series is not None and event.series.last_observed_time < now - FINISH_TIME
