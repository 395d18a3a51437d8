"""``Runner.observe_many`` on memory, SQLite and PostgreSQL: the results and events of
``observe`` per object, reads and writes grouped, per-object compare-and-set (a conflict
retries that object, not the batch), post-commit emission, cascades and fallbacks."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pytest

from lifecycle import (
    Conflict,
    EventType,
    InvalidTransition,
    MemoryEmitter,
    Observation,
    Outcome,
    Result,
    RetryPolicy,
    Runner,
    Store,
    StoreError,
    UnknownObservation,
)
from lifecycle.machines import NODECLAIM, POD, pod
from lifecycle.machines import nodeclaim as nc
from lifecycle.stores.base import CommitItem, Record
from lifecycle.testing.fakes import FailingEmitter

from ..fallback_machines import with_fallback_pod
from .helpers import check_invariants, pod_ref, t

Open = Callable[..., Store]
FAST = RetryPolicy(backoff=0.0)


class Batches:
    """Delegates to ``inner``; counts load/commit calls, and before the next batch commit lets
    a *concurrent writer* commit ``racing`` for some uids (a real lost race: the store's own
    compare-and-set refuses our item), or makes some uids' items conflict / fail outright."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.racing: dict[str, Observation] = {}
        self.conflict: Counter[str] = Counter()
        self.error: Counter[str] = Counter()
        self.batch_error: StoreError | None = None
        self.calls: Counter[str] = Counter()
        self.sizes: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def load(self, machine: Any, ref: Any) -> Record | None:
        self.calls["load"] += 1
        return self.inner.load(machine, ref)

    def load_many(self, items: Sequence[tuple[Any, Any]]) -> list[Record | None]:
        self.calls["load_many"] += 1
        inner = getattr(self.inner, "load_many", None)
        if inner is None:
            return [self.inner.load(m, r) for m, r in items]
        found: list[Record | None] = inner(items)
        return found

    def commit(self, machine: Any, ref: Any, expected: int, *rest: Any) -> int:
        self.calls["commit"] += 1
        if self.conflict[ref.uid]:
            self.conflict[ref.uid] -= 1
            raise Conflict(ref.uid, expected, None)
        if self.error[ref.uid]:
            self.error[ref.uid] -= 1
            raise StoreError(f"injected write error on {ref.uid}")
        return self.inner.commit(machine, ref, expected, *rest)

    def commit_many(self, items: Sequence[CommitItem]) -> list[int | StoreError]:
        self.calls["commit_many"] += 1
        self.sizes.append(len(items))
        if self.batch_error is not None:
            error, self.batch_error = self.batch_error, None
            raise error
        for uid, obs in list(self.racing.items()):
            del self.racing[uid]
            Runner(self.inner, [], links=()).observe(
                next(i.ref for i in items if i.ref.uid == uid), obs
            )
        out: dict[int, int | StoreError] = {}
        passed: list[tuple[int, CommitItem]] = []
        for n, item in enumerate(items):
            uid = item.ref.uid
            if self.conflict[uid]:
                self.conflict[uid] -= 1
                out[n] = Conflict(uid, item.expected, None)
            elif self.error[uid]:
                self.error[uid] -= 1
                out[n] = StoreError(f"injected write error on {uid}")
            else:
                passed.append((n, item))
        inner = getattr(self.inner, "commit_many", None)
        if inner is not None:
            found = inner([i for _, i in passed])
        else:
            found = []
            for _, c in passed:
                try:
                    found.append(
                        self.inner.commit(
                            c.machine, c.ref, c.expected, c.status, c.observation, c.transitions
                        )
                    )
                except StoreError as e:
                    found.append(e)
        for (n, _), r in zip(passed, found, strict=True):
            out[n] = r
        return [out[n] for n in range(len(items))]


def pods(n: int, prefix: str = "m") -> list[Any]:
    return [pod_ref(f"{prefix}{i}") for i in range(n)]


def booted(runner: Runner, refs: Iterable[Any]) -> None:
    for ref in refs:
        runner.observe(ref, pod.CreateRequested(at=t(0)))
        runner.observe(ref, pod.ProvisionSucceeded(at=t(1), reserved=True, instance_id="i-1"))


def shape(result: Result) -> tuple[Any, ...]:
    """What a result says, minus the order its cascade's events were emitted in."""
    return (
        result.outcome,
        result.ref,
        result.status,
        result.version,
        result.transitions,
        result.fallback,
        type(result.error).__name__,
        result.attempts,
        tuple(shape(c) for c in result.linked),
        result.actions,
    )


# -- the same as observe ----------------------------------------------------------------------
def test_a_batch_gives_what_observe_gives_object_by_object(
    open_kind: Open, store_kind: str, tmp_path: Any, request: pytest.FixtureRequest
) -> None:
    store = open_kind()
    emitter = MemoryEmitter()
    runner = Runner(store, [emitter], policy=FAST)
    refs = pods(12)
    steps: list[list[tuple[Any, Observation]]] = [
        [(r, pod.CreateRequested(at=t(0))) for r in refs],
        [
            (r, pod.ProvisionSucceeded(at=t(1), reserved=i % 3 != 0, instance_id=f"i-{i}"))
            for i, r in enumerate(refs)
        ],
        [
            (r, pod.InstanceRunning(at=t(2), readiness_confirmed=i % 2 == 0))
            for i, r in enumerate(refs)
        ],
        [(r, pod.InstanceUnknown(at=t(3), error="timeout")) for r in refs],  # changes nothing
        [(r, pod.InstanceFailed(at=t(4), exit_code=1)) for r in refs[:6]],
    ]
    reference = Runner(
        open_reference(store_kind, tmp_path, request), [MemoryEmitter()], policy=FAST
    )
    for batch in steps:
        got = runner.observe_many(batch)
        want = [reference.observe(r, o) for r, o in batch]
        assert [shape(g) for g in got] == [shape(w) for w in want]
    assert sorted(emitter.ids()) == sorted(reference.emitters[0].ids())  # type: ignore[attr-defined]
    by_object: dict[str, list[Any]] = {}
    for e in emitter.events:  # each object's events in its order, every field (times too)
        by_object.setdefault(e.ref.uid, []).append(tuple(e))
    want_by_object: dict[str, list[Any]] = {}
    for e in reference.emitters[0].events:  # type: ignore[attr-defined]
        want_by_object.setdefault(e.ref.uid, []).append(tuple(e))
    assert by_object == want_by_object
    check_invariants(store, [*refs, *(r.ref for r in store.records(NODECLAIM))])
    assert store.claim_undelivered() == []


def open_reference(kind: str, tmp_path: Any, request: pytest.FixtureRequest) -> Store:
    """A second, separate store of the same kind, for the one-by-one reference run."""
    if kind == "memory":
        from lifecycle import MemoryStore

        return MemoryStore()
    if kind == "sqlite":
        from lifecycle import SQLiteStore

        return SQLiteStore(tmp_path / "reference.db", synchronous="OFF")
    from lifecycle.stores.postgres import PostgresStore

    server = request.getfixturevalue("pg_server")
    store = PostgresStore(server.url(schema=request.getfixturevalue("pg_schema") + "_ref"))
    request.addfinalizer(store.close)
    from .conftest import drop_schema

    request.addfinalizer(lambda: drop_schema(server, store.target.schema))
    return store


def test_a_batch_reads_once_and_commits_once_per_attempt(open_kind: Open, store_kind: str) -> None:
    counting = Batches(open_kind())
    runner = Runner(counting, [], policy=FAST, links=())
    refs = pods(50)
    runner.observe_many([(r, pod.CreateRequested(at=t(0))) for r in refs])
    assert counting.calls["load_many"] == 1
    assert counting.calls["commit_many"] == 1
    assert counting.sizes == [50]
    assert counting.calls["load"] == counting.calls["commit"] == 0


def test_the_runner_falls_back_to_one_by_one_on_a_plain_store() -> None:
    class Plain:  # the bare Store protocol: no load_many, no commit_many
        def __init__(self) -> None:
            from lifecycle import MemoryStore

            self.inner = MemoryStore()

        def __getattr__(self, name: str) -> Any:
            if name in ("load_many", "commit_many"):
                raise AttributeError(name)
            return getattr(self.inner, name)

    plain = Plain()
    runner = Runner(plain, [], links=())
    results = runner.observe_many([(r, pod.CreateRequested(at=t(0))) for r in pods(3)])
    assert [r.version for r in results] == [1, 1, 1]


# -- per-object compare-and-set ---------------------------------------------------------------
def test_a_conflict_retries_that_object_only_and_a_racing_flip_suppresses_ours(
    open_kind: Open,
) -> None:
    store = open_kind()
    booted(Runner(store, [], links=()), pods(4))
    store.mark_delivered(e.id for e in store.claim_undelivered())
    racing = Batches(store)
    racing.racing["m2"] = pod.InstanceRunning(at=t(2))  # another replica makes the same flip
    emitter = MemoryEmitter()
    runner = Runner(racing, [emitter], policy=FAST, links=())
    results = runner.observe_many([(r, pod.InstanceRunning(at=t(2))) for r in pods(4)])
    assert [r.attempts for r in results] == [1, 1, 2, 1]
    assert [r.outcome for r in results] == [
        Outcome.COMMITTED,
        Outcome.COMMITTED,
        Outcome.UNCHANGED,
        Outcome.COMMITTED,
    ]
    assert racing.sizes == [4]  # the retry of m2 found nothing left to write
    assert sorted(emitter.ids()) == ["m0:3:0", "m1:3:0", "m3:3:0"]
    check_invariants(store, pods(4))


def test_a_conflict_recomputes_flips_against_the_state_read_in_the_winning_attempt(
    open_kind: Open,
) -> None:
    store = open_kind()
    booted(Runner(store, [], links=()), pods(3))
    racing = Batches(store)
    racing.racing["m1"] = pod.InstanceRunning(at=t(2))
    runner = Runner(racing, [MemoryEmitter()], policy=FAST, links=())
    results = runner.observe_many([(r, pod.InstanceFailed(at=t(3), exit_code=1)) for r in pods(3)])
    assert [r.version for r in results] == [3, 4, 3]
    assert (racing.sizes, racing.calls["commit"]) == ([3], 1)  # the batch, then m1 alone
    (event,) = results[1].transitions
    assert (event.source, event.target, event.id) == ("Running", "Failed", "m1:4:0")


def test_an_exhausted_budget_fails_that_object_with_its_fallback(open_kind: Open) -> None:
    store = open_kind()
    booted(Runner(store, [], links=()), pods(3))
    faulty = Batches(store)
    faulty.conflict["m0"] = 10
    emitter = MemoryEmitter()
    runner = Runner(
        faulty,
        [emitter],
        machines=with_fallback_pod(),  # a Pod whose Failed row declares a fallback
        policy=FAST,
        links=(),
        policies={"pod": RetryPolicy(attempts=3, backoff=0)},
    )
    results = runner.observe_many(
        [
            (pod_ref("m0"), pod.InstanceFailed(at=t(3), exit_code=1)),  # a Warning flip
            (pod_ref("m1"), pod.InstanceFailed(at=t(3), exit_code=1)),
            (pod_ref("m2"), pod.InstanceRunning(at=t(3))),
        ]
    )
    failed = results[0]
    assert (failed.outcome, failed.attempts, failed.version) == (Outcome.FAILED, 3, 2)
    assert isinstance(failed.error, Conflict)
    assert failed.transitions == ()
    (warning,) = failed.fallback
    assert (warning.reason, warning.type, warning.fallback) == (
        "FailedStatusUpdateFailed",
        EventType.WARNING,
        True,
    )
    assert [r.outcome for r in results[1:]] == [Outcome.COMMITTED] * 2
    assert (faulty.sizes, faulty.calls["commit"]) == ([3], 2)
    assert store.load(POD, pod_ref("m0")).version == 2  # type: ignore[union-attr]
    assert [e.id for e in emitter.events if not e.fallback] == ["m1:3:0", "m2:3:0"]
    check_invariants(store, pods(3))


def test_a_write_error_fails_that_object_at_once_and_a_normal_flip_emits_nothing(
    open_kind: Open,
) -> None:
    store = open_kind()
    booted(Runner(store, [], links=()), pods(2))
    faulty = Batches(store)
    faulty.error["m0"] = 1
    emitter = MemoryEmitter()
    results = Runner(faulty, [emitter], policy=FAST, links=()).observe_many(
        [(r, pod.InstanceRunning(at=t(3))) for r in pods(2)]
    )
    assert (results[0].outcome, results[0].attempts, results[0].fallback) == (Outcome.FAILED, 1, ())
    assert results[1].committed
    assert emitter.ids() == ["m1:3:0"]


def test_a_failed_batch_fails_every_object_and_writes_nothing(open_kind: Open) -> None:
    store = open_kind()
    booted(Runner(store, [], links=()), pods(3))
    before = [store.load(POD, r) for r in pods(3)]
    faulty = Batches(store)
    faulty.batch_error = StoreError("connection lost")
    emitter = MemoryEmitter()
    runner = Runner(faulty, [emitter], machines=with_fallback_pod(), policy=FAST, links=())
    results = runner.observe_many([(r, pod.InstanceFailed(at=t(3), exit_code=1)) for r in pods(3)])
    assert [r.outcome for r in results] == [Outcome.FAILED] * 3
    assert all(str(r.error) == "connection lost" for r in results)
    assert [e.reason for e in emitter.events] == ["FailedStatusUpdateFailed"] * 3
    assert [store.load(POD, r) for r in pods(3)] == before


# -- input ------------------------------------------------------------------------------------
def test_an_unknown_observation_is_refused_before_anything_is_written(open_kind: Open) -> None:
    store = open_kind()
    emitter = MemoryEmitter()
    runner = Runner(store, [emitter])
    with pytest.raises(UnknownObservation):
        runner.observe_many(
            [(pod_ref("a"), pod.CreateRequested(at=t(0))), (pod_ref("b"), nc.PodAbsent(at=t(0)))]
        )
    assert store.load(POD, pod_ref("a")) is None
    assert emitter.events == []


def test_an_observation_the_table_refuses_fails_that_item_only(open_kind: Open) -> None:
    store = open_kind()
    emitter = MemoryEmitter()
    runner = Runner(store, [emitter], links=())
    results = runner.observe_many(
        [
            (pod_ref("a"), pod.CreateRequested(at=t(0))),
            (pod_ref("b"), pod.ProvisionSucceeded(at=t(0), reserved=True, instance_id="i-1")),
        ]
    )
    assert results[0].committed
    assert results[1].outcome is Outcome.FAILED
    assert isinstance(results[1].error, InvalidTransition)
    assert results[1].fallback == ()
    assert store.load(POD, pod_ref("b")) is None
    assert emitter.ids() == ["a:1:0"]


def test_several_observations_of_one_object_apply_in_order(open_kind: Open) -> None:
    store = open_kind()
    runner = Runner(store, [MemoryEmitter()], links=())
    a, b = pod_ref("a"), pod_ref("b")
    results = runner.observe_many(
        [
            (a, pod.CreateRequested(at=t(0))),
            (b, pod.CreateRequested(at=t(0))),
            (a, pod.ProvisionSucceeded(at=t(1), reserved=True, instance_id="i-1")),
            (a, pod.InstanceRunning(at=t(2))),
        ]
    )
    assert [(r.ref.uid, r.version, r.status.state) for r in results] == [
        ("a", 1, pod.PROVISIONING),
        ("b", 1, pod.PROVISIONING),
        ("a", 2, pod.INITIALIZING),
        ("a", 3, pod.RUNNING),
    ]
    check_invariants(store, [a, b])


# -- after the commit ------------------------------------------------------------------------
def test_links_are_followed_after_the_commit_and_reported_per_item(open_kind: Open) -> None:
    store = open_kind()
    emitter = MemoryEmitter()
    runner = Runner(store, [emitter])
    results = runner.observe_many([(r, pod.CreateRequested(at=t(0))) for r in pods(3)])
    for r in results:
        (claim,) = r.linked
        assert (claim.ref.kind, claim.ref.uid, claim.version) == (
            "NodeClaim",
            f"{r.ref.uid}-claim",
            1,
        )
        assert claim.committed
    # every pod event precedes every claim event: the claims were written after the pods
    kinds = [e.ref.kind for e in emitter.events]
    assert kinds == ["Pod"] * 3 + ["NodeClaim"] * 3
    assert len(store.claim_undelivered()) == 0


def test_a_failing_emitter_leaves_the_batch_committed_and_its_events_queued(
    open_kind: Open,
) -> None:
    store = open_kind()
    flaky = FailingEmitter(2)
    sink = MemoryEmitter()
    runner = Runner(store, [flaky, sink], links=())
    results = runner.observe_many([(r, pod.CreateRequested(at=t(0))) for r in pods(4)])
    assert all(r.committed for r in results)
    assert sorted(e.id for e in store.claim_undelivered()) == ["m0:1:0", "m1:1:0"]
    assert runner.redeliver() == 2
    assert store.claim_undelivered() == []
    assert sorted(set(sink.ids())) == ["m0:1:0", "m1:1:0", "m2:1:0", "m3:1:0"]


def test_an_empty_batch_does_nothing(any_store: Store) -> None:
    assert Runner(any_store, []).observe_many([]) == []
