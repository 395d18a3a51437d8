"""The house is laid out by idea (issue 17, item 5; ADR 0035): names say what a file holds,
nothing is re-exported with ``import *``, the Restore machine is one package, test doubles live
in the testing package, and the top-level face holds the runner, the stores, the emitters, the
errors and the vocabulary of a machine -- table authoring lives one level down.

The source is read with :mod:`ast`, so a check cannot pass because an import is lazy.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "lifecycle"


def test_no_module_re_exports_with_import_star() -> None:
    """``from x import *`` hid which names a machine module takes from its records module."""
    stars = [
        f"{path.relative_to(PACKAGE.parent)}:{node.lineno}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names)
    ]
    assert stars == []


@pytest.mark.parametrize(
    ("machine", "vocabulary"),
    [("pod", "_pod_observations"), ("job", "_job_records"), ("workflow", "_workflow_records")],
)
def test_a_machine_module_still_exports_its_whole_vocabulary(machine: str, vocabulary: str) -> None:
    """Every name of the records module is importable from the public machine module (the
    same object), and listed in its ``__all__`` (what mypy --strict counts as exported)."""
    public = importlib.import_module(f"lifecycle.machines.{machine}")
    records = importlib.import_module(f"lifecycle.machines.{vocabulary}")
    assert set(records.__all__) <= set(public.__all__)
    assert all(getattr(public, name) is getattr(records, name) for name in records.__all__)


def test_the_test_doubles_live_in_the_testing_package() -> None:
    """``stores/overlay.py`` once held :class:`FaultyStore` (a test double) beside the dry-run
    store; the double now lives with the others, the dry-run store under its own name."""
    from lifecycle import testing
    from lifecycle.stores import dry_run

    assert testing.FaultyStore.__module__ == "lifecycle._testing.doubles"
    assert testing.FailingEmitter.__module__ == "lifecycle._testing.doubles"
    assert dry_run.DryRunStore.__module__ == "lifecycle.stores.dry_run"
    assert importlib.util.find_spec("lifecycle.stores.overlay") is None
