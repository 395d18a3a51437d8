"""Golden replays (issue 18, ADR 0078): ``lifecycle replay TRACE --expect GOLDEN.jsonl``
compares a replay with a checked-in file (``--update`` rewrites it), and ``--compare-with
MODULE:REGISTRY`` replays one trace under the shipped tables and proposed ones."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest

from lifecycle.cli import main

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT / "examples" / "traces"
GOLDEN = ROOT / "examples" / "golden" / "faults.expected.jsonl"
PROPOSED = ROOT / "examples" / "proposed_tables.py"


def run(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(["replay", *args], out=out)
    return code, out.getvalue()


def _golden(tmp_path: Path, trace: str = "faults.jsonl", *flags: str) -> Path:
    path = tmp_path / f"{trace}.expected"
    code, _ = run(str(TRACES / trace), "--expect", str(path), "--update", *flags)
    assert code == 0
    return path


# -- --expect ------------------------------------------------------------------------------------
def test_the_checked_in_golden_file_matches() -> None:
    """The bundled golden file (CI runs this): a table change that alters faults.jsonl's
    events fails here with a diff, until the file is rewritten with --update."""
    code, text = run(str(TRACES / "faults.jsonl"), "--expect", str(GOLDEN))
    assert code == 0, text
    assert text == f"{TRACES / 'faults.jsonl'}: as expected (10 lines of {GOLDEN})\n"


def test_update_writes_the_jsonl_output_normalized(tmp_path: Path) -> None:
    path = _golden(tmp_path)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("# expected output of: lifecycle replay ")
    assert lines[0].endswith("(rewrite: add --update)")
    code, jsonl = run(str(TRACES / "faults.jsonl"), "--format", "jsonl")
    assert code == 0
    want = [
        json.dumps(json.loads(x), sort_keys=True, separators=(",", ":")) for x in jsonl.splitlines()
    ]
    assert lines[1:] == want
    assert (
        path.read_text(encoding="utf-8").splitlines()[1:]
        == GOLDEN.read_text(encoding="utf-8").splitlines()[1:]
    )


def test_a_changed_event_exits_1_with_a_unified_diff(tmp_path: Path) -> None:
    path = _golden(tmp_path)
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace('"reason":"Failed"', '"reason":"Crashed"'), encoding="utf-8")
    code, out = run(str(TRACES / "faults.jsonl"), "--expect", str(path))
    assert code == 1
    lines = out.splitlines()
    assert lines[0].endswith("(accept it with --update)")
    assert (
        lines[1]
        == f"1 line(s) only in {path} (-), 1 only in replay of {TRACES / 'faults.jsonl'} (+)"
    )
    assert lines[2:4] == [f"--- {path}", f"+++ replay of {TRACES / 'faults.jsonl'}"]
    removed = [x for x in lines[4:] if x.startswith("-")]
    added = [x for x in lines[4:] if x.startswith("+")]
    assert len(removed) == len(added) == 1
    assert '"reason":"Crashed"' in removed[0]
    assert '"reason":"Failed"' in added[0]
    # --update accepts the replay: the file is rewritten and compares equal again
    assert run(str(TRACES / "faults.jsonl"), "--expect", str(path), "--update")[0] == 0
    assert run(str(TRACES / "faults.jsonl"), "--expect", str(path))[0] == 0


def test_a_missing_event_is_a_difference(tmp_path: Path) -> None:
    path = _golden(tmp_path)
    kept = path.read_text(encoding="utf-8").splitlines()[:-1]
    path.write_text("\n".join(kept) + "\n", encoding="utf-8")
    code, out = run(str(TRACES / "faults.jsonl"), "--expect", str(path))
    assert code == 1
    assert "0 line(s) only in" in out.splitlines()[1]


def test_key_order_spacing_and_comments_of_a_golden_file_do_not_matter(tmp_path: Path) -> None:
    path = _golden(tmp_path)
    lines = [x for x in path.read_text(encoding="utf-8").splitlines() if not x.startswith("#")]
    edited = ["# hand-edited", ""] + [
        json.dumps(dict(reversed(json.loads(x).items())), indent=None) for x in lines
    ]
    path.write_text("\n".join(edited) + "\n", encoding="utf-8")
    assert run(str(TRACES / "faults.jsonl"), "--expect", str(path))[0] == 0


def test_final_statuses_are_compared_with_final_status(tmp_path: Path) -> None:
    path = _golden(tmp_path, "happy-path.jsonl", "--final-status")
    text = path.read_text(encoding="utf-8")
    assert '"final":true' in text
    assert "--final-status" in text.splitlines()[0]
    path.write_text(
        text.replace('"instance_id":"fake-1"', '"instance_id":"fake-9"', 1), encoding="utf-8"
    )
    code, out = run(str(TRACES / "happy-path.jsonl"), "--expect", str(path), "--final-status")
    assert code == 1
    assert "fake-9" in out
    # without --final-status the replay has no final lines: they show as missing
    code, out = run(str(TRACES / "happy-path.jsonl"), "--expect", str(path))
    assert code == 1


def test_a_golden_file_of_kubernetes_events(tmp_path: Path) -> None:
    path = _golden(tmp_path, "kubernetes-event-series.jsonl", "--as-kubernetes-events")
    rows = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()[1:]]
    assert [r["count"] for r in rows] == [21, 1]
    args = ("--expect", str(path), "--as-kubernetes-events")
    assert run(str(TRACES / "kubernetes-event-series.jsonl"), *args)[0] == 0


def test_golden_files_of_the_race_traces_keep_their_marks(tmp_path: Path) -> None:
    path = _golden(tmp_path, "crash-after-commit.jsonl")
    marked = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()[1:]]
    assert [(d["id"], d.get("redelivered", False)) for d in marked if "sent_by" in d] == [
        ("crash-0:2:0", True),
        ("crash-0-claim:2:0", False),
        ("crash-1-claim:2:0", True),
    ]
    assert run(str(TRACES / "crash-after-commit.jsonl"), "--expect", str(path))[0] == 0


@pytest.mark.parametrize(
    ("content", "problem"),
    [(None, "no such file (--update writes it)"), ('{"at": 1}\nnot json\n', ":2: not a JSON line")],
)
def test_a_missing_or_broken_golden_file_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, problem: str
) -> None:
    path = tmp_path / "golden.jsonl"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    code, out = run(str(TRACES / "faults.jsonl"), "--expect", str(path))
    assert (code, out) == (2, "")
    assert problem in capsys.readouterr().err


def test_update_needs_expect(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(str(TRACES / "faults.jsonl"), "--update") == (2, "")
    assert "--update rewrites the file --expect names" in capsys.readouterr().err


def test_a_bad_trace_is_refused_and_the_golden_file_left_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _golden(tmp_path)
    before = path.read_bytes()
    capsys.readouterr()  # (the faults trace's injected write errors are logged)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"at": "x"}\n', encoding="utf-8")
    assert run(str(bad), "--expect", str(path), "--update") == (2, "")
    assert capsys.readouterr().err.startswith(f"{bad}:1: ")
    assert path.read_bytes() == before


def test_expect_on_an_sqlite_store(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'g.db'}"
    code, out = run(str(TRACES / "faults.jsonl"), "--store", db, "--expect", str(GOLDEN))
    assert code == 0, out


# -- --compare-with ------------------------------------------------------------------------------
def test_a_proposed_table_change_shows_as_a_diff_of_events() -> None:
    spec = f"{PROPOSED}:proposed"
    code, out = run(str(TRACES / "faults.jsonl"), "--compare-with", spec)
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == f"{TRACES / 'faults.jsonl'}: the tables of {spec} change its events"
    assert lines[1] == f"1 line(s) only in shipped tables (-), 1 only in {spec} (+)"
    removed = [x for x in lines[4:] if x.startswith("-")]
    added = [x for x in lines[4:] if x.startswith("+")]
    assert len(removed) == len(added) == 1
    assert '"message":"external instance entered a failed state"' in removed[0]
    assert '"message":"external instance failed with exit code 1"' in added[0]
    assert '"id":"fault-write:4:0"' in added[0]


def test_a_trace_the_change_does_not_touch_is_the_same() -> None:
    spec = f"{PROPOSED}:proposed"
    code, out = run(str(TRACES / "happy-path.jsonl"), "--compare-with", spec)
    assert code == 0
    assert (
        out
        == f"{TRACES / 'happy-path.jsonl'}: the same 6 lines under the shipped tables and {spec}\n"
    )


def test_compare_with_a_module_attribute() -> None:
    """MODULE:NAME with a function returning a registry: the shipped one is the same."""
    code, out = run(
        str(TRACES / "crash-after-commit.jsonl"),
        "--compare-with",
        "lifecycle.machines:default_registry",
    )
    assert code == 0
    assert "the same 10 lines" in out


def test_compare_with_final_statuses() -> None:
    """The failed pod's event and its stored status message change; nothing else does."""
    spec = f"{PROPOSED}:proposed"
    code, out = run(
        str(TRACES / "exit-classification.jsonl"), "--final-status", "--compare-with", spec
    )
    assert code == 1
    changed = [json.loads(x[1:]) for x in out.splitlines()[4:] if x[:1] in "-+" and x[1:2] == "{"]
    assert [
        (d["uid"], "final" in d, d["status"]["message"] if "final" in d else d["message"])
        for d in changed
    ] == [
        ("exit-1", False, "external instance entered a failed state"),
        ("exit-1", False, "external instance failed with exit code 1"),
        ("exit-1", True, "external instance entered a failed state"),
        ("exit-1", True, "external instance failed with exit code 1"),
    ]


def test_tables_that_refuse_a_line_are_a_difference(tmp_path: Path) -> None:
    module = tmp_path / "no_restore.py"
    module.write_text(
        "from lifecycle import MachineRegistry, default_registry\n"
        "TABLES = MachineRegistry(m for m in default_registry().values() if m.name != 'restore')\n",
        encoding="utf-8",
    )
    trace = TRACES / "restore-unknown.jsonl"
    code, out = run(str(trace), "--compare-with", f"{module}:TABLES")
    assert code == 1
    assert out.startswith(
        f"{trace}: the tables of {module}:TABLES refuse it: {trace}:2: unknown machine"
    )


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (("--compare-with", "nope"), "--compare-with 'nope': expected MODULE:NAME or FILE.py:NAME"),
        (("--compare-with", "no/such.py:X"), "no such file"),
        (("--compare-with", "lifecycle:__version__"), "names no machines"),
        (("--compare-with", f"{PROPOSED}:proposed", "--store", "sqlite:///x.db"), "drop --store"),
    ],
)
def test_bad_compare_with_arguments_are_refused(
    args: tuple[str, ...], problem: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert run(str(TRACES / "faults.jsonl"), *args) == (2, "")
    assert problem in capsys.readouterr().err
    assert not (tmp_path / "x.db").exists()


def test_expect_and_compare_with_go_one_at_a_time(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        run(str(TRACES / "faults.jsonl"), "--expect", str(GOLDEN), "--compare-with", "x:y")
    assert caught.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_the_proposed_tables_example_is_importable_as_a_file(tmp_path: Path) -> None:
    """The example runs from a copy anywhere (FILE.py:NAME), not only from the checkout."""
    copy = tmp_path / "proposal.py"
    shutil.copy(PROPOSED, copy)
    assert run(str(TRACES / "faults.jsonl"), "--compare-with", f"{copy}:proposed")[0] == 1
