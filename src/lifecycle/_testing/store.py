"""The Store conformance check: what any store -- shipped or a host's own -- must do."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from .._core.errors import Conflict, IdentityMismatch
from .._core.observation import Observation
from .._core.refs import ObjectRef
from .._core.transition import Transition, stamp, store_epoch
from ..machines import NODECLAIM, POD, MachineRegistry, nodeclaim, pod
from ..runner import RetryPolicy, Runner
from ..stores.base import CommitItem, Store
from .checks import assert_journal_folds
from .doubles import FailingEmitter

_AT = datetime(2026, 1, 1, tzinfo=UTC)


def _ref(uid: str) -> ObjectRef:
    return ObjectRef("Pod", "conformance", f"pod-{uid}", uid)


def _write(
    store: Store, ref: ObjectRef, obs: Observation, expected: int | None = None
) -> tuple[int, tuple[Transition, ...]]:
    record = store.load(POD, ref)
    before = POD.initial(ref) if record is None else record.status
    version = 0 if record is None else record.version
    after = POD.apply(before, obs)
    transitions = stamp(POD.flips(before, after), ref, POD.name, version + 1, obs.at)
    cas = version if expected is None else expected
    return store.commit(POD, ref, cas, after, obs, transitions), transitions


def _require(ok: object, what: str) -> None:
    """An ``AssertionError`` naming the broken promise (kept under ``python -O``)."""
    if not ok:
        raise AssertionError(f"store conformance: {what}")


def _seen(store: Store, ref: ObjectRef) -> tuple[Any, ...]:
    record = store.load(POD, ref)
    return (record, store.journal(POD, ref))


def check_store(make_store: Callable[[], Store]) -> None:
    """Check a :class:`~lifecycle.stores.Store` against the protocol, on the shipped Pod
    machine: compare-and-set (a conflict names the stored version and writes nothing), the
    journal (round trip, contiguous, folds to the status -- if the store keeps one), the
    outbox (claimed in uid/version order, marked, redelivered under the same ids through a
    :class:`~lifecycle.Runner`), ``records``, the identity rule (a load, journal or commit of
    a uid stored for another kind, namespace, name or machine raises
    :class:`~lifecycle.IdentityMismatch` and writes nothing), and the optional
    ``commit_many`` (per-item CAS; an impostor refuses the batch) and ``compact`` (fold ==
    status after retention). ``make_store`` returns a fresh, empty
    store; each is closed afterwards. Raises ``AssertionError`` naming what is wrong.

    Args:
        make_store: makes a fresh, empty store of the kind under test.

    Raises:
        AssertionError: the store broke the protocol; the message says how.
    """
    store = make_store()
    try:
        _check_basics(store)
        _check_identity(store)
    finally:
        store.close()
    store = make_store()
    try:
        _check_runner(store)
        if hasattr(store, "commit_many"):
            _check_batch(store)
        if hasattr(store, "compact"):
            _check_retention(store)
    finally:
        store.close()


def _check_basics(store: Store) -> None:
    a, b = _ref("a"), _ref("b")
    _require(store.load(POD, a) is None, "an unknown object must load as None")
    _require(store.journal(POD, a) == [], "an unknown object has an empty journal")
    _require(store.claim_undelivered() == [], "a fresh store has an empty outbox")
    v1, t1 = _write(store, a, pod.CreateRequested(at=_AT))
    _require(v1 == 1, f"the first commit must return version 1, not {v1}")
    before = _seen(store, a)
    outbox = sorted(t.id for t in store.claim_undelivered())
    for expected in (0, 7):
        conflict: Conflict | None = None
        try:
            _write(store, a, pod.ConfigInvalid(at=_AT, error="x"), expected=expected)
        except Conflict as e:
            conflict = e
        if conflict is None:
            raise AssertionError(
                f"store conformance: a commit expecting version {expected} of v1 must conflict"
            )
        _require(
            (conflict.expected, conflict.actual) in ((expected, 1), (expected, None)),
            f"Conflict must name the expected ({expected}) and stored (1) versions: {conflict}",
        )
        _require(_seen(store, a) == before, "a conflicting commit must write nothing")
        _require(
            sorted(t.id for t in store.claim_undelivered()) == outbox,
            "a conflicting commit must queue no event",
        )
    v2, t2 = _write(store, a, pod.ProvisionSucceeded(at=_AT, reserved=True, instance_id="i"))
    _write(store, b, pod.CreateRequested(at=_AT))
    _require(v2 == 2, f"the second commit must return version 2, not {v2}")
    record = store.load(POD, a)
    _require(
        record is not None and (record.version, record.status.state) == (2, "Initializing"),
        f"load must return the last committed status and version: {record}",
    )
    journal = store.journal(POD, a)
    if journal:  # a store may keep no journal
        _require(
            [(e.version, e.transitions) for e in journal] == [(1, t1), (2, t2)],
            "the journal must hold each commit's version and transitions",
        )
        assert_journal_folds(POD, store, a)
    pending = [t.id for t in store.claim_undelivered()]
    _require(
        pending == ["a:1:0", "a:2:0", "b:1:0"],
        f"the outbox must hand out events in uid, version, n order: {pending}",
    )
    mine = [t for t in store.claim_undelivered() if t.ref.uid == "a"]
    _require(mine == [*t1, *t2], "outbox events must round-trip unchanged")
    store.mark_delivered(["a:1:0", "no-such-id"])
    left = [t.id for t in store.claim_undelivered()]
    _require(left == ["a:2:0", "b:1:0"], f"mark_delivered must remove exactly those: {left}")
    uids = sorted(r.ref.uid for r in store.records(POD))
    _require(uids == ["a", "b"], f"records must list the machine's objects: {uids}")


def _impostors(ref: ObjectRef) -> list[tuple[Any, ObjectRef, Observation]]:
    """Refs with ``ref``'s uid that name another object, each with an observation its
    machine accepts from the initial status."""
    claim = nodeclaim.ClaimCreated(at=_AT)
    create = pod.CreateRequested(at=_AT)
    return [
        (NODECLAIM, ObjectRef("NodeClaim", ref.namespace, ref.name, ref.uid), claim),
        (POD, ObjectRef(ref.kind, ref.namespace, "impostor", ref.uid), create),
        (POD, ObjectRef(ref.kind, "impostor", ref.name, ref.uid), create),
        (NODECLAIM, ref, claim),  # the same ref, read or written by another machine
    ]


def _check_identity(store: Store) -> None:
    a = _ref("a")  # the Pod _check_basics left at version 2
    before = (_seen(store, a), sorted(t.id for t in store.claim_undelivered()))
    for machine, ref, obs in _impostors(a):
        calls: list[tuple[str, Callable[[], object]]] = [
            ("load", partial(store.load, machine, ref)),
            ("journal", partial(store.journal, machine, ref)),
            ("commit", partial(_commit_as, store, machine, ref, obs, 2)),
            ("commit (as new)", partial(_commit_as, store, machine, ref, obs, 0)),
        ]
        for what, call in calls:
            _require_refused(call, f"a {what} of {ref} by machine {machine.name}")
        after = (_seen(store, a), sorted(t.id for t in store.claim_undelivered()))
        _require(after == before, f"a refused {ref} must write nothing")
    if hasattr(store, "commit_many"):
        machine, ref, obs = _impostors(a)[1]
        fresh = _ref("fresh")
        create = pod.CreateRequested(at=_AT)
        status = POD.apply(POD.initial(fresh), create)
        items = [
            CommitItem(POD, fresh, 0, status, create, ()),
            CommitItem(machine, ref, 2, machine.apply(machine.initial(ref), obs), obs, ()),
        ]
        _require_refused(partial(store.commit_many, items), "commit_many with an impostor")
        _require(store.load(POD, fresh) is None, "a refused batch must write none of its items")


def _require_refused(call: Callable[[], object], what: str) -> None:
    try:
        call()
    except IdentityMismatch:
        return
    raise AssertionError(
        f"store conformance: {what} must raise IdentityMismatch (a uid names one object)"
    )


def _commit_as(store: Store, machine: Any, ref: ObjectRef, obs: Observation, expected: int) -> int:
    status = machine.apply(machine.initial(ref), obs)
    return store.commit(machine, ref, expected, status, obs, ())


def _check_runner(store: Store) -> None:
    flaky = FailingEmitter(1)
    runner = Runner(
        store,
        [flaky],
        machines=MachineRegistry([POD]),
        links=(),
        policy=RetryPolicy(backoff=0.0),
    )
    ref = _ref("r")
    result = runner.observe(ref, pod.CreateRequested(at=_AT))
    _require(result.committed and result.version == 1, f"the runner must commit: {result}")
    epoch = store_epoch(store)  # a store with epochs stamps its own (ADR 0068, 0146)
    expected = [f"r:1:0@{epoch}" if epoch else "r:1:0"]
    _require([t.id for t in flaky.refused] == expected, "the emitter was offered the event")
    _require(runner.redeliver() == 1, "an event whose delivery failed must be redelivered")
    _require([t.id for t in flaky.events] == expected, "redelivery keeps the event's id")
    _require(runner.redeliver() == 0, "a delivered event is not delivered again")


def _check_batch(store: Any) -> None:
    refs = [_ref(f"m{i}") for i in range(3)]
    _write(store, refs[1], pod.CreateRequested(at=_AT))
    items = []
    for ref in refs:
        obs = pod.CreateRequested(at=_AT)
        after = POD.apply(POD.initial(ref), obs)
        flips = stamp(POD.flips(POD.initial(ref), after), ref, POD.name, 1, obs.at)
        items.append(CommitItem(POD, ref, 0, after, obs, flips))
    out = store.commit_many(items)
    _require(out[0] == 1 and out[2] == 1, f"commit_many must commit the others: {out}")
    _require(isinstance(out[1], Conflict), f"commit_many must report the stale item: {out}")
    if hasattr(store, "load_many"):
        versions = [r.version for r in store.load_many([(POD, r) for r in refs])]
        _require(versions == [1, 1, 1], f"load_many must read every object: {versions}")


def _check_retention(store: Any) -> None:
    ref = _ref("keep")
    _write(store, ref, pod.CreateRequested(at=_AT))
    _write(store, ref, pod.ProvisionSucceeded(at=_AT, reserved=True, instance_id="i"))
    for k in range(6):
        at = _AT + timedelta(seconds=k + 1)
        obs: Observation = pod.InstanceRunning(at=at) if k % 2 == 0 else pod.InstancePending(at=at)
        _write(store, ref, obs)
    if not store.journal(POD, ref):
        return  # no journal kept: nothing to retain
    store.compact(POD, keep=2, refs=[ref])
    kept = [e.version for e in store.journal(POD, ref)]
    _require(kept == [7, 8], f"compact(keep=2) must keep the last 2 entries: {kept}")
    assert_journal_folds(POD, store, ref)
    _write(store, ref, pod.InstanceFailed(at=_AT + timedelta(seconds=30), exit_code=1))
    assert_journal_folds(POD, store, ref)
