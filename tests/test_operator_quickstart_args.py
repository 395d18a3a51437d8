"""The operator quick-start's OUTDIR (issue 35): one that does not exist is refused in one
line, before anything runs; a relative one is taken from where the script was started."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "examples" / "quickstart_operator.sh"


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    bin_dir = str(Path(sys.executable).parent)  # python and lifecycle of this environment
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=300,
        check=False,
    )


def test_a_missing_outdir_is_one_line_and_a_non_zero_exit(tmp_path: Path) -> None:
    missing = tmp_path / "not" / "there"
    done = run(str(missing), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        f"quickstart_operator.sh: {missing}: no such directory (omit it for a new one)"
    ]
    assert not missing.exists()


def test_a_relative_outdir_is_where_the_script_was_started(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    done = run("out", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "saw.jsonl").is_file()
    assert (tmp_path / "out" / "final.jsonl").is_file()
