"""Writing one trace line: the encoder :mod:`lifecycle.trace` (which also reads and replays
traces) and :mod:`lifecycle.adapters.recording` (which streams a live controller's observations
to a file) share. It lives in the kernel so that adapters, which sit below the trace module,
never import it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import attrs

from .machine import Machine
from .observation import Observation
from .refs import ObjectRef

__all__ = ["format_time", "object_fields", "observation_line"]


def format_time(at: datetime) -> str:
    """RFC 3339 with ``Z`` for UTC; a naive datetime is refused (traces carry offsets)."""
    if at.tzinfo is None or at.utcoffset() is None:
        raise ValueError(f"{at!r} has no timezone; trace times carry a UTC offset")
    text = at.isoformat()
    return text[: -len("+00:00")] + "Z" if text.endswith("+00:00") else text


def object_fields(ref: ObjectRef) -> dict[str, str]:
    """A line's ``"object"``: namespace (left out for a cluster-scoped object), name, uid."""
    obj = {"namespace": ref.namespace, "name": ref.name, "uid": ref.uid}
    if not ref.namespace:
        del obj["namespace"]
    return obj


def observation_line(
    machine: Machine[Any], ref: ObjectRef, observation: Observation
) -> dict[str, Any]:
    """One trace line (as a dict) for ``observation`` of ``ref``; fields still at their
    defaults are left out, so recorded traces read like hand-written ones."""
    fields = machine.dump_observation(observation)
    for f in attrs.fields(type(observation)):
        default = f.default
        if (
            f.name in fields
            and default is not attrs.NOTHING
            and not isinstance(default, attrs.Factory)  # type: ignore[arg-type]
            and getattr(observation, f.name) == default
        ):
            del fields[f.name]
    line: dict[str, Any] = {
        "at": format_time(observation.at),
        "machine": machine.name,
        "object": object_fields(ref),
        "observe": observation.name(),
    }
    if fields:
        line["with"] = fields
    return line
