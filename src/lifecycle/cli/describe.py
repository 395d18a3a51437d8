"""``lifecycle machines | table | diagram | docs``: what the machines are, from their tables."""

from __future__ import annotations

import argparse
import json
import types
import typing
from typing import Any, TextIO

import attrs

from .._core.machine import Machine
from .._core.transition import EMPTY
from ..machines import default_registry
from .common import EXIT_MISSING_EXTRA, say


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
    machines = default_registry()
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
    machine = default_registry()[args.machine]
    try:
        from .._diagram import diagram

        out.write(diagram(machine, args.format, stays=args.stays))
    except ImportError as e:  # transitions (or graphviz for DOT) is not installed
        return _missing_extra("diagrams", e)
    return 0


def _missing_extra(extra: str, error: ImportError) -> int:
    """A command that needs an optional extra: say which, and how to get it (exit 4)."""
    say(
        f"lifecycle: this needs the '{extra}' extra ({error}): "
        f"pip install 'lifecycle-machines[{extra}]'"
    )
    return EXIT_MISSING_EXTRA


def cmd_table(args: argparse.Namespace, out: TextIO) -> int:
    from ..docs import table_markdown

    out.write(table_markdown(default_registry()[args.machine]))
    return 0


def cmd_docs(args: argparse.Namespace, out: TextIO) -> int:
    from ..docs import run

    try:
        return run(args.out, args.check, out)
    except ImportError as e:  # the pages' diagrams need transitions
        return _missing_extra("diagrams", e)


def _add_docs_commands(sub: Any) -> None:
    names = ", ".join(default_registry())
    dp = sub.add_parser(
        "diagram", help="draw a machine's table (Mermaid or DOT source, via transitions)"
    )
    dp.add_argument("machine", help=f"one of: {names}")
    dp.add_argument("--format", choices=("mermaid", "dot"), default="mermaid")
    dp.add_argument(
        "--stays", action="store_true", help="also draw rows that keep the state (self-loops)"
    )
    dp.set_defaults(func=cmd_diagram)
    tp = sub.add_parser("table", help="print a machine's transition table as Markdown")
    tp.add_argument("machine", help=f"one of: {names}")
    tp.set_defaults(func=cmd_table)
    gp = sub.add_parser("docs", help="generate docs/machines/<machine>.md for every machine")
    gp.add_argument("--out", default="docs/machines", help="folder (default docs/machines)")
    gp.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page is stale")
    gp.set_defaults(func=cmd_docs)
