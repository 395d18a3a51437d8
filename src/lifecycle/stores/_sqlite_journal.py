"""An object's history in the SQLite store (ADR 0153): its journal read back, its snapshot,
and compaction -- the journal entries behind a snapshot dropped (ADR 0063, ``RetentionStore``).
The journal is written with each commit (:mod:`._sqlite_write`); here it is only read and
trimmed, on the store's connection under its lock."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager
from typing import Any, Protocol

from .._core.errors import StoreError
from .._core.machine import Machine
from .._core.refs import ObjectRef
from .._core.schema import load_observation, load_status
from .._log import get_logger
from ._sqlite_codec import dumps, int64, loads
from ._sqlite_write import Connected
from .base import (
    JournalEntry,
    Record,
    Snapshot,
    check_identity,
    journal_start,
    plan_compaction,
    transition_from_row,
)

__all__ = ["compact", "journal", "snapshot"]

_log = get_logger("lifecycle.stores")

_JOURNAL = (
    "SELECT version, at, observation, fields, transitions, schema_version, "
    "schema_fingerprint FROM journal WHERE uid = ? ORDER BY version"
)
_SNAPSHOT = (
    "SELECT version, status, schema_version, schema_fingerprint FROM snapshots WHERE uid = ?"
)


class Coordinator(Connected, Protocol):
    """What the history uses of the store that holds it besides its connection: whether it
    keeps a journal, how a row that cannot be read back is reported, and its reads."""

    @property
    def _keep_journal(self) -> bool: ...
    def _decoding(self, what: str) -> AbstractContextManager[None]: ...
    def load(self, machine: Machine[Any], ref: ObjectRef) -> Record | None: ...
    def journal(self, machine: Machine[Any], ref: ObjectRef) -> list[JournalEntry]: ...
    def records(self, machine: Machine[Any]) -> Iterator[Record]: ...


def _identity(db: sqlite3.Connection, machine: Machine[Any], ref: ObjectRef) -> None:
    """:func:`check_identity` of ``ref`` against its stored row (if there is one)."""
    row = db.execute(
        "SELECT machine, kind, namespace, name FROM objects WHERE uid = ?", (ref.uid,)
    ).fetchone()
    if row is not None:
        check_identity(row[0], row[1], row[2], row[3], machine.name, ref)


def _rows_of(
    store: Coordinator, machine: Machine[Any], ref: ObjectRef, what: str, sql: str
) -> list[Any]:
    """The rows ``sql`` reads for ``ref`` (its uid the one parameter), its identity checked
    first, in one hold of the store's lock; a failed read names ``what``."""
    with store._lock:
        try:
            _identity(store._db, machine, ref)
            return store._db.execute(sql, (ref.uid,)).fetchall()
        except sqlite3.Error as e:
            raise store._fail(f"{what} of {ref.uid}", e) from e


def journal(store: Coordinator, machine: Machine[Any], ref: ObjectRef) -> list[JournalEntry]:
    """``ref``'s journal, oldest first (:meth:`~.sqlite.SQLiteStore.journal`)."""
    rows = _rows_of(store, machine, ref, "journal", _JOURNAL)
    with store._decoding(f"journal of {ref.uid}"):
        return [
            JournalEntry(
                version,
                load_observation(machine, name, at, loads(fields), sv, fp),
                tuple(transition_from_row(t) for t in loads(events)),
            )
            for version, at, name, fields, events, sv, fp in rows
        ]


def snapshot(store: Coordinator, machine: Machine[Any], ref: ObjectRef) -> Snapshot | None:
    """``ref``'s snapshot, or ``None`` (:meth:`~.sqlite.SQLiteStore.snapshot`)."""
    rows = _rows_of(store, machine, ref, "snapshot", _SNAPSHOT)  # one at most: uid is its key
    if not rows:
        return None
    row = rows[0]
    with store._decoding(f"snapshot of {ref.uid}"):
        return Snapshot(row[0], load_status(machine, loads(row[1]), row[2], row[3]))


def compact(
    store: Coordinator, machine: Machine[Any], keep: int, refs: Iterable[ObjectRef] | None
) -> int:
    """Drop all but the last ``keep`` journal entries of each object behind a snapshot,
    one transaction per object; an object whose journal does not fold to its status is
    left as it is (and logged). Returns how many entries were dropped."""
    int64("keep", keep)
    if not store._keep_journal:
        return 0
    chosen = [r.ref for r in store.records(machine)] if refs is None else list(refs)
    dropped = 0
    for ref in chosen:
        with store._lock:
            try:
                with store._transaction():
                    dropped += _compact_one(store, machine, ref, keep)
            except StoreError as e:
                _log.warning("journal left uncompacted", uid=ref.uid, error=str(e))
            except sqlite3.Error as e:
                raise store._fail(f"compaction of {ref.uid}", e) from e
    return dropped


def _compact_one(store: Coordinator, machine: Machine[Any], ref: ObjectRef, keep: int) -> int:
    current = store.load(machine, ref)
    if current is None:
        return 0
    entries = store.journal(machine, ref)
    start = journal_start(store, machine, ref)
    snapshot = plan_compaction(machine, ref, start, entries, current, keep)
    if snapshot is None:
        return 0
    status_json = dumps(machine.dump_status(snapshot.status))
    schema = machine.schema
    store._db.execute(
        "INSERT INTO snapshots (uid, version, status, schema_version, schema_fingerprint) "
        "VALUES (?, ?, ?, ?, ?) ON CONFLICT (uid) DO UPDATE SET version = excluded.version, "
        "status = excluded.status, schema_version = excluded.schema_version, "
        "schema_fingerprint = excluded.schema_fingerprint",
        (ref.uid, snapshot.version, status_json, schema.version, schema.fingerprint),
    )
    cur = store._db.execute(
        "DELETE FROM journal WHERE uid = ? AND version <= ?", (ref.uid, snapshot.version)
    )
    return cur.rowcount
