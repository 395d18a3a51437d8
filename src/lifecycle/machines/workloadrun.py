"""The WorkloadRun lifecycle: a user-facing run that builds one Workflow and mirrors it.

Behaviour follows ``docs/upstream/workflow-job-certification.md`` ("WorkloadRun", and
"When an event is sent": one direct write per pass):

- non-true exclusive conditions get reason ``Superseded`` and no observedGeneration;
- every write is one direct status update (``write_attempts = 1``): a conflict is not
  retried and emits nothing, the next reconcile re-reads;
- the terminal mirror: Workflow Succeeded -> ``WorkflowSucceeded``; Workflow Failed ->
  ``WorkflowValidationFailed`` when its reason is ``JobValidationFailed``, else
  ``WorkflowFailed``, with the Workflow's Failed message; a Workflow that is gone ->
  ``WorkflowDeleted``. Before it, the Workflow's ``ValidationFailed`` is copied as
  ``ValidationFailed=True / ThresholdViolation`` (status-only, no event).

Chosen here (upstream's text is not known): the ``LogProfileNotFound`` note.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, ClassVar

import attrs

from .._core.machine import replace
from .._core.observation import Observation
from .._core.redact import redact
from .._core.refs import Condition, EventType, ObjectRef
from .._core.table import SAME, Row, Table, ignore
from .._core.transition import Flip
from ._conditions import (
    FAILED,
    IN_PROGRESS,
    NEW,
    STATES,
    SUCCEEDED,
    SUPERSEDED,
    TERMINAL,
    TRUE,
    Conditioned,
    ConditionMachine,
    action_row,
    exclusive,
    with_condition,
)

WORKLOADRUN_CONTROLLER = "workloadrun-controller"

# -- reasons ----------------------------------------------------------------------------------
BUILD_FAILED = "BuildFailed"
WORKFLOW_CREATED = "WorkflowCreated"
WORKFLOW_CREATION_ERROR = "WorkflowCreationError"
WORKFLOW_SUCCEEDED = "WorkflowSucceeded"
WORKFLOW_VALIDATION_FAILED = "WorkflowValidationFailed"
WORKFLOW_FAILED = "WorkflowFailed"
WORKFLOW_DELETED = "WorkflowDeleted"
LOG_PROFILE_NOT_FOUND = "LogProfileNotFound"
VALIDATION_FAILED = "ValidationFailed"
THRESHOLD_VIOLATION = "ThresholdViolation"
#: The Workflow's Failed reason that makes the run's reason WorkflowValidationFailed.
JOB_VALIDATION_FAILED = "JobValidationFailed"

# -- messages ---------------------------------------------------------------------------------
MSG_BUILD_FAILED = "workloadrun {name}: exec framework selected but spec.framework.exec is nil"
MSG_CREATED = "Workflow {workflow} created"
MSG_CREATE_FAILED = "Failed to create Workflow {workflow}: {error}"
MSG_SUCCEEDED = "Workflow completed successfully"
MSG_DELETED = "Workflow was deleted"
MSG_LOG_PROFILE = "Log profile {profile} not found"


@attrs.frozen(slots=True)
class WorkloadRunStatus(Conditioned):
    """A WorkloadRun's status: its conditions (``state`` is their true type) and bookkeeping.

    Attributes:
        name: the WorkloadRun's name.
        conditions: the run's conditions, the exclusive set first; the true one is its state.
        clock: the ``at`` of the last observation that changed the status: a Tick before it is
            refused, so time never goes back.
        workflow: the name of the run's Workflow.
        workflow_uid: that Workflow's UID, so a recreated Workflow of the same name is not
            mistaken for it.
        workflow_state: the Workflow's state as last mirrored.
        workflow_reason: the Workflow's reason as last mirrored.
        workflow_message: the Workflow's message as last mirrored.
    """

    name: str = ""
    conditions: tuple[Condition, ...] = ()
    clock: datetime | None = None
    workflow: str = ""
    workflow_uid: str = ""
    #: The Workflow's condition as last mirrored.
    workflow_state: str = ""
    workflow_reason: str = ""
    workflow_message: str = ""


# -- observations -----------------------------------------------------------------------------
@attrs.frozen(slots=True, kw_only=True)
class ExecFrameworkMissing(Observation):
    """The build guard: the exec framework is selected but ``spec.framework.exec`` is nil."""


@attrs.frozen(slots=True, kw_only=True)
class WorkflowCreated(Observation):
    """The Workflow ``workflow`` (uid ``uid``) was created for the run: the WorkloadRun is in
    progress (``WorkflowCreated``).

    Attributes:
        workflow: the Workflow's name.
        uid: its UID, when the create returned one.
    """

    workflow: str
    uid: str = ""


@attrs.frozen(slots=True, kw_only=True)
class WorkflowCreateFailed(Observation):
    """Create failed; ``already_exists`` requeues without a write or an event.

    Attributes:
        workflow: the Workflow's name.
        error: why the create failed.
        already_exists: the name is taken: the run requeues and reads the Workflow instead.
    """

    workflow: str
    error: str
    already_exists: bool = False


@attrs.frozen(slots=True, kw_only=True)
class WorkflowObserved(Observation):
    """The run's Workflow as committed (wired by the Workflow -> WorkloadRun link).

    Attributes:
        workflow: the Workflow's name; another than the run's is ignored.
        uid: its UID.
        state: its state.
        reason: its reason.
        message: its message.
        validation_failed: its Jobs' measurements failed their thresholds.
        validation_message: the ValidationFailed condition's message, copied to the run.
    """

    workflow: str
    uid: str = ""
    state: str = ""
    reason: str = ""
    message: str = ""
    validation_failed: bool = False
    validation_message: str = ""


@attrs.frozen(slots=True, kw_only=True)
class WorkflowGone(Observation):
    """The run's Workflow was not found."""


@attrs.frozen(slots=True, kw_only=True)
class LogProfileNotFound(Observation):
    """A measurement tier could not find its log profile (an action Warning only).

    Attributes:
        profile: the log profile's name.
    """

    profile: str


OBSERVATIONS: tuple[type[Observation], ...] = (
    ExecFrameworkMissing,
    WorkflowCreated,
    WorkflowCreateFailed,
    WorkflowObserved,
    WorkflowGone,
    LogProfileNotFound,
)


# -- guards -----------------------------------------------------------------------------------
def already_exists(status: WorkloadRunStatus, obs: WorkflowCreateFailed) -> bool:
    """The create failed because the Workflow exists already.

    Args:
        status: the run.
        obs: the failed create.

    Returns:
        Whether the name was taken.
    """
    return obs.already_exists


def other_workflow(status: WorkloadRunStatus, obs: WorkflowObserved) -> bool:
    """The report is of another Workflow than the run's (another name, or another UID).

    Args:
        status: the run.
        obs: the Workflow as committed.

    Returns:
        Whether it is another Workflow.
    """
    if obs.workflow != status.workflow:
        return True
    return bool(status.workflow_uid and obs.uid and obs.uid != status.workflow_uid)


def workflow_succeeded(status: WorkloadRunStatus, obs: WorkflowObserved) -> bool:
    """The Workflow succeeded.

    Args:
        status: the run.
        obs: the Workflow as committed.

    Returns:
        Whether its state is ``Succeeded``.
    """
    return obs.state == SUCCEEDED


def workflow_failed(status: WorkloadRunStatus, obs: WorkflowObserved) -> bool:
    """The Workflow failed.

    Args:
        status: the run.
        obs: the Workflow as committed.

    Returns:
        Whether its state is ``Failed``.
    """
    return obs.state == FAILED


def workflow_failed_validation(status: WorkloadRunStatus, obs: WorkflowObserved) -> bool:
    """The Workflow failed because its Jobs failed validation.

    Args:
        status: the run.
        obs: the Workflow as committed.

    Returns:
        Whether it failed with ``JobValidationFailed``.
    """
    return obs.state == FAILED and obs.reason == JOB_VALIDATION_FAILED


# -- effects ----------------------------------------------------------------------------------
def _enter(
    status: WorkloadRunStatus, obs: Observation, row: Row, **changes: Any
) -> WorkloadRunStatus:
    """A direct write: Superseded for the non-true types, no observedGeneration."""
    message = row.render(obs, {"name": status.name})
    result: WorkloadRunStatus = exclusive(
        status, obs, row, message, generation=False, others=SUPERSEDED, **changes
    )
    return result


def enter(status: WorkloadRunStatus, obs: Observation, row: Row) -> WorkloadRunStatus:
    """Enter the row's state, the other conditions ``Superseded``.

    Args:
        status: the run.
        obs: the observation.
        row: the row that fired.

    Returns:
        The run's next status.
    """
    return _enter(status, obs, row)


def created(status: WorkloadRunStatus, obs: WorkflowCreated, row: Row) -> WorkloadRunStatus:
    """Enter the row's state, with the Workflow's name and UID.

    Args:
        status: the run.
        obs: the create.
        row: the row that fired.

    Returns:
        The run's next status.
    """
    return _enter(status, obs, row, workflow=obs.workflow, workflow_uid=obs.uid)


def _mirrored(status: WorkloadRunStatus, obs: WorkflowObserved) -> WorkloadRunStatus:
    return replace(
        status,
        workflow_uid=status.workflow_uid or obs.uid,
        workflow_state=obs.state,
        workflow_reason=obs.reason,
        workflow_message=obs.message,
    )


def mirror(status: WorkloadRunStatus, obs: WorkflowObserved, row: Row) -> WorkloadRunStatus:
    """The Workflow runs: mirror its fields, a plain update (no condition, no event).

    Args:
        status: the run.
        obs: the Workflow as committed.
        row: the row that fired.

    Returns:
        The run's next status.
    """
    return _mirrored(status, obs)


def finished(status: WorkloadRunStatus, obs: WorkflowObserved, row: Row) -> WorkloadRunStatus:
    """The terminal mirror, with the Workflow's ValidationFailed copied first.

    Args:
        status: the run.
        obs: the Workflow as committed.
        row: the row that fired.

    Returns:
        The run's next status.
    """
    status = _mirrored(status, obs)
    if obs.validation_failed:
        status = with_condition(
            status,
            VALIDATION_FAILED,
            TRUE,
            THRESHOLD_VIOLATION,
            obs.validation_message,
            obs.at,
            None,
        )
    return _enter(status, obs, row)


N, W = EventType.NORMAL, EventType.WARNING
STOP = "a terminal WorkloadRun returns early: no write, no event"

ROWS: tuple[Row, ...] = (
    Row(
        NEW,
        ExecFrameworkMissing,
        to=FAILED,
        reason=BUILD_FAILED,
        event=W,
        message=MSG_BUILD_FAILED,
        effect=enter,
        fallback=True,
    ),
    ignore((IN_PROGRESS, *TERMINAL), ExecFrameworkMissing, "the build guard runs before create"),
    Row(
        NEW,
        WorkflowCreated,
        to=IN_PROGRESS,
        reason=WORKFLOW_CREATED,
        event=N,
        message=MSG_CREATED,
        effect=created,
    ),
    ignore((IN_PROGRESS, *TERMINAL), WorkflowCreated, "the run has its Workflow"),
    ignore(NEW, WorkflowCreateFailed, "AlreadyExists: requeue", guard=already_exists),
    action_row(
        WorkflowCreateFailed,
        WORKFLOW_CREATION_ERROR,
        W,
        MSG_CREATE_FAILED,
        source=NEW,
        note="no write; the error is returned",
    ),
    ignore((IN_PROGRESS, *TERMINAL), WorkflowCreateFailed, "the run has its Workflow"),
    ignore(IN_PROGRESS, WorkflowObserved, "not the run's Workflow", guard=other_workflow),
    Row(
        IN_PROGRESS,
        WorkflowObserved,
        to=SUCCEEDED,
        reason=WORKFLOW_SUCCEEDED,
        event=N,
        message=MSG_SUCCEEDED,
        guard=workflow_succeeded,
        effect=finished,
    ),
    Row(
        IN_PROGRESS,
        WorkflowObserved,
        to=FAILED,
        reason=WORKFLOW_VALIDATION_FAILED,
        event=W,
        message="{message}",
        guard=workflow_failed_validation,
        effect=finished,
    ),
    Row(
        IN_PROGRESS,
        WorkflowObserved,
        to=FAILED,
        reason=WORKFLOW_FAILED,
        event=W,
        message="{message}",
        guard=workflow_failed,
        effect=finished,
    ),
    Row(IN_PROGRESS, WorkflowObserved, to=SAME, effect=mirror, note="mirror fields; no event"),
    ignore(NEW, WorkflowObserved, "no workflowRef yet"),
    Row(
        IN_PROGRESS,
        WorkflowGone,
        to=FAILED,
        reason=WORKFLOW_DELETED,
        event=W,
        message=MSG_DELETED,
        effect=enter,
    ),
    ignore(NEW, WorkflowGone, "no workflowRef yet"),
    action_row(
        LogProfileNotFound,
        LOG_PROFILE_NOT_FOUND,
        W,
        MSG_LOG_PROFILE,
        note="a measurement tier's action Warning",
    ),
    *(ignore(TERMINAL, o, STOP) for o in (WorkflowObserved, WorkflowGone)),
)

TABLE = Table(
    "workloadrun",
    states=STATES,
    initial=NEW,
    terminal=TERMINAL,
    observations=OBSERVATIONS,
    rows=ROWS,
    context=("name",),
)


class WorkloadRunMachine(ConditionMachine[WorkloadRunStatus]):
    """The WorkloadRun machine (:data:`~lifecycle.machines.WORKLOADRUN`): one workload run as a
    Workflow.

    Its table, observations and reasons: ``lifecycle table workloadrun`` and the machine page.
    """

    name: ClassVar[str] = "workloadrun"
    kind: ClassVar[str] = "WorkloadRun"
    api_version: ClassVar[str] = "nvcre.nvidia.com/v1alpha1"
    status_type: ClassVar[type[Any]] = WorkloadRunStatus
    table: ClassVar[Table] = TABLE
    controller: ClassVar[str] = WORKLOADRUN_CONTROLLER
    write_attempts: ClassVar[int | None] = 1

    def context(self, status: WorkloadRunStatus, obs: Observation) -> Mapping[str, Any]:
        return {"name": status.name}

    def fallback_message(self, ref: ObjectRef, flip: Flip, error: Exception) -> str:
        tail = f"; recording the WorkloadRun Failed condition also failed: {redact(str(error))}"
        if flip.reason == BUILD_FAILED:
            return f"WorkloadRun build failed: {flip.message}{tail}"
        return super().fallback_message(ref, flip, error)


WORKLOADRUN = WorkloadRunMachine()
