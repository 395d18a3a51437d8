"""AsyncRunner: the runner's protocol and guarantees for asyncio hosts, on memory, SQLite (on a
worker thread: the event loop never waits on the disk) and PostgreSQL (psycopg's asyncio
pool). Parity: every bundled trace -- faults, cascades, action events, fallbacks included --
gives the same results and the same events, in the same order, as the synchronous Runner."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest

from lifecycle import (
    AsyncRunner,
    Conflict,
    InvalidTransition,
    MemoryEmitter,
    MemoryStore,
    Outcome,
    RetryPolicy,
    Runner,
    SQLiteStore,
    Store,
    StoreError,
    ThreadedStore,
    UnknownObservation,
    open_async_store,
)
from lifecycle.machines import nodeclaim as nc
from lifecycle.machines import pod
from lifecycle.testing.fakes import FaultyStore
from lifecycle.trace import FaultLine, read_trace

from .conftest import drop_schema
from .helpers import check_invariants, pod_ref, t
from .test_observe_many import shape

T = TypeVar("T")
ROOT = Path(__file__).resolve().parents[2]
#: The bundled traces a FaultyStore can replay: the host-level faults (another writer, a
#: crash and restart) are the replay's own, covered by tests/test_trace_faults.py.
TRACES = sorted(
    path
    for path in (ROOT / "examples" / "traces").glob("*.jsonl")
    if '"concurrent-write"' not in (text := path.read_text()) and '"crash-after-commit"' not in text
)
FAST = RetryPolicy(backoff=0.0)


def run(coro: Awaitable[T]) -> T:
    async def main() -> T:
        return await coro

    return asyncio.run(main())


class AsyncFaulty:
    """:class:`FaultyStore` for an asyncio store: the next commits of an object fail."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.faults: dict[str, list[str]] = {}

    def inject(self, uid: str, fault: str, times: int = 1) -> None:
        self.faults.setdefault(uid, []).extend([fault] * times)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def commit(self, machine: Any, ref: Any, expected: int, *rest: Any) -> int:
        queue = self.faults.get(ref.uid)
        if queue:
            if queue.pop(0) == "conflict":
                raise Conflict(ref.uid, expected, None)
            raise StoreError(f"injected write error on {ref.uid}")
        found: int = await self.inner.commit(machine, ref, expected, *rest)
        return found


async def replay_async(lines: Sequence[Any], runner: AsyncRunner, faulty: Any) -> list[Any]:
    out = []
    for line in lines:
        if isinstance(line, FaultLine):
            faulty.inject(line.ref.uid, line.fault, line.times)
            continue
        out.append(await runner.observe(line.ref, line.observation))
    return out


def replay_sync(lines: Sequence[Any], runner: Runner, faulty: FaultyStore) -> list[Any]:
    out = []
    for line in lines:
        if isinstance(line, FaultLine):
            faulty.inject(line.ref.uid, line.fault, line.times)  # type: ignore[arg-type]
            continue
        out.append(runner.observe(line.ref, line.observation))
    return out


@pytest.fixture
def pair(
    store_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterable[Callable[[], tuple[Store, Callable[[], Awaitable[Any]]]]]:
    """Makes (a synchronous store, a coroutine opening an asyncio store), both fresh."""
    made: list[Any] = []
    counter = [0]

    def make() -> tuple[Store, Callable[[], Awaitable[Any]]]:
        counter[0] += 1
        n = counter[0]
        if store_kind == "memory":

            async def open_memory() -> Any:
                return ThreadedStore(MemoryStore())

            return MemoryStore(), open_memory
        if store_kind == "sqlite":
            sync = SQLiteStore(tmp_path / f"sync{n}.db", synchronous="OFF")
            made.append(sync)

            async def open_sqlite() -> Any:
                return await open_async_store(
                    f"sqlite:///{tmp_path}/async{n}.db", synchronous="OFF"
                )

            return sync, open_sqlite
        from lifecycle.stores.postgres import PostgresStore

        server = request.getfixturevalue("pg_server")
        base = request.getfixturevalue("pg_schema")
        sync_pg = PostgresStore(server.url(schema=f"{base}_s{n}"))
        made.append(sync_pg)
        request.addfinalizer(lambda: drop_schema(server, f"{base}_s{n}"))
        request.addfinalizer(lambda: drop_schema(server, f"{base}_a{n}"))

        async def open_pg() -> Any:
            return await open_async_store(server.url(schema=f"{base}_a{n}"))

        return sync_pg, open_pg

    yield make
    for s in made:
        s.close()


async def replay_fresh(
    lines: Sequence[Any], open_async: Callable[[], Awaitable[Any]]
) -> tuple[list[Any], MemoryEmitter, list[Any]]:
    store = await open_async()
    faulty = AsyncFaulty(store)
    events = MemoryEmitter()
    runner = AsyncRunner(faulty, [events], policy=FAST)
    results = await replay_async(lines, runner, faulty)
    undelivered = await store.claim_undelivered()
    await runner.close()
    return results, events, undelivered


# -- parity -----------------------------------------------------------------------------------
def test_every_bundled_trace_gives_the_same_results_and_events(pair: Any) -> None:
    assert len(TRACES) >= 10
    for path in TRACES:
        lines = read_trace(path)
        sync_store, open_async = pair()
        faulty = FaultyStore(sync_store)
        sync_events = MemoryEmitter()
        sync_results = replay_sync(lines, Runner(faulty, [sync_events], policy=FAST), faulty)

        async_results, async_events, undelivered = run(replay_fresh(lines, open_async))
        assert [shape(r) for r in async_results] == [shape(r) for r in sync_results], path.name
        assert async_events.events == sync_events.events, path.name
        assert sorted(e.id for e in undelivered) == sorted(
            e.id for e in sync_store.claim_undelivered()
        ), path.name


def test_batches_give_the_same_results_and_events(pair: Any) -> None:
    refs = [pod_ref(f"p{i}") for i in range(8)]
    batches: list[list[tuple[Any, Any]]] = [
        [(r, pod.CreateRequested(at=t(0))) for r in refs],
        [(r, pod.ProvisionSucceeded(at=t(1), reserved=True, instance_id="i-1")) for r in refs],
        [(r, pod.InstanceFailed(at=t(2), exit_code=1)) for r in refs[:4]]
        + [(refs[0], pod.InstanceRunning(at=t(3)))],
    ]
    sync_store, open_async = pair()
    sync_events = MemoryEmitter()
    runner = Runner(sync_store, [sync_events], policy=FAST)
    want = [[shape(r) for r in runner.observe_many(b)] for b in batches]

    async def go() -> tuple[list[Any], MemoryEmitter]:
        events = MemoryEmitter()
        arunner = AsyncRunner(await open_async(), [events], policy=FAST)
        got = [[shape(r) for r in await arunner.observe_many(b)] for b in batches]
        await arunner.close()
        return got, events

    got, events = run(go())
    assert got == want
    assert events.events == sync_events.events


# -- the protocol, awaited --------------------------------------------------------------------
def test_refused_input_raises_and_leaves_the_store_untouched(pair: Any) -> None:
    _, open_async = pair()

    async def go() -> None:
        store = await open_async()
        emitter = MemoryEmitter()
        runner = AsyncRunner(store, [emitter])
        ref = pod_ref("r")
        with pytest.raises(InvalidTransition):
            await runner.observe(
                ref, pod.ProvisionSucceeded(at=t(0), reserved=True, instance_id="i")
            )
        with pytest.raises(UnknownObservation):
            await runner.observe(ref, nc.PodAbsent(at=t(0)))
        assert await store.load(pod.POD, ref) is None
        assert emitter.events == []
        await runner.close()

    run(go())


def test_conflicts_are_retried_with_the_loops_sleep_and_exhaustion_falls_back(pair: Any) -> None:
    _, open_async = pair()

    async def go() -> None:
        store = AsyncFaulty(await open_async())
        emitter = MemoryEmitter()
        runner = AsyncRunner(
            store, [emitter], policy=RetryPolicy(attempts=3, backoff=0.001), links=()
        )
        ref = pod_ref("c")
        await runner.observe(ref, pod.CreateRequested(at=t(0)))
        store.inject(ref.uid, "conflict", 2)
        ok = await runner.observe(ref, pod.ConfigInvalid(at=t(1), error="x"))
        assert (ok.outcome, ok.attempts, ok.version) == (Outcome.COMMITTED, 3, 2)
        store.inject(ref.uid, "conflict", 3)
        failed = await runner.observe(ref, pod.CreateRequested(at=t(2)))
        assert (failed.outcome, failed.attempts) == (Outcome.FAILED, 3)
        assert failed.fallback == ()  # Provisioning is a Normal flip
        assert [e.id for e in emitter.events] == ["c:1:0", "c:2:0"]
        await runner.close()

    run(go())


def test_redeliver_sends_queued_events_under_their_ids(pair: Any) -> None:
    _, open_async = pair()

    async def go() -> None:
        from lifecycle.testing.fakes import FailingEmitter

        store = await open_async()
        flaky = FailingEmitter(1)
        runner = AsyncRunner(store, [flaky], links=())
        result = await runner.observe(pod_ref("d"), pod.CreateRequested(at=t(0)))
        assert result.committed
        assert flaky.events == []
        assert await runner.redeliver() == 1
        assert [e.id for e in flaky.events] == ["d:1:0"]
        assert await runner.redeliver() == 0
        await runner.close()

    run(go())


# -- SQLite without blocking the loop ---------------------------------------------------------
def test_sqlite_waits_on_a_worker_thread_not_on_the_event_loop(tmp_path: Path) -> None:
    path = tmp_path / "locked.db"
    store = SQLiteStore(path, busy_timeout=5)
    blocker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    blocker.execute("BEGIN IMMEDIATE")  # another process holds the write lock

    async def go() -> tuple[int, Any]:
        runner = AsyncRunner(store, [], links=())
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.005)

        tick = asyncio.create_task(ticker())
        observe = asyncio.create_task(runner.observe(pod_ref("l"), pod.CreateRequested(at=t(0))))
        await asyncio.sleep(0.3)
        assert not observe.done()  # still waiting for the lock ...
        seen = ticks  # ... while the loop kept running
        threading.Timer(0.0, lambda: blocker.execute("COMMIT")).start()
        result = await observe
        tick.cancel()
        await runner.close()
        return seen, result

    seen, result = run(go())
    assert seen >= 20
    assert result.committed
    blocker.close()


def test_a_threaded_store_runs_calls_in_order_on_one_thread(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "order.db", synchronous="OFF")

    async def go() -> None:
        runner = AsyncRunner(store, [], links=())
        refs = [pod_ref(f"o{i}") for i in range(20)]
        results = await asyncio.gather(
            *(runner.observe(r, pod.CreateRequested(at=t(0))) for r in refs)
        )
        assert all(r.committed for r in results)
        await runner.close()

    run(go())
    again = SQLiteStore(tmp_path / "order.db")
    check_invariants(again, [pod_ref(f"o{i}") for i in range(20)])
    again.close()


def test_open_async_store_urls(tmp_path: Path) -> None:
    async def go() -> None:
        memory = await open_async_store("memory://")
        assert isinstance(memory, ThreadedStore)
        sqlite_store = await open_async_store(f"sqlite:///{tmp_path}/a.db")
        await sqlite_store.close()
        with pytest.raises(StoreError, match="unknown store URL"):
            await open_async_store("redis://x")

    run(go())


def test_the_asyncio_postgres_store_compacts_as_the_synchronous_one(
    pair: Any, store_kind: str
) -> None:
    """``compact`` came to the asyncio PostgreSQL store with the one source (ADR 0126): the
    same journals, snapshots and counts as the synchronous store's."""
    if store_kind != "postgres":
        pytest.skip("the asyncio PostgreSQL store's compaction")
    from lifecycle.machines import POD

    refs = [pod_ref(f"c{i}") for i in range(3)]
    steps = [
        pod.CreateRequested(at=t(0)),
        pod.ProvisionSucceeded(at=t(1), reserved=True, instance_id="i-1"),
        pod.InstanceRunning(at=t(2)),
        pod.InstanceFailed(at=t(3), exit_code=1),
    ]
    sync_store, open_async = pair()
    runner = Runner(sync_store, [], policy=FAST)
    for step in steps:
        for ref in refs:
            runner.observe(ref, step)
    want = (sync_store.compact(POD, keep=1), sync_store.compact(POD, keep=0, refs=refs[:1]))

    async def go() -> tuple[tuple[int, int], list[Any], list[Any]]:
        store = await open_async()
        arunner = AsyncRunner(store, [], policy=FAST)
        for step in steps:
            for ref in refs:
                await arunner.observe(ref, step)
        got = (await store.compact(POD, keep=1), await store.compact(POD, keep=0, refs=refs[:1]))
        journals = [await store.journal(POD, r) for r in refs]
        snaps = [await store.snapshot(POD, r) for r in refs]
        await arunner.close()
        return got, journals, snaps

    got, journals, snaps = run(go())
    assert got == want
    assert got[0] > 0
    assert [[e.version for e in j] for j in journals] == [
        [e.version for e in sync_store.journal(POD, r)] for r in refs
    ]
    assert [(s.version, s.status) for s in snaps] == [
        (s.version, s.status) for s in (sync_store.snapshot(POD, r) for r in refs) if s
    ]


def test_the_asyncio_postgres_store_holds_marks_for_the_next_commit(
    pair: Any, store_kind: str
) -> None:
    """ADR 0127 on the event loop: a delivered event's mark waits for the next commit, goes
    out on the loop's timer when none comes, and ``close`` sends what is still held."""
    if store_kind != "postgres":
        pytest.skip("the asyncio PostgreSQL store's held marks")
    import psycopg

    _, open_async = pair()

    async def go() -> None:
        store = await open_async()

        def outbox() -> set[str]:
            with psycopg.connect(store.target.conninfo, autocommit=True) as conn:
                rows = conn.execute(f'SELECT id FROM "{store.target.schema}".outbox').fetchall()
            return {str(r[0]) for r in rows}

        runner = AsyncRunner(store, [MemoryEmitter()], links=(), policy=FAST)
        first = await runner.observe(pod_ref("la"), pod.CreateRequested(at=t(0)))
        ids = {e.id for e in first.transitions}
        assert ids
        assert ids <= outbox()  # delivered, its mark held
        second = await runner.observe(pod_ref("lb"), pod.CreateRequested(at=t(0)))
        assert not ids & outbox()  # carried by the second commit
        later = {e.id for e in second.transitions}
        assert later <= outbox()
        for _ in range(200):  # no commit comes: the loop's timer sends it
            if not later & outbox():
                break
            await asyncio.sleep(0.05)
        assert not later & outbox()
        third = await runner.observe(pod_ref("lc"), pod.CreateRequested(at=t(0)))
        last = {e.id for e in third.transitions}
        await runner.close()  # closes the store: the held mark goes out first
        assert not last & outbox()

    run(go())
