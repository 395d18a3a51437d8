"""The newcomer's first commands: ``--version``; a missing extra told apart from a stale page."""

from __future__ import annotations

import builtins
import io
import sys
from pathlib import Path
from typing import Any

import pytest

from lifecycle import __version__
from lifecycle.cli import EXIT_MISSING_EXTRA, EXIT_NO, EXIT_OK, main


def test_version_prints_the_release(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"lifecycle {__version__}"


def _without_transitions(monkeypatch: pytest.MonkeyPatch) -> None:
    real = builtins.__import__

    def refuse(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "transitions" or name.startswith("transitions."):
            raise ImportError("No module named 'transitions'")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", refuse)
    for name in [m for m in sys.modules if m.split(".")[0] == "transitions"] + [
        "lifecycle._diagram"
    ]:
        monkeypatch.delitem(sys.modules, name, raising=False)


@pytest.mark.parametrize("words", [["diagram", "job"], ["diagram", "job", "--format", "dot"]])
def test_a_missing_extra_is_exit_4_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], words: list[str]
) -> None:
    _without_transitions(monkeypatch)
    assert main(words, out=io.StringIO()) == EXIT_MISSING_EXTRA
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "pip install 'lifecycle-machines[diagrams]'" in err[0]


def test_the_pages_and_the_svg_drawing_need_no_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The machine pages show SVG the library lays out itself (ADR 0137): without
    ``transitions`` they are written and checked, and ``diagram --format svg`` draws."""
    _without_transitions(monkeypatch)
    assert main(["docs", "--out", str(tmp_path)], out=io.StringIO()) == EXIT_OK
    assert main(["docs", "--out", str(tmp_path), "--check"], out=io.StringIO()) == EXIT_OK
    out = io.StringIO()
    assert main(["diagram", "job", "--format", "svg"], out=out) == EXIT_OK
    assert out.getvalue() == (tmp_path / "job.svg").read_text(encoding="utf-8")


def test_a_stale_page_is_exit_1_and_a_current_one_exit_0(tmp_path: Path) -> None:
    assert main(["docs", "--out", str(tmp_path)], out=io.StringIO()) == EXIT_OK
    assert main(["docs", "--out", str(tmp_path), "--check"], out=io.StringIO()) == EXIT_OK
    page = next(tmp_path.glob("*.md"))
    page.write_text(page.read_text() + "\nedited by hand\n")
    out = io.StringIO()
    assert main(["docs", "--out", str(tmp_path), "--check"], out=out) == EXIT_NO
    assert page.name in out.getvalue()
