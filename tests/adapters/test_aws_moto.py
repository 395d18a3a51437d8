"""The AWS adapter over real HTTP: a moto server on 127.0.0.1 (a free port, started and
stopped by this module), the adapter's own default boto3 client (real request signing and
parsing) with fake credentials and that endpoint. Happy paths, adoption, pagination, stop,
terminate, a region whose endpoint refuses connections, the Pod/NodeClaim events (and the pod
IP) the observations drive through :class:`lifecycle.Runner`, and a create whose answer is
lost, retried while the claim's tag is not yet listed (through a loopback front that adds what
moto lacks: EC2's ClientToken idempotency and eventually consistent tag filters)."""

from __future__ import annotations

import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from lifecycle import MemoryEmitter, MemoryStore, ObjectRef, Runner
from lifecycle.adapters.aws import CLAIM_TAG_KEY, AwsAdapter, FleetSpec
from lifecycle.machines.pod import (
    CreateRequested,
    InstanceAbsent,
    InstanceRunning,
    InstanceTerminated,
    InstanceUnknown,
    ProvisionErrored,
    ProvisionSucceeded,
    TerminateSucceeded,
)
from lifecycle.testing import check_provider

from .conftest import pod, ticking_clock, tracked_in

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
    seen = adapter.observe({a: tracked_in(REGION, obs.instance_id)})[a]
    assert isinstance(seen, InstanceRunning)  # moto: running, checks ok at once
    assert isinstance(adapter.terminate(a, tracked_in(REGION, obs.instance_id)), TerminateSucceeded)
    gone = adapter.observe({a: tracked_in(REGION, obs.instance_id)})[a]
    assert isinstance(gone, InstanceTerminated)
    assert "state terminated" in gone.detail
    # Idempotent: terminating again, or an id EC2 never had, is success.
    assert isinstance(adapter.terminate(a, tracked_in(REGION, obs.instance_id)), TerminateSucceeded)
    unknown = tracked_in(REGION, "i-0123456789abcdef0")
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
        placements[ref] = tracked_in(REGION, obs.instance_id)
    out = adapter.observe(placements)
    assert all(isinstance(out[r], InstanceRunning) for r in refs)
    untracked = adapter.observe({r: tracked_in(REGION) for r in refs})  # re-adoption by claim
    assert [untracked[r].instance_id for r in refs] == [p.instance_id for p in placements.values()]  # type: ignore[union-attr]


def test_a_stopped_instance_is_terminated(adapter: AwsAdapter, spec: FleetSpec, ec2: Any) -> None:
    obs = adapter.provision(pod("a"), spec)
    assert isinstance(obs, ProvisionSucceeded)
    ec2.stop_instances(InstanceIds=[obs.instance_id])
    seen = adapter.observe({pod("a"): tracked_in(REGION, obs.instance_id)})[pod("a")]
    assert isinstance(seen, InstanceTerminated)
    assert seen.detail.startswith("state stop")
    assert not seen.detail.startswith("preempted")


def test_an_untracked_pod_without_an_instance_is_absent(adapter: AwsAdapter) -> None:
    assert isinstance(adapter.observe({pod("a"): tracked_in(REGION)})[pod("a")], InstanceAbsent)


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
            pod("a"): tracked_in(REGION, first.instance_id),
            pod("b"): tracked_in("eu-west-1", "i-0b"),
            pod("c"): tracked_in("eu-west-1"),
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
    placement = tracked_in(REGION, provisioned.instance_id)  # type: ignore[union-attr]
    for _ in range(2):  # moto passes both status checks at once; the repeat changes nothing
        runner.observe(a, adapter.observe({a: placement})[a])
    ec2.terminate_instances(InstanceIds=[placement.instance_id])
    runner.observe(a, adapter.observe({a: placement})[a])
    stored = runner.store.load(runner.machine_for(a), a)
    assert stored is not None
    private_ip = ec2.describe_instances(InstanceIds=[placement.instance_id])["Reservations"][0][
        "Instances"
    ][0]["PrivateIpAddress"]
    assert stored.status.pod_ip == private_ip  # the instance's VPC address is the pod IP
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


# -- a lost create answer, retried --------------------------------------------------------------
EMPTY_LIST = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<DescribeInstancesResponse '
    b'xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>lagging</requestId>'
    b"<reservationSet/></DescribeInstancesResponse>"
)


class Ec2Front(ThreadingHTTPServer):
    """A loopback front for the moto server with what moto lacks. EC2 answers a CreateFleet
    whose ClientToken it has seen with the first answer (moto launches again); tag filters
    are eventually consistent (``lag_tags``: a claim-tag filter lists nothing yet);
    ``lose_next_create`` forwards the next CreateFleet (moto launches it) and then holds the
    answer until the client has timed out."""

    daemon_threads = True

    def __init__(self, upstream: str, hold: float) -> None:
        super().__init__(("127.0.0.1", 0), _FrontHandler)
        self.upstream, self.hold = upstream, hold
        self.answers: dict[str, tuple[int, str, bytes]] = {}
        self.lag_tags = False
        self.lose_next_create = False
        self.creates_forwarded = 0
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _FrontHandler(BaseHTTPRequestHandler):
    server: Ec2Front

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        form = urllib.parse.parse_qs(body.decode())
        action = form.get("Action", [""])[0]
        front = self.server
        if action == "DescribeInstances" and front.lag_tags:
            names = [
                v[0] for k, v in form.items() if k.startswith("Filter.") and k.endswith("Name")
            ]
            if f"tag:{CLAIM_TAG_KEY}" in names:
                return self._reply(200, "text/xml", EMPTY_LIST)
        if action != "CreateFleet":
            return self._reply(*self._forward(body))
        token = form.get("ClientToken", [""])[0]
        with front.lock:  # one create per token at a time, as EC2 serialises them
            if token and token in front.answers:
                answer = front.answers[token]
            else:
                answer = self._forward(body)
                front.creates_forwarded += 1
                if token:
                    front.answers[token] = answer
            lose, front.lose_next_create = front.lose_next_create, False
        if lose:
            time.sleep(front.hold)  # the client gave up: this answer is lost
        self._reply(*answer)

    def _forward(self, body: bytes) -> tuple[int, str, bytes]:
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host",)}
        request = urllib.request.Request(
            self.server.upstream + self.path, data=body, headers=headers, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, response.headers["Content-Type"], response.read()
        except urllib.error.HTTPError as e:
            return e.code, e.headers.get("Content-Type", "text/xml"), e.read()

    def _reply(self, status: int, content_type: str, payload: bytes) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except OSError:
            pass  # the client hung up (its read timed out)


@pytest.fixture
def front(endpoint: str, session: Any) -> Iterator[Ec2Front]:
    server = Ec2Front(endpoint, hold=1.5)
    thread = threading.Thread(target=server.serve_forever, name="ec2-front", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_a_create_whose_answer_was_lost_is_not_launched_twice(
    session: Any, front: Ec2Front, spec: FleetSpec, ec2: Any
) -> None:
    """The first create launches an instance but its answer never arrives (read timeout); on
    the next reconcile the claim's tag is not listed yet, so the adapter creates again. The
    same ClientToken makes EC2 answer with the first fleet: one instance, not two."""
    adapter = AwsAdapter(
        session=session,
        endpoint_url=front.url,
        clock=ticking_clock(),
        read_timeout=0.5,
        max_attempts=1,
    )
    front.lag_tags = True
    front.lose_next_create = True
    first = adapter.provision(pod("a"), spec)
    assert isinstance(first, ProvisionErrored)
    assert "timeout" in first.error.lower()
    again = adapter.provision(pod("a"), spec)
    assert isinstance(again, ProvisionSucceeded)
    pages = ec2.get_paginator("describe_instances").paginate()
    launched = [i["InstanceId"] for p in pages for r in p["Reservations"] for i in r["Instances"]]
    assert launched == [again.instance_id]  # moto launched once: the retry got the first fleet
    assert front.creates_forwarded == 1
    # A deliberate re-create (the host's next attempt) is a new request: a new fleet.
    fresh = adapter.provision(pod("a"), spec, attempt=1)
    assert isinstance(fresh, ProvisionSucceeded)
    assert fresh.instance_id != again.instance_id


def test_the_adapter_over_moto_passes_the_provider_conformance_check(
    session: Any, endpoint: str, spec: FleetSpec
) -> None:
    """The conformance check over real HTTP (moto launches instances running, checks ok; it
    has no fault injection, so the failure half runs on FakeEC2 in
    ``test_provider_conformance.py``)."""

    def make() -> AwsAdapter:
        return AwsAdapter(session=session, endpoint_url=endpoint, page_size=5)

    check_provider(make, spec)
