"""The embedded default store: one SQLite file in WAL mode.

One ``BEGIN IMMEDIATE`` transaction writes the status (compare-and-set on ``version``), the
journal entry and the outbox rows. Several processes may share the file: SQLite serialises
their writers, the CAS turns a lost race into :class:`~lifecycle.Conflict`, and outbox rows
are leased so a crashed process's events are redelivered, under the same ids, by another.

With ``group_commit=True`` (ADR 0026) concurrent ``commit`` calls share one transaction and one
flush: each caller's write is queued, one of them (the leader) writes the whole queue, each
item in its own savepoint with its own compare-and-set, commits once, and only then answers
every caller with its own result.

Where things are, for a reader of the source (ADR 0153): :class:`SQLiteStore`, in this file,
is the coordinator -- it owns the connections and their lock, the handle's history tag, the
status cache and its coherence check, and answers the protocol. Its parts sit in the files
beside this one, each named for what it owns: ``_sqlite_write.py``, what one commit writes
and the transaction (values as JSON and 64-bit integers: ``_sqlite_codec.py``);
``_sqlite_group.py``, group commit's queue, leader and flush; ``_sqlite_marks.py``, the
delivery marks held for the next commit and their marker thread; ``_sqlite_journal.py``, the
journal read back, snapshots and compaction; ``_sqlite_schema.py``, the tables and their
migration at open; ``_sqlite_upgrade.py``, record schema reports and upgrades;
``_sqlite_history.py``, epochs across a restored copy.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from .._core.errors import Conflict, StoreError
from .._core.machine import Machine
from .._core.observation import Observation
from .._core.refs import ObjectRef
from .._core.schema import SchemaCount, load_status
from .._core.transition import Transition
from .._log import get_logger
from . import _sqlite_find
from . import _sqlite_history as history
from ._cache import DEFAULT_CACHE, StatusCache
from ._sqlite_codec import int64, loads
from ._sqlite_group import GroupCommit
from ._sqlite_history import HistoryRewind, SQLiteHistory
from ._sqlite_marks import MARK_DELAY as _MARK_DELAY
from ._sqlite_marks import MARKER_IDLE as _MARKER_IDLE
from ._sqlite_marks import OUTBOX_SUMMARY as OUTBOX_SUMMARY
from ._sqlite_marks import HeldMarks, delete_marked
from ._sqlite_marks import outbox_summary_of as outbox_summary_of
from ._sqlite_schema import SCHEMA_VERSION as SCHEMA_VERSION
from ._sqlite_schema import prepare
from ._sqlite_write import CHUNK, INSERT_JOURNAL, LOAD, Row, Tx, Writer, encode
from .base import (
    BatchStore,
    CommitItem,
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
    check_identity,
    check_query,
    epoch_time,
    transition_from_row,
)

if TYPE_CHECKING:
    from pathlib import Path

_log = get_logger("lifecycle.stores")

Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]


class SQLiteStore(Store, BatchStore, RetentionStore, SchemaStore, FindStore):
    """A :class:`~lifecycle.stores.Store` on one SQLite file. Its methods are the protocols'
    it names as bases, where they add nothing to say.

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
    whole if one did: before every single read and before every batch read (``load_many``:
    once per ``observe_many`` page; ADR 0156), so a read never lags a commit another handle
    made before it; a change decided from it is still compared-and-set. On by default, up to
    :data:`~lifecycle.stores.DEFAULT_CACHE` objects (ADR 0155); ``cache=0`` turns it off.

    Args:
        path: the database file, created if missing (its folder must exist).
        synchronous: SQLite's ``PRAGMA synchronous``; ``FULL`` survives power loss,
            ``NORMAL`` only a process crash, and is faster.
        lease_seconds: how long this writer owns delivery of its fresh events before another
            process may claim them: long enough that a live writer is not overtaken.
        busy_timeout: seconds a writer waits for another process's transaction on the file
            before :class:`~lifecycle.StoreError`.
        journal: keep each object's journal; ``False`` keeps records and the outbox only.
        clock: epoch seconds, for leases and the time an object entered its state (a test
            passes a fake one).
        owner: this writer's stable name (its pod name), so a restarted replica takes back
            its own leased events at once; default a random id.
        group_commit: let concurrent callers share one transaction and one flush (ADR 0026).
        cache: how many objects' last committed records this handle keeps, so an unchanged
            observation needs no read; 0 turns the cache off (ADR 0134).

    Raises:
        ValueError: an unknown ``synchronous`` or an empty ``owner``.
        StoreError: the file cannot be opened or prepared.
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
        #: what each commit writes, inside a transaction this store holds (``_sqlite_write``)
        self._writer = Writer(owner, journal)
        #: the coherent status cache (``cache=N``, ADR 0134), or ``None``
        self.cache: StatusCache | None = StatusCache(cache) if cache else None
        self._version_cursor: sqlite3.Cursor | None = None
        self._lock = threading.RLock()
        #: Commits waiting for, or in, a shared flush (``group_commit=True``), and the
        #: connection reads take meanwhile.
        self._group: GroupCommit | None = GroupCommit() if group_commit else None
        #: Without group commit: delivery marks held for the next commit's transaction (up to
        #: ``HELD_MARKS``; ADR 0132), so a changed observe is one transaction, and the marker
        #: thread that writes those no commit took within the mark delay (``_sqlite_marks``).
        #: (The delay and the idle time are read here: a test may shorten them.)
        self._marks = HeldMarks(
            min(_MARK_DELAY, lease_seconds / 10), _MARKER_IDLE, weakref.WeakMethod(self._marks_due)
        )
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
            prepare(self._db, self.path, synchronous)
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
                with Tx(db):
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

    @property
    def group_commit(self) -> bool:
        """Whether concurrent commits share one transaction and flush (ADR 0026)."""
        return self._group is not None

    @property
    def concurrent_callers(self) -> int:
        """How many callers may usefully wait in this store at once: a thread pool in front
        of it (``ThreadedStore``) sizes itself by this; 1 without group commit."""
        return 64 if self._group is not None else 1

    @property
    def marker_refusals(self) -> int:
        """Times a marker thread could not be started (ADR 0140): marks were then written
        by the caller, or by the next commit, claim or close."""
        return self._marks.refusals

    @property
    def _marker(self) -> threading.Thread | None:
        """The thread that writes held marks no commit took, while one runs."""
        return self._marks.marker

    # -- plumbing -----------------------------------------------------------------------
    def _reading(self) -> tuple[sqlite3.Connection, threading.Lock | threading.RLock]:
        """The connection reads use, and its lock: the reader with group commit (reads do
        not wait for a flush), else the one connection."""
        if self._reader is not None:
            return self._reader, self._read_lock
        return self._db, self._lock

    def _transaction(self) -> Tx:
        return Tx(self._db)

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
        """A barrier (ADR 0156), as on the PostgreSQL stores: here every read already asks
        whether another connection committed, so nothing waits. True.

        Args:
            timeout: unused here (no wait is needed); the parameter matches the stores that do
                wait.

        Returns:
            ``True``.
        """
        return True

    def load(self, machine: Machine[Any], ref: ObjectRef) -> Record | None:
        # CommitStore.load; the identity is read in the same SELECT as the record
        cache = self.cache
        if cache is None or not self._cache_coherent(cache):  # every read asks (ADR 0156)
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
                row = db.execute(LOAD, (ref.uid,)).fetchone()
            except sqlite3.Error as e:
                raise self._fail(f"load of {ref.uid}", e) from e
        if row is None:
            return None
        version, status, m, kind, namespace, name, sv, fp = row
        if m != machine.name or kind != ref.kind or namespace != ref.namespace or name != ref.name:
            check_identity(m, kind, namespace, name, machine.name, ref)
        with self._decoding(f"status of {ref.uid}"):
            return Record(ref, machine.name, load_status(machine, loads(status), sv, fp), version)

    def commit(
        self,
        machine: Machine[Any],
        ref: ObjectRef,
        expected: int,
        status: Any,
        observation: Observation,
        transitions: Sequence[Transition],
    ) -> int:
        row = encode(machine, ref, expected, status, observation, transitions)
        if self.cache is None:
            return self._commit_row(row)
        with self.cache.flight(machine, ref) as flight:
            version = self._commit_row(row)
            flight.record = Record(ref, machine.name, status, version)
        return version

    def _commit_row(self, row: Row) -> int:
        ref, expected = row.ref, row.expected
        if self._group is not None:
            return self._group.commit(self, row)
        lease_until = self._clock() + self._lease
        with self._lock:
            self._writing()
            self.flushes += 1
            marks = self._marks.take()
            try:
                with self._transaction() as db:
                    self._writer.write(db, row, lease_until)
                    if marks:  # the last deliveries' marks ride with this commit
                        delete_marked(db, marks)
            except sqlite3.Error as e:
                self._hold(marks)  # rolled back: the next transaction carries them
                raise self._fail(f"commit of {ref.uid} v{expected + 1}", e) from e
            except BaseException:  # a Conflict, an impostor, an interrupt: the same
                self._hold(marks)
                raise
        return expected + 1

    def _hold(self, marks: list[str]) -> None:
        """Put ``marks`` back for the next transaction (the one that took them did not land),
        and have the marker thread see them."""
        self._marks.hold(marks)

    # -- batches (BatchStore) -----------------------------------------------------------
    def load_many(self, items: Sequence[tuple[Machine[Any], ObjectRef]]) -> list[Record | None]:
        # BatchStore.load_many: one consistent snapshot (with a status cache: the cached
        # ones as a load would answer, the rest read together)
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
                for start in range(0, len(uids), CHUNK):
                    chunk = uids[start : start + CHUNK]
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
                status = load_status(machine, loads(row[1]), row[6], row[7])
            out.append(Record(ref, machine.name, status, row[0]))
        return out

    def commit_many(self, items: Sequence[CommitItem]) -> list[int | StoreError]:
        """Commit each item with its own compare-and-set, all in one transaction.

        A conflicting item is reported (and writes nothing); the others commit. If the
        transaction itself fails on an item's row (a stray journal or outbox row), it is
        rolled back and done again with each item in its own savepoint, so only that item is
        refused. An item whose uid is stored for another object refuses the whole batch with
        :class:`~lifecycle.IdentityMismatch`: the transaction is rolled back, nothing written.

        Args:
            items: the writes; items of one object are applied in order.

        Returns:
            Per item, the new version, or the :class:`~lifecycle.Conflict` or
            :class:`~lifecycle.StoreError` that refused it.

        Raises:
            IdentityMismatch: an item's uid is stored for another object; nothing written.
            StoreError: the transaction as a whole failed; nothing of it was written.
        """
        if self.cache is None:
            return self._commit_many(items)
        with self.cache.commits(items) as batch:
            batch.results = self._commit_many(items)
        return batch.results

    def _commit_many(self, items: Sequence[CommitItem]) -> list[int | StoreError]:
        rows: list[Row | StoreError] = []
        for item in items:
            try:
                rows.append(
                    encode(
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
        with self._lock:
            if any(not isinstance(row, StoreError) for row in rows):
                self._writing()
            marks = self._take_marks()  # the last deliveries' marks ride with this commit
            try:
                return self._write_many(rows, marks, lease_until)
            except BaseException:  # rolled back: the next transaction carries them
                self._hold(marks)
                raise

    def _write_many(
        self, rows: list[Row | StoreError], marks: list[str], lease_until: float
    ) -> list[int | StoreError]:
        """:meth:`commit_many`'s transaction (under the lock), the held ``marks`` deleted in
        it; done again with each item in its own savepoint if a stray row refuses an insert."""
        writer = self._writer
        out: list[int | StoreError] = []
        try:
            with self._transaction() as db:
                journal: list[tuple[Any, ...]] = []
                outbox: list[tuple[Any, ...]] = []
                valid = [row for row in rows if not isinstance(row, StoreError)]
                passed = writer.cas_all(db, valid)  # every CAS in one or two statements
                for row in rows:
                    if isinstance(row, StoreError):
                        out.append(row)
                        continue
                    try:
                        if passed is None:
                            writer.cas(db, row)
                        elif row.ref.uid not in passed:
                            raise writer.conflict(db, row.machine, row.ref, row.expected)
                    except Conflict as e:
                        out.append(e)
                        continue
                    out.append(row.expected + 1)
                    journal.append(writer.journal_row(row))
                    outbox.extend(writer.outbox_rows(row, lease_until))
                # the object rows are set one by one (each its own CAS); the journal
                # entries and the outbox rows of those that passed go in two statements
                if self._keep_journal and journal:
                    db.executemany(INSERT_JOURNAL, journal)
                if outbox:
                    db.executemany("INSERT INTO outbox VALUES (?, ?, ?, ?, ?, ?, ?)", outbox)
                delete_marked(db, marks)
            return out
        except sqlite3.IntegrityError:
            pass  # a stray row: find the item it belongs to, one savepoint at a time
        except sqlite3.Error as e:
            raise self._fail(f"commit of {len(rows)} objects", e) from e
        try:
            with self._transaction() as db:
                done = [self._savepoint(db, row, lease_until) for row in rows]
                delete_marked(db, marks)
                return done
        except sqlite3.Error as e:
            raise self._fail(f"commit of {len(rows)} objects", e) from e

    def _savepoint(
        self, db: sqlite3.Connection, row: Row | StoreError, lease_until: float
    ) -> int | StoreError:
        """One item of a batch in its own savepoint: its version, or why it was refused."""
        if isinstance(row, StoreError):
            return row
        db.execute("SAVEPOINT item")
        try:
            self._writer.write(db, row, lease_until)
        except StoreError as e:
            db.execute("ROLLBACK TO item")
            return e
        except sqlite3.Error as e:
            db.execute("ROLLBACK TO item")
            return self._fail(f"commit of {row.ref.uid} v{row.expected + 1}", e)
        finally:
            db.execute("RELEASE item")
        return row.expected + 1

    def journal(self, machine: Machine[Any], ref: ObjectRef) -> list[JournalEntry]:
        from . import _sqlite_journal as retention  # the history's part, at its first use

        return retention.journal(self, machine, ref)

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
                loaded = load_status(machine, loads(status), sv, fp)
            yield Record(ref, machine.name, loaded, version)

    # -- questions (FindStore, ADR 0159) -------------------------------------------------
    def find(
        self,
        machine: Machine[Any],
        *,
        state: str | None = None,
        entered_before: datetime | None = None,
        older_than: timedelta | float | None = None,
        limit: int = 100,
    ) -> list[Found]:
        # FindStore.find: one range of the ``objects_by_state_age`` index when ``state`` is given
        query = check_query(machine, state, entered_before, older_than, limit)
        db, lock = self._reading()
        with lock:
            try:
                rows = _sqlite_find.find_rows(db, query)
            except sqlite3.Error as e:
                raise self._fail("find", e) from e
        found = []
        for kind, namespace, name, uid, version, status, sv, fp, entered in rows:
            with self._decoding(f"status of {uid}"):
                loaded = load_status(machine, loads(status), sv, fp)
            record = Record(ObjectRef(kind, namespace, name, uid), machine.name, loaded, version)
            found.append(Found(record, epoch_time(entered)))
        return found

    def state_counts(self) -> list[StateCount]:
        """Per machine and state: how many objects, and since when the oldest (one grouped
        read of the ``objects_by_state_age`` index).

        Returns:
            One count per machine and state.
        """
        db, lock = self._reading()
        with lock:
            try:
                return _sqlite_find.counts(db)
            except sqlite3.Error as e:
                raise self._fail("state counts", e) from e

    # -- retention (RetentionStore) -----------------------------------------------------
    def snapshot(self, machine: Machine[Any], ref: ObjectRef) -> Snapshot | None:
        from . import _sqlite_journal as retention

        return retention.snapshot(self, machine, ref)

    def compact(
        self, machine: Machine[Any], *, keep: int = 0, refs: Iterable[ObjectRef] | None = None
    ) -> int:
        """Drop all but the last ``keep`` journal entries of each object behind a snapshot,
        one transaction per object; an object whose journal does not fold to its status is
        left as it is (and logged). Returns how many entries were dropped.

        Args:
            machine: the machine whose objects are compacted.
            keep: the newest entries kept per object, for ``lifecycle replay`` and audits.
            refs: only these objects; by default every object of the machine.

        Returns:
            How many entries were dropped.

        Raises:
            ValueError: a negative ``keep``.
        """
        from . import _sqlite_journal as retention

        return retention.compact(self, machine, keep, refs)

    # -- schema versions (SchemaStore, ADR 0088) -------------------------------------------
    def schema_versions(self) -> list[SchemaCount]:
        """Per machine, kind of record, version and fingerprint: how many, one example uid
        (one aggregate read).

        Returns:
            One count per machine, kind of record, schema version and fingerprint.
        """
        from . import _sqlite_upgrade as upgrades  # record schemas' part, at its first use

        return upgrades.schema_versions(self)

    def upgrade(self, machine: Machine[Any], *, batch: int = 500) -> UpgradeReport:
        """Rewrite ``machine``'s statuses, journal entries and snapshots below its schema
        version, ``batch`` rows per transaction (see :class:`~lifecycle.stores.SchemaStore`).
        Rows are read and upcast outside the write transaction; each is then set only if its
        version and schema are still what was read, so a concurrent commit wins.

        Args:
            machine: the machine whose stored rows are upcast.
            batch: rows per transaction: a bound on how long one holds the file's write lock.

        Returns:
            How many statuses, entries and snapshots were rewritten, and how many skipped.
        """
        from . import _sqlite_upgrade as upgrades

        return upgrades.upgrade(self, machine, batch)

    def claim_undelivered(self, limit: int = 1000) -> list[Transition]:
        """Lease up to ``limit`` undelivered events: this store's own, and expired leases.

        Args:
            limit: the most rows returned, a bound on what one round holds in memory.

        Returns:
            The rows, each object's in commit order.

        Raises:
            StoreError: the file cannot be written (a claim is a lease, written).
        """
        int64("limit", limit)
        now = self._clock()
        with self._lock:
            marks = self._take_marks()  # a delivered event is never claimed again
            try:
                with self._transaction() as db:
                    delete_marked(db, marks)
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
            found = [transition_from_row(loads(p)) for (p,) in rows]
        found.sort(key=lambda t: (t.ref.uid, t.version, t.n))
        return found

    def mark_delivered(self, ids: Iterable[str]) -> None:
        """Delete delivered rows. The mark need not be durable (lost in a crash, an event is
        delivered again under its id): it rides with the next commit's transaction (ADR
        0132), or -- once ``HELD_MARKS`` wait, and at a claim or close -- is written in its
        own at ``synchronous=NORMAL``; with group commit, marks share transactions too: a
        mark made while one is in progress is carried by the next (ADR 0026).

        Args:
            ids: the transitions' ids; an unknown or already removed id is ignored.
        """
        done = [str(i) for i in ids]
        if not done:
            return
        group = self._group
        if group is None:
            done = self._marks.add(done)
            if done:  # a full batch, or no marker thread to write them later: written now
                self._mark_now(done)
            return
        group.mark(self, done)

    def _mark_now(self, ids: list[str]) -> None:
        """Delete delivered rows in their own transaction, at ``synchronous=NORMAL``."""
        with self._lock:
            try:
                if self._synchronous in ("FULL", "EXTRA"):
                    self._db.execute("PRAGMA synchronous=NORMAL")
                try:
                    with self._transaction() as db:
                        delete_marked(db, ids)
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
        """Events and link intents committed and not yet delivered (held marks written first).

        Returns:
            How many outbox rows wait.
        """
        self._write_marks()
        with self._lock:
            (n,) = self._db.execute("SELECT count(*) FROM outbox").fetchone()
        return int(n)

    def undelivered_marks_held(self) -> int:
        """Delivery marks held for the next commit (or the marker thread): their rows are
        delivered, and still in the outbox table for a moment (ADR 0132).

        Returns:
            How many marks are held.
        """
        return len(self._marks)

    def flush_marks(self) -> None:
        """Write the delivery marks still held (ADR 0132) now: a process may exit right after
        (a runner's ``close`` calls it, ADR 0135). A failure is logged: the events repeat."""
        self._write_marks()

    def _marks_due(self) -> bool:
        """The marker thread's turn: write what is held (``False``: the store is closing)."""
        if self._marks.closing:
            return False
        self._write_marks()  # a failure is logged: the events repeat, under their ids
        return True

    def _take_marks(self) -> list[str]:
        """The delivery marks waiting for the next transaction (held ones, and group
        commit's)."""
        marks = self._marks.take()
        group = self._group
        if group is None:
            return marks
        return marks + group.take_marks()

    def _write_marks(self) -> None:
        """Write the marks still held (before a count of what is undelivered, and on the
        marker thread's turn)."""
        with self._lock:  # taken and written as one: a claim never sees them taken, unwritten
            marks = self._take_marks()
            if marks:
                self._mark_quietly(marks)

    def outbox_summary(self) -> OutboxSummary:
        """How many outbox rows wait, and when the oldest was observed (``db status``).
        Marks still held (ADR 0132) are written first, so they are not counted.

        Returns:
            The count and the oldest row's observation time.
        """
        self._write_marks()
        with self._lock:
            try:
                row = self._db.execute(OUTBOX_SUMMARY).fetchone()
            except sqlite3.Error as e:
                raise self._fail("outbox summary", e) from e
        return outbox_summary_of(row)

    def history(self, *, acknowledge: bool = False) -> SQLiteHistory:
        """The epochs this database started, each when it was found to be an older copy of
        itself (``lifecycle db check``; ADR 0037).

        Args:
            acknowledge: record the epochs read as reviewed, so a restored copy is reported
                until an operator acknowledges it, once, rather than on every later check
                (ADR 0163).

        Returns:
            The epochs, oldest first, and the last one reviewed.
        """
        with self._lock:
            try:
                if not acknowledge:
                    found = history.epochs(self._db)
                    return SQLiteHistory(self.path, found, history.reviewed(self._db))
                with self._transaction() as db:  # the write lock: no epoch starts meanwhile
                    found = history.epochs(db)
                    if found:
                        history.review(db, found[-1][0])
                    return SQLiteHistory(self.path, found, history.reviewed(db))
            except sqlite3.Error as e:
                raise self._fail("history", e) from e

    def record_limit(self, kind: str) -> int | None:
        """No bound a machine's declared limits reach (ADR 0144): a record is one TEXT value,
        which SQLite holds up to 1 GB (``SQLITE_MAX_LENGTH``).

        Args:
            kind: the object kind asked about.

        Returns:
            ``None``: no bound.
        """
        return None

    def close(self) -> None:
        """Close the store: a new history tag ends this session (so a copy of the file taken
        while it was open is recognised as older if it is ever restored; ADR 0037)."""
        self._marks.close()  # its thread ends first: a write it started finishes before ours
        self._write_marks()
        with self._lock:
            if self._history == "written":
                self._advance_history("close")
            self._history = "closed"
            self._db.close()
        if self._reader is not None:
            with self._read_lock:
                self._reader.close()
