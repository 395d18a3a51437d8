"""One test per row of the NodeClaim table (domain doc §3), the claim's domain behaviours,
the Pod -> NodeClaim cascade through a Runner, and the NodePool ``placed`` projection.

``test_every_row_is_exercised`` fails if a row of ``nodeclaim.TABLE`` is reached by no case.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import attrs
import pytest

from lifecycle import EventType, MemoryEmitter, ObjectRef, Observation, Outcome, Runner, Store, Tick
from lifecycle.machines import nodeclaim, pod
from lifecycle.machines.nodeclaim import (
    BOUND,
    DEFAULT_GRACE_SECONDS,
    DELETED,
    MSG_GONE_NOW,
    MSG_ORPHAN,
    NEW,
    NODECLAIM,
    PROVISIONING,
    TERMINATED,
    TERMINATING,
    ClaimAdopted,
    ClaimCreated,
    ClaimDeletionRequested,
    NodeClaimStatus,
    PodAbsent,
    PodObserved,
    TeardownFailed,
    TeardownSucceeded,
    claim_name,
    placed,
)
from lifecycle.tables import Flip
from tests.conftest import pod_ref, t

N = EventType.NORMAL
AT = t(60)  # well past the 15 s grace window of a claim created at t(0)
EARLY = t(5)  # inside it
ORPHANED = "pod never appeared: orphan claim deleted"

# -- statuses, one per source state -----------------------------------------------------------
FRESH = NodeClaimStatus()
CREATED = NodeClaimStatus(pool="gpu", provider="modal", pod_uid="pod-a", created_at=t(0))
WAITING = attrs.evolve(CREATED, pod_absent_since=t(3))  # never observed, pod absent since t(3)
PROV = attrs.evolve(
    CREATED, state=PROVISIONING, reason=PROVISIONING, message="pod is Pending/Provisioning"
)
BOUND_ = attrs.evolve(
    CREATED,
    state=BOUND,
    reason=BOUND,
    message="pod Initializing on its instance",
    instance_id="i-1",
)
TERMINATING_ = attrs.evolve(
    BOUND_, state=TERMINATING, reason=TERMINATING, message="pod is being deleted"
)
TERMINATED_ = attrs.evolve(
    BOUND_, state=TERMINATED, reason=TERMINATED, message="pod is Failed: instance released"
)
GONE = attrs.evolve(BOUND_, state=DELETED, reason=DELETED, message=MSG_GONE_NOW)

LIVE = {
    "new": CREATED,
    "provisioning": PROV,
    "bound": BOUND_,
    "terminating": TERMINATING_,
    "terminated": TERMINATED_,
}
PHASED = {k: v for k, v in LIVE.items() if k != "new"}


def seen(
    phase: str,
    reason: str,
    *,
    at: datetime = AT,
    uid: str = "pod-a",
    deleting: bool = False,
    instance_id: str = "i-1",
) -> PodObserved:
    return PodObserved(
        at=at,
        pod_uid=uid,
        phase=phase,
        reason=reason,
        deleting=deleting,
        instance_id=instance_id,
        pool="gpu",
        provider="modal",
    )


SAMPLES: dict[type[Observation], Observation] = {
    ClaimCreated: ClaimCreated(at=AT),
    ClaimAdopted: ClaimAdopted(at=AT, phase=BOUND),
    PodObserved: seen("Running", "Running"),
    PodAbsent: PodAbsent(at=AT),
    Tick: Tick(at=AT),
    ClaimDeletionRequested: ClaimDeletionRequested(at=AT),
    TeardownSucceeded: TeardownSucceeded(at=AT),
    TeardownFailed: TeardownFailed(at=AT, error="throttled"),
}


@dataclass(frozen=True)
class Case:
    """``after is None``: an ignore row. ``flips``: whether one exclusive-state flip
    (before.state -> after.state, Normal) is expected."""

    id: str
    before: NodeClaimStatus
    obs: Observation
    after: NodeClaimStatus | None
    flips: bool = False


CASES: list[Case] = []


def case(
    id: str,
    before: NodeClaimStatus,
    obs: Observation,
    after: NodeClaimStatus | None,
    flips: bool = False,
) -> None:
    CASES.append(Case(id, before, obs, after, flips))


def unchanged(id: str, before: NodeClaimStatus, obs: Observation) -> None:
    case(id, before, obs, None)


def entered(before: NodeClaimStatus, state: str, message: str, **changes: Any) -> NodeClaimStatus:
    return attrs.evolve(before, state=state, reason=state, message=message, **changes)


# -- claim creation and adoption --------------------------------------------------------------
case(
    "created",
    FRESH,
    ClaimCreated(at=AT, pool="gpu", provider="aws", pod_uid="pod-a", grace_seconds=20.0),
    NodeClaimStatus(pool="gpu", provider="aws", pod_uid="pod-a", created_at=AT, grace_seconds=20),
)
for name, before in PHASED.items():
    unchanged(f"created/{name}", before, ClaimCreated(at=AT))
    unchanged(f"adopted/{name}", before, ClaimAdopted(at=AT, phase=PROVISIONING))

for phase, state in (
    (PROVISIONING, PROVISIONING),
    (BOUND, BOUND),
    ("Initializing", BOUND),  # legacy
    (TERMINATING, TERMINATING),
    (TERMINATED, TERMINATED),
):
    case(
        f"adopted/{phase or 'unset'}",
        FRESH,
        ClaimAdopted(
            at=AT,
            phase=phase,
            pool="gpu",
            provider="aws",
            pod_uid="pod-a",
            instance_id="i-1",
            created_at=t(-3600),
        ),
        NodeClaimStatus(
            state=state,
            reason=state,
            message=f"adopted in phase {phase}",
            pool="gpu",
            provider="aws",
            pod_uid="pod-a",
            instance_id="i-1",
            created_at=t(-3600),
        ),
        True,
    )
case(
    "adopted/no-phase-yet",
    FRESH,
    ClaimAdopted(at=AT, phase="", pool="gpu", provider="aws", pod_uid="pod-a"),
    NodeClaimStatus(pool="gpu", provider="aws", pod_uid="pod-a", created_at=AT),
)

# -- the Pod, as committed --------------------------------------------------------------------
case(
    "other-pod/new-within-grace-waits",
    CREATED,
    seen("Pending", "Provisioning", at=EARLY, uid="pod-b"),
    attrs.evolve(CREATED, pod_absent_since=EARLY),
)
case(
    "other-pod/new-after-grace",
    CREATED,
    seen("Pending", "Provisioning", uid="pod-b"),
    entered(CREATED, DELETED, MSG_ORPHAN),
    True,
)
for name, before in PHASED.items():
    case(
        f"other-pod/{name}-no-grace",
        before,
        seen("Running", "Running", at=EARLY, uid="pod-b"),
        entered(before, DELETED, MSG_GONE_NOW),
        True,
    )

for name, before, phase in (
    ("never-seen", FRESH, "Failed"),
    ("new", CREATED, "Failed"),
    ("provisioning", PROV, "Failed"),
    ("bound", BOUND_, "Failed"),
    ("terminating", TERMINATING_, "Succeeded"),
):
    case(
        f"pod-finished/{name}",
        before,
        seen(phase, "Terminated"),
        entered(
            before,
            TERMINATED,
            f"pod is {phase}: instance released",
            pod_uid="pod-a",
            instance_id="i-1",
            pool=before.pool or "gpu",
            provider=before.provider or "modal",
            created_at=before.created_at or AT,
        ),
        True,
    )
unchanged("pod-seen/terminated-holds", TERMINATED_, seen("Running", "Running"))

for name, before in (("new", CREATED), ("provisioning", PROV), ("bound", BOUND_)):
    case(
        f"pod-deleting/{name}",
        before,
        seen("Pending", "Initializing", deleting=True),
        entered(before, TERMINATING, "pod is being deleted", instance_id="i-1"),
        True,
    )
case(
    "pod-seen/terminating-records-instance",
    attrs.evolve(TERMINATING_, instance_id=""),
    seen("Running", "Running", deleting=True, instance_id="i-2"),
    attrs.evolve(TERMINATING_, instance_id="i-2"),
)
case(
    "pod-seen/terminating-holds",
    TERMINATING_,
    seen("Running", "Running", deleting=True, instance_id="i-2"),
    TERMINATING_,
)
for reason in ("Initializing", "Provisioning", "ConfigError", "ProviderFailed", ""):
    case(f"pod-seen/bound-holds-{reason or 'no-reason'}", BOUND_, seen("Pending", reason), BOUND_)
case(
    "pod-seen/bound-clears-absence",
    attrs.evolve(BOUND_, pod_absent_since=t(50)),
    seen("Running", "Running"),
    BOUND_,
)

for name, before in (("new", CREATED), ("provisioning", PROV)):
    case(
        f"pod-exists/{name}-booting",
        before,
        seen("Pending", "Initializing"),
        entered(before, BOUND, "pod Initializing on its instance", instance_id="i-1"),
        True,
    )
    case(
        f"pod-exists/{name}-running",
        before,
        seen("Running", "Running"),
        entered(before, BOUND, "pod Running on its instance", instance_id="i-1"),
        True,
    )
case(
    "pod-seen/never-seen-provisioning",
    FRESH,
    seen("Pending", "Provisioning", instance_id=""),
    NodeClaimStatus(
        state=PROVISIONING,
        reason=PROVISIONING,
        message="pod is Pending/Provisioning",
        pod_uid="pod-a",
        pool="gpu",
        provider="modal",
        created_at=AT,
    ),
    True,
)
case(
    "pod-seen/waiting-claim-sees-its-pod",
    WAITING,
    seen("Pending", "Provisioning", instance_id=""),
    entered(CREATED, PROVISIONING, "pod is Pending/Provisioning"),
    True,
)
case(
    "pod-seen/provisioning-config-error-message-only",
    PROV,
    seen("Pending", "ConfigError", instance_id=""),
    attrs.evolve(PROV, message="pod is Pending/ConfigError"),
)

# -- the Pod is gone --------------------------------------------------------------------------
for name, before in PHASED.items():
    case(
        f"pod-absent/{name}-no-grace",
        before,
        PodAbsent(at=EARLY),
        entered(before, DELETED, MSG_GONE_NOW),
        True,
    )
case(
    "pod-absent/new-within-grace",
    CREATED,
    PodAbsent(at=EARLY),
    attrs.evolve(CREATED, pod_absent_since=EARLY),
)
case(
    "pod-absent/new-within-grace-keeps-first-absence",
    WAITING,
    PodAbsent(at=t(10)),
    WAITING,
)
case(
    "pod-absent/new-after-grace",
    CREATED,
    PodAbsent(at=t(DEFAULT_GRACE_SECONDS)),
    entered(CREATED, DELETED, ORPHANED),
    True,
)
case(
    "tick/grace-expired",
    WAITING,
    Tick(at=t(DEFAULT_GRACE_SECONDS)),
    entered(WAITING, DELETED, ORPHANED),
    True,
)
unchanged("tick/within-grace", WAITING, Tick(at=t(14.999)))
unchanged("tick/never-seen-no-timer", FRESH, Tick(at=AT))
unchanged("tick/new-not-absent", CREATED, Tick(at=AT))
for name, before in PHASED.items():
    unchanged(f"tick/{name}", before, Tick(at=AT))

# -- claim deletion: the finalizer tears the instance down -------------------------------------
for name, before in {"never-seen": FRESH, **LIVE}.items():
    case(
        f"deletion-requested/{name}",
        before,
        ClaimDeletionRequested(at=AT),
        attrs.evolve(before, deleting=True, created_at=before.created_at or AT),
    )
    case(
        f"teardown-succeeded/{name}",
        before,
        TeardownSucceeded(at=AT),
        entered(before, DELETED, "instance terminated, finalizer released"),
        True,
    )
    case(
        f"teardown-failed/{name}",
        before,
        TeardownFailed(at=AT, error="RequestLimitExceeded"),
        attrs.evolve(before, message="teardown failed, retrying: RequestLimitExceeded"),
    )

# -- a claim being deleted only tears down: it reads its pod no more -----------------------------
# Upstream's reconcile runs teardown alone for a deleting claim; Deleted comes only from a
# confirmed teardown, so the finalizer is never reported released while Terminate fails.
DELETING = {
    name: attrs.evolve(before, deleting=True)
    for name, before in {"never-seen": FRESH, **LIVE}.items()
}
for name, before in DELETING.items():
    for label, obs in (
        ("pod-finished", seen("Failed", "Terminated")),
        ("pod-deleted", seen("Succeeded", "Terminated", deleting=True)),
        ("pod-deleting", seen("Running", "Running", deleting=True)),
        ("pod-booting", seen("Pending", "Initializing")),
        ("pod-provisioning", seen("Pending", "Provisioning", instance_id="")),
        ("other-pod", seen("Running", "Running", uid="pod-b")),
        ("pod-absent", PodAbsent(at=AT)),
        ("pod-absent-early", PodAbsent(at=EARLY)),
    ):
        unchanged(f"deleting/{name}/{label}", before, obs)
    case(
        f"deleting/{name}/teardown-failed",
        before,
        TeardownFailed(at=AT, error="RequestLimitExceeded"),
        attrs.evolve(before, message="teardown failed, retrying: RequestLimitExceeded"),
    )
    case(
        f"deleting/{name}/teardown-succeeded",
        before,
        TeardownSucceeded(at=AT),
        entered(before, DELETED, "instance terminated, finalizer released"),
        True,
    )
unchanged("deleting/grace-expired-tick", attrs.evolve(WAITING, deleting=True), Tick(at=AT))

for obs_type, sample in SAMPLES.items():
    unchanged(f"deleted/{obs_type.__name__}", GONE, sample)


# -- the row tests ----------------------------------------------------------------------------
@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_row(c: Case) -> None:
    after = NODECLAIM.apply(c.before, c.obs)
    flips = NODECLAIM.flips(c.before, after)
    if c.after is None:
        assert NODECLAIM.select(c.before, c.obs).ignore
        assert after is c.before
        assert flips == ()
        return
    assert after == c.after
    assert (after.state, after.reason, after.message) == (
        c.after.state,
        c.after.reason,
        c.after.message,
    )
    if c.flips:
        assert [(f.source, f.target, f.reason, f.type, f.message, f.condition) for f in flips] == [
            (c.before.state, after.state, after.state, N, after.message, "")
        ]
    else:
        assert after.state == c.before.state
        assert flips == ()


def test_every_row_is_exercised() -> None:
    """Fails when a row of the NodeClaim table is reached by no case above."""
    rows = nodeclaim.TABLE.rows
    hit = {id(NODECLAIM.select(c.before, c.obs)) for c in CASES}
    missing = [
        f"{r.sources} x {r.observation.__name__} (guard={r.guard_name}, ignore={r.ignore})"
        for r in rows
        if id(r) not in hit
    ]
    assert not missing, f"NodeClaim rows with no test: {missing}"


def test_every_state_and_observation_is_exercised() -> None:
    assert {c.before.state for c in CASES} == set(nodeclaim.TABLE.states)
    assert {type(c.obs) for c in CASES} == set(nodeclaim.OBSERVATIONS)


def test_every_pair_has_a_row() -> None:
    """The claim table names every (phase, observation) pair: nothing falls through."""
    for state in nodeclaim.TABLE.states:
        for obs_type in nodeclaim.OBSERVATIONS:
            assert nodeclaim.TABLE.accepts(state, obs_type), (state, obs_type.__name__)


# -- domain behaviours ------------------------------------------------------------------------
def fold(
    *observations: Observation, start: NodeClaimStatus = FRESH
) -> tuple[NodeClaimStatus, list[Flip]]:
    status = start
    flips: list[Flip] = []
    for obs in observations:
        after = NODECLAIM.apply(status, obs)
        flips.extend(NODECLAIM.flips(status, after))
        status = after
    return status, flips


def test_claim_lifecycle_provisioning_bound_terminating_terminated() -> None:
    status, flips = fold(
        ClaimCreated(at=t(0), pool="gpu", provider="aws", pod_uid="pod-a"),
        seen("Pending", "Provisioning", at=t(1), instance_id=""),
        seen("Pending", "Initializing", at=t(3)),  # booting counts as existence
        seen("Running", "Running", at=t(20)),
        seen("Running", "Running", at=t(30), deleting=True),
        seen("Succeeded", "Terminated", at=t(35), deleting=True),
    )
    assert [(f.source, f.target, f.type) for f in flips] == [
        ("", PROVISIONING, N),
        (PROVISIONING, BOUND, N),
        (BOUND, TERMINATING, N),
        (TERMINATING, TERMINATED, N),
    ]
    assert (status.state, status.instance_id, status.pool) == (TERMINATED, "i-1", "gpu")


@pytest.mark.parametrize(
    ("phase", "reason"),
    [
        ("Pending", "Initializing"),
        ("Pending", "Provisioning"),
        ("Pending", "ConfigError"),
        ("Pending", "ProviderFailed"),
        ("Pending", ""),
        ("Running", "Running"),
    ],
)
def test_bound_is_never_downgraded_by_a_flapping_pod(phase: str, reason: str) -> None:
    bound, _ = fold(seen("Pending", "Initializing", at=t(1)))
    assert bound.state == BOUND
    after = NODECLAIM.apply(bound, seen(phase, reason, at=t(30)))
    assert after.state == BOUND
    assert NODECLAIM.flips(bound, after) == ()


def test_a_pod_with_any_phase_set_vanishing_deletes_the_claim_at_once() -> None:
    provisioning, _ = fold(
        ClaimCreated(at=t(0)), seen("Pending", "Provisioning", at=t(1), instance_id="")
    )
    gone = NODECLAIM.apply(provisioning, PodAbsent(at=t(2)))  # 2 s old: no grace anyway
    assert (gone.state, gone.message) == (DELETED, MSG_GONE_NOW)
    assert NODECLAIM.is_terminal(gone)


def test_grace_window_applies_only_to_a_never_observed_claim() -> None:
    claim, _ = fold(ClaimCreated(at=t(0), grace_seconds=15.0))
    waiting = NODECLAIM.apply(claim, PodAbsent(at=t(4)))
    assert (waiting.state, waiting.pod_absent_since) == (NEW, t(4))
    assert NODECLAIM.flips(claim, waiting) == ()
    assert NODECLAIM.apply(waiting, Tick(at=t(14))) is waiting
    assert NODECLAIM.apply(waiting, PodAbsent(at=t(14))).state == NEW
    assert NODECLAIM.apply(waiting, Tick(at=t(15))).state == DELETED
    assert NODECLAIM.apply(waiting, PodAbsent(at=t(16))).state == DELETED
    # the pod turning up inside the window ends the wait
    found = NODECLAIM.apply(waiting, seen("Pending", "Provisioning", at=t(10)))
    assert (found.state, found.pod_absent_since) == (PROVISIONING, None)
    assert NODECLAIM.apply(found, Tick(at=t(60))) is found


def test_grace_window_is_the_claims_own() -> None:
    claim, _ = fold(ClaimCreated(at=t(0), grace_seconds=30.0), PodAbsent(at=t(1)))
    assert NODECLAIM.apply(claim, Tick(at=t(20))).state == NEW
    assert NODECLAIM.apply(claim, Tick(at=t(30))).state == DELETED


def test_uid_mismatch_is_absent() -> None:
    bound, _ = fold(seen("Running", "Running", at=t(1)))
    assert bound.pod_uid == "pod-a"
    # a new pod reusing the name: the claim's own pod is gone
    gone = NODECLAIM.apply(bound, seen("Running", "Running", at=t(2), uid="pod-b"))
    assert (gone.state, gone.message) == (DELETED, MSG_GONE_NOW)


def test_legacy_initializing_claim_is_bound_and_torn_down_when_its_pod_vanishes() -> None:
    adopted, flips = fold(ClaimAdopted(at=t(0), phase="Initializing", pod_uid="pod-a"))
    assert adopted.state == BOUND
    assert [(f.source, f.target) for f in flips] == [("", BOUND)]
    # read as Bound: a pod still booting does not downgrade it (upstream would)
    assert NODECLAIM.apply(adopted, seen("Pending", "Provisioning", at=t(5))).state == BOUND
    assert NODECLAIM.apply(adopted, PodAbsent(at=t(5))).state == DELETED


def test_legacy_initializing_claim_loaded_from_storage_is_bound() -> None:
    stored = {"state": "Initializing", "pod_uid": "pod-a", "provider": "modal", "pool": "gpu"}
    status = NODECLAIM.load_status(stored)
    assert status.state == BOUND
    assert NODECLAIM.apply(status, PodAbsent(at=t(1))).state == DELETED
    assert NODECLAIM.apply(status, seen("Pending", "Provisioning", at=t(1))).state == BOUND


def test_instance_id_is_recorded_once() -> None:
    status, _ = fold(
        seen("Pending", "Provisioning", at=t(1), instance_id=""),
        seen("Pending", "Initializing", at=t(2), instance_id="i-1"),
        seen("Running", "Running", at=t(3), instance_id="i-2"),
    )
    assert status.instance_id == "i-1"


def test_claim_name() -> None:
    assert claim_name("ml", "trainer-0") == "ml-trainer-0"
    exactly = "n" * (253 - len("ml-"))
    assert claim_name("ml", exactly) == f"ml-{exactly}"
    assert len(claim_name("ml", exactly)) == 253
    long = "x" * 300
    digest = hashlib.sha256(f"ml/{long}".encode()).hexdigest()[:10]
    name = claim_name("ml", long)
    assert name == f"ml-{long}"[:242] + "-" + digest
    assert len(name) == 253
    # the hash tells apart names sharing their first 242 characters
    assert claim_name("ml", long + "a") != claim_name("ml", long + "b")


def test_a_claim_being_deleted_only_tears_down_until_teardown_is_confirmed() -> None:
    """While Terminate keeps failing, the claim neither follows its pod to Terminated ("instance
    released") nor to Deleted: the finalizer is held, and every failure is still recorded."""
    status, flips = fold(
        ClaimCreated(at=t(0), pool="gpu", provider="aws", pod_uid="pod-a"),
        seen("Pending", "Initializing", at=t(3)),
        ClaimDeletionRequested(at=t(10)),
        TeardownFailed(at=t(11), error="RequestLimitExceeded"),
        seen("Failed", "Terminated", at=t(12)),
        PodAbsent(at=t(13)),
        Tick(at=t(14)),
    )
    assert (status.state, status.deleting) == (BOUND, True)
    assert status.message == "teardown failed, retrying: RequestLimitExceeded"
    later = NODECLAIM.apply(status, TeardownFailed(at=t(20), error="Unavailable"))
    assert later.message == "teardown failed, retrying: Unavailable"
    assert NODECLAIM.flips(status, later) == ()
    done, more = fold(TeardownSucceeded(at=t(30)), start=later)
    assert (done.state, done.message) == (DELETED, "instance terminated, finalizer released")
    assert [(f.source, f.target) for f in flips + more] == [("", BOUND), (BOUND, DELETED)]


# -- the Pod -> NodeClaim cascade through a Runner ----------------------------------------------
def claim_of(ref: ObjectRef) -> ObjectRef:
    return ObjectRef("NodeClaim", "", claim_name(ref.namespace, ref.name), f"{ref.uid}-claim")


def test_cascade_drives_the_claim_from_committed_pod_statuses(
    runner: Runner, store: Store, emitter: MemoryEmitter
) -> None:
    ref = pod_ref()
    claim = claim_of(ref)

    r = runner.observe(ref, pod.CreateRequested(at=t(0), pool="gpu", provider="modal"))
    assert r.committed
    (c,) = r.linked
    assert (c.ref, c.outcome, c.status.state) == (claim, Outcome.COMMITTED, PROVISIONING)

    r = runner.observe(ref, pod.ProvisionSucceeded(at=t(2), reserved=True, instance_id="sb-1"))
    (c,) = r.linked
    assert (c.status.state, c.status.instance_id) == (BOUND, "sb-1")  # booting counts

    r = runner.observe(ref, pod.InstanceRunning(at=t(15), instance_id="sb-1"))
    assert r.status.state == pod.RUNNING
    (c,) = r.linked
    assert c.outcome is Outcome.UNCHANGED  # Bound holds

    r = runner.observe(ref, pod.InstanceAbsent(at=t(30)))
    (c,) = r.linked
    assert c.status.state == TERMINATED
    assert [t.reason for t in r.all_transitions()] == [pod.TERMINATED, TERMINATED]

    emitter.assert_reasons(ref.uid, ["Provisioning", "Initializing", "Running", "Terminated"])
    emitter.assert_reasons(claim.uid, ["Provisioning", "Bound", "Terminated"])
    stored = store.load(NODECLAIM, claim)
    assert stored is not None
    assert (stored.status.state, stored.version) == (TERMINATED, 3)
    assert [e.version for e in store.journal(NODECLAIM, claim)] == [1, 2, 3]


def test_cascade_of_an_unreserved_pod_and_its_deletion(
    runner: Runner, store: Store, emitter: MemoryEmitter
) -> None:
    ref = pod_ref("sampler", "pod-u")
    claim = claim_of(ref)
    runner.observe(ref, pod.CreateRequested(at=t(0)))
    r = runner.observe(ref, pod.ProvisionSucceeded(at=t(1), reserved=False, instance_id="sb-9"))
    assert r.status.state == pod.PROVISIONING
    (c,) = r.linked  # the pod gained an instance id: the claim records it, still Provisioning
    assert (c.status.state, c.status.instance_id) == (PROVISIONING, "sb-9")
    runner.observe(ref, pod.InstanceRunning(at=t(15)))
    r = runner.observe(ref, pod.DeletionRequested(at=t(20)))
    assert r.linked[0].status.state == TERMINATING
    r = runner.observe(ref, pod.TerminateSucceeded(at=t(21)))
    assert (r.status.phase, r.linked[0].status.state) == ("Succeeded", TERMINATED)
    emitter.assert_reasons(claim.uid, ["Provisioning", "Bound", "Terminating", "Terminated"])


def test_cascade_to_a_claim_being_deleted_changes_nothing(
    runner: Runner, store: Store, emitter: MemoryEmitter
) -> None:
    ref = pod_ref("doomed", "pod-d")
    claim = claim_of(ref)
    runner.observe(ref, pod.CreateRequested(at=t(0)))
    runner.observe(ref, pod.ProvisionSucceeded(at=t(1), reserved=True, instance_id="i-d"))
    assert runner.observe(claim, ClaimDeletionRequested(at=t(5))).committed
    failed = runner.observe(claim, TeardownFailed(at=t(6), error="RequestLimitExceeded"))
    assert (failed.status.state, failed.transitions) == (BOUND, ())
    r = runner.observe(ref, pod.InstanceAbsent(at=t(15)))  # the pod follows its instance
    assert r.status.state == pod.TERMINATED
    (c,) = r.linked
    assert (c.outcome, c.status.state) == (Outcome.UNCHANGED, BOUND)
    assert runner.observe(claim, PodAbsent(at=t(16))).outcome is Outcome.UNCHANGED
    done = runner.observe(claim, TeardownSucceeded(at=t(20)))
    assert done.status.state == DELETED
    emitter.assert_reasons(claim.uid, ["Provisioning", "Bound", "Deleted"])
    stored = store.load(NODECLAIM, claim)
    assert stored is not None
    assert stored.status.state == DELETED


def test_unchanged_pod_feeds_nothing_to_its_claim(runner: Runner, emitter: MemoryEmitter) -> None:
    ref = pod_ref()
    runner.observe(ref, pod.CreateRequested(at=t(0)))
    r = runner.observe(ref, pod.InstanceUnknown(at=t(5), error="List failed"))
    assert (r.outcome, r.linked) == (Outcome.UNCHANGED, ())
    r = runner.observe(ref, pod.ProvisionErrored(at=t(6), error="timeout"))
    assert r.committed  # the message changed ...
    assert r.linked == ()  # ... but nothing the claim reads did
    assert [t.reason for t in emitter.events] == ["Provisioning", "Provisioning"]


# -- the NodePool placed projection -----------------------------------------------------------
def test_placed_counts_bound_claims_per_provider(runner: Runner, store: Store) -> None:
    assert placed(store, "gpu") == {}
    pods = {
        "a": ("gpu", "modal", True),  # Running
        "b": ("gpu", "modal", False),  # booting (Initializing): counts
        "c": ("gpu", "aws", True),
        "d": ("cpu", "aws", True),  # another pool
    }
    for name, (pool, provider, up) in pods.items():
        ref = pod_ref(name, f"pod-{name}")
        runner.observe(ref, pod.CreateRequested(at=t(0), pool=pool, provider=provider))
        runner.observe(ref, pod.ProvisionSucceeded(at=t(1), reserved=True, instance_id=name))
        if up:
            runner.observe(ref, pod.InstanceRunning(at=t(15)))
    held = pod_ref("e", "pod-e")  # held at Provisioning: not placed
    runner.observe(held, pod.CreateRequested(at=t(0), pool="gpu", provider="modal"))
    runner.observe(held, pod.ProvisionSucceeded(at=t(1), reserved=False, instance_id="e"))

    assert placed(store, "gpu") == {"modal": 2, "aws": 1}
    assert placed(store, "cpu") == {"aws": 1}
    assert placed(store) == {"modal": 2, "aws": 2}
    assert placed(store, "none") == {}

    for name in ("a", "b", "c"):
        runner.observe(pod_ref(name, f"pod-{name}"), pod.InstanceAbsent(at=t(30)))
    assert placed(store, "gpu") == {}


def test_placed_reads_a_stored_legacy_claim_as_bound(store: Store) -> None:
    ref = ObjectRef("NodeClaim", "", "ml-old", "old-claim")
    legacy = NODECLAIM.load_status(
        {"state": "Initializing", "pool": "gpu", "provider": "aws", "pod_uid": "old"}
    )
    store.commit(NODECLAIM, ref, 0, legacy, ClaimAdopted(at=t(0), phase="Initializing"), ())
    assert placed(store, "gpu") == {"aws": 1}
