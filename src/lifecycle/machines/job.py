"""The Job lifecycle: one workload (``{Kind}/{job}-workload``) on one group of nodes.

Behaviour follows ``docs/upstream/workflow-job-certification.md`` ("Job", and "When an
event is sent"): the exclusive set InProgress/Succeeded/Failed, and two verdict conditions
outside it, ``HardwareFailed`` (True only) and ``ValidationFailed`` (performance thresholds,
decided after Succeeded; a miss never fails the Job).

A terminal Job is never rewritten: every row from Succeeded or Failed leaves the phase alone
(the stop guard), and the runner re-applies on every write attempt, so a stale write that
loses to a timeout finds the Job terminal and emits nothing. The Workflow's timeout write
(:class:`TimedOut`, site 16) is exclusive here (InProgress becomes False, as upstream fixed
later) and its event is reported by ``workflow-controller``.

Threshold language (not given upstream, chosen here): a threshold is a measurement ``key`` and
an expression ``OP NUMBER`` with OP one of ``>= <= > < == !=``.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, ClassVar

from .._core.analysis import allow_refused
from .._core.machine import Verdict, replace
from .._core.observation import Observation, Tick
from .._core.refs import Condition, EventType
from .._core.table import SAME, Row, Table, ignore
from .._core.transition import Flip
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
    go_duration,
    go_list,
    seconds,
    with_condition,
)
from ._job_records import (
    DEFAULT_MEASUREMENT_TIMEOUT,
    DEFAULT_WORKLOAD_KIND,
    HARDWARE_FAILED,
    HARDWARE_FAILURE_DETECTED,
    JOB_CONTROLLER,
    JOB_TIMED_OUT,
    MEASUREMENT_CREATION_ERROR,
    MSG_BUILD_FAILED,
    MSG_COMPLETED,
    MSG_COMPLETED_DETAIL,
    MSG_CREATE_REJECTED,
    MSG_CREATED,
    MSG_DELETED,
    MSG_FAILED,
    MSG_FAILED_DETAIL,
    MSG_HARDWARE,
    MSG_MEASUREMENT_ERROR,
    MSG_PENDING,
    MSG_RESTARTING,
    MSG_RUNNING,
    MSG_STALLED,
    MSG_STALLED_AT_STARTUP,
    MSG_TIMED_OUT,
    MSG_UNSUPPORTED,
    OBSERVATIONS,
    RESTARTS_LIMIT,
    THRESHOLD_VIOLATION,
    VALIDATION_FAILED,
    WORKFLOW_CONTROLLER,
    WORKLOAD_COMPLETED,
    WORKLOAD_CREATED,
    WORKLOAD_CREATION_ERROR,
    WORKLOAD_FAILED,
    WORKLOAD_FAILURE,
    WORKLOAD_PENDING,
    WORKLOAD_RESTARTING,
    WORKLOAD_RUNNING,
    WORKLOAD_STALLED,
    BuildFailed,
    CreateRejected,
    FailedNode,
    HardwareFault,
    JobStatus,
    MeasurementCreateFailed,
    MeasurementsReported,
    Submitted,
    TimedOut,
    TrainingStepObserved,
    WorkloadCreated,
    WorkloadFailed,
    WorkloadMissing,
    WorkloadPending,
    WorkloadRunning,
    WorkloadSucceeded,
)
from ._thresholds import (
    INVALID_THRESHOLD_EXPRESSION,
    MEASUREMENT_KEYS,
    MEASUREMENT_TIMEOUT,
    MSG_MEASUREMENT_TIMEOUT,
    MSG_THRESHOLDS_MET,
    THRESHOLD_VIOLATED,
    THRESHOLDS_MET,
    UNKNOWN_THRESHOLD_KEY,
    Decision,
    Measurement,
    Threshold,
    decide,
    merge,
    missing_keys,
)
from ._timers import expiry, ticked

#: The machine, its table and status, and its observation vocabulary (defined in
#: ``_job_records.py``, importable from here).
__all__ = [
    "DEFAULT_MEASUREMENT_TIMEOUT",
    "DEFAULT_WORKLOAD_KIND",
    "HARDWARE_FAILED",
    "HARDWARE_FAILURE_DETECTED",
    "INVALID_THRESHOLD_EXPRESSION",
    "JOB",
    "JOB_CONTROLLER",
    "JOB_TIMED_OUT",
    "MEASUREMENT_CREATION_ERROR",
    "MEASUREMENT_KEYS",
    "MEASUREMENT_TIMEOUT",
    "MSG_BUILD_FAILED",
    "MSG_COMPLETED",
    "MSG_COMPLETED_DETAIL",
    "MSG_CREATED",
    "MSG_CREATE_REJECTED",
    "MSG_DELETED",
    "MSG_FAILED",
    "MSG_FAILED_DETAIL",
    "MSG_HARDWARE",
    "MSG_MEASUREMENT_ERROR",
    "MSG_PENDING",
    "MSG_RESTARTING",
    "MSG_RUNNING",
    "MSG_STALLED",
    "MSG_STALLED_AT_STARTUP",
    "MSG_THRESHOLDS_MET",
    "MSG_TIMED_OUT",
    "MSG_UNSUPPORTED",
    "OBSERVATIONS",
    "RESTARTS_LIMIT",
    "ROWS",
    "STOP",
    "TABLE",
    "THRESHOLDS_MET",
    "THRESHOLD_VIOLATED",
    "THRESHOLD_VIOLATION",
    "UNKNOWN_THRESHOLD_KEY",
    "VALIDATION_FAILED",
    "WORKFLOW_CONTROLLER",
    "WORKLOAD_COMPLETED",
    "WORKLOAD_CREATED",
    "WORKLOAD_CREATION_ERROR",
    "WORKLOAD_FAILED",
    "WORKLOAD_FAILURE",
    "WORKLOAD_PENDING",
    "WORKLOAD_RESTARTING",
    "WORKLOAD_RUNNING",
    "WORKLOAD_STALLED",
    "BuildFailed",
    "CreateRejected",
    "FailedNode",
    "HardwareFault",
    "JobMachine",
    "JobStatus",
    "Measurement",
    "MeasurementCreateFailed",
    "MeasurementsReported",
    "SpecUpdated",
    "Submitted",
    "Threshold",
    "Tick",
    "TimedOut",
    "TrainingStepObserved",
    "WorkloadCreated",
    "WorkloadFailed",
    "WorkloadMissing",
    "WorkloadPending",
    "WorkloadRunning",
    "WorkloadSucceeded",
]


def _validated(status: JobStatus, at: datetime, decided: Decision) -> JobStatus:
    value, reason, message = decided
    failed_nodes = status.failed_nodes
    if value == TRUE and not failed_nodes:
        failed_nodes = tuple(FailedNode(n, THRESHOLD_VIOLATION) for n in status.nodes)
    return with_condition(
        status,
        VALIDATION_FAILED,
        value,
        reason,
        message,
        at,
        status.generation,
        failed_nodes=failed_nodes,
    )


def _validate(status: JobStatus, at: datetime) -> JobStatus:
    decided = None
    if status.awaiting_validation:
        decided = decide(status.thresholds, status.measurement_keys, status.measurements)
    return status if decided is None else _validated(status, at, decided)


# -- guards -----------------------------------------------------------------------------------
def can_restart(status: JobStatus, obs: Observation) -> bool:
    return status.checkpoint and status.restarts < status.max_restarts


def restarting(status: JobStatus, obs: Observation) -> bool:
    return status.reason == WORKLOAD_RESTARTING


def has_message(status: JobStatus, obs: WorkloadFailed | WorkloadSucceeded) -> bool:
    return bool(obs.message)


def unsupported(status: JobStatus, obs: BuildFailed) -> bool:
    return obs.unsupported


def stalled_at_startup(status: JobStatus, obs: Observation) -> bool:
    limit, since = status.startup_timeout_s, status.running_since
    if limit is None or since is None or status.last_step_at is not None:
        return False
    return seconds(obs.at, since) > limit


def stalled(status: JobStatus, obs: Observation) -> bool:
    limit, last = status.stall_threshold_s, status.last_step_at
    return limit is not None and last is not None and seconds(obs.at, last) > limit


def stalled_can_restart(status: JobStatus, obs: Observation) -> bool:
    return (stalled_at_startup(status, obs) or stalled(status, obs)) and can_restart(status, obs)


def awaiting_validation(status: JobStatus, obs: Observation) -> bool:
    return status.awaiting_validation


def measurement_timed_out(status: JobStatus, obs: Observation) -> bool:
    if not status.awaiting_validation or not missing_keys(status.thresholds, status.measurements):
        return False
    succeeded = status.condition(SUCCEEDED)
    since = None if succeeded is None else succeeded.last_transition_time
    return since is not None and seconds(obs.at, since) >= status.measurement_timeout_s


# -- deadlines: when each timer row's guard first holds (ADR 0149) ----------------------------
def startup_deadline(status: JobStatus) -> datetime | None:
    limit, since = status.startup_timeout_s, status.running_since
    if limit is None or since is None or status.last_step_at is not None:
        return None
    return expiry(since, limit, ticked(stalled_at_startup, status))


def stall_deadline(status: JobStatus) -> datetime | None:
    limit, last = status.stall_threshold_s, status.last_step_at
    if limit is None or last is None:
        return None
    return expiry(last, limit, ticked(stalled, status))


def restart_deadline(status: JobStatus) -> datetime | None:
    if not (status.checkpoint and status.restarts < status.max_restarts):  # can_restart
        return None
    found = [d for d in (startup_deadline(status), stall_deadline(status)) if d is not None]
    return min(found, default=None)


def measurement_deadline(status: JobStatus) -> datetime | None:
    if not status.awaiting_validation or not missing_keys(status.thresholds, status.measurements):
        return None
    succeeded = status.condition(SUCCEEDED)
    since = None if succeeded is None else succeeded.last_transition_time
    if since is None:
        return None
    return expiry(since, status.measurement_timeout_s, ticked(measurement_timed_out, status))


def new_failed_node(status: JobStatus, obs: HardwareFault) -> bool:
    return FailedNode(obs.node, obs.reason) not in status.failed_nodes


# -- effects ----------------------------------------------------------------------------------
def context(status: JobStatus) -> dict[str, Any]:
    return {
        "workload": status.workload,
        "restart": status.restarts + 1,
        "max_restarts": status.max_restarts,
    }


def _enter(status: JobStatus, obs: Observation, row: Row, **changes: Any) -> JobStatus:
    result: JobStatus = exclusive(status, obs, row, row.render(obs, context(status)), **changes)
    return result


def submitted(status: JobStatus, obs: Submitted, row: Row) -> JobStatus:
    """The spec; an owner already known (the Workflow's link) is kept if none is given."""
    return replace(
        status,
        workload_kind=obs.workload_kind,
        workflow=obs.workflow or status.workflow,
        workflow_uid=obs.workflow_uid or status.workflow_uid,
        group=obs.group if obs.workflow_uid else status.group,
        nodes=obs.nodes,
        thresholds=obs.thresholds,
        measurement_keys=obs.measurement_keys,
        measurement_timeout_s=obs.measurement_timeout_s,
        max_restarts=obs.max_restarts,
        checkpoint=obs.checkpoint,
        startup_timeout_s=obs.startup_timeout_s,
        stall_threshold_s=obs.stall_threshold_s,
        generation=obs.generation,
    )


def created(status: JobStatus, obs: Observation, row: Row) -> JobStatus:
    return _enter(status, obs, row, workload_exists=True)


def enter(status: JobStatus, obs: Observation, row: Row) -> JobStatus:
    return _enter(status, obs, row)


def running(status: JobStatus, obs: Observation, row: Row) -> JobStatus:
    """``workloadStartTime`` is set once; ``running_since`` once per workload incarnation."""
    return _enter(
        status,
        obs,
        row,
        workload_exists=True,
        workload_start_time=status.workload_start_time or obs.at,
        running_since=status.running_since or obs.at,
    )


def stepped(status: JobStatus, obs: Observation, row: Row) -> JobStatus:
    return replace(status, last_step_at=obs.at)


def restart(status: JobStatus, obs: Observation, row: Row) -> JobStatus:
    return _enter(
        status,
        obs,
        row,
        restarts=status.restarts + 1,
        workload_exists=False,
        running_since=None,
        last_step_at=None,
    )


def workload_failed(status: JobStatus, obs: WorkloadFailed, row: Row) -> JobStatus:
    """``setJobFailed``: its extra captures the failure log and seeds failedNodes."""
    seeded = status.failed_nodes or tuple(FailedNode(n, WORKLOAD_FAILURE) for n in obs.nodes)
    return _enter(status, obs, row, failure_log=obs.failure_log, failed_nodes=seeded)


def succeeded(status: JobStatus, obs: Observation, row: Row) -> JobStatus:
    """Succeeded, then (thresholds given) the verdict at once if it can be decided now."""
    return _validate(_enter(status, obs, row), obs.at)


def _merge(status: JobStatus, obs: MeasurementsReported) -> JobStatus:
    merged = merge(status.measurements, obs.values)
    return status if merged == status.measurements else replace(status, measurements=merged)


def measured(status: JobStatus, obs: MeasurementsReported, row: Row) -> JobStatus:
    return _merge(status, obs)


def measured_validate(status: JobStatus, obs: MeasurementsReported, row: Row) -> JobStatus:
    return _validate(_merge(status, obs), obs.at)


def measurement_timeout(status: JobStatus, obs: Observation, row: Row) -> JobStatus:
    message = MSG_MEASUREMENT_TIMEOUT.format(
        go_duration(status.measurement_timeout_s),
        go_list(missing_keys(status.thresholds, status.measurements)),
    )
    return _validated(status, obs.at, (TRUE, MEASUREMENT_TIMEOUT, message))


def hardware_failed(status: JobStatus, obs: HardwareFault, row: Row) -> JobStatus:
    """``mergeFailedNodes`` found a new pair: HardwareFailed True, the message lists the nodes
    (a later node only changes the message)."""
    failed = (*status.failed_nodes, FailedNode(obs.node, obs.reason))
    seeds = (THRESHOLD_VIOLATION, WORKLOAD_FAILURE)
    nodes = list(dict.fromkeys(f.node for f in failed if f.reason not in seeds))
    return with_condition(
        status,
        HARDWARE_FAILED,
        TRUE,
        HARDWARE_FAILURE_DETECTED,
        MSG_HARDWARE.format(go_list(nodes)),
        obs.at,
        status.generation,
        failed_nodes=failed,
    )


N, W = EventType.NORMAL, EventType.WARNING
IP, S, F = IN_PROGRESS, SUCCEEDED, FAILED
STOP = "stop guard: a terminal Job is never rewritten"
ROWS: tuple[Row, ...] = (
    Row(NEW, Submitted, to=SAME, effect=submitted, note="the spec; no condition yet"),
    ignore((IP, *TERMINAL), Submitted, "the Job exists; its spec was read already"),
    *SPEC_UPDATED_ROWS,
    # Creation
    Row(
        NEW,
        WorkloadCreated,
        to=IP,
        reason=WORKLOAD_CREATED,
        event=N,
        message=MSG_CREATED,
        effect=created,
    ),
    Row(
        IP,
        WorkloadCreated,
        to=SAME,
        reason=WORKLOAD_CREATED,
        message=MSG_CREATED,
        guard=restarting,
        effect=created,
    ),
    ignore(IP, WorkloadCreated, "the workload exists already"),
    Row(
        LIVE,
        BuildFailed,
        to=F,
        reason=WORKLOAD_CREATION_ERROR,
        event=W,
        message=MSG_UNSUPPORTED,
        guard=unsupported,
        effect=enter,
    ),
    Row(
        LIVE,
        BuildFailed,
        to=F,
        reason=WORKLOAD_CREATION_ERROR,
        event=W,
        message=MSG_BUILD_FAILED,
        effect=enter,
    ),
    action_row(
        CreateRejected,
        WORKLOAD_CREATION_ERROR,
        W,
        MSG_CREATE_REJECTED,
        note="no write: the error is returned and the reconcile backs off",
    ),
    # The workload, polled
    Row(IP, WorkloadPending, to=SAME, reason=WORKLOAD_PENDING, message=MSG_PENDING, effect=enter),
    Row(IP, WorkloadRunning, to=SAME, reason=WORKLOAD_RUNNING, message=MSG_RUNNING, effect=running),
    Row(IP, TrainingStepObserved, to=SAME, effect=stepped, note="resets the stall timer"),
    Row(
        IP,
        WorkloadFailed,
        to=SAME,
        reason=WORKLOAD_RESTARTING,
        message=MSG_RESTARTING,
        guard=can_restart,
        effect=restart,
    ),
    Row(
        IP,
        WorkloadFailed,
        to=F,
        reason=WORKLOAD_FAILED,
        event=W,
        message=MSG_FAILED_DETAIL,
        guard=has_message,
        effect=workload_failed,
    ),
    Row(
        IP,
        WorkloadFailed,
        to=F,
        reason=WORKLOAD_FAILED,
        event=W,
        message=MSG_FAILED,
        effect=workload_failed,
    ),
    Row(
        IP,
        WorkloadMissing,
        to=SAME,
        reason=WORKLOAD_RESTARTING,
        message=MSG_RESTARTING,
        guard=can_restart,
        effect=restart,
    ),
    Row(
        IP,
        WorkloadMissing,
        to=F,
        reason=WORKLOAD_FAILED,
        event=W,
        message=MSG_DELETED,
        effect=enter,
    ),
    Row(
        IP,
        Tick,
        to=SAME,
        reason=WORKLOAD_RESTARTING,
        message=MSG_RESTARTING,
        guard=stalled_can_restart,
        effect=restart,
        deadline=restart_deadline,
    ),
    Row(
        IP,
        Tick,
        to=F,
        reason=WORKLOAD_STALLED,
        event=W,
        message=MSG_STALLED_AT_STARTUP,
        guard=stalled_at_startup,
        effect=enter,
        deadline=startup_deadline,
    ),
    Row(
        IP,
        Tick,
        to=F,
        reason=WORKLOAD_STALLED,
        event=W,
        message=MSG_STALLED,
        guard=stalled,
        effect=enter,
        deadline=stall_deadline,
    ),
    ignore(IP, Tick, "no stall"),
    ignore(NEW, Tick, "no timer before the workload exists"),
    Row(
        IP,
        WorkloadSucceeded,
        to=S,
        reason=WORKLOAD_COMPLETED,
        event=N,
        message=MSG_COMPLETED_DETAIL,
        guard=has_message,
        effect=succeeded,
    ),
    Row(
        IP,
        WorkloadSucceeded,
        to=S,
        reason=WORKLOAD_COMPLETED,
        event=N,
        message=MSG_COMPLETED,
        effect=succeeded,
    ),
    Row(
        LIVE,
        TimedOut,
        to=F,
        reason=JOB_TIMED_OUT,
        event=W,
        message=MSG_TIMED_OUT,
        effect=enter,
        note="site 16",
    ),
    # Verdicts
    Row(LIVE, HardwareFault, to=SAME, guard=new_failed_node, effect=hardware_failed),
    ignore(LIVE, HardwareFault, "this (node, reason) pair is recorded already"),
    ignore(TERMINAL, HardwareFault, "checkNodeHealth skips a terminal Job"),
    Row(LIVE, MeasurementsReported, to=SAME, effect=measured, note="kept for the verdict"),
    Row(S, MeasurementsReported, to=SAME, guard=awaiting_validation, effect=measured_validate),
    ignore(TERMINAL, MeasurementsReported, "no verdict is pending"),
    Row(
        S,
        Tick,
        to=SAME,
        guard=measurement_timed_out,
        effect=measurement_timeout,
        deadline=measurement_deadline,
    ),
    ignore(TERMINAL, Tick, "no timer runs for a decided Job"),
    action_row(
        MeasurementCreateFailed,
        MEASUREMENT_CREATION_ERROR,
        W,
        MSG_MEASUREMENT_ERROR,
        note="non-fatal; repeats on each failing pass",
    ),
    # The stop guard
    *(
        ignore(TERMINAL, o, STOP)
        for o in (
            SpecUpdated,
            WorkloadCreated,
            BuildFailed,
            WorkloadPending,
            WorkloadRunning,
            TrainingStepObserved,
            WorkloadFailed,
            WorkloadMissing,
            WorkloadSucceeded,
            TimedOut,
        )
    ),
)

TABLE = Table(
    "job",
    states=STATES,
    initial=NEW,
    terminal=TERMINAL,
    observations=OBSERVATIONS,
    rows=ROWS,
    context=("workload", "restart", "max_restarts"),
)


def _hardware(status: JobStatus) -> Condition | None:
    return status.condition(HARDWARE_FAILED)


def _validation(status: JobStatus) -> Condition | None:
    return status.condition(VALIDATION_FAILED)


class JobMachine(ConditionMachine[JobStatus]):
    """The Job machine (:data:`~lifecycle.machines.JOB`): one certification workload and its
    threshold verdicts.

    Its table, observations and reasons: ``lifecycle table job`` and the machine page.
    """

    name: ClassVar[str] = "job"
    kind: ClassVar[str] = "Job"
    api_version: ClassVar[str] = "nvcre.nvidia.com/v1alpha1"
    status_type: ClassVar[type[Any]] = JobStatus
    table: ClassVar[Table] = TABLE
    controller: ClassVar[str] = JOB_CONTROLLER
    analysis_allowances: ClassVar[Mapping[str, str]] = allow_refused(
        "the workload does not exist before WorkloadCreated: a report of its progress or end "
        "for a Job that never created one is a host bug, refused loudly",
        (NEW,),
        (WorkloadPending, WorkloadRunning, TrainingStepObserved, WorkloadFailed,
         WorkloadMissing, WorkloadSucceeded),
    )  # fmt: skip
    verdicts: ClassVar[tuple[Verdict[Any], ...]] = (
        Verdict(HARDWARE_FAILED, _hardware),
        Verdict(VALIDATION_FAILED, _validation, on_absent_to_false=EventType.NORMAL),
    )

    def context(self, status: JobStatus, obs: Observation) -> Mapping[str, Any]:
        return context(status)

    def flips(self, before: JobStatus, after: JobStatus) -> tuple[Flip, ...]:
        """The timeout is written by the Workflow controller: its event says so (site 16).

        Args:
            before: the status before the observation.
            after: the status after it.

        Returns:
            The condition flips to emit, a timeout's attributed to the Workflow controller.
        """
        out = super().flips(before, after)
        if after.reason == JOB_TIMED_OUT and before.state != after.state:
            out = tuple(
                replace(f, controller=WORKFLOW_CONTROLLER) if not f.condition else f for f in out
            )
        return out


JOB = JobMachine()
