"""Plain records shared by every machine: object references, conditions, event types."""

from __future__ import annotations

import enum
from datetime import datetime

import attrs


class EventType(enum.StrEnum):
    """Kubernetes event types. Nothing else is ever emitted."""

    NORMAL = "Normal"
    WARNING = "Warning"


@attrs.frozen(slots=True)
class ObjectRef:
    """Which object a status belongs to. ``uid`` is the identity; the rest is for people.

    Attributes:
        kind: the object's kind (``Pod``), which picks its machine.
        namespace: its namespace; ``""`` for a cluster-scoped kind.
        name: its name.
        uid: its uid: the store's key, so a deleted and recreated object of the same name
            is another object.
    """

    kind: str
    namespace: str
    name: str
    uid: str

    def __str__(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.kind}/{where}"


@attrs.frozen(slots=True)
class Condition:
    """A Kubernetes-style condition. ``last_transition_time`` moves only when ``status`` does.

    ``observed_generation`` is the object generation the condition was computed for (``None``
    where a controller does not stamp it).

    Attributes:
        type: the condition's type (``Ready``, ``Failed``): one condition per type.
        status: ``"True"``, ``"False"`` or ``"Unknown"``, as Kubernetes spells them.
        reason: a CamelCase reason, for machines.
        message: the reason for people.
        last_transition_time: when ``status`` last changed; ``None`` before it is set.
        observed_generation: the object generation it was computed for, or ``None``.
    """

    type: str
    status: str  # "True" | "False" | "Unknown"
    reason: str = ""
    message: str = ""
    last_transition_time: datetime | None = None
    observed_generation: int | None = None


def set_condition(
    current: Condition | None,
    type_: str,
    status: str,
    reason: str,
    message: str,
    at: datetime,
) -> Condition:
    """Upsert a condition; keep ``last_transition_time`` unless the status changed."""
    if current is not None and current.status == status:
        if current.reason == reason and current.message == message:
            return current
        return Condition(type_, status, reason, message, current.last_transition_time)
    return Condition(type_, status, reason, message, at)
