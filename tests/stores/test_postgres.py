"""PostgreSQL-specific behaviour: connection errors that name the host and never the
password, versioned idempotent migrations (and ``lifecycle db``), the outbox shared by
several replicas, a conflict storm on one object, batches from overlapping replicas, and a
database restarted mid-run."""

from __future__ import annotations

import asyncio
import io
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from lifecycle import (
    AsyncRunner,
    Dispatcher,
    EventType,
    MemoryEmitter,
    Outcome,
    RetryPolicy,
    Runner,
    StoreError,
    Transition,
    open_async_store,
    open_store,
)
from lifecycle.cli import main
from lifecycle.machines import POD, pod
from lifecycle.stores import _pgsql
from lifecycle.stores.postgres import PostgresStore, migrate, schema_version
from lifecycle.stores.postgres_async import AsyncPostgresStore

from .helpers import check_invariants, pod_ref, raw, step, t
from .pg import PASSWORD, PgServer, free_port

pytestmark = pytest.mark.postgres
WRONG = "wr0ng-Pa55word"


def no_secret(text: str) -> None:
    assert PASSWORD not in text
    assert WRONG not in text


# -- bad URLs and credentials -----------------------------------------------------------------
def test_an_unreachable_server_is_a_clear_error_naming_the_host(pg_server: PgServer) -> None:
    port = free_port()
    url = f"postgresql://lifecycle:{PASSWORD}@127.0.0.1:{port}/postgres"
    started = time.monotonic()
    with pytest.raises(StoreError) as e:
        open_store(url)
    assert time.monotonic() - started < 10
    message = str(e.value)
    assert f"127.0.0.1:{port}" in message
    assert "cannot connect" in message
    assert "refused" in message.lower()
    no_secret(message)
    assert e.value.__cause__ is None or PASSWORD not in str(e.value.__cause__)


def test_wrong_credentials_are_a_clear_error_naming_the_host(
    pg_server: PgServer, capsys: pytest.CaptureFixture[str]
) -> None:
    url = pg_server.url(password=WRONG)
    with pytest.raises(StoreError) as e:
        PostgresStore(url)
    message = str(e.value)
    assert f"127.0.0.1:{pg_server.port}/postgres as lifecycle" in message
    assert "password authentication failed" in message
    no_secret(message)
    assert main(["db", "migrate", "--store", url]) == 2
    err = capsys.readouterr().err
    assert "127.0.0.1" in err
    no_secret(err)
    with pytest.raises(StoreError) as unknown_db:
        PostgresStore(pg_server.url(dbname="nope"))
    assert f"127.0.0.1:{pg_server.port}/nope" in str(unknown_db.value)
    no_secret(str(unknown_db.value))


def test_a_malformed_url_or_schema_is_refused_without_echoing_the_password() -> None:
    for url in (
        f"postgresql://u:{PASSWORD}@h:notaport/db",
        f"postgresql://u:{PASSWORD}@127.0.0.1:1/db?bogus_option=1",
    ):
        with pytest.raises(StoreError) as e:
            open_store(url)
        no_secret(str(e.value))
    with pytest.raises(StoreError, match="identifier"):
        _pgsql.parse_url('postgresql://u@h/db?schema=Robert"); DROP TABLE x;--')
    assert _pgsql.redact_url(f"postgresql://u:{PASSWORD}@h/db") == "postgresql://u:***@h/db"


def test_wrong_credentials_for_the_async_store_are_as_clear(pg_server: PgServer) -> None:
    async def go() -> None:
        with pytest.raises(StoreError) as e:
            await open_async_store(pg_server.url(password=WRONG))
        assert "127.0.0.1" in str(e.value)
        no_secret(str(e.value))

    asyncio.run(go())


# -- migrations -------------------------------------------------------------------------------
def test_migrations_are_versioned_and_idempotent(pg_url: str, pg_schema: str) -> None:
    assert schema_version(pg_url) is None
    assert migrate(pg_url) == [1, 2, 3, 4, 5, 6, 7]
    assert migrate(pg_url) == []
    assert schema_version(pg_url) == _pgsql.LATEST
    store = PostgresStore(pg_url)  # opening migrates too: nothing left to do
    step(store, pod.CreateRequested(at=t(0)), pod_ref())
    rows = raw(store, "SELECT version, description FROM {s}schema_migrations ORDER BY version")
    assert [v for v, _ in rows] == [1, 2, 3, 4, 5, 6, 7]
    store.close()


def test_an_older_schema_is_upgraded_and_keeps_its_rows(pg_url: str, pg_server: PgServer) -> None:
    target = _pgsql.parse_url(pg_url)
    with psycopg.connect(target.conninfo, autocommit=True) as conn:  # a release-1 database
        for stmt in _pgsql.bookkeeping_sql(target.schema):
            conn.execute(stmt)
        _, desc, stmts = _pgsql.pending([], target)[0]
        for stmt in stmts:
            conn.execute(stmt)
        conn.execute(_pgsql.record_sql(target.schema), (1, desc))
        conn.execute(
            f'INSERT INTO "{target.schema}".objects VALUES '
            "('old', 'pod', 'Pod', 'ml', 'trainer-old', 'Provisioning', 1, %s::json)",
            ('{"state": "Provisioning", "phase": "Pending", "pool": "default"}',),
        )
    assert schema_version(pg_url) == 1
    with pytest.raises(StoreError, match="db migrate"):
        PostgresStore(pg_url, migrate=False)
    assert migrate(pg_url) == [2, 3, 4, 5, 6, 7]
    store = PostgresStore(pg_url, migrate=False)
    record = store.load(POD, pod_ref("old"))
    assert record is not None
    assert (record.version, record.status.state) == (1, pod.PROVISIONING)
    (hit,) = store.find(POD, state=pod.PROVISIONING)  # migration 7: in its state since then
    assert hit.record == record
    store.close()


def test_a_newer_schema_is_refused(pg_url: str) -> None:
    migrate(pg_url)
    target = _pgsql.parse_url(pg_url)
    with psycopg.connect(target.conninfo, autocommit=True) as conn:
        conn.execute(_pgsql.record_sql(target.schema), (99, "from the future"))
    for attempt in (lambda: migrate(pg_url), lambda: PostgresStore(pg_url)):
        with pytest.raises(StoreError, match="newer than this release"):
            attempt()


def test_replicas_migrating_at_once_take_turns(pg_url: str) -> None:
    results: list[Any] = []

    def go() -> None:
        try:
            results.append(migrate(pg_url))
        except Exception as e:  # pragma: no cover - the failure we look for
            results.append(e)

    threads = [threading.Thread(target=go) for _ in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert sorted(map(str, results)) == sorted(["[1, 2, 3, 4, 5, 6, 7]"] + ["[]"] * 5)


def test_the_cli_migrates_reports_and_compacts(
    pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["db", "status", "--store", pg_url]) == 1
    assert "not migrated" in capsys.readouterr().out
    out = io.StringIO()
    assert main(["db", "migrate", "--store", pg_url], out=out) == 0
    assert "applied 1, 2, 3, 4" in out.getvalue()
    no_secret(out.getvalue())
    out = io.StringIO()
    assert main(["db", "migrate", "--store", pg_url], out=out) == 0
    assert f"up to date (schema version {_pgsql.LATEST})" in out.getvalue()
    assert main(["db", "status", "--store", pg_url]) == 0
    capsys.readouterr()

    store = PostgresStore(pg_url)
    runner = Runner(store, [MemoryEmitter()])
    ref = pod_ref("cli")
    runner.observe(ref, pod.CreateRequested(at=t(0)))
    runner.observe(ref, pod.ProvisionSucceeded(at=t(1), reserved=True, instance_id="i-1"))
    for i in range(5):
        runner.observe(ref, pod.InstanceRunning(at=t(2 + 2 * i)))
        runner.observe(ref, pod.InstancePending(at=t(3 + 2 * i)))
    out = io.StringIO()
    assert main(["db", "compact", "--store", pg_url, "--keep", "2"], out=out) == 0
    assert "pod: 10 journal entries compacted" in out.getvalue()
    check_invariants(store, [ref, *(r.ref for r in store.records(runner.machines["nodeclaim"]))])
    store.close()


def test_replay_accepts_a_postgresql_store(pg_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    from .test_async import TRACES

    demo = next(p for p in TRACES if p.name == "demo.jsonl")
    out = io.StringIO()
    assert main(["replay", str(demo), "--store", pg_url], out=out) == 0
    assert "@127.0.0.1" in out.getvalue()  # the password blotted out (*** or <redacted>)
    no_secret(out.getvalue())
    store = PostgresStore(pg_url)
    assert list(store.records(POD))
    store.close()


# -- the outbox, shared -----------------------------------------------------------------------
class Sink:
    """A thread-safe sink recording (replica, event) in global delivery order."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.log: list[tuple[str, Transition]] = []

    def emitter(self, name: str) -> Any:
        sink = self

        class One:
            def emit(self, transition: Transition) -> None:
                with sink.lock:
                    sink.log.append((name, transition))

        return One()


class Down:
    def emit(self, transition: Transition) -> None:
        raise ConnectionError("API server unreachable")


def committed_but_undelivered(url: str, objects: int, per_object: int) -> list[Any]:
    """Commit ``objects`` pods with ``per_object`` events each through a replica whose
    emitter is down, then let its short lease run out."""
    store = PostgresStore(url, lease_seconds=0.2)
    runner = Runner(store, [Down()], links=(), policy=RetryPolicy(backoff=0))
    refs = [pod_ref(f"o{i:03d}") for i in range(objects)]
    for ref in refs:
        runner.observe(ref, pod.CreateRequested(at=t(0)))
        runner.observe(ref, pod.ProvisionSucceeded(at=t(1), reserved=True, instance_id="i"))
        for k in range(per_object - 2):
            obs: Any = pod.InstanceRunning if k % 2 == 0 else pod.InstancePending
            runner.observe(ref, obs(at=t(2 + k)))
    store.close()
    time.sleep(0.3)
    return refs


def test_several_dispatchers_share_the_outbox_each_event_once_each_object_in_order(
    pg_url: str,
) -> None:
    refs = committed_but_undelivered(pg_url, objects=40, per_object=6)
    sink = Sink()
    stores = [PostgresStore(pg_url, lease_seconds=5) for _ in range(4)]
    dispatchers = [Dispatcher(s, [sink.emitter(f"r{i}")], batch=7) for i, s in enumerate(stores)]
    barrier = threading.Barrier(len(dispatchers))

    def work(d: Dispatcher) -> None:
        barrier.wait()
        d.drain()

    threads = [threading.Thread(target=work, args=(d,)) for d in dispatchers]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    ids = Counter(e.id for _, e in sink.log)
    assert len(ids) == 40 * 6
    assert max(ids.values()) == 1  # no event delivered twice
    assert len({r for r, _ in sink.log}) > 1  # the work really was shared
    by_object: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for replica, e in sink.log:
        by_object[e.ref.uid].append((replica, e.version))
    for uid, seen in by_object.items():
        assert [v for _, v in seen] == sorted(v for _, v in seen), uid  # version order
    events = check_invariants(stores[0], refs)
    assert set(ids) == set(events)
    assert stores[0].undelivered_count() == 0
    for s in stores:
        s.close()


def test_a_replica_holding_an_object_keeps_it_until_its_lease_ends(pg_url: str) -> None:
    committed_but_undelivered(pg_url, objects=2, per_object=3)
    holder = PostgresStore(pg_url, lease_seconds=0.5)
    other = PostgresStore(pg_url, lease_seconds=5)
    claimed = holder.claim_undelivered(limit=1)  # the first event of o000: the object is held
    assert [e.id for e in claimed] == ["o000:1:0"]
    # o000's later events are not handed to another replica while the holder may deliver
    taken = other.claim_undelivered()
    assert {e.ref.uid for e in taken} == {"o001"}
    assert [e.version for e in taken] == [1, 2, 3]
    time.sleep(0.6)  # the holder died: its lease ends, the object moves on, in order
    assert [e.id for e in other.claim_undelivered()] == [
        "o000:1:0",
        "o000:2:0",
        "o000:3:0",
        "o001:1:0",
        "o001:2:0",
        "o001:3:0",
    ]
    holder.close()
    other.close()


def test_a_dispatcher_stops_an_object_at_its_first_failed_delivery(pg_url: str) -> None:
    committed_but_undelivered(pg_url, objects=2, per_object=3)
    store = PostgresStore(pg_url)

    class FailsOn:
        def __init__(self) -> None:
            self.events: list[str] = []
            self.failed: set[str] = set()

        def emit(self, transition: Transition) -> None:
            if transition.id == "o000:2:0" and "o000:2:0" not in self.failed:
                self.failed.add(transition.id)
                raise ConnectionError("blip")
            self.events.append(transition.id)

    emitter = FailsOn()
    dispatcher = Dispatcher(store, [emitter])
    assert dispatcher.dispatch_once() == 4  # o000:1 and all of o001
    assert emitter.events == ["o000:1:0", "o001:1:0", "o001:2:0", "o001:3:0"]
    assert dispatcher.dispatch_once() == 2  # o000:2 then o000:3: never out of order
    assert emitter.events[-2:] == ["o000:2:0", "o000:3:0"]
    assert store.undelivered_count() == 0
    store.close()


# -- a conflict storm -------------------------------------------------------------------------
def test_a_conflict_storm_on_one_object_is_bounded_and_never_duplicates_an_event(
    pg_url: str,
) -> None:
    ref = pod_ref("storm")
    setup = PostgresStore(pg_url)
    boot = Runner(setup, [], links=())
    boot.observe(ref, pod.CreateRequested(at=t(0)))
    boot.observe(ref, pod.ProvisionSucceeded(at=t(1), reserved=True, instance_id="i-1"))
    setup.mark_delivered(e.id for e in setup.claim_undelivered())
    sink = Sink()
    results: list[Any] = []
    lock = threading.Lock()
    barrier = threading.Barrier(8)

    def replica(n: int) -> None:
        store = PostgresStore(pg_url, pool_size=1)
        runner = Runner(
            store, [sink.emitter(f"r{n}")], links=(), policy=RetryPolicy(attempts=3, backoff=0)
        )
        barrier.wait()
        for i in range(25):
            obs: Any = (
                pod.InstanceRunning(at=t(10 + i))
                if (i + n) % 2
                else pod.InstancePending(at=t(10 + i))
            )
            r = runner.observe(ref, obs)
            with lock:
                results.append(r)
        r = runner.observe(ref, pod.InstanceFailed(at=t(100), exit_code=n))  # the terminal race
        with lock:
            results.append(r)
        runner.redeliver()
        store.close()

    threads = [threading.Thread(target=replica, args=(n,)) for n in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert max(r.attempts for r in results) <= 3  # bounded
    conflicts = [r for r in results if r.outcome is Outcome.FAILED]
    assert conflicts, "the storm produced no exhausted budget; make it harder"
    for r in results:
        if r.outcome is Outcome.FAILED:
            assert r.attempts == 3
            assert r.transitions == ()
            assert all(f.fallback and f.reason.endswith("StatusUpdateFailed") for f in r.fallback)
            warnings = [f for f in r.fallback if f.type is EventType.WARNING]
            assert len(r.fallback) == len(warnings) <= 1
    events = check_invariants(setup, [ref])
    delivered = [e for _, e in sink.log if not e.fallback]
    ids = Counter(e.id for e in delivered)
    assert max(ids.values()) == 1
    assert set(ids) == {i for i, e in events.items() if e.version > 2}
    for e in delivered:
        assert events[e.id] == e
    terminal = [e for e in events.values() if e.target == pod.FAILED]
    assert len(terminal) == 1  # the first terminal status wins, once
    fallback_ids = [e.id for _, e in sink.log if e.fallback]
    assert all(i not in events for i in fallback_ids)  # a fallback never claims a write
    assert setup.undelivered_count() == 0
    setup.close()


def test_overlapping_batches_from_two_replicas_neither_deadlock_nor_lose_writes(
    pg_url: str,
) -> None:
    refs = [pod_ref(f"ov{i:02d}") for i in range(30)]
    setup = PostgresStore(pg_url)
    Runner(setup, [], links=()).observe_many([(r, pod.CreateRequested(at=t(0))) for r in refs])
    setup.close()
    errors: list[Any] = []
    barrier = threading.Barrier(2)

    def replica(order: list[Any], n: int) -> None:
        store = PostgresStore(pg_url)
        runner = Runner(store, [], links=(), policy=RetryPolicy(attempts=50, backoff=0.001))
        barrier.wait()
        for i in range(15):
            cls: Any = pod.ConfigInvalid if (i + n) % 2 else pod.CreateRequested
            obs = cls(at=t(1 + i), error="x") if cls is pod.ConfigInvalid else cls(at=t(1 + i))
            for r in runner.observe_many([(ref, obs) for ref in order]):
                if r.outcome is Outcome.FAILED:
                    errors.append(r.error)
        store.close()

    threads = [
        threading.Thread(target=replica, args=(refs, 0)),
        threading.Thread(target=replica, args=(list(reversed(refs)), 1)),
    ]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    store = PostgresStore(pg_url)
    check_invariants(store, refs)
    store.close()


# -- the database restarted mid-run -----------------------------------------------------------
@pytest.fixture
def own_server() -> Iterator[PgServer]:
    server = PgServer()
    server.start()
    yield server
    server.destroy()


def test_a_restarted_database_fails_writes_clearly_and_the_runner_recovers(
    own_server: PgServer,
) -> None:
    url = own_server.url()
    store = PostgresStore(url, timeout=1.0, connect_timeout=2.0)
    emitter = MemoryEmitter()
    runner = Runner(store, [emitter], links=(), policy=RetryPolicy(backoff=0))
    refs = [pod_ref(f"db{i}") for i in range(3)]
    for r in refs:
        runner.observe(r, pod.CreateRequested(at=t(0)))
        runner.observe(r, pod.ProvisionSucceeded(at=t(1), reserved=True, instance_id="i-1"))

    # a writer hammering while the server goes down hard
    stop = threading.Event()
    seen: Counter[str] = Counter()

    def hammer() -> None:
        hstore = PostgresStore(url, timeout=0.5, connect_timeout=2.0)
        hrunner = Runner(hstore, [], links=(), policy=RetryPolicy(backoff=0))
        i = 0
        while not stop.is_set():
            i += 1
            obs: Any = pod.InstanceRunning if i % 2 else pod.InstancePending
            result = hrunner.observe(refs[i % 3], obs(at=t(10 + i)))
            seen[result.outcome.value] += 1
        hstore.close()

    worker = threading.Thread(target=hammer)
    worker.start()
    time.sleep(0.3)
    own_server.stop("immediate")  # a crash: no clean shutdown
    down = runner.observe(refs[0], pod.InstanceFailed(at=t(50), exit_code=1))
    assert down.outcome is Outcome.FAILED
    assert isinstance(down.error, StoreError)
    message = str(down.error)
    assert f"127.0.0.1:{own_server.port}" in message
    no_secret(message)
    assert [f.reason for f in down.fallback] in ([], ["FailedStatusUpdateFailed"])

    own_server.start()
    deadline = time.monotonic() + 20
    while True:
        back = runner.observe(refs[0], pod.InstanceFailed(at=t(60), exit_code=1))
        if back.outcome is not Outcome.FAILED or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert back.committed, back.error
    time.sleep(0.5)
    stop.set()
    worker.join()
    assert seen["failed"] > 0
    assert seen["committed"] > 0
    # nothing half-written: every journal is contiguous and folds; the outbox holds only
    # events the journal holds
    events = check_invariants(store, refs)
    pending = {e.id for e in store.claim_undelivered()}
    assert pending <= set(events)
    store.close()


# -- the asyncio store ------------------------------------------------------------------------
def test_two_async_replicas_racing_keep_every_guarantee(pg_url: str) -> None:
    ref = pod_ref("aio")

    async def go() -> list[Any]:
        stores = [await AsyncPostgresStore.open(pg_url, pool_size=2) for _ in range(2)]
        sinks = [MemoryEmitter(), MemoryEmitter()]
        runners = [
            AsyncRunner(s, [k], links=(), policy=RetryPolicy(attempts=100, backoff=0.0005))
            for s, k in zip(stores, sinks, strict=True)
        ]
        await runners[0].observe(ref, pod.CreateRequested(at=t(0)))
        await runners[0].observe(
            ref, pod.ProvisionSucceeded(at=t(1), reserved=True, instance_id="i")
        )

        async def flap(runner: AsyncRunner, n: int) -> list[Any]:
            out = []
            for i in range(30):
                obs: Any = pod.InstanceRunning if (i + n) % 2 else pod.InstancePending
                out.append(await runner.observe(ref, obs(at=t(10 + i))))
            return out

        done = await asyncio.gather(flap(runners[0], 0), flap(runners[1], 1))
        for r in runners:
            await r.close()
        return [*done[0], *done[1], sinks]

    *results, sinks = asyncio.run(go())
    assert all(r.outcome is not Outcome.FAILED for r in results)
    store = PostgresStore(pg_url)
    events = check_invariants(store, [ref])
    delivered = Counter(e.id for k in sinks for e in k.events)
    assert max(delivered.values()) == 1
    assert set(delivered) == set(events)
    store.close()
