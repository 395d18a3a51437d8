"""The core install: what works with no extra, and what says which extra it needs.

Run by the interpreter under test (``make core-check`` runs it in a clean virtualenv holding
the wheel and no extra; ``tests/test_core_install.py`` runs it with ``--block``, the optional
SDKs made unimportable in the development environment):

    python scripts/core_check.py imports [--block]
        every public module of the installed ``lifecycle``: it imports, or (only those in
        NEEDS_AT_IMPORT) raises MissingExtra naming its extra, in one line with its pip
        command once
    python scripts/core_check.py readme WORKDIR [--block] [--extras-only]
        every command of the README's sh blocks that runs the library (``lifecycle ...``,
        ``python examples/...``, the example scripts), in order, in WORKDIR (a copy of
        ``examples/`` is made there): exit 0 unless README_EXTRAS names the extra it needs,
        then exit 4 and one line on stderr naming the extra, its pip command once (an exit
        code the README declares, ``<!-- output: exit N -->``, is the one expected)

The policy, per public module (ADR 0136): a module whose every use needs the SDK (the
PostgreSQL stores, the Prometheus and OpenTelemetry telemetries) raises
:class:`lifecycle.MissingExtra` when imported; every other one imports with no extra and
raises ``MissingExtra`` where its SDK is needed: the Kubernetes emitter and store when an API
client is built, the Modal and AWS adapters when built without an SDK or a client factory of
the host's, diagrams when drawn, each name of ``lifecycle.testing`` when used (its ``fakes``
need no extra; ADR 0151).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.abc
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

#: The public modules that need an extra to be imported at all, and which.
NEEDS_AT_IMPORT: dict[str, str] = {
    "lifecycle.stores.postgres": "postgres",
    "lifecycle.stores.postgres_async": "postgres",
    "lifecycle.telemetry.otel": "otel",
    "lifecycle.telemetry.prometheus": "prometheus",
}

#: The public modules that import with no extra but each of whose names (``__all__``) needs
#: one, and which: using a name raises MissingExtra naming it (``lifecycle.testing`` imports
#: so that ``lifecycle.testing.fakes``, which needs none, can be imported; ADR 0151).
NEEDS_AT_USE: dict[str, str] = {
    "lifecycle.testing": "testing",
}

#: README commands (by their first words) that need an extra, and which: on the core install
#: each exits 4 naming it.
README_EXTRAS: dict[str, str] = {
    "lifecycle diagram certification": "diagrams",
    "lifecycle diagram restore --format dot": "diagrams",
    "lifecycle check examples/quickstart_property_test.py:DoorMachine": "testing",
    "lifecycle replay examples/traces/faults.jsonl --metrics": "prometheus",
}

#: README commands not run here, and why.
README_SKIPPED: dict[str, str] = {
    "make ": "builds a virtualenv with every extra",
    ". ": "activates that virtualenv",
    "pytest ": "the property-test quick-start is the testing extra's (Hypothesis, pytest)",
    "grep ": "reads the output of --metrics (the prometheus extra)",
    "python examples/operating_metrics.py": "an example of the prometheus extra: it imports "
    "prometheus_client itself",
}

#: The SDKs an extra brings that the library imports (``lifecycle._core.errors.EXTRAS``
#: names the same; ``tests/test_core_install.py`` holds them together): ``--block`` makes
#: them unimportable; on the core install none of them may be found.
BLOCKED = (
    "modal",
    "boto3",
    "botocore",
    "kubernetes",
    "urllib3",
    "psycopg",
    "psycopg_pool",
    "transitions",
    "graphviz",
    "hypothesis",
    "prometheus_client",
    "opentelemetry",
)


class Unimportable(importlib.abc.MetaPathFinder):
    """Makes the optional SDKs unimportable, as on an install without extras."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


def block() -> None:
    """From here on, importing an optional SDK fails (and none is imported yet)."""
    for name in [m for m in sys.modules if m.split(".")[0] in BLOCKED]:
        del sys.modules[name]
    sys.meta_path.insert(0, Unimportable())


def public_modules(package: ModuleType) -> list[str]:
    """Dotted names of the package's public modules, found on disk (nothing imported): no
    part of the name after ``lifecycle`` starts with ``_``."""
    base = Path(next(iter(package.__path__)))
    found = []
    for path in sorted(base.rglob("*.py")):
        parts = ["lifecycle", *path.relative_to(base).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        if any(p.startswith("_") for p in parts[1:]):
            continue
        found.append(".".join(parts))
    return found


def one_line_naming(text: str, extra: str) -> str | None:
    """Why ``text`` is not one line naming ``extra`` and its pip command once (``None``: it
    is)."""
    install = f"pip install 'lifecycle-machines[{extra}]'"
    if len(text.strip().splitlines()) != 1:
        return f"{len(text.strip().splitlines())} lines, not one: {text!r}"
    if f"'{extra}' extra" not in text or text.count(install) != 1:
        return f"does not name the {extra!r} extra and {install!r} once: {text!r}"
    if text.count("pip install") != 1:
        return f"more than one pip command: {text!r}"
    return None


def import_problems(block_sdks: bool) -> list[str]:
    """Every public module that neither imports nor raises MissingExtra as declared (and,
    on a core install, every optional SDK that is there all the same)."""
    if block_sdks:
        block()
    import lifecycle

    problems = (
        []
        if block_sdks
        else [
            f"{sdk} is installed: this is not a core install"
            for sdk in BLOCKED
            if importlib.util.find_spec(sdk) is not None
        ]
    )
    for name in public_modules(lifecycle):
        extra = NEEDS_AT_IMPORT.get(name)
        try:
            importlib.import_module(name)
        except ImportError as e:
            if extra is None:
                problems.append(f"{name}: needs no extra, yet: {type(e).__name__}: {e}")
            elif type(e).__name__ != "MissingExtra" or getattr(e, "extra", None) != extra:
                problems.append(f"{name}: not MissingExtra({extra!r}): {type(e).__name__}: {e}")
            elif (why := one_line_naming(str(e), extra)) is not None:
                problems.append(f"{name}: {why}")
        except Exception as e:
            problems.append(f"{name}: {type(e).__name__}: {e}")
        else:
            if extra is not None and block_sdks:
                problems.append(f"{name}: imported without the {extra!r} extra's SDK")
            if name in NEEDS_AT_USE:
                problems += use_problems(name, NEEDS_AT_USE[name])
    return problems


def use_problems(name: str, extra: str) -> list[str]:
    """Each name of module ``name`` that does not raise MissingExtra naming ``extra`` when
    used (the SDK missing)."""
    module = sys.modules[name]
    problems = []
    for attr in module.__all__:
        try:
            getattr(module, attr)
        except ImportError as e:
            if type(e).__name__ != "MissingExtra" or getattr(e, "extra", None) != extra:
                problems.append(f"{name}.{attr}: not MissingExtra({extra!r}): {e}")
            elif (why := one_line_naming(str(e), extra)) is not None:
                problems.append(f"{name}.{attr}: {why}")
        else:
            problems.append(f"{name}.{attr}: used without the {extra!r} extra's SDK")
    return problems


def readme_commands(readme: str) -> list[tuple[str, int]]:
    """The README's shell commands, in order, as ``scripts/newcomer.py`` reads them, each
    with the exit code the README declares for it (0 unless an ``<!-- output: exit N -->``
    follows its block); an example block is ``bash PATH``."""
    if str(ROOT) not in sys.path:  # run as a script: scripts/ is a directory beside src/
        sys.path.insert(0, str(ROOT))
    from scripts.newcomer import _BLOCK, declared_outputs

    outputs = declared_outputs(readme)
    commands = []
    for block in _BLOCK.finditer(readme):
        if block["path"]:
            commands.append((f"bash {block['path']}", 0))
            continue
        lines = [line.split("  #", 1)[0].strip() for line in block["body"].splitlines()]
        lines = [line for line in lines if line and not line.startswith("#")]
        declared = outputs.get(block.end())
        for n, command in enumerate(lines):
            last = n == len(lines) - 1
            commands.append((command, declared[0] if declared and last else 0))
    return commands


def _declared(command: str, table: dict[str, str]) -> str | None:
    return next((key for key in table if command.startswith(key)), None)


def readme_problems(work: Path, block_sdks: bool, extras_only: bool = False) -> list[str]:
    """Run the README's commands in ``work`` (see the module's notes; ``extras_only``: only
    those that need an extra); what went wrong."""
    commands = readme_commands((ROOT / "README.md").read_text(encoding="utf-8"))
    problems = [
        f"{key!r} is declared, but no README command starts with it"
        for key in [*README_EXTRAS, *README_SKIPPED]
        if not any(c.startswith(key) for c, _ in commands)
    ]
    shutil.copytree(ROOT / "examples", work / "examples", dirs_exist_ok=True)
    # `lifecycle docs --check` compares the pages it would write with these
    shutil.copytree(ROOT / "docs" / "machines", work / "docs" / "machines", dirs_exist_ok=True)
    (work / ".demo").mkdir(exist_ok=True)
    if block_sdks:  # this interpreter, the SDKs blocked in every command it runs
        prefix = [sys.executable, str(Path(__file__).resolve()), "--run", "--block"]
        run_lifecycle, run_python = [*prefix, "lifecycle"], prefix
        bin_dir = _shims(work, run_lifecycle, run_python)
    else:  # the virtualenv under test: its own `lifecycle` command and interpreter
        bin_dir = Path(sys.executable).parent
        run_lifecycle, run_python = [str(bin_dir / "lifecycle")], [sys.executable]
    # an example script calls `lifecycle` and `python`: the same ones
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    for command, code in commands:
        if _declared(command, README_SKIPPED) is not None:
            continue
        extra_key = _declared(command, README_EXTRAS)
        if extras_only and extra_key is None:
            continue
        words = shlex.split(command)
        if words[0] == "lifecycle":
            argv = [*run_lifecycle, *words[1:]]
        elif words[0] == "python":
            argv = [*run_python, *words[1:]]
        elif words[0] == "bash":
            (work / "operator").mkdir(exist_ok=True)
            argv = ["bash", *words[1:], str(work / "operator")]
        else:
            problems.append(f"{command!r}: neither run nor skipped (README_SKIPPED says why)")
            continue
        done = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True)
        if extra_key is None:
            if done.returncode != code:
                problems.append(
                    f"{command!r}: exit {done.returncode}, not {code}: {done.stderr[-2000:]}"
                )
            continue
        extra = README_EXTRAS[extra_key]
        if done.returncode != 4:
            problems.append(f"{command!r}: exit {done.returncode}, not 4: {done.stderr[-2000:]}")
        elif (why := one_line_naming(done.stderr, extra)) is not None:
            problems.append(f"{command!r}: {why}")
    return problems


def _shims(work: Path, run_lifecycle: list[str], run_python: list[str]) -> Path:
    """``lifecycle`` and ``python`` commands in ``work/bin`` that run as given."""
    bin_dir = work / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, head in (("lifecycle", run_lifecycle), ("python", run_python)):
        shim = bin_dir / name
        shim.write_text(f'#!/bin/sh\nexec {shlex.join(head)} "$@"\n')
        shim.chmod(0o755)
    return bin_dir


def _run(argv: Sequence[str]) -> int:
    """``--run [--block] lifecycle ARGS`` or ``--run [--block] SCRIPT ARGS``: one command
    of the README, with the SDKs blocked when asked."""
    argv = list(argv)
    if argv[:1] == ["--block"]:
        block()
        argv = argv[1:]
    if argv[0] == "lifecycle":
        from lifecycle.cli import main

        return main(argv[1:])
    import runpy

    sys.argv = argv
    sys.path.insert(0, str(Path(argv[0]).resolve().parent))
    runpy.run_path(argv[0], run_name="__main__")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--run"]:
        return _run(args[1:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("imports", "readme"))
    parser.add_argument("work", nargs="?", type=Path, help="readme: the directory to run in")
    parser.add_argument("--block", action="store_true", help="make the optional SDKs unimportable")
    parser.add_argument(
        "--extras-only", action="store_true", help="readme: only the commands that need an extra"
    )
    options = parser.parse_args(args)
    if options.what == "imports":
        problems = import_problems(options.block)
    elif options.work is None:
        parser.error("readme needs WORKDIR")
    else:
        problems = readme_problems(options.work, options.block, options.extras_only)
    for problem in problems:
        print(problem, file=sys.stderr)
    print(f"core {options.what}: {'ok' if not problems else f'{len(problems)} problems'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
