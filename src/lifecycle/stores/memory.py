"""An in-process store: the reference implementation of the protocol, and a test double."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any

import attrs

from .._core import serde
from .._core.errors import Conflict, StoreError
from .._core.machine import Machine
from .._core.observation import Observation
from .._core.refs import EventType, ObjectRef
from .._core.schema import Schema, SchemaCount
from .._core.transition import Transition
from .._log import get_logger
from .base import (
    FindStore,
    Found,
    JournalEntry,
    OutboxSummary,
    Record,
    RetentionStore,
    SchemaStore,
    Snapshot,
    StateCount,
    Store,
    UpgradeReport,
    check_batch,
    check_query,
    check_record,
    epoch_time,
    journal_start,
    plan_compaction,
)

_log = get_logger("lifecycle.stores")


class MemoryStore(Store, RetentionStore, SchemaStore, FindStore):
    """Keeps records, journals and the outbox in dicts. Thread-safe; nothing survives exit.

    Entries hold references to the (immutable) statuses and observations themselves, so a
    tracked object costs its record, its status and one journal list, and each journal entry
    three references in that list (ADR 0015). Its methods are the protocols' it names as
    bases; ``find`` scans every record, and ``upgrade`` upcasts each record outside the lock
    and sets it only if it is still the record that was read.

    Args:
        journal: keep each object's journal. ``False`` keeps only records and the outbox, for
            a long-running test or benchmark whose memory would otherwise grow with every
            observation; ``journal`` then answers ``[]`` and ``compact`` drops nothing.
    """

    #: No I/O: telemetry does not time its calls (``lifecycle.telemetry``).
    does_io = False

    def __init__(self, *, journal: bool = True) -> None:
        self._records: dict[str, Record] = {}
        # Per object, one flat list: the version of its first entry, then three items per
        # entry -- the observation, the writing machine's Schema (a shared constant) and the
        # entry's transitions packed (see ``_pack``: plain values, shared between entries that
        # say the same). Versions are consecutive (every commit appends one entry), and the
        # object and machine are the record's. An entry costs 24 bytes and no object of its
        # own for the cyclic garbage collector to walk (ADR 0015, ADR 0067).
        self._journals: dict[str, list[Any]] = {}
        self._outbox: dict[str, Transition] = {}
        self._snapshots: dict[str, Snapshot] = {}
        #: Per object, the clock (epoch seconds) at the commit that wrote its present state
        #: (``find``, ADR 0159).
        self._entered: dict[str, float] = {}
        self._keep_journal = journal
        self._lock = threading.Lock()

    def load(self, machine: Machine[Any], ref: ObjectRef) -> Record | None:
        record = self._records.get(ref.uid)
        if record is not None:
            if record.ref is not ref or record.machine is not machine.name:
                check_record(record, machine.name, ref)  # (the same objects: nothing to compare)
            if record.schema is not machine.schema and _stale(record.schema, machine):
                return _upcast_record(machine, record)
        return record

    def load_many(self, items: Sequence[tuple[Machine[Any], ObjectRef]]) -> list[Record | None]:
        """Many objects' records, each as :meth:`load` gives it (``observe_many``'s read of a
        page: one call, not one per object).

        Args:
            items: ``(machine, ref)`` pairs.

        Returns:
            A record or ``None`` per item, in order.

        Raises:
            IdentityMismatch: an item's uid is stored for another object (the runner then
                reads one object at a time, and only that item fails).
        """
        load = self.load
        return [load(machine, ref) for machine, ref in items]

    def commit(
        self,
        machine: Machine[Any],
        ref: ObjectRef,
        expected: int,
        status: Any,
        observation: Observation,
        transitions: Sequence[Transition],
    ) -> int:
        return self.commit_delivered(machine, ref, expected, status, observation, transitions, 0)

    def commit_delivered(
        self,
        machine: Machine[Any],
        ref: ObjectRef,
        expected: int,
        status: Any,
        observation: Observation,
        transitions: Sequence[Transition],
        delivered: int,
    ) -> int:
        """:meth:`commit`, with the first ``delivered`` of ``transitions`` events that nobody
        waits for (a runner with no emitter, ADR 0170): journaled but not queued in the
        outbox, as if marked delivered the moment they were committed. Link intents after
        them are queued as :meth:`commit` queues them.

        Args:
            machine: the machine that writes the object.
            ref: the object.
            expected: the version the caller loaded (0 for a new object).
            status: the new status.
            observation: what produced it.
            transitions: events, then link intents.
            delivered: how many of the events come first and are not queued.

        Returns:
            The new version, ``expected + 1``.

        Raises:
            Conflict: the stored version is not ``expected``; nothing was written.
            IdentityMismatch: the uid is stored for another object; nothing was written.
        """
        # Everything that can fail is done before anything is written.
        version = expected + 1
        name = machine.name
        schema = machine.schema
        uid = ref.uid
        if self._keep_journal:
            packed = _pack(transitions, ref, name, version, observation)
        queued = transitions[delivered:] if delivered else transitions
        if not queued:
            outbox = None
        elif len(queued) == 1:
            t = queued[0]
            outbox = {t.id: t}
        else:
            outbox = {t.id: t for t in queued}
        with self._lock:
            current = self._records.get(uid)
            if current is None:
                actual = 0
            else:
                if current.ref is not ref or current.machine is not name:
                    check_record(current, name, ref)
                actual = current.version
            if actual != expected:
                raise Conflict(uid, expected, actual)
            if current is None or current.status.state != status.state:
                self._entered[uid] = _clock()
            self._records[uid] = _record(ref, name, status, version, schema)
            if self._keep_journal:
                journal = self._journals.get(uid)
                if journal is None:
                    self._journals[uid] = [version, observation, schema, packed]
                else:
                    journal += (observation, schema, packed)
            if outbox is not None:
                self._outbox.update(outbox)
            return version

    def journal(self, machine: Machine[Any], ref: ObjectRef) -> list[JournalEntry]:
        record = self._records.get(ref.uid)
        if record is None:
            return []
        check_record(record, machine.name, ref)
        return _entries(self._journals.get(ref.uid, _NONE)[:], record, machine)

    def records(self, machine: Machine[Any]) -> Iterator[Record]:
        found = [r for r in self._records.values() if r.machine == machine.name]
        return iter([_upcast_record(machine, r) if _stale(r.schema, machine) else r for r in found])

    def find(
        self,
        machine: Machine[Any],
        *,
        state: str | None = None,
        entered_before: datetime | None = None,
        older_than: timedelta | float | None = None,
        limit: int = 100,
    ) -> list[Found]:
        query = check_query(machine, state, entered_before, older_than, limit)
        with self._lock:
            hits = [
                (at, uid, r)
                for uid, r in self._records.items()
                if query.matches(r.machine, r.status.state, at := round(self._entered[uid], 6))
            ]
        hits.sort(key=lambda hit: hit[:2])
        return [
            Found(_upcast_record(machine, r) if _stale(r.schema, machine) else r, epoch_time(at))
            for at, _, r in hits[: query.limit]
        ]

    def state_counts(self) -> list[StateCount]:
        counts: dict[tuple[str, str], list[Any]] = {}
        with self._lock:
            for uid, r in self._records.items():
                at = round(self._entered[uid], 6)
                seen = counts.setdefault((r.machine, r.status.state), [0, at])
                seen[0] += 1
                seen[1] = min(seen[1], at)
        return [
            StateCount(machine, state, n, epoch_time(at))
            for (machine, state), (n, at) in sorted(counts.items())
        ]

    def snapshot(self, machine: Machine[Any], ref: ObjectRef) -> Snapshot | None:
        record = self._records.get(ref.uid)
        if record is not None:
            check_record(record, machine.name, ref)
        found = self._snapshots.get(ref.uid)
        if found is not None and _stale(found.schema, machine):
            status = _upcast_status(machine, found.status, found.schema)
            return Snapshot(found.version, status, machine.schema)
        return found

    def compact(
        self, machine: Machine[Any], *, keep: int = 0, refs: Iterable[ObjectRef] | None = None
    ) -> int:
        if not self._keep_journal:
            return 0
        chosen = [r.ref for r in self.records(machine)] if refs is None else list(refs)
        dropped = 0
        with self._lock:
            for ref in chosen:
                current = self._records.get(ref.uid)
                if current is None or current.machine != machine.name:
                    continue
                entries = self.journal(machine, ref)
                start = journal_start(self, machine, ref)
                try:
                    snapshot = plan_compaction(machine, ref, start, entries, current, keep)
                except StoreError as e:
                    _log.warning("journal left uncompacted", uid=ref.uid, error=str(e))
                    continue
                if snapshot is None:
                    continue
                self._snapshots[ref.uid] = attrs.evolve(snapshot, schema=machine.schema)
                journal = self._journals.get(ref.uid)
                if journal is None:
                    continue
                gone = max(0, min(snapshot.version - journal[0] + 1, (len(journal) - 1) // 3))
                dropped += gone
                self._journals[ref.uid] = [journal[0] + gone, *journal[1 + 3 * gone :]]
        return dropped

    # -- schema versions (SchemaStore, ADR 0088) -------------------------------------------
    def schema_versions(self) -> list[SchemaCount]:
        counts: dict[tuple[str, str, int, str], list[Any]] = {}

        def add(machine: str, kind: str, schema: Schema | None, uid: str) -> None:
            version, fp = (1, "") if schema is None else (schema.version, schema.fingerprint)
            seen = counts.setdefault((machine, kind, version, fp), [0, uid])
            seen[0] += 1
            seen[1] = min(seen[1], uid)

        with self._lock:
            for uid, record in self._records.items():
                add(record.machine, "status", record.schema, uid)
                for schema in self._journals.get(uid, _NONE)[2::3]:
                    add(record.machine, "journal", schema, uid)
                snapshot = self._snapshots.get(uid)
                if snapshot is not None:
                    add(record.machine, "snapshot", snapshot.schema, uid)
        return [SchemaCount(*key, n, uid) for key, (n, uid) in sorted(counts.items())]

    def upgrade(self, machine: Machine[Any], *, batch: int = 500) -> UpgradeReport:
        check_batch(batch)
        name = machine.name
        statuses, skipped = self._upgrade_records(machine, batch)
        entries = snapshots = 0
        with self._lock:
            uids = [uid for uid, r in self._records.items() if r.machine == name]
        for uid in uids:
            more_entries, more_snapshots = self._upgrade_history(machine, uid)
            entries += more_entries
            snapshots += more_snapshots
        return UpgradeReport(name, statuses, entries, snapshots, skipped)

    def _upgrade_records(self, machine: Machine[Any], batch: int) -> tuple[int, int]:
        """Upcast ``machine``'s records below its version, ``batch`` at a time: how many
        were set, and how many skipped (written meanwhile)."""
        name, schema = machine.name, machine.schema
        statuses = skipped = 0
        with self._lock:
            old = [
                r for r in self._records.values() if r.machine == name and _below(r.schema, schema)
            ]
        for start in range(0, len(old), batch):
            chunk = old[start : start + batch]
            new = [(r, _upgrading(_upcast_record, machine, r, r.ref.uid, r.version)) for r in chunk]
            with self._lock:
                for was, now in new:
                    if self._records.get(was.ref.uid) is was:
                        self._records[was.ref.uid] = now
                        statuses += 1
                    else:
                        skipped += 1
        return statuses, skipped

    def _upgrade_history(self, machine: Machine[Any], uid: str) -> tuple[int, int]:
        """Upcast one object's journal entries and snapshot below the version (each unless
        compacted or upgraded meanwhile): how many entries and snapshots were set."""
        schema = machine.schema
        entries = snapshots = 0
        with self._lock:
            journal = self._journals.get(uid)
            read = _NONE if journal is None else journal[:]
            snap = self._snapshots.get(uid)
        # per entry below the version: its index in the list, its new observation
        redone = {i: _upgrading(_upcast_observation, machine, (read[i], read[i + 1]), uid,
                                read[0] + (i - 1) // 3)
                  for i in range(1, len(read), 3) if _below(read[i + 1], schema)}  # fmt: skip
        with self._lock:
            if journal is not None and self._journals.get(uid) is journal:
                for i, observation in redone.items():
                    if journal[i] is read[i]:
                        journal[i], journal[i + 1] = observation, schema
                        entries += 1
            if snap is not None and _below(snap.schema, schema):
                status = _upgrading(_upcast_snapshot, machine, snap, uid, snap.version)
                if self._snapshots.get(uid) is snap:
                    self._snapshots[uid] = Snapshot(snap.version, status, schema)
                    snapshots += 1
        return entries, snapshots

    def claim_undelivered(self, limit: int = 1000) -> list[Transition]:
        with self._lock:
            pending = sorted(self._outbox.values(), key=lambda t: (t.ref.uid, t.version, t.n))
            return pending[:limit]

    def mark_delivered(self, ids: Iterable[str]) -> None:
        with self._lock:
            for i in ids:
                self._outbox.pop(i, None)

    def undelivered_count(self) -> int:
        """Events and link intents committed and not yet delivered (or confirmed).

        Returns:
            How many outbox rows wait.
        """
        with self._lock:
            return len(self._outbox)

    def outbox_summary(self) -> OutboxSummary:
        """How many outbox rows wait, and when the oldest was observed (``db status``).

        Returns:
            The count and the oldest row's observation time.
        """
        with self._lock:
            rows = list(self._outbox.values())
        return OutboxSummary(len(rows), min((t.at for t in rows), default=None))

    def record_limit(self, kind: str) -> int | None:
        """The largest record the store holds for ``kind``.

        Args:
            kind: the object kind asked about.

        Returns:
            ``None``: no bound, as nothing is serialised; whatever a machine accepts is held
            (ADR 0144).
        """
        return None

    def close(self) -> None:
        pass


#: The clock at a change of state (rounded to the microsecond a :class:`Found` says when read).
_clock = time.time
_EVENT_TYPES = {t.value: t for t in EventType}
_NORMAL, _WARNING = EventType.NORMAL, EventType.WARNING
_NONE: list[Any] = [0]
#: Packed transitions of recent entries, each kept once: entries that committed the same
#: flips (most do: a machine's flips are few) share one tuple. Bounded.
_PACKED: dict[tuple[Any, ...], tuple[Any, ...]] = {}
_PACKED_SIZE = 4096


def _pack(
    transitions: Sequence[Transition],
    ref: ObjectRef,
    machine: str,
    version: int,
    observation: Observation,
) -> tuple[Any, ...]:
    """An entry's transitions without what the entry already says (object, machine, version,
    time), each a tuple of plain values with its type as text; the same packed transitions
    are shared between entries. A transition that says otherwise is kept whole."""
    if not transitions:
        return ()
    out: list[Any] = []
    whole = False
    for t in transitions:
        kind = t.type
        text = "Normal" if kind is _NORMAL else "Warning" if kind is _WARNING else None
        if (
            text is None
            or t.ref is not ref  # (the runner stamps with these very objects)
            or t.at is not observation.at
            or t.version != version
            or t.machine != machine
            or t.action
            or t.intent is not None  # a link intent (ADR 0090) keeps its target
        ):
            out.append(t)
            whole = True
        else:
            out.append((t.source, t.target, t.reason, text, t.message, t.n, t.condition,
                        t.fallback, t.controller))  # fmt: skip
    packed = tuple(out)
    if whole:
        return packed
    shared = _PACKED.get(packed)
    if shared is None:
        if len(_PACKED) >= _PACKED_SIZE:
            _PACKED.clear()
        shared = _PACKED[packed] = packed
    return shared


#: Builds a :class:`Record` without its ``__init__`` (a frozen attrs class sets each field
#: through ``object.__setattr__``): the memory store makes one per commit (ADR 0015).
_RECORD_FIELDS = ("ref", "machine", "status", "version", "schema")
_set_ref, _set_machine, _set_status, _set_version, _set_schema = (
    Record.__dict__[name].__set__ for name in _RECORD_FIELDS
)
_object_new = object.__new__


def _record(ref: ObjectRef, machine: str, status: Any, version: int, schema: Any) -> Record:
    record: Record = _object_new(Record)
    _set_ref(record, ref)
    _set_machine(record, machine)
    _set_status(record, status)
    _set_version(record, version)
    _set_schema(record, schema)
    return record


def _stale(stored: Schema | None, machine: Machine[Any]) -> bool:
    """Whether a record written under ``stored`` needs upcasting for ``machine``."""
    return stored is not None and stored != machine.schema


def _below(stored: Schema | None, schema: Schema) -> bool:
    """Whether a record written under ``stored`` is below ``schema``'s version."""
    return stored is not None and stored.version < schema.version


def _upcast_status(machine: Machine[Any], status: Any, stored: Schema) -> Any:
    data = serde.dump(status)
    return machine.load_status(
        machine.schema.upcast_status(data, stored.version, stored.fingerprint)
    )


def _upgrading(fn: Any, machine: Machine[Any], item: Any, uid: str, version: int) -> Any:
    """An upgrade step; a failing upcaster (or a record the machine then refuses) stops the
    upgrade there with a :class:`StoreError` naming the record (that batch unwritten)."""
    try:
        return fn(machine, item)
    except StoreError:
        raise
    except Exception as e:
        raise StoreError(f"upgrade of {uid} v{version} failed: {e!r}") from e


def _upcast_snapshot(machine: Machine[Any], snapshot: Snapshot) -> Any:
    return _upcast_status(machine, snapshot.status, snapshot.schema)


def _upcast_record(machine: Machine[Any], record: Record) -> Record:
    status = _upcast_status(machine, record.status, record.schema)
    return Record(record.ref, record.machine, status, record.version, machine.schema)


def _upcast_observation(machine: Machine[Any], entry: tuple[Observation, Schema]) -> Observation:
    """An entry's observation, written under the entry's schema, as ``machine`` reads it."""
    obs, stored = entry
    fields = serde.dump(obs)
    fields.pop("at", None)
    name, fields = machine.schema.upcast_observation(
        obs.name(), fields, stored.version, stored.fingerprint
    )
    return machine.load_observation(name, obs.at.isoformat(), fields)


def _entries(journal: list[Any], record: Record, machine: Machine[Any]) -> list[JournalEntry]:
    """The journal entries of one object's flat list (see ``MemoryStore._journals``)."""
    ref, name = record.ref, record.machine
    out = []
    for k, i in enumerate(range(1, len(journal) - 2, 3)):
        version = journal[0] + k
        observation, schema, packed = journal[i], journal[i + 1], journal[i + 2]
        if schema is not machine.schema and _stale(schema, machine):
            observation = _upcast_observation(machine, (observation, schema))
        transitions = tuple(
            p
            if isinstance(p, Transition)
            else Transition(
                ref,
                name,
                p[0],
                p[1],
                p[2],
                _EVENT_TYPES[p[3]],
                p[4],
                version,
                observation.at,
                p[5],
                p[6],
                p[7],
                p[8],
            )
            for p in packed
        )
        out.append(JournalEntry(version, observation, transitions))
    return out
