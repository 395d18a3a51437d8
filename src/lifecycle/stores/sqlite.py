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

from .._core.errors import Conflict, StoreError
from .._core.machine import Machine
from .._core.observation import Observation
from .._core.refs import ObjectRef
from .._core.transition import Transition
from .base import JournalEntry, Record, transition_from_row, transition_to_row

SCHEMA_VERSION = 1

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
"""

Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]


class SQLiteStore:
    """A :class:`~lifecycle.stores.Store` on one SQLite file.

    ``synchronous`` is SQLite's durability setting; the default ``FULL`` makes every commit
    survive power loss, ``NORMAL`` (still safe against a process crash in WAL mode) is faster.
    ``lease_seconds`` is how long a committing process owns delivery of its fresh events
    before another process's :meth:`claim_undelivered` may take them over.
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
    ) -> None:
        if synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ValueError(f"synchronous must be OFF, NORMAL, FULL or EXTRA, not {synchronous!r}")
        self.path = str(path)
        self.owner = uuid.uuid4().hex
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
                "INSERT OR IGNORE INTO lifecycle_meta VALUES ('schema_version', ?)",
                (str(SCHEMA_VERSION),),
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
        with self._lock:
            try:
                row = self._db.execute(
                    "SELECT version, status FROM objects WHERE uid = ?", (ref.uid,)
                ).fetchone()
            except sqlite3.Error as e:
                raise self._fail(f"load of {ref.uid}", e) from e
        if row is None:
            return None
        with self._decoding(f"status of {ref.uid}"):
            return Record(ref, machine.name, machine.load_status(json.loads(row[1])), row[0])

    def commit(
        self,
        machine: Machine[Any],
        ref: ObjectRef,
        expected: int,
        status: Any,
        observation: Observation,
        transitions: Sequence[Transition],
    ) -> int:
        try:
            status_json = json.dumps(machine.dump_status(status), separators=(",", ":"))
            fields_json = json.dumps(machine.dump_observation(observation), separators=(",", ":"))
            events = [transition_to_row(t) for t in transitions]
        except (TypeError, ValueError) as e:
            raise StoreError(f"cannot serialise the status of {ref}: {e}") from e
        version = expected + 1
        lease_until = self._clock() + self._lease
        with self._lock:
            try:
                with self._transaction() as db:
                    if expected == 0:
                        try:
                            db.execute(
                                "INSERT INTO objects VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                                (
                                    ref.uid,
                                    machine.name,
                                    ref.kind,
                                    ref.namespace,
                                    ref.name,
                                    status.state,
                                    version,
                                    status_json,
                                ),
                            )
                        except sqlite3.IntegrityError:
                            raise self._conflict(ref, expected) from None
                    else:
                        cur = db.execute(
                            "UPDATE objects SET state = ?, version = ?, status = ? "
                            "WHERE uid = ? AND version = ?",
                            (status.state, version, status_json, ref.uid, expected),
                        )
                        if cur.rowcount != 1:
                            raise self._conflict(ref, expected)
                    if self._keep_journal:
                        db.execute(
                            "INSERT INTO journal VALUES (?, ?, ?, ?, ?, ?)",
                            (
                                ref.uid,
                                version,
                                observation.at.isoformat(),
                                observation.name(),
                                fields_json,
                                json.dumps(events),
                            ),
                        )
                    db.executemany(
                        "INSERT INTO outbox VALUES (?, ?, ?, ?, ?, ?, ?)",
                        [
                            (t.id, ref.uid, t.version, t.n, json.dumps(e), self.owner, lease_until)
                            for t, e in zip(transitions, events, strict=True)
                        ],
                    )
            except Conflict:
                raise
            except sqlite3.Error as e:
                raise self._fail(f"commit of {ref.uid} v{version}", e) from e
        return version

    def _conflict(self, ref: ObjectRef, expected: int) -> Conflict:
        row = self._db.execute("SELECT version FROM objects WHERE uid = ?", (ref.uid,)).fetchone()
        return Conflict(ref.uid, expected, None if row is None else row[0])

    def journal(self, machine: Machine[Any], ref: ObjectRef) -> list[JournalEntry]:
        with self._lock:
            try:
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
        with self._lock:
            try:
                with self._transaction() as db:
                    db.executemany("DELETE FROM outbox WHERE id = ?", [(i,) for i in ids])
            except sqlite3.Error as e:
                raise self._fail("outbox mark", e) from e

    def undelivered_count(self) -> int:
        with self._lock:
            (n,) = self._db.execute("SELECT count(*) FROM outbox").fetchone()
        return int(n)

    def close(self) -> None:
        with self._lock:
            self._db.close()


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
