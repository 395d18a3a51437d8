"""The deployable example (issue 38): ``examples/controller/jobs_controller.py`` run as a
subprocess against a :class:`FakeApiServer` this test serves on loopback. Jobs are created,
updated and deleted through the API; the controller is SIGKILLed mid-run and started again;
at the end every committed transition's Event is in the API exactly once and every status is
current. The committed manifests are the command's output (they cannot drift)."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from lifecycle.stores.kubernetes import RECORD_CONDITION
from lifecycle.testing import FakeApiServer
from tests.test_host import eventually as _eventually

client = pytest.importorskip("kubernetes.client")

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "controller"
_spec = importlib.util.spec_from_file_location("jobs_controller", EXAMPLE / "jobs_controller.py")
assert _spec is not None
assert _spec.loader is not None
example: ModuleType = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(example)

GROUP, VERSION, PLURAL = example.JOBS.group, example.JOBS.version, example.JOBS.plural


@pytest.fixture
def cluster() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        example.register_crd(server)
        yield server


def start(cluster: FakeApiServer, tmp_path: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), *sys.path])}
    argv = [
        sys.executable,
        str(EXAMPLE / "jobs_controller.py"),
        "--kubeconfig",
        cluster.kubeconfig(tmp_path / "kubeconfig"),
        "--health-port",
        "0",
        "--namespace",
        "ml",
    ]
    return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def eventually(check: Callable[[], bool]) -> bool:
    """Within 20 s: a controller process starting on a loaded machine is slow to list."""
    return _eventually(check, timeout=20.0)


def api(cluster: FakeApiServer) -> Any:
    return client.CustomObjectsApi(client.ApiClient(cluster.configuration()))


def create(cluster: FakeApiServer, name: str, phase: str = "") -> None:
    """As ``kubectl apply`` (the fake server creates objects out of band), then the workload's
    phase through the API."""
    cluster.add_object(PLURAL, "ml", name, spec={"maxRestarts": 1})
    if phase:
        annotate(cluster, name, phase)


def annotate(cluster: FakeApiServer, name: str, phase: str) -> None:
    patch = {"metadata": {"annotations": {example.WORKLOAD: phase}}}
    api(cluster).patch_namespaced_custom_object(GROUP, VERSION, "ml", PLURAL, name, patch)


def reason(cluster: FakeApiServer, name: str) -> str:
    """The reason of the Job's exclusive condition that is True ("" before any)."""
    status = cluster.status(PLURAL, "ml", name) or {}
    held = [c for c in status.get("conditions", []) if c.get("status") == "True"]
    return str(held[0]["reason"]) if held else ""


def state(cluster: FakeApiServer, name: str) -> str:
    status = cluster.status(PLURAL, "ml", name) or {}
    held = [c for c in status.get("conditions", []) if c.get("status") == "True"]
    return str(held[0]["type"]) if held else ""


def generation_seen(cluster: FakeApiServer, name: str) -> int:
    status = cluster.status(PLURAL, "ml", name) or {}
    return max(
        (int(c.get("observedGeneration") or 0) for c in status.get("conditions", [])), default=0
    )


def reasons(cluster: FakeApiServer, name: str) -> list[str]:
    return [str(e["reason"]) for e in cluster.events_regarding(name, "ml")]


def test_the_example_controller_survives_a_kill_without_a_lost_or_doubled_event(
    cluster: FakeApiServer, tmp_path: Path
) -> None:
    controller = start(cluster, tmp_path)
    try:
        assert cluster.wait_watching(1), controller.stderr
        create(cluster, "a")
        create(cluster, "b", phase="Running")
        create(cluster, "gone")
        create(cluster, "d")
        assert eventually(lambda: state(cluster, "a") == "InProgress")
        assert eventually(lambda: reason(cluster, "b") == "WorkloadRunning")
        assert eventually(lambda: state(cluster, "gone") == "InProgress")
        annotate(cluster, "a", "Running")
        assert eventually(lambda: reason(cluster, "a") == "WorkloadRunning")
        controller.send_signal(signal.SIGKILL)  # mid-run: no goodbye
        controller.wait(10)

        # while it is down: updates, a new Job and a deletion pile up in the API
        annotate(cluster, "a", "Succeeded")
        annotate(cluster, "b", "Failed")
        create(cluster, "c", phase="Running")
        cluster.remove_object(PLURAL, "ml", "gone")  # as kubectl delete
        spec = {"spec": {"maxRestarts": 2}}  # a new generation of a Job in progress
        api(cluster).patch_namespaced_custom_object(GROUP, VERSION, "ml", PLURAL, "d", spec)

        controller = start(cluster, tmp_path)
        assert cluster.wait_watching(1)
        assert eventually(lambda: state(cluster, "a") == "Succeeded")
        assert eventually(lambda: state(cluster, "b") == "Failed")
        assert eventually(lambda: reason(cluster, "c") == "WorkloadRunning")
        assert eventually(lambda: generation_seen(cluster, "d") == 2)
        controller.send_signal(signal.SIGTERM)
        assert controller.wait(15) == 0
    finally:
        if controller.poll() is None:
            controller.kill()
            controller.wait(10)

    assert cluster.object(PLURAL, "ml", "gone") is None
    # each transition that emits did so exactly once, across the kill
    assert reasons(cluster, "a") == ["WorkloadCreated", "WorkloadCompleted"]
    assert reasons(cluster, "b") == ["WorkloadCreated", "WorkloadFailed"]
    assert reasons(cluster, "c") == ["WorkloadCreated"]
    assert reasons(cluster, "d") == ["WorkloadCreated"]
    assert reasons(cluster, "gone") == ["WorkloadCreated"]
    assert all(n == 1 for n in cluster.creates.values()), cluster.creates
    # every status is the object's current one: the last generation seen, nothing undelivered
    for name in "abcd":
        obj = cluster.object(PLURAL, "ml", name)
        assert obj is not None
        held = [c for c in obj["status"]["conditions"] if c.get("observedGeneration")]
        assert held
        assert all(c["observedGeneration"] == obj["metadata"]["generation"] for c in held)
        (record,) = [c for c in obj["status"]["conditions"] if c["type"] == RECORD_CONDITION]
        assert json.loads(record["message"])["outbox"] == []


def test_the_committed_manifests_are_what_the_command_writes(tmp_path: Path) -> None:
    """``deploy/`` is ``lifecycle manifests job --namespace ml --name jobs-controller --image
    jobs-controller:dev -o deploy``: regenerate it with that command when this fails."""
    from lifecycle.cli import main

    deploy = EXAMPLE / "deploy"
    committed = {p.name: p.read_text(encoding="utf-8") for p in sorted(deploy.glob("*.yaml"))}
    out = tmp_path / "deploy"
    argv = ["manifests", "job", "--namespace", "ml", "--name", "jobs-controller"]
    assert main([*argv, "--image", "jobs-controller:dev", "-o", str(out)], io.StringIO()) == 0
    written = {p.name: p.read_text(encoding="utf-8") for p in sorted(out.glob("*.yaml"))}
    assert committed
    assert committed == written
