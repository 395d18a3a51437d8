"""A uid names one object: a load or commit whose identity -- kind, namespace, name, and the
machine that reads or writes it -- disagrees with what a store holds under that uid is refused
with :class:`~lifecycle.IdentityMismatch`, and nothing is written.

Every store is checked the same way (memory, SQLite, a read-through overlay over SQLite, and
PostgreSQL), through the store itself, ``Runner.observe``, ``observe_many`` and the
``AsyncRunner``. The PostgreSQL cases (marked ``postgres``) carry the rule to the PostgreSQL
stores, which call the same ``check_identity``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lifecycle import (
    AsyncRunner,
    IdentityMismatch,
    LifecycleError,
    MemoryEmitter,
    MemoryStore,
    ObjectRef,
    Observation,
    Outcome,
    RetryPolicy,
    Runner,
    SQLiteStore,
    Store,
    StoreError,
    ThreadedStore,
)
from lifecycle._core.machine import Machine
from lifecycle._core.transition import stamp
from lifecycle.machines import JOB, NODECLAIM, POD, nodeclaim, pod
from lifecycle.stores.base import CommitItem, Record, check_identity
from lifecycle.stores.dry_run import DryRunStore
from lifecycle.testing import assert_journal_folds
from lifecycle.testing.fakes import FaultyStore

from .helpers import pod_ref, step, t

STORED = pod_ref("pod-a")  # Pod ml/trainer-pod-a, uid pod-a, written by the pod machine
FAST = RetryPolicy(backoff=0.0)

#: The ways a ref can disagree with the stored Pod's identity: (machine, ref).
IMPOSTORS: dict[str, tuple[Machine[Any], ObjectRef]] = {
    "another kind": (JOB, ObjectRef("Job", STORED.namespace, STORED.name, STORED.uid)),
    "another name": (POD, ObjectRef("Pod", STORED.namespace, "impostor", STORED.uid)),
    "another namespace": (POD, ObjectRef("Pod", "other", STORED.name, STORED.uid)),
    "another machine": (NODECLAIM, STORED),
}
#: Impostors a runner can produce (it picks the machine by kind, so not "another machine").
BY_KIND = [k for k in IMPOSTORS if k != "another machine"]


def first(machine: Machine[Any]) -> Observation:
    """An observation each machine accepts from its initial status."""
    if machine is POD:
        return pod.CreateRequested(at=t(10))
    if machine is NODECLAIM:
        return nodeclaim.ClaimCreated(at=t(10))
    return machine.observation("Submitted", t(10), {"nodes": ["gpu-1"]})


def write_of(machine: Machine[Any], ref: ObjectRef, expected: int) -> CommitItem:
    """A commit of ``ref``'s first observation, as the runner would make it."""
    obs = first(machine)
    before = machine.initial(ref)
    after = machine.apply(before, obs)
    transitions = stamp(machine.flips(before, after), ref, machine.name, expected + 1, obs.at)
    return CommitItem(machine, ref, expected, after, obs, transitions)


def commit(store: Any, item: CommitItem) -> int:
    return int(
        store.commit(
            item.machine, item.ref, item.expected, item.status, item.observation, item.transitions
        )
    )


def boot(store: Store) -> None:
    """The stored Pod: two commits (version 2), two events in the outbox."""
    step(store, pod.CreateRequested(at=t(0)), STORED)
    step(store, pod.ProvisionSucceeded(at=t(1), reserved=True, instance_id="i-1"), STORED)


def seen(store: Store) -> tuple[Any, ...]:
    """Everything a refused write must leave as it was: the Pod's status, version and
    journal, the outbox, and which objects each machine lists."""
    record = store.load(POD, STORED)
    assert record is not None
    assert record.version == 2
    assert record.status.state != ""
    return (
        record.status,
        record.version,
        store.journal(POD, STORED),
        sorted(e.id for e in store.claim_undelivered()),
        [(m.name, sorted(r.ref.uid for r in store.records(m))) for m in (POD, JOB, NODECLAIM)],
    )


def unchanged(store: Store, before: tuple[Any, ...]) -> None:
    assert seen(store) == before
    assert_journal_folds(POD, store, STORED)


KINDS = ["memory", "sqlite", "overlay", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(params=KINDS)
def booted(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A store holding the Pod. ``overlay``: a DryRunStore over an SQLite store that holds
    it (the dry run's store); the SQLite file is checked unchanged afterwards too."""
    kind = request.param
    closing: list[Store] = []
    base: Store | None = None
    store: Store
    if kind == "memory":
        store = MemoryStore()
    elif kind == "sqlite":
        store = SQLiteStore(tmp_path / "identity.db", synchronous="OFF")
    elif kind == "overlay":
        base = SQLiteStore(tmp_path / "base.db", synchronous="OFF")
        closing.append(base)
    else:
        from lifecycle.stores.postgres import PostgresStore

        store = PostgresStore(request.getfixturevalue("pg_url"))
    if base is not None:
        boot(base)
        store = DryRunStore(base)
    else:
        boot(store)
    closing.append(store)
    base_before = None if base is None else seen(base)
    yield store
    if base is not None:
        unchanged(base, base_before or ())  # a dry run's base is never written
    for s in closing:
        s.close()


# -- the rule itself ----------------------------------------------------------------------
def test_check_identity_names_both_objects_and_the_machines() -> None:
    check_identity("pod", "Pod", "ml", "a", "pod", ObjectRef("Pod", "ml", "a", "u"))
    with pytest.raises(IdentityMismatch) as kind:
        check_identity("pod", "Pod", "ml", "a", "job", ObjectRef("Job", "ml", "a", "u"))
    assert (kind.value.uid, kind.value.stored, kind.value.given) == (
        "u",
        ("Pod", "ml", "a"),
        ("Job", "ml", "a"),
    )
    assert kind.value.machines == ("pod", "job")
    assert "a uid names one object" in str(kind.value)
    with pytest.raises(IdentityMismatch) as name:
        check_identity("pod", "Pod", "ml", "a", "pod", ObjectRef("Pod", "ml", "b", "u"))
    assert name.value.machines is None
    assert not isinstance(name.value, StoreError)  # bad input, not a store failure
    assert isinstance(name.value, LifecycleError)


def test_a_huge_identity_gives_a_bounded_message() -> None:
    huge = "x" * 100_000
    with pytest.raises(IdentityMismatch) as e:
        check_identity("pod", "Pod", "ml", "a", "pod", ObjectRef("Pod", "ml", huge, huge))
    assert len(str(e.value)) < 600


# -- the store protocol -------------------------------------------------------------------
@pytest.mark.parametrize("impostor", list(IMPOSTORS))
def test_load_of_an_impostor_is_refused(booted: Store, impostor: str) -> None:
    machine, ref = IMPOSTORS[impostor]
    before = seen(booted)
    with pytest.raises(IdentityMismatch) as e:
        booted.load(machine, ref)
    assert e.value.uid == STORED.uid
    assert e.value.stored == (STORED.kind, STORED.namespace, STORED.name)
    assert e.value.given == (ref.kind, ref.namespace, ref.name)
    with pytest.raises(IdentityMismatch):
        booted.journal(machine, ref)
    unchanged(booted, before)


@pytest.mark.parametrize("impostor", list(IMPOSTORS))
@pytest.mark.parametrize("expected", [2, 0], ids=["stored-version", "as-new"])
def test_commit_of_an_impostor_writes_nothing(booted: Store, impostor: str, expected: int) -> None:
    """Refused whatever version it expects: the stored one (the Pod's status would be
    overwritten) or 0 (a new object under a taken uid)."""
    machine, ref = IMPOSTORS[impostor]
    before = seen(booted)
    with pytest.raises(IdentityMismatch):
        commit(booted, write_of(machine, ref, expected))
    unchanged(booted, before)
    # and the Pod itself still commits, from the version it had
    assert step(booted, pod.InstanceRunning(at=t(2)), STORED)[0] == 3


def test_the_same_identity_under_an_equal_ref_is_accepted(booted: Store) -> None:
    twin = ObjectRef(STORED.kind, STORED.namespace, STORED.name, STORED.uid)
    assert twin is not STORED
    record = booted.load(POD, twin)
    assert record is not None
    assert record.version == 2
    assert step(booted, pod.InstanceRunning(at=t(2)), twin)[0] == 3


@pytest.mark.parametrize("impostor", list(IMPOSTORS))
def test_a_batch_with_an_impostor_is_refused_whole(booted: Store, impostor: str) -> None:
    """``load_many``/``commit_many`` raise for the whole call, and the batch writes nothing --
    not even its innocent items."""
    if not hasattr(booted, "commit_many"):
        pytest.skip("no batch methods")
    machine, ref = IMPOSTORS[impostor]
    innocent = pod_ref("pod-b")
    before = seen(booted)
    batch: Any = booted
    with pytest.raises(IdentityMismatch):
        batch.load_many([(POD, innocent), (machine, ref)])
    items = [write_of(POD, innocent, 0), write_of(machine, ref, 2)]
    with pytest.raises(IdentityMismatch):
        batch.commit_many(items)
    unchanged(booted, before)
    assert booted.load(POD, innocent) is None
    assert batch.commit_many([items[0]]) == [1]


def test_commit_many_stray_row_fallback_still_refuses_an_impostor_whole(tmp_path: Path) -> None:
    """The SQLite fallback for a stray journal row (each item in a savepoint) keeps the rule:
    nothing of the batch is written when one item is an impostor."""
    import sqlite3

    store = SQLiteStore(tmp_path / "stray.db", synchronous="OFF")
    boot(store)
    stray = pod_ref("pod-s")
    with sqlite3.connect(store.path) as db:  # a journal row with no object: the batch trips
        db.execute(
            "INSERT INTO journal (uid, version, at, observation, fields, transitions) "
            "VALUES (?, 1, '', 'x', '{}', '[]')",
            (stray.uid,),
        )
    before = seen(store)
    machine, ref = IMPOSTORS["another name"]
    innocent = pod_ref("pod-b")
    items = [write_of(POD, innocent, 0), write_of(POD, stray, 0), write_of(machine, ref, 2)]
    with pytest.raises(IdentityMismatch):
        store.commit_many(items)
    unchanged(store, before)
    assert store.load(POD, innocent) is None
    # without the impostor, only the stray item is refused
    out = store.commit_many(items[:2])
    assert out[0] == 1
    assert isinstance(out[1], StoreError)
    store.close()


def test_a_pending_fault_does_not_hide_an_impostor(booted: Store) -> None:
    faulty = FaultyStore(booted)
    machine, ref = IMPOSTORS["another kind"]
    faulty.inject(ref.uid, "conflict")
    before = seen(booted)
    with pytest.raises(IdentityMismatch):
        commit(faulty, write_of(machine, ref, 2))
    unchanged(booted, before)


def test_the_overlay_refuses_an_impostor_of_its_own_writes(tmp_path: Path) -> None:
    """Within one dry run: an object first written to the overlay (not in its base) still
    owns its uid."""
    base = SQLiteStore(tmp_path / "empty.db", synchronous="OFF")
    overlay = DryRunStore(base)
    boot(overlay)
    before = seen(overlay)
    for machine, ref in IMPOSTORS.values():
        with pytest.raises(IdentityMismatch):
            overlay.load(machine, ref)
        with pytest.raises(IdentityMismatch):
            commit(overlay, write_of(machine, ref, 0))
    assert seen(overlay) == before  # (an overlay keeps no journal of its own writes)
    assert base.load(POD, STORED) is None
    base.close()


# -- the runners ----------------------------------------------------------------------------
@pytest.mark.parametrize("impostor", BY_KIND)
def test_runner_observe_raises_and_writes_nothing(booted: Store, impostor: str) -> None:
    machine, ref = IMPOSTORS[impostor]
    emitter = MemoryEmitter()
    runner = Runner(booted, [emitter], policy=FAST)
    before = seen(booted)
    with pytest.raises(IdentityMismatch):
        runner.observe(ref, first(machine))
    unchanged(booted, before)
    assert emitter.events == []  # no event names the impostor (not even a fallback)


@pytest.mark.parametrize("impostor", BY_KIND)
def test_observe_many_fails_the_impostor_alone(booted: Store, impostor: str) -> None:
    machine, ref = IMPOSTORS[impostor]
    innocent = pod_ref("pod-b")
    emitter = MemoryEmitter()
    runner = Runner(booted, [emitter], policy=FAST, links=())
    before = seen(booted)
    results = runner.observe_many(
        [(innocent, pod.CreateRequested(at=t(10))), (ref, first(machine))]
    )
    assert results[0].outcome is Outcome.COMMITTED
    assert results[1].outcome is Outcome.FAILED
    assert isinstance(results[1].error, IdentityMismatch)
    assert results[1].fallback == ()
    assert all(e.ref.uid != STORED.uid for e in emitter.events)
    assert booted.load(POD, innocent) is not None
    after = seen(booted)
    assert after[:3] == before[:3]  # the Pod: status, version, journal
    assert_journal_folds(POD, booted, STORED)


@pytest.mark.parametrize("impostor", BY_KIND)
def test_observe_many_of_impostors_only_writes_nothing(booted: Store, impostor: str) -> None:
    machine, ref = IMPOSTORS[impostor]
    twin = ObjectRef(ref.kind, ref.namespace, ref.name, ref.uid)
    runner = Runner(booted, [], policy=FAST)
    before = seen(booted)
    results = runner.observe_many([(ref, first(machine)), (twin, first(machine))])
    assert [type(r.error) for r in results] == [IdentityMismatch, IdentityMismatch]
    unchanged(booted, before)


def test_a_linked_target_whose_uid_is_taken_is_refused_typed(booted: Store) -> None:
    """A Pod's NodeClaim is keyed ``<pod uid>-claim``: if another object holds that uid, the
    cascade's write is refused (its result holds the IdentityMismatch) and the squatter is
    left as it was; the Pod's own commit stands."""
    squatter = pod_ref("pod-x-claim", name="squatter")
    step(booted, pod.CreateRequested(at=t(0)), squatter)
    squatted = booted.load(POD, squatter)
    source = pod_ref("pod-x")
    runner = Runner(booted, [], policy=FAST)
    result = runner.observe(source, pod.CreateRequested(at=t(5)))
    assert result.committed
    (claim,) = result.linked
    assert claim.outcome is Outcome.FAILED
    assert isinstance(claim.error, IdentityMismatch)
    assert booted.load(POD, squatter) == squatted
    many = runner.observe_many([(pod_ref("pod-y"), pod.CreateRequested(at=t(5)))])
    assert many[0].committed


@pytest.mark.parametrize("store_kind", ["memory", "sqlite"])
@pytest.mark.parametrize("impostor", BY_KIND)
def test_async_runner_refuses_an_impostor(tmp_path: Path, store_kind: str, impostor: str) -> None:
    """AsyncRunner over ThreadedStore (SQLite on a worker thread; memory inline)."""
    inner: Store = (
        MemoryStore()
        if store_kind == "memory"
        else SQLiteStore(tmp_path / "async.db", synchronous="OFF")
    )
    boot(inner)
    before = seen(inner)
    machine, ref = IMPOSTORS[impostor]
    innocent = pod_ref("pod-b")

    async def main() -> None:
        runner = AsyncRunner(ThreadedStore(inner), policy=FAST, links=())
        with pytest.raises(IdentityMismatch):
            await runner.observe(ref, first(machine))
        results = await runner.observe_many(
            [(innocent, pod.CreateRequested(at=t(10))), (ref, first(machine))]
        )
        assert results[0].committed
        assert isinstance(results[1].error, IdentityMismatch)
        threaded = ThreadedStore(inner)
        with pytest.raises(IdentityMismatch):
            await threaded.load_many([(POD, pod_ref("pod-c")), (machine, ref)])
        with pytest.raises(IdentityMismatch):
            await threaded.commit_many(
                [write_of(POD, pod_ref("pod-c"), 0), write_of(machine, ref, 2)]
            )
        assert inner.load(POD, pod_ref("pod-c")) is None  # the refused batch wrote nothing
        assert seen(inner)[:3] == before[:3]
        assert_journal_folds(POD, inner, STORED)
        await threaded.close()  # (closes the store under both)

    asyncio.run(main())


@pytest.mark.postgres
@pytest.mark.parametrize("impostor", BY_KIND)
def test_async_runner_on_async_postgres_refuses_an_impostor(pg_url: str, impostor: str) -> None:
    """AsyncRunner over AsyncPostgresStore (psycopg's asyncio pool)."""
    from lifecycle import open_async_store
    from lifecycle.stores.postgres import PostgresStore

    sync = PostgresStore(pg_url)
    boot(sync)
    before = seen(sync)
    machine, ref = IMPOSTORS[impostor]

    async def main() -> None:
        store: Any = await open_async_store(pg_url)
        runner = AsyncRunner(store, policy=FAST, links=())
        try:
            with pytest.raises(IdentityMismatch):
                await runner.observe(ref, first(machine))
            results = await runner.observe_many(
                [(pod_ref("pod-b"), pod.CreateRequested(at=t(10))), (ref, first(machine))]
            )
            assert results[0].committed
            assert isinstance(results[1].error, IdentityMismatch)
            with pytest.raises(IdentityMismatch):
                await store.commit_many(
                    [write_of(POD, pod_ref("pod-c"), 0), write_of(machine, ref, 2)]
                )
        finally:
            await runner.close()

    asyncio.run(main())
    assert sync.load(POD, pod_ref("pod-c")) is None
    assert seen(sync)[:3] == before[:3]
    assert_journal_folds(POD, sync, STORED)
    sync.close()


# -- any identity that differs, in any component --------------------------------------------
_TEXT = st.text(st.characters(blacklist_categories=["Cs"]), max_size=12)  # (no lone surrogates)
_MACHINES: list[Machine[Any]] = [POD, JOB, NODECLAIM]


def identities() -> st.SearchStrategy[tuple[Machine[Any], ObjectRef]]:
    """(machine, ref) with the stored Pod's uid, each component either the stored one or
    anything else -- so most examples differ in one or two components."""

    def keep_or(value: str, other: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        return st.one_of(st.just(value), other)

    return st.tuples(
        st.sampled_from(_MACHINES),
        keep_or(STORED.kind, st.sampled_from(["Job", "NodeClaim", "pod", "Pod ", ""]) | _TEXT),
        keep_or(STORED.namespace, _TEXT),
        keep_or(STORED.name, _TEXT),
    ).map(lambda g: (g[0], ObjectRef(g[1], g[2], g[3], STORED.uid)))


@pytest.mark.parametrize("store_kind", ["memory", "sqlite", "overlay"])
def test_any_differing_identity_is_refused(tmp_path: Path, store_kind: str) -> None:
    base: Store | None = None
    store: Store
    if store_kind == "memory":
        store = MemoryStore()
    else:
        store = SQLiteStore(tmp_path / "any.db", synchronous="OFF")
        if store_kind == "overlay":
            base, store = store, DryRunStore(store)
    boot(base if base is not None else store)
    before = seen(store)

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(identities(), st.sampled_from([0, 2]))
    def check(given: tuple[Machine[Any], ObjectRef], expected: int) -> None:
        machine, ref = given
        same = machine is POD and ref == STORED
        if same:
            assert store.load(machine, ref) is not None
            return
        with pytest.raises(IdentityMismatch):
            store.load(machine, ref)
        with pytest.raises(IdentityMismatch):
            commit(store, write_of(machine, ref, expected))
        assert seen(store) == before

    check()
    unchanged(store, before)
    store.close()
    if base is not None:
        base.close()


# -- the conformance check hosts run on their own stores ----------------------------------
class _Careless(MemoryStore):
    """A store that keys by uid alone, as every store did before the identity rule."""

    def load(self, machine: Machine[Any], ref: ObjectRef) -> Any:
        return self._records.get(ref.uid)

    def journal(self, machine: Machine[Any], ref: ObjectRef) -> Any:
        return []

    def commit(
        self,
        machine: Machine[Any],
        ref: ObjectRef,
        expected: int,
        status: Any,
        observation: Observation,
        transitions: Any,
    ) -> int:
        current = self._records.get(ref.uid)
        if current is not None:  # whoever held the uid, it is now ``ref``'s: no rule to meet
            self._records[ref.uid] = Record(ref, machine.name, current.status, current.version)
        return super().commit(machine, ref, expected, status, observation, transitions)


def test_check_store_holds_a_hosts_store_to_the_identity_rule() -> None:
    from lifecycle.testing import check_store

    check_store(MemoryStore)
    with pytest.raises(AssertionError, match="IdentityMismatch"):
        check_store(_Careless)
