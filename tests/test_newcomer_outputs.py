"""``make newcomer`` checks what the README says a command prints, not only its exit code: a
```text block after ``<!-- output: exit N -->`` is the output of the ``sh`` block's last
command (issue 24). Here: the matcher itself, the script it generates, and every declared
output of this README against the command run in this checkout; and the operator
quick-start's words against what its traces do."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _newcomer() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_newcomer", ROOT / "scripts" / "newcomer.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


newcomer = _newcomer()


def test_the_matcher_wants_every_line_in_order_with_ellipses() -> None:
    out = 'a\n-{"at":"x","id":"f:4:0","message":"boom","n":1}\nb\n'
    assert newcomer.mismatch('-{"at":"x",...,"message":"boom",...}\n', out) is None
    assert newcomer.mismatch("a\nb\n", out) is None
    assert newcomer.mismatch("b\na\n", out) is not None  # out of order
    assert newcomer.mismatch('-{...,"message":"bang",...}\n', out) is not None
    assert newcomer.mismatch("a...\n", "") is not None


def test_a_declared_output_is_checked_with_its_exit_code(tmp_path: Path) -> None:
    readme = (
        "```sh\necho one\nprintf 'hello world\\n'; false\n```\n\n"
        "<!-- output: exit 1 -->\n```text\nhello ...\n```\n"
    )
    script = newcomer.readme_script(readme, False, tmp_path)
    assert "echo one\n" in script
    assert "--match" in script
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    wrong = readme.replace("hello ...", "goodbye ...")
    done = subprocess.run(
        ["bash", "-c", newcomer.readme_script(wrong, False, tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert "goodbye" in done.stderr


README = (ROOT / "README.md").read_text(encoding="utf-8")
DECLARED = [
    (block, *newcomer.declared_outputs(README)[block.end()])
    for block in newcomer._BLOCK.finditer(README)
    if block.end() in newcomer.declared_outputs(README)
]


def _run(command: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    env.pop("LIFECYCLE_DEBUG", None)
    words = command.split()
    if words[0] == "lifecycle":
        words = [sys.executable, "-m", "lifecycle", *words[1:]]
    return subprocess.run(
        words, capture_output=True, text=True, cwd=ROOT, env=env, timeout=120, check=False
    )


def test_the_readme_declares_outputs() -> None:
    assert DECLARED


@pytest.mark.parametrize(("block", "code", "text"), DECLARED)
def test_each_declared_output_is_what_the_command_prints(
    block: re.Match[str], code: int, text: str
) -> None:
    last = [ln.split("  #")[0].strip() for ln in block["body"].splitlines() if ln.strip()][-1]
    done = _run(last)
    assert done.returncode == code, done.stderr
    assert newcomer.mismatch(text, done.stdout) is None


def test_the_operator_quickstart_says_what_its_traces_do() -> None:
    """Step 4 (write faults on Pods: no fallback, their rows declare none) and step 5 (a
    row that declares one: its Warning, marked ``(not written)``)."""
    script = (ROOT / "examples" / "quickstart_operator.sh").read_text(encoding="utf-8")
    faults = _run("lifecycle replay examples/traces/faults.jsonl")
    assert faults.returncode == 0
    assert "(not written)" not in faults.stdout
    assert "StatusUpdateFailed" not in faults.stdout
    assert "no fallback" in script
    fallback = _run("lifecycle replay examples/traces/certification-fallback-then-transition.jsonl")
    assert fallback.returncode == 0
    assert re.search(r"StatusUpdateFailed .*  \(not written\)$", fallback.stdout, re.M)
