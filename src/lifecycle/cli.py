"""``lifecycle``: replay traces and describe machines.

    lifecycle replay TRACE [--store URL] [--format table|jsonl] [--final-status]
    lifecycle machines [--format text|json]

Exit codes: 0 ok, 2 bad input (``FILE:LINE: what is wrong`` on stderr), 1 anything else.
"""

from __future__ import annotations

import argparse
import json
import sys
import types
import typing
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

import attrs
import structlog

from ._core.errors import LifecycleError, StoreError, TraceError
from ._core.machine import Machine
from ._core.refs import EventType
from ._core.transition import Transition
from .machines import MachineRegistry, default_registry
from .runner import Result
from .stores import MemoryStore, open_store
from .stores.base import Store
from .trace import TraceLine, check, read_trace, replay


class _Collector:
    def __init__(self) -> None:
        self.events: list[Transition] = []

    def emit(self, transition: Transition) -> None:
        self.events.append(transition)


def _show(state: str) -> str:
    return state or "∅"


def _table_line(t: Transition) -> str:
    flip = f"{_show(t.source)} → {_show(t.target)}"
    if t.condition:
        flip = f"{t.condition}: {flip}"
    if t.fallback:
        flip = f"(not written) {flip}"
    obj = f"{t.ref.kind}/{t.ref.namespace + '/' if t.ref.namespace else ''}{t.ref.name}"
    return (
        f"{t.at.strftime('%H:%M:%S')}  {obj:<30} {flip:<30} {t.type.value:<7} "
        f"{t.reason:<28} {t.message}"
    )


def _final_statuses(
    store: Store, machines: MachineRegistry, results: list[Result], out: TextIO
) -> None:
    seen: dict[str, Any] = {}

    def visit(result: Result) -> None:
        seen.setdefault(result.ref.uid, result.ref)
        for sub in result.cascade:
            visit(sub)

    for r in results:
        visit(r)
    for ref in seen.values():
        machine = machines.for_kind(ref.kind)
        record = store.load(machine, ref)
        status = machine.initial(ref) if record is None else record.status
        line = {
            "final": True,
            "machine": machine.name,
            "namespace": ref.namespace,
            "name": ref.name,
            "uid": ref.uid,
            "state": status.state,
            "version": 0 if record is None else record.version,
            "status": machine.dump_status(status),
        }
        out.write(json.dumps(line) + "\n")


def _new_sqlite_file(url: str) -> bool:
    """Whether ``url`` names an SQLite file that does not exist yet."""
    if not url.startswith("sqlite:///"):
        return False
    path = url[len("sqlite:///") :]
    return bool(path) and not Path(path).exists()


def cmd_replay(args: argparse.Namespace, out: TextIO) -> int:
    machines = default_registry()
    trace: list[TraceLine] = read_trace(args.trace, machines)
    if _new_sqlite_file(args.store):
        # Refuse a bad trace before opening (and so creating) a new store file.
        check(trace, MemoryStore(), name=args.trace, machines=machines)
    store = open_store(args.store)
    collector = _Collector()
    header = [f"replaying {args.trace} ({len(trace)} lines) into {args.store}\n"]

    def start() -> None:
        # The header is written once the dry run passed: a refused trace prints nothing.
        if header and args.format == "table":
            out.write(header.pop())

    def show(_: TraceLine, result: Result | None) -> None:
        start()
        if result is None:
            return
        for t in result.all_transitions():
            if args.format == "table":
                out.write(_table_line(t) + "\n")
            else:
                out.write(json.dumps(t.as_dict()) + "\n")

    try:
        results = replay(
            trace, store, [collector], name=args.trace, machines=machines, on_result=show
        )
        start()
        if args.final_status:
            _final_statuses(store, machines, results, out)
        elif args.format == "table":
            failed = sum(1 for r in results if r.error is not None)
            out.write(
                f"{len(results)} observations, {len(collector.events)} events, "
                f"{failed} failed writes\n"
            )
    finally:
        store.close()
    return 0


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
        "fallback_reasons": [
            f"{reason}StatusUpdateFailed"
            for reason, types in reasons.items()
            if EventType.WARNING.value in types
        ],
    }


def cmd_machines(args: argparse.Namespace, out: TextIO) -> int:
    machines = default_registry()
    described = [describe(m) for m in machines.values()]
    if args.format == "json":
        out.write(json.dumps(described, indent=2) + "\n")
        return 0
    for d in described:
        out.write(f"{d['name']} ({d['kind']})\n")
        out.write(f"  states:   {', '.join(_show(s) for s in d['states'])}\n")
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lifecycle", description="Replay provider traces and describe lifecycle machines."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    rp = sub.add_parser("replay", help="replay a JSON Lines trace and print the event timeline")
    rp.add_argument("trace", help="path to a .jsonl trace")
    rp.add_argument("--store", default="memory://", help="memory:// (default) or sqlite:///PATH")
    rp.add_argument("--format", choices=("table", "jsonl"), default="table")
    rp.add_argument(
        "--final-status",
        action="store_true",
        help="after the events, print each object's final stored status",
    )
    rp.set_defaults(func=cmd_replay)
    mp = sub.add_parser("machines", help="list machines, states, observations and reasons")
    mp.add_argument("--format", choices=("text", "json"), default="text")
    mp.set_defaults(func=cmd_machines)
    return parser


@contextmanager
def _logs_to_stderr() -> Iterator[None]:
    """Send the library's structlog lines to stderr while a command runs, so ``--format
    jsonl`` output stays parseable; the previous configuration is restored afterwards."""
    previous = structlog.get_config() if structlog.is_configured() else None
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    try:
        yield
    finally:
        if previous is None:
            structlog.reset_defaults()
        else:
            structlog.configure(**previous)


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run the CLI; ``out`` receives normal output (stdout by default), errors go to stderr."""
    parser = build_parser()
    args = parser.parse_args(argv)
    stream = out if out is not None else sys.stdout
    try:
        with _logs_to_stderr():
            code: int = args.func(args, stream)
    except TraceError as e:
        print(str(e), file=sys.stderr)
        return 2
    except StoreError as e:
        print(f"lifecycle: {e}", file=sys.stderr)
        return 2
    except LifecycleError as e:
        print(f"lifecycle: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    return code


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
