"""The command line of ``lifecycle``: every command, option and exit code, in one place.

Building the parser imports no command: each command is named by its module and function
and imported when it runs (ADR 0118), so ``lifecycle --help`` and a command that needs one
machine pay for nothing else. Every option has help text (``tests/test_cli_conventions.py``
walks these parsers and fails on one without).
"""

from __future__ import annotations

import argparse
import importlib
import re
from collections.abc import Callable
from typing import Any, TextIO

from .._store_urls import store_help
from .._version import __version__
from ..machines import SHIPPED
from .common import EXIT_CODES, REPLAY_EXIT_CODES

__all__ = ["STORE_HELP", "Command", "build_parser", "later"]

Command = Callable[[argparse.Namespace, TextIO], int]

#: ``--store``: what a store URL may be (every parameter the stores read: made from their
#: tables).
STORE_HELP = store_help()
#: The largest trace line ``replay`` reads by default (``lifecycle.trace.MAX_LINE_BYTES``,
#: spelled out so that the parser does not import the trace reader; a test keeps them equal).
MAX_LINE_BYTES = 1 << 20
#: ``db check`` fails past this many undelivered outbox rows, or when the oldest is older
#: (seconds): ``--max-undelivered``, ``--max-undelivered-age``.
MAX_UNDELIVERED = 10_000
MAX_UNDELIVERED_AGE = 3600.0
#: The shipped machines' names, read from the registry (``lifecycle.machines.SHIPPED``, which
#: imports no machine).
SHIPPED_NAMES = ", ".join(entry[0] for entry in SHIPPED)
MACHINE_HELP = (
    f"a shipped machine ({SHIPPED_NAMES}), or MODULE:NAME or FILE.py:NAME: a machine "
    "(class or instance), a MachineRegistry, a mapping or list of machines, or a function "
    "returning one"
)
MACHINES_HELP = (
    "the machines to judge records by: MODULE:NAME or FILE.py:NAME (a machine, a "
    "MachineRegistry, a mapping or list of machines, or a function returning one; default: "
    "the shipped ones)"
)
CHECK_DESCRIPTION = """Analyse transition tables (ADR 0085). Without a target: every registered
machine and every shipped linked group. A target is a machine or group name, MODULE:NAME
(imported from the current directory first) or FILE.py:NAME: a machine (class or instance),
a MachineRegistry, a mapping or list of machines, a function returning one, or a LinkedGroup.

exit codes: 0 no findings (or every one allowed), 1 findings, 2 bad input (an unknown
machine, a module that cannot be imported, a name that is not a machine, an unreadable
allowances file), 70 an internal error, 130 interrupted"""


def later(module: str, function: str) -> Command:
    """The command ``lifecycle.cli.<module>.<function>``, imported when it runs."""

    def command(args: argparse.Namespace, out: TextIO) -> int:
        run: Command = getattr(importlib.import_module(f"lifecycle.cli.{module}"), function)
        return run(args, out)

    command.__qualname__ = command.__name__ = f"{module}.{function}"
    return command


def _positive_int(text: str) -> int:
    from .._core.errors import preview

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {preview(text)}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lifecycle",
        description="Replay provider traces and describe lifecycle machines.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"lifecycle {__version__}",
        help="print the version and exit",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_replay(sub)
    _add_describe(sub)
    _add_db(sub)
    _add_check(sub)
    _add_manifests(sub)
    restore = sub.add_parser(
        "restore",
        help="offline tools of the Restore compatibility gate",
        description="Offline tools of the Restore compatibility gate.",
    )
    restore_sub = restore.add_subparsers(dest="restore_command", required=True, metavar="TOOL")
    check = restore_sub.add_parser(
        "check",
        add_help=False,
        help="check a snapshot manifest against a target's facts "
        "(exit 0 compatible, 1 incompatible, 3 unknown, 2 bad input)",
    )
    check.add_argument(
        "rest", nargs=argparse.REMAINDER, help="MANIFEST TARGET [options]: see its --help"
    )
    check.set_defaults(func=later("__init__", "cmd_restore_check"))
    return parser


def _add_replay(sub: Any) -> None:
    rp = sub.add_parser(
        "replay",
        help="replay a JSON Lines trace and print the event timeline",
        description="Replay a JSON Lines trace: validate every line, dry-run it against the "
        "store, then write it and print the events.",
        epilog=REPLAY_EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    rp.add_argument("trace", help="path to a .jsonl trace, or - for standard input")
    rp.add_argument("--store", default="memory://", help=f"{STORE_HELP} (default memory://)")
    rp.add_argument(
        "--format",
        choices=("table", "jsonl"),
        default="table",
        help="table: a timeline for people (the default); jsonl: one JSON object per event",
    )
    rp.add_argument(
        "--final-status",
        action="store_true",
        help="after the events, print each object's final stored status",
    )
    rp.add_argument(
        "--max-line-bytes",
        type=_positive_int,
        default=MAX_LINE_BYTES,
        metavar="N",
        help=f"refuse a trace line longer than N bytes of UTF-8 (default {MAX_LINE_BYTES})",
    )
    rp.add_argument(
        "--as-kubernetes-events",
        action="store_true",
        help="instead of the event timeline, the Event objects the Kubernetes emitter would "
        "leave (correlated on the trace's clock, series counts settled), as kubectl get "
        "events shows them; no API server is needed",
    )
    golden = rp.add_mutually_exclusive_group()
    golden.add_argument(
        "--expect",
        metavar="GOLDEN.jsonl",
        help="compare the events (and with --final-status the final statuses) with this file; "
        "exit 1 with a unified diff when they differ",
    )
    golden.add_argument(
        "--compare-with",
        metavar="MODULE:REGISTRY",
        help="replay the trace under the shipped tables and under these (MODULE:NAME or "
        "FILE.py:NAME: a MachineRegistry, a machine, a list of machines, or a function "
        "returning one) and show where the events differ; exit 1 when they do",
    )
    rp.add_argument(
        "--machines",
        metavar="REFERENCE",
        default=None,
        help="the machines the trace's objects are of: MODULE:NAME or FILE.py:NAME, as db "
        "check takes it (default: the shipped ones)",
    )
    rp.add_argument(
        "--update",
        action="store_true",
        help="with --expect: write the replay's lines to the file instead of comparing",
    )
    rp.add_argument(
        "--metrics",
        metavar="FILE",
        help="write the replay's metrics to FILE in the Prometheus text format (extra "
        "prometheus); - for standard error",
    )
    rp.set_defaults(func=later("replay", "cmd_replay"))


def _add_describe(sub: Any) -> None:
    mp = sub.add_parser("machines", help="list machines, states, observations and reasons")
    mp.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="text for people (the default), json for programs",
    )
    mp.add_argument(
        "--machines",
        metavar="REFERENCE",
        default=None,
        help="the machines to list: MODULE:NAME or FILE.py:NAME, as db check takes it "
        "(default: the shipped ones)",
    )
    mp.set_defaults(func=later("describe", "cmd_machines"))
    dp = sub.add_parser(
        "diagram", help="draw a machine's table (Mermaid or DOT source, or an SVG drawing)"
    )
    dp.add_argument("machine", help=MACHINE_HELP + " (one machine)")
    dp.add_argument(
        "--format",
        choices=("mermaid", "dot", "svg"),
        default="mermaid",
        help="Mermaid stateDiagram-v2 (the default), Graphviz DOT source, or an SVG drawing "
        "laid out by the library itself (what the machine pages show; needs no extra)",
    )
    dp.add_argument(
        "--stays", action="store_true", help="also draw rows that keep the state (self-loops)"
    )
    dp.set_defaults(func=later("describe", "cmd_diagram"))
    tp = sub.add_parser("table", help="print a machine's transition table as Markdown")
    tp.add_argument("machine", help=MACHINE_HELP + " (several: one table each)")
    tp.set_defaults(func=later("describe", "cmd_table"))
    gp = sub.add_parser("docs", help="generate docs/machines/<machine>.md for every machine")
    gp.add_argument("--out", default="docs/machines", help="folder (default docs/machines)")
    gp.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page is stale")
    gp.add_argument(
        "--machines",
        metavar="REFERENCE",
        default=None,
        help="the machines to document: MODULE:NAME or FILE.py:NAME, as db check takes it "
        "(default: the shipped ones)",
    )
    gp.set_defaults(func=later("describe", "cmd_docs"))


def _add_db(sub: Any) -> None:
    db = sub.add_parser(
        "db",
        help="create or upgrade a store's schema; check, compact and upgrade its records",
        description="A store's schema, records and journals (see lifecycle db COMMAND --help).",
    )
    dbs = db.add_subparsers(dest="db_command", required=True, metavar="COMMAND")
    mg = dbs.add_parser("migrate", help="create or upgrade the store's tables (idempotent)")
    mg.add_argument("--store", required=True, help=STORE_HELP)
    mg.set_defaults(func=later("db", "cmd_migrate"))
    st = dbs.add_parser(
        "status",
        help="the schema version, read only (exit 1 if not current or missing, 2 if not a store)",
    )
    st.add_argument("--store", required=True, help=STORE_HELP)
    st.set_defaults(func=later("db", "cmd_status"))
    cp = dbs.add_parser("compact", help="drop old journal entries behind a snapshot")
    cp.add_argument("--store", required=True, help=STORE_HELP)
    cp.add_argument("--keep", type=int, default=100, help="entries kept per object (100)")
    cp.add_argument("--machine", action="append", default=[], help="only this machine (repeatable)")
    cp.set_defaults(func=later("db", "cmd_compact"))
    ck = dbs.add_parser(
        "check",
        help="records' schema versions, journals folding to statuses, and a PostgreSQL "
        "store's history: epochs (failovers) and lost acknowledged writes (exit 1 if any)",
    )
    ck.add_argument("--store", required=True, help=STORE_HELP)
    ck.add_argument("--sample", type=int, default=None, help="fold N objects per machine")
    ck.add_argument(
        "--acknowledge",
        action="store_true",
        help="record the history shown (epochs, PostgreSQL's lost writes) as reviewed; later "
        "checks pass until it changes again",
    )
    ck.add_argument("--machines", metavar="REFERENCE", default=None, help=MACHINES_HELP)
    ck.add_argument(
        "--max-undelivered",
        type=int,
        default=MAX_UNDELIVERED,
        help=f"a finding past this many undelivered outbox rows ({MAX_UNDELIVERED})",
    )
    ck.add_argument(
        "--max-undelivered-age",
        type=float,
        default=MAX_UNDELIVERED_AGE,
        metavar="SECONDS",
        help=f"a finding when the oldest undelivered row is older ({MAX_UNDELIVERED_AGE:g} s)",
    )
    ck.set_defaults(func=later("db", "cmd_check"))
    up = dbs.add_parser(
        "upgrade",
        help="rewrite records below their machine's schema version, in batches (resumable)",
    )
    up.add_argument("--store", required=True, help=STORE_HELP)
    up.add_argument("--batch", type=int, default=500, help="records per transaction (500)")
    up.add_argument("--machines", metavar="REFERENCE", default=None, help=MACHINES_HELP)
    up.add_argument("--machine", action="append", default=[], help="only this machine (repeatable)")
    up.set_defaults(func=later("db", "cmd_upgrade"))
    fd = dbs.add_parser(
        "find",
        help="objects of a machine by state and time in state, oldest first "
        "(with --older-than: exit 1 if any)",
    )
    fd.add_argument("--store", required=True, help=STORE_HELP)
    fd.add_argument(
        "--machine",
        default=None,
        help="only this machine's objects (default: every machine that has --state)",
    )
    fd.add_argument("--state", default=None, help="only objects in this state")
    fd.add_argument(
        "--older-than",
        type=age_seconds,
        default=None,
        metavar="AGE",
        help="only objects in their state for longer: 90, 90s, 15m, 2h, 1d or 1h30m",
    )
    fd.add_argument("--limit", type=int, default=100, help="at most this many (100)")
    fd.add_argument("--format", choices=("table", "json"), default="table", help="output (table)")
    fd.add_argument("--machines", metavar="REFERENCE", default=None, help=MACHINES_HELP)
    fd.set_defaults(func=later("db", "cmd_find"))


_AGE = re.compile(r"(?:(\d+(?:\.\d+)?)([smhd]))+|\d+(?:\.\d+)?")
_AGE_PART = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def age_seconds(text: str) -> float:
    """``--older-than``: seconds, or a duration such as ``15m`` or ``1h30m`` (not negative)."""
    if not _AGE.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an age: write seconds or a duration such as 90s, 15m, 2h, 1d"
        )
    if text[-1].isdigit():
        return float(text)
    return sum(float(n) * _UNIT[unit] for n, unit in _AGE_PART.findall(text))


def _add_check(sub: Any) -> None:
    ck = sub.add_parser(
        "check",
        help="analyse transition tables: unreachable states, dead rows, stuck states, "
        "pairs that raise, linked objects that wait forever (exit 1 on findings)",
        description=CHECK_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ck.add_argument(
        "target",
        nargs="?",
        help="a machine or linked group name, MODULE:NAME or FILE.py:NAME (default: all)",
    )
    ck.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="text for people (the default), json for programs",
    )
    ck.add_argument(
        "--allow",
        metavar="FILE",
        help='allowances: a JSON object {"machine": {"finding key": "reason"}}',
    )
    ck.set_defaults(func=later("check", "cmd_check"))


def _add_manifests(sub: Any) -> None:
    mf = sub.add_parser(
        "manifests",
        help="write the CRDs, RBAC and Deployment a controller of the machines needs (YAML)",
    )
    mf.add_argument("machine", nargs="+", help=MACHINE_HELP + " (several: one set of manifests)")
    mf.add_argument("--namespace", default="default", help="the controller's namespace")
    mf.add_argument(
        "--name", default="lifecycle", help="the ServiceAccount, roles and Deployment's name"
    )
    mf.add_argument("--image", default=None, help="the controller's image")
    mf.add_argument("-o", "--out", metavar="DIR", default=None, help="write one file each into DIR")
    mf.set_defaults(func=later("manifests", "cmd_manifests"))
