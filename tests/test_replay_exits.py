"""Issue 23, items 4 and 5: every exit of ``lifecycle replay`` shows only what the shipped
emitters would let out -- the timeline, ``--format jsonl``, ``--final-status``,
``--as-kubernetes-events`` (table and JSON), golden files and their diffs -- redacted, and no
name or message can forge a line of it (newlines, terminal escapes, bidi overrides are
escaped). And a restarted process (``crash-after-commit``) starts with an empty Event
correlation cache, as a restarted controller does (ADR 0077)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lifecycle.cli import main

from .test_redaction_corpus import CORPUS

WF = {"namespace": "fleet", "name": "a100-burnin", "uid": "wf-k8s"}


def _line(observe: str, fields: dict[str, Any] | None, at: str, **extra: Any) -> str:
    data: dict[str, Any] = {"at": at, "machine": extra.pop("machine", "pod")}
    data["object"] = extra.pop("object", {"namespace": "ml", "name": "trainer-0", "uid": "p"})
    if observe:
        data["observe"] = observe
    if fields is not None:
        data["with"] = fields
    data.update(extra)
    return json.dumps(data)


def _cli(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(["replay", *args], out=out)
    return code, out.getvalue()


def _warning(minute: int) -> str:
    return _line(
        "InsufficientGPUCapacity",
        {"required": 8, "excluded": ["node-a7 has 4"]},
        f"2026-11-30T10:{minute:02d}:30Z",
        machine="workflow",
        object=WF,
    )


# -- a restart starts the correlation cache empty ---------------------------------------------
def test_a_warning_repeated_across_a_restart_is_two_events(tmp_path: Path) -> None:
    lines = [
        _line(
            "Submitted",
            {"category": "burnin/v1"},
            "2026-11-30T10:00:00Z",
            machine="workflow",
            object=WF,
        ),
        _warning(0),
        _warning(2),
        # the process dies after another object's commit (a Warning row writes nothing)
        _line("", None, "2026-11-30T10:03:00Z", fault="crash-after-commit"),
        _line("CreateRequested", {"pool": "gpu", "provider": "fake"}, "2026-11-30T10:03:00Z"),
        _warning(4),
        _warning(6),
    ]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, text = _cli(str(path), "--as-kubernetes-events", "--format", "jsonl")
    assert code == 0
    rows = [json.loads(x) for x in text.splitlines()]
    warnings = [r for r in rows if r["reason"] == "InsufficientGPUCapacity"]
    assert [(r["count"], r["first_time"][11:19]) for r in warnings] == [
        (2, "10:00:30"),
        (2, "10:04:30"),
    ]
    code, table = _cli(str(path), "--as-kubernetes-events")
    assert code == 0
    assert sum("InsufficientGPUCapacity" in row for row in table.splitlines()) == 2


# -- every format is redacted ----------------------------------------------------------------
def _secret_trace(tmp_path: Path) -> Path:
    """One pod per corpus shape: the shape is its InstanceUnknown error (the message of a
    Warning), and rides in its name too where a name may hold it."""
    lines = []
    for i, case in enumerate(CORPUS):
        obj = {"namespace": "ml", "name": f"trainer-{i}", "uid": f"p-{i}"}
        lines.append(
            _line(
                "CreateRequested",
                {"pool": "gpu", "provider": "fake"},
                "2026-11-30T10:00:00Z",
                object=obj,
            )
        )
        lines.append(
            _line("ProvisionRejected", {"error": case.text}, "2026-11-30T10:00:05Z", object=obj)
        )
    path = tmp_path / "secrets.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _leaks(text: str) -> list[str]:
    return sorted({c.name for c in CORPUS for s in c.secrets if s in text})


@pytest.mark.parametrize(
    "options",
    [
        (),
        ("--format", "jsonl"),
        ("--final-status",),
        ("--final-status", "--format", "jsonl"),
        ("--as-kubernetes-events",),
        ("--as-kubernetes-events", "--format", "jsonl"),
    ],
    ids=lambda o: " ".join(o) or "table",
)
def test_no_format_of_replay_prints_a_secret(
    tmp_path: Path, options: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    path = _secret_trace(tmp_path)
    code, text = _cli(str(path), *options)
    assert code == 0
    assert "<redacted" in text
    assert _leaks(text + capsys.readouterr().err) == []


def test_a_golden_file_and_its_diff_hold_no_secret(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _secret_trace(tmp_path)
    golden = tmp_path / "golden.jsonl"
    code, text = _cli(str(path), "--expect", str(golden), "--update")
    assert code == 0
    assert _leaks(golden.read_text()) == []
    golden.write_text(golden.read_text().replace("Failed", "Lost"), encoding="utf-8")
    code, text = _cli(str(path), "--expect", str(golden))
    assert code == 1
    assert "+" in text  # the diff is shown
    assert _leaks(text + capsys.readouterr().err) == []


# -- no line can be forged -------------------------------------------------------------------
#: Characters that end a line, move the cursor or reorder text on a terminal.
BREAKERS = st.sampled_from(
    [
        "\n",
        "\r",
        "\x0b",
        "\x0c",
        "\x1b[2K",
        "\x1b]0;t\x07",
        "\x85",
        "\u2028",
        "\u2029",
        "\u202e",
        "\u2066",
        "\x00",
        "\x08",
        "\x7f",
        "\x9b",
    ]
)
FORGED = "12:00:00  Pod/ml/forged"


@settings(
    max_examples=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    parts=st.lists(st.one_of(BREAKERS, st.text("abc -:", max_size=4)), min_size=1, max_size=6),
    where=st.sampled_from(["error", "name"]),
    fmt=st.sampled_from(["table", "kubernetes"]),
)
def test_no_output_line_can_be_forged(
    tmp_path: Path, parts: list[str], where: str, fmt: str
) -> None:
    payload = "".join(parts) + "\n" + FORGED + "\x1b[0m"
    obj = {"namespace": "ml", "name": "trainer-0", "uid": "p"}
    error = "provider said no"
    if where == "name":
        obj["name"] = "t" + payload
    else:
        error = payload
    lines = [
        _line(
            "CreateRequested",
            {"pool": "gpu", "provider": "fake"},
            "2026-11-30T10:00:00Z",
            object=obj,
        ),
        _line("ProvisionRejected", {"error": error}, "2026-11-30T10:00:05Z", object=obj),
    ]
    path = tmp_path / "forge.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    options = ("--as-kubernetes-events",) if fmt == "kubernetes" else ()
    code, text = _cli(str(path), *options)
    if code == 2:  # a name the input bounds refuse: nothing was printed of it
        assert FORGED not in text
        return
    assert code == 0
    for row in text.split("\n"):
        assert not row.startswith(FORGED)
        assert not any(c in row for c in "\r\x0b\x0c\x1b\x85\u2028\u2029\u202e\u2066\x00\x9b")


def test_a_same_state_event_says_what_of_its_signature_changed(tmp_path: Path) -> None:
    """The Pod's flip signature is phase, reason, Ready and pod IP (ADR 0017): an event that
    stays in its state names the part that flipped, so the timeline is not `A → A` alone."""
    demo = Path(__file__).resolve().parent.parent / "examples" / "traces" / "demo.jsonl"
    out = io.StringIO()
    assert main(["replay", str(demo), "--store", f"sqlite:///{tmp_path / 'd.db'}"], out=out) == 0
    same = [line for line in out.getvalue().splitlines() if "Initializing → Initializing" in line]
    assert same
    assert all("(Ready ∅ → False)" in line for line in same)
