"""``lifecycle replay``: validate, dry-run, then replay a trace and print its events."""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

import attrs

from .._core.errors import MissingExtra, TraceError
from .._core.printable import escape, shown
from .._core.redact import scrub
from .._core.refs import ObjectRef
from .._core.transition import EMPTY, Transition
from ..machines import MachineRegistry
from ..runner import Result
from ..stores import MemoryStore, cache_option, open_store, parse_sqlite_url, redact_url
from ..stores.base import Store
from ..trace import (
    CONCURRENT_WRITE,
    REPLAY_BATCH,
    HostEvents,
    ObservationLine,
    TraceLine,
    check,
    injected,
    read_trace,
    replay,
    stream_trace,
)
from .common import EXIT_MISSING_EXTRA, EXIT_OK, EXIT_REFUSED, EXIT_WRITE_FAILED, say
from .golden import _at, _compare, _event_row, _expect, _json_line, _jsonl_line
from .progress import PROGRESS_NOTE_BYTES, Progress, _isatty, _no_cyclic_gc, _trace_size
from .spool import LOGS, Spool
from .targets import registry_named


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


def _table_line(t: Transition, note: str = "", changed: str = "") -> str:
    """One event of the timeline: time, object, flip, type, reason, message, then what marks
    it, after the message, so that no mark moves a column: who sent it (``note``: the other
    writer, a restarted host), ``(not written)`` for a fallback Warning, and for a same-state
    event what of the flip signature changed (ADR 0017)."""
    marks = ""
    if note:  # sent by another host: the other writer, or a restarted one
        marks = f"  ({note})"
    if t.fallback:
        marks += "  (not written)"
    if changed:
        marks += f"  ({changed})"
    ref = t.ref
    obj = f"{ref.kind}/{ref.namespace}/{ref.name}" if ref.namespace else f"{ref.kind}/{ref.name}"
    # what the shipped emitters would let out: redacted, and on one line (a name or message
    # holding a newline or a terminal escape cannot forge a line of the timeline)
    return (
        f"{_clock(t.at)}  {shown(obj):<30} {shown(t.flip):<30} {t.type.value:<7} "
        f"{shown(t.reason):<28} {shown(t.message)}{shown(marks) if marks else ''}"
    )


def _changes(
    result: Result, machines: MachineRegistry, signatures: dict[str, Any]
) -> dict[str, str]:
    """For each same-state event of ``result`` (and the writes it holds) on a machine that
    names its signature's parts: which parts changed (``podIP ∅ → 10.0.0.1``), by event id.
    ``signatures`` holds each such object's last committed signature as this replay saw it;
    an object it has not seen (written by another host, or before this replay) is compared
    only from its first version."""
    out: dict[str, str] = {}
    stack = [result]
    while stack:
        r = stack.pop()
        stack.extend(reversed((*r.caught_up, *r.linked)))
        if r.status is None or not r.transitions:
            continue
        machine = machines.for_kind(r.ref.kind)
        names = machine.signature_names
        if not names:
            continue
        after: Any = machine.signature(r.status)
        before: Any = signatures.get(r.ref.uid)
        signatures[r.ref.uid] = after
        if before is None:
            if r.version != 1:
                continue  # not known what it was: say nothing rather than guess
            before = machine.signature(machine.initial(r.ref))
        parts = [
            f"{name} {b or EMPTY} → {a or EMPTY}"
            for name, b, a in zip(names, before, after, strict=False)
            if a != b
        ]
        for t in r.transitions:
            if t.source == t.target and not t.condition and parts:
                out[t.id] = ", ".join(parts)
    return out


def _first_time(row: Any) -> tuple[datetime, str]:
    return row.first_time, row.name


def _shown_row(row: Any) -> Any:
    """An Event row with each text field escaped onto one line (the emitter redacted its
    note)."""
    return attrs.evolve(
        row, **{k: escape(v) for k, v in attrs.asdict(row).items() if isinstance(v, str)}
    )


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
            "status": scrub(machine.dump_status(status)),  # its messages, as emitters send them
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


def cmd_replay(args: argparse.Namespace, out: TextIO) -> int:
    with _trace_source(args) as refused:
        if refused:
            return EXIT_REFUSED
        return _run_replay(args, out)


@contextmanager
def _trace_source(args: argparse.Namespace) -> Iterator[bool]:
    """Set ``args.trace_file`` (what is read) and ``args.trace`` (what messages call it):
    ``-`` is standard input, copied to a temporary file first (a checked replay reads the
    trace twice) and called ``<stdin>``. A file that cannot be opened is refused in one line,
    ``FILE: no such file`` (yields ``True``: exit 2, nothing written)."""
    if args.trace != "-":
        args.trace_file = args.trace
        problem = _unreadable(args.trace)
        if problem is not None:
            say(f"{args.trace}: {problem}")
        yield problem is not None
        return
    with tempfile.NamedTemporaryFile(prefix="lifecycle-stdin-", suffix=".jsonl") as copy:
        shutil.copyfileobj(sys.stdin.buffer, copy)
        copy.flush()
        args.trace, args.trace_file = "<stdin>", copy.name
        yield False


def _unreadable(path: str) -> str | None:
    """Why the trace at ``path`` cannot be read (``None``: it can be opened)."""
    try:
        with open(path, "rb"):
            return None
    except FileNotFoundError:
        return "no such file"
    except IsADirectoryError:
        return "a directory, not a trace file"
    except OSError as e:
        return f"cannot read it: {(e.strerror or str(e)).lower()}"


def _run_replay(args: argparse.Namespace, out: TextIO) -> int:
    progress = Progress(0, sys.stderr)
    try:
        with _no_cyclic_gc():
            if args.compare_with is not None:
                return _compare(args, out, progress, _replay)
            if args.expect is not None:
                return _expect(args, out, progress, _replay)
            if args.update:
                say("lifecycle replay: --update rewrites the file --expect names; give --expect")
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
    if machines is None:  # --machines: a host's own machines, loaded from where they live
        machines = registry_named(getattr(args, "machines", None), "--machines")
    # A memory store is fresh and gone when the command ends: instead of a dry run, replay
    # once as the file is read, hold the output back, and show it only if every line was
    # accepted (ADR 0009). Any other store gets the whole trace checked before it is touched.
    throwaway = args.store in ("memory://", "memory")
    new_file = _new_sqlite_file(args.store)  # and a bad SQLite URL refused before reading
    trace = _open_trace(args, machines, progress, throwaway, new_file)
    try:
        metrics = _metrics(args)
    except ImportError as e:  # --metrics needs the prometheus extra: exit 4, nothing replayed
        say(f"lifecycle: {MissingExtra.of(e, '--metrics', 'prometheus')}")
        return EXIT_MISSING_EXTRA
    store = (
        MemoryStore(journal=False) if throwaway else open_store(args.store, **_cached(args.store))
    )
    if metrics is not None:
        metrics.watch(store)
    collector = _Collector()
    shown_ = _Shown(args, out, progress, machines, capture, throwaway)
    # The library's log records of a throwaway replay are held too (see _Shown).
    logs = Spool() if throwaway else None
    LOGS.held = logs
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
                on_result=shown_.show,
                dry_run=False,
                keep_results=False,
                telemetry=metrics,
                batch=1 if throwaway else REPLAY_BATCH,  # checked above: in chunks
            )
        except TraceError as e:
            if throwaway:  # nothing outlives the command: a plain refusal
                raise
            # The dry run accepted this line: the store no longer agrees with it, because a
            # write failed (or another writer got in). Lines before it were written.
            progress.clear()
            say(
                f"{e} (the dry run accepted this line; the replay stopped here after "
                f"{shown_.unplanned} failed status write(s): the lines before it were written)"
            )
            return EXIT_WRITE_FAILED
        progress.clear()
        shown_.write_header()
        if shown_.kubernetes is not None:  # the Event objects the run would leave, correlated
            shown_.emit_kubernetes_events(machines)
        if logs is not None:  # every line was accepted: what the library logged, then
            LOGS.held = None
            logs.copy_to(sys.stderr)
        if metrics is not None:
            _write_metrics(metrics, args.metrics)
        shown_.finish(store, machines, collector.count)
    finally:
        LOGS.held = None
        shown_.held.close()
        if logs is not None:
            logs.close()
        store.close()
    if shown_.unplanned:
        print(
            f"lifecycle: {shown_.unplanned} status write(s) failed that no fault line injected "
            "(the store refused them; see the log above): exit 3",
            file=sys.stderr,
        )
        return EXIT_WRITE_FAILED
    return EXIT_OK


def _open_trace(
    args: argparse.Namespace,
    machines: MachineRegistry,
    progress: Progress,
    throwaway: bool,
    new_file: bool,
) -> Iterable[TraceLine]:
    """The trace's lines: streamed as the file is read (a throwaway replay), else read and
    counted first (and checked first against a store file the replay would create)."""
    big = _trace_size(args.trace_file) >= PROGRESS_NOTE_BYTES
    limit = args.max_line_bytes
    if throwaway:
        streamed = stream_trace(args.trace_file, machines, max_line_bytes=limit, name=args.trace)
        progress.total = _count_records(args.trace_file) if progress.enabled else 0
        return streamed
    if big:
        progress.note(f"reading {shown(args.trace)} ...")
    trace = read_trace(args.trace_file, machines, max_line_bytes=limit, name=args.trace)
    progress.total = len(trace)
    if big:
        progress.note(f"read {len(trace)} lines ...")
    if new_file:
        # Refuse a bad trace before opening (and so creating) a new store file.
        check(trace, MemoryStore(), name=args.trace, machines=machines)
    return trace


class _Shown:
    """What a replay shows as it goes -- each line's events (a table or JSON lines, or for
    ``--as-kubernetes-events`` the Event objects at the end) -- and the counts of its summary.
    The output of a throwaway replay is held (as UTF-8) until every line was accepted: in
    memory up to a limit, then in a temporary file."""

    def __init__(
        self,
        args: argparse.Namespace,
        out: TextIO,
        progress: Progress,
        machines: MachineRegistry,
        capture: list[bytes] | None,
        throwaway: bool,
    ) -> None:
        self.args, self.out, self.progress, self.machines = args, out, progress, machines
        self.capture, self.throwaway = capture, throwaway
        self.table = args.format == "table" and capture is None
        #: the transitions each process lifetime sent: a crash-after-commit starts another
        self.kubernetes: list[list[Transition]] | None = [[]] if args.as_kubernetes_events else None
        self.shared_terminal = _isatty(out) and not throwaway  # the bar and the output share
        self.done = 0
        self.observed = self.failed = self.unplanned = 0  # lines; failed writes; not injected
        self.seen: dict[str, ObjectRef] = {}
        #: the last flip signature of each object whose machine names its parts (the timeline)
        self.signatures: dict[str, Any] = {}
        self.held = Spool()
        self._memory, self._limit_held, self._spill = (
            self.held.memory,
            self.held.limit,
            self.held.spill,
        )
        # A checked replay writes the header once the dry run passed (a refused trace prints
        # nothing); a throwaway one, in front of the held output.
        self.pending_header = [self.header(progress.total)] if self.table and not throwaway else []
        self.final_status = args.final_status
        self.update = progress.update if progress.enabled else None

    def write(self, text: str) -> None:
        if self.shared_terminal:
            self.progress.clear()
        self.out.write(text)

    def emit(self, line: bytes) -> None:
        if self.capture is not None:
            self.capture.append(line)
        elif self.throwaway:
            self._memory.extend(line)
            if len(self._memory) > self._limit_held:
                self._spill()
        else:
            self.write(line.decode())

    def header(self, lines: int) -> str:
        store = shown(redact_url(self.args.store))
        return f"replaying {shown(self.args.trace)} ({lines} lines) into {store}\n"

    def write_header(self) -> None:
        if self.pending_header:
            self.write(self.pending_header.pop())

    def count(self, results: Iterable[Result]) -> None:
        for sub in results:
            if sub.error is not None or sub.cascade or sub.caught_up:
                more, more_unplanned = _failed_writes(sub)
                self.failed += more
                self.unplanned += more_unplanned

    def show_host(self, host: HostEvents) -> None:
        """What another host sent: the other writer, or a restarted process (marked)."""
        self.count(host.results)
        for t in (*host.before_crash, *host.transitions):
            self.signatures.pop(t.ref.uid, None)  # written elsewhere: not known what it was
            if self.final_status:
                self.seen.setdefault(t.ref.uid, t.ref)
        other = host.fault == CONCURRENT_WRITE
        if self.kubernetes is not None:
            self.kubernetes[-1].extend(host.before_crash)
            if not other:  # the process died: the restarted one's emitter starts empty
                self.kubernetes.append([])
            self.kubernetes[-1].extend(host.transitions)
            return
        table = self.table
        for t in host.before_crash:  # this process sent them, before it died
            self.emit((_table_line(t) + "\n").encode() if table else _jsonl_line(t))
        for t in host.transitions:
            if other:
                note, marks = "other writer", _OTHER_WRITER
            elif t.id in host.redelivered:
                note, marks = "redelivered", _REDELIVERED
            else:
                note, marks = "restarted host", _RESTARTED
            self.emit((_table_line(t, note) + "\n").encode() if table else _jsonl_line(t, marks))

    def show(self, record: TraceLine, result: Result | HostEvents | None) -> None:
        self.write_header()
        if result.__class__ is HostEvents:  # a fault line fired (it was counted when read)
            self.show_host(result)
            return
        self.done += 1
        if record.__class__ is ObservationLine:
            self.observed += 1
            if self.final_status:
                self.seen.setdefault(record.ref.uid, record.ref)
            if result is None:  # its commit landed just before a crash: written elsewhere
                self.signatures.pop(record.ref.uid, None)
        if result is not None:
            assert isinstance(result, Result)
            self.show_result(result)
        if self.update is not None:
            self.update(self.done)

    def show_result(self, result: Result) -> None:
        if result.error is not None:
            self.failed += 1
            self.unplanned += not injected(result.error)
        # most have one linked write, which landed
        if result.cascade:
            self.count(result.cascade)
        if result.caught_up:
            self.count(result.caught_up)
        if self.final_status:
            _note_objects(result, self.seen)
        if not (
            result.transitions
            or result.cascade
            or result.fallback
            or result.actions
            or result.caught_up
        ):
            return
        if self.kubernetes is not None:
            self.kubernetes[-1].extend(result.all_transitions())
            return
        table = self.table
        changed = _changes(result, self.machines, self.signatures) if table else {}
        for t in result.all_transitions():
            line = _table_line(t, changed=changed.get(t.id, "")) if table else ""
            self.emit((line + "\n").encode() if table else _jsonl_line(t))

    def emit_kubernetes_events(self, machines: MachineRegistry) -> None:
        """The Event objects the run would leave, correlated on the trace's clock: a trace
        orders each object's lines, not all of them; a restarted process
        (crash-after-commit) starts with an empty correlation cache."""
        from ..emitters.kubernetes import format_event_table, simulate_events

        assert self.kubernetes is not None
        rows = [
            row
            for lifetime in self.kubernetes
            for row in simulate_events(sorted(lifetime, key=_at), machines=machines)
        ]
        rows.sort(key=_first_time)
        if self.table:
            rows = [_shown_row(row) for row in rows]
            self.emit((format_event_table(rows) + "\n").encode())
        else:
            for row in rows:
                self.emit(_json_line(_event_row(row)))

    def finish(self, store: Store, machines: MachineRegistry, events: int) -> None:
        """The held output of a throwaway replay, then the final statuses or the summary."""
        out = self.out
        if self.throwaway and self.capture is None:
            if self.table:
                out.write(self.header(self.done))
            self.held.copy_to(out)
        if self.args.final_status:
            if self.capture is not None:
                _final_statuses(store, machines, self.seen, self.capture.append)
            else:
                _final_statuses(store, machines, self.seen, lambda line: out.write(line.decode()))
        elif self.table:
            summary = f"{self.observed} observations, {events} events, {self.failed} failed writes"
            if self.unplanned:
                summary += f" ({self.unplanned} not injected by the trace)"
            out.write(summary + "\n")


#: The status cache a replay keeps unless its URL sets ``?cache=``: a replay is a batch writer
#: over a trace of any length, so its cache is bounded well below the stores' default
#: (ADR 0134, 0155): its memory does not grow with the trace's objects past this.
REPLAY_CACHE = 16_384
_POSTGRES = ("postgresql", "postgres")


def _cached(url: str) -> dict[str, Any]:
    """The options a replay adds to its store URL: a bounded status cache (unless the URL
    sets one); on PostgreSQL, ``notify`` -- a replica's cache must see what the replay
    writes."""
    notify = {"notify": True} if url.partition(":")[0].lower() in _POSTGRES else {}
    return notify | cache_option(url, REPLAY_CACHE)


def _metrics(args: argparse.Namespace) -> Any:
    """``--metrics FILE``: a Prometheus telemetry on a registry of its own, or ``None``."""
    if getattr(args, "metrics", None) is None:
        return None
    from prometheus_client import CollectorRegistry

    from ..telemetry.prometheus import PrometheusTelemetry

    return PrometheusTelemetry(CollectorRegistry())


def _write_metrics(metrics: Any, path: str) -> None:
    """The replay's metrics in the Prometheus text format, to ``path`` (``-``: stderr)."""
    from prometheus_client import generate_latest

    text = generate_latest(metrics).decode()
    if path == "-":
        sys.stderr.write(text)
        return
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


#: How events another host sent are marked in ``--format jsonl`` (and golden files).
_OTHER_WRITER: dict[str, Any] = {"sent_by": "other writer"}
_REDELIVERED: dict[str, Any] = {"sent_by": "restarted host", "redelivered": True}
_RESTARTED: dict[str, Any] = {"sent_by": "restarted host"}
