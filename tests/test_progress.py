"""Long replays show a progress bar on a terminal (stderr), and nothing extra when piped."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from lifecycle.cli import Progress, main
from lifecycle.cli import progress as cli_progress
from lifecycle.cli import replay as cli_replay

TRACES = Path(__file__).resolve().parent.parent / "examples" / "traces"
DEMO = TRACES / "demo.jsonl"


class FakeTTY(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_nothing_is_drawn_on_a_stream_that_is_not_a_terminal() -> None:
    stream = io.StringIO()
    bar = Progress(10, stream, delay=0.0)
    bar.note("reading ...")
    for i in range(11):
        bar.update(i)
    bar.clear()
    assert stream.getvalue() == ""
    assert not bar.enabled


def test_the_bar_waits_for_the_delay_then_redraws_at_most_every_interval() -> None:
    stream, clock = FakeTTY(), Clock()
    bar = Progress(200, stream, delay=0.5, interval=0.125, width=10, clock=clock)
    bar.update(1)
    clock.now += 0.25
    bar.update(50)
    assert stream.getvalue() == ""  # a short replay never shows a bar
    clock.now += 0.25
    bar.update(50)
    assert stream.getvalue() == "\rreplaying [##........] 50/200  25%  2s left"
    clock.now += 0.0625
    bar.update(60)  # too soon: not redrawn
    assert stream.getvalue().count("\r") == 1
    clock.now += 0.0625
    bar.update(100)
    assert stream.getvalue().endswith("\rreplaying [#####.....] 100/200  50%  1s left")
    clock.now += 0.0625
    bar.update(200)  # the end is always drawn
    # ... padded over what the previous draw left ("  1s left")
    assert stream.getvalue().endswith("\rreplaying [##########] 200/200 100%" + " " * 9)


def test_clear_erases_the_line_and_the_next_update_draws_again() -> None:
    stream, clock = FakeTTY(), Clock()
    bar = Progress(4, stream, delay=0.0, width=4, clock=clock)
    bar.update(2)
    drawn = stream.getvalue()
    bar.clear()
    assert stream.getvalue() == drawn + "\r" + " " * (len(drawn) - 1) + "\r"
    bar.update(2)  # same instant, but the line was cleared: drawn again at once
    assert stream.getvalue().endswith("\rreplaying [##..] 2/4  50%")
    bar.clear()
    bar.clear()  # clearing twice writes nothing more
    assert stream.getvalue().endswith(" \r")
    assert stream.getvalue().count("\r") == 6


def test_a_note_is_replaced_by_the_bar() -> None:
    stream = FakeTTY()
    bar = Progress(3, stream, delay=0.0, width=3, clock=Clock())
    note, drawn = "reading a-long-trace.jsonl ...", "replaying [###] 3/3 100%"
    bar.note(note)
    bar.update(3)
    assert stream.getvalue() == f"\r{note}\r{drawn}" + " " * (len(note) - len(drawn))


def test_a_stream_without_isatty_or_a_detached_one_is_not_a_terminal() -> None:
    class Detached(io.StringIO):
        def isatty(self) -> bool:
            raise ValueError("underlying buffer has been detached")

    assert not cli_progress._isatty(Detached())
    assert not cli_progress._isatty(object())


def replay(
    monkeypatch: pytest.MonkeyPatch, stderr: io.StringIO, *argv: str, trace: Path = DEMO
) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "stderr", stderr)
    out = io.StringIO()
    code = main(["replay", str(trace), *argv], out=out)
    return code, out.getvalue(), stderr.getvalue()


@pytest.mark.parametrize("store", ["memory://", "sqlite"])
def test_replay_on_a_terminal_draws_the_bar_on_stderr_and_erases_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, store: str
) -> None:
    url = store if store == "memory://" else f"sqlite:///{tmp_path / 'r.db'}"
    code, piped_out, piped_err = replay(monkeypatch, io.StringIO(), "--store", url)
    assert code == 0
    assert piped_err == ""  # piped: nothing extra
    if store != "memory://":
        (tmp_path / "r.db").unlink()
    monkeypatch.setattr(cli_progress, "PROGRESS_DELAY", 0.0)
    code, tty_out, tty_err = replay(monkeypatch, FakeTTY(), "--store", url)
    assert code == 0
    assert tty_out == piped_out  # the output itself is the same
    assert "\rreplaying [" in tty_err
    lines = len([line for line in DEMO.read_text().splitlines() if line.startswith("{")])
    assert f"] {lines}/{lines} 100%" in tty_err
    *_, last_bar, erased, end = tty_err.split("\r")
    assert last_bar.startswith("replaying [")
    assert (erased, end) == (" " * len(last_bar.rstrip()), "")  # erased at the end


def test_a_big_trace_gets_notes_while_it_is_read_and_checked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(cli_replay, "PROGRESS_NOTE_BYTES", 0)
    code, _, err = replay(monkeypatch, FakeTTY(), "--store", f"sqlite:///{tmp_path / 'r.db'}")
    assert code == 0
    assert f"\rreading {DEMO} ..." in err
    assert "\rread 10 lines ..." in err
    assert err.endswith("\r")


def test_a_streamed_replay_has_no_reading_phase_but_counts_its_lines_for_the_bar(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text("# a comment\n\n" + DEMO.read_text(), encoding="utf-8")
    monkeypatch.setattr(cli_replay, "PROGRESS_NOTE_BYTES", 0)
    monkeypatch.setattr(cli_progress, "PROGRESS_DELAY", 0.0)
    code, _, err = replay(monkeypatch, FakeTTY(), trace=trace)
    assert code == 0
    assert "reading" not in err
    assert "] 10/10 100%" in err  # comments and blank lines are not counted


def test_a_refused_trace_leaves_no_bar_before_its_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(DEMO.read_text() + "{not json\n", encoding="utf-8")
    monkeypatch.setattr(cli_replay, "PROGRESS_NOTE_BYTES", 0)
    db = f"sqlite:///{tmp_path / 'r.db'}"
    code, _, err = replay(monkeypatch, FakeTTY(), "--store", db, trace=bad)
    assert code == 2
    note, _, message = err.rpartition("\r")
    assert note.startswith(f"\rreading {bad} ...")
    assert message.lstrip(" ").startswith(f"{bad}:")  # the error starts on a clean line


def test_a_streamed_replay_refused_halfway_erases_its_bar_and_prints_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(DEMO.read_text() + "{not json\n", encoding="utf-8")
    monkeypatch.setattr(cli_progress, "PROGRESS_DELAY", 0.0)
    code, out, err = replay(monkeypatch, FakeTTY(), trace=bad)
    assert code == 2
    assert out == ""  # the lines before the bad one showed nothing
    bar, _, message = err.rpartition("\r")
    assert "replaying [" in bar  # the bar was drawn while the good lines were replayed
    n = len(DEMO.read_text().splitlines()) + 1
    assert message.lstrip(" ").startswith(f"{bad}:{n}: malformed JSON")


def test_the_bar_counts_lines_that_end_in_a_carriage_return_alone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(DEMO.read_text().replace("\n", "\r"), encoding="utf-8", newline="")
    monkeypatch.setattr(cli_progress, "PROGRESS_DELAY", 0.0)
    code, _, err = replay(monkeypatch, FakeTTY(), trace=trace)
    assert code == 0
    assert "] 10/10 100%" in err
