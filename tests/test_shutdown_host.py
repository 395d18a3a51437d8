"""The SIGTERM recipe (examples/shutdown_host.py, the controller guide; ADR 0135): a host
stopped right after a delivery writes its marks on the way out, so the restarted host has
nothing to redeliver and sends no event again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HOST = ROOT / "examples" / "shutdown_host.py"

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


def start(db: Path) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), PYTHONIOENCODING="utf-8")
    return subprocess.Popen(
        [sys.executable, str(HOST), str(db)],
        cwd=db.parent,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def stop_after(host: subprocess.Popen[str], line: str) -> list[str]:
    """Read until ``line`` starts a line, SIGTERM the host at once, and return all it
    printed (it must exit 0)."""
    assert host.stdout is not None
    seen: list[str] = []
    for out in host.stdout:
        seen.append(out.rstrip("\n"))
        if out.startswith(line):
            break
    host.send_signal(signal.SIGTERM)
    rest, err = host.communicate(timeout=60)
    assert host.returncode == 0, err
    return seen + rest.splitlines()


def test_a_host_stopped_right_after_a_delivery_restarts_with_nothing_to_redeliver(
    tmp_path: Path,
) -> None:
    db = tmp_path / "host.db"
    first = stop_after(start(db), "observed trainer-0")
    assert first[0] == "redelivered: 0"
    assert "event Pod/trainer-0: ∅ → Provisioning" in first
    assert first[-1] == "stopped; 0 event(s) left in the outbox"
    again = stop_after(start(db), "redelivered:")
    assert again[0] == "redelivered: 0"
    assert not [line for line in again if line.startswith("event ")]  # nothing sent twice
