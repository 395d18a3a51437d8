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

FINISH_TIME = timedelta(minutes=6)
REFRESH_TIME = timedelta(minutes=30)
MAX_TRIES_PER_EVENT = 12
RETRY_INTERVAL = 10.0
RETRY_JITTER = 0.25

Clock = Callable[[], datetime]

_log = get_logger("lifecycle.emitters.kubernetes")


def utc_now() -> datetime:
    return datetime.now(UTC)


# -- the sink port -------------------------------------------------------------------------
class SinkError(Exception):
    """Base of the errors a sink raises to say what the API server answered."""


class Rejected(SinkError):
    """The server answered with an error status (client-go's ``StatusError``): dropped,
    except AlreadyExists on the create of a series, which is retried."""

    def __init__(self, message: str, status: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason

    @property
    def already_exists(self) -> bool:
        return self.reason == "AlreadyExists"


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
    #: still queued when the emitter was closed
    dropped_on_close: int = 0
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


# -- one send ------------------------------------------------------------------------------
class Sent(enum.Enum):
    CREATED = "created"
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

    @property
    def retried(self) -> bool:
        """Whether a failed try is tried again (timer sends try once per tick)."""
        return self.purpose is Purpose.RECORD


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
    ) -> None:
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

    def correlate(self, event: Event) -> Send | None:
        """Cache ``event`` under its key and say which request the API should see: a create
        for a new key, a series patch (count 2) for its second Event, nothing (an in-memory
        count) after that. Never waits on the API server."""
        with self._lock:
            key = event.key
            cached = self._cache.get(key)
            if cached is None:
                self._cache[key] = event
                return Send(key, Purpose.RECORD, event)
            if cached.series is not None:
                series = EventSeries(cached.series.count + 1, self.clock())
                self._cache[key] = attrs.evolve(cached, series=series)
                self.counters.add("counted_in_memory")
                return None
            to_send = attrs.evolve(cached, series=EventSeries(2, self.clock()))
            self._cache[key] = to_send
            return Send(key, Purpose.RECORD, to_send)

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
        if send.purpose is Purpose.RECORD:
            event = send.event
        else:
            with self._lock:
                event = self._cache.get(send.key)
                if event is None or event.series is None:
                    return Sent.SKIPPED
                if send.purpose is Purpose.FINISH and not self._idle(event, self.clock()):
                    return Sent.SKIPPED
            send.event = event
        assert event is not None
        sent, reply = self._send(event)
        with self._lock:
            unmoved = self._cache.get(send.key) is event
            if unmoved and reply is not None:
                kept = self._adopt(event, reply)
                if kept is not None:
                    self._cache[send.key] = kept
            if send.purpose is Purpose.FINISH and sent is not Sent.RETRY and unmoved:
                del self._cache[send.key]
                self.counters.add("evicted")
        return sent

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
                Sent.PATCHED: "patched",
                Sent.RECREATED: "recreated",
                Sent.REJECTED: "rejected",
                Sent.INVALID: "invalid",
                Sent.RETRY: "transport_errors",
            }[sent]
        )
        if error is not None:
            log = self.log.warning if sent is Sent.RETRY else self.log.error
            log(
                "unable to write event"
                + (" (may retry after sleeping)" if sent is Sent.RETRY else " (will not retry)"),
                name=event.name,
                namespace=event.namespace,
                reason=event.reason,
                error=redact(str(error).strip()),
            )
        return sent, reply

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
