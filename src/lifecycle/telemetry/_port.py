"""The telemetry port: one call per fact the protocol, the stores and the emitters report.

The library calls a :class:`Telemetry` only where a host gave one (``Runner(...,
telemetry=...)``): without it no wrapper is installed and the hot path is what it always was.
Every call is guarded (:class:`Guarded`): an adapter that raises is logged and counted, and
never fails a write or loses an event.

Why "telemetry" and not "observer": in this library an *observation* is what a provider saw
(the input of a machine); the port that watches the library itself is named apart (ADR 0130).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple, Protocol, runtime_checkable

from .._core.errors import CommitUnknown, LifecycleError, StoreError
from .._core.transition import Transition
from .._log import get_logger

if TYPE_CHECKING:
    from .._protocol import Result

__all__ = [
    "OUTCOMES",
    "Guarded",
    "ObserveEnded",
    "Observed",
    "Telemetry",
    "flattened",
    "observe_ended_of",
    "outcome_of",
]

_log = get_logger("lifecycle.telemetry")

#: The outcome label of an observation (``lifecycle_observations_total{outcome=...}``).
OUTCOMES = ("committed", "conflict_retried", "unchanged", "refused", "failed", "unknown")


class Observed(NamedTuple):
    """One write an operation made.

    Attributes:
        machine: the name of the machine of the object written.
        result: what the write did (committed, unchanged, refused, ...).
    """

    machine: str
    result: Result


@runtime_checkable
class Telemetry(Protocol):
    """What a runner reports, one call per fact. Every method must be cheap and must not block:
    it runs on the caller's thread (or event loop) between the store and the emitters.

    ``operation`` is ``"observe"`` (one object; a linked write is an ``"observe"`` of its
    own, nested in its source's), ``"observe_many"`` or ``"redeliver"``.

    One more method is optional (:class:`ObserveEnded`), for an adapter with nothing to do when
    an observe starts.
    """

    #: Whether :meth:`trace_context` is worth asking (a tracing adapter): committed events then
    #: carry it in the outbox, and a redelivery after a restart links back to it.
    traces: bool

    def begin(self, operation: str, machine: str) -> object:
        """An operation starts (for an ``"observe"``, on an object of ``machine``; ``""``
        where none is known); the value returned is handed back to :meth:`end`.
        ``"check_schema"`` is the runner's start-up check of the store's records.

        Args:
            operation: ``"observe"``, ``"observe_many"``, ``"redeliver"`` or
                ``"check_schema"``.
            machine: the machine's name for an ``"observe"``; ``""`` where none is known.

        Returns:
            A token handed back to :meth:`end` (a span, a start time): the port keeps no
            state of its own between the two calls, so nested operations cannot mix up.
        """
        ...

    def end(self, token: object, observed: Sequence[Observed], error: BaseException | None) -> None:
        """It ended: every write it made itself (for a batch, its items with their linked
        writes), or the exception it raised (a refused observation is a
        :class:`~lifecycle.LifecycleError`, a refused store a :class:`~lifecycle.SchemaRefused`).

        Args:
            token: what :meth:`begin` returned for this operation.
            observed: the writes it made, in order; empty when it raised.
            error: the exception it raised, else ``None``.
        """
        ...

    def store_call(
        self, store: str, operation: str, machine: str, seconds: float, error: BaseException | None
    ) -> None:
        """A store call returned (``operation``: ``load``, ``commit``, ``load_many``,
        ``commit_many``, ``claim_undelivered``, ``mark_delivered``) after ``seconds``; ``error``
        if it raised (a :class:`~lifecycle.Conflict` is a lost compare-and-set).

        Args:
            store: the store's name (its class, or its ``name`` attribute).
            operation: the store method called.
            machine: the machine of the object, ``""`` for a call over several.
            seconds: how long the call took, by the monotonic clock.
            error: the exception it raised, else ``None``.
        """
        ...

    def emitted(
        self, emitter: str, transition: Transition, seconds: float, error: BaseException | None
    ) -> None:
        """An emitter was handed ``transition``; ``error`` if it raised.

        Args:
            emitter: the emitter's name (:func:`~lifecycle.emitters.base.emitter_name`).
            transition: the event handed over.
            seconds: how long the emitter took to return (an acknowledging one answers later).
            error: the exception it raised, else ``None``: the event then stays in the outbox.
        """
        ...

    def redelivered(self, transitions: Sequence[Transition]) -> None:
        """Outbox rows were claimed for redelivery (events and link intents).

        Args:
            transitions: the rows claimed, in outbox order.
        """
        ...

    def trace_context(self) -> str:
        """The W3C ``traceparent`` of the current span, recorded on the events a commit writes
        (``""``: none). Asked only where :attr:`traces` is true.

        Returns:
            The ``traceparent`` header value, or ``""``.
        """
        ...


@runtime_checkable
class ObserveEnded(Protocol):
    """The port's one optional method, for an adapter with nothing to do when an observe
    starts (no span to open).

    Where an adapter defines it, a synchronous :meth:`~lifecycle.Runner.observe` times the
    call itself and calls :meth:`observe_ended` once, after it, instead of ``begin`` and
    ``end``. It stands for exactly ``end(begin("observe", machine), observed, error)`` where
    ``observed`` is ``[Observed(machine, result)]`` if ``result`` is not ``None``, else ``()``.
    Batches, redeliveries, the schema check and the asyncio runner always go through ``begin``
    and ``end``. A subclass that overrides ``begin`` or ``end`` of a class defining
    :meth:`observe_ended` is told through them until it overrides :meth:`observe_ended` too.
    Why it exists: one call instead of two is about a fifth of what a metric costs a runner
    whose store does no I/O (ADR 0130).
    """

    def observe_ended(
        self, machine: str, result: Result | None, seconds: float, error: BaseException | None
    ) -> None:
        """An observe of an object of ``machine`` returned ``result`` (``None`` if it raised
        ``error``) after ``seconds``.

        Args:
            machine: the machine's name.
            result: what the write did; ``None`` if it raised.
            seconds: how long the observe took, by the monotonic clock.
            error: the exception it raised, else ``None``.
        """
        ...


def observe_ended_of(telemetry: object) -> Callable[..., None] | None:
    """``telemetry``'s ``observe_ended``, or ``None`` where a runner must call ``begin`` and
    ``end``: it has none, or it is inherited by a class that overrides ``begin`` or ``end``
    (whose override would otherwise miss every synchronous observe)."""
    found: Callable[..., None] | None = getattr(telemetry, "observe_ended", None)
    if not callable(found):
        return None
    if "observe_ended" in getattr(telemetry, "__dict__", {}):
        return found  # set on the instance: the most specific there is
    mro = type(telemetry).__mro__

    def owner(name: str) -> type | None:
        return next((c for c in mro if name in vars(c)), None)

    ended = owner("observe_ended")
    for name in ("begin", "end"):
        defined = owner(name)
        if ended is None or (defined is not None and not issubclass(ended, defined)):
            return None
    return found


def outcome_of(result: Result) -> str:
    """The outcome label of one result, as metrics count observations.

    Args:
        result: what one observe did.

    Returns:
        One of :data:`OUTCOMES`: a refusal by the library (bad input) is ``"refused"``, a
        store failure ``"failed"``, a commit whose fate is unknown ``"unknown"``, so an alert
        can tell the caller's mistakes from the store's.
    """
    outcome = result[0]
    if outcome is _COMMITTED:
        return "conflict_retried" if result[7] > 1 else "committed"
    if outcome is _UNCHANGED:
        return "unchanged"
    error = result.error
    if isinstance(error, CommitUnknown):
        return "unknown"
    if isinstance(error, LifecycleError) and not isinstance(error, StoreError):
        return "refused"
    return "failed"


def _outcomes() -> tuple[object, object]:
    from .._protocol import Outcome  # the protocol imports nothing of telemetry

    return Outcome.COMMITTED, Outcome.UNCHANGED


_COMMITTED, _UNCHANGED = _outcomes()


def flattened(results: Sequence[Result]) -> list[Result]:
    """``results`` with the linked writes and caught-up writes each holds, depth first: every
    write a batch made."""
    out: list[Result] = []
    stack = list(reversed(results))
    while stack:
        r = stack.pop()
        out.append(r)
        stack.extend(reversed((*r.caught_up, *r.linked)))
    return out


class Guarded:
    """A host's :class:`Telemetry` behind a guard: a call that raises is logged (the first of
    each method, then every 1000th) and counted in :attr:`failures`; the library goes on."""

    __slots__ = ("failures", "inner", "traces")

    def __init__(self, inner: Telemetry) -> None:
        self.inner = inner
        self.traces = bool(getattr(inner, "traces", False))
        #: calls that raised, by method name
        self.failures: dict[str, int] = {}

    def _failed(self, method: str, error: Exception) -> None:
        n = self.failures.get(method, 0) + 1
        self.failures[method] = n
        if n == 1 or n % 1000 == 0:
            _log.warning(
                "telemetry failed; ignored",
                method=method,
                telemetry=type(self.inner).__name__,
                error=repr(error),
                failures=n,
            )

    def begin(self, operation: str, machine: str) -> object:
        try:
            return self.inner.begin(operation, machine)
        except Exception as e:
            self._failed("begin", e)
            return None

    def end(self, token: object, observed: Sequence[Observed], error: BaseException | None) -> None:
        try:
            self.inner.end(token, observed, error)
        except Exception as e:
            self._failed("end", e)

    def store_call(
        self, store: str, operation: str, machine: str, seconds: float, error: BaseException | None
    ) -> None:
        try:
            self.inner.store_call(store, operation, machine, seconds, error)
        except Exception as e:
            self._failed("store_call", e)

    def emitted(
        self, emitter: str, transition: Transition, seconds: float, error: BaseException | None
    ) -> None:
        try:
            self.inner.emitted(emitter, transition, seconds, error)
        except Exception as e:
            self._failed("emitted", e)

    def redelivered(self, transitions: Sequence[Transition]) -> None:
        try:
            self.inner.redelivered(transitions)
        except Exception as e:
            self._failed("redelivered", e)

    def trace_context(self) -> str:
        try:
            found = self.inner.trace_context()
        except Exception as e:
            self._failed("trace_context", e)
            return ""
        return found if isinstance(found, str) and len(found) <= 256 else ""
