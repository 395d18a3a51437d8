"""The EC2 fake cannot drift from the installed boto3/botocore.

A boto3 client method's Python signature is ``(*args, **kwargs)`` (generated from the service
model, keyword arguments only), so the contract is checked where it really lives: each fake
method exists on a real EC2 client and, like it, takes keyword arguments only; every request
the fake receives and every response it gives is validated against the EC2 service model by
botocore's own validator; its paginators are botocore's, with the real client's paginator
model; and the adapter's requests, made against the fake, pass it. Where EC2 behaves in a way
the adapter depends on (a repeated ClientToken, one unknown id among several), the fake does
the same.
"""

from __future__ import annotations

import inspect
import subprocess
import sys
from typing import Any

import pytest

from lifecycle._testing.fake_ec2 import service_model
from lifecycle.adapters.aws import AwsAdapter, FleetSpec, fleet_client_token
from lifecycle.machines.pod import (
    InstancePending,
    InstanceRunning,
    InstanceTerminated,
    InstanceUnknown,
    ProvisionErrored,
    ProvisionRejected,
    ProvisionSucceeded,
    TerminateSucceeded,
)
from lifecycle.testing.fakes import EC2_OPERATIONS, FakeEC2

from .conftest import pod, ticking_clock, tracked_in

boto3 = pytest.importorskip("boto3")
botocore_exceptions = pytest.importorskip("botocore.exceptions")
botocore_paginate = pytest.importorskip("botocore.paginate")

SPEC = FleetSpec(
    region="us-east-1",
    instance_types=("g5.xlarge",),
    subnet_ids=("subnet-1", "subnet-2"),
    launch_template_name="gpu",
)


@pytest.fixture(scope="module")
def real_client() -> Any:
    session = boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing")
    return session.client("ec2", region_name="us-east-1", endpoint_url="http://127.0.0.1:9")


@pytest.mark.parametrize(("method", "operation"), sorted(EC2_OPERATIONS.items()))
def test_fake_methods_exist_on_the_real_client_keyword_only(
    real_client: Any, method: str, operation: str
) -> None:
    real = getattr(real_client, method)
    assert real_client.meta.method_to_api_mapping[method] == operation
    assert operation in service_model().operation_names
    real_kinds = {p.kind for p in inspect.signature(real).parameters.values()}
    assert inspect.Parameter.VAR_KEYWORD in real_kinds
    fake_params = list(inspect.signature(getattr(FakeEC2(), method)).parameters.values())
    assert [p.kind for p in fake_params] == [inspect.Parameter.VAR_KEYWORD]
    with pytest.raises(TypeError):
        real("positional")  # the real client refuses positional arguments, as the fake does
    with pytest.raises(TypeError):
        getattr(FakeEC2(), method)("positional")


@pytest.mark.parametrize(
    ("method", "kwargs"),
    [
        ("describe_instances", {"Filters": "not-a-list"}),
        ("describe_instances", {"MaxResult": 5}),  # misspelt
        ("terminate_instances", {}),  # InstanceIds is required
        ("create_fleet", {"Type": "instant"}),  # LaunchTemplateConfigs etc. missing
        ("describe_instance_status", {"InstanceIds": "i-1"}),
    ],
)
def test_the_fake_refuses_requests_the_model_refuses(method: str, kwargs: dict[str, Any]) -> None:
    with pytest.raises(botocore_exceptions.ParamValidationError):
        getattr(FakeEC2(), method)(**kwargs)


def test_the_fake_validates_its_responses() -> None:
    ec2 = FakeEC2()
    iid = ec2.add("ml-a")
    ec2.instances[iid]["State"] = {"Code": "sixteen", "Name": "running"}  # wrong type
    with pytest.raises(botocore_exceptions.ParamValidationError):
        ec2.describe_instances(InstanceIds=[iid])


def test_fake_errors_are_client_errors() -> None:
    ec2 = FakeEC2()
    with pytest.raises(botocore_exceptions.ClientError) as info:
        ec2.describe_instances(InstanceIds=["i-0000000000000dead"])
    assert info.value.response["Error"]["Code"] == "InvalidInstanceID.NotFound"


def test_the_adapter_runs_a_whole_life_on_the_fake() -> None:
    ec2 = FakeEC2()
    adapter = AwsAdapter(client_factory=lambda region: ec2, clock=ticking_clock(), page_size=5)
    a = pod("a")
    obs = adapter.provision(a, SPEC)
    assert isinstance(obs, ProvisionSucceeded)
    where = tracked_in("us-east-1", obs.instance_id)
    assert isinstance(adapter.observe({a: where})[a], InstancePending)  # launching
    ec2.set_state(obs.instance_id, "running")
    assert isinstance(adapter.observe({a: where})[a], InstancePending)  # checks initializing
    ec2.set_checks(obs.instance_id, "ok", "impaired")
    assert isinstance(adapter.observe({a: where})[a], InstancePending)
    ec2.boot(obs.instance_id)
    assert isinstance(adapter.observe({a: where})[a], InstanceRunning)
    ec2.fail("describe_instance_status", "RequestLimitExceeded")
    assert isinstance(adapter.observe({a: where})[a], InstanceUnknown)
    ec2.reclaim(obs.instance_id)
    gone = adapter.observe({a: where})[a]
    assert isinstance(gone, InstanceTerminated)
    assert gone.detail.startswith("preempted")
    assert isinstance(adapter.terminate(a, where), TerminateSucceeded)
    ec2.script_fleet([{"ErrorCode": "UnauthorizedOperation", "ErrorMessage": "denied"}])
    assert isinstance(adapter.provision(pod("b"), SPEC), ProvisionRejected)
    assert {name for name, _ in ec2.calls} == set(EC2_OPERATIONS)


def test_the_fake_pages_and_lags() -> None:
    ec2 = FakeEC2()
    ids = [ec2.add(f"ml-p{i}") for i in range(12)]
    adapter = AwsAdapter(client_factory=lambda region: ec2, page_size=5)
    out = adapter.observe({pod(f"p{i}"): tracked_in("us-east-1") for i in range(12)})
    assert [o.instance_id for o in out.values()] == ids  # type: ignore[union-attr]
    listing = [kw for name, kw in ec2.calls if name == "describe_instances"]
    assert [kw.get("NextToken") for kw in listing] == [None, "5", "10"]
    ec2.lag(ids[0], lookups=1)
    lagged = adapter.observe({pod("p0"): tracked_in("us-east-1", ids[0])})[pod("p0")]
    assert isinstance(lagged, InstanceUnknown)
    assert "NotFound" in lagged.error
    assert isinstance(
        adapter.observe({pod("p0"): tracked_in("us-east-1", ids[0])})[pod("p0")], InstanceRunning
    )


@pytest.mark.parametrize("method", ["describe_instances", "describe_instance_status"])
def test_the_fakes_paginators_are_the_real_clients(real_client: Any, method: str) -> None:
    real, fake = real_client.get_paginator(method), FakeEC2().get_paginator(method)
    assert isinstance(fake, botocore_paginate.Paginator)
    assert fake._pagination_cfg == real._pagination_cfg  # the same paginator model entry
    with pytest.raises(ValueError, match="unknown method"):
        FakeEC2().get_paginator("describe_images")


def test_the_fake_answers_a_repeated_client_token_with_the_first_fleet() -> None:
    ec2 = FakeEC2()
    request = dict(SPEC.request("ml-a", fleet_client_token("ml-a", "uid-a")))
    first = ec2.create_fleet(**request)
    again = ec2.create_fleet(**request)
    assert again["Instances"] == first["Instances"]
    assert len(ec2.instances) == 1
    other = {**request, "Type": "request"}
    with pytest.raises(botocore_exceptions.ClientError) as info:
        ec2.create_fleet(**other)
    assert info.value.response["Error"]["Code"] == "IdempotentParameterMismatch"
    untokened = dict(SPEC.request("ml-a"))  # no token: each call is a new fleet
    ec2.create_fleet(**untokened)
    ec2.create_fleet(**untokened)
    assert len(ec2.instances) == 3


def test_the_fake_terminates_none_of_several_ids_when_one_is_unknown() -> None:
    ec2 = FakeEC2()
    iid = ec2.add("ml-a")
    with pytest.raises(botocore_exceptions.ClientError) as info:
        ec2.terminate_instances(InstanceIds=[iid, "i-0000000000000dead"])
    assert info.value.response["Error"]["Code"] == "InvalidInstanceID.NotFound"
    assert "i-0000000000000dead" in info.value.response["Error"]["Message"]
    assert ec2.instances[iid]["State"]["Name"] == "running"  # untouched


class _VanishingEC2(FakeEC2):
    """One instance disappears right after a list showed it (before the terminate)."""

    vanish = ""

    def describe_instances(self, **kwargs: Any) -> dict[str, Any]:
        answer = super().describe_instances(**kwargs)
        self.instances.pop(self.vanish, None)
        return answer


def test_the_adapter_terminates_the_known_ids_when_one_is_unknown() -> None:
    """On the fake (EC2's all-or-nothing refusal): the claim lists two instances, one of
    which is gone by the time of the terminate; the other is still terminated."""
    ec2 = _VanishingEC2()
    first, second = ec2.add("ml-a"), ec2.add("ml-a")
    ec2.vanish = second
    adapter = AwsAdapter(client_factory=lambda region: ec2, clock=ticking_clock())
    assert isinstance(adapter.terminate(pod("a"), tracked_in("us-east-1")), TerminateSucceeded)
    assert ec2.instances[first]["State"]["Name"] == "terminated"
    terminates = [kw["InstanceIds"] for name, kw in ec2.calls if name == "terminate_instances"]
    assert terminates == [[first, second], [first], [second]]


def test_a_lost_create_answer_is_retried_with_the_same_token_on_the_fake() -> None:
    ec2 = FakeEC2()
    adapter = AwsAdapter(client_factory=lambda region: ec2, clock=ticking_clock())
    ec2.time_out("create_fleet")
    first = adapter.provision(pod("a"), SPEC)
    assert isinstance(first, ProvisionErrored)
    assert "ReadTimeoutError" in first.error
    (launched,) = ec2.instances  # the lost create did launch
    ec2.lag(launched, lookups=1)  # and its tag is not listed yet when the create is retried
    again = adapter.provision(pod("a"), SPEC)
    assert isinstance(again, ProvisionSucceeded)
    assert again.instance_id == launched
    assert len(ec2.instances) == 1
    tokens = {kw["ClientToken"] for name, kw in ec2.calls if name == "create_fleet"}
    assert tokens == {fleet_client_token("ml-a", "uid-a", 0)}


def test_importing_the_adapter_does_not_import_boto3() -> None:
    code = (
        "import sys, lifecycle.adapters.aws, lifecycle.testing.fakes; "
        "assert not {'boto3', 'botocore'} & set(sys.modules), 'imported eagerly'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
