"""Test doubles and scenario steps: a failing emitter, per-call SQLite files, fault steps."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import attrs

from .._core.observation import Observation
from .._core.transition import Transition
from ..emitters.memory import MemoryEmitter
from ..stores.sqlite import SQLiteStore, Synchronous


# -- steps beside observations ----------------------------------------------------------------
@attrs.frozen(slots=True)
class InjectFault:
    """The next ``times`` commits of the object fail with ``kind`` (see :class:`FaultyStore`)."""

    kind: Literal["conflict", "write-error"]
    times: int = 1


@attrs.frozen(slots=True)
class FailEmitter:
    """The next ``times`` deliveries to the failing emitter raise (the events stay queued)."""

    times: int = 1


@attrs.frozen(slots=True)
class Redeliver:
    """Run :meth:`~lifecycle.Runner.redeliver` (what a host does after a crash)."""


Step = Observation | InjectFault | FailEmitter | Redeliver


class FailingEmitter(MemoryEmitter):
    """A :class:`MemoryEmitter` whose next ``failures`` deliveries raise ``error``.

    Refused transitions are kept in :attr:`refused`; accepted ones in :attr:`events`.
    """

    def __init__(self, failures: int = 1, error: Exception | None = None) -> None:
        super().__init__()
        self.failures = failures
        self.error = error if error is not None else RuntimeError("emitter unavailable")
        self.refused: list[Transition] = []

    def arm(self, failures: int) -> None:
        """Make the next ``failures`` deliveries raise."""
        self.failures = failures

    def emit(self, transition: Transition) -> None:
        if self.failures > 0:
            self.failures -= 1
            self.refused.append(transition)
            raise self.error
        super().emit(transition)


def sqlite_factory(
    directory: str | Path, *, synchronous: Synchronous = "OFF", **options: Any
) -> Callable[[], SQLiteStore]:
    """A store factory making a fresh SQLite file in ``directory`` per call (fast: no fsync)."""
    folder = Path(directory)

    def make() -> SQLiteStore:
        path = folder / f"lifecycle-{uuid.uuid4().hex}.db"
        return SQLiteStore(path, synchronous=synchronous, **options)

    return make
