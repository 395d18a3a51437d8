"""One case per row of the Workflow table (domain doc §(a) "Workflow", sites 4-6), then the
group logic: drain before retry, bounded retries, never for a timed-out Job, the timeout rules,
the final reason's precedence, the fallback Warnings and the informational action events."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import attrs
import pytest

from lifecycle import (
    EventType,
    InvalidObservation,
    MemoryEmitter,
    MemoryStore,
    ObjectRef,
    Outcome,
    Runner,
)
from lifecycle.machines import workflow
from lifecycle.machines.workflow import (
    WORKFLOW,
    CheckpointPVCMissing,
    CordonedNodesExcluded,
    DependencyCreateFailed,
    Group,
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
    SpecUpdated,
    Submitted,
    Tick,
    WorkflowStatus,
)
from lifecycle.testing.fakes import FaultyStore
from tests.conftest import t

from .rowcases import Case, assert_every_row, assert_every_row_has_an_effect, fold, run

N, W = EventType.NORMAL, EventType.WARNING
REF = ObjectRef("Workflow", "ml", "wf", "wf-1")
IP, S, F = "InProgress", "Succeeded", "Failed"


def report(group: int, state: str, at: datetime, reason: str = "", **kw: Any) -> JobObserved:
    return JobObserved(
        at=at,
        job=f"wf-g{group}",
        job_uid=f"j{group}",
        group=group,
        state=state,
        reason=reason,
        **kw,
    )


def launch(group: int, at: datetime, uid: str = "") -> JobLaunched:
    return JobLaunched(at=at, group=group, job=f"wf-g{group}", uid=uid or f"j{group}")


def started(spec: Submitted) -> tuple[Any, ...]:
    return (
        spec,
        Partitioned(at=t(1), nodes=4, groups=2, nodes_per_job=2),
        launch(0, t(2)),
        launch(1, t(2)),
    )


#: Drain 300 s, one retry, timeout 1 h.
SPEC = Submitted(at=t(0), retry_failed_groups=1, timeout_per_job_s=3600)
#: No drain, no retry: a failed group fails at once.
QUICK = Submitted(at=t(0), drain_grace_s=0)
TWICE = Submitted(at=t(0), iterations=2, drain_grace_s=0)
LAUNCHED = started(SPEC)
QUICK_ONE_DONE = (*started(QUICK), report(0, S, t(50)))
#: Group 1's Job failed at t(100): the drain window runs to t(400).
DRAINING = (
    *started(Submitted(at=t(0))),
    report(0, S, t(50)),
    report(1, F, t(100), "WorkloadFailed"),
)
RUNNING_MSG = "Iteration 1/1: 2 groups running"
FAILED_MSG = "1 groups failed across 1 iterations"
HW_MSG = FAILED_MSG + "; hardware failures occurred on one or more nodes"

CASES: list[Case] = []


def case(id: str, given: tuple[Any, ...], when: Any, **kw: Any) -> None:
    CASES.append(Case(id, tuple(given), when, **kw))


def unchanged(id: str, given: tuple[Any, ...], when: Any, **kw: Any) -> None:
    case(id, given, when, unchanged=True, **kw)


def failed(id: str, when: Any, reason: str, message: str) -> None:
    case(id, (SPEC,), when, state=F, reason=reason, message=message, flips=(("", W, reason),))


# -- spec, generation, the first pass ---------------------------------------------------------
case(
    "submitted",
    (),
    SPEC,
    state="",
    check=lambda s: (s.retry_failed_groups, s.timeout_per_job_s) == (1, 3600),
)
unchanged("generation/stale", LAUNCHED, SpecUpdated(at=t(3), generation=1))
case(
    "generation/bump",
    LAUNCHED,
    SpecUpdated(at=t(3), generation=3),
    check=lambda s: {c.observed_generation for c in s.conditions} == {3},
)
failed(
    "override-error",
    OverridesFailed(at=t(1), error="bad path"),
    "OverrideError",
    "Failed to apply overrides: bad path",
)
failed(
    "checkpoint-pvc",
    CheckpointPVCMissing(at=t(1), pvc="ckpt"),
    "CheckpointPVCMissing",
    'Checkpoint requires PVC "ckpt" in dependencies',
)
failed(
    "node-list",
    NodeListFailed(at=t(1), error="forbidden"),
    "NodeDiscoveryError",
    "Node discovery failed: forbidden",
)
failed(
    "no-nodes",
    NoNodesFound(at=t(1)),
    "NodeDiscoveryError",
    "No target nodes found matching orchestration target",
)
failed(
    "heterogeneous-platform",
    PlatformsMixed(at=t(1), error="nodes mix gke and eks"),
    "HeterogeneousPlatform",
    "nodes mix gke and eks",
)
NO_GPU = (
    "No node can supply the 8 nvidia.com/gpu the workload requests per node; best available is 4"
)
failed("partition-error", PartitionFailed(at=t(1), error=NO_GPU), "PartitionError", NO_GPU)
failed(
    "dependency/name-collision",
    DependencyCreateFailed(at=t(1), error="configmap x exists", collision="dependency"),
    "DependencyNameCollision",
    "configmap x exists",
)
case(
    "dependency/job-collision",
    LAUNCHED,
    DependencyCreateFailed(at=t(3), error="job wf-g0 exists", collision="job"),
    state=F,
    reason="JobNameCollision",
    message="job wf-g0 exists",
    flips=(("", W, "JobNameCollision"),),
)
failed(
    "dependency/create-error",
    DependencyCreateFailed(at=t(1), error="quota"),
    "DependencyCreationError",
    "Failed to create dependency: quota",
)


def _partitioned(s: WorkflowStatus) -> None:
    assert s.groups == (Group(0), Group(1))
    assert (s.nodes, s.nodes_per_job, s.iteration) == (4, 2, 1)


case(
    "partitioned",
    (SPEC,),
    Partitioned(at=t(1), nodes=4, groups=2, nodes_per_job=2),
    state=IP,
    reason="GroupsPartitioned",
    message="Discovered 4 nodes, partitioned into 2 groups (2 nodes/job)",
    flips=(("", N, "GroupsPartitioned"),),
    check=_partitioned,
)
unchanged("partitioned/again", LAUNCHED, Partitioned(at=t(3), nodes=8, groups=4, nodes_per_job=2))

# -- jobs -------------------------------------------------------------------------------------
unchanged("launch/busy-group", LAUNCHED, launch(0, t(3), "j9"))
case(
    "launch",
    (SPEC, Partitioned(at=t(1), nodes=4, groups=2, nodes_per_job=2)),
    launch(0, t(2)),
    state=IP,
    reason="JobCreated",
    message="Iteration 1/1: 1 groups running",
    check=lambda s: (
        (s.groups[0].state, s.groups[0].job_uid, s.groups[0].started_at) == ("Running", "j0", t(2))
    ),
)
unchanged(
    "report/stale-job",
    LAUNCHED,
    JobObserved(at=t(3), job="old", job_uid="j-old", group=0, state=IP),
)
case(
    "report/all-succeeded",
    QUICK_ONE_DONE,
    report(1, S, t(60)),
    state=S,
    reason="JobCompleted",
    message="All 1 iterations completed successfully",
    flips=(("", N, "JobCompleted"),),
)
case(
    "report/hardware",
    QUICK_ONE_DONE,
    report(1, IP, t(60), hardware_failed=True),
    state=F,
    reason="JobHardwareFailed",
    message=HW_MSG,
    flips=(("", W, "JobHardwareFailed"),),
)


def _workflow_validation(s: WorkflowStatus) -> None:
    c = s.condition("ValidationFailed")
    assert c is not None
    assert (c.status, c.reason) == ("True", "JobValidationFailed")
    assert c.message == "One or more Jobs failed performance threshold validation"


case(
    "report/validation",
    QUICK_ONE_DONE,
    report(1, S, t(60), validation_failed=True),
    state=F,
    reason="JobValidationFailed",
    message=FAILED_MSG,
    flips=(("", W, "JobValidationFailed"),),
    check=_workflow_validation,
)
case(
    "report/failed",
    QUICK_ONE_DONE,
    report(1, F, t(60), "WorkloadFailed"),
    state=F,
    reason="IterationsFailed",
    message=FAILED_MSG,
    flips=(("", W, "IterationsFailed"),),
    check=lambda s: s.condition("ValidationFailed") is None,
)


def _next_iteration(s: WorkflowStatus) -> None:
    assert (s.iteration, s.groups) == (2, (Group(0), Group(1)))


case(
    "report/iteration-completed",
    (*started(TWICE), report(0, S, t(50))),
    report(1, S, t(60)),
    state=IP,
    reason="IterationCompleted",
    message="Iteration 1/2 completed, starting next",
    check=_next_iteration,
)
case(
    "report/running",
    LAUNCHED,
    report(0, IP, t(10), "WorkloadRunning", workload_start_time=t(10), workload_exists=True),
    state=IP,
    reason="JobRunning",
    message=RUNNING_MSG,
)
unchanged("report/before-partition", (SPEC,), report(0, IP, t(3)))

# -- ticks: drain windows, retries, timeouts --------------------------------------------------
#: A Running group whose Job reported Succeeded (no verdict pending) not yet settled: only a
#: status written elsewhere holds one; a Tick settles it.
UNSETTLED = attrs.evolve(
    fold(WORKFLOW, REF, QUICK_ONE_DONE),
    groups=(
        Group(0, "Succeeded", "wf-g0", "j0", job_state=S),
        Group(1, "Running", "wf-g1", "j1", job_state=S),
    ),
)
case(
    "tick/settles-success",
    (),
    Tick(at=t(70)),
    start=UNSETTLED,
    state=S,
    reason="JobCompleted",
    flips=(("", N, "JobCompleted"),),
)
HW_DRAINING = (
    *started(Submitted(at=t(0))),
    report(0, S, t(50)),
    report(1, IP, t(100), hardware_failed=True),
)
case(
    "tick/drained-hardware",
    HW_DRAINING,
    Tick(at=t(400)),
    state=F,
    reason="JobHardwareFailed",
    message=HW_MSG,
    flips=(("", W, "JobHardwareFailed"),),
)
case(
    "tick/drained-validation",
    (
        *started(Submitted(at=t(0))),
        report(0, S, t(50)),
        report(1, S, t(100), validation_failed=True),
    ),
    Tick(at=t(400)),
    state=F,
    reason="JobValidationFailed",
    flips=(("", W, "JobValidationFailed"),),
    check=_workflow_validation,
)
case(
    "tick/drained-failed",
    DRAINING,
    Tick(at=t(400)),
    state=F,
    reason="IterationsFailed",
    message=FAILED_MSG,
    flips=(("", W, "IterationsFailed"),),
)
case(
    "tick/drained-iteration",
    (
        *started(Submitted(at=t(0), iterations=3)),
        report(0, S, t(50)),
        report(1, F, t(100), "WorkloadFailed"),
    ),
    Tick(at=t(400)),
    state=IP,
    reason="IterationCompleted",
    message="Iteration 1/3 completed, starting next",
    check=lambda s: (s.iteration, s.failed_groups) == (2, 1),
)


def _retried(s: WorkflowStatus) -> None:
    assert s.groups[1] == Group(1, retries=1)


case(
    "tick/retry-after-drain",
    (*LAUNCHED, report(1, F, t(100), "WorkloadFailed")),
    Tick(at=t(400)),
    state=IP,
    reason="JobRunning",
    message="Iteration 1/1: 1 groups running",
    check=_retried,
)
unchanged("tick/nothing-due", LAUNCHED, Tick(at=t(100)))
unchanged("tick/before-partition", (SPEC,), Tick(at=t(1)))

# -- action events: no status, may repeat -----------------------------------------------------
ACTIONS = {
    "CordonedNodesExcluded": CordonedNodesExcluded(at=t(1), nodes=("a", "b")),
    "HeterogeneousGPU": HeterogeneousGPUFiltered(
        at=t(1), kept=6, total=8, architecture="H100", excluded=("x", "y")
    ),
    "InsufficientGPUCapacity": InsufficientGPUCapacity(at=t(1), required=8, excluded=("n has 1",)),
    "OverrideApplied": OverrideApplied(at=t(1), detail="Applied override gpu-h100"),
    "OverrideNoOp": OverrideNoOp(at=t(1), detail="Override gpu-h100 changed nothing"),
    "NoOverridesMatched": NoOverridesMatched(at=t(1)),
}
for reason, obs in ACTIONS.items():
    unchanged(f"action/{reason}", (SPEC,), obs, actions=(reason,))

# -- terminal: absorbing ----------------------------------------------------------------------
DONE = (*QUICK_ONE_DONE, report(1, S, t(60)))
for name, obs in {
    "submitted": Submitted(at=t(90)),
    "override": OverridesFailed(at=t(90), error="x"),
    "pvc": CheckpointPVCMissing(at=t(90), pvc="x"),
    "node-list": NodeListFailed(at=t(90), error="x"),
    "no-nodes": NoNodesFound(at=t(90)),
    "platforms": PlatformsMixed(at=t(90), error="x"),
    "partition-failed": PartitionFailed(at=t(90), error="x"),
}.items():
    unchanged(f"stop/{name}/in-progress", LAUNCHED, obs)
    unchanged(f"stop/{name}/succeeded", DONE, obs)
for name, obs in {
    "spec": SpecUpdated(at=t(90), generation=4),
    "dependency": DependencyCreateFailed(at=t(90), error="x"),
    "partitioned": Partitioned(at=t(90), nodes=1, groups=1, nodes_per_job=1),
    "launch": launch(0, t(90)),
    "report": report(0, F, t(90)),
    "tick": Tick(at=t(9000)),
}.items():
    unchanged(f"stop/{name}/succeeded", DONE, obs)
    unchanged(f"stop/{name}/failed", (SPEC, NoNodesFound(at=t(1))), obs)


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_row(c: Case) -> None:
    run(WORKFLOW, REF, c)


def test_every_row_is_exercised() -> None:
    assert_every_row(WORKFLOW, REF, CASES)
    assert_every_row_has_an_effect(WORKFLOW)


def test_action_messages() -> None:
    status = fold(WORKFLOW, REF, (SPEC,))
    messages = {f.reason: f.message for o in ACTIONS.values() for f in WORKFLOW.actions(status, o)}
    assert messages == {
        "CordonedNodesExcluded": "Excluded 2 cordoned node(s) from certification: a, b",
        "HeterogeneousGPU": "Filtered 6/8 nodes to primary GPU architecture H100; excluded: x, y",
        "InsufficientGPUCapacity": (
            "Excluded 1 node(s) with fewer than 8 allocatable nvidia.com/gpu: n has 1"
        ),
        "OverrideApplied": "Applied override gpu-h100",
        "OverrideNoOp": "Override gpu-h100 changed nothing",
        "NoOverridesMatched": "No overrides matched this Workflow",
    }


# -- groups -----------------------------------------------------------------------------------
def test_a_failed_group_is_held_running_until_the_drain_window_ends_on_a_tick() -> None:
    status = fold(WORKFLOW, REF, (*LAUNCHED, report(1, F, t(100), "WorkloadFailed")))
    assert (status.groups[1].state, status.groups[1].failed_at) == ("Running", t(100))
    # a later report of another Job does not end the window: only a Tick does
    later = WORKFLOW.apply(status, report(0, IP, t(500), "WorkloadRunning", workload_exists=True))
    assert later.groups[1].state == "Running"
    assert WORKFLOW.apply(status, Tick(at=t(399))).groups[1].state == "Running"
    assert WORKFLOW.apply(status, Tick(at=t(400))).groups[1] == Group(1, retries=1)


def test_retries_are_bounded_by_retry_failed_groups() -> None:
    status = fold(
        WORKFLOW, REF, (*LAUNCHED, report(1, F, t(100), "WorkloadFailed"), Tick(at=t(400)))
    )
    assert status.groups[1] == Group(1, retries=1)
    status = fold(WORKFLOW, REF, (launch(1, t(410), "j1b"),), status)
    again = JobObserved(
        at=t(500), job="wf-g1", job_uid="j1b", group=1, state=F, reason="WorkloadFailed"
    )
    status = fold(WORKFLOW, REF, (again, Tick(at=t(800))), status)
    assert (status.groups[1].state, status.groups[1].retries) == ("Failed", 1)


def test_a_timed_out_group_is_never_retried() -> None:
    status = fold(WORKFLOW, REF, (*LAUNCHED, report(1, F, t(100), "JobTimedOut"), Tick(at=t(400))))
    assert status.groups[1].state == "Failed"


def test_timeout_is_measured_from_the_workload_start() -> None:
    running = report(
        0, IP, t(100), "WorkloadRunning", workload_start_time=t(100), workload_exists=True
    )
    status = fold(WORKFLOW, REF, (*LAUNCHED, running))
    assert not WORKFLOW.apply(status, Tick(at=t(3700))).groups[0].timed_out
    assert WORKFLOW.apply(status, Tick(at=t(3701))).groups[0].timed_out


def test_timeout_never_fires_while_the_workload_exists_but_was_not_seen_running() -> None:
    created = report(0, IP, t(10), "WorkloadCreated", workload_exists=True)
    status = fold(WORKFLOW, REF, (*LAUNCHED, created))
    assert not WORKFLOW.apply(status, Tick(at=t(99999))).groups[0].timed_out


def test_before_any_workload_exists_the_timeout_counts_from_the_group_start() -> None:
    status = fold(WORKFLOW, REF, LAUNCHED)  # group started at t(2); its Job reported nothing
    after = WORKFLOW.apply(status, Tick(at=t(3603)))
    assert [g.timed_out for g in after.groups] == [True, True]
    assert WORKFLOW.flips(status, after) == ()


def test_a_workloadrun_built_workflow_times_out_after_24h_by_default() -> None:
    status = fold(
        WORKFLOW, REF, (Submitted(at=t(0), owner_kind="WorkloadRun", owner="r", owner_uid="r1"),)
    )
    assert status.timeout_per_job_s == 24 * 3600
    assert fold(WORKFLOW, REF, (Submitted(at=t(0)),)).timeout_per_job_s is None


def test_final_reason_precedence_hardware_over_validation_over_iterations() -> None:
    spec = Submitted(at=t(0), drain_grace_s=0, iterations=2)
    status = fold(
        WORKFLOW,
        REF,
        (
            *started(spec),
            report(0, S, t(10), validation_failed=True),
            report(1, S, t(11)),
            launch(0, t(12), "k0"),
            launch(1, t(12), "k1"),
            JobObserved(at=t(20), job="b", job_uid="k0", group=0, state=S),
        ),
    )
    after = WORKFLOW.apply(
        status,
        JobObserved(at=t(21), job="c", job_uid="k1", group=1, state=IP, hardware_failed=True),
    )
    assert (after.state, after.reason) == (F, "JobHardwareFailed")
    assert (
        after.message
        == "2 groups failed across 2 iterations; hardware failures occurred on one or more nodes"
    )
    assert after.condition("ValidationFailed") is not None  # a validation failure occurred too


def test_a_succeeded_job_awaiting_its_verdict_keeps_its_group_running() -> None:
    status = fold(WORKFLOW, REF, (*started(QUICK), report(0, S, t(10), awaiting_validation=True)))
    assert status.groups[0].state == "Running"
    met = WORKFLOW.apply(status, report(0, S, t(20)))
    assert met.groups[0].state == "Succeeded"


# -- fallbacks and bad input ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("obs", "reason", "message"),
    [
        (
            PlatformsMixed(at=t(1), error="mixed gke/eks"),
            "HeterogeneousPlatformStatusUpdateFailed",
            "Platform detection failed: mixed gke/eks; recording the Workflow Failed condition "
            "also failed: injected write error on wf-1",
        ),
        (
            OverridesFailed(at=t(1), error="bad path"),
            "OverrideErrorStatusUpdateFailed",
            "Override failed: bad path; recording the Workflow Failed condition also failed: "
            "injected write error on wf-1",
        ),
    ],
)
def test_fallback_warnings_name_both_errors(obs: Any, reason: str, message: str) -> None:
    store, emitter = FaultyStore(MemoryStore()), MemoryEmitter()
    runner = Runner(store, [emitter])
    runner.observe(REF, SPEC)
    store.inject(REF.uid, "write-error")
    result = runner.observe(REF, obs)
    assert result.outcome is Outcome.FAILED
    event = emitter.assert_emitted(reason, type=W)
    assert (event.message, event.fallback, event.controller) == (
        message,
        True,
        "workflow-controller",
    )
    # the next pass writes the transition, a distinct event
    runner.observe(REF, obs)
    assert emitter.reasons() == [reason, reason.removesuffix("StatusUpdateFailed")]


def test_action_events_repeat_touch_no_status_and_carry_no_id() -> None:
    store, emitter = MemoryStore(), MemoryEmitter()
    runner = Runner(store, [emitter])
    runner.observe(REF, SPEC)
    before = store.load(WORKFLOW, REF)
    for _ in range(2):
        result = runner.observe(REF, ACTIONS["CordonedNodesExcluded"])
        assert result.outcome is Outcome.UNCHANGED
    assert store.load(WORKFLOW, REF) == before
    assert [(e.reason, e.id, e.action, e.controller) for e in emitter.events] == [
        ("CordonedNodesExcluded", "", True, "workflow-controller")
    ] * 2
    assert store.claim_undelivered() == []


@pytest.mark.parametrize(
    ("name", "fields"),
    [
        ("Partitioned", {"nodes": -4, "groups": 2, "nodes_per_job": 2}),
        ("Partitioned", {"nodes": 4, "groups": 0, "nodes_per_job": 2}),
        ("Submitted", {"retry_failed_groups": -1}),
        ("Submitted", {"iterations": 0}),
        ("JobLaunched", {"group": -1, "job": "j", "uid": "u"}),
        ("DependencyCreateFailed", {"error": "x", "collision": "pod"}),
    ],
)
def test_bad_observations_are_refused(name: str, fields: dict[str, object]) -> None:
    with pytest.raises(InvalidObservation):
        WORKFLOW.observation(name, t(0).isoformat(), fields)


def test_a_launch_for_a_group_that_does_not_exist_is_refused_and_the_store_untouched() -> None:
    store = MemoryStore()
    runner = Runner(store)
    for obs in LAUNCHED:
        runner.observe(REF, obs)
    before = store.load(WORKFLOW, REF)
    with pytest.raises(InvalidObservation, match="group 7"):
        runner.observe(REF, launch(7, t(5)))
    assert store.load(WORKFLOW, REF) == before
    assert workflow.TABLE.recovery_rows == ()
