"""A Pod's NodeClaim, named once: the rule the Pod -> NodeClaim link and the provider adapters
(which tag each instance with its pod's claim) share. It sits with the machines, below both, so
neither reaches up into the other."""

from __future__ import annotations

from typing import Any

from .._core.refs import ObjectRef
from .nodeclaim import NodeClaimMachine, claim_name

__all__ = ["claim_name", "claim_ref"]


def claim_ref(pod_ref: ObjectRef, status: Any = None) -> ObjectRef:
    """The NodeClaim of a pod: cluster-scoped, named ``<ns>-<name>`` (:func:`claim_name`),
    keyed ``<pod uid>-claim`` so every replica, every replay and every trace author derive the
    same key. ``status`` is unused (the signature of a link's target ref)."""
    return ObjectRef(
        NodeClaimMachine.kind,
        "",
        claim_name(pod_ref.namespace, pod_ref.name),
        f"{pod_ref.uid}-claim",
    )
