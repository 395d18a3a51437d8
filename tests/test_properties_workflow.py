"""The ``lifecycle.testing`` property suite on the Job, Workflow, Certification and WorkloadRun
machines: pure apply, table rules (the Certification's declared recovery row included), flip-only,
action events (not transitions, no id), post-write, the retry budget (one attempt for a
WorkloadRun), absorption, journal folding, redelivery and determinism, over a shortest path to
each row and over generated scenarios with injected faults. The samples steer the generated
observations into the machines' deep states (Jobs that match their group, known categories).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from lifecycle.machines import CERTIFICATION, JOB, WORKFLOW, WORKLOADRUN
from lifecycle.machines.job import Measurement, Threshold
from lifecycle.testing import EPOCH, check_machine, sqlite_factory

pytestmark = pytest.mark.filterwarnings("ignore")

GOODPUT = (Threshold("goodput", ">= 0.9"),)
JOB_SAMPLES: dict[str, Any] = {
    "Submitted.thresholds": [
        (),
        GOODPUT,
        (Threshold("tflops", ">= 1"),),
        (Threshold("goodput", "?"),),
    ],
    "Submitted.nodes": [(), ("n1", "n2")],
    "Submitted.max_restarts": [0, 1, 2],
    "Submitted.checkpoint": [False, True],
    "Submitted.startup_timeout_s": [None, 30.0],
    "Submitted.stall_threshold_s": [None, 30.0],
    "Submitted.measurement_timeout_s": [300.0, 10.0],
    "Submitted.generation": [1],
    "SpecUpdated.generation": [1, 2, 3],
    "MeasurementsReported.values": [
        (),
        (Measurement("goodput", 0.95),),
        (Measurement("goodput", 0.5),),
    ],
    "HardwareFault.node": ["n1", "n2"],
    "HardwareFault.reason": ["XID79", "XID48"],
    "message": ["", "exit 1"],
    "failure_log": ["", "NCCL error"],
    "nodes": [(), ("n1",)],
    "error": ["boom", ""],
    "step": [0, 1],
}
JOBS = ("j0", "j1")
WORKFLOW_SAMPLES: dict[str, Any] = {
    "Submitted.owner_kind": [""],
    "Submitted.iterations": [1, 2],
    "Submitted.retry_failed_groups": [0, 1],
    "Submitted.drain_grace_s": [0.0, 30.0],
    "Submitted.timeout_per_job_s": [None, 60.0],
    "Submitted.generation": [1],
    "SpecUpdated.generation": [1, 2],
    "Partitioned.nodes": [2, 4],
    "Partitioned.groups": [1, 2],
    "Partitioned.nodes_per_job": [2],
    "JobLaunched.group": [0, 1],
    "JobLaunched.job": ["job"],
    "JobLaunched.uid": JOBS,
    "JobObserved.job_uid": JOBS,
    "JobObserved.group": [0, 1],
    "JobObserved.state": ["InProgress", "Succeeded", "Failed"],
    "JobObserved.reason": ["WorkloadRunning", "WorkloadFailed", "JobTimedOut"],
    "JobObserved.workload_start_time": [None, EPOCH + timedelta(seconds=5)],
    "DependencyCreateFailed.collision": ["", "dependency", "job"],
    "required": [1, 8],
    "kept": [1],
    "total": [2],
}
CATEGORIES = ("nccl/v1", "hpl/v2")
CERTIFICATION_SAMPLES: dict[str, Any] = {
    "Submitted.categories": [CATEGORIES, CATEGORIES[:1]],
    "Submitted.node_wait_s": [300.0, 30.0],
    "Submitted.generation": [1],
    "SpecUpdated.generation": [1, 2],
    "category": list(CATEGORIES),
    "workflow": ["wf"],
    "uid": ["w1"],
    "WorkflowObserved.state": ["InProgress", "Succeeded", "Failed"],
}
WORKLOADRUN_SAMPLES: dict[str, Any] = {
    "workflow": ["wf", "other"],
    "uid": ["w1", ""],
    "WorkflowObserved.state": ["InProgress", "Succeeded", "Failed"],
    "WorkflowObserved.reason": ["JobRunning", "JobValidationFailed", "IterationsFailed"],
}

CASES = [
    ("job", JOB, JOB_SAMPLES, 5),
    ("workflow", WORKFLOW, WORKFLOW_SAMPLES, 5),
    ("certification", CERTIFICATION, CERTIFICATION_SAMPLES, 5),
    ("workloadrun", WORKLOADRUN, WORKLOADRUN_SAMPLES, 1),
]


@pytest.mark.parametrize(
    ("name", "machine", "samples", "attempts"), CASES, ids=[c[0] for c in CASES]
)
def test_the_property_suite_holds(name: str, machine: Any, samples: Any, attempts: int) -> None:
    check_machine(
        machine,
        samples=samples,
        attempts=attempts,
        max_examples=60,
        # rows a one-field-at-a-time search cannot reach (a Job with both a checkpoint and a
        # restart budget) have their own cases in tests/machines/test_*.py
        require_all_rows=False,
    )


@pytest.mark.parametrize(
    ("name", "machine", "samples", "attempts"), CASES, ids=[c[0] for c in CASES]
)
def test_the_property_suite_holds_on_sqlite(
    name: str, machine: Any, samples: Any, attempts: int, tmp_path: Any
) -> None:
    check_machine(
        machine,
        samples=samples,
        attempts=attempts,
        store_factory=sqlite_factory(tmp_path),
        max_examples=10,
        rows=False,
    )
