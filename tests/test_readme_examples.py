"""The examples the README points to run and do what it says, and the README's quick-start
blocks are those example files, verbatim."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import runpy
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from lifecycle.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
EXAMPLES = ROOT / "examples"

#: ``<!-- example: PATH -->`` then a fenced block: the block is the file at PATH, verbatim.
INCLUDED = re.compile(r"<!-- example: (\S+) -->\n```\w*\n(.*?)```", re.S)


def included() -> dict[str, str]:
    return {m[1]: m[2] for m in INCLUDED.finditer(README.read_text(encoding="utf-8"))}


def test_the_readme_quick_starts_are_the_example_files_verbatim() -> None:
    blocks = included()
    assert sorted(blocks) == [
        "examples/quickstart_controller.py",
        "examples/quickstart_operator.sh",
        "examples/quickstart_property_test.py",
    ]
    for path, block in blocks.items():
        text = (ROOT / path).read_text(encoding="utf-8")
        assert block == text, f"README.md's copy of {path} differs from the file: paste it again"


def test_every_quick_start_file_is_in_the_readme() -> None:
    files = sorted(f"examples/{p.name}" for p in EXAMPLES.glob("quickstart_*"))
    assert files == sorted(included())


def test_the_two_setup_commands_come_first() -> None:
    text = README.read_text(encoding="utf-8")
    first_block = re.search(r"```sh\n(.*?)```", text, re.S)
    assert first_block is not None
    commands = [line.split("#")[0].strip() for line in first_block[1].splitlines()]
    assert commands == ["make demo", "make test"]
    assert text.index("make demo") < text.index("## Quick-starts")


def test_every_lifecycle_command_the_readme_shows_exists() -> None:
    text = README.read_text(encoding="utf-8")
    shown = set(re.findall(r"^lifecycle (\w+)", text, re.M))
    parser = build_parser()
    known = {
        name
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
        for name in action.choices
    }
    assert shown
    assert shown <= known, shown - known


# -- the controller author ------------------------------------------------------------------
def test_controller_quick_start(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    module = runpy.run_path(str(EXAMPLES / "quickstart_controller.py"))
    lines = module["main"](str(tmp_path / "controller.db"))
    # One event per flip: the repeated Running poll adds nothing; the claim follows its pod.
    # The first poll adds Ready=False to the booting pod: a flip of its signature (phase,
    # reason, Ready, pod IP), so an event that stays Initializing.
    assert lines == [
        "Pod/trainer-0: ∅ → Provisioning",
        "NodeClaim/ml-trainer-0: ∅ → Provisioning",
        "Pod/trainer-0: Provisioning → Initializing",
        "NodeClaim/ml-trainer-0: Provisioning → Bound",
        "Pod/trainer-0: Initializing → Initializing",
        "Pod/trainer-0: Initializing → Running",
        "NodeClaim/ml-trainer-0: Bound → Terminating",
        "Pod/trainer-0: Running → Terminated",
        "NodeClaim/ml-trainer-0: Terminating → Terminated",
    ]
    assert capsys.readouterr().out == "\n".join(lines) + "\n"


def test_embed_runner_example(capsys: pytest.CaptureFixture[str]) -> None:
    module = runpy.run_path(str(EXAMPLES / "embed_runner.py"))
    lines = module["main"]()
    out = capsys.readouterr().out
    assert "placed: {'fake': 1}" in out
    # One event per flip: the repeated poll and the unknown observation add nothing.
    assert lines == [
        "Pod/trainer-0: ∅ → Provisioning (Normal)",
        "NodeClaim/ml-trainer-0: ∅ → Provisioning (Normal)",
        "Pod/trainer-0: Provisioning → Initializing (Normal)",
        "NodeClaim/ml-trainer-0: Provisioning → Bound (Normal)",
        "Pod/trainer-0: Initializing → Running (Normal)",
        "Pod/trainer-0: Running → Terminated (Normal)",
        "NodeClaim/ml-trainer-0: Bound → Terminated (Normal)",
    ]


# -- the property tester --------------------------------------------------------------------
def _load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_property_quick_start_passes(tmp_path: Path) -> None:
    module = _load(EXAMPLES / "quickstart_property_test.py")
    tests = sorted(name for name in vars(module) if name.startswith("test_"))
    assert tests == ["test_a_jammed_door_stays_jammed", "test_the_door_keeps_every_promise"]
    module.test_the_door_keeps_every_promise(tmp_path)
    module.test_a_jammed_door_stays_jammed()


def test_property_quick_start_catches_a_broken_door() -> None:
    """A door whose Opened row claims the wrong event type cannot even be built: its table
    and its declared warning states disagree (the property suite's teeth are shown on broken
    machines in tests/test_properties.py)."""
    import attrs

    from lifecycle import EventType, TableError

    module = _load(EXAMPLES / "quickstart_property_test.py")
    table = module.DOOR_TABLE
    rows = tuple(
        attrs.evolve(r, event=EventType.WARNING) if r.reason == "Opened" else r for r in table.rows
    )
    broken = type(table)(
        "door",
        states=table.states,
        initial=table.initial,
        terminal=table.terminal,
        observations=table.observations,
        rows=rows,
    )
    with pytest.raises(TableError, match="disagrees with the table"):
        type("Broken", (module.DoorMachine,), {"table": broken})()


# -- the operator ---------------------------------------------------------------------------
def test_operator_quick_start_records_and_replays(tmp_path: Path) -> None:
    bin_dir = str(Path(sys.executable).parent)  # python and lifecycle of this environment
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}
    done = subprocess.run(
        ["bash", str(EXAMPLES / "quickstart_operator.sh"), str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    recorded = (tmp_path / "saw.jsonl").read_text(encoding="utf-8").splitlines()
    lines = [line for line in recorded if line.startswith("{")]
    assert lines
    assert all(json.loads(line)["machine"] == "pod" for line in lines)
    out = done.stdout.splitlines()
    # The controller printed its events live; the replay prints the same flips, in order.
    live = [line for line in out if line.startswith(("Normal ", "Warning "))]
    replayed = [line for line in out if re.match(r"\d\d:\d\d:\d\d  ", line)]
    flips = [re.sub(r" +", " ", line[10:]).split(" ")[:4] for line in replayed]
    assert len(live) == 14
    assert [f[1:] for f in flips[: len(live)]] == [
        [_arrow(line)[0], "→", _arrow(line)[1]] for line in live
    ]
    summary = f"{len(lines)} observations, {len(live)} events, 0 failed writes"
    assert summary in out
    finals = (tmp_path / "final.jsonl").read_text(encoding="utf-8").splitlines()
    assert sorted(json.loads(f)["state"] for f in finals) == [
        "Failed",
        "Terminated",
        "Terminated",
        "Terminated",
    ]
    assert "8 observations, 10 events, 2 failed writes" in out  # the bundled faults trace


def _arrow(line: str) -> tuple[str, str]:
    """``Normal  Pod/demo/worker-0: ∅ → Provisioning  msg`` -> ("∅", "Provisioning")."""
    m = re.search(r": (\S+) → (\S+)", line)
    assert m is not None, line
    return (m[1], m[2])


# -- changing a table (ADR 0088) ----------------------------------------------------------------
def test_changing_a_table_example(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    module = runpy.run_path(str(EXAMPLES / "changing_a_table.py"))
    db = str(tmp_path / "doors.db")
    lines = module["main"](db)
    assert lines[0].startswith("refused: door: 2 status record(s) at schema v1")
    assert "no upcaster from v1 to v2" in lines[0]
    assert lines[1:] == [
        "front door, stored by v1 as open, loads as ajar",
        "front door closed under v2: ajar -> closed",
    ]
    assert capsys.readouterr().out == "\n".join(lines) + "\n"
    # the fingerprint the example declares for v1 is v1's own
    assert module["DoorV1"]().schema.fingerprint == module["DoorV2"].upcasters[1].fingerprint
    from lifecycle.cli import main

    spec = f"{EXAMPLES / 'changing_a_table.py'}:DOORS_V2"
    assert main(["db", "check", "--store", f"sqlite:///{db}", "--machines", spec]) == 0
    assert main(["db", "upgrade", "--store", f"sqlite:///{db}", "--machines", spec]) == 0
    out = capsys.readouterr().out
    assert "upgradable door status: 1 at v1" in out
    assert "door: 1 status(es), 3 journal entries and 0 snapshot(s) upgraded" in out
