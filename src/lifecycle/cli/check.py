"""``lifecycle check [MACHINE | GROUP | module:Class | path.py:Class]``: the table analysis.

Without an argument every registered machine and every shipped linked group is checked. A
``module:Class`` is imported from the current directory first (as ``python -m`` would), a
``path/to/file.py:Class`` is loaded from that file; either may name a Machine subclass, a
Machine instance or a :class:`~lifecycle.analysis.LinkedGroup`.

Exit codes: 0 no findings (or every one allowed), 1 findings, 2 bad input (an unknown machine,
a module that cannot be imported, a name that is not a machine, an unreadable allowances file).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any, TextIO

from .._core.errors import UnknownMachine, brief, preview
from .._core.machine import Machine
from ..analysis import LinkedGroup, Report, check_group, check_machine, load_allowances
from ..machines import default_registry

Target = Machine[Any] | LinkedGroup
DESCRIPTION = """Analyse transition tables (ADR 0085). Without a target: every registered machine
and every shipped linked group. A target is a machine or group name, module:Class (imported
from the current directory first) or path/to/file.py:Class: a Machine subclass or instance,
or a LinkedGroup.

exit codes: 0 no findings (or every one allowed), 1 findings, 2 bad input (an unknown
machine, a module that cannot be imported, a name that is not a machine, an unreadable
allowances file)"""


def add_check_command(sub: Any) -> None:
    """Register ``check`` on the CLI's subparsers."""
    ck = sub.add_parser(
        "check",
        help="analyse transition tables: unreachable states, dead rows, stuck states, "
        "pairs that raise, linked objects that wait forever (exit 1 on findings)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ck.add_argument(
        "target",
        nargs="?",
        help="a machine or linked group name, module:Class or path.py:Class (default: all)",
    )
    ck.add_argument("--format", choices=("text", "json"), default="text")
    ck.add_argument(
        "--allow",
        metavar="FILE",
        help='allowances: a JSON object {"machine": {"finding key": "reason"}}',
    )
    ck.set_defaults(func=cmd_check)


def cmd_check(args: argparse.Namespace, out: TextIO) -> int:
    extra = load_allowances(args.allow) if args.allow else {}
    reports = [_report(t, extra) for t in resolve(args.target)]
    failed = [r for r in reports if not r.ok]
    findings = sum(len(r.findings) for r in reports)
    allowed = sum(len(r.allowed) for r in reports)
    if args.format == "json":
        data = {
            "ok": not failed,
            "findings": findings,
            "allowed": allowed,
            "reports": [r.as_dict() for r in reports],
        }
        out.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    else:
        for r in reports:
            out.write(r.text() + "\n")
        out.write(
            f"lifecycle check: {len(reports)} checked, {findings} finding(s) in {len(failed)}, "
            f"{allowed} allowed\n"
        )
    return 1 if failed else 0


def _report(target: Target, extra: dict[str, dict[str, str]]) -> Report:
    if isinstance(target, LinkedGroup):
        return check_group(target, extra.get(target.name))
    return check_machine(target, extra.get(target.name))


def resolve(name: str | None) -> list[Target]:
    """The machines and groups ``name`` means (all of them when ``None``)."""
    from ..analysis import shipped_groups

    registry = default_registry()
    groups = {g.name: g for g in shipped_groups()}
    if name is None:
        return [*registry.values(), *groups.values()]
    if name in groups:
        return [groups[name]]
    if ":" not in name:
        if name in set(registry):
            return [registry[name]]
        known = ", ".join([*registry, *groups])
        raise UnknownMachine(
            f"unknown machine {preview(name)}; known: {known} (or module:Class, path.py:Class)"
        )
    where, _, attr = name.rpartition(":")
    module = _load(where)
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise UnknownMachine(f"{preview(where)} has no {preview(attr)}") from None
    return [_as_target(obj, name)]


def _load(where: str) -> Any:
    try:
        if where.endswith(".py") or "/" in where or "\\" in where:
            path = Path(where)
            if not path.is_file():
                raise UnknownMachine(f"no such file: {preview(where)}")
            spec = importlib.util.spec_from_file_location(f"_lifecycle_check_{path.stem}", path)
            if spec is None or spec.loader is None:
                raise UnknownMachine(f"cannot load {preview(where)} as a Python module")
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module  # attrs resolves its annotations through it
            spec.loader.exec_module(module)
            return module
        if "" not in sys.path and str(Path.cwd()) not in sys.path:
            sys.path.insert(0, str(Path.cwd()))  # as `python -m` does
        return importlib.import_module(where)
    except UnknownMachine:
        raise
    except BaseException as e:  # a user module: anything at all may fail as it imports
        if isinstance(e, KeyboardInterrupt):
            raise
        raise UnknownMachine(
            f"cannot import {preview(where)}: {type(e).__name__}: {brief(e)}"
        ) from None


def _as_target(obj: Any, name: str) -> Target:
    if isinstance(obj, Machine | LinkedGroup):
        return obj
    if isinstance(obj, type) and issubclass(obj, Machine):
        try:
            machine: Machine[Any] = obj()
        except Exception as e:
            raise UnknownMachine(
                f"{preview(name)}: the machine cannot be made: {type(e).__name__}: {brief(e)}"
            ) from None
        return machine
    raise UnknownMachine(
        f"{preview(name)} is a {type(obj).__name__}, not a Machine (a subclass or an instance)"
    )
