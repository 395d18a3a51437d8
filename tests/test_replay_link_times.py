"""A checked replay into SQLite commits in chunks (ADR 0131); a linked object it writes must
get what a line-by-line replay gives it, times included. The regression: a Certification ->
Workflow -> two Jobs trace whose Workflow fails when the second Job reports (10:29:38). The
first Job has more lines in the chunk than the second, so a batch that applied every object's
n-th line together fed the Workflow the second Job's report before the first Job's last one:
the Workflow, and its Certification, failed at 10:29:37, the first Job's line."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lifecycle import MemoryStore, SQLiteStore, default_registry
from lifecycle.cli import main
from lifecycle.trace import read_trace, replay

FAILED_AT = datetime(2026, 11, 30, 10, 29, 38, tzinfo=UTC)


def _line(at: str, machine: str, name: str, uid_: str, observe: str, **with_: Any) -> str:
    line: dict[str, Any] = {
        "at": f"2026-11-30T{at}Z",
        "machine": machine,
        "object": {"namespace": "fleet", "name": name, "uid": uid_},
        "observe": observe,
    }
    if with_:
        line["with"] = with_
    return json.dumps(line)


def _trace() -> str:
    cert = ("certification", "h100-pool", "cert-h100")
    wf = ("workflow", "h100-pool-nccl", "wf-nccl")
    g0 = ("job", "h100-pool-nccl-g0", "nccl-g0")
    g1 = ("job", "h100-pool-nccl-g1", "nccl-g1")
    goodput = [{"key": "goodput", "expr": ">= 0.9"}]
    lines = [
        _line("10:00:00", *cert, "Submitted", categories=["nccl/v1"], selector="gpu=H100"),
        _line("10:00:05", *cert, "WorkflowCreated", category="nccl/v1", workflow=wf[1], uid=wf[2]),
        _line(
            "10:00:05",
            *wf,
            "Submitted",
            owner_kind="Certification",
            owner=cert[1],
            owner_uid=cert[2],
            category="nccl/v1",
            drain_grace_s=0,
            thresholds=goodput,
        ),
        _line("10:00:06", *wf, "Partitioned", nodes=4, groups=2, nodes_per_job=2),
        _line("10:00:07", *wf, "JobLaunched", group=0, job=g0[1], uid=g0[2]),
        _line("10:00:07", *wf, "JobLaunched", group=1, job=g1[1], uid=g1[2]),
        # the Job lines: one chunk; the first Job has one line more than the second
        _line("10:00:08", *g0, "WorkloadCreated"),
        _line("10:00:08", *g1, "WorkloadCreated"),
        _line("10:00:30", *g0, "WorkloadRunning"),
        _line("10:00:30", *g1, "WorkloadRunning"),
        _line("10:10:00", *g0, "TrainingStepObserved", step=100),
        _line("10:20:00", *g1, "MeasurementsReported", values=[{"key": "goodput", "value": 0.95}]),
        _line("10:29:30", *g0, "WorkloadSucceeded"),
        _line("10:29:37", *g0, "MeasurementsReported", values=[{"key": "goodput", "value": 0.5}]),
        _line("10:29:38", *g1, "WorkloadSucceeded"),  # the last Job reports: the Workflow fails
    ]
    return "\n".join(lines) + "\n"


def _cli(*argv: str) -> list[str]:
    out = io.StringIO()
    assert main(list(argv), out=out) == 0
    return out.getvalue().splitlines()[1:]  # (the first line names the store)


def test_the_timeline_into_sqlite_is_the_timeline_into_memory(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_text(_trace())
    memory = _cli("replay", str(path))
    sqlite = _cli("replay", str(path), "--store", f"sqlite:///{tmp_path / 'r.db'}")
    assert sqlite == memory
    failed = [ln for ln in sqlite if "JobValidationFailed" in ln or "WorkflowFailed" in ln]
    assert len(failed) == 2
    assert all(ln.startswith("10:29:38  ") for ln in failed), failed


def test_the_statuses_stored_by_a_chunked_replay_are_those_of_a_line_by_line_one(
    tmp_path: Path,
) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_text(_trace())
    trace = read_trace(path)
    plain, chunked = MemoryStore(), SQLiteStore(tmp_path / "r.db")
    try:
        replay(trace, plain, batch=1)
        replay(trace, chunked)  # checked, into a store with commit_many: in chunks
        for machine in default_registry().values():
            want = {r.ref.uid: (r.version, r.status) for r in plain.records(machine)}
            got = {r.ref.uid: (r.version, r.status) for r in chunked.records(machine)}
            assert got == want, machine.name
        for name, uid in (("workflow", "wf-nccl"), ("certification", "cert-h100")):
            (record,) = [r for r in chunked.records(default_registry()[name]) if r.ref.uid == uid]
            failed = record.status.condition("Failed")
            assert failed is not None, name
            assert failed.last_transition_time == FAILED_AT, name
    finally:
        chunked.close()
