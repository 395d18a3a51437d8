"""Sphinx configuration of the documentation site (ADR 0120).

Build it with ``make docs`` (warnings are errors). The site is this folder: the guides
(``guides/``), the API reference from the docstrings (``reference/``, autodoc), the generated
machine pages (``machines/``, ``lifecycle docs``), the ADRs (``adr/``) and the upstream notes
(``upstream/``), all Markdown read by MyST except the reference pages (reStructuredText, the
language of the docstrings).
"""

from __future__ import annotations

import argparse
import ast
import enum
import functools
import importlib.util
import os
import re
import sys
from pathlib import Path
from typing import Any

import attrs
from docutils import nodes
from sphinx.pycode import ModuleAnalyzer
from sphinx.util.docstrings import prepare_docstring
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import make_refnode

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from lifecycle import __version__  # noqa: E402

project = "lifecycle"
author = "the lifecycle authors"
copyright = "the lifecycle authors"
release = __version__
version = ".".join(__version__.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "myst_parser",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "**/.ipynb_checkpoints"]

# -- MyST: the Markdown pages ---------------------------------------------------------------
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
# The machine pages show their diagrams as SVG files drawn by `lifecycle docs` (ADR 0137): the
# site loads nothing from another host and needs no script to show a diagram.

# -- autodoc: the reference -----------------------------------------------------------------
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_typehints_format = "short"
autodoc_preserve_defaults = True
add_module_names = False
python_use_unqualified_type_names = True

# -- napoleon: the docstrings' Args:/Returns:/Raises: sections (ADR 0161) ------------------
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_ivar = True  # a record's Attributes: as fields, not entries that clash with autodoc's
napoleon_use_rtype = False
# the entries' own words, not types read from annotations (they name private modules)
napoleon_attr_annotations = False

# -- HTML -----------------------------------------------------------------------------------
html_theme = "furo"
html_title = f"lifecycle {release}"
html_static_path: list[str] = ["_static"]
#: the machine diagrams at their own size, scrolled sideways when wider than the page
html_css_files = ["lifecycle.css"]


# -- local behaviour ------------------------------------------------------------------------
# Three small hooks, so the pages read as they do on GitHub and the reference shows what the
# source says.

_FOLDER_LINK = re.compile(r"\]\((?P<path>[^)\s#]+/)\)")


def _folder_links(app: Any, docname: str, source: list[str]) -> None:
    """A Markdown link to a folder (``[notes](../upstream/)``) opens its README, as GitHub
    shows it; MyST would otherwise find no document there."""
    if app.env.doc2path(docname).suffix != ".md":
        return
    here = Path(app.env.doc2path(docname)).parent

    def to_readme(m: re.Match[str]) -> str:
        path = m["path"]
        if (here / path / "README.md").is_file():
            return f"]({path}README.md)"
        return m[0]

    source[0] = _FOLDER_LINK.sub(to_readme, source[0])


@functools.cache
def _imported_from(module: str) -> dict[str, str]:
    """``{name: the module it was imported from}`` for a module's ``from X import name``."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        return {}
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    package = module if spec.origin.endswith("__init__.py") else module.rpartition(".")[0]
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = importlib.util.resolve_name("." * node.level + (node.module or ""), package)
            for alias in node.names:
                found[alias.asname or alias.name] = base
    return found


def _comment_doc(module: str, name: str, seen: int = 0) -> list[str]:
    """The ``#:`` comment of ``name`` where it is defined, following re-exports."""
    try:
        docs = ModuleAnalyzer.for_module(module).find_attr_docs()
    except Exception:
        return []
    if ("", name) in docs:
        return list(docs[("", name)])
    origin = _imported_from(module).get(name)
    if origin is None or seen > 5:
        return []
    return _comment_doc(origin, name, seen + 1)


def _trimmed(lines: list[str]) -> list[str]:
    return [line.rstrip() for line in lines if line.strip()]


def _data_docs(app: Any, what: str, name: str, obj: Any, options: Any, lines: list[str]) -> None:
    """A constant re-exported from a private module keeps the ``#:`` comment written where it
    is defined; an instance never shows its class's docstring as its own."""
    text = _trimmed(lines)
    if len(text) == 1 and re.fullmatch(r"Alias for field number \d+", text[0].strip()):
        lines.clear()  # a named tuple's field: its type says it, the class's docstring the rest
        return
    if what not in ("data", "attribute"):
        return
    own = type(obj).__doc__
    if isinstance(own, str) and _trimmed(lines) == _trimmed(prepare_docstring(own)):
        lines.clear()
    if what == "data" and not any(line.strip() for line in lines):
        module, _, attr = name.rpartition(".")
        lines[:] = _comment_doc(module, attr)


class LifecycleHelp(SphinxDirective):
    """``.. lifecycle-help::``: the ``--help`` text of ``lifecycle`` and of every subcommand,
    from the parser itself (:func:`lifecycle.cli.build_parser`), so the page never goes stale.
    """

    has_content = False

    def run(self) -> list[nodes.Node]:
        from lifecycle.cli import build_parser

        os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal's width
        found: list[nodes.Node] = []

        def walk(parser: argparse.ArgumentParser, path: list[str]) -> None:
            command = " ".join(path)
            found.append(nodes.rubric(text=command, ids=[nodes.make_id(f"cli {command}")]))
            text = parser.format_help()
            found.append(nodes.literal_block(text, text, language="text"))
            for action in parser._actions:
                if isinstance(action, argparse._SubParsersAction):
                    for name, sub in action.choices.items():
                        walk(sub, [*path, name])

        walk(build_parser(), ["lifecycle"])
        return found


def _documented_as(app: Any, env: Any, node: Any, contnode: Any) -> Any:
    """A reference to a name the library re-exports (``lifecycle.stores.Store``) resolves to
    the entry of the same object (``lifecycle.Store``): one object, one entry."""
    if node.get("refdomain") != "py":
        return None
    target = node.get("reftarget", "")
    if not target.startswith("lifecycle."):
        return None
    try:
        obj = _resolve(target)
    except (ImportError, AttributeError):
        return None
    domain = env.get_domain("py")
    for name, entry in domain.objects.items():
        if entry.aliased or not name.startswith("lifecycle."):
            continue
        try:
            same = _resolve(name) is obj
        except (ImportError, AttributeError):
            continue
        if same and not isinstance(obj, str | int | float | tuple):
            return make_refnode(
                app.builder, node["refdoc"], entry.docname, entry.node_id, contnode, name
            )
    return None


@functools.cache
def _resolve(dotted: str) -> Any:
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


_ATTRS_DEFAULT = re.compile(r"attr_dict\['(?P<field>\w+)'\]\.default")


def _attrs_defaults(
    app: Any, what: str, name: str, obj: Any, options: Any, signature: str | None, ret: str | None
) -> tuple[str | None, str | None] | None:
    """An attrs class's generated ``__init__`` reads its defaults as ``attr_dict['x'].default``
    (what ``autodoc_preserve_defaults`` then shows): show the default itself, a factory as the
    call that makes it (``RestorePolicy()``) and an enum member by name (``EventType.WARNING``).
    Each is Python, so Sphinx parses the signature and shows its types by their short, linked
    names; a repr such as ``<factory>`` made it print the signature raw, private module paths
    included (issue 35)."""
    if not signature or not isinstance(obj, type) or not attrs.has(obj):
        return None
    fields = attrs.fields_dict(obj)

    def shown(m: re.Match[str]) -> str:
        field = fields.get(m["field"])
        if field is None:
            return m[0]
        return _default_of(field)

    def made(m: re.Match[str]) -> str:  # ``x: T = NOTHING``: a factory autodoc could not read
        field = fields.get(m["field"])
        return m[0] if field is None else f"{m['head']}= {_default_of(field)}"

    signature = _ATTRS_DEFAULT.sub(shown, signature)
    signature = _NOTHING.sub(made, signature).replace("= NOTHING", "= factory()")
    return signature, ret


_NOTHING = re.compile(r"(?P<head>\b(?P<field>\w+)(?::[^=,]*(?:\[[^\]]*\][^=,]*)?)?\s*)= NOTHING")


def _default_of(field: Any) -> str:
    """A field's default as Python: the call that makes it, an enum member, or its repr."""
    default = field.default
    if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
        made = getattr(default.factory, "__name__", "")
        return f"{made if made.isidentifier() else 'factory'}()"
    if isinstance(default, enum.Enum):
        return f"{type(default).__name__}.{default.name}"
    return repr(default)


#: Folders whose README is the parent of every other page there in the navigation: the ~80 ADRs
#: sit under one sidebar entry, their index, instead of filling the sidebar (issue 35).
NESTED_UNDER_README = ("adr", "upstream")


def _nested_pages(app: Any, docname: str, source: list[str]) -> None:
    """Give such a README a hidden toctree of its folder's pages, at build time only, so the
    README reads on GitHub as written."""
    folder, _, name = docname.rpartition("/")
    if name == "README" and folder in NESTED_UNDER_README:
        source[0] += "\n\n```{toctree}\n:hidden:\n:glob:\n\n*\n```\n"


def setup(app: Any) -> dict[str, Any]:
    app.connect("autodoc-process-signature", _attrs_defaults)
    app.connect("missing-reference", _documented_as)
    app.add_directive("lifecycle-help", LifecycleHelp)
    app.connect("source-read", _folder_links)
    app.connect("source-read", _nested_pages)
    app.connect("autodoc-process-docstring", _data_docs)
    return {"parallel_read_safe": True}


#: Every cross-reference to the library must resolve (a guide naming a function that does not
#: exist fails the build); names outside it (the standard library, attrs, typing) are not
#: checked, as the build reaches no other project's inventory.
#: Private names (a module or name starting with ``_``) and type variables are not documented.
nitpicky = True
nitpick_ignore_regex = [
    (r"py:.*", r"(?!lifecycle\.).*"),
    (r"py:.*", r"lifecycle(\.\w+)*\._\w.*"),
    (r"py:.*", r"lifecycle(\.\w+)*\.[A-Z]\w{0,3}T?"),
]
