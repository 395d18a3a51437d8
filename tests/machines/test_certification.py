"""One case per row of the Certification table (domain doc §(a) "Certification", sites 7-9),
then the WaitingForNodes window, categories advancing, the rejected Create that the catch-all
does not overwrite, and the one declared exception to terminal absorption (the recovery row)."""

from __future__ import annotations

from typing import Any

import pytest

from lifecycle import (
    EventType,
    InvalidObservation,
    MemoryEmitter,
    MemoryStore,
    ObjectRef,
    Runner,
    TableError,
    Tick,
)
from lifecycle._core.table import Row, Table
from lifecycle.machines import certification
from lifecycle.machines.certification import (
    CERTIFICATION,
    BuildFailed,
    Category,
    CategoryNotFound,
    CertificationStatus,
    NICResourcesDetected,
    NoSchedulableNodes,
    SpecUpdated,
    Submitted,
    WorkflowCreated,
    WorkflowCreateRejected,
    WorkflowMissing,
    WorkflowNameCollision,
    WorkflowObserved,
)
from tests.conftest import t

from .rowcases import Case, assert_every_row, assert_every_row_has_an_effect, fold, run

N, W = EventType.NORMAL, EventType.WARNING
REF = ObjectRef("Certification", "ml", "cert", "cert-1")
IP, S, F = "InProgress", "Succeeded", "Failed"
NCCL, HPL = "nccl/v1", "hpl/v2"

SPEC = Submitted(at=t(0), categories=(NCCL, HPL), selector="gpu=h100")
WAITING_MSG = (
    "No schedulable nodes match gpu=h100; retrying for up to {} more. "
    "Nodes that are cordoned or unschedulable do not count."
)
NO_NODES_MSG = (
    "No schedulable nodes match gpu=h100 after waiting 5m0s. "
    "Nodes that are cordoned or unschedulable do not count."
)


def created(category: str, at: int) -> WorkflowCreated:
    name = category.split("/")[0]
    return WorkflowCreated(at=t(at), category=category, workflow=f"cert-{name}", uid=f"w-{name}")


def seen(category: str, state: str, at: int, reason: str = "") -> WorkflowObserved:
    name = category.split("/")[0]
    return WorkflowObserved(
        at=t(at),
        category=category,
        workflow=f"cert-{name}",
        uid=f"w-{name}",
        state=state,
        reason=reason,
    )


WAITING = (SPEC, NoSchedulableNodes(at=t(30)))
FIRST = (SPEC, created(NCCL, 10))
NCCL_DONE = (*FIRST, seen(NCCL, S, 100))
BOTH_RUNNING = (*NCCL_DONE, created(HPL, 110))
ALL_DONE = (*BOTH_RUNNING, seen(HPL, S, 200))
#: Failed because NCCL's Workflow was confirmed missing after HPL had failed.
MISSING_FAILED = (
    *FIRST,
    created(HPL, 20),
    seen(HPL, F, 50),
    WorkflowMissing(at=t(60), category=NCCL),
)

CASES: list[Case] = []


def case(id: str, given: tuple[Any, ...], when: Any, **kw: Any) -> None:
    CASES.append(Case(id, tuple(given), when, **kw))


def unchanged(id: str, given: tuple[Any, ...], when: Any, **kw: Any) -> None:
    case(id, given, when, unchanged=True, **kw)


def _categories(*states: str) -> Any:
    def check(s: CertificationStatus) -> None:
        assert tuple(c.state for c in s.categories) == states

    return check


case("submitted", (), SPEC, state="", check=_categories("Pending", "Pending"))
unchanged("generation/stale", FIRST, SpecUpdated(at=t(11), generation=1))
case(
    "generation/bump",
    FIRST,
    SpecUpdated(at=t(11), generation=2),
    check=lambda s: {c.observed_generation for c in s.conditions} == {2},
)
case(
    "category-not-found",
    (),
    CategoryNotFound(at=t(0), category="nvlink/v9"),
    state=F,
    reason="CategoryNotFound",
    message="Unknown certification category: nvlink/v9",
    flips=(("", W, "CategoryNotFound"),),
)
# -- waiting for nodes ------------------------------------------------------------------------
case(
    "no-nodes/first-pass",
    (SPEC,),
    NoSchedulableNodes(at=t(30)),
    state=IP,
    reason="WaitingForNodes",
    message=WAITING_MSG.format("4m30s"),
    flips=(("", N, "WaitingForNodes"),),
)
case(
    "no-nodes/after-window",
    WAITING,
    NoSchedulableNodes(at=t(300)),
    state=F,
    reason="WorkflowValidationFailed",
    message=NO_NODES_MSG,
    flips=(("", W, "WorkflowValidationFailed"),),
)
case(
    "tick/window-over",
    WAITING,
    Tick(at=t(301)),
    state=F,
    reason="WorkflowValidationFailed",
    message=NO_NODES_MSG,
    flips=(("", W, "WorkflowValidationFailed"),),
)
case(
    "tick/countdown",
    WAITING,
    Tick(at=t(90)),
    state=IP,
    reason="WaitingForNodes",
    message=WAITING_MSG.format("3m30s"),
)
unchanged("tick/no-window", FIRST, Tick(at=t(400)))
# -- workflows, category after category -------------------------------------------------------
unchanged("created/again", FIRST, created(NCCL, 11))
case(
    "created/first",
    (SPEC,),
    created(NCCL, 10),
    state=IP,
    reason="WorkflowCreated",
    message="Created Workflow for category nccl/v1 (1 of 2)",
    flips=(("", N, "WorkflowCreated"),),
    check=_categories("Running", "Pending"),
)
unchanged(
    "observed/other-workflow",
    FIRST,
    WorkflowObserved(at=t(20), category=NCCL, workflow="x", uid="w-other", state=IP),
)
case(
    "observed/all-succeeded",
    BOTH_RUNNING,
    seen(HPL, S, 200),
    state=S,
    reason="AllWorkflowsSucceeded",
    message="All certification categories completed successfully",
    flips=(("", N, "AllWorkflowsSucceeded"),),
)
case(
    "observed/one-failed",
    BOTH_RUNNING,
    seen(HPL, F, 200, "JobValidationFailed"),
    state=F,
    reason="WorkflowFailed",
    message="One or more certification categories failed",
    flips=(("", W, "WorkflowFailed"),),
)
case(
    "observed/advancing",
    FIRST,
    seen(NCCL, S, 100),
    state=IP,
    reason="WorkflowRunning",
    message="Workflow for category nccl/v1 succeeded, advancing to next category",
    check=_categories("Succeeded", "Pending"),
)
case(
    "observed/advancing-failed",
    FIRST,
    seen(NCCL, F, 100),
    state=IP,
    reason="WorkflowRunning",
    message="Workflow for category nccl/v1 failed, advancing to next category",
)
case(
    "observed/running",
    FIRST,
    seen(NCCL, IP, 20, "JobRunning"),
    state=IP,
    reason="WorkflowRunning",
    message="Certification in progress",
)
unchanged("observed/before-any-workflow", (SPEC,), seen(NCCL, IP, 20))
case(
    "observed/recovered",
    MISSING_FAILED,
    seen(NCCL, IP, 70, "JobRunning"),
    state=IP,
    reason="WorkflowRunning",
    message="Recovered: Workflow still running",
    flips=(("", N, "WorkflowRunning"),),
    check=_categories("Running", "Failed"),
)
case(
    "missing/last",
    (*FIRST, created(HPL, 20), seen(HPL, S, 50)),
    WorkflowMissing(at=t(60), category=NCCL),
    state=F,
    reason="WorkflowFailed",
    flips=(("", W, "WorkflowFailed"),),
)
case(
    "missing/advancing",
    FIRST,
    WorkflowMissing(at=t(60), category=NCCL),
    state=IP,
    reason="WorkflowRunning",
    message="Workflow for category nccl/v1 not found",
    check=_categories("Failed", "Pending"),
)
unchanged("missing/before-any-workflow", (SPEC,), WorkflowMissing(at=t(60), category=NCCL))
REJECTED_MSG = "Failed to create Workflow cert-nccl: admission webhook denied"
case(
    "create-rejected",
    (SPEC,),
    WorkflowCreateRejected(
        at=t(10), category=NCCL, workflow="cert-nccl", error="admission webhook denied"
    ),
    state=F,
    reason="WorkflowFailed",
    message=REJECTED_MSG,
    flips=(("", W, "WorkflowFailed"),),
    actions=("WorkflowCreationError",),
)
case(
    "name-collision",
    FIRST,
    WorkflowNameCollision(
        at=t(10), workflow="cert-hpl", error="Workflow cert-hpl is owned by another"
    ),
    state=F,
    reason="WorkflowNameCollision",
    message="Workflow cert-hpl is owned by another",
    flips=(("", W, "WorkflowNameCollision"),),
)
case(
    "build-failed/catch-all",
    (SPEC,),
    BuildFailed(at=t(10), error="template: bad value"),
    state=F,
    reason="WorkflowValidationFailed",
    message="template: bad value",
    flips=(("", W, "WorkflowValidationFailed"),),
)
unchanged(
    "nic-detection",
    FIRST,
    NICResourcesDetected(at=t(11), resources=("rdma/ib0", "rdma/ib1")),
    actions=("NICResourceDetection",),
)
# -- terminal: absorbing ----------------------------------------------------------------------
for name, obs in {
    "submitted": Submitted(at=t(900), categories=("x/y",)),
    "category-not-found": CategoryNotFound(at=t(900), category="x/y"),
}.items():
    unchanged(f"stop/{name}/in-progress", FIRST, obs)
    unchanged(f"stop/{name}/succeeded", ALL_DONE, obs)
for name, obs in {
    "spec": SpecUpdated(at=t(900), generation=7),
    "no-nodes": NoSchedulableNodes(at=t(900)),
    "tick": Tick(at=t(900)),
    "created": created(HPL, 900),
    "observed": seen(HPL, S, 900),
    "missing": WorkflowMissing(at=t(900), category=HPL),
    "rejected": WorkflowCreateRejected(at=t(900), category=HPL, workflow="x", error="e"),
    "collision": WorkflowNameCollision(at=t(900), workflow="x", error="e"),
    "build-failed": BuildFailed(at=t(900), error="e"),
}.items():
    unchanged(f"stop/{name}/succeeded", ALL_DONE, obs)
    unchanged(f"stop/{name}/failed", MISSING_FAILED, obs)


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_row(c: Case) -> None:
    run(CERTIFICATION, REF, c)


def test_every_row_is_exercised() -> None:
    assert_every_row(CERTIFICATION, REF, CASES)
    assert_every_row_has_an_effect(CERTIFICATION)


# -- the recovery row -------------------------------------------------------------------------
def test_the_recovery_row_is_the_one_declared_exit_from_a_terminal_state() -> None:
    (row,) = certification.TABLE.recovery_rows
    assert (row.sources, row.target, row.reason, row.guard) == (
        (F,),
        IP,
        "WorkflowRunning",
        certification.recovers,
    )
    left = [
        r
        for r in certification.TABLE.rows
        if any(s in certification.TABLE.terminal for s in r.sources)
        and not r.ignore
        and r.target not in ("=", *r.sources)
    ]
    assert left == [row]


def test_a_table_refuses_an_undeclared_exit_from_a_terminal_state() -> None:
    def build(**extra: Any) -> Table:
        return Table(
            "t",
            states=("", "Failed"),
            initial="",
            terminal=("Failed",),
            observations=(Tick,),
            rows=(Row("Failed", Tick, to="", reason="Again", event=N, **extra),),
        )

    with pytest.raises(TableError, match="recovery=True"):
        build()
    assert build(recovery=True).recovery_rows != ()
    with pytest.raises(TableError, match="must leave a terminal state"):
        Table(
            "t",
            states=("", "Failed"),
            initial="",
            terminal=("Failed",),
            observations=(Tick,),
            rows=(Row("", Tick, to="Failed", reason="X", event=W, recovery=True),),
        )


def test_a_failed_category_whose_workflow_ended_does_not_recover() -> None:
    status = fold(CERTIFICATION, REF, MISSING_FAILED)
    assert CERTIFICATION.apply(status, seen(NCCL, F, 70)) == status


# -- the window, the countdown and the catch-all ----------------------------------------------
def test_waiting_for_nodes_emits_once_and_the_countdown_emits_nothing() -> None:
    emitter = MemoryEmitter()
    runner = Runner(MemoryStore(), [emitter])
    for obs in (*WAITING, NoSchedulableNodes(at=t(60)), Tick(at=t(120)), Tick(at=t(180))):
        runner.observe(REF, obs)
    assert emitter.reasons() == ["WaitingForNodes"]
    runner.observe(REF, created(NCCL, 200))
    assert emitter.reasons() == ["WaitingForNodes"]  # InProgress -> InProgress: no event
    record = runner.store.load(CERTIFICATION, REF)
    assert record is not None
    assert record.status.message == "Created Workflow for category nccl/v1 (1 of 2)"


def test_a_rejected_create_is_two_warnings_and_the_catch_all_does_not_overwrite_it() -> None:
    emitter = MemoryEmitter()
    runner = Runner(MemoryStore(), [emitter])
    runner.observe(REF, SPEC)
    rejected = WorkflowCreateRejected(at=t(10), category=NCCL, workflow="cert-nccl", error="denied")
    runner.observe(REF, rejected)
    runner.observe(REF, BuildFailed(at=t(10), error="denied"))
    assert [(e.reason, e.type, e.action) for e in emitter.events] == [
        ("WorkflowCreationError", W, True),
        ("WorkflowFailed", W, False),
    ]
    assert {e.message for e in emitter.events} == {"Failed to create Workflow cert-nccl: denied"}
    record = runner.store.load(CERTIFICATION, REF)
    assert record is not None
    assert record.status.reason == "WorkflowFailed"


def test_categories_advance_one_after_another() -> None:
    status = fold(CERTIFICATION, REF, ALL_DONE)
    assert status.categories == (
        Category(NCCL, S, "cert-nccl", "w-nccl"),
        Category(HPL, S, "cert-hpl", "w-hpl"),
    )
    second = fold(CERTIFICATION, REF, BOTH_RUNNING)
    assert second.message == "Created Workflow for category hpl/v2 (2 of 2)"


# -- bad input --------------------------------------------------------------------------------
def test_an_unknown_category_is_refused_and_the_store_untouched() -> None:
    store = MemoryStore()
    runner = Runner(store)
    for obs in FIRST:
        runner.observe(REF, obs)
    before = store.load(CERTIFICATION, REF)
    with pytest.raises(InvalidObservation, match="unknown category 'nvlink/v9'"):
        runner.observe(REF, seen("nvlink/v9", IP, 20))
    with pytest.raises(InvalidObservation, match="unknown category"):
        runner.observe(REF, WorkflowCreated(at=t(20), category="nvlink/v9", workflow="w"))
    assert store.load(CERTIFICATION, REF) == before


@pytest.mark.parametrize(
    "fields",
    [
        {"categories": []},
        {"categories": ["a/b", "a/b"]},
        {"categories": ["a/b"], "node_wait_s": -1},
        {"categories": "a/b"},
    ],
)
def test_bad_submissions_are_refused(fields: dict[str, object]) -> None:
    with pytest.raises(InvalidObservation):
        CERTIFICATION.observation("Submitted", t(0).isoformat(), fields)


def test_a_tick_back_in_time_is_refused() -> None:
    with pytest.raises(InvalidObservation, match="goes back in time"):
        CERTIFICATION.apply(fold(CERTIFICATION, REF, WAITING), Tick(at=t(10)))
