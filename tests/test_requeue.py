"""Requeue from the table (ADR 0149): every timer row declares its deadline, a machine says
when a status next needs a ``Tick``, and a host that ticks only then sees every timer-driven
change a host ticking every second sees, at the same virtual times."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

import attrs
import hypothesis
import pytest
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from lifecycle import (
    AsyncRunner,
    EventType,
    Machine,
    ObjectRef,
    Observation,
    Row,
    Runner,
    Table,
    TableError,
    Tick,
    ignore,
)
from lifecycle.machines import CERTIFICATION, JOB, NODECLAIM, RESTORE, WORKFLOW, job
from lifecycle.machines.job import Submitted, WorkloadCreated, WorkloadRunning
from lifecycle.machines.restore import RestorePolicy
from lifecycle.tables import SAME, no_timer
from lifecycle.testing import (
    EPOCH,
    NODECLAIM_SAMPLES,
    MemoryStore,
    check_next_tick,
    check_requeue,
    default_ref,
    observation_sequences,
    row_paths,
)

from .machines.test_restore_runner import SAMPLES as RESTORE_SAMPLES
from .test_properties_workflow import CERTIFICATION_SAMPLES, JOB_SAMPLES, WORKFLOW_SAMPLES


def _with(samples: Mapping[str, Any], **changes: Any) -> dict[str, Any]:
    return {**samples, **changes}


# Durations of seconds, some not whole (a deadline between two ticks of the every-second host).
CASES: list[tuple[Machine[Any], dict[str, Any]]] = [
    (
        JOB,
        _with(
            JOB_SAMPLES,
            **{
                "Submitted.startup_timeout_s": [None, 7.0, 2.5],
                "Submitted.stall_threshold_s": [None, 5.0, 0.0],
                "Submitted.measurement_timeout_s": [9.0, 0.0, 3.5],
            },
        ),
    ),
    (
        WORKFLOW,
        _with(
            WORKFLOW_SAMPLES,
            **{
                "Submitted.drain_grace_s": [0.0, 6.0, 1.5],
                "Submitted.timeout_per_job_s": [None, 8.0],
            },
        ),
    ),
    (CERTIFICATION, _with(CERTIFICATION_SAMPLES, **{"Submitted.node_wait_s": [10.0, 4.5]})),
    (NODECLAIM, _with(NODECLAIM_SAMPLES, grace_seconds=[0.0, 5.0, 2.5])),
    (
        RESTORE,
        _with(
            RESTORE_SAMPLES,
            policy=[
                RestorePolicy(target_facts_deadline_seconds=6.0),
                RestorePolicy(target_facts_deadline_seconds=0.5),
            ],
        ),
    ),
]
IDS = [m.name for m, _ in CASES]
GAPS = st.sampled_from([0.0, 0.0, 0.5, 1.0, 2.0, 3.0, 5.0, 9.0])


def _ways() -> dict[str, list[tuple[Observation, ...]]]:
    """Ways into the timers the row search does not find (times are redrawn)."""
    from lifecycle.machines import workflow as wf

    at = EPOCH
    spec = Submitted(
        at=at,
        startup_timeout_s=7.0,
        stall_threshold_s=5.0,
        checkpoint=True,
        max_restarts=1,
        thresholds=(job.Threshold("goodput", ">= 0.9"),),
        measurement_timeout_s=4.5,
    )
    running = (spec, WorkloadCreated(at=at), WorkloadRunning(at=at))
    stepped = (*running, job.TrainingStepObserved(at=at, step=1))
    submitted = wf.Submitted(at=at, retry_failed_groups=1, drain_grace_s=6.0, timeout_per_job_s=8.0)
    launched = (
        submitted,
        wf.Partitioned(at=at, nodes=2, groups=2, nodes_per_job=1),
        wf.JobLaunched(at=at, group=0, job="a", uid="j0"),
        wf.JobLaunched(at=at, group=1, job="b", uid="j1"),
    )

    def report(group: int, state: str, **fields: Any) -> Observation:
        return wf.JobObserved(
            at=at, job="ab"[group], job_uid=f"j{group}", group=group, state=state, **fields
        )

    from lifecycle.machines import certification as cert

    waits = (
        cert.Submitted(at=at, categories=("nccl/v1",), node_wait_s=4.5),
        cert.NoSchedulableNodes(at=at),
    )
    return {
        "certification": [waits],
        "job": [
            running,
            stepped,
            (*stepped, job.WorkloadSucceeded(at=at)),
            (*running, job.WorkloadSucceeded(at=at)),
        ],
        "workflow": [
            launched,
            (*launched, report(0, "Failed", reason="WorkloadFailed")),
            (*launched, report(0, "InProgress", workload_start_time=at, workload_exists=True)),
            (*launched, report(0, "Succeeded"), report(1, "Failed", hardware_failed=True)),
        ],
    }


WAYS = _ways()


def timer_sequences(machine: Machine[Any], samples: dict[str, Any]) -> Any:
    """Observation sequences that reach the machine's timers: the way to a timer row that
    the row search found, retimed, with observations of every other way mixed in."""
    paths, _ = row_paths(machine, samples=samples)
    ways = [p.observations[:-1] for p in paths if p.row.deadline not in (None, no_timer)]
    ways += WAYS.get(machine.name, [])
    pool = [o for w in [*ways, *(p.observations for p in paths)] for o in w if not o.is_tick]
    assert ways, f"{machine.name}: no way to a timer row"
    assert pool

    @st.composite
    def build(draw: st.DrawFn) -> list[Observation]:
        listed = list(draw(st.sampled_from(ways)))
        for o in draw(st.lists(st.sampled_from(pool), max_size=6)):
            listed.insert(draw(st.integers(0, len(listed))), o)
        at, out = EPOCH, []
        for o in listed:
            at += timedelta(seconds=draw(GAPS))
            out.append(attrs.evolve(o, at=at))
        return out

    return st.one_of(
        build(), observation_sequences(machine, samples=samples, max_size=12, step=GAPS)
    )


# -- the property: ticking when due sees what ticking every second sees -----------------------
@pytest.mark.parametrize(("machine", "samples"), CASES, ids=IDS)
def test_a_host_ticking_when_due_sees_what_ticking_every_second_sees(
    machine: Machine[Any], samples: dict[str, Any]
) -> None:
    ticked: list[int] = []

    @hypothesis.settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(sequence=timer_sequences(machine, samples))
    def hosts_agree(sequence: list[Observation]) -> None:
        changes = check_requeue(machine, sequence, horizon=timedelta(seconds=15))
        ticked.append(sum(1 for c in changes if c.cause == "Tick"))

    hosts_agree()
    # the property is about timers: the generated sequences do reach them
    assert sum(ticked) > 0, f"{machine.name}: no Tick changed anything"


@pytest.mark.parametrize(("machine", "samples"), CASES, ids=IDS)
def test_each_status_on_the_way_to_a_timer_holds_to_its_next_tick(
    machine: Machine[Any], samples: dict[str, Any]
) -> None:
    """Each status on a way to a timer row holds to its next_tick, to the microsecond."""
    paths, _ = row_paths(machine, samples=samples)
    checked = 0
    for way in [*(p.observations for p in paths), *WAYS.get(machine.name, [])]:
        status = machine.initial(default_ref(machine))
        for obs in way:
            if not obs.is_tick:
                status = machine.apply(status, obs)
                checked += check_next_tick(machine, status, obs.at) is not None
    assert checked


# -- a wrong deadline is caught ----------------------------------------------------------------
def _late_stall(status: Any) -> datetime | None:
    found = job.stall_deadline(status)
    return None if found is None else found + timedelta(seconds=1)


def _early_stall(status: Any) -> datetime | None:
    found = job.stall_deadline(status)
    return None if found is None else found - timedelta(microseconds=1)


@pytest.mark.parametrize("wrong", [_late_stall, _early_stall], ids=["late", "early"])
def test_the_property_fails_when_a_deadline_is_wrong(wrong: Any) -> None:
    """The Job's stall deadline a second late, or a microsecond early, is found."""
    rows = tuple(
        attrs.evolve(r, deadline=wrong) if r.deadline is job.stall_deadline else r
        for r in JOB.table.rows
    )
    table = JOB.table
    broken_table = Table(
        "job",
        states=table.states,
        initial=table.initial,
        terminal=table.terminal,
        observations=table.observations,
        rows=rows,
        context=table.context,
    )

    class Broken(type(JOB)):  # type: ignore[misc]
        pass

    Broken.table = broken_table
    broken = Broken()
    stalled = [
        Submitted(at=EPOCH, stall_threshold_s=5.0),
        WorkloadCreated(at=EPOCH),
        WorkloadRunning(at=EPOCH),
        job.TrainingStepObserved(at=EPOCH + timedelta(seconds=1), step=1),
    ]
    check_requeue(JOB, stalled)  # the shipped deadline holds on this very sequence
    with pytest.raises(AssertionError):
        check_requeue(broken, stalled)


# -- the declaration ---------------------------------------------------------------------------
@attrs.frozen(slots=True)
class KettleStatus:
    state: str = "cold"
    reason: str = ""
    message: str = ""
    since: datetime | None = None


@attrs.frozen(slots=True, kw_only=True)
class Boil(Observation):
    pass


def boiled(status: KettleStatus, obs: Observation) -> bool:
    return status.since is not None and obs.at - status.since >= timedelta(seconds=90)


def boil_deadline(status: KettleStatus) -> datetime | None:
    return None if status.since is None else status.since + timedelta(seconds=90)


def _heat(status: KettleStatus, obs: Observation, row: Row) -> KettleStatus:
    return attrs.evolve(status, state="heating", since=obs.at)


def _kettle_rows(deadline: Any) -> list[Row]:
    return [
        Row("cold", Boil, to="heating", event=EventType.NORMAL, effect=_heat),
        Row("heating", Tick, to="boiled", event=EventType.NORMAL, guard=boiled, deadline=deadline),
        ignore("heating", Tick, "still heating"),
        ignore(("cold", "boiled"), Tick, "no timer"),
    ]


def _kettle(deadline: Any) -> Machine[Any]:
    class Kettle(Machine[KettleStatus]):
        name = "kettle"
        kind = "Kettle"
        status_type = KettleStatus
        table = Table(
            "kettle",
            states=("cold", "heating", "boiled"),
            initial="cold",
            terminal=("boiled",),
            observations=(Boil, Tick),
            rows=_kettle_rows(deadline),
        )

        def initial(self, ref: ObjectRef) -> KettleStatus:
            return KettleStatus()

    return Kettle()


def test_a_users_machine_declares_its_deadline_beside_its_guard() -> None:
    kettle = _kettle(boil_deadline)
    heating = kettle.apply(KettleStatus(), Boil(at=EPOCH))
    assert kettle.next_tick(KettleStatus()) is None
    assert kettle.next_tick(heating) == EPOCH + timedelta(seconds=90)
    assert check_next_tick(kettle, heating, EPOCH) == EPOCH + timedelta(seconds=90)
    assert kettle.next_tick(kettle.apply(heating, Tick(at=EPOCH + timedelta(minutes=2)))) is None
    changes = check_requeue(kettle, [Boil(at=EPOCH)], horizon=timedelta(minutes=3))
    assert [(c.at - EPOCH, c.status.state) for c in changes] == [
        (timedelta(0), "heating"),
        (timedelta(seconds=90), "boiled"),
    ]


def test_a_timer_row_without_a_deadline_cannot_answer() -> None:
    kettle = _kettle(None)
    heating = kettle.apply(KettleStatus(), Boil(at=EPOCH))
    assert kettle.next_tick(KettleStatus()) is None  # no timer row from cold
    with pytest.raises(TableError, match=r"heating x Tick \[boiled\] -> boiled.*deadline"):
        kettle.next_tick(heating)


@pytest.mark.parametrize(
    "row",
    [
        Row("cold", Boil, to="heating", event=EventType.NORMAL, deadline=boil_deadline),
        Row("heating", Tick, to=SAME, ignore=True, deadline=boil_deadline),
        Row("heating", Tick, to="boiled", event=EventType.NORMAL, deadline="soon"),  # type: ignore[arg-type]
    ],
    ids=["not-a-tick", "ignore-row", "not-a-function"],
)
def test_a_deadline_only_on_a_timer_row_and_only_a_function(row: Row) -> None:
    with pytest.raises(TableError, match="deadline"):
        Table(
            "kettle",
            states=("cold", "heating", "boiled"),
            initial="cold",
            terminal=("boiled",),
            observations=(Boil, Tick),
            rows=[*_kettle_rows(boil_deadline), row],
        )


def _moved(by: timedelta) -> Any:
    def deadline(status: KettleStatus) -> datetime | None:
        found = boil_deadline(status)
        return None if found is None else found + by

    return deadline


def test_a_wrong_deadline_is_named_by_check_next_tick() -> None:
    kettle = _kettle(_moved(timedelta(seconds=1)))
    heating = kettle.apply(KettleStatus(), Boil(at=EPOCH))
    with pytest.raises(AssertionError, match="deadline is late"):
        check_next_tick(kettle, heating, EPOCH)
    early = _kettle(_moved(-timedelta(microseconds=1)))
    with pytest.raises(AssertionError, match="deadline is early"):
        check_next_tick(early, early.apply(KettleStatus(), Boil(at=EPOCH)), EPOCH)


# -- results and runners -----------------------------------------------------------------------
STALL = [
    Submitted(at=EPOCH, stall_threshold_s=5.0),
    WorkloadCreated(at=EPOCH),
    WorkloadRunning(at=EPOCH),
]
JOB_REF = ObjectRef("Job", "default", "train", "job-1")
OTHER_REF = ObjectRef("Job", "default", "idle", "job-2")


def test_every_result_says_when_its_object_next_needs_a_tick() -> None:
    runner = Runner(MemoryStore())
    results = [runner.observe(JOB_REF, o) for o in STALL]
    assert [r.next_tick for r in results] == [None, None, None]  # no step yet: no stall timer
    stepped = runner.observe(JOB_REF, job.TrainingStepObserved(at=EPOCH, step=1))
    due = EPOCH + timedelta(seconds=5, microseconds=1)  # stalled: strictly more than 5 s
    assert stepped.next_tick == due
    assert stepped.requeue_after(EPOCH + timedelta(seconds=2)) == 3.001
    assert stepped.requeue_after(EPOCH + timedelta(seconds=9)) == 0.0
    unchanged = runner.observe(JOB_REF, Tick(at=EPOCH + timedelta(seconds=5)))
    assert unchanged.next_tick == due  # an unchanged result says it too
    failed = runner.observe(JOB_REF, Tick(at=due))
    assert failed.status.state == "Failed"
    assert failed.next_tick is None
    assert failed.requeue_after(due) is None


def _stalling(runner: Runner) -> None:
    for o in [*STALL, job.TrainingStepObserved(at=EPOCH, step=1)]:
        runner.observe(JOB_REF, o)
    runner.observe(OTHER_REF, STALL[0])


def test_the_runner_says_which_objects_are_due_from_the_store(tmp_path: Any) -> None:
    from lifecycle.stores.sqlite import SQLiteStore

    path = tmp_path / "due.db"
    with Runner(SQLiteStore(path), owns_store=True) as runner:
        _stalling(runner)
        assert runner.due(EPOCH + timedelta(seconds=5)) == []
        assert runner.due(EPOCH + timedelta(seconds=6)) == [JOB_REF]
    # after a restart: the answer is the store's, not a memory of the old runner's
    with Runner(SQLiteStore(path), owns_store=True) as again:
        assert again.due(EPOCH + timedelta(seconds=6)) == [JOB_REF]
        again.observe(JOB_REF, Tick(at=EPOCH + timedelta(seconds=6)))
        assert again.due(EPOCH + timedelta(days=1)) == []


def test_the_async_runner_says_which_objects_are_due() -> None:
    async def main() -> list[ObjectRef]:
        store = MemoryStore()
        _stalling(Runner(store))
        runner = AsyncRunner(store, owns_store=False)
        try:
            assert await runner.due(EPOCH) == []
            return await runner.due(EPOCH + timedelta(seconds=6))
        finally:
            await runner.close()

    assert asyncio.run(main()) == [JOB_REF]


class _CommitOnly:
    def __init__(self) -> None:
        self.inner = MemoryStore()

    def load(self, machine: Any, ref: Any) -> Any:
        return self.inner.load(machine, ref)

    def commit(self, *args: Any) -> int:
        return self.inner.commit(*args)


def test_due_on_a_store_without_records_is_a_clear_error() -> None:
    with pytest.raises(TypeError, match="no records"):
        Runner(_CommitOnly()).due(EPOCH)

    async def main() -> None:
        runner = AsyncRunner(_CommitOnly(), owns_store=False)
        try:
            await runner.due(EPOCH)
        finally:
            await runner.close()

    with pytest.raises(TypeError, match="no records"):
        asyncio.run(main())


def forgotten(status: KettleStatus, obs: Observation) -> bool:
    return status.since is not None and obs.at - status.since >= timedelta(hours=1)


def test_each_timer_row_is_held_to_its_own_deadline() -> None:
    """A row whose deadline says "never" but that fires an hour on is found, though the
    kettle's next_tick (the boil, earlier) is right."""
    never = Row(
        "heating",
        Tick,
        to="boiled",
        reason="Forgotten",
        event=EventType.NORMAL,
        guard=forgotten,
        deadline=lambda status: None,
    )
    rows = _kettle_rows(boil_deadline)
    kettle = _kettle(boil_deadline)
    kettle_cls = type(kettle)
    kettle_cls.table = Table(
        "kettle",
        states=("cold", "heating", "boiled"),
        initial="cold",
        terminal=("boiled",),
        observations=(Boil, Tick),
        rows=[rows[0], never, *rows[1:]],
    )
    kettle = kettle_cls()  # compiled from the new table
    heating = kettle.apply(KettleStatus(), Boil(at=EPOCH))
    assert kettle.next_tick(heating) == EPOCH + timedelta(seconds=90)
    with pytest.raises(AssertionError, match=r"heating x Tick \[forgotten\].*before its deadline"):
        check_next_tick(kettle, heating, EPOCH)


def test_due_reads_through_the_telemetry_wrapper() -> None:
    """A runner with telemetry wraps its store; due still reads the records (or refuses)."""
    from lifecycle.testing import RecordingTelemetry

    store = MemoryStore()
    _stalling(Runner(store))
    later = EPOCH + timedelta(seconds=6)
    assert Runner(store, telemetry=RecordingTelemetry()).due(later) == [JOB_REF]
    with pytest.raises(TypeError, match="no records"):
        Runner(_CommitOnly(), telemetry=RecordingTelemetry()).due(later)

    async def main() -> list[ObjectRef]:
        runner = AsyncRunner(store, owns_store=False, telemetry=RecordingTelemetry())
        try:
            return await runner.due(later)
        finally:
            await runner.close()

    async def refused() -> None:
        runner = AsyncRunner(_CommitOnly(), owns_store=False, telemetry=RecordingTelemetry())
        try:
            await runner.due(later)
        finally:
            await runner.close()

    assert asyncio.run(main()) == [JOB_REF]
    with pytest.raises(TypeError, match="no records"):
        asyncio.run(refused())
