"""Stores that wrap another store: fault injection for protocol tests, and a read-through
overlay that lets a dry run see real statuses without writing them."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Literal

from .._core.errors import Conflict, StoreError
from .._core.machine import Machine
from .._core.observation import Observation
from .._core.refs import ObjectRef
from .._core.transition import Transition
from .base import JournalEntry, Record, Store
from .memory import MemoryStore

Fault = Literal["conflict", "write-error"]
FAULTS: tuple[Fault, ...] = ("conflict", "write-error")


class FaultyStore:
    """Wraps a store; :meth:`inject` makes the next ``times`` commits of one object fail.

    ``conflict`` raises :class:`~lifecycle.Conflict` (as if another writer got there first),
    ``write-error`` raises :class:`~lifecycle.StoreError`. Nothing is written on a fault.
    """

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self._faults: dict[str, list[Fault]] = {}

    def inject(self, uid: str, fault: Fault, times: int = 1) -> None:
        if fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}; known: {', '.join(FAULTS)}")
        if times < 1:
            raise ValueError(f"times must be at least 1, got {times}")
        self._faults.setdefault(uid, []).extend([fault] * times)

    def pending_faults(self, uid: str) -> int:
        return len(self._faults.get(uid, ()))

    def load(self, machine: Machine[Any], ref: ObjectRef) -> Record | None:
        return self.inner.load(machine, ref)

    def commit(
        self,
        machine: Machine[Any],
        ref: ObjectRef,
        expected: int,
        status: Any,
        observation: Observation,
        transitions: Sequence[Transition],
    ) -> int:
        queue = self._faults.get(ref.uid)
        if queue:
            self.inner.load(machine, ref)  # an impostor is refused as such, not as a fault
            fault = queue.pop(0)
            if fault == "conflict":
                raise Conflict(ref.uid, expected, None)
            raise StoreError(f"injected write error on {ref.uid}")
        return self.inner.commit(machine, ref, expected, status, observation, transitions)

    def journal(self, machine: Machine[Any], ref: ObjectRef) -> list[JournalEntry]:
        return self.inner.journal(machine, ref)

    def records(self, machine: Machine[Any]) -> Iterator[Record]:
        return self.inner.records(machine)

    def claim_undelivered(self, limit: int = 1000) -> list[Transition]:
        return self.inner.claim_undelivered(limit)

    def mark_delivered(self, ids: Iterable[str]) -> None:
        self.inner.mark_delivered(ids)

    def close(self) -> None:
        self.inner.close()


class OverlayStore(MemoryStore):
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
