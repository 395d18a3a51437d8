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
import select
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import structlog

from .._core.errors import Conflict, StoreError
from .._core.machine import Machine
from .._core.observation import Observation
from .._core.refs import ObjectRef
from .._core.transition import Transition
from . import _pgsql as sql
from ._pgsql import (
    ConnectionPool,
    PoolTimeout,
    SynchronousCommit,
    Target,
    pg_errors,
    psycopg,
    translate,
)
from .base import CommitItem, JournalEntry, Record, Snapshot, plan_compaction

_log = structlog.get_logger("lifecycle.stores")

#: A row the database refuses: ``commit_many`` isolates the item, one commit at a time.
_REFUSED = (pg_errors.IntegrityError, pg_errors.DataError)

__all__ = ["PostgresStore", "migrate", "schema_version"]


def _connect(target: Target, timeout: float) -> psycopg.Connection[Any]:
    """A direct connection (not pooled), with a clear error if the server cannot be had."""
    try:
        return psycopg.connect(
            target.conninfo,
            autocommit=True,
            connect_timeout=max(2, round(timeout)),
            application_name="lifecycle",
        )
    except psycopg.Error as e:
        raise translate(target, "connect", e) from None


def _migrate(conn: psycopg.Connection[Any], target: Target) -> list[int]:
    schema = target.schema
    with conn.transaction():
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
    """

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        pool_size: int = 4,
        timeout: float = 5.0,
        connect_timeout: float = 5.0,
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
        conn = _connect(self.target, connect_timeout)
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
        finally:
            conn.close()

        def configure(c: psycopg.Connection[Any]) -> None:
            for stmt in settings:
                c.execute(stmt)

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
        self, what: str, passthrough: tuple[type[Exception], ...] = ()
    ) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection; failures become :class:`StoreError` (``passthrough``: raised
        as they are)."""
        try:
            with self._pool.connection(timeout=self._timeout) as conn:
                yield conn
        except PoolTimeout:
            raise self._unavailable(what) from None
        except StoreError:
            raise
        except psycopg.Error as e:
            if isinstance(e, passthrough):
                raise
            raise translate(self.target, what, e) from None

    def _unavailable(self, what: str) -> StoreError:
        """No pooled connection in time: say why, from one direct attempt."""
        try:
            _connect(self.target, min(self._connect_timeout, 2.0)).close()
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

    # -- the protocol -------------------------------------------------------------------
    def load(self, machine: Machine[Any], ref: ObjectRef) -> Record | None:
        with self._conn(f"load of {ref.uid}") as conn:
            row = conn.execute(self._sql.load, (ref.uid,)).fetchone()
        if row is None:
            return None
        with self._decoding(f"status of {ref.uid}"):
            return sql.record_from(machine, ref, row[0], row[1])

    def commit(
        self,
        machine: Machine[Any],
        ref: ObjectRef,
        expected: int,
        status: Any,
        observation: Observation,
        transitions: Sequence[Transition],
    ) -> int:
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
        with self._conn(f"commit of {ref.uid} v{expected + 1}") as conn:
            try:
                row = conn.execute(self._sql.commit, params).fetchone()
            except pg_errors.UniqueViolation as e:
                raise sql.unique_violation(self.target, e, ref.uid, expected) from None
            if row is not None and row[0] == 1:
                return expected + 1
            actual = conn.execute(self._sql.version_of, (ref.uid,)).fetchone()
        raise Conflict(ref.uid, expected, None if actual is None else int(actual[0]))

    def journal(self, machine: Machine[Any], ref: ObjectRef) -> list[JournalEntry]:
        with self._conn(f"journal of {ref.uid}") as conn:
            rows = conn.execute(self._sql.journal, (ref.uid,)).fetchall()
        with self._decoding(f"journal of {ref.uid}"):
            return sql.journal_from(machine, rows)

    def records(self, machine: Machine[Any]) -> Iterator[Record]:
        with self._conn("scan") as conn:
            rows = conn.execute(self._sql.records, (machine.name,)).fetchall()
        for kind, namespace, name, uid, version, status in rows:
            with self._decoding(f"status of {uid}"):
                record = sql.record_from(
                    machine, ObjectRef(kind, namespace, name, uid), version, status
                )
            yield record

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

    def close(self) -> None:
        self._pool.close()

    # -- batches (BatchStore) -----------------------------------------------------------
    def load_many(self, items: Sequence[tuple[Machine[Any], ObjectRef]]) -> list[Record | None]:
        uids = list(dict.fromkeys(ref.uid for _, ref in items))
        with self._conn(f"load of {len(uids)} objects") as conn:
            rows = conn.execute(self._sql.load_many, (uids,)).fetchall()
        found = {uid: (version, status) for uid, version, status in rows}
        out: list[Record | None] = []
        for machine, ref in items:
            row = found.get(ref.uid)
            if row is None:
                out.append(None)
                continue
            with self._decoding(f"status of {ref.uid}"):
                out.append(sql.record_from(machine, ref, row[0], row[1]))
        return out

    def commit_many(self, items: Sequence[CommitItem]) -> list[int | StoreError]:
        """Each item's compare-and-set write, all in one transaction (pipelined: about one
        round trip for the batch). Items are written in uid order, so replicas committing
        overlapping batches lock rows in the same order and cannot deadlock.

        A conflicting item writes nothing and is reported; the rest commit. A row the
        database refuses (a stray journal row, a value it cannot store) rolls the
        transaction back, and the items are then committed one by one so only that item
        fails. A lost connection fails the batch as a whole: nothing of it was written."""
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
                counts = self._commit_batch([p for _, p in ready], len(items))
            except _REFUSED:
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
            lost = [
                items[index].ref.uid for (index, _), n in zip(ready, counts, strict=True) if not n
            ]
            actual = self._versions(lost) if lost else {}
            for (index, params), n in zip(ready, counts, strict=True):
                if n:
                    out[index] = params["version"]
                else:
                    out[index] = Conflict(
                        params["uid"], params["expected"], actual.get(params["uid"])
                    )
        return [r for r in out if r is not None]

    def _commit_batch(self, params: list[dict[str, Any]], size: int) -> list[int]:
        """Raises psycopg's IntegrityError / DataError as they are: commit_many isolates them."""
        counts: list[int] = []
        with (
            self._conn(f"commit of {size} objects", _REFUSED) as conn,
            conn.transaction(),
            conn.cursor() as cur,
        ):
            cur.executemany(self._sql.commit, params, returning=True)
            while True:
                row = cur.fetchone()
                counts.append(0 if row is None else int(row[0]))
                if not cur.nextset():
                    break
        return counts

    def _versions(self, uids: list[str]) -> dict[str, int]:
        with self._conn("version check") as conn:
            rows = conn.execute(self._sql.versions, (uids,)).fetchall()
        return {uid: int(v) for uid, v in rows}

    # -- retention (RetentionStore) -----------------------------------------------------
    def snapshot(self, machine: Machine[Any], ref: ObjectRef) -> Snapshot | None:
        with self._conn(f"snapshot of {ref.uid}") as conn:
            row = conn.execute(self._sql.snapshot, (ref.uid,)).fetchone()
        if row is None:
            return None
        with self._decoding(f"snapshot of {ref.uid}"):
            return Snapshot(int(row[0]), machine.load_status(sql.load_json(row[1])))

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
            row = conn.execute(self._sql.lock_object, (ref.uid,)).fetchone()
            if row is None:
                return 0
            snap = conn.execute(self._sql.snapshot, (ref.uid,)).fetchone()
            rows = conn.execute(self._sql.journal, (ref.uid,)).fetchall()
            with self._decoding(f"journal of {ref.uid}"):
                current = sql.record_from(machine, ref, row[0], row[1])
                start = (
                    (machine.initial(ref), 0)
                    if snap is None
                    else (machine.load_status(sql.load_json(snap[1])), int(snap[0]))
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
            conn.execute(self._sql.put_snapshot, (ref.uid, planned.version, status))
            cur = conn.execute(self._sql.drop_journal, (ref.uid, planned.version))
            return cur.rowcount
