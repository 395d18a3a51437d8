"""Field survival: a status field that no row owns survives every observation, on every
shipped machine (issue 36).

A row's effect that builds its status field by field (rather than evolving the status it was
given) silently resets every field it does not name: adding a field to a status and
forgetting one such effect loses the field on every observation that takes it. The property
below catches the whole class without knowing the fields: each machine's status type gets a
subclass with one more field, ``probe``, that no row knows; a run starts from the initial
status carrying it, and after every observation the status must still be of that subclass
with ``probe`` unchanged. An effect that rebuilds the status from its own class drops both.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings

from lifecycle import EventType, LifecycleError, Machine, Observation
from lifecycle.machines import default_registry
from lifecycle.tables import Row, Table
from lifecycle.testing import EPOCH, default_ref, observation_sequences

PROBE = "no row owns this"
_PROBED: dict[type[Any], type[Any]] = {}


def probed(status_type: type[Any]) -> type[Any]:
    """``status_type`` with one more field, ``probe``, that no row of any table names."""
    found = _PROBED.get(status_type)
    if found is None:
        found = attrs.make_class(
            f"Probed{status_type.__name__}",
            {"probe": attrs.field(default="", kw_only=True)},
            bases=(status_type,),
            frozen=True,
            slots=True,
        )
        _PROBED[status_type] = found
    return found


def with_probe(status: Any) -> Any:
    cls = probed(type(status))
    values = {f.alias: getattr(status, f.name) for f in attrs.fields(type(status)) if f.init}
    return cls(**values, probe=PROBE)


def survivors(machine: Machine[Any], observations: list[Observation]) -> list[str]:
    """Where the probe was lost: one line per observation that dropped it."""
    status = with_probe(machine.initial(default_ref(machine)))
    lost: list[str] = []
    for obs in observations:
        try:
            after = machine.apply(status, obs)
        except LifecycleError:
            continue  # refused: the status is unchanged by definition
        if type(after) is not type(status) or after.probe != PROBE:
            row = machine.select(status, obs)
            lost.append(f"{machine.name}: {row.label} lost a field it does not own")
            after = with_probe(after) if type(after) is not type(status) else after
        status = after
    return lost


MACHINES = default_registry()


@pytest.mark.parametrize("name", list(MACHINES))
def test_every_field_no_row_owns_survives_every_observation(name: str) -> None:
    machine = MACHINES[name]

    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
    @given(observation_sequences(machine, max_size=25))
    def run(observations: list[Observation]) -> None:
        assert survivors(machine, observations) == []

    run()


@attrs.frozen(slots=True)
class _Status:
    state: str = "a"
    reason: str = ""
    message: str = ""
    count: int = 0


@attrs.frozen(kw_only=True)
class _Bumped(Observation):
    pass


def _rebuild(status: _Status, obs: Observation, row: Row) -> _Status:
    # the bug: a status built field by field from its own class
    return _Status(state="b", reason="Bumped", message="", count=status.count + 1)


class _Rebuilding(Machine[_Status]):
    name = "rebuilding"
    kind = "Rebuilding"
    status_type = _Status
    table = Table(
        "rebuilding",
        states=("a", "b"),
        initial="a",
        terminal=(),
        observations=(_Bumped,),
        rows=(
            Row(
                ("a", "b"),
                _Bumped,
                to="b",
                reason="Bumped",
                event=EventType.NORMAL,
                effect=_rebuild,
            ),
        ),
    )

    def initial(self, ref: Any) -> _Status:
        return _Status()


def test_the_property_finds_an_effect_that_rebuilds_its_status() -> None:
    machine = _Rebuilding()
    lost = survivors(machine, [_Bumped(at=EPOCH), _Bumped(at=EPOCH)])
    assert lost == ["rebuilding: a|b x _Bumped -> b lost a field it does not own"] * 2


def test_a_field_setter_sets_its_fields_and_keeps_the_rest() -> None:
    from lifecycle._core.machine import field_setter

    set_count = field_setter(_Status, "state", "count")
    before = _Status("a", "Why", "words", 1)
    assert set_count(before, "b", 2) == _Status("b", "Why", "words", 2)
    probe = with_probe(before)
    after: Any = set_count(probe, "b", 3)  # a subclass keeps its class and its own field
    assert (type(after), after.probe, after.count, after.message) == (
        type(probe),
        PROBE,
        3,
        "words",
    )
    with pytest.raises(TypeError, match="not distinct init fields"):
        field_setter(_Status, "state", "nope")
    with pytest.raises(TypeError, match="not distinct init fields"):
        field_setter(_Status, "state", "state")
