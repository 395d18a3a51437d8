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
    """A node a failed workload ran on, and why it is counted failed (the Job's failedNodes)."""

    node: str
    reason: str


@attrs.frozen(slots=True)
class JobStatus(Conditioned):
    """A Job's status: its conditions (``state`` is their true type) and bookkeeping."""

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
    """The Job object exists with this spec (its Workflow created it for ``group``)."""

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
    """The adapter could not build the workload; ``unsupported``: no adapter for its kind."""

    error: str
    unsupported: bool = False


@attrs.frozen(slots=True, kw_only=True)
class CreateRejected(Observation):
    """The API server rejected Create: an action Warning, no write, the reconcile backs off."""

    error: str


@attrs.frozen(slots=True, kw_only=True)
class WorkloadPending(Observation):
    """The workload exists but is not running yet (``message``: why): the reason only, no event."""

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
    """The workload made a training step (what the stall budget waits for)."""

    step: int = attrs.field(default=0, validator=not_negative)


@attrs.frozen(slots=True, kw_only=True)
class WorkloadFailed(Observation):
    """The workload failed: ``failure_log`` is captured, ``nodes`` seed failedNodes."""

    message: str = ""
    failure_log: str = ""
    nodes: tuple[str, ...] = ()


@attrs.frozen(slots=True, kw_only=True)
class WorkloadMissing(Observation):
    """The workload was not found."""


@attrs.frozen(slots=True, kw_only=True)
class WorkloadSucceeded(Observation):
    """The workload completed (``message``: its summary, added to the Job's message when set):
    the Job succeeds (``WorkloadCompleted``)."""

    message: str = ""


@attrs.frozen(slots=True, kw_only=True)
class MeasurementsReported(Observation):
    """Measurement values (merged by key) for the threshold verdict."""

    values: tuple[Measurement, ...]


@attrs.frozen(slots=True, kw_only=True)
class MeasurementCreateFailed(Observation):
    """Ensuring the GoodputMeasurement failed: a non-fatal action Warning, repeats each pass."""

    error: str


@attrs.frozen(slots=True, kw_only=True)
class HardwareFault(Observation):
    """``checkNodeHealth``: the health monitor reports ``node`` failing for ``reason``."""

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
