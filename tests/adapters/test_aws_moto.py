"""The AWS adapter over real HTTP: a moto server on 127.0.0.1 (a free port, started and
stopped by this module), the adapter's own default boto3 client (real request signing and
parsing) with fake credentials and that endpoint. Happy paths, adoption, pagination, stop,
terminate, a region whose endpoint refuses connections, and the Pod/NodeClaim events the
observations drive through :class:`lifecycle.Runner`."""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from lifecycle import MemoryEmitter, MemoryStore, ObjectRef, Runner
from lifecycle.adapters.aws import AwsAdapter, FleetSpec, Placement
from lifecycle.machines.pod import (
    CreateRequested,
    InstanceAbsent,
    InstanceRunning,
    InstanceTerminated,
    InstanceUnknown,
    ProvisionSucceeded,
    TerminateSucceeded,
)

from .conftest import pod, ticking_clock

boto3 = pytest.importorskip("boto3")
moto_server = pytest.importorskip("moto.server")

REGION = "us-east-1"
MOTO_AMI = "ami-12c6146b"


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    assert host == "127.0.0.1"
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def session(endpoint: str) -> Any:
    request = urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST")
    urllib.request.urlopen(request, timeout=5).close()
    return boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name=REGION
    )


@pytest.fixture
def ec2(session: Any, endpoint: str) -> Any:
    return session.client("ec2", endpoint_url=endpoint)


@pytest.fixture
def spec(ec2: Any) -> FleetSpec:
    # One of moto's bundled AMIs, by id (filtering all of them by owner takes a second).
    image = ec2.describe_images(ImageIds=[MOTO_AMI])["Images"][0]["ImageId"]
    template = ec2.create_launch_template(
        LaunchTemplateName="gpu-node", LaunchTemplateData={"ImageId": image}
    )["LaunchTemplate"]["LaunchTemplateId"]
    subnets = [s["SubnetId"] for s in ec2.describe_subnets()["Subnets"]][:2]
    return FleetSpec(
        region=REGION,
        instance_types=("g5.xlarge", "t3.micro"),
        subnet_ids=tuple(subnets),
        launch_template_id=template,
    )


@pytest.fixture
def adapter(session: Any, endpoint: str) -> AwsAdapter:
    return AwsAdapter(session=session, endpoint_url=endpoint, clock=ticking_clock(), page_size=5)


def test_provision_observe_terminate(adapter: AwsAdapter, spec: FleetSpec, ec2: Any) -> None:
    a = pod("a")
    obs = adapter.provision(a, spec)
    assert isinstance(obs, ProvisionSucceeded)
    assert obs.reserved
    described = ec2.describe_instances(InstanceIds=[obs.instance_id])
    tags = described["Reservations"][0]["Instances"][0]["Tags"]
    assert {"Key": "nebula.inftyai.com/claim", "Value": "ml-a"} in tags
    seen = adapter.observe({a: Placement(REGION, obs.instance_id)})[a]
    assert isinstance(seen, InstanceRunning)  # moto: running, checks ok at once
    assert isinstance(adapter.terminate(a, Placement(REGION, obs.instance_id)), TerminateSucceeded)
    gone = adapter.observe({a: Placement(REGION, obs.instance_id)})[a]
    assert isinstance(gone, InstanceTerminated)
    assert "state terminated" in gone.detail
    # Idempotent: terminating again, or an id EC2 never had, is success.
    assert isinstance(adapter.terminate(a, Placement(REGION, obs.instance_id)), TerminateSucceeded)
    unknown = Placement(REGION, "i-0123456789abcdef0")
    assert isinstance(adapter.terminate(a, unknown), TerminateSucceeded)


def test_provision_adopts_instead_of_launching_twice(
    adapter: AwsAdapter, spec: FleetSpec, ec2: Any
) -> None:
    first = adapter.provision(pod("a"), spec)
    again = adapter.provision(pod("a"), spec)
    assert isinstance(first, ProvisionSucceeded)
    assert isinstance(again, ProvisionSucceeded)
    assert again.instance_id == first.instance_id
    assert again.reserved
    pages = ec2.get_paginator("describe_instances").paginate()
    assert sum(len(r["Instances"]) for p in pages for r in p["Reservations"]) == 1


def test_listing_pages_through_many_instances(adapter: AwsAdapter, spec: FleetSpec) -> None:
    refs = [pod(f"p{i}") for i in range(12)]  # page_size=5: three pages
    placements = {}
    for ref in refs:
        obs = adapter.provision(ref, spec)
        assert isinstance(obs, ProvisionSucceeded)
        placements[ref] = Placement(REGION, obs.instance_id)
    out = adapter.observe(placements)
    assert all(isinstance(out[r], InstanceRunning) for r in refs)
    untracked = adapter.observe({r: Placement(REGION) for r in refs})  # re-adoption by claim
    assert [untracked[r].instance_id for r in refs] == [p.instance_id for p in placements.values()]  # type: ignore[attr-defined]


def test_a_stopped_instance_is_terminated(adapter: AwsAdapter, spec: FleetSpec, ec2: Any) -> None:
    obs = adapter.provision(pod("a"), spec)
    assert isinstance(obs, ProvisionSucceeded)
    ec2.stop_instances(InstanceIds=[obs.instance_id])
    seen = adapter.observe({pod("a"): Placement(REGION, obs.instance_id)})[pod("a")]
    assert isinstance(seen, InstanceTerminated)
    assert seen.detail.startswith("state stop")
    assert not seen.detail.startswith("preempted")


def test_an_untracked_pod_without_an_instance_is_absent(adapter: AwsAdapter) -> None:
    assert isinstance(adapter.observe({pod("a"): Placement(REGION)})[pod("a")], InstanceAbsent)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_region_whose_endpoint_refuses_is_unknown_never_absent(
    session: Any, endpoint: str, spec: FleetSpec
) -> None:
    dead = f"http://127.0.0.1:{_closed_port()}"
    good = AwsAdapter(session=session, endpoint_url=endpoint)
    first = good.provision(pod("a"), spec)
    assert isinstance(first, ProvisionSucceeded)

    def factory(region: str) -> Any:
        url = endpoint if region == REGION else dead
        config = boto3.session.Config(connect_timeout=0.5, retries={"max_attempts": 1})
        return session.client("ec2", region_name=region, endpoint_url=url, config=config)

    adapter = AwsAdapter(client_factory=factory)
    out = adapter.observe(
        {
            pod("a"): Placement(REGION, first.instance_id),
            pod("b"): Placement("eu-west-1", "i-0b"),
            pod("c"): Placement("eu-west-1"),
        }
    )
    assert isinstance(out[pod("a")], InstanceRunning)
    for ref in (pod("b"), pod("c")):
        obs = out[ref]
        assert isinstance(obs, InstanceUnknown)
        assert "region eu-west-1 could not be listed" in obs.error


def test_runner_drives_pod_and_nodeclaim_events(
    adapter: AwsAdapter, spec: FleetSpec, ec2: Any
) -> None:
    emitter = MemoryEmitter()
    runner = Runner(MemoryStore(), [emitter])
    a: ObjectRef = pod("trainer-0", uid="aws-0")
    runner.observe(a, CreateRequested(at=adapter.clock(), pool="gpu", provider="aws"))
    provisioned = adapter.provision(a, spec)
    runner.observe(a, provisioned)
    placement = Placement(REGION, provisioned.instance_id)  # type: ignore[attr-defined]
    for _ in range(2):  # moto passes both status checks at once; the repeat changes nothing
        runner.observe(a, adapter.observe({a: placement})[a])
    ec2.terminate_instances(InstanceIds=[placement.instance_id])
    runner.observe(a, adapter.observe({a: placement})[a])
    flips = [(e.ref.uid, e.source, e.target) for e in emitter.events]
    assert flips == [
        ("aws-0", "", "Provisioning"),
        ("aws-0-claim", "", "Provisioning"),
        ("aws-0", "Provisioning", "Initializing"),
        ("aws-0-claim", "Provisioning", "Bound"),
        ("aws-0", "Initializing", "Running"),
        ("aws-0", "Running", "Terminated"),
        ("aws-0-claim", "Bound", "Terminated"),
    ]
