"""Dependencies point downward: the kernel imports only itself, machines only the kernel (and
the logger), and provider adapters only the kernel, the machines and the logger --
never the runner, the links, the trace module or the CLI above them (issue 17, item 4).

Imports are read from the source with :mod:`ast` (relative imports resolved, ``TYPE_CHECKING``
blocks and function-level imports included), so a lazy import cannot hide an upward edge.

No two modules of the package import each other, directly or around a circle (issue 24,
ADR 0119). Every import counts -- module level, inside a function, under ``TYPE_CHECKING``:
a circle closed by a function-level import still ties the two modules together (neither can
be understood, tested or moved without the other), and one closed only for a type checker
still breaks when the annotation is evaluated (``typing.get_type_hints``, attrs). An edge
goes to the module an import names: ``from pkg import sub`` names the submodule ``pkg.sub``,
``from pkg import name`` the package ``pkg``; a parent package that Python imports on the
way in is not an edge (it would make every package a circle with its own modules).

A store never imports an emitter, nor an emitter a store (issue 36, ADR 0152): what the
Kubernetes status store and the Kubernetes Event emitter both need of the API server is in the
wing below them, ``lifecycle._k8s_api``, which imports only the kernel.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
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


def edges(path: Path, modules: Mapping[str, Path], module: str | None = None) -> set[str]:
    """The modules of the package that ``path`` imports (its own name excluded), each import
    resolved to the module it names (see the module's notes)."""
    package = (module or module_name(path)).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                name = alias.name
                while name not in modules and "." in name:
                    name = name.rsplit(".", 1)[0]  # ``import a.b.c`` of a name inside a.b
                if name in modules:
                    found.add(name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                stem = ".".join([*base, node.module] if node.module else base)
            else:
                stem = node.module or ""
            for alias in node.names:
                if f"{stem}.{alias.name}" in modules:
                    found.add(f"{stem}.{alias.name}")
                elif stem in modules:
                    found.add(stem)
    found.discard(module or module_name(path))
    return found


def circles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Every circle of ``graph`` as one strongly connected component of two or more modules,
    each written as a path that closes (``a -> b -> a``) for the failure message."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(start: str) -> None:  # Tarjan's algorithm, iterative (no recursion limit)
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(_closed_path(sorted(component), graph))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return found


def _closed_path(component: list[str], graph: Mapping[str, set[str]]) -> list[str]:
    """A shortest path from the component's first module back to itself."""
    members, start = set(component), component[0]
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for child in sorted(graph.get(node, ())):
            if child == start:
                return [*paths[node], start]
            if child in members and child not in paths:
                paths[child] = [*paths[node], child]
                queue.append(child)
    return component  # pragma: no cover  (a component always closes)


def package_graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: edges(path, modules) for name, path in modules.items()}


def test_no_two_modules_import_each_other_around_a_circle() -> None:
    found = [" -> ".join(path) for path in circles(package_graph())]
    assert found == []


def test_the_circle_check_finds_circles_of_every_spelling(tmp_path: Path) -> None:
    """The check itself, on a package made for it: a direct pair through a function-level
    import, a three-module circle through ``TYPE_CHECKING`` and ``from . import sub``, and
    the spellings that are no circle (a package's ``__init__`` importing its submodule, which
    imports a sibling)."""
    pkg = tmp_path / "lifecycle"
    (pkg / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "from .a import A\nfrom . import sub\n",
        "a.py": "def f():\n    from .b import B\n",
        "b.py": "from lifecycle.a import f\n",
        "c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .sub import d\n",
        "sub/__init__.py": "from .d import D\n",
        "sub/d.py": "from . import e\n",
        "sub/e.py": "from ..c import X\nfrom .. import a\n",
    }
    for name, text in files.items():
        (pkg / name).write_text(text, encoding="utf-8")
    modules = {
        ".".join(["lifecycle", *p.relative_to(pkg).with_suffix("").parts]).removesuffix(
            ".__init__"
        ): p
        for p in pkg.rglob("*.py")
    }
    graph = {name: edges(path, modules, name) for name, path in modules.items()}
    assert graph["lifecycle.sub.e"] == {"lifecycle.c", "lifecycle.a"}
    assert sorted(circles(graph)) == [
        ["lifecycle.a", "lifecycle.b", "lifecycle.a"],
        ["lifecycle.c", "lifecycle.sub.d", "lifecycle.sub.e", "lifecycle.c"],
    ]


def test_the_kernel_logs_as_the_library_logs(caplog: pytest.LogCaptureFixture) -> None:
    """The kernel's one log record (a record of an undeclared table change) goes through the
    standard library, not the structlog face above the kernel, in the shape every library
    record has: message ``event key=value ...``, fields redacted on ``record.lifecycle``."""
    import logging

    from lifecycle import _log
    from lifecycle._core import schema

    token = "ghp_" + "a" * 36
    with caplog.at_level(logging.WARNING, logger="lifecycle"):
        schema._undeclared("door", 1, "abc", f"problem {token}")
        _log.get_logger("lifecycle.schema").warning(
            "record of an undeclared table change",
            machine="door",
            version=1,
            fingerprint="abc",
            problem=f"problem {token}",
        )
    kernel, face = caplog.records
    assert kernel.name == face.name == "lifecycle.schema"
    assert kernel.getMessage() == face.getMessage()
    assert token not in kernel.getMessage()
    assert kernel.__dict__["lifecycle"] == face.__dict__["lifecycle"]


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
        # The kernel logs through the standard library (``_core.schema``); the structlog
        # face, ``lifecycle._log``, is built on the kernel, so the kernel never imports it.
        ("_core", ("lifecycle._core",)),
        ("machines", ("lifecycle._core", "lifecycle._log", "lifecycle.machines")),
        (
            "adapters",
            ("lifecycle._core", "lifecycle.machines", "lifecycle._log", "lifecycle.adapters"),
        ),
        # The Kubernetes API wing below the stores and the emitters (ADR 0152): neither side.
        ("_k8s_api", ("lifecycle._core", "lifecycle._k8s_api")),
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
    through :class:`~lifecycle.testing.fakes.FaultyStore`."""
    allowed = {"lifecycle.testing", "lifecycle.trace"}
    hits = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: imports {name}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if "_testing" not in path.parts
        and module_name(path) not in allowed
        and not module_name(path).startswith("lifecycle.testing.")  # the testing face
        for line, name in imported(path)
        if name.startswith(("lifecycle._testing", "lifecycle.testing"))
    ]
    assert hits == []


#: Sides that never import each other (issue 36): each stands on the wing below both, which
#: imports neither (ADR 0152).
SIDES = ("lifecycle.stores", "lifecycle.emitters")
WING = "lifecycle._k8s_api"


def reaches(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def imports_into(package: str, forbidden: tuple[str, ...]) -> list[str]:
    """Every import, by a module of ``package``, of a module under one of ``forbidden``."""
    return [
        f"{path.relative_to(PACKAGE.parent)}:{line}: imports {name}"
        for path in sorted(
            (PACKAGE / package.removeprefix("lifecycle.").replace(".", "/")).rglob("*.py")
        )
        for line, name in imported(path)
        if any(reaches(name, f) for f in forbidden)
    ]


@pytest.mark.parametrize("side", SIDES)
def test_a_store_never_imports_an_emitter_nor_an_emitter_a_store(side: str) -> None:
    """``stores/kubernetes.py`` once imported the emitter's transport, its pools and a
    private ``_client``, and ``stores/_k8s_cache.py`` the emitter for ``is_derived_uid``:
    what both sides need of the Kubernetes API is in the wing below them."""
    other = tuple(s for s in SIDES if s != side)
    assert imports_into(side, other) == []


def test_both_sides_stand_on_the_wing() -> None:
    """The wing is what they share: the store and the emitter each import it (the wing
    itself imports only the kernel: its row in the layer check above)."""
    for side in SIDES:
        assert imports_into(side, (WING,)), side
