"""The Store protocol: one atomic commit of status + journal entry + outbox rows, with CAS."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from .._core.machine import Machine
from .._core.observation import Observation
from .._core.refs import EventType, ObjectRef
from .._core.serde import parse_time
from .._core.transition import Transition


@attrs.frozen(slots=True)
class Record:
    """An object's stored status at ``version`` (1 after the first commit)."""

    ref: ObjectRef
    machine: str
    status: Any
    version: int


@attrs.frozen(slots=True)
class JournalEntry:
    """What produced ``version``: the observation, and the transitions it committed."""

    version: int
    observation: Observation
    transitions: tuple[Transition, ...] = ()


@runtime_checkable
class Store(Protocol):
    """Persistence for statuses, their journals and the outbox of undelivered events.

    ``commit`` is atomic: the status, the journal entry and the outbox rows are written
    together or not at all. It raises :class:`~lifecycle.Conflict` when the stored version is
    not ``expected`` and :class:`~lifecycle.StoreError` for anything else that went wrong.
    """

    def load(self, machine: Machine[Any], ref: ObjectRef) -> Record | None: ...

    def commit(
        self,
        machine: Machine[Any],
        ref: ObjectRef,
        expected: int,
        status: Any,
        observation: Observation,
        transitions: Sequence[Transition],
    ) -> int: ...

    def journal(self, machine: Machine[Any], ref: ObjectRef) -> list[JournalEntry]: ...

    def records(self, machine: Machine[Any]) -> Iterator[Record]: ...

    def claim_undelivered(self, limit: int = 1000) -> list[Transition]: ...

    def mark_delivered(self, ids: Iterable[str]) -> None: ...

    def close(self) -> None: ...


def transition_to_row(t: Transition) -> dict[str, Any]:
    """A Transition as JSON-ready data (for outbox and journal rows)."""
    return {
        "ref": [t.ref.kind, t.ref.namespace, t.ref.name, t.ref.uid],
        "machine": t.machine,
        "from": t.source,
        "to": t.target,
        "reason": t.reason,
        "type": t.type.value,
        "message": t.message,
        "version": t.version,
        "at": t.at.isoformat(),
        "n": t.n,
        "condition": t.condition,
        "controller": t.controller,
    }


def transition_from_row(data: dict[str, Any]) -> Transition:
    kind, namespace, name, uid = data["ref"]
    return Transition(
        ObjectRef(kind, namespace, name, uid),
        data["machine"],
        data["from"],
        data["to"],
        data["reason"],
        EventType(data["type"]),
        data["message"],
        int(data["version"]),
        parse_time(data["at"]),
        int(data["n"]),
        data.get("condition", ""),
        controller=data.get("controller", ""),
    )
