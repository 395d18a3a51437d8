"""Every exception the library raises to a caller derives from ``LifecycleError`` (issue 36,
ADR 0151), and the tree drawn in ``docs/reference/errors.md`` is the code's.

Every module of the package is imported (one whose optional SDK is missing is skipped), then
every exception class the package defines -- nested ones too -- is checked: it derives from
:class:`lifecycle.LifecycleError`, or it is one of the few listed in ``OUTSIDE`` below, each
with the reason it never reaches a caller.
"""

from __future__ import annotations

import importlib

import pytest
from scripts import architecture

import lifecycle
from lifecycle import LifecycleError

#: The exception classes the package defines outside the tree, by where they are defined (a
#: name ending in ``.`` covers the classes nested under it), each with why it never reaches
#: a caller. Short on purpose: a new one needs a reason as good as these.
OUTSIDE: dict[str, str] = {
    # control flow inside one module, caught there and turned into a LifecycleError
    "lifecycle.trace._DuplicateKey": "a repeated JSON key, caught by the trace reader",
    "lifecycle.machines.restore._offline._Refused": "a refused file, printed by the check",
    "lifecycle.stores._pgio.Lost": "a lost connection, resolved into CommitUnknown or kept",
    # a BaseException so no step's ``except Exception`` swallows it (ADR 0166)
    "lifecycle._core.unchanged.Probed": "a probed step used at; caught by the probe",
    # the trace's simulated kill: a BaseException so nothing between store and replay catches it
    "lifecycle.trace.Crash": "the simulated crash of a trace replay",
    # the fake Kubernetes API server's internal refusals, answered as HTTP Status bodies
    "lifecycle._testing.fake_api.objects.ApiError": "answered as a Status body",
    "lifecycle._testing.fake_api.schema.DecodeError": "answered as a Status body",
    "lifecycle._testing.fake_api.schema.PatchError": "answered as a Status body",
    # the fake Modal SDK's exceptions mirror modal.exception's own hierarchy
    "lifecycle._testing.fake_modal.exception.": "the fake of modal.exception",
}


def allowed(cls: type) -> bool:
    name = architecture.qualified(cls)
    return any(name == key or (key.endswith(".") and name.startswith(key)) for key in OUTSIDE)


def test_every_module_of_the_package_is_imported_here() -> None:
    """The walk below sees every module: none was skipped for a missing SDK in this
    environment (the development one holds every extra), so no class escapes the check."""
    modules, skipped = architecture.import_all()
    assert skipped == {}
    assert len(modules) == len(architecture.module_names()) > 100


def test_every_exception_the_package_defines_derives_from_lifecycle_error() -> None:
    found = architecture.defined_exceptions()
    assert len(found) > 30  # the walk found the package's classes, nested ones too
    stray = [c for c in found if not issubclass(c, LifecycleError) and not allowed(c)]
    assert [architecture.qualified(c) for c in stray] == []


def test_each_allowed_class_exists_and_is_outside_the_tree() -> None:
    """The allow-list names no class that was moved, renamed or rooted since."""
    outside = architecture.outside()
    for key in OUTSIDE:
        assert any(allowed(c) and architecture.qualified(c).startswith(key) for c in outside), key


@pytest.mark.parametrize(
    ("dotted", "builtin"),
    [
        ("lifecycle.emitters.kubernetes.ApiNotConfigured", ValueError),
        ("lifecycle.machines.restore.QuantityError", ValueError),
        ("lifecycle.adapters.modal.DeadlineExceeded", TimeoutError),
        ("lifecycle.MissingExtra", ImportError),
    ],
)
def test_a_class_rooted_in_the_tree_keeps_the_builtin_callers_catch(
    dotted: str, builtin: type[Exception]
) -> None:
    module, name = dotted.rsplit(".", 1)
    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, LifecycleError)
    assert issubclass(cls, builtin)


def test_the_committed_errors_page_is_the_tree_the_code_gives() -> None:
    committed = architecture.PAGE.read_text(encoding="utf-8")
    assert committed == architecture.errors_page(), (
        "docs/reference/errors.md is stale: run python scripts/architecture.py errors --write"
    )


def test_the_tree_names_every_class_under_lifecycle_error_once() -> None:
    lines = [line.strip().split(" (also ")[0] for line in architecture.tree()]
    assert lines[0] == "lifecycle.LifecycleError"
    assert len(lines) == len(set(lines))
    rooted = [c for c in architecture.defined_exceptions() if issubclass(c, LifecycleError)]
    assert len(lines) == len(rooted)
    assert lifecycle.LifecycleError in rooted
