"""One Store conformance suite, run on MemoryStore, SQLiteStore and PostgresStore alike:
compare-and-set, atomic commits, the journal, the outbox and its leases, batches
(``load_many``/``commit_many``), and journal retention behind snapshots."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import attrs
import pytest

from lifecycle import (
    Conflict,
    MemoryEmitter,
    MemoryStore,
    Runner,
    Store,
    StoreError,
)
from lifecycle.machines import NODECLAIM, POD, pod
from lifecycle.stores.base import CommitItem, Snapshot
from lifecycle.testing import assert_journal_folds

from .conftest import CACHED, KINDS
from .conftest import SHARED as PLAIN
from .helpers import check_invariants, pod_ref, raw, state_of, step, t

#: every store, and the shared ones again with their status cache on (ADR 0134)
SHARED = PLAIN + CACHED


@pytest.fixture(params=KINDS + CACHED)
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


REF = pod_ref()
Open = Callable[..., Store]


def boot(store: Store, ref: Any = REF) -> None:
    step(store, pod.CreateRequested(at=t(0)), ref)
    step(store, pod.ProvisionSucceeded(at=t(1), reserved=True, instance_id="i-1"), ref)


def flap(store: Store, ref: Any, n: int, start: int = 2) -> None:
    for i in range(n):
        obs: Any = (
            pod.InstanceRunning(at=t(start + i))
            if i % 2 == 0
            else pod.InstancePending(at=t(start + i))
        )
        step(store, obs, ref)


# -- compare-and-set --------------------------------------------------------------------------
def test_commit_is_compare_and_set(any_store: Store) -> None:
    store = any_store
    assert step(store, pod.CreateRequested(at=t(0)), REF)[0] == 1
    before = state_of(store, REF)
    with pytest.raises(Conflict) as stale:
        step(store, pod.ConfigInvalid(at=t(1), error="x"), REF, expected=0)
    assert (stale.value.uid, stale.value.expected, stale.value.actual) == (REF.uid, 0, 1)
    with pytest.raises(Conflict) as ahead:
        step(store, pod.ConfigInvalid(at=t(1), error="x"), REF, expected=7)
    assert (ahead.value.expected, ahead.value.actual) == (7, 1)
    assert state_of(store, REF) == before
    assert step(store, pod.ConfigInvalid(at=t(1), error="x"), REF)[0] == 2


def test_a_conflict_writes_no_journal_entry_and_no_outbox_row(any_store: Store) -> None:
    store = any_store
    step(store, pod.CreateRequested(at=t(0)), REF)
    store.mark_delivered([e.id for e in store.claim_undelivered()])
    with pytest.raises(Conflict):
        step(store, pod.ConfigInvalid(at=t(1), error="x"), REF, expected=0)
    with pytest.raises(Conflict):  # a create racing an existing object
        step(store, pod.CreateRequested(at=t(2)), REF, expected=0)
    assert [e.version for e in store.journal(POD, REF)] == [1]
    assert store.claim_undelivered() == []


def test_unknown_objects_read_as_absent(any_store: Store) -> None:
    assert any_store.load(POD, pod_ref("nobody")) is None
    assert any_store.journal(POD, pod_ref("nobody")) == []
    assert list(any_store.records(POD)) == []


def test_records_are_per_machine(any_store: Store) -> None:
    boot(any_store)
    boot(any_store, pod_ref("pod-b"))
    assert sorted(r.ref.uid for r in any_store.records(POD)) == ["pod-a", "pod-b"]
    assert list(any_store.records(NODECLAIM)) == []
    record = any_store.load(POD, REF)
    assert record is not None
    assert (record.machine, record.version, record.status.state) == ("pod", 2, pod.INITIALIZING)


@pytest.mark.parametrize("store_kind", SHARED, indirect=True)  # memory serialises nothing
def test_an_unserialisable_status_is_refused_before_anything_is_written(open_kind: Open) -> None:
    store = open_kind()
    bad = attrs.evolve(POD.initial(REF), pool=object())  # type: ignore[arg-type]
    with pytest.raises(StoreError, match="serialise"):
        store.commit(POD, REF, 0, bad, pod.CreateRequested(at=t(0)), ())
    assert state_of(store, REF) == (None, 0, [])
    assert store.claim_undelivered() == []


# -- the journal ------------------------------------------------------------------------------
def test_journal_round_trips_and_folds_to_the_status(any_store: Store) -> None:
    observations: list[Any] = [
        pod.CreateRequested(at=t(0), pool="gpu", provider="modal"),
        pod.ProvisionErrored(at=t(1), error="connection reset: {not a placeholder} 'q' \"dq\""),
        pod.ProvisionSucceeded(at=t(2), reserved=True, instance_id="i-1", endpoint="10.0.0.7"),
        pod.InstanceRunning(at=t(3), endpoint="10.0.0.7"),
        pod.DeletionRequested(at=t(4)),
        pod.InstanceTerminated(at=t(5), exit_code=None, detail="ünïcode ✓ \\ backslash"),
    ]
    committed = [
        (version, obs, transitions)
        for obs in observations
        for version, _, transitions in [step(any_store, obs, REF)]
    ]
    journal = any_store.journal(POD, REF)
    assert [(e.version, e.observation, e.transitions) for e in journal] == committed
    assert_journal_folds(POD, any_store, REF)


# -- the outbox -------------------------------------------------------------------------------
def test_outbox_claims_in_uid_version_order_and_marks(any_store: Store) -> None:
    store = any_store
    step(store, pod.CreateRequested(at=t(0)), REF)
    step(store, pod.ProvisionSucceeded(at=t(1), reserved=True, instance_id="i-1"), REF)
    step(store, pod.CreateRequested(at=t(0)), pod_ref("pod-0"))
    pending = store.claim_undelivered()
    assert [e.id for e in pending] == ["pod-0:1:0", "pod-a:1:0", "pod-a:2:0"]
    journal = {e.id: e for entry in store.journal(POD, REF) for e in entry.transitions}
    assert [e for e in pending if e.ref.uid == REF.uid] == [
        journal["pod-a:1:0"],
        journal["pod-a:2:0"],
    ]
    store.mark_delivered(["pod-a:1:0", "no-such-id"])
    assert [e.id for e in store.claim_undelivered()] == ["pod-0:1:0", "pod-a:2:0"]
    store.mark_delivered([])
    store.mark_delivered([e.id for e in store.claim_undelivered()])
    assert store.claim_undelivered() == []


@pytest.mark.parametrize("store_kind", SHARED, indirect=True)
def test_fresh_events_belong_to_their_committer_until_the_lease_ends(open_kind: Open) -> None:
    a = open_kind(lease_seconds=0.6)
    b = open_kind(lease_seconds=0.6)
    step(a, pod.CreateRequested(at=t(0)), REF)
    assert b.claim_undelivered() == []  # another replica's, within the lease
    assert [e.id for e in a.claim_undelivered()] == [f"{REF.uid}:1:0"]  # its own, at once
    time.sleep(0.8)
    assert [e.id for e in b.claim_undelivered()] == [f"{REF.uid}:1:0"]  # an expired lease
    assert a.claim_undelivered() == []  # b holds it now
    b.mark_delivered([f"{REF.uid}:1:0"])
    time.sleep(0.8)
    assert a.claim_undelivered() == b.claim_undelivered() == []


@pytest.mark.parametrize("store_kind", SHARED, indirect=True)
def test_a_stray_row_is_a_store_error_not_a_conflict_and_nothing_is_written(
    open_kind: Open,
) -> None:
    store = open_kind()
    step(store, pod.CreateRequested(at=t(0)), REF)
    before = state_of(store, REF)
    raw(
        store,
        "INSERT INTO {s}outbox (id, uid, version, n, payload) VALUES (?, ?, 2, 0, '{}')",
        (f"{REF.uid}:2:0", REF.uid),
    )
    with pytest.raises(StoreError) as e:
        step(store, pod.ConfigInvalid(at=t(1), error="pool unreadable"), REF)
    assert not isinstance(e.value, Conflict)
    assert state_of(store, REF) == before
    raw(store, "DELETE FROM {s}outbox WHERE id = ?", (f"{REF.uid}:2:0",))
    raw(
        store,
        "INSERT INTO {s}journal (uid, version, at, observation, fields, transitions) "
        "VALUES (?, 2, 'x', 'x', '{}', '[]')",
        (REF.uid,),
    )
    with pytest.raises(StoreError) as e2:
        step(store, pod.ConfigInvalid(at=t(1), error="pool unreadable"), REF)
    assert not isinstance(e2.value, Conflict)
    record = store.load(POD, REF)
    assert record is not None
    assert (record.status, record.version) == before[:2]


# -- batches ----------------------------------------------------------------------------------
def _item(store: Store, ref: Any, obs: Any, expected: int | None = None) -> CommitItem:
    record = store.load(POD, ref)
    before = POD.initial(ref) if record is None else record.status
    version = 0 if record is None else record.version
    after = POD.apply(before, obs)
    from lifecycle._core.transition import stamp

    flips = stamp(POD.flips(before, after), ref, POD.name, version + 1, obs.at)
    return CommitItem(POD, ref, version if expected is None else expected, after, obs, flips)


@pytest.mark.parametrize("store_kind", SHARED, indirect=True)
def test_commit_many_compares_and_sets_each_item(open_kind: Open) -> None:
    store: Any = open_kind()
    refs = [pod_ref(f"b{i}") for i in range(5)]
    step(store, pod.CreateRequested(at=t(0)), refs[1])
    items = [_item(store, r, pod.CreateRequested(at=t(0))) for r in refs]
    items[1] = attrs.evolve(items[1], expected=0)  # stale: b1 is at version 1
    out = store.commit_many(items)
    assert [o if isinstance(o, int) else type(o).__name__ for o in out] == [
        1,
        "Conflict",
        1,
        1,
        1,
    ]
    assert (out[1].expected, out[1].actual) == (0, 1)
    assert [r is None for r in store.load_many([(POD, r) for r in refs])] == [False] * 5
    assert store.load_many([(POD, pod_ref("none")), (POD, refs[0])])[0] is None
    check_invariants(store, refs)


@pytest.mark.parametrize("store_kind", SHARED, indirect=True)
def test_commit_many_applies_one_objects_items_in_order(open_kind: Open) -> None:
    store: Any = open_kind()
    first = _item(store, REF, pod.CreateRequested(at=t(0)))
    after = POD.apply(first.status, pod.ProvisionErrored(at=t(1), error="x"))
    second = CommitItem(POD, REF, 1, after, pod.ProvisionErrored(at=t(1), error="x"), ())
    assert store.commit_many([first, second]) == [1, 2]
    check_invariants(store, [REF])


@pytest.mark.parametrize("store_kind", SHARED, indirect=True)
def test_commit_many_isolates_an_item_the_database_refuses(open_kind: Open) -> None:
    store: Any = open_kind()
    refs = [pod_ref(f"s{i}") for i in range(3)]
    raw(
        store,
        "INSERT INTO {s}journal (uid, version, at, observation, fields, transitions) "
        "VALUES (?, 1, 'x', 'x', '{}', '[]')",
        (refs[1].uid,),
    )
    out = store.commit_many([_item(store, r, pod.CreateRequested(at=t(0))) for r in refs])
    assert out[0] == 1
    assert out[2] == 1
    assert isinstance(out[1], StoreError)
    assert not isinstance(out[1], Conflict)
    assert store.load(POD, refs[1]) is None


# -- retention --------------------------------------------------------------------------------
def test_compaction_keeps_fold_equal_to_status(any_store: Store) -> None:
    store: Any = any_store
    boot(store)
    flap(store, REF, 10)  # versions 3..12
    boot(store, pod_ref("short"))
    record = store.load(POD, REF)
    assert store.snapshot(POD, REF) is None
    dropped = store.compact(POD, keep=3)
    assert dropped == 9 + 0  # REF: 12 - 3; "short" has only 2 entries
    snap = store.snapshot(POD, REF)
    assert isinstance(snap, Snapshot)
    assert snap.version == 9
    assert [e.version for e in store.journal(POD, REF)] == [10, 11, 12]
    assert store.load(POD, REF) == record  # the status is untouched
    assert_journal_folds(POD, store, REF)
    assert_journal_folds(POD, store, pod_ref("short"))
    assert store.compact(POD, keep=3) == 0  # idempotent
    flap(store, REF, 4, start=20)  # writes after a compaction fold from the snapshot too
    assert_journal_folds(POD, store, REF)
    assert store.compact(POD, keep=0, refs=[REF]) == 7
    assert store.journal(POD, REF) == []
    assert store.snapshot(POD, REF).status == store.load(POD, REF).status
    assert_journal_folds(POD, store, REF)
    with pytest.raises(ValueError, match="negative"):
        store.compact(POD, keep=-1)


def test_compaction_leaves_a_journal_that_does_not_fold_alone(any_store: Store) -> None:
    store: Any = any_store
    boot(store)
    obs = pod.InstanceRunning(at=t(5))
    record = store.load(POD, REF)
    wrong = attrs.evolve(record.status, message="not what the observation gives")
    store.commit(POD, REF, 2, wrong, obs, ())
    assert store.compact(POD, keep=0) == 0
    assert store.snapshot(POD, REF) is None
    assert len(store.journal(POD, REF)) == 3


def test_a_runner_keeps_working_across_compaction(any_store: Store) -> None:
    store: Any = any_store
    emitter = MemoryEmitter()
    runner = Runner(store, [emitter])
    runner.observe(REF, pod.CreateRequested(at=t(0)))
    runner.observe(REF, pod.ProvisionSucceeded(at=t(1), reserved=True, instance_id="i-1"))
    for i in range(6):
        runner.observe(REF, pod.InstanceRunning(at=t(2 + 2 * i)))
        runner.observe(REF, pod.InstancePending(at=t(3 + 2 * i)))
    store.compact(POD, keep=2)
    store.compact(NODECLAIM, keep=0)
    result = runner.observe(REF, pod.InstanceFailed(at=t(30), exit_code=1))
    assert result.committed
    refs = [REF, *(r.ref for r in store.records(NODECLAIM))]
    check_invariants(store, refs)
    assert len(set(emitter.ids())) == len(emitter.ids())


def test_a_store_without_a_journal_compacts_nothing(open_kind: Open, store_kind: str) -> None:
    store: Any = open_kind(journal=False)
    boot(store)
    assert store.journal(POD, REF) == []
    assert store.compact(POD, keep=0) == 0
    assert [e.id for e in store.claim_undelivered()] == [f"{REF.uid}:1:0", f"{REF.uid}:2:0"]


def test_memory_store_is_the_reference() -> None:  # the suite's fixtures cover the rest
    assert isinstance(MemoryStore(), Store)


def test_the_shipped_conformance_check_passes(open_kind: Open, store_kind: str) -> None:
    """``lifecycle.testing.check_store``, the check hosts run on their own stores."""
    from lifecycle.testing import check_store

    if store_kind == "memory":
        check_store(MemoryStore)
        return
    stores: list[Store] = []

    def fresh() -> Store:
        store = open_kind()
        for uid in ("a", "b", "r", "m0", "m1", "m2", "keep"):  # each call: an empty store
            raw_clear(store, uid)
        stores.append(store)
        return store

    check_store(fresh)


def raw_clear(store: Store, uid: str) -> None:
    for table in ("objects", "journal", "outbox", "snapshots"):
        raw(store, f"DELETE FROM {{s}}{table} WHERE uid = ?", (uid,))


def test_check_store_catches_a_store_that_ignores_the_expected_version() -> None:
    from lifecycle.testing import check_store

    class Careless(MemoryStore):
        def commit(self, machine: Any, ref: Any, expected: int, *rest: Any) -> int:
            current = self.load(machine, ref)
            return super().commit(machine, ref, 0 if current is None else current.version, *rest)

    with pytest.raises(AssertionError, match="must conflict"):
        check_store(Careless)
