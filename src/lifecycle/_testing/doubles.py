"""Test doubles and scenario steps: a store that fails on demand, a failing emitter, per-call
SQLite files, fault steps."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import attrs

from .._core.errors import Conflict, StoreError
from .._core.machine import Machine
from .._core.observation import Observation
from .._core.refs import ObjectRef
from .._core.transition import Transition
from ..emitters.memory import MemoryEmitter
from ..stores.base import JournalEntry, Record, Store
from ..stores.sqlite import SQLiteStore, Synchronous

# -- a store that fails on demand ------------------------------------------------------------
Fault = Literal["conflict", "write-error"]
FAULTS: tuple[Fault, ...] = ("conflict", "write-error")


class FaultyStore:
    """Wraps a store; :meth:`inject` makes the next ``times`` commits of one object fail.

    ``conflict`` raises :class:`~lifecycle.Conflict` (as if another writer got there first),
    ``write-error`` raises :class:`~lifecycle.StoreError`. Nothing is written on a fault.

    Args:
        inner: the store every call is passed on to; it holds the data.
    """

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        #: uid -> runs of ``[fault, how many left]``, in order: a count is never expanded
        #: into a list (``times`` costs nothing, however large).
        self._faults: dict[str, list[list[Any]]] = {}

    def inject(self, uid: str, fault: Fault, times: int = 1) -> None:
        """Make the next ``times`` commits of object ``uid`` fail with ``fault``.

        Args:
            uid: the object's uid.
            fault: ``"conflict"`` or ``"write-error"``.
            times: how many commits fail, at least 1; injected faults queue up in order.

        Raises:
            ValueError: an unknown fault, or ``times`` not a positive integer.
        """
        if fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}; known: {', '.join(FAULTS)}")
        if type(times) is not int or times < 1:
            raise ValueError(f"times must be an integer of at least 1, got {times!r}")
        runs = self._faults.setdefault(uid, [])
        if runs and runs[-1][0] == fault:
            runs[-1][1] += times
        else:
            runs.append([fault, times])

    def pending_faults(self, uid: str) -> int:
        """How many injected faults of object ``uid`` are still to fire.

        Args:
            uid: the object's uid.

        Returns:
            The count, 0 once every fault fired.
        """
        return sum(n for _, n in self._faults.get(uid, ()))

    def load(self, machine: Machine[Any], ref: ObjectRef) -> Record | None:
        """The inner store's record of the object.

        Args:
            machine: the object's machine.
            ref: the object.

        Returns:
            Its record, or ``None`` when it has none.
        """
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
        """Commit through the inner store, unless a fault is due for the object: then nothing is
        written and the fault is raised.

        Args:
            machine: the object's machine.
            ref: the object.
            expected: the version the caller read.
            status: the new status.
            observation: the observation that produced it.
            transitions: the transitions to put in the outbox.

        Returns:
            The new version.

        Raises:
            Conflict: an injected ``conflict`` (or a real one from the inner store).
            StoreError: an injected ``write-error`` (or a real one).
        """
        runs = self._faults.get(ref.uid)
        if runs:
            self.inner.load(machine, ref)  # an impostor is refused as such, not as a fault
            fault = runs[0][0]
            runs[0][1] -= 1
            if not runs[0][1]:
                del runs[0]
            if fault == "conflict":
                raise Conflict(ref.uid, expected, None)
            raise StoreError(f"injected write error on {ref.uid}")
        return self.inner.commit(machine, ref, expected, status, observation, transitions)

    def journal(self, machine: Machine[Any], ref: ObjectRef) -> list[JournalEntry]:
        """The inner store's journal of the object.

        Args:
            machine: the object's machine.
            ref: the object.

        Returns:
            Its journal entries, oldest first.
        """
        return self.inner.journal(machine, ref)

    def records(self, machine: Machine[Any]) -> Iterator[Record]:
        """The inner store's records of a machine.

        Args:
            machine: the machine.

        Returns:
            Its records.
        """
        return self.inner.records(machine)

    def claim_undelivered(self, limit: int = 1000) -> list[Transition]:
        """Claim undelivered transitions from the inner store's outbox.

        Args:
            limit: the most transitions to claim.

        Returns:
            The claimed transitions.
        """
        return self.inner.claim_undelivered(limit)

    def mark_delivered(self, ids: Iterable[str]) -> None:
        """Mark transitions delivered in the inner store.

        Args:
            ids: the transitions' ids.
        """
        self.inner.mark_delivered(ids)

    def flush_marks(self) -> None:
        flush = getattr(self.inner, "flush_marks", None)
        if flush is not None:
            flush()

    def close(self) -> None:
        self.inner.close()


# -- steps beside observations ----------------------------------------------------------------
#: What a scenario's :class:`InjectFault` step can make fail: the store's next commits of the
#: object (:data:`FAULTS`), or the failing emitter's next deliveries (``"emitter-error"``).
StepFault = Literal["conflict", "write-error", "emitter-error"]


@attrs.frozen(slots=True)
class InjectFault:
    """The next ``times`` commits of the object fail with ``kind`` (``"conflict"`` or
    ``"write-error"``: see :class:`FaultyStore`), or, for ``"emitter-error"``, the next
    ``times`` deliveries to the scenario's :class:`FailingEmitter` raise (the events stay
    queued).

    Attributes:
        kind: ``"conflict"``, ``"write-error"`` or ``"emitter-error"``.
        times: how many commits (or deliveries) fail.
    """

    kind: StepFault
    times: int = 1


@attrs.frozen(slots=True)
class Redeliver:
    """Run :meth:`~lifecycle.Runner.redeliver` (what a host does after a crash)."""


Step = Observation | InjectFault | Redeliver


class FailingEmitter(MemoryEmitter):
    """A :class:`MemoryEmitter` whose next ``failures`` deliveries raise ``error``.

    Refused transitions are kept in :attr:`refused`; accepted ones in :attr:`events`.

    Args:
        failures: how many deliveries raise, from the first.
        error: what they raise; ``None``: a :class:`RuntimeError`.
    """

    def __init__(self, failures: int = 1, error: Exception | None = None) -> None:
        super().__init__()
        self.failures = failures
        self.error = error if error is not None else RuntimeError("emitter unavailable")
        self.refused: list[Transition] = []

    def arm(self, failures: int) -> None:
        """Make the next ``failures`` deliveries raise.

        Args:
            failures: how many deliveries raise, from the next.
        """
        self.failures = failures

    def emit(self, transition: Transition) -> None:
        if self.failures > 0:
            self.failures -= 1
            self.refused.append(transition)
            raise self.error
        super().emit(transition)


def sqlite_factory(
    directory: str | Path, *, synchronous: Synchronous = "OFF", **options: Any
) -> Callable[[], SQLiteStore]:
    """A store factory making a fresh SQLite file in ``directory`` per call (fast: no fsync).

    Args:
        directory: where the files go (a test's ``tmp_path``).
        synchronous: SQLite's ``synchronous`` pragma; ``"OFF"`` skips fsync, which a test's
            throwaway file does not need.
        **options: passed on to :class:`~lifecycle.stores.sqlite.SQLiteStore`.

    Returns:
        The factory, for ``store_factory=``.
    """
    folder = Path(directory)

    def make() -> SQLiteStore:
        path = folder / f"lifecycle-{uuid.uuid4().hex}.db"
        return SQLiteStore(path, synchronous=synchronous, **options)

    return make
