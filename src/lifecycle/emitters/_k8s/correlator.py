"""client-go's events/v1 broadcaster (``tools/events/event_broadcaster.go``), reproduced.

Under one lock, an Event whose correlation key is not cached is cached and **created**; the
second Event of a cached key sets ``series={count: 2}`` on the cached Event and **patches**
it (a patch that finds nothing creates instead); later ones count in memory only. Every 30
minutes cached series are re-patched; every 6 minutes a series idle for more than 6 minutes
gets a final patch and is evicted, and a singleton older than 6 minutes is evicted.

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
import structlog

from ..._core.redact import redact
from .event import Event, EventKey, EventSeries

FINISH_TIME = timedelta(minutes=6)
REFRESH_TIME = timedelta(minutes=30)
MAX_TRIES_PER_EVENT = 12
RETRY_INTERVAL = 10.0
RETRY_JITTER = 0.25

Clock = Callable[[], datetime]

_log = structlog.get_logger("lifecycle.emitters.kubernetes")


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
    (a transport error, a timeout, an unexpected answer) is retried."""

    def create(self, event: Event) -> None: ...

    def patch(self, event: Event, patch: Mapping[str, Any]) -> None: ...


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


def record_event(sink: EventSink, event: Event) -> tuple[Sent, Exception | None]:
    """client-go's ``recordEvent``: patch a series (create it if the patch finds nothing),
    create anything else; say whether the failure, if any, is worth another try."""
    is_series = event.series is not None
    error: Exception | None = None
    if is_series:
        try:
            sink.patch(event, event.series_patch())
            return Sent.PATCHED, None
        except NotFound as e:
            error = e
        except Exception as e:
            error = e
    if not is_series or isinstance(error, NotFound):
        try:
            sink.create(event)
            return (Sent.RECREATED if is_series else Sent.CREATED), None
        except Exception as e:
            error = e
    assert error is not None
    if isinstance(error, RequestConstructionError):
        return Sent.INVALID, error
    if isinstance(error, Rejected):
        # Creating a series whose patch found nothing, and the Event now exists: it was
        # created twice in a very short time; another try patches it.
        if error.already_exists and is_series:
            return Sent.RETRY, error
        return Sent.REJECTED, error
    return Sent.RETRY, error


# -- the broadcaster -----------------------------------------------------------------------
class Correlator:
    """The broadcaster's cache, send loop and timers, without goroutines.

    :meth:`record` is ``recordToSink`` run synchronously by the caller (the emitter's worker
    thread); :meth:`tick` runs the finish and refresh timers when the clock says they are due.
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
        """Correlate ``event`` and send what the API should see (create, patch, or nothing)."""
        with self._lock:
            key = event.key
            cached = self._cache.get(key)
            if cached is None:
                self._cache[key] = event
                to_send = event
            elif cached.series is not None:
                series = EventSeries(cached.series.count + 1, self.clock())
                self._cache[key] = attrs.evolve(cached, series=series)
                self.counters.add("counted_in_memory")
                return
            else:
                to_send = attrs.evolve(cached, series=EventSeries(2, self.clock()))
                self._cache[key] = to_send
        # outside the lock, like client-go: a slow send does not hold up correlation
        self._attempt(to_send)

    def _attempt(self, event: Event) -> None:
        tries = 0
        while True:
            if self._send(event) is not Sent.RETRY:
                return
            tries += 1
            if tries >= self.max_tries or self.cancelled():
                self.counters.add("gave_up")
                self.log.error(
                    "unable to write event (retry limit exceeded)",
                    name=event.name,
                    namespace=event.namespace,
                    reason=event.reason,
                    tries=tries,
                )
                return
            self.sleep(self.retry_interval * (1 + RETRY_JITTER * self.jitter()))
            if self.cancelled():
                self.counters.add("gave_up")
                return

    def _send(self, event: Event) -> Sent:
        sent, error = record_event(self.sink, event)
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
        return sent

    # -- timers -------------------------------------------------------------------------------
    def tick(self) -> None:
        """Run the finish (6 min) and refresh (30 min) timers if the clock says they are due.

        Each timer next fires one period after it ran (``wait.Until`` is sliding). Finish runs
        first, so a series it closes is not re-patched by a refresh due at the same tick.
        """
        now = self.clock()
        with self._lock:
            finish = now >= self._next_finish
            refresh = now >= self._next_refresh
        if finish:
            try:
                self.finish()
            finally:
                with self._lock:
                    self._next_finish = self.clock() + FINISH_TIME
        if refresh:
            try:
                self.refresh()
            finally:
                with self._lock:
                    self._next_refresh = self.clock() + REFRESH_TIME

    def refresh(self) -> None:
        """``refreshExistingEventSeries``: re-patch every cached series (one try each), so
        its count reaches the API and its TTL moves on."""
        with self._lock:
            for event in list(self._cache.values()):
                if event.series is not None:
                    self._send(event)

    def finish(self) -> None:
        """``finishSeries``: a series idle for more than 6 minutes gets its final patch and is
        evicted (kept for the next tick if the patch should be retried); a singleton whose
        ``eventTime`` is more than 6 minutes old is evicted."""
        with self._lock:
            cutoff = self.clock() - FINISH_TIME
            for key, event in list(self._cache.items()):
                if event.series is not None:
                    idle = event.series.last_observed_time < cutoff
                    if idle and self._send(event) is not Sent.RETRY:
                        del self._cache[key]
                        self.counters.add("evicted")
                elif event.event_time < cutoff:
                    del self._cache[key]
                    self.counters.add("evicted")
