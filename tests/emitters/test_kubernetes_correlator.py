"""The correlator reproduces client-go's events/v1 broadcaster rule by rule.

Each test drives a manual clock and an in-memory API (``MemoryEventSink``); nothing sleeps.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import attrs
import pytest

from lifecycle import EventType, ObjectRef, Transition
from lifecycle.emitters.kubernetes import (
    FINISH_TIME,
    MAX_TRIES_PER_EVENT,
    REFRESH_TIME,
    Correlator,
    EmitterStats,
    Event,
    EventCollector,
    EventRow,
    KubernetesEmitter,
    ManualClock,
    MemoryEventSink,
    NotFound,
    ObjectReference,
    Rejected,
    RequestConstructionError,
    build_event,
)

EPOCH = datetime(2026, 11, 30, 10, 0, 0, tzinfo=UTC)
POD = ObjectReference(
    kind="Pod",
    name="trainer-0",
    namespace="ml",
    uid="pod-a",
    api_version="v1",
    resource_version="3",
)


class Harness:
    """A correlator over an in-memory API, a manual clock and a recorded sleep."""

    def __init__(self, max_tries: int = MAX_TRIES_PER_EVENT) -> None:
        self.clock = ManualClock(EPOCH)
        self.api = MemoryEventSink()
        self.sleeps: list[float] = []
        self.correlator = Correlator(
            self.api,
            clock=self.clock,
            sleep=self.sleeps.append,
            jitter=lambda: 0.5,
            max_tries=max_tries,
        )
        self.collector = EventCollector(self.api.events)
        self._nanos = 0

    def event(
        self,
        reason: str = "Running",
        note: str = "running",
        *,
        regarding: ObjectReference = POD,
        type: str = "Normal",
        controller: str = "pod-controller",
        instance: str | None = None,
        action: str | None = None,
        related: ObjectReference | None = None,
    ) -> Event:
        self._nanos += 1
        return build_event(
            regarding,
            type=type,
            reason=reason,
            note=note,
            reporting_controller=controller,
            reporting_instance=instance or f"{controller}-host",
            now=self.clock(),
            name_nanos=self._nanos,
            action=action,
            related=related,
        )

    def emit(self, *args: object, **kw: object) -> Event:
        event = self.event(*args, **kw)  # type: ignore[arg-type]
        self.correlator.record(event)
        return event

    def rows(self, uid: str = "pod-a") -> list[tuple[object, ...]]:
        return [r.as_tuple() for r in self.collector.rows(uid)]

    @property
    def stats(self) -> EmitterStats:
        return self.correlator.counters.snapshot()


@pytest.fixture
def h() -> Harness:
    return Harness()


def row(note: str = "running", count: int = 1, reason: str = "Running") -> tuple[object, ...]:
    return ("Normal", reason, note, "Pod", "trainer-0", count)


# -- 1. a new key is cached and created --------------------------------------------------------
def test_a_new_key_is_cached_and_created_with_count_1(h: Harness) -> None:
    event = h.emit()
    assert h.api.calls == [("create", event.name, event.to_body())]
    assert h.rows() == [row()]
    assert h.correlator.cached() == [event]
    assert h.stats.created == 1


# -- 2. the second emission of a cached key patches series count 2 -----------------------------
def test_the_second_emission_patches_the_first_event_to_count_2(h: Harness) -> None:
    first = h.emit(note="first note")
    h.clock.advance(5)
    second = h.emit(note="second note")
    assert h.api.verbs() == ["create", "patch"]
    _, name, patch = h.api.calls[1]
    assert name == first.name != second.name
    assert patch == {"series": {"count": 2, "lastObservedTime": "2026-11-30T10:00:05.000000Z"}}
    # the row keeps the first note: the note is not part of the key
    assert h.rows() == [row("first note", 2)]
    [cached] = h.correlator.cached()
    assert cached.name == first.name
    assert cached.series is not None
    assert cached.series.count == 2
    assert h.stats.patched == 1


# -- 3. later emissions count in memory only ---------------------------------------------------
def test_later_emissions_count_in_memory_only(h: Harness) -> None:
    for _ in range(5):
        h.emit()
        h.clock.advance(1)
    assert h.api.verbs() == ["create", "patch"]
    assert h.rows() == [row(count=2)]  # the API-visible count is coarse
    [cached] = h.correlator.cached()
    assert cached.series is not None
    assert cached.series.count == 5
    assert cached.series.last_observed_time == EPOCH + timedelta(seconds=4)
    assert h.stats.counted_in_memory == 3


def test_a_naive_per_poll_emitter_would_make_one_row_patched_to_count_2(h: Harness) -> None:
    """What the flip-only runner avoids: the same transition emitted on every 15 s poll at
    one resourceVersion is one row patched to count 2, then counted in memory."""
    for _ in range(4):
        h.emit("Running", "Workload W is running")
        h.clock.advance(15)
    assert h.rows() == [row("Workload W is running", 2)]
    assert h.correlator.cached()[0].count == 4
    h.clock.advance(REFRESH_TIME)
    h.correlator.tick()
    assert h.rows() == [row("Workload W is running", 4)]


# -- the key -----------------------------------------------------------------------------------
def test_a_status_write_between_two_emissions_makes_two_rows_with_count_1(h: Harness) -> None:
    h.emit("Running", "same")
    h.emit("Running", "same", regarding=attrs.evolve(POD, resource_version="4"))
    assert h.api.verbs() == ["create", "create"]
    assert h.rows() == [row("same"), row("same")]


@pytest.mark.parametrize(
    "change",
    [
        {"type": "Warning"},
        {"action": "OtherAction"},
        {"reason": "Other"},
        {"controller": "other-controller"},
        {"instance": "pod-controller-other-host"},
        {"regarding": attrs.evolve(POD, resource_version="4")},
        {"regarding": attrs.evolve(POD, uid="pod-b")},
        {"related": ObjectReference(kind="Node", name="n1", uid="n-1")},
    ],
    ids=lambda c: next(iter(c)),
)
def test_every_key_component_separates_events(h: Harness, change: dict[str, object]) -> None:
    h.emit()
    h.emit(**change)
    assert h.api.verbs() == ["create", "create"]
    assert len(h.correlator) == 2


def test_the_note_is_not_part_of_the_key(h: Harness) -> None:
    h.emit(note="Workload W is pending: image pull")
    h.emit(note="Workload W is pending: scheduling")
    assert h.api.verbs() == ["create", "patch"]
    assert len(h.correlator) == 1


# -- a patch that finds nothing creates --------------------------------------------------------
def test_a_patch_of_an_evicted_event_creates_it_with_its_series(h: Harness) -> None:
    first = h.emit(note="first")
    h.api.evict(first.name)  # the API server's TTL
    h.emit(note="second")
    assert h.api.verbs() == ["create", "patch", "create"]
    name, body = h.api.calls[2][1:]
    assert name == first.name
    assert body["note"] == "first"
    assert body["series"]["count"] == 2
    assert h.rows() == [row("first", 2)]
    assert h.stats.recreated == 1


def test_a_dropped_create_leaves_the_key_cached_so_the_repeat_creates_a_series(
    h: Harness,
) -> None:
    """client-go caches before it creates: a rejected create is still correlated."""
    h.api.fail_next(Rejected("invalid", 422, "Invalid"))
    h.emit()
    assert h.rows() == []
    h.emit()
    assert h.api.verbs() == ["create", "patch", "create"]
    assert h.rows() == [row(count=2)]
    assert (h.stats.rejected, h.stats.recreated) == (1, 1)


# -- the refresh timer -------------------------------------------------------------------------
def test_every_30_minutes_cached_series_are_re_patched(h: Harness) -> None:
    h.emit(regarding=attrs.evolve(POD, uid="single"))
    for _ in range(3):
        h.emit()
    assert h.rows() == [row(count=2)]
    # keep the series alive (the finish timer would otherwise close it first)
    for _ in range(5):
        h.clock.advance(FINISH_TIME - timedelta(seconds=1))
        h.emit()
        h.correlator.tick()
    assert h.api.verbs() == ["create", "create", "patch"]  # no refresh yet
    h.clock.advance(REFRESH_TIME - 5 * (FINISH_TIME - timedelta(seconds=1)))
    h.correlator.tick()
    assert h.api.verbs()[-1] == "patch"
    assert h.rows() == [row(count=8)]
    assert h.rows("single") == [("Normal", "Running", "running", "Pod", "trainer-0", 1)]
    patches = h.api.verbs().count("patch")
    h.clock.advance(timedelta(minutes=1))
    h.correlator.tick()
    assert h.api.verbs().count("patch") == patches  # next refresh is 30 min after this one


def test_nothing_runs_before_the_timers_are_due(h: Harness) -> None:
    h.emit()
    h.emit()
    h.clock.advance(FINISH_TIME - timedelta(microseconds=1))
    h.correlator.tick()
    assert h.api.verbs() == ["create", "patch"]
    assert len(h.correlator) == 1
    assert h.correlator.next_due == EPOCH + FINISH_TIME


# -- the finish timer --------------------------------------------------------------------------
def test_an_idle_series_gets_a_final_patch_and_is_evicted(h: Harness) -> None:
    h.emit()
    for _ in range(3):
        h.emit()
    h.clock.advance(FINISH_TIME)  # idle exactly 6 min at the first finish: not yet
    h.correlator.tick()
    assert len(h.correlator) == 1
    h.clock.advance(FINISH_TIME)
    h.correlator.tick()
    assert h.api.verbs() == ["create", "patch", "patch"]
    assert h.rows() == [row(count=4)]
    assert len(h.correlator) == 0
    assert h.stats.evicted == 1
    # the key is forgotten: the next emission is a new row
    h.emit()
    assert h.api.verbs()[-1] == "create"
    assert h.rows() == [row(count=4), row()]


def test_a_series_closes_6_to_12_minutes_after_its_last_emission(h: Harness) -> None:
    h.emit()
    h.clock.advance(timedelta(minutes=1))
    h.emit()  # last emission at 1 min
    h.clock.advance(timedelta(minutes=5))  # finish at 6 min: idle 5 min
    h.correlator.tick()
    assert len(h.correlator) == 1
    h.clock.advance(FINISH_TIME)  # finish at 12 min: idle 11 min
    h.correlator.tick()
    assert len(h.correlator) == 0


def test_an_old_singleton_is_evicted_without_a_request(h: Harness) -> None:
    h.emit(regarding=attrs.evolve(POD, uid="old"))
    h.clock.advance(timedelta(minutes=3))
    h.emit(regarding=attrs.evolve(POD, uid="young"))
    h.clock.advance(timedelta(minutes=3, microseconds=1))  # 6 min: "old" is 6 min + 1 µs
    h.correlator.tick()
    assert [e.regarding.uid for e in h.correlator.cached()] == ["young"]
    assert h.api.verbs() == ["create", "create"]
    # the evicted singleton's repeat is a new row, count 1
    h.emit(regarding=attrs.evolve(POD, uid="old"))
    assert h.rows("old") == [row(), row()]


def test_a_final_patch_that_should_be_retried_keeps_the_series_cached(h: Harness) -> None:
    h.emit()
    h.emit()
    h.clock.advance(2 * FINISH_TIME)
    h.api.fail_next(ConnectionResetError("reset"))
    h.correlator.tick()
    assert len(h.correlator) == 1
    assert h.sleeps == []  # timers try once, they do not sleep
    h.clock.advance(FINISH_TIME)
    h.correlator.tick()
    assert len(h.correlator) == 0
    assert h.api.verbs() == ["create", "patch", "patch", "patch"]


def test_a_refresh_or_finish_rejection_still_evicts(h: Harness) -> None:
    h.emit()
    h.emit()
    h.clock.advance(2 * FINISH_TIME)
    h.api.fail_next(Rejected("invalid", 422, "Invalid"))  # 401/403 heal: retried (ADR 0142)
    h.correlator.finish()
    assert len(h.correlator) == 0


# -- sending: retries and drops ----------------------------------------------------------------
def test_transport_errors_are_retried_10_to_12_5_seconds_apart(h: Harness) -> None:
    h.api.fail_next(ConnectionRefusedError("refused"), TimeoutError("timed out"))
    h.emit()
    assert h.api.verbs() == ["create"] * 3
    assert h.sleeps == [11.25, 11.25]  # wait.Jitter(10s, 0.25) with rand 0.5
    assert h.rows() == [row()]
    assert (h.stats.transport_errors, h.stats.created) == (2, 1)


def test_the_jitter_spans_10_to_12_5_seconds() -> None:
    for j, expected in ((0.0, 10.0), (0.999, 12.4975)):
        h = Harness()
        h.correlator.jitter = lambda j=j: j  # type: ignore[misc]
        h.api.fail_next(OSError("down"))
        h.emit()
        assert h.sleeps == [pytest.approx(expected)]


def test_a_send_gives_up_after_12_tries(h: Harness) -> None:
    h.api.fail_next(*(OSError(f"down {i}") for i in range(20)))
    h.emit()
    assert h.api.verbs() == ["create"] * 12
    assert len(h.sleeps) == 11
    assert (h.stats.transport_errors, h.stats.gave_up) == (12, 1)


@pytest.mark.parametrize(
    ("error", "counter"),
    [
        (Rejected("invalid", 422, "Invalid"), "rejected"),
        (NotFound("namespace gone"), "gone"),  # 401/403 heal: test_kubernetes_refusals
    ],
    ids=["invalid", "namespace gone"],
)
def test_server_rejections_are_dropped_and_counted(
    h: Harness, error: Exception, counter: str
) -> None:
    h.api.fail_next(error)
    h.emit()
    assert h.api.verbs() == ["create"]
    assert h.sleeps == []
    assert getattr(h.stats, counter) == 1


def test_a_construction_error_is_dropped(h: Harness) -> None:
    h.api.fail_next(RequestConstructionError("bad body"))
    h.emit()
    assert h.api.verbs() == ["create"]
    assert h.stats.invalid == 1


def test_already_exists_when_creating_a_series_is_retried(h: Harness) -> None:
    h.emit()
    h.api.fail_next(NotFound("gone"), Rejected("exists", 409, "AlreadyExists"))
    h.emit()
    # patch (404) -> create (409, retry) -> patch (200)
    assert h.api.verbs() == ["create", "patch", "create", "patch"]
    assert h.sleeps == [11.25]
    assert h.rows() == [row(count=2)]


def test_a_patch_transport_error_is_retried_as_a_patch(h: Harness) -> None:
    h.emit()
    h.api.fail_next(BrokenPipeError("pipe"))
    h.emit()
    assert h.api.verbs() == ["create", "patch", "patch"]
    assert h.rows() == [row(count=2)]


def test_a_cancelled_correlator_stops_retrying() -> None:
    h = Harness()
    cancelled: list[float] = []
    h.correlator.cancelled = lambda: bool(cancelled)
    h.correlator.sleep = lambda s: cancelled.append(s)
    h.api.fail_next(*(OSError("down") for _ in range(12)))
    h.emit()
    assert h.api.verbs() == ["create"]
    assert h.stats.gave_up == 1


def test_max_tries_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_tries"):
        Correlator(MemoryEventSink(), max_tries=0)


def test_rows_project_like_the_harness(h: Harness) -> None:
    h.emit("WorkloadFailed", "Workload W failed: oom", type="Warning")
    h.emit("WorkloadCreated", "Workload W created and is starting")
    h.emit("WorkloadCreated", "again")
    assert h.collector.rows("pod-a") == [
        EventRow(
            "Normal", "WorkloadCreated", "Workload W created and is starting", "Pod", "trainer-0", 2
        ),
        EventRow("Warning", "WorkloadFailed", "Workload W failed: oom", "Pod", "trainer-0", 1),
    ]
    assert h.collector.rows("someone-else") == []
    assert len(h.collector.rows()) == 2


# -- the emitter's worker drives the same correlator -------------------------------------------
def _transition(reason: str, n: int) -> Transition:
    ref = ObjectRef("Pod", "ml", "trainer-0", "pod-a")
    return Transition(ref, "pod", "", reason, reason, EventType.NORMAL, reason, 3, EPOCH, n)


def test_the_worker_runs_due_timers_after_each_event() -> None:
    clock = ManualClock(EPOCH)
    api = MemoryEventSink()
    with KubernetesEmitter(api, clock=clock, hostname="h", sleep=lambda s: None) as emitter:
        emitter.emit(_transition("Running", 0)._replace(action=True))
        emitter.emit(_transition("Running", 1)._replace(action=True))
        assert emitter.flush()
        clock.advance(timedelta(minutes=13))
        emitter.emit(_transition("Failed", 2))
        assert emitter.flush()
        # the new Event is created and the finish timer closes the idle series (two keys:
        # their requests go out side by side)
        assert api.verbs()[:2] == ["create", "patch"]
        [failed] = emitter.correlator.cached()
        assert failed.reason == "Failed"
        series_name = api.calls[1][1]
        assert sorted((verb, name) for verb, name, _ in api.calls[2:]) == [
            ("create", failed.name),
            ("patch", series_name),
        ]
    assert emitter.dispatcher.threads
    assert not any(t.is_alive() for t in emitter.dispatcher.threads)


def test_without_worker_timers_the_host_ticks() -> None:
    clock = ManualClock(EPOCH)
    api = MemoryEventSink()
    with KubernetesEmitter(api, clock=clock, hostname="h", timers=False) as emitter:
        emitter.emit(_transition("Running", 0))
        assert emitter.flush()
        clock.advance(timedelta(minutes=13))
        emitter.emit(_transition("Failed", 1))
        assert emitter.flush()
        assert len(emitter.correlator) == 2
        emitter.tick()
        assert [e.reason for e in emitter.correlator.cached()] == ["Failed"]
        assert emitter.stats.evicted == 1
