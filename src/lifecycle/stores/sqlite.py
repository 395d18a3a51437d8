"""The embedded default store: one SQLite file in WAL mode.

One ``BEGIN IMMEDIATE`` transaction writes the status (compare-and-set on ``version``), the
journal entry and the outbox rows. Several processes may share the file: SQLite serialises
their writers, the CAS turns a lost race into :class:`~lifecycle.Conflict`, and outbox rows
are leased so a crashed process's events are redelivered, under the same ids, by another.

With ``group_commit=True`` (ADR 0026) concurrent ``commit`` calls share one transaction and one
flush: each caller's write is queued, one of them (the leader) writes the whole queue, each
item in its own savepoint with its own compare-and-set, commits once, and only then answers
every caller with its own result.
"""

from __future__ import annotations

import contextlib
import functools
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

import attrs

from .._core import threads
from .._core.bounds import INT_MAX, INT_MIN
from .._core.errors import Conflict, IdentityMismatch, StoreError, preview
from .._core.machine import Machine
from .._core.observation import Observation
from .._core.refs import ObjectRef
from .._core.schema import (
    SchemaCount,
    load_observation,
    load_status,
    merge_counts,
    upgraded_observation,
    upgraded_status,
)
from .._core.transition import Transition
from .._log import get_logger
from . import _sqlite_history as history
from ._cache import DEFAULT_CACHE, StatusCache
from ._sqlite_history import HistoryRewind, SQLiteHistory
from .base import (
    CommitItem,
    JournalEntry,
    OutboxSummary,
    Record,
    Snapshot,
    UpgradeReport,
    check_batch,
    check_identity,
    journal_start,
    plan_compaction,
    transition_from_row,
    transition_to_row,
)

if TYPE_CHECKING:
    from pathlib import Path

SCHEMA_VERSION = 3
_CHUNK = 500  # uids per IN (...) query: well under SQLite's variable limit


@functools.cache
def _encoder() -> Callable[[Any], str]:
    """``json``'s compact encoder, built once, at the first write: ``json`` and ``orjson``
    (which imports ``json``, ``dataclasses`` and ``uuid``) are imported when a store first
    writes or reads, not with the store's class (ADR 0139)."""
    import json

    return json.JSONEncoder(separators=(",", ":")).encode


def _dumps(value: Any) -> str:
    """Compact JSON text (``json``): a status, which a machine computes."""
    return _encoder()(value)


def _dumps_bounded(value: Any) -> str:
    """Compact JSON text of a value within the input bounds (ADR 0073: finite numbers,
    64-bit integers) -- an observation's fields, a transition: ``orjson``, a third of the
    cost of ``json``; ``json`` for anything it refuses. (A status, which a machine computes,
    goes through ``json``: orjson would write a NaN as ``null``.)"""
    import orjson

    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError:
        return _dumps(value)


def _loads(text: str) -> Any:
    """Parse stored JSON text: ``orjson``, or ``json`` for what it refuses (``NaN``, which
    an older writer may have stored)."""
    import orjson

    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        import json

        return json.loads(text)


_log = get_logger("lifecycle.stores")

_SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS lifecycle_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS objects (
    uid TEXT PRIMARY KEY,
    machine TEXT NOT NULL,
    kind TEXT NOT NULL,
    namespace TEXT NOT NULL,
    name TEXT NOT NULL,
    state TEXT NOT NULL,
    version INTEGER NOT NULL,
    status TEXT NOT NULL,
    schema_version INTEGER NOT NULL DEFAULT 1,
    schema_fingerprint TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS objects_by_machine ON objects (machine, state);
CREATE TABLE IF NOT EXISTS journal (
    uid TEXT NOT NULL,
    version INTEGER NOT NULL,
    at TEXT NOT NULL,
    observation TEXT NOT NULL,
    fields TEXT NOT NULL,
    transitions TEXT NOT NULL,
    schema_version INTEGER NOT NULL DEFAULT 1,
    schema_fingerprint TEXT NOT NULL DEFAULT '',
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
    status TEXT NOT NULL,
    schema_version INTEGER NOT NULL DEFAULT 1,
    schema_fingerprint TEXT NOT NULL DEFAULT ''
) WITHOUT ROWID;
"""
    + history.EPOCHS_TABLE
)
#: Schema 3 (ADR 0088): every status, journal entry and snapshot records the version and
#: fingerprint of its machine's schema. Rows written before get version 1 and no fingerprint:
#: the tables as they were then are version 1 by definition.
_SCHEMA_COLUMNS = (
    "schema_version INTEGER NOT NULL DEFAULT 1",
    "schema_fingerprint TEXT NOT NULL DEFAULT ''",
)
_INSERT_OBJECT = (
    "INSERT INTO objects (uid, machine, kind, namespace, name, state, version, status, "
    "schema_version, schema_fingerprint) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_JOURNAL = (
    "INSERT INTO journal (uid, version, at, observation, fields, transitions, schema_version, "
    "schema_fingerprint) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)

#: Group commit (ADR 0026): the compare-and-set of many objects in one statement each.
_NEW_RETURNING = "ON CONFLICT (uid) DO NOTHING RETURNING uid"
_UPDATE_ALL = (
    "WITH v (uid, expected, machine, kind, namespace, name, state, version, status, sv, fp) "
    "AS (VALUES {values}) "
    "UPDATE objects SET state = v.state, version = v.version, status = v.status, "
    "schema_version = v.sv, schema_fingerprint = v.fp FROM v "
    "WHERE objects.uid = v.uid AND objects.version = v.expected AND objects.machine = v.machine "
    "AND objects.kind = v.kind AND objects.namespace = v.namespace AND objects.name = v.name "
    "RETURNING objects.uid"
)

Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]
#: An object's row with its identity, to check it in the same read (``check_identity``).
_LOAD = (
    "SELECT version, status, machine, kind, namespace, name, schema_version, schema_fingerprint "
    "FROM objects WHERE uid = ?"
)


class SQLiteStore:
    """A :class:`~lifecycle.stores.Store` on one SQLite file.

    ``synchronous`` is SQLite's durability setting; the default ``FULL`` makes every commit
    survive power loss, ``NORMAL`` (still safe against a process crash in WAL mode) is faster.
    ``lease_seconds`` is how long a committing process owns delivery of its fresh events
    before another process's :meth:`claim_undelivered` may take them over. ``owner`` names
    this writer: give each replica a stable name (its pod name) and a restarted replica takes
    back the events it leased before a crash at once; the default, a fresh random id, waits
    out the lease (``Runner.redeliver`` then finds them on a later call).

    ``group_commit=True`` lets concurrent callers (threads, or ``AsyncRunner``'s workers)
    share one transaction and one flush (ADR 0026): a ``commit`` returns only once the
    transaction holding its write is committed, a conflict refuses only its own item, and a
    failed ``COMMIT`` fails every caller of that group with a :class:`StoreError`. Reads then
    go through a second connection, so they do not wait for a flush in progress. A lone
    caller commits as without it.

    ``cache=N`` keeps the last committed record of up to ``N`` objects in this handle
    (ADR 0134), so an observation that changes nothing is decided without a read. The cache
    asks SQLite whether another connection committed (``PRAGMA data_version``) and is dropped
    whole if one did: before every batch read (``load_many``: once per ``observe_many`` page),
    and before a single read unless it asked less than a millisecond ago (ADR 0156;
    :meth:`settle_cache` makes the next read ask); a change decided from it is still
    compared-and-set. On by default, up to
    :data:`~lifecycle.stores.DEFAULT_CACHE` objects (ADR 0155); ``cache=0`` turns it off.
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
        group_commit: bool = False,
        cache: int = DEFAULT_CACHE,
    ) -> None:
        if synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ValueError(f"synchronous must be OFF, NORMAL, FULL or EXTRA, not {synchronous!r}")
        if owner is not None and not owner:
            raise ValueError("owner must be a non-empty name (or None for a random one)")
        self.path = str(path)
        if owner is None:
            import uuid  # here: uuid is imported when a store needs a random owner (ADR 0139)

            owner = uuid.uuid4().hex
        self.owner = owner
        self._synchronous = synchronous
        self._lease = lease_seconds
        self._busy_timeout = busy_timeout
        self._clock = clock
        self._keep_journal = journal
        #: the coherent status cache (``cache=N``, ADR 0134), or ``None``
        self.cache: StatusCache | None = StatusCache(cache) if cache else None
        self._version_cursor: sqlite3.Cursor | None = None
        self._lock = threading.RLock()
        #: Commits waiting for, or in, a shared flush (``group_commit=True``), and the
        #: connection reads take meanwhile.
        self._group: _Group | None = _Group() if group_commit else None
        #: Without group commit: delivery marks held for the next commit's transaction (up to
        #: ``_HELD_MARKS``; ADR 0132), so a changed observe is one transaction.
        self._held: list[str] = []
        self._held_lock = threading.Lock()
        #: wakes the thread that writes held marks no commit took within ``_MARK_DELAY``
        self._held_waiting = threading.Event()
        self._marker: threading.Thread | None = None
        #: Times a marker thread could not be started (ADR 0140): marks were then written
        #: by the caller, or by the next commit, claim or close.
        self.marker_refusals = 0
        self._stop_marker = threading.Event()
        self._closing = False
        self._reader: sqlite3.Connection | None = None
        self._read_lock = threading.Lock()
        #: Transactions ``commit`` ran (with group commit, fewer than the commits answered).
        self.flushes = 0
        #: The epoch events are stamped with (ADR 0037): ``""`` until the file is found
        #: replaced by an older copy of itself; event ids then end in ``@TAG``.
        self.epoch = ""
        #: The older copies this handle found at open (logged at error level too).
        self.rewinds: list[HistoryRewind] = []
        #: Every rewind this handle found (``lifecycle_store_rewinds_total``; ADR 0146).
        self.rewind_count = 0
        #: ``unwritten`` (no write yet: the history tag is advanced before the first),
        #: ``written`` (advanced again at close), ``closed`` -- or ``none``: no history file
        self._history = "closed"
        try:
            self._db = sqlite3.connect(
                self.path, timeout=busy_timeout, isolation_level=None, check_same_thread=False
            )
            self._refuse_a_newer_schema()
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(f"PRAGMA synchronous={synchronous}")
            self._db.executescript(_SCHEMA)
            self._add_schema_columns()
            self._db.execute(
                "INSERT INTO lifecycle_meta VALUES ('schema_version', ?) ON CONFLICT (key) "
                "DO UPDATE SET value = excluded.value WHERE CAST(value AS INTEGER) < ?",
                (str(SCHEMA_VERSION), SCHEMA_VERSION),
            )
            with self._transaction() as db:
                self.epoch, rewind = history.begin_session(
                    db, self.path, durable=synchronous != "OFF", owner=self.owner
                )
            if rewind is not None:
                self.rewinds.append(rewind)
                self.rewind_count += 1
            self._history = "unwritten"
            if group_commit:
                self._reader = sqlite3.connect(
                    self.path, timeout=busy_timeout, isolation_level=None, check_same_thread=False
                )
            if self.cache is not None:  # from now on, another connection's commit is seen
                self._cache_coherent(self.cache)
        except sqlite3.Error as e:
            hint = ""
            from pathlib import Path

            if not Path(self.path).parent.exists():
                hint = f" (folder {Path(self.path).parent} does not exist; sqlite:////ABS/PATH)"
            raise StoreError(f"cannot open SQLite store {self.path}: {e}{hint}") from e

    def _refuse_a_newer_schema(self) -> None:
        """Before anything is written (not even the journal mode): a store a newer release
        marked with a schema version this one does not know is refused, as PostgreSQL's is
        (:class:`StoreError`; the CLI exits 2). Its tables may mean what this release cannot
        read, and writing them could break the release that made them."""
        try:
            found = self._db.execute(
                "SELECT value FROM lifecycle_meta WHERE key = 'schema_version'"
            ).fetchone()
        except sqlite3.OperationalError:  # no such table: a new file, or one before schemas
            return
        version = found[0] if found is not None else None
        try:
            number = int(version) if version is not None else None
        except (TypeError, ValueError):
            number = -1
        if number is None or 0 < number <= SCHEMA_VERSION:
            return
        self._db.close()
        if number > SCHEMA_VERSION:
            problem = (
                f"its schema is at version {number}, newer than this release knows "
                f"({SCHEMA_VERSION}); upgrade lifecycle"
            )
        else:
            problem = f"its schema version {preview(version)} is not one this release knows"
        raise StoreError(f"SQLite store {self.path}: {problem} (nothing was written)")

    def _writing(self) -> None:
        """Before this handle's first write (under ``_lock``): a new history tag, in its own
        transaction, so a copy of the file taken before this write is recognised as older
        if it is ever restored (ADR 0037). Once per handle; ``StoreError`` if it fails."""
        if self._history != "unwritten":
            return
        self._advance_history("first write")
        self._history = "written"

    def _advance_history(self, when: str) -> None:
        sidecar = history.sidecar_for(self.path)
        if sidecar is None:
            return
        try:  # on a connection of its own: the store's connection keeps its transactions
            db = sqlite3.connect(self.path, timeout=self._busy_timeout, isolation_level=None)
            try:
                db.execute(f"PRAGMA synchronous={self._synchronous}")
                with _Tx(db):
                    history.advance(db, sidecar, durable=self._synchronous != "OFF")
            finally:
                db.close()
        except (sqlite3.Error, OSError) as e:
            if when == "close":  # best effort: a copy taken meanwhile goes unrecognised
                _log.warning("history tag not advanced at close", store=self.path, error=str(e))
                return
            raise StoreError(
                f"SQLite store {self.path}: cannot advance its history tag ({sidecar}): {e}"
            ) from e

    def _add_schema_columns(self) -> None:
        """Migrate a store of schema 2: add the record-schema columns (ADR 0088), once, in
        one transaction (another process opening it at once waits, then finds them)."""
        tables = ("objects", "journal", "snapshots")
        if all(self._has_schema_columns(t) for t in tables):
            return
        with self._transaction() as db:
            for table in tables:
                if not self._has_schema_columns(table):
                    for column in _SCHEMA_COLUMNS:
                        db.execute(f"ALTER TABLE {table} ADD COLUMN {column}")

    def _has_schema_columns(self, table: str) -> bool:
        names = {row[1] for row in self._db.execute(f"PRAGMA table_info({table})")}
        return "schema_fingerprint" in names

    @property
    def group_commit(self) -> bool:
        """Whether concurrent commits share one transaction and flush (ADR 0026)."""
        return self._group is not None

    @property
    def concurrent_callers(self) -> int:
        """How many callers may usefully wait in this store at once: a thread pool in front
        of it (``ThreadedStore``) sizes itself by this; 1 without group commit."""
        return 64 if self._group is not None else 1

    # -- plumbing -----------------------------------------------------------------------
    def _reading(self) -> tuple[sqlite3.Connection, threading.Lock | threading.RLock]:
        """The connection reads use, and its lock: the reader with group commit (reads do
        not wait for a flush), else the one connection."""
        if self._reader is not None:
            return self._reader, self._read_lock
        return self._db, self._lock

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
        except StoreError:  # (UnknownSchema: a record no upcaster path reads, as it is)
            raise
        except Exception as e:
            raise StoreError(f"SQLite store {self.path}: cannot read the {what}: {e!r}") from e

    # -- the protocol -------------------------------------------------------------------
    def _cache_coherent(self, cache: StatusCache) -> bool:
        """Drop ``cache`` if another connection committed since it was last asked; False
        when that cannot be asked now (a group flush holds the connection): do not use it."""
        lock = self._lock
        if not lock.acquire(blocking=self._group is None):
            return False
        try:
            if self._version_cursor is None:  # one cursor, reused: a fifth of the check's cost
                self._version_cursor = self._db.cursor()
            cursor = self._version_cursor
            cursor.execute("PRAGMA data_version")
            token = cursor.fetchone()[0]
        except sqlite3.Error:
            return False
        finally:
            lock.release()
        cache.observe_token(token)
        return True

    def settle_cache(self, timeout: float = 5.0) -> bool:
        """A barrier (ADR 0156): the next read through the cache asks whether another
        connection committed, however recently it last asked. True (no wait is needed)."""
        if self.cache is not None:
            self.cache.expire()
        return True

    def load(self, machine: Machine[Any], ref: ObjectRef) -> Record | None:
        """The stored record, or ``None``; :class:`~lifecycle.IdentityMismatch` when the
        uid is stored for another object (its identity is read in the same ``SELECT``)."""
        cache = self.cache
        if cache is None or not (cache.current() or self._cache_coherent(cache)):  # ADR 0156
            return self._load(machine, ref)
        record = cache.get(machine, ref)
        if record is None:
            with cache.flight(machine, ref) as flight:
                record = flight.record = self._load(machine, ref)
        return record

    def _load(self, machine: Machine[Any], ref: ObjectRef) -> Record | None:
        db, lock = self._reading()
        with lock:
            try:
                row = db.execute(_LOAD, (ref.uid,)).fetchone()
            except sqlite3.Error as e:
                raise self._fail(f"load of {ref.uid}", e) from e
        if row is None:
            return None
        version, status, m, kind, namespace, name, sv, fp = row
        if m != machine.name or kind != ref.kind or namespace != ref.namespace or name != ref.name:
            check_identity(m, kind, namespace, name, machine.name, ref)
        with self._decoding(f"status of {ref.uid}"):
            return Record(ref, machine.name, load_status(machine, _loads(status), sv, fp), version)

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
        if self.cache is None:
            return self._commit_row(row)
        with self.cache.flight(machine, ref) as flight:
            version = self._commit_row(row)
            flight.record = Record(ref, machine.name, status, version)
        return version

    def _commit_row(self, row: _Row) -> int:
        ref, expected = row.ref, row.expected
        if self._group is not None:
            return self._commit_grouped(self._group, row)
        lease_until = self._clock() + self._lease
        with self._lock:
            self._writing()
            self.flushes += 1
            marks = self._take_held()
            try:
                with self._transaction() as db:
                    self._write(db, row, lease_until)
                    if marks:  # the last deliveries' marks ride with this commit
                        _delete_marked(db, marks)
            except sqlite3.Error as e:
                self._hold(marks)  # rolled back: the next transaction carries them
                raise self._fail(f"commit of {ref.uid} v{expected + 1}", e) from e
            except BaseException:  # a Conflict, an impostor, an interrupt: the same
                self._hold(marks)
                raise
        return expected + 1

    def _take_held(self) -> list[str]:
        with self._held_lock:
            marks, self._held = self._held, []
        return marks

    def _hold(self, marks: list[str]) -> None:
        """Put ``marks`` back for the next transaction (the one that took them did not land),
        and have the marker thread see them."""
        if marks:
            with self._held_lock:
                self._held[:0] = marks
                self._wake_marker()  # no thread: the next commit, claim or close takes them

    # -- group commit (ADR 0026) --------------------------------------------------------
    def _commit_grouped(self, group: _Group, row: _Row) -> int:
        """Queue ``row``. The first caller to find no transaction in progress leads
        (:meth:`_lead`); the others sleep until their write's transaction is over, each on its
        own lock, and are woken one by one with their own outcome -- or, the first of the
        queue, with none: it leads the next transaction."""
        slot = _Slot(row)
        with group.mutex:
            group.queue.append(slot)
            lead = not group.leading
            group.leading = True
        if not lead:
            slot.wake.acquire()  # until answered, or handed the lead
            lead = slot.outcome is None
        if lead:
            self._lead(group)
        outcome = slot.outcome
        if isinstance(outcome, BaseException):
            raise outcome
        assert outcome is not None
        return outcome

    def _lead(self, group: _Group) -> None:
        """As the group's leader: write the whole queue and the waiting delivery marks in one
        transaction (:meth:`_flush`), answer each caller, then hand the lead to the first
        caller queued meanwhile -- or stand down. Marks alone (no commit waiting) are deleted
        by the leader itself."""
        while True:
            # the marks are taken and written under the store's lock: a claim between the two
            # would lease rows already delivered and hand them out again
            with self._lock:
                with group.mutex:
                    batch, group.queue = group.queue, []
                    marks, group.marks = group.marks, []
                    if not batch and not marks:
                        group.leading = False
                        return
                try:
                    if batch:
                        self._flush(batch, marks)
                    else:
                        self._mark_quietly(marks)
                finally:
                    for slot in batch:  # every outcome is set: wake its caller
                        slot.wake.release()
                    with group.mutex:
                        successor = group.queue[0] if group.queue else None
                        again = successor is None and bool(group.marks)  # marks only: do them
                        if successor is None and not again:
                            group.leading = False
            if successor is not None:
                successor.wake.release()  # woken without an outcome: it leads
            if not again:
                return

    def _take_marks(self) -> list[str]:
        """The delivery marks waiting for the next transaction (held ones, and group
        commit's)."""
        marks = self._take_held()
        group = self._group
        if group is None:
            return marks
        with group.mutex:
            more, group.marks = group.marks, []
        return marks + more

    def _flush(self, batch: list[_Slot], marks: list[str]) -> None:
        """Write ``batch`` (and delete the delivered ``marks``) in one transaction, each item
        with its own compare-and-set, and commit once. If the transaction cannot be begun or
        committed, every item of the batch gets a :class:`StoreError`."""
        lease_until = self._clock() + self._lease
        with self._lock:
            try:
                self._writing()
            except StoreError as e:
                for slot in batch:
                    slot.outcome = e
                return
            self.flushes += 1
            try:
                if len(batch) == 1:  # a lone caller: the plain commit
                    self._flush_one(batch[0], marks, lease_until)
                else:
                    self._flush_many(batch, marks, lease_until)
            except sqlite3.Error as e:
                for slot in batch:  # one flush for all: its failure is every caller's
                    what = f"commit of {slot.row.ref.uid} v{slot.row.expected + 1}"
                    if len(batch) > 1:
                        what = f"group commit of {len(batch)} writes ({what})"
                    slot.outcome = self._fail(what, e)
            except BaseException as e:  # never leave a caller waiting for an answer
                with contextlib.suppress(sqlite3.Error):
                    if self._db.in_transaction:
                        self._db.execute("ROLLBACK")
                for slot in batch:
                    if not isinstance(slot.outcome, int):
                        slot.outcome = StoreError(f"group commit interrupted: {e!r}")
                raise

    def _flush_one(self, slot: _Slot, marks: list[str], lease_until: float) -> None:
        try:
            with self._transaction() as db:
                self._write(db, slot.row, lease_until)
                _delete_marked(db, marks)
        except (Conflict, IdentityMismatch) as e:
            slot.outcome = e
            return
        slot.outcome = slot.row.expected + 1

    def _flush_many(self, batch: list[_Slot], marks: list[str], lease_until: float) -> None:
        """As :meth:`commit_many`: every item's compare-and-set, then the journal and outbox
        rows of those that passed in one statement each; if a stray row refuses an insert,
        the transaction is done again with each item in its own savepoint."""
        written: list[_Slot] = []
        try:
            with self._transaction() as db:
                journal: list[tuple[Any, ...]] = []
                outbox: list[tuple[Any, ...]] = []
                passed = self._cas_all(db, [slot.row for slot in batch])
                for slot in batch:
                    try:
                        if passed is None:
                            self._cas(db, slot.row)  # a refused CAS writes nothing
                        elif slot.row.ref.uid not in passed:
                            row = slot.row
                            raise self._conflict(row.machine, row.ref, row.expected)
                    except (Conflict, IdentityMismatch) as e:
                        slot.outcome = e
                        continue
                    written.append(slot)
                    journal.append(self._journal_row(slot.row))
                    outbox.extend(self._outbox_rows(slot.row, lease_until))
                if self._keep_journal and journal:
                    db.executemany(_INSERT_JOURNAL, journal)
                if outbox:
                    db.executemany("INSERT INTO outbox VALUES (?, ?, ?, ?, ?, ?, ?)", outbox)
                _delete_marked(db, marks)
        except sqlite3.IntegrityError:  # a stray row: find the item it belongs to
            written = []
            with self._transaction() as db:
                for slot in batch:
                    slot.outcome = self._item_in_savepoint(db, slot.row, lease_until)
                    if slot.outcome is None:
                        written.append(slot)
                _delete_marked(db, marks)
        for slot in written:  # committed: only now is anyone told
            slot.outcome = slot.row.expected + 1

    def _cas_all(self, db: sqlite3.Connection, rows: list[_Row]) -> set[str] | None:
        """Every row's compare-and-set in a few statements -- an ``INSERT ... ON CONFLICT DO
        NOTHING`` of the new objects and an ``UPDATE ... FROM`` of the stored ones, each
        ``RETURNING`` the uids it wrote, :data:`_CHUNK` rows at a time -- so a group or a
        batch costs a few calls into SQLite, not one per item. ``None`` (nothing written) when
        a uid appears twice: the rows then go one by one, in order."""
        if len({row.ref.uid for row in rows}) != len(rows):
            return None
        passed: set[str] = set()
        new = [row for row in rows if row.expected == 0]
        stored = [row for row in rows if row.expected != 0]
        insert = _INSERT_OBJECT.partition(" VALUES ")[0]
        for start in range(0, len(new), _CHUNK):
            part = new[start : start + _CHUNK]
            params: list[Any] = []
            for row in part:
                ref = row.ref
                params += (ref.uid, row.machine, ref.kind, ref.namespace, ref.name, row.state,
                           1, row.status, row.schema_version, row.fingerprint)  # fmt: skip
            values = ",".join(["(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"] * len(part))
            sql = f"{insert} VALUES {values} {_NEW_RETURNING}"
            passed.update(uid for (uid,) in db.execute(sql, params).fetchall())
        for start in range(0, len(stored), _CHUNK):
            part = stored[start : start + _CHUNK]
            params = []
            for row in part:
                ref = row.ref
                params += (ref.uid, row.expected, row.machine, ref.kind, ref.namespace, ref.name,
                           row.state, row.expected + 1, row.status, row.schema_version,
                           row.fingerprint)  # fmt: skip
            values = ",".join(["(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"] * len(part))
            sql = _UPDATE_ALL.format(values=values)
            passed.update(uid for (uid,) in db.execute(sql, params).fetchall())
        return passed

    def _item_in_savepoint(
        self, db: sqlite3.Connection, row: _Row, lease_until: float
    ) -> BaseException | None:
        """One item of a group in its own savepoint: ``None`` once written, else why not."""
        db.execute("SAVEPOINT item")
        try:
            self._write(db, row, lease_until)
        except (Conflict, IdentityMismatch) as e:
            db.execute("ROLLBACK TO item")
            return e
        except sqlite3.IntegrityError as e:
            db.execute("ROLLBACK TO item")
            return self._fail(f"commit of {row.ref.uid} v{row.expected + 1}", e)
        finally:
            db.execute("RELEASE item")
        return None

    def _encode(
        self,
        machine: Machine[Any],
        ref: ObjectRef,
        expected: int,
        status: Any,
        observation: Observation,
        transitions: Sequence[Transition],
    ) -> _Row:
        _int64("expected version", expected, ref.uid, room=1)
        try:
            status_json = _dumps(machine.dump_status(status))
            fields_json = _dumps_bounded(machine.dump_observation(observation))
            events = [_dumps_bounded(transition_to_row(t)) for t in transitions]
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
            machine.schema.version,
            machine.schema.fingerprint,
        )

    def _write(self, db: sqlite3.Connection, row: _Row, lease_until: float) -> None:
        """The compare-and-set write of one object, inside the caller's transaction."""
        self._cas(db, row)
        if self._keep_journal:
            db.execute(_INSERT_JOURNAL, self._journal_row(row))
        if row.transitions:
            db.executemany(
                "INSERT INTO outbox VALUES (?, ?, ?, ?, ?, ?, ?)",
                self._outbox_rows(row, lease_until),
            )

    def _journal_row(self, row: _Row) -> tuple[Any, ...]:
        obs = row.observation
        events = "[" + ",".join(row.events) + "]"
        return (row.ref.uid, row.expected + 1, obs.at.isoformat(), obs.name(), row.fields, events,
                row.schema_version, row.fingerprint)  # fmt: skip

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
                    _INSERT_OBJECT,
                    (
                        ref.uid,
                        row.machine,
                        ref.kind,
                        ref.namespace,
                        ref.name,
                        row.state,
                        version,
                        row.status,
                        row.schema_version,
                        row.fingerprint,
                    ),
                )
            except sqlite3.IntegrityError:
                raise self._conflict(row.machine, ref, expected) from None
        else:
            # the identity is part of the compare-and-set: a row stored for another object
            # is not updated, and _conflict says which it was
            cur = db.execute(
                "UPDATE objects SET state = ?, version = ?, status = ?, schema_version = ?, "
                "schema_fingerprint = ? WHERE uid = ? "
                "AND version = ? AND machine = ? AND kind = ? AND namespace = ? AND name = ?",
                (
                    row.state,
                    version,
                    row.status,
                    row.schema_version,
                    row.fingerprint,
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
        """Each object's record (or ``None``), read in one consistent snapshot (with a status
        cache: the cached ones as a ``load`` would answer, the rest read together). An item whose
        uid is stored for another object refuses the whole read with
        :class:`~lifecycle.IdentityMismatch` (see :class:`~lifecycle.stores.BatchStore`)."""
        cache = self.cache
        if cache is None or not self._cache_coherent(cache):
            return self._load_many(items)
        with cache.reads(items) as batch:
            if batch.missing:
                batch.read(self._load_many(batch.missing))
        return batch.records

    def _load_many(self, items: Sequence[tuple[Machine[Any], ObjectRef]]) -> list[Record | None]:
        uids = list(dict.fromkeys(ref.uid for _, ref in items))
        found: dict[str, tuple[Any, ...]] = {}
        db, lock = self._reading()
        with lock:
            try:
                for start in range(0, len(uids), _CHUNK):
                    chunk = uids[start : start + _CHUNK]
                    marks = ",".join("?" * len(chunk))
                    for uid, *row in db.execute(
                        "SELECT uid, version, status, machine, kind, namespace, name, "
                        f"schema_version, schema_fingerprint FROM objects WHERE uid IN ({marks})",
                        chunk,
                    ):
                        found[uid] = tuple(row)
            except sqlite3.Error as e:
                raise self._fail(f"load of {len(uids)} objects", e) from e
        for machine, ref in items:  # the whole read is refused if one item is an impostor
            row = found.get(ref.uid)
            if row is not None and row[2:6] != (machine.name, ref.kind, ref.namespace, ref.name):
                check_identity(row[2], row[3], row[4], row[5], machine.name, ref)
        out: list[Record | None] = []
        for machine, ref in items:
            row = found.get(ref.uid)
            if row is None:
                out.append(None)
                continue
            with self._decoding(f"status of {ref.uid}"):
                status = load_status(machine, _loads(row[1]), row[6], row[7])
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
        if self.cache is None:
            return self._commit_many(items)
        with self.cache.commits(items) as batch:
            batch.results = self._commit_many(items)
        return batch.results

    def _commit_many(self, items: Sequence[CommitItem]) -> list[int | StoreError]:
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
            if any(not isinstance(row, StoreError) for row in rows):
                self._writing()
            try:
                with self._transaction() as db:
                    journal: list[tuple[Any, ...]] = []
                    outbox: list[tuple[Any, ...]] = []
                    valid = [row for row in rows if not isinstance(row, StoreError)]
                    passed = self._cas_all(db, valid)  # every CAS in one or two statements
                    for row in rows:
                        if isinstance(row, StoreError):
                            out.append(row)
                            continue
                        try:
                            if passed is None:
                                self._cas(db, row)
                            elif row.ref.uid not in passed:
                                raise self._conflict(row.machine, row.ref, row.expected)
                        except Conflict as e:
                            out.append(e)
                            continue
                        out.append(row.expected + 1)
                        journal.append(self._journal_row(row))
                        outbox.extend(self._outbox_rows(row, lease_until))
                    # the object rows are set one by one (each its own CAS); the journal
                    # entries and the outbox rows of those that passed go in two statements
                    if self._keep_journal and journal:
                        db.executemany(_INSERT_JOURNAL, journal)
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
                    "SELECT version, at, observation, fields, transitions, schema_version, "
                    "schema_fingerprint FROM journal WHERE uid = ? ORDER BY version",
                    (ref.uid,),
                ).fetchall()
            except sqlite3.Error as e:
                raise self._fail(f"journal of {ref.uid}", e) from e
        with self._decoding(f"journal of {ref.uid}"):
            return [
                JournalEntry(
                    version,
                    load_observation(machine, name, at, _loads(fields), sv, fp),
                    tuple(transition_from_row(t) for t in _loads(events)),
                )
                for version, at, name, fields, events, sv, fp in rows
            ]

    def records(self, machine: Machine[Any]) -> Iterator[Record]:
        with self._lock:
            try:
                rows = self._db.execute(
                    "SELECT kind, namespace, name, uid, version, status, schema_version, "
                    "schema_fingerprint FROM objects WHERE machine = ? ORDER BY uid",
                    (machine.name,),
                ).fetchall()
            except sqlite3.Error as e:
                raise self._fail("scan", e) from e
        for kind, namespace, name, uid, version, status, sv, fp in rows:
            ref = ObjectRef(kind, namespace, name, uid)
            with self._decoding(f"status of {uid}"):
                loaded = load_status(machine, _loads(status), sv, fp)
            yield Record(ref, machine.name, loaded, version)

    # -- retention (RetentionStore) -----------------------------------------------------
    def snapshot(self, machine: Machine[Any], ref: ObjectRef) -> Snapshot | None:
        with self._lock:
            try:
                self._identity(machine, ref)
                row = self._db.execute(
                    "SELECT version, status, schema_version, schema_fingerprint FROM snapshots "
                    "WHERE uid = ?",
                    (ref.uid,),
                ).fetchone()
            except sqlite3.Error as e:
                raise self._fail(f"snapshot of {ref.uid}", e) from e
        if row is None:
            return None
        with self._decoding(f"snapshot of {ref.uid}"):
            return Snapshot(row[0], load_status(machine, _loads(row[1]), row[2], row[3]))

    def compact(
        self, machine: Machine[Any], *, keep: int = 0, refs: Iterable[ObjectRef] | None = None
    ) -> int:
        """Drop all but the last ``keep`` journal entries of each object behind a snapshot,
        one transaction per object; an object whose journal does not fold to its status is
        left as it is (and logged). Returns how many entries were dropped."""
        _int64("keep", keep)
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
        schema = machine.schema
        self._db.execute(
            "INSERT INTO snapshots (uid, version, status, schema_version, schema_fingerprint) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT (uid) DO UPDATE SET version = excluded.version, "
            "status = excluded.status, schema_version = excluded.schema_version, "
            "schema_fingerprint = excluded.schema_fingerprint",
            (ref.uid, snapshot.version, status_json, schema.version, schema.fingerprint),
        )
        cur = self._db.execute(
            "DELETE FROM journal WHERE uid = ? AND version <= ?", (ref.uid, snapshot.version)
        )
        return cur.rowcount

    # -- schema versions (SchemaStore, ADR 0088) -------------------------------------------
    def schema_versions(self) -> list[SchemaCount]:
        """Per machine, kind of record, version and fingerprint: how many, one example uid
        (one aggregate read)."""
        with self._lock:
            try:
                rows = self._db.execute(_SCHEMA_VERSIONS).fetchall()
            except sqlite3.Error as e:
                raise self._fail("schema report", e) from e
        return merge_counts(rows)

    def upgrade(self, machine: Machine[Any], *, batch: int = 500) -> UpgradeReport:
        """Rewrite ``machine``'s statuses, journal entries and snapshots below its schema
        version, ``batch`` rows per transaction (see :class:`~lifecycle.stores.SchemaStore`).
        Rows are read and upcast outside the write transaction; each is then set only if its
        version and schema are still what was read, so a concurrent commit wins."""
        check_batch(batch)
        _int64("batch", batch)
        schema = machine.schema
        now = (schema.version, schema.fingerprint)
        name = machine.name

        def status(row: tuple[Any, ...]) -> tuple[Any, ...]:
            uid, version, data, sv, fp = row
            state, new = upgraded_status(machine, _loads(data), sv, fp)
            return (state, _dumps(new), *now, uid, version, sv, fp)

        def entry(row: tuple[Any, ...]) -> tuple[Any, ...]:
            uid, version, at, obs, fields, sv, fp = row
            obs, new = upgraded_observation(machine, obs, at, _loads(fields), sv, fp)
            return (obs, _dumps(new), *now, uid, version, sv, fp)

        def snapshot(row: tuple[Any, ...]) -> tuple[Any, ...]:
            uid, version, data, sv, fp = row
            _, new = upgraded_status(machine, _loads(data), sv, fp)
            return (_dumps(new), *now, uid, version, sv, fp)

        done = [
            self._upgrade_rows(name, schema.version, batch, select, update, convert)
            for select, update, convert in (
                (_OLD_STATUSES, _UPGRADE_STATUS, status),
                (_OLD_ENTRIES, _UPGRADE_ENTRY, entry),
                (_OLD_SNAPSHOTS, _UPGRADE_SNAPSHOT, snapshot),
            )
        ]
        skipped = sum(n for _, n in done)
        return UpgradeReport(name, done[0][0], done[1][0], done[2][0], skipped)

    def _upgrade_rows(
        self,
        machine: str,
        version: int,
        batch: int,
        select: str,
        update: str,
        convert: Callable[[tuple[Any, ...]], tuple[Any, ...]],
    ) -> tuple[int, int]:
        """One kind of row, in batches: (rewritten, skipped)."""
        written = skipped = 0
        after: tuple[str, int] = ("", -1)
        while True:
            with self._lock:
                try:
                    rows = self._db.execute(select, (machine, version, *after, batch)).fetchall()
                except sqlite3.Error as e:
                    raise self._fail("upgrade scan", e) from e
            if not rows:
                return written, skipped
            after = (rows[-1][0], rows[-1][1])
            updates = [_upgraded(convert, row) for row in rows]
            with self._lock:
                try:
                    with self._transaction() as db:
                        for params in updates:
                            n = db.execute(update, params).rowcount
                            written += n
                            skipped += 1 - n
                except sqlite3.Error as e:
                    raise self._fail("upgrade", e) from e

    def claim_undelivered(self, limit: int = 1000) -> list[Transition]:
        """Lease up to ``limit`` undelivered events: this store's own, and expired leases."""
        _int64("limit", limit)
        now = self._clock()
        with self._lock:
            marks = self._take_marks()  # a delivered event is never claimed again
            try:
                with self._transaction() as db:
                    _delete_marked(db, marks)
                    rows = db.execute(
                        "UPDATE outbox SET claimed_by = ?, claimed_until = ? WHERE id IN ("
                        " SELECT id FROM outbox WHERE claimed_by = ? OR claimed_by IS NULL"
                        " OR claimed_until < ? ORDER BY uid, version, n LIMIT ?)"
                        " RETURNING payload",
                        (self.owner, now + self._lease, self.owner, now, limit),
                    ).fetchall()
            except sqlite3.Error as e:
                self._hold(marks)  # rolled back: the next transaction carries them
                raise self._fail("outbox claim", e) from e
        with self._decoding("outbox"):
            found = [transition_from_row(_loads(p)) for (p,) in rows]
        found.sort(key=lambda t: (t.ref.uid, t.version, t.n))
        return found

    def mark_delivered(self, ids: Iterable[str]) -> None:
        """Delete delivered rows. The mark need not be durable (lost in a crash, an event is
        delivered again under its id): it rides with the next commit's transaction (ADR
        0132), or -- once ``_HELD_MARKS`` wait, and at a claim or close -- is written in its
        own at ``synchronous=NORMAL``; with group commit, marks share transactions too: a
        mark made while one is in progress is carried by the next (ADR 0026)."""
        done = [str(i) for i in ids]
        if not done:
            return
        group = self._group
        if group is None:
            with self._held_lock:
                first = not self._held
                self._held.extend(done)
                if len(self._held) < _HELD_MARKS and (not first or self._wake_marker()):
                    return
                # a full batch, or no marker thread to write them later: written now
                done, self._held = self._held, []
            self._mark_now(done)
            return
        with group.mutex:
            group.marks.extend(done)
            if group.leading:  # a transaction is in progress: the next one carries them
                return
            group.leading = True  # else lead one, for every mark (and commit) waiting
        self._lead(group)

    def _mark_now(self, ids: list[str]) -> None:
        """Delete delivered rows in their own transaction, at ``synchronous=NORMAL``."""
        with self._lock:
            try:
                if self._synchronous in ("FULL", "EXTRA"):
                    self._db.execute("PRAGMA synchronous=NORMAL")
                try:
                    with self._transaction() as db:
                        _delete_marked(db, ids)
                finally:
                    if self._synchronous in ("FULL", "EXTRA"):
                        self._db.execute(f"PRAGMA synchronous={self._synchronous}")
            except sqlite3.Error as e:
                raise self._fail("outbox mark", e) from e

    def _mark_quietly(self, ids: list[str]) -> None:
        """:meth:`_mark_now` for marks whose callers have returned: a failure is logged (the
        events are delivered again, under their ids, as after a crash)."""
        try:
            self._mark_now(ids)
        except StoreError as e:
            _log.warning("delivery marks lost; the events will be redelivered", error=str(e))

    def undelivered_count(self) -> int:
        self._write_marks()
        with self._lock:
            (n,) = self._db.execute("SELECT count(*) FROM outbox").fetchone()
        return int(n)

    def undelivered_marks_held(self) -> int:
        """Delivery marks held for the next commit (or the marker thread): their rows are
        delivered, and still in the outbox table for a moment (ADR 0132)."""
        with self._held_lock:
            return len(self._held)

    def _wake_marker(self) -> bool:
        """Have held marks written within the mark delay if no commit takes them first:
        other stores on the file then never claim a delivered row (they wait out its lease,
        far longer). One thread per store, started with the first held mark (under
        ``_held_lock``); it ends when idle for ``_MARKER_IDLE`` seconds and holds the store
        only weakly, so a store nobody closes is still collected. ``False``: no thread could
        be started (ADR 0140; logged once per store), so the caller writes the marks itself
        or leaves them to the next commit, claim or close -- the next wake tries again."""
        if self._marker is None and not self._closing:
            marker = threading.Thread(
                target=_write_held_marks,
                args=(
                    weakref.ref(self),
                    self._held_waiting,
                    self._stop_marker,
                    min(_MARK_DELAY, self._lease / 10),
                ),
                name="lifecycle-sqlite-marks",
                daemon=True,
            )
            told = self.marker_refusals > 0
            if not threads.start(marker, _NO_MARKER, log=not told):
                self.marker_refusals += 1
                return False
            self._marker = marker  # only a started thread: close joins it
        self._held_waiting.set()
        return True

    def _marker_idle(self) -> bool:
        """The marker thread found nothing to do for ``_MARKER_IDLE`` seconds: it ends (and
        the next held mark starts another) unless a wake came meanwhile."""
        with self._held_lock:
            if self._held_waiting.is_set() or self._marker is not threading.current_thread():
                return False
            self._marker = None
            return True

    def flush_marks(self) -> None:
        """Write the delivery marks still held (ADR 0132) now: a process may exit right after
        (a runner's ``close`` calls it, ADR 0135). A failure is logged: the events repeat."""
        self._write_marks()

    def _marks_due(self) -> bool:
        """The marker thread's turn: write what is held (``False``: the store is closing)."""
        if self._closing:
            return False
        self._write_marks()  # a failure is logged: the events repeat, under their ids
        return True

    def _write_marks(self) -> None:
        """Write the marks still held (before a count of what is undelivered, and on the
        marker thread's turn)."""
        with self._lock:  # taken and written as one: a claim never sees them taken, unwritten
            marks = self._take_marks()
            if marks:
                self._mark_quietly(marks)

    def outbox_summary(self) -> OutboxSummary:
        """How many outbox rows wait, and when the oldest was observed (``db status``).
        Marks still held (ADR 0132) are written first, so they are not counted."""
        self._write_marks()
        with self._lock:
            try:
                row = self._db.execute(OUTBOX_SUMMARY).fetchone()
            except sqlite3.Error as e:
                raise self._fail("outbox summary", e) from e
        return outbox_summary_of(row)

    def history(self) -> SQLiteHistory:
        """The epochs this database started, each when it was found to be an older copy of
        itself (``lifecycle db check``; ADR 0037)."""
        with self._lock:
            try:
                return SQLiteHistory(self.path, history.epochs(self._db))
            except sqlite3.Error as e:
                raise self._fail("history", e) from e

    def record_limit(self, kind: str) -> int | None:
        """No bound a machine's declared limits reach (ADR 0144): a record is one TEXT value,
        which SQLite holds up to 1 GB (``SQLITE_MAX_LENGTH``)."""
        return None

    def close(self) -> None:
        """Close the store: a new history tag ends this session (so a copy of the file taken
        while it was open is recognised as older if it is ever restored; ADR 0037)."""
        self._closing = True
        self._stop_marker.set()
        self._held_waiting.set()
        marker = self._marker
        if marker is not None:  # a write it started finishes before the connection closes
            marker.join(timeout=10)
        self._write_marks()
        with self._lock:
            if self._history == "written":
                self._advance_history("close")
            self._history = "closed"
            self._db.close()
        if self._reader is not None:
            with self._read_lock:
                self._reader.close()


#: Delivery marks a store without group commit holds for the next commit before it writes
#: them in a transaction of their own (a crash loses at most these: their events repeat).
_HELD_MARKS = 256
#: Seconds a held mark waits for a commit to carry it before it is written on its own (well
#: inside any lease, so no other store claims a delivered row).
_MARK_DELAY = 0.2
#: Seconds the marker thread waits for a mark before it ends (the next mark starts another).
_MARKER_IDLE = 30.0
#: What a store without its marker thread does instead (the log line of ADR 0140).
_NO_MARKER = (
    "SQLite delivery marks are written by the caller, or by the next commit, claim or close"
)


def _write_held_marks(
    store: Callable[[], SQLiteStore | None],
    waiting: threading.Event,
    stop: threading.Event,
    delay: float,
) -> None:
    """The marker thread: after each wake, wait ``delay`` for a commit to take the held marks,
    then write what is left; ends at once when the store closes (``stop``; its close writes
    what is held) or is collected, and after ``_MARKER_IDLE`` seconds without a wake."""
    while not stop.is_set():
        if not waiting.wait(timeout=_MARKER_IDLE):
            found = store()
            if found is None or found._marker_idle():
                return
            del found
            continue
        waiting.clear()
        if stop.wait(delay):
            return
        found = store()
        if found is None or not found._marks_due():
            return
        del found


#: What waits in the outbox: how many rows, and the oldest one's observation time (the
#: transition's ``at``; the SQLite outbox records no commit time).
OUTBOX_SUMMARY = "SELECT count(*), min(json_extract(payload, '$.at')) FROM outbox"


def outbox_summary_of(row: Any) -> OutboxSummary:
    """The :class:`OutboxSummary` of an :data:`OUTBOX_SUMMARY` row."""
    if row is None:
        return OutboxSummary(0, None)
    count, oldest = row
    at = None
    if isinstance(oldest, str):
        with contextlib.suppress(ValueError):
            at = datetime.fromisoformat(oldest)
    return OutboxSummary(int(count), at)


def _int64(what: str, value: int, uid: str | None = None, *, room: int = 0) -> None:
    """Refuse an integer SQLite cannot store (a signed 64-bit column; ``room``: how much is
    added to it before it is stored) with a :class:`StoreError`, before anything is written
    -- sqlite3 would raise a bare ``OverflowError``."""
    if type(value) is not int:
        if isinstance(value, int):  # bool, an int subclass
            return
        raise StoreError(f"{what} must be an int, got {preview(value)}")
    if not INT_MIN <= value <= INT_MAX - room:
        where = f" of {uid}" if uid is not None else ""
        raise StoreError(f"{what}{where} is beyond a 64-bit integer: {preview(value)}")


def _delete_marked(db: sqlite3.Connection, ids: list[str]) -> None:
    """Delete the outbox rows of delivered events, inside the caller's transaction."""
    if ids:
        db.executemany("DELETE FROM outbox WHERE id = ?", [(i,) for i in ids])


def _upgraded(
    convert: Callable[[tuple[Any, ...]], tuple[Any, ...]], row: tuple[Any, ...]
) -> tuple[Any, ...]:
    """A row's upgrade parameters; an upcaster that fails or yields a record the machine
    refuses stops the upgrade there (this batch unwritten) with a :class:`StoreError`."""
    try:
        return convert(row)
    except StoreError:
        raise
    except Exception as e:
        raise StoreError(f"upgrade of {row[0]} v{row[1]} failed: {e!r}") from e


# One aggregate read: per machine, kind, version and fingerprint, the count and one uid.
_SCHEMA_VERSIONS = """
SELECT machine, 'status', schema_version, schema_fingerprint, count(*), min(uid)
FROM objects GROUP BY machine, schema_version, schema_fingerprint
UNION ALL
SELECT o.machine, 'journal', j.schema_version, j.schema_fingerprint, count(*), min(j.uid)
FROM journal j JOIN objects o ON o.uid = j.uid
GROUP BY o.machine, j.schema_version, j.schema_fingerprint
UNION ALL
SELECT o.machine, 'snapshot', s.schema_version, s.schema_fingerprint, count(*), min(s.uid)
FROM snapshots s JOIN objects o ON o.uid = s.uid
GROUP BY o.machine, s.schema_version, s.schema_fingerprint
"""
# What ``upgrade`` reads, a batch at a time after a (uid, version) key, and how it writes
# back: compare-and-set on the version and schema that were read.
_OLD_STATUSES = (
    "SELECT uid, version, status, schema_version, schema_fingerprint FROM objects "
    "WHERE machine = ? AND schema_version < ? AND (uid, version) > (?, ?) ORDER BY uid LIMIT ?"
)
_UPGRADE_STATUS = (
    "UPDATE objects SET state = ?, status = ?, schema_version = ?, schema_fingerprint = ? "
    "WHERE uid = ? AND version = ? AND schema_version = ? AND schema_fingerprint = ?"
)
_OLD_ENTRIES = (
    "SELECT j.uid, j.version, j.at, j.observation, j.fields, j.schema_version, "
    "j.schema_fingerprint FROM journal j JOIN objects o ON o.uid = j.uid "
    "WHERE o.machine = ? AND j.schema_version < ? AND (j.uid, j.version) > (?, ?) "
    "ORDER BY j.uid, j.version LIMIT ?"
)
_UPGRADE_ENTRY = (
    "UPDATE journal SET observation = ?, fields = ?, schema_version = ?, schema_fingerprint = ? "
    "WHERE uid = ? AND version = ? AND schema_version = ? AND schema_fingerprint = ?"
)
_OLD_SNAPSHOTS = (
    "SELECT s.uid, s.version, s.status, s.schema_version, s.schema_fingerprint "
    "FROM snapshots s JOIN objects o ON o.uid = s.uid "
    "WHERE o.machine = ? AND s.schema_version < ? AND (s.uid, s.version) > (?, ?) "
    "ORDER BY s.uid LIMIT ?"
)
_UPGRADE_SNAPSHOT = (
    "UPDATE snapshots SET status = ?, schema_version = ?, schema_fingerprint = ? "
    "WHERE uid = ? AND version = ? AND schema_version = ? AND schema_fingerprint = ?"
)


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
    schema_version: int
    fingerprint: str


class _Slot:
    """One caller's write in a group commit: its answer once its transaction is over (the
    new version or the exception to raise), and the lock its caller sleeps on meanwhile."""

    __slots__ = ("outcome", "row", "wake")

    def __init__(self, row: _Row) -> None:
        self.row = row
        self.outcome: int | BaseException | None = None
        self.wake = threading.Lock()
        self.wake.acquire()


class _Group:
    """The queue of a group commit: writes and delivery marks waiting for the next
    transaction, and whether a caller leads one (``mutex`` guards the three)."""

    __slots__ = ("leading", "marks", "mutex", "queue")

    def __init__(self) -> None:
        self.mutex = threading.Lock()
        self.queue: list[_Slot] = []
        #: outbox ids marked delivered, for the next transaction to delete
        self.marks: list[str] = []
        self.leading = False


class _Tx:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``, or ``ROLLBACK`` on any exception (a ``COMMIT``
    that fails is rolled back too, so the connection is never left inside a transaction)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> sqlite3.Connection:
        self._db.execute("BEGIN IMMEDIATE")
        return self._db

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            try:
                self._db.execute("COMMIT")
            except BaseException:  # a failed COMMIT leaves the transaction open: end it
                with contextlib.suppress(sqlite3.Error):
                    self._db.execute("ROLLBACK")
                raise
        else:
            self._db.execute("ROLLBACK")
