"""Kubernetes Events for committed transitions, correlated exactly as client-go does it.

    from kubernetes import config
    from lifecycle.emitters.kubernetes import KubernetesEmitter

    config.load_incluster_config()
    with KubernetesEmitter.for_api() as events:
        runner = Runner(store, [events])
        ...

Each transition becomes an ``events.k8s.io/v1`` Event regarding the object at the
resourceVersion its status was committed at, reported by its machine's controller
(``job-controller``, ...), ``action`` = ``reason``, the note capped at 1024 bytes. The Events
go through a correlator that reproduces client-go's ``tools/events`` broadcaster (create,
patch ``series`` count 2, then in-memory counts; 30-minute refresh; 6-minute finish), so a
Python controller's Events look exactly like a Go controller's. ``emit`` only builds the
Event and enqueues it (1000 slots; dropped and counted when full); one worker thread sends.

Needs the ``kubernetes`` extra only for :class:`ApiEventSink` and
:meth:`EventCollector.from_api`; everything else runs without it.
"""

from __future__ import annotations

import collections
import queue
import random
import socket
import threading
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any

from .._core.redact import redact
from .._core.transition import Transition
from ._k8s.collector import EventCollector, EventRow, project
from ._k8s.correlator import (
    FINISH_TIME,
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
    SinkError,
    record_event,
    utc_now,
)
from ._k8s.event import (
    NOTE_LIMIT,
    TRUNCATED_SUFFIX,
    Event,
    EventSeries,
    ObjectReference,
    build_event,
    truncate_note,
    unix_nanos,
)
from ._k8s.sinks import ApiEventSink, MemoryEventSink, ServerBusy

__all__ = [
    "API_VERSIONS",
    "CONTROLLERS",
    "FINISH_TIME",
    "MAX_QUEUED_EVENTS",
    "MAX_TRIES_PER_EVENT",
    "NOTE_LIMIT",
    "REFRESH_TIME",
    "REPORTED_BY",
    "RETRY_INTERVAL",
    "TRUNCATED_SUFFIX",
    "ApiEventSink",
    "Correlator",
    "EmitterStats",
    "Event",
    "EventCollector",
    "EventRow",
    "EventSeries",
    "EventSink",
    "KubernetesEmitter",
    "ManualClock",
    "MemoryEventSink",
    "NotFound",
    "ObjectReference",
    "QueueFull",
    "Rejected",
    "RequestConstructionError",
    "ServerBusy",
    "SinkError",
    "build_event",
    "default_controller",
    "project",
    "record_event",
    "truncate_note",
]

#: client-go's ``maxQueuedEvents``.
MAX_QUEUED_EVENTS = 1000

#: The reporting controller of each machine's Events (the recorder names upstream).
#: Pod and NodeClaim follow the same ``<machine>-controller`` rule: upstream Nebula records no
#: Events of its own, and virtual-kubelet's ``nebula-<provider>/pod-controller`` names a
#: provider a transition does not carry.
CONTROLLERS: Mapping[str, str] = {
    "pod": "pod-controller",
    "nodeclaim": "nodeclaim-controller",
    "job": "job-controller",
    "workflow": "workflow-controller",
    "certification": "certification-controller",
    "workloadrun": "workloadrun-controller",
    "restore": "restore-controller",
}

#: Transitions one machine's object undergoes but another controller reports: the Workflow's
#: timeout write on a Job (transition site 16) is ``JobTimedOut`` from ``workflow-controller``.
REPORTED_BY: Mapping[tuple[str, str], str] = {("job", "JobTimedOut"): "workflow-controller"}

#: ``regarding.apiVersion`` by kind; a kind not listed gets ``""`` unless the host maps it.
API_VERSIONS: Mapping[str, str] = {
    "Pod": "v1",
    "NodeClaim": "nebula.inftyai.com/v1alpha1",
    "Job": "nvcre.nvidia.com/v1alpha1",
    "Workflow": "nvcre.nvidia.com/v1alpha1",
    "Certification": "nvcre.nvidia.com/v1alpha1",
    "WorkloadRun": "nvcre.nvidia.com/v1alpha1",
}

_FALLBACK_SUFFIX = "StatusUpdateFailed"


def default_controller(transition: Transition) -> str:
    """Who reports ``transition``: the controller it carries (a machine that writes another
    kind's status declares it), else the :data:`REPORTED_BY` exception for its (machine,
    reason) (a fallback Warning counts as its reason without ``StatusUpdateFailed``), else
    :data:`CONTROLLERS`, else ``<machine>-controller``."""
    if transition.controller:
        return transition.controller
    reason = transition.reason
    if transition.fallback:
        reason = reason.removesuffix(_FALLBACK_SUFFIX)
    by = REPORTED_BY.get((transition.machine, reason))
    if by is not None:
        return by
    return CONTROLLERS.get(transition.machine, f"{transition.machine}-controller")


class QueueFull(Exception):
    """Raised by :meth:`KubernetesEmitter.emit` when the queue is full and the emitter was
    built with ``raise_when_full=True``: the runner then keeps the event in its outbox."""


class ManualClock:
    """A clock for tests: starts at ``start`` and moves only when told to."""

    def __init__(self, start: datetime) -> None:
        if start.tzinfo is None:
            raise ValueError("ManualClock needs an aware datetime")
        self._now = start
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, delta: timedelta | float) -> datetime:
        step = delta if isinstance(delta, timedelta) else timedelta(seconds=delta)
        with self._lock:
            self._now += step
            return self._now


_STOP = object()


class KubernetesEmitter:
    """An :class:`~lifecycle.Emitter` that records each transition as a Kubernetes Event.

    ``controller`` overrides who reports a transition: a mapping that renames reporting
    controllers as :func:`default_controller` resolves them (``{"pod-controller":
    "nebula-modal/pod-controller"}``), or a function of the transition.
    ``resource_version`` gives the regarded object's resourceVersion for a transition
    (default: its committed ``version``, as a string); ``api_versions`` is merged over
    :data:`API_VERSIONS`. ``clock``, ``sleep`` and ``jitter`` are injectable; the default
    sleep ends early when the emitter closes. With ``timers=False`` the worker never runs
    the finish/refresh timers by itself: call :meth:`tick`.

    Transitions redelivered from the outbox under an id already sent are skipped (the last
    ``dedupe`` ids are remembered), so redelivery never turns one transition into a series.
    """

    def __init__(
        self,
        sink: EventSink,
        *,
        controller: Mapping[str, str] | Callable[[Transition], str] | None = None,
        resource_version: Callable[[Transition], str] | None = None,
        api_versions: Mapping[str, str] | None = None,
        hostname: str | None = None,
        clock: Clock = utc_now,
        sleep: Callable[[float], None] | None = None,
        jitter: Callable[[], float] = random.random,
        max_tries: int = MAX_TRIES_PER_EVENT,
        retry_interval: float = RETRY_INTERVAL,
        queue_size: int = MAX_QUEUED_EVENTS,
        raise_when_full: bool = False,
        dedupe: int = 10_000,
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
        self._resource_version = resource_version or (lambda t: str(t.version))
        self.api_versions = {**API_VERSIONS, **(api_versions or {})}
        self.hostname = hostname if hostname is not None else socket.gethostname()
        self.clock = clock
        self._stopping = threading.Event()
        self.counters = Counters()
        self.correlator = Correlator(
            sink,
            clock=clock,
            sleep=sleep if sleep is not None else self._interruptible_sleep,
            jitter=jitter,
            max_tries=max_tries,
            retry_interval=retry_interval,
            counters=self.counters,
            logger=logger,
            cancelled=self._stopping.is_set,
        )
        self.raise_when_full = raise_when_full
        self.timers = timers
        self._queue: queue.Queue[object] = queue.Queue(maxsize=queue_size)
        self._seen: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._dedupe = dedupe
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._pending = 0
        self._last_nanos = 0
        self._closed = False
        self._worker: threading.Thread | None = None
        if start:
            self.start()

    @classmethod
    def for_api(
        cls,
        api: Any = None,
        *,
        request_timeout: float | tuple[float, float] | None = 10.0,
        **options: Any,
    ) -> KubernetesEmitter:
        """An emitter sending through :class:`ApiEventSink` (``api``: an ``EventsV1Api``, an
        ``ApiClient``, or ``None`` for the loaded default configuration)."""
        return cls(ApiEventSink(api, request_timeout=request_timeout), **options)

    # -- the Emitter protocol ---------------------------------------------------------------
    def emit(self, transition: Transition) -> None:
        """Build the Event for ``transition`` and enqueue it; never waits for the API."""
        t = transition
        # an action event has no id and may repeat: it is correlated like any Event
        tid = "" if t.action else t.id
        with self._lock:
            if self._closed:
                raise RuntimeError("KubernetesEmitter is closed")
            if tid and tid in self._seen:
                self._seen.move_to_end(tid)
                self.counters.add("duplicates")
                return
        regarding = ObjectReference(
            kind=t.ref.kind,
            name=t.ref.name,
            namespace=t.ref.namespace,
            uid=t.ref.uid,
            api_version=self.api_versions.get(t.ref.kind, ""),
            resource_version=self._resource_version(t),
        )
        queued = self._enqueue(regarding, t.type.value, t.reason, t.message, self._controller(t))
        if queued and tid:
            with self._lock:
                self._seen[tid] = None
                while len(self._seen) > self._dedupe:
                    self._seen.popitem(last=False)

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
        was queued."""
        with self._lock:
            if self._closed:
                raise RuntimeError("KubernetesEmitter is closed")
        return self._enqueue(regarding, type, reason, note, controller, action, related)

    def _enqueue(
        self,
        regarding: ObjectReference,
        type: str,
        reason: str,
        note: str,
        controller: str,
        action: str | None = None,
        related: ObjectReference | None = None,
    ) -> bool:
        now = self.clock()
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
            return False
        with self._lock:
            try:
                self._queue.put_nowait(event)
            except queue.Full:
                self.counters.add("dropped_queue_full")
                if self.raise_when_full:
                    raise QueueFull(f"{self._queue.maxsize} events queued") from None
                return False
            self._pending += 1
        self.counters.add("enqueued")
        return True

    # -- the worker ---------------------------------------------------------------------------
    def start(self) -> None:
        """Start the worker thread (done at construction unless ``start=False``)."""
        with self._lock:
            if self._worker is not None or self._closed:
                return
            self._worker = threading.Thread(
                target=self._run, name="lifecycle-k8s-events", daemon=True
            )
            self._worker.start()

    def _run(self) -> None:
        while True:
            try:
                item = self._queue.get(timeout=self._timer_wait())
            except queue.Empty:
                self._run_timers()
                continue
            if item is _STOP:
                return
            try:
                assert isinstance(item, Event)
                if self._stopping.is_set():  # closing after the drain timed out
                    self.counters.add("dropped_on_close")
                else:
                    self.correlator.record(item)
                    self._run_timers()
            except Exception as e:  # the worker must outlive a broken sink
                self.correlator.log.error("event worker failed", error=redact(repr(e)))
            finally:
                with self._lock:
                    self._pending -= 1
                    self._idle.notify_all()

    def _timer_wait(self) -> float | None:
        if not self.timers:
            return None
        wait = (self.correlator.next_due - self.clock()).total_seconds()
        return min(max(wait, 0.0), 60.0)

    def _run_timers(self) -> None:
        if self.timers and not self._stopping.is_set():
            try:
                self.correlator.tick()
            except Exception as e:
                self.correlator.log.error("event timers failed", error=redact(repr(e)))

    def _interruptible_sleep(self, seconds: float) -> None:
        self._stopping.wait(seconds)

    def tick(self) -> None:
        """Run the finish/refresh timers now if they are due (on the caller's thread)."""
        self.correlator.tick()

    def flush(self, timeout: float | None = 5.0) -> bool:
        """Wait until every queued Event has been handled; False if ``timeout`` ran out."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Stop accepting Events, give the queue ``timeout`` seconds to drain, then stop the
        worker (a retry sleeping at that moment gives up) and join it."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            worker = self._worker
        if worker is None:
            return
        self.flush(timeout)
        self._stopping.set()
        while True:
            try:
                self._queue.put(_STOP, timeout=0.05)
                break
            except queue.Full:  # undrained: make room for the stop marker
                try:
                    self._queue.get_nowait()
                    self.counters.add("dropped_on_close")
                    with self._lock:
                        self._pending -= 1
                except queue.Empty:
                    pass
        worker.join(timeout)

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
        return self._controller(transition)
