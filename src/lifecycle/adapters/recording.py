"""Recording what provider adapters observed, as a trace an operator can replay.

The trace format is the kernel's (:mod:`lifecycle.trace`); this module adds what a *live*
controller needs on top of :class:`lifecycle.trace.TraceRecorder`:

- :func:`redact` scrubs credentials and tokens out of free text (provider error messages can
  quote signed URLs, session tokens, key ids or connection strings), :func:`scrub` out of any
  value, keeping its structure: the library's one redactor (ADR 0080). Every observation the
  Modal and AWS adapters return is scrubbed, so neither the journal nor a trace ever holds a
  secret; recorders apply it again as a second line of defence.
- :class:`TraceFileRecorder` appends each line to a file (or stream) as it is recorded and
  flushes it, so a controller that crashes keeps everything it saw up to the crash. It is
  thread-safe and keeps time from going backwards for an object (a wall clock may step back;
  ``lifecycle replay`` refuses a trace whose time runs backwards).
- :class:`RedactingRecorder` wraps any recorder (e.g. the kernel's in-memory one).

Record with either, then ``lifecycle replay saw.jsonl``.
"""

from __future__ import annotations

import json
import threading
from datetime import datetime
from pathlib import Path
from typing import Protocol, TextIO

import attrs

from .._core.observation import Observation
from .._core.redact import REDACTED, is_secret_key, redact, redact_observation, scrub
from .._core.refs import ObjectRef
from .._core.trace_lines import observation_line
from ..machines import MachineRegistry, default_registry

__all__ = [
    "REDACTED",
    "ObservationRecorder",
    "RedactingRecorder",
    "TraceFileRecorder",
    "is_secret_key",
    "redact",
    "redact_observation",
    "scrub",
]


class ObservationRecorder(Protocol):
    """Whatever keeps the observations an adapter (or the fake node) made, one ``(ref,
    observation)`` at a time: :class:`TraceFileRecorder`, :class:`RedactingRecorder`,
    :class:`~lifecycle.trace.TraceRecorder`. (The Kubernetes emitter's event recorder is another
    idea: it records transitions as Events.)"""

    def record(self, ref: ObjectRef, observation: Observation) -> None:
        """Keep one observation.

        Args:
            ref: the object it is about.
            observation: what was seen; it may hold a provider's text, so redact it first.
        """
        ...


class RedactingRecorder:
    """Passes each observation, redacted, to ``inner``.

    Args:
        inner: the recorder that keeps them, e.g. the kernel's in-memory
            :class:`~lifecycle.trace.TraceRecorder`, which does not redact on its own.
    """

    def __init__(self, inner: ObservationRecorder) -> None:
        self.inner = inner

    def record(self, ref: ObjectRef, observation: Observation) -> None:
        """Redact ``observation`` and pass it on.

        Args:
            ref: the object it is about.
            observation: what was seen.
        """
        self.inner.record(ref, redact_observation(observation))


class TraceFileRecorder:
    """Appends one trace line per observation to ``target`` (a path or an open text stream),
    flushing each, so the file is a valid trace at every moment.

    ``comment`` is written first as ``#`` lines (only when the file is new or empty). Time is
    kept from running backwards per object: an observation older than the last one recorded
    for the same uid is written with that last time (and counted in :attr:`clamped`).

    Args:
        target: a file path, opened for appending (and closed by :meth:`close`), or an open
            text stream, which stays the caller's.
        machines: the machines whose observations are written; by default the shipped
            ones. An observation of a kind none of them handles is refused.
        comment: ``#`` lines written first, only into a new or empty file, so appending to
            a trace does not put comments in its middle.
    """

    def __init__(
        self,
        target: str | Path | TextIO,
        *,
        machines: MachineRegistry | None = None,
        comment: str = "",
    ) -> None:
        self.machines = machines if machines is not None else default_registry()
        self._lock = threading.Lock()
        self._last: dict[str, datetime] = {}
        self._owned = isinstance(target, str | Path)
        if isinstance(target, str | Path):
            self._stream: TextIO = Path(target).open("a", encoding="utf-8")  # noqa: SIM115
        else:
            self._stream = target
        #: How many lines were written, and how many had their time moved forward.
        self.written = 0
        self.clamped = 0
        if comment and self._is_empty():
            self._stream.write("".join(f"# {c}\n" for c in comment.splitlines()))
            self._stream.flush()

    def _is_empty(self) -> bool:
        try:
            return self._stream.tell() == 0
        except (OSError, ValueError):
            return True

    def record(self, ref: ObjectRef, observation: Observation) -> None:
        """Redact ``observation`` and append it as one trace line, flushed.

        Args:
            ref: the object it is about; its kind picks the machine.
            observation: what was seen; stamped no earlier than the last one of the same
                uid, because a replay refuses time that runs backwards.

        Raises:
            UnknownMachine: no machine in ``machines`` handles ``ref.kind``.
        """
        machine = self.machines.for_kind(ref.kind)
        clean = redact_observation(observation)
        with self._lock:
            last = self._last.get(ref.uid)
            if last is not None and clean.at < last:
                clean = attrs.evolve(clean, at=last)
                self.clamped += 1
            self._last[ref.uid] = clean.at
            line = json.dumps(observation_line(machine, ref, clean), sort_keys=False)
            self._stream.write(line + "\n")
            self._stream.flush()
            self.written += 1

    def close(self) -> None:
        """Close the file this recorder opened; a stream it was given stays open."""
        with self._lock:
            if self._owned and not self._stream.closed:
                self._stream.close()

    def __enter__(self) -> TraceFileRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
