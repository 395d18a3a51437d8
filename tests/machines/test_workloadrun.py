"""One case per row of the WorkloadRun table (domain doc §(a) "WorkloadRun", sites 10-12), then
what differs from the other tiers: ``Superseded`` for the non-true types, no
observedGeneration, the status-only ValidationFailed copy, the single-attempt write and the
``BuildFailedStatusUpdateFailed`` fallback."""

from __future__ import annotations

from typing import Any

import pytest

from lifecycle import (
    EventType,
    MemoryEmitter,
    MemoryStore,
    ObjectRef,
    Outcome,
    RetryPolicy,
    Runner,
)
from lifecycle.machines.workloadrun import (
    WORKLOADRUN,
    ExecFrameworkMissing,
    LogProfileNotFound,
    WorkflowCreated,
    WorkflowCreateFailed,
    WorkflowGone,
    WorkflowObserved,
    WorkloadRunStatus,
)
from lifecycle.testing.fakes import FaultyStore
from tests.conftest import t

from .rowcases import Case, assert_every_row, assert_every_row_has_an_effect, fold, run

N, W = EventType.NORMAL, EventType.WARNING
REF = ObjectRef("WorkloadRun", "ml", "run-a", "run-1")
IP, S, F = "InProgress", "Succeeded", "Failed"
CREATED = (WorkflowCreated(at=t(1), workflow="run-a-wf", uid="wf-1"),)
FAILED_MSG = "1 groups failed across 1 iterations"
VALIDATION_MSG = "One or more Jobs failed performance threshold validation"


def seen(state: str, at: int, reason: str = "", message: str = "", **kw: Any) -> WorkflowObserved:
    return WorkflowObserved(
        at=t(at), workflow="run-a-wf", uid="wf-1", state=state, reason=reason, message=message, **kw
    )


DONE = (*CREATED, seen(S, 100, "JobCompleted"))
GONE = (*CREATED, WorkflowGone(at=t(100)))

CASES: list[Case] = []


def case(id: str, given: tuple[Any, ...], when: Any, **kw: Any) -> None:
    CASES.append(Case(id, tuple(given), when, **kw))


def unchanged(id: str, given: tuple[Any, ...], when: Any, **kw: Any) -> None:
    case(id, given, when, unchanged=True, **kw)


def _superseded(s: WorkloadRunStatus) -> None:
    others = [c for c in s.conditions if c.type in (IP, S, F) and c.status == "False"]
    assert {c.reason for c in others} == {"Superseded"}
    assert {c.observed_generation for c in s.conditions} == {None}


case(
    "build-failed",
    (),
    ExecFrameworkMissing(at=t(0)),
    state=F,
    reason="BuildFailed",
    message="workloadrun run-a: exec framework selected but spec.framework.exec is nil",
    flips=(("", W, "BuildFailed"),),
    check=_superseded,
)
unchanged("build-guard/after-create", CREATED, ExecFrameworkMissing(at=t(2)))
case(
    "workflow-created",
    (),
    CREATED[0],
    state=IP,
    reason="WorkflowCreated",
    message="Workflow run-a-wf created",
    flips=(("", N, "WorkflowCreated"),),
    check=lambda s: (s.workflow, s.workflow_uid) == ("run-a-wf", "wf-1"),
)
unchanged("workflow-created/again", CREATED, WorkflowCreated(at=t(2), workflow="other"))
unchanged(
    "create/already-exists",
    (),
    WorkflowCreateFailed(at=t(1), workflow="run-a-wf", error="exists", already_exists=True),
)
unchanged(
    "create/error-is-an-action",
    (),
    WorkflowCreateFailed(at=t(1), workflow="run-a-wf", error="quota"),
    actions=("WorkflowCreationError",),
)
unchanged("create/late-error", CREATED, WorkflowCreateFailed(at=t(2), workflow="x", error="e"))
unchanged(
    "observed/other-workflow",
    CREATED,
    WorkflowObserved(at=t(5), workflow="someone-else", state=F, message="x"),
)
case(
    "observed/succeeded",
    CREATED,
    seen(S, 100, "JobCompleted", "All 1 iterations completed successfully"),
    state=S,
    reason="WorkflowSucceeded",
    message="Workflow completed successfully",
    flips=(("", N, "WorkflowSucceeded"),),
    check=_superseded,
)


def _validation_copied(s: WorkloadRunStatus) -> None:
    c = s.condition("ValidationFailed")
    assert c is not None
    assert (c.status, c.reason, c.message) == ("True", "ThresholdViolation", VALIDATION_MSG)
    assert (s.workflow_state, s.workflow_reason) == (F, "JobValidationFailed")


case(
    "observed/failed-validation",
    CREATED,
    seen(
        F,
        100,
        "JobValidationFailed",
        FAILED_MSG,
        validation_failed=True,
        validation_message=VALIDATION_MSG,
    ),
    state=F,
    reason="WorkflowValidationFailed",
    message=FAILED_MSG,
    flips=(("", W, "WorkflowValidationFailed"),),
    check=_validation_copied,
)
case(
    "observed/failed",
    CREATED,
    seen(
        F,
        100,
        "JobHardwareFailed",
        FAILED_MSG + "; hardware failures occurred on one or more nodes",
    ),
    state=F,
    reason="WorkflowFailed",
    message=FAILED_MSG + "; hardware failures occurred on one or more nodes",
    flips=(("", W, "WorkflowFailed"),),
    check=lambda s: s.condition("ValidationFailed") is None,
)
case(
    "observed/running-mirrors",
    CREATED,
    seen(IP, 10, "JobRunning", "Iteration 1/1: 2 groups running"),
    state=IP,
    reason="WorkflowCreated",
    message="Workflow run-a-wf created",
    check=lambda s: (
        (s.workflow_reason, s.workflow_message) == ("JobRunning", "Iteration 1/1: 2 groups running")
    ),
)
unchanged("observed/no-workflow-ref", (), seen(IP, 10))
case(
    "gone",
    CREATED,
    WorkflowGone(at=t(50)),
    state=F,
    reason="WorkflowDeleted",
    message="Workflow was deleted",
    flips=(("", W, "WorkflowDeleted"),),
)
unchanged("gone/no-workflow-ref", (), WorkflowGone(at=t(50)))
unchanged(
    "log-profile-not-found",
    CREATED,
    LogProfileNotFound(at=t(5), profile="nccl-tests"),
    actions=("LogProfileNotFound",),
)
for name, obs in {"observed": seen(F, 900, message="x"), "gone": WorkflowGone(at=t(900))}.items():
    unchanged(f"stop/{name}/succeeded", DONE, obs)
    unchanged(f"stop/{name}/failed", GONE, obs)


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_row(c: Case) -> None:
    run(WORKLOADRUN, REF, c)


def test_every_row_is_exercised() -> None:
    assert_every_row(WORKLOADRUN, REF, CASES)
    assert_every_row_has_an_effect(WORKLOADRUN)


def test_validation_failed_is_copied_without_an_event() -> None:
    before = fold(WORKLOADRUN, REF, CREATED)
    after = WORKLOADRUN.apply(
        before,
        seen(F, 9, "JobValidationFailed", "m", validation_failed=True, validation_message="v"),
    )
    assert [f.reason for f in WORKLOADRUN.flips(before, after)] == ["WorkflowValidationFailed"]
    assert WORKLOADRUN.verdicts == ()


# -- a single attempt per write ---------------------------------------------------------------
def test_a_conflict_is_not_retried_and_emits_nothing() -> None:
    store, emitter = FaultyStore(MemoryStore()), MemoryEmitter()
    runner = Runner(store, [emitter], policy=RetryPolicy(attempts=5, backoff=0))
    runner.observe(REF, CREATED[0])
    emitter.clear()
    store.inject(REF.uid, "conflict")
    result = runner.observe(REF, seen(S, 100, "JobCompleted"))
    assert (result.outcome, result.attempts) == (Outcome.FAILED, 1)
    assert emitter.events == []  # a Normal flip lost: no fallback either
    # the next reconcile re-reads and writes
    result = runner.observe(REF, seen(S, 115, "JobCompleted"))
    assert result.committed
    assert emitter.reasons() == ["WorkflowSucceeded"]


def test_a_per_machine_policy_overrides_the_declared_attempts() -> None:
    runner = Runner(MemoryStore(), policies={"workloadrun": RetryPolicy(attempts=3, backoff=0)})
    assert runner.policy_for(WORKLOADRUN).attempts == 3
    assert Runner(MemoryStore()).policy_for(WORKLOADRUN).attempts == 1


def test_a_failed_build_write_sends_the_fallback_then_the_transition_next_pass() -> None:
    store, emitter = FaultyStore(MemoryStore()), MemoryEmitter()
    runner = Runner(store, [emitter])
    store.inject(REF.uid, "write-error")
    failed = runner.observe(REF, ExecFrameworkMissing(at=t(0)))
    assert failed.outcome is Outcome.FAILED
    (fallback,) = emitter.events
    assert (fallback.reason, fallback.type, fallback.fallback) == (
        "BuildFailedStatusUpdateFailed",
        W,
        True,
    )
    assert fallback.message == (
        "WorkloadRun build failed: workloadrun run-a: exec framework selected but "
        "spec.framework.exec is nil; recording the WorkloadRun Failed condition also failed: "
        "injected write error on run-1"
    )
    assert fallback.controller == "workloadrun-controller"
    runner.observe(REF, ExecFrameworkMissing(at=t(15)))
    assert emitter.reasons() == ["BuildFailedStatusUpdateFailed", "BuildFailed"]
    assert emitter.events[0].id != emitter.events[1].id
