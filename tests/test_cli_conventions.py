"""The CLI's conventions (issue 24), each checked on a real process: an internal error has its
own exit code (70), Ctrl-C is one line and 130, ``replay -`` reads standard input, a missing
file is ``FILE: no such file`` (exit 2) for every option that takes one, ``python -m
lifecycle`` runs, every command takes the same machine references, every option has help,
and the exit codes are written down once (``--help`` and the README agree with
:data:`lifecycle.cli.common.MEANINGS`)."""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lifecycle import trace
from lifecycle.cli import common, parsers
from lifecycle.machines import SHIPPED, default_registry
from lifecycle.machines.restore import _offline

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "examples" / "traces"
DOOR = "examples/quickstart_property_test.py:DoorMachine"


def cli(
    *args: str, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != "LIFECYCLE_DEBUG"}
    base["PYTHONPATH"] = str(ROOT / "src")
    return subprocess.run(
        [sys.executable, "-m", "lifecycle", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**base, **(env or {})},
        timeout=120,
        check=False,
    )


# -- python -m lifecycle --------------------------------------------------------------------
def test_python_m_lifecycle_is_the_command() -> None:
    done = cli("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("lifecycle ")


# -- an internal error, an interruption -----------------------------------------------------
BUG = (
    "import lifecycle.cli.describe as d\n"
    "def broken(args, out):\n"
    "    raise KeyError('x')\n"
    "d.cmd_machines = broken\n"
)


def _with_bug(tmp_path: Path, debug: bool) -> subprocess.CompletedProcess[str]:
    (tmp_path / "sitecustomize.py").write_text(BUG, encoding="utf-8")
    env = {"PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT / 'src'}"}
    if debug:
        env["LIFECYCLE_DEBUG"] = "1"
    return cli("machines", env=env)


def test_an_internal_error_is_exit_70_in_one_line(tmp_path: Path) -> None:
    done = _with_bug(tmp_path, debug=False)
    assert done.returncode == common.EXIT_INTERNAL == 70
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("lifecycle: internal error: KeyError")
    assert "Traceback" not in done.stderr
    debugged = _with_bug(tmp_path, debug=True)
    assert "Traceback" in debugged.stderr
    assert "KeyError" in debugged.stderr


def test_no_answer_is_1_and_never_an_internal_error() -> None:
    """1 is kept for "no": a finding, a stale page, a diff."""
    done = cli("check", DOOR)
    assert done.returncode == 1
    assert "internal error" not in done.stderr


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child process")
def test_ctrl_c_during_a_replay_is_one_line_and_130(tmp_path: Path) -> None:
    """A replay waiting on standard input (a pipe nobody writes to) gets SIGINT, as Ctrl-C
    sends it: one line, no traceback, 130."""
    base = {k: v for k, v in os.environ.items() if k != "LIFECYCLE_DEBUG"}
    base["PYTHONPATH"] = str(ROOT / "src")
    child = subprocess.Popen(
        [sys.executable, "-m", "lifecycle", "replay", "-"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=base,
        cwd=ROOT,
    )
    try:
        assert child.stdin is not None
        child.stdin.write((TRACES / "demo.jsonl").read_text(encoding="utf-8")[:200])
        child.stdin.flush()
        deadline = time.monotonic() + 60
        # wait until the command is running (its modules imported), then interrupt it
        while time.monotonic() < deadline and child.poll() is None:
            time.sleep(0.5)
            if _reading_stdin(child.pid):
                break
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=60)
    finally:
        child.kill()
    assert child.returncode == common.EXIT_INTERRUPTED == 130, err
    assert err == "lifecycle: interrupted\n"
    assert out == ""


def _reading_stdin(pid: int) -> bool:
    """Whether the process sleeps in a read (Linux ``wchan``); elsewhere: after a pause."""
    try:
        wchan = Path(f"/proc/{pid}/wchan").read_text(encoding="utf-8")
    except OSError:
        time.sleep(3)
        return True
    return "pipe" in wchan or "wait" in wchan or "read" in wchan


# -- standard input -------------------------------------------------------------------------
def test_replay_dash_reads_standard_input() -> None:
    text = (TRACES / "happy-path.jsonl").read_text(encoding="utf-8")
    from_file = cli("replay", str(TRACES / "happy-path.jsonl"), "--format", "jsonl")
    from_stdin = cli("replay", "-", "--format", "jsonl", stdin=text)
    assert from_stdin.returncode == 0, from_stdin.stderr
    assert from_stdin.stdout == from_file.stdout != ""


def test_replay_dash_into_a_store_checks_first_and_names_stdin(tmp_path: Path) -> None:
    """A checked replay reads its trace twice (the dry run, then the writes): stdin is read
    once and both see it; a bad line is ``<stdin>:LINE: ...`` and no store file is made."""
    good = (TRACES / "happy-path.jsonl").read_text(encoding="utf-8")
    db = tmp_path / "s.db"
    done = cli("replay", "-", "--store", f"sqlite:///{db}", stdin=good)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("replaying <stdin> (")
    bad_db = tmp_path / "bad.db"
    refused = cli("replay", "-", "--store", f"sqlite:///{bad_db}", stdin=good + "{not json\n")
    assert refused.returncode == 2
    assert re.match(r"^<stdin>:\d+: ", refused.stderr), refused.stderr
    assert not bad_db.exists()


# -- missing files --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("replay", "nope.jsonl"), "nope.jsonl: no such file"),
        (("replay", "examples"), "examples: a directory, not a trace file"),
        (
            ("replay", str(TRACES / "faults.jsonl"), "--expect", "nope.golden.jsonl"),
            "nope.golden.jsonl: no such file (--update writes it)",
        ),
        (("check", "nope.py:X"), "'nope.py': no such file"),
        (("table", "nope.py:X"), "'nope.py': no such file"),
        (("diagram", "nope.py:X"), "'nope.py': no such file"),
        (("db", "check", "--store", "memory://", "--machines", "nope.py:X"), "no such file"),
        (
            ("replay", str(TRACES / "faults.jsonl"), "--compare-with", "nope.py:proposed"),
            "'nope.py': no such file",
        ),
        (("check", "pod", "--allow", "nope.json"), "nope.json"),
    ],
)
def test_a_missing_file_is_named_in_one_line_exit_2(args: tuple[str, ...], says: str) -> None:
    done = cli(*args)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert says in done.stderr
    assert ":0:" not in done.stderr  # never "line 0"
    assert done.stdout == ""


# -- one machine reference everywhere --------------------------------------------------------
def test_table_and_diagram_take_the_references_check_takes() -> None:
    table = cli("table", DOOR)
    assert table.returncode == 0, table.stderr
    assert "| closed | Opened |" in table.stdout
    instance = cli("table", "examples/quickstart_property_test.py:DOOR")
    assert instance.stdout == table.stdout
    diagram = cli("diagram", DOOR)
    assert diagram.returncode in (0, 4), diagram.stderr  # 4: the diagrams extra is missing
    if diagram.returncode == 0:
        assert "stateDiagram-v2" in diagram.stdout
        assert "jammed" in diagram.stdout
    listed = cli("machines", "--machines", DOOR, "--format", "json")
    assert listed.returncode == 0, listed.stderr
    assert '"name": "door"' in listed.stdout


def test_a_registry_reference_works_in_every_command() -> None:
    """``examples/proposed_tables.py:proposed`` (a function returning a registry) is taken
    by ``--compare-with``, and so by ``check``, ``table``, ``machines`` and ``db``; a diagram
    draws one machine, so it refuses a reference to all of them, naming them."""
    ref = "examples/proposed_tables.py:proposed"
    assert cli("check", ref).returncode == 0
    table = cli("table", ref)
    assert table.returncode == 0
    assert table.stdout.count("## ") == len(SHIPPED)
    assert cli("machines", "--machines", ref).returncode == 0
    assert cli("db", "check", "--store", "memory://", "--machines", ref).returncode == 0
    diagram = cli("diagram", ref)
    assert diagram.returncode == 2
    assert f"names {len(SHIPPED)} machines (pod, nodeclaim" in diagram.stderr


# -- help ------------------------------------------------------------------------------------
def _parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found.extend(_parsers(sub))
    return found


def test_every_option_of_every_command_has_help() -> None:
    """Walk every parser (``restore check`` has its own) and refuse an argument without help
    text; a new option without it fails here."""
    missing = []
    every = [*_parsers(parsers.build_parser()), _offline.build_parser()]
    for parser in every:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                choices = {c.dest for c in action._choices_actions}
                missing += [
                    f"{parser.prog} {name}" for name in action.choices if name not in choices
                ]
                continue
            if not action.help or action.help == argparse.SUPPRESS:
                missing.append(f"{parser.prog} {'/'.join(action.option_strings) or action.dest}")
    assert len(every) > 10
    assert missing == []


def test_the_parser_constants_agree_with_their_sources() -> None:
    assert parsers.MAX_LINE_BYTES == trace.MAX_LINE_BYTES
    assert ", ".join(default_registry()) == parsers.SHIPPED_NAMES


# -- exit codes written down once ------------------------------------------------------------
def test_help_and_readme_show_every_exit_code() -> None:
    text = cli("--help").stdout
    for code, meaning in common.MEANINGS:
        assert re.search(rf"^  {code}\s+{re.escape(meaning.split()[0])}", text, re.M), code
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = readme[readme.index("| exit | `lifecycle` |") :].split("\n\n")[0]
    codes = [int(m) for m in re.findall(r"^\| (\d+) \|", table, re.M)]
    assert codes == [code for code, _ in common.MEANINGS]


def test_the_shipped_registry_table_names_each_machine_rightly() -> None:
    """``lifecycle.machines.SHIPPED`` (what the lazy registry knows before importing) against
    the machines themselves."""
    import importlib

    for name, kind, module, constant in SHIPPED:
        machine = getattr(importlib.import_module(f"lifecycle.machines.{module}"), constant)
        assert (machine.name, machine.kind) == (name, kind)
