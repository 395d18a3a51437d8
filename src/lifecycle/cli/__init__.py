"""``lifecycle``: replay traces and describe machines.

    lifecycle replay TRACE|- [--store URL] [--format table|jsonl] [--final-status]
                             [--max-line-bytes N] [--as-kubernetes-events]
                             [--expect GOLDEN.jsonl [--update] | --compare-with REFERENCE]
    lifecycle machines [--format text|json] [--machines REFERENCE]
    lifecycle diagram MACHINE [--format mermaid|dot|svg] [--stays]
    lifecycle table MACHINE
    lifecycle docs [--out DIR] [--check]
    lifecycle db migrate|status|compact|check|upgrade --store URL
    lifecycle check [MACHINE | GROUP] [--format text|json] [--allow FILE]
    lifecycle restore check MANIFEST TARGET   (its own exit codes: see its --help)

Also ``python -m lifecycle``. A MACHINE (and ``--machines``, ``--compare-with``, ``check``'s
target) is a shipped machine's name or a reference, the same in every command:
``MODULE:NAME`` or ``FILE.py:NAME``, naming a machine (class or instance), a
``MachineRegistry``, a mapping or list of machines, or a function returning one
(:mod:`lifecycle.cli.targets`). ``replay -`` reads the trace from standard input.

Exit codes are written down once, in :data:`lifecycle.cli.common.MEANINGS`: ``lifecycle
--help`` shows them, and the README's table is checked against them (0 done, 1 the answer is
no, 2 refused input, 3 a replay's write failed, 4 a missing extra, 70 an internal error, 130
interrupted).

Every message that echoes what was given (a store URL, a trace value) is redacted first: a
password or token in it is never printed.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from .common import (
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_MISSING_EXTRA,
    EXIT_NO,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_WRITE_FAILED,
    say,
)
from .parsers import build_parser

if TYPE_CHECKING:
    from .progress import Progress

__all__ = [
    "EXIT_INTERNAL",
    "EXIT_INTERRUPTED",
    "EXIT_MISSING_EXTRA",
    "EXIT_NO",
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_WRITE_FAILED",
    "Progress",
    "build_parser",
    "main",
]


def __getattr__(name: str) -> Any:
    if name == "Progress":  # the replay's progress bar, imported when asked for
        from .progress import Progress

        return Progress
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def cmd_restore_check(args: argparse.Namespace, out: TextIO) -> int:
    """``lifecycle restore check MANIFEST TARGET [...]``: the gate's verdict, offline."""
    from ..machines.restore import _offline as _restore_offline

    return _restore_offline.main(args.rest, out=out)


def _debugging() -> bool:
    return os.environ.get("LIFECYCLE_DEBUG", "") not in ("", "0")


def _run(args: argparse.Namespace, out: TextIO) -> int:
    """The command, with the library's log records on stderr, one line each, while it runs
    (WARNING and up; DEBUG with ``LIFECYCLE_DEBUG=1``), so ``--format jsonl`` stdout stays
    pure JSON; the ``lifecycle`` logger is restored afterwards (ADR 0098). A replay into
    ``memory://`` holds them back with its output (:data:`lifecycle.cli.spool.LOGS`)."""
    from .._log import logs_to
    from .spool import LOGS

    with logs_to(LOGS, debug=_debugging()):  # type: ignore[arg-type]
        code: int = args.func(args, out)
    return code


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run the CLI; ``out`` receives normal output (stdout by default), errors go to stderr."""
    words = list(sys.argv[1:] if argv is None else argv)
    stream = out if out is not None else sys.stdout
    try:
        if words[:2] == ["restore", "check"]:  # its own parser, so its own --help too
            return cmd_restore_check(argparse.Namespace(rest=words[2:]), stream)
        args = build_parser().parse_args(words)
        return _run(args, stream)
    except KeyboardInterrupt:
        say("lifecycle: interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_OK
    except Exception as e:
        from .._core.errors import LifecycleError, MissingExtra, TraceError

        if isinstance(e, MissingExtra):  # one line: what needs it, the extra, its pip command
            say(f"lifecycle: {e}")
            return EXIT_MISSING_EXTRA
        if isinstance(e, TraceError):
            say(str(e))
            return EXIT_REFUSED
        if isinstance(e, LifecycleError):  # a StoreError, or any refusal of the library
            say(f"lifecycle: {e}")
            return EXIT_REFUSED
        if _debugging():  # a bug: one line by default, the traceback when debugging
            raise
        say(
            f"lifecycle: internal error: {type(e).__name__}: {e} "
            "(a bug; run again with LIFECYCLE_DEBUG=1 for the traceback)"
        )
        return EXIT_INTERNAL


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
