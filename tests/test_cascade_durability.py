"""Property: a cascade is as durable as an event (ADR 0090).

A differential test over the bundled traces. Each trace runs once without faults, and once
with write faults (conflicts, store errors) injected on any object -- above all on linked
objects, whose writes are cascade intents -- and optionally a crash right after some commit
(the runner dies; a new Runner and a Dispatcher on the same store take over). Faults stop after
the step they were injected for; passes continue as a controller's would: a line whose own
write failed is observed again, a cascade write that failed is redone by the next pass
(``Runner.catch_up``, which ``observe`` also calls first), then every object gets Ticks until
its timers expired. Every
object must end where the fault-free run ends, with the same non-fallback events (same ids).

Bounded for ``make test``; ``LIFECYCLE_SOAK=1`` runs many more examples.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import hypothesis
import pytest
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from lifecycle import (
    Dispatcher,
    MemoryEmitter,
    MemoryStore,
    ObjectRef,
    Outcome,
    RetryPolicy,
    Runner,
    StoreError,
    Transition,
    default_registry,
)
from lifecycle._core.observation import Observation, Tick
from lifecycle.machines import job, workflow
from lifecycle.stores.base import Store
from lifecycle.testing.fakes import FaultyStore
from lifecycle.trace import FaultLine, ObservationLine, read_trace

from .conftest import t

TRACES = Path(__file__).resolve().parent.parent / "examples" / "traces"
#: Traces whose objects are linked: the Pod -> NodeClaim and Job/Workflow/owner cascades.
NAMES = (
    "certification-timeout.jsonl",
    "certification-threshold-cascade.jsonl",
    "certification-hardware-teardown.jsonl",
    "certification-conflict-then-success.jsonl",
    "certification-countdown-churn.jsonl",
    "happy-path.jsonl",
    "teardown.jsonl",
    "vanished.jsonl",
    "demo.jsonl",
)
SOAK = bool(os.environ.get("LIFECYCLE_SOAK"))
FAST = RetryPolicy(backoff=0.0)

Line = tuple[ObjectRef, Observation]


def _lines(name: str) -> list[Line]:
    """The trace's observations (its own fault lines are left out: faults come from here)."""
    out = []
    for record in read_trace(TRACES / name):
        if isinstance(record, FaultLine):
            continue
        assert isinstance(record, ObservationLine)
        out.append((record.ref, record.observation))
    return out


LINES = {name: _lines(name) for name in NAMES}


class Crash(BaseException):
    """The process died: raised right after a commit landed."""


class CrashingStore(FaultyStore):
    """A FaultyStore that can die right after its next successful commit."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.crash_next = False

    def clear(self) -> None:
        self._faults.clear()
        self.crash_next = False

    def commit(self, *args: Any) -> int:
        version = super().commit(*args)
        if self.crash_next:
            self.crash_next = False
            raise Crash
        return version


Fault = tuple[int, str, str, int]  # (line, uid, kind, times)


def _landed(store: MemoryStore, machine: Any, ref: ObjectRef, obs: Observation) -> int:
    """How many of ``ref``'s journal entries are ``obs`` (did this line's own write land?)."""
    return sum(1 for e in store.journal(machine, ref) if e.observation == obs)


def _run(lines: Sequence[Line], faults: Sequence[Fault], crash_at: int | None) -> Any:
    """Replay ``lines`` with ``faults``; then passes continue until every timer expired.
    Returns (statuses by uid, non-fallback events by uid)."""
    inner = MemoryStore()
    store = CrashingStore(inner)
    sink = MemoryEmitter()
    runner = Runner(store, [sink], policy=FAST)
    registry = default_registry()
    by_line: dict[int, list[Fault]] = {}
    for fault in faults:
        by_line.setdefault(fault[0], []).append(fault)
    last = lines[0][1].at
    for i, (ref, obs) in enumerate(lines):
        last = max(last, obs.at)
        for _, uid, kind, times in by_line.get(i, ()):
            store.inject(uid, kind, times)  # type: ignore[arg-type]
        store.crash_next = crash_at == i
        machine = registry.for_kind(ref.kind)
        seen = _landed(inner, machine, ref, obs)
        try:
            result = runner.observe(ref, obs)
        except Crash:  # a new process: a new runner, and a dispatcher drains the outbox
            store.clear()
            runner = Runner(store, [sink], policy=FAST)
            Dispatcher(store, [sink], runner=runner).drain()
            if _landed(inner, machine, ref, obs) != seen:
                continue  # the line's own write landed before the crash
            # it died before (in a pending intent retried first): the next pass observes again
            result = runner.observe(ref, obs)
        store.clear()  # the faults stop
        while result.outcome is Outcome.FAILED and isinstance(result.error, StoreError):
            result = runner.observe(ref, obs)  # the next pass observes it again
        # The source's next pass, before the next line's event: a failed cascade write is
        # redone (faults injected for the next line must not hit it a second time -- two
        # failed timeout writes in a row may lose to the Job's success, upstream too).
        runner.catch_up()
    runner.catch_up()
    # Passes continue: every object hears the clock until nothing changes any more.
    for hours in (1, 24, 24 * 8, 24 * 40):
        at = last + timedelta(hours=hours)
        for machine in registry.values():
            if Tick not in machine.accepted:
                continue
            for record in list(inner.records(machine)):
                runner.observe(record.ref, Tick(at=at))
    assert not runner.pending, "a cascade intent is still pending after faults stopped"
    assert not [x for x in inner.claim_undelivered() if x.intent is not None]
    statuses = {}
    for machine in registry.values():
        for record in inner.records(machine):
            statuses[record.ref.uid] = record.status
    events: dict[str, list[Transition]] = {}
    for e in sink.events:
        if not e.fallback and not e.action:
            events.setdefault(e.ref.uid, []).append(e)
    return statuses, {uid: [(e.id, e.reason, e.target) for e in es] for uid, es in events.items()}


REFERENCE = {name: _run(lines, (), None) for name, lines in LINES.items()}


@st.composite
def plans(draw: st.DrawFn) -> tuple[str, list[Fault], int | None]:
    name = draw(st.sampled_from(NAMES))
    lines = LINES[name]
    uids = sorted(REFERENCE[name][0])  # every object, the linked ones included
    faults = draw(
        st.lists(
            st.tuples(
                st.integers(0, len(lines) - 1),
                st.sampled_from(uids),
                st.sampled_from(("conflict", "write-error")),
                st.integers(1, 6),
            ),
            max_size=4,
        )
    )
    crash = draw(st.none() | st.integers(0, len(lines) - 1))
    return name, faults, crash


@hypothesis.settings(
    max_examples=1500 if SOAK else 60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=not SOAK,
)
@given(plans())
def test_no_failed_or_crashed_write_changes_an_outcome(
    plan: tuple[str, list[Fault], int | None],
) -> None:
    name, faults, crash = plan
    statuses, events = _run(LINES[name], faults, crash)
    want_statuses, want_events = REFERENCE[name]
    assert events == want_events
    assert statuses == want_statuses


def _linked_faults(name: str, uid: str) -> list[Fault]:
    """A fault on every line for one linked object (single-link cases below)."""
    return [(i, uid, kind, 6) for i in range(len(LINES[name])) for kind in ("write-error",)]


@pytest.mark.parametrize(
    ("name", "uid"),
    [
        ("certification-timeout.jsonl", "slow-g0"),  # Workflow -> Job TimedOut and Submitted
        ("certification-timeout.jsonl", "wf-timeout"),  # Job -> Workflow JobObserved
        ("certification-timeout.jsonl", "cert-h100"),  # Workflow -> Certification
        ("certification-threshold-cascade.jsonl", "run-llama"),  # Workflow -> WorkloadRun
        ("happy-path.jsonl", "happy-0-claim"),  # Pod -> NodeClaim
    ],
)
def test_every_link_survives_a_failed_target_write_at_each_step(name: str, uid: str) -> None:
    assert uid in REFERENCE[name][0]
    for i in range(len(LINES[name])):
        statuses, events = _run(LINES[name], [(i, uid, "write-error", 6)], None)
        assert (statuses, events) == REFERENCE[name], f"fault before line {i}"


@pytest.mark.parametrize("name", NAMES)
def test_a_crash_after_any_commit_is_recovered_by_a_dispatcher(name: str) -> None:
    for i in range(len(LINES[name])):
        assert _run(LINES[name], (), i) == REFERENCE[name], f"crash at line {i}"


# -- the Job-timeout write is one direct write ------------------------------------------------
NS = "ml"
WF = ObjectRef("Workflow", NS, "wf", "w-1")
JOB = ObjectRef("Job", NS, "wf-g0", "j-0")


def _timed_out_workflow(runner: Runner) -> None:
    runner.observe(WF, workflow.Submitted(at=t(0), timeout_per_job_s=60, drain_grace_s=0))
    runner.observe(WF, workflow.Partitioned(at=t(1), nodes=2, groups=1, nodes_per_job=2))
    runner.observe(WF, workflow.JobLaunched(at=t(2), group=0, job=JOB.name, uid=JOB.uid))
    runner.observe(JOB, job.WorkloadCreated(at=t(3)))
    runner.observe(JOB, job.WorkloadRunning(at=t(4)))


def test_the_workflows_timeout_write_on_a_job_is_one_attempt_and_stays_pending() -> None:
    """Upstream writes a Job's timeout once per Workflow pass (a conflict is not retried):
    here a conflict on it leaves the intent pending, it is not retried within the pass, and
    the Job's own concurrent success lands first -- as upstream's can."""
    store = FaultyStore(MemoryStore())
    sink = MemoryEmitter()
    runner = Runner(store, [sink], policy=FAST)
    _timed_out_workflow(runner)
    store.inject(JOB.uid, "conflict", 2)
    result = runner.observe(WF, Tick(at=t(200)))
    (timed_out,) = [r for r in result.linked if r.ref == JOB]
    assert (timed_out.outcome, timed_out.attempts) == (Outcome.FAILED, 1)
    assert store.pending_faults(JOB.uid) == 1  # one attempt, not five
    assert len(runner.pending) == 1
    # the intent is retried first on the next call; one conflict is left: it fails again
    late = runner.observe(JOB, job.WorkloadSucceeded(at=t(201)))
    assert late.caught_up[0].outcome is Outcome.FAILED
    assert late.committed  # the Job's own write (5 attempts) lands: Succeeded
    record = store.load(job.JOB, JOB)
    assert record is not None
    assert record.status.state == "Succeeded"


def test_a_pending_timeout_lands_before_the_jobs_later_success() -> None:
    store = FaultyStore(MemoryStore())
    sink = MemoryEmitter()
    runner = Runner(store, [sink], policy=FAST)
    _timed_out_workflow(runner)
    store.inject(JOB.uid, "write-error")
    runner.observe(WF, Tick(at=t(200)))
    assert len(runner.pending) == 1
    late = runner.observe(JOB, job.WorkloadSucceeded(at=t(201)))
    assert [r.outcome for r in late.caught_up] == [Outcome.COMMITTED]
    assert late.outcome is Outcome.UNCHANGED  # terminal: the late success writes nothing
    assert [e.reason for e in sink.events if e.ref == JOB][-1] == "JobTimedOut"
    assert not runner.pending
    assert not store.claim_undelivered()
