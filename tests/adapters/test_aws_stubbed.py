"""The AWS adapter against real botocore clients under ``botocore.stub.Stubber``, which checks
every request against the expected parameters and validates requests and responses against
the EC2 service model. Partial fleets, capacity, quota and auth errors, pagination, spot
reclaims, eventual-consistency NotFound and failing regions."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from lifecycle.adapters.aws import (
    CLAIM_TAG_KEY,
    LIVE_STATES,
    AwsAdapter,
    FleetSpec,
    Placement,
)
from lifecycle.machines.pod import (
    InstanceAbsent,
    InstancePending,
    InstanceRunning,
    InstanceTerminated,
    InstanceUnknown,
    ProvisionErrored,
    ProvisionRejected,
    ProvisionSucceeded,
    TerminateFailed,
    TerminateSucceeded,
)

from .conftest import pod, t

boto3 = pytest.importorskip("boto3")
from botocore.stub import Stubber  # noqa: E402

US, EU = "us-east-1", "eu-west-1"
A, B = pod("a"), pod("b")
SPEC = FleetSpec(
    region=US,
    instance_types=("g5.xlarge", "g6.xlarge"),
    subnet_ids=("subnet-1", "subnet-2"),
    launch_template_id="lt-0123456789abcdef0",
    capacity_type="spot",
)
LIST_ALL = {"Filters": [{"Name": "tag-key", "Values": [CLAIM_TAG_KEY]}], "MaxResults": 1000}


def by_claim(name: str) -> dict[str, Any]:
    return {
        "Filters": [
            {"Name": f"tag:{CLAIM_TAG_KEY}", "Values": [f"ml-{name}"]},
            {"Name": "instance-state-name", "Values": list(LIVE_STATES)},
        ],
        "MaxResults": 1000,
    }


def inst(iid: str, state: str, claim: str = "ml-a", **extra: Any) -> dict[str, Any]:
    return {
        "InstanceId": iid,
        "State": {"Code": 16, "Name": state},
        "Tags": [{"Key": CLAIM_TAG_KEY, "Value": claim}],
        "LaunchTime": datetime(2026, 11, 30, tzinfo=UTC),
        "PublicDnsName": f"{iid}.compute.example",
        **extra,
    }


def page(*instances: dict[str, Any], token: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {
        "Reservations": [
            {"ReservationId": f"r-{i['InstanceId']}", "Instances": [i]} for i in instances
        ]
    }
    if token:
        out["NextToken"] = token
    return out


def ok(iid: str) -> dict[str, Any]:
    return {
        "InstanceId": iid,
        "SystemStatus": {"Status": "ok"},
        "InstanceStatus": {"Status": "ok"},
    }


@functools.cache
def _session() -> Any:
    """One session for the module: its loader caches the EC2 model between clients."""
    return boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing")


class Stubs:
    """One stubbed real EC2 client per region; the adapter gets them through its factory."""

    def __init__(self) -> None:
        session = _session()
        self.clients = {
            r: session.client("ec2", region_name=r, endpoint_url="http://127.0.0.1:9")
            for r in (US, EU)
        }
        self.stubbers = {r: Stubber(c) for r, c in self.clients.items()}
        self.now = 0.0

    def __getitem__(self, region: str) -> Stubber:
        return self.stubbers[region]

    def adapter(self, **kw: Any) -> AwsAdapter:
        return AwsAdapter(
            client_factory=self.clients.__getitem__,
            clock=lambda: t(0),
            monotonic=lambda: self.now,
            **kw,
        )


@pytest.fixture
def stubs() -> Iterator[Stubs]:
    s = Stubs()
    for stubber in s.stubbers.values():
        stubber.activate()
    yield s
    for stubber in s.stubbers.values():
        stubber.assert_no_pending_responses()
        stubber.deactivate()


# -- provision ---------------------------------------------------------------------------------
def fleet_response(ids: list[str], errors: list[dict[str, str]] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"FleetId": "fleet-1", "Errors": [], "Instances": []}
    if ids:
        out["Instances"] = [{"Lifecycle": "spot", "InstanceIds": ids, "InstanceType": "g5.xlarge"}]
    out["Errors"] = [
        {"ErrorCode": e["code"], "ErrorMessage": e.get("message", e["code"]), "Lifecycle": "spot"}
        for e in errors or []
    ]
    return out


def test_provision_is_one_instant_fleet_and_reserved(stubs: Stubs) -> None:
    stubs[US].add_response("describe_instances", page(), by_claim("a"))
    stubs[US].add_response("create_fleet", fleet_response(["i-0aaa"]), dict(SPEC.request("ml-a")))
    obs = stubs.adapter().provision(A, SPEC)
    assert obs == ProvisionSucceeded(at=t(0), reserved=True, instance_id="i-0aaa")


def test_a_partial_fleet_is_success(stubs: Stubs) -> None:
    stubs[US].add_response("describe_instances", page(), by_claim("a"))
    errors = [{"code": "InsufficientInstanceCapacity"}, {"code": "UnauthorizedOperation"}]
    stubs[US].add_response("create_fleet", fleet_response(["i-0bbb"], errors))
    obs = stubs.adapter().provision(A, SPEC)
    assert obs == ProvisionSucceeded(at=t(0), reserved=True, instance_id="i-0bbb")


@pytest.mark.parametrize(
    ("codes", "kind", "lead"),
    [
        (
            ["InsufficientInstanceCapacity"],
            ProvisionRejected,
            "capacity: InsufficientInstanceCapacity",
        ),
        (
            ["InsufficientInstanceCapacity", "MaxSpotInstanceCountExceeded"],
            ProvisionRejected,
            "quota: MaxSpotInstanceCountExceeded",
        ),
        (
            ["VcpuLimitExceeded", "UnauthorizedOperation", "InsufficientInstanceCapacity"],
            ProvisionRejected,
            "auth: UnauthorizedOperation",
        ),
        (["InternalError"], ProvisionErrored, "unknown: InternalError"),
        ([], ProvisionRejected, "capacity: NoCapacity"),
    ],
)
def test_a_fleet_that_launched_nothing_is_ranked(
    stubs: Stubs, codes: list[str], kind: type, lead: str
) -> None:
    stubs[US].add_response("describe_instances", page(), by_claim("a"))
    stubs[US].add_response("create_fleet", fleet_response([], [{"code": c} for c in codes]))
    obs = stubs.adapter().provision(A, SPEC)
    assert type(obs) is kind
    assert obs.error.startswith(lead)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("code", "status", "kind"),
    [
        ("UnauthorizedOperation", 403, ProvisionRejected),
        ("AuthFailure", 401, ProvisionRejected),
        ("VcpuLimitExceeded", 400, ProvisionRejected),
        ("InsufficientInstanceCapacity", 500, ProvisionRejected),
        ("RequestLimitExceeded", 503, ProvisionErrored),
        ("InternalError", 500, ProvisionErrored),
        ("InvalidParameterValue", 400, ProvisionErrored),
    ],
)
def test_create_fleet_api_errors(stubs: Stubs, code: str, status: int, kind: type) -> None:
    stubs[US].add_response("describe_instances", page(), by_claim("a"))
    stubs[US].add_client_error("create_fleet", code, f"says {code}", status)
    obs = stubs.adapter(max_attempts=1).provision(A, SPEC)
    assert type(obs) is kind
    assert code in obs.error  # type: ignore[attr-defined]


def test_provision_adopts_the_claims_instance(stubs: Stubs) -> None:
    stubs[US].add_response("describe_instances", page(inst("i-0old", "running")), by_claim("a"))
    obs = stubs.adapter().provision(A, SPEC)
    assert obs == ProvisionSucceeded(
        at=t(0), reserved=True, instance_id="i-0old", endpoint="i-0old.compute.example"
    )


def test_provision_that_cannot_look_for_the_claim_errs(stubs: Stubs) -> None:
    stubs[US].add_client_error("describe_instances", "RequestLimitExceeded", "slow down", 503)
    obs = stubs.adapter().provision(A, SPEC)
    assert isinstance(obs, ProvisionErrored)
    assert "RequestLimitExceeded" in obs.error


# -- observe -----------------------------------------------------------------------------------
def test_listing_is_paginated(stubs: Stubs) -> None:
    stubs[US].add_response("describe_instances", page(inst("i-1", "running"), token="p2"), LIST_ALL)
    stubs[US].add_response(
        "describe_instances",
        page(inst("i-2", "pending", "ml-b"), token="p3"),
        {**LIST_ALL, "NextToken": "p2"},
    )
    stubs[US].add_response(
        "describe_instances",
        page(inst("i-3", "running", "ml-c")),
        {**LIST_ALL, "NextToken": "p3"},
    )
    stubs[US].add_response(
        "describe_instance_status",
        {"InstanceStatuses": [ok("i-1")]},
        {"InstanceIds": ["i-1", "i-3"]},
    )
    pods = {A: Placement(US, "i-1"), B: Placement(US, "i-2"), pod("c"): Placement(US, "i-3")}
    out = stubs.adapter().observe(pods)
    assert isinstance(out[A], InstanceRunning)
    assert isinstance(out[B], InstancePending)
    assert isinstance(out[pod("c")], InstancePending)  # no status entry: checks not ok


def test_status_checks_are_read_for_running_instances_only(stubs: Stubs) -> None:
    stubs[US].add_response(
        "describe_instances", page(inst("i-1", "running"), inst("i-2", "pending", "ml-b")), LIST_ALL
    )
    stubs[US].add_response(
        "describe_instance_status",
        {"InstanceStatuses": [ok("i-1")], "NextToken": "s2"},
        {"InstanceIds": ["i-1"]},
    )
    stubs[US].add_response(
        "describe_instance_status",
        {"InstanceStatuses": []},
        {"InstanceIds": ["i-1"], "NextToken": "s2"},
    )
    out = stubs.adapter().observe({A: Placement(US, "i-1"), B: Placement(US, "i-2")})
    assert isinstance(out[A], InstanceRunning)
    assert isinstance(out[B], InstancePending)


def test_a_failed_status_read_is_unknown_for_running_instances(stubs: Stubs) -> None:
    stubs[US].add_response(
        "describe_instances", page(inst("i-1", "running"), inst("i-2", "pending", "ml-b")), LIST_ALL
    )
    stubs[US].add_client_error("describe_instance_status", "RequestLimitExceeded", "throttled", 503)
    out = stubs.adapter(max_attempts=1).observe({A: Placement(US, "i-1"), B: Placement(US, "i-2")})
    unknown = out[A]
    assert isinstance(unknown, InstanceUnknown)
    assert "RequestLimitExceeded" in unknown.error
    assert isinstance(out[B], InstancePending)


def test_a_spot_reclaim_is_reported_as_a_preemption(stubs: Stubs) -> None:
    reclaimed = inst(
        "i-1",
        "terminated",
        InstanceLifecycle="spot",
        StateReason={
            "Code": "Server.SpotInstanceTermination",
            "Message": "Server.SpotInstanceTermination: Spot instance termination",
        },
    )
    stopped = inst(
        "i-2",
        "stopped",
        "ml-b",
        StateReason={"Code": "Client.UserInitiatedShutdown", "Message": "User initiated shutdown"},
    )
    stubs[US].add_response("describe_instances", page(reclaimed, stopped), LIST_ALL)
    out = stubs.adapter().observe({A: Placement(US, "i-1"), B: Placement(US, "i-2")})
    preempted, stopped_ = out[A], out[B]
    assert isinstance(preempted, InstanceTerminated)
    assert preempted.detail.startswith("preempted: spot instance reclaimed")
    assert preempted.preempted  # the Pod machine tells it apart (its own message)
    assert isinstance(stopped_, InstanceTerminated)
    assert not stopped_.preempted
    assert (
        stopped_.detail == "state stopped: Client.UserInitiatedShutdown (User initiated shutdown)"
    )


def test_a_failing_region_is_unknown_for_its_pods_only(stubs: Stubs) -> None:
    stubs[US].add_response("describe_instances", page(inst("i-1", "running")), LIST_ALL)
    stubs[US].add_response("describe_instance_status", {"InstanceStatuses": [ok("i-1")]})
    stubs[EU].add_client_error("describe_instances", "Unavailable", "region down", 503)
    out = stubs.adapter(max_attempts=1).observe(
        {A: Placement(US, "i-1"), B: Placement(EU, "i-9"), pod("c"): Placement(EU)}
    )
    assert isinstance(out[A], InstanceRunning)
    for ref in (B, pod("c")):
        assert isinstance(out[ref], InstanceUnknown)
        assert out[ref].error.startswith(f"region {EU} could not be listed")  # type: ignore[attr-defined]


def test_a_failing_second_page_makes_the_region_unknown(stubs: Stubs) -> None:
    stubs[US].add_response("describe_instances", page(inst("i-1", "running"), token="p2"), LIST_ALL)
    stubs[US].add_client_error("describe_instances", "InternalError", "oops", 500)
    out = stubs.adapter(max_attempts=1).observe({A: Placement(US, "i-1"), B: Placement(US)})
    assert all(isinstance(o, InstanceUnknown) for o in out.values())


def test_not_found_right_after_launch_is_unknown_until_the_grace_has_passed(
    stubs: Stubs,
) -> None:
    adapter = stubs.adapter(not_found_grace=300)
    for now, expected in [
        (0.0, InstanceUnknown),
        (120.0, InstanceUnknown),
        (300.0, InstanceAbsent),
    ]:
        stubs.now = now
        stubs[US].add_response("describe_instances", page(), LIST_ALL)
        stubs[US].add_client_error(
            "describe_instances",
            "InvalidInstanceID.NotFound",
            "The instance ID 'i-new' does not exist",
            400,
            {"InstanceIds": ["i-new"]},
        )
        assert type(adapter.observe({A: Placement(US, "i-new")})[A]) is expected


def test_found_by_id_after_a_lagging_list(stubs: Stubs) -> None:
    adapter = stubs.adapter()
    stubs[US].add_response("describe_instances", page(), LIST_ALL)
    stubs[US].add_client_error(
        "describe_instances", "InvalidInstanceID.NotFound", "nope", 400, {"InstanceIds": ["i-new"]}
    )
    assert isinstance(adapter.observe({A: Placement(US, "i-new")})[A], InstanceUnknown)
    stubs[US].add_response("describe_instances", page(), LIST_ALL)  # tags not indexed yet
    stubs[US].add_response(
        "describe_instances", page(inst("i-new", "pending")), {"InstanceIds": ["i-new"]}
    )
    assert isinstance(adapter.observe({A: Placement(US, "i-new")})[A], InstancePending)
    assert adapter._missing_since == {}  # found: the NotFound clock was reset


def test_an_untracked_pod_ignores_finished_instances_of_an_earlier_pod(stubs: Stubs) -> None:
    """A new pod with the same name has the same claim; the old pod's terminated instance
    (still listed for an hour) must not terminate it."""
    stubs[US].add_response("describe_instances", page(inst("i-old", "terminated")), LIST_ALL)
    assert isinstance(stubs.adapter().observe({A: Placement(US)})[A], InstanceAbsent)


def test_an_untracked_pod_is_readopted_from_a_live_instance(stubs: Stubs) -> None:
    stubs[US].add_response(
        "describe_instances", page(inst("i-old", "terminated"), inst("i-live", "pending")), LIST_ALL
    )
    obs = stubs.adapter().observe({A: Placement(US)})[A]
    assert isinstance(obs, InstancePending)
    assert obs.instance_id == "i-live"


# -- terminate ---------------------------------------------------------------------------------
@pytest.mark.parametrize("code", ["InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"])
def test_terminate_of_an_unknown_instance_is_success(stubs: Stubs, code: str) -> None:
    stubs[US].add_client_error("terminate_instances", code, "gone", 400, {"InstanceIds": ["i-1"]})
    assert isinstance(stubs.adapter().terminate(A, Placement(US, "i-1")), TerminateSucceeded)


def test_terminate_by_id(stubs: Stubs) -> None:
    stubs[US].add_response(
        "terminate_instances", {"TerminatingInstances": []}, {"InstanceIds": ["i-1"]}
    )
    assert isinstance(stubs.adapter().terminate(A, Placement(US, "i-1")), TerminateSucceeded)


def test_terminate_without_an_id_finds_the_claims_instances(stubs: Stubs) -> None:
    stubs[US].add_response("describe_instances", page(inst("i-1", "running")), by_claim("a"))
    stubs[US].add_response(
        "terminate_instances", {"TerminatingInstances": []}, {"InstanceIds": ["i-1"]}
    )
    assert isinstance(stubs.adapter().terminate(A, Placement(US)), TerminateSucceeded)
    stubs[US].add_response("describe_instances", page(), by_claim("b"))
    assert isinstance(stubs.adapter().terminate(B, Placement(US)), TerminateSucceeded)


def test_terminate_errors_fail(stubs: Stubs) -> None:
    stubs[US].add_client_error("terminate_instances", "UnauthorizedOperation", "no", 403)
    obs = stubs.adapter().terminate(A, Placement(US, "i-1"))
    assert isinstance(obs, TerminateFailed)
    assert "UnauthorizedOperation" in obs.error
    stubs[US].add_client_error("describe_instances", "InternalError", "oops", 500)
    obs = stubs.adapter(max_attempts=1).terminate(A, Placement(US))
    assert isinstance(obs, TerminateFailed)
    assert "InternalError" in obs.error
