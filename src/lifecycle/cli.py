"""``lifecycle``: replay traces and describe machines.

    lifecycle replay TRACE [--store URL] [--format table|jsonl] [--final-status]
    lifecycle machines [--format text|json]

Exit codes: 0 ok, 2 bad input (``FILE:LINE: what is wrong`` on stderr), 1 anything else.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO

import attrs

from ._core.errors import LifecycleError, StoreError, TraceError
from ._core.machine import Machine
from ._core.serde import dump
from ._core.transition import Transition
from .machines import MachineRegistry, default_registry
from .runner import Result
from .stores import open_store
from .stores.base import Store
from .trace import TraceLine, read_trace, replay


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
            "status": dump(status),
        }
        out.write(json.dumps(line) + "\n")


def cmd_replay(args: argparse.Namespace, out: TextIO) -> int:
    machines = default_registry()
    trace: list[TraceLine] = read_trace(args.trace, machines)
    store = open_store(args.store)
    collector = _Collector()
    try:
        if args.format == "table":
            out.write(f"replaying {args.trace} ({len(trace)} lines) into {args.store}\n")

            def show(_: TraceLine, result: Result | None) -> None:
                if result is None:
                    return
                for t in result.all_transitions():
                    out.write(_table_line(t) + "\n")
        else:

            def show(_: TraceLine, result: Result | None) -> None:
                if result is None:
                    return
                for t in result.all_transitions():
                    out.write(json.dumps(t.as_dict()) + "\n")

        results = replay(
            trace, store, [collector], name=args.trace, machines=machines, on_result=show
        )
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
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def describe(machine: Machine[Any]) -> dict[str, Any]:
    """A machine's vocabulary: states, observations with their fields, reasons with types."""
    observations = {}
    for name, cls in machine.vocabulary.items():
        attrs.resolve_types(cls)
        observations[name] = {
            f.name: _type_name(f.type) for f in attrs.fields(cls) if f.name != "at"
        }
    reasons: dict[str, str] = {}
    for row in machine.table.rows:
        if row.event is not None and row.reason:
            reasons.setdefault(row.reason, row.event.value)
    return {
        "name": machine.name,
        "kind": machine.kind,
        "states": list(machine.table.states),
        "initial": machine.table.initial,
        "terminal": sorted(machine.table.terminal),
        "observations": observations,
        "reasons": reasons,
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
        out.write("  observations:\n")
        for name, fields in d["observations"].items():
            shown = ", ".join(f"{k}: {v}" for k, v in fields.items())
            out.write(f"    {name}({shown})\n")
        out.write("  reasons:\n")
        for reason, kind in d["reasons"].items():
            out.write(f"    {reason} ({kind})\n")
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


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    stream = out if out is not None else sys.stdout
    try:
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
