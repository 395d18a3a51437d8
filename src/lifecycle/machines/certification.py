"""The Certification lifecycle: one Workflow per certification category, run in turn.

Behaviour follows ``docs/upstream/workflow-job-certification.md`` ("Certification"). The
Certification reads its Workflows through their committed statuses (:class:`WorkflowObserved`,
wired by :mod:`lifecycle.links`).

- No schedulable nodes: InProgress / ``WaitingForNodes`` with a countdown (the message changes
  each pass, the event fires on the first only); after the window (5 minutes from creation,
  decided on a :class:`~lifecycle.Tick` or the next pass) the catch-all
  ``WorkflowValidationFailed``.
- A rejected Create sends the action Warning ``WorkflowCreationError`` and writes Failed /
  ``WorkflowFailed``; Failed absorbs, so a later catch-all cannot overwrite it.
- The one declared exception to terminal absorption (a ``recovery`` row): Failed ->
  InProgress ``Recovered: Workflow still running`` when a Failed category's Workflow turns
  out to be running.

Chosen here (upstream's text is not known): the catch-all message after the window, and the
``NICResourceDetection`` note.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, ClassVar

import attrs

from .._core.errors import InvalidObservation, preview
from .._core.machine import replace
from .._core.observation import Observation, Tick
from .._core.refs import Condition, EventType
from .._core.table import SAME, Action, Row, Table, ignore, no_timer
from ._conditions import (
    FAILED,
    IN_PROGRESS,
    LIVE,
    NEW,
    SPEC_UPDATED_ROWS,
    STATES,
    SUCCEEDED,
    TERMINAL,
    Conditioned,
    ConditionMachine,
    action_row,
    exclusive,
    go_duration,
    not_negative,
    positive,
    seconds,
)
from ._conditions import (
    SpecUpdated as SpecUpdated,  # re-exported: part of this vocabulary
)
from ._timers import EARLIEST, expiry, ticked

CERTIFICATION_CONTROLLER = "certification-controller"
PENDING = "Pending"
RUNNING = "Running"
DEFAULT_NODE_WAIT = 300.0

# -- reasons ----------------------------------------------------------------------------------
CATEGORY_NOT_FOUND = "CategoryNotFound"
WAITING_FOR_NODES = "WaitingForNodes"
WORKFLOW_CREATED = "WorkflowCreated"
WORKFLOW_RUNNING = "WorkflowRunning"
WORKFLOW_CREATION_ERROR = "WorkflowCreationError"
WORKFLOW_FAILED = "WorkflowFailed"
WORKFLOW_NAME_COLLISION = "WorkflowNameCollision"
WORKFLOW_VALIDATION_FAILED = "WorkflowValidationFailed"
ALL_WORKFLOWS_SUCCEEDED = "AllWorkflowsSucceeded"
NIC_RESOURCE_DETECTION = "NICResourceDetection"

# -- messages ---------------------------------------------------------------------------------
MSG_CATEGORY_NOT_FOUND = "Unknown certification category: {category}"
MSG_WAITING = (
    "No schedulable nodes match {selector}; retrying for up to {remaining} more. "
    "Nodes that are cordoned or unschedulable do not count."
)
MSG_NO_NODES = (
    "No schedulable nodes match {selector} after waiting {window}. "
    "Nodes that are cordoned or unschedulable do not count."
)
MSG_CREATED = "Created Workflow for category {category} ({index} of {total})"
MSG_IN_PROGRESS = "Certification in progress"
MSG_ADVANCING = "Workflow for category {category} succeeded, advancing to next category"
MSG_ADVANCING_FAILED = "Workflow for category {category} failed, advancing to next category"
MSG_NOT_FOUND = "Workflow for category {category} not found"
MSG_CREATE_REJECTED = "Failed to create Workflow {workflow}: {error}"
MSG_FAILED = "One or more certification categories failed"
MSG_SUCCEEDED = "All certification categories completed successfully"
MSG_RECOVERED = "Recovered: Workflow still running"
MSG_NIC = "Detected NIC resources: {names}"


@attrs.frozen(slots=True)
class Category:
    """One certification category of the run (``name`` is ``"<domain>/<version>"``): its state and
    the Workflow that runs it.

    Attributes:
        name: the category, ``"<domain>/<version>"``.
        state: its state (``Pending``, ``Running``, ``Succeeded``, ``Failed``).
        workflow: the name of the Workflow that runs it.
        workflow_uid: that Workflow's UID, so a report from another Workflow of the same name is
            ignored.
    """

    name: str  # "<domain>/<version>"
    state: str = PENDING
    workflow: str = ""
    workflow_uid: str = ""


@attrs.frozen(slots=True)
class CertificationStatus(Conditioned):
    """A Certification's status: its conditions (``state`` is their true type) and bookkeeping.

    Attributes:
        name: the Certification's name.
        conditions: its conditions, the exclusive set first; the true one is its state.
        generation: the ``metadata.generation`` last stamped as observedGeneration.
        clock: the ``at`` of the last observation that changed the status: a Tick before it is
            refused, so time never goes back.
        selector: the node selector its Workflows run on.
        node_wait_s: how long it waits for a schedulable node before it fails, counted from
            ``created_at``: nodes may still be joining.
        created_at: when it was first observed.
        categories: its categories, in the order they run.
    """

    name: str = ""
    conditions: tuple[Condition, ...] = ()
    generation: int = 1
    clock: datetime | None = None
    selector: str = ""
    node_wait_s: float = DEFAULT_NODE_WAIT
    created_at: datetime | None = None
    categories: tuple[Category, ...] = ()

    def category(self, name: str) -> Category:
        """The category of this name.

        Args:
            name: the category, ``"<domain>/<version>"``.

        Returns:
            The category's record.

        Raises:
            InvalidObservation: the Certification has no such category (an observation named one
                it was not submitted with).
        """
        for c in self.categories:
            if c.name == name:
                return c
        known = ", ".join(c.name for c in self.categories) or "none (not submitted)"
        raise InvalidObservation(
            f"certification {self.name}: unknown category {preview(name)}; its categories: {known}"
        )


# -- observations -----------------------------------------------------------------------------
def _categories(_: object, attribute: attrs.Attribute[Any], value: tuple[str, ...]) -> None:
    if not value:
        raise ValueError(f"{attribute.name} must name at least one category")
    if any(not v for v in value) or len(set(value)) != len(value):
        raise ValueError(f"{attribute.name} must be distinct, non-empty names: {preview(value)}")


@attrs.frozen(slots=True, kw_only=True)
class Submitted(Observation):
    """The Certification exists: its categories (``d/v``), run in this order.

    Attributes:
        categories: the categories to run, in order: at least one, distinct and non-empty.
        selector: the node selector the Workflows run on.
        node_wait_s: how long to wait for a schedulable node, not negative.
        generation: the Certification's ``metadata.generation``, at least 1.
    """

    categories: tuple[str, ...] = attrs.field(validator=_categories)
    selector: str = ""
    node_wait_s: float = attrs.field(default=DEFAULT_NODE_WAIT, validator=not_negative)
    generation: int = attrs.field(default=1, validator=positive)


@attrs.frozen(slots=True, kw_only=True)
class CategoryNotFound(Observation):
    """The requested ``category`` is not known: a new Certification fails (``CategoryNotFound``).

    Attributes:
        category: the unknown category.
    """

    category: str


@attrs.frozen(slots=True, kw_only=True)
class NoSchedulableNodes(Observation):
    """Building the next Workflow found no schedulable node matching the selector."""


@attrs.frozen(slots=True, kw_only=True)
class WorkflowCreated(Observation):
    """The Workflow ``workflow`` (uid ``uid``) was created for ``category``: the Certification is
    in progress (``WorkflowCreated``).

    Attributes:
        category: the category the Workflow runs.
        workflow: the Workflow's name.
        uid: its UID, when the create returned one.
    """

    category: str
    workflow: str
    uid: str = ""


@attrs.frozen(slots=True, kw_only=True)
class WorkflowObserved(Observation):
    """A category's Workflow as committed (wired by the Workflow -> Certification link).

    Attributes:
        category: the category the Workflow runs.
        workflow: the Workflow's name.
        uid: its UID; another than the category's is ignored.
        state: its state.
        reason: its reason.
        message: its message.
    """

    category: str
    workflow: str
    uid: str = ""
    state: str = ""
    reason: str = ""
    message: str = ""


@attrs.frozen(slots=True, kw_only=True)
class WorkflowMissing(Observation):
    """The category's Workflow was confirmed missing.

    Attributes:
        category: the category whose Workflow is missing; it fails.
    """

    category: str


@attrs.frozen(slots=True, kw_only=True)
class WorkflowCreateRejected(Observation):
    """Create was rejected (not AlreadyExists).

    Attributes:
        category: the category the Workflow was for.
        workflow: the Workflow's name.
        error: the API server's refusal.
    """

    category: str
    workflow: str
    error: str


@attrs.frozen(slots=True, kw_only=True)
class WorkflowNameCollision(Observation):
    """A Workflow this Certification does not own holds the name.

    Attributes:
        workflow: the name that is taken.
        error: the API server's answer.
    """

    workflow: str
    error: str


@attrs.frozen(slots=True, kw_only=True)
class BuildFailed(Observation):
    """Any other error building the Workflow: the catch-all.

    Attributes:
        error: why the Workflow could not be built.
    """

    error: str


@attrs.frozen(slots=True, kw_only=True)
class NICResourcesDetected(Observation):
    """NIC ``resources`` were detected on the nodes: an action event, the status unchanged.

    Attributes:
        resources: the NIC resource names found.
    """

    resources: tuple[str, ...]

    @property
    def names(self) -> str:
        return ", ".join(self.resources)


OBSERVATIONS: tuple[type[Observation], ...] = (
    Submitted,
    SpecUpdated,
    CategoryNotFound,
    NoSchedulableNodes,
    WorkflowCreated,
    WorkflowObserved,
    WorkflowMissing,
    WorkflowCreateRejected,
    WorkflowNameCollision,
    BuildFailed,
    NICResourcesDetected,
    Tick,
)


# -- categories -------------------------------------------------------------------------------
def _state_of(workflow_state: str) -> str:
    return workflow_state if workflow_state in TERMINAL else RUNNING


def _replace(status: CertificationStatus, category: Category) -> tuple[Category, ...]:
    return tuple(category if c.name == category.name else c for c in status.categories)


def _reported(status: CertificationStatus, obs: Observation) -> tuple[Category, ...]:
    """The categories after a Workflow report (or a confirmed-missing Workflow)."""
    if isinstance(obs, WorkflowObserved):
        c = status.category(obs.category)
        updated = replace(
            c, state=_state_of(obs.state), workflow=obs.workflow, workflow_uid=obs.uid
        )
    else:
        assert isinstance(obs, WorkflowMissing)
        updated = replace(status.category(obs.category), state=FAILED)
    return _replace(status, updated)


def _all_done(categories: tuple[Category, ...]) -> bool:
    return all(c.state in TERMINAL for c in categories)


# -- guards -----------------------------------------------------------------------------------
def _age(status: CertificationStatus, at: datetime) -> float:
    return seconds(at, status.created_at or at)


def within_window(status: CertificationStatus, obs: Observation) -> bool:
    """The Certification is younger than its wait for schedulable nodes.

    Args:
        status: the Certification.
        obs: the observation whose ``at`` is now.

    Returns:
        Whether the wait is not over.
    """
    return _age(status, obs.at) < status.node_wait_s


def waiting(status: CertificationStatus, obs: Observation) -> bool:
    """The Certification is waiting for schedulable nodes.

    Args:
        status: the Certification.
        obs: any observation.

    Returns:
        Whether its reason is ``WaitingForNodes``.
    """
    return status.reason == WAITING_FOR_NODES


def waiting_expired(status: CertificationStatus, obs: Observation) -> bool:
    """The Certification waits for schedulable nodes and the wait is over: it fails.

    Args:
        status: the Certification.
        obs: the observation whose ``at`` is now.

    Returns:
        Whether the wait ran out.
    """
    return waiting(status, obs) and not within_window(status, obs)


def window_deadline(status: CertificationStatus) -> datetime | None:
    """When the wait for schedulable nodes runs out (ADR 0149); ``None`` while not waiting.

    Args:
        status: the Certification.

    Returns:
        The instant the wait ends, or ``None`` when no Tick needs to come.
    """
    if status.reason != WAITING_FOR_NODES:
        return None
    if status.created_at is None:  # its age reads 0: out of the window at once, or never
        return EARLIEST if status.node_wait_s <= 0 else None
    return expiry(status.created_at, status.node_wait_s, ticked(waiting_expired, status))


def other_workflow(status: CertificationStatus, obs: WorkflowObserved) -> bool:
    """A report from a Workflow that is not the one this category runs (by uid).

    Args:
        status: the Certification.
        obs: the Workflow as committed.

    Returns:
        Whether the report is of another Workflow.

    Raises:
        InvalidObservation: ``obs`` names a category the Certification does not have.
    """
    c = status.category(obs.category)
    return bool(c.workflow_uid and obs.uid and c.workflow_uid != obs.uid)


def finishes_succeeded(status: CertificationStatus, obs: Observation) -> bool:
    """With this report every category has ended and all succeeded.

    Args:
        status: the Certification.
        obs: a Workflow report, or a Workflow confirmed missing.

    Returns:
        Whether the Certification succeeds.

    Raises:
        InvalidObservation: ``obs`` names a category the Certification does not have.
    """
    categories = _reported(status, obs)
    return _all_done(categories) and all(c.state == SUCCEEDED for c in categories)


def finishes_failed(status: CertificationStatus, obs: Observation) -> bool:
    """With this report every category has ended and one failed.

    Args:
        status: the Certification.
        obs: a Workflow report, or a Workflow confirmed missing.

    Returns:
        Whether the Certification fails.

    Raises:
        InvalidObservation: ``obs`` names a category the Certification does not have.
    """
    categories = _reported(status, obs)
    return _all_done(categories) and any(c.state == FAILED for c in categories)


def category_succeeded(status: CertificationStatus, obs: WorkflowObserved) -> bool:
    """The category's Workflow succeeded.

    Args:
        status: the Certification.
        obs: the Workflow as committed.

    Returns:
        Whether its state is ``Succeeded``.
    """
    return obs.state == SUCCEEDED


def category_failed(status: CertificationStatus, obs: WorkflowObserved) -> bool:
    """The category's Workflow failed.

    Args:
        status: the Certification.
        obs: the Workflow as committed.

    Returns:
        Whether its state is ``Failed``.
    """
    return obs.state == FAILED


def recovers(status: CertificationStatus, obs: WorkflowObserved) -> bool:
    """A Failed category's Workflow is still running.

    Args:
        status: the Certification.
        obs: the Workflow as committed.

    Returns:
        Whether the category is Failed and its Workflow runs on.

    Raises:
        InvalidObservation: ``obs`` names a category the Certification does not have.
    """
    return status.category(obs.category).state == FAILED and obs.state not in TERMINAL


def started(status: CertificationStatus, obs: WorkflowCreated) -> bool:
    """The category has a Workflow already (a repeated create report changes nothing).

    Args:
        status: the Certification.
        obs: the create.

    Returns:
        Whether the category is past ``Pending``.

    Raises:
        InvalidObservation: ``obs`` names a category the Certification does not have.
    """
    return status.category(obs.category).state != PENDING


# -- effects ----------------------------------------------------------------------------------
def context(status: CertificationStatus, obs: Observation) -> dict[str, Any]:
    """What the row messages are rendered with: the selector, the wait left, the category's place.

    Args:
        status: the Certification.
        obs: the observation; its ``category``, when it has one, gives ``index``.

    Returns:
        The values the messages name (``selector``, ``remaining``, ``window``, ``total``,
        ``index``).
    """
    remaining = max(0.0, status.node_wait_s - _age(status, obs.at))
    out: dict[str, Any] = {
        "selector": status.selector or "<none>",
        "remaining": go_duration(round(remaining)),
        "window": go_duration(status.node_wait_s),
        "total": len(status.categories),
        "index": 0,
    }
    name = getattr(obs, "category", None)
    for i, c in enumerate(status.categories, start=1):
        if c.name == name:
            out["index"] = i
    return out


def _enter(
    status: CertificationStatus, obs: Observation, row: Row, **changes: Any
) -> CertificationStatus:
    moved = replace(status, created_at=status.created_at or obs.at, **changes)
    result: CertificationStatus = exclusive(moved, obs, row, row.render(obs, context(moved, obs)))
    return result


def submitted(status: CertificationStatus, obs: Submitted, row: Row) -> CertificationStatus:
    """Record the categories, all Pending, and the selector, wait and generation (no condition).

    Args:
        status: the Certification.
        obs: the submission.
        row: the row that fired.

    Returns:
        The Certification's next status.
    """
    return replace(
        status,
        categories=tuple(Category(c) for c in obs.categories),
        selector=obs.selector,
        node_wait_s=obs.node_wait_s,
        created_at=status.created_at or obs.at,
        generation=obs.generation,
    )


def enter(status: CertificationStatus, obs: Observation, row: Row) -> CertificationStatus:
    """Enter the row's state, with its message rendered.

    Args:
        status: the Certification.
        obs: the observation.
        row: the row that fired.

    Returns:
        The Certification's next status.
    """
    return _enter(status, obs, row)


def created(status: CertificationStatus, obs: WorkflowCreated, row: Row) -> CertificationStatus:
    """The category runs on the created Workflow; enter the row's state.

    Args:
        status: the Certification.
        obs: the create.
        row: the row that fired.

    Returns:
        The Certification's next status.

    Raises:
        InvalidObservation: ``obs`` names a category the Certification does not have.
    """
    c = status.category(obs.category)
    updated = replace(c, state=RUNNING, workflow=obs.workflow, workflow_uid=obs.uid)
    return _enter(status, obs, row, categories=_replace(status, updated))


def reported(status: CertificationStatus, obs: Observation, row: Row) -> CertificationStatus:
    """Update the reported category; enter the row's state.

    Args:
        status: the Certification.
        obs: a Workflow report, or a Workflow confirmed missing.
        row: the row that fired.

    Returns:
        The Certification's next status.

    Raises:
        InvalidObservation: ``obs`` names a category the Certification does not have.
    """
    return _enter(status, obs, row, categories=_reported(status, obs))


def rejected(
    status: CertificationStatus, obs: WorkflowCreateRejected, row: Row
) -> CertificationStatus:
    """Enter the row's state after a rejected create.

    Args:
        status: the Certification.
        obs: the rejected create.
        row: the row that fired.

    Returns:
        The Certification's next status.

    Raises:
        InvalidObservation: ``obs`` names a category the Certification does not have.
    """
    status.category(obs.category)  # an unknown category is refused
    return _enter(status, obs, row)


N, W = EventType.NORMAL, EventType.WARNING
IP, S, F = IN_PROGRESS, SUCCEEDED, FAILED
STOP = "a terminal Certification returns early: no write, no event"


def _finishing(obs: type[Observation]) -> tuple[Row, ...]:
    return (
        Row(
            IP,
            obs,
            to=S,
            reason=ALL_WORKFLOWS_SUCCEEDED,
            event=N,
            message=MSG_SUCCEEDED,
            guard=finishes_succeeded,
            effect=reported,
        ),
        Row(
            IP,
            obs,
            to=F,
            reason=WORKFLOW_FAILED,
            event=W,
            message=MSG_FAILED,
            guard=finishes_failed,
            effect=reported,
        ),
    )


ROWS: tuple[Row, ...] = (
    Row(NEW, Submitted, to=SAME, effect=submitted, note="the categories; no condition yet"),
    *SPEC_UPDATED_ROWS,
    Row(
        NEW,
        CategoryNotFound,
        to=F,
        reason=CATEGORY_NOT_FOUND,
        event=W,
        message=MSG_CATEGORY_NOT_FOUND,
        effect=enter,
    ),
    # Waiting for nodes: Normal on the first pass only; the countdown changes each pass
    Row(
        LIVE,
        NoSchedulableNodes,
        to=IP,
        reason=WAITING_FOR_NODES,
        event=N,
        message=MSG_WAITING,
        guard=within_window,
        effect=enter,
    ),
    Row(
        LIVE,
        NoSchedulableNodes,
        to=F,
        reason=WORKFLOW_VALIDATION_FAILED,
        event=W,
        message=MSG_NO_NODES,
        effect=enter,
    ),
    Row(
        IP,
        Tick,
        to=F,
        reason=WORKFLOW_VALIDATION_FAILED,
        event=W,
        message=MSG_NO_NODES,
        guard=waiting_expired,
        effect=enter,
        deadline=window_deadline,
    ),
    Row(
        IP,
        Tick,
        to=SAME,
        reason=WAITING_FOR_NODES,
        message=MSG_WAITING,
        guard=waiting,
        effect=enter,
        deadline=no_timer,
        note="the message counts the window down; the window's end is the timer",
    ),
    ignore(LIVE, Tick, "no window open"),
    # Workflows, one category after another
    ignore(IP, WorkflowCreated, "the category has its Workflow", guard=started),
    Row(
        LIVE,
        WorkflowCreated,
        to=IP,
        reason=WORKFLOW_CREATED,
        event=N,
        message=MSG_CREATED,
        effect=created,
    ),
    ignore(IP, WorkflowObserved, "not this category's Workflow", guard=other_workflow),
    *_finishing(WorkflowObserved),
    Row(
        IP,
        WorkflowObserved,
        to=SAME,
        reason=WORKFLOW_RUNNING,
        message=MSG_ADVANCING,
        guard=category_succeeded,
        effect=reported,
    ),
    Row(
        IP,
        WorkflowObserved,
        to=SAME,
        reason=WORKFLOW_RUNNING,
        message=MSG_ADVANCING_FAILED,
        guard=category_failed,
        effect=reported,
    ),
    Row(
        IP,
        WorkflowObserved,
        to=SAME,
        reason=WORKFLOW_RUNNING,
        message=MSG_IN_PROGRESS,
        effect=reported,
    ),
    ignore(NEW, WorkflowObserved, "no Workflow created yet"),
    Row(
        F,
        WorkflowObserved,
        to=IP,
        reason=WORKFLOW_RUNNING,
        event=N,
        message=MSG_RECOVERED,
        guard=recovers,
        effect=reported,
        recovery=True,
        note="the one declared exception to terminal absorption",
    ),
    _finishing(WorkflowMissing)[1],  # a missing Workflow fails its category: never all-succeeded
    Row(
        IP,
        WorkflowMissing,
        to=SAME,
        reason=WORKFLOW_RUNNING,
        message=MSG_NOT_FOUND,
        effect=reported,
    ),
    ignore(NEW, WorkflowMissing, "no Workflow created yet"),
    Row(
        LIVE,
        WorkflowCreateRejected,
        to=F,
        reason=WORKFLOW_FAILED,
        event=W,
        message=MSG_CREATE_REJECTED,
        effect=rejected,
        note="the action Warning, then the Failed write (2 Warnings)",
        action=Action(WORKFLOW_CREATION_ERROR, W, MSG_CREATE_REJECTED),
    ),
    Row(
        LIVE,
        WorkflowNameCollision,
        to=F,
        reason=WORKFLOW_NAME_COLLISION,
        event=W,
        message="{error}",
        effect=enter,
    ),
    Row(
        LIVE,
        BuildFailed,
        to=F,
        reason=WORKFLOW_VALIDATION_FAILED,
        event=W,
        message="{error}",
        effect=enter,
    ),
    action_row(NICResourcesDetected, NIC_RESOURCE_DETECTION, N, MSG_NIC),
    # Terminal: absorbing (Failed has the recovery row above)
    ignore((IP, *TERMINAL), Submitted, STOP),
    ignore((IP, *TERMINAL), CategoryNotFound, STOP),
    *(
        ignore(TERMINAL, o, STOP)
        for o in (
            SpecUpdated,
            NoSchedulableNodes,
            Tick,
            WorkflowCreated,
            WorkflowObserved,
            WorkflowMissing,
            WorkflowCreateRejected,
            WorkflowNameCollision,
            BuildFailed,
        )
    ),
)

TABLE = Table(
    "certification",
    states=STATES,
    initial=NEW,
    terminal=TERMINAL,
    observations=OBSERVATIONS,
    rows=ROWS,
    context=("selector", "remaining", "window", "index", "total"),
)


class CertificationMachine(ConditionMachine[CertificationStatus]):
    """The Certification machine (:data:`~lifecycle.machines.CERTIFICATION`): a certification
    category, run as a Workflow.

    Its table, observations and reasons: ``lifecycle table certification`` and the machine page.
    """

    name: ClassVar[str] = "certification"
    kind: ClassVar[str] = "Certification"
    api_version: ClassVar[str] = "nvcre.nvidia.com/v1alpha1"
    status_type: ClassVar[type[Any]] = CertificationStatus
    table: ClassVar[Table] = TABLE
    controller: ClassVar[str] = CERTIFICATION_CONTROLLER

    def context(self, status: CertificationStatus, obs: Observation) -> Mapping[str, Any]:
        return context(status, obs)


CERTIFICATION = CertificationMachine()
