"""Every public name is in the API reference (issue 24).

The reference pages (``docs/reference/*.rst``) are read as text, so this runs without the
documentation toolchain: a public module is every module under ``src/lifecycle`` no part of
whose dotted name starts with ``_``; its public names are its ``__all__``. Each must have a
reference entry:

- an autodoc directive (``.. autoclass:: lifecycle.Runner``, ``autofunction``, ``autodata``,
  ``autoexception``) naming it under that module, or
- for a name re-exported from another public module, a cross-reference showing this path and
  pointing at the documented one (``:class:`lifecycle.tables.Row <lifecycle.Row>```), which
  must be the same object;

and every public module an ``automodule`` or ``py:module`` entry. So a name added to an
``__all__`` (or a new public module) without a reference entry fails here, and so does an
entry whose name no longer exists. ``make docs`` then builds those entries with warnings as
errors.
"""

from __future__ import annotations

import ast
import importlib
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "lifecycle"
REFERENCE = ROOT / "docs" / "reference"

DIRECTIVE = re.compile(
    r"^\.\. (?:auto(?:module|class|function|data|exception|attribute|method)"
    r"|py:(?:module|class|function|data|exception|attribute|method))::\s+(?P<target>[\w.]+)\s*$",
    re.M,
)
MODULE_DIRECTIVE = re.compile(r"^\.\. (?:automodule|py:module)::\s+(?P<target>[\w.]+)\s*$", re.M)
ALIAS = re.compile(
    r":(?:py:)?(?:class|func|data|exc|obj|meth|attr):`(?P<shown>[\w.]+) <(?P<target>[\w.]+)>`"
)


def public_modules(package: Path = PACKAGE) -> list[str]:
    """Dotted names of the public modules, found on disk (nothing imported)."""
    found = []
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        if parts[-1] == "__main__" or any(p.startswith("_") for p in parts[1:]):
            continue
        found.append(".".join(parts))
    return found


def declared_all(module: str) -> list[str] | None:
    """A module's ``__all__``: read from the source when it is a literal, else imported."""
    spec = importlib.util.find_spec(module)
    assert spec is not None, module
    assert spec.origin is not None, module
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            assert isinstance(node, ast.Assign)
            try:
                return list(ast.literal_eval(node.value))
            except ValueError:
                return list(importlib.import_module(module).__all__)
    return None


def reference_text() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in sorted(REFERENCE.glob("*.rst")))


def entries(text: str) -> tuple[set[str], dict[str, str], set[str]]:
    """(documented targets, {shown alias: documented target}, documented modules)."""
    documented = {m["target"] for m in DIRECTIVE.finditer(text)}
    aliases = {m["shown"]: m["target"] for m in ALIAS.finditer(text)}
    modules = {m["target"] for m in MODULE_DIRECTIVE.finditer(text)}
    return documented, aliases, modules


def missing(module: str, names: Iterable[str], text: str) -> list[str]:
    """The names of ``module`` that have no reference entry in ``text``."""
    documented, aliases, _ = entries(text)
    return [n for n in names if f"{module}.{n}" not in documented | aliases.keys()]


def resolve(dotted: str) -> Any:
    """The object a dotted name names: the longest importable module, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


MODULES = public_modules()
TEXT = reference_text()
WITH_ALL = [m for m in MODULES if declared_all(m) is not None]


def test_the_walk_finds_the_public_modules_and_skips_private_ones() -> None:
    assert {"lifecycle", "lifecycle.tables", "lifecycle.testing", "lifecycle.adapters"} <= set(
        MODULES
    )
    assert {"lifecycle.emitters.kubernetes", "lifecycle.stores", "lifecycle.aio"} <= set(MODULES)
    assert {f"lifecycle.machines.{m}" for m in ("pod", "job", "restore")} <= set(MODULES)
    assert not [m for m in MODULES if "._" in m]
    assert len(WITH_ALL) >= 25


def test_every_public_module_has_a_reference_entry() -> None:
    _, _, modules = entries(TEXT)
    absent = [m for m in MODULES if m not in modules]
    assert not absent, f"add `.. automodule:: NAME` to a page in docs/reference/ for: {absent}"


@pytest.mark.parametrize("module", WITH_ALL)
def test_every_name_in_all_has_a_reference_entry(module: str) -> None:
    names = declared_all(module) or []
    assert names, module
    absent = missing(module, names, TEXT)
    assert not absent, (
        f"{module}: no entry in docs/reference/ for {absent}: add `.. autoclass:: {module}."
        f"{absent[0]}` (or autofunction/autodata/autoexception), or for a re-export a "
        f"cross-reference `:class:`{module}.{absent[0]} <documented.path>``"
    )


def test_every_entry_names_something_that_exists() -> None:
    documented, aliases, modules = entries(TEXT)
    assert len(documented) > 400
    gone = []
    for target in sorted(documented | modules | set(aliases.values())):
        try:
            resolve(target)
        except (ImportError, AttributeError):
            gone.append(target)
    assert not gone, f"docs/reference/ documents names that do not exist: {gone}"


def test_an_alias_shows_a_path_to_the_object_it_points_at() -> None:
    documented, aliases, _ = entries(TEXT)
    assert aliases
    for shown, target in aliases.items():
        assert target in documented, f"{shown} points at {target}, which has no directive"
        assert resolve(shown) is resolve(target), f"{shown} is not {target}"


def test_a_name_without_an_entry_is_reported() -> None:
    """The check is not vacuous: a name added to an ``__all__`` without an entry fails, and
    so does a re-export whose cross-reference is missing."""
    names = [*(declared_all("lifecycle.tables") or []), "Brand_New_Name"]
    assert missing("lifecycle.tables", names, TEXT) == ["Brand_New_Name"]
    text = TEXT.replace(":class:`lifecycle.tables.Row <lifecycle.Row>`", "")
    assert missing("lifecycle.tables", names, text) == ["Row", "Brand_New_Name"]
    assert missing("lifecycle", ["Runner"], TEXT.replace(".. autoclass:: lifecycle.Runner", ""))


def test_a_new_public_module_is_found(tmp_path: Path) -> None:
    pkg = tmp_path / "lifecycle"
    for path in ("__init__.py", "new.py", "_private.py", "sub/__init__.py", "_x/inner.py"):
        (pkg / path).parent.mkdir(parents=True, exist_ok=True)
        (pkg / path).write_text("", encoding="utf-8")
    assert public_modules(pkg) == ["lifecycle", "lifecycle.new", "lifecycle.sub"]


def test_the_site_is_built_with_warnings_as_errors_here_and_on_read_the_docs() -> None:
    """``make docs`` and Read the Docs build the same site the same way: its own environment
    (the package with every extra, and the ``docs`` dependency group), warnings as errors."""
    import tomllib

    import yaml  # type: ignore[import-untyped]

    groups = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))[
        "dependency-groups"
    ]
    assert any(req.startswith("sphinx") for req in groups["docs"])
    assert any(req.startswith("myst-parser") for req in groups["docs"])
    rtd = yaml.safe_load((ROOT / ".readthedocs.yaml").read_text(encoding="utf-8"))
    assert rtd["sphinx"] == {"configuration": "docs/conf.py", "fail_on_warning": True}
    assert any("--group docs" in step for step in rtd["build"]["jobs"]["install"])
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    docs = re.search(r"^docs: .*\n((?:\t.*\n)+)", makefile, re.M)
    assert docs is not None
    assert re.search(r"sphinx-build -W .*docs docs/_build/html", docs[1])
    assert "--group docs" in makefile


# -- the reference names no private module (issue 35) ---------------------------------------
#: A dotted name with a private part under ``lifecycle`` (``lifecycle._protocol``,
#: ``lifecycle.stores._k8s_record``), or a role pointing at one (``:mod:`._batch```).
PRIVATE_NAME = re.compile(r"\blifecycle(?:\.\w+)*\._\w+|:\w+:`~?\.?_[a-z]\w*")


def documented_docstrings() -> Iterable[tuple[str, str]]:
    """(where, docstring) for everything the reference pages show: each public module's
    docstring, each name of its ``__all__``, and the public members of those classes."""
    seen: set[int] = set()

    def of(obj: Any, where: str, members: bool) -> Iterable[tuple[str, str]]:
        if id(obj) in seen:
            return
        seen.add(id(obj))
        doc = getattr(obj, "__doc__", None)
        if isinstance(doc, str):
            yield where, doc
        if members and isinstance(obj, type):
            for name, member in vars(obj).items():
                if name.startswith("_") and name != "__init__":
                    continue
                if isinstance(member, staticmethod | classmethod):
                    member = member.__func__
                if isinstance(member, property):
                    member = member.fget
                if callable(member) or member is not None:
                    yield from of(member, f"{where}.{name}", False)

    for module in MODULES:
        imported = importlib.import_module(module)
        yield from of(imported, module, False)
        for name in declared_all(module) or []:
            yield from of(getattr(imported, name), f"{module}.{name}", True)


def private_names(docs: Iterable[tuple[str, str]]) -> list[str]:
    return [f"{where}: {m[0]}" for where, doc in docs for m in PRIVATE_NAME.finditer(doc)]


def test_no_reference_entry_names_a_private_module() -> None:
    """A reader of the reference meets only names they can import: a docstring pointing at
    ``lifecycle._protocol`` sends them to a module that is not part of the API."""
    assert private_names(documented_docstrings()) == []


def test_a_private_name_in_a_docstring_is_found() -> None:
    docs = [
        ("a", "decided in :mod:`lifecycle._protocol` and ``lifecycle.stores._k8s_record``"),
        ("b", "see :class:`._batch.Driver`"),
        ("c", "a public :class:`lifecycle.Runner` and ``lifecycle.stores.Store``; _private"),
    ]
    assert private_names(docs) == [
        "a: lifecycle._protocol",
        "a: lifecycle.stores._k8s_record",
        "b: :class:`._batch",
    ]
