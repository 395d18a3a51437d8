"""The Pod lifecycle of a pod placed on an external instance (Modal sandbox, EC2 instance).

Behaviour follows ``docs/upstream/pod-nodeclaim.md`` (the virtual-kubelet provider),
with one deliberate improvement: an observation that could not be made
(:class:`InstanceUnknown`) changes nothing, so it never demotes a Running pod and never reads
as "absent, therefore terminated".

The exclusive state is the Pod *reason* (``Provisioning``, ``Initializing`` ...): it is what the
NodeClaim controller reads, so the strings are a contract.

An event fires when the pod's *flip signature* changes, as upstream's: its phase, reason, Ready
status and pod IP (ADR 0017). So a Ready change alone (absent -> False when a reserved pod's
instance is first seen pending) or a new pod IP is an event too; it names the state it stays
in, and carries the pod's reason and message. DeletePod sets a present Ready condition to False
(upstream leaves it as it was): a Terminated pod never reads Ready.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Mapping
from datetime import datetime
from typing import Any, ClassVar

import attrs

from .._core.analysis import allow_refused
from .._core.kubernetes_shape import kubernetes_conditions, kubernetes_time
from .._core.machine import Machine, evolver, field_setter
from .._core.observation import Observation
from .._core.refs import Condition, EventType, ObjectRef, set_condition
from .._core.table import ANY, SAME, Row, Table, ignore
from ._pod_observations import (
    OBSERVATIONS,
    ConfigInvalid,
    CreateRequested,
    DeletionRequested,
    InstanceAbsent,
    InstanceFailed,
    InstancePending,
    InstanceRunning,
    InstanceTerminated,
    InstanceUnknown,
    ProvisionErrored,
    ProvisionRejected,
    ProvisionSucceeded,
    TerminateFailed,
    TerminateSucceeded,
)

#: The machine, its table and status, and its observation vocabulary (defined in
#: ``_pod_observations.py``, importable from here).
__all__ = [
    "CONFIG_ERROR",
    "FAILED",
    "FAILED_PHASE",
    "INITIALIZING",
    "LIVE",
    "MSG_ALLOCATING",
    "MSG_AWAITING_READINESS",
    "MSG_FAILED",
    "MSG_GONE",
    "MSG_INITIALIZING",
    "MSG_PREEMPTED",
    "MSG_RUNNING",
    "MSG_TERMINATED",
    "NEW",
    "OBSERVATIONS",
    "PENDING_PHASE",
    "PLACED",
    "POD",
    "PRE_PLACEMENT",
    "PROVISIONING",
    "PROVISION_FAILED",
    "ROWS",
    "RUNNING",
    "RUNNING_PHASE",
    "SUCCEEDED_PHASE",
    "TABLE",
    "TERMINAL",
    "TERMINATED",
    "ConfigInvalid",
    "CreateRequested",
    "DeletionRequested",
    "InstanceAbsent",
    "InstanceFailed",
    "InstancePending",
    "InstanceRunning",
    "InstanceTerminated",
    "InstanceUnknown",
    "PodMachine",
    "PodStatus",
    "ProvisionErrored",
    "ProvisionRejected",
    "ProvisionSucceeded",
    "TerminateFailed",
    "TerminateSucceeded",
]

# -- reasons (the Pod's exclusive states) and phases --------------------------------------
NEW = ""
PROVISIONING = "Provisioning"
CONFIG_ERROR = "ConfigError"
INITIALIZING = "Initializing"
RUNNING = "Running"
PROVISION_FAILED = "ProvisionFailed"
FAILED = "Failed"
TERMINATED = "Terminated"

PENDING_PHASE = "Pending"
RUNNING_PHASE = "Running"
SUCCEEDED_PHASE = "Succeeded"
FAILED_PHASE = "Failed"

# -- messages, exactly as upstream writes them ---------------------------------------------
MSG_ALLOCATING = "allocating external instance"
MSG_INITIALIZING = "external instance is initializing"
MSG_RUNNING = "external instance is running"
MSG_FAILED = "external instance entered a failed state"
MSG_GONE = "external instance is gone"
MSG_TERMINATED = "external instance terminated"
MSG_PREEMPTED = "external instance was preempted: the provider reclaimed its capacity"
MSG_AWAITING_READINESS = "external instance is running; readiness not yet confirmed"

LIVE = (NEW, PROVISIONING, CONFIG_ERROR, INITIALIZING, RUNNING)
TERMINAL = (PROVISION_FAILED, FAILED, TERMINATED)
PLACED = (INITIALIZING, RUNNING)


@attrs.frozen(slots=True)
class PodStatus:
    """The Pod's status as the virtual node writes it.

    ``state`` is the Pod reason. ``ready`` is the Ready condition, absent until the first poll.
    ``instance_id`` is ``None`` while the pod is not tracked (no instance is known for it).

    Attributes:
        state: the Pod's reason (``Provisioning``, ``Running``), the machine's state.
        phase: the Pod phase (``Pending``, ``Running``, ``Succeeded``, ``Failed``).
        message: the Pod's message.
        ready: the Ready condition; ``None`` until the first poll.
        pod_ip: the pod IP, the instance's endpoint when it is an address.
        instance_id: the provider's instance id; ``None`` while no instance is known.
        endpoint: where the instance answers.
        exit_code: the instance's exit code once it ended.
        start_time: when the instance was first seen running.
        deletion_timestamp: when the Pod got its deletionTimestamp.
        pool: the pool it was provisioned for.
        provider: the provider it runs on.
    """

    state: str = NEW
    phase: str = ""
    message: str = ""
    ready: Condition | None = None
    pod_ip: str = ""
    instance_id: str | None = None
    endpoint: str = ""
    exit_code: int | None = None
    start_time: datetime | None = None
    deletion_timestamp: datetime | None = None
    pool: str = ""
    provider: str = ""

    @property
    def reason(self) -> str:
        """The Pod's reason: its state."""
        return self.state

    @property
    def tracked(self) -> bool:
        """Whether an instance is known for the pod."""
        return self.instance_id is not None


_evolve = evolver(PodStatus)
#: What a poll sets (:func:`poll`), in this order; every other field is the status's own.
_set_polled = field_setter(
    PodStatus,
    "state",
    "phase",
    "message",
    "ready",
    "pod_ip",
    "instance_id",
    "endpoint",
    "exit_code",
    "start_time",
)


# -- guards -----------------------------------------------------------------------------------
def reserved(status: PodStatus, obs: ProvisionSucceeded) -> bool:
    return obs.reserved


def tracked(status: PodStatus, obs: Observation) -> bool:
    return status.instance_id is not None


def readiness_confirmed(status: PodStatus, obs: InstanceRunning) -> bool:
    return obs.readiness_confirmed


def preempted(status: PodStatus, obs: InstanceTerminated) -> bool:
    return obs.preempted


# -- effects ----------------------------------------------------------------------------------
def _target(status: PodStatus, row: Row) -> str:
    return status.state if row.target == SAME else row.target


_PHASE = {
    NEW: "",
    PROVISIONING: PENDING_PHASE,
    CONFIG_ERROR: PENDING_PHASE,
    INITIALIZING: PENDING_PHASE,
    RUNNING: RUNNING_PHASE,
    PROVISION_FAILED: FAILED_PHASE,
    FAILED: FAILED_PHASE,
    TERMINATED: FAILED_PHASE,
}


def mark(status: PodStatus, obs: Observation, row: Row) -> PodStatus:
    """CreatePod/DeletePod style write: phase, reason and message only (no Ready)."""
    state = _target(status, row)
    return _evolve(status, state=state, phase=_PHASE[state], message=row.render(obs))


def create(status: PodStatus, obs: CreateRequested, row: Row) -> PodStatus:
    # A known instance id is kept (upstream never clears the instance-id annotation): a
    # repeated CreatePod on a held pod must not forget the instance it already holds.
    return _evolve(mark(status, obs, row), pool=obs.pool, provider=obs.provider)


def provisioned(status: PodStatus, obs: ProvisionSucceeded, row: Row) -> PodStatus:
    return _evolve(mark(status, obs, row), instance_id=obs.instance_id, endpoint=obs.endpoint)


def rejected(status: PodStatus, obs: ProvisionRejected, row: Row) -> PodStatus:
    # Upstream tracks a rejected pod with instance id "" so teardown finds nothing to stop;
    # an id already known (a held instance) is kept, never cleared.
    return _evolve(mark(status, obs, row), instance_id=status.instance_id or "")


@functools.lru_cache(maxsize=4096)
def _ip(endpoint: str) -> str:
    """The endpoint as a canonical IP address, or ``""`` when it is not one (a DNS name)."""
    try:
        return str(ipaddress.ip_address(endpoint))
    except ValueError:
        return ""


def poll(status: PodStatus, obs: Any, row: Row) -> PodStatus:
    """applyState: phase/reason/message, the Ready condition, StartTime once, PodIP.

    A poll that changes nothing returns ``status`` itself, so a level-triggered host that
    re-reports every instance every tick costs no allocation and no comparison."""
    state = _target(status, row)
    ready = set_condition(
        status.ready, "Ready", "True" if state == RUNNING else "False", "", "", obs.at
    )
    instance_id = getattr(obs, "instance_id", "") or status.instance_id or ""
    endpoint = getattr(obs, "endpoint", "") or status.endpoint
    pod_ip = (_ip(endpoint) or status.pod_ip) if state == RUNNING and endpoint else status.pod_ip
    message = row.render(obs)
    exit_code = getattr(obs, "exit_code", None)
    if (
        ready is status.ready
        and state == status.state
        and status.phase == _PHASE[state]
        and message == status.message
        and pod_ip == status.pod_ip
        and instance_id == status.instance_id
        and endpoint == status.endpoint
        and exit_code == status.exit_code
        and status.start_time is not None
    ):
        return status
    # the fields poll owns, set on the status: never rebuilt field by field, so a field poll
    # does not own (deletion_timestamp, pool, provider, and any added later) survives
    return _set_polled(
        status,
        state,
        _PHASE[state],
        message,
        ready,
        pod_ip,
        instance_id,
        endpoint,
        exit_code,
        status.start_time or obs.at,
    )


def deleting(status: PodStatus, obs: Observation, row: Row) -> PodStatus:
    if status.deletion_timestamp is not None:
        return status
    return _evolve(status, deletion_timestamp=obs.at)


def deleted(status: PodStatus, obs: Observation, row: Row) -> PodStatus:
    """DeletePod's markStatus (phase, reason, message), and a Ready condition that is present
    turns False: a Terminated pod is never Ready (ADR 0017; upstream leaves Ready as it was).
    An absent Ready stays absent, as markStatus adds no condition."""
    ready = status.ready
    if ready is not None:
        ready = set_condition(ready, "Ready", "False", "", "", obs.at)
    return _evolve(
        mark(status, obs, row),
        phase=SUCCEEDED_PHASE,
        ready=ready,
        deletion_timestamp=status.deletion_timestamp or obs.at,
    )


N, W = EventType.NORMAL, EventType.WARNING
PRE_PLACEMENT = (NEW, CONFIG_ERROR)

ROWS: tuple[Row, ...] = (
    # CreatePod
    Row(
        (NEW, CONFIG_ERROR),
        CreateRequested,
        to=PROVISIONING,
        reason=PROVISIONING,
        event=N,
        message=MSG_ALLOCATING,
        effect=create,
        note="CreatePod start, before Provision",
    ),
    Row(
        PROVISIONING,
        CreateRequested,
        to=SAME,
        reason=PROVISIONING,
        message=MSG_ALLOCATING,
        effect=create,
        note="the kubelet retries CreatePod after an error",
    ),
    ignore(PLACED, CreateRequested, "the instance exists; a repeated CreatePod changes nothing"),
    ignore((PROVISIONING,), ConfigInvalid, "a tracked pod already has its instance", guard=tracked),
    Row(
        (NEW, CONFIG_ERROR, PROVISIONING),
        ConfigInvalid,
        to=CONFIG_ERROR,
        reason=CONFIG_ERROR,
        event=W,
        message="{error}",
        effect=mark,
        note="pool unreadable or env ref unresolved; not tracked",
    ),
    ignore(PLACED, ConfigInvalid, "the instance exists; config is re-read on the next create"),
    # Provision results
    Row(
        PROVISIONING,
        ProvisionSucceeded,
        to=INITIALIZING,
        reason=INITIALIZING,
        event=N,
        message=MSG_INITIALIZING,
        guard=reserved,
        effect=provisioned,
        note="reserved capacity: tracked, initializing",
    ),
    Row(
        PROVISIONING,
        ProvisionSucceeded,
        to=SAME,
        reason=PROVISIONING,
        message=MSG_ALLOCATING,
        effect=provisioned,
        note="unreserved: tracked but held at Provisioning",
    ),
    ignore(PLACED, ProvisionSucceeded, "a late duplicate result; the poll owns the state now"),
    Row(
        PROVISIONING,
        ProvisionRejected,
        to=PROVISION_FAILED,
        reason=PROVISION_FAILED,
        event=W,
        message="{error}",
        effect=rejected,
        note="a provider rejection fails the pod (tracked with id '')",
    ),
    ignore(PLACED, ProvisionRejected, "a late result for a placed pod changes nothing"),
    Row(
        PROVISIONING,
        ProvisionErrored,
        to=SAME,
        reason=PROVISIONING,
        message="retrying: {error}",
        effect=mark,
        note="unattributable: keep provisioning, not tracked",
    ),
    ignore(PLACED, ProvisionErrored, "a late result for a placed pod changes nothing"),
    # Polls: "any tracked" in upstream; from an untracked state a found instance re-adopts.
    Row(
        LIVE,
        InstancePending,
        to=INITIALIZING,
        reason=INITIALIZING,
        event=N,
        message=MSG_INITIALIZING,
        effect=poll,
        note="may demote a Running pod: an honest Pending (failing status checks) un-readies",
    ),
    Row(
        LIVE,
        InstanceRunning,
        to=RUNNING,
        reason=RUNNING,
        event=N,
        message=MSG_RUNNING,
        guard=readiness_confirmed,
        effect=poll,
        note="Ready=True only once readiness is confirmed",
    ),
    Row(
        LIVE,
        InstanceRunning,
        to=INITIALIZING,
        reason=INITIALIZING,
        event=N,
        message=MSG_AWAITING_READINESS,
        effect=poll,
        note="running, probe not yet passed: never Ready",
    ),
    Row(LIVE, InstanceFailed, to=FAILED, reason=FAILED, event=W, message=MSG_FAILED, effect=poll),
    Row(
        LIVE,
        InstanceTerminated,
        to=TERMINATED,
        reason=TERMINATED,
        event=W,
        message=MSG_PREEMPTED,
        guard=preempted,
        effect=poll,
        note="a spot reclaim: people must tell it from an ordinary stop",
    ),
    Row(
        LIVE,
        InstanceTerminated,
        to=TERMINATED,
        reason=TERMINATED,
        event=W,
        message=MSG_TERMINATED,
        effect=poll,
    ),
    Row(
        PROVISIONING,
        InstanceAbsent,
        to=TERMINATED,
        reason=TERMINATED,
        event=W,
        message=MSG_GONE,
        guard=tracked,
        effect=poll,
        note="a held (unreserved) instance left the List",
    ),
    Row(
        PLACED,
        InstanceAbsent,
        to=TERMINATED,
        reason=TERMINATED,
        event=W,
        message=MSG_GONE,
        effect=poll,
        note="a placed instance left a successful List",
    ),
    ignore(
        (NEW, PROVISIONING, CONFIG_ERROR),
        InstanceAbsent,
        "untracked: nothing was placed yet, CreatePod will run",
    ),
    ignore(ANY, InstanceUnknown, "an observation that could not be made changes nothing"),
    # DeletePod
    Row(LIVE, DeletionRequested, to=SAME, effect=deleting, note="deletionTimestamp stamped once"),
    Row(
        LIVE,
        TerminateSucceeded,
        to=TERMINATED,
        reason=TERMINATED,
        event=N,
        message=MSG_TERMINATED,
        effect=deleted,
        note="DeletePod: Succeeded/Terminated",
    ),
    ignore(ANY, TerminateFailed, "the kubelet retries DeletePod; the NodeClaim is the backstop"),
    # Terminal: the first terminal status wins.
    *(
        ignore(TERMINAL, o, "terminal: the first terminal status wins")
        for o in OBSERVATIONS
        if o not in (InstanceUnknown, TerminateFailed)
    ),
)

TABLE = Table(
    "pod",
    states=(NEW, PROVISIONING, CONFIG_ERROR, INITIALIZING, RUNNING, *TERMINAL),
    initial=NEW,
    terminal=TERMINAL,
    observations=OBSERVATIONS,
    rows=ROWS,
)


class PodMachine(Machine[PodStatus]):
    """The Pod machine (:data:`~lifecycle.machines.POD`): a pod on an external instance.

    Its table, observations and reasons: ``lifecycle table pod`` and the machine page.
    """

    name: ClassVar[str] = "pod"
    kind: ClassVar[str] = "Pod"
    api_version: ClassVar[str] = "v1"
    defines_resource: ClassVar[bool] = False
    #: Values that drive the Pod into every state (the property suite's, ``lifecycle.testing``).
    samples: ClassVar[Mapping[str, Any]] = {
        "instance_id": ("i-0a1", "i-0a1", "i-0b2", ""),
        "endpoint": ("10.0.0.7", "sandbox-1.modal.run", ""),
        "exit_code": (None, 0, 1, 124, 137),
        "detail": ("", "OOMKilled"),
        "error": ("quota exceeded", "connection reset by peer", "pool 'gpu' not found", ""),
        "pool": ("default", "gpu"),
        "provider": ("fake", "modal", "aws"),
    }
    status_type: ClassVar[type[Any]] = PodStatus
    signature_names: ClassVar[tuple[str, ...]] = ("phase", "reason", "Ready", "podIP")
    table: ClassVar[Table] = TABLE
    analysis_allowances: ClassVar[Mapping[str, str]] = allow_refused(
        "a provision result for a pod that CreatePod never sent to provisioning is a host bug: "
        "refused loudly, never ignored",
        PRE_PLACEMENT,
        (ProvisionSucceeded, ProvisionRejected, ProvisionErrored),
    )

    def kubernetes_status(self, status: PodStatus) -> dict[str, Any]:
        """``phase``, ``reason``, ``message``, ``conditions`` (``Ready`` once a poll set it),
        ``podIP``, ``startTime``: what the virtual node writes; empty fields left out.

        Args:
            status: the Pod's status.

        Returns:
            The status subresource body.
        """
        body: dict[str, Any] = {
            "phase": status.phase,
            "reason": status.state,
            "message": status.message,
            "conditions": kubernetes_conditions([status.ready], pod=True),
            "podIP": status.pod_ip,
        }
        if status.start_time is not None:
            body["startTime"] = kubernetes_time(status.start_time)
        return {k: v for k, v in body.items() if v not in ("", [])}

    def initial(self, ref: ObjectRef) -> PodStatus:
        return PodStatus()

    def event_type(self, status: PodStatus) -> EventType:
        """Warning when the pod enters a Failed phase or a ConfigError; Normal otherwise
        (a DeletePod Terminated is Succeeded, so Normal).

        Args:
            status: the status entered.

        Returns:
            The event's type.
        """
        if status.phase == FAILED_PHASE or status.state == CONFIG_ERROR:
            return EventType.WARNING
        return EventType.NORMAL

    def signature(self, status: PodStatus) -> tuple[str, str, str, str]:
        """Upstream's flip signature ``phase|reason|ready|podIP``: a change of any of the four
        is an event (ADR 0017). Ready is ``""`` while the condition is absent.

        Args:
            status: the Pod's status.

        Returns:
            ``(phase, reason, ready, pod IP)``.
        """
        ready = status.ready
        return (status.phase, status.state, "" if ready is None else ready.status, status.pod_ip)


POD = PodMachine()
