"""The PostgreSQL store for asyncio hosts, over psycopg's asyncio pool: the statements, the
rows and the guarantees of :class:`~lifecycle.stores.postgres.PostgresStore`, awaited.

Open it with ``await AsyncPostgresStore.open(url)`` (the pool needs a running loop); use it
with :class:`~lifecycle.AsyncRunner`.
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import time
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from typing import Any

from .._core.errors import CommitUnknown, Conflict, StoreError
from .._core.machine import Machine
from .._core.observation import Observation
from .._core.refs import ObjectRef
from .._core.schema import SchemaCount, merge_counts
from .._core.transition import Transition
from .._log import get_logger
from . import _pgsql as sql
from ._pgsql import (
    AsyncConnectionPool,
    Landed,
    PoolTimeout,
    SynchronousCommit,
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
)
from .postgres import Lost, _snapshot_rows, sever
from .postgres import migrate as _migrate_sync
from .postgres import schema_version as _schema_version

_log = get_logger("lifecycle.stores")

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
    """An :class:`~lifecycle.aio.AsyncStore` on PostgreSQL. Construct with :meth:`open`.

    The bounds, the commit tokens, the epochs and the identity rule of
    :class:`~lifecycle.stores.postgres.PostgresStore` hold here too: a call that outlives
    ``call_timeout`` has its connection severed on the event loop's clock."""

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
            await c.execute(self._sql.epoch_verify)  # the session's epoch (ADR 0068)

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
        async with store._conn("epoch check") as conn:
            await store._refresh_epoch(conn)
        return store

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
        """A pooled connection, severed if the call outlives ``call_timeout``; failures
        become :class:`StoreError` (``passthrough``: raised as they are). With ``writes``, a
        connection lost while in use raises :class:`Lost`: the write's outcome is unknown."""
        conn: AsyncConn | None = None
        severed: list[bool] = []
        server = ("", "", 0)
        try:
            async with self._pool.connection(
                timeout=self._timeout if timeout is None else timeout
            ) as conn:
                if writes:
                    info = conn.info
                    server = (info.host, str(info.port), info.backend_pid)
                watched = conn

                def hung() -> None:
                    severed.append(True)
                    sever(watched)

                handle = asyncio.get_running_loop().call_later(self._call_timeout, hung)
                try:
                    yield conn
                finally:
                    handle.cancel()
        except PoolTimeout:
            raise await self._unavailable(what) from None
        except StoreError:
            raise
        except psycopg.Error as e:
            if isinstance(e, passthrough):
                raise
            if conn is not None and (conn.broken or conn.closed):
                if writes:
                    raise Lost(e, server) from None
                if severed:
                    raise StoreError(
                        f"PostgreSQL at {self.target.where}: {what} failed: no answer within "
                        f"{self._call_timeout:g}s (call_timeout; the server hangs or the "
                        "network is down)"
                    ) from None
            raise translate(self.target, what, e) from None

    async def _unavailable(self, what: str) -> StoreError:
        try:
            conn = await psycopg.AsyncConnection.connect(self.target.conninfo, autocommit=True)
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

    # -- epochs, rewinds and unknown outcomes -------------------------------------------
    async def _refresh_epoch(self, conn: AsyncConn) -> None:
        """As :meth:`PostgresStore._refresh_epoch`."""
        async with conn.transaction():
            await conn.execute(self._sql.epoch_lock, (f"lifecycle-epoch:{self.target.schema}",))
            cur = await conn.execute(self._sql.epoch_verify)
            tag, history, current = sql.verified_epoch(self.target, await cur.fetchone())
            if history != current:
                tag = sql.new_epoch_tag(current)
                await conn.execute(self._sql.epoch_add, (tag, self.owner))
                await conn.execute(self._sql.epoch_verify)
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

    async def _report(self, conn: AsyncConn, rewind: sql.Rewind) -> None:
        """Record a rewind in the store, for ``lifecycle db check`` (best effort)."""
        with contextlib.suppress(psycopg.Error):
            await conn.execute(
                self._sql.rewind_add,
                (rewind.uid, rewind.acknowledged, rewind.found, rewind.epoch, self.owner),
            )

    async def _resolve(
        self, writes: Sequence[dict[str, Any]], lost: Lost
    ) -> list[tuple[Landed, int | None]]:
        """As :meth:`PostgresStore._resolve`."""
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
        host, port, pid = lost.server
        if (conn.info.host, str(conn.info.port)) != (host, port) or not pid:
            return True
        cur = await conn.execute(self._sql.end_backend, (2000, pid))
        row = await cur.fetchone()
        return row is None or bool(row[0])

    # -- the protocol -------------------------------------------------------------------
    async def load(self, machine: Machine[Any], ref: ObjectRef) -> Record | None:
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
        """As :meth:`PostgresStore.commit`."""
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
                async with self._conn(what, writes=True) as conn:
                    try:
                        cur = await conn.execute(self._sql.commit, params)
                        row = await cur.fetchone()
                    except pg_errors.UniqueViolation as e:
                        raise sql.unique_violation(self.target, e, ref.uid, expected) from None
                    if row is not None and row[0] == 1:
                        self._acknowledge(ref.uid, expected + 1, params["token"])
                        return expected + 1
                    if row is not None and not row[1]:  # the epoch changed, or is unverified
                        await self._refresh_epoch(conn)
                        if params["epoch"] is None or params["epoch"] == self.epoch:
                            continue
                        raise Conflict(ref.uid, expected, expected)
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
        async with self._conn(f"journal of {ref.uid}") as conn:
            cur = await conn.execute(self._sql.identity_of, (ref.uid,))
            ident = await cur.fetchone()
            if ident is not None:
                sql.check_row_identity(machine, ref, ident[1:])
            cur = await conn.execute(self._sql.journal, (ref.uid,))
            rows = await cur.fetchall()
        with self._decoding(f"journal of {ref.uid}"):
            return sql.journal_from(machine, rows)

    async def records(self, machine: Machine[Any]) -> list[Record]:
        async with self._conn("scan") as conn:
            cur = await conn.execute(self._sql.records, (machine.name,))
            rows = await cur.fetchall()
        out = []
        for kind, namespace, name, uid, version, status, sv, fp in rows:
            ref = ObjectRef(kind, namespace, name, uid)
            with self._decoding(f"status of {uid}"):
                out.append(sql.record_from(machine, ref, version, status, sv, fp))
        return out

    async def snapshot(self, machine: Machine[Any], ref: ObjectRef) -> Snapshot | None:
        async with self._conn(f"snapshot of {ref.uid}") as conn:
            cur = await conn.execute(self._sql.identity_of, (ref.uid,))
            ident = await cur.fetchone()
            if ident is not None:
                sql.check_row_identity(machine, ref, ident[1:])
            cur = await conn.execute(self._sql.snapshot, (ref.uid,))
            row = await cur.fetchone()
        if row is None:
            return None
        with self._decoding(f"snapshot of {ref.uid}"):
            return sql.snapshot_from(machine, row)

    # -- record schemas (ADR 0088) -----------------------------------------------------------
    async def schema_versions(self) -> list[SchemaCount]:
        """As :meth:`PostgresStore.schema_versions`."""
        async with self._conn("schema report") as conn:
            cur = await conn.execute(self._sql.schema_versions)
            rows = await cur.fetchall()
        return merge_counts(rows)

    async def upgrade(self, machine: Machine[Any], *, batch: int = 500) -> UpgradeReport:
        """As :meth:`PostgresStore.upgrade`: batches read, upcast, then written back
        compared-and-set on what was read (a concurrent commit wins)."""
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

    async def outbox_summary(self) -> OutboxSummary:
        """How many outbox rows wait, and when the oldest was committed."""
        async with self._conn("outbox summary") as conn:
            cur = await conn.execute(self._sql.outbox_summary)
            row = await cur.fetchone()
        return OutboxSummary(0, None) if row is None else OutboxSummary(int(row[0]), row[1])

    async def close(self) -> None:
        await self._pool.close()

    # -- batches --------------------------------------------------------------------------
    async def load_many(
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
        """As :meth:`PostgresStore.commit_many`: one pipelined transaction in uid order, per
        item compare-and-set, a refused row isolated by committing one by one, an identity
        mismatch refusing the whole batch, and a lost connection resolved by commit tokens
        (landed, not written, or :class:`CommitUnknown`) -- never assumed to have written
        nothing."""
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
                params = [p for _, p in ready]
                counts = sql.batch_outcomes(
                    self.target, params, await self._resolve(params, lost), lost.error
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
        """As :meth:`PostgresStore._commit_batch`: one round trip (the ordered lock and
        :attr:`Statements.commit_batch`, pipelined up to one sync)."""
        params = [p for _, p in ready]
        uids = [p["uid"] for p in params]
        if len(set(uids)) < len(uids):
            return await self._commit_each(items, ready)
        batch = sql.batch_params(params, owner=self.owner, lease=self._lease)
        async with self._conn(f"commit of {len(items)} objects", _REFUSED, writes=True) as conn:
            async with conn.pipeline():  # one implicit transaction up to the pipeline's sync
                await conn.execute(self._sql.lock_many, (uids,), binary=True)
                cur = conn.cursor()
                await cur.execute(self._sql.commit_batch, batch, binary=True)
            rows = await cur.fetchall()
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
        """A batch holding an object more than once: each item's statement in turn."""
        params = [p for _, p in ready]
        counts: list[tuple[int, bool]] = []
        async with (
            self._conn(f"commit of {len(items)} objects", _REFUSED, writes=True) as conn,
            conn.transaction(),
        ):
            async with conn.cursor() as cur:
                await cur.executemany(self._sql.commit, params, returning=True)
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
