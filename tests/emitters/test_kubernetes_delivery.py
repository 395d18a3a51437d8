"""Delivery of Kubernetes Events: one object's failing or slow Events never delay another's,
one key's requests stay in order, waiting sends are bounded, and the cached copy is the API
server's reply unless the series moved while the request was in flight.

Sinks here are in memory and record when each request arrived; retry intervals are short
(tens of milliseconds) so the tests measure real waiting without being slow.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest

from lifecycle import EventType, ObjectRef, Transition
from lifecycle.emitters.kubernetes import (
    FINISH_TIME,
    REFRESH_TIME,
    Correlator,
    Event,
    EventSeries,
    KubernetesEmitter,
    ManualClock,
    MemoryEventSink,
    ObjectReference,
    build_event,
)

EPOCH = datetime(2026, 11, 30, 10, 0, 0, tzinfo=UTC)
A = ObjectRef("Pod", "ml", "stuck-0", "pod-a")
B = ObjectRef("Pod", "ml", "healthy-0", "pod-b")


def transition(ref: ObjectRef, reason: str = "Running", *, version: int = 3) -> Transition:
    return Transition(
        ref, "pod", "Initializing", reason, reason, EventType.NORMAL, reason, version, EPOCH
    )


def action(ref: ObjectRef, reason: str = "Probe") -> Transition:
    return transition(ref, reason)._replace(action=True)


class ScriptedSink(MemoryEventSink):
    """An in-memory API whose requests for some objects fail or stall, and which records
    when each request arrived (``time.monotonic``)."""

    def __init__(self) -> None:
        super().__init__()
        self.failing: set[str] = set()  # regarding names whose requests fail (transport)
        self.failures: dict[str, int] = {}  # regarding names whose next requests fail
        self.stalled: dict[str, threading.Event] = {}  # regarding names held until set
        self.arrivals: list[tuple[str, str, float]] = []  # (verb, regarding name, when)
        self._arrival_lock = threading.Lock()

    def _arrive(self, verb: str, event: Event) -> None:
        with self._arrival_lock:
            self.arrivals.append((verb, event.regarding.name, time.monotonic()))
        gate = self.stalled.get(event.regarding.name)
        if gate is not None:
            gate.wait(10)
        with self._arrival_lock:
            left = self.failures.get(event.regarding.name, 0)
            self.failures[event.regarding.name] = max(left - 1, 0)
        if event.regarding.name in self.failing or left:
            raise ConnectionResetError(f"reset while sending {event.name}")

    def create(self, event: Event) -> Event:
        self._arrive("create", event)
        return super().create(event)

    def patch(self, event: Event, patch: Mapping[str, Any]) -> Event:
        self._arrive("patch", event)
        return super().patch(event, patch)

    def first(self, verb: str, name: str) -> float:
        return next(t for v, n, t in self.arrivals if (v, n) == (verb, name))

    def verbs_for(self, name: str) -> list[str]:
        return [v for v, n, _ in self.arrivals if n == name]


@pytest.fixture
def emitters() -> Any:
    made: list[KubernetesEmitter] = []

    def make(sink: MemoryEventSink, **kw: Any) -> KubernetesEmitter:
        kw.setdefault("clock", ManualClock(EPOCH))
        kw.setdefault("hostname", "node-a")
        kw.setdefault("timers", False)
        kw.setdefault("jitter", lambda: 0.0)
        emitter = KubernetesEmitter(sink, **kw)
        made.append(emitter)
        return emitter

    yield make
    for emitter in made:
        emitter.close(timeout=2.0)
        for thread in emitter.dispatcher.threads:
            thread.join(5)
            assert not thread.is_alive()


# -- no head-of-line blocking -------------------------------------------------------------------
@pytest.mark.parametrize("workers", [1, 8])
def test_a_failing_object_does_not_delay_another_objects_event(
    emitters: Callable[..., KubernetesEmitter], workers: int
) -> None:
    """A's requests fail and are retried every 50 ms (12 tries: about 0.55 s); B's Event,
    emitted right after A's, is created at once, even with one worker: a send waiting for
    its retry is parked and holds no worker."""
    sink = ScriptedSink()
    sink.failing.add("stuck-0")
    emitter = emitters(sink, retry_interval=0.05, workers=workers)
    emitter.emit(transition(A))
    emitted_b = time.monotonic()
    emitter.emit(transition(B))
    assert emitter.flush(10)
    latency_b = sink.first("create", "healthy-0") - emitted_b
    a_tries = sink.verbs_for("stuck-0")
    assert a_tries == ["create"] * 12
    last_a = max(t for _, n, t in sink.arrivals if n == "stuck-0")
    assert latency_b < 0.2, f"B waited {latency_b:.3f} s behind A's retries"
    assert sink.first("create", "healthy-0") < last_a  # B landed while A was still retrying
    stats = emitter.stats
    assert (stats.created, stats.gave_up, stats.transport_errors) == (1, 1, 12)


def test_a_slow_object_does_not_delay_another_objects_event(
    emitters: Callable[..., KubernetesEmitter],
) -> None:
    """A's request hangs (a slow API server for that object); B's goes out on another
    worker."""
    sink = ScriptedSink()
    gate = sink.stalled["stuck-0"] = threading.Event()
    emitter = emitters(sink)
    emitter.emit(transition(A))
    emitted_b = time.monotonic()
    emitter.emit(transition(B))
    deadline = time.monotonic() + 5
    while not any(n == "healthy-0" for _, n, _ in sink.arrivals) and time.monotonic() < deadline:
        time.sleep(0.005)
    assert sink.first("create", "healthy-0") - emitted_b < 0.2
    assert not gate.is_set()
    gate.set()
    assert emitter.flush(5)
    assert emitter.stats.created == 2


def test_a_series_patch_never_overtakes_its_create(
    emitters: Callable[..., KubernetesEmitter],
) -> None:
    """The create of A's Event fails twice; the repeat (the patch that makes it a series)
    waits in A's lane, so the API sees create, create, create, patch, as client-go would."""
    sink = ScriptedSink()
    sink.failures["stuck-0"] = 2
    emitter = emitters(sink, retry_interval=0.02)
    emitter.emit(action(A))
    emitter.emit(action(A))  # same key: the series patch (count 2)
    emitter.emit(action(B))
    assert emitter.flush(5)
    assert sink.verbs_for("stuck-0") == ["create", "create", "create", "patch"]
    [a_event] = [e for e in sink.events() if e["regarding"]["name"] == "stuck-0"]
    assert a_event["series"]["count"] == 2
    stats = emitter.stats
    assert (stats.created, stats.patched, stats.rejected, stats.recreated) == (2, 1, 0, 0)


def test_waiting_sends_are_bounded_and_an_overflow_is_logged(
    emitters: Callable[..., KubernetesEmitter], caplog: pytest.LogCaptureFixture
) -> None:
    sink = ScriptedSink()
    gates = {}
    for n in range(20):
        gates[n] = sink.stalled[f"pod-{n}"] = threading.Event()
    emitter = emitters(sink, workers=2, queue_size=5)
    with caplog.at_level(logging.ERROR, logger="lifecycle"):
        for n in range(20):
            emitter.emit(transition(ObjectRef("Pod", "ml", f"pod-{n}", f"uid-{n}")))
            if n == 1:  # both workers have taken a send and hang in it
                deadline = time.monotonic() + 5
                while len(sink.arrivals) < 2 and time.monotonic() < deadline:
                    time.sleep(0.005)
    # 2 in flight, 5 waiting, the other 13 dropped and counted, each with a log line
    assert emitter.stats.dropped_queue_full == 13
    assert len(emitter.dispatcher.queued()) == 5
    dropped = [r for r in caplog.records if "too many queued events" in r.getMessage()]
    assert len(dropped) == 13
    for gate in gates.values():
        gate.set()
    assert emitter.flush(5)
    assert emitter.stats.created == 7


def test_close_gives_up_a_parked_retry_and_drops_what_waits(
    emitters: Callable[..., KubernetesEmitter],
) -> None:
    sink = ScriptedSink()
    sink.failing.add("stuck-0")
    emitter = emitters(sink, retry_interval=30.0, workers=1)
    emitter.emit(transition(A))
    deadline = time.monotonic() + 5
    while emitter.stats.transport_errors == 0 and time.monotonic() < deadline:
        time.sleep(0.005)
    started = time.monotonic()
    emitter.close(timeout=0.2)
    assert time.monotonic() - started < 1.5
    assert emitter.stats.gave_up == 1
    assert not any(t.is_alive() for t in emitter.dispatcher.threads)


def test_timer_sends_go_through_the_lanes_without_holding_the_emitter(
    emitters: Callable[..., KubernetesEmitter],
) -> None:
    """A final patch that hangs does not stop a new Event from being emitted and sent."""
    sink = ScriptedSink()
    clock = ManualClock(EPOCH)
    emitter = emitters(sink, clock=clock, timers=True)
    emitter.emit(action(A))
    emitter.emit(action(A))
    assert emitter.flush(5)
    gate = sink.stalled["stuck-0"] = threading.Event()
    clock.advance(2 * FINISH_TIME)
    started = time.monotonic()
    emitter.emit(transition(B))  # runs the due timers: A's final patch is queued, and hangs
    assert time.monotonic() - started < 0.1
    deadline = time.monotonic() + 5
    while not any(n == "healthy-0" for _, n, _ in sink.arrivals) and time.monotonic() < deadline:
        time.sleep(0.005)
    assert sink.verbs_for("healthy-0") == ["create"]
    gate.set()
    assert emitter.flush(5)
    assert sink.verbs_for("stuck-0") == ["create", "patch", "patch"]
    assert [e.regarding.name for e in emitter.correlator.cached()] == ["healthy-0"]


# -- the cached copy is the server's reply ------------------------------------------------------
POD = ObjectReference(kind="Pod", name="trainer-0", namespace="ml", uid="pod-a", api_version="v1")


class ReplyingSink(MemoryEventSink):
    """Answers a patch with what another writer left on the server (count + 100), and can
    hold a patch until released."""

    def __init__(self) -> None:
        super().__init__()
        self.hold: threading.Event | None = None
        self.holding = threading.Event()

    def patch(self, event: Event, patch: Mapping[str, Any]) -> Event:
        if self.hold is not None:
            self.holding.set()
            self.hold.wait(10)
        stored = super().patch(event, patch)
        assert stored.series is not None
        return attrs.evolve(stored, series=EventSeries(stored.series.count + 100, EPOCH))


def _event(clock: ManualClock, nanos: int) -> Event:
    return build_event(
        POD,
        type="Normal",
        reason="Probe",
        note="probe failed",
        reporting_controller="pod-controller",
        reporting_instance="pod-controller-h",
        now=clock(),
        name_nanos=nanos,
    )


def test_a_refresh_keeps_the_servers_reply_as_the_cached_copy() -> None:
    clock = ManualClock(EPOCH)
    sink = ReplyingSink()
    correlator = Correlator(sink, clock=clock, sleep=lambda s: None)
    for n in range(3):
        correlator.record(_event(clock, n + 1))
    # the series patch of count 2 was answered 102: that reply was kept, then counted on
    [before] = correlator.cached()
    assert before.series is not None
    assert before.series.count == 103
    clock.advance(timedelta(minutes=5))
    correlator.record(_event(clock, 9))  # 104
    clock.advance(REFRESH_TIME - timedelta(minutes=5))
    correlator.refresh()
    [after] = correlator.cached()
    assert after.series is not None
    assert after.series.count == 204  # the reply to the refresh patch of 104
    assert after.name == before.name


def test_a_series_that_moved_while_the_refresh_was_in_flight_keeps_its_count() -> None:
    clock = ManualClock(EPOCH)
    sink = ReplyingSink()
    correlator = Correlator(sink, clock=clock, sleep=lambda s: None)
    correlator.record(_event(clock, 1))
    correlator.record(_event(clock, 2))  # series: count 2, the reply says 102
    [cached] = correlator.cached()
    assert cached.series is not None
    assert cached.series.count == 102
    sink.hold = threading.Event()
    refresh = threading.Thread(target=correlator.refresh)
    refresh.start()
    assert sink.holding.wait(5)
    # the refresh's patch is in flight; correlation is not held up by it
    started = time.monotonic()
    assert correlator.correlate(_event(clock, 3)) is None  # counted in memory: 103
    assert time.monotonic() - started < 0.5
    sink.hold.set()
    refresh.join(5)
    assert not refresh.is_alive()
    [moved] = correlator.cached()
    assert moved.series is not None
    assert moved.series.count == 103  # ours, not the reply (202) of a copy that moved on
