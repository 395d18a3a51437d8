"""Dependencies point downward: the kernel imports only itself (and the logger beside it),
machines only the kernel, and provider adapters only the kernel, the machines and the logger --
never the runner, the links, the trace module or the CLI above them (issue 17, item 4).

Imports are read from the source with :mod:`ast` (relative imports resolved, ``TYPE_CHECKING``
blocks and function-level imports included), so a lazy import cannot hide an upward edge.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "lifecycle"


def module_name(path: Path) -> str:
    parts = ["lifecycle", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path, module: str | None = None) -> Iterator[tuple[int, str]]:
    """Every ``lifecycle.*`` module ``path`` (the module ``module``, by default named from
    its place in the package) imports: (line, absolute dotted name)."""
    package = (module or module_name(path)).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                stem = ".".join([*base, node.module] if node.module else base)
            else:
                stem = node.module or ""
            # ``from . import x`` may import the submodule ``x``: count both spellings.
            names = [stem, *(f"{stem}.{alias.name}" for alias in node.names)]
        else:
            continue
        for name in names:
            if name == "lifecycle" or name.startswith("lifecycle."):
                yield node.lineno, name


def upward(layer: str, allowed: tuple[str, ...]) -> list[str]:
    """Imports out of ``layer`` that land outside ``allowed`` (module prefixes)."""
    bad = []
    for path in sorted((PACKAGE / layer).rglob("*.py")):
        for line, name in imported(path):
            if name in allowed or name.startswith(tuple(f"{a}." for a in allowed)):
                continue
            if name == "lifecycle" + "." + layer.replace("/", "."):
                continue
            bad.append(f"{path.relative_to(PACKAGE.parent)}:{line}: imports {name}")
    return bad


def test_the_parser_sees_relative_lazy_and_guarded_imports(tmp_path: Path) -> None:
    """The check itself: relative imports are resolved against the module's package, and
    imports inside a function or a ``TYPE_CHECKING`` block count (else the real checks could
    pass vacuously)."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from typing import TYPE_CHECKING\n"
        "from .base import x\n"
        "if TYPE_CHECKING:\n"
        "    from ..runner import Runner\n"
        "def f():\n"
        "    from ..links import claim_ref\n"
        "    import lifecycle.cli\n",
        encoding="utf-8",
    )
    names = {name for _, name in imported(probe, "lifecycle.adapters.probe")}
    assert {
        "lifecycle.adapters.base",
        "lifecycle.runner",
        "lifecycle.links",
        "lifecycle.links.claim_ref",
        "lifecycle.cli",
    } <= names


@pytest.mark.parametrize(
    ("layer", "allowed"),
    [
        # ``lifecycle._log`` (the library's logger, itself built only on ``_core.redact``)
        # sits beside the kernel.
        ("_core", ("lifecycle._core", "lifecycle._log")),
        ("machines", ("lifecycle._core", "lifecycle._log", "lifecycle.machines")),
        (
            "adapters",
            ("lifecycle._core", "lifecycle.machines", "lifecycle._log", "lifecycle.adapters"),
        ),
    ],
)
def test_a_layer_imports_only_what_lies_below_it(layer: str, allowed: tuple[str, ...]) -> None:
    assert upward(layer, allowed) == []


@pytest.mark.parametrize(
    "above", ["lifecycle.links", "lifecycle.trace", "lifecycle.runner", "lifecycle.cli"]
)
def test_no_adapter_imports_the_layers_above(above: str) -> None:
    """The four edges issue 17 named, spelled out: ``adapters/fake.py`` once imported
    ``links`` (for ``claim_ref``) and ``adapters/recording.py`` ``trace`` (for
    ``observation_line``); both now come from modules below the adapters."""
    hits = [
        f"{path.name}:{line}"
        for path in sorted((PACKAGE / "adapters").rglob("*.py"))
        for line, name in imported(path)
        if name == above or name.startswith(above + ".")
    ]
    assert hits == []


def test_the_moved_names_keep_their_public_homes() -> None:
    """``lifecycle.links.claim_ref`` and ``lifecycle.trace.observation_line``/``format_time``
    are the same objects as the low modules' ones (re-exported, not copied)."""
    from lifecycle import links, trace
    from lifecycle._core import trace_lines
    from lifecycle.machines import _claims

    assert links.claim_ref is _claims.claim_ref
    assert trace.observation_line is trace_lines.observation_line
    assert trace.format_time is trace_lines.format_time


def test_only_the_testing_face_and_trace_faults_import_the_test_doubles() -> None:
    """Test doubles live in the testing package (ADR 0035): the shipped code path never
    imports them, except :mod:`lifecycle.trace`, whose ``"fault"`` lines are injected
    through :class:`~lifecycle.testing.FaultyStore`."""
    allowed = {"lifecycle.testing", "lifecycle.trace"}
    hits = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: imports {name}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if "_testing" not in path.parts and module_name(path) not in allowed
        for line, name in imported(path)
        if name.startswith(("lifecycle._testing", "lifecycle.testing"))
    ]
    assert hits == []
