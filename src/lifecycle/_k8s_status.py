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

Each shape is the machine's own :meth:`~lifecycle.Machine.kubernetes_status` (ADR 0147):
nothing here is keyed by a machine's name, so a host machine -- or a subclass of a shipped
one under another name -- gets the same. The default writes a status's ``conditions``; a
machine of another shape overrides the method. The rest of a status is the library's
bookkeeping and stays out of the body.
"""

from __future__ import annotations

from typing import Any

from ._core.errors import preview
from ._core.kubernetes_shape import NoStatusBody, kubernetes_condition, kubernetes_time
from ._core.machine import Machine

__all__ = ["NoStatusBody", "kubernetes_condition", "kubernetes_status", "kubernetes_time"]


def kubernetes_status(machine: Machine[Any], status: Any) -> dict[str, Any]:
    """The status subresource body (camelCase, JSON-ready) that ``status`` of ``machine``
    writes to Kubernetes: the machine's own :meth:`~lifecycle.Machine.kubernetes_status`.
    Raises :class:`ValueError` for a status with no Kubernetes shape (another machine's
    status among them) and :class:`TypeError` for a ``machine`` that is not a
    :class:`~lifecycle.Machine`.

    Args:
        machine: the machine whose status it is.
        status: the status, checked to be that machine's: writing another machine's status
            would put a foreign shape into the object.

    Returns:
        The body, as the status subresource takes it.

    Raises:
        TypeError: ``machine`` is not a machine.
        ValueError: the status is not the machine's, or has no Kubernetes shape.
    """
    if not isinstance(machine, Machine):
        raise TypeError(f"kubernetes_status: expected a Machine, got {preview(machine)}")
    declared = getattr(machine, "status_type", None)
    if isinstance(declared, type) and not isinstance(status, declared):
        raise ValueError(
            f"machine {machine.name!r}: a {type(status).__name__} is not its status "
            f"({declared.__name__})"
        )
    body: dict[str, Any] = machine.kubernetes_status(status)
    return body
