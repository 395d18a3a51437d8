"""A machine that mirrors a watched object (for the host loop's tests): its status holds the
``resourceVersion`` of the last state observed, ``Gone`` once the object was deleted, and a
timer row ``deadline`` seconds after it was first seen (``Expired``)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, ClassVar

import attrs

from lifecycle import EventType, Machine, ObjectRef, Observation, Row, Table, Tick, ignore
from lifecycle.tables import SAME, enter

N = EventType.NORMAL
#: seconds from the first sight to the timer row
DEADLINE = 0.5


@attrs.frozen
class MirrorStatus:
    state: str = "Absent"
    reason: str = ""
    message: str = ""
    version: str = ""
    seen: datetime | None = None


@attrs.frozen(kw_only=True)
class Saw(Observation):
    version: str


@attrs.frozen(kw_only=True)
class Vanished(Observation):
    pass


def _saw(status: MirrorStatus, obs: Saw, row: Row) -> MirrorStatus:
    return enter(status, obs, row, version=obs.version, seen=status.seen or obs.at)


def _expired(status: MirrorStatus, obs: Tick) -> bool:
    return status.seen is not None and obs.at >= status.seen + timedelta(seconds=DEADLINE)


def _deadline(status: MirrorStatus) -> datetime | None:
    return None if status.seen is None else status.seen + timedelta(seconds=DEADLINE)


TABLE = Table(
    "mirror",
    states=("Absent", "Present", "Expired", "Gone"),
    initial="Absent",
    terminal=("Gone",),
    observations=(Saw, Vanished, Tick),
    rows=(
        Row("Absent", Saw, to="Present", reason="Seen", event=N, effect=_saw),
        Row(("Present", "Expired"), Saw, to=SAME, reason="Seen", effect=_saw),
        Row(("Absent", "Present", "Expired"), Vanished, to="Gone", reason="Deleted", event=N),
        Row(
            "Present",
            Tick,
            to="Expired",
            reason="Expired",
            event=N,
            guard=_expired,
            deadline=_deadline,
        ),
        ignore("Present", Tick, "not yet"),
        ignore(("Absent", "Expired", "Gone"), Tick, "no timer runs"),
    ),
)


class MirrorMachine(Machine[MirrorStatus]):
    name: ClassVar[str] = "mirror"
    kind: ClassVar[str] = "Widget"
    status_type: ClassVar[type[Any]] = MirrorStatus
    table: ClassVar[Table] = TABLE
    api_version: ClassVar[str] = "test.example.com/v1"

    def initial(self, ref: ObjectRef) -> MirrorStatus:
        return MirrorStatus()


MIRROR = MirrorMachine()
