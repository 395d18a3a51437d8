"""The runner for asyncio hosts (kopf operators, aiohttp services): same protocol, same
guarantees, awaited.

:class:`AsyncRunner` runs the very implementation ``Runner.observe_many`` runs (one sans-I/O
driver of the protocol's decisions, written once inside the library), with each store
operation awaited: on an
:class:`AsyncStore` such as :class:`~lifecycle.stores.postgres_async.AsyncPostgresStore`
(psycopg's asyncio API), or on any synchronous store through :class:`ThreadedStore`, which
runs its calls on a worker thread so SQLite's disk waits never block the event loop.
Emitters are called as in the synchronous runner; one whose ``emit`` returns an awaitable is
not supported -- hand events to an ``asyncio.Queue`` from ``emit`` instead.

A cancelled call (a ``wait_for`` timeout, a failing task group) reorders nothing (ADR 0105):
a commit under way is seen through to its outcome, what the call committed but did not
deliver, mark or apply is kept, and the runner's next call finishes it first.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any, Protocol, TypeVar, runtime_checkable

from . import _batch
from ._batch import Commit, Pause, Request
from ._core.errors import IdentityMismatch, SchemaRefused, StoreError
from ._core.machine import Machine
from ._core.observation import Observation
from ._core.refs import ObjectRef
from ._core.schema import check_store, review
from ._core.transition import Transition
from ._delivery import Redelivery
from ._protocol import Result
from ._runner_core import RunnerCore
from ._store_bounds import check_bounds
from .stores.base import CommitItem, CommitStore, JournalEntry, Record
from .stores.memory import MemoryStore
from .telemetry._instrument import (
    checked,
    reporting_store,
    unreported,
)

__all__ = ["AsyncCommitStore", "AsyncRunner", "AsyncStore", "ThreadedStore", "open_async_store"]

T = TypeVar("T")


@runtime_checkable
class AsyncCommitStore(Protocol):
    """:class:`~lifecycle.stores.CommitStore`, awaited: all :class:`AsyncRunner` needs."""

    async def load(self, machine: Machine[Any], ref: ObjectRef) -> Record | None:
        """An object's stored record (:meth:`CommitStore.load
        <lifecycle.stores.CommitStore.load>`, awaited).

        Args:
            machine: the machine that writes the object; an older record comes back upcast.
            ref: the object; its uid is the key.

        Returns:
            The record, or ``None`` for an object never committed.

        Raises:
            IdentityMismatch: the uid is stored for another object.
            StoreError: the store cannot be read.
        """
        ...

    async def commit(
        self,
        machine: Machine[Any],
        ref: ObjectRef,
        expected: int,
        status: Any,
        observation: Observation,
        transitions: Sequence[Transition],
    ) -> int:
        """Write a new status, its journal entry and its outbox rows, atomically, if the
        stored version is ``expected`` (:meth:`CommitStore.commit
        <lifecycle.stores.CommitStore.commit>`, awaited).

        Args:
            machine: the machine that writes the object.
            ref: the object.
            expected: the version the caller loaded (0 for a new object): the
                compare-and-set that makes two writers on one object safe without a lock.
            status: the new status.
            observation: what produced it, journalled.
            transitions: events, then link intents, written to the outbox in the same
                transaction, so an event is never lost between the commit and its delivery.

        Returns:
            The new version, ``expected + 1``.

        Raises:
            Conflict: the stored version is not ``expected``; nothing was written.
            IdentityMismatch: the uid is stored for another object; nothing was written.
            CommitUnknown: the connection was lost in flight; the write may have landed.
            StoreError: anything else; nothing was written.
        """
        ...


@runtime_checkable
class AsyncStore(AsyncCommitStore, Protocol):
    """The :class:`~lifecycle.stores.Store` protocol, awaited: the capabilities every
    shipped store has. Optional, as for ``Store``: ``load_many`` and ``commit_many``
    (batches), ``snapshot`` (retention), ``schema_versions``."""

    async def journal(self, machine: Machine[Any], ref: ObjectRef) -> list[JournalEntry]:
        """An object's journal, oldest first.

        Args:
            machine: the machine that writes the object; old entries come back upcast.
            ref: the object.

        Returns:
            The entries; empty for an object never committed.

        Raises:
            IdentityMismatch: the uid is stored for another object.
        """
        ...

    async def records(self, machine: Machine[Any]) -> list[Record]:
        """Every record of one machine.

        Args:
            machine: the machine whose objects are listed.

        Returns:
            The records, in no promised order.
        """
        ...

    async def claim_undelivered(self, limit: int = 1000) -> list[Transition]:
        """Claim undelivered outbox rows for this store's owner.

        Args:
            limit: the most rows returned, a bound on what one round holds in memory.

        Returns:
            The rows, each object's in commit order, so its events are delivered in order.
        """
        ...

    async def mark_delivered(self, ids: Iterable[str]) -> None:
        """Remove delivered rows from the outbox.

        Args:
            ids: the transitions' ids; an unknown or already removed id is ignored, so a
                repeat after a crash is harmless.
        """
        ...

    async def close(self) -> None: ...


class ThreadedStore(AsyncStore):
    """A synchronous store behind the :class:`AsyncStore` protocol: each call runs on one
    worker thread (in order), so the event loop never waits on the disk or a lock.

    A :class:`~lifecycle.MemoryStore` never blocks, so it is called inline (``inline=True``
    forces that for any store). Its methods are :class:`AsyncStore`'s, where they add
    nothing to say.

    Args:
        store: the synchronous store wrapped.
        inline: call the store on the event loop's thread; default only for a
            :class:`~lifecycle.MemoryStore`, which never blocks.
    """

    def __init__(self, store: CommitStore, *, inline: bool | None = None) -> None:
        self.store = store
        #: Whether calls run inline, never suspending the caller (a MemoryStore's).
        self.inline = isinstance(store, MemoryStore) if inline is None else inline
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._closed = False
        if not self.inline:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                # one worker (calls in order), or as many as the store can group (ADR 0026)
                max_workers=getattr(store, "concurrent_callers", 1),
                thread_name_prefix="lifecycle-store",
            )

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        if self._pool is None:
            return fn(*args)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args))

    async def load(self, machine: Machine[Any], ref: ObjectRef) -> Record | None:
        return await self._call(self.store.load, machine, ref)

    async def commit(
        self,
        machine: Machine[Any],
        ref: ObjectRef,
        expected: int,
        status: Any,
        observation: Observation,
        transitions: Sequence[Transition],
    ) -> int:
        return await self._call(
            self.store.commit, machine, ref, expected, status, observation, transitions
        )

    async def load_many(
        self, items: Sequence[tuple[Machine[Any], ObjectRef]]
    ) -> list[Record | None]:
        """The store's ``load_many``, or one load per item, on the worker thread.

        Args:
            items: ``(machine, ref)`` pairs.

        Returns:
            A record or ``None`` per item, in order.

        Raises:
            IdentityMismatch: an item's uid is stored for another object.
        """
        load_many = getattr(self.store, "load_many", None)
        if load_many is None:
            return await self._call(lambda: [self.store.load(m, r) for m, r in items])
        found: list[Record | None] = await self._call(load_many, items)
        return found

    async def commit_many(self, items: Sequence[CommitItem]) -> list[int | StoreError]:
        """The store's ``commit_many``, or one commit per item; an item whose uid is stored
        for another object raises :class:`~lifecycle.IdentityMismatch`, nothing written.

        Args:
            items: the writes; items of one object are applied in order.

        Returns:
            Per item, the new version, or the :class:`~lifecycle.Conflict` or
            :class:`~lifecycle.StoreError` that refused it.

        Raises:
            IdentityMismatch: an item's uid is stored for another object; nothing written.
        """
        commit_many = getattr(self.store, "commit_many", None)
        if commit_many is not None:
            found: list[int | StoreError] = await self._call(commit_many, items)
            return found
        return await self._call(self._commit_each, items)

    def _commit_each(self, items: Sequence[CommitItem]) -> list[int | StoreError]:
        for c in items:  # an impostor refuses the batch before anything is written
            self.store.load(c.machine, c.ref)
        out: list[int | StoreError] = []
        for c in items:
            try:
                out.append(
                    self.store.commit(
                        c.machine, c.ref, c.expected, c.status, c.observation, c.transitions
                    )
                )
            except StoreError as e:
                out.append(e)
        return out

    async def journal(self, machine: Machine[Any], ref: ObjectRef) -> list[JournalEntry]:
        return await self._call(self.store.journal, machine, ref)  # type: ignore[attr-defined]

    async def records(self, machine: Machine[Any]) -> list[Record]:
        return await self._call(lambda: list(self.store.records(machine)))  # type: ignore[attr-defined]

    async def snapshot(self, machine: Machine[Any], ref: ObjectRef) -> Any:
        """The store's ``snapshot``, if it has one.

        Args:
            machine: the machine that writes the object.
            ref: the object.

        Returns:
            The snapshot, or ``None`` (none made, or a store without retention).
        """
        snapshot = getattr(self.store, "snapshot", None)
        return None if snapshot is None else await self._call(snapshot, machine, ref)

    async def claim_undelivered(self, limit: int = 1000) -> list[Transition]:
        claim = getattr(self.store, "claim_undelivered", None)
        return [] if claim is None else await self._call(claim, limit)

    async def mark_delivered(self, ids: Iterable[str]) -> None:
        mark = getattr(self.store, "mark_delivered", None)
        if mark is not None:
            await self._call(mark, list(ids))

    async def flush_marks(self) -> None:
        """The store's ``flush_marks`` (write the delivery marks it holds back), if it has
        one (ADR 0135); nothing once closed (closing wrote them)."""
        flush = getattr(self.store, "flush_marks", None)
        if flush is not None and not self._closed:
            await self._call(flush)

    async def close(self) -> None:
        self._closed = True
        close = getattr(self.store, "close", None)
        if close is not None:
            await self._call(close)
        if self._pool is not None:
            self._pool.shutdown(wait=True)


def as_async(store: AsyncCommitStore | CommitStore | None) -> AsyncCommitStore:
    """``store`` as an :class:`AsyncStore` (a synchronous one goes behind a thread)."""
    if store is None:
        return ThreadedStore(MemoryStore())
    if inspect.iscoroutinefunction(getattr(store, "commit", None)):
        return store  # type: ignore[return-value]
    return ThreadedStore(store)  # type: ignore[arg-type]


async def answer(store: AsyncCommitStore, request: Request, landed: list[Any] | None = None) -> Any:
    """Run one protocol request against an :class:`AsyncStore`: the steps of
    :func:`lifecycle._batch.answering` (the synchronous driver's own), each call awaited (a
    commit made one object at a time puts each outcome in ``landed`` as it comes)."""
    steps = _batch.answering(store, request, _pause, landed)
    reply: Any = None
    error: BaseException | None = None
    while True:
        try:
            pending = steps.send(reply) if error is None else steps.throw(error)
        except StopIteration as stop:
            return stop.value
        try:
            reply, error = await pending, None
        except (StoreError, IdentityMismatch) as e:  # the steps decide what they mean
            reply, error = None, e


async def _pause(request: Pause) -> None:
    if request.policy.sleep is time.sleep:
        await asyncio.sleep(request.seconds)
    else:  # a test's (or host's) own sleep hook: honour it, as the sync runner does
        request.policy.sleep(request.seconds)


class AsyncRunner(RunnerCore[AsyncCommitStore | CommitStore]):
    """:class:`~lifecycle.Runner` for asyncio: ``await runner.observe(ref, obs)``.

    Takes the runner's arguments; ``store`` is an :class:`AsyncCommitStore` or a synchronous
    store (run on a worker thread, see :class:`ThreadedStore`). Per-machine policies, action
    events, fallbacks and links behave exactly as in the synchronous runner -- the two make
    the same decisions (one implementation of the protocol) and deliver the same way.

    ``owns_store``: whether :meth:`close` closes the store; by default it does (as it always
    has). With ``owns_store=False`` a store passed in stays open, the delivery marks it holds
    written (ADR 0135).

    Args:
        store: an :class:`AsyncCommitStore`, or a synchronous store (run on a worker
            thread); default a new :class:`~lifecycle.stores.MemoryStore`.
        emitters: as :class:`~lifecycle.Runner`'s: where committed events go.
        machines: as :class:`~lifecycle.Runner`'s: the machines served.
        links: as :class:`~lifecycle.Runner`'s: the links whose intents are applied.
        policy: as :class:`~lifecycle.Runner`'s: how a failing commit is retried.
        logger: as :class:`~lifecycle.Runner`'s: for failed writes and emitters.
        policies: as :class:`~lifecycle.Runner`'s: a policy per machine name.
        check_schema: as :class:`~lifecycle.Runner`'s; an asyncio store is checked before
            the first call that reads it (or at :meth:`check_schema`).
        telemetry: as :class:`~lifecycle.Runner`'s: metrics and spans of every call.
        owns_store: whether :meth:`close` closes the store; default ``True``.

    Raises:
        SchemaRefused: a synchronous store holds records the machines cannot read.
        StoreTooSmall: the store cannot hold what the machines accept (ADR 0144).
    """

    owns_given_store = True
    nested_spans = False

    def _choose(self, store: AsyncCommitStore | CommitStore | None) -> AsyncCommitStore:
        return as_async(store)

    def _attach(
        self, given: AsyncCommitStore | CommitStore | None, chosen: AsyncCommitStore, check: bool
    ) -> None:
        self.store: AsyncCommitStore = chosen
        # The start-up check (ADR 0088): a synchronous store is checked here, an asyncio one
        # before the first call that reads it (``await runner.check_schema()`` to do it now).
        self._schema_checked = not check
        check_bounds(given, self.machines)  # what the machines accept, the store holds (0144)
        if isinstance(chosen, ThreadedStore) and check:
            checked(self.telemetry, check_store, chosen.store, self.machines)
            self._schema_checked = True
        if self.telemetry is not None:
            self.store = reporting_store(chosen, self.telemetry)

    async def due(self, now: datetime) -> list[ObjectRef]:
        """:meth:`Runner.due <lifecycle.Runner.due>`, awaited: the objects in the store whose
        next :class:`~lifecycle.Tick` is due at ``now``, read from the store's ``records``
        (a store without them is a ``TypeError``; ADR 0149).

        Args:
            now: the host's time now.

        Returns:
            The refs due, by machine.

        Raises:
            TypeError: the store has no ``records``.
        """
        from . import _requeue

        records = getattr(self.store, "records", None)
        base = unreported(self.store)
        inner = base.store if isinstance(base, ThreadedStore) else base
        if records is None or not hasattr(inner, "records"):
            raise TypeError(
                f"{type(inner).__name__} has no records(machine): AsyncRunner.due reads them; "
                "requeue each object from its Result.next_tick instead"
            )
        out: list[ObjectRef] = []
        for machine in self.machines.values():
            if machine.table.timers:
                out += _requeue.due_among(machine, await records(machine), now)
        return out

    async def check_schema(self) -> None:
        """Refuse (:class:`~lifecycle.SchemaRefused`) a store holding records these machines
        cannot read, or that an undeclared table change wrote (ADR 0088)."""
        versions = getattr(self.store, "schema_versions", None)
        if versions is not None:
            found = review(await versions(), self.machines)
            if found.findings:
                refused = SchemaRefused(found.findings)
                if self.telemetry is not None:
                    self.telemetry.end(self.telemetry.begin("check_schema", ""), (), refused)
                raise refused
        self._schema_checked = True

    async def observe(self, ref: ObjectRef, observation: Observation) -> Result:
        """:meth:`Runner.observe`, awaited: a refused observation raises, the store untouched.

        Args:
            ref: the object observed; its kind picks the machine.
            observation: what was seen of it.

        Returns:
            What happened: committed, unchanged or failed.

        Raises:
            LifecycleError: input the machine refuses; nothing was read or written.
        """
        results: list[Result] = await self._drive(
            _batch.observe(self.protocol, [(ref, observation)], refuse=True)
        )
        return results[0]

    async def observe_many(self, items: Iterable[tuple[ObjectRef, Observation]]) -> list[Result]:
        """:meth:`Runner.observe_many`, awaited.

        Args:
            items: ``(ref, observation)`` pairs; several of one object are applied in order.

        Returns:
            One result per item, in order.

        Raises:
            LifecycleError: an observation a machine does not know; nothing was read or written.
        """
        results: list[Result] = await self._drive(
            _batch.observe(self.protocol, self.protocol.pairs(items), refuse=False)
        )
        return results

    async def redeliver(self, limit: int = 1000) -> Redelivery:
        """Send committed but undelivered events again, under their ids, and apply the
        link intents found in the outbox (see :meth:`Runner.redeliver`); how many were
        handed over (a :class:`~lifecycle.runner.Redelivery`: with how many were acknowledged).

        Args:
            limit: the most outbox rows claimed in this call, a bound on what it holds in memory.

        Returns:
            How many events were handed over, and how many acknowledged.
        """
        return (await self._redeliver(limit))[0]

    async def _redeliver(self, limit: int) -> tuple[Redelivery, list[Result]]:
        """:meth:`redeliver`, with the results of the link intents it applied."""
        claim = getattr(self.store, "claim_undelivered", None)
        claimed: list[Transition] = [] if claim is None else await claim(limit)
        if not claimed and not self.protocol.backlog:
            return Redelivery(0), []
        delivered: tuple[Redelivery, list[Result]] = await self._drive(
            _batch.redeliver(self.protocol, claimed)
        )
        return delivered

    async def flush(self, timeout: float | None = 5.0) -> int:
        """:meth:`Runner.flush`, awaited: wait up to ``timeout`` seconds (off the event loop)
        for what an acknowledging emitter (the Kubernetes one) still holds, then mark every
        acknowledgement received so far; how many were marked (ADR 0121).

        Args:
            timeout: the most seconds waited; ``None`` waits until every event is answered.

        Returns:
            How many events were marked delivered.
        """
        delivery = self.protocol.delivery
        if delivery.in_flight() and (timeout is None or timeout > 0):
            await asyncio.to_thread(delivery.wait, timeout)
        acked = delivery.take_acked(force=True)
        mark = getattr(self.store, "mark_delivered", None)
        if acked and mark is not None:
            try:
                await mark(acked)
            except StoreError as e:
                delivery.unmarked(e)
        return len(acked)

    async def close(self, timeout: float = 5.0) -> int:
        """:meth:`Runner.close`, awaited: close the acknowledging emitters within ``timeout``
        seconds in all (off the event loop), mark what they acknowledged, log how many events
        stay undelivered in the outbox (the next :meth:`redeliver` sends them), then close the
        store it owns (``owns_store``) or write the marks another holds back (ADR 0135);
        returns that count. Every mark is written before it returns.

        Args:
            timeout: the most seconds spent closing the emitters, in all.

        Returns:
            How many events were marked delivered while closing.
        """
        delivery = self.protocol.delivery
        deadline = time.monotonic() + timeout
        before = delivery.failures()
        await asyncio.to_thread(delivery.close_emitters, deadline)
        await self.flush(max(deadline - time.monotonic(), 0.0))
        left = delivery.closed(before)
        if self._closed_store:
            return left
        self._closed_store = self.owns_store
        call = getattr(self.store, "close" if self.owns_store else "flush_marks", None)
        if call is not None:
            try:
                await call()
            except StoreError as e:
                delivery.log.warning(
                    "could not write delivery marks at close; they will repeat", error=str(e)
                )
        return left

    async def _drive(self, gen: Any) -> Any:
        if not self._schema_checked:
            await self.check_schema()
        store = self.store
        # A commit that can suspend is seen through to its outcome (ADR 0105).
        inner = getattr(store, "wrapped", store)  # (telemetry's wrapper looked through)
        settle = not (isinstance(inner, ThreadedStore) and inner.inline)
        drive = _batch.Drive(gen, self.protocol)
        while (request := drive.next()) is not None:
            done: list[Any] | None = None
            try:
                if not isinstance(request, Commit):
                    drive.reply = await answer(store, request)
                elif settle:
                    drive.reply = await self._commit(request)
                else:
                    done = []
                    drive.reply = await answer(store, request, done)
            except StoreError as e:
                drive.error = e
            except BaseException as e:  # a cancellation: the generator keeps what it leaves
                drive.interrupted(request, done, e)
        return drive.value

    async def _commit(self, request: Commit) -> Any:
        """Answer a commit; cancelled meanwhile, wait for its outcome all the same (a store
        bounds every call, ADR 0069), keep what landed as unfinished work for the next call
        (ADR 0105), then let the cancellation go on."""
        done: list[Any] = []
        task = asyncio.ensure_future(answer(self.store, request, done))
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            while not task.done():
                try:
                    await asyncio.wait((task,))
                except asyncio.CancelledError:
                    continue  # cancelled again: the first cancellation is the one raised
            ok = not task.cancelled() and task.exception() is None
            _batch.landed(self.protocol, request, task.result() if ok else done)
            raise


async def open_async_store(url: str, **options: Any) -> AsyncStore:
    """The :class:`AsyncStore` a URL names: ``memory://``, ``sqlite:///PATH`` (on a worker
    thread) or ``postgresql://...`` (psycopg's asyncio pool).

    Args:
        url: ``memory://``, ``sqlite:///PATH?...`` or a libpq ``postgresql://`` URL.
        **options: the store's constructor's keyword arguments.

    Returns:
        The open store.

    Raises:
        InvalidStoreURL: a URL that names no store the library opens.
        StoreError: the store cannot be opened.
    """
    if url.startswith(("postgresql://", "postgres://")):
        from .stores.postgres_async import AsyncPostgresStore

        return await AsyncPostgresStore.open(url, **options)
    from .stores import open_store

    loop = asyncio.get_running_loop()
    store = await loop.run_in_executor(None, functools.partial(open_store, url, **options))
    return ThreadedStore(store)
