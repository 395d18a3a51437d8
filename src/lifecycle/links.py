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

from datetime import datetime
from typing import Any

from ._core.observation import Observation
from ._core.refs import ObjectRef
from ._link import Link as Link  # re-exported: its public home
from .machines import certification, job, nodeclaim, pod, workflow, workloadrun
from .machines._claims import claim_ref as claim_ref  # re-exported: its public home
from .machines._conditions import NEW
from .machines._groups import RUNNING, Group


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
    """The Workflow that owns a Job: the target of the Job -> Workflow link.

    Args:
        job_ref: the Job; its namespace is the Workflow's (an owner is never elsewhere).
        status: the Job's committed status, which names its Workflow and that Workflow's uid.

    Returns:
        The Workflow's ref.
    """

    return ObjectRef(
        workflow.WorkflowMachine.kind, job_ref.namespace, status.workflow, status.workflow_uid
    )


def owner_ref(workflow_ref: ObjectRef, status: workflow.WorkflowStatus) -> ObjectRef:
    """The object that owns a Workflow (a Certification or a WorkloadRun).

    Args:
        workflow_ref: the Workflow; its namespace is the owner's.
        status: the Workflow's committed status, which names its owner's kind, name and uid.

    Returns:
        The owner's ref.
    """

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
    """The Job a Workflow launched for one of its groups.

    Args:
        workflow_ref: the Workflow; the Job lives in its namespace.
        group: the group, which names its Job and that Job's uid.

    Returns:
        The Job's ref.
    """

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
    Workflow -> WorkloadRun, Workflow -> its Jobs.

    Returns:
        The five links, in the order a runner follows them: Workflow -> Jobs last, so an owner
        hears a Workflow's statuses in order.
    """

    return (
        POD_TO_NODECLAIM,
        JOB_TO_WORKFLOW,
        WORKFLOW_TO_CERTIFICATION,
        WORKFLOW_TO_WORKLOADRUN,
        WORKFLOW_TO_JOBS,
    )
