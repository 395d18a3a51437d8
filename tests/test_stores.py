"""The Store protocol on MemoryStore and SQLiteStore: compare-and-set, atomic commits, the
journal, the outbox and its leases, persistence, legacy statuses, and two processes sharing
one SQLite file."""

from __future__ import annotations

import json
import multiprocessing
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from lifecycle import (
    Conflict,
    MemoryEmitter,
    MemoryStore,
    ObjectRef,
    Observation,
    Runner,
    SQLiteStore,
    Store,
    StoreError,
    Transition,
    open_store,
)
from lifecycle._core.transition import stamp
from lifecycle.links import claim_ref
from lifecycle.machines import NODECLAIM, POD, pod
from lifecycle.machines import nodeclaim as nc
from lifecycle.testing.fakes import FailingEmitter

from . import _store_workers as workers
from .conftest import pod_ref, t

REF = pod_ref()


def step(
    store: Store, obs: Observation, ref: ObjectRef = REF, *, expected: int | None = None
) -> tuple[int, Any, tuple[Transition, ...]]:
    """Apply ``obs`` to the stored pod status and commit it (the runner's job, by hand)."""
    record = store.load(POD, ref)
    before = POD.initial(ref) if record is None else record.status
    version = 0 if record is None else record.version
    after = POD.apply(before, obs)
    transitions = stamp(POD.flips(before, after), ref, POD.name, version + 1, obs.at)
    cas = version if expected is None else expected
    return store.commit(POD, ref, cas, after, obs, transitions), after, transitions


def state_of(store: Store, ref: ObjectRef = REF) -> tuple[Any, int, list[Any], list[str]]:
    record = store.load(POD, ref)
    return (
        None if record is None else record.status,
        0 if record is None else record.version,
        store.journal(POD, ref),
        sorted(t.id for t in store.claim_undelivered()),
    )


# -- compare-and-set --------------------------------------------------------------------------
def test_commit_is_compare_and_set(store: Store) -> None:
    version, _status, _ = step(store, pod.CreateRequested(at=t(0)))
    assert version == 1
    before = state_of(store)
    with pytest.raises(Conflict) as stale:
        step(store, pod.ConfigInvalid(at=t(1), error="x"), expected=0)
    assert (stale.value.uid, stale.value.expected, stale.value.actual) == (REF.uid, 0, 1)
    with pytest.raises(Conflict) as ahead:
        step(store, pod.ConfigInvalid(at=t(1), error="x"), expected=7)
    assert (ahead.value.expected, ahead.value.actual) == (7, 1)
    assert state_of(store) == before
    assert step(store, pod.ConfigInvalid(at=t(1), error="x"))[0] == 2


def test_a_conflict_on_create_names_the_existing_version(store: Store) -> None:
    step(store, pod.CreateRequested(at=t(0)))
    step(store, pod.ProvisionErrored(at=t(1), error="x"))
    with pytest.raises(Conflict) as e:
        step(store, pod.CreateRequested(at=t(2)), expected=0)
    assert (e.value.expected, e.value.actual) == (0, 2)


def test_objects_are_independent(store: Store) -> None:
    other = pod_ref("trainer-1", "pod-b")
    step(store, pod.CreateRequested(at=t(0)))
    assert step(store, pod.CreateRequested(at=t(0)), other)[0] == 1
    assert [r.ref.uid for r in sorted(store.records(POD), key=lambda r: r.ref.uid)] == [
        "pod-a",
        "pod-b",
    ]
    assert list(store.records(NODECLAIM)) == []


# -- atomicity --------------------------------------------------------------------------------
@pytest.fixture
def sqlite(tmp_path: Path) -> Iterator[SQLiteStore]:
    s = SQLiteStore(tmp_path / "atomic.db")
    yield s
    s.close()


def test_a_commit_failing_at_the_outbox_leaves_everything_unchanged(sqlite: SQLiteStore) -> None:
    store = sqlite
    step(store, pod.CreateRequested(at=t(0)))
    before = state_of(store)
    with sqlite3.connect(sqlite.path) as db:  # a stray row that collides with the next event
        db.execute(
            "INSERT INTO outbox VALUES (?, ?, 2, 0, '{}', NULL, NULL)", (f"{REF.uid}:2:0", REF.uid)
        )
    stray = [f"{REF.uid}:2:0"]
    with pytest.raises(StoreError) as e:
        step(store, pod.ConfigInvalid(at=t(1), error="pool unreadable"))
    assert not isinstance(e.value, Conflict)
    record = store.load(POD, REF)
    assert record is not None
    assert (record.status, record.version, store.journal(POD, REF)) == before[:3]
    with sqlite3.connect(sqlite.path) as db:
        ids = [i for (i,) in db.execute("SELECT id FROM outbox ORDER BY id")]
    assert ids == sorted([*before[3], *stray])  # only what was there


def test_a_commit_failing_at_the_journal_leaves_everything_unchanged(sqlite: SQLiteStore) -> None:
    store = sqlite
    step(store, pod.CreateRequested(at=t(0)))
    before = state_of(store)
    with sqlite3.connect(sqlite.path) as db:
        db.execute(
            "INSERT INTO journal (uid, version, at, observation, fields, transitions) "
            "VALUES (?, 2, 'x', 'x', '{}', '[]')",
            (REF.uid,),
        )
    with pytest.raises(StoreError):
        step(store, pod.ConfigInvalid(at=t(1), error="pool unreadable"))
    record = store.load(POD, REF)
    assert record is not None
    assert (record.status, record.version) == before[:2]
    assert sorted(t.id for t in store.claim_undelivered()) == before[3]


def test_an_unserialisable_status_is_refused_before_anything_is_written(
    sqlite: SQLiteStore,
) -> None:
    store = sqlite
    obs = pod.CreateRequested(at=t(0))
    bad = attrs.evolve(POD.initial(REF), pool=object())  # type: ignore[arg-type]
    with pytest.raises(StoreError, match="serialise"):
        sqlite.commit(POD, REF, 0, bad, obs, ())
    assert state_of(store) == (None, 0, [], [])


def test_a_conflict_writes_nothing(store: Store) -> None:
    step(store, pod.CreateRequested(at=t(0)))
    before = state_of(store)
    with pytest.raises(Conflict):
        step(store, pod.ConfigInvalid(at=t(1), error="x"), expected=0)
    assert state_of(store) == before


def test_unreadable_rows_are_store_errors_and_the_runner_fails_cleanly(
    sqlite: SQLiteStore,
) -> None:
    step(sqlite, pod.CreateRequested(at=t(0)))
    with sqlite3.connect(sqlite.path) as db:
        db.execute("UPDATE objects SET status = '{\"state\": 7' WHERE uid = ?", (REF.uid,))
        db.execute("UPDATE journal SET fields = '[]' WHERE uid = ?", (REF.uid,))
        db.execute("UPDATE outbox SET payload = '{}'")
    for read in (
        lambda: sqlite.load(POD, REF),
        lambda: sqlite.journal(POD, REF),
        lambda: list(sqlite.records(POD)),
        sqlite.claim_undelivered,
    ):
        with pytest.raises(StoreError, match="cannot read the"):
            read()
    emitter = MemoryEmitter()
    result = Runner(sqlite, [emitter]).observe(REF, pod.ConfigInvalid(at=t(1), error="x"))
    assert result.outcome.value == "failed"
    assert isinstance(result.error, StoreError)
    assert emitter.events == []


# -- the journal ------------------------------------------------------------------------------
def test_journal_round_trips_observations_and_transitions_and_folds_to_the_status(
    store: Store,
) -> None:
    observations: list[Observation] = [
        pod.CreateRequested(at=t(0), pool="gpu", provider="modal"),
        pod.ProvisionErrored(at=t(1), error="connection reset: {not a placeholder}"),
        pod.ProvisionSucceeded(at=t(2), reserved=True, instance_id="i-1", endpoint="10.0.0.7"),
        pod.InstanceRunning(at=t(3), endpoint="10.0.0.7"),
        pod.DeletionRequested(at=t(4)),
        pod.InstanceTerminated(at=t(5), exit_code=None, detail="ünïcode ✓"),
    ]
    committed = []
    for obs in observations:
        version, _, transitions = step(store, obs)
        committed.append((version, obs, transitions))
    journal = store.journal(POD, REF)
    assert [(e.version, e.observation, e.transitions) for e in journal] == committed
    record = store.load(POD, REF)
    assert record is not None
    assert POD.fold(REF, [e.observation for e in journal]) == record.status
    assert record.status.state == pod.TERMINATED


def test_journal_of_an_unknown_object_is_empty(store: Store) -> None:
    assert store.journal(POD, pod_ref(uid="nobody")) == []
    assert store.load(POD, pod_ref(uid="nobody")) is None


def test_a_store_without_a_journal_still_does_cas_and_outbox(tmp_path: Path) -> None:
    for s in (MemoryStore(journal=False), SQLiteStore(tmp_path / "nj.db", journal=False)):
        step(s, pod.CreateRequested(at=t(0)))
        assert s.journal(POD, REF) == []
        assert [e.id for e in s.claim_undelivered()] == [f"{REF.uid}:1:0"]
        with pytest.raises(Conflict):
            step(s, pod.ConfigInvalid(at=t(1), error="x"), expected=0)
        s.close()


# -- the outbox -------------------------------------------------------------------------------
def test_outbox_claim_and_mark(store: Store) -> None:
    step(store, pod.CreateRequested(at=t(0)))
    step(store, pod.ProvisionSucceeded(at=t(1), reserved=True, instance_id="i-1"))
    other = pod_ref("trainer-1", "pod-0")
    step(store, pod.CreateRequested(at=t(0)), other)
    pending = store.claim_undelivered()
    assert [e.id for e in pending] == ["pod-0:1:0", "pod-a:1:0", "pod-a:2:0"]  # uid, version, n
    assert store.claim_undelivered(limit=1)[0].id == "pod-0:1:0"
    journal = {e.id: e for entry in store.journal(POD, REF) for e in entry.transitions}
    assert [e for e in pending if e.ref.uid == REF.uid] == [
        journal["pod-a:1:0"],
        journal["pod-a:2:0"],
    ]
    store.mark_delivered(["pod-a:1:0", "no-such-id"])
    assert [e.id for e in store.claim_undelivered()] == ["pod-0:1:0", "pod-a:2:0"]
    store.mark_delivered([e.id for e in store.claim_undelivered()])
    assert store.claim_undelivered() == []


def test_fresh_events_are_leased_to_the_committing_store(tmp_path: Path) -> None:
    now = [1000.0]
    a = SQLiteStore(tmp_path / "lease.db", clock=lambda: now[0], lease_seconds=30)
    b = SQLiteStore(tmp_path / "lease.db", clock=lambda: now[0], lease_seconds=30)
    step(a, pod.CreateRequested(at=t(0)))
    assert [e.id for e in a.claim_undelivered()] == [f"{REF.uid}:1:0"]  # its own, at once
    assert b.claim_undelivered() == []  # another's, within the lease
    now[0] += 31
    assert [e.id for e in b.claim_undelivered()] == [f"{REF.uid}:1:0"]  # an expired lease
    assert a.claim_undelivered() == []  # b holds it now
    b.mark_delivered([f"{REF.uid}:1:0"])
    # the mark rides with b's next commit, or is written on its own within a moment (ADR
    # 0132): long before b's lease on the row runs out
    deadline = time.monotonic() + 10
    while b.undelivered_marks_held() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not b.undelivered_marks_held()
    now[0] += 100
    assert a.claim_undelivered() == []
    assert b.claim_undelivered() == []
    a.close()
    b.close()


@pytest.mark.parametrize("group_commit", [False, True], ids=["held", "group"])
def test_a_claim_never_leases_a_row_whose_mark_is_being_written(
    tmp_path: Path, group_commit: bool
) -> None:
    """Marks taken from where they wait (the marker thread's turn, a group leader's) and
    their rows deleted are one step for a claim on the same handle: a claim in between would
    lease rows already delivered and hand them out again (found by the dispatcher property
    in ``tests/telemetry``)."""
    store = SQLiteStore(tmp_path / "s.db", group_commit=group_commit, synchronous="OFF")
    step(store, pod.CreateRequested(at=t(0)))
    ids = [e.id for e in store.claim_undelivered()]
    assert ids
    writing, go = threading.Event(), threading.Event()
    real = store._mark_now

    def slow(marks: list[str]) -> None:  # the write, held open until the claim has tried
        writing.set()
        go.wait(10)
        real(marks)

    store._mark_now = slow  # type: ignore[method-assign,assignment]
    if group_commit:  # marks alone: the caller leads a transaction of its own
        marker = threading.Thread(target=store.mark_delivered, args=(ids,))
    else:
        store.mark_delivered(ids)  # held for the next commit, or the marker thread
        assert store.undelivered_marks_held() == len(ids)
        marker = threading.Thread(target=store._marks_due)
    marker.start()
    assert writing.wait(10)
    claimed: list[str] = []
    claimer = threading.Thread(
        target=lambda: claimed.extend(e.id for e in store.claim_undelivered())
    )
    claimer.start()
    claimer.join(0.3)  # it waits for the marks being written ...
    go.set()
    marker.join(10)
    claimer.join(10)
    assert not claimer.is_alive()
    assert claimed == [], "a delivered row was leased again"  # ... and finds them gone
    store.close()


# -- persistence ------------------------------------------------------------------------------
def test_sqlite_persists_across_reopen(tmp_path: Path) -> None:
    path = tmp_path / "persist.db"
    first = SQLiteStore(path)
    runner = Runner(first, [MemoryEmitter()])
    runner.observe(REF, pod.CreateRequested(at=t(0)))
    runner.observe(REF, pod.ProvisionSucceeded(at=t(1), reserved=True, instance_id="i-1"))
    step(first, pod.InstanceRunning(at=t(2)))  # committed, never delivered
    status, version, journal, pending = state_of(first)
    assert pending == [f"{REF.uid}:3:0"]
    claim_before = first.load(NODECLAIM, claim_ref(REF))
    first.close()

    again = SQLiteStore(path, clock=lambda: 1e12)  # after the old owner's lease
    assert state_of(again) == (status, version, journal, pending)
    assert again.load(NODECLAIM, claim_ref(REF)) == claim_before
    again.close()


def test_open_store_urls(tmp_path: Path) -> None:
    assert isinstance(open_store("memory://"), MemoryStore)
    s = open_store(f"sqlite:///{tmp_path}/u.db")
    assert isinstance(s, SQLiteStore)
    s.close()
    for bad in ("sqlite:///", "redis://x", "", "postgres://db"):
        with pytest.raises(StoreError):
            open_store(bad)
    with pytest.raises(StoreError, match="does not exist"):
        SQLiteStore(tmp_path / "missing" / "folder" / "x.db")


# -- legacy statuses --------------------------------------------------------------------------
def test_a_legacy_initializing_claim_is_read_as_bound(tmp_path: Path) -> None:
    path = tmp_path / "legacy.db"
    SQLiteStore(path).close()
    claim = claim_ref(REF)
    legacy = {
        "state": "Initializing",
        "reason": "Initializing",
        "message": "",
        "pod_uid": REF.uid,
        "instance_id": "i-1",
        "pool": "default",
        "provider": "fake",
        "created_at": t(-3600).isoformat(),
        "pod_absent_since": None,
        "grace_seconds": 15.0,
        "deleting": False,
    }
    with sqlite3.connect(path) as db:  # written by a controller from before Nebula #38
        db.execute(
            "INSERT INTO objects (uid, machine, kind, namespace, name, state, version, status) "
            "VALUES (?, 'nodeclaim', 'NodeClaim', '', ?, 'Initializing', 4, ?)",
            (claim.uid, claim.name, json.dumps(legacy)),
        )
    store = SQLiteStore(path)
    record = store.load(NODECLAIM, claim)
    assert record is not None
    assert record.status.state == nc.BOUND
    assert record.version == 4
    assert [r.status.state for r in store.records(NODECLAIM)] == [nc.BOUND]

    emitter = MemoryEmitter()
    runner = Runner(store, [emitter])
    flapping = nc.PodObserved(at=t(0), pod_uid=REF.uid, phase="Pending", reason="Provisioning")
    flap = runner.observe(claim, flapping)
    assert flap.transitions == ()  # Bound is never downgraded
    assert store.load(NODECLAIM, claim).status.state == nc.BOUND  # type: ignore[union-attr]
    gone = runner.observe(claim, nc.PodAbsent(at=t(1)))  # a phase was set: teardown now
    assert [(e.source, e.target) for e in gone.transitions] == [(nc.BOUND, nc.DELETED)]
    assert gone.version == flap.version + 1
    store.close()


# -- two processes, one file ------------------------------------------------------------------
def _spawn(target: Any, *args: Any) -> multiprocessing.process.BaseProcess:
    process = multiprocessing.get_context("spawn").Process(target=target, args=args)
    process.start()
    return process


def test_two_processes_never_lose_a_write_nor_deliver_an_event_twice(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.db")
    SQLiteStore(path).close()
    uids = ["p0", "p1", "p2"]
    setup = Runner(SQLiteStore(path), [MemoryEmitter()])
    for uid in uids:
        setup.observe(workers.ref(uid), pod.CreateRequested(at=workers.EPOCH))
        setup.observe(
            workers.ref(uid),
            pod.ProvisionSucceeded(at=workers.EPOCH, reserved=True, instance_id="i-1"),
        )
    setup.store.close()

    barrier = multiprocessing.get_context("spawn").Barrier(2)
    outs = [str(tmp_path / f"w{i}.json") for i in range(2)]
    procs = [_spawn(workers.hammer, path, i, uids, 60, outs[i], barrier) for i in range(2)]
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    reports = [json.loads(Path(o).read_text()) for o in outs]
    assert sum(r["retried"] for r in reports) > 0  # the writes really raced
    assert sum(r["failed"] for r in reports) == 0  # a generous budget: every write lands

    store = SQLiteStore(path)
    refs = [workers.ref(uid) for uid in uids] + [claim_ref(workers.ref(uid)) for uid in uids]
    journal_events: dict[str, dict[str, Any]] = {}
    for r in refs:
        machine = POD if r.kind == "Pod" else NODECLAIM
        record = store.load(machine, r)
        journal = store.journal(machine, r)
        assert record is not None
        assert [e.version for e in journal] == list(range(1, record.version + 1)), r
        assert machine.fold(r, [e.observation for e in journal]) == record.status, r
        for entry in journal:
            for e in entry.transitions:
                journal_events[e.id] = e.as_dict()
        if r.kind == "Pod":  # the terminal race: exactly one terminal event
            terminal = [
                e for entry in journal for e in entry.transitions if e.target in pod.TERMINAL
            ]
            assert len(terminal) == 1, terminal

    # no write lost: every committed result is the journal entry at its version, once
    committed = [tuple(c) for rep in reports for c in rep["committed"]]
    assert len(committed) == len(set((uid, v) for uid, v, _ in committed))
    for uid, version, what in committed:
        machine = POD if not uid.endswith("-claim") else NODECLAIM
        r = next(x for x in refs if x.uid == uid)
        entry = store.journal(machine, r)[version - 1]
        assert (entry.version, entry.observation.name()) == (version, what)
    setup_writes = 2 * len(uids) * 2  # pods and their claims, before the race
    total = sum(len(store.journal(POD if x.kind == "Pod" else NODECLAIM, x)) for x in refs)
    assert total == len(committed) + setup_writes

    # every event delivered exactly once, under its one id, and it is the journal's own
    delivered = [e for rep in reports for e in rep["events"]]
    ids = Counter(e["id"] for e in delivered)
    assert [i for i, n in ids.items() if n > 1] == []
    by_flip = Counter(
        (e["uid"], e["version"], e["condition"], e["from"], e["to"]) for e in delivered
    )
    assert [k for k, n in by_flip.items() if n > 1] == []
    for e in delivered:
        assert journal_events[e["id"]] == e
    # nothing lost: every event the race committed was delivered
    raced = {(uid, v) for uid, v, _ in committed}
    expected = {i for i, e in journal_events.items() if (e["uid"], e["version"]) in raced}
    assert set(ids) == expected
    assert store.claim_undelivered() == []
    store.close()


def test_a_crashed_process_events_are_redelivered_under_the_same_ids(tmp_path: Path) -> None:
    path = str(tmp_path / "crash.db")
    SQLiteStore(path).close()
    crashed = _spawn(workers.commit_then_crash, path, "p9")
    crashed.join(timeout=60)
    assert crashed.exitcode == 17

    now = [1e12]  # far past the crashed owner's lease (it used the wall clock)
    early = SQLiteStore(path)  # a survivor on the wall clock: the lease still holds
    assert early.claim_undelivered() == []
    early.close()

    survivor = SQLiteStore(path, clock=lambda: now[0])
    emitter = MemoryEmitter()
    runner = Runner(survivor, [emitter], links=())
    assert runner.redeliver() == 1
    ref = workers.ref("p9")
    journal = survivor.journal(POD, ref)
    assert emitter.events == list(journal[0].transitions)
    assert emitter.ids() == ["p9:1:0"]
    assert runner.redeliver() == 0
    assert survivor.claim_undelivered() == []
    survivor.close()


def test_redelivery_after_an_emitter_failure_in_another_store_waits_for_the_lease(
    tmp_path: Path,
) -> None:
    now = [5000.0]
    path = tmp_path / "lease2.db"

    class Down:
        def emit(self, transition: Transition) -> None:
            raise ConnectionError("down")

    a = SQLiteStore(path, clock=lambda: now[0], lease_seconds=10)
    Runner(a, [Down()], links=()).observe(REF, pod.CreateRequested(at=t(0)))
    a.close()  # the owner is gone

    b = SQLiteStore(path, clock=lambda: now[0], lease_seconds=10)
    emitter = MemoryEmitter()
    runner = Runner(b, [emitter], links=())
    assert runner.redeliver() == 0
    now[0] += 11
    assert runner.redeliver() == 1
    assert emitter.ids() == [f"{REF.uid}:1:0"]
    journal = b.journal(POD, REF)
    assert emitter.events == list(journal[0].transitions)
    b.close()


def test_a_restarted_writer_with_the_same_owner_takes_back_its_leased_events(
    tmp_path: Path,
) -> None:
    """Crash after commit, before delivery: the same replica, restarted, redelivers at once;
    a stranger waits out the lease."""
    path = tmp_path / "owned.db"
    first = SQLiteStore(path, owner="controller-0")
    Runner(first, [FailingEmitter(failures=10)], links=()).observe(
        REF, pod.CreateRequested(at=t(0))
    )
    first.close()
    stranger, emitter = SQLiteStore(path), MemoryEmitter()
    assert Runner(stranger, [emitter], links=()).redeliver() == 0  # leased to controller-0
    stranger.close()
    again = SQLiteStore(path, owner="controller-0")
    assert Runner(again, [emitter], links=()).redeliver() == 1
    assert emitter.ids() == [f"{REF.uid}:1:0"]
    again.close()


def test_an_empty_owner_name_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="owner must be a non-empty name"):
        SQLiteStore(tmp_path / "x.db", owner="")
