"""The peers, with their versions named: ``transitions``, ``python-statemachine`` (the installed
3.x and, side by side in the same process, 2.6), and ``eventsourcing``'s application.

python-statemachine 2.6 costs a fraction of 3.x per event, and the project's pin allows both,
so both are measured and the faster is the peer. 2.6 is fetched once with ``pip download``
into ``benchmarks/out/peers`` (ignored by git) and imported under its own module table: the
two versions' modules are swapped in ``sys.modules`` around each chunk, outside the timing.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PEERS = ROOT / "benchmarks" / "out" / "peers"
STATEMACHINE_OLD = "2.6.0"


def version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


class ModuleSet:
    """One version of a top-level package, installable into ``sys.modules`` on demand."""

    def __init__(self, name: str, modules: dict[str, Any], version: str) -> None:
        self.name = name
        self.modules = modules
        self.version = version

    @contextlib.contextmanager
    def active(self) -> Iterator[Any]:
        saved = _take(self.name)
        sys.modules.update(self.modules)
        try:
            yield self.modules[self.name]
        finally:
            _take(self.name)
            sys.modules.update(saved)


def _take(name: str) -> dict[str, Any]:
    found = {k: v for k, v in sys.modules.items() if k == name or k.startswith(name + ".")}
    for k in found:
        del sys.modules[k]
    return found


def statemachine_versions() -> tuple[list[ModuleSet], str]:
    """The python-statemachine versions to measure (installed first), and a note on what
    could not be had."""
    installed = importlib.import_module("statemachine")
    current = ModuleSet("statemachine", _take("statemachine"), version("python-statemachine"))
    sys.modules.update(current.modules)
    assert installed is current.modules["statemachine"]
    if current.version.startswith("2."):
        return [current], ""
    folder = PEERS / f"python-statemachine-{STATEMACHINE_OLD}"
    try:
        if not (folder / "statemachine" / "__init__.py").exists():
            folder.mkdir(parents=True, exist_ok=True)
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                 "--only-binary=:all:", "-d", str(folder),
                 f"python-statemachine=={STATEMACHINE_OLD}"],
                check=True, capture_output=True, timeout=120,
            )  # fmt: skip
            wheel = next(folder.glob("*.whl"))
            with zipfile.ZipFile(wheel) as z:
                z.extractall(folder)
    except (subprocess.SubprocessError, OSError, StopIteration) as e:
        return [current], f"python-statemachine {STATEMACHINE_OLD} unavailable ({e!r})"
    saved = _take("statemachine")
    sys.path.insert(0, str(folder))
    try:
        importlib.import_module("statemachine")
        old = ModuleSet("statemachine", _take("statemachine"), STATEMACHINE_OLD)
    finally:
        sys.path.remove(str(folder))
        sys.modules.update(saved)
    return [current, old], ""


# -- eventsourcing's application: an aggregate per object, load / command / save -------------
_BENCH_AGGREGATE: Any = None


def _aggregate() -> Any:
    """``Bench``: an eventsourcing aggregate with one command, ``observe(event)``, that moves
    its state along the bench table (defined once: the library registers it by topic)."""
    global _BENCH_AGGREGATE
    if _BENCH_AGGREGATE is None:
        from eventsourcing.domain import Aggregate, event

        from .workload import EDGES

        table = {(s, e): d for s, e, d, _ in EDGES}

        class Bench(Aggregate):
            def __init__(self) -> None:
                self.state = "New"

            @event("Observed")
            def observed(self, state: str) -> None:
                self.state = state

            def observe(self, name: str) -> None:
                target = table[(self.state, name)]
                if target != self.state:
                    self.observed(target)

        _BENCH_AGGREGATE = Bench
    return _BENCH_AGGREGATE


def eventsourcing_app(persistence: str, path: Path | None = None) -> tuple[Any, Any]:
    """An ``eventsourcing`` application (``popo`` in memory, or ``sqlite`` at ``path`` with
    SQLite's default ``synchronous=FULL``), and its aggregate class."""
    from eventsourcing.application import Application

    env = {"PERSISTENCE_MODULE": "eventsourcing.popo"}
    if persistence == "sqlite":
        assert path is not None
        env = {"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": str(path)}
    return Application(env=env), _aggregate()


def eventsourcing_steps(app: Any, aggregate: Any) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """``new(first_event)``: create an aggregate, apply its first command, save (one new
    object); ``update(id, event)``: load it, apply the command, save (an update)."""

    def new(name: str) -> Any:
        a = aggregate()
        a.observe(name)
        app.save(a)
        return a.id

    def update(ident: Any, name: str) -> None:
        a = app.repository.get(ident)
        a.observe(name)
        app.save(a)

    return new, update
