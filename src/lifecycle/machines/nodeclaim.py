"""The NodeClaim lifecycle: the claim a virtual node holds for each placed pod.

Behaviour follows ``docs/upstream/pod-nodeclaim.md`` ("NodeClaim": the controller as it
stands today). The claim reads the Pod only, never the provider: its observations are
committed Pod statuses (:class:`PodObserved`, wired by :mod:`lifecycle.links`) and the Pod's
absence. Recommended and built here: a legacy ``Initializing`` phase is read as ``Bound``.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, Protocol

import attrs

from .._core.errors import preview
from .._core.kubernetes_shape import NoStatusBody
from .._core.machine import Machine, evolver
from .._core.observation import Observation, Tick
from .._core.refs import EventType, ObjectRef
from .._core.table import SAME, Guard, Row, Table, ignore
from ._timers import EARLIEST, expiry, ticked

NEW = ""
PROVISIONING = "Provisioning"
BOUND = "Bound"
TERMINATING = "Terminating"
TERMINATED = "Terminated"
DELETED = "Deleted"
#: A phase written before Nebula #38; read as Bound.
LEGACY_INITIALIZING = "Initializing"

PHASES = (NEW, PROVISIONING, BOUND, TERMINATING, TERMINATED)
DEFAULT_GRACE_SECONDS = 15.0

#: The Pod reason that counts as existence for a booting pod (a contract with the Pod machine).
POD_REASON_INITIALIZING = "Initializing"


def normalize_phase(phase: str) -> str:
    """Read a stored phase: the legacy ``Initializing`` is ``Bound``.

    Args:
        phase: a phase as stored, possibly by a controller older than the ``Bound`` rename.

    Returns:
        The phase to act on: ``Bound`` for the legacy ``Initializing``, else ``phase`` itself.
    """
    return BOUND if phase == LEGACY_INITIALIZING else phase


def claim_name(namespace: str, name: str) -> str:
    """``<ns>-<name>``; over 253 characters: the first 242, ``-``, 10 hex of sha256(ns/name).

    Args:
        namespace: the Pod's namespace.
        name: the Pod's name.

    Returns:
        The claim's name, at most 253 characters (the Kubernetes name limit); the hash keeps two
        long names that share a prefix apart.
    """
    full = f"{namespace}-{name}"
    if len(full) <= 253:
        return full
    digest = hashlib.sha256(f"{namespace}/{name}".encode()).hexdigest()[:10]
    return f"{full[:242]}-{digest}"


@attrs.frozen(slots=True)
class NodeClaimStatus:
    """``state`` is the claim phase (plus ``Deleted`` once the claim object is gone).

    Attributes:
        state: the claim phase (``Provisioning``, ``Bound`` ...), the machine's state.
        reason: why it is in that phase, as written to the claim.
        message: the claim's message for a reader.
        pod_uid: the UID of the Pod the claim was made for: a Pod of the same name with another
            UID is a new Pod, so this one counts as absent.
        instance_id: the provider's instance id, once the Pod reported one.
        pool: the pool the claim holds capacity in (what :func:`placed` counts by).
        provider: the provider the instance runs on.
        created_at: when the claim was created; its grace window counts from here.
        pod_absent_since: when the Pod was first seen missing; ``None`` while it exists.
        grace_seconds: how long a claim whose Pod never appeared lives before it is deleted as an
            orphan: a just-created Pod may not be visible yet.
        deleting: the claim got a deletionTimestamp: only teardown runs from here.
    """

    state: str = NEW
    reason: str = ""
    message: str = ""
    pod_uid: str = ""
    instance_id: str = ""
    pool: str = ""
    provider: str = ""
    created_at: datetime | None = None
    pod_absent_since: datetime | None = None
    grace_seconds: float = DEFAULT_GRACE_SECONDS
    deleting: bool = False


_evolve = evolver(NodeClaimStatus)


# -- observations ---------------------------------------------------------------------------
@attrs.frozen(slots=True, kw_only=True)
class ClaimCreated(Observation):
    """The claim object was created (its age for the grace window counts from ``at``).

    Attributes:
        pool: the pool the claim holds capacity in.
        provider: the provider its instance runs on.
        pod_uid: the UID of the Pod it was made for.
        grace_seconds: the orphan grace window, not negative (see
            :attr:`NodeClaimStatus.grace_seconds`).
    """

    pool: str = "default"
    provider: str = "fake"
    pod_uid: str = ""
    grace_seconds: float = DEFAULT_GRACE_SECONDS

    def __attrs_post_init__(self) -> None:
        if self.grace_seconds < 0:
            raise ValueError(f"grace_seconds must not be negative, got {self.grace_seconds}")


def _phase(_: object, attribute: attrs.Attribute[str], value: str) -> None:
    if value not in (*PHASES, LEGACY_INITIALIZING):
        raise ValueError(f"{attribute.name} {preview(value)} is not a NodeClaim phase")


@attrs.frozen(slots=True, kw_only=True)
class ClaimAdopted(Observation):
    """An existing claim read back after a restart, in whatever phase it was stored.

    Attributes:
        phase: the phase it was stored in (a legacy ``Initializing`` reads as ``Bound``).
        pool: the pool it holds capacity in.
        provider: the provider its instance runs on.
        pod_uid: the UID of the Pod it was made for.
        instance_id: the provider's instance id, when one was stored.
        created_at: when the claim was created, so the grace window survives the restart.
    """

    phase: str = attrs.field(validator=_phase)
    pool: str = "default"
    provider: str = "fake"
    pod_uid: str = ""
    instance_id: str = ""
    created_at: datetime | None = None


@attrs.frozen(slots=True, kw_only=True)
class PodObserved(Observation):
    """The claim's Pod as committed: its UID, phase, reason and whether it is being deleted.

    Attributes:
        pod_uid: the Pod's UID; another than the claim's means a new Pod under the same name.
        phase: the Pod phase (``Pending``, ``Running``, ``Failed`` ...).
        reason: the Pod reason; ``Initializing`` counts as existence for a booting Pod.
        deleting: the Pod has a deletionTimestamp.
        instance_id: the provider's instance id, when the Pod has one.
        pool: the Pod's pool.
        provider: the Pod's provider.
    """

    pod_uid: str
    phase: str
    reason: str
    deleting: bool = False
    instance_id: str = ""
    pool: str = ""
    provider: str = ""


@attrs.frozen(slots=True, kw_only=True)
class PodAbsent(Observation):
    """The Pod named by the claim's PodRef was not found."""


@attrs.frozen(slots=True, kw_only=True)
class ClaimDeletionRequested(Observation):
    """The claim got a deletionTimestamp: teardown of its instance begins."""


@attrs.frozen(slots=True, kw_only=True)
class TeardownSucceeded(Observation):
    """Terminate of the claim's instance succeeded (or the provider is not registered):
    the finalizer is released and the claim goes away."""


@attrs.frozen(slots=True, kw_only=True)
class TeardownFailed(Observation):
    """Terminate (or the List that finds the instance) failed: keep the finalizer, retry.

    Attributes:
        error: what failed, for the claim's message; the finalizer stays and teardown retries.
    """

    error: str


OBSERVATIONS: tuple[type[Observation], ...] = (
    ClaimCreated,
    ClaimAdopted,
    PodObserved,
    PodAbsent,
    Tick,
    ClaimDeletionRequested,
    TeardownSucceeded,
    TeardownFailed,
)


# -- guards -----------------------------------------------------------------------------------
def _age_seconds(status: NodeClaimStatus, at: datetime) -> float:
    born = status.created_at or at
    return (at - born).total_seconds()


def within_grace(status: NodeClaimStatus, obs: Observation) -> bool:
    """The claim is younger than its grace window (a missing Pod may still appear).

    Args:
        status: the claim.
        obs: the observation whose ``at`` is now.

    Returns:
        Whether the claim is younger than its grace window.
    """
    return _age_seconds(status, obs.at) < status.grace_seconds


def grace_expired(status: NodeClaimStatus, obs: Observation) -> bool:
    """The Pod is missing and the claim has outlived its grace window: it is an orphan.

    Args:
        status: the claim.
        obs: the observation whose ``at`` is now.

    Returns:
        Whether the Pod is missing and the claim has outlived its grace window.
    """
    return status.pod_absent_since is not None and not within_grace(status, obs)


def grace_deadline(status: NodeClaimStatus) -> datetime | None:
    """When the grace window of a never-observed claim runs out (ADR 0149); ``None`` while no
    pod is missing or the claim is being deleted (a Tick then only tears down).

    Args:
        status: the claim.

    Returns:
        The instant the grace window ends, or ``None`` when no Tick needs to come.
    """
    if status.pod_absent_since is None or status.deleting:
        return None
    if status.created_at is None:  # its age reads 0: out of grace at once, or never
        return EARLIEST if grace_expired(status, Tick(at=status.pod_absent_since)) else None
    return expiry(status.created_at, status.grace_seconds, ticked(grace_expired, status))


def other_pod(status: NodeClaimStatus, obs: PodObserved) -> bool:
    """A UID mismatch means the claim's pod is absent (a new pod reuses the name).

    Args:
        status: the claim.
        obs: the Pod as committed.

    Returns:
        Whether ``obs`` is another Pod than the claim's.
    """
    return bool(status.pod_uid) and obs.pod_uid != status.pod_uid


def other_pod_within_grace(status: NodeClaimStatus, obs: PodObserved) -> bool:
    """Another Pod under the claim's name while the claim is still within its grace window.

    Args:
        status: the claim.
        obs: the Pod as committed.

    Returns:
        Whether both hold.
    """
    return other_pod(status, obs) and within_grace(status, obs)


def pod_finished(status: NodeClaimStatus, obs: PodObserved) -> bool:
    """The Pod has ended (phase ``Failed`` or ``Succeeded``).

    Args:
        status: the claim.
        obs: the Pod as committed.

    Returns:
        Whether the Pod has ended.
    """
    return obs.phase in ("Failed", "Succeeded")


def pod_deleting(status: NodeClaimStatus, obs: PodObserved) -> bool:
    """The Pod has a deletionTimestamp.

    Args:
        status: the claim.
        obs: the Pod as committed.

    Returns:
        Whether the Pod is being deleted.
    """
    return obs.deleting


def claim_deleting(status: NodeClaimStatus, obs: Observation) -> bool:
    """The claim itself is being deleted: its reconcile runs teardown and nothing else.

    Args:
        status: the claim.
        obs: any observation.

    Returns:
        Whether the claim is being deleted.
    """
    return status.deleting


def pod_exists(status: NodeClaimStatus, obs: PodObserved) -> bool:
    """Running, or booting with reason Initializing, counts as existence.

    Args:
        status: the claim.
        obs: the Pod as committed.

    Returns:
        Whether the Pod counts as existing.
    """
    return obs.phase == "Running" or obs.reason == POD_REASON_INITIALIZING


def _adopts(phase: str) -> Guard:
    def guard(status: NodeClaimStatus, obs: ClaimAdopted) -> bool:
        """The adopted claim was stored in this guard's phase (legacy ``Initializing`` as Bound).

        Args:
            status: the claim.
            obs: the adopted claim.

        Returns:
            Whether the stored phase is this guard's.
        """
        return normalize_phase(obs.phase) == phase

    guard.__name__ = guard.__qualname__ = f"adopts_{phase.lower()}"
    return guard


adopts_provisioning = _adopts(PROVISIONING)
adopts_bound = _adopts(BOUND)
adopts_terminating = _adopts(TERMINATING)
adopts_terminated = _adopts(TERMINATED)


# -- effects ----------------------------------------------------------------------------------
def _enter(status: NodeClaimStatus, obs: Observation, row: Row, **changes: Any) -> NodeClaimStatus:
    state = status.state if row.target == SAME else row.target
    reason = row.reason or (state if state != status.state else status.reason)
    return _evolve(
        status,
        state=state,
        reason=reason,
        message=row.render(obs) if row.message else status.message,
        created_at=status.created_at or obs.at,
        **changes,
    )


def created(status: NodeClaimStatus, obs: ClaimCreated, row: Row) -> NodeClaimStatus:
    """Enter the row's phase with the claim's pool, provider, Pod UID and grace window.

    Args:
        status: the claim.
        obs: the creation.
        row: the row that fired.

    Returns:
        The claim's next status.
    """
    return _enter(
        status,
        obs,
        row,
        pool=obs.pool,
        provider=obs.provider,
        pod_uid=obs.pod_uid,
        grace_seconds=obs.grace_seconds,
    )


def adopted(status: NodeClaimStatus, obs: ClaimAdopted, row: Row) -> NodeClaimStatus:
    """Enter the stored phase with what was stored (its creation time too, when known).

    Args:
        status: the claim.
        obs: the adoption.
        row: the row that fired.

    Returns:
        The claim's next status.
    """
    result = _enter(
        status,
        obs,
        row,
        pool=obs.pool,
        provider=obs.provider,
        pod_uid=obs.pod_uid,
        instance_id=obs.instance_id,
    )
    if obs.created_at is not None:
        result = _evolve(result, created_at=obs.created_at)
    return result


def pod_seen(status: NodeClaimStatus, obs: PodObserved, row: Row) -> NodeClaimStatus:
    """Record the pod UID, and the instance id once, beside the phase change.

    Args:
        status: the claim.
        obs: the Pod as committed.
        row: the row that fired.

    Returns:
        The claim's next status, its Pod no longer absent.
    """
    return _enter(
        status,
        obs,
        row,
        pod_uid=status.pod_uid or obs.pod_uid,
        instance_id=status.instance_id or obs.instance_id,
        pool=status.pool or obs.pool,
        provider=status.provider or obs.provider,
        pod_absent_since=None,
    )


def absent_noted(status: NodeClaimStatus, obs: Observation, row: Row) -> NodeClaimStatus:
    """Note when the Pod was first seen missing (a later absence keeps the first instant).

    Args:
        status: the claim.
        obs: the absence.
        row: the row that fired.

    Returns:
        The claim's next status.
    """
    return _enter(status, obs, row, pod_absent_since=status.pod_absent_since or obs.at)


def deletion_noted(status: NodeClaimStatus, obs: Observation, row: Row) -> NodeClaimStatus:
    """Note that the claim is being deleted.

    Args:
        status: the claim.
        obs: the deletion request.
        row: the row that fired.

    Returns:
        The claim's next status.
    """
    return _enter(status, obs, row, deleting=True)


N = EventType.NORMAL
LIVE = (NEW, PROVISIONING, BOUND, TERMINATING, TERMINATED)
PHASED = (PROVISIONING, BOUND, TERMINATING, TERMINATED)
MSG_GONE_NOW = "pod is gone: claim deleted now, no grace (a phase was set)"
MSG_ORPHAN = "pod never appeared: orphan claim deleted"


def _adopts_row(state: str, guard: Guard, note: str = "") -> Row:
    """An adopted claim enters the phase it was stored in (guard ``adopts_<phase>``); the
    message's ``{phase}`` is the observation's, as stored."""
    return Row(
        NEW,
        ClaimAdopted,
        to=state,
        reason=state,
        event=N,
        message="adopted in phase {phase}",
        guard=guard,
        effect=adopted,
        note=note,
    )


ROWS: tuple[Row, ...] = (
    Row(NEW, ClaimCreated, to=SAME, effect=created, note="finalizer added; no phase yet"),
    ignore(PHASED, ClaimCreated, "the claim exists already"),
    _adopts_row(PROVISIONING, adopts_provisioning),
    _adopts_row(BOUND, adopts_bound, note="a legacy Initializing phase is read as Bound"),
    _adopts_row(TERMINATING, adopts_terminating),
    _adopts_row(TERMINATED, adopts_terminated),
    Row(NEW, ClaimAdopted, to=SAME, effect=adopted, note="adopted before any phase was set"),
    ignore(PHASED, ClaimAdopted, "the claim is known already"),
    # A claim being deleted only tears down (reconcile step 1): it reads its pod no more, and
    # reaches Deleted only when teardown confirms the instance released.
    ignore(LIVE, PodObserved, "being deleted: only teardown runs", guard=claim_deleting),
    ignore(
        LIVE,
        PodAbsent,
        "being deleted: the finalizer holds until teardown succeeds",
        guard=claim_deleting,
    ),
    ignore((NEW,), Tick, "being deleted: no grace timer, only teardown", guard=claim_deleting),
    # The Pod, as committed. A UID mismatch is an absent pod.
    Row(
        NEW,
        PodObserved,
        to=SAME,
        guard=other_pod_within_grace,
        effect=absent_noted,
        note="another pod holds the name; the claim is young: wait",
    ),
    Row(
        NEW,
        PodObserved,
        to=DELETED,
        reason=DELETED,
        event=N,
        message=MSG_ORPHAN,
        guard=other_pod,
        note="UID mismatch == absent; the grace window is over",
    ),
    Row(
        PHASED,
        PodObserved,
        to=DELETED,
        reason=DELETED,
        event=N,
        message=MSG_GONE_NOW,
        guard=other_pod,
        note="UID mismatch == absent: no grace once a phase is set",
    ),
    Row(
        (NEW, PROVISIONING, BOUND, TERMINATING),
        PodObserved,
        to=TERMINATED,
        reason=TERMINATED,
        event=N,
        message="pod is {phase}: instance released",
        guard=pod_finished,
        effect=pod_seen,
        note="the claim is not deleted",
    ),
    ignore(TERMINATED, PodObserved, "terminated is held while the claim exists"),
    Row(
        (NEW, PROVISIONING, BOUND),
        PodObserved,
        to=TERMINATING,
        reason=TERMINATING,
        event=N,
        message="pod is being deleted",
        guard=pod_deleting,
        effect=pod_seen,
    ),
    Row(TERMINATING, PodObserved, to=SAME, effect=pod_seen, note="hold until the pod finishes"),
    Row(
        BOUND,
        PodObserved,
        to=SAME,
        effect=pod_seen,
        note="Bound is never downgraded (a flapping pod holds)",
    ),
    Row(
        (NEW, PROVISIONING),
        PodObserved,
        to=BOUND,
        reason=BOUND,
        event=N,
        message="pod {reason} on its instance",
        guard=pod_exists,
        effect=pod_seen,
        note="Running, or booting as Initializing",
    ),
    Row(
        (NEW, PROVISIONING),
        PodObserved,
        to=PROVISIONING,
        reason=PROVISIONING,
        event=N,
        message="pod is {phase}/{reason}",
        effect=pod_seen,
    ),
    # The Pod is gone.
    Row(
        PHASED,
        PodAbsent,
        to=DELETED,
        reason=DELETED,
        event=N,
        message=MSG_GONE_NOW,
        note="any phase set: teardown now, no grace (since #60)",
    ),
    Row(
        NEW,
        PodAbsent,
        to=SAME,
        guard=within_grace,
        effect=absent_noted,
        note="a never-observed claim waits out the grace window",
    ),
    Row(NEW, PodAbsent, to=DELETED, reason=DELETED, event=N, message=MSG_ORPHAN),
    Row(
        NEW,
        Tick,
        to=DELETED,
        reason=DELETED,
        event=N,
        message=MSG_ORPHAN,
        guard=grace_expired,
        deadline=grace_deadline,
        note="the grace window ran out with the pod still absent",
    ),
    ignore(LIVE, Tick, "only a young, never-observed claim has a timer"),
    # Claim deletion: the finalizer tears the instance down.
    Row(LIVE, ClaimDeletionRequested, to=SAME, effect=deletion_noted),
    Row(
        LIVE,
        TeardownSucceeded,
        to=DELETED,
        reason=DELETED,
        event=N,
        message="instance terminated, finalizer released",
    ),
    Row(
        LIVE,
        TeardownFailed,
        to=SAME,
        message="teardown failed, retrying: {error}",
        note="the finalizer stays; the next reconcile retries",
    ),
    *(ignore(DELETED, o, "the claim is gone") for o in OBSERVATIONS),
)

TABLE = Table(
    "nodeclaim",
    states=(*LIVE, DELETED),
    initial=NEW,
    terminal=(DELETED,),
    observations=OBSERVATIONS,
    rows=ROWS,
)


#: Where the property suite's generated time starts (``lifecycle.testing.EPOCH``).
_SAMPLE_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


class NodeClaimMachine(Machine[NodeClaimStatus]):
    """The NodeClaim machine (:data:`~lifecycle.machines.NODECLAIM`): the claim on an instance
    behind a virtual node, fed by its Pod.

    Its table, observations and reasons: ``lifecycle table nodeclaim`` and the machine page.
    """

    name: ClassVar[str] = "nodeclaim"
    kind: ClassVar[str] = "NodeClaim"
    api_version: ClassVar[str] = "nebula.inftyai.com/v1alpha1"
    namespaced: ClassVar[bool] = False
    defines_resource: ClassVar[bool] = False
    #: Values that drive the NodeClaim into every state (the property suite's): committed
    #: Pod phases and reasons (``Initializing`` counts as existence), mostly its own pod's UID.
    samples: ClassVar[Mapping[str, Any]] = {
        "PodObserved.phase": ("Pending", "Running", "Failed", "Succeeded"),
        "PodObserved.reason": (
            "Provisioning",
            "ConfigError",
            "Initializing",
            "Running",
            "ProvisionFailed",
            "Failed",
            "Terminated",
        ),
        "ClaimAdopted.phase": (
            "",
            "Provisioning",
            "Bound",
            "Terminating",
            "Terminated",
            "Initializing",
        ),
        "pod_uid": ("pod-a", "pod-a", "pod-a", "pod-b", ""),
        "instance_id": ("i-0a1", ""),
        "grace_seconds": (0.0, 15.0, 60.0),
        # the property suite's epoch (lifecycle.testing.EPOCH), and half a minute before it
        "created_at": (None, _SAMPLE_EPOCH - timedelta(seconds=30), _SAMPLE_EPOCH),
        "error": ("quota exceeded", "connection reset by peer", "pool 'gpu' not found", ""),
        "pool": ("default", "gpu"),
        "provider": ("fake", "modal"),
    }
    status_type: ClassVar[type[Any]] = NodeClaimStatus
    table: ClassVar[Table] = TABLE

    def kubernetes_status(self, status: NodeClaimStatus) -> dict[str, Any]:
        """``phase`` and ``instanceID``; a deleted NodeClaim has no body
        (``NoStatusBody``).

        Args:
            status: the claim's status.

        Returns:
            The claim's ``status`` body, empty fields left out.

        Raises:
            NoStatusBody: the claim is ``Deleted``: there is no object to write to.
        """
        if status.state == "Deleted":
            raise NoStatusBody("a deleted NodeClaim has no status to write")
        body = {"phase": status.state, "instanceID": status.instance_id}
        return {k: v for k, v in body.items() if v}

    def initial(self, ref: ObjectRef) -> NodeClaimStatus:
        return NodeClaimStatus()

    def load_status(self, data: Any) -> NodeClaimStatus:
        """Statuses written by older controllers may carry the legacy phase: read it as Bound.

        Args:
            data: the stored status, as the store decoded it.

        Returns:
            The status, a legacy phase read as ``Bound``.
        """
        status = super().load_status(data)
        if status.state == LEGACY_INITIALIZING:
            status = _evolve(status, state=BOUND)
        return status


NODECLAIM = NodeClaimMachine()


# -- read side --------------------------------------------------------------------------------
class StatusRecords(Protocol):
    """What :func:`placed` reads: a store's ``records`` (every shipped store has it)."""

    def records(self, machine: Machine[Any]) -> Iterable[Any]:
        """Every record of ``machine`` in the store.

        Args:
            machine: the machine whose records are read.

        Returns:
            The records, each with its ``status``.
        """
        ...


def placed(store: StatusRecords, pool: str | None = None) -> dict[str, int]:
    """NodePool ``status.placed``: Bound claims per provider (booting pods included, since a
    booting pod binds its claim), for one pool or all. Recomputed from scratch on each call;
    empty when nothing is placed (upstream writes a nil map).

    Args:
        store: where the claims are read from.
        pool: the pool to count; ``None`` counts all pools.

    Returns:
        Bound claims per provider name.
    """
    counts: Counter[str] = Counter()
    for record in store.records(NODECLAIM):
        status = record.status
        if status.state == BOUND and (pool is None or status.pool == pool):
            counts[status.provider] += 1
    return dict(counts)
