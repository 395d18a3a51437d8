"""The records of the Job machine: reasons, messages, its status and its observations
(see :mod:`lifecycle.machines.job`)."""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar

import attrs

from .._core.limits import Limits, within_limit
from .._core.observation import Observation, Tick
from .._core.refs import Condition
from ._conditions import (
    SUCCEEDED,
    TRUE,
    Conditioned,
    SpecUpdated,
    not_negative,
    positive,
)
from ._thresholds import (
    MEASUREMENT_KEYS,
    Measurement,
    Threshold,
)

JOB_CONTROLLER = "job-controller"
#: The default limit of a Job's (and a Workflow's) ``max_restarts``: restarts from a
#: checkpoint, each one a new workload (ADR 0100; ``Submitted.limits``, a host may raise it).
RESTARTS_LIMIT = 1_000
WORKFLOW_CONTROLLER = "workflow-controller"

# -- reasons ----------------------------------------------------------------------------------
WORKLOAD_CREATED = "WorkloadCreated"
WORKLOAD_CREATION_ERROR = "WorkloadCreationError"
WORKLOAD_PENDING = "WorkloadPending"
WORKLOAD_RUNNING = "WorkloadRunning"
WORKLOAD_RESTARTING = "WorkloadRestarting"
WORKLOAD_FAILED = "WorkloadFailed"
WORKLOAD_STALLED = "WorkloadStalled"
WORKLOAD_COMPLETED = "WorkloadCompleted"
JOB_TIMED_OUT = "JobTimedOut"
MEASUREMENT_CREATION_ERROR = "MeasurementCreationError"
# verdict conditions and their reasons
HARDWARE_FAILED = "HardwareFailed"
HARDWARE_FAILURE_DETECTED = "HardwareFailureDetected"
VALIDATION_FAILED = "ValidationFailed"
# failedNodes reasons seeded by a failure or a threshold miss (not hardware)
THRESHOLD_VIOLATION = "ThresholdViolation"
WORKLOAD_FAILURE = "WorkloadFailure"

# -- messages ---------------------------------------------------------------------------------
MSG_CREATED = "Workload {workload} created and is starting"
MSG_UNSUPPORTED = "Unsupported workload type: {error}"
MSG_BUILD_FAILED = "Failed to build workload: {error}"
MSG_CREATE_REJECTED = "Failed to create {workload}: {error}"
MSG_PENDING = "Workload {workload} is pending{detail}"
MSG_RUNNING = "Workload {workload} is running"
MSG_RESTARTING = "Restarting workload from checkpoint (restart {restart}/{max_restarts})"
MSG_FAILED = "Workload {workload} has failed"
MSG_FAILED_DETAIL = "Workload {workload} failed: {message}"
MSG_DELETED = "Workload {workload} was deleted"
MSG_STALLED_AT_STARTUP = "Workload stalled: no training step observed within startup timeout"
MSG_STALLED = "Workload stalled: no training step observed within the configured threshold"
MSG_COMPLETED = "Workload {workload} completed successfully"
MSG_COMPLETED_DETAIL = "Workload {workload} completed: {message}"
MSG_TIMED_OUT = "Job exceeded timeoutPerJob"
MSG_MEASUREMENT_ERROR = "Failed to ensure GoodputMeasurement: {error}"
MSG_HARDWARE = "Hardware failure detected on node(s): {}"
DEFAULT_MEASUREMENT_TIMEOUT = 300.0
DEFAULT_WORKLOAD_KIND = "TrainJob"


@attrs.frozen(slots=True)
class FailedNode:
    """A node a failed workload ran on, and why it is counted failed (the Job's failedNodes).

    Attributes:
        node: the node's name.
        reason: why it counts as failed (``HardwareFailure``, ``ThresholdViolation`` ...).
    """

    node: str
    reason: str


@attrs.frozen(slots=True)
class JobStatus(Conditioned):
    """A Job's status: its conditions (``state`` is their true type) and bookkeeping.

    Attributes:
        name: the Job's name.
        conditions: the Job's conditions, the exclusive set first; the true one is its state.
        generation: the ``metadata.generation`` last stamped as observedGeneration.
        clock: the ``at`` of the last observation that changed the status: a Tick before it is
            refused, so time never goes back.
        workload_kind: the kind of workload the Job runs (``TrainJob`` ...).
        workflow: the name of the Workflow that created the Job.
        workflow_uid: that Workflow's UID, which tells a recreated Workflow of the same name apart.
        group: the index of the Workflow's node group the Job runs on.
        nodes: the nodes the workload runs on; a failure is counted against them.
        thresholds: what the measurements must pass for the Job to be valid.
        measurement_keys: the keys a threshold may name; any other key fails validation.
        measurement_timeout_s: how long after success the measurements may take before the
            verdict is ``MeasurementTimeout``.
        max_restarts: how many times a failed or stalled workload is restarted from checkpoint.
        checkpoint: the workload checkpoints, so a restart resumes rather than starts over.
        startup_timeout_s: how long a running workload may go without its first training step;
            ``None``: no limit.
        stall_threshold_s: how long a workload may go between training steps; ``None``: no limit.
        restarts: the restarts made so far.
        workload_exists: the workload object exists.
        workload_start_time: when the first workload was first seen running, kept over restarts.
        running_since: when the current workload was first seen running (the startup budget's
            start).
        last_step_at: when the current workload last made a training step.
        measurements: the measurements reported, one per key (a later report replaces a key).
        failed_nodes: the nodes counted failed, with why.
        failure_log: the failed workload's log, as captured.
    """

    name: str = ""
    conditions: tuple[Condition, ...] = ()
    generation: int = 1
    clock: datetime | None = None
    workload_kind: str = DEFAULT_WORKLOAD_KIND
    workflow: str = ""
    workflow_uid: str = ""
    group: int = 0
    nodes: tuple[str, ...] = ()
    thresholds: tuple[Threshold, ...] = ()
    measurement_keys: tuple[str, ...] = MEASUREMENT_KEYS
    measurement_timeout_s: float = DEFAULT_MEASUREMENT_TIMEOUT
    max_restarts: int = 0
    checkpoint: bool = False
    startup_timeout_s: float | None = None
    stall_threshold_s: float | None = None
    restarts: int = 0
    workload_exists: bool = False
    workload_start_time: datetime | None = None
    running_since: datetime | None = None
    last_step_at: datetime | None = None
    measurements: tuple[Measurement, ...] = ()
    failed_nodes: tuple[FailedNode, ...] = ()
    failure_log: str = ""

    @property
    def workload(self) -> str:
        return f"{self.workload_kind}/{self.name}-workload"

    @property
    def hardware_failed(self) -> bool:
        c = self.condition(HARDWARE_FAILED)
        return c is not None and c.status == TRUE

    @property
    def validation_failed(self) -> bool:
        c = self.condition(VALIDATION_FAILED)
        return c is not None and c.status == TRUE

    @property
    def awaiting_validation(self) -> bool:
        """Succeeded with thresholds and no ValidationFailed yet: the verdict is pending."""
        return (
            self.state == SUCCEEDED
            and bool(self.thresholds)
            and self.condition(VALIDATION_FAILED) is None
        )


# -- observations -----------------------------------------------------------------------------
@attrs.frozen(slots=True, kw_only=True)
class Submitted(Observation):
    """The Job object exists with this spec (its Workflow created it for ``group``).

    Attributes:
        workload_kind: the kind of workload to run.
        workflow: the name of the Workflow that created the Job.
        workflow_uid: that Workflow's UID.
        group: the index of the Workflow's node group, not negative.
        nodes: the nodes the workload runs on.
        thresholds: what the measurements must pass.
        measurement_keys: the keys a threshold may name.
        measurement_timeout_s: how long the measurements may take after success, not negative.
        max_restarts: how many restarts from checkpoint are allowed, within the machine's limit
            (each restart is a new workload).
        checkpoint: the workload checkpoints.
        startup_timeout_s: the budget for the first training step; ``None``: no limit.
        stall_threshold_s: the budget between training steps; ``None``: no limit.
        generation: the Job's ``metadata.generation``, at least 1.
    """

    limits: ClassVar[Limits] = Limits(
        "job.Submitted.limits",
        max_restarts=(RESTARTS_LIMIT, "each restart is a new workload"),
    )

    workload_kind: str = DEFAULT_WORKLOAD_KIND
    workflow: str = ""
    workflow_uid: str = ""
    group: int = attrs.field(default=0, validator=not_negative)
    nodes: tuple[str, ...] = ()
    thresholds: tuple[Threshold, ...] = ()
    measurement_keys: tuple[str, ...] = MEASUREMENT_KEYS
    measurement_timeout_s: float = attrs.field(
        default=DEFAULT_MEASUREMENT_TIMEOUT, validator=not_negative
    )
    max_restarts: int = attrs.field(default=0, validator=[not_negative, within_limit])
    checkpoint: bool = False
    startup_timeout_s: float | None = attrs.field(default=None, validator=not_negative)
    stall_threshold_s: float | None = attrs.field(default=None, validator=not_negative)
    generation: int = attrs.field(default=1, validator=positive)


@attrs.frozen(slots=True, kw_only=True)
class WorkloadCreated(Observation):
    """Create of the workload succeeded (also after a restart from checkpoint)."""


@attrs.frozen(slots=True, kw_only=True)
class BuildFailed(Observation):
    """The adapter could not build the workload; ``unsupported``: no adapter for its kind.

    Attributes:
        error: why the workload could not be built.
        unsupported: no adapter knows the workload's kind (a spec error, not a transient one).
    """

    error: str
    unsupported: bool = False


@attrs.frozen(slots=True, kw_only=True)
class CreateRejected(Observation):
    """The API server rejected Create: an action Warning, no write, the reconcile backs off.

    Attributes:
        error: the API server's refusal.
    """

    error: str


@attrs.frozen(slots=True, kw_only=True)
class WorkloadPending(Observation):
    """The workload exists but is not running yet (``message``: why): the reason only, no event.

    Attributes:
        message: why it is not running yet, for the Job's reason message.
    """

    message: str = ""

    @property
    def detail(self) -> str:
        return f": {self.message}" if self.message else ""


@attrs.frozen(slots=True, kw_only=True)
class WorkloadRunning(Observation):
    """The workload is running: the reason only, no event."""

    pass


@attrs.frozen(slots=True, kw_only=True)
class TrainingStepObserved(Observation):
    """The workload made a training step (what the stall budget waits for).

    Attributes:
        step: the step number, not negative.
    """

    step: int = attrs.field(default=0, validator=not_negative)


@attrs.frozen(slots=True, kw_only=True)
class WorkloadFailed(Observation):
    """The workload failed: ``failure_log`` is captured, ``nodes`` seed failedNodes.

    Attributes:
        message: the workload's failure message, added to the Job's when set.
        failure_log: the failed workload's log, kept on the status for a reader.
        nodes: the nodes it ran on, counted failed.
    """

    message: str = ""
    failure_log: str = ""
    nodes: tuple[str, ...] = ()


@attrs.frozen(slots=True, kw_only=True)
class WorkloadMissing(Observation):
    """The workload was not found."""


@attrs.frozen(slots=True, kw_only=True)
class WorkloadSucceeded(Observation):
    """The workload completed (``message``: its summary, added to the Job's message when set):
    the Job succeeds (``WorkloadCompleted``).

    Attributes:
        message: the workload's summary, added to the Job's message when set.
    """

    message: str = ""


@attrs.frozen(slots=True, kw_only=True)
class MeasurementsReported(Observation):
    """Measurement values (merged by key) for the threshold verdict.

    Attributes:
        values: the measurements, merged into the status by key.
    """

    values: tuple[Measurement, ...]


@attrs.frozen(slots=True, kw_only=True)
class MeasurementCreateFailed(Observation):
    """Ensuring the GoodputMeasurement failed: a non-fatal action Warning, repeats each pass.

    Attributes:
        error: why the GoodputMeasurement could not be ensured.
    """

    error: str


@attrs.frozen(slots=True, kw_only=True)
class HardwareFault(Observation):
    """``checkNodeHealth``: the health monitor reports ``node`` failing for ``reason``.

    Attributes:
        node: the failing node.
        reason: what the health monitor reports.
    """

    node: str
    reason: str = "HardwareFailure"


@attrs.frozen(slots=True, kw_only=True)
class TimedOut(Observation):
    """The Workflow controller found the Job over ``timeoutPerJob`` and failed it."""


OBSERVATIONS: tuple[type[Observation], ...] = (
    Submitted,
    SpecUpdated,
    WorkloadCreated,
    BuildFailed,
    CreateRejected,
    WorkloadPending,
    WorkloadRunning,
    TrainingStepObserved,
    WorkloadFailed,
    WorkloadMissing,
    WorkloadSucceeded,
    MeasurementsReported,
    MeasurementCreateFailed,
    HardwareFault,
    TimedOut,
    Tick,
)
