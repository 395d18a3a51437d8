"""Admit's remembered checks (ADR 0165): the runner looks up each observation class's compiled
check once per machine and class, and checks every value on every call. Whatever it is given,
it accepts or refuses exactly what the plain check does -- the class among the machine's
observations, then ``validate`` of the value -- with the same typed error, on the first call
for a class and on every later one (the remembered check), for every shipped machine, with
hostile values (NaN, huge integers, wrong types, naive times) and other machines' classes."""

from __future__ import annotations

from typing import Any

import hypothesis
import pytest
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

import lifecycle
from lifecycle import LifecycleError, Machine, ObjectRef, Observation, Runner, UnknownObservation
from lifecycle._core.serde import validate
from lifecycle.testing import hostile_built

REGISTRY = lifecycle.default_registry()
MACHINES = sorted(REGISTRY)
SETTINGS = hypothesis.settings(
    max_examples=30,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def plain(machine: Machine[Any], observation: Observation) -> tuple[type, str] | None:
    """The plain check: the class among the machine's observations, then the value's."""
    try:
        if observation.__class__ not in machine.accepted:
            raise UnknownObservation(observation.__class__.__name__)
        validate(observation)
    except LifecycleError as e:
        return type(e), str(e) if not isinstance(e, UnknownObservation) else ""
    return None


def admitted(runner: Runner, ref: ObjectRef, observation: Observation) -> tuple[type, str] | None:
    try:
        assert runner.protocol.admit(ref, observation) is runner.machine_for(ref)
    except LifecycleError as e:
        return type(e), str(e) if not isinstance(e, UnknownObservation) else ""
    return None


@pytest.mark.parametrize("name", MACHINES)
def test_remembered_checks_accept_and_refuse_what_the_plain_check_does(name: str) -> None:
    machine = REGISTRY[name]
    others = [REGISTRY[n] for n in MACHINES if n != name]
    runner = Runner(links=())  # one runner for every example: its checks are remembered
    ref = ObjectRef(machine.kind, "default", f"{name}-0", f"{name}-uid-0")

    @SETTINGS
    @given(st.data())
    def run(data: st.DataObject) -> None:
        source = data.draw(st.sampled_from([machine, machine, *others]))
        observation = data.draw(hostile_built(source))
        expected = plain(machine, observation)
        assert admitted(runner, ref, observation) == expected  # first (or remembered) check
        assert admitted(runner, ref, observation) == expected  # the remembered one again

    run()
