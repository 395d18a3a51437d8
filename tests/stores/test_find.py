"""The questions of the store (issue 38, ADR 0159): ``find`` objects by machine, state and time
in state, and ``state_counts`` -- on the memory, SQLite, PostgreSQL (threaded and asyncio) and
Kubernetes stores alike; bad input refused with :class:`InvalidQuery`, nothing read or written;
and a property that ``find`` is ``records()`` filtered by hand, ``entered`` falling inside the
commit that last changed each object's state."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lifecycle import MemoryStore, SQLiteStore
from lifecycle.machines import POD, pod
from lifecycle.stores import FindStore, InvalidQuery
from lifecycle.stores.base import Found
from lifecycle.stores.sqlite import SCHEMA_VERSION

from .conftest import KINDS
from .helpers import pod_ref, raw, step, t
from .test_kubernetes_store import RESOURCES, api, serve

GAP = 0.02  # seconds between commits: above SQLite's millisecond clock


@pytest.fixture(params=KINDS)
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def uids(found: list[Found]) -> list[str]:
    return [f.record.ref.uid for f in found]


def create(store: Any, uid: str) -> None:
    step(store, pod.CreateRequested(at=t(0)), pod_ref(uid))


def initialize(store: Any, uid: str) -> None:
    step(store, pod.ProvisionSucceeded(at=t(1), reserved=True, instance_id="i-1"), pod_ref(uid))


def scenario(store: Any, find: Callable[..., list[Found]], counts: Callable[[], Any]) -> None:
    """Three pods created in turn; the first moves on; the second is written again in the
    same state (its time in state does not restart)."""
    before = datetime.now(UTC)
    for uid in ("p0", "p1", "p2"):
        create(store, uid)
        time.sleep(GAP)
    mark = datetime.now(UTC)
    time.sleep(GAP)
    initialize(store, "p0")
    create(store, "p1")  # CreateRequested again: still Provisioning, version 2
    after = datetime.now(UTC)

    assert uids(find(POD)) == ["p1", "p2", "p0"]  # oldest first
    assert uids(find(POD, state="Provisioning")) == ["p1", "p2"]
    assert uids(find(POD, state="Provisioning", entered_before=mark)) == ["p1", "p2"]
    assert uids(find(POD, state="Initializing", entered_before=mark)) == []
    assert uids(find(POD, state="Initializing")) == ["p0"]
    assert uids(find(POD, state="Running")) == []
    assert uids(find(POD, limit=1)) == ["p1"]
    assert uids(find(POD, older_than=timedelta(hours=1))) == []
    assert uids(find(POD, state="Provisioning", older_than=0)) == ["p1", "p2"]
    hits = find(POD, state="Provisioning")
    assert hits[0].record.version == 2  # the record as stored now
    assert hits[0].record == store_record(store, "p1")
    for hit in find(POD):
        assert before - timedelta(seconds=0.002) <= hit.entered <= after + timedelta(seconds=0.01)
        assert hit.entered.tzinfo is not None
    assert find(POD, state="Initializing")[0].entered > mark
    summary = {(c.machine, c.state): (c.count, c.oldest) for c in counts()}
    assert set(summary) == {("pod", "Provisioning"), ("pod", "Initializing")}
    assert summary[("pod", "Provisioning")] == (2, hits[0].entered)


def store_record(store: Any, uid: str) -> Any:
    return store.load(POD, pod_ref(uid))


def refusals(find: Callable[..., list[Found]]) -> None:
    for bad in (
        {"state": "Provisionng"},
        {"older_than": -1},
        {"older_than": timedelta(seconds=-5)},
        {"older_than": float("nan")},
        {"older_than": "15m"},
        {"entered_before": datetime(2026, 1, 1)},  # no timezone
        {"entered_before": datetime.now(UTC), "older_than": 5},
        {"limit": 0},
        {"limit": True},
    ):
        with pytest.raises(InvalidQuery):
            find(POD, **bad)


def test_find_by_state_and_time_in_state(any_store: Any) -> None:
    assert isinstance(any_store, FindStore)
    scenario(any_store, any_store.find, any_store.state_counts)


def test_bad_questions_are_refused_and_change_nothing(any_store: Any) -> None:
    create(any_store, "p0")
    before = list(any_store.records(POD))
    refusals(any_store.find)
    assert list(any_store.records(POD)) == before
    with pytest.raises(InvalidQuery, match=r"no state 'Provisionng'.*'Provisioning'"):
        any_store.find(POD, state="Provisionng")
    with pytest.raises(InvalidQuery, match="must not be negative"):
        any_store.find(POD, older_than=-1)


@pytest.mark.postgres
def test_the_asyncio_postgres_store_answers_the_same(pg_url: str) -> None:
    from lifecycle.stores.postgres import PostgresStore
    from lifecycle.stores.postgres_async import AsyncPostgresStore

    store = PostgresStore(pg_url)
    try:
        create(store, "p0")
        time.sleep(GAP)
        create(store, "p1")
        initialize(store, "p0")

        async def main() -> None:
            twin = await AsyncPostgresStore.open(pg_url)
            try:
                for state in ("Provisioning", "Initializing", None):
                    assert await twin.find(POD, state=state) == store.find(POD, state=state)
                assert await twin.state_counts() == store.state_counts()
                with pytest.raises(InvalidQuery):
                    await twin.find(POD, state="Nope")
            finally:
                await twin.close()

        asyncio.run(main())
    finally:
        store.close()


def test_sqlite_find_reads_one_index_range(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    create(store, "p0")
    store.close()
    with sqlite3.connect(tmp_path / "s.db") as db:
        plan = " ".join(
            str(row[-1])
            for row in db.execute(
                "EXPLAIN QUERY PLAN SELECT uid FROM objects WHERE machine = 'pod' AND "
                "state = 'Provisioning' AND entered < 1e12 ORDER BY entered, uid LIMIT 10"
            )
        )
    assert "objects_by_state_age" in plan
    assert "TEMP B-TREE" not in plan  # no sort: the index gives the order


def test_an_sqlite_store_of_schema_3_is_migrated(tmp_path: Path) -> None:
    """A file written before schema 4: opened, it gains ``entered`` (its objects counted from
    the migration), the triggers and the index; later state changes restart the clock."""
    path = tmp_path / "s.db"
    store = SQLiteStore(path)
    create(store, "p0")
    store.close()
    with sqlite3.connect(path) as db:  # back to schema 3, as an older release left it
        db.executescript(
            "DROP TRIGGER objects_entered_new; DROP TRIGGER objects_entered_moved; "
            "DROP INDEX objects_by_state_age; ALTER TABLE objects DROP COLUMN entered; "
            "UPDATE lifecycle_meta SET value = '3' WHERE key = 'schema_version';"
        )
    opened = time.time()
    store = SQLiteStore(path)
    try:
        (hit,) = store.find(POD, state="Provisioning")
        assert hit.entered.timestamp() >= opened - 0.002
        time.sleep(GAP)
        initialize(store, "p0")
        (moved,) = store.find(POD, state="Initializing")
        assert moved.entered > hit.entered
    finally:
        store.close()
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT value FROM lifecycle_meta WHERE key = 'schema_version'")
        assert db.execute(
            "SELECT value FROM lifecycle_meta WHERE key = 'schema_version'"
        ).fetchone() == (str(SCHEMA_VERSION),)


# -- the property: find is records() filtered by hand -----------------------------------------
OPS = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c", "d"]), st.sampled_from(["create", "init", "run"])),
    min_size=1,
    max_size=8,
)
STATES = st.sampled_from(["Provisioning", "Initializing", "Running", None])


def apply(store: Any, uid: str, op: str) -> None:
    ref = pod_ref(uid)
    if op == "create" or store.load(POD, ref) is None:
        create(store, uid)
    elif op == "init":
        initialize(store, uid)
    else:
        step(store, pod.InstanceRunning(at=t(3)), ref)


def check_against_records(store: Any, ops: list[tuple[str, str]], state: str | None) -> None:
    windows: dict[str, tuple[float, float]] = {}  # uid -> the commit that set its state
    for uid, op in ops:
        was = store.load(POD, pod_ref(uid))
        start = time.time()
        apply(store, uid, op)
        end = time.time()
        now = store.load(POD, pod_ref(uid))
        if was is None or was.status.state != now.status.state:
            windows[uid] = (start, end)
        time.sleep(0.003)
    by_hand = [r for r in store.records(POD) if state is None or r.status.state == state]
    found = store.find(POD, state=state, limit=1000)
    assert sorted(uids(found)) == sorted(r.ref.uid for r in by_hand)
    assert {f.record.ref.uid: f.record for f in found} == {r.ref.uid: r for r in by_hand}
    keys = [(f.entered, f.record.ref.uid) for f in found]
    assert keys == sorted(keys)
    for f in found:
        start, end = windows[f.record.ref.uid]
        assert start - 0.002 <= f.entered.timestamp() <= end + 0.002
    for i, f in enumerate(found):  # every cut-off and every limit: a prefix of the same list
        assert uids(store.find(POD, state=state, entered_before=f.entered)) == [
            g.record.ref.uid for g in found if g.entered < f.entered
        ]
        assert uids(store.find(POD, state=state, limit=i + 1)) == uids(found)[: i + 1]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, state=STATES)
def test_memory_find_is_records_filtered_by_hand(ops: list[tuple[str, str]], state: Any) -> None:
    check_against_records(MemoryStore(), ops, state)


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(ops=OPS, state=STATES)
def test_sqlite_find_is_records_filtered_by_hand(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, str]], state: Any
) -> None:
    store = SQLiteStore(tmp_path_factory.mktemp("find") / "s.db", synchronous="OFF")
    try:
        check_against_records(store, ops, state)
    finally:
        store.close()


@pytest.mark.postgres
@settings(
    max_examples=5,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(ops=OPS, state=STATES)
def test_postgres_find_is_records_filtered_by_hand(
    pg_url: str, ops: list[tuple[str, str]], state: Any
) -> None:
    from lifecycle.stores.postgres import PostgresStore

    store = PostgresStore(pg_url)
    try:
        raw(store, "TRUNCATE {s}objects, {s}journal, {s}outbox")
        check_against_records(store, ops, state)
    finally:
        store.close()


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, state=STATES)
def test_kubernetes_find_is_records_filtered_by_hand(
    ops: list[tuple[str, str]], state: Any
) -> None:
    with kubernetes_store() as (store, _, _):
        check_against_records(store, ops, state)


@contextlib.contextmanager
def kubernetes_store() -> Iterator[Any]:
    """A Kubernetes store on a fresh fake API server holding Pods ``a``..``d`` and
    ``p0``..``p2`` (no records yet)."""
    from lifecycle.stores.kubernetes import KubernetesStore

    server = serve()
    client = api(server)
    store = KubernetesStore(client, resources=RESOURCES, sleep=lambda _: None)
    for uid in ("a", "b", "c", "d", "p0", "p1", "p2"):
        ref = pod_ref(uid)
        server.add_object("pods", ref.namespace, ref.name, uid=ref.uid)
    try:
        yield store, server, client
    finally:
        store.close()
        client.close()
        server.release()
        server.close()


@pytest.fixture
def kube() -> Iterator[Any]:
    with kubernetes_store() as opened:
        yield opened


def test_the_kubernetes_store_lists_and_filters(kube: Any) -> None:
    store, _, _ = kube
    assert isinstance(store, FindStore)
    scenario(store, store.find, store.state_counts)
    refusals(store.find)


def test_the_asyncio_kubernetes_store_answers_the_same(kube: Any) -> None:
    from lifecycle.stores.kubernetes import AsyncKubernetesStore

    store, _, client = kube

    async def main() -> None:
        twin = AsyncKubernetesStore(client, resources=RESOURCES)
        create(store, "p0")
        time.sleep(GAP)
        create(store, "p1")
        found = await twin.find(POD, state="Provisioning")
        assert uids(found) == ["p0", "p1"]
        counts = await twin.state_counts()
        assert [(c.machine, c.state, c.count) for c in counts] == [("pod", "Provisioning", 2)]
        with pytest.raises(InvalidQuery):
            await twin.find(POD, older_than=-1)

    asyncio.run(main())


@pytest.mark.parametrize("options", [{}, {"group_commit": True}], ids=["plain", "group_commit"])
def test_every_sqlite_write_path_keeps_entered(tmp_path: Path, options: dict[str, Any]) -> None:
    """Batches and group commits write ``objects`` by other statements than ``commit``: the
    triggers keep ``entered`` for all of them (a move restarts it, a same-state write keeps it)."""
    from lifecycle._core.transition import stamp
    from lifecycle.stores.base import CommitItem

    store = SQLiteStore(tmp_path / "s.db", synchronous="OFF", **options)
    try:

        def item(uid: str, obs: Any) -> CommitItem:
            ref = pod_ref(uid)
            record = store.load(POD, ref)
            before = POD.initial(ref) if record is None else record.status
            version = 0 if record is None else record.version
            after = POD.apply(before, obs)
            flips = stamp(POD.flips(before, after), ref, POD.name, version + 1, obs.at)
            return CommitItem(POD, ref, version, after, obs, tuple(flips))

        created = pod.CreateRequested(at=t(0))
        assert store.commit_many([item("p0", created), item("p1", created)]) == [1, 1]
        first = {f.record.ref.uid: f.entered for f in store.find(POD)}
        time.sleep(GAP)
        again = [item("p0", created), item("p1", pod.ProvisionRejected(at=t(1), error="x"))]
        assert store.commit_many(again) == [2, 2]
        now = {f.record.ref.uid: f for f in store.find(POD)}
        assert now["p0"].entered == first["p0"]  # still Provisioning
        assert now["p1"].record.status.state == pod.PROVISION_FAILED
        assert now["p1"].entered > first["p1"]
    finally:
        store.close()
