"""No writer can make a PostgreSQL status cache stale (ADR 0143), on ``PostgresStore`` and
``AsyncPostgresStore`` alike.

- **Differentially**: a cached handle and a second one beside an uncached handle, plain
  SQL through psycopg (a version bumped, a status edited in place, an object deleted) and
  the listener's connection ended by ``pg_terminate_backend``, in any interleaving
  Hypothesis picks; with the cached handle's barrier before its steps, every decision equals
  the run where no handle caches, and afterwards every read through a cache equals a fresh
  read.
- **Without barriers**: after any writer's write, a read through the cache equals a fresh
  read within a bounded time.
- **The guard**: with the notify trigger disabled, the cache is unused and a warning says so;
  disabled and enabled again between two checks, the cache is dropped.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lifecycle import AsyncRunner, LifecycleError, Runner
from lifecycle.machines import POD

from . import _cache_workers as workers
from .pg import PgServer

pytestmark = pytest.mark.postgres

UIDS = ["a", "b", "c"]
CACHE = 2
_names = itertools.count()
#: how long a read through a cache may lag a write made without a barrier
BOUND = 5.0

Action = tuple[Any, ...]
actions = st.lists(
    st.one_of(
        # observe by handle 0 (cached), 1 (uncached) or 2 (cached)
        st.tuples(
            st.just("observe"),
            st.integers(0, 2),
            st.integers(0, len(UIDS) - 1),
            st.integers(0, workers.KINDS - 1),
        ),
        st.tuples(
            st.just("sql"),
            st.sampled_from(["bump", "edit", "delete"]),
            st.integers(0, len(UIDS) - 1),
        ),
        st.tuples(st.just("kill")),
    ),
    min_size=1,
    max_size=25,
)


class Side:
    """One store handle (synchronous, or asyncio on a loop of its own) and its runner."""

    def __init__(self, aio: bool, url: str, cache: int) -> None:
        self.aio = aio
        if aio:
            from lifecycle.stores.postgres_async import AsyncPostgresStore

            self.loop = asyncio.new_event_loop()
            options: dict[str, Any] = {"cache": cache, "pool_size": 2} if cache else {"cache": 0}
            self.store: Any = self.run(AsyncPostgresStore.open(url, **options))
            self.runner: Any = AsyncRunner(self.store, [], links=())
        else:
            from lifecycle.stores.postgres import PostgresStore

            self.store = PostgresStore(url, cache=cache, pool_size=2) if cache else None
            if self.store is None:  # an uncached writer (the defaults cache since ADR 0155)
                self.store = PostgresStore(url, cache=0)
            self.runner = Runner(self.store, [], links=())

    def run(self, value: Any) -> Any:
        return self.loop.run_until_complete(value) if self.aio else value

    def observe(self, uid: str, index: int, seconds: int) -> tuple[Any, ...]:
        try:
            result = self.run(
                self.runner.observe(workers.ref(uid), workers.observation(index, seconds))
            )
        except LifecycleError as e:
            return workers.summary(e)
        return workers.summary(result)

    def settle(self, timeout: float = 5.0) -> bool:
        return bool(self.run(self.store.settle_cache(timeout)))

    def read(self, uid: str) -> Any:
        return workers.record_summary(self.run(self.store.load(POD, workers.ref(uid))))

    def close(self) -> None:
        self.run(self.store.close())
        if self.aio:
            self.loop.close()


@pytest.fixture(params=["sync", "async"])
def aio(request: pytest.FixtureRequest) -> bool:
    return bool(request.param == "async")


def _schema(pg_server: PgServer) -> tuple[str, str]:
    schema = f"w{os.getpid()}_{next(_names)}"
    return schema, pg_server.url(schema=schema)


def plain_sql(pg_server: PgServer, schema: str, op: str, uid: str) -> None:
    """A writer that bypasses the library: one transaction of its own on a plain connection."""
    from lifecycle.stores._pgsql import status_json

    s = f'"{schema}"'
    with psycopg.connect(pg_server.url(), autocommit=True) as conn, conn.transaction():
        if op == "bump":  # a version raised by hand
            conn.execute(f"UPDATE {s}.objects SET version = version + 1 WHERE uid = %s", (uid,))
        elif op == "edit":  # the status put back to the initial one, at the same version
            ref = workers.ref(uid)
            status = status_json(POD, ref, POD.initial(ref))
            conn.execute(
                f"UPDATE {s}.objects SET status = %s::json, state = 'New' WHERE uid = %s",
                (status, uid),
            )
        elif op == "delete":  # an operator removing an object by hand
            for table in ("outbox", "journal", "snapshots", "objects"):
                conn.execute(f"DELETE FROM {s}.{table} WHERE uid = %s", (uid,))
        elif op == "truncate":
            conn.execute(f"TRUNCATE {s}.objects, {s}.journal, {s}.outbox, {s}.snapshots")
        else:
            raise AssertionError(op)


def kill_listeners(pg_server: PgServer) -> int:
    """End every status cache listener's connection on the server."""
    with psycopg.connect(pg_server.url(), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = 'lifecycle-listen'"
        ).fetchall()
    return len(rows)


def run(
    pg_server: PgServer, aio: bool, schedule: list[Action], *, cached: bool
) -> tuple[list[Any], dict[str, Any]]:
    """The schedule on a fresh schema: handles 0 and 2 cached (when ``cached``), handle 1
    uncached. Each step's summary, and what a fresh handle reads at the end."""
    schema, url = _schema(pg_server)
    sides = [Side(aio, url, CACHE if cached and n != 1 else 0) for n in range(3)]
    try:
        out: list[Any] = []
        for n, action in enumerate(schedule):
            if action[0] == "observe":
                _, who, obj, index = action
                if cached and who != 1:
                    assert sides[who].settle(), "the barrier did not come back"
                out.append(sides[who].observe(UIDS[obj], index, n))
            elif action[0] == "sql":
                plain_sql(pg_server, schema, action[1], UIDS[action[2]])
            elif cached:  # the listeners' connections ended (nothing to end without a cache)
                for side in (sides[0], sides[2]):
                    assert side.settle()  # listening: there is a connection to end
                assert kill_listeners(pg_server) == 2
        fresh = {uid: sides[1].read(uid) for uid in UIDS}  # handle 1 caches nothing
        if cached:
            for side in (sides[0], sides[2]):
                assert side.settle()
                assert {uid: side.read(uid) for uid in UIDS} == fresh
        return out, fresh
    finally:
        for side in sides:
            side.close()
        from .conftest import drop_schema

        drop_schema(pg_server, schema)


#: ``make test`` runs the short form; the ``slow`` variant explores longer
SHORT = settings(
    max_examples=5,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _differential(pg_server: PgServer, aio: bool, schedule: list[Action]) -> None:
    cached, cached_end = run(pg_server, aio, schedule, cached=True)
    plain, plain_end = run(pg_server, aio, schedule, cached=False)
    assert cached == plain
    assert cached_end == plain_end


def test_cached_handles_decide_as_uncached_ones_beside_any_writer(
    pg_server: PgServer, aio: bool
) -> None:
    @SHORT
    @given(schedule=actions)
    def check(schedule: list[Action]) -> None:
        _differential(pg_server, aio, schedule)

    check()


def test_a_fixed_schedule_of_every_writer_and_killed_listeners(
    pg_server: PgServer, aio: bool
) -> None:
    """The short form's guarantee, whatever Hypothesis draws: every kind of writer, and the
    listener killed again and again between the cached handle's steps."""
    schedule: list[Action] = []
    for n in range(6):
        obj = n % len(UIDS)
        schedule += [
            ("observe", 0, obj, 0),
            ("observe", 1, obj, 1),  # uncached: a change the cached handle must see
            ("observe", 0, obj, 2),
            ("sql", ["bump", "edit", "delete"][n % 3], obj),
            ("observe", 2, obj, 2),
            ("kill",),
            ("observe", 0, obj, 3),
            ("observe", 1, obj, 4),
            ("kill",),
            ("observe", 0, obj, 4),
        ]
    _differential(pg_server, aio, schedule)


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("LIFECYCLE_SOAK") != "1", reason="set LIFECYCLE_SOAK=1")
def test_cached_handles_decide_as_uncached_ones_beside_any_writer_soak(
    pg_server: PgServer, aio: bool
) -> None:
    @settings(SHORT, max_examples=60)
    @given(schedule=actions)
    def check(schedule: list[Action]) -> None:
        _differential(pg_server, aio, schedule)

    check()


# -- without barriers: a bounded time ---------------------------------------------------------
def _agrees_within(cached: Side, fresh: Side, uid: str) -> float:
    """Seconds until a read through ``cached`` equals a fresh read (fails after BOUND)."""
    start = time.monotonic()
    while True:
        if cached.read(uid) == fresh.read(uid):
            return time.monotonic() - start
        assert time.monotonic() - start < BOUND, f"{uid}: the cache still differs"
        time.sleep(0.01)


WRITERS: list[tuple[str, Callable[..., None]]] = [
    ("the defaults", lambda side, sql: side.observe("a", 1, 10)),
    ("a version bumped", lambda side, sql: sql("bump")),
    ("a status edited in place", lambda side, sql: sql("edit")),
    ("a delete", lambda side, sql: sql("delete")),
    ("a truncate", lambda side, sql: sql("truncate")),
]


@pytest.mark.parametrize("writer", [w for w, _ in WRITERS])
def test_every_read_through_a_cache_equals_a_fresh_read_within_a_bound(
    pg_server: PgServer, aio: bool, writer: str
) -> None:
    write = dict(WRITERS)[writer]
    schema, url = _schema(pg_server)
    cached, other = Side(aio, url, 8), Side(aio, url, 0)
    try:
        assert cached.settle()
        assert cached.observe("a", 0, 0)[0] == "committed"
        assert cached.read("a") == other.read("a")
        assert cached.store.cache.stats.hits >= 1  # held: the write below must drop it
        write(other, lambda op: plain_sql(pg_server, schema, op, "a"))
        _agrees_within(cached, other, "a")
        # and a change decided through the cache now is no conflict retried
        decided = cached.observe("a", 1, 20)
        assert decided[0] == "refused" or decided[2] == 1, decided
    finally:
        cached.close()
        other.close()


# -- the guard ---------------------------------------------------------------------------------
def test_a_disabled_notify_trigger_suspends_the_cache_with_a_warning(
    pg_server: PgServer, aio: bool, caplog: pytest.LogCaptureFixture
) -> None:
    schema, url = _schema(pg_server)
    cached, other = Side(aio, url, 8), Side(aio, url, 0)
    s = f'"{schema}"'
    try:
        assert cached.settle()
        cached.observe("a", 0, 0)
        assert cached.read("a") is not None
        cache, listener = cached.store.cache, cached.store._listener
        with psycopg.connect(pg_server.url(), autocommit=True) as admin:
            with caplog.at_level(logging.WARNING, logger="lifecycle.stores.postgres"):
                admin.execute(f"ALTER TABLE {s}.objects DISABLE TRIGGER lifecycle_notify")
                deadline = time.monotonic() + BOUND
                while cache.usable and time.monotonic() < deadline:
                    time.sleep(0.01)
                assert not cache.usable
                assert not listener.trusted
                assert any("may not notify" in r.getMessage() for r in caplog.records)
            # writes nobody announces: reads go to the store meanwhile
            plain_sql(pg_server, schema, "bump", "a")
            assert cached.read("a") == other.read("a")
            assert not cached.settle(timeout=0.2)  # the cache is not in use: no barrier holds
            admin.execute(f"ALTER TABLE {s}.objects ENABLE ALWAYS TRIGGER lifecycle_notify")
            assert cached.settle()
            assert cache.usable
            assert cached.read("a") == other.read("a")
            # disabled, written and enabled again between two checks: the cache is dropped
            assert cached.read("a") is not None
            assert len(cache) == 1
            with admin.transaction():
                admin.execute(f"ALTER TABLE {s}.objects DISABLE TRIGGER lifecycle_notify")
            plain_sql(pg_server, schema, "bump", "a")
            with admin.transaction():
                admin.execute(f"ALTER TABLE {s}.objects ENABLE ALWAYS TRIGGER lifecycle_notify")
            _agrees_within(cached, other, "a")
            assert (
                cache.stats.reasons.get("the notify trigger changed", 0)
                + cache.stats.reasons.get("a writer may not notify", 0)
                >= 2
            )
    finally:
        cached.close()
        other.close()


def test_notify_false_is_refused(pg_server: PgServer) -> None:
    from lifecycle.stores.postgres import PostgresStore

    with pytest.raises(ValueError, match="notif"):
        PostgresStore(pg_server.url(schema="never"), notify=False)


def test_a_schema_of_an_older_release_gains_the_trigger_when_migrated(pg_server: PgServer) -> None:
    """A schema at version 4 (before every write notified) is migrated to 5: from then on a
    write by plain SQL -- as an older release's replica still running would make -- notifies."""
    from lifecycle.stores import _pgsql as sql
    from lifecycle.stores.postgres import PostgresStore, migrate

    schema, url = _schema(pg_server)
    with psycopg.connect(pg_server.url(), autocommit=True) as conn:
        target = sql.parse_url(url)
        for stmt in sql.bookkeeping_sql(schema):
            conn.execute(stmt)
        for version, description, statements in sql.pending([], target)[:4]:
            for stmt in statements:
                conn.execute(stmt)
            conn.execute(sql.record_sql(schema), (version, description))
    assert migrate(url) == [5, 6, 7]
    cached = PostgresStore(url, cache=8)
    try:
        assert cached.settle_cache()
        Runner(cached, [], links=()).observe(workers.ref("a"), workers.observation(0, 0))
        assert cached.load(POD, workers.ref("a")) is not None
        plain_sql(pg_server, schema, "bump", "a")
        assert cached.settle_cache()
        assert cached.load(POD, workers.ref("a")).version == 2  # type: ignore[union-attr]
    finally:
        cached.close()
