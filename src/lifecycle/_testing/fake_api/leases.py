"""Leases (``coordination.k8s.io/v1``) in the fake API server (:mod:`.objects`): what the
API server checks of one beyond its client model's field types.

- ``spec.acquireTime`` and ``spec.renewTime`` are ``metav1.MicroTime``: RFC 3339 with exactly
  six fractional digits (Go's ``time.Parse`` of ``2006-01-02T15:04:05.000000Z07:00``); any
  other spelling -- no fraction, three digits, a space for the ``T`` -- fails to decode
  (400), as it does on the API server.
- ``ValidateLeaseSpec``: ``leaseDurationSeconds`` greater than 0, ``leaseTransitions`` at
  least 0, ``preferredHolder`` only with a ``strategy`` (422 Invalid).
- A Lease's name is a DNS subdomain (``ValidateLeaseName``).
"""

from __future__ import annotations

import json
import re
from typing import Any

from .schema import Cause, DecodeError

__all__ = ["MICRO_TIME_FIELDS", "check_micro_times", "lease_causes", "name_causes"]

MICRO_TIME_FIELDS = ("acquireTime", "renewTime")
_MICRO_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}(Z|[+-]\d{2}:\d{2})")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def check_micro_times(body: dict[str, Any]) -> None:
    """Raise :class:`DecodeError` for a ``spec`` time that is no ``metav1.MicroTime``."""
    spec = body.get("spec")
    if not isinstance(spec, dict):
        return
    for field in MICRO_TIME_FIELDS:
        value = spec.get(field)
        if value is not None and not (isinstance(value, str) and _MICRO_TIME.fullmatch(value)):
            raise DecodeError(
                f"parsing time {json.dumps(value)} as "
                '"2006-01-02T15:04:05.000000Z07:00": cannot parse'
            )


def lease_causes(lease: dict[str, Any]) -> list[Cause]:
    """What ``ValidateLeaseSpec`` refuses."""
    spec = lease.get("spec") or {}
    causes = []
    duration = spec.get("leaseDurationSeconds")
    if duration is not None and duration <= 0:
        message = f"Invalid value: {duration}: must be greater than 0"
        causes.append(Cause("spec.leaseDurationSeconds", "FieldValueInvalid", message))
    transitions = spec.get("leaseTransitions")
    if transitions is not None and transitions < 0:
        message = f"Invalid value: {transitions}: must be greater than or equal to 0"
        causes.append(Cause("spec.leaseTransitions", "FieldValueInvalid", message))
    if spec.get("preferredHolder") and not spec.get("strategy"):
        message = "Forbidden: may only be specified if `strategy` is defined"
        causes.append(Cause("spec.preferredHolder", "FieldValueForbidden", message))
    return causes


def name_causes(name: str) -> list[Cause]:
    """A created object's name: a lowercase RFC 1123 subdomain."""
    if len(name) <= 253 and _SUBDOMAIN.fullmatch(name):
        return []
    message = (
        f"Invalid value: {json.dumps(name)}: a lowercase RFC 1123 subdomain must consist of "
        "lower case alphanumeric characters, '-' or '.'"
    )
    return [Cause("metadata.name", "FieldValueInvalid", message)]
