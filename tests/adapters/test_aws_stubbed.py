"""The AWS adapter against real botocore clients under ``botocore.stub.Stubber``, which checks
every request against the expected parameters and validates requests and responses against
the EC2 service model. Partial fleets, capacity, quota and auth errors, pagination, spot
reclaims, eventual-consistency NotFound and failing regions; the ``ClientToken`` of a retried
create, requests the model refuses, and terminating several ids when one is unknown."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from lifecycle import MemoryStore, Runner
from lifecycle.adapters import aws as aws_module
from lifecycle.adapters.aws import (
    CLAIM_TAG_KEY,
    LIVE_STATES,
    AwsAdapter,
    FleetSpec,
    fleet_client_token,
)
from lifecycle.machines.pod import (
    CreateRequested,
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

from .conftest import pod, t, tracked_in

boto3 = pytest.importorskip("boto3")
from botocore.exceptions import ReadTimeoutError  # noqa: E402
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


def token(ref: Any = A, attempt: int = 0) -> str:
    return fleet_client_token(f"ml-{ref.name}", ref.uid, attempt)


def create_params(ref: Any = A, attempt: int = 0, spec: FleetSpec = SPEC) -> dict[str, Any]:
    """The exact ``create_fleet`` request for ``ref``'s create number ``attempt``."""
    return dict(spec.request(f"ml-{ref.name}", token(ref, attempt)))


def test_provision_is_one_instant_fleet_and_reserved(stubs: Stubs) -> None:
    stubs[US].add_response("describe_instances", page(), by_claim("a"))
    stubs[US].add_response("create_fleet", fleet_response(["i-0aaa"]), create_params())
    obs = stubs.adapter().provision(A, SPEC)
    assert obs == ProvisionSucceeded(at=t(0), reserved=True, instance_id="i-0aaa")


def _lose_the_next_create_fleet_answer(client: Any) -> None:
    """The next create_fleet takes effect (the Stubber checked its parameters and answered)
    but the answer is lost on the way back: botocore's ReadTimeoutError."""
    fired: list[bool] = []

    def time_out(**_: Any) -> None:
        if not fired:
            fired.append(True)
            raise ReadTimeoutError(endpoint_url="https://ec2.us-east-1.amazonaws.com")

    client.meta.events.register("after-call.ec2.CreateFleet", time_out)


def test_a_create_retried_after_a_timeout_sends_the_same_client_token(stubs: Stubs) -> None:
    """The create timed out after EC2 launched the fleet; the claim's instance is not listed
    yet (tags are eventually consistent), so the next reconcile creates again: with the same
    ClientToken, which EC2 answers with the fleet it already launched. The Stubber asserts the
    exact token on both calls."""
    adapter = stubs.adapter()
    _lose_the_next_create_fleet_answer(stubs.clients[US])
    stubs[US].add_response("describe_instances", page(), by_claim("a"))
    stubs[US].add_response("create_fleet", fleet_response(["i-0aaa"]), create_params())
    first = adapter.provision(A, SPEC)
    assert isinstance(first, ProvisionErrored)
    assert "ReadTimeoutError" in first.error
    stubs[US].add_response("describe_instances", page(), by_claim("a"))  # still not listed
    stubs[US].add_response("create_fleet", fleet_response(["i-0aaa"]), create_params())
    again = adapter.provision(A, SPEC)
    assert again == ProvisionSucceeded(at=t(0), reserved=True, instance_id="i-0aaa")


def test_the_client_token_is_per_claim_pod_and_deliberate_attempt(stubs: Stubs) -> None:
    tokens = {token(A), token(A, 1), token(B), token(pod("a", uid="uid-a-recreated"))}
    assert len(tokens) == 4  # another attempt, claim, or pod of the same name: another token
    assert all(len(t_) <= 64 and t_.isascii() for t_ in tokens)  # EC2's limit
    assert token(A) == fleet_client_token("ml-a", "uid-a", 0)  # deterministic
    stubs[US].add_response("describe_instances", page(), by_claim("a"))
    stubs[US].add_response("create_fleet", fleet_response(["i-0bbb"]), create_params(A, 1))
    obs = stubs.adapter().provision(A, SPEC, attempt=1)
    assert obs == ProvisionSucceeded(at=t(0), reserved=True, instance_id="i-0bbb")


@pytest.mark.parametrize("attempt", [-1, True, 1.0, "1"])
def test_a_bad_attempt_is_refused_before_any_call(stubs: Stubs, attempt: Any) -> None:
    with pytest.raises(ValueError, match="attempt must be a non-negative int"):
        stubs.adapter().provision(A, SPEC, attempt=attempt)


def test_a_token_reused_with_other_parameters_is_a_rejection(stubs: Stubs) -> None:
    """The host changed the spec between retries of one create: EC2 refuses the token
    (IdempotentParameterMismatch). Retrying cannot help, and the first request may have
    launched an instance, so the pod fails rather than loop."""
    stubs[US].add_response("describe_instances", page(), by_claim("a"))
    stubs[US].add_client_error(
        "create_fleet", "IdempotentParameterMismatch", "token reused", 400, create_params()
    )
    obs = stubs.adapter().provision(A, SPEC)
    assert isinstance(obs, ProvisionRejected)
    assert obs.error.startswith("request: IdempotentParameterMismatch")


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"launch_template_name": "ab"}, "LaunchTemplateName, value: 2, valid min length: 3"),
        ({"launch_template_name": "x" * 129}, "LaunchTemplateName, value: 129, max: 128"),
        ({"launch_template_name": "gpu", "tags": {"team": 5}}, "Invalid type for parameter"),
    ],
)
def test_a_fleet_spec_the_ec2_model_refuses_is_refused_when_built(
    fields: dict[str, Any], problem: str
) -> None:
    with pytest.raises(ValueError, match="does not fit EC2's CreateFleet") as info:
        FleetSpec(region=US, instance_types=("g5.xlarge",), subnet_ids=("subnet-1",), **fields)
    assert problem in str(info.value)


def test_a_request_the_client_refuses_is_a_rejection_not_a_retry(
    stubs: Stubs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ParamValidationError at call time (here: a spec built while the check was off) is
    refused the same way on every attempt: a rejection, not ProvisionErrored forever."""
    monkeypatch.setattr(aws_module, "_validate_fleet_request", lambda request: None, raising=False)
    short = FleetSpec(
        region=US,
        instance_types=("g5.xlarge",),
        subnet_ids=("subnet-1",),
        launch_template_name="ab",
    )
    client = _session().client("ec2", region_name=US, endpoint_url="http://127.0.0.1:9")
    stubber = Stubber(client)
    stubber.add_response("describe_instances", page(), by_claim("a"))
    stubber.add_response("create_fleet", fleet_response(["i-0never"]))
    with stubber:
        obs = AwsAdapter(client_factory=lambda region: client, clock=lambda: t(0)).provision(
            A, short
        )
    assert isinstance(obs, ProvisionRejected)
    assert obs.error.startswith("invalid request: ParamValidationError")
    assert "LaunchTemplateName" in obs.error


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
    assert obs.error.startswith(lead)  # type: ignore[union-attr]


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
    assert code in obs.error  # type: ignore[union-attr]


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
    pods = {A: tracked_in(US, "i-1"), B: tracked_in(US, "i-2"), pod("c"): tracked_in(US, "i-3")}
    out = stubs.adapter().observe(pods)
    assert isinstance(out[A], InstanceRunning)
    assert isinstance(out[B], InstancePending)
    assert isinstance(out[pod("c")], InstancePending)  # no status entry: checks not ok


def test_the_private_address_is_the_endpoint_and_the_pod_ip(stubs: Stubs) -> None:
    running = inst("i-1", "running", PrivateIpAddress="10.1.2.3", PublicIpAddress="3.4.5.6")
    for address, endpoint in [("private", "10.1.2.3"), ("public", "i-1.compute.example")]:
        stubs[US].add_response("describe_instances", page(running), LIST_ALL)
        stubs[US].add_response("describe_instance_status", {"InstanceStatuses": [ok("i-1")]})
        obs = stubs.adapter(address=address).observe({A: tracked_in(US, "i-1")})[A]
        assert obs == InstanceRunning(at=t(0), instance_id="i-1", endpoint=endpoint)
    with pytest.raises(ValueError, match="address must be one of"):
        stubs.adapter(address="elastic")
    # Fed to the Pod machine, the private address is the pod's IP (part of its flip signature).
    runner = Runner(MemoryStore())
    runner.observe(A, CreateRequested(at=t(0), pool="gpu", provider="aws"))
    runner.observe(A, ProvisionSucceeded(at=t(0), reserved=True, instance_id="i-1"))
    stubs[US].add_response("describe_instances", page(running), LIST_ALL)
    stubs[US].add_response("describe_instance_status", {"InstanceStatuses": [ok("i-1")]})
    result = runner.observe(A, stubs.adapter().observe({A: tracked_in(US, "i-1")})[A])
    assert result.status.pod_ip == "10.1.2.3"


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
    out = stubs.adapter().observe({A: tracked_in(US, "i-1"), B: tracked_in(US, "i-2")})
    assert isinstance(out[A], InstanceRunning)
    assert isinstance(out[B], InstancePending)


def test_a_failed_status_read_is_unknown_for_running_instances(stubs: Stubs) -> None:
    stubs[US].add_response(
        "describe_instances", page(inst("i-1", "running"), inst("i-2", "pending", "ml-b")), LIST_ALL
    )
    stubs[US].add_client_error("describe_instance_status", "RequestLimitExceeded", "throttled", 503)
    out = stubs.adapter(max_attempts=1).observe(
        {A: tracked_in(US, "i-1"), B: tracked_in(US, "i-2")}
    )
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
    out = stubs.adapter().observe({A: tracked_in(US, "i-1"), B: tracked_in(US, "i-2")})
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
        {A: tracked_in(US, "i-1"), B: tracked_in(EU, "i-9"), pod("c"): tracked_in(EU)}
    )
    assert isinstance(out[A], InstanceRunning)
    for ref in (B, pod("c")):
        assert isinstance(out[ref], InstanceUnknown)
        assert out[ref].error.startswith(f"region {EU} could not be listed")  # type: ignore[union-attr]


def test_a_failing_second_page_makes_the_region_unknown(stubs: Stubs) -> None:
    stubs[US].add_response("describe_instances", page(inst("i-1", "running"), token="p2"), LIST_ALL)
    stubs[US].add_client_error("describe_instances", "InternalError", "oops", 500)
    out = stubs.adapter(max_attempts=1).observe({A: tracked_in(US, "i-1"), B: tracked_in(US)})
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
        assert type(adapter.observe({A: tracked_in(US, "i-new")})[A]) is expected


def test_found_by_id_after_a_lagging_list(stubs: Stubs) -> None:
    adapter = stubs.adapter()
    stubs[US].add_response("describe_instances", page(), LIST_ALL)
    stubs[US].add_client_error(
        "describe_instances", "InvalidInstanceID.NotFound", "nope", 400, {"InstanceIds": ["i-new"]}
    )
    assert isinstance(adapter.observe({A: tracked_in(US, "i-new")})[A], InstanceUnknown)
    stubs[US].add_response("describe_instances", page(), LIST_ALL)  # tags not indexed yet
    stubs[US].add_response(
        "describe_instances", page(inst("i-new", "pending")), {"InstanceIds": ["i-new"]}
    )
    assert isinstance(adapter.observe({A: tracked_in(US, "i-new")})[A], InstancePending)
    assert adapter._missing_since == {}  # found: the NotFound clock was reset


def test_an_untracked_pod_ignores_finished_instances_of_an_earlier_pod(stubs: Stubs) -> None:
    """A new pod with the same name has the same claim; the old pod's terminated instance
    (still listed for an hour) must not terminate it."""
    stubs[US].add_response("describe_instances", page(inst("i-old", "terminated")), LIST_ALL)
    assert isinstance(stubs.adapter().observe({A: tracked_in(US)})[A], InstanceAbsent)


def test_an_untracked_pod_is_readopted_from_a_live_instance(stubs: Stubs) -> None:
    stubs[US].add_response(
        "describe_instances", page(inst("i-old", "terminated"), inst("i-live", "pending")), LIST_ALL
    )
    obs = stubs.adapter().observe({A: tracked_in(US)})[A]
    assert isinstance(obs, InstancePending)
    assert obs.instance_id == "i-live"


# -- terminate ---------------------------------------------------------------------------------
@pytest.mark.parametrize("code", ["InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"])
def test_terminate_of_an_unknown_instance_is_success(stubs: Stubs, code: str) -> None:
    stubs[US].add_client_error("terminate_instances", code, "gone", 400, {"InstanceIds": ["i-1"]})
    assert isinstance(stubs.adapter().terminate(A, tracked_in(US, "i-1")), TerminateSucceeded)


def test_terminate_by_id(stubs: Stubs) -> None:
    stubs[US].add_response(
        "terminate_instances", {"TerminatingInstances": []}, {"InstanceIds": ["i-1"]}
    )
    assert isinstance(stubs.adapter().terminate(A, tracked_in(US, "i-1")), TerminateSucceeded)


def test_terminate_without_an_id_finds_the_claims_instances(stubs: Stubs) -> None:
    stubs[US].add_response("describe_instances", page(inst("i-1", "running")), by_claim("a"))
    stubs[US].add_response(
        "terminate_instances", {"TerminatingInstances": []}, {"InstanceIds": ["i-1"]}
    )
    assert isinstance(stubs.adapter().terminate(A, tracked_in(US)), TerminateSucceeded)
    stubs[US].add_response("describe_instances", page(), by_claim("b"))
    assert isinstance(stubs.adapter().terminate(B, tracked_in(US)), TerminateSucceeded)


def test_one_unknown_id_among_several_terminates_the_others_one_by_one(stubs: Stubs) -> None:
    """EC2 terminates none of the ids when one is unknown; each other id is then terminated
    on its own, and the pod's terminate succeeds only when every id is gone."""
    both = page(inst("i-1", "running"), inst("i-2", "pending"))
    stubs[US].add_response("describe_instances", both, by_claim("a"))
    stubs[US].add_client_error(
        "terminate_instances",
        "InvalidInstanceID.NotFound",
        "The instance ID 'i-2' does not exist",
        400,
        {"InstanceIds": ["i-1", "i-2"]},
    )
    stubs[US].add_response(
        "terminate_instances", {"TerminatingInstances": []}, {"InstanceIds": ["i-1"]}
    )
    stubs[US].add_client_error(
        "terminate_instances", "InvalidInstanceID.NotFound", "gone", 400, {"InstanceIds": ["i-2"]}
    )
    assert isinstance(stubs.adapter().terminate(A, tracked_in(US)), TerminateSucceeded)


def test_an_id_that_is_not_gone_fails_the_terminate(stubs: Stubs) -> None:
    both = page(inst("i-1", "running"), inst("i-2", "pending"))
    stubs[US].add_response("describe_instances", both, by_claim("a"))
    stubs[US].add_client_error(
        "terminate_instances", "InvalidInstanceID.NotFound", "i-2 unknown", 400
    )
    stubs[US].add_client_error(
        "terminate_instances", "UnauthorizedOperation", "no", 403, {"InstanceIds": ["i-1"]}
    )
    stubs[US].add_client_error(
        "terminate_instances", "InvalidInstanceID.NotFound", "gone", 400, {"InstanceIds": ["i-2"]}
    )
    obs = stubs.adapter().terminate(A, tracked_in(US))
    assert isinstance(obs, TerminateFailed)
    assert obs.error.startswith("i-1: ClientError")
    assert "UnauthorizedOperation" in obs.error
    assert "i-2" not in obs.error


def test_terminate_errors_fail(stubs: Stubs) -> None:
    stubs[US].add_client_error("terminate_instances", "UnauthorizedOperation", "no", 403)
    obs = stubs.adapter().terminate(A, tracked_in(US, "i-1"))
    assert isinstance(obs, TerminateFailed)
    assert "UnauthorizedOperation" in obs.error
    stubs[US].add_client_error("describe_instances", "InternalError", "oops", 500)
    obs = stubs.adapter(max_attempts=1).terminate(A, tracked_in(US))
    assert isinstance(obs, TerminateFailed)
    assert "InternalError" in obs.error
