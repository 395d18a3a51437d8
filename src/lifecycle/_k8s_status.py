"""Statuses as Kubernetes writes them: the camelCase body of a status subresource.

The library keeps Python names in Python (``last_transition_time``, ``pod_ip``) and in its
stores; a controller that writes a status to the API server needs the API's names
(``lastTransitionTime``, ``podIP``), times in RFC 3339 UTC (``2026-11-30T10:00:00Z``, whole
seconds, as ``metav1.Time`` has them) and empty optional fields left out. :func:`kubernetes_status`
gives that body for a machine's status (ADR 0099):

- **Pod**: ``phase``, ``reason``, ``message``, ``conditions`` (``Ready`` once a poll set it),
  ``podIP``, ``startTime`` -- what the virtual node writes (``PodStatus``);
- **NodeClaim**: ``phase`` and ``instanceID``;
- **Job, Workflow, Certification, WorkloadRun**: ``conditions`` (``metav1.Condition``: type,
  status, reason, message, lastTransitionTime, observedGeneration when stamped);
- **Restore**: the Pod conditions the host writes (``SnapshotRestoreCompatible``,
  ``Restored``), as a ``conditions`` list to merge into the Pod's status by type.

A host machine gets the same if its status has ``conditions``; or it defines
``kubernetes_status(status)`` on the machine, which is used as it is. The rest of a status is
the library's bookkeeping and stays out of the body.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from ._core.errors import preview
from ._core.machine import Machine
from ._core.refs import Condition

__all__ = ["kubernetes_condition", "kubernetes_status", "kubernetes_time"]


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


def _conditions(conditions: Iterable[Condition | None], *, pod: bool = False) -> list[Any]:
    return [kubernetes_condition(c, pod=pod) for c in conditions if c is not None]


def _pod(status: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "phase": status.phase,
        "reason": status.state,
        "message": status.message,
        "conditions": _conditions([status.ready], pod=True),
        "podIP": status.pod_ip,
    }
    if status.start_time is not None:
        body["startTime"] = kubernetes_time(status.start_time)
    return {k: v for k, v in body.items() if v not in ("", [])}


class NoStatusBody(ValueError):
    """The status is one Kubernetes has no body for (a deleted NodeClaim's): nothing to
    write beside the library's own record."""


def _nodeclaim(status: Any) -> dict[str, Any]:
    if status.state == "Deleted":
        raise NoStatusBody("a deleted NodeClaim has no status to write")
    body = {"phase": status.state, "instanceID": status.instance_id}
    return {k: v for k, v in body.items() if v}


def _restore(status: Any) -> dict[str, Any]:
    return {"conditions": _conditions([status.compatible, status.restored], pod=True)}


_SHIPPED = {"pod": _pod, "nodeclaim": _nodeclaim, "restore": _restore}


def kubernetes_status(machine: Machine[Any], status: Any) -> dict[str, Any]:
    """The status subresource body (camelCase, JSON-ready) that ``status`` of ``machine``
    writes to Kubernetes. Raises :class:`ValueError` for a status with no Kubernetes shape
    (another machine's status among them) and :class:`TypeError` for a ``machine`` that is
    not a :class:`~lifecycle.Machine`."""
    if not isinstance(machine, Machine):
        raise TypeError(f"kubernetes_status: expected a Machine, got {preview(machine)}")
    own = getattr(machine, "kubernetes_status", None)
    if callable(own):
        body: dict[str, Any] = own(status)
        return body
    declared = getattr(machine, "status_type", None)
    if isinstance(declared, type) and not isinstance(status, declared):
        raise ValueError(
            f"machine {machine.name!r}: a {type(status).__name__} is not its status "
            f"({declared.__name__})"
        )
    shipped = _SHIPPED.get(machine.name)
    if shipped is not None:
        return shipped(status)
    conditions = getattr(status, "conditions", None)
    if isinstance(conditions, tuple) and all(isinstance(c, Condition) for c in conditions):
        return {"conditions": _conditions(conditions)}
    raise ValueError(
        f"machine {machine.name!r}: a {type(status).__name__} has no Kubernetes status shape "
        "(give the machine a kubernetes_status(status) method)"
    )
