"""Changing a table: a door's state ``open`` becomes ``ajar`` (schema v1 -> v2), and the doors a
v1 controller stored in an SQLite file still load, fold and run under v2 through an upcaster.

    python examples/changing_a_table.py
    lifecycle db check   --store sqlite:///doors.db --machines examples/changing_a_table.py:DOORS_V2
    lifecycle db upgrade --store sqlite:///doors.db --machines examples/changing_a_table.py:DOORS_V2
"""

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

import attrs

from lifecycle import (
    EventType,
    Machine,
    MachineRegistry,
    ObjectRef,
    Observation,
    Row,
    Runner,
    SchemaRefused,
    SQLiteStore,
    Table,
    ignore,
)
from lifecycle.tables import Upcaster


@attrs.frozen
class DoorStatus:
    state: str = "closed"
    reason: str = ""
    message: str = ""


@attrs.frozen(kw_only=True)
class Opened(Observation):
    pass


@attrs.frozen(kw_only=True)
class Closed(Observation):
    pass


def door_table(open_state: str) -> Table:
    n = EventType.NORMAL
    return Table(
        "door",
        states=("closed", open_state),
        initial="closed",
        terminal=(),
        observations=(Opened, Closed),
        rows=(
            Row("closed", Opened, to=open_state, reason="Opened", event=n, message="opened"),
            Row(open_state, Closed, to="closed", reason="Closed", event=n, message="closed"),
            ignore(open_state, Opened, "already open"),
            ignore("closed", Closed, "already closed"),
        ),
    )


class DoorV1(Machine[DoorStatus]):
    """Last release's door: schema version 1 (the default)."""

    name: ClassVar[str] = "door"
    kind: ClassVar[str] = "Door"
    status_type: ClassVar[type[Any]] = DoorStatus
    table: ClassVar[Table] = door_table("open")

    def initial(self, ref: ObjectRef) -> DoorStatus:
        return DoorStatus()


def open_is_now_ajar(status: dict[str, Any]) -> dict[str, Any]:
    """The v1 -> v2 upcaster of a status, as the plain data the store holds."""
    if status["state"] == "open":
        status["state"] = "ajar"
    return status


class DoorV2(DoorV1):
    """This release's door: ``open`` renamed ``ajar``, so the schema version is bumped and
    v1's records are read through the upcaster. ``fingerprint`` is v1's, as ``lifecycle db
    check`` showed it before the change: a v1 record with another one is reported."""

    table: ClassVar[Table] = door_table("ajar")
    schema_version: ClassVar[int] = 2
    upcasters: ClassVar[dict[int, Upcaster]] = {
        1: Upcaster(fingerprint="68cddafdbb01", status=open_is_now_ajar)
    }


class DoorV2Forgetful(DoorV1):
    """The same change without an upcaster: a runner refuses to start on v1's records."""

    table: ClassVar[Table] = door_table("ajar")
    schema_version: ClassVar[int] = 2


DOORS_V2 = MachineRegistry([DoorV2()])


def main(db: str = "doors.db") -> list[str]:
    Path(db).unlink(missing_ok=True)
    at = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
    front, back = (ObjectRef("Door", "hall", name, f"door-{name}") for name in ("front", "back"))
    lines = []

    store = SQLiteStore(db)  # last release: v1 writes two doors, one left open
    v1 = Runner(store, machines=MachineRegistry([DoorV1()]), links=())
    v1.observe(front, Opened(at=at))
    v1.observe(back, Opened(at=at))
    v1.observe(back, Closed(at=at + timedelta(seconds=5)))
    store.close()

    store = SQLiteStore(db)  # this release: a forgetful v2 is refused at start-up ...
    try:
        Runner(store, machines=MachineRegistry([DoorV2Forgetful()]), links=())
    except SchemaRefused as refused:
        lines.append(f"refused: {refused.findings[0]}")
    v2 = Runner(store, machines=DOORS_V2, links=())  # ... v2 with its upcaster starts
    door = DOORS_V2["door"]
    record = store.load(door, front)  # read through the upcaster; nothing rewritten
    assert record is not None
    lines.append(f"front door, stored by v1 as open, loads as {record.status.state}")
    result = v2.observe(front, Closed(at=at + timedelta(seconds=10)))
    lines.append(f"front door closed under v2: {result.transitions[0].source} -> closed")
    store.close()
    print("\n".join(lines))
    return lines


if __name__ == "__main__":
    main()
