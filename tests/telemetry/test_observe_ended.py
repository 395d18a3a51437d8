"""The port's one optional call, ``observe_ended``, stands for ``begin`` and ``end`` of a
synchronous observe (ADR 0130): a differential property runs generated Pod scenarios (write
conflicts and errors, a failing emitter, redelivery, refused observations) through two
runners, one whose :class:`PrometheusTelemetry` takes the optional call and one whose same
adapter is reached only through the six required methods, and every exported count must agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from lifecycle import LifecycleError, MemoryEmitter, MemoryStore, Observation, Runner
from lifecycle._testing.telemetry import Fact
from lifecycle.machines.job import WorkloadCreated
from lifecycle.machines.pod import POD, CreateRequested, DeletionRequested
from lifecycle.telemetry import Observed
from lifecycle.testing import (
    FailEmitter,
    FailingEmitter,
    FaultyStore,
    InjectFault,
    RecordingTelemetry,
    Step,
    scenarios,
)
from lifecycle.testing import default_ref as _default_ref

from ..conftest import t

prometheus_client = pytest.importorskip("prometheus_client")

from lifecycle.telemetry.prometheus import PrometheusTelemetry  # noqa: E402


class RequiredOnly:
    """An adapter reached through the six required methods only (no ``observe_ended``)."""

    def __init__(self, inner: PrometheusTelemetry) -> None:
        self.inner = inner
        self.traces = False

    def begin(self, operation: str, machine: str) -> object:
        return self.inner.begin(operation, machine)

    def end(self, token: object, observed: Sequence[Observed], error: BaseException | None) -> None:
        self.inner.end(token, observed, error)

    def store_call(self, *args: Any) -> None:
        self.inner.store_call(*args)

    def emitted(self, *args: Any) -> None:
        self.inner.emitted(*args)

    def redelivered(self, *args: Any) -> None:
        self.inner.redelivered(*args)

    def trace_context(self) -> str:
        return ""


def _drive(telemetry: Any, steps: list[Step]) -> list[str]:
    """Run ``steps`` on one Pod; what each step returned (an outcome, a refusal, a count)."""
    store = FaultyStore(MemoryStore())
    flaky = FailingEmitter(failures=0)
    runner = Runner(store, [MemoryEmitter(), flaky], telemetry=telemetry)
    ref = _default_ref(POD)
    out: list[str] = []
    for step in steps:
        if isinstance(step, Observation):
            try:
                out.append(runner.observe(ref, step).outcome.value)
            except LifecycleError as e:
                out.append(type(e).__name__)
        elif isinstance(step, InjectFault):
            store.inject(ref.uid, step.kind, step.times)
        elif isinstance(step, FailEmitter):
            flaky.arm(step.times)
        else:
            out.append(str(runner.redeliver()))
    assert runner.telemetry is not None
    assert not runner.telemetry.failures
    return out


def _counts(metrics: PrometheusTelemetry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample the adapter exports but the times: counters, gauges, histogram counts."""
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in metrics.collect():
        for s in family.samples:
            if family.type == "histogram" and not s.name.endswith("_count"):
                continue  # buckets and sums are times, which differ from run to run
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=scenarios(POD, max_size=25))
def test_observe_ended_folds_what_begin_and_end_fold(steps: list[Step]) -> None:
    fast, slow = PrometheusTelemetry(None), PrometheusTelemetry(None)
    assert _drive(fast, steps) == _drive(RequiredOnly(slow), steps)
    assert _counts(fast) == _counts(slow)


def test_a_runner_calls_observe_ended_instead_of_begin_and_end() -> None:
    class Both(RecordingTelemetry):
        """The recording double with the optional call: ``(machine, outcome, error)``."""

        def observe_ended(
            self, machine: str, result: Any, seconds: float, error: BaseException | None
        ) -> None:
            outcome = None if result is None else result.outcome.value
            self.facts.append(Fact("observe_ended", (machine, outcome, type(error).__name__)))

    both = Both()
    runner = Runner(MemoryStore(), [], telemetry=both)
    ref = _default_ref(POD)
    runner.observe(ref, CreateRequested(at=t(), pool="gpu"))
    with pytest.raises(LifecycleError):
        runner.observe(ref, WorkloadCreated(at=t()))  # not a Pod observation: refused
    runner.observe(ref, DeletionRequested(at=t()))
    assert both.operations() == ["check_schema"]  # no observe went through begin and end
    assert both.of("observe_ended") == [
        # a linked write is an observe of its own, ended before its source's
        ("nodeclaim", "committed", "NoneType"),
        ("pod", "committed", "NoneType"),
        ("pod", None, "UnknownObservation"),
        ("nodeclaim", "committed", "NoneType"),
        ("pod", "committed", "NoneType"),
    ]
