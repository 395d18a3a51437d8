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
   ``lifecycle[diagrams]``); the message names the extra.

Every message that echoes what was given (a store URL, a trace value) is redacted first: a
password or token in it is never printed.
"""

from __future__ import annotations

import argparse
import difflib
import gc
import json
import os
import sys
import time
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

import attrs
import orjson

from ._cli_check import add_check_command
from ._cli_db import STORE_HELP, add_db_commands
from ._cli_spool import LogStream, Spool
from ._core.errors import LifecycleError, TraceError, UnknownMachine, preview
from ._core.machine import Machine
from ._core.redact import redact
from ._core.refs import ObjectRef
from ._core.transition import EMPTY, Transition
from ._log import logs_to
from ._version import __version__
from .machines import MachineRegistry, default_registry
from .runner import Result
from .stores import MemoryStore, open_store, parse_sqlite_url, redact_url
from .stores.base import Store
from .trace import (
    CONCURRENT_WRITE,
    MAX_LINE_BYTES,
    HostEvents,
    ObservationLine,
    TraceLine,
    check,
    injected,
    read_trace,
    replay,
    stream_trace,
)

#: The exit codes of the CLI (the module's notes say what each means).
EXIT_OK, EXIT_NO, EXIT_REFUSED, EXIT_WRITE_FAILED, EXIT_MISSING_EXTRA = 0, 1, 2, 3, 4


class _Collector:
    """Counts delivered events (the summary line); holding them all would cost memory."""

    def __init__(self) -> None:
        self.count = 0

    def emit(self, transition: Transition) -> None:
        self.count += 1


#: ``HH:MM:SS`` of the times events were stamped at, keyed by (time, zone): a trace repeats
#: its times (one poll stamps many objects), and ``strftime`` costs more than the rest of a
#: table line. Equal instants in other zones print differently, hence the zone in the key.
_CLOCK: dict[tuple[datetime, object], str] = {}


def _clock(at: datetime) -> str:
    key = (at, at.tzinfo)
    text = _CLOCK.get(key)
    if text is None:
        if len(_CLOCK) >= 4096:
            _CLOCK.clear()
        text = _CLOCK[key] = at.strftime("%H:%M:%S")
    return text


def _table_line(t: Transition, note: str = "") -> str:
    flip = t.flip
    if t.fallback:
        flip = f"(not written) {flip}"
    if note:  # sent by another host: the other writer, or a restarted one
        flip = f"({note}) {flip}"
    ref = t.ref
    obj = f"{ref.kind}/{ref.namespace}/{ref.name}" if ref.namespace else f"{ref.kind}/{ref.name}"
    return f"{_clock(t.at)}  {obj:<30} {flip:<30} {t.type.value:<7} {t.reason:<28} {t.message}"


def _note_objects(result: Result, seen: dict[str, ObjectRef]) -> None:
    """Every object a result touched (its cascade too), in first-seen order."""
    seen.setdefault(result.ref.uid, result.ref)
    for sub in result.cascade:
        _note_objects(sub, seen)


def _final_statuses(
    store: Store,
    machines: MachineRegistry,
    seen: dict[str, ObjectRef],
    write: Callable[[bytes], object],
) -> None:
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
        write(_json_line(line))


def _new_sqlite_file(url: str) -> bool:
    """Whether ``url`` names an SQLite file that does not exist yet (a bad SQLite URL raises
    :class:`~lifecycle.stores.InvalidStoreURL` here, before the trace is read)."""
    if url[:7].lower() != "sqlite:":
        return False
    return not Path(parse_sqlite_url(url).path).exists()


def _failed_writes(result: Result) -> tuple[int, int]:
    """The failed status writes of ``result`` and its cascade: (all, those not injected)."""
    failed = unplanned = 0
    if result.error is not None:
        failed = 1
        unplanned = 0 if injected(result.error) else 1
    for sub in result.cascade:
        more, more_unplanned = _failed_writes(sub)
        failed += more
        unplanned += more_unplanned
    return failed, unplanned


#: Seconds a replay runs before its progress bar appears (short replays never show one).
PROGRESS_DELAY = 0.5
#: A trace file this large (bytes) gets "reading"/"checking" notes on a terminal at once.
PROGRESS_NOTE_BYTES = 1 << 20


def _isatty(stream: object) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty()) if callable(isatty) else False
    except (OSError, ValueError):  # a closed or detached stream
        return False


class Progress:
    """A one-line progress bar for long work, on a terminal only.

    Nothing is ever written unless ``stream`` is a TTY. The bar appears once the work has
    run ``delay`` seconds, is redrawn at most every ``interval`` seconds, and :meth:`clear`
    erases it (before other output to the same terminal, and at the end).
    """

    def __init__(
        self,
        total: int,
        stream: TextIO,
        *,
        label: str = "replaying",
        delay: float | None = None,
        interval: float = 0.1,
        width: int = 28,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total = total
        self.stream = stream
        self.enabled = _isatty(stream)
        self.label = label
        self.delay = PROGRESS_DELAY if delay is None else delay
        self.interval = interval
        self.width = width
        self.clock = clock
        self.started = clock()
        self._first: tuple[float, int] | None = None  # (when, done) of the first update
        self._drawn_at: float | None = None
        self._shown = 0  # characters on the line now

    def _write(self, text: str) -> None:
        pad = " " * max(self._shown - len(text), 0)
        self.stream.write("\r" + text + pad)
        self.stream.flush()
        self._shown = len(text)

    def note(self, text: str) -> None:
        """Show ``text`` on the bar's line right away (a phase with no count yet)."""
        if self.enabled:
            self._write(text)

    def update(self, done: int) -> None:
        if not self.enabled or self.total <= 0:
            return
        now = self.clock()
        if self._first is None:
            self._first = (now, done)  # the rate counts from here, not from reading the trace
        if now - self.started < self.delay:
            return
        recent = self._drawn_at is not None and now - self._drawn_at < self.interval
        if recent and self._shown and done < self.total:
            return
        self._drawn_at = now
        done = min(max(done, 0), self.total)
        filled = self.width * done // self.total
        bar = "#" * filled + "." * (self.width - filled)
        text = f"{self.label} [{bar}] {done}/{self.total} {100 * done // self.total:3d}%"
        since, first = self._first
        if done < self.total and done > first and now - since >= self.delay:
            left = (now - since) * (self.total - done) / (done - first)
            text += f"  {left:.0f}s left"
        self._write(text)

    def clear(self) -> None:
        """Erase the line (if anything is on it); the next :meth:`update` draws it again."""
        if self.enabled and self._shown:
            self.stream.write("\r" + " " * self._shown + "\r")
            self.stream.flush()
            self._shown = 0


def _trace_size(path: str) -> int:
    try:
        return Path(path).stat().st_size
    except OSError:
        return 0


@contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """A replay allocates millions of small acyclic records that live until it ends; the
    cyclic collector would re-scan them again and again (~30 % of a 1M-line replay). Freeze
    what exists, pause the collector for the replay, and restore both afterwards."""
    was_enabled = gc.isenabled()
    freeze = gc.get_freeze_count() == 0  # a host that froze its own heap keeps it frozen
    if freeze:
        gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        if freeze:
            gc.unfreeze()
        if was_enabled:
            gc.enable()


def cmd_replay(args: argparse.Namespace, out: TextIO) -> int:
    progress = Progress(0, sys.stderr)
    try:
        with _no_cyclic_gc():
            if args.compare_with is not None:
                return _compare(args, out, progress)
            if args.expect is not None:
                return _expect(args, out, progress)
            if args.update:
                _say("lifecycle replay: --update rewrites the file --expect names; give --expect")
                return EXIT_REFUSED
            return _replay(args, out, progress)
    finally:
        progress.clear()


def _count_records(path: str) -> int:
    """Lines of ``path`` that the trace reader will parse (neither blank nor comments), for
    the progress bar of a streamed replay; 0 if it cannot be read (the replay says why)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:  # lines as the reader splits
            return sum(1 for line in f if line.strip() and not line.lstrip().startswith("#"))
    except OSError:
        return 0


def _replay(
    args: argparse.Namespace,
    out: TextIO,
    progress: Progress,
    machines: MachineRegistry | None = None,
    capture: list[bytes] | None = None,
) -> int:
    """Replay ``args.trace`` under ``machines`` (the shipped ones by default) and print it.
    With ``capture``, the output's JSON lines (events, Event rows, final statuses) are
    appended there instead, and nothing else is printed: a golden comparison reads them."""
    machines = machines if machines is not None else default_registry()
    # A memory store is fresh and gone when the command ends: instead of a dry run, replay
    # once as the file is read, hold the output back, and show it only if every line was
    # accepted (ADR 0009). Any other store gets the whole trace checked before it is touched.
    throwaway = args.store in ("memory://", "memory")
    new_file = _new_sqlite_file(args.store)  # and a bad SQLite URL refused before reading
    big = _trace_size(args.trace) >= PROGRESS_NOTE_BYTES
    limit = args.max_line_bytes
    trace: Iterable[TraceLine]
    if throwaway:
        trace = stream_trace(args.trace, machines, max_line_bytes=limit)
        progress.total = _count_records(args.trace) if progress.enabled else 0
    else:
        if big:
            progress.note(f"reading {redact(args.trace)} ...")
        trace = read_trace(args.trace, machines, max_line_bytes=limit)
        progress.total = len(trace)
        if big:
            progress.note(f"read {len(trace)} lines ...")
        if new_file:
            # Refuse a bad trace before opening (and so creating) a new store file.
            check(trace, MemoryStore(), name=args.trace, machines=machines)
    store = MemoryStore(journal=False) if throwaway else open_store(args.store)
    collector = _Collector()
    table = args.format == "table" and capture is None
    kubernetes: list[Transition] | None = [] if args.as_kubernetes_events else None
    shared_terminal = _isatty(out) and not throwaway  # the bar and the output share a screen
    done = 0
    observed = failed = unplanned = 0  # observation lines; failed writes; those not injected
    seen: dict[str, ObjectRef] = {}
    # The output of a throwaway replay is held (as UTF-8) until every line was accepted, and
    # so are the library's log records: in memory up to a limit, then in a temporary file.
    held = Spool()
    memory, limit_held, spill = held.memory, held.limit, held.spill
    logs = Spool() if throwaway else None

    def write(text: str) -> None:
        if shared_terminal:
            progress.clear()
        out.write(text)

    def emit(line: bytes) -> None:
        if capture is not None:
            capture.append(line)
        elif throwaway:
            memory.extend(line)
            if len(memory) > limit_held:
                spill()
        else:
            write(line.decode())

    def header(lines: int) -> str:
        return f"replaying {redact(args.trace)} ({lines} lines) into {redact_url(args.store)}\n"

    # A checked replay writes the header once the dry run passed (a refused trace prints
    # nothing); a throwaway one, in front of the held output.
    pending_header = [header(progress.total)] if table and not throwaway else []

    final_status = args.final_status
    update = progress.update if progress.enabled else None

    def count(results: Iterable[Result]) -> None:
        nonlocal failed, unplanned
        for sub in results:
            if sub.error is not None or sub.cascade or sub.caught_up:
                more, more_unplanned = _failed_writes(sub)
                failed += more
                unplanned += more_unplanned

    def show_host(host: HostEvents) -> None:
        """What another host sent: the other writer, or a restarted process (marked)."""
        count(host.results)
        other = host.fault == CONCURRENT_WRITE
        for t in (*host.before_crash, *host.transitions):
            if final_status:
                seen.setdefault(t.ref.uid, t.ref)
        if kubernetes is not None:
            kubernetes.extend(host.before_crash)
            kubernetes.extend(host.transitions)
            return
        for t in host.before_crash:  # this process sent them, before it died
            emit((_table_line(t) + "\n").encode() if table else _jsonl_line(t))
        for t in host.transitions:
            if other:
                note, marks = "other writer", _OTHER_WRITER
            elif t.id in host.redelivered:
                note, marks = "redelivered", _REDELIVERED
            else:
                note, marks = "restarted host", _RESTARTED
            emit((_table_line(t, note) + "\n").encode() if table else _jsonl_line(t, marks))

    def show(record: TraceLine, result: Result | HostEvents | None) -> None:
        nonlocal done, observed, failed, unplanned
        if pending_header:
            write(pending_header.pop())
        if result.__class__ is HostEvents:  # a fault line fired (it was counted when read)
            show_host(result)
            return
        done += 1
        if record.__class__ is ObservationLine:
            observed += 1
            if final_status:
                seen.setdefault(record.ref.uid, record.ref)
        if result is not None:
            assert isinstance(result, Result)
            if result.error is not None:
                failed += 1
                unplanned += not injected(result.error)
            # most have one linked write, which landed
            if result.cascade:
                count(result.cascade)
            if result.caught_up:
                count(result.caught_up)
            if final_status:
                _note_objects(result, seen)
            if (
                result.transitions
                or result.cascade
                or result.fallback
                or result.actions
                or result.caught_up
            ):
                if kubernetes is not None:
                    kubernetes.extend(result.all_transitions())
                else:
                    for t in result.all_transitions():
                        emit((_table_line(t) + "\n").encode() if table else _jsonl_line(t))
        if update is not None:
            update(done)

    _LOGS.held = logs
    try:
        if not throwaway and not new_file:  # (a new file's trace was checked above)
            check(trace, store, name=args.trace, machines=machines)
        try:
            replay(
                trace,
                store,
                [collector],
                name=args.trace,
                machines=machines,
                on_result=show,
                dry_run=False,
                keep_results=False,
            )
        except TraceError as e:
            if throwaway:  # nothing outlives the command: a plain refusal
                raise
            # The dry run accepted this line: the store no longer agrees with it, because a
            # write failed (or another writer got in). Lines before it were written.
            progress.clear()
            _say(
                f"{e} (the dry run accepted this line; the replay stopped here after "
                f"{unplanned} failed status write(s): the lines before it were written)"
            )
            return EXIT_WRITE_FAILED
        progress.clear()
        if pending_header:
            write(pending_header.pop())
        if kubernetes is not None:  # the Event objects the run would leave, correlated
            from .emitters.kubernetes import format_event_table, simulate_events

            # on the trace's clock: a trace orders each object's lines, not all of them
            rows = simulate_events(sorted(kubernetes, key=_at))
            if table:
                emit((format_event_table(rows) + "\n").encode())
            else:
                for row in rows:
                    emit(_json_line(_event_row(row)))
        if logs is not None:  # every line was accepted: what the library logged, then
            _LOGS.held = None
            logs.copy_to(sys.stderr)
        if throwaway and capture is None:
            if table:
                out.write(header(done))
            held.copy_to(out)
        if args.final_status:
            if capture is not None:
                _final_statuses(store, machines, seen, capture.append)
            else:
                _final_statuses(store, machines, seen, lambda line: out.write(line.decode()))
        elif table:
            events = collector.count
            summary = f"{observed} observations, {events} events, {failed} failed writes"
            if unplanned:
                summary += f" ({unplanned} not injected by the trace)"
            out.write(summary + "\n")
    finally:
        _LOGS.held = None
        held.close()
        if logs is not None:
            logs.close()
        store.close()
    if unplanned:
        print(
            f"lifecycle: {unplanned} status write(s) failed that no fault line injected "
            "(the store refused them; see the log above): exit 3",
            file=sys.stderr,
        )
        return EXIT_WRITE_FAILED
    return EXIT_OK


#: How events another host sent are marked in ``--format jsonl`` (and golden files).
_OTHER_WRITER: dict[str, Any] = {"sent_by": "other writer"}
_REDELIVERED: dict[str, Any] = {"sent_by": "restarted host", "redelivered": True}
_RESTARTED: dict[str, Any] = {"sent_by": "restarted host"}


def _at(t: Transition) -> datetime:
    return t.at


def _event_row(row: Any) -> dict[str, Any]:
    """An Event row of ``--as-kubernetes-events`` as a JSON-ready dict (times ISO 8601)."""
    data: dict[str, Any] = attrs.asdict(row)
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


def _expect(args: argparse.Namespace, out: TextIO, progress: Progress) -> int:
    """``--expect GOLDEN``: the replay's lines against the golden file (``--update``: write
    it). Exit 1 with a diff when they differ; the replay's own failure (3) comes first."""
    got: list[bytes] = []
    code = _replay(args, out, progress, capture=got)
    lines = [_normalized(line) for line in got]
    if args.update:
        comment = f"# expected output of: {_command(args)} (rewrite: add --update)\n"
        body = "".join(line + "\n" for line in lines)
        Path(args.expect).write_text(comment + body, encoding="utf-8")
        out.write(f"wrote {len(lines)} lines to {redact(args.expect)}\n")
        return code
    want = _golden_lines(args.expect)
    if want == lines:
        out.write(
            f"{redact(args.trace)}: as expected ({len(lines)} lines of {redact(args.expect)})\n"
        )
        return code
    out.write(
        f"{redact(args.trace)}: the replay differs from {redact(args.expect)} "
        "(accept it with --update)\n"
    )
    out.write(redact(_diff(want, lines, args.expect, f"replay of {args.trace}")))
    return code or EXIT_NO


def _compare(args: argparse.Namespace, out: TextIO, progress: Progress) -> int:
    """``--compare-with MODULE:REGISTRY``: one trace replayed under the shipped tables and
    under the proposed ones, each into a fresh memory store; exit 1 with a diff of their
    lines when they differ (a line the proposed tables refuse is a difference too)."""
    from ._cli_db import load_machines

    if args.store not in ("memory://", "memory"):
        _say("lifecycle replay: --compare-with replays into two memory stores; drop --store")
        return EXIT_REFUSED
    spec = args.compare_with
    try:
        proposed = load_machines(spec)
    except UnknownMachine as e:
        raise UnknownMachine(str(e).replace("--machines", "--compare-with", 1)) from None
    today: list[bytes] = []
    code = _replay(args, out, progress, capture=today)
    if code:
        return code
    theirs: list[bytes] = []
    try:
        code = _replay(args, out, progress, machines=proposed, capture=theirs)
    except LifecycleError as e:  # a line the proposed tables refuse
        out.write(
            f"{redact(args.trace)}: the tables of {redact(spec)} refuse it: {redact(str(e))}\n"
        )
        return EXIT_NO
    if code:
        return code
    a, b = [_normalized(line) for line in today], [_normalized(line) for line in theirs]
    if a == b:
        out.write(
            f"{redact(args.trace)}: the same {len(a)} lines under the shipped tables and "
            f"{redact(spec)}\n"
        )
        return EXIT_OK
    out.write(f"{redact(args.trace)}: the tables of {redact(spec)} change its events\n")
    out.write(redact(_diff(a, b, "shipped tables", spec)))
    return EXIT_NO


def _json_line(data: dict[str, Any]) -> bytes:
    """One compact JSON line, ASCII only (other characters escaped, as ``json.dumps`` does:
    the output never depends on the terminal's encoding)."""
    line = orjson.dumps(data, option=orjson.OPT_APPEND_NEWLINE)
    if line.isascii():
        return line
    return (json.dumps(data, separators=(",", ":")) + "\n").encode()


def _jsonl_line(t: Transition, marks: dict[str, Any] | None = None) -> bytes:
    if marks is None:
        return _json_line(t.as_dict())
    return _json_line({**t.as_dict(), **marks})


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
        from ._diagram import diagram

        out.write(diagram(machine, args.format, stays=args.stays))
    except ImportError as e:  # transitions (or graphviz for DOT) is not installed
        return _missing_extra("diagrams", e)
    return 0


def _missing_extra(extra: str, error: ImportError) -> int:
    """A command that needs an optional extra: say which, and how to get it (exit 4)."""
    _say(f"lifecycle: this needs the '{extra}' extra ({error}): pip install 'lifecycle[{extra}]'")
    return EXIT_MISSING_EXTRA


def cmd_table(args: argparse.Namespace, out: TextIO) -> int:
    from .docs import table_markdown

    out.write(table_markdown(default_registry()[args.machine]))
    return 0


def cmd_docs(args: argparse.Namespace, out: TextIO) -> int:
    from .docs import run

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


EXIT_CODES = """exit codes:
  0  done
  1  the answer is no (docs --check: stale pages; db status: schema not current), or an
     internal error (set LIFECYCLE_DEBUG=1 for its traceback)
  2  refused input, nothing written: a bad trace line (FILE:LINE: what is wrong), a bad store
     URL, a file that is not a store, a bad argument; one line on stderr
  3  replay: a status write failed that no fault line injected (the other lines were replayed)
     (replay --expect / --compare-with: 1 when the events differ, with a unified diff)
  4  the command needs an extra that is not installed (diagram, docs: lifecycle[diagrams])
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
    from .machines.restore import _offline as _restore_offline

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
_LOGS = LogStream()


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
        _say(str(e))
        return EXIT_REFUSED
    except LifecycleError as e:  # a StoreError, or any refusal of the library
        _say(f"lifecycle: {e}")
        return EXIT_REFUSED
    except BrokenPipeError:
        return EXIT_OK
    except Exception as e:  # a bug: one line by default, the traceback when debugging
        if os.environ.get("LIFECYCLE_DEBUG", "") not in ("", "0"):
            raise
        _say(
            f"lifecycle: internal error: {type(e).__name__}: {e} "
            "(a bug; run again with LIFECYCLE_DEBUG=1 for the traceback)"
        )
        return EXIT_NO
    return code


def _say(message: str) -> None:
    """One line on stderr, redacted: whatever a message quotes, no secret is printed."""
    text = " ".join(redact(message).split())  # never more than one line
    print(text if len(text) <= 2000 else text[:1997] + "...", file=sys.stderr)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
