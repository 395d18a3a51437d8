"""``lifecycle check [MACHINE | GROUP | MODULE:NAME | FILE.py:NAME]``: the table analysis.

Without an argument every registered machine and every shipped linked group is checked. A
reference (:mod:`lifecycle.cli.targets`, the same in every command) may also name a
:class:`~lifecycle.analysis.LinkedGroup`.

Exit codes: 0 no findings (or every one allowed), 1 findings, 2 bad input (an unknown machine,
a module that cannot be imported, a name that is not a machine, an unreadable allowances file).
"""

from __future__ import annotations

import argparse
import json
from typing import Any, TextIO

from .._core.errors import UnknownMachine, preview
from .._core.machine import Machine
from ..analysis import LinkedGroup, Report, check_group, check_machine, load_allowances
from ..machines import default_registry
from .targets import load_reference, machines_named

Target = Machine[Any] | LinkedGroup


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
    found = load_reference(name, "check")
    if isinstance(found, LinkedGroup):
        return [found]
    return list(machines_named(found, name, "check"))
