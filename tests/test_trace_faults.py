"""The trace faults of the write-then-emit protocol (ADR 0077): another writer winning the race
(``concurrent-write``), a crash between commit and delivery (``crash-after-commit``), and what
Kubernetes would hold (``lifecycle replay --as-kubernetes-events``)."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from lifecycle import (
    MemoryEmitter,
    MemoryStore,
    ObjectRef,
    Outcome,
    SQLiteStore,
    Store,
    TraceError,
    default_registry,
)
from lifecycle.cli import main
from lifecycle.machines.pod import InstanceRunning
from lifecycle.runner import Result
from lifecycle.trace import (
    CONCURRENT_WRITE,
    CRASH_AFTER_COMMIT,
    FaultLine,
    HostEvents,
    InjectedConflict,
    TraceLine,
    injected,
    parse_line,
    parse_lines,
    read_trace,
    replay,
)

from .conftest import t

MACHINES = default_registry()
TRACES = Path(__file__).resolve().parent.parent / "examples" / "traces"
POD = {"namespace": "ml", "name": "trainer-0", "uid": "pod-a"}
CLAIM = {"name": "ml-trainer-0", "uid": "pod-a-claim"}
INSTANCE: dict[str, Any] = {"instance_id": "i-1", "endpoint": "fake://i-1"}


def line(observe: str, fields: dict[str, Any] | None = None, /, **extra: Any) -> str:
    data: dict[str, Any] = {
        "at": extra.pop("at", "2026-11-30T10:00:00Z"),
        "machine": extra.pop("machine", "pod"),
        "object": extra.pop("object", POD),
    }
    if observe:
        data["observe"] = observe
    if fields is not None:
        data["with"] = fields
    data.update(extra)
    return json.dumps(data)


def fault(kind: str, observe: str = "", fields: dict[str, Any] | None = None, **extra: Any) -> str:
    return line(observe, fields, fault=kind, **extra)


CREATE = line("CreateRequested", {"pool": "gpu", "provider": "fake"})
RESERVED = line("ProvisionSucceeded", {"reserved": True, **INSTANCE}, at="2026-11-30T10:00:01Z")
PENDING = line("InstancePending", INSTANCE, at="2026-11-30T10:00:15Z")
RUNNING = line("InstanceRunning", INSTANCE, at="2026-11-30T10:00:30Z")


def parse(*lines: str) -> list[TraceLine]:
    return parse_lines(lines, "t.jsonl", MACHINES)


@pytest.fixture(params=["memory", "sqlite"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    s: Store = MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "f.db")
    yield s
    s.close()


def _snapshot(store: Store) -> Any:
    out = []
    for machine in MACHINES.values():
        for record in sorted(store.records(machine), key=lambda r: r.ref.uid):
            out.append((record.ref.uid, record.version, record.status))
    return out, sorted(x.id for x in store.claim_undelivered())


def _hosts(seen: list[Any]) -> list[HostEvents]:
    return [result for _, result in seen if isinstance(result, HostEvents)]


def _replay(*lines: str, store: Store | None = None) -> tuple[list[Any], MemoryEmitter, Store]:
    """Replay ``lines``; (each (line number, result) handed to on_result, emitter, store)."""
    store = store if store is not None else MemoryStore()
    emitter = MemoryEmitter()
    seen: list[Any] = []
    replay(
        parse(*lines),
        store,
        [emitter],
        on_result=lambda record, result: seen.append((record.line, result)),
    )
    return seen, emitter, store


# -- parsing and validation ------------------------------------------------------------------
def test_a_concurrent_write_line_carries_the_other_writers_observation() -> None:
    record = parse_line(fault(CONCURRENT_WRITE, "InstanceRunning", INSTANCE), MACHINES, 4)
    assert isinstance(record, FaultLine)
    assert (record.line, record.fault, record.times) == (4, CONCURRENT_WRITE, 1)
    assert record.observation == InstanceRunning(at=t(0), **INSTANCE)


def test_a_crash_line_has_no_observation() -> None:
    record = parse_line(fault(CRASH_AFTER_COMMIT), MACHINES)
    assert isinstance(record, FaultLine)
    assert (record.fault, record.times, record.observation) == (CRASH_AFTER_COMMIT, 1, None)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (fault(CONCURRENT_WRITE), 'a "concurrent-write" line needs "observe"'),
        (fault(CONCURRENT_WRITE, "Nope"), "unknown observation 'Nope'"),
        (fault(CONCURRENT_WRITE, "InstanceRunning", {"instance_id": 5}), "expected a string"),
        (fault(CONCURRENT_WRITE, "InstanceRunning", INSTANCE, times=2), '"times" does not go'),
        (fault(CONCURRENT_WRITE, "InstanceRunning", with_=1), "unknown key(s) with_"),
        (
            line("InstanceRunning", None, fault=CONCURRENT_WRITE, **{"with": [1]}),
            '"with" must be an object',
        ),
        (fault(CRASH_AFTER_COMMIT, times=1), '"times" does not go with "crash-after-commit"'),
        (fault(CRASH_AFTER_COMMIT, "CreateRequested"), 'fault line has no "observe"'),
        (fault("write-error", "CreateRequested"), 'fault line has no "observe"'),
        (fault("explode"), "one of conflict, write-error, concurrent-write, crash-after-commit"),
    ],
)
def test_bad_fault_lines_are_refused_with_their_line(text: str, problem: str) -> None:
    with pytest.raises(TraceError) as caught:
        parse(CREATE, text)
    assert caught.value.line == 2
    assert problem in caught.value.problem


def test_a_repeated_key_in_the_other_writers_fields_is_refused() -> None:
    text = line("", None, fault=CONCURRENT_WRITE, observe="InstanceRunning")
    text = text[:-1] + ', "with": {"instance_id": "a", "instance_id": "b"}}'
    with pytest.raises(TraceError, match="duplicate key 'instance_id'"):
        parse(text)


def test_the_other_writers_observation_refused_by_the_table_is_its_lines_error(
    any_store: Store,
) -> None:
    """A Provision result for a pod that was never created is refused: the dry run says so at
    the fault line, before anything is written."""
    trace = parse(
        fault(CONCURRENT_WRITE, "ProvisionSucceeded", {"reserved": True, **INSTANCE}), CREATE
    )
    before = _snapshot(any_store)
    with pytest.raises(TraceError) as caught:
        replay(trace, any_store, [MemoryEmitter()])
    assert caught.value.line == 1
    assert "the other writer's ProvisionSucceeded" in caught.value.problem
    assert _snapshot(any_store) == before


@pytest.mark.parametrize("kind", [CONCURRENT_WRITE, CRASH_AFTER_COMMIT])
def test_a_race_that_never_fires_is_refused(kind: str, any_store: Store) -> None:
    """No later line writes the object: the fault line would silently do nothing."""
    extra = ("InstanceRunning", INSTANCE) if kind == CONCURRENT_WRITE else ()
    trace = parse(CREATE, fault(kind, *extra), line("InstanceUnknown", {"error": "timeout"}))
    before = _snapshot(any_store)
    with pytest.raises(TraceError) as caught:
        replay(trace, any_store)
    assert caught.value.line == 2
    assert "never fired: no later line writes this object" in caught.value.problem
    assert _snapshot(any_store) == before


def test_the_cli_refuses_a_bad_fault_line_with_exit_2_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(CREATE + "\n" + fault(CRASH_AFTER_COMMIT, times=3) + "\n", encoding="utf-8")
    db = tmp_path / "bad.db"
    assert main(["replay", str(path), "--store", f"sqlite:///{db}"], out=io.StringIO()) == 2
    assert capsys.readouterr().err.startswith(f"{path}:2: ")
    assert not db.exists()


# -- another writer wins -----------------------------------------------------------------------
def test_the_other_writer_commits_first_and_our_flip_is_suppressed(any_store: Store) -> None:
    other = fault(CONCURRENT_WRITE, "InstanceRunning", INSTANCE, at="2026-11-30T10:00:30Z")
    seen, emitter, store = _replay(CREATE, RESERVED, PENDING, other, RUNNING, store=any_store)
    assert seen[3] == (4, None)  # the fault line, when read
    host = seen[4][1]  # the fault line, when it fired: before our line's result
    assert isinstance(host, HostEvents)
    assert host.fault == CONCURRENT_WRITE
    assert host.cause.line == 4
    assert [x.id for x in host.transitions] == ["pod-a:4:0"]  # the other writer's Running
    assert [r.outcome for r in host.results] == [Outcome.COMMITTED]
    ours = seen[5][1]
    assert isinstance(ours, Result)
    # our write met the real conflict, re-read Running and found nothing left to change
    assert (ours.outcome, ours.attempts, ours.version) == (Outcome.UNCHANGED, 2, 4)
    assert emitter.reasons("pod-a") == ["Provisioning", "Initializing", "Initializing", "Running"]
    emitter.assert_no_duplicates()
    assert store.claim_undelivered() == []


def test_the_other_writers_commit_changes_what_our_flip_reads() -> None:
    other = fault(CONCURRENT_WRITE, "InstancePending", INSTANCE, at="2026-11-30T10:01:00Z")
    failed = line(
        "InstanceFailed", {"instance_id": "i-1", "exit_code": 1}, at="2026-11-30T10:01:00Z"
    )
    seen, emitter, _ = _replay(CREATE, RESERVED, RUNNING, other, failed)
    flips = [(x.source, x.target) for x in emitter.for_uid("pod-a")]
    assert flips[-2:] == [("Running", "Initializing"), ("Initializing", "Failed")]
    ours = seen[-1][1]
    assert ours.committed
    assert ours.attempts == 2


def test_a_conflict_caused_by_the_other_writer_counts_as_injected() -> None:
    """A write with one attempt (a link's direct write) fails on the other writer's conflict:
    the trace asked for it, so ``lifecycle replay`` keeps exit 0 (ADR 0076)."""
    from lifecycle.trace import _TraceFaults

    store = MemoryStore()
    replay(parse(CREATE), store)
    (record,) = parse(fault(CONCURRENT_WRITE, "ConfigInvalid", {"error": "x"}))
    assert isinstance(record, FaultLine)
    runs: list[Any] = []

    def make_runner(inner: Any, recorder: Any) -> Any:
        from lifecycle import Runner

        runs.append(inner)
        return Runner(inner, [recorder], check_schema=False)

    faulty = _TraceFaults(store, make_runner)
    faulty.add(record)
    pod = MACHINES["pod"]
    ref = ObjectRef("Pod", "ml", "trainer-0", "pod-a")
    loaded = store.load(pod, ref)
    assert loaded is not None
    obs = InstanceRunning(at=t(1), **INSTANCE)
    with pytest.raises(InjectedConflict) as caught:
        faulty.commit(pod, ref, loaded.version, pod.apply(loaded.status, obs), obs, ())
    assert injected(caught.value)
    assert runs == [store]  # the other writer wrote to the store underneath, past the faults
    assert [h.fault for h in faulty.fired] == [CONCURRENT_WRITE]


# -- a crash between commit and delivery -------------------------------------------------------
def test_a_restarted_host_redelivers_under_the_same_ids_and_applies_the_intent(
    any_store: Store,
) -> None:
    seen, emitter, store = _replay(CREATE, fault(CRASH_AFTER_COMMIT), RESERVED, store=any_store)
    (host,) = _hosts(seen)
    assert isinstance(host, HostEvents)
    assert host.fault == CRASH_AFTER_COMMIT
    assert host.cause.line == 2
    # the Provision's event, from the outbox; then the claim binding the restart applied
    assert [x.id for x in host.transitions] == ["pod-a:2:0", "pod-a-claim:2:0"]
    assert host.redelivered == frozenset({"pod-a:2:0"})
    assert host.before_crash == ()
    assert seen[-2:] == [(2, host), (3, None)]  # the line's result died with the process
    assert emitter.ids() == ["pod-a:1:0", "pod-a-claim:1:0", "pod-a:2:0", "pod-a-claim:2:0"]
    assert store.claim_undelivered() == []


def test_a_crash_on_the_claim_keeps_the_events_sent_before_it(any_store: Store) -> None:
    seen, emitter, store = _replay(
        CREATE,
        fault(CRASH_AFTER_COMMIT, object=CLAIM, machine="nodeclaim"),
        RESERVED,
        store=any_store,
    )
    (host,) = _hosts(seen)
    assert isinstance(host, HostEvents)
    assert [x.id for x in host.before_crash] == ["pod-a:2:0"]  # sent before it died
    assert [x.id for x in host.transitions] == ["pod-a-claim:2:0"]
    assert host.redelivered == frozenset({"pod-a-claim:2:0"})
    emitter.assert_no_duplicates()
    claim = store.load(
        MACHINES["nodeclaim"], ObjectRef("NodeClaim", "", "ml-trainer-0", "pod-a-claim")
    )
    assert claim is not None
    assert (claim.status.state, claim.version) == ("Bound", 2)
    assert store.claim_undelivered() == []


def test_a_crash_before_the_lines_own_write_has_the_restarted_host_observe_it_again() -> None:
    """The claim's write failed, so its intent is pending; the next line's pass redoes it
    first, and dies right after that commit: the line itself was never written, and the
    restarted host observes it again."""
    claim_fault: dict[str, Any] = {"object": CLAIM, "machine": "nodeclaim"}
    seen, emitter, store = _replay(
        CREATE,
        fault("write-error", **claim_fault),
        RESERVED,
        fault(CRASH_AFTER_COMMIT, **claim_fault),
        PENDING,
    )
    (host,) = _hosts(seen)
    assert [x.id for x in host.transitions] == ["pod-a-claim:2:0"]
    last = seen[-1][1]
    assert isinstance(last, Result)
    assert last.committed
    assert emitter.reasons("pod-a") == ["Provisioning", "Initializing", "Initializing"]
    assert emitter.reasons("pod-a-claim") == ["Provisioning", "Bound"]
    emitter.assert_no_duplicates()
    pod = store.load(MACHINES["pod"], ObjectRef("Pod", "ml", "trainer-0", "pod-a"))
    assert pod is not None
    assert pod.version == 3


def test_a_crash_during_the_restart_restarts_again() -> None:
    seen, emitter, store = _replay(
        CREATE,
        fault(CRASH_AFTER_COMMIT),
        fault(CRASH_AFTER_COMMIT, object=CLAIM, machine="nodeclaim"),
        RESERVED,
    )
    hosts = _hosts(seen)
    assert [(h.cause.line, [x.id for x in h.transitions]) for h in hosts] == [
        (2, ["pod-a:2:0"]),  # redelivered, then died binding the claim
        (3, ["pod-a-claim:2:0"]),  # the second restart redelivers the claim's event
    ]
    assert emitter.ids() == ["pod-a:1:0", "pod-a-claim:1:0", "pod-a:2:0", "pod-a-claim:2:0"]
    assert store.claim_undelivered() == []


# -- the command line --------------------------------------------------------------------------
def _cli(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(["replay", *args], out=out)
    return code, out.getvalue()


def test_the_table_marks_what_other_hosts_sent() -> None:
    code, text = _cli(str(TRACES / "concurrent-writer.jsonl"))
    assert code == 0
    marked = [row for row in text.splitlines() if "(other writer)" in row]
    assert len(marked) == 2
    assert "Initializing → Running" in marked[0]
    code, text = _cli(str(TRACES / "crash-after-commit.jsonl"))
    assert code == 0
    # the mark ends the line (no column moves for it)
    assert re.search(r"Provisioning → Initializing .*  \(redelivered\)$", text, re.M)
    assert re.search(r"Provisioning → Bound .*  \(restarted host\)$", text, re.M)
    assert re.search(r"Provisioning → Bound .*  \(redelivered\)$", text, re.M)


def test_a_failed_claim_write_is_caught_up_by_the_next_pass() -> None:
    """A claim write that failed is redone first by the next pass; when that line itself
    changes nothing, the claim's events must still be printed (they were delivered)."""
    trace = parse(
        CREATE,
        fault("write-error", object=CLAIM, machine="nodeclaim"),
        RESERVED,
        line("ProvisionSucceeded", {"reserved": True, **INSTANCE}, at="2026-11-30T10:00:02Z"),
    )
    emitter = MemoryEmitter()
    replay(trace, MemoryStore(), [emitter])
    assert emitter.reasons("pod-a-claim") == ["Provisioning", "Bound"]


def test_the_cli_prints_a_caught_up_write_of_an_unchanged_line(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    lines = [
        CREATE,
        fault("write-error", object=CLAIM, machine="nodeclaim"),
        RESERVED,
        line("ProvisionSucceeded", {"reserved": True, **INSTANCE}, at="2026-11-30T10:00:02Z"),
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, text = _cli(str(path), "--format", "jsonl")
    assert code == 0
    shown = [json.loads(x)["id"] for x in text.splitlines()]
    emitter = MemoryEmitter()
    replay(read_trace(path), MemoryStore(), [emitter])
    assert shown == emitter.ids()
    assert "pod-a-claim:2:0" in shown


KUBECTL = """\
FIRST SEEN             LAST SEEN              TYPE      REASON                    OBJECT                 COUNT   MESSAGE
2026-11-30T10:00:30Z   2026-11-30T10:40:30Z   Warning   InsufficientGPUCapacity   workflow/a100-burnin   21      Excluded 1 node(s) with fewer than 8 allocatable nvidia.com/gpu: node-a7 has 4
2026-11-30T10:50:30Z   2026-11-30T10:50:30Z   Warning   InsufficientGPUCapacity   workflow/a100-burnin   1       Excluded 1 node(s) with fewer than 8 allocatable nvidia.com/gpu: node-a7 has 4
"""  # noqa: E501


def test_as_kubernetes_events_shows_one_event_per_series() -> None:
    path = TRACES / "kubernetes-event-series.jsonl"
    code, text = _cli(str(path), "--as-kubernetes-events")
    assert code == 0
    lines = text.splitlines(keepends=True)
    assert lines[0].startswith(f"replaying {path} (23 lines)")
    assert "".join(lines[1:-1]) == KUBECTL
    assert lines[-1] == "23 observations, 22 events, 0 failed writes\n"


def test_as_kubernetes_events_as_json_lines() -> None:
    code, text = _cli(
        str(TRACES / "kubernetes-event-series.jsonl"), "--as-kubernetes-events", "--format", "jsonl"
    )
    assert code == 0
    rows = [json.loads(x) for x in text.splitlines()]
    assert [(r["count"], r["first_time"], r["last_time"]) for r in rows] == [
        (21, "2026-11-30T10:00:30+00:00", "2026-11-30T10:40:30+00:00"),
        (1, "2026-11-30T10:50:30+00:00", "2026-11-30T10:50:30+00:00"),
    ]
    assert {(r["kind"], r["object"], r["namespace"], r["type"]) for r in rows} == {
        ("Workflow", "a100-burnin", "fleet", "Warning")
    }


def test_as_kubernetes_events_counts_a_redelivered_event_once() -> None:
    code, text = _cli(
        str(TRACES / "crash-after-commit.jsonl"), "--as-kubernetes-events", "--format", "jsonl"
    )
    assert code == 0
    rows = [json.loads(x) for x in text.splitlines()]
    assert len(rows) == 10
    assert all(r["count"] == 1 for r in rows)
    assert sorted(r["first_time"] for r in rows) == [r["first_time"] for r in rows]


def test_as_kubernetes_events_is_ordered_by_the_traces_clock(tmp_path: Path) -> None:
    """Lines of two objects interleave out of time order: each Event is recorded at its own
    time, not at the latest time the trace reached."""
    other = {"namespace": "ml", "name": "trainer-1", "uid": "pod-b"}
    path = tmp_path / "t.jsonl"
    lines = [
        line("CreateRequested", {"pool": "gpu", "provider": "fake"}, at="2026-11-30T10:05:00Z"),
        line("CreateRequested", {"pool": "gpu", "provider": "fake"}, object=other),
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, text = _cli(str(path), "--as-kubernetes-events", "--format", "jsonl")
    assert code == 0
    rows = [json.loads(x) for x in text.splitlines()]
    assert [(r["object"], r["first_time"][11:19]) for r in rows if r["kind"] == "Pod"] == [
        ("trainer-1", "10:00:00"),
        ("trainer-0", "10:05:00"),
    ]


# -- writing race lines ------------------------------------------------------------------------
def test_recorded_race_lines_read_back_as_written(tmp_path: Path) -> None:
    from lifecycle.trace import TraceRecorder, fault_line

    ref = ObjectRef("Pod", "ml", "trainer-0", "pod-a")
    recorder = TraceRecorder()
    other = InstanceRunning(at=t(30), instance_id="i-1", endpoint="https://u:hunter2@x/")
    recorder.fault(ref, t(30), CONCURRENT_WRITE, observation=other)
    recorder.fault(ref, t(31), CRASH_AFTER_COMMIT)
    path = tmp_path / "r.jsonl"
    recorder.write(path)
    assert "hunter2" not in path.read_text(encoding="utf-8")  # redacted as records are
    written, crash = read_trace(path)
    assert isinstance(written, FaultLine)
    assert isinstance(crash, FaultLine)
    assert isinstance(written.observation, InstanceRunning)
    assert (written.fault, written.observation.instance_id) == (CONCURRENT_WRITE, "i-1")
    assert written.observation.at == t(30)
    assert (crash.fault, crash.times, crash.observation) == (CRASH_AFTER_COMMIT, 1, None)
    pod = MACHINES["pod"]
    with pytest.raises(ValueError, match="only it, carries an observation"):
        fault_line(pod, ref, t(0), CONCURRENT_WRITE)
    with pytest.raises(ValueError, match="only it, carries an observation"):
        fault_line(pod, ref, t(0), "conflict", observation=other)
    with pytest.raises(ValueError, match="times must be 1"):
        fault_line(pod, ref, t(0), CRASH_AFTER_COMMIT, 2)


# -- a crash after any commit changes no outcome -----------------------------------------------
CRASH_TRACES = (
    "happy-path.jsonl",
    "teardown.jsonl",
    "demo.jsonl",
    "certification-timeout.jsonl",
    "certification-threshold-cascade.jsonl",
)


def _outcome(lines: Sequence[TraceLine]) -> tuple[dict[str, Any], list[str], list[Any]]:
    store, emitter = MemoryStore(), MemoryEmitter()
    results = replay(lines, store, [emitter])
    statuses = {
        record.ref.uid: (record.version, record.status)
        for machine in MACHINES.values()
        for record in store.records(machine)
    }
    assert store.claim_undelivered() == []
    return statuses, emitter.ids(), results


@pytest.mark.parametrize("name", CRASH_TRACES)
def test_a_crash_after_any_commit_ends_where_the_fault_free_replay_ends(name: str) -> None:
    """Before each line that commits, a crash-after-commit on its object: the restarted host
    redelivers and applies what the dead process left, so every object ends where the
    fault-free replay ends, with the same events under the same ids, in the same order."""
    lines = [x for x in read_trace(TRACES / name) if not isinstance(x, FaultLine)]
    statuses, ids, results = _outcome(lines)
    crashed = 0
    for i, (record, result) in enumerate(zip(lines, results, strict=True)):
        if not result.committed:
            continue
        crash = FaultLine(
            0, record.machine, record.ref, record.observation.at, CRASH_AFTER_COMMIT, 1
        )
        got_statuses, got_ids, _ = _outcome([*lines[:i], crash, *lines[i:]])
        assert got_statuses == statuses, (name, i)
        assert got_ids == ids, (name, i)
        crashed += 1
    assert crashed >= 4
