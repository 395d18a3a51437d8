"""Group commit on SQLite (ADR 0026): concurrent commits share one transaction and one flush,
with the durability of a single commit.

The grouping is made deterministic by a connection wrapper whose ``COMMIT`` can wait (until
the other callers are queued behind the flush in progress) or fail (a disk error), and by
SQLite's own authorizer refusing a ``COMMIT``; a crash is a real ``SIGKILL`` of a writer
process in the middle of its groups.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from lifecycle import (
    Conflict,
    IdentityMismatch,
    MachineRegistry,
    ObjectRef,
    Outcome,
    RetryPolicy,
    Runner,
    SQLiteStore,
    StoreError,
)
from lifecycle.aio import AsyncRunner
from lifecycle.emitters import MemoryEmitter
from lifecycle.machines import POD, pod
from lifecycle.stores import InvalidStoreURL, open_store

AT = datetime(2026, 11, 30, tzinfo=UTC)
ROOT = Path(__file__).resolve().parents[2]


class FaultyConnection:
    """An ``sqlite3.Connection`` whose ``COMMIT`` runs ``before_commit`` first (which may
    wait or raise); everything else is the connection's own."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db
        self.commits = 0
        self.statements: list[str] = []
        self.before_commit: Callable[[int], None] = lambda n: None

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        self.statements.append(sql)
        if sql == "COMMIT":
            self.commits += 1
            self.before_commit(self.commits)
        return self._db.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


def faulty(store: SQLiteStore) -> FaultyConnection:
    wrapper = FaultyConnection(store._db)
    store._db = wrapper  # type: ignore[assignment]
    return wrapper


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(0.001)


def queued(store: SQLiteStore) -> int:
    assert store._group is not None
    with store._group.mutex:
        return len(store._group.queue)


def hold_first_commit(store: SQLiteStore, db: FaultyConnection, followers: int) -> None:
    """The first ``COMMIT`` waits until ``followers`` callers are queued behind it, so the
    next flush holds all of them."""

    def before(n: int) -> None:
        if n == 1:
            wait_for(lambda: queued(store) >= followers)

    db.before_commit = before


def refs(n: int, prefix: str = "p") -> list[ObjectRef]:
    return [ObjectRef("Pod", "ns", f"{prefix}{i}", f"{prefix}-uid-{i}") for i in range(n)]


def create(store: SQLiteStore, ref: ObjectRef, expected: int = 0) -> int:
    """One commit of a Pod's CreateRequested, as the runner would make it."""
    obs = pod.CreateRequested(at=AT)
    before = POD.initial(ref)
    after = POD.apply(before, obs)
    return store.commit(POD, ref, expected, after, obs, ())


def run_threads(n: int, target: Callable[[int], Any]) -> list[Any]:
    """Run ``target(i)`` on ``n`` threads; their results (or exceptions), in order."""
    out: list[Any] = [None] * n

    def one(i: int) -> None:
        try:
            out[i] = target(i)
        except BaseException as e:  # the test inspects it
            out[i] = e

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    return out


def stored_version(path: Path, uid: str) -> int | None:
    db = sqlite3.connect(path)
    try:
        row = db.execute("SELECT version FROM objects WHERE uid = ?", (uid,)).fetchone()
        return None if row is None else int(row[0])
    finally:
        db.close()


def test_concurrent_commits_share_one_flush_and_nobody_is_answered_before_it(
    tmp_path: Path,
) -> None:
    store = SQLiteStore(tmp_path / "g.db", group_commit=True)
    db = faulty(store)
    pods = refs(9)
    answered: list[str] = []
    hold_first_commit(store, db, followers=8)
    seen_at_commit: list[list[str]] = []
    held = db.before_commit

    def before(n: int) -> None:
        held(n)
        seen_at_commit.append(list(answered))  # who had been told "committed" by then

    db.before_commit = before

    def commit(i: int) -> int:
        if i > 0:  # the others arrive while the first one's flush is in progress
            wait_for(lambda: db.commits >= 1)
        version = create(store, pods[i])
        answered.append(pods[i].uid)
        return version

    results = run_threads(9, commit)
    assert results == [1] * 9
    assert store.flushes == 2
    assert db.commits == 2
    assert seen_at_commit == [[], [pods[0].uid]]  # none of the group answered before it
    for ref in pods:
        assert stored_version(tmp_path / "g.db", ref.uid) == 1
        assert [e.version for e in store.journal(POD, ref)] == [1]
    store.close()


def test_a_conflict_refuses_only_its_own_item(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "g.db", group_commit=True)
    pods = refs(7)
    assert create(store, pods[3]) == 1  # the one that will conflict is already stored
    db = faulty(store)
    hold_first_commit(store, db, followers=6)

    def commit(i: int) -> int:
        if i > 0:
            wait_for(lambda: db.commits >= 1)
        return create(store, pods[i])

    results = run_threads(7, commit)
    assert isinstance(results[3], Conflict)
    assert results[3].actual == 1
    assert [r for i, r in enumerate(results) if i != 3] == [1] * 6
    assert db.commits == 2  # the conflict did not cost its group a transaction
    assert [e.version for e in store.journal(POD, pods[3])] == [1]  # unchanged
    for i in (0, 1, 2, 4, 5, 6):
        assert stored_version(tmp_path / "g.db", pods[i].uid) == 1
    store.close()


def test_a_failed_commit_fails_every_caller_of_its_group(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "g.db", group_commit=True)
    pods = refs(6)
    assert create(store, pods[5]) == 1  # would conflict: it fails with its group all the same
    db = faulty(store)

    def before(n: int) -> None:
        if n == 1:
            wait_for(lambda: queued(store) >= 5)
        if n == 2:
            raise sqlite3.OperationalError("disk I/O error")

    db.before_commit = before

    def commit(i: int) -> int:
        if i > 0:
            wait_for(lambda: db.commits >= 1)
        return create(store, pods[i])

    results = run_threads(6, commit)
    assert results[0] == 1  # the first flush was its own
    for i in range(1, 6):
        assert isinstance(results[i], StoreError)
        assert not isinstance(results[i], Conflict)
        assert "group commit of 5 writes" in str(results[i])
        assert "disk I/O error" in str(results[i])
    assert len({id(r) for r in results[1:]}) == 5  # each caller its own exception
    for i in range(1, 5):  # nothing of the failed group is stored
        assert stored_version(tmp_path / "g.db", pods[i].uid) is None
        assert store.journal(POD, pods[i]) == []
    db.before_commit = lambda n: None
    assert create(store, pods[1]) == 1  # the connection was not left inside a transaction
    store.close()


def test_a_commit_sqlite_refuses_fails_the_group_and_leaves_the_store_usable(
    tmp_path: Path,
) -> None:
    store = SQLiteStore(tmp_path / "g.db", group_commit=True)
    pods = refs(4)
    db = faulty(store)

    def deny(action: int, arg1: str | None, *_: Any) -> int:
        if action == sqlite3.SQLITE_TRANSACTION and arg1 == "COMMIT":
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK

    def before(n: int) -> None:
        if n == 1:
            wait_for(lambda: queued(store) >= 3)
        if n == 2:  # from now on SQLite itself refuses to commit
            store._db.set_authorizer(deny)

    db.before_commit = before

    def commit(i: int) -> int:
        if i > 0:
            wait_for(lambda: db.commits >= 1)
        return create(store, pods[i])

    results = run_threads(4, commit)
    assert results[0] == 1
    assert all(isinstance(r, StoreError) and "not authorized" in str(r) for r in results[1:])
    store._db.set_authorizer(None)
    for i in range(1, 4):
        assert stored_version(tmp_path / "g.db", pods[i].uid) is None
    assert create(store, pods[2]) == 1
    store.close()


def test_runner_callers_of_a_failed_group_each_end_failed(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "g.db", group_commit=True)
    emitter = MemoryEmitter()
    runner = Runner(
        store, [emitter], machines=MachineRegistry([POD]), links=(), policy=RetryPolicy(1)
    )
    pods = refs(5)
    db = faulty(store)

    def before(n: int) -> None:
        if n == 1:
            wait_for(lambda: queued(store) >= 4)
        if n >= 2:  # the group's flush (and the first caller's own mark, if it is apart)
            raise sqlite3.OperationalError("database or disk is full")

    db.before_commit = before

    def observe(i: int) -> Any:
        if i > 0:
            wait_for(lambda: db.commits >= 1)
        return runner.observe(pods[i], pod.CreateRequested(at=AT))

    results = run_threads(5, observe)
    assert results[0].outcome is Outcome.COMMITTED
    for r in results[1:]:
        assert r.outcome is Outcome.FAILED
        assert isinstance(r.error, StoreError)
        assert "disk is full" in str(r.error)
    sent = {t.ref.uid for t in emitter.events}
    assert sent == {pods[0].uid}  # nothing emitted for a write that was not committed
    db.before_commit = lambda n: None
    assert {t.ref.uid for t in store.claim_undelivered()} <= {pods[0].uid}
    for p in pods[1:]:
        assert store.load(POD, p) is None
    store.close()


def test_a_lone_caller_commits_as_without_group_commit(tmp_path: Path) -> None:
    plain = SQLiteStore(tmp_path / "plain.db")
    grouped = SQLiteStore(tmp_path / "grouped.db", group_commit=True)
    ref = refs(1)[0]
    steps = [
        pod.CreateRequested(at=AT),
        pod.ProvisionSucceeded(at=AT, reserved=True, instance_id="i-1"),
        pod.InstancePending(at=AT + timedelta(seconds=1), instance_id="i-1"),
    ]
    out = []
    for store in (plain, grouped):
        runner = Runner(store, [], machines=MachineRegistry([POD]), links=())
        results = [runner.observe(ref, o) for o in steps]
        out.append([(r.outcome, r.version, r.status) for r in results])
        assert store.undelivered_count() == 0
    assert out[0] == out[1]
    assert grouped.flushes == 3  # one transaction per commit, as without grouping
    assert [e.version for e in grouped.journal(POD, ref)] == [1, 2, 3]
    plain.close()
    grouped.close()


def test_marks_made_during_a_flush_ride_the_next_transaction(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "g.db", group_commit=True)
    runner = Runner(store, [MemoryEmitter()], machines=MachineRegistry([POD]), links=())
    ref = refs(1)[0]
    runner.observe(ref, pod.CreateRequested(at=AT))
    assert store.undelivered_count() == 0
    # an undelivered event, then its mark arriving while a flush is in progress
    assert store._group is not None
    runner.store = _NoMarks(store)
    runner.observe(ref, pod.ProvisionSucceeded(at=AT, reserved=True, instance_id="i-1"))
    runner.store = store
    [event] = store.claim_undelivered()
    store._group.leading = True
    store.mark_delivered([event.id])
    store._group.leading = False
    assert store._group.marks == [event.id]
    # still in the table (undelivered_count would write the waiting marks first: ADR 0132)
    assert store._db.execute("SELECT count(*) FROM outbox").fetchone() == (1,)
    assert store.claim_undelivered() == []  # a delivered event is never claimed again
    assert store.undelivered_count() == 0
    assert store._group.marks == []
    store.close()


class _NoMarks:
    """The store without its outbox marks: its events stay undelivered."""

    def __init__(self, store: SQLiteStore) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        if name == "mark_delivered":
            raise AttributeError(name)
        return getattr(self._store, name)


def test_marks_carried_by_a_group_leave_no_outbox_rows(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "g.db", group_commit=True)
    emitter = MemoryEmitter()
    runner = Runner(store, [emitter], machines=MachineRegistry([POD]), links=())
    pods = refs(16)

    def walk(i: int) -> list[Outcome]:
        at = AT
        outcomes = [runner.observe(pods[i], pod.CreateRequested(at=at)).outcome]
        outcomes.append(
            runner.observe(
                pods[i], pod.ProvisionSucceeded(at=at, reserved=True, instance_id=f"i-{i}")
            ).outcome
        )
        for k in range(6):
            at += timedelta(seconds=1)
            obs = (
                pod.InstanceRunning(at=at, instance_id=f"i-{i}", endpoint="10.0.0.1")
                if k % 2 == 0
                else pod.InstancePending(at=at, instance_id=f"i-{i}")
            )
            outcomes.append(runner.observe(pods[i], obs).outcome)
        return outcomes

    results = run_threads(16, walk)
    assert all(o is not Outcome.FAILED for r in results for o in r), results
    assert store.undelivered_count() == 0
    assert store.claim_undelivered() == []
    store.close()


def test_async_runner_callers_share_flushes(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "g.db", group_commit=True)
    db = faulty(store)
    hold_first_commit(store, db, followers=4)
    pods = refs(24)

    async def main() -> list[Any]:
        runner = AsyncRunner(store, [], machines=MachineRegistry([POD]), links=())
        try:
            return list(
                await asyncio.gather(*(runner.observe(p, pod.CreateRequested(at=AT)) for p in pods))
            )
        finally:
            await runner.close()

    results = asyncio.run(main())
    assert all(r.outcome is Outcome.COMMITTED and r.version == 1 for r in results)
    assert 2 <= store.flushes < len(pods)  # concurrent awaits shared flushes
    for p in pods:
        assert stored_version(tmp_path / "g.db", p.uid) == 1


def test_the_store_url_turns_it_on_and_refuses_other_values(tmp_path: Path) -> None:
    path = tmp_path / "u.db"
    store = open_store(f"sqlite:///{path}?group_commit=1")
    assert isinstance(store, SQLiteStore)
    assert store.group_commit
    assert store.concurrent_callers > 1
    store.close()
    plain = open_store(f"sqlite:///{path}?group_commit=0")
    assert isinstance(plain, SQLiteStore)
    assert not plain.group_commit
    assert plain.concurrent_callers == 1
    plain.close()
    other = tmp_path / "never.db"
    with pytest.raises(InvalidStoreURL, match="group_commit='yes' must be 0 or 1"):
        open_store(f"sqlite:///{other}?group_commit=yes")
    assert not other.exists()


def test_a_failed_plain_commit_leaves_no_transaction_open(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "p.db")
    db = faulty(store)
    pods = refs(2)

    def before(n: int) -> None:
        if n == 1:
            raise sqlite3.OperationalError("disk I/O error")

    db.before_commit = before
    with pytest.raises(StoreError, match="disk I/O error"):
        create(store, pods[0])
    assert not store._db.in_transaction
    assert create(store, pods[1]) == 1  # before: "cannot start a transaction within a transaction"
    assert stored_version(tmp_path / "p.db", pods[0].uid) is None
    store.close()


_WRITER = textwrap.dedent(
    """
    import sys, threading
    from datetime import UTC, datetime, timedelta
    from lifecycle import ObjectRef, SQLiteStore
    from lifecycle.machines import POD, pod

    store = SQLiteStore(sys.argv[1], group_commit=True)
    out = sys.stdout
    lock = threading.Lock()
    AT = datetime(2026, 11, 30, tzinfo=UTC)

    def writer(w):
        ref = ObjectRef("Pod", "ns", f"w{w}", f"uid-{w}")
        status, version = POD.initial(ref), 0
        obs = [pod.InstanceRunning(at=AT, instance_id="i", endpoint="10.0.0.1"),
               pod.InstancePending(at=AT, instance_id="i")]
        status = POD.apply(status, pod.CreateRequested(at=AT))
        version = store.commit(POD, ref, version, status, pod.CreateRequested(at=AT), ())
        k = 0
        while True:
            o = obs[k % 2]
            version = store.commit(POD, ref, version, status, o, ())
            with lock:  # acknowledged: only now may it be reported
                out.write(f"{ref.uid} {version}\\n")
                out.flush()
            k += 1

    for w in range(12):
        threading.Thread(target=writer, args=(w,), daemon=True).start()
    threading.Event().wait()
    """
)


def test_a_crash_mid_group_keeps_every_acknowledged_write(tmp_path: Path) -> None:
    path = tmp_path / "crash.db"
    script = tmp_path / "writer.py"
    script.write_text(_WRITER, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen(
        [sys.executable, str(script), str(path)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert proc.stdout is not None
    acked: dict[str, int] = {}
    deadline = time.monotonic() + 20
    while len(acked) < 12 or sum(acked.values()) < 300:
        line = proc.stdout.readline()
        assert line, "the writer died"
        uid, number = line.split()
        acked[uid] = max(acked.get(uid, 0), int(number))
        assert time.monotonic() < deadline
    os.kill(proc.pid, signal.SIGKILL)  # in the middle of its groups
    proc.wait()
    for line in proc.stdout:  # acknowledged before the kill, read after it
        uid, number = line.split()
        acked[uid] = max(acked.get(uid, 0), int(number))
    store = SQLiteStore(path)
    for uid, version in acked.items():
        stored = stored_version(path, uid)
        assert stored is not None, uid
        assert stored >= version, (uid, stored, version)
        entries = store.journal(POD, ObjectRef("Pod", "ns", f"w{uid.split('-')[1]}", uid))
        assert [e.version for e in entries] == list(range(1, stored + 1))
    store.close()


def test_a_group_of_updates_refuses_only_the_stale_and_the_impostor(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "g.db", group_commit=True)
    pods = refs(6)
    for p in pods:
        assert create(store, p) == 1
    impostor = ObjectRef("Pod", "other-ns", pods[5].name, pods[5].uid)  # a stored uid
    db = faulty(store)
    hold_first_commit(store, db, followers=6)
    obs = pod.ProvisionSucceeded(at=AT, reserved=True, instance_id="i-1")

    def update(i: int) -> int:
        if i == 0:  # leads the first flush alone
            return create(store, refs(1, "lead")[0])
        wait_for(lambda: db.commits >= 1)
        if i == 6:  # a new object in the same group
            return create(store, refs(1, "new")[0])
        ref = impostor if i == 5 else pods[i]
        expected = 2 if i == 3 else 1  # pods[3] is stale: stored at 1
        status = POD.apply(POD.apply(POD.initial(ref), pod.CreateRequested(at=AT)), obs)
        return store.commit(POD, ref, expected, status, obs, ())

    results = run_threads(7, update)
    assert results[0] == 1
    assert results[1:3] == [2, 2]
    assert isinstance(results[3], Conflict)
    assert results[4] == 2
    assert isinstance(results[5], IdentityMismatch)
    assert results[6] == 1
    assert db.commits == 2  # all of them in one group
    assert any(sql.startswith("WITH v") for sql in db.statements)  # the one-statement CAS
    assert [e.version for e in store.journal(POD, pods[3])] == [1]
    assert [e.version for e in store.journal(POD, pods[5])] == [1]  # not the impostor's
    assert stored_version(tmp_path / "g.db", pods[5].uid) == 1
    store.close()


def test_one_object_twice_in_a_group_commits_once(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "g.db", group_commit=True)
    target = refs(1, "twice")[0]
    assert create(store, target) == 1
    db = faulty(store)
    hold_first_commit(store, db, followers=3)
    obs = pod.ProvisionSucceeded(at=AT, reserved=True, instance_id="i-1")
    status = POD.apply(POD.apply(POD.initial(target), pod.CreateRequested(at=AT)), obs)

    def commit(i: int) -> int:
        if i == 0:
            return create(store, refs(1, "lead")[0])
        wait_for(lambda: db.commits >= 1)
        if i == 3:
            return create(store, refs(1, "other")[0])
        return store.commit(POD, target, 1, status, obs, ())  # both expect version 1

    results = run_threads(4, commit)
    assert db.commits == 2
    assert sum(r == 2 for r in results[1:3]) == 1  # exactly one of the two wins
    assert sum(isinstance(r, Conflict) for r in results[1:3]) == 1
    assert results[3] == 1
    assert not any(sql.startswith("WITH v") for sql in db.statements)  # one by one
    assert [e.version for e in store.journal(POD, target)] == [1, 2]
    store.close()


def test_commit_many_sets_a_large_batch_in_chunks_and_refuses_only_the_conflict(
    tmp_path: Path,
) -> None:
    """``commit_many`` uses the same few-statement compare-and-set, 500 rows a statement."""
    from lifecycle.stores import CommitItem

    store = SQLiteStore(tmp_path / "m.db")
    pods = refs(1203)
    assert create(store, pods[700]) == 1  # stored already: its item conflicts
    obs = pod.CreateRequested(at=AT)
    status = POD.apply(POD.initial(pods[0]), obs)
    db = faulty(store)
    out = store.commit_many([CommitItem(POD, p, 0, status, obs, ()) for p in pods])
    assert isinstance(out[700], Conflict)
    assert [v for i, v in enumerate(out) if i != 700] == [1] * 1202
    inserts = [sql for sql in db.statements if sql.startswith("INSERT INTO objects")]
    assert len(inserts) == 3  # 500 + 500 + 203 rows
    assert [e.version for e in store.journal(POD, pods[700])] == [1]
    assert stored_version(tmp_path / "m.db", pods[1202].uid) == 1
    store.close()
