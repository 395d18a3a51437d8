"""Two replicas of the deployable example (issue 38): ``examples/controller/jobs_controller.py``
run twice as subprocesses with ``--leader-election`` against a :class:`FakeApiServer` this
test serves on loopback. Jobs are created, updated and deleted through the API with the
``kubernetes`` client; statuses and Events appear; the leader (the Lease's holder) is
SIGKILLed while changes are flowing and the other takes over within the documented bound;
more changes follow. At the end every committed transition's Event is in the API exactly
once, every status is current for its object's generation and nothing is undelivered."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lifecycle.machines.job import JOB
from lifecycle.manifests import api_resource
from lifecycle.stores.kubernetes import RECORD_CONDITION
from lifecycle.testing import FakeApiServer
from tests.test_example_controller import EXAMPLE, GROUP, PLURAL, ROOT, VERSION, example

client = pytest.importorskip("kubernetes.client")
pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")

NAMESPACE = "ml"
KIND = api_resource(JOB).kind
#: short timings: a lease of 3 s, a renew deadline of 2 s, a retry every 0.5 s
LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 3, 2.0, 0.5
#: the takeover bound (ADR 0160): the survivor sees the dead leader's last renewal at most a
#: retry period after it landed and takes over at its first try a lease duration later; plus
#: slack for a loaded machine
TAKEOVER = LEASE_DURATION + 2 * RETRY_PERIOD + 3.0
#: each status write and Event create of the controllers is slowed by this much, so that a
#: burst of changes takes the leader a while and the kill lands mid-cycle
WRITE_DELAY = 0.1


class Replica:
    """One controller process; its requests carry its identity as a bearer token."""

    def __init__(self, cluster: FakeApiServer, identity: str, tmp_path: Path) -> None:
        self.identity = identity
        config = Path(cluster.kubeconfig(tmp_path / f"kubeconfig-{identity}"))
        text = json.loads(config.read_text(encoding="utf-8"))
        text["users"][0]["user"] = {"token": identity}  # the fake keeps who sent what
        config.write_text(json.dumps(text), encoding="utf-8")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), *sys.path])}
        argv = [
            sys.executable,
            str(EXAMPLE / "jobs_controller.py"),
            *("--kubeconfig", str(config), "--health-port", "0", "--namespace", NAMESPACE),
            "--leader-election",
            *("--leader-identity", identity, "--lease-namespace", NAMESPACE),
            *("--lease-duration", str(LEASE_DURATION), "--renew-deadline", str(RENEW_DEADLINE)),
            *("--retry-period", str(RETRY_PERIOD)),
        ]
        self.process = subprocess.Popen(
            argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)
        if self.process.stderr is not None:
            self.process.stderr.close()


def wait_for(condition: Callable[[], object], timeout: float, what: str) -> float:
    """Poll ``condition`` until true; when it was (monotonic)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)
    return time.monotonic()


@pytest.fixture
def cluster() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        example.register_crd(server)
        yield server


def holder(cluster: FakeApiServer) -> str:
    lease = cluster.object("leases", NAMESPACE, "jobs-controller")
    return "" if lease is None else str(lease["spec"].get("holderIdentity") or "")


class Jobs:
    """Jobs through the API, as ``kubectl`` would."""

    def __init__(self, cluster: FakeApiServer) -> None:
        self.cluster = cluster
        self.api = client.CustomObjectsApi(client.ApiClient(cluster.configuration()))

    def create(self, name: str, phase: str = "") -> None:
        metadata: dict[str, Any] = {"name": name}
        if phase:
            metadata["annotations"] = {example.WORKLOAD: phase}
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": KIND,
            "metadata": metadata,
            "spec": {"maxRestarts": 1},
        }
        self.api.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, body)

    def annotate(self, name: str, phase: str) -> None:
        patch = {"metadata": {"annotations": {example.WORKLOAD: phase}}}
        self.api.patch_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, name, patch)

    def respec(self, name: str, restarts: int) -> None:
        patch = {"spec": {"maxRestarts": restarts}}  # a new generation
        self.api.patch_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, name, patch)

    def delete(self, name: str) -> None:
        self.api.delete_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, name)

    def conditions(self, name: str) -> list[dict[str, Any]]:
        status = self.cluster.status(PLURAL, NAMESPACE, name) or {}
        return list(status.get("conditions") or [])

    def state(self, name: str) -> str:
        held = [c for c in self.conditions(name) if c.get("status") == "True"]
        return str(held[0]["type"]) if held else ""

    def reason(self, name: str) -> str:
        held = [c for c in self.conditions(name) if c.get("status") == "True"]
        return str(held[0]["reason"]) if held else ""

    def generation_seen(self, name: str) -> int:
        seen = [int(c.get("observedGeneration") or 0) for c in self.conditions(name)]
        return max(seen, default=0)

    def reasons(self, name: str) -> list[str]:
        return [str(e["reason"]) for e in self.cluster.events_regarding(name, NAMESPACE)]


@pytest.fixture
def replicas(cluster: FakeApiServer, tmp_path: Path) -> Iterator[tuple[Replica, Replica]]:
    """Two replicas watching, one of them holding the Lease: (leader, follower)."""
    started = {name: Replica(cluster, name, tmp_path) for name in ("replica-a", "replica-b")}
    try:
        assert cluster.wait_watching(2), "both replicas watch"
        wait_for(lambda: holder(cluster) in started, 30, "a leader")
        leader = started[holder(cluster)]
        yield leader, next(r for r in started.values() if r is not leader)
    finally:
        for replica in started.values():
            replica.stop()


def test_a_rollout_stops_the_follower_and_then_the_leader_cleanly(
    cluster: FakeApiServer, replicas: tuple[Replica, Replica]
) -> None:
    """SIGTERM, as a rolling update sends it: the follower exits 0 (it has nothing to write),
    then the leader exits 0 and releases the Lease."""
    leader, follower = replicas
    follower.process.send_signal(signal.SIGTERM)
    assert follower.process.wait(15) == 0, follower.process.stderr
    assert holder(cluster) == leader.identity
    leader.process.send_signal(signal.SIGTERM)
    assert leader.process.wait(15) == 0
    assert holder(cluster) == ""


def controller_write(request: Any) -> bool:
    """A status write or an Event create of a controller (not a Lease, not the test's)."""
    return (
        request.method in ("POST", "PUT", "PATCH")
        and "/leases" not in request.path
        and bool(request.headers.get("authorization"))
    )


def test_two_replicas_hand_over_without_a_lost_or_doubled_event(
    cluster: FakeApiServer, replicas: tuple[Replica, Replica]
) -> None:
    jobs = Jobs(cluster)
    cluster.delayed = controller_write
    first, second = replicas
    jobs.create("a")
    jobs.create("b", phase="Running")
    jobs.create("gone")
    jobs.create("d")
    wait_for(lambda: jobs.state("a") == "InProgress", 20, "a's status")
    wait_for(lambda: jobs.reason("b") == "WorkloadRunning", 20, "b's status")
    wait_for(lambda: jobs.reasons("d") == ["WorkloadCreated"], 20, "d's Event")

    # a burst the leader is busy with when it dies
    cluster.delay = WRITE_DELAY
    burst = [f"burst-{i}" for i in range(8)]
    for name in burst:
        jobs.create(name, phase="Running")
    jobs.annotate("a", "Running")
    wait_for(lambda: any(jobs.state(n) for n in burst), 20, "the burst to start")
    first.process.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    first.process.wait(10)
    unfinished = [n for n in burst if jobs.reason(n) != "WorkloadRunning"]
    assert unfinished, "the leader finished the burst before the kill: slow it down"

    # while no one leads: updates, a new Job, a deletion and a new generation pile up
    jobs.annotate("b", "Failed")
    jobs.create("c", phase="Running")
    jobs.delete("gone")
    jobs.respec("d", 2)
    took = wait_for(lambda: holder(cluster) == second.identity, TAKEOVER + 10, "takeover")
    assert took - killed <= TAKEOVER, (took - killed, TAKEOVER)

    # after the takeover
    jobs.annotate("a", "Succeeded")
    jobs.annotate(burst[0], "Succeeded")
    jobs.create("e")
    done = [*burst[1:], "c"]
    wait_for(lambda: jobs.state("a") == "Succeeded", 20, "a to succeed")
    wait_for(lambda: jobs.state(burst[0]) == "Succeeded", 20, "burst-0 to succeed")
    wait_for(lambda: jobs.state("b") == "Failed", 20, "b to fail")
    wait_for(lambda: all(jobs.reason(n) == "WorkloadRunning" for n in done), 20, "the rest")
    wait_for(lambda: jobs.generation_seen("d") == 2, 20, "d's new generation")
    wait_for(lambda: jobs.state("e") == "InProgress", 20, "e's status")
    cluster.delay = 0.0
    second.process.send_signal(signal.SIGTERM)  # writes the delivered marks, releases
    assert second.process.wait(15) == 0

    # only the leader wrote: nothing of the survivor's arrived while the first one lived
    writes = [
        (r.arrived, r.headers["authorization"]) for r in cluster.requests if controller_write(r)
    ]
    assert any(who.endswith(first.identity) for _, who in writes)
    assert all(at > killed for at, who in writes if who.endswith(second.identity))
    assert holder(cluster) == "", "the survivor released the Lease on SIGTERM"

    # every transition that emits did so exactly once, across the kill and the takeover
    assert cluster.object(PLURAL, NAMESPACE, "gone") is None
    assert jobs.reasons("a") == ["WorkloadCreated", "WorkloadCompleted"]
    assert jobs.reasons(burst[0]) == ["WorkloadCreated", "WorkloadCompleted"]
    assert jobs.reasons("b") == ["WorkloadCreated", "WorkloadFailed"]
    for name in [*done, "d", "e", "gone"]:
        assert jobs.reasons(name) == ["WorkloadCreated"], name
    assert all(n == 1 for n in cluster.creates.values()), cluster.creates
    # every status is its object's current one: the last generation seen, nothing undelivered
    for name in ["a", "b", "d", "e", *done, burst[0]]:
        obj = cluster.object(PLURAL, NAMESPACE, name)
        assert obj is not None
        held = [c for c in obj["status"]["conditions"] if c.get("observedGeneration")]
        assert held, name
        assert all(c["observedGeneration"] == obj["metadata"]["generation"] for c in held), name
        (record,) = [c for c in obj["status"]["conditions"] if c["type"] == RECORD_CONDITION]
        assert json.loads(record["message"])["outbox"] == [], name


# -- the flags -------------------------------------------------------------------------------------
def test_leader_election_is_off_by_default_with_client_go_timings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("LEADER_ELECTION", "LEADER_IDENTITY", "POD_NAMESPACE"):
        monkeypatch.delenv(name, raising=False)
    args = example._arguments([])
    assert args.leader_election is False
    assert (args.lease_duration, args.renew_deadline, args.retry_period) == (15.0, 10.0, 2.0)
    assert args.lease_name == "jobs-controller"
    assert args.leader_identity  # the host name and a suffix
    assert args.leader_identity != example._arguments([]).leader_identity
    monkeypatch.setenv("LEADER_ELECTION", "true")
    monkeypatch.setenv("LEADER_IDENTITY", "pod-1")
    monkeypatch.setenv("POD_NAMESPACE", "ops")
    args = example._arguments([])
    assert (args.leader_election, args.leader_identity, args.lease_namespace) == (
        True,
        "pod-1",
        "ops",
    )
    assert example._arguments(["--lease-namespace", "ml"]).lease_namespace == "ml"


def test_with_a_leader_the_store_refuses_writes_while_not_leading(
    cluster: FakeApiServer,
) -> None:
    from lifecycle.leader import LeaderGate, NotLeader

    class Follower:
        def is_leader(self) -> bool:
            return False

    api = client.ApiClient(cluster.configuration())
    loop = example.build(api, namespace=NAMESPACE, leader=Follower())
    try:
        assert isinstance(loop.runner.store, LeaderGate)
        with pytest.raises(NotLeader):
            loop.runner.store.claim_undelivered()
        assert loop.leader is not None
        assert not loop.cycle().leading
    finally:
        loop.runner.store.inner.close()
        api.close()
    api = client.ApiClient(cluster.configuration())
    lone = example.build(api, namespace=NAMESPACE)
    assert not isinstance(lone.runner.store, LeaderGate)
    lone.runner.close()
    api.close()
