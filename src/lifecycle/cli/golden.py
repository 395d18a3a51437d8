"""Golden replays (``--expect``, ``--update``, ``--compare-with``) and the output lines they
compare."""

from __future__ import annotations

import argparse
import difflib
import json
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TextIO

import attrs
import orjson

from .._core.errors import LifecycleError, TraceError, UnknownMachine, preview
from .._core.printable import shown
from .._core.redact import redact
from .._core.transition import Transition
from .common import EXIT_NO, EXIT_OK, EXIT_REFUSED, say
from .progress import Progress

if TYPE_CHECKING:
    from ..machines import MachineRegistry


class Replay(Protocol):
    """``lifecycle replay`` itself, as the golden options run it: :mod:`lifecycle.cli.replay`
    passes its own replay in (it imports this module, so this module does not import it)."""

    def __call__(
        self,
        args: argparse.Namespace,
        out: TextIO,
        progress: Progress,
        machines: MachineRegistry | None = None,
        capture: list[bytes] | None = None,
    ) -> int: ...


def _at(t: Transition) -> datetime:
    return t.at


def _event_row(row: Any) -> dict[str, Any]:
    """An Event row of ``--as-kubernetes-events`` as a JSON-ready dict (times ISO 8601)."""
    data: dict[str, Any] = attrs.asdict(row)  # (the emitter redacted its note)
    return {k: v.isoformat() if hasattr(v, "isoformat") else v for k, v in data.items()}


# -- golden replays ------------------------------------------------------------------------------
def _normalized(text: str | bytes) -> str:
    """One output line as a golden file holds it: compact JSON, keys sorted, ASCII only."""
    return json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))


def _golden_lines(path: str) -> list[str]:
    """The normalized lines of a golden file (blank lines and ``#`` comments skipped); a
    missing file or a line that is not JSON is refused (exit 2)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TraceError(path, 0, "no such file (--update writes it)") from None
    except (OSError, UnicodeDecodeError) as e:
        raise TraceError(path, 0, f"cannot read it: {e}") from None
    lines = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            lines.append(_normalized(line))
        except ValueError as e:
            raise TraceError(path, number, f"not a JSON line: {preview(str(e), 120)}") from None
    return lines


def _command(args: argparse.Namespace) -> str:
    """The ``lifecycle replay`` command that reproduces a golden file."""
    words = ["lifecycle replay", args.trace, "--expect", args.expect]
    if args.final_status:
        words.append("--final-status")
    if args.as_kubernetes_events:
        words.append("--as-kubernetes-events")
    return " ".join(words)


def _diff(want: list[str], got: list[str], want_name: str, got_name: str) -> str:
    """A unified diff of normalized lines, with a one-line count of what differs first."""
    lines = list(difflib.unified_diff(want, got, want_name, got_name, lineterm="", n=1))
    removed = sum(1 for line in lines if line.startswith("-") and not line.startswith("---"))
    added = sum(1 for line in lines if line.startswith("+") and not line.startswith("+++"))
    head = f"{removed} line(s) only in {want_name} (-), {added} only in {got_name} (+)"
    return head + "\n" + "\n".join(lines) + "\n"


def _shown_lines(text: str) -> str:
    """Each line of ``text`` redacted and escaped (a line cannot forge another)."""
    return "".join(shown(line) + "\n" for line in text.splitlines())


def _expect(args: argparse.Namespace, out: TextIO, progress: Progress, run: Replay) -> int:
    """``--expect GOLDEN``: the replay's lines against the golden file (``--update``: write
    it). Exit 1 with a diff when they differ; the replay's own failure (3) comes first."""
    want = None if args.update else _golden_lines(args.expect)  # refused before replaying
    got: list[bytes] = []
    code = run(args, out, progress, capture=got)
    lines = [_normalized(line) for line in got]
    if args.update:
        comment = f"# expected output of: {_command(args)} (rewrite: add --update)\n"
        body = "".join(line + "\n" for line in lines)
        Path(args.expect).write_text(comment + body, encoding="utf-8")
        out.write(f"wrote {len(lines)} lines to {shown(args.expect)}\n")
        return code
    assert want is not None
    if want == lines:
        out.write(
            f"{shown(args.trace)}: as expected ({len(lines)} lines of {shown(args.expect)})\n"
        )
        return code
    out.write(
        f"{shown(args.trace)}: the replay differs from {shown(args.expect)} "
        "(accept it with --update)\n"
    )
    out.write(_shown_lines(_diff(want, lines, args.expect, f"replay of {args.trace}")))
    return code or EXIT_NO


def _compare(args: argparse.Namespace, out: TextIO, progress: Progress, run: Replay) -> int:
    """``--compare-with MODULE:REGISTRY``: one trace replayed under the shipped tables and
    under the proposed ones, each into a fresh memory store; exit 1 with a diff of their
    lines when they differ (a line the proposed tables refuse is a difference too)."""
    from .db import load_machines

    if args.store not in ("memory://", "memory"):
        say("lifecycle replay: --compare-with replays into two memory stores; drop --store")
        return EXIT_REFUSED
    spec = args.compare_with
    try:
        proposed = load_machines(spec)
    except UnknownMachine as e:
        raise UnknownMachine(str(e).replace("--machines", "--compare-with", 1)) from None
    today: list[bytes] = []
    code = run(args, out, progress, capture=today)  # the shipped tables, or --machines
    if code:
        return code
    theirs: list[bytes] = []
    try:
        code = run(args, out, progress, machines=proposed, capture=theirs)
    except LifecycleError as e:  # a line the proposed tables refuse
        out.write(f"{shown(args.trace)}: the tables of {shown(spec)} refuse it: {shown(str(e))}\n")
        return EXIT_NO
    if code:
        return code
    a, b = [_normalized(line) for line in today], [_normalized(line) for line in theirs]
    if a == b:
        out.write(
            f"{shown(args.trace)}: the same {len(a)} lines under the shipped tables and "
            f"{shown(spec)}\n"
        )
        return EXIT_OK
    out.write(f"{shown(args.trace)}: the tables of {shown(spec)} change its events\n")
    out.write(_shown_lines(_diff(a, b, "shipped tables", spec)))
    return EXIT_NO


def _json_line(data: dict[str, Any]) -> bytes:
    """One compact JSON line, ASCII only (other characters escaped, as ``json.dumps`` does:
    the output never depends on the terminal's encoding)."""
    line = orjson.dumps(data, option=orjson.OPT_APPEND_NEWLINE)
    if line.isascii():
        return line
    return (json.dumps(data, separators=(",", ":")) + "\n").encode()


def _jsonl_line(t: Transition, marks: dict[str, Any] | None = None) -> bytes:
    """One event of ``--format jsonl`` (and of a golden file): redacted as the shipped
    emitters redact what they send (the message; names and ids are the trace's own)."""
    data: dict[str, Any] = t.as_dict() if marks is None else {**t.as_dict(), **marks}
    cleaned = redact(t.message)
    if cleaned is not t.message:  # as LogEmitter: the message is the text a provider wrote
        data["message"] = cleaned
    return _json_line(data)
