"""Trace files: JSON Lines of provider observations (and injected faults), and their replay.

One record per line::

    {"at": "2026-11-30T10:00:00Z", "machine": "pod",
     "object": {"namespace": "ml", "name": "trainer-0", "uid": "7d1e"},
     "observe": "ProvisionSucceeded", "with": {"reserved": true, "instance_id": "i-1"}}
    {"at": "...", "machine": "pod", "object": {...}, "fault": "conflict", "times": 2}

A fault line makes the next ``times`` status writes of that object fail (``conflict`` or
``write-error``), to exercise the write-then-emit protocol. Blank lines and lines starting
with ``#`` are skipped. The whole trace is validated, and then dry-run against a read-through
overlay of the store, before anything is written; a bad line is reported as ``FILE:LINE:``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import attrs

from ._core.errors import LifecycleError, TraceError
from ._core.machine import Machine
from ._core.observation import Observation
from ._core.refs import ObjectRef
from ._core.serde import parse_time
from .emitters.base import Emitter
from .machines import MachineRegistry, default_registry
from .runner import Result, RetryPolicy, Runner
from .stores.base import Store
from .stores.overlay import FAULTS, FaultyStore, OverlayStore

_KEYS = {"at", "machine", "object", "observe", "with", "fault", "times"}


@attrs.frozen(slots=True)
class ObservationLine:
    line: int
    machine: Machine[Any]
    ref: ObjectRef
    observation: Observation


@attrs.frozen(slots=True)
class FaultLine:
    line: int
    machine: Machine[Any]
    ref: ObjectRef
    at: datetime
    fault: str
    times: int


TraceLine = ObservationLine | FaultLine


def _ref(machine: Machine[Any], obj: object) -> ObjectRef:
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
    return ObjectRef(machine.kind, values[0], values[1], values[2])


def parse_line(text: str, machines: MachineRegistry) -> TraceLine | None:
    """One line to a record (``None`` for blanks and comments); raises ``ValueError`` or a
    :class:`~lifecycle.LifecycleError` describing what is wrong."""
    stripped = text.strip()
    if not stripped or stripped.startswith("#"):
        return None
    try:
        data = json.loads(stripped)
    except json.JSONDecodeError as e:
        raise ValueError(f"malformed JSON: {e.msg} (column {e.colno})") from None
    if not isinstance(data, dict):
        raise ValueError("a trace line must be a JSON object")
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise ValueError(f"unknown key(s) {', '.join(unknown)}")
    for key in ("at", "machine", "object"):
        if key not in data:
            raise ValueError(f'missing "{key}"')
    if not isinstance(data["machine"], str):
        raise ValueError('"machine" must be a string')
    machine = machines[data["machine"]]
    ref = _ref(machine, data["object"])
    at = parse_time(data["at"])
    if "fault" in data:
        if "observe" in data or "with" in data:
            raise ValueError('a fault line has no "observe" or "with"')
        fault, times = data["fault"], data.get("times", 1)
        if fault not in FAULTS:
            raise ValueError(f'"fault" must be one of {", ".join(FAULTS)}, not {fault!r}')
        if not isinstance(times, int) or isinstance(times, bool) or times < 1:
            raise ValueError(f'"times" must be a positive integer, not {times!r}')
        return FaultLine(0, machine, ref, at, fault, times)
    if "times" in data:
        raise ValueError('"times" belongs to fault lines only')
    if "observe" not in data:
        raise ValueError('missing "observe" (or "fault")')
    if not isinstance(data["observe"], str):
        raise ValueError('"observe" must be a string')
    fields = data.get("with", {})
    if not isinstance(fields, dict):
        raise ValueError('"with" must be an object')
    observation = machine.observation(data["observe"], data["at"], fields)
    return ObservationLine(0, machine, ref, observation)


def read_trace(path: str | Path, machines: MachineRegistry | None = None) -> list[TraceLine]:
    """Parse and validate a whole trace; the first bad line raises :class:`TraceError`."""
    machines = machines if machines is not None else default_registry()
    name = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise TraceError(name, 0, f"cannot read trace: {e}") from None
    return parse_lines(text.splitlines(), name, machines)


def parse_lines(lines: Iterable[str], name: str, machines: MachineRegistry) -> list[TraceLine]:
    out: list[TraceLine] = []
    last_at: dict[str, datetime] = {}
    for number, text in enumerate(lines, start=1):
        try:
            record = parse_line(text, machines)
        except (ValueError, LifecycleError) as e:
            raise TraceError(name, number, str(e)) from None
        if record is None:
            continue
        at = record.at if isinstance(record, FaultLine) else record.observation.at
        previous = last_at.get(record.ref.uid)
        if previous is not None and at < previous:
            raise TraceError(
                name,
                number,
                f"time goes backwards for {record.ref}: {at.isoformat()} is before "
                f"{previous.isoformat()}",
            )
        last_at[record.ref.uid] = at
        out.append(attrs.evolve(record, line=number))
    return out


def _run(
    trace: Iterable[TraceLine], runner: Runner, store: FaultyStore, name: str
) -> Iterator[tuple[TraceLine, Result | None]]:
    for record in trace:
        if isinstance(record, FaultLine):
            store.inject(record.ref.uid, record.fault, record.times)  # type: ignore[arg-type]
            yield record, None
            continue
        try:
            result = runner.observe(record.ref, record.observation)
        except LifecycleError as e:
            raise TraceError(name, record.line, str(e)) from None
        yield record, result


def replay(
    trace: list[TraceLine],
    store: Store,
    emitters: Iterable[Emitter] = (),
    *,
    name: str = "<trace>",
    machines: MachineRegistry | None = None,
    on_result: Callable[[TraceLine, Result | None], None] | None = None,
) -> list[Result]:
    """Replay a parsed trace into ``store``, delivering events to ``emitters``.

    A dry run first folds the whole trace over a read-through overlay of ``store`` (faults
    included, no emitters): a line the machines refuse raises :class:`TraceError` before
    anything is written. Retries do not sleep during replay.
    """
    machines = machines if machines is not None else default_registry()
    policy = RetryPolicy(backoff=0.0)
    dry = FaultyStore(OverlayStore(store))
    for _ in _run(trace, Runner(dry, (), machines=machines, policy=policy), dry, name):
        pass
    real = FaultyStore(store)
    runner = Runner(real, tuple(emitters), machines=machines, policy=policy)
    results = []
    for record, result in _run(trace, runner, real, name):
        if on_result is not None:
            on_result(record, result)
        if result is not None:
            results.append(result)
    return results
