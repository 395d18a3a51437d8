"""An in-process store: the reference implementation of the protocol, and a test double."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import structlog

from .._core.errors import Conflict, StoreError
from .._core.machine import Machine
from .._core.observation import Observation
from .._core.refs import EventType, ObjectRef
from .._core.transition import Transition
from .base import (
    JournalEntry,
    Record,
    Snapshot,
    check_record,
    journal_start,
    plan_compaction,
)

_log = structlog.get_logger("lifecycle.stores")


class MemoryStore:
    """Keeps records, journals and the outbox in dicts. Thread-safe; nothing survives exit.

    Entries hold references to the (immutable) statuses and observations themselves, so a
    tracked object costs its status, its journal tuple and nothing else.
    """

    def __init__(self, *, journal: bool = True) -> None:
        self._records: dict[str, Record] = {}
        # Per object, each entry flat: (version, observation, ref, machine, *transitions), a
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
        if record is not None and (record.ref is not ref or record.machine is not machine.name):
            check_record(record, machine.name, ref)  # (the same objects: nothing to compare)
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
            entry = (version, observation, ref, name, *packed)
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
            self._records[ref.uid] = Record(ref, name, status, version)
            if entry is not None:
                self._journals.setdefault(ref.uid, []).append(entry)
            self._outbox.update(outbox)
            return version

    def journal(self, machine: Machine[Any], ref: ObjectRef) -> list[JournalEntry]:
        record = self._records.get(ref.uid)
        if record is not None:
            check_record(record, machine.name, ref)
        return [_entry(flat) for flat in self._journals.get(ref.uid, ())]

    def records(self, machine: Machine[Any]) -> Iterator[Record]:
        return iter([r for r in self._records.values() if r.machine == machine.name])

    def snapshot(self, machine: Machine[Any], ref: ObjectRef) -> Snapshot | None:
        record = self._records.get(ref.uid)
        if record is not None:
            check_record(record, machine.name, ref)
        return self._snapshots.get(ref.uid)

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
                self._snapshots[ref.uid] = snapshot
                flat = self._journals.get(ref.uid, [])
                kept = [e for e in flat if e[0] > snapshot.version]
                dropped += len(flat) - len(kept)
                self._journals[ref.uid] = kept
        return dropped

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


def _entry(flat: tuple[Any, ...]) -> JournalEntry:
    version, observation, ref, machine = flat[:4]
    transitions = tuple(
        p
        if isinstance(p, Transition)
        else Transition(
            ref,
            machine,
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
        for p in flat[4:]
    )
    return JournalEntry(version, observation, transitions)
