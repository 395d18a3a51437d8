"""The embedded default store: one SQLite file in WAL mode.

One ``BEGIN IMMEDIATE`` transaction writes the status (compare-and-set on ``version``), the
journal entry and the outbox rows. Several processes may share the file: SQLite serialises
their writers, the CAS turns a lost race into :class:`~lifecycle.Conflict`, and outbox rows
are leased so a crashed process's events are redelivered, under the same ids, by another.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import attrs
import structlog

from .._core.errors import Conflict, StoreError
from .._core.machine import Machine
from .._core.observation import Observation
from .._core.refs import ObjectRef
from .._core.transition import Transition
from .base import (
    CommitItem,
    JournalEntry,
    Record,
    Snapshot,
    check_identity,
    journal_start,
    plan_compaction,
    transition_from_row,
    transition_to_row,
)

SCHEMA_VERSION = 2
_CHUNK = 500  # uids per IN (...) query: well under SQLite's variable limit
_dumps = json.JSONEncoder(separators=(",", ":")).encode  # compact, and built once
_log = structlog.get_logger("lifecycle.stores")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS lifecycle_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS objects (
    uid TEXT PRIMARY KEY,
    machine TEXT NOT NULL,
    kind TEXT NOT NULL,
    namespace TEXT NOT NULL,
    name TEXT NOT NULL,
    state TEXT NOT NULL,
    version INTEGER NOT NULL,
    status TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS objects_by_machine ON objects (machine, state);
CREATE TABLE IF NOT EXISTS journal (
    uid TEXT NOT NULL,
    version INTEGER NOT NULL,
    at TEXT NOT NULL,
    observation TEXT NOT NULL,
    fields TEXT NOT NULL,
    transitions TEXT NOT NULL,
    PRIMARY KEY (uid, version)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS outbox (
    id TEXT PRIMARY KEY,
    uid TEXT NOT NULL,
    version INTEGER NOT NULL,
    n INTEGER NOT NULL,
    payload TEXT NOT NULL,
    claimed_by TEXT,
    claimed_until REAL
);
CREATE INDEX IF NOT EXISTS outbox_order ON outbox (uid, version, n);
CREATE TABLE IF NOT EXISTS snapshots (
    uid TEXT PRIMARY KEY,
    version INTEGER NOT NULL,
    status TEXT NOT NULL
) WITHOUT ROWID;
"""

Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]
#: An object's row with its identity, to check it in the same read (``check_identity``).
_LOAD = "SELECT version, status, machine, kind, namespace, name FROM objects WHERE uid = ?"


class SQLiteStore:
    """A :class:`~lifecycle.stores.Store` on one SQLite file.

    ``synchronous`` is SQLite's durability setting; the default ``FULL`` makes every commit
    survive power loss, ``NORMAL`` (still safe against a process crash in WAL mode) is faster.
    ``lease_seconds`` is how long a committing process owns delivery of its fresh events
    before another process's :meth:`claim_undelivered` may take them over. ``owner`` names
    this writer: give each replica a stable name (its pod name) and a restarted replica takes
    back the events it leased before a crash at once; the default, a fresh random id, waits
    out the lease (``Runner.redeliver`` then finds them on a later call).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: Synchronous = "FULL",
        lease_seconds: float = 30.0,
        busy_timeout: float = 10.0,
        journal: bool = True,
        clock: Callable[[], float] = time.time,
        owner: str | None = None,
    ) -> None:
        if synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ValueError(f"synchronous must be OFF, NORMAL, FULL or EXTRA, not {synchronous!r}")
        if owner is not None and not owner:
            raise ValueError("owner must be a non-empty name (or None for a random one)")
        self.path = str(path)
        self.owner = owner if owner is not None else uuid.uuid4().hex
        self._synchronous = synchronous
        self._lease = lease_seconds
        self._clock = clock
        self._keep_journal = journal
        self._lock = threading.RLock()
        try:
            self._db = sqlite3.connect(
                self.path, timeout=busy_timeout, isolation_level=None, check_same_thread=False
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(f"PRAGMA synchronous={synchronous}")
            self._db.executescript(_SCHEMA)
            self._db.execute(
                "INSERT INTO lifecycle_meta VALUES ('schema_version', ?) ON CONFLICT (key) "
                "DO UPDATE SET value = excluded.value WHERE CAST(value AS INTEGER) < ?",
                (str(SCHEMA_VERSION), SCHEMA_VERSION),
            )
        except sqlite3.Error as e:
            hint = ""
            if not Path(self.path).parent.exists():
                hint = f" (folder {Path(self.path).parent} does not exist; sqlite:////ABS/PATH)"
            raise StoreError(f"cannot open SQLite store {self.path}: {e}{hint}") from e

    # -- plumbing -----------------------------------------------------------------------
    def _transaction(self) -> _Tx:
        return _Tx(self._db)

    def _fail(self, what: str, e: BaseException) -> StoreError:
        return StoreError(f"SQLite store {self.path}: {what} failed: {e}")

    @contextlib.contextmanager
    def _decoding(self, what: str) -> Iterator[None]:
        """A stored row that cannot be read back (corrupt, or written by an incompatible
        version) is a :class:`StoreError`, never a raw decoding exception."""
        try:
            yield
        except Exception as e:
            raise StoreError(f"SQLite store {self.path}: cannot read the {what}: {e!r}") from e

    # -- the protocol -------------------------------------------------------------------
    def load(self, machine: Machine[Any], ref: ObjectRef) -> Record | None:
        """The stored record, or ``None``; :class:`~lifecycle.IdentityMismatch` when the
        uid is stored for another object (its identity is read in the same ``SELECT``)."""
        with self._lock:
            try:
                row = self._db.execute(_LOAD, (ref.uid,)).fetchone()
            except sqlite3.Error as e:
                raise self._fail(f"load of {ref.uid}", e) from e
        if row is None:
            return None
        version, status, m, kind, namespace, name = row
        if m != machine.name or kind != ref.kind or namespace != ref.namespace or name != ref.name:
            check_identity(m, kind, namespace, name, machine.name, ref)
        with self._decoding(f"status of {ref.uid}"):
            return Record(ref, machine.name, machine.load_status(json.loads(status)), version)

    def commit(
        self,
        machine: Machine[Any],
        ref: ObjectRef,
        expected: int,
        status: Any,
        observation: Observation,
        transitions: Sequence[Transition],
    ) -> int:
        row = self._encode(machine, ref, expected, status, observation, transitions)
        lease_until = self._clock() + self._lease
        with self._lock:
            try:
                with self._transaction() as db:
                    self._write(db, row, lease_until)
            except Conflict:
                raise
            except sqlite3.Error as e:
                raise self._fail(f"commit of {ref.uid} v{expected + 1}", e) from e
        return expected + 1

    def _encode(
        self,
        machine: Machine[Any],
        ref: ObjectRef,
        expected: int,
        status: Any,
        observation: Observation,
        transitions: Sequence[Transition],
    ) -> _Row:
        try:
            status_json = _dumps(machine.dump_status(status))
            fields_json = _dumps(machine.dump_observation(observation))
            events = [_dumps(transition_to_row(t)) for t in transitions]
        except (TypeError, ValueError) as e:
            raise StoreError(f"cannot serialise the status of {ref}: {e}") from e
        return _Row(
            machine.name,
            ref,
            expected,
            status.state,
            status_json,
            observation,
            fields_json,
            tuple(transitions),
            events,
        )

    def _write(self, db: sqlite3.Connection, row: _Row, lease_until: float) -> None:
        """The compare-and-set write of one object, inside the caller's transaction."""
        self._cas(db, row)
        if self._keep_journal:
            db.execute("INSERT INTO journal VALUES (?, ?, ?, ?, ?, ?)", self._journal_row(row))
        if row.transitions:
            db.executemany(
                "INSERT INTO outbox VALUES (?, ?, ?, ?, ?, ?, ?)",
                self._outbox_rows(row, lease_until),
            )

    def _journal_row(self, row: _Row) -> tuple[Any, ...]:
        obs = row.observation
        events = "[" + ",".join(row.events) + "]"
        return (row.ref.uid, row.expected + 1, obs.at.isoformat(), obs.name(), row.fields, events)

    def _outbox_rows(self, row: _Row, lease_until: float) -> list[tuple[Any, ...]]:
        uid = row.ref.uid
        return [
            (t.id, uid, t.version, t.n, e, self.owner, lease_until)
            for t, e in zip(row.transitions, row.events, strict=True)
        ]

    def _cas(self, db: sqlite3.Connection, row: _Row) -> None:
        """Compare and set the object's row (raises :class:`Conflict`)."""
        ref, expected = row.ref, row.expected
        version = expected + 1
        if expected == 0:
            try:
                db.execute(
                    "INSERT INTO objects VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        ref.uid,
                        row.machine,
                        ref.kind,
                        ref.namespace,
                        ref.name,
                        row.state,
                        version,
                        row.status,
                    ),
                )
            except sqlite3.IntegrityError:
                raise self._conflict(row.machine, ref, expected) from None
        else:
            # the identity is part of the compare-and-set: a row stored for another object
            # is not updated, and _conflict says which it was
            cur = db.execute(
                "UPDATE objects SET state = ?, version = ?, status = ? WHERE uid = ? "
                "AND version = ? AND machine = ? AND kind = ? AND namespace = ? AND name = ?",
                (
                    row.state,
                    version,
                    row.status,
                    ref.uid,
                    expected,
                    row.machine,
                    ref.kind,
                    ref.namespace,
                    ref.name,
                ),
            )
            if cur.rowcount != 1:
                raise self._conflict(row.machine, ref, expected)

    # -- batches (BatchStore) -----------------------------------------------------------
    def load_many(self, items: Sequence[tuple[Machine[Any], ObjectRef]]) -> list[Record | None]:
        """Each object's record (or ``None``), read in one consistent snapshot. An item whose
        uid is stored for another object refuses the whole read with
        :class:`~lifecycle.IdentityMismatch` (see :class:`~lifecycle.stores.BatchStore`)."""
        uids = list(dict.fromkeys(ref.uid for _, ref in items))
        found: dict[str, tuple[Any, ...]] = {}
        with self._lock:
            try:
                for start in range(0, len(uids), _CHUNK):
                    chunk = uids[start : start + _CHUNK]
                    marks = ",".join("?" * len(chunk))
                    for uid, *row in self._db.execute(
                        "SELECT uid, version, status, machine, kind, namespace, name "
                        f"FROM objects WHERE uid IN ({marks})",
                        chunk,
                    ):
                        found[uid] = tuple(row)
            except sqlite3.Error as e:
                raise self._fail(f"load of {len(uids)} objects", e) from e
        for machine, ref in items:  # the whole read is refused if one item is an impostor
            row = found.get(ref.uid)
            if row is not None and row[2:] != (machine.name, ref.kind, ref.namespace, ref.name):
                check_identity(row[2], row[3], row[4], row[5], machine.name, ref)
        out: list[Record | None] = []
        for machine, ref in items:
            row = found.get(ref.uid)
            if row is None:
                out.append(None)
                continue
            with self._decoding(f"status of {ref.uid}"):
                status = machine.load_status(json.loads(row[1]))
            out.append(Record(ref, machine.name, status, row[0]))
        return out

    def commit_many(self, items: Sequence[CommitItem]) -> list[int | StoreError]:
        """Commit each item with its own compare-and-set, all in one transaction.

        A conflicting item is reported (and writes nothing); the others commit. If the
        transaction itself fails on an item's row (a stray journal or outbox row), it is
        rolled back and done again with each item in its own savepoint, so only that item is
        refused. An item whose uid is stored for another object refuses the whole batch with
        :class:`~lifecycle.IdentityMismatch`: the transaction is rolled back, nothing written.
        """
        rows: list[_Row | StoreError] = []
        for item in items:
            try:
                rows.append(
                    self._encode(
                        item.machine,
                        item.ref,
                        item.expected,
                        item.status,
                        item.observation,
                        item.transitions,
                    )
                )
            except StoreError as e:
                rows.append(e)
        lease_until = self._clock() + self._lease
        out: list[int | StoreError] = []
        with self._lock:
            try:
                with self._transaction() as db:
                    journal: list[tuple[Any, ...]] = []
                    outbox: list[tuple[Any, ...]] = []
                    for row in rows:
                        if isinstance(row, StoreError):
                            out.append(row)
                            continue
                        try:
                            self._cas(db, row)
                        except Conflict as e:
                            out.append(e)
                            continue
                        out.append(row.expected + 1)
                        journal.append(self._journal_row(row))
                        outbox.extend(self._outbox_rows(row, lease_until))
                    # the object rows are set one by one (each its own CAS); the journal
                    # entries and the outbox rows of those that passed go in two statements
                    if self._keep_journal and journal:
                        db.executemany("INSERT INTO journal VALUES (?, ?, ?, ?, ?, ?)", journal)
                    if outbox:
                        db.executemany("INSERT INTO outbox VALUES (?, ?, ?, ?, ?, ?, ?)", outbox)
                return out
            except sqlite3.IntegrityError:
                pass  # a stray row: find the item it belongs to, one savepoint at a time
            except sqlite3.Error as e:
                raise self._fail(f"commit of {len(items)} objects", e) from e
            try:
                with self._transaction() as db:
                    return [self._savepoint(db, row, lease_until) for row in rows]
            except sqlite3.Error as e:
                raise self._fail(f"commit of {len(items)} objects", e) from e

    def _savepoint(
        self, db: sqlite3.Connection, row: _Row | StoreError, lease_until: float
    ) -> int | StoreError:
        """One item of a batch in its own savepoint: its version, or why it was refused."""
        if isinstance(row, StoreError):
            return row
        db.execute("SAVEPOINT item")
        try:
            self._write(db, row, lease_until)
        except StoreError as e:
            db.execute("ROLLBACK TO item")
            return e
        except sqlite3.Error as e:
            db.execute("ROLLBACK TO item")
            return self._fail(f"commit of {row.ref.uid} v{row.expected + 1}", e)
        finally:
            db.execute("RELEASE item")
        return row.expected + 1

    def _conflict(self, machine: str, ref: ObjectRef, expected: int) -> Conflict:
        """Why a compare-and-set failed: the :class:`Conflict` to raise, or (raised here)
        :class:`~lifecycle.IdentityMismatch` when the uid is stored for another object."""
        row = self._db.execute(_LOAD, (ref.uid,)).fetchone()
        if row is None:
            return Conflict(ref.uid, expected, None)
        check_identity(row[2], row[3], row[4], row[5], machine, ref)
        return Conflict(ref.uid, expected, row[0])

    def _identity(self, machine: Machine[Any], ref: ObjectRef) -> None:
        """:func:`check_identity` of ``ref`` against its stored row (if there is one)."""
        row = self._db.execute(
            "SELECT machine, kind, namespace, name FROM objects WHERE uid = ?", (ref.uid,)
        ).fetchone()
        if row is not None:
            check_identity(row[0], row[1], row[2], row[3], machine.name, ref)

    def journal(self, machine: Machine[Any], ref: ObjectRef) -> list[JournalEntry]:
        with self._lock:
            try:
                self._identity(machine, ref)
                rows = self._db.execute(
                    "SELECT version, at, observation, fields, transitions FROM journal "
                    "WHERE uid = ? ORDER BY version",
                    (ref.uid,),
                ).fetchall()
            except sqlite3.Error as e:
                raise self._fail(f"journal of {ref.uid}", e) from e
        with self._decoding(f"journal of {ref.uid}"):
            return [
                JournalEntry(
                    version,
                    machine.load_observation(name, at, json.loads(fields)),
                    tuple(transition_from_row(t) for t in json.loads(events)),
                )
                for version, at, name, fields, events in rows
            ]

    def records(self, machine: Machine[Any]) -> Iterator[Record]:
        with self._lock:
            try:
                rows = self._db.execute(
                    "SELECT kind, namespace, name, uid, version, status FROM objects "
                    "WHERE machine = ? ORDER BY uid",
                    (machine.name,),
                ).fetchall()
            except sqlite3.Error as e:
                raise self._fail("scan", e) from e
        for kind, namespace, name, uid, version, status in rows:
            ref = ObjectRef(kind, namespace, name, uid)
            with self._decoding(f"status of {uid}"):
                loaded = machine.load_status(json.loads(status))
            yield Record(ref, machine.name, loaded, version)

    # -- retention (RetentionStore) -----------------------------------------------------
    def snapshot(self, machine: Machine[Any], ref: ObjectRef) -> Snapshot | None:
        with self._lock:
            try:
                self._identity(machine, ref)
                row = self._db.execute(
                    "SELECT version, status FROM snapshots WHERE uid = ?", (ref.uid,)
                ).fetchone()
            except sqlite3.Error as e:
                raise self._fail(f"snapshot of {ref.uid}", e) from e
        if row is None:
            return None
        with self._decoding(f"snapshot of {ref.uid}"):
            return Snapshot(row[0], machine.load_status(json.loads(row[1])))

    def compact(
        self, machine: Machine[Any], *, keep: int = 0, refs: Iterable[ObjectRef] | None = None
    ) -> int:
        """Drop all but the last ``keep`` journal entries of each object behind a snapshot,
        one transaction per object; an object whose journal does not fold to its status is
        left as it is (and logged). Returns how many entries were dropped."""
        if not self._keep_journal:
            return 0
        chosen = [r.ref for r in self.records(machine)] if refs is None else list(refs)
        dropped = 0
        for ref in chosen:
            with self._lock:
                try:
                    with self._transaction():
                        dropped += self._compact_one(machine, ref, keep)
                except StoreError as e:
                    _log.warning("journal left uncompacted", uid=ref.uid, error=str(e))
                except sqlite3.Error as e:
                    raise self._fail(f"compaction of {ref.uid}", e) from e
        return dropped

    def _compact_one(self, machine: Machine[Any], ref: ObjectRef, keep: int) -> int:
        current = self.load(machine, ref)
        if current is None:
            return 0
        entries = self.journal(machine, ref)
        start = journal_start(self, machine, ref)
        snapshot = plan_compaction(machine, ref, start, entries, current, keep)
        if snapshot is None:
            return 0
        status_json = _dumps(machine.dump_status(snapshot.status))
        self._db.execute(
            "INSERT INTO snapshots VALUES (?, ?, ?) ON CONFLICT (uid) "
            "DO UPDATE SET version = excluded.version, status = excluded.status",
            (ref.uid, snapshot.version, status_json),
        )
        cur = self._db.execute(
            "DELETE FROM journal WHERE uid = ? AND version <= ?", (ref.uid, snapshot.version)
        )
        return cur.rowcount

    def claim_undelivered(self, limit: int = 1000) -> list[Transition]:
        """Lease up to ``limit`` undelivered events: this store's own, and expired leases."""
        now = self._clock()
        with self._lock:
            try:
                with self._transaction() as db:
                    rows = db.execute(
                        "UPDATE outbox SET claimed_by = ?, claimed_until = ? WHERE id IN ("
                        " SELECT id FROM outbox WHERE claimed_by = ? OR claimed_by IS NULL"
                        " OR claimed_until < ? ORDER BY uid, version, n LIMIT ?)"
                        " RETURNING payload",
                        (self.owner, now + self._lease, self.owner, now, limit),
                    ).fetchall()
            except sqlite3.Error as e:
                raise self._fail("outbox claim", e) from e
        with self._decoding("outbox"):
            found = [transition_from_row(json.loads(p)) for (p,) in rows]
        found.sort(key=lambda t: (t.ref.uid, t.version, t.n))
        return found

    def mark_delivered(self, ids: Iterable[str]) -> None:
        """Delete delivered rows. The mark need not be durable (lost in a crash, an event is
        delivered again under its id), so it is committed with ``synchronous=NORMAL``."""
        done = [(i,) for i in ids]
        if not done:
            return
        with self._lock:
            try:
                if self._synchronous in ("FULL", "EXTRA"):
                    self._db.execute("PRAGMA synchronous=NORMAL")
                try:
                    with self._transaction() as db:
                        db.executemany("DELETE FROM outbox WHERE id = ?", done)
                finally:
                    if self._synchronous in ("FULL", "EXTRA"):
                        self._db.execute(f"PRAGMA synchronous={self._synchronous}")
            except sqlite3.Error as e:
                raise self._fail("outbox mark", e) from e

    def undelivered_count(self) -> int:
        with self._lock:
            (n,) = self._db.execute("SELECT count(*) FROM outbox").fetchone()
        return int(n)

    def close(self) -> None:
        with self._lock:
            self._db.close()


@attrs.frozen(slots=True)
class _Row:
    """One commit, serialised: what :meth:`SQLiteStore._write` inserts."""

    machine: str
    ref: ObjectRef
    expected: int
    state: str
    status: str
    observation: Observation
    fields: str
    transitions: tuple[Transition, ...]
    events: list[str]


class _Tx:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``, or ``ROLLBACK`` on any exception."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> sqlite3.Connection:
        self._db.execute("BEGIN IMMEDIATE")
        return self._db

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self._db.execute("COMMIT")
        else:
            self._db.execute("ROLLBACK")
