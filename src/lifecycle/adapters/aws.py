"""AWS EC2 instances -> Pod observations (extra ``aws``; ``boto3`` is imported lazily).

Behaviour follows ``docs/upstream/pod-nodeclaim.md`` ("Providers", AWS EC2), with the corrections of
ADR 0021:

- Provision is one ``create_fleet`` (``Type='instant'``, ``TotalTargetCapacity=1``, spot or
  on-demand, one override per instance type x subnet, the claim tag on the instance), after
  looking for an instance the claim already has. The request carries a ``ClientToken``
  derived from the claim, the pod's uid and the host's attempt number
  (:func:`fleet_client_token`), so a create that timed out and is sent again on the next
  reconcile returns the first fleet instead of launching a second one. Always reserved;
  partial success (an instance plus errors) is success. With no instance, the fleet's errors
  are ranked auth > quota > capacity > unknown: the first three reject the request (the pod
  fails), an unknown error is unattributable (the pod keeps provisioning).
- Observe lists every claim-tagged instance of a region (``describe_instances``, paginated)
  and reads ``describe_instance_status``: Running needs both status checks ok. A region that
  fails to list, a status read that fails, and an ``InvalidInstanceID.NotFound`` within the
  grace after it was first seen make the observation :class:`InstanceUnknown` - never absent.
  A spot reclaim is reported as a preemption (``InstanceTerminated`` whose detail starts with
  ``preempted:`` and ``preempted=True``, which the Pod machine reports in its own words), not as
  an ordinary stop. The endpoint is the instance's ``PrivateIpAddress`` (the pod IP), else its
  public name or address (``address="public"``: upstream's public name first).
- A :class:`FleetSpec` is checked against botocore's EC2 model when it is built (a launch
  template name too short, say, is a ``ValueError`` there, not a create retried forever); a
  request the client still refuses (``ParamValidationError``), or a ``ClientToken`` reused with
  other parameters (``IdempotentParameterMismatch``), is a rejection.
- Terminate is idempotent (``InvalidInstanceID.NotFound``/``Malformed`` are success). EC2
  terminates none of several ids when one is unknown, so then each id is terminated on its
  own, and an id counts as gone only when EC2 took it or does not know it.
- Listing uses boto3's paginators.

:class:`AwsAdapter` is a :class:`~lifecycle.adapters.provider.Provider` of :class:`FleetSpec`:
a tracked pod's region is its spec's.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import attrs

from .._core.errors import require
from .._core.refs import ObjectRef
from .._log import get_logger
from ..machines._claims import claim_name
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
    ADDRESSES,
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
from .base import Clock, RecordingMixin, at_or_now, check_attempt, utc_now
from .provider import PollOutcome, ProvisionOutcome, TerminateOutcome, Tracked
from .recording import ObservationRecorder

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
    "StatusUnavailable",
    "classify_code",
    "ec2_observation",
    "fleet_client_token",
    "rank_fleet_errors",
    "status_checks_ok",
]

#: States an instance can be adopted from (and that Terminate-by-claim looks for).
LIVE_STATES = ("pending", "running", "stopping", "stopped")
NOT_FOUND = "InvalidInstanceID.NotFound"
MALFORMED = "InvalidInstanceID.Malformed"
IDEMPOTENT_MISMATCH = "IdempotentParameterMismatch"
DEFAULT_NOT_FOUND_GRACE = 300.0

_log = get_logger("lifecycle.adapters.aws")


# -- requests ----------------------------------------------------------------------------------
def fleet_client_token(claim: str, uid: str, attempt: int = 0) -> str:
    """The ``ClientToken`` of a pod's ``create_fleet``: the same for every retry of one create
    (so EC2 answers a repeat with the first fleet), different for another pod of the same name
    (another ``uid``) and for a deliberate re-create (the host's next ``attempt``). 58 ASCII
    characters (EC2 allows 64).

    Args:
        claim: the pod's claim, ``<namespace>-<name>``.
        uid: the pod's uid.
        attempt: the host's deliberate re-creates of the pod (0 for the first).

    Returns:
        The token.
    """
    digest = hashlib.sha256(f"{claim}\n{uid}\n{attempt}".encode()).hexdigest()
    return f"lifecycle-{digest[:48]}"


@functools.cache
def _create_fleet_shape() -> Any:
    """The input shape of ``CreateFleet`` in the installed botocore (``None`` without it)."""
    try:
        session = importlib.import_module("botocore.session")
    except ImportError:  # pragma: no cover - the aws extra is not installed
        return None
    return session.get_session().get_service_model("ec2").operation_model("CreateFleet").input_shape


def _too_long(value: Any, shape: Any, path: str) -> list[str]:
    """Strings longer than the model's ``max`` (which botocore's validator does not check,
    and EC2 refuses on every attempt)."""
    kind = getattr(shape, "type_name", "")
    if kind == "structure" and isinstance(value, Mapping):
        return [
            problem
            for name, member in shape.members.items()
            if name in value
            for problem in _too_long(value[name], member, f"{path}.{name}")
        ]
    if kind == "list" and isinstance(value, list):
        return [
            problem
            for i, item in enumerate(value)
            for problem in _too_long(item, shape.member, f"{path}[{i}]")
        ]
    limit = shape.metadata.get("max") if kind == "string" else None
    if isinstance(value, str) and isinstance(limit, int) and len(value) > limit:
        return [f"Invalid length for parameter {path[1:]}, value: {len(value)}, max: {limit}"]
    return []


def _validate_fleet_request(request: Mapping[str, Any]) -> None:
    """Check a ``create_fleet`` request against the EC2 model as the client will (required
    members, types, minimum lengths), and string maximum lengths; a ``ValueError`` naming
    every problem."""
    shape = _create_fleet_shape()
    if shape is None:  # pragma: no cover - the aws extra is not installed
        return
    validate = importlib.import_module("botocore.validate")
    report = validate.ParamValidator().validate(request, shape)
    problems = [report.generate_report()] if report.has_errors() else []
    problems += _too_long(request, shape, "")
    if problems:
        raise ValueError("FleetSpec does not fit EC2's CreateFleet: " + "\n".join(problems))


def _is_param_validation_error(e: BaseException) -> bool:
    """botocore refused the request before sending it (only possible once botocore is loaded)."""
    exceptions = sys.modules.get("botocore.exceptions")
    cls = getattr(exceptions, "ParamValidationError", None)
    return isinstance(cls, type) and isinstance(e, cls)


def _strings(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


def _non_empty(instance: Any, attribute: Any, value: tuple[str, ...]) -> None:
    if not value or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"{attribute.name} must be a non-empty tuple of non-empty strings")


@attrs.frozen(slots=True)
class FleetSpec:
    """What a pod asks of EC2: a launch template (id or name), the instance types and subnets
    to try (one override each pair) and the capacity tier.

    Attributes:
        region: the AWS region.
        instance_types: the instance types to try, at least one.
        subnet_ids: the subnets to try, at least one; each (type, subnet) pair is one of the
            fleet's overrides, at most 300.
        launch_template_id: the launch template by id; give this or the name, not both.
        launch_template_name: the launch template by name.
        launch_template_version: the template's version.
        capacity_type: ``on-demand`` or ``spot``.
        tags: tags put on the instance; the claim tag is the library's and always set.

    Raises:
        ValueError: a spec EC2 would refuse on every attempt, refused here once.
    """

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
        # What the client would refuse on every attempt is refused here, once.
        _validate_fleet_request(self.request("namespace-name", fleet_client_token("", "")))

    def request(self, claim: str, client_token: str = "") -> CreateFleetRequestTypeDef:
        """The ``create_fleet`` arguments for ``claim`` (with ``client_token``, if given).

        Args:
            claim: the pod's claim, put on the instance as its claim tag, so the instance is
                found again by it.
            client_token: the idempotency token (:func:`fleet_client_token`).

        Returns:
            The request, as boto3's ``create_fleet`` takes it.
        """
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
        if client_token:
            request["ClientToken"] = client_token
        if self.capacity_type == "spot":
            request["SpotOptions"] = {"AllocationStrategy": "price-capacity-optimized"}
        else:
            request["OnDemandOptions"] = {"AllocationStrategy": "lowest-price"}
        return request  # type: ignore[return-value]


# -- the adapter ------------------------------------------------------------------------------
class AwsAdapter(RecordingMixin):
    """Provision, observe and terminate EC2 instances, returning Pod observations.

    ``client_factory(region)`` makes the EC2 client of a region (default: a ``boto3`` client
    with short connect/read timeouts and standard retries, at ``endpoint_url`` if given).
    ``max_attempts`` is the total number of attempts of one call (botocore's
    ``total_max_attempts``: 1 means no retry). ``address`` picks an instance's endpoint:
    ``private`` (its ``PrivateIpAddress``, the pod IP) or ``public`` (upstream's public DNS
    name, else public IP). Every observation returned is also handed to ``recorder``.

    Args:
        client_factory: makes a region's EC2 client; by default a ``boto3`` client with
            short timeouts and standard retries (needs the ``aws`` extra).
        session: the ``boto3`` session the default clients come from.
        endpoint_url: where the default clients connect (a local EC2 double).
        recorder: also given every observation returned, to save a trace.
        clock: stamps observations when the host gives no ``at``.
        monotonic: the clock of ``not_found_grace``.
        not_found_grace: seconds after an id first answers NotFound during which it is
            reported unknown, not absent: EC2's reads are eventually consistent, so a
            just-launched instance can be missing from them for a while.
        page_size: instances per ``describe_instances`` page (5..1000).
        connect_timeout: seconds to connect, per attempt.
        read_timeout: seconds to read an answer, per attempt.
        max_attempts: attempts of one call in all (1: no retry).
        address: ``private`` or ``public``.

    Raises:
        ValueError: a ``page_size`` or ``address`` out of range.
        MissingExtra: no ``client_factory`` and ``boto3`` is not installed.
    """

    name = "aws"

    def __init__(
        self,
        *,
        client_factory: Callable[[str], Any] | None = None,
        session: Any = None,
        endpoint_url: str | None = None,
        recorder: ObservationRecorder | None = None,
        clock: Clock = utc_now,
        monotonic: Callable[[], float] = time.monotonic,
        not_found_grace: float = DEFAULT_NOT_FOUND_GRACE,
        page_size: int = 1000,
        connect_timeout: float = 5.0,
        read_timeout: float = 15.0,
        max_attempts: int = 3,
        address: str = "private",
    ) -> None:
        if not 5 <= page_size <= 1000:
            raise ValueError(f"page_size must be within 5..1000, got {page_size}")
        if address not in ADDRESSES:
            raise ValueError(f"address must be one of {', '.join(ADDRESSES)}, not {address!r}")
        if client_factory is None:  # the default clients are boto3's: say so now, not per call
            require("aws", "AwsAdapter (without a client_factory)")
        self.address = address
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
        """A region's EC2 client, made once.

        Args:
            region: the AWS region.

        Returns:
            The client.
        """
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
                retries={"total_max_attempts": attempts, "mode": "standard"},
            ),
        )
        return client

    # -- calls --------------------------------------------------------------------------------
    def _describe(self, client: EC2Client, filters: list[FilterTypeDef]) -> list[Mapping[str, Any]]:
        """Every instance matching ``filters``, page by page (boto3's paginator)."""
        pages = client.get_paginator("describe_instances").paginate(
            Filters=filters, PaginationConfig={"PageSize": self.page_size}
        )
        return [
            inst
            for page in pages
            for reservation in page.get("Reservations", [])
            for inst in reservation.get("Instances", [])
        ]

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
        paginator = client.get_paginator("describe_instance_status")
        for start in range(0, len(ids), 100):
            # No page size: EC2 refuses MaxResults together with InstanceIds.
            for page in paginator.paginate(InstanceIds=list(ids[start : start + 100])):
                for status in page.get("InstanceStatuses", []):
                    out[status.get("InstanceId", "")] = status
        return out

    # -- provision ----------------------------------------------------------------------------
    def provision(
        self, ref: ObjectRef, spec: FleetSpec, *, attempt: int = 0, at: datetime | None = None
    ) -> ProvisionOutcome:
        """Adopt the claim's instance, or launch one with an instant fleet.

        Every retry of one create sends the same ``ClientToken`` (:func:`fleet_client_token`
        of the claim, ``ref.uid`` and ``attempt``), so EC2 answers a repeated create with the
        fleet it already launched. ``attempt`` is the host's count of *deliberate* creates for
        this pod (0 for the first): raise it only to launch anew after the pod's earlier
        instance is known to be gone; never for a retry after an error or a timeout.

        Args:
            ref: the Pod.
            spec: the fleet to launch.
            attempt: the host's deliberate re-creates (0 for the first).
            at: the time stamped on the observation; by default the clock.

        Returns:
            As :meth:`Provider.provision <lifecycle.adapters.provider.Provider.provision>`.

        Raises:
            ValueError: a bad ``attempt``.
        """
        check_attempt(attempt)
        at = at_or_now(at, self.clock)
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
                    endpoint=endpoint_of(inst, self.address),
                ),
            )
        token = fleet_client_token(claim, ref.uid, attempt)
        try:
            response = client.create_fleet(**spec.request(claim, token))
        except Exception as e:
            if _is_param_validation_error(e):  # the same request would be refused forever
                return self._emit(
                    ref, ProvisionRejected(at=at, error=f"invalid request: {error_text(e)}")
                )
            code = error_code(e)
            if code == IDEMPOTENT_MISMATCH:
                error = (
                    f"request: {code}: a create of this claim and attempt was sent before with "
                    f"other parameters and may have launched an instance ({error_text(e)})"
                )
                return self._emit(ref, ProvisionRejected(at=at, error=error))
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
    def observe(
        self, pods: Mapping[ObjectRef, Tracked[FleetSpec]], *, at: datetime | None = None
    ) -> dict[ObjectRef, PollOutcome]:
        """One observation pass: one paginated list per region, status checks for running
        instances, and a by-id lookup for tracked instances the list did not show.

        Args:
            pods: the pods tracked, each with its spec (its region) and instance id.
            at: the time stamped on the observations; by default the clock.

        Returns:
            As :meth:`Provider.observe <lifecycle.adapters.provider.Provider.observe>`.
        """
        at = at_or_now(at, self.clock)
        out: dict[ObjectRef, PollOutcome] = {}
        regions: dict[str, dict[ObjectRef, str]] = {}
        for ref, pod in pods.items():
            regions.setdefault(pod.spec.region, {})[ref] = pod.instance_id
        for region, group in regions.items():
            out.update(self._observe_region(region, group, at))
        self._forget_stale_missing()
        return self._emit_all(out)

    def _observe_region(
        self, region: str, pods: Mapping[ObjectRef, str], at: datetime
    ) -> dict[ObjectRef, PollOutcome]:
        """One region's pass over ``pods`` (each with its instance id, or ``""``)."""
        out: dict[ObjectRef, PollOutcome] = {}
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
        for ref, known in pods.items():
            inst: Mapping[str, Any] | None = by_id.get(known) if known else None
            if inst is None and known:
                found = self._lookup(client, known, at)
                if isinstance(found, InstanceAbsent | InstanceUnknown):
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
            out[ref] = ec2_observation(inst, status, at, address=self.address)
        return out

    def _lookup(
        self, client: EC2Client, instance_id: str, at: datetime
    ) -> Mapping[str, Any] | InstanceAbsent | InstanceUnknown:
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
    def terminate(
        self, ref: ObjectRef, pod: Tracked[FleetSpec], *, at: datetime | None = None
    ) -> TerminateOutcome:
        """Terminate the pod's instance (by id, else every live instance with its claim tag).
        Idempotent: an instance EC2 does not know is already gone. Succeeds only when every
        id is gone (terminated by this call or unknown to EC2).

        Args:
            ref: the Pod, whose claim tag finds instances when no id is known.
            pod: the tracked pod.
            at: the time stamped on the observation; by default the clock.

        Returns:
            As :meth:`Provider.terminate <lifecycle.adapters.provider.Provider.terminate>`.
        """
        at = at_or_now(at, self.clock)
        try:
            client = self.client(pod.spec.region)
            if pod.instance_id:
                ids = [pod.instance_id]
            else:
                claim = claim_name(ref.namespace, ref.name)
                ids = [str(i.get("InstanceId", "")) for i in self._by_claim(client, claim)]
        except Exception as e:
            return self._emit(
                ref, TerminateFailed(at=at, error=f"finding instance: {error_text(e)}")
            )
        left = self._terminate_ids(client, ids) if ids else {}
        for iid in ids:
            if iid not in left:
                self._missing_since.pop(iid, None)
        if left:
            error = "; ".join(f"{iid}: {text}" for iid, text in left.items())
            return self._emit(ref, TerminateFailed(at=at, error=error))
        return self._emit(ref, TerminateSucceeded(at=at))

    def _terminate_ids(self, client: EC2Client, ids: list[str]) -> dict[str, str]:
        """Terminate ``ids``; the ids not gone, with why. One unknown id makes EC2 refuse the
        whole call (it terminates none), so then each id is terminated on its own."""
        try:
            client.terminate_instances(InstanceIds=ids)
            return {}
        except Exception as e:
            if error_code(e) not in (NOT_FOUND, MALFORMED):
                return dict.fromkeys(ids, error_text(e))
            if len(ids) == 1:
                return {}  # EC2 does not know it: gone
        left: dict[str, str] = {}
        for iid in ids:
            try:
                client.terminate_instances(InstanceIds=[iid])
            except Exception as e:
                if error_code(e) not in (NOT_FOUND, MALFORMED):
                    left[iid] = error_text(e)
        return left
