"""The replay's timeline keeps its columns (issue 35): a mark on an event -- who sent it
(``(redelivered)``, ``(restarted host)``, ``(other writer)``), ``(not written)``, or what of a
same-state event's signature changed (``(Ready ∅ → False)``) -- ends its line, and never moves
the type, reason or message column."""

from __future__ import annotations

import io
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from lifecycle import MemoryEmitter, ObjectRef, Runner
from lifecycle.cli import main
from lifecycle.cli.replay import _table_line
from lifecycle.machines.pod import CreateRequested

TRACES = Path(__file__).resolve().parent.parent / "examples" / "traces"
#: Where each column starts: time, object (30), flip (30), type (7), reason (28), message.
OBJECT, FLIP, TYPE, REASON = 10, 41, 72, 80
EVENT = re.compile(r"\d\d:\d\d:\d\d  ")


def timeline(trace: str) -> list[str]:
    out = io.StringIO()
    assert main(["replay", str(TRACES / trace)], out=out) == 0
    return [line for line in out.getvalue().splitlines() if EVENT.match(line)]


def assert_aligned(line: str) -> None:
    for start in (FLIP, TYPE, REASON):
        assert line[start - 1] == " ", (start, line)
        assert line[start] != " ", (start, line)
    assert line[TYPE:REASON].rstrip() in ("Normal", "Warning"), line


def test_a_same_state_flip_keeps_the_columns_and_says_what_changed() -> None:
    lines = timeline("demo.jsonl")
    same = [line for line in lines if "Initializing → Initializing" in line]
    assert same
    for line in same:
        assert_aligned(line)
        assert line.endswith("  (Ready ∅ → False)")


def test_redelivered_and_restarted_lines_keep_the_columns() -> None:
    lines = timeline("crash-after-commit.jsonl")
    marked = [line for line in lines if line.endswith(("(redelivered)", "(restarted host)"))]
    assert len(marked) == 3
    for line in lines:
        assert_aligned(line)


def test_another_writer_s_lines_keep_the_columns() -> None:
    lines = timeline("concurrent-writer.jsonl")
    assert [line for line in lines if line.endswith("  (other writer)")]
    for line in lines:
        assert_aligned(line)


def _event() -> Any:
    runner = Runner(emitters=[MemoryEmitter()], links=())
    ref = ObjectRef("Pod", "ml", "trainer-0", uid="u")
    result = runner.observe(ref, CreateRequested(at=datetime(2026, 1, 1, tzinfo=UTC)))
    return result.transitions[0]


EVENT_ONE = _event()
MARK = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=60)


@given(note=MARK, changed=MARK, fallback=st.booleans())
def test_no_mark_moves_a_column(note: str, changed: str, fallback: bool) -> None:
    t = EVENT_ONE._replace(fallback=fallback)
    plain = _table_line(t._replace(fallback=False))
    line = _table_line(t, note, changed)
    assert line.startswith(plain)  # every column as without the mark; the marks follow
    assert "\n" not in line
    assert_aligned(line)
