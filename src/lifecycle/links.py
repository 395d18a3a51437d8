"""Links chain machines: a committed status of one object is an observation for another.

- Pod -> NodeClaim: every committed Pod status is what the NodeClaim controller would read on
  its next reconcile (phase, reason, deletionTimestamp).
- Job -> Workflow: a Job's committed status feeds its Workflow's group bookkeeping.
- Workflow -> Certification and Workflow -> WorkloadRun: the owner reads its Workflow.
- Workflow -> Job (fan-out): a launched Job gets its spec (``Submitted``), and a Job the
  Workflow timed out gets the Workflow controller's timeout write (``TimedOut``, one direct
  write per pass, as upstream's). This link runs last, so an owner hears a Workflow's statuses
  in order.

What a link derives is pure and decided before the source's commit: it is written in that same
commit as an intent (ADR 0090) and applied until the target confirms it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import attrs

from ._core.observation import Observation
from ._core.refs import ObjectRef
from .machines import certification, job, nodeclaim, pod, workflow, workloadrun
from .machines._claims import claim_ref as claim_ref  # re-exported: its public home
from .machines._conditions import NEW
from .machines._groups import RUNNING, Group

Derive = Callable[[ObjectRef, Any, Any, datetime], Sequence[tuple[ObjectRef, Observation]]]


def _nothing(ref: ObjectRef, before: Any, after: Any, at: datetime) -> None:
    return None


def _no_ref(ref: ObjectRef, after: Any) -> ObjectRef:
    raise AssertionError("a fan-out link names its targets itself")


@attrs.frozen(slots=True)
class Link:
    """From machine ``source`` to machine ``target``.

    ``observe(ref, before, after, at)`` turns a committed source status into an observation
    for the target (or ``None``: nothing to tell it); ``target_ref(ref, after)`` names it.
    A link to *several* objects (a Workflow's Jobs) sets ``fan_out`` instead (see
    :meth:`fanning`): ``(ref, before, after, at) -> [(target ref, observation), ...]``.
    """

    source: str
    target: str
    observe: Callable[[ObjectRef, Any, Any, datetime], Observation | None]
    target_ref: Callable[[ObjectRef, Any], ObjectRef]
    fan_out: Derive | None = None
    #: Observations this link carries that are the source controller's *direct* write on the
    #: target: one attempt, a conflict not retried (the intent stays pending and the next pass
    #: writes it again), as upstream's Workflow writing a Job's timeout (ADR 0090).
    direct: frozenset[type[Observation]] = frozenset()
    #: ``target_ref`` reads the source's ref only (never its status): the target is named as
    #: soon as the source is, so a source whose target could not be named (a derived uid
    #: past the input bounds) is refused when it is observed, before anything is written
    #: (ADR 0102), not accepted with a target that can never exist.
    by_ref: bool = False

    @classmethod
    def fanning(
        cls,
        source: str,
        target: str,
        fan_out: Derive,
        direct: frozenset[type[Observation]] = frozenset(),
    ) -> Link:
        return cls(source, target, _nothing, _no_ref, fan_out, direct)

    def derive(
        self, ref: ObjectRef, before: Any, after: Any, at: datetime
    ) -> Sequence[tuple[ObjectRef, Observation]]:
        """What the committed change ``before -> after`` of ``ref`` tells the targets."""
        if self.fan_out is not None:
            return self.fan_out(ref, before, after, at)
        derived = self.observe(ref, before, after, at)
        if derived is None:
            return ()
        return ((self.target_ref(ref, after), derived),)


def _pod_to_claim(
    ref: ObjectRef, before: pod.PodStatus, after: pod.PodStatus, at: datetime
) -> Observation | None:
    if after.state == pod.NEW:
        return None
    seen = (before.phase, before.state, before.deletion_timestamp is not None, before.instance_id)
    now = (after.phase, after.state, after.deletion_timestamp is not None, after.instance_id)
    if seen == now:
        return None  # nothing the claim reads has changed
    return nodeclaim.PodObserved(
        at=at,
        pod_uid=ref.uid,
        phase=after.phase,
        reason=after.reason,
        deleting=after.deletion_timestamp is not None,
        instance_id=after.instance_id or "",
        pool=after.pool,
        provider=after.provider,
    )


POD_TO_NODECLAIM = Link("pod", "nodeclaim", _pod_to_claim, claim_ref, by_ref=True)


# -- Job -> Workflow -> Certification / WorkloadRun --------------------------------------------
def _job_report(s: job.JobStatus) -> dict[str, Any]:
    """What the Workflow reads of a Job (the fields of its ``JobObserved``)."""
    return {
        "state": s.state,
        "reason": s.reason,
        "hardware_failed": s.hardware_failed,
        "validation_failed": s.validation_failed,
        "awaiting_validation": s.awaiting_validation,
        "workload_start_time": s.workload_start_time,
        "workload_exists": s.workload_exists,
    }


def _job_to_workflow(
    ref: ObjectRef, before: job.JobStatus, after: job.JobStatus, at: datetime
) -> Observation | None:
    if not after.workflow_uid or after.state == NEW:
        return None
    report = _job_report(after)
    if _job_report(before) == report:
        return None  # nothing the Workflow reads has changed
    return workflow.JobObserved(at=at, job=ref.name, job_uid=ref.uid, group=after.group, **report)


def workflow_ref(job_ref: ObjectRef, status: job.JobStatus) -> ObjectRef:
    """The Workflow that owns the Job ``job_ref`` (named in the Job's status)."""

    return ObjectRef(
        workflow.WorkflowMachine.kind, job_ref.namespace, status.workflow, status.workflow_uid
    )


def owner_ref(workflow_ref: ObjectRef, status: workflow.WorkflowStatus) -> ObjectRef:
    """The object that owns the Workflow ``workflow_ref`` (a Certification or a WorkloadRun, named
    in the Workflow's status)."""

    return ObjectRef(status.owner_kind, workflow_ref.namespace, status.owner, status.owner_uid)


def _validation(s: workflow.WorkflowStatus) -> Any:
    return s.condition(workflow.VALIDATION_FAILED)


def _workflow_to_certification(
    ref: ObjectRef, before: workflow.WorkflowStatus, after: workflow.WorkflowStatus, at: datetime
) -> Observation | None:
    if after.owner_kind != certification.CertificationMachine.kind or not after.owner_uid:
        return None
    if after.state == NEW or (before.state, before.reason) == (after.state, after.reason):
        return None
    return certification.WorkflowObserved(
        at=at,
        category=after.category,
        workflow=ref.name,
        uid=ref.uid,
        state=after.state,
        reason=after.reason,
        message=after.message,
    )


def _workflow_to_workloadrun(
    ref: ObjectRef, before: workflow.WorkflowStatus, after: workflow.WorkflowStatus, at: datetime
) -> Observation | None:
    if after.owner_kind != workloadrun.WorkloadRunMachine.kind or not after.owner_uid:
        return None
    seen = (before.state, before.reason, before.message, _validation(before))
    now = (after.state, after.reason, after.message, _validation(after))
    if after.state == NEW or seen == now:
        return None
    validation = _validation(after)
    failed = validation is not None and validation.status == "True"
    return workloadrun.WorkflowObserved(
        at=at,
        workflow=ref.name,
        uid=ref.uid,
        state=after.state,
        reason=after.reason,
        message=after.message,
        validation_failed=failed,
        validation_message=validation.message if failed else "",
    )


def job_ref(workflow_ref: ObjectRef, group: Group) -> ObjectRef:
    """The Job the Workflow ``workflow_ref`` launched for ``group``."""

    return ObjectRef(job.JobMachine.kind, workflow_ref.namespace, group.job, group.job_uid)


def _workflow_to_jobs(
    ref: ObjectRef, before: workflow.WorkflowStatus, after: workflow.WorkflowStatus, at: datetime
) -> list[tuple[ObjectRef, Observation]]:
    out: list[tuple[ObjectRef, Observation]] = []
    launched = {g.job_uid for g in before.groups}
    for g in after.groups:
        if not g.job_uid:
            continue
        if g.job_uid not in launched:
            spec = job.Submitted(
                at=at,
                workload_kind=after.workload_kind,
                workflow=ref.name,
                workflow_uid=ref.uid,
                group=g.index,
                thresholds=after.thresholds,
                max_restarts=after.max_restarts,
                checkpoint=after.checkpoint,
            )
            out.append((job_ref(ref, g), spec))
        if g.state == RUNNING and g.timed_out and not g.job_terminal:
            out.append((job_ref(ref, g), job.TimedOut(at=at)))
    return out


JOB_TO_WORKFLOW = Link("job", "workflow", _job_to_workflow, workflow_ref)
WORKFLOW_TO_CERTIFICATION = Link("workflow", "certification", _workflow_to_certification, owner_ref)
WORKFLOW_TO_WORKLOADRUN = Link("workflow", "workloadrun", _workflow_to_workloadrun, owner_ref)
WORKFLOW_TO_JOBS = Link.fanning(
    "workflow", "job", _workflow_to_jobs, direct=frozenset({job.TimedOut})
)


def default_links() -> tuple[Link, ...]:
    """The links between the shipped machines, what a :class:`~lifecycle.Runner` follows when it
    is given no ``links``: Pod -> NodeClaim, Job -> Workflow, Workflow -> Certification,
    Workflow -> WorkloadRun, Workflow -> its Jobs."""

    return (
        POD_TO_NODECLAIM,
        JOB_TO_WORKFLOW,
        WORKFLOW_TO_CERTIFICATION,
        WORKFLOW_TO_WORKLOADRUN,
        WORKFLOW_TO_JOBS,
    )
