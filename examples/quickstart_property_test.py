"""Quick-start, property tester: the library's property suite, run on your own table.

Run it with ``pytest examples/quickstart_property_test.py``.
"""

from typing import Any, ClassVar

import attrs
from hypothesis import given

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
from lifecycle.testing import check_machine, default_ref, observation_sequences, sqlite_factory


@attrs.frozen
class DoorStatus:
    state: str = "closed"
    reason: str = ""
    message: str = ""


@attrs.frozen(kw_only=True)
class Opened(Observation):
    by: str = ""


@attrs.frozen(kw_only=True)
class Closed(Observation):
    pass


@attrs.frozen(kw_only=True)
class Jammed(Observation):
    pass


N, W = EventType.NORMAL, EventType.WARNING
DOOR_TABLE = Table(
    "door",
    states=("closed", "open", "jammed"),
    initial="closed",
    terminal=("jammed",),
    observations=(Opened, Closed, Jammed, Tick),
    rows=(
        Row("closed", Opened, to="open", reason="Opened", event=N, message="opened by {by}"),
        Row("open", Closed, to="closed", reason="Closed", event=N, message="closed"),
        Row(
            ("closed", "open"),
            Jammed,
            to="jammed",
            reason="Jammed",
            event=W,
            message="the lock jammed",
        ),
        ignore("open", Opened, "already open"),
        ignore("closed", Closed, "already closed"),
        ignore(("closed", "open", "jammed"), Tick, "no timers"),
    ),  # a pair no row names (Opened while jammed) is refused: the suite checks that too
)


class DoorMachine(Machine[DoorStatus]):
    name: ClassVar[str] = "door"
    kind: ClassVar[str] = "Door"
    status_type: ClassVar[type[Any]] = DoorStatus
    table: ClassVar[Table] = DOOR_TABLE
    warning_states: ClassVar[frozenset[str]] = frozenset({"jammed"})

    def initial(self, ref: ObjectRef) -> DoorStatus:
        return DoorStatus()


DOOR = DoorMachine()


def test_the_door_keeps_every_promise(tmp_path: Any) -> None:
    check_machine(DOOR)  # flip-only, post-write, retries, fallbacks, journal folds, ...
    check_machine(DOOR, store_factory=sqlite_factory(tmp_path), max_examples=20)


@given(observation_sequences(DOOR))
def test_a_jammed_door_stays_jammed(sequence: list[Observation]) -> None:
    status = DOOR.initial(default_ref(DOOR))
    for obs in sequence:
        try:
            after = DOOR.apply(status, obs)
        except LifecycleError:  # refused: the table names no such row
            continue
        assert status.state != "jammed" or after.state == "jammed"
        status = after
