"""Kubernetes Events for committed transitions, correlated exactly as client-go does it.

A controller opens one emitter for the process and hands it to its runner::

    from kubernetes import config
    from lifecycle.emitters.kubernetes import KubernetesEmitter

    config.load_incluster_config()
    with KubernetesEmitter.for_api() as events, Runner(store, [events]) as runner:
        runner.redeliver()  # at start-up, then now and again: what a crash or a close left
        ...

Each transition becomes an ``events.k8s.io/v1`` Event regarding the object (its real uid and
resourceVersion when the host's ``resolve`` supplies them: see :class:`KubernetesEmitter`),
reported by its machine's controller (``job-controller``, ...), ``action`` = ``reason``, the
note capped at 1024 bytes, the name derived from the transition id (ADR 0121). The Events go
through a correlator that reproduces client-go's ``tools/events`` broadcaster (create, patch
``series`` count 2, then in-memory counts; 30-minute refresh; 6-minute finish), so a Python
controller's Events look exactly like a Go controller's. ``deliver`` (what the runner calls
for outbox events) correlates and queues the request (1000 slots; ``QueueFull`` when full: the
event stays in the outbox) and never waits on the API server; the outbox row is marked when
the API server answered for good (ADR 0121). 8 worker threads send, one key's requests in
order, and a send waiting for its retry holds no worker, so one object's failing Events never
delay another's.

:func:`simulate_events` runs the same correlator on a trace's own clock, without an API
server, and returns the Event table ``kubectl get events`` would show.

Needs the ``kubernetes`` extra only for :class:`ApiEventSink` and
:meth:`EventCollector.from_api`; everything else runs without it.
"""

from __future__ import annotations

import collections
import random
import socket
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Mapping, MutableMapping
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, cast

from .._core.errors import LifecycleError
from .._core.machine import Machine
from .._core.redact import redact
from .._core.refs import ObjectRef
from .._core.transition import Transition
from .._k8s_api.errors import ApiNotConfigured, RequestDeadline, SinkError
from .._k8s_api.uids import is_derived_uid
from ..machines import MachineFacts, default_registry
from ._k8s.collector import EventCollector, EventRow, project
from ._k8s.correlator import (
    DELIVERED,
    FAILED,
    FINISH_TIME,
    FORBIDDEN_RETRY_SECONDS,
    MAX_CACHED,
    MAX_TRIES_PER_EVENT,
    REFRESH_TIME,
    RETRY_INTERVAL,
    Clock,
    Correlator,
    Counters,
    EmitterStats,
    EventSink,
    NotFound,
    Rejected,
    RequestConstructionError,
    record_event,
    utc_now,
)
from ._k8s.dispatch import EVENT_WORKERS, Dispatcher
from ._k8s.event import (
    NAME_LIMIT,
    NOTE_LIMIT,
    TRUNCATED_SUFFIX,
    Event,
    EventSeries,
    ObjectReference,
    build_event,
    event_name,
    id_suffix,
    is_dns_subdomain,
    truncate_note,
    unix_nanos,
)
from ._k8s.simulate import EventTableRow, format_event_table, simulate
from ._k8s.sinks import MAX_REPLY_BYTES, REQUEST_DEADLINE, ApiEventSink, MemoryEventSink, ServerBusy
from .base import Ack, Acknowledge, delivery_key

__all__ = [
    "API_VERSIONS",
    "CONTROLLERS",
    "EVENT_WORKERS",
    "FINISH_TIME",
    "FORBIDDEN_RETRY_SECONDS",
    "MAX_CACHED",
    "MAX_QUEUED_EVENTS",
    "MAX_REPLY_BYTES",
    "MAX_TRIES_PER_EVENT",
    "NAME_LIMIT",
    "NOTE_LIMIT",
    "REFRESH_TIME",
    "REPORTED_BY",
    "REQUEST_DEADLINE",
    "RETRY_INTERVAL",
    "TRUNCATED_SUFFIX",
    "ApiEventSink",
    "ApiNotConfigured",
    "Correlator",
    "EmitterStats",
    "Event",
    "EventCollector",
    "EventRow",
    "EventSeries",
    "EventSink",
    "EventTableRow",
    "KubernetesEmitter",
    "ManualClock",
    "MemoryEventSink",
    "NotFound",
    "ObjectReference",
    "QueueFull",
    "Rejected",
    "RequestConstructionError",
    "RequestDeadline",
    "Resolver",
    "ServerBusy",
    "SinkError",
    "build_event",
    "default_controller",
    "event_name",
    "format_event_table",
    "id_suffix",
    "is_derived_uid",
    "is_dns_subdomain",
    "project",
    "record_event",
    "simulate_events",
    "truncate_note",
]

#: client-go's ``maxQueuedEvents``.
MAX_QUEUED_EVENTS = 1000

#: The reporting controller of each shipped machine's Events, read from the machine
#: (:attr:`~lifecycle.Machine.reporting_controller`: its ``controller``, else
#: ``<machine>-controller``; ADR 0147). Pod and NodeClaim follow the ``<machine>-controller``
#: rule: upstream Nebula records no Events of its own, and virtual-kubelet's
#: ``nebula-<provider>/pod-controller`` names a provider a transition does not carry.
CONTROLLERS: Mapping[str, str] = MachineFacts(
    default_registry(), lambda m: m.reporting_controller, by="name"
)

#: Transitions one machine's object undergoes but another controller reports: the Workflow's
#: timeout write on a Job (transition site 16) is ``JobTimedOut`` from ``workflow-controller``.
REPORTED_BY: Mapping[tuple[str, str], str] = {("job", "JobTimedOut"): "workflow-controller"}

#: ``regarding.apiVersion`` by kind: each shipped machine's own
#: :attr:`~lifecycle.Machine.api_version` (ADR 0147). A machine given to the emitter
#: (``machines=``) brings its own; a kind of neither gets ``""`` unless the host maps it.
API_VERSIONS: Mapping[str, str] = MachineFacts(
    default_registry(), lambda m: m.api_version, by="kind"
)

_FALLBACK_SUFFIX = "StatusUpdateFailed"

#: The host's answer to "which object is this, as the API server knows it" (``resolve=``):
#: called with the transition's :class:`~lifecycle.ObjectRef` (kind, namespace -- ``""`` for
#: a cluster-scoped kind --, name, and the uid the host observed it under), it returns
#: ``(uid, resourceVersion)``: the object's ``metadata.uid`` and ``metadata.resourceVersion``
#: as strings, ``""`` for a part it does not know; or ``None`` when it holds no such object
#: (or another object now has the name). Called on the committing thread for every Event: it
#: must answer from memory (a cache fed by a list and a watch), never call the API.
#: :meth:`lifecycle.stores.kubernetes.ObjectCache.resolve` is one.
Resolver = Callable[[ObjectRef], tuple[str, str] | None]


def _api_versions(
    machines: Iterable[Machine[Any]] | Mapping[str, Machine[Any]] | None,
) -> dict[str, str]:
    """Each given machine's kind -> its own apiVersion (where it declares one)."""
    if machines is None:
        return {}
    found = machines.values() if isinstance(machines, Mapping) else machines
    return {m.kind: m.api_version for m in found if m.api_version}


def _content_token(t: Transition) -> str:
    """What ``t`` records, as a short in-process token (it keys correlation, never sent)."""
    return f"{hash((t.type.value, t.reason, t.message, t.ref.uid)) & 0xFFFFFFFFFFFF:x}"


def default_controller(transition: Transition) -> str:
    """Who reports ``transition``: the controller it carries (a machine that writes another
    kind's status declares it), else the :data:`REPORTED_BY` exception for its (machine,
    reason) (a fallback Warning counts as its reason without ``StatusUpdateFailed``), else
    :data:`CONTROLLERS`, else ``<machine>-controller``.

    Args:
        transition: the transition.

    Returns:
        The reporting controller's name.
    """
    if transition.controller:
        return transition.controller
    reason = transition.reason
    if transition.fallback:
        reason = reason.removesuffix(_FALLBACK_SUFFIX)
    by = REPORTED_BY.get((transition.machine, reason))
    if by is not None:
        return by
    return CONTROLLERS.get(transition.machine, f"{transition.machine}-controller")


class QueueFull(LifecycleError):
    """Raised by :meth:`KubernetesEmitter.deliver` when the queue is full (and by
    :meth:`KubernetesEmitter.emit` when the emitter was built with ``raise_when_full=True``):
    the runner then keeps the event in its outbox, and the next redelivery sends it."""


_ACKS = {DELIVERED: Ack.DELIVERED, FAILED: Ack.FAILED}


class ManualClock:
    """A clock for tests: starts at ``start`` and moves only when told to.

    Args:
        start: the first time it reads, timezone-aware (the library's times all are).

    Raises:
        ValueError: ``start`` is naive.
    """

    def __init__(self, start: datetime) -> None:
        if start.tzinfo is None:
            raise ValueError("ManualClock needs an aware datetime")
        self._now = start
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, delta: timedelta | float) -> datetime:
        """Move the clock on.

        Args:
            delta: how far, a :class:`~datetime.timedelta` or seconds.

        Returns:
            The new time.
        """
        step = delta if isinstance(delta, timedelta) else timedelta(seconds=delta)
        with self._lock:
            self._now += step
            return self._now


class KubernetesEmitter:
    """An :class:`~lifecycle.Emitter` that records each transition as a Kubernetes Event.

    ``controller`` overrides who reports a transition: a mapping that renames reporting
    controllers as :func:`default_controller` resolves them (``{"pod-controller":
    "nebula-modal/pod-controller"}``), or a function of the transition.

    ``regarding`` names the object as the API server knows it, so that ``kubectl describe``
    (which finds Events by the object's uid) shows them. ``resolve`` (a :data:`Resolver`:
    ``ref -> (uid, resourceVersion) | None``, over the controller's cache of its objects, e.g.
    :meth:`lifecycle.stores.kubernetes.ObjectCache.resolve`) gives each object's real uid and
    current resourceVersion. Without it, or where it answers ``None`` or ``""``: the uid is the
    ObjectRef's (which the host took from the object), except a uid the library derived
    (:func:`is_derived_uid`), which is left out and counted (``unresolved_uids``); the
    resourceVersion is left out, never invented (``resource_version``, a function of the
    transition, may supply it instead). Events of different transitions still correlate apart,
    through the store version (:attr:`ObjectReference.store_version`, never sent).
    ``machines`` (machines, or a :class:`~lifecycle.MachineRegistry`) give each kind's
    apiVersion from the machine (:attr:`~lifecycle.Machine.api_version`): a host's own
    machine needs nothing else; ``api_versions`` is merged over them and :data:`API_VERSIONS`.

    ``clock``, ``sleep`` and ``jitter`` are injectable. By default a send waiting for its
    retry is parked (no worker waits) and closing the emitter ends the wait; a ``sleep`` given
    here is called by the worker instead. ``workers`` threads send (client-go: 8); at most
    ``queue_size`` sends wait, at most ``max_cached`` correlation keys are cached (the oldest
    dropped beyond it, counted and logged). With ``timers=False`` the workers never run the
    finish/refresh timers by themselves: call :meth:`tick`.

    Transitions redelivered from the outbox under an id already sent with the same content
    are skipped (the last ``dedupe`` are remembered, keyed by
    :func:`~lifecycle.emitters.base.delivery_key`), so redelivery never turns one transition
    into a series; an id handed out again for other content is a new Event (ADR 0141).

    A 401/403 answer is retried for ``forbidden_retry_seconds`` (default
    :data:`FORBIDDEN_RETRY_SECONDS`, 5 minutes) with growing waits, then the Event fails and
    its transition stays in the outbox; a 404 on a create (namespace gone) is given up,
    counted (``gone``) and logged once per object (ADR 0142).

    Args:
        sink: where the Events go (:class:`ApiEventSink` for an API server,
            :class:`MemoryEventSink` in tests).
        controller: renames reporting controllers (a mapping) or names them (a function of the
            transition); ``None``: :func:`default_controller`.
        resource_version: supplies the ``regarding`` resourceVersion where ``resolve`` does not.
        resolve: gives each object's real uid and resourceVersion, so ``kubectl describe`` finds
            its Events.
        api_versions: apiVersions by kind, over the machines' and :data:`API_VERSIONS`.
        machines: machines (or a registry) whose :attr:`~lifecycle.Machine.api_version` names
            their kind's apiVersion.
        hostname: the ``reportingInstance``; ``None``: this host's name.
        clock: what the Events' times are read from.
        sleep: what a worker calls to wait for a retry; ``None``: the send is parked and no
            worker waits.
        jitter: a random number in [0, 1), spreading retries so replicas do not retry in step.
        max_tries: how many times an Event is sent before it is given up (client-go: 12).
        retry_interval: the seconds between tries (client-go: 10).
        queue_size: how many sends may wait (client-go: 1000), bounding memory when the API
            server is slow.
        workers: how many threads send (client-go: 8).
        raise_when_full: :meth:`emit` raises :class:`QueueFull` too (it drops and counts by
            default).
        dedupe: how many delivered transitions are remembered, so a redelivery is not sent
            twice.
        max_cached: how many correlation keys are cached, the oldest dropped beyond it.
        forbidden_retry_seconds: how long a 401/403 answer is retried, as credentials may be
            rotating.
        timers: the workers run the series' finish and refresh timers; ``False``: the host calls
            :meth:`tick`.
        start: start the workers now; ``False``: the host calls :meth:`start`.
        logger: where the emitter logs; ``None``: the library's logger.
    """

    def __init__(
        self,
        sink: EventSink,
        *,
        controller: Mapping[str, str] | Callable[[Transition], str] | None = None,
        resource_version: Callable[[Transition], str] | None = None,
        resolve: Resolver | None = None,
        api_versions: Mapping[str, str] | None = None,
        machines: Iterable[Machine[Any]] | Mapping[str, Machine[Any]] | None = None,
        hostname: str | None = None,
        clock: Clock = utc_now,
        sleep: Callable[[float], None] | None = None,
        jitter: Callable[[], float] = random.random,
        max_tries: int = MAX_TRIES_PER_EVENT,
        retry_interval: float = RETRY_INTERVAL,
        queue_size: int = MAX_QUEUED_EVENTS,
        workers: int = EVENT_WORKERS,
        raise_when_full: bool = False,
        dedupe: int = 10_000,
        max_cached: int = MAX_CACHED,
        forbidden_retry_seconds: float = FORBIDDEN_RETRY_SECONDS,
        timers: bool = True,
        start: bool = True,
        logger: Any = None,
    ) -> None:
        self.sink = sink
        if controller is None:
            self._controller: Callable[[Transition], str] = default_controller
        elif callable(controller):
            self._controller = controller
        else:
            renames = dict(controller)

            def mapped(t: Transition) -> str:
                name = default_controller(t)
                return renames.get(name, name)

            self._controller = mapped
        self._resource_version = resource_version
        self._resolve = resolve
        # the given machines' and the host's, over the shipped machines' (read, never written)
        shipped = cast("MutableMapping[str, str]", API_VERSIONS)
        self.api_versions: Mapping[str, str] = collections.ChainMap(
            {**_api_versions(machines), **(api_versions or {})}, shipped
        )
        self._api_by_kind: dict[str, str] = {}
        self.hostname = hostname if hostname is not None else socket.gethostname()
        self.clock = clock
        self._stopping = threading.Event()
        self.counters = Counters()
        if hasattr(sink, "counters") and getattr(sink, "counters", None) is None:
            sink.counters = self.counters  # the sink counts what it cuts or drops
        self.correlator = Correlator(
            sink,
            clock=clock,
            sleep=sleep if sleep is not None else self._interruptible_sleep,
            jitter=jitter,
            max_tries=max_tries,
            max_cached=max_cached,
            retry_interval=retry_interval,
            counters=self.counters,
            logger=logger,
            cancelled=self._stopping.is_set,
            forbidden_retry_seconds=forbidden_retry_seconds,
        )
        self.raise_when_full = raise_when_full
        self.timers = timers
        #: the send queue and its worker threads
        self.dispatcher = Dispatcher(
            self.correlator, workers=workers, capacity=queue_size, sleep=sleep, timers=timers
        )
        #: what this emitter finished (delivered or refused), the last ``dedupe`` of them, by
        #: id *and* content: an id handed out again for other content is not a repeat
        self._seen: collections.OrderedDict[Hashable, Ack] = collections.OrderedDict()
        #: what is in flight, with every acknowledgement waiting for it
        self._flight: dict[Hashable, list[tuple[Transition, Acknowledge]]] = {}
        self._dedupe = dedupe
        self._lock = threading.Lock()
        self._last_nanos = 0
        self._closed = False
        #: whether the sink is this emitter's own (built by :meth:`for_api`): closed with it
        self._owns_sink = False
        if start:
            self.start()

    @classmethod
    def for_api(
        cls,
        api: Any = None,
        *,
        request_timeout: float | tuple[float, float] | None = 10.0,
        deadline: float = REQUEST_DEADLINE,
        max_reply_bytes: int = MAX_REPLY_BYTES,
        **options: Any,
    ) -> KubernetesEmitter:
        """An emitter sending through :class:`ApiEventSink` (``api``: an ``EventsV1Api``, an
        ``ApiClient``, or ``None`` for the loaded default configuration). Raises
        :class:`ApiNotConfigured` when there is no API server to send to.

        Args:
            api: an ``EventsV1Api``, an ``ApiClient``, or ``None`` for the loaded default
                configuration.
            request_timeout: the client's timeout per request (connect, read), in seconds.
            deadline: the longest a request may take in all, in seconds: a stalled API server never
                holds a worker longer.
            max_reply_bytes: the largest reply read; the rest is dropped and counted.
            **options: the constructor's other options.

        Returns:
            The emitter, which closes the sink with itself.

        Raises:
            ApiNotConfigured: there is no API server to send to.
        """
        sink = ApiEventSink(
            api, request_timeout=request_timeout, deadline=deadline, max_reply_bytes=max_reply_bytes
        )
        emitter = cls(sink, **options)
        emitter._owns_sink = True  # closed with the emitter (its watchdog thread included)
        return emitter

    # -- the Emitter protocol ---------------------------------------------------------------
    name = "kubernetes"
    #: what makes two deliveries one event (ADR 0141), and the token of a transition's
    #: content its correlation key carries (class attributes: a benchmark swaps them)
    _key: Callable[[Transition], Hashable] = staticmethod(delivery_key)
    _token: Callable[[Transition], str] = staticmethod(_content_token)

    def emit(self, transition: Transition) -> None:
        """Build the Event for ``transition`` and enqueue it, best effort (nothing tells the
        outbox how it ends: the runner uses :meth:`deliver` for outbox events); never waits
        for the API.

        Args:
            transition: the transition.

        Raises:
            QueueFull: the queue is full and the emitter was built with ``raise_when_full=True``.
            RuntimeError: the emitter is closed.
        """
        t = transition
        # an action event has no id and may repeat: it is correlated like any Event
        tid = None if t.action or not t.id else self._key(t)
        with self._lock:
            if self._closed:
                raise RuntimeError("KubernetesEmitter is closed")
            if tid is not None and (tid in self._seen or tid in self._flight):
                if tid in self._seen:
                    self._seen.move_to_end(tid)
                self.counters.add("duplicates")
                return
        event = self.build(t)
        queued = event is not None and self._admit(event)
        if queued and tid is not None:
            self._remember(tid, Ack.DELIVERED)

    def deliver(self, transition: Transition, ack: Acknowledge) -> None:
        """Build the Event for ``transition`` (named from its id), correlate it and queue
        its request; ``ack(transition, outcome)`` is called once the API server answered for
        good: :attr:`Ack.DELIVERED` when it has the Event (created, already there under its
        name, or patched into its series -- an in-memory count when the next patch of its
        series lands), :attr:`Ack.REFUSED` when it refused it (invalid, forbidden: logged and
        counted), :attr:`Ack.FAILED` when the tries ran out or the emitter closed first.
        Never waits for the API. Raises :class:`QueueFull` (logged, counted) when
        ``queue_size`` sends already wait, and ``RuntimeError`` once closed.

        Args:
            transition: the transition.
            ack: called once with the transition and its outcome.

        Raises:
            QueueFull: ``queue_size`` sends already wait: the transition stays in the outbox.
            RuntimeError: the emitter is closed.
        """
        t = transition
        tid = self._key(t)
        with self._lock:
            if self._closed:
                raise RuntimeError("KubernetesEmitter is closed")
            known = self._seen.get(tid)
            if known is not None:  # sent before by this emitter: answered at once
                self._seen.move_to_end(tid)
                self.counters.add("duplicates")
            else:
                waiting = self._flight.get(tid)
                if waiting is not None:  # in flight: answered with it
                    waiting.append((t, ack))
                    self.counters.add("duplicates")
                    return
        if known is not None:
            self._acked(known)
            ack(t, known)
            return
        event = self.build(t)
        if event is None:  # counted invalid: refused for good
            self._acked(Ack.REFUSED)
            ack(t, Ack.REFUSED)
            return
        with self._lock:
            self._flight[tid] = [(t, ack)]

        def done(outcome: str) -> None:
            self._answer(tid, _ACKS.get(outcome, Ack.REFUSED))

        try:
            self._admit(event, done=done, strict=True)
        except BaseException:
            with self._lock:
                self._flight.pop(tid, None)
            raise

    def _answer(self, tid: Hashable, outcome: Ack) -> None:
        with self._lock:
            waiting = self._flight.pop(tid, [])
        if outcome is not Ack.FAILED:
            self._remember(tid, outcome)
        for t, ack in waiting:
            self._acked(outcome)
            try:
                ack(t, outcome)
            except Exception as e:  # the host's callback must not kill a worker
                self.correlator.log.error("acknowledgement failed", error=redact(repr(e)))

    def _acked(self, outcome: Ack) -> None:
        counter = {Ack.DELIVERED: "acked", Ack.REFUSED: "acked_refused"}
        self.counters.add(counter.get(outcome, "acked_failed"))

    def _remember(self, tid: Hashable, outcome: Ack) -> None:
        with self._lock:
            self._seen[tid] = outcome
            self._seen.move_to_end(tid)
            while len(self._seen) > self._dedupe:
                self._seen.popitem(last=False)

    def regarding(self, transition: Transition) -> ObjectReference:
        """The ``regarding`` reference of ``transition``'s Event: the real uid and
        resourceVersion where the host supplies them, nothing invented (see the class).

        Args:
            transition: the transition.

        Returns:
            The reference.
        """
        t = transition
        uid = rv = ""
        if self._resolve is not None:
            try:
                resolved = self._resolve(t.ref)
            except Exception as e:  # the host's lookup failed: as if it did not know
                self.correlator.log.warning(
                    "resolve failed", object=str(t.ref), error=redact(repr(e))
                )
                resolved = None
            if resolved is not None:
                uid, rv = (str(part or "") for part in resolved)
        if not uid:
            if is_derived_uid(t.ref):
                self.counters.add("unresolved_uids")
            else:
                uid = t.ref.uid
        if not rv and self._resource_version is not None:
            rv = self._resource_version(t)
        store_version = ""
        if not rv:
            # the version, and what the transition records: a version handed out again for
            # other content (a store that lost writes) is another Event, never its series
            # (an action event has no id: its repeats are a series, as client-go's are)
            version = f"{t.version}@{t.epoch}" if t.epoch else str(t.version)
            store_version = version if t.action else f"{version}#{self._token(t)}"
        return ObjectReference(
            kind=t.ref.kind,
            name=t.ref.name,
            namespace=t.ref.namespace,
            uid=uid,
            api_version=self._api_version(t.ref.kind),
            resource_version=rv,
            store_version=store_version,
        )

    def _api_version(self, kind: str) -> str:
        """``kind``'s apiVersion, looked up once (a shipped machine is imported on first use)."""
        found = self._api_by_kind.get(kind)
        if found is None:
            found = self._api_by_kind[kind] = self.api_versions.get(kind, "")
        return found

    def record(
        self,
        regarding: ObjectReference,
        type: str,
        reason: str,
        note: str,
        *,
        controller: str,
        action: str | None = None,
        related: ObjectReference | None = None,
    ) -> bool:
        """client-go's ``Eventf``, for an Event the host records itself rather than through a
        machine (action events of machines arrive through :meth:`emit`). Returns whether it
        was queued.

        Args:
            regarding: the object the Event is about.
            type: ``"Normal"`` or ``"Warning"``.
            reason: the Event's reason.
            note: its message (truncated to the API server's limit).
            controller: the reporting controller.
            action: what the controller did; ``None``: the reason.
            related: a second object the Event names, when there is one.

        Returns:
            Whether it was queued (an invalid Event or a full queue is not).

        Raises:
            RuntimeError: the emitter is closed.
        """
        with self._lock:
            if self._closed:
                raise RuntimeError("KubernetesEmitter is closed")
        event = self._make(regarding, type, reason, note, controller, action, related)
        return event is not None and self._admit(event)

    def build(self, transition: Transition) -> Event | None:
        """The Event of ``transition`` as :meth:`emit` records it, now (``None``, counted as
        invalid, for a type other than Normal or Warning).

        Args:
            transition: the transition.

        Returns:
            The Event, or ``None`` when it is invalid.
        """
        t = transition
        return self._make(
            self.regarding(t),
            t.type.value,
            t.reason,
            t.message,
            self._controller(t),
            key="" if t.action else t.id,
        )

    def _make(
        self,
        regarding: ObjectReference,
        type: str,
        reason: str,
        note: str,
        controller: str,
        action: str | None = None,
        related: ObjectReference | None = None,
        key: str = "",
    ) -> Event | None:
        now = self.clock()
        if key:  # a committed transition: its Event is named from its id (ADR 0121)
            nanos = id_suffix(key)
        else:
            with self._lock:
                # names must not collide when the clock repeats itself (a manual clock, a
                # coarse timer): the next free nanosecond, never a 409 on create
                nanos = max(unix_nanos(now), self._last_nanos + 1)
                self._last_nanos = nanos
        try:
            event = build_event(
                regarding,
                type=type,
                reason=reason,
                note=note,
                reporting_controller=controller,
                reporting_instance=f"{controller}-{self.hostname}",
                now=now,
                name_nanos=nanos,
                action=action,
                related=related,
            )
        except ValueError:
            self.counters.add("invalid")
            return None
        return event

    def _admit(
        self, event: Event, *, done: Callable[[str], None] | None = None, strict: bool = False
    ) -> bool:
        """Correlate ``event`` and queue the request it calls for (never waits on the API).
        ``strict``: a full queue raises :class:`QueueFull` (the outbox keeps the event)."""
        dispatcher = self.dispatcher
        with dispatcher.lock:
            if (strict or self.raise_when_full) and not dispatcher.has_room():
                # before correlating: the runner keeps the event and redelivers it whole
                self.counters.add("dropped_queue_full")
                self.correlator.log.warning(
                    "event queue full; the transition stays in the outbox",
                    name=event.name,
                    namespace=event.namespace,
                    reason=event.reason,
                    queued=dispatcher.capacity,
                )
                raise QueueFull(f"{dispatcher.capacity} events queued")
            # correlate first (client-go since v0.37), then queue what the API should see
            send = self.correlator.correlate(event, done)
            if send is not None and not dispatcher.submit(send):
                self.counters.add("dropped_queue_full")
                return False
            if self.timers:
                dispatcher.run_timers()
        self.counters.add("enqueued")
        return True

    # -- the workers --------------------------------------------------------------------------
    def start(self) -> None:
        """Start the worker threads (done at construction unless ``start=False``)."""
        with self._lock:
            if self._closed:
                return
        self.dispatcher.start()

    def _interruptible_sleep(self, seconds: float) -> None:
        self._stopping.wait(seconds)

    def tick(self) -> None:
        """Run the finish/refresh timers now if they are due: singletons are evicted at once,
        the final and refresh patches are queued for the workers (:meth:`flush` waits)."""
        with self.dispatcher.lock:
            self.dispatcher.run_timers()

    def flush(self, timeout: float | None = 5.0) -> bool:
        """Wait until every queued send has been made (retries included); False if
        ``timeout`` ran out.

        Args:
            timeout: the longest wait, in seconds; ``None``: no bound.

        Returns:
            Whether every send was made in time.
        """
        return self.dispatcher.flush(timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Stop accepting Events and flush within ``timeout`` seconds in all: series counts
        held in memory are patched, the queue drains; then the workers stop. What still
        waits is not sent: counted (``dropped_on_close``, ``gave_up`` for a send waiting for
        its retry), logged with its count, and acknowledged as failed, so its transition
        stays in the outbox and the next start sends it. A request still in flight when the
        bound comes is cut (:class:`ApiEventSink`: ADR 0142) and acknowledged failed; every
        worker thread has ended when this returns, and the sink's watchdog too when
        :meth:`for_api` built the sink.

        Args:
            timeout: the bound on the whole close, in seconds.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
        deadline = time.monotonic() + timeout
        if not self.dispatcher.threads:
            self.correlator.release_held()
            self._fail_flight()
            self._close_sink(deadline)
            return
        with self.dispatcher.lock:
            for send in self.correlator.held():
                self.dispatcher.submit(send)
        # to stop the workers, cut what is in flight and join them within the bound
        reserve = min(timeout / 4, 1.0)
        self.flush(max(deadline - reserve - time.monotonic(), 0.0))
        self._stopping.set()
        self.correlator.end_outage("close")
        # requests still in flight are cut (a trickling server cannot keep a worker past
        # the bound): the workers answer them failed and end, and are joined here
        self.dispatcher.stop(
            max(deadline - time.monotonic(), 0.0), interrupt=lambda: self._close_sink(deadline)
        )

    def _close_sink(self, deadline: float) -> None:
        """Cut the sink's requests in flight: close a sink this emitter built (``for_api``),
        interrupt one it was given (the host may use it again), within the bound."""
        try:
            if self._owns_sink:
                self.sink.close(timeout=max(deadline - time.monotonic(), 0.0))  # type: ignore[attr-defined]
                return
            interrupt = getattr(self.sink, "interrupt", None)
            if callable(interrupt):
                interrupt()
        except Exception as e:  # a host's sink: closing it must not break ours
            self.correlator.log.warning("event sink close failed", error=redact(repr(e)))

    def _fail_flight(self) -> None:
        with self._lock:
            ids = list(self._flight)
        for tid in ids:
            self._answer(tid, Ack.FAILED)

    def __enter__(self) -> KubernetesEmitter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- inspection ---------------------------------------------------------------------------
    @property
    def stats(self) -> EmitterStats:
        return self.counters.snapshot()

    def controller_for(self, transition: Transition) -> str:
        """Who reports ``transition``, with the ``controller`` option applied.

        Args:
            transition: the transition.

        Returns:
            The reporting controller's name.
        """
        return self._controller(transition)


def simulate_events(
    transitions: Iterable[Transition],
    *,
    settle: bool = True,
    hostname: str = "replay",
    controller: Mapping[str, str] | Callable[[Transition], str] | None = None,
    resolve: Callable[[ObjectRef], tuple[str, str] | None] | None = None,
    api_versions: Mapping[str, str] | None = None,
    machines: Iterable[Machine[Any]] | Mapping[str, Machine[Any]] | None = None,
) -> list[EventTableRow]:
    """The Event table the transitions would leave, correlated as the Kubernetes emitter
    does on the transitions' clock (each one recorded at its ``at``).

    Transitions are taken in order (a transition earlier than the one before it is recorded
    at the later time); one seen before under the same id is skipped, as the emitter skips
    an outbox redelivery. The finish and refresh timers fire whenever the clock reaches
    them. With ``settle`` the clock then runs on until every series has had its final patch,
    so counts are final; without it the table is as of the last transition. Rows are sorted
    by first time, then name. ``controller``, ``resolve``, ``api_versions`` and ``machines``
    are the emitter's options; ``hostname`` makes the ``reportingInstance``.

    Args:
        transitions: the transitions, in order.
        settle: run the clock on until every series has had its final patch.
        hostname: what makes the ``reportingInstance``.
        controller: as the emitter's.
        resolve: as the emitter's.
        api_versions: as the emitter's.
        machines: as the emitter's.

    Returns:
        The table's rows.
    """

    def make(sink: MemoryEventSink, clock: Callable[[], datetime]) -> KubernetesEmitter:
        return KubernetesEmitter(
            sink,
            controller=controller,
            resolve=resolve,
            api_versions=api_versions,
            machines=machines,
            hostname=hostname,
            clock=clock,
            sleep=lambda _: None,
            timers=False,
            start=False,
        )

    return simulate(transitions, make, settle=settle)
