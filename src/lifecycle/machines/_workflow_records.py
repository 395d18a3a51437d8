"""The records of the Workflow machine: reasons, messages, its status and its observations
(see :mod:`lifecycle.machines.workflow`)."""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar

import attrs

from .._core.errors import preview
from .._core.limits import Limits, within_limit
from .._core.observation import Observation, Tick
from .._core.refs import Condition
from ._conditions import (
    Conditioned,
    SpecUpdated,
    not_negative,
    positive,
)
from ._groups import Group
from ._job_records import RESTARTS_LIMIT
from ._thresholds import Threshold
from .job import DEFAULT_WORKLOAD_KIND

WORKFLOW_CONTROLLER = "workflow-controller"
DEFAULT_DRAIN_GRACE = 300.0
#: ``timeoutPerJob`` of a Workflow a WorkloadRun built, when it names none.
WORKLOADRUN_TIMEOUT = 24 * 3600.0

# -- limits of the numbers that size work (ADR 0100; each record's ``limits``) ----------------
#: Nodes one Workflow partitions: far more than a Kubernetes cluster holds (5 000 supported).
NODES_LIMIT = 100_000
#: Groups of one Workflow: each is a Job per iteration and an entry of the status's group
#: list, which the input bounds hold to 10 000 entries.
GROUPS_LIMIT = 10_000
#: Iterations of one Workflow: each runs every group's Job again.
ITERATIONS_LIMIT = 1_000
#: Retries of one failed group (``retry_failed_groups``): each is another Job.
RETRIES_LIMIT = 1_000

# -- reasons ----------------------------------------------------------------------------------
OVERRIDE_ERROR = "OverrideError"
CHECKPOINT_PVC_MISSING = "CheckpointPVCMissing"
NODE_DISCOVERY_ERROR = "NodeDiscoveryError"
HETEROGENEOUS_PLATFORM = "HeterogeneousPlatform"
PARTITION_ERROR = "PartitionError"
DEPENDENCY_CREATION_ERROR = "DependencyCreationError"
DEPENDENCY_NAME_COLLISION = "DependencyNameCollision"
JOB_NAME_COLLISION = "JobNameCollision"
GROUPS_PARTITIONED = "GroupsPartitioned"
JOB_CREATED = "JobCreated"
JOB_RUNNING = "JobRunning"
JOB_COMPLETED = "JobCompleted"
JOB_HARDWARE_FAILED = "JobHardwareFailed"
JOB_VALIDATION_FAILED = "JobValidationFailed"
ITERATIONS_FAILED = "IterationsFailed"
VALIDATION_FAILED = "ValidationFailed"
# action events
CORDONED_NODES_EXCLUDED = "CordonedNodesExcluded"
HETEROGENEOUS_GPU = "HeterogeneousGPU"
INSUFFICIENT_GPU_CAPACITY = "InsufficientGPUCapacity"
OVERRIDE_APPLIED = "OverrideApplied"
OVERRIDE_NO_OP = "OverrideNoOp"
NO_OVERRIDES_MATCHED = "NoOverridesMatched"

# -- messages ---------------------------------------------------------------------------------
MSG_OVERRIDE = "Failed to apply overrides: {error}"
MSG_PVC = 'Checkpoint requires PVC "{pvc}" in dependencies'
MSG_DISCOVERY = "Node discovery failed: {error}"
MSG_NO_NODES = "No target nodes found matching orchestration target"
MSG_DEPENDENCY = "Failed to create dependency: {error}"
MSG_PARTITIONED = (
    "Discovered {nodes} nodes, partitioned into {groups} groups ({nodes_per_job} nodes/job)"
)
MSG_RUNNING = "Iteration {iteration}/{iterations}: {running} groups running"
MSG_ITERATION = "Iteration {completed}/{iterations} completed, starting next"
MSG_COMPLETED = "All {iterations} iterations completed successfully"
MSG_FAILED = "{failed} groups failed across {iterations} iterations{hardware_note}"
HARDWARE_NOTE = "; hardware failures occurred on one or more nodes"
MSG_VALIDATION = "One or more Jobs failed performance threshold validation"
MSG_CORDONED = "Excluded {count} cordoned node(s) from certification: {names}"
MSG_HETEROGENEOUS_GPU = (
    "Filtered {kept}/{total} nodes to primary GPU architecture {architecture}; excluded: {names}"
)
MSG_INSUFFICIENT_GPU = (
    "Excluded {count} node(s) with fewer than {required} allocatable nvidia.com/gpu: {names}"
)


@attrs.frozen(slots=True)
class WorkflowStatus(Conditioned):
    """A Workflow's status: its conditions (``state`` is their true type) and bookkeeping.

    Attributes:
        name: the Workflow's name.
        conditions: the Workflow's conditions, the exclusive set first; the true one is its state.
        generation: the ``metadata.generation`` last stamped as observedGeneration.
        clock: the ``at`` of the last observation that changed the status: a Tick before it is
            refused, so time never goes back.
        owner_kind: the kind of the Workflow's owner (``Certification``, ``WorkloadRun``) or
            ``""``.
        owner: the owner's name.
        owner_uid: the owner's UID, which tells a recreated owner of the same name apart.
        category: the Certification category the Workflow runs, when its owner is one.
        iterations: how many times every group's Job runs.
        retry_failed_groups: how many times a group is retried after its Job failed.
        timeout_per_job_s: how long a group's Job may run; ``None``: no limit (a WorkloadRun's
            Workflow gets a default one).
        drain_grace_s: how long a failed Job is left before its group is retried or failed, so
            its workload can drain.
        workload_kind: the kind of workload each Job runs.
        thresholds: what each Job's measurements must pass.
        max_restarts: how many restarts from checkpoint each Job may make.
        checkpoint: the workloads checkpoint.
        nodes: how many candidate nodes were partitioned.
        nodes_per_job: the most nodes one group's Job runs on.
        iteration: the current iteration, from 1.
        groups: one record per group, with its Job's last report.
        failed_groups: the groups failed so far, over all iterations.
        hardware_failures: a failed group had a hardware failure (it decides the final reason).
        validation_failures: a failed group failed validation.
    """

    name: str = ""
    conditions: tuple[Condition, ...] = ()
    generation: int = 1
    clock: datetime | None = None
    owner_kind: str = ""
    owner: str = ""
    owner_uid: str = ""
    category: str = ""
    iterations: int = 1
    retry_failed_groups: int = 0
    timeout_per_job_s: float | None = None
    drain_grace_s: float = DEFAULT_DRAIN_GRACE
    workload_kind: str = DEFAULT_WORKLOAD_KIND
    thresholds: tuple[Threshold, ...] = ()
    max_restarts: int = 0
    checkpoint: bool = False
    nodes: int = 0
    nodes_per_job: int = 0
    iteration: int = 1
    groups: tuple[Group, ...] = ()
    failed_groups: int = 0
    hardware_failures: bool = False
    validation_failures: bool = False


# -- observations -----------------------------------------------------------------------------
@attrs.frozen(slots=True, kw_only=True)
class Submitted(Observation):
    """The Workflow object exists with this spec; ``owner_kind`` ``Certification`` or
    ``WorkloadRun`` links it to its owner (a Certification's Workflow names its category).

    Attributes:
        owner_kind: the kind of the owner (``Certification``, ``WorkloadRun``) or ``""``.
        owner: the owner's name.
        owner_uid: the owner's UID.
        category: the Certification category the Workflow runs.
        iterations: how many times every group's Job runs, at least 1, within the limit.
        retry_failed_groups: how many retries a failed group gets, within the limit.
        timeout_per_job_s: how long a Job may run; ``None``: no limit.
        drain_grace_s: how long a failed Job drains before its group moves on, not negative.
        workload_kind: the kind of workload each Job runs.
        thresholds: what each Job's measurements must pass.
        max_restarts: how many restarts from checkpoint each Job may make, within the limit.
        checkpoint: the workloads checkpoint.
        generation: the Workflow's ``metadata.generation``, at least 1.
    """

    # iterations, retries and restarts each size work: at most 1 000 by default
    # (``Submitted.limits``, ADR 0100; a host may raise them)
    limits: ClassVar[Limits] = Limits(
        "workflow.Submitted.limits",
        iterations=(ITERATIONS_LIMIT, "each iteration runs every group's Job again"),
        retry_failed_groups=(RETRIES_LIMIT, "each retry is another Job"),
        max_restarts=(RESTARTS_LIMIT, "each restart is a new workload"),
    )

    owner_kind: str = ""
    owner: str = ""
    owner_uid: str = ""
    category: str = ""
    iterations: int = attrs.field(default=1, validator=[positive, within_limit])
    retry_failed_groups: int = attrs.field(default=0, validator=[not_negative, within_limit])
    timeout_per_job_s: float | None = attrs.field(default=None, validator=not_negative)
    drain_grace_s: float = attrs.field(default=DEFAULT_DRAIN_GRACE, validator=not_negative)
    workload_kind: str = DEFAULT_WORKLOAD_KIND
    thresholds: tuple[Threshold, ...] = ()
    max_restarts: int = attrs.field(default=0, validator=[not_negative, within_limit])
    checkpoint: bool = False
    generation: int = attrs.field(default=1, validator=positive)


@attrs.frozen(slots=True, kw_only=True)
class OverridesFailed(Observation):
    """The Workflow's overrides could not be applied (``error``): a new Workflow fails
    (``OverrideError``).

    Attributes:
        error: why the overrides could not be applied.
    """

    error: str


@attrs.frozen(slots=True, kw_only=True)
class CheckpointPVCMissing(Observation):
    """The checkpoint volume claim ``pvc`` the Workflow asks for does not exist: a new Workflow
    fails (``CheckpointPVCMissing``).

    Attributes:
        pvc: the missing claim's name.
    """

    pvc: str


@attrs.frozen(slots=True, kw_only=True)
class NodeListFailed(Observation):
    """Listing the candidate nodes failed (``error``): a new Workflow fails
    (``NodeDiscoveryError``).

    Attributes:
        error: why listing failed.
    """

    error: str


@attrs.frozen(slots=True, kw_only=True)
class NoNodesFound(Observation):
    """No node matched the Workflow's selector: a new Workflow fails (``NodeDiscoveryError``)."""

    pass


@attrs.frozen(slots=True, kw_only=True)
class PlatformsMixed(Observation):
    """The candidate nodes are of more than one platform (``error`` says which): a new Workflow
    fails (``HeterogeneousPlatform``).

    Attributes:
        error: which platforms were found.
    """

    error: str


@attrs.frozen(slots=True, kw_only=True)
class PartitionFailed(Observation):
    """All nodes capacity-excluded, an adapter/nodesPerJob error, too few nodes ...

    Attributes:
        error: why the nodes could not be partitioned.
    """

    error: str


def _collision(_: object, attribute: attrs.Attribute[str], value: str) -> None:
    if value not in ("", "dependency", "job"):
        raise ValueError(
            f"{attribute.name} must be '', 'dependency' or 'job', not {preview(value)}"
        )


@attrs.frozen(slots=True, kw_only=True)
class DependencyCreateFailed(Observation):
    """Creating a dependency failed; ``collision`` names a foreign object holding the name.

    Attributes:
        error: why the create failed.
        collision: ``"dependency"`` or ``"job"`` when a foreign object of that sort holds the
            name, else ``""``.
    """

    error: str
    collision: str = attrs.field(default="", validator=_collision)


@attrs.frozen(slots=True, kw_only=True)
class Partitioned(Observation):
    """The candidate ``nodes`` were split into ``groups`` of at most ``nodes_per_job``: a new
    Workflow starts (``GroupsPartitioned``, InProgress) and builds one group record per group.

    As a partition of the nodes, it holds that ``nodes_per_job <= nodes`` (too few nodes is a
    :class:`PartitionFailed`), ``groups <= nodes`` (no group without a node) and ``groups *
    nodes_per_job >= nodes`` (every node in a group). Each count is at most its limit
    (``Partitioned.limits``, ADR 0100; defaults: 100 000 nodes, 10 000 groups), which a host
    may raise with ``Partitioned.limits.set(field, n)``.

    Attributes:
        nodes: how many candidate nodes there are.
        groups: how many groups they were split into.
        nodes_per_job: the most nodes in one group.
    """

    limits: ClassVar[Limits] = Limits(
        "workflow.Partitioned.limits",
        nodes=(NODES_LIMIT, "far more nodes than one cluster holds"),
        groups=(GROUPS_LIMIT, "one group record, and a Job per iteration, per group"),
        nodes_per_job=(NODES_LIMIT, "at most the nodes"),
    )

    nodes: int = attrs.field(validator=[positive, within_limit])
    groups: int = attrs.field(validator=[positive, within_limit])
    nodes_per_job: int = attrs.field(validator=[positive, within_limit])

    def __attrs_post_init__(self) -> None:
        problem = partition_problem(self.nodes, self.groups, self.nodes_per_job)
        if problem is not None:
            raise ValueError(problem)


def partition_problem(nodes: int, groups: int, nodes_per_job: int) -> str | None:
    """Why ``groups`` groups of at most ``nodes_per_job`` nodes are not a partition of
    ``nodes`` nodes, or ``None``.

    Args:
        nodes: how many nodes there are.
        groups: how many groups.
        nodes_per_job: the most nodes in one group.

    Returns:
        What is wrong, in a sentence for a :class:`ValueError`, or ``None`` for a partition.
    """
    if nodes_per_job > nodes:
        return f"nodes_per_job {nodes_per_job} is more than the {nodes} nodes (too few nodes)"
    if groups > nodes:
        return f"groups {groups} is more than the {nodes} nodes (a group without a node)"
    if groups * nodes_per_job < nodes:
        return (
            f"{groups} groups of {nodes_per_job} nodes/job do not cover the {nodes} nodes "
            f"(groups x nodes_per_job = {groups * nodes_per_job})"
        )
    return None


@attrs.frozen(slots=True, kw_only=True)
class JobLaunched(Observation):
    """The Workflow created Job ``job`` (uid ``uid``) for ``group`` (0-based).

    Attributes:
        group: the group's index, from 0.
        job: the Job's name.
        uid: the Job's UID.
    """

    group: int = attrs.field(validator=not_negative)
    job: str
    uid: str


@attrs.frozen(slots=True, kw_only=True)
class JobObserved(Observation):
    """A Job's committed status, as the Workflow reads it (wired by the Job -> Workflow link).

    Attributes:
        job: the Job's name.
        job_uid: the Job's UID; a report from another Job than the group's is ignored.
        group: the group's index, from 0.
        state: the Job's state.
        reason: the Job's reason.
        hardware_failed: the Job reported a hardware failure.
        validation_failed: the Job failed validation.
        awaiting_validation: the Job succeeded and its verdict is pending.
        workload_start_time: when its workload started.
        workload_exists: its workload exists.
    """

    job: str
    job_uid: str
    group: int = attrs.field(validator=not_negative)
    state: str
    reason: str = ""
    hardware_failed: bool = False
    validation_failed: bool = False
    awaiting_validation: bool = False
    workload_start_time: datetime | None = None
    workload_exists: bool = False


@attrs.frozen(slots=True, kw_only=True)
class CordonedNodesExcluded(Observation):
    """Cordoned ``nodes`` were left out of the candidates: an action Warning, the status
    unchanged.

    Attributes:
        nodes: the cordoned nodes' names.
    """

    nodes: tuple[str, ...]

    @property
    def count(self) -> int:
        return len(self.nodes)

    @property
    def names(self) -> str:
        return ", ".join(self.nodes)


@attrs.frozen(slots=True, kw_only=True)
class HeterogeneousGPUFiltered(Observation):
    """Nodes whose GPU architecture differs from ``architecture`` were filtered out (``kept`` of
    ``total`` remain; ``excluded`` names the others): an action Warning, the status unchanged.

    Attributes:
        kept: how many nodes remain.
        total: how many there were.
        architecture: the GPU architecture kept.
        excluded: the names of the nodes filtered out.
    """

    kept: int = attrs.field(validator=not_negative)
    total: int = attrs.field(validator=not_negative)
    architecture: str
    excluded: tuple[str, ...] = ()

    @property
    def names(self) -> str:
        return ", ".join(self.excluded)


@attrs.frozen(slots=True, kw_only=True)
class InsufficientGPUCapacity(Observation):
    """``excluded`` entries read ``"<node> has <n>"``.

    Attributes:
        required: the GPUs a node must have allocatable.
        excluded: the nodes left out, each ``"<node> has <n>"``.
    """

    required: int = attrs.field(validator=positive)
    excluded: tuple[str, ...] = ()

    @property
    def count(self) -> int:
        return len(self.excluded)

    @property
    def names(self) -> str:
        return ", ".join(self.excluded)


@attrs.frozen(slots=True, kw_only=True)
class OverrideApplied(Observation):
    """An override changed the Workflow (``detail``): an action event, the status unchanged.

    Attributes:
        detail: what the override changed.
    """

    detail: str


@attrs.frozen(slots=True, kw_only=True)
class OverrideNoOp(Observation):
    """An override matched but changed nothing (``detail``): an action Warning, the status
    unchanged.

    Attributes:
        detail: which override matched.
    """

    detail: str


@attrs.frozen(slots=True, kw_only=True)
class NoOverridesMatched(Observation):
    """No override matched this Workflow: an action event, the status unchanged.

    Attributes:
        detail: the event's message.
    """

    detail: str = "No overrides matched this Workflow"


OBSERVATIONS: tuple[type[Observation], ...] = (
    Submitted,
    SpecUpdated,
    OverridesFailed,
    CheckpointPVCMissing,
    NodeListFailed,
    NoNodesFound,
    PlatformsMixed,
    PartitionFailed,
    DependencyCreateFailed,
    Partitioned,
    JobLaunched,
    JobObserved,
    Tick,
    CordonedNodesExcluded,
    HeterogeneousGPUFiltered,
    InsufficientGPUCapacity,
    OverrideApplied,
    OverrideNoOp,
    NoOverridesMatched,
)
