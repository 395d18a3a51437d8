"""Kubernetes Events survive a crash and a clean shutdown (issue 28, ADR 0121).

A host process (``_k8s_host``) commits Pod and NodeClaim transitions with the Kubernetes
emitter against the validating fake API server, and is SIGKILLed at a point the server
decides, not a guessed time: every create hanging before it lands (Events in flight, the rest
still queued), or hanging after it landed (stored, the answer never sent, so never marked);
with or without a first batch answered normally. Or it closes cleanly with a short bound
behind a slow server. A restarted host then redelivers the outbox; the API must hold every
committed transition's Event exactly once, under the name derived from its id.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lifecycle.emitters.kubernetes import event_name, id_suffix
from lifecycle.testing import FakeApiServer, nodeclaim_crd_schema

from ..stores.conftest import pg_schema, pg_server, pg_url  # noqa: F401 (fixtures)

ROOT = Path(__file__).resolve().parents[2]
PODS = 6
WORKERS = 8  # the emitter's sending threads: that many creates hang at once


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    s = FakeApiServer()
    yield s
    s.let_go()
    s.close()


@pytest.fixture(
    params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres), "kubernetes"]
)
def store_url(request: pytest.FixtureRequest, tmp_path: Path, server: FakeApiServer) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'host.db'}"
    if request.param == "kubernetes":  # the objects' status, on the same API server
        objects(server)
        return "kubernetes"
    return str(request.getfixturevalue("pg_url"))


#: What Karpenter's schema requires of a NodeClaim's spec.
CLAIM_SPEC = {
    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
    "requirements": [],
}


def objects(server: FakeApiServer) -> None:
    """The Pods the host observes and their NodeClaims, as a cluster would have them."""
    server.register_crd(
        "karpenter.sh", "v1", "nodeclaims", "NodeClaim", nodeclaim_crd_schema(), namespaced=False
    )
    for i in range(PODS):
        server.add_object("pods", "ml", f"trainer-{i}", uid=f"pod-{i}")
        # the Pod machine's link names its claim <namespace>-<name>, uid <pod uid>-claim
        server.add_object(
            "nodeclaims", "", f"ml-trainer-{i}", uid=f"pod-{i}-claim", spec=CLAIM_SPEC
        )


def host(server: FakeApiServer, store_url: str, workdir: Path, mode: str, *extra: str) -> Any:
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.emitters._k8s_host",
            server.url,
            store_url,
            str(workdir),
            mode,
            *extra,
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(path: Path, proc: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"host exited {proc.returncode}: {proc.stderr.read()}")
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.01)


def committed(workdir: Path) -> dict[str, str]:
    """The committed transitions' Event names, by transition id."""
    lines = (workdir / "committed.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    return {r["id"]: event_name(r["name"], id_suffix(r["id"])) for r in rows}


def restart(server: FakeApiServer, store_url: str, workdir: Path) -> dict[str, int]:
    proc = host(server, store_url, workdir, "restart")
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    stats: dict[str, int] = json.loads((workdir / "restart.json").read_text())
    return stats


def assert_exactly_once(server: FakeApiServer, expected: dict[str, str]) -> None:
    names = sorted(name for _, name in server.events)
    assert len(names) == len(set(names))
    assert sorted(expected.values()) == names, "every committed transition's Event, once"
    assert set(server.creates.values()) == {1}


@pytest.mark.parametrize("landed", [False, True], ids=["in-flight", "landed-unmarked"])
@pytest.mark.parametrize("answered", [0, 5], ids=["none-answered", "some-answered"])
def test_a_host_killed_with_events_queued_loses_none(
    server: FakeApiServer, store_url: str, tmp_path: Path, landed: bool, answered: int
) -> None:
    if not answered:
        server.hold(landed=landed)
    proc = host(server, store_url, tmp_path, "run", str(PODS))
    try:
        if answered:  # the first creates are answered (landed and acknowledged) ...
            deadline = time.monotonic() + 60
            while len(server.creates) < answered:
                assert time.monotonic() < deadline
                assert proc.poll() is None
                time.sleep(0.002)
            server.hold(landed=landed)  # ... then every create hangs
        wait_for(tmp_path / "committed", proc)
        expected = committed(tmp_path)
        assert len(expected) >= 4 * PODS  # Pods and NodeClaims
        # the kill lands with WORKERS creates hanging: in flight (or landed, unanswered),
        # and the rest still queued in the emitter, never sent
        assert server.wait_held(WORKERS)
        assert len(server.creates) + WORKERS < len(expected)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    server.let_go()
    stored_before = len(server.events)
    assert stored_before < len(expected)
    stats = restart(server, store_url, tmp_path)
    assert_exactly_once(server, expected)
    assert stats["undelivered"] == 0
    if landed:  # the hanging creates had landed: redelivered, they are AlreadyExists
        assert stats["already_delivered"] >= WORKERS


def test_a_clean_close_keeps_what_it_could_not_send_for_the_next_start(
    server: FakeApiServer, store_url: str, tmp_path: Path
) -> None:
    # a slow server: each answer takes 1 s, so the 0.2 s bound cannot flush the ~36 Events
    # (8 workers: 4.5 s at the least); those in flight at the close land after it, unmarked
    server.delay = 1.0
    server.delayed = lambda r: "/events" in r.path  # the Events API, not the objects' status
    proc = host(server, store_url, tmp_path, "close", str(PODS), "0.2")
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    expected = committed(tmp_path)
    left = json.loads((tmp_path / "closed.json").read_text())["left"]
    assert left > 0
    assert len(server.events) < len(expected)
    assert "stay undelivered" in err  # said, with its count
    server.delay = 0.0
    stats = restart(server, store_url, tmp_path)
    assert_exactly_once(server, expected)
    assert stats["undelivered"] == 0
