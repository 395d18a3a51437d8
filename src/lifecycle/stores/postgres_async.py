"""The store for many controller replicas: one PostgreSQL database (extra ``postgres``), for
threaded hosts (:class:`~lifecycle.stores.postgres.PostgresStore`) and asyncio hosts
(:class:`~lifecycle.stores.postgres_async.AsyncPostgresStore`, opened with
``await AsyncPostgresStore.open(url)`` -- its pool needs a running loop -- and used with
:class:`~lifecycle.AsyncRunner`).

Each commit is one statement -- so one round trip and one transaction -- that compares and
sets the object's version, appends its journal entry and queues its outbox rows; a lost race
is :class:`~lifecycle.Conflict`. Outbox rows are leased: the committing replica delivers its
fresh events itself, and ``claim_undelivered`` lets any number of replicas share the rest
with ``FOR UPDATE SKIP LOCKED``, one replica per object at a time, in version order. Tables
live in their own PostgreSQL schema (``lifecycle`` unless the URL says ``?schema=NAME``),
created and upgraded by versioned, idempotent migrations (``migrate``, or
``lifecycle db migrate --store URL``).

One source (ADR 0126): ``postgres_async.py`` is written by hand and ``postgres.py`` is
generated from it by ``scripts/async_to_sync.py`` (``make generate``); a test fails when the
generated module is stale.
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import time
import weakref
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from .._core.errors import CommitUnknown, Conflict, StoreError
from .._core.machine import Machine
from .._core.observation import Observation
from .._core.refs import ObjectRef
from .._core.schema import SchemaCount, merge_counts
from .._core.transition import Transition
from .._log import get_logger
from . import _pgio
from . import _pgsql as sql
from ._cache import DEFAULT_CACHE, StatusCache
from ._pgdirect import COMMIT_ROW, Direct
from ._pgio import MARK_DELAY, HistoryReport, LoopMarks, LoopWatch, Lost, RecordList, snapshot_rows
from ._pglisten import Listener
from ._pgsql import (
    AsyncConnectionPool,
    Landed,
    PoolTimeout,
    SynchronousCommit,
    Target,
    pg_errors,
    psycopg,
    translate,
)
from ._rewind import Rewind
from .base import (
    CommitItem,
    Found,
    JournalEntry,
    OutboxSummary,
    Record,
    Snapshot,
    StateCount,
    UpgradeReport,
    check_batch,
    check_query,
    plan_compaction,
)

#: This is the asyncio source: the generated synchronous module keeps the ``else`` side of
#: each ``if ASYNC`` and drops the other (ADR 0126).
ASYNC: Final = True

__all__ = ["AsyncPostgresStore", "HistoryReport", "check_history", "migrate", "schema_version"]

_log = get_logger("lifecycle.stores")

#: A row the database refuses: ``commit_many`` isolates the item, one commit at a time.
_REFUSED = (pg_errors.IntegrityError, pg_errors.DataError)

AsyncConn = psycopg.AsyncConnection[Any]


async def _connect(target: Target, timeout: float | None = None) -> AsyncConn:
    """A direct connection (not pooled), with a clear error if the server cannot be had.
    ``timeout``: the per-host connect timeout, where the URL sets none."""
    extra: dict[str, Any] = {}
    if timeout is not None and "connect_timeout=" not in target.conninfo:
        extra["connect_timeout"] = max(2, round(timeout))
    try:
        return await psycopg.AsyncConnection.connect(
            target.conninfo, autocommit=True, application_name="lifecycle", **extra
        )
    except psycopg.Error as e:
        raise translate(target, "connect", e) from None


async def _migrate(conn: AsyncConn, target: Target) -> list[int]:
    schema = target.schema
    async with conn.transaction():
        await conn.execute("SET LOCAL statement_timeout = 0")  # a migration may take its time
        await conn.execute(*sql.migration_lock_sql(schema))
        for stmt in sql.bookkeeping_sql(schema):
            await conn.execute(stmt)
        cur = await conn.execute(sql.applied_sql(schema))
        applied = [int(v) for (v,) in await cur.fetchall()]
        todo = sql.pending(applied, target)
        for version, description, statements in todo:
            for stmt in statements:
                await conn.execute(stmt)
            await conn.execute(sql.record_sql(schema), (version, description))
    return [v for v, _, _ in todo]


async def migrate(
    url: str, *, schema: str | None = None, connect_timeout: float = 5.0
) -> list[int]:
    """Create or upgrade the store's tables; returns the versions applied (``[]``: already
    current). Idempotent, and safe for several replicas at once (an advisory lock orders
    them); all pending migrations apply in one transaction or none does.

    Args:
        url: a libpq URL, ``?schema=NAME`` allowed.
        schema: the schema to migrate, when the URL does not name one (default ``lifecycle``).
        connect_timeout: seconds to wait for the server, so a wrong host fails fast.

    Returns:
        The migration versions applied, oldest first.

    Raises:
        StoreError: the server cannot be reached or a migration fails (none is applied).
    """
    target = sql.parse_url(url, schema)
    conn = await _connect(target, connect_timeout)
    try:
        return await _migrate(conn, target)
    except psycopg.Error as e:
        raise translate(target, "migration", e) from None
    finally:
        await conn.close()


async def schema_version(
    url: str, *, schema: str | None = None, connect_timeout: float = 5.0
) -> int | None:
    """The store schema's migration version (``None``: never migrated).

    Args:
        url: a libpq URL, ``?schema=NAME`` allowed.
        schema: the schema asked about, when the URL does not name one.
        connect_timeout: seconds to wait for the server, so a wrong host fails fast.

    Returns:
        The latest migration applied, or ``None``.

    Raises:
        StoreError: the server cannot be reached or read.
    """
    target = sql.parse_url(url, schema)
    conn = await _connect(target, connect_timeout)
    try:
        return await _version(conn, target)
    finally:
        await conn.close()


async def _version(conn: AsyncConn, target: Target) -> int | None:
    try:
        found = await conn.execute(sql.exists_sql(), (f'"{target.schema}".schema_migrations',))
        exists = await found.fetchone()
        if exists is None or not exists[0]:
            return None
        cur = await conn.execute(sql.version_sql(target.schema))
        row = await cur.fetchone()
    except psycopg.Error as e:
        raise translate(target, "schema check", e) from None
    return None if row is None else int(row[0])


async def check_history(
    url: str, *, schema: str | None = None, connect_timeout: float = 5.0, acknowledge: bool = False
) -> HistoryReport:
    """The store's epochs and reported rewinds (``lifecycle db check``). Starts a new epoch
    first if the server's history is not the current epoch's (as opening a store does).
    ``acknowledge``: record the history read as reviewed (ADR 0163): the report is then ok
    until another epoch starts or another rewind is reported.

    Args:
        url: a libpq URL, ``?schema=NAME`` allowed.
        schema: the schema checked, when the URL does not name one.
        connect_timeout: seconds to wait for the server, so a wrong host fails fast.
        acknowledge: record the history read as reviewed, so a failover is reported until
            an operator has seen it, once.

    Returns:
        The epochs and rewinds, and what was reviewed.

    Raises:
        StoreError: the server cannot be reached or read.
    """
    target = sql.parse_url(url, schema)
    conn = await _connect(target, connect_timeout)
    statements = sql.Statements(target.schema, journal=True)
    try:
        found = await _version(conn, target)
        if found != sql.LATEST:
            raise sql.not_migrated(target, found)
        async with conn.transaction():
            await conn.execute(statements.epoch_lock, (f"lifecycle-epoch:{target.schema}",))
            cur = await conn.execute(statements.epoch_now)
            row = await cur.fetchone()
            if row is not None and row[1] != row[2]:
                tag = sql.new_epoch_tag(str(row[2]))
                await conn.execute(statements.epoch_add, (tag, "db check"))
            cur = await conn.execute(statements.epochs)
            epochs = [
                (int(a), str(b), str(c), str(d), str(e)) for a, b, c, d, e in await cur.fetchall()
            ]
            cur = await conn.execute(statements.rewinds)
            rewinds = [
                (str(a), int(b), None if c is None else int(c), str(d), str(e), str(f))
                for a, b, c, d, e, f in await cur.fetchall()
            ]
            if acknowledge and epochs:  # under the epoch lock: no epoch starts meanwhile
                review = _pgio.review_statement(target.schema, epochs[-1][0], len(rewinds))
                await conn.execute(review)
            cur = await conn.execute(_pgio.reviewed_query(target.schema))
            row = await cur.fetchone()
    except psycopg.Error as e:
        raise translate(target, "history check", e) from None
    finally:
        await conn.close()
    return HistoryReport(target.where, epochs, rewinds, _pgio.parse_review(row and row[0]))


async def _check_idle(conn: AsyncConn) -> None:
    """Pool check: a connection the server closed while it sat idle (a restart, an idle
    timeout) has a readable socket; ping it then, so the pool replaces it before use. A
    healthy idle connection costs one non-blocking ``select``, not a round trip."""
    if conn.closed or conn.broken:
        raise psycopg.OperationalError("connection closed")
    readable, _, _ = select.select([conn.fileno()], [], [], 0)
    if readable:
        await conn.execute("")


class AsyncPostgresStore(sql.PgSettings):
    """A store on PostgreSQL over a psycopg connection pool: for threads a
    :class:`~lifecycle.stores.Store` (and ``BatchStore``, ``RetentionStore``), for asyncio an
    :class:`~lifecycle.aio.AsyncStore`, opened with ``await AsyncPostgresStore.open(url)``.

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
    on the client side, a hung server included (a watchdog thread severs the connection of
    the synchronous store, the event loop's clock that of the asyncio one). A commit whose
    connection is lost in flight is resolved by its commit token (``?resolve_timeout=``,
    15 s): landed, not written, or :class:`~lifecycle.CommitUnknown`. Event ids carry the
    store's :attr:`epoch` once the database's history changed (a failover): an id never names
    two different events.

    ``cache=N`` keeps the last committed record of up to ``N`` objects in this handle
    (ADR 0134), so an observation that changes nothing makes no round trip and a change makes
    one. It is kept coherent by ``NOTIFY``: every write of an object, whoever makes it (any
    handle, an older release, plain SQL), notifies from a trigger the schema's migrations
    install (ADR 0143), and a listener thread drops what another writer changed. The
    listener checks every second that the trigger is in force; while it is not, the cache is
    unused (reads go to the store) and a warning says why. ``notify`` is kept for
    compatibility: every commit notifies, and ``notify=False`` is refused. On by default, up
    to :data:`~lifecycle.stores.DEFAULT_CACHE` objects (ADR 0155); ``cache=0`` turns
    it off (and starts no listener).

    Args:
        url: a libpq URL (``postgresql://USER:PASSWORD@HOST:PORT/DB``), ``?schema=NAME`` and
            the call and resolve timeouts allowed.
        schema: the schema the tables live in, when the URL does not name one: several
            stores may share a database.
        pool_size: the most connections the pool opens.
        timeout: seconds an operation waits for a free connection before
            :class:`~lifecycle.StoreError`, so an exhausted pool fails instead of hanging.
        connect_timeout: seconds per host to connect, when the URL does not set it.
        lease_seconds: how long this replica owns delivery of the events it committed or
            claimed before another may take them over.
        journal: keep each object's journal; ``False`` keeps records and the outbox only.
        migrate: migrate the schema at open; ``False`` refuses one that is not current, for
            a deployment that migrates as its own step.
        synchronous_commit: PostgreSQL's ``synchronous_commit`` per session; default the
            server's.
        owner: this replica's stable name (its pod name), so a restarted replica takes back
            its own leased events at once; default a random id.
        cache: how many objects' last committed records this handle keeps, so an unchanged
            observation needs no round trip; 0 turns it off (ADR 0134).
        notify: kept for compatibility: every write notifies (ADR 0143).

    Raises:
        ValueError: ``notify=False``, or a bad setting.
        StoreError: the synchronous store cannot connect or migrate at open.
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
        cache: int = DEFAULT_CACHE,
        notify: bool | None = None,
    ) -> None:
        if notify is False:
            raise ValueError(
                "every write of a PostgreSQL store notifies (its schema's trigger, ADR 0143): "
                "notify=False cannot be had"
            )
        settings = self._settle(
            url, schema, pool_size, timeout, connect_timeout, lease_seconds, journal,
            synchronous_commit, owner,
        )  # fmt: skip
        #: the coherent status cache (``cache=N``), suspended until its listener listens
        self.cache = StatusCache(cache, usable=False) if cache else None
        self._listener: Listener | None = None
        self._migrate_first = migrate
        self._watchdog = LoopWatch(self._call_timeout)
        #: delivered-marks held back for the next commit to carry (ADR 0127)
        self._marks = LoopMarks(min(MARK_DELAY, self._lease / 4), self._send_marks)
        #: per pooled connection: where it runs (:meth:`_server_of`)
        self._servers: weakref.WeakKeyDictionary[AsyncConn, tuple[str, str, int]] = (
            weakref.WeakKeyDictionary()
        )
        #: the commit statement, for the synchronous store's path below psycopg's cursor
        self._commit_statement = Direct(self._sql.commit, COMMIT_ROW)

        async def configure(c: AsyncConn) -> None:
            for stmt in settings:
                await c.execute(stmt)
            await c.execute(self._sql.epoch_verify)  # the session's epoch (ADR 0068)

        self._pool: AsyncConnectionPool[AsyncConn] = AsyncConnectionPool(
            self.target.conninfo,
            configure=configure,
            check=_check_idle,
            **self._pool_options(pool_size, "lifecycle-async" if ASYNC else "lifecycle"),
        )
        if not ASYNC:  # a synchronous store opens as it is made, an asyncio one in open()
            self._start()

    @classmethod
    async def open(cls, url: str, *, migrate: bool = True, **options: Any) -> AsyncPostgresStore:
        """Connect (a clear :class:`StoreError` naming the host if that fails), migrate the
        schema (or, with ``migrate=False``, refuse one that is not current), open the pool.

        Args:
            url: a libpq URL, ``?schema=NAME`` allowed.
            migrate: migrate the schema at open; ``False`` refuses one that is not current.
            **options: the constructor's other keyword arguments.

        Returns:
            The open store.

        Raises:
            StoreError: the server cannot be reached, or the schema is not current and
                ``migrate`` is false.
        """
        store = cls(url, migrate=migrate, **options)
        if ASYNC:  # the synchronous store started in __init__
            await store._start()
        return store

    async def _start(self) -> None:
        """Migrate (or refuse a schema that is not current) and read the epoch on a direct
        connection, then open the pool."""
        conn = await _connect(self.target)
        try:
            if self._migrate_first:
                try:
                    await _migrate(conn, self.target)
                except psycopg.Error as e:
                    raise translate(self.target, "migration", e) from None
            else:
                found = await _version(conn, self.target)
                sql.pending([found or 0], self.target)  # refuses a newer schema
                if found != sql.LATEST:
                    raise sql.not_migrated(self.target, found)
            try:
                await self._refresh_epoch(conn)
            except psycopg.Error as e:
                raise translate(self.target, "epoch check", e) from None
        finally:
            await conn.close()
        await self._pool.open(wait=False)
        if self.cache is not None:
            self._listener = Listener(
                self.target.conninfo,
                self._sql.channel,
                self.cache,
                name="lifecycle-listen",
                guard=self._sql.notify_guard,
            )

    # -- plumbing -----------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def _conn(
        self,
        what: str,
        passthrough: tuple[type[Exception], ...] = (),
        *,
        writes: bool = False,
        timeout: float | None = None,
    ) -> AsyncIterator[AsyncConn]:
        """A pooled connection, bounded by the watchdog; failures become
        :class:`StoreError` (``passthrough``: raised as they are). With ``writes``, a
        connection lost while in use raises :class:`Lost`: the write's outcome is unknown.

        ``timeout`` can only shorten the pool's wait: a wait longer than the pool's
        reconnect attempt (which gives up after ``reconnect_timeout`` and starts again only
        when a caller asks anew) would sit in the queue with the server back and the pool
        idle -- a caller that must keep trying asks again instead."""
        key: int | None = None
        severed = False
        server = ("", "", 0)
        try:  # getconn/putconn, not connection(): no commit() of an autocommit session
            conn = await self._pool.getconn(  # on the way back (the pool resets what it must)
                timeout=self._timeout if timeout is None else min(timeout, self._timeout)
            )
        except PoolTimeout:
            raise await self._unavailable(what) from None
        except psycopg.Error as e:
            raise translate(self.target, what, e) from None
        try:
            if writes:
                server = self._servers.get(conn) or self._server_of(conn)
            key = self._watchdog.arm(conn)
            try:
                yield conn
            finally:
                severed = self._watchdog.disarm(key)
        except StoreError:
            raise
        except psycopg.Error as e:
            if isinstance(e, passthrough):
                raise
            if key is not None and (conn.broken or conn.closed):
                if writes:
                    raise Lost(e, server) from None
                if severed:
                    raise self._hung(what) from None
            raise translate(self.target, what, e) from None
        finally:
            await self._pool.putconn(conn)

    def _server_of(self, conn: AsyncConn) -> tuple[str, str, int]:
        """Where ``conn`` runs (host, port, backend pid), read once per connection: a lost
        write is resolved there, and a broken connection no longer tells its backend."""
        info = conn.info
        server = self._servers[conn] = (info.host, str(info.port), info.backend_pid)
        return server

    def _hung(self, what: str) -> StoreError:
        return StoreError(
            f"PostgreSQL at {self.target.where}: {what} failed: no answer within "
            f"{self._call_timeout:g}s (call_timeout; the server hangs or the network is down)"
        )

    async def _unavailable(self, what: str) -> StoreError:
        """No pooled connection in time: say why, from one direct attempt."""
        try:
            conn = await _connect(self.target)
        except StoreError as e:
            return StoreError(f"{e} ({what} not done)")
        await conn.close()
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
    async def _refresh_epoch(self, conn: AsyncConn) -> None:
        """Read the store's epoch; start a new one if the server's history (cluster,
        timeline) is not the current epoch's -- a failover or a restore happened. The session
        of ``conn`` then trusts that epoch: its commits check it without reading the
        server's history (ADR 0068)."""
        async with conn.transaction():
            await conn.execute(self._sql.epoch_lock, (f"lifecycle-epoch:{self.target.schema}",))
            cur = await conn.execute(self._sql.epoch_verify)
            tag, history, current = sql.verified_epoch(self.target, await cur.fetchone())
            if history != current or self._recreated(tag, current):
                self._restored(history, current)
                tag = sql.new_epoch_tag(current)
                await conn.execute(self._sql.epoch_add, (tag, self.owner))
                await conn.execute(self._sql.epoch_verify)
        self._history_seen = current
        old = self.epoch
        self._new_epoch(old, tag, current)
        if tag != old and self._acked:
            for chunk in self._acks_to_verify():
                cur = await conn.execute(
                    self._sql.tokens, ([c[0] for c in chunk], [c[1] for c in chunk])
                )
                for rewind in self._verified(chunk, await cur.fetchall()):
                    await self._report(conn, rewind)

    async def _check_rewind(self, conn: AsyncConn | None, uid: str, found: int | None) -> None:
        rewind = self._rewound(uid, found)
        if rewind is not None and conn is not None:
            await self._report(conn, rewind)

    async def _report(self, conn: AsyncConn, rewind: Rewind) -> None:
        """Record a rewind in the store, for ``lifecycle db check`` (best effort)."""
        with contextlib.suppress(psycopg.Error):
            await conn.execute(
                self._sql.rewind_add,
                (rewind.uid, rewind.acknowledged, rewind.found, rewind.epoch, self.owner),
            )

    async def _resolve(
        self, writes: Sequence[dict[str, Any]], lost: Lost
    ) -> list[tuple[Landed, int | None]]:
        """Whether each write of a commit whose connection was lost landed, by its token:
        reconnect (the pool moves on to another host if it must), end the old backend if it
        is still there, read the tokens. ``(outcome, stored version)`` per write; raises
        :class:`CommitUnknown` if that cannot be found out within ``resolve_timeout``."""
        uids = [w["uid"] for w in writes]
        versions = [w["version"] for w in writes]
        deadline = time.monotonic() + self._resolve_timeout
        why: Exception = translate(self.target, "commit", lost.error)
        while True:
            left = deadline - time.monotonic()
            try:
                async with self._conn("commit resolution", timeout=max(0.1, left)) as conn:
                    if await self._ended(conn, lost):
                        cur = await conn.execute(self._sql.tokens, (uids, versions))
                        return sql.resolved(await cur.fetchall(), writes)
            except StoreError as e:
                why = e
            if time.monotonic() >= deadline:
                raise sql.unresolved(uids, why, self._resolve_timeout)
            await asyncio.sleep(min(0.2, max(0.0, deadline - time.monotonic())))

    async def _ended(self, conn: AsyncConn, lost: Lost) -> bool:
        """Whether the backend that ran the lost write is gone (ended now if it lingers on
        this server): only then can its outcome be read."""
        host, port, pid = lost.server
        if (conn.info.host, str(conn.info.port)) != (host, port) or not pid:
            return True  # another server (a failover): the old one's backend is not here
        cur = await conn.execute(self._sql.end_backend, (2000, pid))
        row = await cur.fetchone()
        return row is None or bool(row[0])

    # -- the protocol -------------------------------------------------------------------
    async def load(self, machine: Machine[Any], ref: ObjectRef) -> Record | None:
        """The stored record, from the status cache when it holds the object.

        Args:
            machine: the machine that writes the object; an older record comes back upcast.
            ref: the object; its uid is the key.

        Returns:
            The record, or ``None`` for an object never committed.

        Raises:
            IdentityMismatch: the uid is stored for another object.
            StoreError: the server cannot be read.
        """
        cache = self.cache
        if cache is None:
            return await self._load(machine, ref)
        if self._listener is not None:
            self._listener.check()
        record = cache.get(machine, ref)
        if record is None:
            with cache.flight(machine, ref) as flight:
                record = flight.record = await self._load(machine, ref)
        return record

    async def _load(self, machine: Machine[Any], ref: ObjectRef) -> Record | None:
        async with self._conn(f"load of {ref.uid}") as conn:
            cur = await conn.execute(self._sql.load, (ref.uid,))
            row = await cur.fetchone()
            if ref.uid in self._acked:
                await self._check_rewind(conn, ref.uid, None if row is None else int(row[0]))
        if row is None:
            return None
        sql.check_row_identity(machine, ref, row[2:])
        with self._decoding(f"status of {ref.uid}"):
            return sql.record_from(machine, ref, row[0], row[1], row[6], row[7])

    async def commit(
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
        could not be resolved, and :class:`StoreError` for a write that certainly failed.

        Args:
            machine: the machine that writes the object.
            ref: the object.
            expected: the version the caller loaded (0 for a new object).
            status: the new status.
            observation: what produced it, journalled.
            transitions: events, then link intents, written to the outbox in the same statement.

        Returns:
            The new version, ``expected + 1``.

        Raises:
            Conflict: the stored version is not ``expected``; nothing was written.
            IdentityMismatch: the uid is stored for another object; nothing was written.
            CommitUnknown: the connection was lost and whether the write landed is unknown.
            StoreError: the write certainly failed.
        """
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
        stamped = params["epoch"] is not None
        if not stamped:  # no events: still written only on a session of this handle's epoch
            params["epoch"] = self.epoch  # (ADR 0127: else a lost write can go unreported)
        marks = self._marks.riding()
        try:
            if self.cache is None:
                return await self._commit(machine, ref, expected, params, what, marks, stamped)
            with self.cache.flight(machine, ref) as flight:
                version = await self._commit(machine, ref, expected, params, what, marks, stamped)
                flight.record = Record(ref, machine.name, status, version)
            return version
        finally:
            self._marks.restore(marks)  # the commit did not carry them (harmless if it did)

    async def _commit(
        self,
        machine: Machine[Any],
        ref: ObjectRef,
        expected: int,
        params: dict[str, Any],
        what: str,
        marks: list[str],
        stamped: bool,
    ) -> int:
        """:meth:`commit`'s attempts; ``marks`` ride inside the first one's statement (its
        round trip and its transaction) and are emptied once it answered. ``stamped``:
        the events carry the epoch (else it is the handle's, renewed with it)."""
        for _ in range(3):
            try:
                async with self._conn(what, writes=True) as conn:
                    try:  # the marks ride in the statement: one round trip, one transaction
                        args = sql.commit_args(params, marks)
                        if ASYNC:
                            cur = await conn.execute(self._sql.commit, args, prepare=True)
                            row = await cur.fetchone()
                        else:  # through libpq itself: the client's share (ADR 0167)
                            row = self._commit_statement.first_row(conn, args)
                        marks.clear()
                    except pg_errors.UniqueViolation as e:
                        raise sql.unique_violation(self.target, e, ref.uid, expected) from None
                    if row is not None and row[0] == 1:
                        self._acknowledge(ref.uid, expected + 1, params["token"])
                        return expected + 1
                    if row is not None and not row[1]:  # the epoch changed, or is unverified
                        await self._refresh_epoch(conn)
                        if not stamped:
                            params["epoch"] = self.epoch
                            continue
                        if params["epoch"] == self.epoch:
                            continue
                        raise Conflict(ref.uid, expected, expected)
                    if row is not None and row[2] is not None and int(row[2]) != expected:
                        ident: Sequence[Any] | None = row[2:]  # the stored row, same statement
                    else:  # raced by a commit newer than the statement's snapshot: read it
                        cur = await conn.execute(self._sql.identity_of, (ref.uid,))
                        ident = await cur.fetchone()
                    actual = None if ident is None else int(ident[0])
                    if ident is not None:
                        sql.check_row_identity(machine, ref, ident[1:])
                    await self._check_rewind(conn, ref.uid, actual)
                raise Conflict(ref.uid, expected, actual)
            except Lost as lost:
                (outcome, stored), *_ = await self._resolve([params], lost)
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

    async def journal(self, machine: Machine[Any], ref: ObjectRef) -> list[JournalEntry]:
        """An object's journal, oldest first (after its snapshot, if retention made one).

        Args:
            machine: the machine that writes the object; old entries come back upcast.
            ref: the object.

        Returns:
            The entries; empty for an object never committed.

        Raises:
            IdentityMismatch: the uid is stored for another object.
        """
        async with self._conn(f"journal of {ref.uid}") as conn:
            await self._check_stored_identity(conn, machine, ref)
            cur = await conn.execute(self._sql.journal, (ref.uid,))
            rows = await cur.fetchall()
        with self._decoding(f"journal of {ref.uid}"):
            return sql.journal_from(machine, rows)

    async def records(self, machine: Machine[Any]) -> RecordList:
        """Every record of one machine, read in one query.

        Args:
            machine: the machine whose objects are listed.

        Returns:
            The records, by uid.
        """
        async with self._conn("scan") as conn:
            cur = await conn.execute(self._sql.records, (machine.name,))
            rows = await cur.fetchall()
        out = []
        for kind, namespace, name, uid, version, status, sv, fp in rows:
            ref = ObjectRef(kind, namespace, name, uid)
            with self._decoding(f"status of {uid}"):
                out.append(sql.record_from(machine, ref, version, status, sv, fp))
        if ASYNC:
            return out
        else:
            return iter(out)

    # -- questions (FindStore, ADR 0159) ---------------------------------------------------
    async def find(
        self,
        machine: Machine[Any],
        *,
        state: str | None = None,
        entered_before: datetime | None = None,
        older_than: timedelta | float | None = None,
        limit: int = 100,
    ) -> list[Found]:
        """``machine``'s objects (in ``state``, in it since before a time), oldest first: one
        range of the ``objects_by_state_age`` index when ``state`` is given.

        Args:
            machine: the machine whose objects are listed.
            state: only objects in this state.
            entered_before: only objects in their state since before this time.
            older_than: only objects in their state for longer than this.
            limit: the most objects returned, a bound on one answer's memory.

        Returns:
            The objects found, oldest first.

        Raises:
            InvalidQuery: an unknown state or a contradictory bound.
            StoreError: the server cannot be read.
        """
        query = check_query(machine, state, entered_before, older_than, limit)
        text, params = sql.find_sql(self.target.schema, query)
        async with self._conn("find") as conn:
            cur = await conn.execute(text, params)
            rows = await cur.fetchall()
        out = []
        for kind, namespace, name, uid, version, status, sv, fp, entered in rows:
            ref = ObjectRef(kind, namespace, name, uid)
            with self._decoding(f"status of {uid}"):
                record = sql.record_from(machine, ref, version, status, sv, fp)
            out.append(Found(record, entered.astimezone(UTC)))
        return out

    async def state_counts(self) -> list[StateCount]:
        """Per machine and state: how many objects, and since when the oldest (one grouped
        read of the ``objects_by_state_age`` index).

        Returns:
            One count per machine and state.
        """
        async with self._conn("state counts") as conn:
            cur = await conn.execute(sql.state_counts_sql(self.target.schema))
            rows = await cur.fetchall()
        return [StateCount(m, s, n, at.astimezone(UTC)) for m, s, n, at in rows]

    # -- record schemas (SchemaStore, ADR 0088) ---------------------------------------------
    async def schema_versions(self) -> list[SchemaCount]:
        """Per machine, kind of record, version and fingerprint: how many, one example uid
        (one aggregate query).

        Returns:
            One count per machine, kind of record, schema version and fingerprint.
        """
        async with self._conn("schema report") as conn:
            cur = await conn.execute(self._sql.schema_versions)
            rows = await cur.fetchall()
        return merge_counts(rows)

    async def upgrade(self, machine: Machine[Any], *, batch: int = 500) -> UpgradeReport:
        """Rewrite ``machine``'s statuses, journal entries and snapshots below its schema
        version, ``batch`` rows per transaction (see :class:`~lifecycle.stores.SchemaStore`):
        each batch is read, upcast here, then written back compared-and-set on the version
        and schema read, so a concurrent commit wins and that record is skipped.

        Args:
            machine: the machine whose stored rows are upcast.
            batch: rows per transaction: a bound on how long one holds its row locks.

        Returns:
            How many statuses, entries and snapshots were rewritten, and how many skipped.
        """
        check_batch(batch)
        v = machine.schema.version
        kinds = (
            (self._sql.old_statuses, self._sql.upgrade_status, sql.status_rows),
            (self._sql.old_entries, self._sql.upgrade_entry, sql.entry_rows),
            (self._sql.old_snapshots, self._sql.upgrade_snapshot, snapshot_rows),
        )
        done: list[tuple[int, int]] = []
        for scan, update, convert in kinds:
            written = skipped = 0
            after: tuple[str, int] = ("", -1)
            while True:
                async with self._conn("upgrade scan") as conn:
                    cur = await conn.execute(scan, (machine.name, v, *after, batch))
                    rows = await cur.fetchall()
                if not rows:
                    break
                after = (str(rows[-1][0]), int(rows[-1][1]))
                params = convert(machine, rows)
                async with self._conn("upgrade") as conn, conn.transaction():
                    for p in params:
                        cur = await conn.execute(update, p)
                        written += cur.rowcount
                        skipped += 1 - cur.rowcount
            done.append((written, skipped))
        return UpgradeReport(
            machine.name, done[0][0], done[1][0], done[2][0], sum(s for _, s in done)
        )

    async def claim_undelivered(self, limit: int = 1000) -> list[Transition]:
        """Lease up to ``limit`` undelivered events -- this replica's own, unclaimed ones and
        expired leases -- object by object: an object whose first pending event another
        replica holds (or is claiming right now) is skipped, so each object's events go out
        through one replica at a time, in version order.

        Args:
            limit: the most rows returned, a bound on what one round holds in memory.

        Returns:
            The rows, each object's in commit order.

        Raises:
            StoreError: the server cannot be written (a claim is a lease, written).
        """
        await self._send_held()  # what this store delivered is not claimed again
        params = {"me": self.owner, "lease": self._lease, "limit": limit}
        async with self._conn("outbox claim") as conn:
            cur = await conn.execute(self._sql.claim, params)
            rows = await cur.fetchall()
        with self._decoding("outbox"):
            found = sql.outbox_from(rows)
        # nor what a commit is carrying the marks of right now (its DELETE may not have run)
        riding = self._marks.in_flight()
        return [t for t in found if t.id not in riding] if riding else found

    async def mark_delivered(self, ids: Iterable[str]) -> None:
        """Mark events delivered: held back for this store's next commit to carry in its
        round trip, sent on their own within ``MARK_DELAY`` (2 s, a quarter of the lease at
        most) if none comes, and before a claim, a count or :meth:`close` (ADR 0127). A mark
        is not a durable write (ADR 0062): lost, the events are delivered again, same ids.

        Args:
            ids: the transitions' ids; an unknown or already removed id is ignored.
        """
        self._marks.add(ids)

    async def _send_marks(self, ids: list[str]) -> None:
        """Mark ``ids`` on their own. A failure is logged, as a failed mark always was: those
        events will be delivered again, under their ids."""
        try:
            async with self._conn("outbox mark") as conn:
                await conn.execute(self._sql.mark, (ids,))
        except StoreError as e:
            _log.warning("could not mark events delivered; they will repeat", error=str(e))

    async def _send_held(self) -> None:
        """Send the held marks, after any the background is sending: then every event this
        handle delivered is marked."""
        async with self._marks.sending:
            ids = self._marks.take()
            if ids:
                await self._send_marks(ids)

    async def flush_marks(self) -> None:
        """Send the delivery marks held back (ADR 0127) now: a process may exit right after
        (a runner's ``close`` calls it, ADR 0135). A failure is logged: the events repeat."""
        await self._send_held()

    async def undelivered_count(self) -> int:
        """Events and link intents committed and not yet delivered (held marks sent first).

        Returns:
            How many outbox rows wait.
        """
        await self._send_held()
        async with self._conn("outbox count") as conn:
            cur = await conn.execute(self._sql.undelivered)
            row = await cur.fetchone()
        return 0 if row is None else int(row[0])

    async def outbox_summary(self) -> OutboxSummary:
        """How many outbox rows wait, and when the oldest was committed (marks held back are
        sent first, so delivered rows are not counted).

        Returns:
            The count and the oldest row's commit time.
        """
        await self._send_held()
        async with self._conn("outbox summary") as conn:
            cur = await conn.execute(self._sql.outbox_summary)
            row = await cur.fetchone()
        return OutboxSummary(0, None) if row is None else OutboxSummary(int(row[0]), row[1])

    async def settle_cache(self, timeout: float = 5.0) -> bool:
        """Wait until every commit made before this call (by any writer) has reached the
        status cache: True when it has (or there is no cache), False when the listener is not
        listening or ``timeout`` seconds passed. A barrier: tests and hand-overs use it.

        Args:
            timeout: the most seconds waited.

        Returns:
            ``True`` when every earlier commit reached the cache (or there is no cache),
            ``False`` when the wait timed out or the listener is not listening.
        """
        listener = self._listener
        if self.cache is None:
            return True
        deadline = time.monotonic() + timeout
        while listener is None or not listener.listening.is_set():
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.01)
            listener = self._listener
        token, arrived = listener.barrier()
        try:
            async with self._conn("cache barrier") as conn:
                await conn.execute(self._sql.notify, (self._sql.channel, "sync " + token))
            while not arrived.is_set():
                if time.monotonic() >= deadline:
                    return False
                await asyncio.sleep(0.002)
        finally:
            listener.forget(token)
        return listener.listening.is_set()

    async def close(self) -> None:
        self._marks.close()
        await self._send_held()
        self._watchdog.close()
        if self._listener is not None:
            if ASYNC:  # the thread ends within a tick; the event loop does not wait for it
                self._listener.stop()
            else:
                self._listener.close()
        await self._pool.close()

    # -- batches (BatchStore) -----------------------------------------------------------
    async def load_many(
        self, items: Sequence[tuple[Machine[Any], ObjectRef]]
    ) -> list[Record | None]:
        """Many objects' records in one round trip; cached ones from the status cache.

        Args:
            items: ``(machine, ref)`` pairs.

        Returns:
            A record or ``None`` per item, in order.

        Raises:
            IdentityMismatch: an item's uid is stored for another object.
            StoreError: the server cannot be read.
        """
        cache = self.cache
        if cache is None:
            return await self._load_many(items)
        if self._listener is not None:
            self._listener.check()
        with cache.reads(items) as batch:
            if batch.missing:
                batch.read(await self._load_many(batch.missing))
        return batch.records

    async def _load_many(
        self, items: Sequence[tuple[Machine[Any], ObjectRef]]
    ) -> list[Record | None]:
        uids = list(dict.fromkeys(ref.uid for _, ref in items))
        async with self._conn(f"load of {len(uids)} objects") as conn:
            cur = await conn.execute(self._sql.load_many, (uids,))
            found = {row[0]: row for row in await cur.fetchall()}
            for uid in uids:
                if uid in self._acked:
                    row = found.get(uid)
                    await self._check_rewind(conn, uid, None if row is None else int(row[1]))
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

    async def commit_many(self, items: Sequence[CommitItem]) -> list[int | StoreError]:
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
        :class:`CommitUnknown`.

        Args:
            items: the writes; items of one object are applied in order.

        Returns:
            Per item, the new version, or the :class:`~lifecycle.Conflict` or
            :class:`~lifecycle.StoreError` that refused it.

        Raises:
            IdentityMismatch: an item's uid is stored for another object; nothing written.
            CommitUnknown: the connection was lost in flight; the batch may have landed.
            StoreError: the batch as a whole failed; nothing of it was written.
        """
        if self.cache is None:
            return await self._commit_many(items)
        with self.cache.commits(items) as batch:
            batch.results = await self._commit_many(items)
        return batch.results

    async def _commit_many(self, items: Sequence[CommitItem]) -> list[int | StoreError]:
        out: list[int | StoreError | None] = [None] * len(items)
        ready: list[tuple[int, dict[str, Any]]] = []
        for index, item in enumerate(items):
            try:
                p = sql.item_params(item, owner=self.owner, lease=self._lease)
                if p["epoch"] is None:  # no events: this handle's epoch all the same
                    p["epoch"] = self.epoch
                ready.append((index, p))
            except StoreError as e:
                out[index] = e
        ready.sort(key=lambda p: p[1]["uid"])  # stable: one object's items keep their order
        if ready:
            try:
                counts = await self._commit_batch(items, ready)
            except _REFUSED:
                await self._check_identities(items)  # refuse an impostor before any write
                for index, _ in ready:
                    item = items[index]
                    try:
                        out[index] = await self.commit(
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
                    self.target, writes, await self._resolve(writes, lost), lost.error
                )
            for (index, p), n in zip(ready, counts, strict=True):
                if isinstance(n, StoreError):
                    out[index] = n
                else:
                    out[index] = p["version"]
                    self._acknowledge(p["uid"], p["version"], p["token"])
        return [r for r in out if r is not None]

    async def _commit_batch(
        self, items: Sequence[CommitItem], ready: list[tuple[int, dict[str, Any]]]
    ) -> list[int | StoreError]:
        """Per item its version (written) or its refusal. Raises psycopg's IntegrityError /
        DataError as they are (commit_many isolates them), :class:`Lost` for a lost
        connection, and refuses the whole batch -- nothing written -- on an identity mismatch.

        One round trip: the batch's stored rows locked in uid order, then one statement
        writing every item from JSON arrays (:attr:`Statements.commit_batch`), pipelined
        up to one sync: one implicit transaction. A batch holding one object twice is
        written item by item."""
        params = [p for _, p in ready]
        uids = [p["uid"] for p in params]
        if len(set(uids)) < len(uids):
            return await self._commit_each(items, ready)
        batch = sql.batch_params(params, owner=self.owner, lease=self._lease)
        marks = self._marks.riding()
        try:
            async with self._conn(f"commit of {len(items)} objects", _REFUSED, writes=True) as conn:
                async with conn.pipeline():  # one implicit transaction up to the pipeline's sync
                    if marks:  # the held delivered-marks ride along (ADR 0127)
                        await conn.execute(self._sql.mark_riding, (marks,))
                    await conn.execute(self._sql.lock_many, (sql.json_texts(uids),))
                    cur = conn.cursor()
                    await cur.execute(self._sql.commit_batch, batch, binary=True)
                marks.clear()
                rows = await cur.fetchall()
        finally:
            self._marks.restore(marks)
        counts, stored, refused = sql.batch_counts(params, rows)
        if refused:
            await self._check_identities(items)  # raises the IdentityMismatch
            raise StoreError(f"PostgreSQL at {self.target.where}: batch refused (identity)")
        return await self._settle_batch(params, counts, stored)

    async def _settle_batch(
        self,
        params: list[dict[str, Any]],
        counts: list[tuple[int, bool]],
        stored: dict[str, Sequence[Any]],
    ) -> list[int | StoreError]:
        """Per item its version or :class:`Conflict`; a refused epoch refreshes it, a
        conflict behind an acknowledged version is a rewind."""
        out = sql.batch_results(params, counts, stored)
        if not all(ok for _, ok in counts):
            async with self._conn("epoch check") as conn:
                await self._refresh_epoch(conn)
        for p, result in zip(params, out, strict=True):
            if isinstance(result, Conflict) and result.actual != p["expected"]:
                await self._check_rewind(None, p["uid"], result.actual)
        return out

    async def _commit_each(
        self, items: Sequence[CommitItem], ready: list[tuple[int, dict[str, Any]]]
    ) -> list[int | StoreError]:
        """:meth:`_commit_batch` for a batch holding an object more than once: each item's
        commit statement in turn (pipelined), so an object's later item sees its earlier."""
        params = [p for _, p in ready]
        counts: list[tuple[int, bool]] = []
        async with (
            self._conn(f"commit of {len(items)} objects", _REFUSED, writes=True) as conn,
            conn.transaction(),
        ):
            async with conn.cursor() as cur:
                args = [sql.commit_args(p) for p in params]
                await cur.executemany(self._sql.commit, args, returning=True)
                while True:
                    row = await cur.fetchone()
                    counts.append((0, True) if row is None else (int(row[0]), bool(row[1])))
                    if not cur.nextset():
                        break
            missed = [p["uid"] for p, (n, _) in zip(params, counts, strict=True) if not n]
            stored: dict[str, Any] = {}
            if missed:
                cur2 = await conn.execute(self._sql.versions, (missed,))
                stored = {str(r[0]): r for r in await cur2.fetchall()}
                for (index, p), (n, _) in zip(ready, counts, strict=True):
                    if not n and p["uid"] in stored:  # raising here rolls the batch back
                        sql.check_row_identity(items[index].machine, items[index].ref,
                                               stored[p["uid"]][2:])  # fmt: skip
        return await self._settle_batch(params, counts, stored)

    async def _check_identities(self, items: Sequence[CommitItem]) -> None:
        uids = list(dict.fromkeys(item.ref.uid for item in items))
        async with self._conn("identity check") as conn:
            cur = await conn.execute(self._sql.versions, (uids,))
            stored = {str(r[0]): r for r in await cur.fetchall()}
        for item in items:
            row = stored.get(item.ref.uid)
            if row is not None:
                sql.check_row_identity(item.machine, item.ref, row[2:])

    async def _check_stored_identity(
        self, conn: AsyncConn, machine: Machine[Any], ref: ObjectRef
    ) -> None:
        cur = await conn.execute(self._sql.identity_of, (ref.uid,))
        ident = await cur.fetchone()
        if ident is not None:
            sql.check_row_identity(machine, ref, ident[1:])

    # -- retention (RetentionStore) -----------------------------------------------------
    async def snapshot(self, machine: Machine[Any], ref: ObjectRef) -> Snapshot | None:
        """An object's snapshot, where folding its journal starts.

        Args:
            machine: the machine that writes the object.
            ref: the object.

        Returns:
            The snapshot, or ``None`` when retention never compacted the object.
        """
        async with self._conn(f"snapshot of {ref.uid}") as conn:
            await self._check_stored_identity(conn, machine, ref)
            cur = await conn.execute(self._sql.snapshot, (ref.uid,))
            row = await cur.fetchone()
        if row is None:
            return None
        with self._decoding(f"snapshot of {ref.uid}"):
            return sql.snapshot_from(machine, row)

    async def compact(
        self, machine: Machine[Any], *, keep: int = 0, refs: Iterable[ObjectRef] | None = None
    ) -> int:
        """Drop all but the last ``keep`` journal entries of each object behind a snapshot.

        One transaction per object, holding its row lock (a concurrent commit of that object
        waits for it); the snapshot is the fold of the dropped entries, and the object is
        left alone if its journal does not fold to its status. Returns how many entries were
        dropped. Without ``refs``: every object of ``machine`` with more than ``keep``.

        Args:
            machine: the machine whose objects are compacted.
            keep: the newest entries kept per object, for ``lifecycle replay`` and audits.
            refs: only these objects; by default every object of the machine.

        Returns:
            How many entries were dropped.

        Raises:
            ValueError: a negative ``keep``.
        """
        if keep < 0:
            raise ValueError(f"keep must not be negative, got {keep}")
        if not self._keep_journal:
            return 0
        if refs is None:
            async with self._conn("compaction scan") as conn:
                cur = await conn.execute(self._sql.compactable, (machine.name, keep))
                rows = await cur.fetchall()
            chosen = [ObjectRef(kind, ns, name, uid) for kind, ns, name, uid in rows]
        else:
            chosen = list(refs)
        dropped = 0
        for ref in chosen:
            dropped += await self._compact_one(machine, ref, keep)
        return dropped

    async def _compact_one(self, machine: Machine[Any], ref: ObjectRef, keep: int) -> int:
        async with self._conn(f"compaction of {ref.uid}") as conn, conn.transaction():
            await self._check_stored_identity(conn, machine, ref)
            cur = await conn.execute(self._sql.lock_object, (ref.uid,))
            row = await cur.fetchone()
            if row is None:
                return 0
            cur = await conn.execute(self._sql.snapshot, (ref.uid,))
            snap = await cur.fetchone()
            cur = await conn.execute(self._sql.journal, (ref.uid,))
            rows = await cur.fetchall()
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
            await conn.execute(
                self._sql.put_snapshot,
                (ref.uid, planned.version, status, schema.version, schema.fingerprint),
            )
            cur = await conn.execute(self._sql.drop_journal, (ref.uid, planned.version))
            return cur.rowcount
