"""OpenTelemetry traces for a runner (extra ``otel``: ``opentelemetry-api`` only; the host
installs and configures the SDK and its exporter).

::

    from lifecycle.telemetry.otel import OpenTelemetryTelemetry

    runner = Runner(store, emitters, telemetry=OpenTelemetryTelemetry())

Spans: ``lifecycle.observe`` (one object; a linked write is a child ``lifecycle.observe`` of
its source's), ``lifecycle.observe_many`` and ``lifecycle.redeliver``, with the attributes
``lifecycle.operation``, ``lifecycle.machine``, ``lifecycle.outcome`` and
``lifecycle.attempts`` (for a batch, ``lifecycle.items`` and ``lifecycle.outcomes``); children
``lifecycle.store.<operation>`` for every store call (``lifecycle.store``,
``lifecycle.machine``, error status) and ``lifecycle.emit`` for every event handed to an
emitter (``lifecycle.event.id``, ``lifecycle.emitter``). A span ends with an error status
when its operation raised. No uid, name or namespace is put on a span unless the host asks
(``object_attributes=True``): spans are often kept longer than logs.

The committing span's context (W3C ``traceparent``) rides in each event's outbox row, so an
event redelivered after a restart gets a ``lifecycle.redelivered`` span that links to the span
that committed it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from .._core.errors import LifecycleError, MissingExtra, StoreError
from .._core.transition import Transition
from ._port import Observed, Telemetry, outcome_of

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.trace import Link, SpanContext, Status, StatusCode, TraceFlags
except ImportError as e:  # pragma: no cover - the extra is missing
    raise MissingExtra.of(e, "lifecycle.telemetry.otel", "otel") from e

__all__ = ["OpenTelemetryTelemetry", "parse_traceparent"]

_SCOPE = "lifecycle"


def parse_traceparent(value: str) -> SpanContext | None:
    """The remote :class:`SpanContext` a W3C ``traceparent`` names, or ``None`` if it is not
    one (``00-<32 hex>-<16 hex>-<2 hex>``, neither id all zeros).

    Args:
        value: a ``traceparent`` as an outbox row recorded it; a redelivery after a restart
            links its span back to the one that committed the event.

    Returns:
        The remote span context, or ``None`` for anything malformed (never an exception:
        the value comes from storage, not from the host).
    """
    parts = value.split("-")
    if len(parts) != 4 or parts[0] != "00":
        return None
    trace_hex, span_hex, flags_hex = parts[1], parts[2], parts[3]
    if len(trace_hex) != 32 or len(span_hex) != 16 or len(flags_hex) != 2:
        return None
    try:
        trace_id, span_id, flags = int(trace_hex, 16), int(span_hex, 16), int(flags_hex, 16)
    except ValueError:
        return None
    if not trace_id or not span_id:
        return None
    return SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(flags))


def _traceparent(context: SpanContext) -> str:
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


class OpenTelemetryTelemetry(Telemetry):
    """A :class:`~lifecycle.telemetry.Telemetry` that records OpenTelemetry spans. Its
    methods are :class:`~lifecycle.telemetry.Telemetry`'s.

    Args:
        tracer_provider: where spans go; by default the global provider the host configured.
        object_attributes: also put the object's kind on store spans and the event's object
            uid on emit spans. Off by default: a uid per span multiplies what a tracing
            backend indexes, and it names customers' objects.
    """

    traces = True

    def __init__(self, tracer_provider: Any = None, *, object_attributes: bool = False) -> None:
        self.tracer = trace.get_tracer(_SCOPE, tracer_provider=tracer_provider)
        self.object_attributes = object_attributes

    def begin(self, operation: str, machine: str) -> object:
        attributes: dict[str, str] = {"lifecycle.operation": operation}
        if machine:
            attributes["lifecycle.machine"] = machine
        span = self.tracer.start_span(f"lifecycle.{operation}", attributes=attributes)
        detach = otel_context.attach(trace.set_span_in_context(span))
        return (span, detach)

    def end(self, token: object, observed: Sequence[Observed], error: BaseException | None) -> None:
        if not isinstance(token, tuple) or len(token) != 2:
            return
        span, detach = token
        try:
            if len(observed) == 1 and span.is_recording():
                machine, result = observed[0]
                span.set_attribute("lifecycle.machine", machine)
                span.set_attribute("lifecycle.outcome", outcome_of(result))
                span.set_attribute("lifecycle.attempts", result.attempts)
                span.set_attribute("lifecycle.events", len(result.transitions))
            elif observed and span.is_recording():
                outcomes: dict[str, int] = {}
                for _, result in observed:
                    name = outcome_of(result)
                    outcomes[name] = outcomes.get(name, 0) + 1
                span.set_attribute("lifecycle.items", len(observed))
                span.set_attribute(
                    "lifecycle.outcomes", [f"{k}={v}" for k, v in sorted(outcomes.items())]
                )
            if error is not None:
                span.set_status(Status(StatusCode.ERROR, type(error).__name__))
                refused = isinstance(error, LifecycleError) and not isinstance(error, StoreError)
                span.set_attribute("lifecycle.outcome", "refused" if refused else "failed")
                span.set_attribute("error.type", type(error).__name__)
        finally:
            otel_context.detach(detach)
            span.end()

    def _child(
        self, name: str, seconds: float, attributes: dict[str, Any], error: BaseException | None
    ) -> None:
        end = time.time_ns()
        start = end - int(seconds * 1e9)
        span = self.tracer.start_span(name, start_time=start, attributes=attributes)
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, type(error).__name__))
            span.set_attribute("error.type", type(error).__name__)
        span.end(end_time=end)

    def store_call(
        self, store: str, operation: str, machine: str, seconds: float, error: BaseException | None
    ) -> None:
        attributes: dict[str, Any] = {"lifecycle.store": store}
        if machine:
            attributes["lifecycle.machine"] = machine
        self._child(f"lifecycle.store.{operation}", seconds, attributes, error)

    def emitted(
        self, emitter: str, transition: Transition, seconds: float, error: BaseException | None
    ) -> None:
        attributes: dict[str, Any] = {
            "lifecycle.emitter": emitter,
            "lifecycle.event.id": transition.id,
            "lifecycle.event.type": transition.type.value,
            "lifecycle.machine": transition.machine,
        }
        if not self.object_attributes:
            attributes.pop("lifecycle.event.id")
        self._child("lifecycle.emit", seconds, attributes, error)

    def redelivered(self, transitions: Sequence[Transition]) -> None:
        for t in transitions:
            committed = parse_traceparent(t.trace) if t.trace else None
            links = [Link(committed)] if committed is not None else []
            span = self.tracer.start_span(
                "lifecycle.redelivered",
                attributes={
                    "lifecycle.machine": t.machine,
                    "lifecycle.intent": t.intent is not None,
                },
                links=links,
            )
            span.end()

    def trace_context(self) -> str:
        context = trace.get_current_span().get_span_context()
        if not context.is_valid:
            return ""
        return _traceparent(context)
