"""The coherent status cache (ADR 0134), differentially: several runners, each on its own
store handle (threads or processes; SQLite or PostgreSQL), interleave polls and changes on
shared objects, with their caches on and off, and must decide alike.

- **Sequential interleavings** (Hypothesis picks who observes what, in which order): with the
  cache on, every step's result and events equal the uncached run's. Each step is preceded
  by the handle's barrier (``settle_cache``): PostgreSQL's signal is asynchronous (SQLite's
  check is made at every read: ADR 0156) -- the property is then that nothing the cache
  held or kept was stale once the signals were in.
- **Without barriers** (PostgreSQL) every step may decide from a stale entry: the run may
  differ, but no write is lost (each object's journal is 1..n, folds to its status) and, after
  the barrier and one more poll each of its last observation, every object ends where the
  uncached run ends.
- **Concurrent runners** (threads and processes, as fast as they go): no write lost, and once
  the signals are in, every read through a cache equals a fresh read.
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lifecycle import SQLiteStore
from lifecycle.machines import POD
from lifecycle.stores._cache import StatusCache
from lifecycle.testing import assert_journal_folds

from . import _cache_workers as workers
from .pg import PgServer

UIDS = ["a", "b", "c", "d"]
RUNNERS = 3
#: small enough that the interleavings evict
CACHE = 2
_names = itertools.count()

Step = tuple[int, int, int]  # runner, object, observation kind
steps = st.lists(
    st.tuples(
        st.integers(0, RUNNERS - 1),
        st.integers(0, len(UIDS) - 1),
        st.integers(0, workers.KINDS - 1),
    ),
    min_size=1,
    max_size=30,
)


class Peer:
    """One runner on its own handle, behind a pipe, in a thread or a process."""

    def __init__(self, how: str) -> None:
        self.conn, theirs = multiprocessing.Pipe()
        if how == "thread":
            self.worker: Any = threading.Thread(target=workers.serve, args=(theirs,), daemon=True)
        else:
            ctx = multiprocessing.get_context("spawn")
            self.worker = ctx.Process(target=workers.serve, args=(theirs,), daemon=True)
        self.worker.start()

    def ask(self, *message: Any) -> Any:
        self.conn.send(message)
        if not self.conn.poll(60):
            raise AssertionError(f"no answer to {message[0]} within 60 s")
        answer = self.conn.recv()
        if isinstance(answer, Exception):
            raise answer
        return answer

    def stop(self) -> None:
        self.ask("stop")
        self.worker.join(10)


@pytest.fixture(scope="module", params=["thread", "process"])
def peers(request: pytest.FixtureRequest) -> Iterator[list[Peer]]:
    group = [Peer(str(request.param)) for _ in range(RUNNERS)]
    yield group
    for p in group:
        p.stop()


def targets(kind: str, tmp_path: Path, server: PgServer | None) -> str:
    if kind == "sqlite":
        return str(tmp_path / f"shared{next(_names)}.db")
    assert server is not None
    return server.url(schema=f"cache{next(_names)}")


def run_schedule(
    peers: list[Peer], kind: str, target: str, cache: int, schedule: list[Step], *, settle: bool
) -> list[Any]:
    for p in peers:
        p.ask("open", kind, target, cache)
    try:
        out = []
        for n, (who, obj, index) in enumerate(schedule):
            if settle:
                assert peers[who].ask("settle") is True
            out.append(peers[who].ask("observe", UIDS[obj], index, n))
        return out
    finally:
        for p in peers:
            p.ask("close")


def repoll(peers: list[Peer], schedule: list[Step]) -> list[Any]:
    """One more poll of each object: its last observation again, by the runner that made it,
    after that runner's barrier."""
    last: dict[int, tuple[int, int, int]] = {}
    for n, (who, obj, index) in enumerate(schedule):
        last[obj] = (who, index, n)
    out = []
    for obj, (who, index, n) in sorted(last.items()):
        assert peers[who].ask("settle") is True
        out.append(peers[who].ask("observe", UIDS[obj], index, n))
    return out


def final_records(kind: str, target: str) -> dict[str, Any]:
    """Every object as an uncached handle reads it, journal folds checked."""
    store = workers.open_store(kind, target, 0)
    try:
        out = {}
        for uid in UIDS:
            record = store.load(POD, workers.ref(uid))
            if record is not None:
                assert_journal_folds(POD, store, workers.ref(uid))
                assert [e.version for e in store.journal(POD, workers.ref(uid))] == list(
                    range(1, record.version + 1)
                )
            out[uid] = workers.record_summary(record)
        return out
    finally:
        store.close()


#: ``make test`` runs the short form; ``LIFECYCLE_SOAK=1`` explores ten times as long
LONG = 10 if os.environ.get("LIFECYCLE_SOAK") == "1" else 1
SLOW = settings(
    max_examples=25 * LONG,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
#: a PostgreSQL example opens six handles (each a pool and a listener)
PG_SLOW = settings(SLOW, max_examples=6 * LONG)


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_cached_runners_decide_every_step_as_uncached_ones(
    peers: list[Peer], kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Each step is preceded by the stepping handle's barrier: PostgreSQL's signal is
    asynchronous, and SQLite's check is made at most once a millisecond for single reads."""
    server = request.getfixturevalue("pg_server") if kind == "postgres" else None

    @(PG_SLOW if server is not None else SLOW)
    @given(schedule=steps)
    def check(schedule: list[Step]) -> None:
        cached_target = targets(kind, tmp_path, server)
        plain_target = targets(kind, tmp_path, server)
        # each step after the stepping handle's barrier: PostgreSQL's signal is asynchronous,
        # and a single SQLite read relies on a check made less than a millisecond ago (0156)
        cached = run_schedule(peers, kind, cached_target, CACHE, schedule, settle=True)
        plain = run_schedule(peers, kind, plain_target, 0, schedule, settle=False)
        assert cached == plain
        assert final_records(kind, cached_target) == final_records(kind, plain_target)

    check()


@pytest.mark.postgres
@PG_SLOW
@given(schedule=steps)
def test_postgres_cached_runners_without_barriers_lose_nothing_and_converge(
    peers: list[Peer], pg_server: PgServer, schedule: list[Step]
) -> None:
    cached_target = targets("postgres", Path(), pg_server)
    plain_target = targets("postgres", Path(), pg_server)
    for target, cache in ((cached_target, CACHE), (plain_target, 0)):
        for p in peers:
            p.ask("open", "postgres", target, cache)
        try:
            for n, (who, obj, index) in enumerate(schedule):
                peers[who].ask("observe", UIDS[obj], index, n)
            repoll(peers, schedule)
        finally:
            for p in peers:
                p.ask("close")
    cached, plain = (
        final_records("postgres", cached_target),
        final_records("postgres", plain_target),
    )
    assert {u: c and c[1] for u, c in cached.items()} == {u: c and c[1] for u, c in plain.items()}


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_concurrent_cached_runners_lose_nothing_and_read_coherently(
    peers: list[Peer], kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    server = request.getfixturevalue("pg_server") if kind == "postgres" else None
    target = targets(kind, tmp_path, server)
    for p in peers:
        p.ask("open", kind, target, CACHE)
    try:
        for seed, p in enumerate(peers):
            p.conn.send(("run", UIDS, 150, seed))
        answers = []
        for p in peers:
            assert p.conn.poll(120)
            answers.append(p.conn.recv())
        for got in answers:
            assert not isinstance(got, Exception), got
        committed = sum(1 for got in answers for s in got if s[0] == "committed")
        fresh = final_records(kind, target)
        assert sum(r[0] for r in fresh.values() if r is not None) == committed
        for p in peers:
            assert p.ask("settle") is True
            assert p.ask("load", UIDS) == fresh
    finally:
        for p in peers:
            p.ask("close")


# -- the cache's own rules ------------------------------------------------------------------
def record(uid: str, version: int) -> Any:
    from lifecycle.stores.base import Record

    return Record(workers.ref(uid), POD.name, POD.initial(workers.ref(uid)), version)


def test_an_entry_is_replaced_only_by_a_higher_version() -> None:
    cache = StatusCache(4)
    cache.end("a", cache.begin("a"), record("a", 3), POD.schema)
    cache.end("a", cache.begin("a"), record("a", 2), POD.schema)
    got = cache.get(POD, workers.ref("a"))
    assert got is not None
    assert got.version == 3


def test_a_read_that_raced_a_drop_or_a_signal_is_not_kept() -> None:
    cache = StatusCache(4)
    generation = cache.begin("a")
    cache.drop("test")
    cache.end("a", generation, record("a", 1), POD.schema)
    assert cache.get(POD, workers.ref("a")) is None
    generation = cache.begin("b")
    cache.signalled("b", 5)  # another writer committed v5 while v4 was being read
    cache.end("b", generation, record("b", 4), POD.schema)
    assert cache.get(POD, workers.ref("b")) is None
    generation = cache.begin("c")
    cache.signalled("c", 5)  # its own commit's notice, or an older one: kept
    cache.end("c", generation, record("c", 5), POD.schema)
    assert cache.get(POD, workers.ref("c")) is not None


def test_a_commit_overtaken_by_a_drop_removes_the_older_entry_a_read_left() -> None:
    """One handle, two threads: a commit begins; the cache is dropped (another connection
    wrote); a read begun after the drop keeps v1; the commit lands v2 -- not kept (begun
    before the drop), and it must not leave v1 behind: nothing else would ever say it is
    stale (found on review)."""
    cache = StatusCache(4)
    committing = cache.begin("a")
    cache.drop("another connection wrote")
    cache.end("a", cache.begin("a"), record("a", 1), POD.schema)
    cache.end("a", committing, record("a", 2), POD.schema)
    assert cache.get(POD, workers.ref("a")) is None


def test_a_read_begun_before_this_handle_s_own_commit_and_ended_after_it_is_not_kept() -> None:
    cache = StatusCache(4)
    reading = cache.begin("a")
    committing = cache.begin("a")
    cache.end("a", committing, record("a", 2), POD.schema)
    cache.forget("a")  # (evicted meanwhile)
    cache.end("a", reading, record("a", 1), POD.schema)  # read before the commit landed
    assert cache.get(POD, workers.ref("a")) is None


def test_a_reader_of_another_schema_misses() -> None:
    cache = StatusCache(4)
    cache.end("a", cache.begin("a"), record("a", 1), POD.schema)
    assert cache.get(POD, workers.ref("a")) is not None
    assert cache.get(_AsSchema(object()), workers.ref("a")) is None  # type: ignore[arg-type]


class _AsSchema:
    """The pod machine under another schema (an upgraded release of it)."""

    name = POD.name

    def __init__(self, schema: object) -> None:
        self.schema = schema


def test_a_signal_drops_only_older_entries_and_a_suspended_cache_keeps_nothing() -> None:
    cache = StatusCache(4)
    for uid in "ab":
        cache.end(uid, cache.begin(uid), record(uid, 2), POD.schema)
    cache.signalled("a", 2)
    cache.signalled("b", 3)
    assert cache.get(POD, workers.ref("a")) is not None
    assert cache.get(POD, workers.ref("b")) is None
    cache.suspend("lost")
    assert cache.get(POD, workers.ref("a")) is None
    cache.end("a", cache.begin("a"), record("a", 9), POD.schema)
    assert len(cache) == 0
    cache.resume()
    cache.end("a", cache.begin("a"), record("a", 9), POD.schema)
    assert len(cache) == 1


def test_the_cache_is_bounded_and_evicts_the_one_kept_longest_ago() -> None:
    """Reads take no lock and move nothing (ADR 0156): a read does not save an entry from
    eviction, keeping a newer version of it does."""
    cache = StatusCache(2)
    for uid in "ab":
        cache.end(uid, cache.begin(uid), record(uid, 1), POD.schema)
    cache.get(POD, workers.ref("a"))  # read: still the first to go
    cache.end("c", cache.begin("c"), record("c", 1), POD.schema)
    assert len(cache) == 2
    assert cache.get(POD, workers.ref("a")) is None
    cache.end("b", cache.begin("b"), record("b", 2), POD.schema)  # kept anew: now the last
    cache.end("d", cache.begin("d"), record("d", 1), POD.schema)
    assert cache.get(POD, workers.ref("c")) is None
    assert cache.get(POD, workers.ref("b")) is not None
    assert cache.get(POD, workers.ref("d")) is not None
    with pytest.raises(ValueError, match="at least 1"):
        StatusCache(0)


def test_an_impostor_is_refused_from_the_cache_as_from_the_store(tmp_path: Path) -> None:
    from lifecycle import IdentityMismatch, ObjectRef

    store = SQLiteStore(tmp_path / "s.db", cache=8)
    try:
        from lifecycle.machines import pod

        from .helpers import step
        from .helpers import t as at

        step(store, pod.CreateRequested(at=at(0)), workers.ref("a"))
        assert store.load(POD, workers.ref("a")) is not None  # now cached
        with pytest.raises(IdentityMismatch):
            store.load(POD, ObjectRef("Pod", "ml", "someone-else", "a"))
    finally:
        store.close()


def test_a_foreign_commit_before_the_first_read_is_seen(tmp_path: Path) -> None:
    """The handle's first use of the cache comes after its own commit and another
    connection's: the cached v1 must not answer (the coherence token is read at open)."""
    from lifecycle.machines import pod

    from .helpers import step
    from .helpers import t as at

    path = tmp_path / "s.db"
    mine, other = SQLiteStore(path, cache=8), SQLiteStore(path)
    try:
        step(other, pod.CreateRequested(at=at(0)), workers.ref("b"))  # before any commit of mine
        mine.commit(  # kept at v1 without a read
            POD,
            workers.ref("a"),
            0,
            POD.initial(workers.ref("a")),
            pod.CreateRequested(at=at(0)),
            (),
        )
        other_record = other.load(POD, workers.ref("a"))
        assert other_record is not None
        other.commit(
            POD, workers.ref("a"), 1, other_record.status, pod.CreateRequested(at=at(1)), ()
        )
        assert mine.settle_cache()  # a single read may rely on a check < 1 ms old (0156)
        assert mine.load(POD, workers.ref("a")).version == 2  # type: ignore[union-attr]
    finally:
        mine.close()
        other.close()


def test_another_connection_s_commit_drops_the_sqlite_cache(tmp_path: Path) -> None:
    from lifecycle.machines import pod

    from .helpers import step
    from .helpers import t as at

    path = tmp_path / "s.db"
    mine, other = SQLiteStore(path, cache=8), SQLiteStore(path)
    try:
        step(mine, pod.CreateRequested(at=at(0)), workers.ref("a"))
        assert mine.load(POD, workers.ref("a")).version == 1  # type: ignore[union-attr]
        assert mine.cache is not None
        drops = mine.cache.stats.drops
        step(other, pod.ConfigInvalid(at=at(1), error="x"), workers.ref("a"))
        assert mine.settle_cache()  # a single read may rely on a check < 1 ms old (0156)
        assert mine.load(POD, workers.ref("a")).version == 2  # type: ignore[union-attr]
        assert mine.cache.stats.drops == drops + 1
        assert mine.load(POD, workers.ref("a")).version == 2  # type: ignore[union-attr]
        assert mine.cache.stats.hits >= 1
    finally:
        mine.close()
        other.close()


# -- PostgreSQL's listener -------------------------------------------------------------------
@pytest.mark.postgres
def test_a_lost_listener_suspends_the_cache_and_it_starts_empty_when_back(
    pg_server: PgServer,
) -> None:
    import time

    import psycopg

    from lifecycle.machines import pod
    from lifecycle.stores.postgres import PostgresStore

    from .helpers import step
    from .helpers import t as at

    url = pg_server.url(schema=f"listen{next(_names)}")
    mine = PostgresStore(url, cache=8)
    other = PostgresStore(
        url, cache=0
    )  # uncached: it notifies (ADR 0143), but not while mine is deaf
    try:
        assert mine.settle_cache()
        assert mine.cache is not None
        step(mine, pod.CreateRequested(at=at(0)), workers.ref("a"))
        assert mine.load(POD, workers.ref("a")).version == 1  # type: ignore[union-attr]
        assert len(mine.cache) == 1
        with psycopg.connect(pg_server.url(), autocommit=True) as admin:
            ended = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = 'lifecycle-listen'"
            ).fetchall()
        assert ended == [(True,)]
        # the listener suspends the cache (dropping what it held) and, once it listens again,
        # resumes it empty: the suspended window may be shorter than any poll of ``usable``,
        # so what is waited for is the drop it recorded
        lost = "the listener's connection was lost"
        deadline = time.monotonic() + 10
        while not mine.cache.stats.reasons.get(lost) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert mine.cache.stats.reasons.get(lost) == 1
        assert len(mine.cache) == 0
        # a write no notification announces: only the drop on the loss makes it visible
        step(other, pod.ConfigInvalid(at=at(1), error="x"), workers.ref("a"))
        assert mine.load(POD, workers.ref("a")).version == 2  # type: ignore[union-attr]
        assert mine.settle_cache()  # listening again, and empty
        assert mine.cache.stats.reasons.get("listening again", 0) >= 2
        assert mine.load(POD, workers.ref("a")).version == 2  # type: ignore[union-attr]
        assert mine.cache.usable
    finally:
        mine.close()
        other.close()


@pytest.mark.postgres
def test_the_asyncio_store_keeps_the_same_cache(pg_server: PgServer) -> None:
    import asyncio

    from lifecycle import AsyncRunner, Runner
    from lifecycle.machines import pod
    from lifecycle.stores.postgres import PostgresStore
    from lifecycle.stores.postgres_async import AsyncPostgresStore

    url = pg_server.url(schema=f"aio{next(_names)}")

    async def main() -> None:
        store = await AsyncPostgresStore.open(url, cache=8)
        other = PostgresStore(url, cache=8)  # notifying
        try:
            assert await store.settle_cache()
            runner = AsyncRunner(store, [], links=())
            ref = workers.ref("a")
            first = await runner.observe(ref, workers.observation(0, 0))
            assert first.committed
            again = await runner.observe(ref, workers.observation(0, 0))
            assert again.outcome.value == "unchanged"
            assert store.cache is not None
            assert store.cache.stats.hits >= 1
            Runner(other, [], links=()).observe(ref, pod.ConfigInvalid(at=workers.EPOCH, error="x"))
            assert await store.settle_cache()
            record = await store.load(POD, ref)
            assert record is not None
            assert record.version == 2
        finally:
            await store.close()
            other.close()

    asyncio.run(main())


# -- the rule, at the store: a read through the cache equals a fresh read ----------------------
store_ops = st.lists(
    st.tuples(
        st.sampled_from(["load", "commit", "stale-commit", "many"]),
        st.integers(0, 2),  # which handle: 0 and 1 cached, 2 not (on PostgreSQL, notifying)
        st.integers(0, len(UIDS) - 1),
    ),
    min_size=1,
    max_size=40,
)


def _commit_next(store: Any, uid: str, expected: int, seconds: int) -> None:
    """A commit of ``uid`` expecting ``expected`` (a stale one is refused: nothing kept)."""
    from lifecycle import Conflict
    from lifecycle.machines import pod

    ref = workers.ref(uid)
    status = POD.apply(POD.initial(ref), pod.CreateRequested(at=workers.EPOCH))
    observation = pod.ConfigInvalid(at=workers.EPOCH, error=f"{seconds}")
    with contextlib.suppress(Conflict):
        store.commit(POD, ref, expected, status, observation, ())


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_every_read_through_a_cache_equals_a_fresh_read(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Two cached handles and one plain one on the same objects, in any interleaving of
    loads, commits (right and stale), and batch loads: each read through a cache equals what a
    fresh uncached read finds at that moment (PostgreSQL: after the handle's barrier)."""
    server = request.getfixturevalue("pg_server") if kind == "postgres" else None

    @(settings(SLOW, max_examples=20 * LONG) if server is not None else SLOW)
    @given(ops=store_ops)
    def check(ops: list[tuple[str, int, int]]) -> None:
        target = targets(kind, tmp_path, server)
        handles = [workers.open_store(kind, target, CACHE) for _ in range(2)]
        handles.append(workers.open_store(kind, target, 0, notify=True))
        fresh = workers.open_store(kind, target, 0)
        try:
            for n, (what, who, obj) in enumerate(ops):
                store, uid = handles[who], UIDS[obj]
                truth = fresh.load(POD, workers.ref(uid))
                version = 0 if truth is None else truth.version
                if what == "commit":
                    _commit_next(store, uid, version, n)
                elif what == "stale-commit":
                    _commit_next(store, uid, max(0, version - 1), n)
                else:
                    if hasattr(store, "settle_cache"):
                        assert store.settle_cache()
                    if what == "load":
                        got = [store.load(POD, workers.ref(uid))]
                    else:
                        got = store.load_many([(POD, workers.ref(u)) for u in UIDS[: obj + 1]])
                    want = fresh.load_many([(POD, workers.ref(u)) for u in UIDS[: len(got)]])
                    if what == "load":
                        want = [fresh.load(POD, workers.ref(uid))]
                    assert [workers.record_summary(r) for r in got] == [
                        workers.record_summary(r) for r in want
                    ]
        finally:
            for s in (*handles, fresh):
                s.close()

    check()


@pytest.mark.postgres
def test_a_schema_of_the_longest_name_still_notifies(pg_server: PgServer) -> None:
    """A schema name may be 63 letters; ``lifecycle:`` and it would be too long a channel
    name, and every notifying commit would fail (found on review)."""
    from lifecycle.machines import pod
    from lifecycle.stores._pgsql import channel_of
    from lifecycle.stores.postgres import PostgresStore

    from .helpers import step
    from .helpers import t as at

    schema = ("s" + f"{next(_names)}_" + "x" * 63)[:63]
    assert len(channel_of(schema)) <= 63
    assert channel_of(schema) != channel_of(schema[:-1] + "y")
    mine, other = (PostgresStore(pg_server.url(schema=schema), cache=8) for _ in range(2))
    try:
        assert mine.settle_cache()
        step(mine, pod.CreateRequested(at=at(0)), workers.ref("a"))
        assert mine.load(POD, workers.ref("a")).version == 1  # type: ignore[union-attr]
        step(other, pod.ConfigInvalid(at=at(1), error="x"), workers.ref("a"))
        assert mine.settle_cache()
        assert mine.load(POD, workers.ref("a")).version == 2  # type: ignore[union-attr]
    finally:
        mine.close()
        other.close()
        from .conftest import drop_schema

        drop_schema(pg_server, schema)


@pytest.mark.postgres
def test_a_silent_listener_suspends_the_cache_until_it_comes_round(pg_server: PgServer) -> None:
    """A listener thread stuck in a call (or starved) cannot hand notices over: a read
    through the cache then finds it silent, suspends the cache, and the loop's next round
    resumes it, empty (found on review)."""
    from lifecycle.machines import pod
    from lifecycle.stores.postgres import PostgresStore

    from .helpers import step
    from .helpers import t as at

    store = PostgresStore(pg_server.url(schema=f"silent{next(_names)}"), cache=8)
    try:
        assert store.settle_cache()
        step(store, pod.CreateRequested(at=at(0)), workers.ref("a"))
        assert store.cache is not None
        assert len(store.cache) == 1
        listener = store._listener
        assert listener is not None
        listener.alive_at -= 100  # as if its loop had not come round for 100 s
        assert store.load(POD, workers.ref("a")) is not None  # read from the store
        assert store.cache.stats.reasons.get("the listener was silent") == 1
        assert store.settle_cache()  # the loop came round: listening, and resumed
        assert store.cache.usable
        assert len(store.cache) == 0 or store.cache.stats.reasons["listening again"] >= 2
    finally:
        store.close()
