"""The Store protocols: one atomic commit of status + journal entry + outbox rows, with CAS.

:class:`CommitStore` (``load`` and a compare-and-set ``commit``) is all the runners need;
the rest are optional capabilities (:class:`OutboxStore`, :class:`JournalStore`,
:class:`BatchStore`, :class:`RetentionStore`, :class:`SchemaStore`, :class:`FindStore`), and
:class:`Store` is
what every shipped store offers (ADR 0092)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, runtime_checkable

import attrs

from .._core.errors import IdentityMismatch, LifecycleError, StoreError, preview
from .._core.machine import Machine
from .._core.observation import Observation
from .._core.refs import EventType, ObjectRef
from .._core.schema import SchemaCount
from .._core.serde import parse_time
from .._core.transition import Intent, Transition


@attrs.frozen(slots=True)
class Record:
    """An object's stored status at ``version`` (1 after the first commit).

    Attributes:
        ref: the object.
        machine: the name of the machine that writes it; a uid stays with one machine.
        status: the status, as the machine's status type.
        version: the compare-and-set version: the next commit expects it.
        schema: the schema the status was written under (see below).
    """

    ref: ObjectRef
    machine: str
    status: Any
    version: int
    #: The :class:`~lifecycle.tables.Schema` the status was written under, where a store keeps the
    #: record as objects (memory); ``None``: the machine's own. Not compared.
    schema: Any = attrs.field(default=None, eq=False)


@attrs.frozen(slots=True)
class JournalEntry:
    """What produced ``version``: the observation, and the transitions it committed.

    ``intents`` are the linked writes the commit recorded for linked objects (ADR 0090); a
    store hands them in with the events and the entry sorts them out of ``transitions``.

    Attributes:
        version: the version this entry produced.
        observation: what was observed; folding the journal's observations gives the status.
        transitions: the events the commit wrote.
        intents: the link intents the commit wrote.
    """

    version: int
    observation: Observation
    transitions: tuple[Transition, ...] = ()
    intents: tuple[Transition, ...] = ()

    def __attrs_post_init__(self) -> None:
        if any(t.intent is not None for t in self.transitions):
            events = tuple(t for t in self.transitions if t.intent is None)
            intents = tuple(t for t in self.transitions if t.intent is not None)
            object.__setattr__(self, "transitions", events)
            object.__setattr__(self, "intents", self.intents + intents)


@attrs.frozen(slots=True)
class Snapshot:
    """An object's status at ``version``, standing in for journal entries ``1..version`` that
    retention removed: the journal then holds ``version + 1 ..`` and folding starts here.

    Attributes:
        version: the last version the snapshot stands for.
        status: the status at that version.
        schema: as :attr:`Record.schema`.
    """

    version: int
    status: Any
    #: As :attr:`Record.schema`.
    schema: Any = attrs.field(default=None, eq=False)


@attrs.frozen(slots=True)
class CommitItem:
    """One object's write in a :meth:`BatchStore.commit_many`: the arguments of ``commit``.

    Attributes:
        machine: the machine that writes it.
        ref: the object.
        expected: the version the write expects stored (0 for a new object).
        status: the new status.
        observation: what produced it, journalled.
        transitions: events, then link intents, written to the outbox.
    """

    machine: Machine[Any]
    ref: ObjectRef
    expected: int
    status: Any
    observation: Observation
    transitions: tuple[Transition, ...]


def check_identity(
    stored_machine: str,
    stored_kind: str,
    stored_namespace: str,
    stored_name: str,
    machine: str,
    ref: ObjectRef,
) -> None:
    """The identity rule, shared by every store: a uid names one object.

    ``stored_*`` are what the store holds under ``ref.uid``; ``machine`` and ``ref`` are what
    a load or commit gives. Raises :class:`~lifecycle.IdentityMismatch` when the kind,
    namespace, name or machine differ. Call it before anything is written (inside the same
    read, or the same transaction as the compare-and-set), so a refused write leaves nothing.

    Args:
        stored_machine: the machine name stored under ``ref.uid``.
        stored_kind: the kind stored.
        stored_namespace: the namespace stored.
        stored_name: the name stored.
        machine: the machine name of the call.
        ref: the object of the call.

    Raises:
        IdentityMismatch: any of them differ: a uid reused for another object is bad input,
            and writing it would mix two objects' histories.
    """
    if (
        stored_kind == ref.kind
        and stored_name == ref.name
        and stored_namespace == ref.namespace
        and stored_machine == machine
    ):
        return
    raise IdentityMismatch(
        ref.uid,
        (stored_kind, stored_namespace, stored_name),
        (ref.kind, ref.namespace, ref.name),
        machines=None if stored_machine == machine else (stored_machine, machine),
    )


def check_record(record: Record, machine: str, ref: ObjectRef) -> None:
    """:func:`check_identity` against a stored :class:`Record`.

    Args:
        record: what the store holds under ``ref.uid``.
        machine: the machine name of the call.
        ref: the object of the call.

    Raises:
        IdentityMismatch: the record is another object's.
    """
    stored = record.ref
    if record.machine == machine and (stored is ref or stored == ref):
        return
    check_identity(record.machine, stored.kind, stored.namespace, stored.name, machine, ref)


@runtime_checkable
class CommitStore(Protocol):
    """What the runners need of a store, and all a host's own store must have (ADR 0092):
    read an object's record, and commit a new status with compare-and-set.

    ``commit`` is atomic: the status, the journal entry and the outbox rows (``transitions``:
    events, then link intents) are written together or not at all. It raises
    :class:`~lifecycle.Conflict` when the stored version is not ``expected`` (versions start
    at 1 for the first commit) and :class:`~lifecycle.StoreError` for anything else.

    A uid names one object: ``load`` and ``commit`` (and ``journal``, ``snapshot``) of a ref
    whose kind, namespace, name or machine differ from those stored under its uid raise
    :class:`~lifecycle.IdentityMismatch` (see :func:`check_identity`), and write nothing.

    Everything else is an optional capability, found by its methods: :class:`OutboxStore`
    (without it, events are delivered inline only and never redelivered),
    :class:`JournalStore`, :class:`BatchStore`, :class:`RetentionStore`,
    :class:`SchemaStore`, an ``epoch`` (event ids across a lost history, ADR 0068) and
    ``close``.
    """

    def load(self, machine: Machine[Any], ref: ObjectRef) -> Record | None:
        """An object's stored record.

        Args:
            machine: the machine that writes the object; a record written under an older
                schema comes back upcast to its present one.
            ref: the object; its uid is the key.

        Returns:
            The record, or ``None`` for an object never committed.

        Raises:
            IdentityMismatch: the uid is stored for another object.
            StoreError: the store cannot be read.
        """
        ...

    def commit(
        self,
        machine: Machine[Any],
        ref: ObjectRef,
        expected: int,
        status: Any,
        observation: Observation,
        transitions: Sequence[Transition],
    ) -> int:
        """Write a new status, its journal entry and its outbox rows, atomically, if the
        stored version is ``expected``.

        Args:
            machine: the machine that writes the object.
            ref: the object.
            expected: the version the caller loaded (0 for a new object): the
                compare-and-set that makes two writers on one object safe without a lock.
            status: the new status.
            observation: what produced it, journalled so the status can be rebuilt.
            transitions: events, then link intents, written to the outbox in the same
                transaction, so an event is never lost between the commit and its delivery.

        Returns:
            The new version, ``expected + 1``.

        Raises:
            Conflict: the stored version is not ``expected``; nothing was written (load and
                apply again).
            IdentityMismatch: the uid is stored for another object; nothing was written.
            CommitUnknown: the connection was lost in flight and whether it landed is
                unknown (it may have).
            StoreError: anything else; nothing was written.
        """
        ...


@runtime_checkable
class OutboxStore(Protocol):
    """Optional: the outbox of committed, undelivered events and link intents.

    ``claim_undelivered`` returns (and leases to this store's owner) up to ``limit`` rows,
    each object's in commit order; ``mark_delivered`` removes rows. The runners mark what
    every emitter took, ``Runner.redeliver`` and the ``Dispatcher`` claim what is left.

    A store that holds marks back for its next write (SQLite, PostgreSQL, Kubernetes) also has
    ``flush_marks()``, looked up by name: write them now. A runner's ``close`` calls it on a
    store it does not close (ADR 0135).
    """

    def claim_undelivered(self, limit: int = 1000) -> list[Transition]:
        """Claim undelivered outbox rows for this store's owner.

        Args:
            limit: the most rows returned, a bound on what one round holds in memory.

        Returns:
            The rows, each object's in commit order, so its events are delivered in order.

        Raises:
            StoreError: the store cannot be read.
        """
        ...

    def mark_delivered(self, ids: Iterable[str]) -> None:
        """Remove delivered rows from the outbox.

        Args:
            ids: the transitions' ids; an unknown or already removed id is ignored, so a
                repeat after a crash is harmless.

        Raises:
            StoreError: the store cannot be written.
        """
        ...


@runtime_checkable
class JournalStore(Protocol):
    """Optional: each object's journal (what produced each version) and every record of a
    machine -- for ``lifecycle db check``, projections, the property checks and folding."""

    def journal(self, machine: Machine[Any], ref: ObjectRef) -> list[JournalEntry]:
        """An object's journal, oldest first (after its snapshot, if retention made one).

        Args:
            machine: the machine that writes the object; old entries come back upcast.
            ref: the object.

        Returns:
            The entries; empty for an object never committed.

        Raises:
            IdentityMismatch: the uid is stored for another object.
        """
        ...

    def records(self, machine: Machine[Any]) -> Iterator[Record]:
        """Every record of one machine.

        Args:
            machine: the machine whose objects are listed.

        Yields:
            Each record, in no promised order.
        """
        ...


@runtime_checkable
class Store(CommitStore, OutboxStore, JournalStore, Protocol):
    """Persistence for statuses, their journals and the outbox of undelivered events: the
    capabilities every shipped store has (memory, SQLite, PostgreSQL).

    The runners need only :class:`CommitStore`; this is what a complete store offers.
    """

    def close(self) -> None:
        """Release what the store holds (connections, files); writes marks held back first."""
        ...


@runtime_checkable
class BatchStore(Protocol):
    """Optional: reads and writes of many objects in one round trip / one transaction.

    ``commit_many`` compares and sets each object on its own: the result holds, per item, the
    new version or the :class:`~lifecycle.Conflict` (nothing written for that item) or
    :class:`~lifecycle.StoreError` that refused it. It raises :class:`StoreError` only when
    the batch as a whole failed, and then nothing of it was written -- except
    :class:`~lifecycle.CommitUnknown`: the connection was lost in flight and whether the batch
    landed could not be found out (it may have; send no fallback). Items of one object are
    applied in order (the second expects the version the first writes).

    An item whose uid is stored for another object (:func:`check_identity`) is bad input,
    not a store failure: ``load_many`` and ``commit_many`` then raise
    :class:`~lifecycle.IdentityMismatch` for the whole call, and ``commit_many`` writes
    nothing of the batch. (The runners then find the item one object at a time, and only it
    fails.) Per-item results stay ``int | StoreError``: a caller that does not know the rule
    gets an exception, never an impostor counted as written.

    A store with a status cache (``cache=N``, ADR 0134) answers ``load_many``'s cached items
    from the cache and reads the rest: the records are then not one snapshot, each is as
    fresh as a ``load`` of it (the compare-and-set of a later commit still decides).
    """

    def load_many(self, items: Sequence[tuple[Machine[Any], ObjectRef]]) -> list[Record | None]:
        """Many objects' records in one round trip.

        Args:
            items: ``(machine, ref)`` pairs.

        Returns:
            A record or ``None`` per item, in order.

        Raises:
            IdentityMismatch: an item's uid is stored for another object.
            StoreError: the store cannot be read.
        """
        ...

    def commit_many(self, items: Sequence[CommitItem]) -> list[int | StoreError]:
        """Many objects' commits in one transaction, each compared and set on its own.

        Args:
            items: the writes; items of one object are applied in order.

        Returns:
            Per item, the new version, or the :class:`~lifecycle.Conflict` or
            :class:`~lifecycle.StoreError` that refused it (nothing written for that item).

        Raises:
            IdentityMismatch: an item's uid is stored for another object; nothing written.
            CommitUnknown: the connection was lost in flight; the batch may have landed.
            StoreError: the batch as a whole failed; nothing of it was written.
        """
        ...


@runtime_checkable
class RetentionStore(Protocol):
    """Optional: journal retention behind snapshots (see :func:`plan_compaction`)."""

    def snapshot(self, machine: Machine[Any], ref: ObjectRef) -> Snapshot | None:
        """An object's snapshot, where folding its journal starts.

        Args:
            machine: the machine that writes the object.
            ref: the object.

        Returns:
            The snapshot, or ``None`` when retention never compacted the object.
        """
        ...

    def compact(
        self, machine: Machine[Any], *, keep: int = 0, refs: Iterable[ObjectRef] | None = None
    ) -> int:
        """Drop all but the last ``keep`` journal entries of each object behind a snapshot.

        Args:
            machine: the machine whose objects are compacted.
            keep: the newest entries kept per object, for ``lifecycle replay`` and audits.
            refs: only these objects; by default every object of the machine.

        Returns:
            How many entries were dropped. An object whose journal does not fold to its
            stored status is left as it is (a wrong snapshot would be baked in).

        Raises:
            ValueError: a negative ``keep``.
        """
        ...


@attrs.frozen(slots=True)
class OutboxSummary:
    """What waits in a store's outbox (``lifecycle db status`` and ``db check``): the rows
    committed and not yet delivered (events; link intents not yet confirmed), and when the
    oldest of them was observed (``None`` when there is none). An event is delivered when
    every emitter of the runner that committed it has it (ADR 0121), so this one count is
    what every emitter still owes.

    Attributes:
        undelivered: how many rows wait.
        oldest: the observation time of the oldest, or ``None``.
    """

    undelivered: int
    oldest: datetime | None

    def age(self, now: datetime) -> float | None:
        """Seconds since the oldest undelivered row was observed.

        Args:
            now: the time to measure at (aware), the caller's clock.

        Returns:
            The age, never negative; ``None`` when nothing waits.
        """
        return None if self.oldest is None else max((now - self.oldest).total_seconds(), 0.0)


@attrs.frozen(slots=True)
class UpgradeReport:
    """What :meth:`SchemaStore.upgrade` rewrote for one machine: statuses, journal entries
    and snapshots brought to its schema version, and ``skipped`` records a concurrent writer
    changed first (they are left to it; run the upgrade again to pick up any it left old).

    Attributes:
        machine: the machine's name.
        statuses: statuses rewritten.
        entries: journal entries rewritten.
        snapshots: snapshots rewritten.
        skipped: records a concurrent writer changed first.
    """

    machine: str
    statuses: int = 0
    entries: int = 0
    snapshots: int = 0
    skipped: int = 0

    def __str__(self) -> str:
        return (
            f"{self.machine}: {self.statuses} status(es), {self.entries} journal entries and "
            f"{self.snapshots} snapshot(s) upgraded; {self.skipped} skipped (written meanwhile)"
        )


@runtime_checkable
class SchemaStore(Protocol):
    """Optional: the stored records' schema versions (ADR 0088).

    ``schema_versions`` is one aggregate read: per machine, kind of record (``status``,
    ``journal``, ``snapshot``), version and fingerprint, how many and one example uid -- the
    runner's start-up check and ``lifecycle db check`` judge it, by the same rules (ADR
    0088). ``upgrade`` rewrites ``machine``'s records below its schema version, ``batch``
    at a time, each batch one transaction, each record compared-and-set on what was read
    (a concurrent writer wins: that record is skipped); interrupted, it resumes where it
    stopped, since only records below the current version are selected.
    """

    def schema_versions(self) -> list[SchemaCount]:
        """One aggregate read of the records' schema versions.

        Returns:
            Per machine, kind of record, version and fingerprint: how many, one example uid.
        """
        ...

    def upgrade(self, machine: Machine[Any], *, batch: int = 500) -> UpgradeReport:
        """Rewrite ``machine``'s records below its schema version.

        Args:
            machine: the machine whose records are upgraded.
            batch: records per transaction, a bound on how long one holds locks.

        Returns:
            What was rewritten and what was skipped.

        Raises:
            ValueError: ``batch`` is not a positive int.
        """
        ...


class InvalidQuery(LifecycleError, ValueError):
    """A :meth:`FindStore.find` the machine cannot mean: a state it does not have, a negative
    age, a time without a timezone, a limit that is not a positive int (nothing was read)."""


@attrs.frozen(slots=True)
class Found:
    """One object :meth:`FindStore.find` found: its record, and since when the store has held
    it in its present state (:attr:`entered`, UTC; ADR 0159).

    Attributes:
        record: the object's record.
        entered: when the store's clock saw it enter its state (aware, UTC).
    """

    record: Record
    entered: datetime

    def age(self, now: datetime | None = None) -> float:
        """Seconds the object has been in its state.

        Args:
            now: the time to measure at (aware); by default the clock.

        Returns:
            The age, never negative.
        """
        at = datetime.now(UTC) if now is None else now
        return max((at - self.entered).total_seconds(), 0.0)


@attrs.frozen(slots=True)
class StateCount:
    """How many objects of ``machine`` are in ``state``, and since when the oldest of them
    has been (:meth:`FindStore.state_counts`; the Prometheus gauges read it at a scrape).

    Attributes:
        machine: the machine's name.
        state: the state.
        count: how many objects are in it.
        oldest: since when the oldest of them has been (aware, UTC).
    """

    machine: str
    state: str
    count: int
    oldest: datetime


@runtime_checkable
class FindStore(Protocol):
    """Optional: the questions an operator asks of a store (ADR 0159).

    ``find`` lists a machine's objects, optionally only those in ``state`` and only those
    that entered their state before ``entered_before`` (or ``older_than`` ago, by the clock),
    oldest first (then by uid), at most ``limit``. An object enters a state when a commit
    writes it in another state than it was (or writes it first); :attr:`Found.entered` is
    the store's clock at that commit. ``state_counts`` is one grouped read: per machine and
    state, how many objects and since when the oldest. Bad input raises
    :class:`InvalidQuery`. Every shipped store has both (indexed on SQLite and PostgreSQL;
    the Kubernetes store lists and filters).
    """

    def find(
        self,
        machine: Machine[Any],
        *,
        state: str | None = None,
        entered_before: datetime | None = None,
        older_than: timedelta | float | None = None,
        limit: int = 100,
    ) -> list[Found]:
        """A machine's objects, oldest in their state first (then by uid).

        Args:
            machine: the machine whose objects are listed.
            state: only objects in this state; it must be one of the machine's.
            entered_before: only objects that entered their state before this (aware) time.
            older_than: only objects in their state for longer than this (seconds or a
                timedelta), by the clock; not with ``entered_before``.
            limit: the most objects returned, a positive int.

        Returns:
            What was found, each with since when it is in its state.

        Raises:
            InvalidQuery: arguments the machine cannot mean; nothing was read.
        """
        ...

    def state_counts(self) -> list[StateCount]:
        """One grouped read: per machine and state, how many objects and since when the
        oldest.

        Returns:
            The counts, for gauges and ``lifecycle db status``.
        """
        ...


@attrs.frozen(slots=True)
class Query:
    """A checked :meth:`FindStore.find`: the machine's name, the state (or ``None``), the
    cut-off in epoch seconds (or ``None``) and the limit.

    Attributes:
        machine: the machine's name.
        state: the state asked for, or ``None`` for any.
        before: the cut-off in epoch seconds, or ``None``.
        limit: the most objects returned.
    """

    machine: str
    state: str | None
    before: float | None
    limit: int

    def matches(self, machine: str, state: str, entered: float) -> bool:
        """Whether an object of ``machine`` in ``state`` since ``entered`` is an answer.

        Args:
            machine: the object's machine name.
            state: its state.
            entered: since when, in epoch seconds.

        Returns:
            ``True`` when it matches every part of the query.
        """
        return (
            machine == self.machine
            and (self.state is None or state == self.state)
            and (self.before is None or entered < self.before)
        )


def check_query(
    machine: Machine[Any],
    state: str | None,
    entered_before: datetime | None,
    older_than: timedelta | float | None,
    limit: int,
) -> Query:
    """``find``'s arguments checked (:class:`InvalidQuery` for what they cannot mean), with
    ``older_than`` turned into a cut-off by the clock.

    Args:
        machine: the machine asked about.
        state: as :meth:`FindStore.find`.
        entered_before: as :meth:`FindStore.find`.
        older_than: as :meth:`FindStore.find`.
        limit: as :meth:`FindStore.find`.

    Returns:
        The query every store answers the same way.

    Raises:
        InvalidQuery: what the arguments cannot mean.
    """
    if state is not None and state not in machine.table.states:
        raise InvalidQuery(
            f"{machine.name} has no state {preview(state)}; its states: "
            + ", ".join(map(repr, machine.table.states))
        )
    if type(limit) is not int or limit < 1:
        raise InvalidQuery(f"limit must be a positive int, got {preview(limit)}")
    if entered_before is not None and older_than is not None:
        raise InvalidQuery("give entered_before or older_than, not both")
    before: float | None = None
    if entered_before is not None:
        if not isinstance(entered_before, datetime) or entered_before.tzinfo is None:
            raise InvalidQuery(
                f"entered_before must be a datetime with a timezone, got {preview(entered_before)}"
            )
        before = entered_before.timestamp()
    elif older_than is not None:
        if isinstance(older_than, timedelta):
            seconds = older_than.total_seconds()
        elif isinstance(older_than, int | float) and not isinstance(older_than, bool):
            seconds = float(older_than)
        else:
            raise InvalidQuery(f"older_than must be seconds or a timedelta, got {older_than!r}")
        if not seconds >= 0:  # (NaN too)
            raise InvalidQuery(f"older_than must not be negative, got {preview(older_than)}")
        before = time.time() - seconds
    return Query(machine.name, state, before, limit)


def epoch_time(seconds: float) -> datetime:
    """Epoch seconds as an aware UTC datetime (how stores hand out :attr:`Found.entered`).

    Args:
        seconds: seconds since the epoch.

    Returns:
        The time, in UTC.
    """
    return datetime.fromtimestamp(seconds, UTC)


def check_batch(batch: int) -> int:
    """``batch`` as :meth:`SchemaStore.upgrade` takes it.

    Args:
        batch: records per transaction.

    Returns:
        ``batch`` itself.

    Raises:
        ValueError: not a positive int (a bool included).
    """
    if type(batch) is not int or batch < 1:
        raise ValueError(f"batch must be a positive int, got {batch!r}")
    return batch


def fold_problem(store: Any, machine: Machine[Any], record: Record) -> str | None:
    """Why ``record``'s journal does not fold to its stored status (``None``: it does).
    Folding starts at the object's snapshot, if any, and upcasts old entries.

    Args:
        store: a store with ``journal`` (and ``snapshot``, if it keeps any).
        machine: the machine that writes the object.
        record: the stored record checked.

    Returns:
        The problem for ``lifecycle db check``, or ``None`` when the journal folds to it.
    """
    ref = record.ref
    try:
        status, base = journal_start(store, machine, ref)
        entries = store.journal(machine, ref)
    except LifecycleError as e:
        return f"cannot read its journal: {e}"
    versions = [e.version for e in entries]
    if versions != list(range(base + 1, record.version + 1)):
        shown = f"{versions[:3]}..{versions[-3:]}" if len(versions) > 6 else str(versions)
        return f"journal versions {shown} after v{base} do not lead to the stored v{record.version}"
    try:
        folded = fold_from(machine, status, (e.observation for e in entries))
    except LifecycleError as e:
        return f"its journal does not fold: {e}"
    if folded != record.status:
        return (
            f"its journal folds to state {preview(folded.state)}, the stored status "
            f"(v{record.version}) is {preview(record.status.state)}"
            + ("" if folded.state != record.status.state else " (other fields differ)")
        )
    return None


def journal_start(store: Any, machine: Machine[Any], ref: ObjectRef) -> tuple[Any, int]:
    """Where folding ``ref``'s journal starts: its snapshot's (status, version), or the
    machine's initial status at version 0 (no snapshot, or a store without retention).

    Args:
        store: any store; one without ``snapshot`` starts at the initial status.
        machine: the machine that writes the object.
        ref: the object.

    Returns:
        ``(status, version)`` to fold the journal after.
    """
    snapshot = getattr(store, "snapshot", None)
    found = None if snapshot is None else snapshot(machine, ref)
    if found is None:
        return machine.initial(ref), 0
    return found.status, found.version


def fold_from(machine: Machine[Any], status: Any, observations: Iterable[Observation]) -> Any:
    """``status`` with ``observations`` applied in order (``Machine.fold`` from a snapshot).

    Args:
        machine: the machine applying them.
        status: the status to start from.
        observations: applied in this order.

    Returns:
        The status they lead to.
    """
    for obs in observations:
        status = machine.apply(status, obs)
    return status


def plan_compaction(
    machine: Machine[Any],
    ref: ObjectRef,
    start: tuple[Any, int],
    entries: Sequence[JournalEntry],
    current: Record,
    keep: int,
) -> Snapshot | None:
    """The snapshot that lets a store drop all but the last ``keep`` journal entries.

    ``start`` is the present snapshot (or initial status, 0), ``entries`` the journal after it
    and ``current`` the stored record. ``None``: nothing to drop. Raises :class:`StoreError`
    when the journal is not contiguous or does not fold to the stored status: compacting it
    would bake a wrong snapshot, so the object is left as it is.

    Args:
        machine: the machine that writes the object.
        ref: the object.
        start: the present snapshot's ``(status, version)``, or ``(initial status, 0)``.
        entries: the journal after ``start``.
        current: the stored record.
        keep: the newest entries kept.

    Returns:
        The new snapshot, or ``None`` when nothing is to be dropped.

    Raises:
        ValueError: a negative ``keep``.
        StoreError: the journal is not contiguous or does not fold to the stored status.
    """
    if keep < 0:
        raise ValueError(f"keep must not be negative, got {keep}")
    status, base = start
    versions = [e.version for e in entries]
    if versions != list(range(base + 1, current.version + 1)):
        raise StoreError(
            f"{ref.uid}: journal versions {versions[:3]}..{versions[-3:]} after snapshot v{base} "
            f"do not lead to the stored v{current.version}; not compacted"
        )
    cutoff = current.version - keep
    if cutoff <= base:
        return None
    for entry in entries:
        if entry.version > cutoff:
            break
        status = machine.apply(status, entry.observation)
    snapshot = Snapshot(cutoff, status)
    rest = fold_from(machine, status, (e.observation for e in entries if e.version > cutoff))
    if rest != current.status:
        raise StoreError(
            f"{ref.uid}: the journal does not fold to the stored status (v{current.version}); "
            "not compacted"
        )
    return snapshot


def transition_to_row(t: Transition) -> dict[str, Any]:
    """A Transition as JSON-ready data (for outbox and journal rows).

    Args:
        t: the transition.

    Returns:
        A dict of plain values; :func:`transition_from_row` reads it back.
    """
    row = {
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
    if t.epoch:
        row["epoch"] = t.epoch
    if t.intent is not None:  # a link intent (ADR 0090): its target and observation
        row["intent"] = t.intent.as_row()
    if t.trace:  # the committing span's context (lifecycle.telemetry)
        row["trace"] = t.trace
    return row


def transition_from_row(data: dict[str, Any]) -> Transition:
    """A Transition from what :func:`transition_to_row` wrote.

    Args:
        data: the row's data; keys added later (``controller``, ``epoch``, ``intent``,
            ``trace``) may be missing, so older rows still read.

    Returns:
        The transition.
    """
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
        epoch=data.get("epoch", ""),
        intent=Intent.from_row(data["intent"]) if "intent" in data else None,
        trace=str(data.get("trace", "")),
    )
