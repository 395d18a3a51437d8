"""``python -m lifecycle.testing.fake_cluster``: the fake API server as a process of its own,
which another process (a controller, ``kubectl``, a test's client) reaches by its kubeconfig."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from lifecycle.testing import FakeApiServer
from lifecycle.testing.fake_cluster import main, serve_crds

client = pytest.importorskip("kubernetes.client")
config = pytest.importorskip("kubernetes.config")

JOBS = ("nvcre.nvidia.com", "v1alpha1", "jobs")


def test_a_subprocess_serves_the_named_crds_to_a_client_until_sigterm(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    process = subprocess.Popen(
        [sys.executable, "-m", "lifecycle.testing.fake_cluster", "--kubeconfig", str(kubeconfig),
         "job"],
        stdout=subprocess.PIPE,
        text=True,
        env=os.environ.copy(),
    )  # fmt: skip
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("fake cluster at http://127.0.0.1:"), line
        assert "jobs.nvcre.nvidia.com" in line
        api = client.CustomObjectsApi(config.new_client_from_config(str(kubeconfig)))
        body = {
            "apiVersion": "nvcre.nvidia.com/v1alpha1",
            "kind": "Job",
            "metadata": {"name": "train-0"},
            "spec": {"maxRestarts": 1},
        }
        created = api.create_namespaced_custom_object(*JOBS[:2], "ml", JOBS[2], body)
        assert created["metadata"]["uid"]
        read = api.get_namespaced_custom_object(*JOBS[:2], "ml", JOBS[2], "train-0")
        assert read["spec"] == {"maxRestarts": 1}
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.mark.parametrize("machine", ["nosuch", "pod", "no.such.module:NAME"])
def test_a_machine_it_cannot_serve_is_refused_with_exit_2(
    machine: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--kubeconfig", str(tmp_path / "k"), machine]) == 2
    assert capsys.readouterr().err.startswith("fake_cluster: ")
    assert not (tmp_path / "k").exists()  # nothing served, nothing written


def test_serve_crds_registers_what_lifecycle_manifests_writes() -> None:
    from lifecycle.machines.job import JOB
    from lifecycle.machines.workflow import WORKFLOW

    with FakeApiServer() as cluster:
        assert serve_crds(cluster, [JOB, WORKFLOW]) == [
            "jobs.nvcre.nvidia.com",
            "workflows.nvcre.nvidia.com",
        ]
        api = client.CustomObjectsApi(client.ApiClient(cluster.configuration()))
        assert api.list_namespaced_custom_object(*JOBS[:2], "ml", JOBS[2])["items"] == []
