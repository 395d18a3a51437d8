"""An in-memory fake of the EC2 client surface the AWS adapter uses.

``create_fleet``, ``describe_instances``, ``describe_instance_status`` and
``terminate_instances``, answering with the shapes of the EC2 service model, and
``get_paginator`` (botocore's own ``Paginator`` with the EC2 paginator model, over the fake's
methods). Like EC2, ``create_fleet`` is idempotent by ``ClientToken`` (a repeat answers the
first fleet; the token with other parameters is ``IdempotentParameterMismatch``), and
``terminate_instances`` terminates none of its ids when one is unknown. Every request is
validated against the operation's input shape and every response against its output shape,
with botocore's own validator (the way ``botocore.stub.Stubber`` does), so the fake cannot
drift from the installed botocore; errors are real ``botocore.exceptions.ClientError``\\ s.
Requires botocore (the ``aws`` extra)::

    ec2 = FakeEC2()
    adapter = AwsAdapter(client_factory=lambda region: ec2)

Scriptable: :meth:`FakeEC2.boot` (running, checks ok), :meth:`FakeEC2.set_checks`,
:meth:`FakeEC2.stop`, :meth:`FakeEC2.reclaim` (a spot reclaim), :meth:`FakeEC2.lag` (by-id
lookups answer NotFound for a while: eventual consistency), :meth:`FakeEC2.script_fleet`
(the next fleet's errors), :meth:`FakeEC2.fail` (the next call of an operation raises) and
:meth:`FakeEC2.time_out` (the next call of an operation happens, but its answer is lost: the
client raises ``ReadTimeoutError``).
"""

from __future__ import annotations

import copy
import functools
import importlib
import itertools
from collections import deque
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

__all__ = ["EC2_OPERATIONS", "FakeEC2"]

#: The client methods the fake implements, by EC2 operation name.
EC2_OPERATIONS = {
    "create_fleet": "CreateFleet",
    "describe_instances": "DescribeInstances",
    "describe_instance_status": "DescribeInstanceStatus",
    "terminate_instances": "TerminateInstances",
}
_STATE_CODES = {
    "pending": 0,
    "running": 16,
    "shutting-down": 32,
    "terminated": 48,
    "stopping": 64,
    "stopped": 80,
}


@functools.cache
def service_model() -> Any:
    """The installed botocore's EC2 service model (read from its data files, no network)."""
    session = importlib.import_module("botocore.session").get_session()
    return session.get_service_model("ec2")


@functools.cache
def paginator_model() -> Any:
    """The installed botocore's EC2 paginator model."""
    session = importlib.import_module("botocore.session").get_session()
    loader = session.get_component("data_loader")
    config = loader.load_service_model("ec2", "paginators-1", service_model().api_version)
    return importlib.import_module("botocore.paginate").PaginatorModel(config)


def _client_error(code: str, message: str, operation: str) -> Exception:
    exceptions = importlib.import_module("botocore.exceptions")
    response = {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {}}
    error: Exception = exceptions.ClientError(response, operation)
    return error


class FakeEC2:
    """One region's EC2, in memory. ``validate=False`` skips the shape validation.

    Each client method checks its request and its answer against botocore's model (unless
    ``validate=False``); a scripted fault or timeout fires first, and otherwise it answers
    as EC2 would, refusals included (an unknown instance id, a client token reused with other
    parameters).

    Args:
        region: the region it stands for.
        validate: check every request and response against botocore's model (the ``aws`` extra);
            ``False`` skips it where botocore is not installed.
    """

    def __init__(self, region: str = "us-east-1", *, validate: bool = True) -> None:
        self.region = region
        self.validate = validate
        self.instances: dict[str, dict[str, Any]] = {}
        self.checks: dict[str, tuple[str, str]] = {}
        #: Every call, in order: ``(method name, kwargs)``.
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self._ids = itertools.count(1)
        self._faults: dict[str, deque[tuple[str, str]]] = {}
        self._fleets: deque[list[dict[str, str]]] = deque()
        self._lag: dict[str, int] = {}
        #: ``create_fleet`` answers by ``ClientToken``: (the request, the response).
        self._tokens: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
        self._timeouts: dict[str, int] = {}

    # -- scripting ------------------------------------------------------------------------------
    def boot(self, instance_id: str) -> None:
        """Running with both status checks ok.

        Args:
            instance_id: the instance's id (``i-...``).
        """
        self._set_state(instance_id, "running")
        self.checks[instance_id] = ("ok", "ok")

    def set_checks(self, instance_id: str, system: str, instance: str) -> None:
        """Set the instance's two status checks, as ``DescribeInstanceStatus`` reports them.

        Args:
            instance_id: the instance's id (``i-...``).
            system: the system status check (``ok``, ``impaired``, ``initializing`` ...).
            instance: the instance status check.
        """
        self.checks[instance_id] = (system, instance)

    def set_state(self, instance_id: str, state: str, reason: str = "") -> None:
        """Move the instance to ``state``.

        Args:
            instance_id: the instance's id (``i-...``).
            state: the EC2 state name (``pending``, ``running``, ``stopped`` ...).
            reason: the state reason code, when there is one.
        """
        self._set_state(instance_id, state, reason)

    def stop(self, instance_id: str) -> None:
        """The user stopped the instance (``Client.UserInitiatedShutdown``).

        Args:
            instance_id: the instance's id (``i-...``).
        """
        self._set_state(instance_id, "stopped", "Client.UserInitiatedShutdown")

    def reclaim(self, instance_id: str) -> None:
        """EC2 takes a spot instance back.

        Args:
            instance_id: the instance's id (``i-...``).
        """
        self._set_state(instance_id, "terminated", "Server.SpotInstanceTermination")

    def lag(self, instance_id: str, lookups: int = 1) -> None:
        """The next ``lookups`` by-id calls answer NotFound, and tag lists do not show it.

        Args:
            instance_id: the instance's id (``i-...``).
            lookups: how many calls miss it, as EC2's eventual consistency does after a launch.
        """
        self._lag[instance_id] = lookups

    def script_fleet(self, errors: list[dict[str, str]]) -> None:
        """The next ``create_fleet`` launches nothing and reports ``errors`` (``ErrorCode``,
        ``ErrorMessage``, optionally ``Lifecycle``).

        Args:
            errors: the fleet's errors, one dict each.
        """
        self._fleets.append(errors)

    def fail(self, method: str, code: str, message: str = "", times: int = 1) -> None:
        """The next ``times`` calls of ``method`` raise ``ClientError(code)``.

        Args:
            method: the client method (one of ``EC2_OPERATIONS``).
            code: the error code (``InsufficientInstanceCapacity`` ...).
            message: the error message; ``""``: the code.
            times: how many calls fail.

        Raises:
            ValueError: ``method`` is not one the fake answers.
        """
        if method not in EC2_OPERATIONS:
            raise ValueError(f"unknown method {method!r}; one of {', '.join(EC2_OPERATIONS)}")
        self._faults.setdefault(method, deque()).extend([(code, message or code)] * times)

    def time_out(self, method: str, times: int = 1) -> None:
        """The next ``times`` calls of ``method`` take effect, but the caller never hears back
        (``botocore.exceptions.ReadTimeoutError``), as when a response is lost on the way.

        Args:
            method: the client method (one of ``EC2_OPERATIONS``).
            times: how many calls time out.

        Raises:
            ValueError: ``method`` is not one the fake answers.
        """
        if method not in EC2_OPERATIONS:
            raise ValueError(f"unknown method {method!r}; one of {', '.join(EC2_OPERATIONS)}")
        self._timeouts[method] = self._timeouts.get(method, 0) + times

    def get_paginator(self, operation_name: str) -> Any:
        """botocore's ``Paginator`` for ``operation_name``, paging over this fake.

        Args:
            operation_name: the client method (one of ``EC2_OPERATIONS``).

        Returns:
            The paginator.

        Raises:
            ValueError: ``operation_name`` is not one the fake answers.
        """
        if operation_name not in EC2_OPERATIONS:
            raise ValueError(
                f"unknown method {operation_name!r}; one of {', '.join(EC2_OPERATIONS)}"
            )
        operation = EC2_OPERATIONS[operation_name]
        return importlib.import_module("botocore.paginate").Paginator(
            getattr(self, operation_name),
            paginator_model().get_paginator(operation),
            service_model().operation_model(operation),
        )

    def add(self, claim: str, state: str = "running", *, spot: bool = False) -> str:
        """Seed an instance tagged with ``claim``; its id.

        Args:
            claim: the claim name it is tagged with.
            state: its EC2 state; a running one has its status checks ok.
            spot: it is a spot instance (which :meth:`reclaim` can take back).

        Returns:
            The instance's id.
        """
        iid = self._launch("t3.micro", "subnet-0fake", claim, spot)
        self._set_state(iid, state)
        if state == "running":
            self.checks[iid] = ("ok", "ok")
        return iid

    # -- the client surface ---------------------------------------------------------------------
    def create_fleet(self, **kwargs: Any) -> dict[str, Any]:
        """``CreateFleet``, as the EC2 client answers it (see the class).

        Args:
            **kwargs: the request's parameters, as botocore takes them.

        Returns:
            The response, shaped as EC2's.

        Raises:
            botocore.exceptions.ClientError: a scripted fault, or EC2's own refusal.
        """
        self._enter("create_fleet", kwargs)
        token = kwargs.get("ClientToken")
        if token and token in self._tokens:
            first, response = self._tokens[token]
            if first != kwargs:
                raise _client_error(
                    "IdempotentParameterMismatch",
                    "The client token you have provided is associated with a resource that "
                    "is already deleted or was created with different parameters.",
                    "CreateFleet",
                )
            return self._leave("create_fleet", copy.deepcopy(response))
        response = self._create_fleet(kwargs)
        if token:
            self._tokens[token] = (copy.deepcopy(kwargs), copy.deepcopy(response))
        return self._leave("create_fleet", response)

    def _create_fleet(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        spec = kwargs["TargetCapacitySpecification"]
        lifecycle = spec.get("DefaultTargetCapacityType", "on-demand")
        config = kwargs["LaunchTemplateConfigs"][0]
        template = dict(config["LaunchTemplateSpecification"])
        override = (config.get("Overrides") or [{}])[0]
        response: dict[str, Any] = {"FleetId": f"fleet-{next(self._ids):08x}"}
        if self._fleets:
            response["Errors"] = [
                {
                    "LaunchTemplateAndOverrides": {
                        "LaunchTemplateSpecification": template,
                        "Overrides": override,
                    },
                    "Lifecycle": lifecycle,
                    **e,
                }
                for e in self._fleets.popleft()
            ]
            response["Instances"] = []
            return self._respond("create_fleet", response)
        tags = {
            t["Key"]: t["Value"]
            for s in kwargs.get("TagSpecifications", [])
            if s.get("ResourceType") == "instance"
            for t in s.get("Tags", [])
        }
        itype = override.get("InstanceType", "t3.micro")
        iid = self._launch(itype, override.get("SubnetId", ""), "", lifecycle == "spot", tags)
        response["Instances"] = [
            {
                "LaunchTemplateAndOverrides": {
                    "LaunchTemplateSpecification": template,
                    "Overrides": override,
                },
                "Lifecycle": lifecycle,
                "InstanceIds": [iid],
                "InstanceType": itype,
            }
        ]
        response["Errors"] = []
        return self._respond("create_fleet", response)

    def describe_instances(self, **kwargs: Any) -> dict[str, Any]:
        """``DescribeInstances``, as the EC2 client answers it (see the class).

        Args:
            **kwargs: the request's parameters, as botocore takes them.

        Returns:
            The response, shaped as EC2's.

        Raises:
            botocore.exceptions.ClientError: a scripted fault, or EC2's own refusal.
        """
        self._enter("describe_instances", kwargs)
        return self._leave("describe_instances", self._describe_instances(kwargs))

    def _describe_instances(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        ids = kwargs.get("InstanceIds")
        if ids:
            for iid in ids:
                if iid not in self.instances or self._lagging(iid):
                    raise _client_error(
                        "InvalidInstanceID.NotFound",
                        f"The instance ID '{iid}' does not exist",
                        "DescribeInstances",
                    )
            found = [self.instances[i] for i in ids]
        else:
            found = [
                i
                for iid, i in self.instances.items()
                if self._lag.get(iid, 0) <= 0 and self._matches(i, kwargs.get("Filters", []))
            ]
        start = int(kwargs.get("NextToken") or 0)
        size = kwargs.get("MaxResults") or len(found) or 1
        page = found[start : start + size]
        response: dict[str, Any] = {
            "Reservations": [
                {"ReservationId": f"r-{i['InstanceId'][2:]}", "OwnerId": "1", "Instances": [i]}
                for i in page
            ]
        }
        if start + size < len(found):
            response["NextToken"] = str(start + size)
        return self._respond("describe_instances", response)

    def describe_instance_status(self, **kwargs: Any) -> dict[str, Any]:
        """``DescribeInstanceStatus``, as the EC2 client answers it (see the class).

        Args:
            **kwargs: the request's parameters, as botocore takes them.

        Returns:
            The response, shaped as EC2's.

        Raises:
            botocore.exceptions.ClientError: a scripted fault, or EC2's own refusal.
        """
        self._enter("describe_instance_status", kwargs)
        return self._leave("describe_instance_status", self._describe_instance_status(kwargs))

    def _describe_instance_status(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        statuses = []
        for iid in kwargs.get("InstanceIds", []):
            inst = self.instances.get(iid)
            if inst is None or self._lag.get(iid, 0) > 0:
                raise _client_error(
                    "InvalidInstanceID.NotFound",
                    f"The instance ID '{iid}' does not exist",
                    "DescribeInstanceStatus",
                )
            if inst["State"]["Name"] != "running":
                continue  # like EC2 without IncludeAllInstances
            system, instance = self.checks.get(iid, ("initializing", "initializing"))
            statuses.append(
                {
                    "InstanceId": iid,
                    "InstanceState": dict(inst["State"]),
                    "SystemStatus": {"Status": system},
                    "InstanceStatus": {"Status": instance},
                }
            )
        return self._respond("describe_instance_status", {"InstanceStatuses": statuses})

    def terminate_instances(self, **kwargs: Any) -> dict[str, Any]:
        """``TerminateInstances``, as the EC2 client answers it (see the class).

        Args:
            **kwargs: the request's parameters, as botocore takes them.

        Returns:
            The response, shaped as EC2's.

        Raises:
            botocore.exceptions.ClientError: a scripted fault, or EC2's own refusal.
        """
        self._enter("terminate_instances", kwargs)
        return self._leave("terminate_instances", self._terminate_instances(kwargs))

    def _terminate_instances(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        ids = kwargs["InstanceIds"]
        missing = [iid for iid in ids if iid not in self.instances]
        if missing:  # like EC2: one unknown id and none is terminated
            listed = ", ".join(missing)
            message = (
                f"The instance ID '{listed}' does not exist"
                if len(missing) == 1
                else f"The instance IDs '{listed}' do not exist"
            )
            raise _client_error("InvalidInstanceID.NotFound", message, "TerminateInstances")
        changes = []
        for iid in ids:
            inst = self.instances[iid]
            before = dict(inst["State"])
            self._set_state(iid, "terminated", "Client.UserInitiatedShutdown")
            changes.append(
                {"InstanceId": iid, "PreviousState": before, "CurrentState": dict(inst["State"])}
            )
        return self._respond("terminate_instances", {"TerminatingInstances": changes})

    # -- internals ------------------------------------------------------------------------------
    def _enter(self, method: str, kwargs: dict[str, Any]) -> None:
        self.calls.append((method, copy.deepcopy(kwargs)))
        if self.validate:
            shape = service_model().operation_model(EC2_OPERATIONS[method]).input_shape
            importlib.import_module("botocore.validate").validate_parameters(kwargs, shape)
        queue = self._faults.get(method)
        if queue:
            code, message = queue.popleft()
            raise _client_error(code, message, EC2_OPERATIONS[method])

    def _leave(self, method: str, response: dict[str, Any]) -> dict[str, Any]:
        """Hand ``response`` back, unless a scripted timeout loses it."""
        if self._timeouts.get(method, 0) > 0:
            self._timeouts[method] -= 1
            exceptions = importlib.import_module("botocore.exceptions")
            raise exceptions.ReadTimeoutError(endpoint_url=f"https://ec2.{self.region}.fake")
        return response

    def _respond(self, method: str, response: dict[str, Any]) -> dict[str, Any]:
        response = copy.deepcopy(response)
        if self.validate:
            shape = service_model().operation_model(EC2_OPERATIONS[method]).output_shape
            importlib.import_module("botocore.validate").validate_parameters(response, shape)
        response["ResponseMetadata"] = {"HTTPStatusCode": 200, "RequestId": "fake"}
        return response

    def _lagging(self, iid: str) -> bool:
        left = self._lag.get(iid, 0)
        if left > 0:
            self._lag[iid] = left - 1
            return True
        return False

    def _launch(
        self,
        itype: str,
        subnet: str,
        claim: str,
        spot: bool,
        tags: Mapping[str, str] | None = None,
    ) -> str:
        iid = f"i-{next(self._ids):017x}"
        all_tags = dict(tags or {})
        if claim:
            all_tags["nebula.inftyai.com/claim"] = claim
        n = int(iid[2:], 16)
        inst: dict[str, Any] = {
            "InstanceId": iid,
            "InstanceType": itype,
            "SubnetId": subnet,
            "LaunchTime": datetime(2026, 1, 1, tzinfo=UTC),
            "State": {"Code": 0, "Name": "pending"},
            "Tags": [{"Key": k, "Value": v} for k, v in all_tags.items()],
            "PublicDnsName": f"ec2-{n}.{self.region}.compute.example",
            "PrivateIpAddress": f"10.0.{n // 250 % 250}.{n % 250 + 4}",
            "Placement": {"AvailabilityZone": f"{self.region}a"},
        }
        if spot:
            inst["InstanceLifecycle"] = "spot"
        self.instances[iid] = inst
        return iid

    def _set_state(self, iid: str, state: str, reason: str = "") -> None:
        inst = self.instances[iid]
        inst["State"] = {"Code": _STATE_CODES[state], "Name": state}
        if reason:
            inst["StateReason"] = {"Code": reason, "Message": reason}
        if state != "running":
            self.checks.pop(iid, None)

    @staticmethod
    def _matches(inst: Mapping[str, Any], filters: list[Mapping[str, Any]]) -> bool:
        tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
        for f in filters:
            name, values = f["Name"], f.get("Values", [])
            if name == "tag-key":
                ok = any(v in tags for v in values)
            elif name.startswith("tag:"):
                ok = tags.get(name[4:]) in values
            elif name == "instance-state-name":
                ok = inst["State"]["Name"] in values
            elif name == "instance-id":
                ok = inst["InstanceId"] in values
            else:
                raise _client_error(
                    "InvalidParameterValue", f"unsupported filter {name}", "DescribeInstances"
                )
            if not ok:
                return False
        return True
