"""Trace files: JSON Lines of provider observations (and injected faults), and their replay.

One record per line::

    {"at": "2026-11-30T10:00:00Z", "machine": "pod",
     "object": {"namespace": "ml", "name": "trainer-0", "uid": "7d1e"},
     "observe": "ProvisionSucceeded", "with": {"reserved": true, "instance_id": "i-1"}}
    {"at": "...", "machine": "pod", "object": {...}, "fault": "conflict", "times": 2}

A fault line exercises the write-then-emit protocol on that object: ``conflict`` and
``write-error`` make its next ``times`` status writes fail; ``concurrent-write`` (with an
``observe`` and ``with`` of its own) has another writer commit that observation just before
our next write of the object, so that write meets a real conflict and re-reads the other
writer's status; ``crash-after-commit`` kills the replaying process right after the object's
next commit lands, before its events are delivered, and a restarted host (a new
:class:`~lifecycle.Runner` on the same store) redelivers them from the outbox and applies the
pending cascade intents. Blank lines and lines starting with ``#`` are skipped. The whole
trace is validated, and then dry-run against a read-through overlay of the store, before
anything is written; a bad line is reported as ``FILE:LINE:``.
Each line is one JSON object (a key repeated at any depth is refused, never last-wins) of at
most :data:`MAX_LINE_BYTES` bytes of UTF-8 (``max_line_bytes`` of the readers; a longer line
is refused without being read whole).
One uid names one object: a line that reuses a uid (or the uid of a linked object, such as a
Pod's NodeClaim ``<uid>-claim``) for another object is refused.

:class:`TraceRecorder` writes the same format from live observations (an adapter feeding a
runner), so an operator can save what a controller saw and replay it later.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple, TextIO

import orjson
import structlog

from ._core.bounds import check_ref
from ._core.errors import (
    Conflict,
    IdentityMismatch,
    InvalidReference,
    LifecycleError,
    StoreError,
    TraceError,
    preview,
)
from ._core.limits import Limits
from ._core.machine import Machine
from ._core.observation import Observation
from ._core.redact import redact_observation
from ._core.refs import ObjectRef
from ._core.serde import parse_time
from ._core.trace_lines import format_time as format_time  # re-exported: public here
from ._core.trace_lines import object_fields as _object
from ._core.trace_lines import observation_line as observation_line  # re-exported
from ._core.transition import Transition
from ._testing.doubles import FAULTS, FaultyStore
from .emitters.base import Emitter
from .links import Link, default_links
from .machines import MachineRegistry, default_registry
from .runner import Result, RetryPolicy, Runner
from .stores.base import Store
from .stores.dry_run import DryRunStore
from .telemetry import Telemetry

_KEYS = {"at", "machine", "object", "observe", "with", "fault", "times"}

#: Another writer commits the line's observation just before our next write of the object.
CONCURRENT_WRITE = "concurrent-write"
#: The process dies right after the object's next commit lands, before delivery.
CRASH_AFTER_COMMIT = "crash-after-commit"
#: Every ``"fault"`` a trace line may name: the store's failures, then the protocol's races.
TRACE_FAULTS: tuple[str, ...] = (*FAULTS, CONCURRENT_WRITE, CRASH_AFTER_COMMIT)
#: Restarts one line may cause before the replay gives up (each needs a crash fault line).
MAX_RESTARTS = 100

#: The default limit of one trace line, in bytes of UTF-8 (its line ending not counted).
MAX_LINE_BYTES = 1 << 20
#: The default limit of a fault line's ``times`` (:data:`FAULT_LIMITS`).
MAX_FAULT_TIMES = 10_000
#: The limits of a fault line's counts (ADR 0100): ``times`` is how many writes of the object
#: fail; a host replaying longer fault runs raises it (``FAULT_LIMITS.set("times", n)``).
FAULT_LIMITS = Limits(
    "lifecycle.trace.FAULT_LIMITS",
    times=(MAX_FAULT_TIMES, "each is one failed write of the object"),
)


class ObservationLine(NamedTuple):
    """An observation of ``ref`` on line ``line`` (named tuples: a trace has millions).

    Attributes:
        line: the line's number, from 1, as errors name it.
        machine: the machine the line names.
        ref: the object.
        observation: what was observed, already checked against the machine's table.
    """

    line: int
    machine: Machine[Any]
    ref: ObjectRef
    observation: Observation


class FaultLine(NamedTuple):
    """A fault on ``ref``: its next ``times`` status writes fail with ``fault``
    (``conflict``, ``write-error``); or another writer commits ``observation`` just before
    our next write of it (``concurrent-write``); or the process dies right after its next
    commit (``crash-after-commit``).

    Attributes:
        line: the line's number.
        machine: the machine the line names.
        ref: the object.
        at: the line's time.
        fault: ``conflict``, ``write-error``, ``concurrent-write`` or ``crash-after-commit``.
        times: how many writes fail (1 for the last two).
        observation: the other writer's observation (``concurrent-write`` only).
    """

    line: int
    machine: Machine[Any]
    ref: ObjectRef
    at: datetime
    fault: str
    times: int
    #: the other writer's observation (``concurrent-write`` only)
    observation: Observation | None = None


class HostEvents(NamedTuple):
    """What a fault line made another host do, once it fired: the other writer's commit
    (``concurrent-write``) or a restarted host's start-up redelivery (``crash-after-commit``).

    ``transitions`` are the events that host sent, in order; ``results`` the other writer's
    write (a redelivery reports none: :meth:`~lifecycle.Runner.redeliver` counts only).
    After a crash, ``redelivered`` names those of ``transitions`` that the dead process had
    committed (sent again from the outbox under the ids they were committed under; the others
    are the restarted host's own commits, made applying pending cascade intents), and
    ``before_crash`` holds the events the dying process had sent in that line before it died
    (the line's result died with it).

    Attributes:
        cause: the fault line that fired.
        transitions: the events the other host sent, in order.
        results: the other writer's write; empty for a redelivery.
        redelivered: the ids among ``transitions`` the dead process had committed.
        before_crash: the events the dying process sent in that line before it died.
    """

    #: the fault line that fired
    cause: FaultLine
    transitions: tuple[Transition, ...]
    results: tuple[Result, ...] = ()
    redelivered: frozenset[str] = frozenset()
    before_crash: tuple[Transition, ...] = ()

    @property
    def fault(self) -> str:
        """``concurrent-write`` (another writer) or ``crash-after-commit`` (a restart)."""
        return self.cause.fault


TraceLine = ObservationLine | FaultLine


#: uid -> the last ObjectRef a line named by it (bounded: cleared when full).
_REFS: dict[object, ObjectRef] = {}


def _ref(machine: Machine[Any], obj: object) -> ObjectRef:
    """The line's object, checked; the same ObjectRef instance for every line naming it."""
    if type(obj) is dict and len(obj) == 3:
        try:
            cached = _REFS.get(obj.get("uid"))
        except TypeError:  # an unhashable uid: the full check says why
            cached = None
        if (
            cached is not None
            and cached.name == obj.get("name")
            and cached.namespace == obj.get("namespace")
            and cached.kind == machine.kind
        ):
            return cached
    ref = _check_ref(machine, obj)
    if len(_REFS) >= 100_000:
        _REFS.clear()
    _REFS[ref.uid] = ref
    return ref


def _check_ref(machine: Machine[Any], obj: object) -> ObjectRef:
    if not isinstance(obj, dict):
        raise ValueError('"object" must be an object with namespace, name and uid')
    extra = sorted(set(obj) - {"namespace", "name", "uid"})
    if extra:
        raise ValueError(f'"object" has unknown key(s) {", ".join(extra)}')
    values = []
    for key in ("namespace", "name", "uid"):
        value = obj.get(key, "" if key == "namespace" else None)
        if not isinstance(value, str):
            raise ValueError(f'"object.{key}" must be a string')
        if key != "namespace" and not value:
            raise ValueError(f'"object.{key}" must not be empty')
        values.append(value)
    if ":" in values[2]:
        raise ValueError('"object.uid" must not contain ":" (event ids are uid:version:n)')
    # (one namespace holds many objects: one string for all of them)
    return ObjectRef(machine.kind, sys.intern(values[0]), values[1], values[2])


def parse_line(
    text: str, machines: MachineRegistry, line: int = 0, max_line_bytes: int = MAX_LINE_BYTES
) -> TraceLine | None:
    """One line to a record (``None`` for blanks and comments).

    Args:
        text: the line, with or without its line ending.
        machines: the machines a line may name.
        line: its number, stored in the record for error messages.
        max_line_bytes: the longest line accepted (UTF-8, without its line ending): a trace
            is untrusted input, and a bound keeps one line from exhausting memory.

    Returns:
        An :class:`ObservationLine` or a :class:`FaultLine`; ``None`` for a blank or ``#``
        line.

    Raises:
        ValueError: malformed JSON, unknown keys, a bad fault line.
        LifecycleError: what the machine refuses (an unknown observation, a bad field).
    """
    if len(text) > max_line_bytes >> 2:  # a shorter one cannot exceed it, even all 4-byte
        _check_size(text, max_line_bytes)
    try:
        data = orjson.loads(text)  # JSON's own whitespace around the value is allowed
    except orjson.JSONDecodeError as e:
        data = _stripped(text, e)  # (the rare path: a blank, a comment, other whitespace)
        if data is None:
            return None
    _check_keys(data)
    name = data["machine"]
    if type(name) is not str:
        raise ValueError('"machine" must be a string')
    machine = machines[name]
    ref = _ref(machine, data["object"])
    at = parse_time(data["at"])
    if "fault" in data:
        return _fault_line(text, data, line, machine, ref, at)
    if "times" in data:
        raise ValueError('"times" belongs to fault lines only')
    observe = data.get("observe")
    if type(observe) is not str:
        if "observe" not in data:
            raise ValueError('missing "observe" (or "fault")')
        raise ValueError('"observe" must be a string')
    fields = data.get("with", _NO_FIELDS)
    if type(fields) is not dict:
        raise ValueError('"with" must be an object')
    # _unique_keys_in(text, data, fields), inline: the hot path of every replay
    if text.count(":") != len(data) + len(data["object"]) + len(fields) + data["at"].count(":") or (
        "\\" in text and ("003a" in text or "003A" in text)
    ):
        _unique_keys_in(text, data, fields)
    observation = machine.observation(observe, at, fields)
    return _new_tuple(ObservationLine, (line, machine, ref, observation))


#: Builds an :class:`ObservationLine` from its fields in order with the named tuple's own
#: ``_make`` (``tuple.__new__`` paid under 3 % of a parsed line; ADR 0154).
_new_tuple: Callable[[type[ObservationLine], tuple[Any, ...]], ObservationLine] = (
    ObservationLine._make.__func__  # type: ignore[attr-defined]
)


def _stripped(text: str, error: orjson.JSONDecodeError) -> Any:
    """A line that is not JSON as it stands: ``None`` for a blank or a comment, else its
    JSON once any other whitespace is stripped, else ``ValueError`` (``error`` the reason)."""
    stripped = text.strip()  # and any other whitespace, as before
    if not stripped or stripped.startswith("#"):
        return None
    try:
        return orjson.loads(stripped)
    except orjson.JSONDecodeError:
        raise ValueError(f"malformed JSON: {error.msg} (column {error.colno})") from None


def _check_keys(data: Any) -> None:
    """Refuse a line that is not a JSON object of known keys, with the three every line has."""
    if type(data) is not dict:
        raise ValueError("a trace line must be a JSON object")
    if not _KEYS.issuperset(data):
        raise ValueError(f"unknown key(s) {', '.join(sorted(set(data) - _KEYS))}")
    if "at" not in data or "machine" not in data or "object" not in data:
        missing = next(k for k in ("at", "machine", "object") if k not in data)
        raise ValueError(f'missing "{missing}"')


def _unique_keys_in(text: str, data: dict[str, Any], fields: dict[str, Any]) -> None:
    """Refuse ``text`` if it repeats a key anywhere (``data`` is what orjson made of it, with
    a dict ``object`` and ``fields``; see :func:`_refuse_duplicate_keys` for why counting
    ``:`` proves it does not). The cheapest count first: the keys of the three objects of a
    line and the ``:`` of its time; then, if other strings hold a ``:`` or values nest, the
    ``:`` of the whole value written back; then, only if those disagree, a second parse."""
    seen = len(data) + len(data["object"]) + len(fields) + data["at"].count(":")
    escaped_colon = "\\" in text and ("003a" in text or "003A" in text)
    if escaped_colon or (text.count(":") != seen and _may_repeat_keys(data, text)):
        _refuse_duplicate_keys(text)


def _check_size(text: str, limit: int) -> None:
    """Refuse a line of more than ``limit`` bytes of UTF-8 (a line ending is not counted)."""
    body = text.rstrip("\r\n")
    if len(body) > limit or len(body.encode("utf-8", "surrogatepass")) > limit:
        raise ValueError(
            f"line longer than {limit} bytes (the limit of one trace line; --max-line-bytes)"
        )


class _DuplicateKey(Exception):  # internal: never reaches a caller (tests/test_exception_tree.py)
    def __init__(self, key: str) -> None:
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return obj


def _may_repeat_keys(data: dict[str, Any], text: str) -> bool:
    """Whether ``text`` (parsed to ``data``) may repeat a key, by a cheap test that is never
    wrong when it says no (see :func:`_refuse_duplicate_keys`)."""
    try:
        colons = orjson.dumps(data).count(b":")
    except orjson.JSONEncodeError:  # nested deeper than orjson writes
        return True
    return colons != text.count(":") or ("\\" in text and ("003a" in text or "003A" in text))


def _refuse_duplicate_keys(text: str) -> None:
    """Parse ``text`` again, slowly, refusing any object that repeats a key.

    :func:`parse_line` calls this only when a cheap test cannot rule repeats out. orjson keeps
    the last of repeated keys, dropping the pair before it, and with it at least one ``:``
    (its key's); ``:`` inside strings survive parsing unchanged unless written as an escape
    (``\\u003a``). So a line without that escape whose re-serialised value has as many ``:``
    as its text repeats no key, and only other lines (rare) pay for this second parse.
    """
    try:
        json.loads(text, object_pairs_hook=_unique_keys)
    except _DuplicateKey as e:
        raise ValueError(
            f"duplicate key {preview(e.key)} in a JSON object (a key may appear once)"
        ) from None
    except RecursionError:
        raise ValueError("malformed JSON: nested too deeply") from None
    except ValueError as e:  # orjson accepted it; should json refuse, say so plainly
        raise ValueError(f"malformed JSON: {preview(str(e), 120)}") from None


_NO_FIELDS: dict[str, Any] = {}


def _fault_line(
    text: str,
    data: dict[str, Any],
    line: int,
    machine: Machine[Any],
    ref: ObjectRef,
    at: datetime,
) -> FaultLine:
    fault = data["fault"]
    if fault not in TRACE_FAULTS:
        raise ValueError(f'"fault" must be one of {", ".join(TRACE_FAULTS)}, not {preview(fault)}')
    if fault == CONCURRENT_WRITE:
        if "times" in data:
            raise ValueError('"times" does not go with "concurrent-write" (one line per write)')
        observe = data.get("observe")
        if type(observe) is not str:
            if "observe" not in data:
                raise ValueError(
                    'a "concurrent-write" line needs "observe": what the other writer commits'
                )
            raise ValueError('"observe" must be a string')
        fields = data.get("with", _NO_FIELDS)
        if type(fields) is not dict:
            raise ValueError('"with" must be an object')
        _unique_keys_in(text, data, fields)
        observation = machine.observation(observe, at, fields)
        return FaultLine(line, machine, ref, at, fault, 1, observation)
    _unique_keys_in(text, data, _NO_FIELDS)
    if "observe" in data or "with" in data:
        raise ValueError(f'a "{fault}" fault line has no "observe" or "with"')
    if fault == CRASH_AFTER_COMMIT and "times" in data:
        raise ValueError('"times" does not go with "crash-after-commit" (a process dies once)')
    times = data.get("times", 1)
    if not isinstance(times, int) or isinstance(times, bool) or times < 1:
        raise ValueError(f'"times" must be a positive integer, not {preview(times)}')
    problem = FAULT_LIMITS.problem("times", times)
    if problem is not None:
        raise ValueError(f'"times": {problem}')
    return FaultLine(line, machine, ref, at, fault, times)


def read_trace(
    path: str | Path,
    machines: MachineRegistry | None = None,
    *,
    max_line_bytes: int = MAX_LINE_BYTES,
    name: str | None = None,
) -> list[TraceLine]:
    """Parse and validate a whole trace; the first bad line raises :class:`TraceError`.
    A line longer than ``max_line_bytes`` (UTF-8) is a bad line.

    Args:
        path: the trace file (JSON Lines, UTF-8).
        machines: the machines a line may name; by default the shipped ones.
        max_line_bytes: the longest line accepted.
        name: what errors call the file; by default its path.

    Returns:
        Every record, in order.

    Raises:
        TraceError: the file cannot be read, or the first bad line, with its number.
        ValueError: ``max_line_bytes`` is not a positive int.
    """
    return list(stream_trace(path, machines, max_line_bytes=max_line_bytes, name=name))


def stream_trace(
    path: str | Path,
    machines: MachineRegistry | None = None,
    *,
    max_line_bytes: int = MAX_LINE_BYTES,
    name: str | None = None,
) -> Iterator[TraceLine]:
    """:func:`read_trace` one record at a time, reading the file as it goes: a long trace is
    never held whole, nor a line longer than ``max_line_bytes``. Lines end at ``\\n``
    (``\\r\\n`` and ``\\r`` too); a bad line raises :class:`TraceError` when the iteration
    reaches it, so what came before it was yielded.

    Args:
        path: the trace file.
        machines: the machines a line may name; by default the shipped ones.
        max_line_bytes: the longest line accepted; a longer one is never read whole.
        name: what errors call the file; by default its path.

    Yields:
        Each record, in order.

    Raises:
        TraceError: as :func:`read_trace`, when the iteration reaches the line.
        ValueError: ``max_line_bytes`` is not a positive int.
    """
    machines = machines if machines is not None else default_registry()
    _check_limit(max_line_bytes)
    name = str(path) if name is None else name
    try:
        f = open(path, encoding="utf-8")  # noqa: SIM115 (closed below, also on early exit)
    except OSError as e:
        raise TraceError(name, 0, f"cannot read trace: {e}") from None
    with f:
        try:
            yield from iter_trace(
                _bounded_lines(f, max_line_bytes), name, machines, max_line_bytes=max_line_bytes
            )
        except UnicodeDecodeError as e:
            line = _undecodable_line(path)
            raise TraceError(name, line, f"not UTF-8: {e.reason} ({e.encoding})") from None
        except OSError as e:
            raise TraceError(name, 0, f"cannot read trace: {e}") from None


def _undecodable_line(path: str | Path) -> int:
    """The number of the first line of ``path`` that is not UTF-8 (lines split as the text
    reader splits them); 0 if it cannot be found. Runs only once a read has failed."""
    try:
        with open(path, "rb") as f:
            for number, raw in enumerate(f.read().splitlines(), start=1):
                try:
                    raw.decode("utf-8")
                except UnicodeDecodeError:
                    return number
    except OSError:
        pass
    return 0


def _check_limit(max_line_bytes: int) -> None:
    if type(max_line_bytes) is not int or max_line_bytes < 1:
        raise ValueError(f"max_line_bytes must be a positive integer, not {max_line_bytes!r}")


def _bounded_lines(f: TextIO, max_line_bytes: int) -> Iterator[str]:
    """The lines of ``f``, each read only up to just past the limit: a longer line comes out
    cut short, still too long, and :func:`parse_line` refuses it (a single huge line is never
    read into memory)."""
    cap = max_line_bytes + 2  # characters, each at least one byte; room for "\r\n"
    return iter(functools.partial(f.readline, cap), "")  # no Python frame a line


def parse_lines(
    lines: Iterable[str],
    name: str,
    machines: MachineRegistry,
    *,
    max_line_bytes: int = MAX_LINE_BYTES,
) -> list[TraceLine]:
    """Parse and validate lines (numbered from 1); the first bad line raises :class:`TraceError`.

    Beyond each line on its own: time must not go backwards for an object, and one uid must
    name one object throughout (including objects the links derive, e.g. a Pod's NodeClaim).
    The whole list at once: :func:`iter_trace` for one record at a time.

    Args:
        lines: a trace's lines (a list, an open file), each with or without its ending.
        name: the trace's name in every error (``NAME:LINE: problem``).
        machines: the registry each line's ``machine`` is looked up in.
        max_line_bytes: the longest line accepted, in UTF-8 bytes.

    Returns:
        Every record, in order, blank and comment lines left out.

    Raises:
        TraceError: the first bad line, with its number.
    """
    return list(iter_trace(lines, name, machines, max_line_bytes=max_line_bytes))


def iter_trace(
    lines: Iterable[str],
    name: str,
    machines: MachineRegistry,
    *,
    max_line_bytes: int = MAX_LINE_BYTES,
) -> Iterator[TraceLine]:
    """:func:`parse_lines`, one record at a time (blank and comment lines yield nothing).

    Args:
        lines: the lines, read as they are iterated.
        name: what errors call the trace.
        machines: the machines a line may name.
        max_line_bytes: the longest line accepted.

    Yields:
        Each record, in order.

    Raises:
        TraceError: the first bad line, when the iteration reaches it.
    """
    _check_limit(max_line_bytes)
    # uid -> (its ref, the time of its last line, the number of its first line): one lookup
    # a line. Times repeat (one poll stamps many objects, parse_time hands out one datetime
    # per text), so most lines find their time already there and store nothing.
    objects: dict[str, tuple[ObjectRef, datetime, int]] = {}
    # uid -> (link, machine, ref, line) of the object a link derives (a Pod's NodeClaim) from
    # the object ``ref`` first named on ``line``, until a line of its own names it; its ref
    # is derived again only then (a trace names few of them itself).
    derived: dict[str, _Derived] = {}
    links = default_links()
    for number, text in enumerate(lines, start=1):
        try:
            record = parse_line(text, machines, number, max_line_bytes)
        except (ValueError, LifecycleError) as e:
            raise TraceError(name, number, str(e)) from None
        if record is None:
            continue
        ref = record.ref
        uid = ref.uid
        at = record.at if record.__class__ is FaultLine else record.observation.at  # type: ignore[union-attr]
        known = objects.get(uid)
        if known is None:  # the first line of this uid
            was = derived.pop(uid, None)
            if was is None:
                _claim_linked(record, number, objects, derived, links, name)
            else:
                link, source, source_ref, line = was
                target = link.target_ref(source_ref, source.initial(source_ref))
                if target != ref:
                    _one_uid_one_object(ref, target, _where(line, link.target), number, name)
            objects[uid] = (ref, at, number)
        else:
            if known[0] is not ref and known[0] != ref:
                _one_uid_one_object(ref, known[0], _where(known[2]), number, name)
            previous = known[1]
            if at is not previous:
                if at < previous:
                    raise TraceError(
                        name,
                        number,
                        f"time goes backwards for {_shown(ref)}: {at.isoformat()} is before "
                        f"{previous.isoformat()}",
                    )
                objects[uid] = (known[0], at, known[2])
        yield record


def _where(number: int, link: str = "") -> str:
    """Where a uid was first named: ``on line 3``, ``as the nodeclaim of line 3``."""
    return f"as the {link} of line {number}" if link else f"on line {number}"


def _one_uid_one_object(
    ref: ObjectRef, known: ObjectRef, where: str, number: int, name: str
) -> None:
    raise TraceError(
        name,
        number,
        f"uid {preview(ref.uid)} names {_short(ref)} here, but {where} it names "
        f"{_full(known)}; one uid must name one object",
    )


#: How a trace found an object a link derives: (link, machine, ref, line) of its source.
_Derived = tuple[Link, Machine[Any], ObjectRef, int]


def _claim_linked(
    record: TraceLine,
    number: int,
    objects: dict[str, tuple[ObjectRef, datetime, int]],
    derived: dict[str, _Derived],
    links: Iterable[Link],
    name: str,
) -> None:
    """The first line naming an object: the uids of objects links derive from it, refused if
    a line already named another object by one of them."""
    ref = record.ref
    for link, target in _linked(record.machine, ref, links):
        if link.by_ref:  # named from the ref alone: a runner refuses the source without it
            try:
                check_ref(target)
            except InvalidReference as e:
                problem = f"{_short(ref)}: its {link.target} cannot be named: {e}"
                raise TraceError(name, number, problem) from None
        named = objects.get(target.uid)
        if named is not None and named[0] != target:
            raise TraceError(
                name,
                number,
                f"uid {preview(target.uid)} is the {link.target} of {_short(ref)} "
                f"({_full(target)}), "
                f"but {_where(named[2])} it names {_full(named[0])}; one uid must name one "
                "object",
            )
        if named is None:
            derived.setdefault(target.uid, (link, record.machine, ref, number))


def _linked(
    machine: Machine[Any], ref: ObjectRef, links: Iterable[Link]
) -> Iterator[tuple[Link, ObjectRef]]:
    """The objects that links derive from ``ref`` alone (a Pod's NodeClaim). Links that need
    a status to name their target (fan-out links, or ones that read the status) are skipped."""
    for link in links:
        if link.source != machine.name or link.fan_out is not None:
            continue
        try:
            target = link.target_ref(ref, machine.initial(ref))
        except Exception:  # a target named by status fields the initial status lacks
            continue
        if target.uid and target.name:
            yield link, target


def _shown(ref: ObjectRef) -> str:
    """``Kind/namespace/name`` for a message, cut short if long (a message stays bounded)."""
    text = str(ref)
    return text if len(text) <= 120 else text[:117] + "..."


def _short(ref: ObjectRef) -> str:
    """``Kind/namespace/name``, cut to a bounded length."""
    text = str(ref)
    return text if len(text) <= 200 else text[:197] + "..."


def _full(ref: ObjectRef) -> str:
    return f"{_short(ref)} (namespace {preview(ref.namespace)}, name {preview(ref.name)})"


class InjectedWriteError(StoreError):
    """A status write that failed because a fault line of the trace said it would."""


class InjectedConflict(Conflict):
    """A write conflict that a fault line of the trace injected (a phantom one, or the real
    one a ``concurrent-write`` line's other writer caused). Its parameters are
    :class:`~lifecycle.Conflict`'s.
    """


def injected(error: BaseException | None) -> bool:
    """Whether ``error`` (a :class:`Result`'s) was injected by a fault line of the trace, as
    opposed to a write the store really refused.

    Args:
        error: a result's error, or ``None``.

    Returns:
        ``True`` for an injected write error or conflict.
    """
    return isinstance(error, InjectedWriteError | InjectedConflict)


class Crash(BaseException):
    """The replaying process died right after a commit a ``crash-after-commit`` line named.

    A ``BaseException``: nothing between the store and the replay loop may catch it, as
    nothing survives a real crash (so it stays outside the ``LifecycleError`` tree).

    Args:
        line: the ``crash-after-commit`` line that fired.
        committed: the ids of the events of the commit that landed just before the crash.
    """

    def __init__(self, line: FaultLine, committed: Iterable[str] = ()) -> None:
        super().__init__(f"crash after a commit of {line.ref} (trace line {line.line})")
        self.line = line
        #: the ids of the events of the commit that landed just before the crash
        self.committed = frozenset(committed)


class _Sent:
    """An emitter that keeps what it is handed while ``on``: the events another host sent."""

    def __init__(self) -> None:
        self.on = False
        self.events: list[Transition] = []

    def emit(self, transition: Transition) -> None:
        if self.on:
            self.events.append(transition)

    def take(self) -> tuple[Transition, ...]:
        out = tuple(self.events)
        self.events.clear()
        return out


#: Makes a runner like the replay's on a store, sending to the replay's emitters and to a
#: recorder of its own (another host: another writer, a restarted process).
_RunnerFactory = Callable[[Store, _Sent], Runner]


class _TraceFaults(FaultyStore):
    """A :class:`FaultyStore` for a trace's fault lines. Its injected failures say so
    (:func:`injected`): a replay tells the failures a trace asked for from those of the
    store. It also plays the protocol's races: another writer's commit just before our next
    write of an object (``concurrent-write``), and the process dying right after an object's
    next commit (``crash-after-commit``: :class:`Crash`)."""

    def __init__(self, inner: Store, make_runner: _RunnerFactory) -> None:
        super().__init__(inner)
        self._make_runner = make_runner
        self._writers: dict[str, list[FaultLine]] = {}
        self._crashes: dict[str, list[FaultLine]] = {}
        #: what fired, in order: the other writers' commits (a restart is added by the replay)
        self.fired: list[HostEvents] = []
        #: other writers' observations their machine refused
        self.refused: list[tuple[FaultLine, LifecycleError]] = []
        self._watch: tuple[str, Observation] | None = None
        #: whether the watched observation's own commit landed
        self.landed = False

    def add(self, record: FaultLine) -> None:
        """Arm ``record`` on its object."""
        uid = record.ref.uid
        if record.fault == CONCURRENT_WRITE:
            self._writers.setdefault(uid, []).append(record)
        elif record.fault == CRASH_AFTER_COMMIT:
            self._crashes.setdefault(uid, []).append(record)
        else:
            self.inject(uid, record.fault, record.times)  # type: ignore[arg-type]

    def watch(self, ref: ObjectRef, observation: Observation | None) -> None:
        """Note in :attr:`landed` whether ``observation``'s own commit on ``ref`` lands."""
        self._watch = None if observation is None else (ref.uid, observation)
        self.landed = False

    def unfired(self) -> FaultLine | None:
        """The first armed ``concurrent-write`` or ``crash-after-commit`` line that never met
        a write of its object."""
        left = [
            line for lines in (self._writers, self._crashes) for q in lines.values() for line in q
        ]
        return min(left, key=lambda line: line.line) if left else None

    def commit(
        self,
        machine: Machine[Any],
        ref: ObjectRef,
        expected: int,
        status: Any,
        observation: Observation,
        transitions: Sequence[Transition],
    ) -> int:
        uid = ref.uid
        writers = self._writers.get(uid)
        raced = bool(writers) and self._write_as_other(writers.pop(0))  # type: ignore[union-attr]
        pending = self.pending_faults(uid)
        try:
            version = super().commit(machine, ref, expected, status, observation, transitions)
        except Conflict as e:
            if raced or self.pending_faults(uid) < pending:
                raise InjectedConflict(e.uid, e.expected, e.actual) from None
            raise
        except StoreError as e:
            if self.pending_faults(uid) < pending:
                raise InjectedWriteError(str(e)) from None
            raise
        watched = self._watch
        if watched is not None and watched[0] == uid and watched[1] is observation:
            self.landed = True
        crashes = self._crashes.get(uid)
        if crashes:
            raise Crash(crashes.pop(0), (t.id for t in transitions if t.intent is None))
        return version

    def _write_as_other(self, line: FaultLine) -> bool:
        """Commit ``line``'s observation as another writer would (a runner of its own on the
        store underneath, sending its events to the replay's emitters); whether it wrote."""
        assert line.observation is not None
        sent = _Sent()
        sent.on = True
        other = self._make_runner(self.inner, sent)
        try:
            result = other.observe(line.ref, line.observation)
        except LifecycleError as e:
            self.refused.append((line, e))
            return False
        self.fired.append(HostEvents(line, sent.take(), (result,)))
        return result.committed


Each = Callable[[TraceLine, Result | HostEvents | None], object]

#: Observation lines a checked replay commits at once (``observe_many``), on a store that
#: commits batches: one transaction (and one flush) per chunk instead of per line.
REPLAY_BATCH = 1000


def _run(
    trace: Iterable[TraceLine],
    runner: Runner,
    name: str,
    each: Each | None = None,
    logger: Any = None,
    batch: int = 1,
) -> None:
    """Feed every line to ``runner``, handing each line and its result to ``each``: ``None``
    for a fault line when it is read, then its :class:`HostEvents` when it fires. The first
    fault line puts a :class:`_TraceFaults` in front of the runner's store; a trace without
    faults never pays for one. ``batch`` > 1: observation lines go to ``observe_many`` in
    chunks of that many (one transaction each on a store with ``commit_many``; each object's
    lines keep their order), until the first fault line."""
    observe = runner.observe
    faults: _FaultyReplay | None = None
    chunk: list[ObservationLine] = []
    component = _link_components(runner) if batch > 1 else {}
    here: dict[int, str] = {}  # the chunk's machine of each link component
    for record in trace:
        if (
            batch > 1
            and faults is None
            and record.__class__ is ObservationLine
            and component.get(record.machine.name) != -1
        ):
            machine = record.machine.name
            group = component.get(machine)
            # a linked machine's line: what came before it lands first
            if group is not None and here.setdefault(group, machine) != machine:
                _run_chunk(chunk, runner, name, each)
                chunk, here = [], {group: machine}
            chunk.append(record)
            if len(chunk) >= batch:
                _run_chunk(chunk, runner, name, each)
                chunk, here = [], {}
            continue
        if chunk:
            _run_chunk(chunk, runner, name, each)
            chunk, here = [], {}
        if isinstance(record, FaultLine):
            if faults is None:
                faults = _FaultyReplay(runner, name, each, logger)
            faults.add(record)
            if each is not None:
                each(record, None)
            continue
        if faults is not None:
            faults.observe(record)
            continue
        try:
            result = observe(record.ref, record.observation)
        except LifecycleError as e:
            raise TraceError(name, record.line, f"{_shown(record.ref)}: {e}") from None
        if result.cascade:  # a linked object whose uid another object holds: refused too
            _refuse_impostors(name, record, result.cascade)
        if each is not None:
            each(record, result)
    if chunk:
        _run_chunk(chunk, runner, name, each)
    if faults is not None:
        faults.finish()


def _link_components(runner: Runner) -> dict[str, int]:
    """Machines joined by links, directly or through others, share a component: a batch
    applies its items round by round and their link intents after each round, so lines of two
    such machines in one chunk could land in another order than the trace's (a Job's own line
    before the Workflow line that launched it). A chunk holds the lines of one machine per
    component; a machine that links to itself (component ``-1``) is observed line by line,
    each of its lines closing the chunk before it."""
    parent: dict[str, str] = {}

    def find(m: str) -> str:
        while parent.setdefault(m, m) != m:
            m = parent[m]
        return m

    selfish: set[str] = set()
    for source, links in runner.protocol.links.items():
        for link in links:
            if link.target == source:
                selfish.add(source)
            parent[find(link.target)] = find(source)
    roots: dict[str, int] = {}
    out: dict[str, int] = {}
    for m in list(parent):
        out[m] = -1 if m in selfish else roots.setdefault(find(m), len(roots))
    return out


def _run_chunk(chunk: list[ObservationLine], runner: Runner, name: str, each: Each | None) -> None:
    """One chunk of observation lines through ``observe_many``, then each line's result in
    line order. A line the machines refuse here (the dry run accepted it: the store no longer
    agrees, because a write failed) is a :class:`TraceError` naming it; the chunk's lines
    around it may have been written."""
    results = runner.observe_many([(r.ref, r.observation) for r in chunk])
    for record, result in zip(chunk, results, strict=True):
        error = result.error
        if isinstance(error, LifecycleError) and not isinstance(error, StoreError):
            raise TraceError(name, record.line, f"{_shown(record.ref)}: {error}") from None
        if result.cascade:
            _refuse_impostors(name, record, result.cascade)
        if each is not None:
            each(record, result)


class _FaultyReplay:
    """The rest of a replay once its first fault line was read: lines go through a
    :class:`_TraceFaults` store, and a crash restarts the host (a new runner on the same
    store, which redelivers the outbox) before the replay goes on."""

    def __init__(self, runner: Runner, name: str, each: Each | None, logger: Any) -> None:
        machines, policy = runner.machines, runner.policy
        # A replay with telemetry: each new runner reports to it, over the plain parts.
        telemetry = runner.telemetry.inner if runner.telemetry is not None else None
        emitters = tuple(getattr(e, "wrapped", e) for e in runner.emitters)

        def make_runner(store: Store, recorder: _Sent) -> Runner:
            return Runner(
                store,
                (recorder, *emitters),
                machines=machines,
                policy=policy,
                logger=logger,
                check_schema=False,
                telemetry=telemetry,
            )

        self.make_runner = make_runner
        self.name = name
        self.each = each
        # (a Store, whatever the runner's annotation says; the plain one under telemetry's)
        underneath: Any = getattr(runner.store, "wrapped", runner.store)
        self.store = _TraceFaults(underneath, make_runner)
        #: what this process sent during the current line (kept only if it dies in it)
        self.sent = _Sent()
        # The replay's runner, from here on with a recorder (nothing pending is lost: a
        # cascade intent not yet confirmed is in the outbox, and this runner applies it).
        self.runner = make_runner(self.store, self.sent)
        if getattr(runner, "pending", None):
            self.runner.redeliver()

    def add(self, record: FaultLine) -> None:
        self.store.add(record)

    def observe(self, record: ObservationLine) -> None:
        store, sent, ref, observation = self.store, self.sent, record.ref, record.observation
        result: Result | None = None
        for _ in range(MAX_RESTARTS):
            store.watch(ref, observation)
            sent.on = True
            try:
                result = self.runner.observe(ref, observation)
            except Crash as crash:
                sent.on = False
                self._report()
                self._restart(crash)
                if store.landed:  # its commit landed: the restarted host sent its events
                    result = None
                    break
                continue  # it died first: the restarted host observes the line again
            except LifecycleError as e:
                raise TraceError(self.name, record.line, f"{_shown(ref)}: {e}") from None
            finally:
                sent.on = False
            break
        else:
            raise TraceError(
                self.name, record.line, f"{_shown(ref)}: more than {MAX_RESTARTS} restarts"
            )
        sent.take()  # the line's result says what was sent
        store.watch(ref, None)
        self._check_other_writers()
        self._report()
        if result is not None and result.cascade:
            _refuse_impostors(self.name, record, result.cascade)
        if self.each is not None:
            self.each(record, result)

    def _restart(self, crash: Crash) -> None:
        """A restarted host: a new runner on the same store redelivers the outbox (events
        under their ids, then pending cascade intents); the dead runner's memory is gone."""
        sent = self.sent
        before = sent.take()
        for _ in range(MAX_RESTARTS):
            self.runner = self.make_runner(self.store, sent)
            sent.on = True
            try:
                for _ in range(MAX_RESTARTS):
                    if not self.runner.redeliver():
                        break
            except Crash as again:  # it died again, redelivering: report, restart once more
                sent.on = False
                host = HostEvents(crash.line, (), (), crash.committed, before)
                self.store.fired.append(host._replace(transitions=sent.take()))
                crash, before = again, ()
                continue
            finally:
                sent.on = False
            host = HostEvents(crash.line, sent.take(), (), crash.committed, before)
            self.store.fired.append(host)
            return
        raise TraceError(self.name, crash.line.line, f"more than {MAX_RESTARTS} restarts")

    def _report(self) -> None:
        """Hand what other hosts sent since the last report to ``each``, in order."""
        fired, self.store.fired = self.store.fired, []
        if self.each is not None:
            for host in fired:
                self.each(host.cause, host)

    def _check_other_writers(self) -> None:
        if self.store.refused:
            line, error = self.store.refused[0]
            what = line.observation.name() if line.observation is not None else "observation"
            raise TraceError(
                self.name, line.line, f"{_shown(line.ref)}: the other writer's {what}: {error}"
            )

    def finish(self) -> None:
        line = self.store.unfired()
        if line is not None:
            raise TraceError(
                self.name,
                line.line,
                f'{_shown(line.ref)}: this "{line.fault}" never fired: no later line writes '
                "this object",
            )


def _refuse_impostors(name: str, record: TraceLine, cascade: Iterable[Result]) -> None:
    """:class:`TraceError` at ``record``'s line if a linked write met an
    :class:`~lifecycle.IdentityMismatch` (a dry run so refuses it before anything is written)."""
    for result in cascade:
        if isinstance(result.error, IdentityMismatch):
            problem = f"{record.ref}: linked {result.ref}: {result.error}"
            raise TraceError(name, record.line, problem)
        _refuse_impostors(name, record, result.cascade)


#: A logger that drops everything: a dry run must not report failures that did not happen.
_SILENT = structlog.wrap_logger(structlog.ReturnLogger(), processors=[])


def check(
    trace: Iterable[TraceLine],
    store: Store,
    *,
    name: str = "<trace>",
    machines: MachineRegistry | None = None,
) -> None:
    """Dry-run ``trace`` over a read-through overlay of ``store`` (faults included, nothing
    emitted, nothing written): a line the machines refuse raises :class:`TraceError`.

    Args:
        trace: the parsed records.
        store: the store the replay would write to; only read.
        name: what errors call the trace.
        machines: the machines the lines name; by default the shipped ones.

    Raises:
        TraceError: the first line the machines refuse.
    """
    machines = machines if machines is not None else default_registry()
    policy = RetryPolicy(backoff=0.0)
    runner = Runner(DryRunStore(store), (), machines=machines, policy=policy, logger=_SILENT)
    _run(trace, runner, name, logger=_SILENT)


def replay(
    trace: Iterable[TraceLine],
    store: Store,
    emitters: Iterable[Emitter] = (),
    *,
    name: str = "<trace>",
    machines: MachineRegistry | None = None,
    on_result: Callable[[TraceLine, Result | HostEvents | None], None] | None = None,
    dry_run: bool = True,
    keep_results: bool = True,
    telemetry: Telemetry | None = None,
    batch: int | None = None,
) -> list[Result]:
    """Replay a parsed trace into ``store``, delivering events to ``emitters``.

    A dry run (:func:`check`) first folds the whole trace over a read-through overlay of
    ``store``: a line the machines refuse raises :class:`TraceError` before anything is
    written. A caller whose store is fresh and thrown away afterwards (``memory://``) may
    pass ``dry_run=False`` and hold back what it shows until the replay returns — emitters
    then receive events as lines are replayed, before a later line may be refused. A caller
    that reads each result in ``on_result`` may pass ``keep_results=False``: nothing is kept
    (a long replay then does not hold one :class:`Result` per line) and ``[]`` is returned.
    Retries do not sleep during replay. A checked replay into a store with ``commit_many``
    commits :data:`REPLAY_BATCH` lines at a time (``batch``: how many; 1, line by line; a
    caller that checked the trace itself passes it with ``dry_run=False``). ``telemetry``
    (:mod:`lifecycle.telemetry`) is told what the replay's runners do, as a live runner's
    would be.

    ``on_result`` gets each line with its :class:`Result`; a fault line gets ``None`` when it
    is read, and its :class:`HostEvents` when it fires (what another writer, or a restarted
    host, sent). An observation line whose commit landed just before a crash gets ``None``
    too: its result died with the process, and the restart's :class:`HostEvents`, handed
    over just before, holds its events. The returned list holds the observation lines'
    results only.

    Args:
        trace: the parsed records (iterated twice when ``dry_run``).
        store: where the statuses are written.
        emitters: where events go, as a live runner's would.
        name: what errors call the trace.
        machines: the machines the lines name; by default the shipped ones.
        on_result: called with each line and its result (see above).
        dry_run: check the whole trace first, so a refused line leaves the store untouched.
        keep_results: keep and return each result; ``False`` holds nothing per line.
        telemetry: told what the replay's runners do.
        batch: lines per ``commit_many`` transaction; 1 replays line by line.

    Returns:
        The observation lines' results, or ``[]`` with ``keep_results=False``.

    Raises:
        TraceError: a line the machines refuse (before anything is written, with
            ``dry_run``).
    """
    machines = machines if machines is not None else default_registry()
    if dry_run:
        if not isinstance(trace, Sequence):
            trace = list(trace)  # the dry run reads it once, the replay again
        check(trace, store, name=name, machines=machines)
    policy = RetryPolicy(backoff=0.0)
    runner = Runner(store, tuple(emitters), machines=machines, policy=policy, telemetry=telemetry)
    # A checked trace into a store that commits batches goes in chunks (one transaction each);
    # an unchecked one line by line, so a refused line stops it where it stands.
    if batch is None:
        batch = REPLAY_BATCH if dry_run and hasattr(store, "commit_many") else 1
    results: list[Result] = []
    each = on_result
    if keep_results:

        def each(record: TraceLine, result: Result | HostEvents | None) -> None:
            if on_result is not None:
                on_result(record, result)
            if isinstance(result, Result):
                results.append(result)

    _run(trace, runner, name, each, batch=batch)
    return results


# -- writing traces ---------------------------------------------------------------------------
def fault_line(
    machine: Machine[Any],
    ref: ObjectRef,
    at: datetime,
    fault: str,
    times: int = 1,
    observation: Observation | None = None,
) -> dict[str, Any]:
    """A fault line: the next ``times`` status writes of ``ref`` fail with ``fault``
    (``conflict``, ``write-error``); or another writer commits ``observation`` just before
    the next one (``concurrent-write``: the line's ``at`` becomes the observation's time, and
    its strings are redacted as :meth:`TraceRecorder.record` does); or the process dies right
    after it (``crash-after-commit``). The last two take no ``times``.

    Args:
        machine: the machine of the object.
        ref: the object.
        at: the line's time.
        fault: one of ``conflict``, ``write-error``, ``concurrent-write``,
            ``crash-after-commit``.
        times: how many writes fail; 1 for the last two.
        observation: the other writer's observation; ``concurrent-write`` only.

    Returns:
        The line as JSON data.

    Raises:
        ValueError: an unknown fault, a ``times`` out of range (a trace its reader would
            refuse), or an observation with the wrong fault.
    """
    if fault not in TRACE_FAULTS:
        raise ValueError(f"fault must be one of {', '.join(TRACE_FAULTS)}, not {fault!r}")
    if times < 1:
        raise ValueError(f"times must be at least 1, got {times}")
    problem = FAULT_LIMITS.problem("times", times)
    if problem is not None:  # a trace its reader would refuse
        raise ValueError(problem)
    if (fault == CONCURRENT_WRITE) != (observation is not None):
        raise ValueError("a concurrent-write fault, and only it, carries an observation")
    line: dict[str, Any] = {
        "at": format_time(at),
        "machine": machine.name,
        "object": _object(ref),
        "fault": fault,
    }
    if observation is not None:
        written = observation_line(machine, ref, redact_observation(observation))
        line["observe"] = written["observe"]
        if "with" in written:
            line["with"] = written["with"]
    if fault in FAULTS:
        line["times"] = times
    elif times != 1:
        raise ValueError(f"a {fault} fault happens once; times must be 1, got {times}")
    return line


class TraceRecorder:
    """Collects what a controller observed as trace lines, to save and replay later.

    Call :meth:`record` with each observation as it is fed to the runner (the fake adapter's
    :class:`~lifecycle.testing.fakes.FakeNode` does this for you). Linked objects (a Pod's
    NodeClaim) need no lines of their own: replay derives them again. Strings in observations
    are redacted (:func:`lifecycle.adapters.recording.redact`): a trace never holds a secret.

    Args:
        machines: the machines observations are recorded for; by default the shipped ones.
    """

    def __init__(self, machines: MachineRegistry | None = None) -> None:
        self.machines = machines if machines is not None else default_registry()
        self.lines: list[dict[str, Any]] = []

    def record(self, ref: ObjectRef, observation: Observation) -> None:
        """Keep ``observation`` as a line, with credentials and tokens redacted.

        Args:
            ref: the object observed; its kind picks the machine.
            observation: what was observed.

        Raises:
            UnknownMachine: no machine handles ``ref.kind``.
        """
        machine = self.machines.for_kind(ref.kind)
        self.lines.append(observation_line(machine, ref, redact_observation(observation)))

    def fault(
        self,
        ref: ObjectRef,
        at: datetime,
        fault: str,
        times: int = 1,
        observation: Observation | None = None,
    ) -> None:
        """Keep a fault line (:func:`fault_line`).

        Args:
            ref: the object.
            at: the line's time.
            fault: the fault.
            times: how many writes fail.
            observation: the other writer's, for ``concurrent-write``.

        Raises:
            ValueError: as :func:`fault_line`.
        """
        machine = self.machines.for_kind(ref.kind)
        self.lines.append(fault_line(machine, ref, at, fault, times, observation))

    def text(self, comment: str = "") -> str:
        """The trace as JSON Lines, after an optional ``#`` comment line.

        Args:
            comment: written first as ``#`` lines (say what was recorded, and when).

        Returns:
            The text, one line per record.
        """
        head = "".join(f"# {c}\n" for c in comment.splitlines()) if comment else ""
        return head + "".join(json.dumps(line) + "\n" for line in self.lines)

    def write(self, target: str | Path | TextIO, comment: str = "") -> None:
        """Save to a path or an open text stream.

        Args:
            target: a path (replaced) or an open text stream (written to).
            comment: as :meth:`text`.
        """
        if isinstance(target, str | Path):
            Path(target).write_text(self.text(comment), encoding="utf-8")
        else:
            target.write(self.text(comment))
