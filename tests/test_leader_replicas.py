"""Two replicas of a controller against one fake API server (ADR 0160, issue 38): only the
one holding the Lease writes; SIGKILLed mid-run, it is replaced within the documented bound,
and at the end every committed transition's Event is in the API exactly once and every
status is current."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubernetes import client  # type: ignore[import-untyped]

from lifecycle.machines import POD
from lifecycle.stores.kubernetes import PODS, KubernetesStore
from lifecycle.testing import FakeApiServer

from ._leader_replica import LEASE_DURATION, NAMESPACE, RETRY_PERIOD, ref

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")

REPLICA = Path(__file__).with_name("_leader_replica.py")
PODS_N = 8
#: the takeover bound: the follower sees the leader's last renewal (before the kill) at most a
#: retry period after it landed, and takes over at its first try a lease duration later; plus
#: slack for a loaded machine
TAKEOVER = LEASE_DURATION + 2 * RETRY_PERIOD + 3.0


class Replica:
    def __init__(self, url: str, identity: str) -> None:
        self.identity = identity
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[1])
        env["PYTHONPATH"] = os.pathsep.join([root, env.get("PYTHONPATH", "")])
        self.process = subprocess.Popen(
            [sys.executable, str(REPLICA), url, identity, str(PODS_N)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        self.lines: list[tuple[float, str]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append((time.monotonic(), line.strip()))

    def led_at(self) -> float | None:
        return next((at for at, line in self.lines if line == "leading"), None)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)


def wait_for(condition: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as fake:
        for i in range(PODS_N):
            fake.add_object("pods", NAMESPACE, f"web-{i}", uid=f"uid-web-{i}")
        yield fake


def holder(server: FakeApiServer) -> str:
    lease = server.object("leases", NAMESPACE, "controller")
    return "" if lease is None else str(lease["spec"].get("holderIdentity") or "")


def test_a_killed_leader_is_replaced_without_a_lost_or_doubled_event(
    server: FakeApiServer,
) -> None:
    replicas = {name: Replica(server.url, name) for name in ("replica-a", "replica-b")}
    try:
        wait_for(lambda: holder(server) in replicas, 30, "a leader")
        first = replicas[holder(server)]
        second = next(r for r in replicas.values() if r is not first)
        wait_for(lambda: len(server.events) >= 6, 30, "the leader to write")
        done = sum(1 for _ in server.events)
        first.process.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        first.process.wait(10)
        assert done < 3 * PODS_N, "the leader finished before the kill: slow it down"
        wait_for(second.led_at, TAKEOVER + 10, "the other replica to lead")
        took = second.led_at()
        assert took is not None
        assert took - killed <= TAKEOVER
        assert first.led_at() is not None
        wait_for(lambda: len(server.events) >= 3 * PODS_N, 30, "every Event")
        time.sleep(0.5)  # anything doubled would have come by now
        # only the leader wrote: no write of the follower's arrived while the leader lived
        writes = [
            (r.arrived, r.headers.get("authorization", ""))
            for r in server.requests
            if r.method in ("POST", "PUT", "PATCH") and "/leases" not in r.path
        ]
        assert any(who == first.identity for _, who in writes)
        assert all(at > killed for at, who in writes if who == second.identity)
    finally:
        for replica in replicas.values():
            replica.stop()
    assert second.process.returncode == -signal.SIGKILL
    configuration = client.Configuration()
    configuration.host = server.url
    store = KubernetesStore(client.ApiClient(configuration), resources={"Pod": PODS})
    try:
        for i in range(PODS_N):
            events = server.events_regarding(f"web-{i}", NAMESPACE)
            reasons = [e["reason"] for e in events]
            assert reasons == ["Provisioning", "Initializing", "Running"], (i, reasons)
            assert all(server.creates[e["metadata"]["name"]] == 1 for e in events)
            record = store.load(POD, ref(i))
            assert record is not None
            assert record.version == 3
            assert record.status.state == "Running"
            assert not store.claim_undelivered(), "an Event left undelivered"
    finally:
        store.close()
