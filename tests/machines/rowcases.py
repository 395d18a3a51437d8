"""Row cases for the condition-model machines (Job, Workflow, Certification, WorkloadRun).

A case folds ``given`` from the machine's initial status, applies ``when`` and checks the
result against the row the table selects: the target state, reason, message, the flips (state
and verdict events, with their types) and the action events. ``assert_every_row`` fails when a
row of the table is reached by no case, so a row added without a test is caught.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from lifecycle import EventType, Machine, ObjectRef, Observation
from lifecycle._core.table import SAME, Row

#: (condition ("" for the exclusive state), event type, reason) of one expected flip.
Expected = tuple[str, EventType, str]


@dataclass(frozen=True)
class Case:
    """``unchanged``: the very status comes back (an ignore row, or a no-op effect).
    ``state``/``reason``/``message``: the expected state and its true condition (``None``:
    not checked). ``flips``: exactly these events. ``actions``: exactly these action reasons.
    ``check``: more assertions on the status after."""

    id: str
    given: tuple[Observation, ...]
    when: Observation
    state: str | None = None
    reason: str | None = None
    message: str | None = None
    flips: tuple[Expected, ...] = ()
    actions: tuple[str, ...] = ()
    unchanged: bool = False
    check: Callable[[Any], None] | None = field(default=None, compare=False)
    #: A status to fold ``given`` from instead of the initial one (a state no fold reaches).
    start: Any = field(default=None, compare=False)


def fold(
    machine: Machine[Any], ref: ObjectRef, given: Sequence[Observation], start: Any = None
) -> Any:
    status = machine.initial(ref) if start is None else start
    for obs in given:
        status = machine.apply(status, obs)
    return status


def run(machine: Machine[Any], ref: ObjectRef, case: Case) -> tuple[Row, Any, Any]:
    before = fold(machine, ref, case.given, case.start)
    row = machine.select(before, case.when)
    after = machine.apply(before, case.when)
    flips = machine.flips(before, after)
    got = tuple((f.condition, f.type, f.reason) for f in flips)
    assert got == case.flips, f"{case.id}: flips {got}, expected {case.flips}"
    actions = tuple(f.reason for f in machine.actions(before, case.when))
    assert actions == case.actions, f"{case.id}: actions {actions}, expected {case.actions}"
    if case.unchanged:
        assert after == before, f"{case.id}: expected no change, got {after!r}"
    else:
        assert after != before, f"{case.id}: expected a change"
    if row.ignore:
        assert after == before
    else:
        target = before.state if row.target == SAME else row.target
        assert after.state == target, f"{case.id}: row targets {target!r}, got {after.state!r}"
    for f in flips:
        if not f.condition and row.event is not None:
            assert f.type is row.event, f"{case.id}: {f.type} but the row declares {row.event}"
    if case.state is not None:
        assert after.state == case.state, f"{case.id}: state {after.state!r}"
    if case.reason is not None:
        assert after.reason == case.reason, f"{case.id}: reason {after.reason!r}"
    if case.message is not None:
        assert after.message == case.message, f"{case.id}: message {after.message!r}"
    if case.check is not None:
        case.check(after)
    return row, before, after


def assert_every_row(machine: Machine[Any], ref: ObjectRef, cases: Sequence[Case]) -> None:
    hit = {id(machine.select(fold(machine, ref, c.given, c.start), c.when)) for c in cases}
    missing = [
        f"{r.sources} x {r.observation.__name__} (guard={r.guard_name}, ignore={r.ignore})"
        for r in machine.table.rows
        if id(r) not in hit
    ]
    assert not missing, f"{machine.name} rows with no case: {missing}"
    states = {fold(machine, ref, c.given, c.start).state for c in cases}
    assert states == set(machine.table.states), f"states never a source: {states}"
    assert {type(c.when) for c in cases} == set(machine.table.observations)


def assert_every_row_has_an_effect(machine: Machine[Any]) -> None:
    """A status here is its conditions: a row that changes anything must say how."""
    bare = [r for r in machine.table.rows if not r.ignore and r.effect is None]
    assert not bare, f"{machine.name} rows without an effect: {bare}"
