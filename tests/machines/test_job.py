"""One case per row of the Job table (domain doc §(a) "Job", sites 1-3 and 13-16), then the
behaviours a naive reading gets wrong: the verdict flip rules, the stop guard under a write
race, the exclusive timeout reported by the workflow controller, time that goes backwards."""

from __future__ import annotations

from datetime import timedelta

import attrs
import pytest

from lifecycle import (
    Conflict,
    EventType,
    InvalidObservation,
    InvalidTransition,
    MemoryEmitter,
    MemoryStore,
    ObjectRef,
    Outcome,
    Runner,
    Tick,
)
from lifecycle.machines import job
from lifecycle.machines.job import (
    JOB,
    BuildFailed,
    CreateRejected,
    HardwareFault,
    JobStatus,
    Measurement,
    MeasurementCreateFailed,
    MeasurementsReported,
    SpecUpdated,
    Submitted,
    Threshold,
    TimedOut,
    TrainingStepObserved,
    WorkloadCreated,
    WorkloadFailed,
    WorkloadMissing,
    WorkloadPending,
    WorkloadRunning,
    WorkloadSucceeded,
)
from lifecycle.tables import Condition
from tests.conftest import t

from .rowcases import Case, assert_every_row, assert_every_row_has_an_effect, fold, run

N, W = EventType.NORMAL, EventType.WARNING
REF = ObjectRef("Job", "ml", "train-0", "job-1")
WL = "TrainJob/train-0-workload"
IP, S, F = "InProgress", "Succeeded", "Failed"

# -- starting points --------------------------------------------------------------------------
SPEC = Submitted(
    at=t(0),
    nodes=("n1", "n2"),
    max_restarts=2,
    checkpoint=True,
    startup_timeout_s=600,
    stall_threshold_s=300,
)
PLAIN = Submitted(at=t(0), nodes=("n1", "n2"))
GATED = Submitted(
    at=t(0), nodes=("n1", "n2"), thresholds=(Threshold("goodput", ">= 0.9"),), max_restarts=0
)
CREATED = (SPEC, WorkloadCreated(at=t(1)))
RUNNING = (*CREATED, WorkloadRunning(at=t(10)))
STEPPING = (*RUNNING, TrainingStepObserved(at=t(20), step=1))
PLAIN_RUNNING = (PLAIN, WorkloadCreated(at=t(1)), WorkloadRunning(at=t(10)))
DONE = (*PLAIN_RUNNING, WorkloadSucceeded(at=t(100)))
AWAITING = (
    GATED,
    WorkloadCreated(at=t(1)),
    WorkloadRunning(at=t(10)),
    WorkloadSucceeded(at=t(100)),
)
FAILED_ = (*PLAIN_RUNNING, WorkloadFailed(at=t(100)))
RESTARTING = (*RUNNING, WorkloadFailed(at=t(50)))
MSG_RESTART_1 = "Restarting workload from checkpoint (restart 1/2)"

CASES: list[Case] = []


def case(id: str, given: tuple[object, ...], when: object, **kw: object) -> None:
    CASES.append(Case(id, tuple(given), when, **kw))  # type: ignore[arg-type]


def unchanged(id: str, given: tuple[object, ...], when: object, **kw: object) -> None:
    case(id, given, when, unchanged=True, **kw)


def _spec_recorded(s: JobStatus) -> None:
    assert (s.nodes, s.max_restarts, s.checkpoint, s.state) == (("n1", "n2"), 2, True, "")


# -- spec and generation ----------------------------------------------------------------------
case("submitted/new", (), SPEC, state="", check=_spec_recorded)
unchanged("submitted/again", CREATED, Submitted(at=t(5), nodes=("x",)))
unchanged("generation/stale", CREATED, SpecUpdated(at=t(5), generation=1))


def _gen2(s: JobStatus) -> None:
    assert s.generation == 2
    assert [c.observed_generation for c in s.conditions] == [2, 2, 2]
    assert s.condition(IP).last_transition_time == t(1)  # type: ignore[union-attr]


case("generation/bump", CREATED, SpecUpdated(at=t(5), generation=2), state=IP, check=_gen2)

# -- creation ---------------------------------------------------------------------------------


def _created(s: JobStatus) -> None:
    assert s.workload_exists
    assert [(c.type, c.status, c.reason) for c in s.conditions] == [
        (IP, "True", "WorkloadCreated"),
        (S, "False", "NotApplicable"),
        (F, "False", "NotApplicable"),
    ]


case(
    "created/new",
    (SPEC,),
    WorkloadCreated(at=t(1)),
    state=IP,
    reason="WorkloadCreated",
    message=f"Workload {WL} created and is starting",
    flips=(("", N, "WorkloadCreated"),),
    check=_created,
)
case(
    "created/after-restart",
    RESTARTING,
    WorkloadCreated(at=t(60)),
    state=IP,
    reason="WorkloadCreated",
    message=f"Workload {WL} created and is starting",
)
unchanged("created/again", RUNNING, WorkloadCreated(at=t(11)))
case(
    "build/unsupported",
    (SPEC,),
    BuildFailed(at=t(1), error="kind Foo", unsupported=True),
    state=F,
    reason="WorkloadCreationError",
    message="Unsupported workload type: kind Foo",
    flips=(("", W, "WorkloadCreationError"),),
)
case(
    "build/failed",
    CREATED,
    BuildFailed(at=t(2), error="bad image"),
    state=F,
    reason="WorkloadCreationError",
    message="Failed to build workload: bad image",
    flips=(("", W, "WorkloadCreationError"),),
)
unchanged(
    "create/rejected-is-an-action",
    (SPEC,),
    CreateRejected(at=t(1), error="admission webhook denied"),
    actions=("WorkloadCreationError",),
)
unchanged(
    "create/rejected-even-when-terminal",
    DONE,
    CreateRejected(at=t(101), error="x"),
    actions=("WorkloadCreationError",),
)

# -- the workload, polled ---------------------------------------------------------------------
case(
    "pending/with-detail",
    CREATED,
    WorkloadPending(at=t(5), message="Unschedulable"),
    state=IP,
    reason="WorkloadPending",
    message=f"Workload {WL} is pending: Unschedulable",
)
case(
    "pending/plain",
    RUNNING,
    WorkloadPending(at=t(15)),
    message=f"Workload {WL} is pending",
    check=lambda s: s.workload_start_time == t(10),
)


def _started(s: JobStatus) -> None:
    assert (s.workload_start_time, s.running_since, s.workload_exists) == (t(10), t(10), True)


case(
    "running",
    CREATED,
    WorkloadRunning(at=t(10)),
    state=IP,
    reason="WorkloadRunning",
    message=f"Workload {WL} is running",
    check=_started,
)
case(
    "training-step",
    RUNNING,
    TrainingStepObserved(at=t(20), step=1),
    state=IP,
    check=lambda s: s.last_step_at == t(20),
)


def _restarted(s: JobStatus) -> None:
    assert (s.restarts, s.workload_exists, s.running_since, s.last_step_at) == (
        1,
        False,
        None,
        None,
    )
    assert s.workload_start_time == t(10)  # set once, kept across restarts


case(
    "failed/restart-from-checkpoint",
    STEPPING,
    WorkloadFailed(at=t(50), message="OOM"),
    state=IP,
    reason="WorkloadRestarting",
    message=MSG_RESTART_1,
    check=_restarted,
)


def _failed_with_log(s: JobStatus) -> None:
    assert s.failure_log == "rank 3: NCCL error"
    assert s.failed_nodes == (job.FailedNode("n2", "WorkloadFailure"),)


case(
    "failed/with-message",
    PLAIN_RUNNING,
    WorkloadFailed(at=t(50), message="exit 1", failure_log="rank 3: NCCL error", nodes=("n2",)),
    state=F,
    reason="WorkloadFailed",
    message=f"Workload {WL} failed: exit 1",
    flips=(("", W, "WorkloadFailed"),),
    check=_failed_with_log,
)
case(
    "failed/plain",
    PLAIN_RUNNING,
    WorkloadFailed(at=t(50)),
    state=F,
    message=f"Workload {WL} has failed",
    flips=(("", W, "WorkloadFailed"),),
)
case(
    "missing/restart",
    RUNNING,
    WorkloadMissing(at=t(50)),
    state=IP,
    reason="WorkloadRestarting",
    message=MSG_RESTART_1,
)
case(
    "missing/deleted",
    PLAIN_RUNNING,
    WorkloadMissing(at=t(50)),
    state=F,
    reason="WorkloadFailed",
    message=f"Workload {WL} was deleted",
    flips=(("", W, "WorkloadFailed"),),
)
case(
    "stall/restart",
    STEPPING,
    Tick(at=t(20 + 301)),
    state=IP,
    reason="WorkloadRestarting",
    message=MSG_RESTART_1,
)
STARTUP_ONLY = Submitted(at=t(0), startup_timeout_s=600)
case(
    "stall/at-startup",
    (STARTUP_ONLY, WorkloadCreated(at=t(1)), WorkloadRunning(at=t(10))),
    Tick(at=t(611)),
    state=F,
    reason="WorkloadStalled",
    message="Workload stalled: no training step observed within startup timeout",
    flips=(("", W, "WorkloadStalled"),),
)
THRESHOLD_ONLY = Submitted(at=t(0), stall_threshold_s=300)
case(
    "stall/threshold",
    (
        THRESHOLD_ONLY,
        WorkloadCreated(at=t(1)),
        WorkloadRunning(at=t(10)),
        TrainingStepObserved(at=t(20)),
    ),
    Tick(at=t(321)),
    state=F,
    reason="WorkloadStalled",
    message="Workload stalled: no training step observed within the configured threshold",
    flips=(("", W, "WorkloadStalled"),),
)
unchanged("stall/within-budget", STEPPING, Tick(at=t(300)))
unchanged("tick/before-workload", (SPEC,), Tick(at=t(5)))
case(
    "succeeded/with-message",
    PLAIN_RUNNING,
    WorkloadSucceeded(at=t(100), message="loss 1.2"),
    state=S,
    reason="WorkloadCompleted",
    message=f"Workload {WL} completed: loss 1.2",
    flips=(("", N, "WorkloadCompleted"),),
)
case(
    "succeeded/plain",
    PLAIN_RUNNING,
    WorkloadSucceeded(at=t(100)),
    state=S,
    message=f"Workload {WL} completed successfully",
    flips=(("", N, "WorkloadCompleted"),),
)


def _timed_out(s: JobStatus) -> None:
    assert [(c.type, c.status) for c in s.conditions] == [(IP, "False"), (S, "False"), (F, "True")]


case(
    "timed-out/exclusive",
    RUNNING,
    TimedOut(at=t(500)),
    state=F,
    reason="JobTimedOut",
    message="Job exceeded timeoutPerJob",
    flips=(("", W, "JobTimedOut"),),
    check=_timed_out,
)

# -- verdicts ---------------------------------------------------------------------------------


def _hw(s: JobStatus) -> None:
    c = s.condition("HardwareFailed")
    assert c is not None
    assert (c.status, c.reason) == ("True", "HardwareFailureDetected")
    assert c.message == "Hardware failure detected on node(s): [n1]"
    assert s.state == IP  # not terminal for the Job


case(
    "hardware/first",
    RUNNING,
    HardwareFault(at=t(30), node="n1", reason="XID79"),
    flips=(("HardwareFailed", W, "HardwareFailureDetected"),),
    check=_hw,
)
unchanged(
    "hardware/same-pair",
    (*RUNNING, HardwareFault(at=t(30), node="n1", reason="XID79")),
    HardwareFault(at=t(40), node="n1", reason="XID79"),
)
unchanged("hardware/terminal", DONE, HardwareFault(at=t(130), node="n1"))
case(
    "measurements/while-running",
    (GATED, WorkloadCreated(at=t(1))),
    MeasurementsReported(at=t(5), values=(Measurement("goodput", 0.95),)),
    state=IP,
    check=lambda s: s.measurements == (Measurement("goodput", 0.95),),
)


def _validation(status: str, reason: str, message: str) -> object:
    def check(s: JobStatus) -> None:
        c = s.condition("ValidationFailed")
        assert c is not None
        assert (c.status, c.reason, c.message) == (status, reason, message)
        assert s.state == S  # a threshold miss never fails the Job

    return check


case(
    "measurements/thresholds-met",
    AWAITING,
    MeasurementsReported(at=t(110), values=(Measurement("goodput", 0.95),)),
    flips=(("ValidationFailed", N, "ThresholdsMet"),),
    check=_validation("False", "ThresholdsMet", "All performance thresholds satisfied"),
)
unchanged("measurements/decided", DONE, MeasurementsReported(at=t(110), values=()))
case(
    "measurement-timeout",
    AWAITING,
    Tick(at=t(400)),
    flips=(("ValidationFailed", W, "MeasurementTimeout"),),
    check=_validation(
        "True",
        "MeasurementTimeout",
        "Measurement data not available within 5m0s for keys: [goodput]",
    ),
)
unchanged("tick/decided", DONE, Tick(at=t(1000)))
unchanged(
    "measurement-create-failed",
    RUNNING,
    MeasurementCreateFailed(at=t(11), error="forbidden"),
    actions=("MeasurementCreationError",),
)

# -- the stop guard: a terminal Job is never rewritten ----------------------------------------
for name, obs in {
    "spec": SpecUpdated(at=t(200), generation=5),
    "created": WorkloadCreated(at=t(200)),
    "build": BuildFailed(at=t(200), error="x"),
    "pending": WorkloadPending(at=t(200)),
    "running": WorkloadRunning(at=t(200)),
    "step": TrainingStepObserved(at=t(200)),
    "failed": WorkloadFailed(at=t(200)),
    "missing": WorkloadMissing(at=t(200)),
    "succeeded": WorkloadSucceeded(at=t(200)),
    "timed-out": TimedOut(at=t(200)),
}.items():
    unchanged(f"stop/{name}/succeeded", DONE, obs)
    unchanged(f"stop/{name}/failed", FAILED_, obs)


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_row(c: Case) -> None:
    run(JOB, REF, c)


def test_every_row_is_exercised() -> None:
    assert_every_row(JOB, REF, CASES)
    assert_every_row_has_an_effect(JOB)
    assert JOB.table.recovery_rows == ()


# -- verdict flip rules -----------------------------------------------------------------------
def test_a_later_hardware_node_changes_only_the_message() -> None:
    first = fold(JOB, REF, (*RUNNING, HardwareFault(at=t(30), node="n1", reason="XID79")))
    second = JOB.apply(first, HardwareFault(at=t(40), node="n2", reason="XID48"))
    c1, c2 = first.condition("HardwareFailed"), second.condition("HardwareFailed")
    assert c2 is not None
    assert c1 is not None
    assert c2.message == "Hardware failure detected on node(s): [n1 n2]"
    assert c2.last_transition_time == c1.last_transition_time == t(30)
    assert JOB.flips(first, second) == ()


def test_validation_true_from_false_warns_and_true_to_false_is_silent() -> None:
    verdict = JOB.verdicts[1]
    base = fold(JOB, REF, DONE)

    def with_validation(status: str) -> JobStatus:
        c = Condition("ValidationFailed", status, "R", "m", t(1))
        result: JobStatus = attrs.evolve(base, conditions=(*base.conditions, c))
        return result

    false, true = with_validation("False"), with_validation("True")
    flip = verdict.flip(false, true)
    assert flip is not None
    assert (flip.type, flip.source, flip.target) == (W, "False", "True")
    assert verdict.flip(true, false) is None
    assert verdict.flip(false, false) is None
    absent_to_false = verdict.flip(base, false)
    assert absent_to_false is not None
    assert absent_to_false.type is N


def test_unknown_threshold_key_is_decided_with_the_succeeded_write() -> None:
    spec = Submitted(at=t(0), thresholds=(Threshold("tflops", ">= 100"),))
    before = fold(JOB, REF, (spec, WorkloadCreated(at=t(1))))
    after = JOB.apply(before, WorkloadSucceeded(at=t(9)))
    assert [(f.condition, f.type, f.reason) for f in JOB.flips(before, after)] == [
        ("", N, "WorkloadCompleted"),
        ("ValidationFailed", W, "UnknownThresholdKey"),
    ]
    assert after.message == f"Workload {WL} completed successfully"
    assert after.condition("ValidationFailed").message == "Unknown threshold key(s): [tflops]"  # type: ignore[union-attr]
    assert after.failed_nodes == ()  # no nodes known to seed


@pytest.mark.parametrize(
    ("expr", "value", "reason", "message"),
    [
        (">= 0.9", 0.5, "ThresholdViolated", "Threshold violated: goodput = 0.5, required >= 0.9"),
        ("about 1", 0.5, "InvalidThresholdExpression", None),
        ("< 1", 0.5, "ThresholdsMet", "All performance thresholds satisfied"),
    ],
)
def test_threshold_outcomes(expr: str, value: float, reason: str, message: str | None) -> None:
    spec = Submitted(at=t(0), nodes=("n1",), thresholds=(Threshold("goodput", expr),))
    done = fold(JOB, REF, (spec, WorkloadCreated(at=t(1)), WorkloadSucceeded(at=t(9))))
    after = JOB.apply(done, MeasurementsReported(at=t(10), values=(Measurement("goodput", value),)))
    c = after.condition("ValidationFailed")
    assert c is not None
    assert c.reason == reason
    if message is not None:
        assert c.message == message
    assert after.state == S
    if reason != "ThresholdsMet":
        assert after.failed_nodes == (job.FailedNode("n1", "ThresholdViolation"),)


# -- the exclusive timeout, reported by the workflow controller -------------------------------
def test_timeout_event_is_reported_by_the_workflow_controller_regarding_the_job() -> None:
    emitter = MemoryEmitter()
    runner = Runner(MemoryStore(), [emitter])
    for obs in RUNNING:
        runner.observe(REF, obs)
    runner.observe(REF, TimedOut(at=t(500)))
    event = emitter.assert_emitted("JobTimedOut", type=W)
    assert (event.ref, event.controller, event.machine) == (REF, "workflow-controller", "job")
    assert {e.controller for e in emitter.events if e.reason != "JobTimedOut"} == {"job-controller"}


def test_a_dual_true_job_reads_in_progress_and_the_timeout_clears_it() -> None:
    running = fold(JOB, REF, RUNNING)
    dual = attrs.evolve(
        running,
        conditions=(
            running.conditions[0],
            running.conditions[1],
            Condition(F, "True", "JobTimedOut", "Job exceeded timeoutPerJob", t(20)),
        ),
    )
    assert dual.state == IP
    after = JOB.apply(dual, TimedOut(at=t(30)))
    assert [c.status for c in after.conditions] == ["False", "False", "True"]


# -- the stop guard, checked on every attempt -------------------------------------------------
class RacingStore(MemoryStore):
    """The first commit loses to a concurrent writer that times the Job out."""

    def __init__(self) -> None:
        super().__init__()
        self.raced = False

    def commit(self, machine, ref, expected, status, observation, transitions):
        if not self.raced and observation.__class__ is WorkloadSucceeded:
            self.raced = True
            current = self.load(machine, ref)
            assert current is not None
            timed_out = machine.apply(current.status, TimedOut(at=observation.at))
            super().commit(machine, ref, expected, timed_out, TimedOut(at=observation.at), ())
            raise Conflict(ref.uid, expected, expected + 1)
        return super().commit(machine, ref, expected, status, observation, transitions)


def test_a_stale_write_that_loses_to_a_timeout_emits_nothing() -> None:
    store, emitter = RacingStore(), MemoryEmitter()
    runner = Runner(store, [emitter])
    for obs in PLAIN_RUNNING:
        runner.observe(REF, obs)
    emitter.clear()
    result = runner.observe(REF, WorkloadSucceeded(at=t(100)))
    assert (result.outcome, result.attempts) == (Outcome.UNCHANGED, 2)
    assert emitter.events == []
    record = store.load(JOB, REF)
    assert record is not None
    assert record.status.reason == "JobTimedOut"


# -- condition mechanics and bad input --------------------------------------------------------
def test_last_transition_time_moves_only_when_the_status_does() -> None:
    status = fold(JOB, REF, (*RUNNING, WorkloadPending(at=t(30), message="evicted")))
    in_progress = status.condition(IP)
    assert in_progress is not None
    assert (in_progress.last_transition_time, in_progress.reason) == (t(1), "WorkloadPending")
    assert status.condition(S).last_transition_time == t(1)


def test_a_tick_back_in_time_is_refused_and_the_store_untouched() -> None:
    store = MemoryStore()
    runner = Runner(store)
    for obs in RUNNING:
        runner.observe(REF, obs)
    before = store.load(JOB, REF)
    with pytest.raises(InvalidObservation, match="goes back in time"):
        runner.observe(REF, Tick(at=t(5)))
    assert store.load(JOB, REF) == before


@pytest.mark.parametrize(
    ("name", "fields"),
    [
        ("Submitted", {"max_restarts": -1}),
        ("Submitted", {"group": -2}),
        ("Submitted", {"measurement_timeout_s": -5}),
        ("SpecUpdated", {"generation": 0}),
        ("TrainingStepObserved", {"step": -1}),
        ("MeasurementsReported", {"values": [{"key": "goodput"}]}),
    ],
)
def test_bad_observations_are_refused(name: str, fields: dict[str, object]) -> None:
    with pytest.raises(InvalidObservation):
        JOB.observation(name, t(0).isoformat(), fields)


def test_a_poll_before_the_workload_exists_is_refused() -> None:
    with pytest.raises(InvalidTransition):
        JOB.apply(fold(JOB, REF, (SPEC,)), WorkloadRunning(at=t(1)))


def test_a_measurement_window_is_counted_from_succeeded() -> None:
    status = fold(JOB, REF, AWAITING)
    assert JOB.apply(status, Tick(at=t(100) + timedelta(seconds=299))) == status
