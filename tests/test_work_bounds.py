"""No work proportional to a number the input carries (issue 23 item 1, ADR 0100).

A number that sizes work -- a Workflow's groups and nodes, its iterations and retries, a
trace fault's ``times`` -- has a declared limit in the record that holds it; over it the
record is refused (``InvalidObservation``; a trace: ``FILE:LINE:``, exit 2) and nothing is
written. The standing property: for every shipped machine, any observation accepted with its
integers biased to extremes (``lifecycle.testing.hostile_counts``: the largest, each declared
limit and one past it, 32/53/64-bit edges) is applied within a fixed budget of memory
(``tracemalloc`` peak) and process CPU time, measured around that one ``Runner.observe``. A
blow-up cannot run away while measured: the address space is capped just above its current
size and a CPU-time alarm fires past twice the budget.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import attrs
import hypothesis
import pytest
from hypothesis import HealthCheck, example, given
from hypothesis import strategies as st

import lifecycle
from lifecycle import (
    InvalidObservation,
    LifecycleError,
    Machine,
    MemoryStore,
    ObjectRef,
    Observation,
    Runner,
    TraceError,
)
from lifecycle._testing.hostile import SAMPLES
from lifecycle.machines import workflow
from lifecycle.testing import EPOCH, hostile_counts, observation_sequences
from lifecycle.testing.fakes import FaultyStore
from lifecycle.trace import FAULT_LIMITS, MAX_FAULT_TIMES, FaultLine, parse_lines

SOAK = os.environ.get("LIFECYCLE_SOAK") == "1"
SETTINGS = hypothesis.settings(
    max_examples=1000 if SOAK else 25,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
    ],
)
REGISTRY = lifecycle.default_registry()
MACHINES = sorted(REGISTRY)
INT64_MAX = 2**63 - 1

#: What one accepted observation may cost: traced memory and process CPU time. The worst a
#: shipped machine does at its limits (a Workflow partitioned into 10 000 groups) is about
#: 2 MiB and 0.05 s on the memory store; a budget 30x that is a bound, not a benchmark.
MEMORY_BUDGET = 64 * 2**20
CPU_BUDGET_S = 2.0
#: Address space allowed above the current size while measured: an allocation running away
#: is a MemoryError here, long before it could hurt the host.
ADDRESS_HEADROOM = 1 << 30


class OverBudget(BaseException):
    """The CPU-time alarm: not an ``Exception``, so nothing under test can swallow it."""


def _address_space() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


@attrs.define
class Cost:
    peak: int = 0
    cpu: float = 0.0


@contextlib.contextmanager
def budget(what: str) -> Iterator[Cost]:
    """Measure the block; fail if it used more than the budget (or ran away)."""
    cost = Cost()

    def alarm(signum: int, frame: object) -> None:
        raise OverBudget(f"{what}: more than {2 * CPU_BUDGET_S} s of CPU time")

    previous = signal.signal(signal.SIGPROF, alarm)
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = _address_space() + ADDRESS_HEADROOM
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    tracemalloc.start()
    signal.setitimer(signal.ITIMER_PROF, 2 * CPU_BUDGET_S)
    started = time.process_time()
    try:
        yield cost
    finally:
        cost.cpu = time.process_time() - started
        signal.setitimer(signal.ITIMER_PROF, 0)
        cost.peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        signal.signal(signal.SIGPROF, previous)
    assert cost.peak <= MEMORY_BUDGET, f"{what}: peak {cost.peak / 2**20:.1f} MiB traced"
    assert cost.cpu <= CPU_BUDGET_S, f"{what}: {cost.cpu:.2f} s of CPU time"


def ref_of(machine: Machine[Any]) -> ObjectRef:
    return ObjectRef(machine.kind, "default", f"{machine.name}-0", f"{machine.name}-uid-0")


def observe(runner: Runner, machine: Machine[Any], ref: ObjectRef, obs: Observation) -> None:
    """Observe within the budget; a typed refusal is fine (and must write nothing)."""
    before = _stored(runner, machine, ref)
    with budget(f"{type(obs).__name__} {obs!r:.200}"):
        try:
            runner.observe(ref, obs)
        except LifecycleError:
            refused = True
        else:
            refused = False
    if refused:
        assert _stored(runner, machine, ref) == before, "a refusal changed the store"


def _stored(runner: Runner, machine: Machine[Any], ref: ObjectRef) -> Any:
    record = runner.store.load(machine, ref)
    return None if record is None else (record.version, record.status)


# -- pinned: the members of the class found so far ---------------------------------------------
PARTITION = {"nodes": 4, "groups": 2, "nodes_per_job": 2}
SUBMITTED: tuple[str, Any, dict[str, Any]] = ("Submitted", EPOCH, {})
#: issue 23: `Partitioned` with groups = 2**63 - 1 built a tuple of that many groups.
HUGE_GROUPS = ("Partitioned", EPOCH, {"nodes": 4, "groups": INT64_MAX, "nodes_per_job": 2})
HUGE_ALL = ("Partitioned", EPOCH, {"nodes": INT64_MAX, "groups": INT64_MAX, "nodes_per_job": 1})
#: the largest partition the default limits accept
AT_LIMITS = ("Partitioned", EPOCH, {"nodes": 10_000, "groups": 10_000, "nodes_per_job": 1})
PINNED: dict[str, list[list[tuple[str, Any, dict[str, Any]]]]] = {
    "workflow": [
        [SUBMITTED, HUGE_GROUPS],
        [HUGE_ALL],
        [SUBMITTED, AT_LIMITS, ("JobLaunched", EPOCH, {"group": 9_999, "job": "j", "uid": "u"})],
        [("Submitted", EPOCH, {"iterations": INT64_MAX, "retry_failed_groups": INT64_MAX})],
    ],
    "job": [[("Submitted", EPOCH, {"max_restarts": INT64_MAX})]],
}


@pytest.mark.parametrize("name", MACHINES)
def test_accepted_counts_apply_within_a_budget(name: str) -> None:
    machine = REGISTRY[name]
    ref = ref_of(machine)

    def run(before: list[Observation], counts: list[tuple[str, Any, Any]], after: list[Any]
            ) -> None:  # fmt: skip
        runner = Runner(MemoryStore())
        for obs in before:
            with contextlib.suppress(LifecycleError):
                runner.observe(ref, obs)
        for args in counts:
            try:
                obs = machine.observation(*args)
            except LifecycleError:
                continue  # refused where it entered: nothing to apply
            observe(runner, machine, ref, obs)
        tick = machine.vocabulary.get("Tick")
        later = [*after, *([tick(at=EPOCH + timedelta(days=400))] if tick else [])]
        for obs in later:  # what the accepted counts left in the status costs each next one
            observe(runner, machine, ref, obs)

    for counts in PINNED.get(name, ()):
        run = example(before=[], counts=counts, after=[])(run)
    test = SETTINGS(
        given(
            before=observation_sequences(machine, samples=SAMPLES, max_size=3),
            counts=st.lists(hostile_counts(machine), min_size=1, max_size=3),
            after=observation_sequences(
                machine, samples=SAMPLES, max_size=3, start=EPOCH + timedelta(days=1)
            ),
        )(run)
    )
    test()


@pytest.mark.parametrize("name", MACHINES)
def test_counts_built_in_python_are_bounded_alike(name: str) -> None:
    """A host building the record itself meets the same limits (the record's validators)."""
    machine = REGISTRY[name]
    ref = ref_of(machine)

    @SETTINGS
    @given(hostile_counts(machine))
    def run(args: tuple[str, Any, Any]) -> None:
        try:
            parsed = machine.observation(*args)
        except LifecycleError:
            parsed = None
        cls = machine.vocabulary[args[0]]
        built: Observation | None
        try:  # the host's own constructor: its validators hold the limits
            built = cls(at=args[1], **args[2])
        except Exception:  # refused (plain data where a record is due may fail untyped)
            built = None
        if parsed is not None:
            observe(Runner(MemoryStore()), machine, ref, parsed)
        if built is not None:
            assert isinstance(built, cls)
            observe(Runner(MemoryStore()), machine, ref, built)

    run()


# -- the limits themselves ----------------------------------------------------------------------
WF = ObjectRef("Workflow", "fleet", "wf", "wf-1")


def test_groups_past_the_limit_are_refused_and_nothing_is_written() -> None:
    runner = Runner(MemoryStore())
    runner.observe(WF, workflow.Submitted(at=EPOCH))
    before = runner.store.load(workflow.WORKFLOW, WF)
    with pytest.raises(InvalidObservation, match="groups is 9223372036854775807, more than"):
        workflow.WORKFLOW.observation(*HUGE_GROUPS)
    with pytest.raises(ValueError, match="more than its limit 10000"):
        workflow.Partitioned(at=EPOCH, nodes=4, groups=INT64_MAX, nodes_per_job=2)
    assert runner.store.load(workflow.WORKFLOW, WF) == before


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"nodes": 4, "groups": 1, "nodes_per_job": 2}, "do not cover the 4 nodes"),
        ({"nodes": 4, "groups": 5, "nodes_per_job": 1}, "a group without a node"),
        ({"nodes": 2, "groups": 1, "nodes_per_job": 4}, "too few nodes"),
        ({"nodes": 100_001, "groups": 1, "nodes_per_job": 1}, "nodes is 100001, more than"),
        ({"nodes": 20_000, "groups": 20_000, "nodes_per_job": 1}, "groups is 20000, more than"),
    ],
)
def test_a_partition_that_is_not_one_is_refused(fields: dict[str, int], problem: str) -> None:
    with pytest.raises(InvalidObservation, match=problem):
        workflow.WORKFLOW.observation("Partitioned", EPOCH, fields)


@pytest.mark.parametrize(
    "fields",
    [
        {"nodes": 4, "groups": 2, "nodes_per_job": 2},
        {"nodes": 5, "groups": 3, "nodes_per_job": 2},  # the last group holds one node
        {"nodes": 2, "groups": 1, "nodes_per_job": 2},
        {"nodes": 10_000, "groups": 10_000, "nodes_per_job": 1},
    ],
)
def test_a_partition_is_accepted(fields: dict[str, int]) -> None:
    obs = workflow.WORKFLOW.observation("Partitioned", EPOCH, fields)
    status = workflow.WORKFLOW.apply(workflow.WORKFLOW.initial(WF), obs)
    assert len(status.groups) == fields["groups"]


def test_a_host_raises_a_limit_for_its_process() -> None:
    limits = workflow.Partitioned.limits
    assert limits.default("groups") == limits["groups"] == 10_000
    fields = {"nodes": 20_000, "groups": 20_000, "nodes_per_job": 1}
    previous = limits.set("groups", 20_000)
    try:
        assert previous == 10_000
        workflow.WORKFLOW.observation("Partitioned", EPOCH, fields)
    finally:
        limits.reset()
    with pytest.raises(InvalidObservation):
        workflow.WORKFLOW.observation("Partitioned", EPOCH, fields)
    with pytest.raises(KeyError, match="no limit on 'nodez'"):
        limits.set("nodez", 1)
    with pytest.raises(ValueError, match="must be an int"):
        limits.set("groups", 0)
    assert {lim.field for lim in limits.describe()} == {"nodes", "groups", "nodes_per_job"}


def test_every_count_field_that_sizes_work_declares_a_limit() -> None:
    """The audit, held: these are the shipped fields a machine (or the trace reader) builds
    or loops by; a new one must declare its limit here and in its record."""
    declared = {
        f"{m}.{cls.__name__}.{field}"
        for m in MACHINES
        for cls in REGISTRY[m].vocabulary.values()
        for field in getattr(cls, "limits", {})
    }
    assert declared == {
        "job.Submitted.max_restarts",
        "workflow.Submitted.iterations",
        "workflow.Submitted.retry_failed_groups",
        "workflow.Submitted.max_restarts",
        "workflow.Partitioned.nodes",
        "workflow.Partitioned.groups",
        "workflow.Partitioned.nodes_per_job",
    }
    assert FAULT_LIMITS["times"] == MAX_FAULT_TIMES


# -- a trace fault's times ----------------------------------------------------------------------
def fault_text(times: object) -> str:
    obj = {"namespace": "ml", "name": "p", "uid": "p-1"}
    line = {"at": "2026-11-30T10:00:00Z", "machine": "pod", "object": obj, "fault": "conflict"}
    return json.dumps({**line, "times": times})


@SETTINGS
@given(st.one_of(st.sampled_from((MAX_FAULT_TIMES, MAX_FAULT_TIMES + 1)), st.integers(1, 2**64)))
@example(2**63 - 1)
@example(10**9)
def test_a_fault_line_times_is_bounded(times: int) -> None:
    """issue 23: ``"times": 2**63-1`` was expanded into a list (MemoryError; 10**9 grew to
    17 GB). Over the limit it is the line's error; at it, arming it costs nothing."""
    with budget(f"times={times}"):
        if times > MAX_FAULT_TIMES:
            refused = "t.jsonl:1: .*(more than its limit|a positive integer)"
            with pytest.raises(TraceError, match=refused):
                parse_lines([fault_text(times)], "t.jsonl", REGISTRY)
            return
        (line,) = parse_lines([fault_text(times)], "t.jsonl", REGISTRY)
        assert isinstance(line, FaultLine)
        store = FaultyStore(MemoryStore())
        store.inject(line.ref.uid, "conflict", line.times)
        assert store.pending_faults(line.ref.uid) == times <= MAX_FAULT_TIMES


def test_a_raised_fault_limit_still_allocates_nothing_per_fault() -> None:
    store = FaultyStore(MemoryStore())
    with budget("inject 2**62 faults"):
        store.inject("p-1", "conflict", 2**62)
        store.inject("p-1", "conflict", 2**62)
        store.inject("p-1", "write-error", 1)
    assert store.pending_faults("p-1") == 2**63 + 1


@pytest.mark.parametrize(
    "line",
    [
        json.dumps(
            {
                "at": "2026-11-30T10:00:01Z",
                "machine": "workflow",
                "object": {"namespace": "fleet", "name": "wf", "uid": "wf-1"},
                "observe": "Partitioned",
                "with": {"nodes": 4, "groups": INT64_MAX, "nodes_per_job": 2},
            }
        ),
        fault_text(2**63 - 1),
    ],
    ids=["groups", "times"],
)
def test_the_cli_refuses_a_count_past_its_limit_exit_2_nothing_written(
    line: str, tmp_path: Path
) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(line + "\n")
    db = tmp_path / "s.db"
    done = subprocess.run(
        [sys.executable, "-m", "lifecycle.cli", "replay", str(trace), "--store", f"sqlite:///{db}"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(Path(lifecycle.__file__).parents[1])},
    )
    assert done.returncode == 2, done.stderr
    assert f"{trace}:1:" in done.stderr
    assert "more than its limit" in done.stderr
    assert not db.exists()
