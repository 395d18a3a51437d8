"""The examples the README points to run and do what it says."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_embed_runner_example(capsys: pytest.CaptureFixture[str]) -> None:
    module = runpy.run_path(str(ROOT / "examples" / "embed_runner.py"))
    lines = module["main"]()
    out = capsys.readouterr().out
    assert "placed: {'fake': 1}" in out
    # One event per flip: the repeated poll and the unknown observation add nothing.
    assert lines == [
        "Pod/trainer-0: - -> Provisioning (Normal)",
        "NodeClaim/ml-trainer-0: - -> Provisioning (Normal)",
        "Pod/trainer-0: Provisioning -> Initializing (Normal)",
        "NodeClaim/ml-trainer-0: Provisioning -> Bound (Normal)",
        "Pod/trainer-0: Initializing -> Running (Normal)",
        "Pod/trainer-0: Running -> Terminated (Normal)",
        "NodeClaim/ml-trainer-0: Bound -> Terminated (Normal)",
    ]
