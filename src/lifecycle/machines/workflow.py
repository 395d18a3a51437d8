"""The Workflow lifecycle: nodes discovered, partitioned into groups, one Job per group for
each of ``iterations`` rounds, failed groups drained and retried.

Behaviour follows ``docs/upstream/workflow-job-certification.md`` ("Workflow", and the Job
timeout write). The Workflow reads its Jobs only through their committed statuses
(:class:`JobObserved`, wired by :mod:`lifecycle.links`), and its timeout write on a Job goes
back down the same way (the Job's :class:`~lifecycle.machines.job.TimedOut`).

Groups: ``terminal = hardware || failed || succeeded``; ``jobFailed = failed || hardware ||
validation``; a Succeeded Job still awaiting its verdict keeps its group Running. A failed
group is held Running for ``drain_grace_s`` (the workload is deleted, pods drain), then
retried while ``retries < retry_failed_groups`` and the Job did not time out, else Failed.
Windows and timeouts are decided on :class:`~lifecycle.Tick` only (a zero grace: at once).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import attrs

from .._core.analysis import allow_refused
from .._core.errors import InvalidObservation
from .._core.limits import Limits
from .._core.machine import Growth, replace
from .._core.observation import Observation, Tick
from .._core.redact import redact
from .._core.refs import EventType, ObjectRef
from .._core.table import SAME, Row, Table, ignore
from .._core.transition import Flip
from . import _groups
from ._conditions import (
    FAILED,
    IN_PROGRESS,
    LIVE,
    NEW,
    SPEC_UPDATED_ROWS,
    STATES,
    SUCCEEDED,
    TERMINAL,
    TRUE,
    ConditionMachine,
    SpecUpdated,
    action_row,
    exclusive,
    with_condition,
)
from ._groups import ITERATION_COMPLETED, PENDING, RUNNING, Group, Plan, running
from ._thresholds import Threshold
from ._workflow_records import (
    CHECKPOINT_PVC_MISSING,
    CORDONED_NODES_EXCLUDED,
    DEFAULT_DRAIN_GRACE,
    DEPENDENCY_CREATION_ERROR,
    DEPENDENCY_NAME_COLLISION,
    GROUPS_LIMIT,
    GROUPS_PARTITIONED,
    HARDWARE_NOTE,
    HETEROGENEOUS_GPU,
    HETEROGENEOUS_PLATFORM,
    INSUFFICIENT_GPU_CAPACITY,
    ITERATIONS_FAILED,
    ITERATIONS_LIMIT,
    JOB_COMPLETED,
    JOB_CREATED,
    JOB_HARDWARE_FAILED,
    JOB_NAME_COLLISION,
    JOB_RUNNING,
    JOB_VALIDATION_FAILED,
    MSG_COMPLETED,
    MSG_CORDONED,
    MSG_DEPENDENCY,
    MSG_DISCOVERY,
    MSG_FAILED,
    MSG_HETEROGENEOUS_GPU,
    MSG_INSUFFICIENT_GPU,
    MSG_ITERATION,
    MSG_NO_NODES,
    MSG_OVERRIDE,
    MSG_PARTITIONED,
    MSG_PVC,
    MSG_RUNNING,
    MSG_VALIDATION,
    NO_OVERRIDES_MATCHED,
    NODE_DISCOVERY_ERROR,
    NODES_LIMIT,
    OBSERVATIONS,
    OVERRIDE_APPLIED,
    OVERRIDE_ERROR,
    OVERRIDE_NO_OP,
    PARTITION_ERROR,
    RETRIES_LIMIT,
    VALIDATION_FAILED,
    WORKFLOW_CONTROLLER,
    WORKLOADRUN_TIMEOUT,
    CheckpointPVCMissing,
    CordonedNodesExcluded,
    DependencyCreateFailed,
    HeterogeneousGPUFiltered,
    InsufficientGPUCapacity,
    JobLaunched,
    JobObserved,
    NodeListFailed,
    NoNodesFound,
    NoOverridesMatched,
    OverrideApplied,
    OverrideNoOp,
    OverridesFailed,
    Partitioned,
    PartitionFailed,
    PlatformsMixed,
    Submitted,
    WorkflowStatus,
    partition_problem,
)

#: The machine, its table and status, and its observation vocabulary (defined in
#: ``_workflow_records.py``, importable from here).
__all__ = [
    "CHECKPOINT_PVC_MISSING",
    "CORDONED_NODES_EXCLUDED",
    "DEFAULT_DRAIN_GRACE",
    "DEPENDENCY_CREATION_ERROR",
    "DEPENDENCY_NAME_COLLISION",
    "GROUPS_LIMIT",
    "GROUPS_PARTITIONED",
    "HARDWARE_NOTE",
    "HETEROGENEOUS_GPU",
    "HETEROGENEOUS_PLATFORM",
    "INSUFFICIENT_GPU_CAPACITY",
    "ITERATIONS_FAILED",
    "ITERATIONS_LIMIT",
    "ITERATION_COMPLETED",
    "JOB_COMPLETED",
    "JOB_CREATED",
    "JOB_HARDWARE_FAILED",
    "JOB_NAME_COLLISION",
    "JOB_RUNNING",
    "JOB_VALIDATION_FAILED",
    "MSG_COMPLETED",
    "MSG_CORDONED",
    "MSG_DEPENDENCY",
    "MSG_DISCOVERY",
    "MSG_FAILED",
    "MSG_HETEROGENEOUS_GPU",
    "MSG_INSUFFICIENT_GPU",
    "MSG_ITERATION",
    "MSG_NO_NODES",
    "MSG_OVERRIDE",
    "MSG_PARTITIONED",
    "MSG_PVC",
    "MSG_RUNNING",
    "MSG_VALIDATION",
    "NODES_LIMIT",
    "NODE_DISCOVERY_ERROR",
    "NO_OVERRIDES_MATCHED",
    "OBSERVATIONS",
    "OVERRIDE_APPLIED",
    "OVERRIDE_ERROR",
    "OVERRIDE_NO_OP",
    "PARTITION_ERROR",
    "PENDING",
    "RETRIES_LIMIT",
    "ROWS",
    "RUNNING",
    "STOP",
    "TABLE",
    "VALIDATION_FAILED",
    "WORKFLOW",
    "WORKFLOW_CONTROLLER",
    "WORKLOADRUN_TIMEOUT",
    "CheckpointPVCMissing",
    "CordonedNodesExcluded",
    "DependencyCreateFailed",
    "Group",
    "HeterogeneousGPUFiltered",
    "InsufficientGPUCapacity",
    "JobLaunched",
    "JobObserved",
    "NoNodesFound",
    "NoOverridesMatched",
    "NodeListFailed",
    "OverrideApplied",
    "OverrideNoOp",
    "OverridesFailed",
    "PartitionFailed",
    "Partitioned",
    "PlatformsMixed",
    "SpecUpdated",
    "Submitted",
    "Threshold",
    "Tick",
    "WorkflowMachine",
    "WorkflowStatus",
    "partition_problem",
]


# -- group bookkeeping (see _groups) ----------------------------------------------------------
def plan(status: WorkflowStatus, obs: Observation) -> Plan:
    groups = list(status.groups)
    if isinstance(obs, JobObserved) and obs.group < len(groups):
        groups[obs.group] = replace(
            groups[obs.group],
            job_state=obs.state,
            job_reason=obs.reason,
            hardware_failed=obs.hardware_failed,
            validation_failed=obs.validation_failed,
            awaiting_validation=obs.awaiting_validation,
            workload_start_time=obs.workload_start_time,
            workload_exists=obs.workload_exists,
        )
    return _groups.plan(status, groups, obs.at, obs.is_tick)


def context(status: WorkflowStatus) -> dict[str, Any]:
    return {
        "iteration": status.iteration,
        "iterations": status.iterations,
        "running": running(status.groups),
        "completed": status.iteration - 1,
        "failed": status.failed_groups,
        "hardware_note": HARDWARE_NOTE if status.hardware_failures else "",
    }


def group_timer(status: WorkflowStatus) -> datetime | None:
    """When a Tick next moves a Running group: a drain grace or a timeout runs out (ADR 0149).
    Every Tick row of InProgress is taken then; the first whose guard holds decides."""
    return _groups.deadline(status, status.groups)


# -- guards -----------------------------------------------------------------------------------
def _outcome(status: WorkflowStatus, obs: Observation) -> Plan:
    return plan(status, obs)


def finishes_succeeded(status: WorkflowStatus, obs: Observation) -> bool:
    return _outcome(status, obs).outcome == SUCCEEDED


def finishes_failed(status: WorkflowStatus, obs: Observation) -> bool:
    return _outcome(status, obs).outcome == FAILED


def finishes_failed_hardware(status: WorkflowStatus, obs: Observation) -> bool:
    p = _outcome(status, obs)
    return p.outcome == FAILED and p.hardware


def finishes_failed_validation(status: WorkflowStatus, obs: Observation) -> bool:
    p = _outcome(status, obs)
    return p.outcome == FAILED and p.validation and not p.hardware


def finishes_iteration(status: WorkflowStatus, obs: Observation) -> bool:
    return _outcome(status, obs).outcome == ITERATION_COMPLETED


def stale_job(status: WorkflowStatus, obs: JobObserved) -> bool:
    """A report from a Job that is not its group's current one (an earlier try, or unknown)."""
    if obs.group >= len(status.groups):
        return True
    g = status.groups[obs.group]
    return g.state != RUNNING or g.job_uid != obs.job_uid


def group_busy(status: WorkflowStatus, obs: JobLaunched) -> bool:
    return obs.group < len(status.groups) and status.groups[obs.group].state != PENDING


def dependency_collision(status: WorkflowStatus, obs: DependencyCreateFailed) -> bool:
    return obs.collision == "dependency"


def job_collision(status: WorkflowStatus, obs: DependencyCreateFailed) -> bool:
    return obs.collision == "job"


# -- effects ----------------------------------------------------------------------------------
def _enter(status: WorkflowStatus, obs: Observation, row: Row, **changes: Any) -> WorkflowStatus:
    """Apply ``changes`` first, then render the row's message against the new status."""
    moved = replace(status, **changes)
    result: WorkflowStatus = exclusive(moved, obs, row, row.render(obs, context(moved)))
    return result


def submitted(status: WorkflowStatus, obs: Submitted, row: Row) -> WorkflowStatus:
    timeout = obs.timeout_per_job_s
    if timeout is None and obs.owner_kind == "WorkloadRun":
        timeout = WORKLOADRUN_TIMEOUT
    return replace(
        status,
        owner_kind=obs.owner_kind,
        owner=obs.owner,
        owner_uid=obs.owner_uid,
        category=obs.category,
        iterations=obs.iterations,
        retry_failed_groups=obs.retry_failed_groups,
        timeout_per_job_s=timeout,
        drain_grace_s=obs.drain_grace_s,
        workload_kind=obs.workload_kind,
        thresholds=obs.thresholds,
        max_restarts=obs.max_restarts,
        checkpoint=obs.checkpoint,
        generation=obs.generation,
    )


def enter(status: WorkflowStatus, obs: Observation, row: Row) -> WorkflowStatus:
    return _enter(status, obs, row)


def partitioned(status: WorkflowStatus, obs: Partitioned, row: Row) -> WorkflowStatus:
    return _enter(
        status,
        obs,
        row,
        nodes=obs.nodes,
        nodes_per_job=obs.nodes_per_job,
        iteration=1,
        groups=tuple(Group(i) for i in range(obs.groups)),
    )


def launched(status: WorkflowStatus, obs: JobLaunched, row: Row) -> WorkflowStatus:
    if obs.group >= len(status.groups):
        raise InvalidObservation(
            f"workflow: JobLaunched for group {obs.group}, but there are "
            f"{len(status.groups)} groups (0-based)"
        )
    groups = list(status.groups)
    groups[obs.group] = Group(
        obs.group,
        RUNNING,
        obs.job,
        obs.uid,
        retries=groups[obs.group].retries,
        started_at=obs.at,
    )
    return _enter(status, obs, row, groups=tuple(groups))


def advance(status: WorkflowStatus, obs: Observation, row: Row) -> WorkflowStatus:
    """A Job report or a Tick: groups move; the Workflow's condition follows the plan.

    Nothing moved: the status is returned as it is (no write). The Failed write carries the
    Workflow's own ValidationFailed (status-only) when a failed group's Job had one.
    """
    p = plan(status, obs)
    if p.outcome == RUNNING and p.groups == status.groups:
        return status
    result = _enter(
        status,
        obs,
        row,
        groups=p.groups,
        iteration=p.iteration,
        failed_groups=p.failed_groups,
        hardware_failures=p.hardware,
        validation_failures=p.validation,
    )
    if p.outcome == FAILED and p.validation:
        result = with_condition(
            result,
            VALIDATION_FAILED,
            TRUE,
            JOB_VALIDATION_FAILED,
            MSG_VALIDATION,
            obs.at,
            result.generation,
        )
    return result


N, W = EventType.NORMAL, EventType.WARNING
IP, S, F = IN_PROGRESS, SUCCEEDED, FAILED
STOP = "a terminal Workflow returns early: no write, no event"


def _outcome_rows(obs: type[Observation]) -> tuple[Row, ...]:
    """The rows a Job report or a Tick can take from InProgress; the first match wins."""
    timer = group_timer if obs.is_tick else None
    return (
        Row(
            IP,
            obs,
            to=S,
            reason=JOB_COMPLETED,
            event=N,
            message=MSG_COMPLETED,
            guard=finishes_succeeded,
            effect=advance,
            deadline=timer,
        ),
        Row(
            IP,
            obs,
            to=F,
            reason=JOB_HARDWARE_FAILED,
            event=W,
            message=MSG_FAILED,
            guard=finishes_failed_hardware,
            effect=advance,
            deadline=timer,
        ),
        Row(
            IP,
            obs,
            to=F,
            reason=JOB_VALIDATION_FAILED,
            event=W,
            message=MSG_FAILED,
            guard=finishes_failed_validation,
            effect=advance,
            deadline=timer,
            note="the Workflow's own ValidationFailed rides on this write (no event)",
        ),
        Row(
            IP,
            obs,
            to=F,
            reason=ITERATIONS_FAILED,
            event=W,
            message=MSG_FAILED,
            guard=finishes_failed,
            effect=advance,
            deadline=timer,
        ),
        Row(
            IP,
            obs,
            to=SAME,
            reason=ITERATION_COMPLETED,
            message=MSG_ITERATION,
            guard=finishes_iteration,
            effect=advance,
            deadline=timer,
        ),
        Row(
            IP,
            obs,
            to=SAME,
            reason=JOB_RUNNING,
            message=MSG_RUNNING,
            effect=advance,
            deadline=timer,
            note="groups move (drain, retry, timeout), or nothing changes and nothing is written",
        ),
    )


ROWS: tuple[Row, ...] = (
    Row(NEW, Submitted, to=SAME, effect=submitted, note="the spec; no condition yet"),
    *SPEC_UPDATED_ROWS,
    # Discovery and partitioning (the first pass)
    Row(
        NEW,
        OverridesFailed,
        to=F,
        reason=OVERRIDE_ERROR,
        event=W,
        message=MSG_OVERRIDE,
        effect=enter,
        fallback=True,
    ),
    Row(
        NEW,
        CheckpointPVCMissing,
        to=F,
        reason=CHECKPOINT_PVC_MISSING,
        event=W,
        message=MSG_PVC,
        effect=enter,
    ),
    Row(
        NEW,
        NodeListFailed,
        to=F,
        reason=NODE_DISCOVERY_ERROR,
        event=W,
        message=MSG_DISCOVERY,
        effect=enter,
    ),
    Row(
        NEW,
        NoNodesFound,
        to=F,
        reason=NODE_DISCOVERY_ERROR,
        event=W,
        message=MSG_NO_NODES,
        effect=enter,
    ),
    Row(
        NEW,
        PlatformsMixed,
        to=F,
        reason=HETEROGENEOUS_PLATFORM,
        event=W,
        message="{error}",
        effect=enter,
        fallback=True,
    ),
    Row(
        NEW, PartitionFailed, to=F, reason=PARTITION_ERROR, event=W, message="{error}", effect=enter
    ),
    Row(
        LIVE,
        DependencyCreateFailed,
        to=F,
        reason=DEPENDENCY_NAME_COLLISION,
        event=W,
        message="{error}",
        guard=dependency_collision,
        effect=enter,
    ),
    Row(
        LIVE,
        DependencyCreateFailed,
        to=F,
        reason=JOB_NAME_COLLISION,
        event=W,
        message="{error}",
        guard=job_collision,
        effect=enter,
    ),
    Row(
        LIVE,
        DependencyCreateFailed,
        to=F,
        reason=DEPENDENCY_CREATION_ERROR,
        event=W,
        message=MSG_DEPENDENCY,
        effect=enter,
    ),
    Row(
        NEW,
        Partitioned,
        to=IP,
        reason=GROUPS_PARTITIONED,
        event=N,
        message=MSG_PARTITIONED,
        effect=partitioned,
    ),
    ignore(IP, Partitioned, "partitioned already"),
    # Jobs
    ignore(IP, JobLaunched, "the group runs a Job already", guard=group_busy),
    Row(IP, JobLaunched, to=SAME, reason=JOB_CREATED, message=MSG_RUNNING, effect=launched),
    ignore(IP, JobObserved, "not the group's current Job", guard=stale_job),
    *_outcome_rows(JobObserved),
    ignore(NEW, JobObserved, "no groups before partitioning"),
    *_outcome_rows(Tick),
    ignore(NEW, Tick, "no timer before partitioning"),
    # Informational action events: no status, may repeat
    action_row(CordonedNodesExcluded, CORDONED_NODES_EXCLUDED, W, MSG_CORDONED),
    action_row(HeterogeneousGPUFiltered, HETEROGENEOUS_GPU, W, MSG_HETEROGENEOUS_GPU),
    action_row(InsufficientGPUCapacity, INSUFFICIENT_GPU_CAPACITY, W, MSG_INSUFFICIENT_GPU),
    action_row(OverrideApplied, OVERRIDE_APPLIED, N, "{detail}"),
    action_row(OverrideNoOp, OVERRIDE_NO_OP, W, "{detail}"),
    action_row(NoOverridesMatched, NO_OVERRIDES_MATCHED, N, "{detail}"),
    # Terminal: absorbing; discovery observations come only before partitioning
    *(
        ignore((IP, *TERMINAL), o, STOP)
        for o in (
            Submitted,
            OverridesFailed,
            CheckpointPVCMissing,
            NodeListFailed,
            NoNodesFound,
            PlatformsMixed,
            PartitionFailed,
        )
    ),
    *(
        ignore(TERMINAL, o, STOP)
        for o in (SpecUpdated, DependencyCreateFailed, Partitioned, JobLaunched, JobObserved, Tick)
    ),
)

TABLE = Table(
    "workflow",
    states=STATES,
    initial=NEW,
    terminal=TERMINAL,
    observations=OBSERVATIONS,
    rows=ROWS,
    context=("iteration", "iterations", "running", "completed", "failed", "hardware_note"),
)


def _group_limits() -> Limits:
    return Partitioned.limits


def _largest_status(machine: Any, groups: int) -> WorkflowStatus:
    """A Workflow of ``groups`` groups, each with a Job of the longest name Kubernetes takes
    (63 characters) and its uid launched, started and failed: the most a status holds at that
    many groups (the stores that bound a record measure it, ADR 0144)."""
    at = datetime(2026, 1, 1, tzinfo=UTC)
    ref = ObjectRef("Workflow", "n" * 63, "w" * 63, str(uuid.UUID(int=0)))
    start = [
        Submitted(at=at, owner_kind="WorkloadRun", owner="o" * 63, owner_uid=ref.uid),
        Partitioned(at=at, nodes=groups, groups=groups, nodes_per_job=1),
    ]
    status: WorkflowStatus = machine.fold(ref, start)
    filled = tuple(
        attrs.evolve(
            group,
            state="Running",
            job=f"{'j' * 50}-{i:012d}",
            job_uid=str(uuid.UUID(int=(i + 1) * 0x9E3779B97F4A7C15 % (1 << 128))),
            retries=i % 7,
            started_at=at + timedelta(seconds=i),
            job_state="Failed",
            job_reason="BackoffLimitExceeded",
            workload_start_time=at + timedelta(seconds=i, microseconds=i),
            failed_at=at + timedelta(seconds=2 * i + 1),
        )
        for i, group in enumerate(status.groups)
    )
    return attrs.evolve(status, groups=filled)


class WorkflowMachine(ConditionMachine[WorkflowStatus]):
    """The Workflow machine (:data:`~lifecycle.machines.WORKFLOW`): node discovery, partitioning and
    the Jobs of a certification run.

    Its table, observations and reasons: ``lifecycle table workflow`` and the machine page.
    """

    name: ClassVar[str] = "workflow"
    kind: ClassVar[str] = "Workflow"
    api_version: ClassVar[str] = "nvcre.nvidia.com/v1alpha1"
    status_type: ClassVar[type[Any]] = WorkflowStatus
    table: ClassVar[Table] = TABLE
    controller: ClassVar[str] = WORKFLOW_CONTROLLER
    #: A status keeps a record per group: it grows with ``Partitioned.limits['groups']``.
    growth: ClassVar[Growth | None] = Growth(_group_limits, "groups", _largest_status)
    analysis_allowances: ClassVar[Mapping[str, str]] = allow_refused(
        "a Job is launched for a planned group: before Partitioned there is none, so a launch "
        "is a host bug, refused loudly",
        (NEW,),
        (JobLaunched,),
    )

    def context(self, status: WorkflowStatus, obs: Observation) -> Mapping[str, Any]:
        return context(status)

    def fallback_message(self, ref: ObjectRef, flip: Flip, error: Exception) -> str:
        """The two fallbacks upstream names, in its words; any other: the default.

        Args:
            ref: the Workflow.
            flip: the change whose write failed.
            error: the store's error.

        Returns:
            The Warning's message.
        """
        tail = f"; recording the Workflow Failed condition also failed: {redact(str(error))}"
        if flip.reason == HETEROGENEOUS_PLATFORM:
            return f"Platform detection failed: {flip.message}{tail}"
        if flip.reason == OVERRIDE_ERROR:
            cause = flip.message.removeprefix(MSG_OVERRIDE.format(error=""))
            return f"Override failed: {cause}{tail}"
        return super().fallback_message(ref, flip, error)


WORKFLOW = WorkflowMachine()
