"""Machine references, one way for every command (``check``, ``table``, ``diagram``,
``db check|upgrade --machines``, ``replay --compare-with``).

A reference is a shipped machine's name (``pod``) or ``MODULE:NAME`` / ``FILE.py:NAME``: the
module is imported from the current directory first (as ``python -m`` does), a file is
loaded from its path; ``NAME`` (dotted for an attribute of an attribute) may be a Machine
instance or subclass, a :class:`~lifecycle.MachineRegistry`, a mapping or list of machines,
or a function returning any of these. Anything else is refused with
:class:`~lifecycle.UnknownMachine` (exit 2), naming what was wrong.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._core.errors import MissingExtra, UnknownMachine, brief, extra_of, preview

if TYPE_CHECKING:
    from .._core.machine import Machine
    from ..machines import MachineRegistry

__all__ = [
    "REFERENCE_HELP",
    "is_reference",
    "load_reference",
    "machine_named",
    "machines_named",
    "registry_named",
]

#: How every option that takes a reference describes it.
REFERENCE_HELP = (
    "MODULE:NAME or FILE.py:NAME: a machine (class or instance), a MachineRegistry, a "
    "mapping or list of machines, or a function returning one"
)


def is_reference(text: str) -> bool:
    """Whether ``text`` is ``MODULE:NAME`` / ``FILE.py:NAME`` rather than a machine's name."""
    return ":" in text


def load_reference(spec: str, option: str) -> Any:
    """The object ``spec`` (``MODULE:NAME`` or ``FILE.py:NAME``) names; ``option`` (such as
    ``--machines``) starts every message."""
    where, sep, name = spec.rpartition(":")
    if not sep or not where or not name:
        raise UnknownMachine(f"{option} {preview(spec)}: expected MODULE:NAME or FILE.py:NAME")
    module = _module(where, option)
    found: Any = module
    for part in name.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise UnknownMachine(
                f"{option} {preview(spec)}: {preview(where)} has no {preview(name)}"
            ) from None
    return found


def _module(where: str, option: str) -> Any:
    try:
        if where.endswith(".py") or "/" in where or "\\" in where:
            path = Path(where)
            if not path.is_file():
                raise UnknownMachine(f"{option} {preview(where)}: no such file")
            inside = _package_of(path)
            if inside is not None:  # a module of a package: its relative imports work
                try:
                    return _package_module(path, *inside)
                except ModuleNotFoundError as e:  # the package itself is another one's name
                    if not e.name or not inside[1].startswith(e.name):
                        raise
            module_name = f"_lifecycle_user_{path.stem}"
            spec = importlib.util.spec_from_file_location(module_name, path)
            if spec is None or spec.loader is None:
                raise UnknownMachine(f"{option} {preview(where)}: cannot load it as Python")
            module = importlib.util.module_from_spec(spec)
            sys.modules[module_name] = module  # attrs resolves postponed annotations there
            spec.loader.exec_module(module)
            return module
        if "" not in sys.path and str(Path.cwd()) not in sys.path:
            sys.path.insert(0, str(Path.cwd()))  # as `python -m` does
        return importlib.import_module(where)
    except UnknownMachine:
        raise
    except BaseException as e:  # a user module: anything at all may fail as it imports
        if isinstance(e, KeyboardInterrupt | SystemExit):
            raise
        if isinstance(e, ImportError) and (
            isinstance(e, MissingExtra) or extra_of(e.name or "") is not None
        ):  # it imports what an extra of ours brings (hypothesis, prometheus_client): exit 4
            raise MissingExtra.of(e, f"{option} {preview(where)}") from None
        raise UnknownMachine(
            f"{option} {preview(where)}: cannot import it: {type(e).__name__}: {brief(e)}"
        ) from None


def _package_of(path: Path) -> tuple[Path, str] | None:
    """For a file inside a package (its folder has ``__init__.py``): the folder above the
    outermost package, and the file's dotted module name; else ``None``."""
    path = path.resolve()
    parts = [] if path.stem == "__init__" else [path.stem]
    folder = path.parent
    while (folder / "__init__.py").is_file():
        parts.insert(0, folder.name)
        folder = folder.parent
    if folder == path.parent:
        return None
    return folder, ".".join(parts)


def _package_module(path: Path, root: Path, dotted: str) -> Any:
    """The module ``dotted`` at ``path``, imported as a module of its package (so ``from .x
    import y`` works, as ``MODULE:NAME`` does). Where the package is already imported from
    another folder, the file is loaded beside that package's modules, under a name of its own."""
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    module = importlib.import_module(dotted)
    where = getattr(module, "__file__", None)
    if where is not None and Path(where).resolve() == path.resolve():
        return module
    parent = dotted.rpartition(".")[0] if path.stem != "__init__" else dotted
    name = f"{parent}._lifecycle_user_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UnknownMachine(f"{preview(str(path))}: cannot load it as Python")
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[name] = loaded
    spec.loader.exec_module(loaded)
    return loaded


def machines_named(found: Any, spec: str, option: str) -> list[Machine[Any]]:
    """The machines ``found`` (what ``spec`` named) stands for, in its order."""
    from .._core.machine import Machine
    from ..machines import MachineRegistry

    if callable(found) and not isinstance(found, type | Machine | Mapping):
        try:
            found = found()
        except Exception as e:
            raise UnknownMachine(
                f"{option} {preview(spec)}: calling it failed: {type(e).__name__}: {brief(e)}"
            ) from None
    if isinstance(found, type) and issubclass(found, Machine):
        try:
            return [found()]
        except Exception as e:
            raise UnknownMachine(
                f"{option} {preview(spec)}: the machine cannot be made: "
                f"{type(e).__name__}: {brief(e)}"
            ) from None
    if isinstance(found, Machine):
        return [found]
    if isinstance(found, MachineRegistry | Mapping):
        items: Any = found.values()
    else:
        items = found
    try:
        machines = list(items) if not isinstance(items, str | bytes) else []
    except TypeError:
        machines = []
    if not machines or not all(isinstance(m, Machine) for m in machines):
        raise UnknownMachine(
            f"{option} {preview(spec)} names no machines: it is a {type(found).__name__} "
            f"(expected {REFERENCE_HELP})"
        )
    return machines


def registry_named(spec: str | None, option: str) -> MachineRegistry:
    """The registry ``spec`` names (``None``: the shipped machines)."""
    from ..machines import MachineRegistry, default_registry

    if spec is None:
        return default_registry()
    found = load_reference(spec, option)
    if isinstance(found, MachineRegistry):
        return found
    try:
        return MachineRegistry(machines_named(found, spec, option))
    except ValueError as e:  # two machines of one name or kind
        raise UnknownMachine(f"{option} {preview(spec)}: {e}") from None


def machine_named(spec: str, option: str = "machine") -> list[Machine[Any]]:
    """What a command's MACHINE argument names: a shipped machine's name, or a reference
    (every machine it names)."""
    from ..machines import default_registry

    if not is_reference(spec):
        return [default_registry()[spec]]
    return machines_named(load_reference(spec, option), spec, option)
