"""Flips (what a status change means) and Transitions (a flip committed at a version)."""

from __future__ import annotations

from datetime import datetime

import attrs

from .refs import EventType, ObjectRef


@attrs.frozen(slots=True)
class Flip:
    """An exclusive-state change, or a declared verdict condition change, not yet written.

    ``condition`` is ``""`` for the exclusive state; for a verdict it names the condition and
    ``source``/``target`` are its statuses (``""`` meaning absent).
    """

    source: str
    target: str
    reason: str
    type: EventType
    message: str
    condition: str = ""


@attrs.frozen(slots=True)
class Transition:
    """The event: a flip that was durably written as ``version`` of ``ref``'s status.

    ``id`` is stable across redelivery: ``<uid>:<version>:<n>``. A fallback Warning (the write
    failed) regards the last committed ``version`` and has the id ``<uid>:<version>:f<n>``.
    """

    ref: ObjectRef
    machine: str
    source: str
    target: str
    reason: str
    type: EventType
    message: str
    version: int
    at: datetime
    n: int = 0
    condition: str = ""
    fallback: bool = False

    @property
    def id(self) -> str:
        tag = f"f{self.n}" if self.fallback else str(self.n)
        return f"{self.ref.uid}:{self.version}:{tag}"

    def as_dict(self) -> dict[str, object]:
        """A flat, JSON-ready projection (the ``--format jsonl`` line)."""
        return {
            "at": self.at.isoformat(),
            "machine": self.machine,
            "kind": self.ref.kind,
            "namespace": self.ref.namespace,
            "name": self.ref.name,
            "uid": self.ref.uid,
            "type": self.type.value,
            "reason": self.reason,
            "from": self.source,
            "to": self.target,
            "condition": self.condition,
            "message": self.message,
            "version": self.version,
            "id": self.id,
            "fallback": self.fallback,
        }


def stamp(
    flips: tuple[Flip, ...], ref: ObjectRef, machine: str, version: int, at: datetime
) -> tuple[Transition, ...]:
    """Give each flip its committed version and position."""
    return tuple(
        Transition(
            ref,
            machine,
            f.source,
            f.target,
            f.reason,
            f.type,
            f.message,
            version,
            at,
            n,
            f.condition,
        )
        for n, f in enumerate(flips)
    )
