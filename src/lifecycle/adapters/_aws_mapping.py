"""EC2's vocabulary, mapped: error codes to a ranked failure kind, and a described instance
(plus its status checks) to a Pod observation. Pure; :mod:`lifecycle.adapters.aws` does the
calls. See that module (and ADR 0021) for the rules these implement.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import attrs

from ..machines.pod import InstanceUnknown
from .base import InstanceObservation, InstanceState, state_observation
from .recording import redact

CLAIM_TAG_KEY = "nebula.inftyai.com/claim"
#: State-reason codes of a spot reclaim: the instance was taken back, not stopped by anyone.
SPOT_RECLAIM_CODES = frozenset({"Server.SpotInstanceTermination", "Server.SpotInstanceShutdown"})
GONE_STATES = ("shutting-down", "terminated")


# -- errors ------------------------------------------------------------------------------------
class FailureKind(enum.IntEnum):
    """Why a fleet launched nothing, ranked: the highest kind among a fleet's errors wins."""

    UNKNOWN = 0
    CAPACITY = 1
    QUOTA = 2
    AUTH = 3


_AUTH = frozenset(
    {
        "UnauthorizedOperation",
        "AuthFailure",
        "Blocked",
        "OptInRequired",
        "PendingVerification",
        "AccessDenied",
        "AccessDeniedException",
        "InvalidClientTokenId",
        "UnrecognizedClientException",
        "SignatureDoesNotMatch",
    }
)
_QUOTA = frozenset(
    {
        "InstanceLimitExceeded",
        "VcpuLimitExceeded",
        "MaxSpotInstanceCountExceeded",
        "MaxFleetCountExceeded",
        "MaxSpotFleetRequestCountExceeded",
        "ResourceLimitExceeded",
        "InsufficientFreeAddressesInSubnet",
    }
)
_CAPACITY = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientCapacity",
        "InsufficientHostCapacity",
        "InsufficientReservedInstanceCapacity",
        "InsufficientCapacityOnHost",
        "UnfulfillableCapacity",
        "SpotMaxPriceTooLow",
        "Unsupported",
    }
)
#: Throttling is not a quota on instances: it says nothing about the request.
_NOT_QUOTA = frozenset({"RequestLimitExceeded", "ThrottlingException", "Throttling"})


def classify_code(code: str) -> FailureKind:
    """The kind of an EC2 error code (create_fleet errors and API errors alike).

    Args:
        code: the error code EC2 answered (``InsufficientInstanceCapacity``, ...).

    Returns:
        ``AUTH``, ``QUOTA``, ``CAPACITY`` or ``UNKNOWN``; every kind but ``UNKNOWN`` is a
        refusal a retry will not change, so it fails the pod instead of retrying.
    """
    if code in _AUTH:
        return FailureKind.AUTH
    if code in _QUOTA or (code.endswith("LimitExceeded") and code not in _NOT_QUOTA):
        return FailureKind.QUOTA
    if code in _CAPACITY or code.startswith("InsufficientInstanceCapacity"):
        return FailureKind.CAPACITY
    return FailureKind.UNKNOWN


@attrs.frozen(slots=True)
class FleetFailure:
    """The deciding error of a fleet that launched nothing. ``lifecycle`` is the capacity
    tier it concerns (``spot``/``on-demand``), so a host can block just that tier.

    Attributes:
        kind: why, ranked (auth > quota > capacity > unknown).
        code: EC2's error code.
        message: EC2's message (redacted when shown).
        lifecycle: the capacity tier it concerns, if EC2 said.
        others: how many other errors the fleet reported.
    """

    kind: FailureKind
    code: str
    message: str
    lifecycle: str = ""
    others: int = 0

    @property
    def rejection(self) -> bool:
        """Whether it refuses the pod for good (any kind but ``UNKNOWN``)."""
        return self.kind is not FailureKind.UNKNOWN

    def text(self) -> str:
        """The failure for the pod's message.

        Returns:
            ``kind: code [tier]: message``, redacted.
        """
        more = f" (and {self.others} more error(s))" if self.others else ""
        tier = f" [{self.lifecycle}]" if self.lifecycle else ""
        return redact(f"{self.kind.name.lower()}: {self.code}{tier}: {self.message}{more}")


def rank_fleet_errors(errors: Sequence[Mapping[str, Any]]) -> FleetFailure:
    """The error that decides a failed instant fleet: auth > quota > capacity > unknown (the
    first of the highest kind). No errors at all means no capacity.

    Args:
        errors: the ``Errors`` of a ``create_fleet`` answer.

    Returns:
        The deciding error, with how many others there were.
    """
    if not errors:
        return FleetFailure(
            FailureKind.CAPACITY, "NoCapacity", "the fleet launched no instance and gave no error"
        )
    best: FleetFailure | None = None
    for error in errors:
        code = str(error.get("ErrorCode", "") or "Unknown")
        kind = classify_code(code)
        if best is None or kind > best.kind:
            best = FleetFailure(
                kind, code, str(error.get("ErrorMessage", "")), str(error.get("Lifecycle", ""))
            )
    assert best is not None
    return attrs.evolve(best, others=len(errors) - 1)


def error_code(e: BaseException) -> str:
    response = getattr(e, "response", None)
    if isinstance(response, Mapping):
        error = response.get("Error")
        if isinstance(error, Mapping):
            return str(error.get("Code", "") or "")
    return ""


def error_text(e: BaseException) -> str:
    return redact(f"{type(e).__name__}: {e}")


# -- the mapping -------------------------------------------------------------------------------
@attrs.frozen(slots=True)
class StatusUnavailable:
    """``describe_instance_status`` failed: readiness of running instances is unknown.

    Attributes:
        error: what failed, redacted.
    """

    error: str


def status_checks_ok(status: Mapping[str, Any] | None) -> bool:
    """Both the system and the instance status check report ``ok``.

    Args:
        status: the instance's ``describe_instance_status`` entry, or ``None`` when it has
            none yet.

    Returns:
        ``True`` only when both report ``ok``: an instance is Ready only then, as upstream
        reads it.
    """
    if not status:
        return False
    system = (status.get("SystemStatus") or {}).get("Status")
    instance = (status.get("InstanceStatus") or {}).get("Status")
    return bool(system == "ok" and instance == "ok")


#: Which address of an instance is its endpoint (and so, when it is an IP, the pod IP).
ADDRESSES = ("private", "public")


def endpoint_of(instance: Mapping[str, Any], address: str = "private") -> str:
    """The instance's endpoint. ``private`` (the default): its VPC address
    ``PrivateIpAddress``, which the Pod reports as its pod IP, falling back to the public
    name and address; ``public``: upstream's ``PublicDnsName``, else ``PublicIpAddress``."""
    public = str(instance.get("PublicDnsName") or instance.get("PublicIpAddress") or "")
    if address == "public":
        return public
    return str(instance.get("PrivateIpAddress") or "") or public


def _why(instance: Mapping[str, Any], state: str) -> str:
    reason = instance.get("StateReason") or {}
    code, message = reason.get("Code", ""), reason.get("Message", "")
    text = f"state {state}"
    if code:
        text += f": {code}" + (f" ({message})" if message and message != code else "")
    elif instance.get("StateTransitionReason"):
        text += f": {instance['StateTransitionReason']}"
    return redact(text)


def ec2_observation(
    instance: Mapping[str, Any],
    status: Mapping[str, Any] | StatusUnavailable | None,
    at: datetime,
    *,
    address: str = "private",
) -> InstanceObservation | InstanceUnknown:
    """One ``describe_instances`` instance (plus its ``describe_instance_status`` entry, or
    ``None`` when it has none) as a Pod observation. The domain table, row by row:

    pending -> Pending; running with both checks ok -> Running (ready); running otherwise ->
    Pending, or Unknown when the status read failed; stopping/stopped/shutting-down/terminated
    -> Terminated (a spot reclaim as ``preempted: ...``); any other state -> Pending.

    Args:
        instance: the ``describe_instances`` entry.
        status: its status entry, ``None`` when it has none, or :class:`StatusUnavailable`
            when the status read failed (the pod's readiness is then unknown, not false).
        at: the time stamped on the observation.
        address: ``private`` or ``public``, which address is the endpoint.

    Returns:
        The Pod observation.
    """
    iid = str(instance.get("InstanceId", ""))
    endpoint = endpoint_of(instance, address)
    state = str((instance.get("State") or {}).get("Name", ""))
    if state == "running":
        if isinstance(status, StatusUnavailable):
            return InstanceUnknown(at=at, error=f"status checks of {iid}: {status.error}")
        kind = InstanceState.RUNNING if status_checks_ok(status) else InstanceState.PENDING
        return state_observation(kind, at, instance_id=iid, endpoint=endpoint)
    if state in ("stopping", "stopped", "shutting-down", "terminated"):
        code = str((instance.get("StateReason") or {}).get("Code", ""))
        detail = _why(instance, state)
        preempted = code in SPOT_RECLAIM_CODES
        if preempted:
            detail = f"preempted: spot instance reclaimed ({detail})"
        return state_observation(
            InstanceState.TERMINATED, at, instance_id=iid, detail=detail, preempted=preempted
        )
    return state_observation(InstanceState.PENDING, at, instance_id=iid, endpoint=endpoint)


def claim_of(instance: Mapping[str, Any]) -> str:
    for tag in instance.get("Tags") or ():
        if tag.get("Key") == CLAIM_TAG_KEY:
            return str(tag.get("Value", ""))
    return ""


def state_of(instance: Mapping[str, Any]) -> str:
    return str((instance.get("State") or {}).get("Name", ""))
