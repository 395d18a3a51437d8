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
    """An object's stored status at ``version`` (1 after the first commit)."""

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
    retention removed: the journal then holds ``version + 1 ..`` and folding starts here."""

    version: int
    status: Any
    #: As :attr:`Record.schema`.
    schema: Any = attrs.field(default=None, eq=False)


@attrs.frozen(slots=True)
class CommitItem:
    """One object's write in a :meth:`BatchStore.commit_many`: the arguments of ``commit``."""

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
    """:func:`check_identity` against a stored :class:`Record`."""
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

    def claim_undelivered(self, limit: int = 1000) -> list[Transition]: ...

    def mark_delivered(self, ids: Iterable[str]) -> None: ...


@runtime_checkable
class JournalStore(Protocol):
    """Optional: each object's journal (what produced each version) and every record of a
    machine -- for ``lifecycle db check``, projections, the property checks and folding."""

    def journal(self, machine: Machine[Any], ref: ObjectRef) -> list[JournalEntry]: ...

    def records(self, machine: Machine[Any]) -> Iterator[Record]: ...


@runtime_checkable
class Store(CommitStore, OutboxStore, JournalStore, Protocol):
    """Persistence for statuses, their journals and the outbox of undelivered events: the
    capabilities every shipped store has (memory, SQLite, PostgreSQL).

    The runners need only :class:`CommitStore`; this is what a complete store offers.
    """

    def close(self) -> None: ...


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

    def load_many(self, items: Sequence[tuple[Machine[Any], ObjectRef]]) -> list[Record | None]: ...

    def commit_many(self, items: Sequence[CommitItem]) -> list[int | StoreError]: ...


@runtime_checkable
class RetentionStore(Protocol):
    """Optional: journal retention behind snapshots (see :func:`plan_compaction`)."""

    def snapshot(self, machine: Machine[Any], ref: ObjectRef) -> Snapshot | None: ...

    def compact(
        self, machine: Machine[Any], *, keep: int = 0, refs: Iterable[ObjectRef] | None = None
    ) -> int: ...


@attrs.frozen(slots=True)
class OutboxSummary:
    """What waits in a store's outbox (``lifecycle db status`` and ``db check``): the rows
    committed and not yet delivered (events; link intents not yet confirmed), and when the
    oldest of them was observed (``None`` when there is none). An event is delivered when
    every emitter of the runner that committed it has it (ADR 0121), so this one count is
    what every emitter still owes."""

    undelivered: int
    oldest: datetime | None

    def age(self, now: datetime) -> float | None:
        """Seconds since the oldest undelivered row was observed (``None``: nothing waits)."""
        return None if self.oldest is None else max((now - self.oldest).total_seconds(), 0.0)


@attrs.frozen(slots=True)
class UpgradeReport:
    """What :meth:`SchemaStore.upgrade` rewrote for one machine: statuses, journal entries
    and snapshots brought to its schema version, and ``skipped`` records a concurrent writer
    changed first (they are left to it; run the upgrade again to pick up any it left old)."""

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

    def schema_versions(self) -> list[SchemaCount]: ...

    def upgrade(self, machine: Machine[Any], *, batch: int = 500) -> UpgradeReport: ...


class InvalidQuery(LifecycleError, ValueError):
    """A :meth:`FindStore.find` the machine cannot mean: a state it does not have, a negative
    age, a time without a timezone, a limit that is not a positive int (nothing was read)."""


@attrs.frozen(slots=True)
class Found:
    """One object :meth:`FindStore.find` found: its record, and since when the store has held
    it in its present state (:attr:`entered`, UTC; ADR 0159)."""

    record: Record
    entered: datetime

    def age(self, now: datetime | None = None) -> float:
        """Seconds the object has been in its state, at ``now`` (default: the clock)."""
        at = datetime.now(UTC) if now is None else now
        return max((at - self.entered).total_seconds(), 0.0)


@attrs.frozen(slots=True)
class StateCount:
    """How many objects of ``machine`` are in ``state``, and since when the oldest of them
    has been (:meth:`FindStore.state_counts`; the Prometheus gauges read it at a scrape)."""

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
    ) -> list[Found]: ...

    def state_counts(self) -> list[StateCount]: ...


@attrs.frozen(slots=True)
class Query:
    """A checked :meth:`FindStore.find`: the machine's name, the state (or ``None``), the
    cut-off in epoch seconds (or ``None``) and the limit."""

    machine: str
    state: str | None
    before: float | None
    limit: int

    def matches(self, machine: str, state: str, entered: float) -> bool:
        """Whether an object of ``machine`` in ``state`` since ``entered`` is an answer."""
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
    ``older_than`` turned into a cut-off by the clock."""
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
    """Epoch seconds as an aware UTC datetime (how stores hand out :attr:`Found.entered`)."""
    return datetime.fromtimestamp(seconds, UTC)


def check_batch(batch: int) -> int:
    if type(batch) is not int or batch < 1:
        raise ValueError(f"batch must be a positive int, got {batch!r}")
    return batch


def fold_problem(store: Any, machine: Machine[Any], record: Record) -> str | None:
    """Why ``record``'s journal does not fold to its stored status (``None``: it does).
    Folding starts at the object's snapshot, if any, and upcasts old entries."""
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
    machine's initial status at version 0 (no snapshot, or a store without retention)."""
    snapshot = getattr(store, "snapshot", None)
    found = None if snapshot is None else snapshot(machine, ref)
    if found is None:
        return machine.initial(ref), 0
    return found.status, found.version


def fold_from(machine: Machine[Any], status: Any, observations: Iterable[Observation]) -> Any:
    """``status`` with ``observations`` applied in order (``Machine.fold`` from a snapshot)."""
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
    """A Transition as JSON-ready data (for outbox and journal rows)."""
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
