"""Typed exceptions. Every refusal of bad input is one of these, never a bare ``Exception``."""

from __future__ import annotations


class LifecycleError(Exception):
    """Base class of every error this library raises on purpose."""


class UnknownMachine(LifecycleError):
    """A machine name or object kind that no registered machine answers to."""


class UnknownObservation(LifecycleError):
    """An observation that the machine's vocabulary does not name."""


class InvalidObservation(LifecycleError):
    """An observation with missing, extra or wrongly typed fields, or impossible values."""


class InvalidTransition(LifecycleError):
    """A (state, observation) pair that the machine's table refuses: no row, no ignore row."""

    def __init__(self, machine: str, state: str, observation: str) -> None:
        self.machine = machine
        self.state = state
        self.observation = observation
        shown = state or '""'
        super().__init__(
            f"{machine}: observation {observation} is not accepted in state {shown} "
            "(the table has no row for this pair)"
        )


class TableError(LifecycleError):
    """A transition table that is malformed: unknown states, guards or duplicate rows."""


class StoreError(LifecycleError):
    """The store could not do what was asked (I/O, database or serialisation failure)."""


class Conflict(StoreError):
    """Optimistic concurrency: the stored version is not the one the write expected."""

    def __init__(self, uid: str, expected: int, actual: int | None) -> None:
        self.uid = uid
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"write conflict on {uid}: expected version {expected}, store has {actual}"
        )


class TraceError(LifecycleError):
    """A trace line that cannot be replayed; ``str()`` is ``FILE:LINE: what is wrong``."""

    def __init__(self, path: str, line: int, problem: str) -> None:
        self.path = path
        self.line = line
        self.problem = problem
        super().__init__(f"{path}:{line}: {problem}")
