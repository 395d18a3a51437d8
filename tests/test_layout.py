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


def defined_names(path: Path) -> list[str]:
    """The public names a module defines at its top level (not those it imports)."""
    names: list[str] = []
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
    return [n for n in names if not n.startswith("_")]


@pytest.mark.parametrize(
    ("machine", "vocabulary"),
    [("pod", "_pod_observations"), ("job", "_job_records"), ("workflow", "_workflow_records")],
)
def test_a_machine_module_still_exports_its_whole_vocabulary(machine: str, vocabulary: str) -> None:
    """Every name the records module defines is importable from the public machine module (the
    same object), and listed in its ``__all__`` (what mypy --strict counts as exported)."""
    public = importlib.import_module(f"lifecycle.machines.{machine}")
    records = importlib.import_module(f"lifecycle.machines.{vocabulary}")
    names = defined_names(PACKAGE / "machines" / f"{vocabulary}.py")
    assert names
    assert set(names) <= set(public.__all__)
    assert all(getattr(public, name) is getattr(records, name) for name in names)
    assert all(hasattr(public, name) for name in public.__all__)


def test_the_test_doubles_live_in_the_testing_package() -> None:
    """``stores/overlay.py`` once held :class:`FaultyStore` (a test double) beside the dry-run
    store; the double now lives with the others, the dry-run store under its own name."""
    from lifecycle.stores import dry_run
    from lifecycle.testing import fakes

    assert fakes.FaultyStore.__module__ == "lifecycle._testing.doubles"
    assert fakes.FailingEmitter.__module__ == "lifecycle._testing.doubles"
    assert dry_run.DryRunStore.__module__ == "lifecycle.stores.dry_run"
    assert importlib.util.find_spec("lifecycle.stores.overlay") is None


#: The test doubles, by the one public name each has (issue 36, ADR 0151).
FAKES = {
    "FakeProvider",
    "FakeSpec",
    "FakeInstance",
    "FakeNode",
    "FakeModal",
    "FakeEC2",
    "FailingEmitter",
    "FaultyStore",
}


def test_each_test_double_has_one_public_name_in_lifecycle_testing_fakes() -> None:
    """The SDK fakes once shipped in ``lifecycle/adapters/`` beside the real adapters (and
    the fake provider under two names), and ``FailEmitter`` sat beside ``FailingEmitter``:
    each double is now one name of :mod:`lifecycle.testing.fakes` and of no other public
    module, its code private under ``lifecycle/_testing/``."""
    from scripts.core_check import public_modules

    import lifecycle
    from lifecycle.testing import fakes

    assert set(fakes.__all__) >= FAKES
    homes: dict[str, list[str]] = {name: [] for name in FAKES}
    for dotted in public_modules(lifecycle):
        module = importlib.import_module(dotted)
        for name in set(getattr(module, "__all__", ())) & FAKES:
            homes[name].append(module.__name__)
    assert homes == {name: ["lifecycle.testing.fakes"] for name in FAKES}
    for old in ("fake", "aws_fake", "modal_fake"):
        assert importlib.util.find_spec(f"lifecycle.adapters.{old}") is None
    assert not hasattr(importlib.import_module("lifecycle.testing"), "FailEmitter")


#: The top-level face, by what it is for (ADR 0035).
FACE = {
    # running machines
    *("Runner", "AsyncRunner", "Result", "Outcome", "RetryPolicy", "Dispatcher", "Link"),
    *("MachineRegistry", "default_registry", "kubernetes_status"),
    # stores and emitters
    *("Store", "Record", "JournalEntry", "MemoryStore", "SQLiteStore", "open_store"),
    *("AsyncStore", "ThreadedStore", "open_async_store"),
    *("Emitter", "MemoryEmitter", "LogEmitter"),
    # what a host reads and writes
    *("ObjectRef", "Observation", "Tick", "Transition", "EventType"),
    *("Machine", "Row", "Table", "ignore"),
    # the errors
    *("LifecycleError", "InvalidObservation", "InvalidTransition", "InvalidReference"),
    *("StoreError", "Conflict", "CommitUnknown", "IdentityMismatch", "TableError"),
    *("TraceError", "UnknownMachine", "UnknownObservation", "UnknownSchema", "SchemaRefused"),
    "MissingExtra",  # what needs an optional extra that is not installed (ADR 0136)
    "StoreTooSmall",
}


def test_the_top_level_face_is_small_and_declared() -> None:
    """55 names had crept onto the face; table-authoring names live in
    :mod:`lifecycle.tables`, the NodePool projection with the NodeClaim machine."""
    import lifecycle

    assert set(lifecycle.__all__) == FACE
    assert all(getattr(lifecycle, name) is not None for name in lifecycle.__all__)
    assert lifecycle.__version__


@pytest.mark.parametrize(
    "name", ["ANY", "SAME", "Action", "Flip", "Verdict", "Condition", "Schema", "Upcaster"]
)
def test_table_authoring_names_live_one_level_down(name: str) -> None:
    import lifecycle
    from lifecycle import tables

    assert name in tables.__all__
    assert name not in lifecycle.__all__
    assert not hasattr(lifecycle, name)


def test_the_placed_projection_lives_with_the_nodeclaim_machine() -> None:
    """``projections.py`` was one function exported at the top level."""
    import lifecycle
    from lifecycle.machines import nodeclaim

    assert callable(nodeclaim.placed)
    assert not hasattr(lifecycle, "placed")
    assert importlib.util.find_spec("lifecycle.projections") is None


def test_the_table_authoring_face_imports_only_the_kernel() -> None:
    from tests.test_import_direction import imported

    names = {name for _, name in imported(PACKAGE / "tables.py")}
    assert names
    assert all(name.startswith("lifecycle._core") for name in names)


def test_one_word_for_the_rows_a_pair_tries() -> None:
    """The word "dispatch" meant both the table's map and the outbox :class:`~lifecycle.Dispatcher`;
    the table's is ``Table.by_pair`` (ADR 0035)."""
    from lifecycle.machines import POD
    from lifecycle.machines.pod import PROVISIONING, ProvisionSucceeded

    assert POD.table.by_pair[(PROVISIONING, ProvisionSucceeded)]
    assert not hasattr(POD.table, "dispatch")


def test_one_protocol_for_what_keeps_observations() -> None:
    """``adapters/fake.py`` and ``adapters/recording.py`` each declared a ``Recorder``
    protocol of the same shape; there is one, named for what it records."""
    protocols = [
        f"{path.name}:{node.name}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ClassDef)
        and node.name.endswith("Recorder")
        and any(getattr(base, "id", None) == "Protocol" for base in node.bases)
    ]
    assert protocols == ["recording.py:ObservationRecorder"]


def test_one_word_for_links() -> None:
    """A :class:`~lifecycle.Link` feeds a linked object; the results of those writes are
    ``Result.linked`` (``cascade`` was a second word for the same idea, kept as an alias
    until 1.0) and the durable intents live in ``_link_intents``."""
    from lifecycle import Result

    assert "linked" in Result._fields
    assert "cascade" not in Result._fields
    assert Result.__dict__["cascade"].fget is not None  # the old name reads the new field
    assert importlib.util.find_spec("lifecycle._cascade") is None
    assert importlib.util.find_spec("lifecycle._link_intents") is not None
