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
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol, TypeVar, runtime_checkable

from . import _batch
from ._batch import Commit, Load, Mark, Pause, Request
from ._core.errors import IdentityMismatch, SchemaRefused, StoreError
from ._core.machine import Machine
from ._core.observation import Observation
from ._core.refs import ObjectRef
from ._core.schema import check_store, review
from ._core.transition import Transition
from ._delivery import Redelivery
from ._link import Link
from ._log import get_logger
from ._protocol import Result, RetryPolicy, WriteProtocol
from ._store_bounds import check_bounds
from .emitters.base import Emitter
from .machines import MachineRegistry
from .stores.base import CommitItem, CommitStore, JournalEntry, Record
from .stores.memory import MemoryStore
from .telemetry._instrument import (
    checked,
    instrument,
    reporting_emitters,
    reporting_store,
    unreported,
)
from .telemetry._port import Guarded, Telemetry

__all__ = ["AsyncCommitStore", "AsyncRunner", "AsyncStore", "ThreadedStore", "open_async_store"]

T = TypeVar("T")

#: AsyncRunner logs as a runner (it is one).
_log = get_logger("lifecycle.runner")


@runtime_checkable
class AsyncCommitStore(Protocol):
    """:class:`~lifecycle.stores.CommitStore`, awaited: all :class:`AsyncRunner` needs."""

    async def load(self, machine: Machine[Any], ref: ObjectRef) -> Record | None: ...

    async def commit(
        self,
        machine: Machine[Any],
        ref: ObjectRef,
        expected: int,
        status: Any,
        observation: Observation,
        transitions: Sequence[Transition],
    ) -> int: ...


@runtime_checkable
class AsyncStore(AsyncCommitStore, Protocol):
    """The :class:`~lifecycle.stores.Store` protocol, awaited: the capabilities every
    shipped store has. Optional, as for ``Store``: ``load_many`` and ``commit_many``
    (batches), ``snapshot`` (retention), ``schema_versions``."""

    async def journal(self, machine: Machine[Any], ref: ObjectRef) -> list[JournalEntry]: ...

    async def records(self, machine: Machine[Any]) -> list[Record]: ...

    async def claim_undelivered(self, limit: int = 1000) -> list[Transition]: ...

    async def mark_delivered(self, ids: Iterable[str]) -> None: ...

    async def close(self) -> None: ...


class ThreadedStore:
    """A synchronous store behind the :class:`AsyncStore` protocol: each call runs on one
    worker thread (in order), so the event loop never waits on the disk or a lock.

    A :class:`~lifecycle.MemoryStore` never blocks, so it is called inline (``inline=True``
    forces that for any store)."""

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
        load_many = getattr(self.store, "load_many", None)
        if load_many is None:
            return await self._call(lambda: [self.store.load(m, r) for m, r in items])
        found: list[Record | None] = await self._call(load_many, items)
        return found

    async def commit_many(self, items: Sequence[CommitItem]) -> list[int | StoreError]:
        """The store's ``commit_many``, or one commit per item; an item whose uid is stored
        for another object raises :class:`~lifecycle.IdentityMismatch`, nothing written."""
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
    """Run one protocol request against an :class:`AsyncStore` (a commit made one object at a
    time puts each outcome in ``landed`` as it comes, as the synchronous runner does)."""
    if isinstance(request, Load):
        load_many = getattr(store, "load_many", None)
        if load_many is not None and len(request.items) > 1:
            try:
                return await load_many(request.items)
            except IdentityMismatch:
                pass  # the batch was refused: find the impostor(s), one object at a time
        found: list[Record | IdentityMismatch | None] = []
        for m, r in request.items:
            try:
                found.append(await store.load(m, r))
            except IdentityMismatch as e:
                found.append(e)
        return found
    if isinstance(request, Commit):
        commit_many = getattr(store, "commit_many", None)
        if commit_many is not None and len(request.items) > 1:
            try:
                return await commit_many(request.items)
            except IdentityMismatch:
                pass  # nothing of the batch was written: commit it one object at a time
        out: list[int | StoreError | IdentityMismatch] = [] if landed is None else landed
        for c in request.items:
            try:
                out.append(
                    await store.commit(
                        c.machine, c.ref, c.expected, c.status, c.observation, c.transitions
                    )
                )
            except (StoreError, IdentityMismatch) as e:
                out.append(e)
        return out
    if isinstance(request, Mark):
        mark = getattr(store, "mark_delivered", None)
        if mark is not None:
            await mark(request.ids)
        return None
    if request.seconds:
        await _pause(request)
    return None


async def _pause(request: Pause) -> None:
    if request.policy.sleep is time.sleep:
        await asyncio.sleep(request.seconds)
    else:  # a test's (or host's) own sleep hook: honour it, as the sync runner does
        request.policy.sleep(request.seconds)


class AsyncRunner:
    """:class:`~lifecycle.Runner` for asyncio: ``await runner.observe(ref, obs)``.

    Takes the runner's arguments; ``store`` is an :class:`AsyncCommitStore` or a synchronous
    store (run on a worker thread, see :class:`ThreadedStore`). Per-machine policies, action
    events, fallbacks and links behave exactly as in the synchronous runner -- the two make
    the same decisions (one implementation of the protocol) and deliver the same way.

    ``owns_store``: whether :meth:`close` closes the store; by default it does (as it always
    has). With ``owns_store=False`` a store passed in stays open, the delivery marks it holds
    written (ADR 0135).
    """

    def __init__(
        self,
        store: AsyncCommitStore | CommitStore | None = None,
        emitters: Sequence[Emitter] = (),
        *,
        machines: MachineRegistry | None = None,
        links: Iterable[Link] | None = None,
        policy: RetryPolicy | None = None,
        logger: Any = None,
        policies: Mapping[str, RetryPolicy] | None = None,
        check_schema: bool = True,
        telemetry: Telemetry | None = None,
        owns_store: bool | None = None,
    ) -> None:
        #: The host's telemetry behind its guard, or ``None`` (see :class:`~lifecycle.Runner`).
        self.telemetry = Guarded(telemetry) if telemetry is not None else None
        self.store: AsyncCommitStore = as_async(store)
        #: Whether :meth:`close` closes the store (else it writes the marks the store holds).
        self.owns_store = True if owns_store is None else owns_store
        self._closed_store = False
        #: Every decision of the protocol, with this runner's configuration.
        self.protocol = WriteProtocol.configured(
            emitters,
            machines=machines,
            links=links,
            policy=policy,
            policies=policies,
            log=get_logger("lifecycle.runner", logger),
            epoch_source=self.store,
        )
        # The start-up check (ADR 0088): a synchronous store is checked here, an asyncio one
        # before the first call that reads it (``await runner.check_schema()`` to do it now).
        self._schema_checked = not check_schema
        check_bounds(store, self.machines)  # what the machines accept, the store holds (0144)
        if isinstance(self.store, ThreadedStore) and check_schema:
            checked(self.telemetry, check_store, self.store.store, self.machines)
            self._schema_checked = True
        if self.telemetry is not None:
            self.store = reporting_store(self.store, self.telemetry)
            self.protocol.delivery.emitters = tuple(
                reporting_emitters(self.protocol.delivery.emitters, self.telemetry)
            )
            instrument(self, self.telemetry, nested=False)

    async def due(self, now: datetime) -> list[ObjectRef]:
        """:meth:`Runner.due <lifecycle.Runner.due>`, awaited: the objects in the store whose
        next :class:`~lifecycle.Tick` is due at ``now``, read from the store's ``records``
        (a store without them is a ``TypeError``; ADR 0149)."""
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

    @property
    def emitters(self) -> tuple[Emitter, ...]:
        return self.protocol.delivery.emitters

    @property
    def machines(self) -> MachineRegistry:
        return self.protocol.machines

    @property
    def policy(self) -> RetryPolicy:
        return self.protocol.policy

    def policy_for(self, machine: Machine[Any]) -> RetryPolicy:
        return self.protocol.policy_for(machine)

    async def observe(self, ref: ObjectRef, observation: Observation) -> Result:
        """:meth:`Runner.observe`, awaited: a refused observation raises, the store untouched."""
        results: list[Result] = await self._drive(
            _batch.observe(self.protocol, [(ref, observation)], refuse=True)
        )
        return results[0]

    async def observe_many(self, items: Iterable[tuple[ObjectRef, Observation]]) -> list[Result]:
        """:meth:`Runner.observe_many`, awaited."""
        results: list[Result] = await self._drive(
            _batch.observe(self.protocol, self.protocol.pairs(items), refuse=False)
        )
        return results

    async def redeliver(self, limit: int = 1000) -> Redelivery:
        """Send committed but undelivered events again, under their ids, and apply the
        link intents found in the outbox (see :meth:`Runner.redeliver`); how many were
        handed over (a :class:`~lifecycle.runner.Redelivery`: with how many were acknowledged)."""
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
        acknowledgement received so far; how many were marked (ADR 0121)."""
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
        returns that count. Every mark is written before it returns."""
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
        reply: Any = None
        error: StoreError | None = None
        while True:
            try:
                request = gen.send(reply) if error is None else gen.throw(error)
            except StopIteration as stop:
                return stop.value
            reply, error = None, None
            done: list[Any] | None = None
            try:
                if not isinstance(request, Commit):
                    reply = await answer(store, request)
                elif settle:
                    reply = await self._commit(request)
                else:
                    done = []
                    reply = await answer(store, request, done)
            except StoreError as e:
                error = e
            except BaseException as e:  # a cancellation: the generator keeps what it leaves
                if done and isinstance(request, Commit):  # between two objects' commits
                    _batch.landed(self.protocol, request, done)  # what landed is unfinished
                _batch.interrupt(gen, e)

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
    thread) or ``postgresql://...`` (psycopg's asyncio pool)."""
    if url.startswith(("postgresql://", "postgres://")):
        from .stores.postgres_async import AsyncPostgresStore

        return await AsyncPostgresStore.open(url, **options)
    from .stores import open_store

    loop = asyncio.get_running_loop()
    store = await loop.run_in_executor(None, functools.partial(open_store, url, **options))
    return ThreadedStore(store)
