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
from ..._k8s_api.errors import SinkError
from ..._log import get_logger
from .event import MAX_NAMES, Event, EventKey, EventSeries, content_name, same_content

#: Told once how a recorded Event ended (``"delivered"``, ``"refused"``, ``"failed"``): the
#: emitter's acknowledgement of the transition it came from (ADR 0121).
Done = Callable[[str], None]
DELIVERED, REFUSED, FAILED = "delivered", "refused", "failed"

FINISH_TIME = timedelta(minutes=6)
REFRESH_TIME = timedelta(minutes=30)
MAX_TRIES_PER_EVENT = 12
RETRY_INTERVAL = 10.0
RETRY_JITTER = 0.25
#: How long an Event answered 401/403 is retried (ADR 0142): a Role or its binding applied
#: after the Deployment, a token being rotated. Such tries do not count against
#: :data:`MAX_TRIES_PER_EVENT`; past the window the Event fails (its transition stays in
#: the outbox, the next redelivery sends it).
FORBIDDEN_RETRY_SECONDS = 300.0
#: The longest wait between two tries of a send that keeps being forbidden or cut at its
#: deadline: the wait doubles from the retry interval up to this.
MAX_BACKOFF = 60.0
#: Objects whose "namespace or object gone" (404 on a create) is logged, at most (beyond it
#: such refusals are still counted, and logged once per this many).
_GONE_LOGGED = 10_000
#: Correlation keys cached at most (client-go's core correlator's LRU size): beyond it the
#: oldest key is dropped, counted (``cache_evicted``) and logged.
MAX_CACHED = 4096

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


# -- the sink port -------------------------------------------------------------------------
class Rejected(SinkError):
    """The server answered with an error status (client-go's ``StatusError``): a 4xx is a
    refusal for good (dropped, counted), except AlreadyExists: on the create of an Event its
    name (derived from the transition id) is taken, and the Event there is read and compared
    (ADR 0141); on the create of a series it is retried. 401 and 403 can heal (a Role applied
    late): retried for ``forbidden_retry_seconds`` (ADR 0142). A 5xx is the server failing,
    not refusing: retried.

    Args:
        message: the server's message.
        status: the HTTP status; 0 when unknown.
        reason: the Status reason (``AlreadyExists``, ``Forbidden`` ...).
    """

    def __init__(self, message: str, status: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason

    @property
    def already_exists(self) -> bool:
        return self.reason == "AlreadyExists"

    @property
    def forbidden(self) -> bool:
        """401 or 403: the emitter may not write Events, for now (ADR 0142)."""
        return self.status in (401, 403)

    @property
    def server_failed(self) -> bool:
        """A 5xx: the server could not answer, the Event may be accepted next time."""
        return self.status >= 500


class NotFound(Rejected):
    """404: on a patch the Event was evicted (TTL) and is created instead; on a create the
    namespace is gone (given up: counted in ``gone``, logged once per object).

    Args:
        message: the server's message.
        reason: the Status reason.
    """

    def __init__(self, message: str, reason: str = "NotFound") -> None:
        super().__init__(message, 404, reason)


class RequestConstructionError(SinkError):
    """The request could not be built; it would be built the same next time: dropped."""


class EventSink(Protocol):
    """Where Events go. Raise :class:`NotFound`, :class:`Rejected` or
    :class:`RequestConstructionError` for the answers that are not retried; anything else
    (a transport error, a timeout, an unexpected answer) is retried.

    Return the API server's reply (the Event as stored), or ``None`` when the sink cannot tell:
    the correlator then keeps its own copy.

    A sink may also have ``read(event) -> Event | None``: the Event stored under
    ``event``'s namespace and name (:class:`NotFound` when there is none). With it, a create
    answered AlreadyExists counts as delivered only when the stored Event records the same
    content (ADR 0141); a sink without it is trusted on the name, as before."""

    def create(self, event: Event) -> Event | None:
        """Create ``event``.

        Args:
            event: the Event.

        Returns:
            The Event as stored, or ``None`` when the sink cannot tell.
        """
        ...

    def patch(self, event: Event, patch: Mapping[str, Any]) -> Event | None:
        """Patch the stored ``event`` (a series update).

        Args:
            event: the Event, as the correlator holds it.
            patch: the strategic-merge patch.

        Returns:
            The Event as stored, or ``None`` when the sink cannot tell.
        """
        ...


# -- counters ------------------------------------------------------------------------------
@attrs.frozen(slots=True)
class EmitterStats:
    """A snapshot of what the emitter did. Drops are never silent: each has a counter.

    Attributes:
        enqueued: Events queued to be sent.
        dropped_queue_full: Events dropped because the queue was full.
        duplicates: transitions not sent again because their id was seen (an outbox redelivery).
        invalid: Events that could not be built (a bad type): dropped.
        created: Events created.
        already_delivered: creates answered AlreadyExists by an Event of the same content:
            delivered before a crash.
        reused_ids: creates whose name held an Event of other content (an id handed out again):
            created under another name.
        patched: series patches made.
        recreated: series patches that found nothing (the Event was evicted) and created it.
        counted_in_memory: repeats of a cached series counted in memory only.
        rejected: Events the server refused (4xx/5xx answers): dropped.
        gone: creates answered 404: the namespace is gone; given up.
        forbidden: tries answered 401/403, retried for a while as a Role may be applied late.
        transport_errors: tries that failed in transport or got an unexpected answer.
        gave_up: sends abandoned after their last try.
        evicted: cache entries dropped by the finish timer.
        dropped_on_close: sends still queued when the emitter closed (their transitions stay in
            the outbox).
        acked: transitions acknowledged delivered.
        acked_refused: transitions acknowledged refused (marked, not retried).
        acked_failed: transitions acknowledged failed (left in the outbox for the next
            redelivery).
        oversized_replies: replies longer than the sink's ``max_reply_bytes``, cut.
        deadlines: requests cut at their total deadline (retried).
        cache_evicted: correlation keys dropped to stay within ``max_cached``.
        unresolved_uids: Events sent without the regarding object's uid, which the host could
            not supply.
    """

    enqueued: int = 0
    #: the queue was full (client-go: 1000 slots): dropped
    dropped_queue_full: int = 0
    #: a transition id seen before (outbox redelivery): not sent again
    duplicates: int = 0
    #: an Event that could not be built (bad type): dropped
    invalid: int = 0
    created: int = 0
    #: a create answered AlreadyExists and the Event there records the same content: a
    #: redelivery of one that landed before a crash or a close -- counted as delivered
    already_delivered: int = 0
    #: the Event's name (from its transition id) held an Event of other content: the id was
    #: handed out again (a store that lost writes); created under a content-derived name
    reused_ids: int = 0
    patched: int = 0
    #: a series patch found nothing (the Event was evicted) and created it instead
    recreated: int = 0
    #: emissions of a cached series counted in memory only
    counted_in_memory: int = 0
    #: server rejections (4xx/5xx answers): dropped
    rejected: int = 0
    #: creates answered 404: the namespace (or the object) is gone; given up (refused)
    gone: int = 0
    #: tries answered 401/403 (retried within ``forbidden_retry_seconds``)
    forbidden: int = 0
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
            + self.gone
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
    #: a create answered AlreadyExists for an Event that is not a series, and the Event
    #: there records the same content: it is there
    EXISTS = "exists"
    #: created under a content-derived name: the id's name held an Event of other content
    RENAMED = "renamed"
    #: a create answered 404: the namespace (or object) is gone, given up
    GONE = "gone"
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
    the server answered (``None`` when unknown or failed).

    A create answered AlreadyExists is acknowledged only when the Event under the name
    records the same content (ADR 0141): else it is created under :func:`content_name`
    (:attr:`Sent.RENAMED`); the reply then names the Event as created.

    Args:
        sink: where the Event goes.
        event: the Event.

    Returns:
        What was sent (or why not), the error when there was one, and the server's reply.
    """
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
            if is_series:
                return Sent.RECREATED, None, sink.create(event)
            return _create_checked(sink, event)
        except Exception as e:
            error = e
    assert error is not None
    if isinstance(error, RequestConstructionError):
        return Sent.INVALID, error, None
    if isinstance(error, Rejected):
        # Creating a series whose patch found nothing, and the Event now exists: it was
        # created twice in a very short time; another try patches it.
        if error.already_exists:
            return Sent.RETRY, error, None
        if error.forbidden or error.server_failed:
            return Sent.RETRY, error, None
        if isinstance(error, NotFound) and not is_series:
            return Sent.GONE, error, None
        return Sent.REJECTED, error, None
    return Sent.RETRY, error, None


def _create_checked(sink: EventSink, event: Event) -> tuple[Sent, None, Event | None]:
    """Create ``event``; on AlreadyExists read what is there, and take the next name derived
    from the content while the name holds other content (at most :data:`MAX_NAMES`)."""
    read: Callable[[Event], Event | None] | None = getattr(sink, "read", None)
    candidate = event
    for step in range(MAX_NAMES):
        try:
            reply = sink.create(candidate)
        except Rejected as e:
            if not e.already_exists:
                raise
        else:
            if step == 0:
                return Sent.CREATED, None, reply
            return Sent.RENAMED, None, reply if reply is not None else candidate
        if read is None:  # cannot tell: the name is trusted
            return Sent.EXISTS, None, candidate if step else None
        try:
            stored = read(candidate)
        except NotFound as e:  # gone since (its TTL): the next try creates it
            raise SinkError(f"the Event {candidate.name} went away while read back") from e
        if stored is None:
            raise SinkError(f"the Event {candidate.name} could not be read back")
        if same_content(stored, candidate):
            return Sent.EXISTS, None, candidate if step else None
        candidate = attrs.evolve(candidate, name=content_name(candidate))
    raise Rejected(
        f"{MAX_NAMES} names of the Event {event.name} hold other content", 409, "Conflict"
    )


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
    #: when (``time.monotonic``) the first try answered 401/403 of the tries since the last
    #: other answer; ``None`` when the last try was not forbidden
    forbidden_since: float | None = None
    #: the waits before the forbidden tries since ``forbidden_since``, summed (the window
    #: ends when this or the time since ``forbidden_since`` reaches it: an injected sleep
    #: that does not sleep still ends it)
    forbidden_waited: float = 0.0
    #: failed tries in a row that call for a longer wait (forbidden, or cut at the deadline)
    backoff: int = 0

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
    if sent in (Sent.CREATED, Sent.EXISTS, Sent.RENAMED, Sent.PATCHED, Sent.RECREATED):
        return DELIVERED
    if sent in (Sent.REJECTED, Sent.INVALID, Sent.GONE):
        return REFUSED
    return FAILED


# -- the broadcaster -----------------------------------------------------------------------
class Correlator:
    """The broadcaster's cache, send loop and timers, without goroutines.

    :meth:`correlate` and :meth:`due_sends` decide under the lock; :meth:`try_send` makes one
    request outside it. :meth:`record` (``recordToSink``) and :meth:`tick` (the finish and
    refresh timers, when the clock says they are due) do both on the caller's thread, with
    retries spaced by the injected ``sleep``.

    Args:
        sink: where the Events go.
        clock: what the series' times and the timers read.
        sleep: waits between retries in :meth:`deliver`.
        jitter: a random number in [0, 1), spreading the retries.
        max_tries: how many times a recorded Event is sent before it is given up, at least 1.
        retry_interval: the seconds between tries.
        counters: where it counts; ``None``: its own.
        logger: where it logs; ``None``: the library's logger.
        cancelled: checked after each retry wait: a cancelled correlator stops retrying.
        max_cached: how many keys are cached, at least 1, the oldest dropped beyond it.
        forbidden_retry_seconds: how long a 401/403 answer is retried, not negative.

    Raises:
        ValueError: ``max_cached`` or ``max_tries`` is below 1, or ``forbidden_retry_seconds``
            negative.
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
        forbidden_retry_seconds: float = FORBIDDEN_RETRY_SECONDS,
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
        if forbidden_retry_seconds < 0:
            raise ValueError(f"forbidden_retry_seconds must be >= 0, got {forbidden_retry_seconds}")
        self.forbidden_retry_seconds = forbidden_retry_seconds
        #: objects whose "gone" refusal was logged (once per object)
        self._gone: set[tuple[str, str, str]] = set()
        self.counters = counters if counters is not None else Counters()
        #: checked after each retry sleep: a cancelled correlator stops retrying (``ctx.Done``)
        self.cancelled = cancelled
        self.log = get_logger("lifecycle.emitters.kubernetes", logger)
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
        """The cached Events (with their in-memory series counts).

        Returns:
            The Events.
        """
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
        on the caller's thread.

        Args:
            event: the Event.
        """
        send = self.correlate(event)
        if send is not None:
            self.deliver(send)

    def correlate(self, event: Event, done: Done | None = None) -> Send | None:
        """Cache ``event`` under its key and say which request the API should see: a create
        for a new key, a series patch (count 2) for its second Event, nothing (an in-memory
        count) after that. Never waits on the API server. ``done`` is told how the Event
        ended: with its request's outcome, or for an in-memory count with the outcome of the
        next patch of its key (a refresh, a finish, the emitter's close).

        Args:
            event: the Event.
            done: told how it ended (``delivered``, ``refused`` or ``failed``).

        Returns:
            The request to make, or ``None`` for an in-memory count.
        """
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
        emitter's close sends them, so a shutdown delivers its series counts).

        Returns:
            The sends.
        """
        with self._lock:
            return [Send(key, Purpose.REFRESH) for key, acks in self._held.items() if acks]

    def release_held(self) -> int:
        """Tell every held in-memory count it failed (closing: never patched); how many.

        Returns:
            How many counts were told.
        """
        with self._lock:
            held, self._held = self._held, {}
        n = 0
        for acks in held.values():
            for d in acks:
                d(FAILED)
                n += 1
        return n

    def retry_delay(self, send: Send | None = None) -> float:
        """Seconds before the next try: ``wait.Jitter(retry_interval, 0.25)``; for a send
        that keeps being forbidden or cut at its deadline the interval doubles with each such
        try, up to :data:`MAX_BACKOFF` (ADR 0142).

        Args:
            send: the send to retry; ``None``: the base delay.

        Returns:
            The seconds to wait.
        """
        interval = self.retry_interval
        if send is not None and send.backoff > 1:
            interval = min(interval * 2 ** min(send.backoff - 1, 16), max(MAX_BACKOFF, interval))
        delay = interval * (1 + RETRY_JITTER * self.jitter())
        if send is not None and send.forbidden_since is not None:
            send.forbidden_waited += delay
        return delay

    def deliver(self, send: Send) -> Sent:
        """Make ``send`` on the caller's thread: a recorded Event up to ``max_tries`` times,
        ``sleep`` apart; a timer send once.

        Args:
            send: the request.

        Returns:
            How the last try ended.
        """
        while True:
            sent = self.try_send(send)
            if sent is not Sent.RETRY or not send.retried:
                return sent
            if self.gives_up(send):
                return sent
            self.sleep(self.retry_delay(send))
            if self.cancelled():
                self.counters.add("gave_up")
                return sent

    def gives_up(self, send: Send) -> bool:
        """After a failed try of ``send``: count it, and say (and count, and log) whether it
        was the last one.

        Args:
            send: the request that failed.

        Returns:
            Whether it is given up.
        """
        if send.forbidden_since is not None:  # a forbidden window, not a count of tries
            waited = max(time.monotonic() - send.forbidden_since, send.forbidden_waited)
            if waited < self.forbidden_retry_seconds and not self.cancelled():
                return False
            send.tries += 1
        else:
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
        a final patch that is not to be retried evicts the key (unless it moved).

        Args:
            send: the request.

        Returns:
            How the try ended.
        """
        held: list[Done] = []
        wire: Event | None = None
        if send.purpose is Purpose.RECORD:
            event = send.event
            if event is not None and event.series is not None:
                with self._lock:  # the series' Event may have been created under another name
                    cached = self._cache.get(send.key)
                if cached is not None and cached.name != event.name:
                    wire = attrs.evolve(event, name=cached.name)
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
        sent, reply = self._send(send, wire if wire is not None else event)
        evicted = False
        with self._lock:
            cached = self._cache.get(send.key)
            unmoved = cached is event
            if unmoved and reply is not None:
                kept = self._adopt(event, reply)
                if kept is not None:
                    self._cache[send.key] = kept
                elif reply.name != event.name:  # our copy, under the name it was created as
                    self._cache[send.key] = attrs.evolve(event, name=reply.name)
            elif (
                cached is not None
                and reply is not None
                and cached.name != reply.name
                and (sent is Sent.RENAMED or (sent is Sent.EXISTS and cached.name == event.name))
            ):  # the key moved on (a series): its Event is the one created under this name
                self._cache[send.key] = attrs.evolve(cached, name=reply.name)
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

    def _send(self, send: Send, event: Event) -> tuple[Sent, Event | None]:
        sent, error, reply = record_event(self.sink, event)
        forbidden = isinstance(error, Rejected) and error.forbidden
        self.counters.add(
            "forbidden"
            if forbidden
            else {
                Sent.CREATED: "created",
                Sent.EXISTS: "already_delivered",
                Sent.RENAMED: "created",
                Sent.PATCHED: "patched",
                Sent.RECREATED: "recreated",
                Sent.REJECTED: "rejected",
                Sent.INVALID: "invalid",
                Sent.GONE: "gone",
                Sent.RETRY: "transport_errors",
            }[sent]
        )
        if sent is Sent.RETRY:
            if forbidden:
                if send.forbidden_since is None:
                    send.forbidden_since = time.monotonic()
                    send.forbidden_waited = 0.0
            else:
                send.forbidden_since = None
            backs_off = forbidden or getattr(error, "backoff", False)
            send.backoff = send.backoff + 1 if backs_off else 0
            self._failing(event, error, forbidden=forbidden)
            return sent, reply
        send.forbidden_since = None
        self._answered()
        if sent is Sent.RENAMED:
            self._reused(event, reply)
        elif sent is Sent.GONE:
            self._gone_once(event, error)
        elif error is not None:
            self.log.error(
                "unable to write event (will not retry)",
                name=event.name,
                namespace=event.namespace,
                reason=event.reason,
                error=redact(str(error).strip()),
            )
        return sent, reply

    def _reused(self, event: Event, reply: Event | None) -> None:
        """An Event was created under a content-derived name because its id's name held other
        content: the id was handed out again (ADR 0141). Counted and logged each time."""
        self.counters.add("reused_ids")
        self.log.warning(
            "event id reused for other content; created under a content-derived name",
            name=event.name,
            created_as=reply.name if reply is not None else "",
            namespace=event.namespace,
            reason=event.reason,
            regarding=f"{event.regarding.kind}/{event.regarding.name}",
        )

    def _gone_once(self, event: Event, error: Exception | None) -> None:
        """A create answered 404 (the namespace or object is gone): logged once per object."""
        r = event.regarding
        what = (event.namespace, r.kind, r.name)
        with self._lock:
            first = what not in self._gone
            if first and len(self._gone) < _GONE_LOGGED:
                self._gone.add(what)
            elif first:  # beyond the bound: one line per _GONE_LOGGED refusals
                first = self.counters.snapshot().gone % _GONE_LOGGED == 1
        if first:
            self.log.error(
                "namespace or object gone; its Events are given up",
                namespace=event.namespace,
                regarding=f"{r.kind}/{r.name}",
                reason=event.reason,
                error=redact(str(error).strip()),
            )

    # -- outages ------------------------------------------------------------------------------
    def _failing(self, event: Event, error: Exception | None, *, forbidden: bool = False) -> None:
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
                f"Events API forbids writing Events; they wait and are retried for up to "
                f"{self.forbidden_retry_seconds:g} s"
                if forbidden
                else "API server unreachable; Events wait and are retried",
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
        """Closing during an outage: its line says so, with its counts.

        Args:
            why: what is closing, for the log line.
        """
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

        Returns:
            The sends due.
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
