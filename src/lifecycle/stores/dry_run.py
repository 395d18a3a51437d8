"""The dry-run store: a read-through overlay that lets a dry run (``lifecycle replay``'s check,
ADR 0009) see real statuses without writing them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._core.machine import Machine
from .._core.observation import Observation
from .._core.refs import ObjectRef
from .._core.transition import Transition
from .base import JournalEntry, Record, Store
from .memory import MemoryStore


class DryRunStore(MemoryStore):
    """Writes go to memory; reads of objects not yet written here come from ``base``.

    ``base`` is never written: a dry run over it leaves it exactly as it was. The identity
    rule holds across both: a ref whose uid ``base`` (or an earlier write here) holds for
    another object raises :class:`~lifecycle.IdentityMismatch`, so a dry run meets the
    refusal the real run would.
    """

    def __init__(self, base: Store) -> None:
        super().__init__(journal=False)
        self._base = base

    def load(self, machine: Machine[Any], ref: ObjectRef) -> Record | None:
        mine = super().load(machine, ref)
        return mine if mine is not None else self._base.load(machine, ref)

    def journal(self, machine: Machine[Any], ref: ObjectRef) -> list[JournalEntry]:
        """``base``'s journal of an object not written here (none is kept of those that were)."""
        if ref.uid in self._records:
            return super().journal(machine, ref)
        return self._base.journal(machine, ref)

    def commit(
        self,
        machine: Machine[Any],
        ref: ObjectRef,
        expected: int,
        status: Any,
        observation: Observation,
        transitions: Sequence[Transition],
    ) -> int:
        with self._lock:
            if ref.uid not in self._records:
                seeded = self._base.load(machine, ref)
                if seeded is not None:
                    self._records[ref.uid] = seeded
        return super().commit(machine, ref, expected, status, observation, transitions)
