"""The PostgreSQL store for asyncio hosts, over psycopg's asyncio pool: the statements, the
rows and the guarantees of :class:`~lifecycle.stores.postgres.PostgresStore`, awaited.

Open it with ``await AsyncPostgresStore.open(url)`` (the pool needs a running loop); use it
with :class:`~lifecycle.AsyncRunner`.
"""

from __future__ import annotations

import asyncio
import contextlib
import select
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from typing import Any

from .._core.errors import Conflict, StoreError
from .._core.machine import Machine
from .._core.observation import Observation
from .._core.refs import ObjectRef
from .._core.transition import Transition
from . import _pgsql as sql
from ._pgsql import (
    AsyncConnectionPool,
    PoolTimeout,
    SynchronousCommit,
    pg_errors,
    psycopg,
    translate,
)
from .base import CommitItem, JournalEntry, Record, Snapshot
from .postgres import migrate as _migrate_sync
from .postgres import schema_version as _schema_version

#: A row the database refuses: ``commit_many`` isolates the item, one commit at a time.
_REFUSED = (pg_errors.IntegrityError, pg_errors.DataError)

__all__ = ["AsyncPostgresStore"]

AsyncConn = psycopg.AsyncConnection[Any]


async def _check_idle(conn: AsyncConn) -> None:
    """As the synchronous store's check: ping only a connection whose socket turned readable
    while idle (the server closed it)."""
    if conn.closed or conn.broken:
        raise psycopg.OperationalError("connection closed")
    readable, _, _ = select.select([conn.fileno()], [], [], 0)
    if readable:
        await conn.execute("")


class AsyncPostgresStore(sql.PgSettings):
    """An :class:`~lifecycle.aio.AsyncStore` on PostgreSQL. Construct with :meth:`open`."""

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
        synchronous_commit: SynchronousCommit | None = None,
        owner: str | None = None,
    ) -> None:
        settings = self._settle(
            url, schema, pool_size, timeout, connect_timeout, lease_seconds, journal,
            synchronous_commit, owner,
        )  # fmt: skip
        self._raw_url = url

        async def configure(c: AsyncConn) -> None:
            for stmt in settings:
                await c.execute(stmt)

        self._pool: AsyncConnectionPool[AsyncConn] = AsyncConnectionPool(
            self.target.conninfo,
            configure=configure,
            check=_check_idle,
            **self._pool_options(pool_size, "lifecycle-async"),
        )

    @classmethod
    async def open(cls, url: str, *, migrate: bool = True, **options: Any) -> AsyncPostgresStore:
        """Connect (a clear :class:`StoreError` naming the host if that fails), migrate the
        schema (or, with ``migrate=False``, refuse one that is not current), open the pool."""
        store = cls(url, **options)
        schema = store.target.schema
        timeout = store._connect_timeout
        if migrate:
            await asyncio.to_thread(_migrate_sync, url, schema=schema, connect_timeout=timeout)
        else:
            found = await asyncio.to_thread(
                _schema_version, url, schema=schema, connect_timeout=timeout
            )
            sql.pending([found or 0], store.target)
            if found != sql.LATEST:
                raise sql.not_migrated(store.target, found)
        await store._pool.open(wait=False)
        return store

    # -- plumbing -----------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def _conn(
        self, what: str, passthrough: tuple[type[Exception], ...] = ()
    ) -> AsyncIterator[AsyncConn]:
        """A pooled connection; failures become :class:`StoreError` (``passthrough``: raised
        as they are)."""
        try:
            async with self._pool.connection(timeout=self._timeout) as conn:
                yield conn
        except PoolTimeout:
            raise await self._unavailable(what) from None
        except StoreError:
            raise
        except psycopg.Error as e:
            if isinstance(e, passthrough):
                raise
            raise translate(self.target, what, e) from None

    async def _unavailable(self, what: str) -> StoreError:
        try:
            conn = await psycopg.AsyncConnection.connect(
                self.target.conninfo,
                autocommit=True,
                connect_timeout=max(2, round(min(self._connect_timeout, 2.0))),
            )
        except psycopg.Error as e:
            return StoreError(f"{translate(self.target, 'connect', e)} ({what} not done)")
        await conn.close()
        return StoreError(
            f"PostgreSQL at {self.target.where}: {what} failed: no pooled connection within "
            f"{self._timeout:g}s (the server answers; the pool is reconnecting or exhausted)"
        )

    @contextlib.contextmanager
    def _decoding(self, what: str) -> Iterator[None]:
        try:
            yield
        except StoreError:
            raise
        except Exception as e:
            raise StoreError(
                f"PostgreSQL at {self.target.where}: cannot read the {what}: {e!r}"
            ) from e

    # -- the protocol -------------------------------------------------------------------
    async def load(self, machine: Machine[Any], ref: ObjectRef) -> Record | None:
        async with self._conn(f"load of {ref.uid}") as conn:
            cur = await conn.execute(self._sql.load, (ref.uid,))
            row = await cur.fetchone()
        if row is None:
            return None
        with self._decoding(f"status of {ref.uid}"):
            return sql.record_from(machine, ref, row[0], row[1])

    async def commit(
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
        async with self._conn(f"commit of {ref.uid} v{expected + 1}") as conn:
            try:
                cur = await conn.execute(self._sql.commit, params)
                row = await cur.fetchone()
            except pg_errors.UniqueViolation as e:
                raise sql.unique_violation(self.target, e, ref.uid, expected) from None
            if row is not None and row[0] == 1:
                return expected + 1
            cur = await conn.execute(self._sql.version_of, (ref.uid,))
            actual = await cur.fetchone()
        raise Conflict(ref.uid, expected, None if actual is None else int(actual[0]))

    async def journal(self, machine: Machine[Any], ref: ObjectRef) -> list[JournalEntry]:
        async with self._conn(f"journal of {ref.uid}") as conn:
            cur = await conn.execute(self._sql.journal, (ref.uid,))
            rows = await cur.fetchall()
        with self._decoding(f"journal of {ref.uid}"):
            return sql.journal_from(machine, rows)

    async def records(self, machine: Machine[Any]) -> list[Record]:
        async with self._conn("scan") as conn:
            cur = await conn.execute(self._sql.records, (machine.name,))
            rows = await cur.fetchall()
        out = []
        for kind, namespace, name, uid, version, status in rows:
            with self._decoding(f"status of {uid}"):
                out.append(
                    sql.record_from(machine, ObjectRef(kind, namespace, name, uid), version, status)
                )
        return out

    async def snapshot(self, machine: Machine[Any], ref: ObjectRef) -> Snapshot | None:
        async with self._conn(f"snapshot of {ref.uid}") as conn:
            cur = await conn.execute(self._sql.snapshot, (ref.uid,))
            row = await cur.fetchone()
        if row is None:
            return None
        with self._decoding(f"snapshot of {ref.uid}"):
            return Snapshot(int(row[0]), machine.load_status(sql.load_json(row[1])))

    async def claim_undelivered(self, limit: int = 1000) -> list[Transition]:
        params = {"me": self.owner, "lease": self._lease, "limit": limit}
        async with self._conn("outbox claim") as conn:
            cur = await conn.execute(self._sql.claim, params)
            rows = await cur.fetchall()
        with self._decoding("outbox"):
            return sql.outbox_from(rows)

    async def mark_delivered(self, ids: Iterable[str]) -> None:
        done = sorted(set(ids))
        if not done:
            return
        async with self._conn("outbox mark") as conn:
            await conn.execute(self._sql.mark, (done,))

    async def undelivered_count(self) -> int:
        async with self._conn("outbox count") as conn:
            cur = await conn.execute(self._sql.undelivered)
            row = await cur.fetchone()
        return 0 if row is None else int(row[0])

    async def close(self) -> None:
        await self._pool.close()

    # -- batches --------------------------------------------------------------------------
    async def load_many(
        self, items: Sequence[tuple[Machine[Any], ObjectRef]]
    ) -> list[Record | None]:
        uids = list(dict.fromkeys(ref.uid for _, ref in items))
        async with self._conn(f"load of {len(uids)} objects") as conn:
            cur = await conn.execute(self._sql.load_many, (uids,))
            rows = await cur.fetchall()
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

    async def commit_many(self, items: Sequence[CommitItem]) -> list[int | StoreError]:
        """As :meth:`PostgresStore.commit_many`: one pipelined transaction in uid order, per
        item compare-and-set, a refused row isolated by committing one by one."""
        out: list[int | StoreError | None] = [None] * len(items)
        ready: list[tuple[int, dict[str, Any]]] = []
        for index, item in enumerate(items):
            try:
                ready.append((index, sql.item_params(item, owner=self.owner, lease=self._lease)))
            except StoreError as e:
                out[index] = e
        ready.sort(key=lambda p: p[1]["uid"])
        if ready:
            try:
                counts = await self._commit_batch([p for _, p in ready], len(items))
            except _REFUSED:
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
            lost = [p["uid"] for (_, p), n in zip(ready, counts, strict=True) if not n]
            actual: dict[str, int] = {}
            if lost:
                async with self._conn("version check") as conn:
                    cur = await conn.execute(self._sql.versions, (lost,))
                    actual = {uid: int(v) for uid, v in await cur.fetchall()}
            for (index, p), n in zip(ready, counts, strict=True):
                out[index] = (
                    p["version"] if n else Conflict(p["uid"], p["expected"], actual.get(p["uid"]))
                )
        return [r for r in out if r is not None]

    async def _commit_batch(self, params: list[dict[str, Any]], size: int) -> list[int]:
        counts: list[int] = []
        async with (
            self._conn(f"commit of {size} objects", _REFUSED) as conn,
            conn.transaction(),
            conn.cursor() as cur,
        ):
            await cur.executemany(self._sql.commit, params, returning=True)
            while True:
                row = await cur.fetchone()
                counts.append(0 if row is None else int(row[0]))
                if not cur.nextset():
                    break
        return counts
