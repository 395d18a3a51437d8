"""The ``transitions`` library as an independent oracle for every shipped table.

A plain ``transitions.Machine`` is built from each declared table, knowing nothing of our
dispatch: one transition per (row, source state), triggered by the observation's class name,
conditioned on the row's guard, and internal (no state change) for ``(stays)`` and ignore rows.
Rows that name a state are added before wildcard (``any``) rows, as the table declares.
Hypothesis drives observation sequences (the :mod:`lifecycle.testing` strategies) through our
machine and the oracle side by side, and checks at every step that

- every state change our machine makes is a transition the oracle has from that state with that
  trigger, and firing the trigger there lands the oracle in the same state;
- every state our machine keeps, the oracle keeps too (an internal transition);
- every observation our machine refuses, the oracle refuses too.

The row-coverage paths (one per row) run through the same comparison first, so every row is
checked on every run, not only the rows random sequences happen to reach.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transitions import Machine as Oracle
from transitions import MachineError

from lifecycle import (
    InvalidObservation,
    InvalidTransition,
    LifecycleError,
    Machine,
    Observation,
    Table,
)
from lifecycle.machines import CERTIFICATION, JOB, NODECLAIM, POD, RESTORE, WORKFLOW, WORKLOADRUN
from lifecycle.machines.pod import PROVISIONING, RUNNING, CreateRequested
from lifecycle.tables import ANY, SAME
from lifecycle.testing import EPOCH, default_ref, observation_sequences, row_paths

from .machines.test_restore_runner import SAMPLES as RESTORE_SAMPLES
from .test_properties_workflow import (
    CERTIFICATION_SAMPLES,
    JOB_SAMPLES,
    WORKFLOW_SAMPLES,
    WORKLOADRUN_SAMPLES,
)

pytestmark = pytest.mark.filterwarnings("ignore")

CASES: list[tuple[Machine[Any], dict[str, Any]]] = [
    (POD, {}),
    (NODECLAIM, {}),
    (JOB, JOB_SAMPLES),
    (WORKFLOW, WORKFLOW_SAMPLES),
    (CERTIFICATION, CERTIFICATION_SAMPLES),
    (WORKLOADRUN, WORKLOADRUN_SAMPLES),
    (RESTORE, RESTORE_SAMPLES),
]
IDS = [m.name for m, _ in CASES]

NEW = "∅"  # the empty initial state, by a name transitions can use


def _name(state: str) -> str:
    return state or NEW


class Model:
    """What the oracle moves between states (transitions sets ``state`` on it)."""

    state: str


def _condition(guard: Callable[[Any, Any], bool]) -> Callable[[Any], bool]:
    return lambda event: guard(event.kwargs["status"], event.kwargs["obs"])


def oracle(table: Table) -> tuple[Oracle, Model]:
    """A ``transitions.Machine`` built from the declared rows of ``table``."""
    specific: list[dict[str, Any]] = []
    wildcard: list[dict[str, Any]] = []
    for row in table.rows:
        dest = None if row.ignore or row.target == SAME else _name(row.target)
        conditions = [] if row.guard is None else [_condition(row.guard)]
        for source in row.sources:
            t = {
                "trigger": row.observation.__name__,
                "source": "*" if source == ANY else _name(source),
                "dest": dest,
                "conditions": conditions,
            }
            (wildcard if source == ANY else specific).append(t)
    model = Model()
    machine = Oracle(
        model=model,
        states=[_name(s) for s in table.states],
        initial=_name(table.initial),
        transitions=specific + wildcard,
        auto_transitions=False,
        send_event=True,
        ignore_invalid_triggers=False,
    )
    return machine, model


class Agreement:
    """Steps one object through our machine and the oracle, comparing after every step."""

    def __init__(self, machine: Machine[Any]) -> None:
        self.machine = machine
        self.oracle, self.model = oracle(machine.table)
        self.status = machine.initial(default_ref(machine))
        self.changes = 0

    def step(self, obs: Observation) -> None:
        before = self.status
        trigger = type(obs).__name__
        # Ours: "refused" (no row), "guard" / "effect" (a row's guard or effect refused the
        # values: InvalidObservation), or the next status.
        after: Any = None
        try:
            self.machine.select(before, obs)
        except InvalidObservation:
            ours = "guard"
        except LifecycleError:
            ours = "refused"
        else:
            try:
                after = self.machine.apply(before, obs)
                ours = "taken"
            except InvalidObservation:
                ours = "effect"
        self.oracle.set_state(_name(before.state), model=self.model)
        try:
            fired = self.model.trigger(trigger, status=before, obs=obs)  # type: ignore[attr-defined]
            theirs = "taken" if fired is True else f"returned {fired!r}"
        except (MachineError, AttributeError):
            theirs = "refused"
        except InvalidObservation:  # the same guard, called by transitions
            theirs = "guard"
        where = f"{self.machine.name}: {trigger} in {_name(before.state)!r}"
        expected = {"effect": "taken"}.get(ours, ours)
        assert theirs == expected, f"{where}: ours {ours}, transitions {theirs}"
        if ours != "taken":
            return
        assert self.model.state == _name(after.state), (
            f"{where}: we went to {_name(after.state)!r}, transitions to {self.model.state!r}"
        )
        if after.state != before.state:
            self.changes += 1
            declared = self.oracle.get_transitions(
                trigger, source=_name(before.state), dest=_name(after.state)
            )
            assert declared, f"{where} -> {_name(after.state)!r}: transitions has no such edge"
        self.status = after


@pytest.mark.parametrize(("machine", "samples"), CASES, ids=IDS)
def test_transitions_agrees_on_every_row_path(machine: Machine[Any], samples: Any) -> None:
    paths, _ = row_paths(machine, samples=samples)
    assert paths
    changes = 0
    for path in paths:
        agreement = Agreement(machine)
        for obs in path.observations:
            agreement.step(obs)
        changes += agreement.changes
    assert changes > 0


@pytest.mark.parametrize(("machine", "samples"), CASES, ids=IDS)
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_transitions_accepts_every_transition_the_machine_makes(
    machine: Machine[Any], samples: Any, data: st.DataObject
) -> None:
    sequence = data.draw(observation_sequences(machine, samples=samples, max_size=25))
    agreement = Agreement(machine)
    for obs in sequence:
        agreement.step(obs)


def test_the_oracle_catches_a_machine_that_leaves_its_table() -> None:
    """A machine that lands somewhere its table does not say is caught."""

    class Rogue(type(POD)):  # type: ignore[misc]
        def apply(self, status: Any, obs: Observation) -> Any:
            after = super().apply(status, obs)
            return attrs.evolve(after, state=RUNNING) if after.state == PROVISIONING else after

    agreement = Agreement(Rogue())
    at = agreement.status
    with pytest.raises(AssertionError, match="transitions to 'Provisioning'"):
        agreement.step(CreateRequested(at=EPOCH, pool="gpu", provider="fake"))
    assert agreement.status is at


def test_the_oracle_catches_a_refusal_the_table_does_not_make() -> None:
    """A machine that refuses what its table accepts is caught."""

    class Stubborn(type(POD)):  # type: ignore[misc]
        def select(self, status: Any, obs: Observation) -> Any:
            raise InvalidTransition(self.name, status.state, type(obs).__name__)

    agreement = Agreement(Stubborn())
    with pytest.raises(AssertionError, match="ours refused, transitions taken"):
        agreement.step(CreateRequested(at=EPOCH, pool="gpu", provider="fake"))
