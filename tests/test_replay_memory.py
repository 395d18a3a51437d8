"""A ``memory://`` replay holds its output (and the library's log records) back until every
line was accepted, in bounded memory (issue 19, ADR 0009): in memory up to a limit, then in an
anonymous temporary file. Its peak memory does not grow with the trace's length.

The RSS tests run the command in a fresh interpreter on a trace of a fixed population (the
same pods polled on and on), so any growth with length is the replay's own; a longer soak runs
with ``LIFECYCLE_SOAK=1``.
"""

from __future__ import annotations

import io
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import IO, Any

import pytest
from benchmarks.replay_floor import peak_rss_mib, poll_lines

from lifecycle.cli import main
from lifecycle.cli import spool as _cli_spool
from lifecycle.cli.spool import Spool

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT / "examples" / "traces"
SOAK = os.environ.get("LIFECYCLE_SOAK", "") not in ("", "0")


def run(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(["replay", *args], out=out)
    return code, out.getvalue()


# -- the spool -----------------------------------------------------------------------------------
def test_a_spool_keeps_bytes_in_order_across_memory_and_file(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past its limit the spool moves what it holds to a file; shown, every byte comes back
    in order, and a character cut by a copy chunk's end is decoded whole."""
    monkeypatch.setattr(_cli_spool, "COPY_CHUNK", 3)
    spool = Spool(limit=10)
    pieces = [f"{i} ∅ → Provisioning\n".encode() for i in range(50)]
    for piece in pieces:
        spool.write(piece)
    assert spool.spilled
    assert len(spool.memory) <= 10 + max(map(len, pieces))
    out = io.StringIO()
    spool.copy_to(out)
    assert out.getvalue() == b"".join(pieces).decode()
    spool.close()
    assert not spool.spilled
    assert not spool.memory


def test_a_spool_without_a_temporary_directory_keeps_everything_in_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(*args: Any, **kwargs: Any) -> IO[bytes]:
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(tempfile, "TemporaryFile", refuse)
    spool = Spool(limit=4)
    for _ in range(10):
        spool.write(b"abc\n")
    assert not spool.spilled
    out = io.StringIO()
    spool.copy_to(out)
    assert out.getvalue() == "abc\n" * 10


# -- the command ---------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["table", "jsonl"])
@pytest.mark.parametrize("trace", ["faults.jsonl", "crash-after-commit.jsonl", "demo.jsonl"])
def test_a_spilled_replay_prints_what_a_held_one_prints(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], trace: str, fmt: str
) -> None:
    """The same output (and the same log lines) whether it stayed in memory or went to the
    temporary file a line at a time."""
    path = str(TRACES / trace)
    code, held = run(path, "--format", fmt)
    held_err = capsys.readouterr().err
    monkeypatch.setattr(_cli_spool, "SPOOL_MEMORY", 1)
    spills: list[int] = []
    original = Spool.spill

    def spill(self: Spool) -> None:
        spills.append(len(self.memory))
        original(self)

    monkeypatch.setattr(Spool, "spill", spill)
    assert run(path, "--format", fmt) == (code, held)
    assert capsys.readouterr().err == held_err
    assert code == 0
    assert held
    assert spills


def _good_then_bad(lines: int) -> str:
    good = [
        json.dumps(
            {
                "at": f"2026-11-30T10:{i // 60 % 60:02d}:{i % 60:02d}Z",
                "machine": "pod",
                "object": {"namespace": "ml", "name": f"p{i}", "uid": f"u{i}"},
                "observe": "CreateRequested",
                "with": {},
            }
        )
        for i in range(lines)
    ]
    bad = good[0].replace("CreateRequested", "NoSuchObservation").replace("10:00:00", "11:00:00")
    return "\n".join([*good, bad]) + "\n"


def test_a_refused_replay_whose_output_was_spilled_prints_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """ADR 0009 holds past the memory limit: the lines before the refused one made output
    (spilled to the temporary file), and none of it is shown; one line on stderr."""
    monkeypatch.setattr(_cli_spool, "SPOOL_MEMORY", 64)
    closed: list[bool] = []
    original = Spool.close

    def close(self: Spool) -> None:
        closed.append(self.spilled)
        original(self)

    monkeypatch.setattr(Spool, "close", close)
    trace = tmp_path / "t.jsonl"
    trace.write_text(_good_then_bad(200), encoding="utf-8")
    for fmt in ("table", "jsonl"):
        code, text = run(str(trace), "--format", fmt)
        err = capsys.readouterr().err
        assert code == 2
        assert text == ""
        assert err.count("\n") == 1
        assert f"{trace}:201:" in err
    assert True in closed  # the spilled output was dropped with its file


def test_an_accepted_replay_shows_its_held_log_records_after_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An injected write failure is logged by the library; a ``memory://`` replay shows the
    record once every line was accepted (it said nothing while it might be refused)."""
    obj = {"namespace": "ml", "name": "p", "uid": "u"}
    at = "2026-11-30T10:00:00Z"
    lines = [
        {"at": at, "machine": "pod", "object": obj, "fault": "write-error"},
        {"at": at, "machine": "pod", "object": obj, "observe": "CreateRequested"},
    ]
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    code, text = run(str(trace))
    err = capsys.readouterr().err
    assert code == 0
    assert "1 failed writes" in text
    assert "status write failed" in err
    assert "uid='u'" in err


# -- peak memory ---------------------------------------------------------------------------------
def _rss_growth(tmp_path: Path, short: int, long: int, fmt: str) -> tuple[float, float]:
    sizes = []
    for n in (short, long):
        trace = tmp_path / f"polls-{n}.jsonl"
        with open(trace, "w", encoding="utf-8") as f:
            for line in poll_lines(n, pods=500):
                f.write(line + "\n")
        sizes.append(peak_rss_mib(trace, fmt))
        trace.unlink()
    return sizes[0], sizes[1]


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self/status")
def test_peak_memory_does_not_grow_with_the_length_of_the_trace(tmp_path: Path) -> None:
    """40 000 and 240 000 lines of the same 500 pods: the longer replay makes ~30 MiB more
    output (held whole, as bytes and then as text, before the spool: ~60 MiB more at its
    peak), and now peaks within a few MiB of the shorter one."""
    short, long = _rss_growth(tmp_path, 40_000, 240_000, "jsonl")
    assert long - short < 8, (short, long)


@pytest.mark.skipif(not SOAK, reason="a long soak: LIFECYCLE_SOAK=1")
@pytest.mark.parametrize("fmt", ["table", "jsonl"])
def test_soak_a_million_lines_replay_in_bounded_memory(tmp_path: Path, fmt: str) -> None:
    short, long = _rss_growth(tmp_path, 100_000, 1_000_000, fmt)
    assert long - short < 8, (short, long)
    assert long < 160, long
