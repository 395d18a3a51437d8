"""Telemetry: what a runner reports about itself, for metrics and traces (ADR 0130).

Give a runner a :class:`Telemetry` and it reports one call per fact -- an operation begun and
ended with its results, each store call with its latency, each event handed to an emitter,
each outbox row claimed for redelivery::

    from lifecycle.telemetry.prometheus import PrometheusTelemetry   # extra: prometheus
    from lifecycle.telemetry.otel import OpenTelemetryTelemetry      # extra: otel

    metrics = PrometheusTelemetry()
    runner = Runner(store, emitters, telemetry=Fanout(metrics, OpenTelemetryTelemetry()))
    metrics.watch(runner)

Without one, nothing is wrapped: the runner's hot path is the plain one. A telemetry that
raises is logged and counted, and never fails a write or loses an event. A host writes its
own by implementing the six methods of :class:`Telemetry` (and, if it has nothing to do when
an observe starts, the optional :class:`ObserveEnded`); ``lifecycle.testing`` has a
recording double (:class:`~lifecycle.testing.RecordingTelemetry`) and a conformance check
(:func:`~lifecycle.testing.check_telemetry`).
"""

from __future__ import annotations

from collections.abc import Sequence

from .._core.transition import Transition
from ._port import OUTCOMES, Observed, ObserveEnded, Telemetry, outcome_of

__all__ = ["OUTCOMES", "Fanout", "ObserveEnded", "Observed", "Telemetry", "outcome_of"]


class Fanout(Telemetry):
    """Several telemetries as one: each fact goes to every one, in order; one that raises
    does not keep the fact from the others (counted in :attr:`failures`). Its methods are
    :class:`Telemetry`'s.

    Args:
        *telemetries: the telemetries told, in this order; the first with a non-empty
            ``trace_context`` gives the events theirs.
    """

    def __init__(self, *telemetries: Telemetry) -> None:
        self.telemetries = telemetries
        self.traces = any(getattr(t, "traces", False) for t in telemetries)
        #: calls that raised, by telemetry index and method
        self.failures: dict[tuple[int, str], int] = {}

    def _failed(self, index: int, method: str) -> None:
        key = (index, method)
        self.failures[key] = self.failures.get(key, 0) + 1

    def begin(self, operation: str, machine: str) -> object:
        tokens: list[object] = []
        for i, t in enumerate(self.telemetries):
            try:
                tokens.append(t.begin(operation, machine))
            except Exception:
                self._failed(i, "begin")
                tokens.append(None)
        return tuple(tokens)

    def end(self, token: object, observed: Sequence[Observed], error: BaseException | None) -> None:
        tokens = token if isinstance(token, tuple) else ()
        for i, t in enumerate(self.telemetries):
            try:
                t.end(tokens[i] if i < len(tokens) else None, observed, error)
            except Exception:
                self._failed(i, "end")

    def store_call(
        self, store: str, operation: str, machine: str, seconds: float, error: BaseException | None
    ) -> None:
        for i, t in enumerate(self.telemetries):
            try:
                t.store_call(store, operation, machine, seconds, error)
            except Exception:
                self._failed(i, "store_call")

    def emitted(
        self, emitter: str, transition: Transition, seconds: float, error: BaseException | None
    ) -> None:
        for i, t in enumerate(self.telemetries):
            try:
                t.emitted(emitter, transition, seconds, error)
            except Exception:
                self._failed(i, "emitted")

    def redelivered(self, transitions: Sequence[Transition]) -> None:
        for i, t in enumerate(self.telemetries):
            try:
                t.redelivered(transitions)
            except Exception:
                self._failed(i, "redelivered")

    def trace_context(self) -> str:
        for i, t in enumerate(self.telemetries):
            if getattr(t, "traces", False):
                try:
                    found = t.trace_context()
                except Exception:
                    self._failed(i, "trace_context")
                    continue
                if found:
                    return found
        return ""
