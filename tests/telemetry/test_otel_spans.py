"""OpenTelemetry with the SDK's in-memory exporter: the spans a runner makes, their attributes
and parents, and the link from a redelivered event back to the span that committed it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import StatusCode

from lifecycle import MemoryEmitter, ObjectRef, Runner, SQLiteStore, UnknownObservation
from lifecycle.machines.job import WorkloadCreated
from lifecycle.machines.pod import CreateRequested
from lifecycle.telemetry.otel import OpenTelemetryTelemetry, parse_traceparent
from lifecycle.testing.fakes import FailingEmitter

from ..conftest import t

POD = ObjectRef("Pod", "ml", "trainer-0", uid="pod-a")


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


@pytest.fixture
def exported() -> tuple[InMemorySpanExporter, TracerProvider]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter, provider


def test_an_observe_is_a_span_with_children_for_the_store_and_the_emit(
    exported: tuple[InMemorySpanExporter, TracerProvider], tmp_path: Path
) -> None:
    exporter, provider = exported
    runner = Runner(
        SQLiteStore(tmp_path / "s.db"),
        [MemoryEmitter()],
        telemetry=OpenTelemetryTelemetry(provider),
    )
    runner.observe(POD, CreateRequested(at=t()))
    spans = exporter.get_finished_spans()
    observes = [s for s in spans if s.name == "lifecycle.observe"]
    pod = next(s for s in observes if attrs(s)["lifecycle.machine"] == "pod")
    claim = next(s for s in observes if attrs(s)["lifecycle.machine"] == "nodeclaim")
    assert attrs(pod)["lifecycle.outcome"] == "committed"
    assert attrs(pod)["lifecycle.attempts"] == 1
    assert attrs(pod)["lifecycle.events"] == 1
    assert pod.parent is None
    assert claim.parent is not None
    assert claim.parent.span_id == pod.context.span_id
    children = {s.name for s in spans if s.parent and s.parent.span_id == pod.context.span_id}
    assert {"lifecycle.store.load", "lifecycle.store.commit", "lifecycle.emit"} <= children
    load = next(s for s in spans if s.name == "lifecycle.store.load")
    assert attrs(load)["lifecycle.store"] == "sqlite"
    assert (load.start_time or 0) <= (load.end_time or 0)
    # no object identity on a span unless the host asks for it
    for s in spans:
        assert "pod-a" not in repr(dict(s.attributes or {}))


def test_a_refused_observation_ends_its_span_with_an_error(
    exported: tuple[InMemorySpanExporter, TracerProvider],
) -> None:
    exporter, provider = exported
    runner = Runner(telemetry=OpenTelemetryTelemetry(provider))
    with pytest.raises(UnknownObservation):
        runner.observe(POD, WorkloadCreated(at=t()))
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "lifecycle.observe"]
    assert span.status.status_code is StatusCode.ERROR
    assert attrs(span)["error.type"] == "UnknownObservation"


def test_a_redelivery_after_a_restart_links_to_the_committing_span(
    exported: tuple[InMemorySpanExporter, TracerProvider], tmp_path: Path
) -> None:
    exporter, provider = exported
    path = tmp_path / "s.db"
    failing = FailingEmitter(failures=10**6)
    first = Runner(
        SQLiteStore(path, owner="a"), [failing], telemetry=OpenTelemetryTelemetry(provider)
    )
    first.observe(POD, CreateRequested(at=t()))
    first.store.close()
    committed = {
        attrs(s)["lifecycle.machine"]: s.context
        for s in exporter.get_finished_spans()
        if s.name == "lifecycle.observe"
    }
    exporter.clear()
    # a restarted process: a new runner on the same file, a telemetry of its own
    events = MemoryEmitter()
    second = Runner(
        SQLiteStore(path, owner="a"), [events], telemetry=OpenTelemetryTelemetry(provider)
    )
    assert second.redeliver() == 2
    redelivered = [s for s in exporter.get_finished_spans() if s.name == "lifecycle.redelivered"]
    assert len(redelivered) == 2
    linked = {attrs(s)["lifecycle.machine"]: s.links[0].context for s in redelivered}
    for machine, context in committed.items():
        assert linked[machine].trace_id == context.trace_id
        assert linked[machine].span_id == context.span_id
    redeliver = next(s for s in exporter.get_finished_spans() if s.name == "lifecycle.redeliver")
    assert all(
        s.parent is not None and s.parent.span_id == redeliver.context.span_id for s in redelivered
    )
    # the events themselves are unchanged by the context they carried
    assert [e.id for e in events.events] == ["pod-a:1:0", "pod-a-claim:1:0"]
    second.store.close()


@pytest.mark.parametrize(
    "text",
    [
        "",
        "00-abc",
        "01-" + "1" * 32 + "-" + "1" * 16 + "-01",
        "00-" + "0" * 32 + "-" + "1" * 16 + "-01",
        "00-" + "g" * 32 + "-" + "1" * 16 + "-01",
        "00-" + "1" * 31 + "-" + "1" * 16 + "-01",
    ],
)
def test_a_malformed_trace_context_links_nothing(text: str) -> None:
    assert parse_traceparent(text) is None


def test_a_trace_context_round_trips() -> None:
    text = "00-" + "a" * 32 + "-" + "b" * 16 + "-01"
    found = parse_traceparent(text)
    assert found is not None
    assert found.trace_id == int("a" * 32, 16)
    assert found.is_remote
