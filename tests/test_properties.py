"""The property suite (``lifecycle.testing``) on the shipped machines and stores, and proof
that it catches machines, stores and tables that break the properties."""

from __future__ import annotations

import enum
import os
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

import attrs
import hypothesis
import pytest
from hypothesis import HealthCheck, Phase, given
from hypothesis import strategies as st

from lifecycle import (
    EventType,
    LifecycleError,
    Machine,
    ObjectRef,
    Observation,
    Row,
    StoreError,
    Table,
    Tick,
    ignore,
)
from lifecycle.machines import NODECLAIM, POD, NodeClaimMachine, PodMachine, pod
from lifecycle.machines import nodeclaim as nc
from lifecycle.stores.base import Store
from lifecycle.tables import Condition, Flip, Verdict
from lifecycle.testing import (
    EPOCH,
    Checker,
    InjectFault,
    MemoryEmitter,
    MemoryStore,
    Redeliver,
    Step,
    check_machine,
    check_rows,
    check_scenario,
    default_ref,
    observation_sequences,
    observations,
    row_paths,
    scenarios,
    sqlite_factory,
    stateful_test,
    table_strings,
)
from lifecycle.testing.fakes import FailingEmitter

from .fallback_machines import FALLBACK_POD

MACHINES = [pytest.param(POD, id="pod"), pytest.param(NODECLAIM, id="nodeclaim")]

# Finding a planted bug needs no shrinking; keep those runs short and quiet.
HUNT = hypothesis.settings(
    max_examples=200,
    deadline=None,
    database=None,
    phases=[Phase.generate],
    derandomize=True,
    report_multiple_bugs=False,
    suppress_health_check=list(HealthCheck),
)


# -- the shipped machines keep every property ---------------------------------------------------
@pytest.mark.parametrize("machine", MACHINES)
def test_suite_holds_on_memory_store(machine: Machine[Any]) -> None:
    check_machine(machine, max_examples=100)


@pytest.mark.parametrize("machine", MACHINES)
def test_suite_holds_on_sqlite_store(machine: Machine[Any], tmp_path: Path) -> None:
    check_machine(machine, store_factory=sqlite_factory(tmp_path), max_examples=30)


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("LIFECYCLE_SOAK") != "1", reason="set LIFECYCLE_SOAK=1")
@pytest.mark.parametrize("machine", MACHINES)
def test_suite_holds_long_soak(machine: Machine[Any], tmp_path: Path) -> None:
    check_machine(machine, max_examples=2000, max_steps=60)
    check_machine(machine, store_factory=sqlite_factory(tmp_path), max_examples=300)


TestPodStateful = stateful_test(POD).TestCase
TestPodStateful.settings = hypothesis.settings(
    max_examples=15, stateful_step_count=25, deadline=None, database=None
)
TestNodeClaimStateful = stateful_test(NODECLAIM).TestCase
TestNodeClaimStateful.settings = hypothesis.settings(
    max_examples=15, stateful_step_count=25, deadline=None, database=None
)


# -- the strategies --------------------------------------------------------------------------
@pytest.mark.parametrize("machine", MACHINES)
def test_sequences_have_non_decreasing_time_and_known_observations(machine: Machine[Any]) -> None:
    @hypothesis.settings(max_examples=50, deadline=None, database=None)
    @given(observation_sequences(machine, max_size=15))
    def run(seq: list[Observation]) -> None:
        times = [o.at for o in seq]
        assert times == sorted(times)
        assert all(type(o) in machine.table.observations for o in seq)
        assert all(o.at.tzinfo is not None for o in seq)

    run()


def test_sequences_reach_deep_states() -> None:
    """Biased generation reaches every live Pod state, and more than one terminal state."""
    reached: set[str] = set()

    @hypothesis.settings(max_examples=150, deadline=None, database=None, derandomize=True)
    @given(observation_sequences(POD, min_size=5, max_size=20))
    def run(seq: list[Observation]) -> None:
        status = POD.initial(ObjectRef("Pod", "ns", "p", "u"))
        for obs in seq:
            try:
                status = POD.apply(status, obs)
            except LifecycleError:
                continue
            reached.add(status.state)

    run()
    assert set(pod.LIVE) - {pod.NEW} <= reached
    assert len(set(pod.TERMINAL) & reached) >= 2


@pytest.mark.parametrize("machine", MACHINES)
def test_every_row_of_the_shipped_tables_is_reached(machine: Machine[Any]) -> None:
    found, missing = row_paths(machine)
    assert missing == []
    assert [p.index for p in found] == list(range(len(machine.table.rows)))
    for path in found:  # each path ends by taking its row
        status = machine.fold(default_ref(machine), path.observations[:-1])
        assert machine.select(status, path.observations[-1]) is path.row


def never(status: Any, obs: Any) -> bool:
    return False


def test_check_rows_reports_a_row_nothing_reaches() -> None:
    class DeadRowLamp(LampMachine):
        table: ClassVar[Table] = Table(
            "lamp",
            states=LAMP_TABLE.states,
            initial="off",
            terminal=("broken",),
            observations=LAMP_TABLE.observations,
            rows=(
                Row(
                    ("off", "on"),
                    Smash,
                    to="broken",
                    reason="Melted",
                    event=EventType.WARNING,
                    guard=never,
                ),
                *LAMP_TABLE.rows,
            ),
        )

    with pytest.raises(AssertionError, match=r"no observation path reaches row 0: off\|on x Smash"):
        check_rows(DeadRowLamp())
    assert len(check_rows(DeadRowLamp(), require_all_rows=False)) == len(LAMP_TABLE.rows)


def test_nodeclaim_samples_reach_bound_through_an_initializing_pod() -> None:
    """The shipped samples make a booting pod (reason Initializing) count as existence."""
    seen: list[bool] = []

    @hypothesis.settings(max_examples=150, deadline=None, database=None)
    @given(observations(NODECLAIM, nc.PodObserved))
    def run(obs: Observation) -> None:
        assert isinstance(obs, nc.PodObserved)
        status = NODECLAIM.apply(nc.NodeClaimStatus(), obs)
        seen.append(status.state == nc.BOUND and obs.reason == "Initializing")

    run()
    assert any(seen)


def test_table_strings_harvest_guard_constants() -> None:
    strings = table_strings(NODECLAIM)
    # literals in pod_finished / pod_exists, a module constant, and closure cells (_adopts)
    for expected in ("Failed", "Succeeded", "Running", "Initializing", "Bound", "Terminating"):
        assert expected in strings
    assert all("\n" not in s for s in strings)


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


@attrs.frozen(slots=True)
class LampStatus:
    state: str = "off"
    reason: str = ""
    message: str = ""
    level: float = 0.0
    hot: Condition | None = None


@attrs.frozen(slots=True, kw_only=True)
class Switch(Observation):
    on: bool


@attrs.frozen(slots=True, kw_only=True)
class Probe(Observation):
    level: float
    tags: tuple[str, ...] = ()
    color: Color = Color.GREEN
    note: str | None = None
    seen: datetime | None = None
    count: int = 0


@attrs.frozen(slots=True, kw_only=True)
class Smash(Observation):
    pass


def turning_on(status: LampStatus, obs: Switch) -> bool:
    return obs.on


def _lamp_probe(status: LampStatus, obs: Probe, row: Row) -> LampStatus:
    hot = "True" if obs.level > 100 else "False"
    old = status.hot
    cond = (
        old
        if old is not None and old.status == hot
        else Condition("Overheated", hot, "Probe", "", obs.at)
    )
    return attrs.evolve(status, level=obs.level, hot=cond, message=f"level {obs.level}")


LAMP_TABLE = Table(
    "lamp",
    states=("off", "on", "broken"),
    initial="off",
    terminal=("broken",),
    observations=(Switch, Probe, Smash, Tick),
    rows=(
        Row(
            ("off", "on"),
            Switch,
            to="on",
            reason="SwitchedOn",
            event=EventType.NORMAL,
            guard=turning_on,
        ),
        Row(("off", "on"), Switch, to="off", reason="SwitchedOff", event=EventType.NORMAL),
        Row(("off", "on"), Probe, to="=", effect=_lamp_probe),
        Row(
            ("off", "on"),
            Smash,
            to="broken",
            reason="Smashed",
            event=EventType.WARNING,
            message="smashed",
        ),
        ignore("broken", Switch, "broken"),
        ignore("broken", Probe, "broken"),
        ignore("broken", Smash, "broken"),
        ignore(("off", "on", "broken"), Tick, "no timers"),
    ),
)


class LampMachine(Machine[LampStatus]):
    """A user's own machine: a verdict condition, enum/tuple/optional/datetime fields."""

    name: ClassVar[str] = "lamp"
    kind: ClassVar[str] = "Lamp"
    status_type: ClassVar[type[Any]] = LampStatus
    table: ClassVar[Table] = LAMP_TABLE
    verdicts: ClassVar[tuple[Verdict[Any], ...]] = (
        Verdict("Overheated", lambda s: s.hot, EventType.WARNING),
    )
    warning_states: ClassVar[frozenset[str]] = frozenset({"broken"})

    def initial(self, ref: ObjectRef) -> LampStatus:
        return LampStatus()


LAMP = LampMachine()


def test_suite_runs_on_a_users_own_machine(tmp_path: Path) -> None:
    samples = {"level": st.sampled_from([1.0, 50.0, 150.0, 250.0])}
    check_machine(LAMP, samples=samples, max_examples=60)
    check_machine(LAMP, samples=samples, store_factory=sqlite_factory(tmp_path), max_examples=10)


def test_generic_field_strategies_cover_every_field_kind() -> None:
    @hypothesis.settings(max_examples=30, deadline=None, database=None)
    @given(observations(LAMP, Probe, at=EPOCH))
    def run(obs: Observation) -> None:
        assert isinstance(obs, Probe)
        assert isinstance(obs.color, Color)
        assert isinstance(obs.tags, tuple)
        assert obs.seen is None or obs.seen.tzinfo is not None
        assert obs.at == EPOCH

    run()


def test_a_sample_override_wins_over_the_field_type() -> None:
    @attrs.frozen(slots=True, kw_only=True)
    class Odd(Observation):
        thing: object

    class OddMachine(LampMachine):
        warning_states: ClassVar[frozenset[str]] = frozenset()  # its table enters no Warning
        table: ClassVar[Table] = Table(
            "odd",
            states=("off", "on", "broken"),
            initial="off",
            terminal=(),
            observations=(Odd,),
            rows=(ignore(("off", "on", "broken"), Odd, "nothing"),),
        )

    # any field type Hypothesis can build works; a per-class sample override is used first
    strategy = observations(OddMachine(), Odd, samples={"Odd.thing": ["x"]})
    quick = hypothesis.settings(max_examples=30, database=None)
    found = hypothesis.find(strategy, lambda o: True, settings=quick)
    assert isinstance(found, Odd)
    assert found.thing == "x"
    with pytest.raises(hypothesis.errors.NoSuchExample):
        hypothesis.find(strategy, lambda o: isinstance(o, Odd) and o.thing != "x", settings=quick)


def test_empty_samples_are_refused() -> None:
    with pytest.raises(ValueError, match="empty"):
        scenarios(POD, samples={"error": []})


# -- the checker has teeth --------------------------------------------------------------------
class ChattyPod(PodMachine):
    """Broken: emits on message-only changes (e.g. ``retrying: <err>``)."""

    def flips(self, before: Any, after: Any) -> tuple[Flip, ...]:
        out = super().flips(before, after)
        if not out and before.message != after.message:
            out = (Flip(before.state, after.state, after.reason, EventType.NORMAL, after.message),)
        return out


class ForgetfulPod(PodMachine):
    """Broken: a repeated Terminated observation flips the pod back to Running (escapes a
    terminal state behind the table's back)."""

    def apply(self, status: Any, obs: Observation) -> Any:
        result = super().apply(status, obs)
        if status.state == pod.TERMINATED and isinstance(obs, pod.InstanceRunning):
            return attrs.evolve(result, state=pod.RUNNING)
        return result


class ImpurePod(PodMachine):
    """Broken: the message depends on how often apply was called (hidden state)."""

    calls = 0

    def apply(self, status: Any, obs: Observation) -> Any:
        result = super().apply(status, obs)
        if result != status:
            type(self).calls += 1
            result = attrs.evolve(result, message=f"{result.message} #{self.calls}")
        return result


class WrongTypePod(PodMachine):
    """Broken: every state event is Normal, though the table declares Warnings."""

    def event_type(self, status: Any) -> EventType:
        return EventType.NORMAL


class CrashyPod(PodMachine):
    """Broken: an observation that could not be made crashes with a KeyError instead of
    being ignored or refused with a LifecycleError."""

    def apply(self, status: Any, obs: Observation) -> Any:
        if isinstance(obs, pod.InstanceUnknown) and status.state == pod.RUNNING:
            raise KeyError(obs.error)
        return super().apply(status, obs)


class NoJournalStore(MemoryStore):
    def __init__(self) -> None:
        super().__init__(journal=False)


class LeakyStore(MemoryStore):
    """Broken: every third commit is written, then reported as failed (not atomic)."""

    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def commit(self, *args: Any, **kwargs: Any) -> int:
        version = super().commit(*args, **kwargs)
        self.n += 1
        if self.n % 3 == 0:
            raise StoreError("disk full (after writing)")
        return version


class EagerOutboxStore(MemoryStore):
    """Broken: forgets outbox rows, so events whose delivery failed are never resent."""

    def claim_undelivered(self, limit: int = 1000) -> list[Any]:
        return []


@pytest.mark.parametrize("rows", [True, False], ids=["row-paths", "generated"])
@pytest.mark.parametrize(
    ("machine", "store_factory", "problem"),
    [
        pytest.param(ChattyPod(), MemoryStore, "without a state change", id="message-only-flip"),
        pytest.param(ForgetfulPod(), MemoryStore, "changed the status", id="terminal-escape"),
        pytest.param(ImpurePod(), MemoryStore, "not deterministic", id="impure-apply"),
        pytest.param(WrongTypePod(), MemoryStore, "its row declares Warning", id="event-type"),
        pytest.param(CrashyPod(), MemoryStore, "instead of a LifecycleError", id="crash"),
        pytest.param(POD, NoJournalStore, "journal", id="no-journal"),
        pytest.param(POD, LeakyStore, "expected Outcome.COMMITTED", id="non-atomic-store"),
        pytest.param(POD, EagerOutboxStore, "outbox", id="lost-outbox"),
    ],
)
def test_suite_catches_a_broken_machine_or_store(
    machine: Machine[Any], store_factory: Callable[[], Store], problem: str, rows: bool
) -> None:
    """Both halves of the suite have teeth: the row paths, and generated scenarios alone."""
    with pytest.raises(AssertionError, match=problem):
        check_machine(machine, store_factory=store_factory, rows=rows, settings=HUNT)


def test_refused_observation_must_leave_the_store_untouched() -> None:
    """A store that writes even what the machine refuses is caught."""

    class Meddling(MemoryStore):
        def load(self, machine: Machine[Any], ref: ObjectRef) -> Any:
            record = super().load(machine, ref)
            if record is not None and record.status.state == pod.RUNNING:
                # a load with a side effect: bumps the version behind the runner's back
                self._records[ref.uid] = attrs.evolve(record, version=record.version + 1)
            return record

    with pytest.raises(AssertionError):
        check_machine(POD, store_factory=Meddling, settings=HUNT)


# -- the checker, step by step -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("machine", "expected"),
    [(POD, []), (FALLBACK_POD, ["FailedStatusUpdateFailed"] * 2)],
    ids=["shipped-pod-no-fallback-rows", "pod-declaring-fallbacks"],
)
def test_checker_scripted_scenario_covers_fault_paths(
    machine: Machine[Any], expected: list[str]
) -> None:
    at = EPOCH
    steps: list[Step] = [
        pod.CreateRequested(at=at),
        pod.ProvisionSucceeded(at=at, reserved=True, instance_id="i-1"),
        InjectFault("emitter-error"),
        pod.InstanceRunning(at=at),
        Redeliver(),
        InjectFault("conflict", 2),
        pod.InstancePending(at=at),
        InjectFault("write-error"),
        pod.InstanceFailed(at=at, exit_code=1),
        InjectFault("conflict", 5),
        pod.InstanceFailed(at=at, exit_code=1),
        pod.InstanceFailed(at=at, exit_code=1),
        pod.InstanceRunning(at=at),
        pod.ProvisionSucceeded(at=at, reserved=True, instance_id="i-2"),
    ]
    checker = check_scenario(machine, steps)
    outcomes = [t[0] for t in checker.trace[: len(steps)]]
    assert [str(getattr(o, "value", o)) for o in outcomes] == [
        "committed",
        "committed",
        "emitter",
        "committed",
        "redeliver",
        "fault",
        "committed",
        "fault",
        "failed",
        "fault",
        "failed",
        "committed",
        "unchanged",
        "unchanged",
    ]
    fallbacks = [t for t in checker.sink.events if t.fallback]
    assert [f.reason for f in fallbacks] == expected  # only where a row declares it
    assert checker.sink.reasons(checker.ref.uid)[:3] == ["Provisioning", "Initializing", "Running"]


def test_checker_refusal_is_checked() -> None:
    steps = [pod.ProvisionSucceeded(at=EPOCH, reserved=True, instance_id="i-1")]
    checker = check_scenario(POD, steps)
    assert checker.trace[0][0] == "refused"
    assert checker.trace[0][1] == "InvalidTransition"


def test_checker_on_nodeclaim_legacy_adoption(tmp_path: Path) -> None:
    steps = [
        nc.ClaimAdopted(at=EPOCH, phase="Initializing", pod_uid="pod-a"),
        nc.PodObserved(at=EPOCH, pod_uid="pod-a", phase="Pending", reason="Provisioning"),
        nc.PodAbsent(at=EPOCH),
    ]
    checker = check_scenario(NODECLAIM, steps, store_factory=sqlite_factory(tmp_path))
    assert [t.target for t in checker.sink.events] == [nc.BOUND, nc.DELETED]


def test_failing_emitter_double() -> None:
    emitter = FailingEmitter(2)
    checker = Checker(POD, MemoryStore())
    t0 = pod.CreateRequested(at=EPOCH)
    checker.runner.emitters = (emitter,)
    checker.runner.observe(checker.ref, t0)
    assert len(emitter.refused) == 1
    assert emitter.events == []
    emitter.arm(0)
    assert checker.runner.redeliver() == 1
    assert [t.id for t in emitter.events] == [f"{checker.ref.uid}:1:0"]
    assert isinstance(emitter, MemoryEmitter)


def test_stateful_class_is_named_after_the_machine() -> None:
    assert stateful_test(NODECLAIM).__name__ == f"{NodeClaimMachine.__name__}StateTest"
    assert InjectFault("conflict").times == 1
