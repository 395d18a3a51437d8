"""The Job -> Workflow -> Certification / WorkloadRun cascade through ``lifecycle.Runner``.

Only the leaf observations (and each tier's own controller steps) are fed in; the links turn
every committed status into its parent's observation. Every tier's events come out in order,
one per transition, and reason-only or message-only changes emit nothing. The Workflow's timeout
goes down the Workflow -> Job link as the workflow controller's write on the Job.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lifecycle import EventType, MemoryEmitter, MemoryStore, ObjectRef, Runner, SQLiteStore, Store
from lifecycle.links import default_links
from lifecycle.machines import certification, job, workflow, workloadrun
from lifecycle.trace import read_trace, replay
from tests.conftest import t

N, W = EventType.NORMAL, EventType.WARNING
NS = "ml"
CERT = ObjectRef("Certification", NS, "cert", "c-1")
RUN = ObjectRef("WorkloadRun", NS, "run", "r-1")
WF = ObjectRef("Workflow", NS, "cert-nccl", "w-1")


def job_ref(group: int) -> ObjectRef:
    return ObjectRef("Job", NS, f"cert-nccl-g{group}", f"j-{group}")


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Any) -> Any:
    s: Store = MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "c.db")
    yield s
    s.close()


def launch(runner: Runner, spec: workflow.Submitted, groups: int = 2) -> None:
    runner.observe(WF, spec)
    runner.observe(
        WF, workflow.Partitioned(at=t(11), nodes=2 * groups, groups=groups, nodes_per_job=2)
    )
    for g in range(groups):
        ref = job_ref(g)
        runner.observe(WF, workflow.JobLaunched(at=t(12), group=g, job=ref.name, uid=ref.uid))


def run_jobs(runner: Runner, groups: int = 2) -> None:
    for g in range(groups):
        runner.observe(job_ref(g), job.WorkloadCreated(at=t(13)))
        runner.observe(job_ref(g), job.WorkloadPending(at=t(14), message="Unschedulable"))
        runner.observe(job_ref(g), job.WorkloadRunning(at=t(20)))


def events(emitter: MemoryEmitter) -> list[tuple[str, str, str, str]]:
    return [(e.ref.kind, e.reason, e.type.value, e.controller) for e in emitter.events]


def test_a_threshold_miss_cascades_up_to_the_certification(store: Store) -> None:
    emitter = MemoryEmitter()
    runner = Runner(store, [emitter])
    runner.observe(CERT, certification.Submitted(at=t(0), categories=("nccl/v1",)))
    runner.observe(
        CERT,
        certification.WorkflowCreated(at=t(10), category="nccl/v1", workflow=WF.name, uid=WF.uid),
    )
    spec = workflow.Submitted(
        at=t(10),
        owner_kind="Certification",
        owner=CERT.name,
        owner_uid=CERT.uid,
        category="nccl/v1",
        drain_grace_s=0,
        thresholds=(job.Threshold("goodput", ">= 0.9"),),
    )
    launch(runner, spec)
    # the Workflow -> Job link gave each Job its spec and its owner
    record = store.load(job.JOB, job_ref(1))
    assert record is not None
    assert (record.status.workflow_uid, record.status.group, record.status.thresholds) == (
        WF.uid,
        1,
        spec.thresholds,
    )
    run_jobs(runner)
    for g in range(2):
        runner.observe(job_ref(g), job.WorkloadSucceeded(at=t(100)))
    assert events(emitter)[-2:] == [
        ("Job", "WorkloadCompleted", "Normal", "job-controller"),
        ("Job", "WorkloadCompleted", "Normal", "job-controller"),
    ]
    met = job.MeasurementsReported(at=t(110), values=(job.Measurement("goodput", 0.95),))
    runner.observe(job_ref(0), met)
    missed = job.MeasurementsReported(at=t(111), values=(job.Measurement("goodput", 0.42),))
    result = runner.observe(job_ref(1), missed)
    assert events(emitter) == [
        ("Certification", "WorkflowCreated", "Normal", "certification-controller"),
        ("Workflow", "GroupsPartitioned", "Normal", "workflow-controller"),
        ("Job", "WorkloadCreated", "Normal", "job-controller"),
        ("Job", "WorkloadCreated", "Normal", "job-controller"),
        ("Job", "WorkloadCompleted", "Normal", "job-controller"),
        ("Job", "WorkloadCompleted", "Normal", "job-controller"),
        ("Job", "ThresholdsMet", "Normal", "job-controller"),
        ("Job", "ThresholdViolated", "Warning", "job-controller"),
        ("Workflow", "JobValidationFailed", "Warning", "workflow-controller"),
        ("Certification", "WorkflowFailed", "Warning", "certification-controller"),
    ]
    # one cascade: the Job's commit fed the Workflow, whose commit fed the Certification
    assert [t.reason for t in result.all_transitions()] == [
        "ThresholdViolated",
        "JobValidationFailed",
        "WorkflowFailed",
    ]
    emitter.assert_no_duplicates()
    wf = store.load(workflow.WORKFLOW, WF)
    assert wf is not None
    assert wf.status.message == "1 groups failed across 1 iterations"


def test_reason_and_message_churn_emits_nothing(store: Store) -> None:
    emitter = MemoryEmitter()
    runner = Runner(store, [emitter])
    launch(runner, workflow.Submitted(at=t(10)))
    run_jobs(runner)
    emitter.clear()
    for at in (30, 45, 60):  # pending <-> running churn, and status re-reads
        runner.observe(job_ref(0), job.WorkloadPending(at=t(at), message=f"evicted at {at}"))
        runner.observe(job_ref(0), job.WorkloadRunning(at=t(at + 1)))
        runner.observe(WF, workflow.Tick(at=t(at + 2)))
    assert emitter.events == []
    wf = store.load(workflow.WORKFLOW, WF)
    assert wf is not None
    assert (wf.status.reason, wf.status.message) == (
        "JobRunning",
        "Iteration 1/1: 2 groups running",
    )


def test_a_timeout_goes_down_as_the_workflow_controllers_write_on_the_job(store: Store) -> None:
    emitter = MemoryEmitter()
    runner = Runner(store, [emitter])
    launch(runner, workflow.Submitted(at=t(10), timeout_per_job_s=600, retry_failed_groups=3), 1)
    runner.observe(job_ref(0), job.WorkloadCreated(at=t(13)))
    runner.observe(job_ref(0), job.WorkloadRunning(at=t(20)))
    emitter.clear()
    assert not runner.observe(WF, workflow.Tick(at=t(620))).committed  # not over yet
    result = runner.observe(WF, workflow.Tick(at=t(621)))
    assert result.committed
    assert events(emitter) == [("Job", "JobTimedOut", "Warning", "workflow-controller")]
    (timed_out,) = emitter.events
    assert (timed_out.ref, timed_out.message) == (job_ref(0), "Job exceeded timeoutPerJob")
    jr = store.load(job.JOB, job_ref(0))
    assert jr is not None
    assert [c.status for c in jr.status.conditions] == ["False", "False", "True"]
    # drained, then Failed: a timed-out group is never retried, whatever the budget
    runner.observe(WF, workflow.Tick(at=t(921)))
    assert [e.reason for e in emitter.events] == ["JobTimedOut", "IterationsFailed"]
    # a late success from the Job controller loses to the timeout: nothing is written
    assert not runner.observe(job_ref(0), job.WorkloadSucceeded(at=t(922))).committed
    assert len(emitter.events) == 2


def test_hardware_failure_then_teardown_and_retry(store: Store) -> None:
    emitter = MemoryEmitter()
    runner = Runner(store, [emitter])
    launch(runner, workflow.Submitted(at=t(10), retry_failed_groups=1, drain_grace_s=300), 1)
    run_jobs(runner, 1)
    emitter.clear()
    runner.observe(job_ref(0), job.HardwareFault(at=t(50), node="gpu-7", reason="XID79"))
    runner.observe(job_ref(0), job.HardwareFault(at=t(51), node="gpu-8", reason="XID48"))
    runner.observe(job_ref(0), job.WorkloadMissing(at=t(60)))  # the Workflow deleted it
    runner.observe(WF, workflow.Tick(at=t(360)))  # drained: retried, the group is Pending
    retry = ObjectRef("Job", NS, "cert-nccl-g0-r1", "j-0-r1")
    runner.observe(WF, workflow.JobLaunched(at=t(361), group=0, job=retry.name, uid=retry.uid))
    runner.observe(retry, job.WorkloadCreated(at=t(362)))
    runner.observe(retry, job.WorkloadSucceeded(at=t(500)))
    assert events(emitter) == [
        ("Job", "HardwareFailureDetected", "Warning", "job-controller"),
        ("Job", "WorkloadFailed", "Warning", "job-controller"),
        ("Job", "WorkloadCreated", "Normal", "job-controller"),
        ("Job", "WorkloadCompleted", "Normal", "job-controller"),
        ("Workflow", "JobCompleted", "Normal", "workflow-controller"),
    ]


def test_a_workloadrun_mirrors_its_workflow(store: Store) -> None:
    emitter = MemoryEmitter()
    runner = Runner(store, [emitter])
    runner.observe(RUN, workloadrun.WorkflowCreated(at=t(10), workflow=WF.name, uid=WF.uid))
    spec = workflow.Submitted(
        at=t(10),
        owner_kind="WorkloadRun",
        owner=RUN.name,
        owner_uid=RUN.uid,
        drain_grace_s=0,
        thresholds=(job.Threshold("goodput", ">= 0.9"),),
    )
    launch(runner, spec, 1)
    run_jobs(runner, 1)
    mirrored = store.load(workloadrun.WORKLOADRUN, RUN)
    assert mirrored is not None
    assert mirrored.status.workflow_message == "Iteration 1/1: 1 groups running"
    runner.observe(job_ref(0), job.WorkloadSucceeded(at=t(100)))
    missed = job.MeasurementsReported(at=t(101), values=(job.Measurement("goodput", 0.1),))
    runner.observe(job_ref(0), missed)
    assert [(e.ref.kind, e.reason) for e in emitter.events][-3:] == [
        ("Job", "ThresholdViolated"),
        ("Workflow", "JobValidationFailed"),
        ("WorkloadRun", "WorkflowValidationFailed"),
    ]
    final = store.load(workloadrun.WORKLOADRUN, RUN)
    assert final is not None
    copied = final.status.condition("ValidationFailed")
    assert copied is not None
    assert (copied.status, copied.reason) == ("True", "ThresholdViolation")
    assert emitter.events[-1].controller == "workloadrun-controller"


def test_the_links_are_registered_in_cascade_order() -> None:
    pairs = [(link.source, link.target) for link in default_links()]
    assert pairs[1:] == [
        ("job", "workflow"),
        ("workflow", "certification"),
        ("workflow", "workloadrun"),
        ("workflow", "job"),
    ]


# -- the bundled certification traces ---------------------------------------------------------
TRACES = Path(__file__).resolve().parent.parent / "examples" / "traces"
#: (type, reason, from, to, condition, controller); fallbacks end their reason in
#: ``StatusUpdateFailed``.
TraceEvent = tuple[str, str, str, str, str, str]
JC, WC, CC, RC = (
    "job-controller",
    "workflow-controller",
    "certification-controller",
    "workloadrun-controller",
)


def _n(reason: str, source: str, target: str, controller: str, condition: str = "") -> TraceEvent:
    return ("Normal", reason, source, target, condition, controller)


def _w(reason: str, source: str, target: str, controller: str, condition: str = "") -> TraceEvent:
    return ("Warning", reason, source, target, condition, controller)


IPR, SUC, FAI = "InProgress", "Succeeded", "Failed"
CREATED_JOB = _n("WorkloadCreated", "", IPR, JC)
COMPLETED_JOB = _n("WorkloadCompleted", IPR, SUC, JC)
PARTITIONED = _n("GroupsPartitioned", "", IPR, WC)
MET = _n("ThresholdsMet", "", "False", JC, "ValidationFailed")
VIOLATED = _w("ThresholdViolated", "", "True", JC, "ValidationFailed")
CERT_CREATED = _n("WorkflowCreated", "", IPR, CC)
CERT_FAILED = _w("WorkflowFailed", IPR, FAI, CC)

#: Per bundled certification trace, per object uid: the exact events, in order.
TRACE_EVENTS: dict[str, dict[str, list[TraceEvent]]] = {
    "certification-job-thresholds.jsonl": {
        "job-plain": [CREATED_JOB, COMPLETED_JOB],
        "job-gated": [CREATED_JOB, COMPLETED_JOB, MET],
    },
    "certification-threshold-cascade.jsonl": {
        "cert-h100": [CERT_CREATED, CERT_FAILED],
        "wf-nccl": [PARTITIONED, _w("JobValidationFailed", IPR, FAI, WC)],
        "run-llama": [
            _n("WorkflowCreated", "", IPR, RC),
            _w("WorkflowValidationFailed", IPR, FAI, RC),
        ],
        "wf-llama": [PARTITIONED, _w("JobValidationFailed", IPR, FAI, WC)],
        "nccl-g0": [CREATED_JOB, COMPLETED_JOB, MET],
        "nccl-g1": [CREATED_JOB, COMPLETED_JOB, VIOLATED],
        "llama-g0": [CREATED_JOB, COMPLETED_JOB, VIOLATED],
        "llama-g1": [CREATED_JOB, COMPLETED_JOB, MET],
    },
    "certification-hardware-teardown.jsonl": {
        "cert-h100": [CERT_CREATED, CERT_FAILED],
        "wf-hw": [PARTITIONED, _w("JobHardwareFailed", IPR, FAI, WC)],
        "hw-g0": [
            CREATED_JOB,
            _w("HardwareFailureDetected", "", "True", JC, "HardwareFailed"),
            _w("WorkloadFailed", IPR, FAI, JC),
        ],
    },
    "certification-timeout.jsonl": {
        "cert-h100": [CERT_CREATED, CERT_FAILED],
        "wf-timeout": [PARTITIONED, _w("IterationsFailed", IPR, FAI, WC)],
        "slow-g0": [CREATED_JOB, _w("JobTimedOut", IPR, FAI, WC)],
    },
    "certification-conflict-then-success.jsonl": {
        "wf-conflict": [PARTITIONED, _n("JobCompleted", IPR, SUC, WC)],
        "conflict-g0": [CREATED_JOB, COMPLETED_JOB],
    },
    "certification-conflict-exhaustion.jsonl": {
        "wf-exhaust": [PARTITIONED],
        # no fallback: the Job's next pass redoes the write and sends WorkloadFailed itself
        "exhaust-g0": [CREATED_JOB],
        "run-llama": [_n("WorkflowCreated", "", IPR, RC)],
    },
    "certification-countdown-churn.jsonl": {
        "cert-h100": [_n("WaitingForNodes", "", IPR, CC)],
        "wf-churn": [PARTITIONED],
        "churn-g0": [CREATED_JOB],
    },
    "certification-fallback-then-transition.jsonl": {
        "run-broken": [
            _w("BuildFailedStatusUpdateFailed", "", FAI, RC),
            _w("BuildFailed", "", FAI, RC),
        ],
        "wf-mixed": [
            _w("HeterogeneousPlatformStatusUpdateFailed", "", FAI, WC),
            _w("HeterogeneousPlatform", "", FAI, WC),
        ],
        "wf-override": [
            _w("OverrideErrorStatusUpdateFailed", "", FAI, WC),
            _w("OverrideError", "", FAI, WC),
        ],
    },
}


def test_every_certification_trace_has_its_events_written_down() -> None:
    assert {p.name for p in TRACES.glob("certification-*.jsonl")} == set(TRACE_EVENTS)


@pytest.mark.parametrize("name", sorted(TRACE_EVENTS))
def test_certification_trace_replays_to_its_events(name: str, store: Store) -> None:
    emitter = MemoryEmitter()
    replay(read_trace(TRACES / name), store, [emitter], name=name)
    got: dict[str, list[TraceEvent]] = {}
    for e in emitter.events:
        got.setdefault(e.ref.uid, []).append(
            (e.type.value, e.reason, e.source, e.target, e.condition, e.controller)
        )
        assert e.fallback == e.reason.endswith("StatusUpdateFailed")
    assert got == TRACE_EVENTS[name]
    emitter.assert_no_duplicates()


def test_the_countdown_trace_rewrites_the_message_without_an_event() -> None:
    store = MemoryStore()
    replay(read_trace(TRACES / "certification-countdown-churn.jsonl"), store, [])
    record = store.load(
        certification.CERTIFICATION, ObjectRef("Certification", "fleet", "h100-pool", "cert-h100")
    )
    assert record is not None
    entries = store.journal(certification.CERTIFICATION, record.ref)
    messages = [e for e in entries if not e.transitions]
    assert len(messages) >= 4  # countdown rewrites, generation bump, WorkflowCreated, reports
    assert record.status.generation == 2
