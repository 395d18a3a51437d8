"""The example host controllers run with ``--fake`` (as CI runs them), and what they record
replays to the events they published."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from lifecycle import MemoryEmitter, MemoryStore
from lifecycle.trace import read_trace, replay

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            "modal_controller",
            [
                "Pod/demo/worker-0: Provisioning → Initializing",  # probe not yet passed
                "Pod/demo/worker-0: Initializing → Running",
                "Pod/demo/worker-1: Running → Failed",  # exit 1
                "Pod/demo/worker-2: Running → Terminated",  # deleted
            ],
        ),
        (
            "aws_controller",
            [
                "Pod/demo/trainer-0: Provisioning → Initializing",  # reserved
                "Pod/demo/trainer-0: Initializing → Running",  # 2/2 status checks
                "Pod/demo/trainer-1: Running → Terminated",  # spot reclaim
                "NodeClaim/demo-trainer-0: Terminating → Terminated",
            ],
        ),
    ],
)
def test_example_runs_with_fake_and_its_recording_replays(
    name: str, expected: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / f"{name}.jsonl"
    assert load(name).main(["--fake", "--record", str(trace)]) == 0
    printed = [line for line in capsys.readouterr().out.splitlines() if line]
    for line in expected:
        assert any(line in p for p in printed), f"missing {line!r}"
    replayed = MemoryEmitter()
    replay(read_trace(trace), MemoryStore(), [replayed])
    again = [f"{e.type.value:<7} {e.ref}: {e.flip}" for e in replayed.events]
    assert again == [_without_message(p) for p in printed]


def _without_message(line: str) -> str:
    """``Normal  Pod/ns/x: A → B  message`` -> ``Normal  Pod/ns/x: A → B``."""
    head, arrow, rest = line.partition(" → ")
    return head + arrow + rest.split("  ", 1)[0]
