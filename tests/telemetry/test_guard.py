"""A telemetry that raises never fails a write or loses an event (logged, counted); a runner
without one is the plain runner; the shipped adapters and the recording double pass the
conformance check a host's own telemetry is held to."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lifecycle import AsyncRunner, MemoryEmitter, MemoryStore, ObjectRef, Runner
from lifecycle._testing.telemetry import _scenario
from lifecycle.machines.pod import CreateRequested
from lifecycle.telemetry import Fanout, Observed
from lifecycle.testing import RecordingTelemetry, check_telemetry

from ..conftest import t

METHODS = (
    "begin", "end", "store_call", "emitted", "redelivered", "trace_context", "observe_ended",
)  # fmt: skip


class Raising:
    """Raises ``error`` from each method named in ``raising``; ``fast``: it has the port's
    optional ``observe_ended`` too (which then replaces ``begin`` and ``end`` of an observe)."""

    def __init__(
        self, raising: frozenset[str], error: type[Exception], traces: bool, fast: bool = False
    ) -> None:
        self.raising, self.error, self.traces = raising, error, traces
        if fast:
            self.observe_ended = self._observe_ended

    def _observe_ended(self, *args: object) -> None:
        self._maybe("observe_ended")

    def _maybe(self, method: str) -> None:
        if method in self.raising:
            raise self.error(f"telemetry {method} broke")

    def begin(self, operation: str, machine: str) -> object:
        self._maybe("begin")
        return object()

    def end(self, token: object, observed: Sequence[Observed], error: BaseException | None) -> None:
        self._maybe("end")

    def store_call(self, *args: object) -> None:
        self._maybe("store_call")

    def emitted(self, *args: object) -> None:
        self._maybe("emitted")

    def redelivered(self, *args: object) -> None:
        self._maybe("redelivered")

    def trace_context(self) -> str:
        self._maybe("trace_context")
        return "00-" + "1" * 32 + "-" + "2" * 16 + "-01"


PLAIN, _ = _scenario(None)


@settings(max_examples=25, deadline=None)
@given(
    raising=st.frozensets(st.sampled_from(METHODS)),
    error=st.sampled_from([RuntimeError, ValueError, KeyError, ZeroDivisionError]),
    traces=st.booleans(),
    fast=st.booleans(),
)
def test_a_raising_telemetry_changes_no_outcome(
    raising: frozenset[str], error: type[Exception], traces: bool, fast: bool
) -> None:
    run, runner = _scenario(Raising(raising, error, traces, fast))
    assert run == PLAIN
    assert runner.telemetry is not None
    failed = set(runner.telemetry.failures)
    assert failed <= raising
    if raising & {"begin", "end", "store_call", "emitted"}:
        assert failed, "a raising method is counted"
    if fast and "observe_ended" in raising:
        assert "observe_ended" in failed


def test_a_raising_telemetry_is_logged_once_then_counted(caplog: pytest.LogCaptureFixture) -> None:
    runner = Runner(telemetry=Raising(frozenset({"end"}), RuntimeError, False))
    with caplog.at_level(logging.WARNING, logger="lifecycle.telemetry"):
        for i in range(5):
            runner.observe(ObjectRef("Pod", "ml", f"p{i}", uid=f"u{i}"), CreateRequested(at=t()))
    assert runner.telemetry is not None
    # the start-up schema check, five Pods and their NodeClaims
    assert runner.telemetry.failures == {"end": 11}
    lines = [r for r in caplog.records if r.name == "lifecycle.telemetry"]
    assert len(lines) == 1
    assert "telemetry failed" in lines[0].getMessage()


def test_a_trace_context_that_is_not_one_is_not_written() -> None:
    class Odd(RecordingTelemetry):
        def trace_context(self) -> str:
            return "x" * 10_000

    store = MemoryStore()
    runner = Runner(store, [], telemetry=Odd(traces=True))
    runner.observe(ObjectRef("Pod", "ml", "p", uid="u"), CreateRequested(at=t()))
    assert all(not e.trace for e in store.claim_undelivered())


def test_without_telemetry_nothing_is_wrapped() -> None:
    store, emitter = MemoryStore(), MemoryEmitter()
    runner = Runner(store, [emitter])
    assert "observe" not in vars(runner)
    assert runner.telemetry is None
    assert runner.store is store
    assert runner.emitters == (emitter,)
    a = AsyncRunner(store, [emitter])
    assert "observe" not in vars(a)
    assert a.telemetry is None


def test_an_async_runner_reports_too() -> None:
    recording = RecordingTelemetry()
    runner = AsyncRunner(MemoryStore(), [MemoryEmitter()], telemetry=recording)
    ref = ObjectRef("Pod", "ml", "p", uid="u")
    asyncio.run(runner.observe(ref, CreateRequested(at=t())))
    assert recording.operations() == ["check_schema", "observe"]
    assert recording.outcomes() == [("pod", "committed"), ("nodeclaim", "committed")]
    assert {args[1] for args in recording.of("store_call")} >= {"load", "commit"}
    assert not recording.open


def test_fanout_keeps_a_fact_from_no_one() -> None:
    a, b = RecordingTelemetry(), RecordingTelemetry()
    broken = Raising(frozenset(METHODS), RuntimeError, True)
    runner = Runner(telemetry=Fanout(a, broken, b))
    runner.observe(ObjectRef("Pod", "ml", "p", uid="u"), CreateRequested(at=t()))
    assert a.facts
    assert [f.method for f in a.facts] == [f.method for f in b.facts]


@pytest.mark.parametrize("make", ["recording", "prometheus", "otel", "fanout"])
def test_the_shipped_telemetries_pass_the_conformance_check(make: str) -> None:
    if make == "recording":
        check_telemetry(RecordingTelemetry)
    elif make == "prometheus":
        from lifecycle.telemetry.prometheus import PrometheusTelemetry

        check_telemetry(lambda: PrometheusTelemetry(None))
    elif make == "otel":
        from lifecycle.telemetry.otel import OpenTelemetryTelemetry

        check_telemetry(OpenTelemetryTelemetry)
    else:
        check_telemetry(lambda: Fanout(RecordingTelemetry(), RecordingTelemetry()))


def test_the_conformance_check_finds_a_telemetry_that_raises() -> None:
    with pytest.raises(AssertionError, match="raised"):
        check_telemetry(lambda: Raising(frozenset({"emitted"}), RuntimeError, False))
    with pytest.raises(AssertionError, match="observe_ended"):  # the optional call, too
        check_telemetry(lambda: Raising(frozenset({"observe_ended"}), RuntimeError, False, True))


def test_an_acknowledging_emitter_is_reported_when_it_acknowledges() -> None:
    from lifecycle.emitters.base import Ack

    class Later:
        def __init__(self) -> None:
            self.waiting: list[tuple[object, object]] = []

        def emit(self, transition: object) -> None:
            pass

        def deliver(self, transition: object, ack: object) -> None:
            self.waiting.append((transition, ack))

    later, recording = Later(), RecordingTelemetry()
    store = MemoryStore()
    runner = Runner(store, [later], telemetry=recording)
    runner.observe(ObjectRef("Pod", "ml", "p", uid="u"), CreateRequested(at=t()))
    assert later.waiting
    assert not recording.of("emitted")  # handed off: nothing known yet
    (first, ack_first), *rest = later.waiting
    ack_first(first, Ack.DELIVERED)  # type: ignore[operator]
    for transition, ack in rest:
        ack(transition, Ack.FAILED)  # type: ignore[operator]
    emitted = recording.of("emitted")
    assert [e[3] is None for e in emitted] == [True] + [False] * len(rest)
    assert all(type(e[3]).__name__ == "NotDelivered" for e in emitted[1:])


def test_prometheus_counts_every_fact_from_many_threads() -> None:
    import sys
    import threading

    from lifecycle import EventType, Transition
    from lifecycle.telemetry.prometheus import PrometheusTelemetry

    metrics = PrometheusTelemetry(None)
    ref = ObjectRef("Pod", "ml", "p", uid="u")
    event = Transition(ref, "pod", "", "A", "A", EventType.NORMAL, "", 1, t())

    def send() -> None:
        for _ in range(20_000):
            metrics.emitted("e", event, 0.0, None)

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=send) for _ in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    finally:
        sys.setswitchinterval(switch)
    sends = [m for m in metrics.collect() if m.name == "lifecycle_emitter_sends"]
    assert sends[0].samples[0].value == 80_000
