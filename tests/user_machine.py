"""A user's machine, outside the package: the Volume attach/detach lifecycle of issue 36
(five states, one Warning row), written to a file of its own and loaded from it, as a host
loads its machine. Nothing in the library knows it by name."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

#: The file a user writes: a status, five observations, a table and a machine. It declares
#: its Kubernetes apiVersion and reporting controller on the machine, and nothing anywhere
#: else.
VOLUME_SOURCE = '''
from typing import Any, ClassVar

import attrs

from lifecycle import EventType, Machine, ObjectRef, Observation, Row, Table
from lifecycle.tables import allow, allow_refused, enter

N, W = EventType.NORMAL, EventType.WARNING


@attrs.frozen
class VolumeStatus:
    state: str = "Detached"
    reason: str = ""
    message: str = ""
    node: str = ""


@attrs.frozen(kw_only=True)
class AttachRequested(Observation):
    node: str


@attrs.frozen(kw_only=True)
class Attached(Observation):
    pass


@attrs.frozen(kw_only=True)
class AttachFailed(Observation):
    error: str


@attrs.frozen(kw_only=True)
class DetachRequested(Observation):
    pass


@attrs.frozen(kw_only=True)
class Detached(Observation):
    pass


def attaching(status: VolumeStatus, obs: AttachRequested, row: Row) -> VolumeStatus:
    return enter(status, obs, row, node=obs.node)


TABLE = Table(
    "volume",
    states=("Detached", "Attaching", "Attached", "Detaching", "Failed"),
    initial="Detached",
    terminal=(),
    observations=(AttachRequested, Attached, AttachFailed, DetachRequested, Detached),
    rows=(
        Row("Detached", AttachRequested, to="Attaching", reason="Attaching", event=N,
            message="attaching to {node}", effect=attaching),
        Row("Attaching", Attached, to="Attached", reason="Attached", event=N),
        Row("Attaching", AttachFailed, to="Failed", reason="AttachFailed", event=W,
            message="{error}"),
        Row(("Attached", "Failed"), DetachRequested, to="Detaching", reason="Detaching",
            event=N),
        Row("Detaching", Detached, to="Detached", reason="Detached", event=N),
    ),
)


class VolumeMachine(Machine[VolumeStatus]):
    """Attaches a volume to a node and detaches it again."""

    name: ClassVar[str] = "volume"
    kind: ClassVar[str] = "Volume"
    status_type: ClassVar[type[Any]] = VolumeStatus
    table: ClassVar[Table] = TABLE
    api_version: ClassVar[str] = "storage.example.com/v1"
    controller: ClassVar[str] = "volume-attacher"
    analysis_allowances: ClassVar[dict[str, str]] = {
        **allow("a volume lives as long as its claim", "no-terminal"),
        **{
            key: reason
            for state in TABLE.states
            for key, reason in allow_refused(
                "a report out of order is a host bug",
                [state],
                [o for o in TABLE.observations if (state, o) not in TABLE.by_pair],
            ).items()
        },
    }

    def initial(self, ref: ObjectRef) -> VolumeStatus:
        return VolumeStatus()

    def kubernetes_status(self, status: VolumeStatus) -> dict[str, Any]:
        return {"phase": status.state, "message": status.message}


VOLUME = VolumeMachine()
'''

#: A trace of one volume: attached, detached, attached again and failing.
VOLUME_TRACE = """\
{"at": "2026-11-30T10:00:00Z", "machine": "volume", "object": {"namespace": "data", "name": "vol-a", "uid": "vol-a-uid"}, "observe": "AttachRequested", "with": {"node": "node-1"}}
{"at": "2026-11-30T10:00:05Z", "machine": "volume", "object": {"namespace": "data", "name": "vol-a", "uid": "vol-a-uid"}, "observe": "Attached", "with": {}}
{"at": "2026-11-30T10:01:00Z", "machine": "volume", "object": {"namespace": "data", "name": "vol-a", "uid": "vol-a-uid"}, "observe": "DetachRequested", "with": {}}
{"at": "2026-11-30T10:01:05Z", "machine": "volume", "object": {"namespace": "data", "name": "vol-a", "uid": "vol-a-uid"}, "observe": "Detached", "with": {}}
{"at": "2026-11-30T10:02:00Z", "machine": "volume", "object": {"namespace": "data", "name": "vol-a", "uid": "vol-a-uid"}, "observe": "AttachRequested", "with": {"node": "node-2"}}
{"at": "2026-11-30T10:02:09Z", "machine": "volume", "object": {"namespace": "data", "name": "vol-a", "uid": "vol-a-uid"}, "observe": "AttachFailed", "with": {"error": "node-2 has no free slot"}}
"""  # noqa: E501

#: The reasons the trace's events carry, in order.
VOLUME_REASONS = ["Attaching", "Attached", "Detaching", "Detached", "Attaching", "AttachFailed"]


def write_volume(folder: Path) -> Path:
    """Write the user's file (``volume.py``) into ``folder``; its path."""
    path = folder / "volume.py"
    path.write_text(VOLUME_SOURCE, encoding="utf-8")
    return path


def load_volume(folder: Path) -> Any:
    """The ``VOLUME`` machine of a freshly written ``volume.py`` in ``folder``."""
    path = write_volume(folder)
    name = f"user_volume_{abs(hash(str(folder)))}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module.VOLUME
