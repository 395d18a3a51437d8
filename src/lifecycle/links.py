"""Links chain machines: a committed status of one object is an observation for another.

The Pod -> NodeClaim link is the one shipped now: every committed Pod status is what the
NodeClaim controller would read on its next reconcile (phase, reason, deletionTimestamp).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import attrs

from ._core.observation import Observation
from ._core.refs import ObjectRef
from .machines import nodeclaim, pod


@attrs.frozen(slots=True)
class Link:
    """From machine ``source`` to machine ``target``.

    ``observe(ref, before, after, at)`` turns a committed source status into an observation
    for the target (or ``None``: nothing to tell it); ``target_ref(ref, after)`` names it.
    """

    source: str
    target: str
    observe: Callable[[ObjectRef, Any, Any, datetime], Observation | None]
    target_ref: Callable[[ObjectRef, Any], ObjectRef]


def claim_ref(pod_ref: ObjectRef, status: Any = None) -> ObjectRef:
    """The NodeClaim of a pod: cluster-scoped, named ``<ns>-<name>``, keyed ``<pod uid>-claim``
    so every replica, every replay and every trace author derive the same key."""
    return ObjectRef(
        nodeclaim.NodeClaimMachine.kind,
        "",
        nodeclaim.claim_name(pod_ref.namespace, pod_ref.name),
        f"{pod_ref.uid}-claim",
    )


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


POD_TO_NODECLAIM = Link("pod", "nodeclaim", _pod_to_claim, claim_ref)


def default_links() -> tuple[Link, ...]:
    return (POD_TO_NODECLAIM,)
