"""The port's one optional call, ``observe_ended``, stands for ``begin`` and ``end`` of a
synchronous observe (ADR 0130).

A differential property runs generated Pod scenarios (on a Pod machine whose Warning rows
declare fallbacks; write conflicts and errors, a failing emitter, redelivery, refused
observations) through two runners: one whose :class:`PrometheusTelemetry` is told through the
optional call, one whose same adapter is reached only through the six required methods. Every
exported count must agree, and each runner must have taken the path it was meant to.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings

from lifecycle import LifecycleError, MemoryEmitter, MemoryStore, Observation, Runner
from lifecycle._testing.telemetry import Fact
from lifecycle.machines.job import WorkloadCreated
from lifecycle.machines.pod import (
    POD,
    CreateRequested,
    DeletionRequested,
    InstanceFailed,
    InstancePending,
    InstanceRunning,
)
from lifecycle.telemetry import Observed, ObserveEnded
from lifecycle.telemetry._port import observe_ended_of
from lifecycle.testing import (
    InjectFault,
    RecordingTelemetry,
    Redeliver,
    Step,
    scenarios,
)
from lifecycle.testing import default_ref as _default_ref
from lifecycle.testing.fakes import FailingEmitter, FaultyStore

from ..conftest import t
from ..fallback_machines import FALLBACK_POD, with_fallback_pod

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
    runner = Runner(
        store, [MemoryEmitter(), flaky], machines=with_fallback_pod(), telemetry=telemetry
    )
    ref = _default_ref(FALLBACK_POD)
    out: list[str] = []
    for step in steps:
        if isinstance(step, Observation):
            try:
                out.append(runner.observe(ref, step).outcome.value)
            except LifecycleError as e:
                out.append(type(e).__name__)
        elif isinstance(step, InjectFault):
            kind = step.kind
            if kind == "emitter-error":
                flaky.arm(step.times)
            else:
                store.inject(ref.uid, kind, step.times)
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


class Begun(PrometheusTelemetry):
    """Records the operation of every ``begin`` (an override of ``begin`` alone, so by the
    port's rule its synchronous observes go through ``begin`` and ``end``)."""

    def __init__(self) -> None:
        super().__init__(None)
        self.begun: list[str] = []

    def begin(self, operation: str, machine: str) -> object:
        self.begun.append(operation)
        return super().begin(operation, machine)


class BegunFast(Begun):
    """The same, overriding ``observe_ended`` too: told through it again."""

    def observe_ended(
        self, machine: str, result: Any, seconds: float, error: BaseException | None
    ) -> None:
        super().observe_ended(machine, result, seconds, error)


_AT = datetime(2026, 1, 1, tzinfo=UTC)


def _at(s: int) -> datetime:
    return _AT + timedelta(seconds=s)


#: A fallback Warning (a lost write entering a Warning state), a refused observation, and a
#: redelivery of events a failing emitter refused: what generated scenarios reach only now
#: and then.
_FALLBACK = [
    CreateRequested(at=_at(0), pool="gpu"),
    InjectFault("write-error"),
    InstanceFailed(at=_at(1), exit_code=3),
]
_REFUSED = [CreateRequested(at=_at(0), pool="gpu"), WorkloadCreated(at=_at(1))]  # not a Pod's
_REDELIVERY = [
    CreateRequested(at=_at(0), pool="gpu"),
    InjectFault("emitter-error", 2),
    InstancePending(at=_at(1)),
    InstanceRunning(at=_at(2)),
    Redeliver(),
    InjectFault("conflict", 2),
    DeletionRequested(at=_at(3)),
]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=scenarios(FALLBACK_POD, max_size=25))
@example(steps=_FALLBACK)
@example(steps=_REDELIVERY)
@example(steps=_REFUSED)
def test_observe_ended_folds_what_begin_and_end_fold(steps: list[Step]) -> None:
    fast, slow = BegunFast(), Begun()
    assert _drive(fast, steps) == _drive(RequiredOnly(slow), steps)
    assert _counts(fast) == _counts(slow)
    observes = sum(isinstance(s, Observation) for s in steps)
    assert "observe" not in fast.begun  # told through observe_ended, every time
    assert slow.begun.count("observe") >= observes  # and the other through begin and end
    if observes:
        assert fast._durations["observe"].total > 0  # the runner timed each call itself


@pytest.mark.parametrize(
    ("steps", "family", "label"),
    [
        (_FALLBACK, "lifecycle_fallback_warnings_total", ()),
        (_REDELIVERY, "lifecycle_redelivered_total", ()),
        (_REDELIVERY, "lifecycle_write_conflicts_total", ()),
        (_REFUSED, "lifecycle_observations_total", (("outcome", "refused"),)),
    ],
)
def test_the_examples_reach_what_they_are_for(
    steps: list[Step], family: str, label: tuple[tuple[str, str], ...]
) -> None:
    metrics = PrometheusTelemetry(None)
    _drive(metrics, steps)
    found = [
        v for (name, labels), v in _counts(metrics).items()
        if name == family and set(label) <= set(labels)
    ]  # fmt: skip
    assert sum(found) > 0


def test_a_subclass_overriding_begin_or_end_is_told_through_them() -> None:
    class Ends(PrometheusTelemetry):
        def end(self, *args: Any) -> None:
            super().end(*args)

    assert observe_ended_of(PrometheusTelemetry(None)) is not None
    assert observe_ended_of(Begun()) is None
    assert observe_ended_of(Ends(None)) is None
    assert observe_ended_of(BegunFast()) is not None
    assert observe_ended_of(RecordingTelemetry()) is None
    assert isinstance(PrometheusTelemetry(None), ObserveEnded)
    assert not isinstance(RecordingTelemetry(), ObserveEnded)


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
