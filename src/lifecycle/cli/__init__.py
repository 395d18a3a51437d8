"""``lifecycle``: replay traces and describe machines.

    lifecycle replay TRACE [--store URL] [--format table|jsonl] [--final-status]
                           [--max-line-bytes N] [--as-kubernetes-events]
                           [--expect GOLDEN.jsonl [--update] | --compare-with MODULE:REGISTRY]
    lifecycle machines [--format text|json]
    lifecycle diagram MACHINE [--format mermaid|dot] [--stays]
    lifecycle table MACHINE
    lifecycle docs [--out DIR] [--check]
    lifecycle db migrate|status|compact --store URL
    lifecycle check [MACHINE | module:Class] [--format text|json] [--allow FILE]
    lifecycle restore check MANIFEST TARGET   (its own exit codes: see its --help)

Exit codes:

0  done.
1  the answer is no, or the command could not run: ``docs --check`` found a stale page, ``db
   status`` found a store not at this release's schema, ``replay --expect`` or ``replay
   --compare-with`` found events that differ (a unified diff on stdout), or an internal error
   (a bug: one line ``lifecycle: internal error: ...``; set ``LIFECYCLE_DEBUG=1`` for its
   traceback).
2  refused input, nothing written: a bad trace line (``FILE:LINE: what is wrong``), a bad store
   URL, a file that is not a store, a bad argument. Always one line on stderr.
3  ``replay`` only: every line was accepted, but a status write failed that no fault line of
   the trace injected (the store refused it). The other lines were replayed and their events
   delivered; the summary counts the failed writes.
4  a command needs an extra that is not installed (``diagram`` and ``docs`` need
   ``lifecycle-machines[diagrams]``); the message names the extra.

Every message that echoes what was given (a store URL, a trace value) is redacted first: a
password or token in it is never printed.
"""

from __future__ import annotations

import argparse
import os
import sys
import typing
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TextIO

from .._core.errors import LifecycleError, TraceError, preview
from .._log import logs_to
from .._version import __version__
from ..trace import MAX_LINE_BYTES
from .check import add_check_command
from .common import (
    EXIT_MISSING_EXTRA,
    EXIT_NO,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_WRITE_FAILED,
    say,
)
from .db import STORE_HELP, add_db_commands
from .describe import _add_docs_commands, cmd_machines
from .progress import Progress
from .replay import LOGS as _LOGS
from .replay import cmd_replay

__all__ = [
    "EXIT_MISSING_EXTRA",
    "EXIT_NO",
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_WRITE_FAILED",
    "Progress",
    "build_parser",
    "main",
]

EXIT_CODES = """exit codes:
  0  done
  1  the answer is no (docs --check: stale pages; db status: schema not current), or an
     internal error (set LIFECYCLE_DEBUG=1 for its traceback)
  2  refused input, nothing written: a bad trace line (FILE:LINE: what is wrong), a bad store
     URL, a file that is not a store, a bad argument; one line on stderr
  3  replay: a status write failed that no fault line injected (the other lines were replayed)
     (replay --expect / --compare-with: 1 when the events differ, with a unified diff)
  4  the command needs an extra that is not installed (diagram, docs: lifecycle-machines[diagrams])
  (lifecycle restore check has its own codes: see its --help)"""

REPLAY_EXIT_CODES = """exit codes:
  0  every line replayed, every write landed (or failed only where a fault line said so)
  2  refused input, nothing written: FILE:LINE: what is wrong (bad JSON, a repeated key, a
     line over --max-line-bytes, an unknown machine or observation, a bad value), a bad store
     URL, a file that is not a store
  3  every line was accepted, but a status write failed that no fault line injected (the
     store refused it); the other lines were replayed and their events delivered
  1  --expect / --compare-with: the events differ (a unified diff on stdout); or an
     internal error (a bug; set LIFECYCLE_DEBUG=1 for its traceback)"""


def _positive_int(text: str) -> int:
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
    parser.add_argument("--version", action="version", version=f"lifecycle {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    rp = sub.add_parser(
        "replay",
        help="replay a JSON Lines trace and print the event timeline",
        description="Replay a JSON Lines trace: validate every line, dry-run it against the "
        "store, then write it and print the events.",
        epilog=REPLAY_EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    rp.add_argument("trace", help="path to a .jsonl trace")
    rp.add_argument("--store", default="memory://", help=f"{STORE_HELP} (default memory://)")
    rp.add_argument("--format", choices=("table", "jsonl"), default="table")
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
        "FILE.py:NAME: a MachineRegistry, or a function returning one) and show where the "
        "events differ; exit 1 when they do",
    )
    rp.add_argument(
        "--update",
        action="store_true",
        help="with --expect: write the replay's lines to the file instead of comparing",
    )
    rp.set_defaults(func=cmd_replay)
    mp = sub.add_parser("machines", help="list machines, states, observations and reasons")
    mp.add_argument("--format", choices=("text", "json"), default="text")
    mp.set_defaults(func=cmd_machines)
    _add_docs_commands(sub)
    add_db_commands(sub)
    add_check_command(sub)
    restore = sub.add_parser("restore", help="offline tools of the Restore compatibility gate")
    restore_sub = restore.add_subparsers(dest="restore_command", required=True)
    check = restore_sub.add_parser(
        "check",
        add_help=False,
        help="check a snapshot manifest against a target's facts "
        "(exit 0 compatible, 1 incompatible, 3 unknown, 2 bad input)",
    )
    check.add_argument("rest", nargs=argparse.REMAINDER)
    check.set_defaults(func=cmd_restore_check)
    return parser


def cmd_restore_check(args: argparse.Namespace, out: TextIO) -> int:
    """``lifecycle restore check MANIFEST TARGET [...]``: the gate's verdict, offline."""
    from ..machines.restore import _offline as _restore_offline

    return _restore_offline.main(args.rest, out=out)


@contextmanager
def _logs_to_stderr() -> Iterator[None]:
    """The library's log records on stderr, one line each, while a command runs (WARNING and
    up; DEBUG with ``LIFECYCLE_DEBUG=1``), so ``--format jsonl`` stdout stays pure JSON; the
    ``lifecycle`` logger is restored afterwards (ADR 0098)."""
    debug = os.environ.get("LIFECYCLE_DEBUG", "") not in ("", "0")
    with logs_to(typing.cast(TextIO, _LOGS), debug=debug):
        yield


#: The stream of the library's log records (stderr; held back by a ``memory://`` replay).


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run the CLI; ``out`` receives normal output (stdout by default), errors go to stderr."""
    parser = build_parser()
    words = list(sys.argv[1:] if argv is None else argv)
    stream = out if out is not None else sys.stdout
    if words[:2] == ["restore", "check"]:  # its own parser, so its own --help too
        return cmd_restore_check(argparse.Namespace(rest=words[2:]), stream)
    args = parser.parse_args(words)
    try:
        with _logs_to_stderr():
            code: int = args.func(args, stream)
    except TraceError as e:
        say(str(e))
        return EXIT_REFUSED
    except LifecycleError as e:  # a StoreError, or any refusal of the library
        say(f"lifecycle: {e}")
        return EXIT_REFUSED
    except BrokenPipeError:
        return EXIT_OK
    except Exception as e:  # a bug: one line by default, the traceback when debugging
        if os.environ.get("LIFECYCLE_DEBUG", "") not in ("", "0"):
            raise
        say(
            f"lifecycle: internal error: {type(e).__name__}: {e} "
            "(a bug; run again with LIFECYCLE_DEBUG=1 for the traceback)"
        )
        return EXIT_NO
    return code


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
