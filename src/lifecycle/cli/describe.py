"""``lifecycle machines | table | diagram | docs``: what the machines are, from their tables."""

from __future__ import annotations

import argparse
import json
import types
import typing
from typing import Any, TextIO

import attrs

from .._core.errors import MissingExtra, UnknownMachine, preview
from .._core.machine import Machine
from .._core.transition import EMPTY
from .common import EXIT_MISSING_EXTRA, say
from .targets import machine_named, registry_named


def _type_name(tp: Any) -> str:
    """``str``, ``int | None``, ``datetime | None``: a field type as a trace author writes it."""
    args = typing.get_args(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in args)
    if tp is type(None):
        return "None"
    if args:
        return f"{_type_name(typing.get_origin(tp))}[{', '.join(_type_name(a) for a in args)}]"
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def describe(machine: Machine[Any]) -> dict[str, Any]:
    """A machine's vocabulary: states, observations with their fields, reasons with types."""
    observations: dict[str, dict[str, str]] = {}
    required: dict[str, list[str]] = {}
    for name, cls in machine.vocabulary.items():
        attrs.resolve_types(cls)
        fields = [f for f in attrs.fields(cls) if f.name != "at" and f.init]
        observations[name] = {f.name: _type_name(f.type) for f in fields}
        required[name] = [f.name for f in fields if f.default is attrs.NOTHING]
    reasons: dict[str, list[str]] = {}
    for row in machine.table.rows:
        if row.event is not None and row.reason:
            types = reasons.setdefault(row.reason, [])
            if row.event.value not in types:
                types.append(row.event.value)
    return {
        "name": machine.name,
        "kind": machine.kind,
        "states": list(machine.table.states),
        "initial": machine.table.initial,
        "terminal": sorted(machine.table.terminal),
        "observations": observations,
        "required": required,
        "reasons": {reason: sorted(types) for reason, types in reasons.items()},
        "fallback_reasons": list(machine.table.fallback_reasons),
    }


def cmd_machines(args: argparse.Namespace, out: TextIO) -> int:
    machines = registry_named(getattr(args, "machines", None), "--machines")
    described = [describe(m) for m in machines.values()]
    if args.format == "json":
        out.write(json.dumps(described, indent=2) + "\n")
        return 0
    for d in described:
        out.write(f"{d['name']} ({d['kind']})\n")
        out.write(f"  states:   {', '.join(s or EMPTY for s in d['states'])}\n")
        out.write(f"  terminal: {', '.join(d['terminal'])}\n")
        out.write("  observations ([optional] fields):\n")
        for name, fields in d["observations"].items():
            needed = d["required"][name]
            shown = ", ".join(
                f"{k}: {v}" if k in needed else f"[{k}: {v}]" for k, v in fields.items()
            )
            out.write(f"    {name}({shown})\n")
        out.write("  reasons:\n")
        for reason, kinds in d["reasons"].items():
            out.write(f"    {reason} ({', '.join(kinds)})\n")
        if d["fallback_reasons"]:
            out.write(f"  fallback reasons: {', '.join(d['fallback_reasons'])}\n")
    return 0


def cmd_diagram(args: argparse.Namespace, out: TextIO) -> int:
    found = machine_named(args.machine)
    if len(found) != 1:
        names = ", ".join(m.name for m in found)
        raise UnknownMachine(
            f"{preview(args.machine)} names {len(found)} machines ({names}): a diagram draws "
            "one; name one of them"
        )
    [machine] = found
    if args.format == "svg":  # laid out here: no extra needed (ADR 0137)
        from .._svg import svg

        out.write(svg(machine, stays=args.stays))
        return 0
    try:
        from .._diagram import diagram

        out.write(diagram(machine, args.format, stays=args.stays))
    except ImportError as e:  # transitions (or graphviz for DOT) is not installed
        return _missing_extra(e, "lifecycle diagram")
    return 0


def _missing_extra(error: ImportError, needs: str) -> int:
    """A command that needs the ``diagrams`` extra: say so once, with its pip command (exit
    4)."""
    say(f"lifecycle: {MissingExtra.of(error, needs, 'diagrams')}")
    return EXIT_MISSING_EXTRA


def cmd_table(args: argparse.Namespace, out: TextIO) -> int:
    """The table as Markdown; a reference to several machines prints each under its name."""
    from ..docs import table_markdown

    found = machine_named(args.machine)
    for n, machine in enumerate(found):
        if len(found) > 1:
            out.write(f"{chr(10) if n else ''}## {machine.name} ({machine.kind})\n\n")
        out.write(table_markdown(machine))
    return 0


def cmd_docs(args: argparse.Namespace, out: TextIO) -> int:
    from ..docs import run

    machines = registry_named(getattr(args, "machines", None), "--machines")
    # the pages' SVG drawings need no extra (ADR 0137)
    return run(args.out, args.check, out, list(machines.values()))
