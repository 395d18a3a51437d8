"""The Restore machine under the runner: the no-loop guarantee when writes fail (the store's
commit, and the host's Pod write), journal folding with nested observations on SQLite, the
property suite, and the bundled restore traces."""

from __future__ import annotations

import io
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from lifecycle import (
    EventType,
    MemoryEmitter,
    MemoryStore,
    Outcome,
    RetryPolicy,
    Runner,
    SQLiteStore,
)
from lifecycle.cli import main
from lifecycle.machines import RESTORE
from lifecycle.machines.restore import (
    Gpu,
    Manifest,
    PlaceholderResolved,
    RestoreCompleted,
    RestorePolicy,
    RestoreStatus,
    StatusWriteFailed,
    StatusWritten,
    attempt_ref,
)
from lifecycle.testing import check_machine, row_paths
from lifecycle.testing.fakes import FaultyStore
from lifecycle.trace import read_trace, replay

from .test_restore import (
    DIGEST,
    PVC,
    UNNAMED,
    V0,
    WARN,
    M,
    facts_a,
    facts_b,
    opened,
    pod,
    prior,
    t,
)

REF = attempt_ref("ml", "trainer-0", "pod-a", "content-1", "main")
TRACES = Path(__file__).resolve().parents[2] / "examples" / "traces"


def _runner() -> tuple[Runner, FaultyStore, MemoryEmitter]:
    faulty = FaultyStore(MemoryStore())
    sink = MemoryEmitter()
    return Runner(faulty, [sink], policy=RetryPolicy(backoff=0.0)), faulty, sink


def _state(runner: Runner) -> RestoreStatus:
    record = runner.store.load(RESTORE, REF)
    assert record is not None
    status: RestoreStatus = record.status
    return status


def test_a_refusal_never_loops_when_writes_fail() -> None:
    runner, faulty, sink = _runner()
    runner.observe(REF, opened())
    runner.observe(REF, pod())
    refuse = facts_a(3, cpu_arch="arm64")

    # The store's commit of the verdict fails: no event at all (no Restore row declares a
    # fallback); the attempt is still in gate A, so the next reconcile decides again and sends
    # the real Warning.
    faulty.inject(REF.uid, "write-error")
    failed = runner.observe(REF, refuse)
    assert failed.outcome is Outcome.FAILED
    assert failed.fallback == ()
    assert _state(runner).state == "GateA"

    # Conflicts are retried; the same facts give the same verdict, memoised in Recording.
    faulty.inject(REF.uid, "conflict", 2)
    done = runner.observe(REF, refuse)
    assert (done.outcome, done.attempts) == (Outcome.COMMITTED, 3)
    assert _state(runner).state == "Recording"

    # The Pod write keeps failing; kubelet restarts and the agent re-reads everything. Nothing
    # re-enters a gate, RestoreIncompatible is not repeated, and the Warning about the write
    # comes at most once per backoff window.
    states, at = [], 10.0
    for i in range(12):
        runner.observe(REF, StatusWriteFailed(at=t(at), error=f"etcd timeout {i}"))
        for obs in (pod(at), facts_a(at, cpu_arch="amd64"), PlaceholderResolved(at=t(at)),
                    facts_b(at), RestoreCompleted(at=t(at))):  # fmt: skip
            result = runner.observe(REF, obs)
            assert result.outcome is Outcome.UNCHANGED
        states.append(_state(runner).state)
        at += 3
    assert set(states) == {"Recording"}
    runner.observe(REF, StatusWritten(at=t(at)))
    final = _state(runner)
    assert (final.state, final.code) == ("Rejected", "CpuArchMismatch")

    reasons = Counter(e.reason for e in sink.events)
    assert reasons["RestoreIncompatible"] == 1
    assert reasons["RestoreVerdictRecorded"] == 1
    assert reasons["RestoreStarted"] == reasons["RestoreRequested"] == 0
    # failures every 3 s from 10 to 43: a Warning opens a window as long as the backoff of that
    # failure (5 s at #1, 20 s at #3, 300 s at #10), so only failures #1, #3 and #10 warn
    warned = [e.at for e in sink.events if e.reason == "RestoreStatusUpdateFailed"]
    assert warned == [t(10), t(16), t(37)]
    assert all(e.action for e in sink.events if e.reason == "RestoreStatusUpdateFailed")
    assert final.write_failures == 12
    assert final.retry_at is None


def test_a_lost_status_written_keeps_the_memo() -> None:
    runner, faulty, _ = _runner()
    for obs in (opened(), pod(), facts_a(cpu_arch="arm64")):
        runner.observe(REF, obs)
    faulty.inject(REF.uid, "write-error")
    lost = runner.observe(REF, StatusWritten(at=t(5)))
    assert lost.outcome is Outcome.FAILED
    assert lost.fallback == ()  # RestoreVerdictRecorded is Normal: nothing to warn about
    assert _state(runner).state == "Recording"
    assert runner.observe(REF, facts_a(6)).outcome is Outcome.UNCHANGED
    assert runner.observe(REF, StatusWritten(at=t(7))).committed
    assert _state(runner).state == "Rejected"


def test_the_journal_folds_with_nested_observations_on_sqlite(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "restore.db")
    try:
        runner = Runner(store, [], policy=RetryPolicy(backoff=0.0))
        flow = [opened(), pod(), facts_a(), PlaceholderResolved(at=t(3)), facts_b(),
                RestoreCompleted(at=t(5)), StatusWritten(at=t(6))]  # fmt: skip
        for obs in flow:
            assert runner.observe(REF, obs).committed
        record = store.load(RESTORE, REF)
        assert record is not None
        entries = store.journal(RESTORE, REF)
        assert [e.observation for e in entries] == flow
        assert RESTORE.fold(REF, [e.observation for e in entries]) == record.status
        assert record.status.pairing == _state_of(flow).pairing
    finally:
        store.close()


def _state_of(flow: list[Any]) -> RestoreStatus:
    return RESTORE.fold(REF, flow)


#: Values the row search and the generated scenarios draw from: few enough that a breadth-
#: first search reaches the deep rows (a restore recorded), varied enough for every guard.
SAMPLES: dict[str, Any] = {
    "manifest": [M, V0, UNNAMED, Manifest(schema_version=2)],
    "annotation": [None, "true", "yes"],
    "node_skip": [False],
    "priors": [(), (prior(),)],
    "cpu_arch": ["amd64", "arm64"],
    "kernel_version": ["6.8.0-1015-aws"],
    "memory_limit": [None],
    "cpu_limit": [None],
    "image_id": [f"containerd://x@{DIGEST}", ""],
    "paths": [("/models",)],
    "volumes": [(PVC,)],
    "gpus": [(Gpu("GPU-9", "T4"), Gpu("GPU-8", "L4"))],
    "driver_version": ["580.65.06", "560.35.03"],
    "pod_uid": ["pod-a"],
    "content_uid": ["content-1"],
    "container": ["main"],
    "policy": [RestorePolicy(), WARN],
    "step": ["remove-finalizer", "undo-mounts"],
    "error": ["boom"],
    "artifact_ready": [True, False],
    "content_ready": [True],
}


def test_the_property_suite_holds() -> None:
    """lifecycle.testing on the machine: a path to every row it can find (with fault
    variants), then generated scenarios with conflicts, write errors and failed deliveries."""
    check_machine(RESTORE, samples=SAMPLES, max_examples=60, require_all_rows=False)


def test_the_row_search_reaches_all_but_one_row() -> None:
    """The one row the search cannot reach: gate B facts still missing *after* the deadline
    needs time to pass inside GateB with no status change, which only a real host does (its
    own test is ``test_row[T10 deadline]``)."""
    _, missing = row_paths(RESTORE, samples=SAMPLES)
    assert [(r.observation.__name__, r.guard_name) for _, r in missing] == [
        ("GateBFacts", "target_expired")
    ]


# -- traces ---------------------------------------------------------------------------------------
RESTORE_TRACES = sorted(TRACES.glob("restore-*.jsonl"))


def test_restore_traces_are_bundled() -> None:
    assert [p.name for p in RESTORE_TRACES] == [
        "restore-l4-t4-pairing.jsonl",
        "restore-legacy-manifest.jsonl",
        "restore-refused-then-bypassed.jsonl",
        "restore-unknown.jsonl",
    ]


@pytest.mark.parametrize("path", RESTORE_TRACES, ids=lambda p: p.name)
def test_restore_traces_replay_through_the_cli(path: Path) -> None:
    out = io.StringIO()
    assert main(["replay", str(path), "--format", "jsonl"], out=out) == 0
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    assert events
    assert all(e["machine"] == "restore" for e in events)
    for e in events:
        if e["reason"] == "RestoreIncompatible":
            assert e["type"] == "Warning"
            assert e["message"].startswith("code=")


def _reasons(path: str) -> list[tuple[str, str]]:
    sink = MemoryEmitter()
    replay(read_trace(TRACES / path), MemoryStore(), [sink])
    return [(e.reason, e.target) for e in sink.events]


def test_the_refused_trace_reopens_only_by_bypass() -> None:
    assert _reasons("restore-refused-then-bypassed.jsonl") == [
        ("RestoreAttemptOpened", "Pending"),
        ("CompatCheckStarted", "GateA"),
        ("RestoreIncompatible", "Recording"),
        ("RestoreStatusUpdateFailed", "Recording"),
        ("RestoreVerdictRecorded", "Rejected"),
        ("InvalidSkipAnnotation", "Rejected"),
        ("CompatCheckSkipped", "Skipped"),
        ("RestoreRequested", "Claimed"),
        ("RestoreStarted", "Restoring"),
        ("RestoreSucceeded", "Recording"),
        ("RestoreVerdictRecorded", "Restored"),
    ]


def test_the_pairing_trace_pairs_by_model() -> None:
    store = MemoryStore()
    replay(read_trace(TRACES / "restore-l4-t4-pairing.jsonl"), store, [])
    (record,) = list(store.records(RESTORE))
    pairs = [(p.model, p.source, p.target) for p in record.status.pairing]
    assert pairs == [("NVIDIA L4", "GPU-1a", "GPU-8y"), ("Tesla T4", "GPU-2b", "GPU-9z")]
    assert record.status.compatible.reason == "Compatible"


def test_the_unknown_trace_blocks_then_warns() -> None:
    sink = MemoryEmitter()
    replay(read_trace(TRACES / "restore-unknown.jsonl"), MemoryStore(), [sink])
    by_uid: dict[str, list[str]] = {}
    for e in sink.events:
        by_uid.setdefault(e.ref.uid, []).append(e.reason)
    blocked, warned = by_uid.values()
    assert "RestoreCompatUnknown" in blocked
    assert "RestoreRequested" not in blocked
    assert warned[:4] == [
        "RestoreAttemptOpened",
        "CompatCheckStarted",
        "RestoreCompatUnchecked",
        "RestoreRequested",
    ]
    assert warned[-2:] == ["RestoreFailed", "RestoreVerdictRecorded"]
    types = {e.reason: e.type for e in sink.events}
    assert types["RestoreCompatUnchecked"] is EventType.WARNING
