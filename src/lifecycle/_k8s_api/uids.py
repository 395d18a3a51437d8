"""Which uids the API server gave: the one rule about a ref's uid that the emitter (what it
sends as ``regarding``) and the object cache (what it resolves) share."""

from __future__ import annotations

from .._core.refs import ObjectRef

__all__ = ["is_derived_uid"]


def is_derived_uid(ref: ObjectRef) -> bool:
    """Whether ``ref.uid`` is a key the library derived rather than the API server's uid: a
    NodeClaim keyed ``<pod uid>-claim`` (:func:`lifecycle.links.claim_ref`). Such a uid is
    never sent as ``regarding.uid``; only the host's ``resolve`` can supply the real one."""
    return ref.kind == "NodeClaim" and ref.uid.endswith("-claim")
