"""The pieces a status body for the Kubernetes API is made of (ADR 0099, ADR 0147): times
and conditions in the API's names. A machine builds its body from them in its own
``kubernetes_status`` (the machine is where its shape lives); :mod:`lifecycle._k8s_status`
is the public face."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from .errors import LifecycleError
from .refs import Condition


class NoStatusBody(LifecycleError, ValueError):
    """The status is one Kubernetes has no body for (a deleted NodeClaim's): nothing to
    write beside the library's own record."""


def kubernetes_time(at: datetime) -> str:
    """``at`` as the API writes a ``metav1.Time``: RFC 3339, UTC, whole seconds, ``Z``."""
    if at.tzinfo is None:
        raise ValueError(f"a Kubernetes time needs a timezone: {at.isoformat()}")
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def kubernetes_condition(condition: Condition, *, pod: bool = False) -> dict[str, Any]:
    """One condition in the API's names. ``metav1.Condition`` (the default) always has type,
    status, reason, message and lastTransitionTime; a Pod's condition (``pod=True``) leaves
    out an empty reason or message, and a missing time, as the API does."""
    body: dict[str, Any] = {"type": condition.type, "status": condition.status}
    if condition.reason or not pod:
        body["reason"] = condition.reason
    if condition.message or not pod:
        body["message"] = condition.message
    if condition.last_transition_time is not None:
        body["lastTransitionTime"] = kubernetes_time(condition.last_transition_time)
    elif not pod:
        raise ValueError(f"condition {condition.type}: a metav1.Condition needs its time")
    if condition.observed_generation is not None:
        body["observedGeneration"] = condition.observed_generation
    return body


def kubernetes_conditions(
    conditions: Iterable[Condition | None], *, pod: bool = False
) -> list[dict[str, Any]]:
    """The present ones of ``conditions``, each as :func:`kubernetes_condition` gives it."""
    return [kubernetes_condition(c, pod=pod) for c in conditions if c is not None]
