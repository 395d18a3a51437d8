"""The hot path's shortcuts (issue 19, ADR 0015) give what the general code gives.

``Machine.apply``/``flips`` bound per instance, an entry step whose values are all row
constants, a NamedTuple status read back with its field types found once, a transition's id
built once when it is stamped, the memory store's journal as one flat list per object with
shared packed transitions, and its records built without ``__init__``.
"""

from __future__ import annotations

import gc
import typing
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, NamedTuple

import attrs
import pytest

from lifecycle import (
    EventType,
    InvalidTransition,
    Machine,
    MachineRegistry,
    MemoryStore,
    ObjectRef,
    Observation,
    Row,
    Runner,
    Table,
    UnknownObservation,
)
from lifecycle._core import serde, transition
from lifecycle._core.transition import Flip, Transition, stamp
from lifecycle.stores import memory
from lifecycle.stores.base import Record

AT = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
REF = ObjectRef("Lamp", "home", "desk", "lamp-1")


@attrs.frozen(slots=True, kw_only=True)
class SwitchOn(Observation):
    pass


@attrs.frozen(slots=True, kw_only=True)
class SwitchOff(Observation):
    pass


@attrs.frozen(slots=True, kw_only=True)
class Unplug(Observation):
    pass


class LampStatus(NamedTuple):
    state: str = "Off"
    reason: str = ""
    message: str = ""


TABLE = Table(
    "lamp",
    states=("Off", "On"),
    initial="Off",
    terminal=(),
    observations=(SwitchOn, SwitchOff, Unplug),
    rows=[
        Row("Off", SwitchOn, to="On", reason="SwitchedOn", event=EventType.NORMAL,
            message="the lamp is on"),
        Row("On", SwitchOff, to="Off", reason="SwitchedOff", event=EventType.NORMAL,
            message="the lamp is off"),
    ],
)  # fmt: skip


class Lamp(Machine[LampStatus]):
    name: ClassVar[str] = "lamp"
    kind: ClassVar[str] = "Lamp"
    status_type: ClassVar[type[Any]] = LampStatus
    table: ClassVar[Table] = TABLE

    def initial(self, ref: ObjectRef) -> LampStatus:
        return LampStatus()


class LoudLamp(Lamp):
    """Overrides ``apply`` and ``flips``: the overrides are what runs."""

    def apply(self, status: LampStatus, obs: Observation) -> LampStatus:
        return super().apply(status, obs)._replace(message="LOUD")

    def flips(self, before: LampStatus, after: LampStatus) -> tuple[Flip, ...]:
        return (*super().flips(before, after), Flip("", "x", "Loud", EventType.NORMAL, "!"))


class LampSubStatus(LampStatus):
    pass


# -- apply and flips, bound per instance --------------------------------------------------------
def test_bound_apply_and_flips_give_what_the_class_methods_give() -> None:
    lamp = Lamp()
    assert "apply" in vars(lamp)  # the instance's own functions
    assert "flips" in vars(lamp)
    status = lamp.initial(REF)
    for obs in (SwitchOn(at=AT), SwitchOff(at=AT), SwitchOn(at=AT)):
        after = lamp.apply(status, obs)
        assert after == Machine.apply(lamp, status, obs)
        assert lamp.flips(status, after) == Machine.flips(lamp, status, after)
        assert lamp.flips(status, after) is lamp.flips(status, after)  # memoised
        status = after
    assert lamp.flips(status, status) == ()


def test_bound_apply_refuses_as_the_class_method_does() -> None:
    lamp = Lamp()
    with pytest.raises(InvalidTransition):
        lamp.apply(LampStatus("On"), SwitchOn(at=AT))
    with pytest.raises(UnknownObservation):
        lamp.apply(LampStatus("Off"), object())  # type: ignore[arg-type]
    with pytest.raises(InvalidTransition):  # a declared observation without a row here
        lamp.apply(LampStatus("Off"), Unplug(at=AT))


def test_a_subclass_overriding_apply_or_flips_keeps_its_override() -> None:
    loud = LoudLamp()
    assert "apply" not in vars(loud)
    assert "flips" not in vars(loud)
    after = loud.apply(LampStatus(), SwitchOn(at=AT))
    assert after.message == "LOUD"
    assert [f.reason for f in loud.flips(LampStatus(), after)] == ["SwitchedOn", "Loud"]


def test_an_entry_of_row_constants_builds_the_row_values_and_keeps_a_subclass() -> None:
    lamp = Lamp()
    on = lamp.apply(LampStatus(), SwitchOn(at=AT))
    assert type(on) is LampStatus
    assert on == ("On", "SwitchedOn", "the lamp is on")
    assert lamp.apply(LampStatus(), SwitchOn(at=AT)) is not on  # a new record each time
    sub = lamp.apply(LampSubStatus(), SwitchOn(at=AT))
    assert type(sub) is LampSubStatus
    assert tuple(sub) == tuple(on)


# -- a NamedTuple status read back -----------------------------------------------------------------
def test_a_named_tuple_status_finds_its_field_types_once(monkeypatch: pytest.MonkeyPatch) -> None:
    class Fresh(NamedTuple):
        state: str
        size: int = 0

    calls: list[object] = []
    real = typing.get_type_hints

    def counting(obj: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(obj)
        return real(obj, *args, **kwargs)

    monkeypatch.setattr(typing, "get_type_hints", counting)
    loaded = [serde.load(Fresh, {"state": "On", "size": n}) for n in range(5)]
    assert loaded == [Fresh("On", n) for n in range(5)]
    assert calls.count(Fresh) == 1
    assert serde.load(Fresh, serde.dump(Fresh("Off", 3))) == Fresh("Off", 3)


# -- a transition's id, built once ---------------------------------------------------------------
FLIP = Flip("Off", "On", "SwitchedOn", EventType.NORMAL, "the lamp is on")


def test_a_stamped_transition_is_the_record_its_constructor_makes() -> None:
    for epoch in ("", "e7"):
        stamped = stamp((FLIP, FLIP), REF, "lamp", 3, AT, epoch)
        built = tuple(
            Transition(REF, "lamp", "Off", "On", "SwitchedOn", EventType.NORMAL,
                       "the lamp is on", 3, AT, n, epoch=epoch)
            for n in range(2)
        )  # fmt: skip
        assert stamped == built
        assert [t.id for t in stamped] == [t.id for t in built]
        assert stamped[0].id == (f"lamp-1:3:0@{epoch}" if epoch else "lamp-1:3:0")


def test_a_stamped_transitions_id_is_built_once() -> None:
    (t,) = stamp((FLIP,), REF, "lamp", 3, AT)
    assert t.id is t.id  # the same string each time it is asked for, not a new one


def test_only_the_last_stamps_ids_are_held() -> None:
    first = stamp((FLIP,), REF, "lamp", 3, AT)
    second = stamp((FLIP, FLIP), REF, "lamp", 4, AT)
    assert sorted(t for t, _ in transition._IDS.values()) == sorted(second)
    assert first[0].id == "lamp-1:3:0"  # built when asked


def test_a_copy_of_a_stamped_transition_has_its_own_id() -> None:
    (t,) = stamp((FLIP,), REF, "lamp", 3, AT)
    assert t._replace(action=True).id == ""
    assert t._replace(fallback=True).id == "lamp-1:3:f0-SwitchedOn"
    assert t._replace(epoch="e2").id == "lamp-1:3:0@e2"
    assert t._replace(version=4).id == "lamp-1:4:0"


# -- the memory store's journal ------------------------------------------------------------------
def _runner(store: MemoryStore) -> Runner:
    return Runner(store, [], machines=MachineRegistry([Lamp()]), links=())


def test_the_memory_journal_reads_back_every_entry_in_order() -> None:
    store = MemoryStore()
    runner = _runner(store)
    results = []
    for k in range(6):
        obs = (SwitchOn if k % 2 == 0 else SwitchOff)(at=AT + timedelta(seconds=k))
        results.append(runner.observe(REF, obs))
    entries = store.journal(Lamp(), REF)
    assert [e.version for e in entries] == [1, 2, 3, 4, 5, 6]
    assert [e.transitions for e in entries] == [r.transitions for r in results]
    assert [e.observation.at for e in entries] == [AT + timedelta(seconds=k) for k in range(6)]
    assert store.compact(Lamp(), keep=2) == 4
    assert [e.version for e in store.journal(Lamp(), REF)] == [5, 6]
    runner.observe(REF, SwitchOn(at=AT + timedelta(seconds=9)))
    assert [e.version for e in store.journal(Lamp(), REF)] == [5, 6, 7]
    assert store.compact(Lamp(), keep=0) == 3
    assert store.journal(Lamp(), REF) == []
    runner.observe(REF, SwitchOff(at=AT + timedelta(seconds=10)))
    assert [e.version for e in store.journal(Lamp(), REF)] == [8]


def test_memory_journal_entries_add_no_object_for_the_collector() -> None:
    store = MemoryStore()
    runner = _runner(store)
    on, off = SwitchOn(at=AT), SwitchOff(at=AT)
    runner.observe(REF, on)
    runner.observe(REF, off)
    gc.collect()
    before = len(gc.get_objects())
    for _ in range(500):
        runner.observe(REF, on)
        runner.observe(REF, off)
    gc.collect()
    grown = len(gc.get_objects()) - before
    assert len(store.journal(Lamp(), REF)) == 1002
    assert grown < 50, f"{grown} tracked objects for 1000 journal entries"


def test_entries_that_say_the_same_share_their_packed_transitions() -> None:
    store = MemoryStore()
    runner = _runner(store)
    for k in range(4):
        runner.observe(REF, (SwitchOn if k % 2 == 0 else SwitchOff)(at=AT))
    flat = store._journals[REF.uid]
    assert flat[3] is flat[9]  # on, off, on, off
    assert flat[6] is flat[12]


def test_a_record_built_without_init_is_the_record_init_builds() -> None:
    # The shortcut sets the fields directly: it holds only while Record has no validator,
    # converter or post-init hook to skip.
    assert tuple(f.name for f in attrs.fields(Record)) == memory._RECORD_FIELDS
    assert all(f.validator is None and f.converter is None for f in attrs.fields(Record))
    assert not hasattr(Record, "__attrs_post_init__")
    status = LampStatus("On")
    fast = memory._record(REF, "lamp", status, 2, None)
    assert fast == Record(REF, "lamp", status, 2, None)
    assert type(fast) is Record
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        fast.version = 3  # type: ignore[misc]
