"""What every command shares: the exit codes and the one way to say something on stderr.

The exit codes are written down here once; ``lifecycle --help`` shows :data:`EXIT_CODES`, and
the README's table is checked against :data:`MEANINGS` (``tests/test_cli_conventions.py``).
"""

from __future__ import annotations

import sys

#: The exit codes of the CLI (:data:`MEANINGS` says what each means).
EXIT_OK, EXIT_NO, EXIT_REFUSED, EXIT_WRITE_FAILED, EXIT_MISSING_EXTRA = 0, 1, 2, 3, 4
#: A bug in the library: ``EX_SOFTWARE`` of BSD's sysexits.h.
EXIT_INTERNAL = 70
#: Interrupted (Ctrl-C, SIGINT): 128 + the signal's number, as a shell reports it.
EXIT_INTERRUPTED = 130

#: Every exit code and what it means, for every command but ``restore check`` (its own).
MEANINGS: tuple[tuple[int, str], ...] = (
    (EXIT_OK, "done"),
    (
        EXIT_NO,
        "the answer is no: check found findings, docs --check a stale page, db status a "
        "store not current (or missing), db check a finding, db find --older-than objects "
        "stuck that long, replay --expect or --compare-with events that differ (a unified "
        "diff on stdout)",
    ),
    (
        EXIT_REFUSED,
        "refused input, nothing written: a bad trace line (FILE:LINE: what is wrong), a "
        "file that is missing or unreadable (FILE: no such file), a bad store URL, a file "
        "that is not a store, a bad machine reference, a bad argument; one line on stderr",
    ),
    (
        EXIT_WRITE_FAILED,
        "replay: a status write failed that no fault line injected (the store refused "
        "it); the other lines were replayed",
    ),
    (
        EXIT_MISSING_EXTRA,
        "the command needs an extra that is not installed (diagram as Mermaid or DOT: "
        "diagrams; replay --metrics: prometheus; a postgresql:// store: postgres); one line "
        "names it and its pip command",
    ),
    (
        EXIT_INTERNAL,
        "an internal error (a bug): one line, lifecycle: internal error: ...; "
        "LIFECYCLE_DEBUG=1 shows the traceback",
    ),
    (
        EXIT_INTERRUPTED,
        "interrupted (Ctrl-C): one line; what a replay wrote before it stays written",
    ),
)


def _table(rows: tuple[tuple[int, str], ...]) -> str:
    import textwrap

    lines = ["exit codes:"]
    for code, meaning in rows:
        wrapped = textwrap.wrap(meaning, 86)
        lines.append(f"  {code:<4} {wrapped[0]}")
        lines.extend(f"       {more}" for more in wrapped[1:])
    return "\n".join(lines)


#: The epilog of ``lifecycle --help``.
EXIT_CODES = _table(MEANINGS) + "\n  (lifecycle restore check has its own codes: see its --help)"
#: The epilog of ``lifecycle replay --help``: the codes a replay can end with.
REPLAY_EXIT_CODES = _table(
    (
        (
            EXIT_OK,
            "every line replayed, every write landed (or failed only where a fault line said so)",
        ),
        (EXIT_NO, "--expect / --compare-with: the events differ (a unified diff on stdout)"),
        (
            EXIT_REFUSED,
            "refused input, nothing written: FILE:LINE: what is wrong (bad JSON, a "
            "repeated key, a line over --max-line-bytes, an unknown machine or observation, a "
            "bad value), FILE: no such file, a bad store URL, a file that is not a store",
        ),
        (
            EXIT_WRITE_FAILED,
            "every line was accepted, but a status write failed that no fault "
            "line injected (the store refused it); the other lines were replayed and their "
            "events delivered",
        ),
        (
            EXIT_MISSING_EXTRA,
            "an extra is not installed (--metrics: prometheus; a postgresql:// store: "
            "postgres): one line names it and its pip command; nothing replayed",
        ),
        (EXIT_INTERNAL, "an internal error (a bug; LIFECYCLE_DEBUG=1 shows the traceback)"),
        (
            EXIT_INTERRUPTED,
            "interrupted (Ctrl-C): the lines before were written (none into memory://)",
        ),
    )
)


def say(message: str) -> None:
    """One line on stderr, redacted: whatever a message quotes, no secret is printed."""
    from .._core.printable import escape
    from .._core.redact import redact

    text = escape(" ".join(redact(message).split()))  # never more than one line
    print(text if len(text) <= 2000 else text[:1997] + "...", file=sys.stderr)
