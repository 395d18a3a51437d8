"""EC2's pure mappings: the domain's AWS table row by row, status checks, spot reclaims, the
error ranking, and the fleet request."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lifecycle.adapters.aws import (
    CLAIM_TAG_KEY,
    FailureKind,
    FleetSpec,
    StatusUnavailable,
    classify_code,
    ec2_observation,
    rank_fleet_errors,
    status_checks_ok,
)
from lifecycle.machines.pod import (
    InstancePending,
    InstanceRunning,
    InstanceTerminated,
    InstanceUnknown,
)

from .conftest import t

OK = {"SystemStatus": {"Status": "ok"}, "InstanceStatus": {"Status": "ok"}}


def instance(state: str, **extra: Any) -> dict[str, Any]:
    return {
        "InstanceId": "i-1",
        "State": {"Name": state},
        "PublicDnsName": "ec2-1.compute.example",
        **extra,
    }


# -- the domain table (§4, AWS EC2) ----------------------------------------------------------
@pytest.mark.parametrize(
    ("state", "status", "kind"),
    [
        ("pending", None, InstancePending),
        ("pending", OK, InstancePending),  # "any" status
        ("running", None, InstancePending),  # no status entry yet
        ("running", {"SystemStatus": {"Status": "ok"}}, InstancePending),
        ("running", {**OK, "InstanceStatus": {"Status": "initializing"}}, InstancePending),
        ("running", {**OK, "SystemStatus": {"Status": "impaired"}}, InstancePending),
        ("running", OK, InstanceRunning),
        ("stopping", None, InstanceTerminated),
        ("stopped", None, InstanceTerminated),
        ("shutting-down", None, InstanceTerminated),
        ("terminated", None, InstanceTerminated),
        ("rebooting", None, InstancePending),  # any other state
        ("", None, InstancePending),
    ],
)
def test_ec2_table(state: str, status: dict[str, Any] | None, kind: type) -> None:
    obs = ec2_observation(instance(state), status, t())
    assert type(obs) is kind
    assert obs.instance_id == "i-1"  # type: ignore[union-attr]
    if kind is InstanceRunning:
        assert obs == InstanceRunning(
            at=t(), instance_id="i-1", endpoint="ec2-1.compute.example", readiness_confirmed=True
        )


def test_running_with_unreadable_status_checks_is_unknown() -> None:
    """Upstream reads a failed DescribeInstanceStatus as Pending, which demotes a Running pod;
    a check that could not be made changes nothing (ADR 0006)."""
    obs = ec2_observation(instance("running"), StatusUnavailable("throttled"), t())
    assert isinstance(obs, InstanceUnknown)
    assert "throttled" in obs.error
    pending = ec2_observation(instance("pending"), StatusUnavailable("throttled"), t())
    assert isinstance(pending, InstancePending)


def test_endpoint_is_public_dns_else_public_ip() -> None:
    no_dns = {"InstanceId": "i-1", "State": {"Name": "running"}, "PublicIpAddress": "203.0.113.9"}
    assert ec2_observation(no_dns, OK, t()).endpoint == "203.0.113.9"  # type: ignore[union-attr]
    assert ec2_observation(instance("running"), OK, t()).endpoint == "ec2-1.compute.example"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("state", "code"),
    [("terminated", "Server.SpotInstanceTermination"), ("stopped", "Server.SpotInstanceShutdown")],
)
def test_a_spot_reclaim_is_a_preemption(state: str, code: str) -> None:
    obs = ec2_observation(
        instance(state, InstanceLifecycle="spot", StateReason={"Code": code, "Message": code}),
        None,
        t(),
    )
    assert isinstance(obs, InstanceTerminated)
    assert obs.detail.startswith("preempted: spot instance reclaimed")
    assert code in obs.detail


@pytest.mark.parametrize(
    ("state", "reason"),
    [
        ("stopped", {"Code": "Client.UserInitiatedShutdown", "Message": "User initiated"}),
        ("terminated", {"Code": "Client.UserInitiatedShutdown", "Message": "x"}),
        ("terminated", {"Code": "Server.InternalError", "Message": "internal"}),
    ],
)
def test_an_ordinary_stop_is_not_a_preemption(state: str, reason: dict[str, str]) -> None:
    obs = ec2_observation(instance(state, StateReason=reason), None, t())
    assert isinstance(obs, InstanceTerminated)
    assert not obs.detail.startswith("preempted")
    assert reason["Code"] in obs.detail
    assert state in obs.detail


def test_status_checks_need_both() -> None:
    assert status_checks_ok(OK)
    assert not status_checks_ok(None)
    assert not status_checks_ok({})
    assert not status_checks_ok({"SystemStatus": {"Status": "ok"}})
    assert not status_checks_ok({"InstanceStatus": {"Status": "ok"}})


STATES = st.one_of(
    st.sampled_from(
        ["pending", "running", "stopping", "stopped", "shutting-down", "terminated", ""]
    ),
    st.text(max_size=12),
)
CHECK = st.sampled_from(["ok", "impaired", "initializing", "insufficient-data", "not-applicable"])
STATUS = st.one_of(
    st.none(),
    st.builds(StatusUnavailable, st.text(max_size=5)),
    st.builds(
        lambda s, i: {"SystemStatus": {"Status": s}, "InstanceStatus": {"Status": i}}, CHECK, CHECK
    ),
)
REASON = st.one_of(
    st.none(),
    st.sampled_from(
        [
            "Server.SpotInstanceTermination",
            "Server.SpotInstanceShutdown",
            "Client.UserInitiatedShutdown",
        ]
    ),
)


@given(state=STATES, status=STATUS, reason=REASON)
def test_every_ec2_state_maps_to_exactly_one_observation(
    state: str, status: Any, reason: str | None
) -> None:
    extra = {"StateReason": {"Code": reason, "Message": reason}} if reason else {}
    obs = ec2_observation(instance(state, **extra), status, t())
    if state == "running":
        if isinstance(status, StatusUnavailable):
            assert type(obs) is InstanceUnknown
        elif status_checks_ok(status):
            assert type(obs) is InstanceRunning
        else:
            assert type(obs) is InstancePending
    elif state in ("stopping", "stopped", "shutting-down", "terminated"):
        assert type(obs) is InstanceTerminated
        assert obs.detail.startswith("preempted") == (reason or "").startswith("Server.Spot")
    else:
        assert type(obs) is InstancePending


# -- errors -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("code", "kind"),
    [
        ("UnauthorizedOperation", FailureKind.AUTH),
        ("AuthFailure", FailureKind.AUTH),
        ("OptInRequired", FailureKind.AUTH),
        ("Blocked", FailureKind.AUTH),
        ("VcpuLimitExceeded", FailureKind.QUOTA),
        ("InstanceLimitExceeded", FailureKind.QUOTA),
        ("MaxSpotInstanceCountExceeded", FailureKind.QUOTA),
        ("SomeNewLimitExceeded", FailureKind.QUOTA),
        ("InsufficientInstanceCapacity", FailureKind.CAPACITY),
        ("UnfulfillableCapacity", FailureKind.CAPACITY),
        ("SpotMaxPriceTooLow", FailureKind.CAPACITY),
        ("Unsupported", FailureKind.CAPACITY),
        ("RequestLimitExceeded", FailureKind.UNKNOWN),  # API throttling, not a quota
        ("InternalError", FailureKind.UNKNOWN),
        ("InvalidLaunchTemplateName.NotFoundException", FailureKind.UNKNOWN),
        ("", FailureKind.UNKNOWN),
    ],
)
def test_classify_code(code: str, kind: FailureKind) -> None:
    assert classify_code(code) is kind


def fleet_error(code: str, lifecycle: str = "on-demand") -> dict[str, str]:
    return {"ErrorCode": code, "ErrorMessage": f"msg {code}", "Lifecycle": lifecycle}


RANKED = ["InternalError", "InsufficientInstanceCapacity", "VcpuLimitExceeded", "AuthFailure"]


@pytest.mark.parametrize("order", list(itertools.permutations(RANKED)))
def test_auth_beats_quota_beats_capacity_beats_unknown(order: tuple[str, ...]) -> None:
    failure = rank_fleet_errors([fleet_error(c) for c in order])
    assert (failure.kind, failure.code, failure.others) == (FailureKind.AUTH, "AuthFailure", 3)
    assert failure.rejection


@pytest.mark.parametrize(
    ("codes", "winner", "kind"),
    [
        (
            ["InternalError", "VcpuLimitExceeded", "InsufficientInstanceCapacity"],
            "VcpuLimitExceeded",
            FailureKind.QUOTA,
        ),
        (
            ["InternalError", "InsufficientInstanceCapacity"],
            "InsufficientInstanceCapacity",
            FailureKind.CAPACITY,
        ),
        (["InternalError", "Whatever"], "InternalError", FailureKind.UNKNOWN),
    ],
)
def test_ranking_picks_the_highest_kind_first_seen(
    codes: list[str], winner: str, kind: FailureKind
) -> None:
    failure = rank_fleet_errors([fleet_error(c) for c in codes])
    assert (failure.code, failure.kind) == (winner, kind)
    assert failure.rejection == (kind is not FailureKind.UNKNOWN)


def test_no_errors_and_no_instance_is_no_capacity() -> None:
    failure = rank_fleet_errors([])
    assert failure.kind is FailureKind.CAPACITY
    assert failure.rejection


def test_failure_text_names_kind_code_tier_and_the_rest() -> None:
    failure = rank_fleet_errors(
        [fleet_error("InsufficientInstanceCapacity", "spot"), fleet_error("InternalError")]
    )
    assert failure.text() == (
        "capacity: InsufficientInstanceCapacity [spot]: msg InsufficientInstanceCapacity "
        "(and 1 more error(s))"
    )


@given(st.lists(st.sampled_from([*RANKED, "Other"]), max_size=6))
def test_ranking_is_order_independent_in_kind(codes: list[str]) -> None:
    a = rank_fleet_errors([fleet_error(c) for c in codes])
    b = rank_fleet_errors([fleet_error(c) for c in reversed(codes)])
    assert a.kind == b.kind
    expected = max((classify_code(c) for c in codes), default=FailureKind.CAPACITY)
    assert a.kind == expected


# -- the fleet request ---------------------------------------------------------------------------
def test_fleet_request_is_instant_single_capacity_with_overrides_and_claim_tag() -> None:
    spec = FleetSpec(
        region="us-east-1",
        instance_types=("g5.xlarge", "g6.xlarge"),
        subnet_ids=("subnet-a", "subnet-b", "subnet-c"),
        launch_template_name="gpu-node",
        capacity_type="spot",
        tags={"team": "ml", CLAIM_TAG_KEY: "spoofed"},
    )
    req: Any = spec.request("ml-trainer-0")
    assert req["Type"] == "instant"
    assert req["TargetCapacitySpecification"] == {
        "TotalTargetCapacity": 1,
        "DefaultTargetCapacityType": "spot",
    }
    config = req["LaunchTemplateConfigs"][0]
    assert config["LaunchTemplateSpecification"] == {
        "LaunchTemplateName": "gpu-node",
        "Version": "$Latest",
    }
    assert config["Overrides"] == [
        {"InstanceType": t_, "SubnetId": s}
        for t_ in ("g5.xlarge", "g6.xlarge")
        for s in ("subnet-a", "subnet-b", "subnet-c")
    ]
    assert req["TagSpecifications"] == [
        {
            "ResourceType": "instance",
            "Tags": [
                {"Key": "team", "Value": "ml"},
                {"Key": CLAIM_TAG_KEY, "Value": "ml-trainer-0"},
            ],
        }
    ]
    assert req["SpotOptions"] == {"AllocationStrategy": "price-capacity-optimized"}
    on_demand: Any = FleetSpec(
        region="r", instance_types=("t3.micro",), subnet_ids=("s",), launch_template_id="lt-1"
    ).request("c")
    assert on_demand["TargetCapacitySpecification"]["DefaultTargetCapacityType"] == "on-demand"
    assert "SpotOptions" not in on_demand


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"instance_types": ()}, "instance_types"),
        ({"subnet_ids": ("",)}, "subnet_ids"),
        ({"launch_template_id": "lt-1"}, "exactly one"),
        ({"launch_template_name": ""}, "exactly one"),
        ({"capacity_type": "reserved"}, "spot or on-demand"),
        ({"region": ""}, "region"),
        (
            {
                "instance_types": tuple(f"t{i}" for i in range(31)),
                "subnet_ids": tuple(f"s{i}" for i in range(10)),
            },
            "300",
        ),
    ],
)
def test_fleet_spec_refuses_bad_input(kwargs: dict[str, Any], message: str) -> None:
    base: dict[str, Any] = {
        "region": "us-east-1",
        "instance_types": ("t3.micro",),
        "subnet_ids": ("subnet-a",),
        "launch_template_name": "lt",
    }
    with pytest.raises(ValueError, match=message):
        FleetSpec(**{**base, **kwargs})
