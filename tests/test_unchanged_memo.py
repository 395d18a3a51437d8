"""A machine remembers the observations that left a status unchanged (ADR 0166): the memory
never answers differently from the step itself -- whether the step uses ``at`` or not, swallows
exceptions or not -- and stays bounded."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lifecycle import (
    EventType,
    LifecycleError,
    Machine,
    ObjectRef,
    Observation,
    Row,
    Table,
    Tick,
    ignore,
)
from lifecycle._core import unchanged
from lifecycle.machines import default_registry
from lifecycle.machines import pod as podm
from lifecycle.testing import default_ref, observation_sequences

from .host_machine import MirrorMachine, Saw
from .machines.test_restore_runner import SAMPLES as RESTORE_SAMPLES

MACHINES = sorted(default_registry().values(), key=lambda m: m.name)
AT = datetime(2026, 12, 6, 9, 0, tzinfo=UTC)
REF = ObjectRef("Widget", "ml", "w-0", "w-0")


def _answer(fn: Any, status: Any, obs: Any) -> tuple[str, Any]:
    try:
        return "ok", fn(status, obs)
    except LifecycleError as e:
        return "refused", type(e).__name__


def _plain(machine: Machine[Any]) -> Any:
    """``machine``'s own ``apply`` with nothing remembered: the memory is emptied first."""
    other = type(machine)()

    def apply(status: Any, obs: Any) -> Any:
        other._unchanged.clear()
        return other.apply(status, obs)

    return apply


@pytest.mark.parametrize("machine", MACHINES, ids=lambda m: m.name)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_memory_answers_as_the_step_at_every_time(machine: Machine[Any], data: Any) -> None:
    """Each observation of a sequence is applied, then again with ``at`` moved (later and
    earlier) -- what makes the memory learn, probe and answer -- and, where a timer runs,
    ticks just before its deadline and one after; every answer equals the machine's with
    nothing remembered."""
    machine = type(machine)()  # a fresh memory
    samples = RESTORE_SAMPLES if machine.name == "restore" else None
    sequence = data.draw(
        observation_sequences(machine, samples=samples, max_size=12), label="sequence"
    )
    shifts = data.draw(
        st.lists(st.integers(-3 * 86400, 3 * 86400), min_size=3, max_size=3), label="shifts"
    )
    status = machine.initial(default_ref(machine))
    plain = _plain(machine)
    for obs in sequence:
        for seconds in (0, *shifts):
            moved = attrs.evolve(obs, at=obs.at + timedelta(seconds=seconds))
            fast = _answer(machine.apply, status, moved)
            assert fast == _answer(plain, status, moved), (status, moved)
        found = _answer(machine.apply, status, obs)
        if found[0] == "ok":
            status = found[1]
        deadline = machine.next_tick(status) if Tick in machine.accepted else None
        if deadline is not None:  # ticks before the deadline, then one after it
            for seconds in (-2, -1, 1):
                tick = Tick(at=deadline + timedelta(seconds=seconds))
                assert _answer(machine.apply, status, tick) == _answer(plain, status, tick)


def _running_pod() -> tuple[Machine[Any], Any]:
    machine = podm.PodMachine()
    status = machine.initial(REF)
    for obs in (
        podm.CreateRequested(at=AT),
        podm.ProvisionSucceeded(at=AT, reserved=True, instance_id="i-1"),
        podm.InstanceRunning(at=AT, instance_id="i-1"),
    ):
        status = machine.apply(status, obs)
    return machine, status


def test_a_poll_that_does_not_use_at_is_answered_at_any_time() -> None:
    machine, status = _running_pod()
    steps: list[Any] = []
    machine._steps = {k: _counting(v, steps) for k, v in machine._steps.items()}
    machine.__dict__.pop("apply")
    from lifecycle._core.machine import _bound_apply

    machine.__dict__["apply"] = _bound_apply(machine)
    for minute in range(5):
        poll = podm.InstanceRunning(at=AT + timedelta(minutes=minute), instance_id="i-1")
        assert machine.apply(status, poll) is status
    # learned at the first poll, probed at the second (its own run and the probe's): the
    # three later polls ran no step
    assert len(steps) == 3
    # a poll that differs in a field that counts runs the step and changes the status
    changed = machine.apply(
        status, podm.InstanceRunning(at=AT, instance_id="i-1", readiness_confirmed=False)
    )
    assert changed.state != status.state


def _counting(step: Any, calls: list[Any]) -> Any:
    def counted(status: Any, obs: Any) -> Any:
        calls.append(obs)
        return step(status, obs)

    return counted


def test_a_step_that_compares_at_is_never_answered_for_another_time() -> None:
    """The mirror's timer row: a Tick before the deadline leaves the status as it was, one
    after it expires the object; the ticks before must not teach the memory otherwise."""
    machine = MirrorMachine()
    status = machine.apply(machine.initial(REF), Saw(at=AT, version="1"))
    for ms in (100, 200, 300, 400):
        assert machine.apply(status, Tick(at=AT + timedelta(milliseconds=ms))) is status
    assert machine.apply(status, Tick(at=AT + timedelta(seconds=1))).state == "Expired"


def test_a_repeat_of_the_very_same_tick_is_answered_from_memory() -> None:
    machine = MirrorMachine()
    status = machine.apply(machine.initial(REF), Saw(at=AT, version="1"))
    tick = Tick(at=AT + timedelta(milliseconds=100))
    machine.apply(status, tick)
    machine.apply(status, Tick(at=AT + timedelta(milliseconds=200)))  # probed: at counts
    entry = machine._unchanged[id(status)]
    assert entry.at == AT + timedelta(milliseconds=200)
    assert entry.probed is True
    assert machine.apply(status, Tick(at=AT + timedelta(milliseconds=200))) is status


# -- a step that swallows exceptions still cannot hide its use of ``at`` -----------------------
@attrs.frozen
class GateStatus:
    state: str = "Open"
    reason: str = ""
    message: str = ""


@attrs.frozen(kw_only=True)
class Knock(Observation):
    who: str = ""


CLOSING = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


def _late(status: GateStatus, obs: Knock) -> bool:
    try:
        return obs.at >= CLOSING
    except Exception:  # a careless guard: whatever goes wrong counts as "not late"
        return False


class GateMachine(Machine[GateStatus]):
    name: ClassVar[str] = "gate"
    kind: ClassVar[str] = "Gate"
    status_type: ClassVar[type[Any]] = GateStatus
    table: ClassVar[Table] = Table(
        "gate",
        states=("Open", "Closed"),
        initial="Open",
        terminal=("Closed",),
        observations=(Knock,),
        rows=(
            Row("Open", Knock, to="Closed", reason="Late", event=EventType.NORMAL, guard=_late),
            ignore("Open", Knock, "in time"),
            ignore("Closed", Knock, "closed"),
        ),
    )


def test_an_except_exception_in_a_guard_does_not_swallow_the_probe() -> None:
    machine = GateMachine()
    status = GateStatus()
    for hour in (9, 10, 11):
        knock = Knock(at=datetime(2026, 12, 6, hour, 0, tzinfo=UTC), who="a")
        assert machine.apply(status, knock) is status
    assert machine.apply(status, Knock(at=CLOSING, who="a")).state == "Closed"


def test_the_poison_refuses_every_use() -> None:
    poison = unchanged.POISON
    uses: list[Callable[[], object]] = [
        lambda: poison < AT,
        lambda: AT < poison,  # noqa: SIM300 (the reflected comparison)
        lambda: AT == poison,  # noqa: SIM300
        lambda: hash(poison),
        lambda: bool(poison),
        lambda: poison.isoformat(),
        lambda: f"{poison}",
        lambda: str(poison),
        lambda: poison + timedelta(1),
        lambda: AT - poison,
        lambda: poison.year,
        lambda: max(AT, poison),
    ]
    for use in uses:
        with pytest.raises(unchanged.Probed):
            use()
    assert isinstance(poison, datetime)


def test_values_count_with_their_exact_types() -> None:
    key = unchanged.keys(podm.InstanceRunning)
    assert key is not None
    one = podm.InstanceRunning(at=AT, instance_id="i-1", readiness_confirmed=True)
    other = attrs.evolve(one, readiness_confirmed=1)  # type: ignore[arg-type] # == True
    assert key(one) != key(other)
    assert key(one) == key(attrs.evolve(one, at=AT + timedelta(days=1)))


def test_the_memory_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(unchanged, "LIMIT", 8)
    machine, status = _running_pod()
    copies = [attrs.evolve(status) for _ in range(50)]  # equal, each its own object
    for copy in copies:
        assert machine.apply(copy, podm.InstanceRunning(at=AT, instance_id="i-1")) is copy
    assert 0 < len(machine._unchanged) <= 8


def test_an_observation_class_without_fields_is_keyed_by_nothing_but_its_class() -> None:
    key = unchanged.keys(Tick)
    assert key is not None
    assert key(Tick(at=AT)) == ()
    assert unchanged.keys(int) is None


@pytest.mark.parametrize("machine", MACHINES, ids=lambda m: m.name)
def test_every_timer_row_fires_after_ticks_the_memory_saw_unchanged(machine: Machine[Any]) -> None:
    """Each shipped timer row, reached by its shortest path: ticks just before its deadline
    (each leaving the status as it was, or not), then one after it, answered as the machine
    answers with nothing remembered."""
    from lifecycle.testing import row_paths

    samples = RESTORE_SAMPLES if machine.name == "restore" else None
    paths, _ = row_paths(machine, samples=samples)
    timers = [p for p in paths if p.row.deadline is not None]
    if not timers:  # (job's and workflow's need samples the search does not have)
        pytest.skip("no timer row reached by the shortest-path search")
    plain = _plain(machine)
    for path in timers:
        fast = type(machine)()
        status = fast.initial(default_ref(machine))
        for obs in path.observations[:-1]:
            status = fast.apply(status, obs)
        deadline = fast.next_tick(status)
        assert deadline is not None
        for seconds in (-3, -2, -1, 1, 2):
            tick = Tick(at=deadline + timedelta(seconds=seconds))
            assert _answer(fast.apply, status, tick) == _answer(plain, status, tick), tick


def test_a_status_no_one_holds_is_forgotten_with_it() -> None:
    """A replay keeps only its live statuses: the memory holds each one weakly."""
    import gc

    machine, status = _running_pod()
    copies = [attrs.evolve(status) for _ in range(20)]
    for copy in copies:
        machine.apply(copy, podm.InstanceRunning(at=AT, instance_id="i-1"))
    held = len(machine._unchanged)
    assert held >= 20
    del copies, copy
    gc.collect()
    assert len(machine._unchanged) <= held - 20


def test_a_status_that_cannot_be_held_weakly_is_not_remembered() -> None:
    from typing import NamedTuple

    class Plain(NamedTuple):
        state: str = "Open"

    memory: dict[int, unchanged.Entry] = {}
    status = Plain()
    unchanged.remember(memory, lambda s, o: s, status, Knock(at=AT, who="a"))
    assert memory == {}
