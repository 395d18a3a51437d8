"""Which uids the API server gave: the one rule about a ref's uid that the emitter (what it
sends as ``regarding``) and the object cache (what it resolves) share."""

from __future__ import annotations

from .._core.refs import ObjectRef

__all__ = ["DERIVED_KINDS", "is_derived_uid"]

#: The kinds whose refs may carry a derived uid (the Kubernetes store looks in their records
#: for the key they were written under, ADR 0162).
DERIVED_KINDS = frozenset({"NodeClaim"})


def is_derived_uid(ref: ObjectRef) -> bool:
    """Whether ``ref.uid`` is a key the library derived rather than the API server's uid: a
    NodeClaim keyed ``<pod uid>-claim`` (:func:`lifecycle.links.claim_ref`). Such a uid is
    never sent as ``regarding.uid``; only the host's ``resolve`` can supply the real one.

    Args:
        ref: the object.

    Returns:
        Whether its uid is derived.
    """
    return ref.kind in DERIVED_KINDS and ref.uid.endswith("-claim")
