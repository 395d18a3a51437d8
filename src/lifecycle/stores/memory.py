"""An in-process store: the reference implementation of the protocol, and a test double."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Sequence
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
    JournalEntry,
    Record,
    Snapshot,
    UpgradeReport,
    check_batch,
    check_record,
    journal_start,
    plan_compaction,
)

_log = get_logger("lifecycle.stores")


class MemoryStore:
    """Keeps records, journals and the outbox in dicts. Thread-safe; nothing survives exit.

    Entries hold references to the (immutable) statuses and observations themselves, so a
    tracked object costs its status, its journal tuple and nothing else.
    """

    def __init__(self, *, journal: bool = True) -> None:
        self._records: dict[str, Record] = {}
        # Per object, each entry flat: (version, observation, ref, machine, schema,
        # *transitions) -- ``schema`` the writing machine's Schema (a shared constant) -- a
        # transition as a tuple of plain values (see ``_pack``). A long journal of many objects
        # then gives the cyclic garbage collector one object per entry to walk (besides the
        # observation), not three (ADR 0067).
        self._journals: dict[str, list[tuple[Any, ...]]] = {}
        self._outbox: dict[str, Transition] = {}
        self._snapshots: dict[str, Snapshot] = {}
        self._keep_journal = journal
        self._lock = threading.Lock()

    def load(self, machine: Machine[Any], ref: ObjectRef) -> Record | None:
        """The stored record, or ``None``; :class:`~lifecycle.IdentityMismatch` when the
        uid is stored for another object (kind, namespace, name or machine)."""
        record = self._records.get(ref.uid)
        if record is not None:
            if record.ref is not ref or record.machine is not machine.name:
                check_record(record, machine.name, ref)  # (the same objects: nothing to compare)
            if record.schema is not machine.schema and _stale(record.schema, machine):
                return _upcast_record(machine, record)
        return record

    def commit(
        self,
        machine: Machine[Any],
        ref: ObjectRef,
        expected: int,
        status: Any,
        observation: Observation,
        transitions: Sequence[Transition],
    ) -> int:
        # Everything that can fail is done before anything is written.
        version = expected + 1
        name = machine.name
        entry = None
        if self._keep_journal:
            packed = [_pack(t, ref, name, version, observation) for t in transitions]
            entry = (version, observation, ref, name, machine.schema, *packed)
        outbox = {t.id: t for t in transitions}
        with self._lock:
            current = self._records.get(ref.uid)
            if current is None:
                actual = 0
            else:
                if current.ref is not ref or current.machine is not name:
                    check_record(current, name, ref)
                actual = current.version
            if actual != expected:
                raise Conflict(ref.uid, expected, actual)
            self._records[ref.uid] = Record(ref, name, status, version, machine.schema)
            if entry is not None:
                self._journals.setdefault(ref.uid, []).append(entry)
            self._outbox.update(outbox)
            return version

    def journal(self, machine: Machine[Any], ref: ObjectRef) -> list[JournalEntry]:
        record = self._records.get(ref.uid)
        if record is not None:
            check_record(record, machine.name, ref)
        return [_entry(flat, machine) for flat in self._journals.get(ref.uid, ())]

    def records(self, machine: Machine[Any]) -> Iterator[Record]:
        found = [r for r in self._records.values() if r.machine == machine.name]
        return iter([_upcast_record(machine, r) if _stale(r.schema, machine) else r for r in found])

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
        """Drop all but the last ``keep`` journal entries of each object behind a snapshot
        (see :func:`~lifecycle.stores.base.plan_compaction`); returns how many were dropped."""
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
                flat = self._journals.get(ref.uid, [])
                kept = [e for e in flat if e[0] > snapshot.version]
                dropped += len(flat) - len(kept)
                self._journals[ref.uid] = kept
        return dropped

    # -- schema versions (SchemaStore, ADR 0088) -------------------------------------------
    def schema_versions(self) -> list[SchemaCount]:
        """Per machine, kind, version and fingerprint: how many records, one example uid."""
        counts: dict[tuple[str, str, int, str], list[Any]] = {}

        def add(machine: str, kind: str, schema: Schema | None, uid: str) -> None:
            version, fp = (1, "") if schema is None else (schema.version, schema.fingerprint)
            seen = counts.setdefault((machine, kind, version, fp), [0, uid])
            seen[0] += 1
            seen[1] = min(seen[1], uid)

        with self._lock:
            for uid, record in self._records.items():
                add(record.machine, "status", record.schema, uid)
                for flat in self._journals.get(uid, ()):
                    add(record.machine, "journal", flat[4], uid)
                snapshot = self._snapshots.get(uid)
                if snapshot is not None:
                    add(record.machine, "snapshot", snapshot.schema, uid)
        return [SchemaCount(*key, n, uid) for key, (n, uid) in sorted(counts.items())]

    def upgrade(self, machine: Machine[Any], *, batch: int = 500) -> UpgradeReport:
        """Rewrite ``machine``'s records below its schema version (see
        :class:`~lifecycle.stores.SchemaStore`): each is upcast outside the lock and set only
        if it is still the record that was read."""
        check_batch(batch)
        name, schema = machine.name, machine.schema
        statuses = entries = snapshots = skipped = 0
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
        with self._lock:
            uids = [uid for uid, r in self._records.items() if r.machine == name]
        for uid in uids:
            with self._lock:
                flats = list(self._journals.get(uid, ()))
                snap = self._snapshots.get(uid)
            redone = {i: _upgrading(_upcast_flat, machine, flat, uid, flat[0])
                      for i, flat in enumerate(flats) if _below(flat[4], schema)}  # fmt: skip
            with self._lock:
                journal = self._journals.get(uid)
                for i, flat in redone.items():
                    if journal is not None and i < len(journal) and journal[i] is flats[i]:
                        journal[i] = flat
                        entries += 1
                if snap is not None and _below(snap.schema, schema):
                    status = _upgrading(_upcast_snapshot, machine, snap, uid, snap.version)
                    if self._snapshots.get(uid) is snap:
                        self._snapshots[uid] = Snapshot(snap.version, status, schema)
                        snapshots += 1
        return UpgradeReport(name, statuses, entries, snapshots, skipped)

    def claim_undelivered(self, limit: int = 1000) -> list[Transition]:
        with self._lock:
            pending = sorted(self._outbox.values(), key=lambda t: (t.ref.uid, t.version, t.n))
            return pending[:limit]

    def mark_delivered(self, ids: Iterable[str]) -> None:
        with self._lock:
            for i in ids:
                self._outbox.pop(i, None)

    def close(self) -> None:
        pass


_EVENT_TYPES = {t.value: t for t in EventType}


def _pack(
    t: Transition, ref: ObjectRef, machine: str, version: int, observation: Observation
) -> Transition | tuple[Any, ...]:
    """A committed transition without what its journal entry already says (object, machine,
    version, time), its type as text: a tuple of plain values, which the garbage collector
    stops tracking. One that says otherwise is kept whole."""
    if t.ref is not ref or t.at is not observation.at or t.version != version:
        return t  # (the runner stamps with these very objects; anything else stays whole)
    if t.machine != machine or t.action or t.type.__class__ is not EventType:
        return t
    if t.intent is not None:  # a cascade intent (ADR 0090) keeps its target
        return t
    return (t.source, t.target, t.reason, t.type.value, t.message, t.n, t.condition,
            t.fallback, t.controller)  # fmt: skip


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


def _upcast_observation(machine: Machine[Any], obs: Observation, stored: Schema) -> Observation:
    fields = serde.dump(obs)
    fields.pop("at", None)
    name, fields = machine.schema.upcast_observation(
        obs.name(), fields, stored.version, stored.fingerprint
    )
    return machine.load_observation(name, obs.at.isoformat(), fields)


def _upcast_flat(machine: Machine[Any], flat: tuple[Any, ...]) -> tuple[Any, ...]:
    observation = _upcast_observation(machine, flat[1], flat[4])
    return (flat[0], observation, flat[2], flat[3], machine.schema, *flat[5:])


def _entry(flat: tuple[Any, ...], machine: Machine[Any] | None = None) -> JournalEntry:
    version, observation, ref, machine_name, schema = flat[:5]
    if machine is not None and schema is not machine.schema and _stale(schema, machine):
        observation = _upcast_observation(machine, observation, schema)
    transitions = tuple(
        p
        if isinstance(p, Transition)
        else Transition(
            ref,
            machine_name,
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
        for p in flat[5:]
    )
    return JournalEntry(version, observation, transitions)
