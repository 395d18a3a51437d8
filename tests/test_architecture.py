"""``make architecture`` (``scripts/architecture.py``, ADR 0151): what each of its reports says,
without running the tools it calls (the report itself is run by hand, not by the suite)."""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

import pytest
from scripts import architecture

RADON = """src/lifecycle/trace.py
    F 193:0 parse_line - D (23)
src/lifecycle/_batch.py
    F 106:0 observe - F (47)
    M 12:4 Batch.run - E (31)
src/lifecycle/_core/table.py
    M 274:4 Table._compile - F (50)
"""


def test_the_duplicate_report_says_not_installed_when_the_tool_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert architecture.duplicates_report() == "not installed"


def test_the_complexity_report_counts_the_blocks_by_grade(monkeypatch: pytest.MonkeyPatch) -> None:
    def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        assert argv[1:] == ["-m", "radon", "cc", "-n", "D", "-s", "src/lifecycle"]
        return subprocess.CompletedProcess(argv, 0, RADON, "")

    monkeypatch.setattr(subprocess, "run", run)
    text = architecture.complexity_report()
    assert text.startswith("src/lifecycle/trace.py\n")
    assert text.splitlines()[-1] == "4 blocks graded D-F (1 D, 1 E, 2 F)"


def test_the_errors_command_prints_the_committed_page(capsys: pytest.CaptureFixture[str]) -> None:
    assert architecture.main(["errors"]) == 0
    assert capsys.readouterr().out == architecture.PAGE.read_text(encoding="utf-8")
