"""What the README and the getting-started guide show, run twice in a row, each run its own
process (issue 35, ADR 0135): the second run sends nothing again and ``lifecycle db check``
finds an empty outbox. A process exiting right after its last delivery used to leave that
delivery's marks in memory, so every start sent its last events once more."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .test_guides import python_blocks

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "guides" / "getting-started.md"


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), PYTHONIOENCODING="utf-8")
    return subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def db_check(db: Path) -> subprocess.CompletedProcess[str]:
    """``lifecycle db check`` with no row allowed to wait in the outbox."""
    return run(
        [
            sys.executable,
            "-m",
            "lifecycle",
            "db",
            "check",
            "--store",
            f"sqlite:///{db}",
            "--max-undelivered",
            "0",
        ],
        db.parent,
    )


def test_the_controller_quick_start_twice_sends_nothing_again(tmp_path: Path) -> None:
    script = str(ROOT / "examples" / "quickstart_controller.py")
    first = run([sys.executable, script], tmp_path)
    assert first.returncode == 0, first.stderr
    assert "NodeClaim/ml-trainer-0: Terminating → Terminated" in first.stdout
    second = run([sys.executable, script], tmp_path)
    assert second.returncode == 0, second.stderr
    assert second.stdout == (
        "no flips: controller.db already holds these statuses (delete it to start over)\n"
    )
    checked = db_check(tmp_path / "controller.db")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "outbox: 0 undelivered" in checked.stdout


def test_the_getting_started_block_twice_sends_nothing_again(tmp_path: Path) -> None:
    (block,) = [b for b in python_blocks(GUIDE.read_text(encoding="utf-8")) if "first.db" in b]
    # the block, then what its MemoryEmitter got: the second run must have got nothing
    script = block + "\nprint(len(events.events))\n"
    first = run([sys.executable, "-c", script], tmp_path)
    assert first.returncode == 0, first.stderr
    assert first.stdout == "2\n"
    second = run([sys.executable, "-c", script], tmp_path)
    assert second.returncode == 0, second.stderr  # (its ``redeliver() == 0`` holds)
    assert second.stdout == "0\n"
    checked = db_check(tmp_path / "first.db")
    assert checked.returncode == 0, checked.stdout + checked.stderr
