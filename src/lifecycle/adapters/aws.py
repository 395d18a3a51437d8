"""AWS EC2 instances -> Pod observations (extra ``aws``; ``boto3`` is imported lazily).

Behaviour follows ``docs/upstream/pod-nodeclaim.md`` ("Providers", AWS EC2), with the corrections of
ADR 0021:

- Provision is one ``create_fleet`` (``Type='instant'``, ``TotalTargetCapacity=1``, spot or
  on-demand, one override per instance type x subnet, the claim tag on the instance), after
  looking for an instance the claim already has. Always reserved; partial success (an
  instance plus errors) is success. With no instance, the fleet's errors are ranked
  auth > quota > capacity > unknown: the first three reject the request (the pod fails), an
  unknown error is unattributable (the pod keeps provisioning).
- Observe lists every claim-tagged instance of a region (``describe_instances``, paginated)
  and reads ``describe_instance_status``: Running needs both status checks ok. A region that
  fails to list, a status read that fails, and an ``InvalidInstanceID.NotFound`` within the
  grace after it was first seen make the observation :class:`InstanceUnknown` - never absent.
  A spot reclaim is reported as a preemption (``InstanceTerminated`` whose detail starts with
  ``preempted:`` and ``preempted=True``, which the Pod machine reports in its own words), not as
  an ordinary stop.
- Terminate is idempotent (``InvalidInstanceID.NotFound``/``Malformed`` are success).
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import attrs
import structlog

from .._core.observation import Observation
from .._core.refs import ObjectRef
from ..machines.nodeclaim import claim_name
from ..machines.pod import (
    InstanceAbsent,
    InstanceUnknown,
    ProvisionErrored,
    ProvisionRejected,
    ProvisionSucceeded,
    TerminateFailed,
    TerminateSucceeded,
)
from ._aws_mapping import (
    CLAIM_TAG_KEY,
    GONE_STATES,
    SPOT_RECLAIM_CODES,
    FailureKind,
    FleetFailure,
    StatusUnavailable,
    claim_of,
    classify_code,
    ec2_observation,
    endpoint_of,
    error_code,
    error_text,
    rank_fleet_errors,
    state_of,
    status_checks_ok,
)
from .base import Clock, RecordingMixin, utc_now
from .recording import Recorder

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_ec2.type_defs import CreateFleetRequestTypeDef, FilterTypeDef

__all__ = [
    "CLAIM_TAG_KEY",
    "LIVE_STATES",
    "SPOT_RECLAIM_CODES",
    "AwsAdapter",
    "FailureKind",
    "FleetFailure",
    "FleetSpec",
    "Placement",
    "StatusUnavailable",
    "classify_code",
    "ec2_observation",
    "rank_fleet_errors",
    "status_checks_ok",
]

#: States an instance can be adopted from (and that Terminate-by-claim looks for).
LIVE_STATES = ("pending", "running", "stopping", "stopped")
NOT_FOUND = "InvalidInstanceID.NotFound"
MALFORMED = "InvalidInstanceID.Malformed"
DEFAULT_NOT_FOUND_GRACE = 300.0

_log = structlog.get_logger("lifecycle.adapters.aws")


# -- requests and placements -------------------------------------------------------------------
def _strings(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


def _non_empty(instance: Any, attribute: Any, value: tuple[str, ...]) -> None:
    if not value or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"{attribute.name} must be a non-empty tuple of non-empty strings")


@attrs.frozen(slots=True)
class FleetSpec:
    """What a pod asks of EC2: a launch template (id or name), the instance types and subnets
    to try (one override each pair) and the capacity tier."""

    region: str
    instance_types: tuple[str, ...] = attrs.field(converter=_strings, validator=_non_empty)
    subnet_ids: tuple[str, ...] = attrs.field(converter=_strings, validator=_non_empty)
    launch_template_id: str = ""
    launch_template_name: str = ""
    launch_template_version: str = "$Latest"
    capacity_type: str = "on-demand"
    tags: Mapping[str, str] = attrs.field(factory=dict, hash=False)

    def __attrs_post_init__(self) -> None:
        if not self.region:
            raise ValueError("region must not be empty")
        if bool(self.launch_template_id) == bool(self.launch_template_name):
            raise ValueError("give exactly one of launch_template_id and launch_template_name")
        if self.capacity_type not in ("spot", "on-demand"):
            raise ValueError(f"capacity_type must be spot or on-demand, not {self.capacity_type!r}")
        if len(self.instance_types) * len(self.subnet_ids) > 300:
            raise ValueError("at most 300 overrides (instance types x subnets) per fleet")

    def request(self, claim: str) -> CreateFleetRequestTypeDef:
        """The ``create_fleet`` arguments for ``claim``."""
        template: dict[str, str] = {"Version": self.launch_template_version}
        if self.launch_template_id:
            template["LaunchTemplateId"] = self.launch_template_id
        else:
            template["LaunchTemplateName"] = self.launch_template_name
        tags = [{"Key": k, "Value": v} for k, v in self.tags.items() if k != CLAIM_TAG_KEY]
        tags.append({"Key": CLAIM_TAG_KEY, "Value": claim})
        request: dict[str, Any] = {
            "Type": "instant",
            "TargetCapacitySpecification": {
                "TotalTargetCapacity": 1,
                "DefaultTargetCapacityType": self.capacity_type,
            },
            "LaunchTemplateConfigs": [
                {
                    "LaunchTemplateSpecification": template,
                    "Overrides": [
                        {"InstanceType": t, "SubnetId": s}
                        for t in self.instance_types
                        for s in self.subnet_ids
                    ],
                }
            ],
            "TagSpecifications": [{"ResourceType": "instance", "Tags": tags}],
        }
        if self.capacity_type == "spot":
            request["SpotOptions"] = {"AllocationStrategy": "price-capacity-optimized"}
        else:
            request["OnDemandOptions"] = {"AllocationStrategy": "lowest-price"}
        return request  # type: ignore[return-value]


@attrs.frozen(slots=True)
class Placement:
    """Where a tracked pod's instance lives: its region and (once known) its instance id."""

    region: str
    instance_id: str = ""


# -- the adapter ------------------------------------------------------------------------------
class AwsAdapter(RecordingMixin):
    """Provision, observe and terminate EC2 instances, returning Pod observations.

    ``client_factory(region)`` makes the EC2 client of a region (default: a ``boto3`` client
    with short connect/read timeouts and standard retries, at ``endpoint_url`` if given).
    Every observation returned is also handed to ``recorder``.
    """

    def __init__(
        self,
        *,
        client_factory: Callable[[str], Any] | None = None,
        session: Any = None,
        endpoint_url: str | None = None,
        recorder: Recorder | None = None,
        clock: Clock = utc_now,
        monotonic: Callable[[], float] = time.monotonic,
        not_found_grace: float = DEFAULT_NOT_FOUND_GRACE,
        page_size: int = 1000,
        connect_timeout: float = 5.0,
        read_timeout: float = 15.0,
        max_attempts: int = 3,
    ) -> None:
        if not 5 <= page_size <= 1000:
            raise ValueError(f"page_size must be within 5..1000, got {page_size}")
        self._factory = client_factory
        self._session = session
        self.endpoint_url = endpoint_url
        self.recorder = recorder
        self.clock = clock
        self.monotonic = monotonic
        self.not_found_grace = not_found_grace
        self.page_size = page_size
        self._timeouts = (connect_timeout, read_timeout, max_attempts)
        self._clients: dict[str, EC2Client] = {}
        #: When each instance id first answered NotFound (monotonic seconds).
        self._missing_since: dict[str, float] = {}

    # -- clients ------------------------------------------------------------------------------
    def client(self, region: str) -> EC2Client:
        if region not in self._clients:
            factory = self._factory or self._default_client
            self._clients[region] = factory(region)
        return self._clients[region]

    def _default_client(self, region: str) -> EC2Client:
        boto3 = importlib.import_module("boto3")
        config = importlib.import_module("botocore.config")
        session = self._session or boto3.session.Session()
        connect, read, attempts = self._timeouts
        client: EC2Client = session.client(
            "ec2",
            region_name=region,
            endpoint_url=self.endpoint_url,
            config=config.Config(
                connect_timeout=connect,
                read_timeout=read,
                retries={"max_attempts": attempts, "mode": "standard"},
            ),
        )
        return client

    # -- calls --------------------------------------------------------------------------------
    def _describe(self, client: EC2Client, filters: list[FilterTypeDef]) -> list[Mapping[str, Any]]:
        """Every instance matching ``filters``, following ``NextToken`` page by page."""
        out: list[Mapping[str, Any]] = []
        token = ""
        while True:
            if token:
                page = client.describe_instances(
                    Filters=filters, MaxResults=self.page_size, NextToken=token
                )
            else:
                page = client.describe_instances(Filters=filters, MaxResults=self.page_size)
            for reservation in page.get("Reservations", []):
                out.extend(reservation.get("Instances", []))
            token = page.get("NextToken", "")
            if not token:
                return out

    def _by_claim(self, client: EC2Client, claim: str) -> list[Mapping[str, Any]]:
        return self._describe(
            client,
            [
                {"Name": f"tag:{CLAIM_TAG_KEY}", "Values": [claim]},
                {"Name": "instance-state-name", "Values": list(LIVE_STATES)},
            ],
        )

    def _statuses(self, client: EC2Client, ids: Sequence[str]) -> dict[str, Mapping[str, Any]]:
        out: dict[str, Mapping[str, Any]] = {}
        for start in range(0, len(ids), 100):
            chunk = list(ids[start : start + 100])
            token = ""
            while True:
                if token:
                    page = client.describe_instance_status(InstanceIds=chunk, NextToken=token)
                else:
                    page = client.describe_instance_status(InstanceIds=chunk)
                for status in page.get("InstanceStatuses", []):
                    out[status.get("InstanceId", "")] = status
                token = page.get("NextToken", "")
                if not token:
                    break
        return out

    # -- provision ----------------------------------------------------------------------------
    def provision(self, ref: ObjectRef, spec: FleetSpec) -> Observation:
        """Adopt the claim's instance, or launch one with an instant fleet."""
        at = self.clock()
        claim = claim_name(ref.namespace, ref.name)
        try:
            client = self.client(spec.region)
            existing = self._by_claim(client, claim)
        except Exception as e:
            return self._emit(
                ref, ProvisionErrored(at=at, error=f"finding instance by claim: {error_text(e)}")
            )
        if existing:
            inst = existing[0]
            return self._emit(
                ref,
                ProvisionSucceeded(
                    at=at,
                    reserved=True,
                    instance_id=str(inst.get("InstanceId", "")),
                    endpoint=endpoint_of(inst),
                ),
            )
        try:
            response = client.create_fleet(**spec.request(claim))
        except Exception as e:
            code = error_code(e)
            kind = classify_code(code) if code else FailureKind.UNKNOWN
            if kind is FailureKind.UNKNOWN:
                return self._emit(ref, ProvisionErrored(at=at, error=error_text(e)))
            failure = FleetFailure(kind, code, str(e))
            return self._emit(ref, ProvisionRejected(at=at, error=failure.text()))
        ids = [
            iid for group in response.get("Instances", []) for iid in group.get("InstanceIds", [])
        ]
        if ids:
            if len(ids) > 1:
                _log.warning("fleet launched more than one instance", claim=claim, ids=ids)
            return self._emit(ref, ProvisionSucceeded(at=at, reserved=True, instance_id=ids[0]))
        failure = rank_fleet_errors(list(response.get("Errors", [])))
        if failure.rejection:
            return self._emit(ref, ProvisionRejected(at=at, error=failure.text()))
        return self._emit(ref, ProvisionErrored(at=at, error=failure.text()))

    # -- observe ------------------------------------------------------------------------------
    def observe(self, pods: Mapping[ObjectRef, Placement]) -> dict[ObjectRef, Observation]:
        """One observation pass: one paginated list per region, status checks for running
        instances, and a by-id lookup for tracked instances the list did not show."""
        at = self.clock()
        out: dict[ObjectRef, Observation] = {}
        regions: dict[str, dict[ObjectRef, Placement]] = {}
        for ref, placement in pods.items():
            regions.setdefault(placement.region, {})[ref] = placement
        for region, group in regions.items():
            out.update(self._observe_region(region, group, at))
        self._forget_stale_missing()
        return self._emit_all(out)

    def _observe_region(
        self, region: str, pods: Mapping[ObjectRef, Placement], at: datetime
    ) -> dict[ObjectRef, Observation]:
        out: dict[ObjectRef, Observation] = {}
        try:
            client = self.client(region)
            listed = self._describe(client, [{"Name": "tag-key", "Values": [CLAIM_TAG_KEY]}])
        except Exception as e:
            error = f"region {region} could not be listed: {error_text(e)}"
            return {ref: InstanceUnknown(at=at, error=error) for ref in pods}
        by_id = {str(i.get("InstanceId", "")): i for i in listed}
        by_claim: dict[str, list[Mapping[str, Any]]] = {}
        for listed_inst in listed:
            by_claim.setdefault(claim_of(listed_inst), []).append(listed_inst)

        chosen: dict[ObjectRef, Mapping[str, Any]] = {}
        for ref, placement in pods.items():
            known = placement.instance_id
            inst: Mapping[str, Any] | None = by_id.get(known) if known else None
            if inst is None and known:
                found = self._lookup(client, known, at)
                if isinstance(found, Observation):
                    out[ref] = found
                    continue
                inst = found
            if inst is None:
                # Untracked: a finished instance of an earlier pod with the same name is not
                # this pod's; only a live one is.
                live = [
                    i
                    for i in by_claim.get(claim_name(ref.namespace, ref.name), [])
                    if state_of(i) not in GONE_STATES
                ]
                if not live:
                    out[ref] = InstanceAbsent(at=at)
                    continue
                inst = live[0]
            chosen[ref] = inst

        running = sorted(
            {str(i.get("InstanceId", "")) for i in chosen.values() if state_of(i) == "running"}
        )
        statuses: dict[str, Mapping[str, Any]] | StatusUnavailable = {}
        if running:
            try:
                statuses = self._statuses(client, running)
            except Exception as e:
                statuses = StatusUnavailable(error_text(e))
        for ref, inst in chosen.items():
            iid = str(inst.get("InstanceId", ""))
            status = statuses if isinstance(statuses, StatusUnavailable) else statuses.get(iid)
            out[ref] = ec2_observation(inst, status, at)
        return out

    def _lookup(
        self, client: EC2Client, instance_id: str, at: datetime
    ) -> Mapping[str, Any] | Observation:
        """A tracked instance the tag list did not show (tags and lists are eventually
        consistent): look it up by id. NotFound is unknown until it has lasted the grace."""
        try:
            page = client.describe_instances(InstanceIds=[instance_id])
        except Exception as e:
            code = error_code(e)
            if code == NOT_FOUND:
                now = self.monotonic()
                since = self._missing_since.setdefault(instance_id, now)
                if now - since >= self.not_found_grace:
                    del self._missing_since[instance_id]
                    return InstanceAbsent(at=at)
                return InstanceUnknown(
                    at=at,
                    error=f"{instance_id}: {NOT_FOUND} for {now - since:.0f}s (not absent before "
                    f"{self.not_found_grace:.0f}s: EC2 is eventually consistent)",
                )
            if code == MALFORMED:
                return InstanceAbsent(at=at)
            return InstanceUnknown(at=at, error=f"lookup of {instance_id}: {error_text(e)}")
        self._missing_since.pop(instance_id, None)
        for reservation in page.get("Reservations", []):
            for inst in reservation.get("Instances", []):
                return inst
        return InstanceUnknown(at=at, error=f"lookup of {instance_id} returned no instance")

    def _forget_stale_missing(self) -> None:
        cutoff = self.monotonic() - 2 * max(self.not_found_grace, 1.0)
        for iid in [i for i, since in self._missing_since.items() if since < cutoff]:
            del self._missing_since[iid]

    # -- terminate ----------------------------------------------------------------------------
    def terminate(self, ref: ObjectRef, placement: Placement) -> Observation:
        """Terminate the pod's instance (by id, else every live instance with its claim tag).
        Idempotent: an instance EC2 does not know is already gone."""
        at = self.clock()
        try:
            client = self.client(placement.region)
            if placement.instance_id:
                ids = [placement.instance_id]
            else:
                claim = claim_name(ref.namespace, ref.name)
                ids = [str(i.get("InstanceId", "")) for i in self._by_claim(client, claim)]
        except Exception as e:
            return self._emit(
                ref, TerminateFailed(at=at, error=f"finding instance: {error_text(e)}")
            )
        if ids:
            try:
                client.terminate_instances(InstanceIds=ids)
            except Exception as e:
                if error_code(e) not in (NOT_FOUND, MALFORMED):
                    return self._emit(ref, TerminateFailed(at=at, error=error_text(e)))
        for iid in ids:
            self._missing_since.pop(iid, None)
        return self._emit(ref, TerminateSucceeded(at=at))
