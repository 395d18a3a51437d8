"""The store for many controller replicas: one PostgreSQL database (extra ``postgres``).

Each commit is one statement -- so one round trip and one transaction -- that compares and
sets the object's version, appends its journal entry and queues its outbox rows; a lost race
is :class:`~lifecycle.Conflict`. Outbox rows are leased: the committing replica delivers its
fresh events itself, and :meth:`PostgresStore.claim_undelivered` lets any number of replicas
share the rest with ``FOR UPDATE SKIP LOCKED``, one replica per object at a time, in version
order. Tables live in their own PostgreSQL schema (``lifecycle`` unless the URL says
``?schema=NAME``), created and upgraded by versioned, idempotent migrations
(:func:`migrate`, or ``lifecycle db migrate --store URL``).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import select
import socket
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import attrs

from .._core.errors import CommitUnknown, Conflict, StoreError
from .._core.machine import Machine
from .._core.observation import Observation
from .._core.refs import ObjectRef
from .._core.schema import SchemaCount, merge_counts
from .._core.transition import Transition
from .._log import get_logger
from . import _pgsql as sql
from ._pgsql import (
    ConnectionPool,
    Landed,
    PoolTimeout,
    SynchronousCommit,
    Target,
    pg_errors,
    psycopg,
    translate,
)
from .base import (
    CommitItem,
    JournalEntry,
    OutboxSummary,
    Record,
    Snapshot,
    UpgradeReport,
    check_batch,
    plan_compaction,
)

_log = get_logger("lifecycle.stores")

#: A row the database refuses: ``commit_many`` isolates the item, one commit at a time.
_REFUSED = (pg_errors.IntegrityError, pg_errors.DataError)

__all__ = ["HistoryReport", "PostgresStore", "check_history", "migrate", "schema_version"]


def _connect(target: Target, timeout: float | None = None) -> psycopg.Connection[Any]:
    """A direct connection (not pooled), with a clear error if the server cannot be had.
    ``timeout``: the per-host connect timeout, where the URL sets none."""
    extra: dict[str, Any] = {}
    if timeout is not None and "connect_timeout=" not in target.conninfo:
        extra["connect_timeout"] = max(2, round(timeout))
    try:
        return psycopg.connect(
            target.conninfo, autocommit=True, application_name="lifecycle", **extra
        )
    except psycopg.Error as e:
        raise translate(target, "connect", e) from None


def sever(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> None:
    """Shut a connection's socket down from outside: a call blocked on a server that does not
    answer (stopped, not dead: its kernel still acknowledges) wakes up with an error."""
    with contextlib.suppress(Exception):
        fd = os.dup(conn.pgconn.socket)
        with socket.socket(fileno=fd) as sock:
            sock.shutdown(socket.SHUT_RDWR)


def _snapshot_rows(machine: Machine[Any], rows: Sequence[Sequence[Any]]) -> list[tuple[Any, ...]]:
    return sql.status_rows(machine, rows, snapshots=True)


class Watchdog:
    """Bounds every store call: a connection still busy ``bound`` seconds after it was armed
    is severed (:func:`sever`), so the call fails with a connection error instead of
    waiting for ever. One daemon thread per store, started on first use; arming and disarming
    cost a dict write each."""

    def __init__(self, bound: float) -> None:
        self.bound = bound
        self._armed: dict[int, tuple[float, psycopg.Connection[Any]]] = {}
        self._keys = itertools.count()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.severed: set[int] = set()

    def arm(self, conn: psycopg.Connection[Any]) -> int:
        key = next(self._keys)
        self._armed[key] = (time.monotonic() + self.bound, conn)
        if self._thread is None:
            self._thread = threading.Thread(target=self._watch, name="lifecycle-pg-watchdog")
            self._thread.daemon = True
            self._thread.start()
        return key

    def disarm(self, key: int) -> bool:
        """Forget ``key``; whether its connection was severed."""
        self._armed.pop(key, None)
        if key in self.severed:
            self.severed.discard(key)
            return True
        return False

    def _watch(self) -> None:
        tick = min(0.25, self.bound / 4)
        while not self._stop.wait(tick):
            now = time.monotonic()
            for key, (deadline, conn) in list(self._armed.items()):
                if now >= deadline and self._armed.pop(key, None) is not None:
                    self.severed.add(key)
                    sever(conn)

    def close(self) -> None:
        self._stop.set()


class Lost(Exception):
    """A write's connection failed while the write was in flight: its outcome is unknown
    until resolved. ``server`` is where it ran (host, port, backend pid)."""

    def __init__(self, error: BaseException, server: tuple[str, str, int]) -> None:
        super().__init__(str(error))
        self.error = error
        self.server = server


def _migrate(conn: psycopg.Connection[Any], target: Target) -> list[int]:
    schema = target.schema
    with conn.transaction():
        conn.execute("SET LOCAL statement_timeout = 0")  # a migration may take its time
        conn.execute(*sql.migration_lock_sql(schema))
        for stmt in sql.bookkeeping_sql(schema):
            conn.execute(stmt)
        applied = [int(v) for (v,) in conn.execute(sql.applied_sql(schema))]
        todo = sql.pending(applied, target)
        for version, description, statements in todo:
            for stmt in statements:
                conn.execute(stmt)
            conn.execute(sql.record_sql(schema), (version, description))
    return [v for v, _, _ in todo]


def migrate(url: str, *, schema: str | None = None, connect_timeout: float = 5.0) -> list[int]:
    """Create or upgrade the store's tables; returns the versions applied (``[]``: already
    current). Idempotent, and safe for several replicas at once (an advisory lock orders
    them); all pending migrations apply in one transaction or none does."""
    target = sql.parse_url(url, schema)
    conn = _connect(target, connect_timeout)
    try:
        return _migrate(conn, target)
    except psycopg.Error as e:
        raise translate(target, "migration", e) from None
    finally:
        conn.close()


def schema_version(
    url: str, *, schema: str | None = None, connect_timeout: float = 5.0
) -> int | None:
    """The store schema's migration version (``None``: never migrated)."""
    target = sql.parse_url(url, schema)
    conn = _connect(target, connect_timeout)
    try:
        return _version(conn, target)
    finally:
        conn.close()


def _version(conn: psycopg.Connection[Any], target: Target) -> int | None:
    try:
        found = conn.execute(sql.exists_sql(), (f'"{target.schema}".schema_migrations',))
        exists = found.fetchone()
        if exists is None or not exists[0]:
            return None
        row = conn.execute(sql.version_sql(target.schema)).fetchone()
    except psycopg.Error as e:
        raise translate(target, "schema check", e) from None
    return None if row is None else int(row[0])


@attrs.frozen(slots=True)
class HistoryReport:
    """What ``lifecycle db check`` reports of a PostgreSQL store's history: its epochs (more
    than one: the database's history changed -- a failover or a restore -- and writes
    acknowledged before may have been lost) and the rewinds replicas saw (an object found
    behind a version they had committed: acknowledged writes that were lost)."""

    where: str
    epochs: list[tuple[int, str, str, str, str]]
    rewinds: list[tuple[str, int, int | None, str, str, str]]

    @property
    def ok(self) -> bool:
        return len(self.epochs) <= 1 and not self.rewinds

    def lines(self) -> list[str]:
        out = [f"{self.where}: {len(self.epochs)} epoch(s), {len(self.rewinds)} rewind(s)"]
        for seq, tag, history, started, by in self.epochs:
            who = f" by {by}" if by else ""
            out.append(f"epoch {seq} {tag or '(first)'}: history {history}, since {started}{who}")
        for uid, acknowledged, found, epoch, by, seen in self.rewinds:
            held = "nothing" if found is None else f"v{found}"
            out.append(
                f"LOST {uid}: v{acknowledged} was acknowledged, the store held {held} "
                f"(epoch {epoch or '(first)'}, seen by {by} at {seen})"
            )
        if len(self.epochs) > 1:
            out.append(
                "the database's history changed: writes acknowledged just before each epoch "
                "change may be lost (an asynchronous standby); event ids of later commits "
                "carry @EPOCH, so none names two events"
            )
        return out


def check_history(
    url: str, *, schema: str | None = None, connect_timeout: float = 5.0
) -> HistoryReport:
    """The store's epochs and reported rewinds (``lifecycle db check``). Starts a new epoch
    first if the server's history is not the current epoch's (as opening a store does)."""
    target = sql.parse_url(url, schema)
    conn = _connect(target, connect_timeout)
    statements = sql.Statements(target.schema, journal=True)
    try:
        found = _version(conn, target)
        if found != sql.LATEST:
            raise sql.not_migrated(target, found)
        with conn.transaction():
            conn.execute(statements.epoch_lock, (f"lifecycle-epoch:{target.schema}",))
            row = conn.execute(statements.epoch_now).fetchone()
            if row is not None and row[1] != row[2]:
                conn.execute(statements.epoch_add, (sql.new_epoch_tag(str(row[2])), "db check"))
        epochs = [
            (int(a), str(b), str(c), str(d), str(e))
            for a, b, c, d, e in conn.execute(statements.epochs).fetchall()
        ]
        rewinds = [
            (str(a), int(b), None if c is None else int(c), str(d), str(e), str(f))
            for a, b, c, d, e, f in conn.execute(statements.rewinds).fetchall()
        ]
    except psycopg.Error as e:
        raise translate(target, "history check", e) from None
    finally:
        conn.close()
    return HistoryReport(target.where, epochs, rewinds)


def _check_idle(conn: psycopg.Connection[Any]) -> None:
    """Pool check: a connection the server closed while it sat idle (a restart, an idle
    timeout) has a readable socket; ping it then, so the pool replaces it before use. A
    healthy idle connection costs one non-blocking ``select``, not a round trip."""
    if conn.closed or conn.broken:
        raise psycopg.OperationalError("connection closed")
    readable, _, _ = select.select([conn.fileno()], [], [], 0)
    if readable:
        conn.execute("")


class PostgresStore(sql.PgSettings):
    """A :class:`~lifecycle.stores.Store` (and ``BatchStore``, ``RetentionStore``) on
    PostgreSQL, over a psycopg connection pool.

    ``url`` is a libpq URL (``postgresql://USER:PASSWORD@HOST:PORT/DB``) and may add
    ``?schema=NAME``. ``pool_size`` caps the pool; ``timeout`` is how long an operation waits
    for a connection before failing with :class:`~lifecycle.StoreError`. ``lease_seconds`` is
    how long a replica owns delivery of the events it committed or claimed before another
    replica may take them over. ``migrate=False`` refuses to open a schema that is not
    current instead of migrating it. ``synchronous_commit`` sets PostgreSQL's durability per
    session (default: the server's, normally ``on``).

    No call waits for ever (ADR 0069): the URL's libpq parameters pass through, and where it
    does not set them the store adds a per-host ``connect_timeout`` (3 s), TCP keepalives and
    ``tcp_user_timeout``, and server-side ``statement_timeout`` (20 s) and
    ``idle_in_transaction_session_timeout`` (30 s); ``?call_timeout=`` (30 s) bounds any call
    on the client side, a hung server included. A commit whose connection is lost in flight
    is resolved by its commit token (``?resolve_timeout=``, 15 s): landed, not written, or
    :class:`~lifecycle.CommitUnknown`. Event ids carry the store's :attr:`epoch` once the
    database's history changed (a failover): an id never names two different events.
    """

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        pool_size: int = 4,
        timeout: float = 5.0,
        connect_timeout: float | None = None,
        lease_seconds: float = 30.0,
        journal: bool = True,
        migrate: bool = True,
        synchronous_commit: SynchronousCommit | None = None,
        owner: str | None = None,
    ) -> None:
        settings = self._settle(
            url, schema, pool_size, timeout, connect_timeout, lease_seconds, journal,
            synchronous_commit, owner,
        )  # fmt: skip
        self._watchdog = Watchdog(self._call_timeout)
        conn = _connect(self.target)
        try:
            if migrate:
                try:
                    _migrate(conn, self.target)
                except psycopg.Error as e:
                    raise translate(self.target, "migration", e) from None
            else:
                found = _version(conn, self.target)
                sql.pending([found or 0], self.target)  # refuses a newer schema
                if found != sql.LATEST:
                    raise sql.not_migrated(self.target, found)
            try:
                self._refresh_epoch(conn)
            except psycopg.Error as e:
                raise translate(self.target, "epoch check", e) from None
        finally:
            conn.close()

        def configure(c: psycopg.Connection[Any]) -> None:
            for stmt in settings:
                c.execute(stmt)
            c.execute(self._sql.epoch_verify)  # the session's epoch (ADR 0068)

        self._pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
            self.target.conninfo,
            configure=configure,
            check=_check_idle,
            **self._pool_options(pool_size, "lifecycle"),
        )
        self._pool.open(wait=False)

    # -- plumbing -----------------------------------------------------------------------
    @contextlib.contextmanager
    def _conn(
        self,
        what: str,
        passthrough: tuple[type[Exception], ...] = (),
        *,
        writes: bool = False,
        timeout: float | None = None,
    ) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection, bounded by the watchdog; failures become
        :class:`StoreError` (``passthrough``: raised as they are). With ``writes``, a
        connection lost while in use raises :class:`Lost`: the write's outcome is unknown."""
        conn: psycopg.Connection[Any] | None = None
        key: int | None = None
        severed = False
        server = ("", "", 0)
        try:
            with self._pool.connection(
                timeout=self._timeout if timeout is None else timeout
            ) as conn:
                if writes:
                    info = conn.info
                    server = (info.host, str(info.port), info.backend_pid)
                key = self._watchdog.arm(conn)
                try:
                    yield conn
                finally:
                    severed = self._watchdog.disarm(key)
        except PoolTimeout:
            raise self._unavailable(what) from None
        except StoreError:
            raise
        except psycopg.Error as e:
            if isinstance(e, passthrough):
                raise
            if conn is not None and key is not None and (conn.broken or conn.closed):
                if writes:
                    raise Lost(e, server) from None
                if severed:
                    raise self._hung(what) from None
            raise translate(self.target, what, e) from None

    def _hung(self, what: str) -> StoreError:
        return StoreError(
            f"PostgreSQL at {self.target.where}: {what} failed: no answer within "
            f"{self._call_timeout:g}s (call_timeout; the server hangs or the network is down)"
        )

    def _unavailable(self, what: str) -> StoreError:
        """No pooled connection in time: say why, from one direct attempt."""
        try:
            _connect(self.target).close()
        except StoreError as e:
            return StoreError(f"{e} ({what} not done)")
        return StoreError(
            f"PostgreSQL at {self.target.where}: {what} failed: no pooled connection within "
            f"{self._timeout:g}s (the server answers; the pool is reconnecting or exhausted)"
        )

    @contextlib.contextmanager
    def _decoding(self, what: str) -> Iterator[None]:
        """A row that cannot be read back is a :class:`StoreError`, never a raw exception."""
        try:
            yield
        except StoreError:
            raise
        except Exception as e:
            raise StoreError(
                f"PostgreSQL at {self.target.where}: cannot read the {what}: {e!r}"
            ) from e

    # -- epochs, rewinds and unknown outcomes -------------------------------------------
    def _refresh_epoch(self, conn: psycopg.Connection[Any]) -> None:
        """Read the store's epoch; start a new one if the server's history (cluster,
        timeline) is not the current epoch's -- a failover or a restore happened. The session
        of ``conn`` then trusts that epoch: its commits check it without reading the
        server's history (ADR 0068)."""
        with conn.transaction():
            conn.execute(self._sql.epoch_lock, (f"lifecycle-epoch:{self.target.schema}",))
            row = conn.execute(self._sql.epoch_verify).fetchone()
            tag, history, current = sql.verified_epoch(self.target, row)
            if history != current:
                tag = sql.new_epoch_tag(current)
                conn.execute(self._sql.epoch_add, (tag, self.owner))
                conn.execute(self._sql.epoch_verify)
        old = self.epoch
        self._new_epoch(old, tag, current)
        if tag != old and self._acked:
            for chunk in self._acks_to_verify():
                rows = conn.execute(
                    self._sql.tokens, ([c[0] for c in chunk], [c[1] for c in chunk])
                ).fetchall()
                for rewind in self._verified(chunk, rows):
                    self._report(conn, rewind)

    def _check_rewind(
        self, conn: psycopg.Connection[Any] | None, uid: str, found: int | None
    ) -> None:
        rewind = self._rewound(uid, found)
        if rewind is not None and conn is not None:
            self._report(conn, rewind)

    def _report(self, conn: psycopg.Connection[Any], rewind: sql.Rewind) -> None:
        """Record a rewind in the store, for ``lifecycle db check`` (best effort)."""
        with contextlib.suppress(psycopg.Error):
            conn.execute(
                self._sql.rewind_add,
                (rewind.uid, rewind.acknowledged, rewind.found, rewind.epoch, self.owner),
            )

    def _resolve(
        self, writes: Sequence[dict[str, Any]], lost: Lost
    ) -> list[tuple[sql.Landed, int | None]]:
        """Whether each write of a commit whose connection was lost landed, by its token:
        reconnect (the pool moves on to another host if it must), end the old backend if it
        is still there, read the tokens. ``(outcome, stored version)`` per write; raises
        :class:`CommitUnknown` if that cannot be found out within ``resolve_timeout``."""
        uids = [w["uid"] for w in writes]
        versions = [w["version"] for w in writes]
        deadline = time.monotonic() + self._resolve_timeout
        why = translate(self.target, "commit", lost.error)
        while True:
            left = deadline - time.monotonic()
            try:
                with self._conn("commit resolution", timeout=max(0.1, left)) as conn:
                    if self._ended(conn, lost):
                        rows = conn.execute(self._sql.tokens, (uids, versions)).fetchall()
                        return sql.resolved(rows, writes)
            except StoreError as e:
                why = e
            if time.monotonic() >= deadline:
                raise sql.unresolved(uids, why, self._resolve_timeout)
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))

    def _ended(self, conn: psycopg.Connection[Any], lost: Lost) -> bool:
        """Whether the backend that ran the lost write is gone (ended now if it lingers on
        this server): only then can its outcome be read."""
        host, port, pid = lost.server
        if (conn.info.host, str(conn.info.port)) != (host, port) or not pid:
            return True  # another server (a failover): the old one's backend is not here
        row = conn.execute(self._sql.end_backend, (2000, pid)).fetchone()
        return row is None or bool(row[0])

    # -- the protocol -------------------------------------------------------------------
    def load(self, machine: Machine[Any], ref: ObjectRef) -> Record | None:
        with self._conn(f"load of {ref.uid}") as conn:
            row = conn.execute(self._sql.load, (ref.uid,)).fetchone()
            if ref.uid in self._acked:
                self._check_rewind(conn, ref.uid, None if row is None else int(row[0]))
        if row is None:
            return None
        sql.check_row_identity(machine, ref, row[2:])
        with self._decoding(f"status of {ref.uid}"):
            return sql.record_from(machine, ref, row[0], row[1], row[6], row[7])

    def commit(
        self,
        machine: Machine[Any],
        ref: ObjectRef,
        expected: int,
        status: Any,
        observation: Observation,
        transitions: Sequence[Transition],
    ) -> int:
        """The compare-and-set write (one statement). Raises :class:`Conflict` when the
        stored version is not ``expected`` -- or when ``transitions`` were stamped with an
        epoch that is no longer the store's (read :attr:`epoch` and stamp them again) --
        :class:`~lifecycle.IdentityMismatch` when ``ref`` is not the object stored under its
        uid, :class:`CommitUnknown` when the connection was lost in flight and the outcome
        could not be resolved, and :class:`StoreError` for a write that certainly failed."""
        params = sql.commit_params(
            machine,
            ref,
            expected,
            status,
            observation,
            transitions,
            owner=self.owner,
            lease=self._lease,
        )
        what = f"commit of {ref.uid} v{expected + 1}"
        for _ in range(3):
            try:
                with self._conn(what, writes=True) as conn:
                    try:
                        row = conn.execute(self._sql.commit, params).fetchone()
                    except pg_errors.UniqueViolation as e:
                        raise sql.unique_violation(self.target, e, ref.uid, expected) from None
                    if row is not None and row[0] == 1:
                        self._acknowledge(ref.uid, expected + 1, params["token"])
                        return expected + 1
                    if row is not None and not row[1]:  # the epoch changed, or is unverified
                        self._refresh_epoch(conn)
                        if params["epoch"] is None or params["epoch"] == self.epoch:
                            continue
                        raise Conflict(ref.uid, expected, expected)
                    ident = conn.execute(self._sql.identity_of, (ref.uid,)).fetchone()
                    actual = None if ident is None else int(ident[0])
                    if ident is not None:
                        sql.check_row_identity(machine, ref, ident[1:])
                    self._check_rewind(conn, ref.uid, actual)
                raise Conflict(ref.uid, expected, actual)
            except Lost as lost:
                (outcome, stored), *_ = self._resolve([params], lost)
                if outcome is Landed.YES:
                    self._acknowledge(ref.uid, expected + 1, params["token"])
                    return expected + 1
                if outcome is Landed.UNKNOWN:
                    raise CommitUnknown(
                        (ref.uid,),
                        f"{translate(self.target, what, lost.error)}; whether it landed is "
                        f"unknown: the object is at v{stored} and its journal cannot tell",
                    ) from None
                raise StoreError(
                    f"{translate(self.target, what, lost.error)} -- not written (resolved "
                    "by its commit token)"
                ) from None
        raise sql.epoch_unavailable(self.target)

    def journal(self, machine: Machine[Any], ref: ObjectRef) -> list[JournalEntry]:
        with self._conn(f"journal of {ref.uid}") as conn:
            self._check_stored_identity(conn, machine, ref)
            rows = conn.execute(self._sql.journal, (ref.uid,)).fetchall()
        with self._decoding(f"journal of {ref.uid}"):
            return sql.journal_from(machine, rows)

    def records(self, machine: Machine[Any]) -> Iterator[Record]:
        with self._conn("scan") as conn:
            rows = conn.execute(self._sql.records, (machine.name,)).fetchall()
        for kind, namespace, name, uid, version, status, sv, fp in rows:
            with self._decoding(f"status of {uid}"):
                record = sql.record_from(
                    machine, ObjectRef(kind, namespace, name, uid), version, status, sv, fp
                )
            yield record

    # -- record schemas (SchemaStore, ADR 0088) ---------------------------------------------
    def schema_versions(self) -> list[SchemaCount]:
        """Per machine, kind of record, version and fingerprint: how many, one example uid
        (one aggregate query)."""
        with self._conn("schema report") as conn:
            rows = conn.execute(self._sql.schema_versions).fetchall()
        return merge_counts(rows)

    def upgrade(self, machine: Machine[Any], *, batch: int = 500) -> UpgradeReport:
        """Rewrite ``machine``'s statuses, journal entries and snapshots below its schema
        version, ``batch`` rows per transaction (see :class:`~lifecycle.stores.SchemaStore`):
        each batch is read, upcast here, then written back compared-and-set on the version
        and schema read, so a concurrent commit wins and that record is skipped."""
        check_batch(batch)
        v = machine.schema.version
        kinds = (
            (self._sql.old_statuses, self._sql.upgrade_status, sql.status_rows),
            (self._sql.old_entries, self._sql.upgrade_entry, sql.entry_rows),
            (self._sql.old_snapshots, self._sql.upgrade_snapshot, _snapshot_rows),
        )
        done: list[tuple[int, int]] = []
        for scan, update, convert in kinds:
            written = skipped = 0
            after: tuple[str, int] = ("", -1)
            while True:
                with self._conn("upgrade scan") as conn:
                    rows = conn.execute(scan, (machine.name, v, *after, batch)).fetchall()
                if not rows:
                    break
                after = (str(rows[-1][0]), int(rows[-1][1]))
                params = convert(machine, rows)
                with self._conn("upgrade") as conn, conn.transaction():
                    for p in params:
                        n = conn.execute(update, p).rowcount
                        written += n
                        skipped += 1 - n
            done.append((written, skipped))
        return UpgradeReport(
            machine.name, done[0][0], done[1][0], done[2][0], sum(s for _, s in done)
        )

    def claim_undelivered(self, limit: int = 1000) -> list[Transition]:
        """Lease up to ``limit`` undelivered events -- this replica's own, unclaimed ones and
        expired leases -- object by object: an object whose first pending event another
        replica holds (or is claiming right now) is skipped, so each object's events go out
        through one replica at a time, in version order."""
        params = {"me": self.owner, "lease": self._lease, "limit": limit}
        with self._conn("outbox claim") as conn:
            rows = conn.execute(self._sql.claim, params).fetchall()
        with self._decoding("outbox"):
            return sql.outbox_from(rows)

    def mark_delivered(self, ids: Iterable[str]) -> None:
        done = sorted(set(ids))
        if not done:
            return
        with self._conn("outbox mark") as conn:
            conn.execute(self._sql.mark, (done,))

    def undelivered_count(self) -> int:
        with self._conn("outbox count") as conn:
            row = conn.execute(self._sql.undelivered).fetchone()
        return 0 if row is None else int(row[0])

    def outbox_summary(self) -> OutboxSummary:
        """How many outbox rows wait, and when the oldest was committed (``db status``)."""
        with self._conn("outbox summary") as conn:
            row = conn.execute(self._sql.outbox_summary).fetchone()
        return OutboxSummary(0, None) if row is None else OutboxSummary(int(row[0]), row[1])

    def close(self) -> None:
        self._watchdog.close()
        self._pool.close()

    # -- batches (BatchStore) -----------------------------------------------------------
    def load_many(self, items: Sequence[tuple[Machine[Any], ObjectRef]]) -> list[Record | None]:
        uids = list(dict.fromkeys(ref.uid for _, ref in items))
        with self._conn(f"load of {len(uids)} objects") as conn:
            rows = conn.execute(self._sql.load_many, (uids,)).fetchall()
            found = {row[0]: row for row in rows}
            for uid in uids:
                if uid in self._acked:
                    row = found.get(uid)
                    self._check_rewind(conn, uid, None if row is None else int(row[1]))
        for machine, ref in items:
            row = found.get(ref.uid)
            if row is not None:
                sql.check_row_identity(machine, ref, row[3:])
        out: list[Record | None] = []
        for machine, ref in items:
            row = found.get(ref.uid)
            if row is None:
                out.append(None)
                continue
            with self._decoding(f"status of {ref.uid}"):
                out.append(sql.record_from(machine, ref, row[1], row[2], row[7], row[8]))
        return out

    def commit_many(self, items: Sequence[CommitItem]) -> list[int | StoreError]:
        """Each item's compare-and-set write, all in one transaction (pipelined: about one
        round trip for the batch). Items are written in uid order, so replicas committing
        overlapping batches lock rows in the same order and cannot deadlock.

        A conflicting item writes nothing and is reported (so is an item stamped with an
        epoch the store left: a :class:`Conflict`, stamp it again). An item whose ref is
        not the object stored under its uid raises :class:`~lifecycle.IdentityMismatch` and
        nothing of the batch is written. A row the database refuses (a stray journal row, a
        value it cannot store) rolls the transaction back, and the items are then committed
        one by one so only that item fails.

        A connection lost while the batch is in flight does *not* mean nothing was written:
        the transaction may have committed. The store reconnects and reads the items' commit
        tokens: landed items get their version, the others their :class:`Conflict`; a batch
        that certainly did not commit raises :class:`StoreError` (nothing written), and one
        whose outcome cannot be found out within ``resolve_timeout`` raises
        :class:`CommitUnknown`."""
        out: list[int | StoreError | None] = [None] * len(items)
        ready: list[tuple[int, dict[str, Any]]] = []
        for index, item in enumerate(items):
            try:
                ready.append((index, sql.item_params(item, owner=self.owner, lease=self._lease)))
            except StoreError as e:
                out[index] = e
        ready.sort(key=lambda p: p[1]["uid"])  # stable: one object's items keep their order
        if ready:
            try:
                counts = self._commit_batch(items, ready)
            except _REFUSED:
                self._check_identities(items)  # refuse an impostor before any write
                for index, _ in ready:
                    item = items[index]
                    try:
                        out[index] = self.commit(
                            item.machine,
                            item.ref,
                            item.expected,
                            item.status,
                            item.observation,
                            item.transitions,
                        )
                    except StoreError as e:
                        out[index] = e
                return [r for r in out if r is not None]
            except Lost as lost:
                writes = [p for _, p in ready]
                counts = sql.batch_outcomes(
                    self.target, writes, self._resolve(writes, lost), lost.error
                )
            for (index, p), n in zip(ready, counts, strict=True):
                if isinstance(n, StoreError):
                    out[index] = n
                else:
                    out[index] = p["version"]
                    self._acknowledge(p["uid"], p["version"], p["token"])
        return [r for r in out if r is not None]

    def _commit_batch(
        self, items: Sequence[CommitItem], ready: list[tuple[int, dict[str, Any]]]
    ) -> list[int | StoreError]:
        """Per item its version (written) or its refusal. Raises psycopg's IntegrityError /
        DataError as they are (commit_many isolates them), :class:`Lost` for a lost
        connection, and refuses the whole batch -- nothing written -- on an identity mismatch.

        One round trip: the batch's stored rows locked in uid order, then one statement
        writing every item from binary arrays (:attr:`Statements.commit_batch`), pipelined
        up to one sync: one implicit transaction. A batch holding one object twice is
        written item by item."""
        params = [p for _, p in ready]
        uids = [p["uid"] for p in params]
        if len(set(uids)) < len(uids):
            return self._commit_each(items, ready)
        batch = sql.batch_params(params, owner=self.owner, lease=self._lease)
        with self._conn(f"commit of {len(items)} objects", _REFUSED, writes=True) as conn:
            with conn.pipeline():  # one implicit transaction up to the pipeline's sync
                conn.execute(self._sql.lock_many, (uids,), binary=True)
                cur = conn.cursor()
                cur.execute(self._sql.commit_batch, batch, binary=True)
            rows = cur.fetchall()
        counts, stored, refused = sql.batch_counts(params, rows)
        if refused:
            self._check_identities(items)  # raises the IdentityMismatch
            raise StoreError(f"PostgreSQL at {self.target.where}: batch refused (identity)")
        return self._settle_batch(params, counts, stored)

    def _settle_batch(
        self,
        params: list[dict[str, Any]],
        counts: list[tuple[int, bool]],
        stored: dict[str, Sequence[Any]],
    ) -> list[int | StoreError]:
        """Per item its version or :class:`Conflict`; a refused epoch refreshes it, a
        conflict behind an acknowledged version is a rewind."""
        out = sql.batch_results(params, counts, stored)
        if not all(ok for _, ok in counts):
            with self._conn("epoch check") as conn:
                self._refresh_epoch(conn)
        for p, result in zip(params, out, strict=True):
            if isinstance(result, Conflict) and result.actual != p["expected"]:
                self._check_rewind(None, p["uid"], result.actual)
        return out

    def _commit_each(
        self, items: Sequence[CommitItem], ready: list[tuple[int, dict[str, Any]]]
    ) -> list[int | StoreError]:
        """:meth:`_commit_batch` for a batch holding an object more than once: each item's
        commit statement in turn (pipelined), so an object's later item sees its earlier."""
        params = [p for _, p in ready]
        counts: list[tuple[int, bool]] = []
        with (
            self._conn(f"commit of {len(items)} objects", _REFUSED, writes=True) as conn,
            conn.transaction(),
        ):
            with conn.cursor() as cur:
                cur.executemany(self._sql.commit, params, returning=True)
                while True:
                    row = cur.fetchone()
                    counts.append((0, True) if row is None else (int(row[0]), bool(row[1])))
                    if not cur.nextset():
                        break
            missed = [p["uid"] for p, (n, _) in zip(params, counts, strict=True) if not n]
            stored: dict[str, Any] = {}
            if missed:
                rows = conn.execute(self._sql.versions, (missed,)).fetchall()
                stored = {str(r[0]): r for r in rows}
                for (index, p), (n, _) in zip(ready, counts, strict=True):
                    if not n and p["uid"] in stored:  # raising here rolls the batch back
                        sql.check_row_identity(items[index].machine, items[index].ref,
                                               stored[p["uid"]][2:])  # fmt: skip
        return self._settle_batch(params, counts, stored)

    def _check_identities(self, items: Sequence[CommitItem]) -> None:
        uids = list(dict.fromkeys(item.ref.uid for item in items))
        with self._conn("identity check") as conn:
            rows = conn.execute(self._sql.versions, (uids,)).fetchall()
        stored = {str(r[0]): r for r in rows}
        for item in items:
            row = stored.get(item.ref.uid)
            if row is not None:
                sql.check_row_identity(item.machine, item.ref, row[2:])

    def _check_stored_identity(
        self, conn: psycopg.Connection[Any], machine: Machine[Any], ref: ObjectRef
    ) -> None:
        ident = conn.execute(self._sql.identity_of, (ref.uid,)).fetchone()
        if ident is not None:
            sql.check_row_identity(machine, ref, ident[1:])

    # -- retention (RetentionStore) -----------------------------------------------------
    def snapshot(self, machine: Machine[Any], ref: ObjectRef) -> Snapshot | None:
        with self._conn(f"snapshot of {ref.uid}") as conn:
            self._check_stored_identity(conn, machine, ref)
            row = conn.execute(self._sql.snapshot, (ref.uid,)).fetchone()
        if row is None:
            return None
        with self._decoding(f"snapshot of {ref.uid}"):
            return sql.snapshot_from(machine, row)

    def compact(
        self, machine: Machine[Any], *, keep: int = 0, refs: Iterable[ObjectRef] | None = None
    ) -> int:
        """Drop all but the last ``keep`` journal entries of each object behind a snapshot.

        One transaction per object, holding its row lock (a concurrent commit of that object
        waits for it); the snapshot is the fold of the dropped entries, and the object is
        left alone if its journal does not fold to its status. Returns how many entries were
        dropped. Without ``refs``: every object of ``machine`` with more than ``keep``."""
        if keep < 0:
            raise ValueError(f"keep must not be negative, got {keep}")
        if not self._keep_journal:
            return 0
        if refs is None:
            with self._conn("compaction scan") as conn:
                rows = conn.execute(self._sql.compactable, (machine.name, keep)).fetchall()
            chosen = [ObjectRef(kind, ns, name, uid) for kind, ns, name, uid in rows]
        else:
            chosen = list(refs)
        dropped = 0
        for ref in chosen:
            dropped += self._compact_one(machine, ref, keep)
        return dropped

    def _compact_one(self, machine: Machine[Any], ref: ObjectRef, keep: int) -> int:
        with self._conn(f"compaction of {ref.uid}") as conn, conn.transaction():
            self._check_stored_identity(conn, machine, ref)
            row = conn.execute(self._sql.lock_object, (ref.uid,)).fetchone()
            if row is None:
                return 0
            snap = conn.execute(self._sql.snapshot, (ref.uid,)).fetchone()
            rows = conn.execute(self._sql.journal, (ref.uid,)).fetchall()
            with self._decoding(f"journal of {ref.uid}"):
                current = sql.record_from(machine, ref, row[0], row[1], row[2], row[3])
                found = None if snap is None else sql.snapshot_from(machine, snap)
                start = (
                    (machine.initial(ref), 0) if found is None else (found.status, found.version)
                )
                entries = sql.journal_from(machine, rows)
            try:
                planned = plan_compaction(machine, ref, start, entries, current, keep)
            except StoreError as e:
                _log.warning("journal left uncompacted", uid=ref.uid, error=str(e))
                return 0
            if planned is None:
                return 0
            status = sql.status_json(machine, ref, planned.status)
            schema = machine.schema
            conn.execute(
                self._sql.put_snapshot,
                (ref.uid, planned.version, status, schema.version, schema.fingerprint),
            )
            cur = conn.execute(self._sql.drop_journal, (ref.uid, planned.version))
            return cur.rowcount
