"""Every bundled trace in examples/traces replays to exactly the events it promises.

Traces are found by glob, so a new trace is replayed too, and fails here until its expected
events are written down below. Each trace is replayed through the library
(:func:`lifecycle.trace.replay`) and through the CLI, on the memory and the SQLite store.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from lifecycle import MemoryEmitter, MemoryStore, SQLiteStore, Store, Transition, default_registry
from lifecycle.cli import main
from lifecycle.trace import read_trace, replay

from .test_cascade_workflow import TRACE_EVENTS

TRACES = Path(__file__).resolve().parent.parent / "examples" / "traces"
ALL = sorted(TRACES.glob("*.jsonl"))

Event = tuple[str, str, str, str]  # (type, reason, from, to)


def N(source: str, target: str, reason: str | None = None) -> Event:
    return ("Normal", reason or target, source, target)


def W(source: str, target: str, reason: str | None = None) -> Event:
    return ("Warning", reason or target, source, target)


PROV, INIT, RUN = "Provisioning", "Initializing", "Running"
BOUND, TING, TED, DEL = "Bound", "Terminating", "Terminated", "Deleted"

# A Pod's claim (cascade): created Provisioning, bound when the pod boots.
CLAIM_BOUND = [N("", PROV), N(PROV, BOUND)]

#: Per trace, per object uid: the exact events, in order.
EXPECTED: dict[str, dict[str, list[Event]]] = {
    "demo.jsonl": {
        # the first poll adds Ready=False to the reserved (Initializing) pod: a flip of its
        # signature (phase, reason, Ready, pod IP), so an event, as upstream's
        "pod-a": [N("", PROV), N(PROV, INIT), N(INIT, INIT), N(INIT, RUN), N(RUN, TED)],
        "pod-a-claim": [*CLAIM_BOUND, N(BOUND, TING), N(TING, TED), N(TED, DEL)],
        "pod-b": [N("", PROV), W(PROV, "ProvisionFailed")],
        "pod-b-claim": [N("", PROV), N(PROV, TED)],
    },
    "happy-path.jsonl": {
        "happy-0": [N("", PROV), N(PROV, INIT), N(INIT, INIT), N(INIT, RUN)],
        "happy-0-claim": CLAIM_BOUND,
    },
    "unreserved.jsonl": {
        "unres-0": [N("", PROV), N(PROV, RUN)],
        "unres-0-claim": CLAIM_BOUND,
    },
    "probe-gated.jsonl": {
        "probe-0": [N("", PROV), N(PROV, INIT), N(INIT, RUN)],
        "probe-0-claim": CLAIM_BOUND,
    },
    "exit-classification.jsonl": {
        "exit-1": [N("", PROV), N(PROV, INIT), N(INIT, RUN), W(RUN, "Failed")],
        "exit-1-claim": [*CLAIM_BOUND, N(BOUND, TED)],
        "exit-137": [N("", PROV), N(PROV, INIT), N(INIT, RUN), W(RUN, TED)],
        "exit-137-claim": [*CLAIM_BOUND, N(BOUND, TED)],
    },
    "vanished.jsonl": {
        "vanish-0": [N("", PROV), N(PROV, INIT), N(INIT, RUN), W(RUN, TED)],
        "vanish-0-claim": [*CLAIM_BOUND, N(BOUND, TED), N(TED, DEL)],
    },
    "teardown.jsonl": {
        "td-early": [N("", PROV), N(PROV, TED)],
        "td-early-claim": [N("", PROV), N(PROV, TING), N(TING, TED), N(TED, DEL)],
        "td-orphan-claim": [N("", DEL)],
        "td-late": [N("", PROV), N(PROV, INIT), N(INIT, RUN), N(RUN, TED)],
        "td-late-claim": [*CLAIM_BOUND, N(BOUND, TING), N(TING, TED), N(TED, DEL)],
    },
    "legacy-claim.jsonl": {
        "old-0-claim": [N("", BOUND), N(BOUND, DEL)],
        "old-1-claim": [N("", BOUND)],
    },
    "faults.jsonl": {
        "fault-conflict": [N("", PROV), N(PROV, INIT)],
        "fault-conflict-claim": CLAIM_BOUND,
        "fault-write": [
            N("", PROV),
            N(PROV, RUN),
            W(RUN, "Failed"),  # no fallback first: the next poll redoes the lost write
        ],
        "fault-write-claim": [*CLAIM_BOUND, N(BOUND, TED)],
    },
}

#: Per trace, per object uid: key facts of the final stored status ("version" is the record's;
#: dotted keys reach into the status, e.g. "ready.status").
FINAL: dict[str, dict[str, dict[str, Any]]] = {
    "demo.jsonl": {
        "pod-a": {
            "state": TED,
            "phase": "Succeeded",
            "instance_id": "fake-1",
            "ready.status": "False",  # a Terminated pod is never Ready
            "pod_ip": "10.0.0.7",
            "version": 6,
        },
        "pod-a-claim": {"state": DEL, "instance_id": "fake-1", "pool": "gpu"},
        "pod-b": {"state": "ProvisionFailed", "phase": "Failed", "instance_id": ""},
        "pod-b-claim": {"state": TED, "provider": "aws"},
    },
    "happy-path.jsonl": {
        "happy-0": {
            "state": RUN,
            "phase": "Running",
            "ready.status": "True",
            "ready.last_transition_time": "2026-11-30T10:00:30+00:00",
            "instance_id": "fake-1",
            "endpoint": "fake://fake-1",
            "start_time": "2026-11-30T10:00:15+00:00",
            "version": 4,
        },
        "happy-0-claim": {"state": BOUND, "instance_id": "fake-1", "pod_uid": "happy-0"},
    },
    "unreserved.jsonl": {
        "unres-0": {"state": RUN, "ready.status": "True", "instance_id": "sb-7f3a", "version": 3},
        "unres-0-claim": {"state": BOUND, "instance_id": "sb-7f3a", "provider": "modal"},
    },
    "probe-gated.jsonl": {
        "probe-0": {
            "state": RUN,
            "ready.status": "True",
            "ready.last_transition_time": "2026-11-30T10:00:45+00:00",
            "message": "external instance is running",
            "version": 4,
        },
        "probe-0-claim": {"state": BOUND},
    },
    "exit-classification.jsonl": {
        "exit-1": {"state": "Failed", "phase": "Failed", "exit_code": 1, "ready.status": "False"},
        "exit-1-claim": {"state": TED},
        "exit-137": {"state": TED, "phase": "Failed", "exit_code": 137, "ready.status": "False"},
        "exit-137-claim": {"state": TED},
    },
    "vanished.jsonl": {
        "vanish-0": {
            "state": TED,
            "phase": "Failed",
            "message": "external instance is gone",
            "pod_ip": "10.1.2.3",
            "ready.status": "False",
        },
        "vanish-0-claim": {"state": DEL, "instance_id": "i-0abc"},
    },
    "teardown.jsonl": {
        "td-early": {
            "state": TED,
            "phase": "Succeeded",
            "deletion_timestamp": "2026-11-30T10:00:03+00:00",
            "instance_id": None,
        },
        "td-early-claim": {"state": DEL},
        "td-orphan-claim": {"state": DEL, "pod_absent_since": "2026-11-30T10:00:05+00:00"},
        "td-late": {
            "state": TED,
            "phase": "Succeeded",
            "instance_id": "i-0late",
            "ready.status": "False",  # DeletePod of a Ready pod: never Ready once Terminated
            "ready.last_transition_time": "2026-11-30T10:05:01+00:00",
        },
        "td-late-claim": {"state": DEL, "deleting": True, "instance_id": "i-0late"},
    },
    "legacy-claim.jsonl": {
        "old-0-claim": {"state": DEL, "version": 2},
        "old-1-claim": {"state": BOUND, "instance_id": "sb-old1", "version": 1},
    },
    "faults.jsonl": {
        "fault-conflict": {"state": INIT, "instance_id": "fake-1", "version": 2},
        "fault-conflict-claim": {"state": BOUND},
        "fault-write": {"state": "Failed", "exit_code": 1, "version": 4},
        "fault-write-claim": {"state": TED},
    },
}


def _events_by_uid(events: list[Transition]) -> dict[str, list[Event]]:
    out: dict[str, list[Event]] = {}
    for t in events:
        out.setdefault(t.ref.uid, []).append((t.type.value, t.reason, t.source, t.target))
    return out


def _dig(data: dict[str, Any], dotted: str) -> Any:
    value: Any = data
    for part in dotted.split("."):
        value = value[part]
    return value


# The restore gate traces (machine: restore). Every step of the gate is a state, so each is an
# event; action events (e.g. InvalidSkipAnnotation) stay in their state.
EXPECTED.update(
    {
        "restore-l4-t4-pairing.jsonl": {
            "pod-3c2a-6307a8d54264007e": [
                ("Normal", "RestoreAttemptOpened", "", "Pending"),
                ("Normal", "CompatCheckStarted", "Pending", "GateA"),
                ("Normal", "RestoreRequested", "GateA", "Claimed"),
                ("Normal", "CompatCheckStarted", "Claimed", "GateB"),
                ("Normal", "RestoreStarted", "GateB", "Restoring"),
                ("Normal", "RestoreSucceeded", "Restoring", "Recording"),
                ("Normal", "RestoreVerdictRecorded", "Recording", "Restored"),
            ],
        },
        "restore-legacy-manifest.jsonl": {
            "pod-9f00-134e42347dadd7ca": [
                ("Normal", "RestoreAttemptOpened", "", "Pending"),
                ("Normal", "CompatCheckStarted", "Pending", "GateA"),
                ("Normal", "RestoreCompatPartial", "GateA", "GateA"),
                ("Normal", "RestoreRequested", "GateA", "Claimed"),
                ("Normal", "CompatCheckStarted", "Claimed", "GateB"),
                ("Warning", "RestoreIncompatible", "GateB", "Recording"),
                ("Normal", "RestoreVerdictRecorded", "Recording", "Rejected"),
            ],
        },
        "restore-refused-then-bypassed.jsonl": {
            "pod-7d1e-e359979f3d27b15b": [
                ("Normal", "RestoreAttemptOpened", "", "Pending"),
                ("Normal", "CompatCheckStarted", "Pending", "GateA"),
                ("Warning", "RestoreIncompatible", "GateA", "Recording"),
                ("Warning", "RestoreStatusUpdateFailed", "Recording", "Recording"),
                ("Normal", "RestoreVerdictRecorded", "Recording", "Rejected"),
                ("Warning", "InvalidSkipAnnotation", "Rejected", "Rejected"),
                ("Warning", "CompatCheckSkipped", "Rejected", "Skipped"),
                ("Normal", "RestoreRequested", "Skipped", "Claimed"),
                ("Normal", "RestoreStarted", "Claimed", "Restoring"),
                ("Normal", "RestoreSucceeded", "Restoring", "Recording"),
                ("Normal", "RestoreVerdictRecorded", "Recording", "Restored"),
            ],
        },
        "restore-unknown.jsonl": {
            "pod-1111-be6312adb8f193d9": [
                ("Normal", "RestoreAttemptOpened", "", "Pending"),
                ("Normal", "CompatCheckStarted", "Pending", "GateA"),
                ("Warning", "RestoreCompatUnknown", "GateA", "Recording"),
                ("Normal", "RestoreVerdictRecorded", "Recording", "Unknown"),
            ],
            "pod-1111-a6623754e330d286": [
                ("Normal", "RestoreAttemptOpened", "", "Pending"),
                ("Normal", "CompatCheckStarted", "Pending", "GateA"),
                ("Warning", "RestoreCompatUnchecked", "GateA", "GateA"),
                ("Normal", "RestoreRequested", "GateA", "Claimed"),
                ("Normal", "CompatCheckStarted", "Claimed", "GateB"),
                ("Warning", "RestoreCompatUnknown", "GateB", "GateB"),
                ("Warning", "RestoreFailed", "GateB", "Recording"),
                ("Normal", "RestoreVerdictRecorded", "Recording", "Failed"),
            ],
        },
    }
)
FINAL.update(
    {
        "restore-l4-t4-pairing.jsonl": {
            "pod-3c2a-6307a8d54264007e": {"state": "Restored", "code": "", "version": 7}
        },
        "restore-legacy-manifest.jsonl": {
            "pod-9f00-134e42347dadd7ca": {
                "state": "Rejected",
                "code": "GpuCountMismatch",
                "version": 7,
            }
        },
        "restore-refused-then-bypassed.jsonl": {
            "pod-7d1e-e359979f3d27b15b": {
                "state": "Restored",
                "code": "CompatCheckSkipped",
                "version": 14,
            }
        },
        "restore-unknown.jsonl": {
            "pod-1111-be6312adb8f193d9": {
                "state": "Unknown",
                "code": "ManifestSchemaUnsupported",
                "version": 4,
            },
            "pod-1111-a6623754e330d286": {
                "state": "Failed",
                "code": "TargetFactsUnavailable",
                "version": 8,
            },
        },
    }
)

# The faults of the write-then-emit protocol (ADR 0077): another writer winning the race, a
# crash between commit and delivery; and an action Warning repeated into one Kubernetes series.
EXPECTED.update(
    {
        "concurrent-writer.jsonl": {
            # the other writer commits Running first: our re-read finds it, our flip is suppressed
            "race-same": [N("", PROV), N(PROV, INIT), N(INIT, INIT), N(INIT, RUN)],
            "race-same-claim": CLAIM_BOUND,
            # the other writer demotes to Initializing first: our Failed now reads from there
            "race-changed": [
                N("", PROV),
                N(PROV, INIT),
                N(INIT, RUN),
                N(RUN, INIT),
                W(INIT, "Failed"),
            ],
            "race-changed-claim": [*CLAIM_BOUND, N(BOUND, TED)],
        },
        "crash-after-commit.jsonl": {
            "crash-0": [N("", PROV), N(PROV, INIT), N(INIT, RUN)],
            "crash-0-claim": CLAIM_BOUND,
            "crash-1": [N("", PROV), N(PROV, INIT), N(INIT, RUN)],
            "crash-1-claim": CLAIM_BOUND,
        },
        "kubernetes-event-series.jsonl": {
            "wf-k8s": [("Warning", "InsufficientGPUCapacity", "", "")] * 22,
        },
    }
)
FINAL.update(
    {
        "concurrent-writer.jsonl": {
            # v4 is the other writer's Running: ours, re-applied to it, changed nothing
            "race-same": {"state": RUN, "ready.status": "True", "version": 4},
            "race-same-claim": {"state": BOUND, "version": 2},
            "race-changed": {"state": "Failed", "exit_code": 1, "version": 5},
            "race-changed-claim": {"state": TED},
        },
        "crash-after-commit.jsonl": {
            "crash-0": {"state": RUN, "instance_id": "fake-1", "version": 3},
            "crash-0-claim": {"state": BOUND, "instance_id": "fake-1", "version": 2},
            "crash-1": {"state": RUN, "instance_id": "fake-2", "version": 3},
            # the restart applied the pod's intent again: nothing changed, no version 3
            "crash-1-claim": {"state": BOUND, "instance_id": "fake-2", "version": 2},
        },
        "kubernetes-event-series.jsonl": {"wf-k8s": {"version": 1}},
    }
)

#: Events another host sent, by id, as ``--format jsonl`` marks them: (sent_by, redelivered).
#: Every other event is this process's own and carries neither key.
MARKED: dict[str, dict[str, tuple[str, bool]]] = {
    "concurrent-writer.jsonl": {
        "race-same:4:0": ("other writer", False),
        "race-changed:4:0": ("other writer", False),
    },
    "crash-after-commit.jsonl": {
        # committed before the crash, sent from the outbox under the same id
        "crash-0:2:0": ("restarted host", True),
        # the restarted host's own commit, applying the pod's pending cascade intent
        "crash-0-claim:2:0": ("restarted host", False),
        "crash-1-claim:2:0": ("restarted host", True),
    },
}

# The certification cascade traces are specified in test_cascade_workflow (with the reporting
# controller); here they are held to the same (type, reason, from, to) sequences.
for _name, _objects in TRACE_EVENTS.items():
    EXPECTED[_name] = {uid: [e[:4] for e in events] for uid, events in _objects.items()}


def _check_final(trace: str, finals: dict[str, tuple[int, dict[str, Any]]]) -> None:
    for uid, facts in FINAL.get(trace, {}).items():
        assert uid in finals, f"{trace}: no final status for {uid}"
        version, status = finals[uid]
        for key, want in facts.items():
            got = version if key == "version" else _dig(status, key)
            assert got == want, f"{trace}: {uid}.{key} is {got!r}, expected {want!r}"


def _open(kind: str, tmp_path: Path) -> Store:
    return MemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "replay.db")


def test_traces_are_bundled() -> None:
    names = {p.name for p in ALL}
    assert set(EXPECTED) <= names
    assert len(ALL) >= 9


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_every_trace_has_expectations_and_a_comment(path: Path) -> None:
    first = path.read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith("# "), f"{path.name} must open with a '#' line saying what it shows"
    assert path.name in EXPECTED, f"write down the expected events of {path.name} in EXPECTED"
    if path.name not in TRACE_EVENTS:  # the cascade traces' statuses: test_cascade_workflow
        assert path.name in FINAL, f"write down key final statuses of {path.name} in FINAL"


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_library_replay(path: Path, kind: str, tmp_path: Path) -> None:
    store = _open(kind, tmp_path)
    emitter = MemoryEmitter()
    try:
        replay(read_trace(path), store, [emitter], name=str(path))
        assert _events_by_uid(emitter.events) == EXPECTED.get(path.name)
        emitter.assert_no_duplicates()
        machines = default_registry()
        finals: dict[str, tuple[int, dict[str, Any]]] = {}
        for machine in machines.values():
            for record in store.records(machine):
                finals[record.ref.uid] = (record.version, machine.dump_status(record.status))
                # Folding the journal reproduces the stored status exactly.
                entries = store.journal(machine, record.ref)
                assert [e.version for e in entries] == list(range(1, record.version + 1))
                folded = machine.fold(record.ref, [e.observation for e in entries])
                assert folded == record.status
                # Every committed event is in the journal entry of its version.
                for e in entries:
                    for t in e.transitions:
                        assert t.version == e.version
                        assert t.id == f"{record.ref.uid}:{e.version}:{t.n}"
        _check_final(path.name, finals)
        # Everything was delivered: nothing is left in the outbox.
        assert store.claim_undelivered() == []
    finally:
        store.close()


@pytest.mark.parametrize("url", ["memory://", "sqlite"])
@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_cli_replay(path: Path, url: str, tmp_path: Path) -> None:
    if url == "sqlite":
        url = f"sqlite:///{tmp_path / 'cli.db'}"
    out = io.StringIO()
    code = main(
        ["replay", str(path), "--store", url, "--format", "jsonl", "--final-status"], out=out
    )
    assert code == 0
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    events = [d for d in lines if not d.get("final")]
    finals = {d["uid"]: (d["version"], d["status"]) for d in lines if d.get("final")}
    got: dict[str, list[Event]] = {}
    for d in events:
        got.setdefault(d["uid"], []).append((d["type"], d["reason"], d["from"], d["to"]))
    assert got == EXPECTED.get(path.name)
    marked = {
        d["id"]: (d.pop("sent_by"), d.pop("redelivered", False)) for d in events if "sent_by" in d
    }
    assert marked == MARKED.get(path.name, {})
    transitions = [d for d in events if not d.get("action")]  # action events carry no id
    assert all(d["id"] for d in transitions)
    assert len({d["id"] for d in transitions}) == len(transitions)
    _check_final(path.name, finals)
    # The CLI prints exactly what the library emits.
    emitter = MemoryEmitter()
    replay(read_trace(path), MemoryStore(), [emitter])
    assert events == [t.as_dict() for t in emitter.events]


def test_table_format_shows_every_event() -> None:
    for path in ALL:
        out = io.StringIO()
        assert main(["replay", str(path)], out=out) == 0
        text = out.getvalue().splitlines()
        expected = sum(len(v) for v in EXPECTED[path.name].values())
        assert text[0].startswith(f"replaying {path}")
        assert len(text) == 1 + expected + 1
        assert text[-1].endswith("failed writes")


# -- what particular traces show, beyond their events -----------------------------------------
def _replay_prefix(name: str, lines: int) -> MemoryStore:
    """Replay only the first ``lines`` records of a bundled trace."""
    store = MemoryStore()
    replay(read_trace(TRACES / name)[:lines], store)
    return store


def _status(store: Store, kind: str, uid: str) -> Any:
    machine = default_registry().for_kind(kind)
    for record in store.records(machine):
        if record.ref.uid == uid:
            return record.status
    raise AssertionError(f"no {kind} {uid}")


def test_probe_gated_pod_is_never_ready_before_confirmation() -> None:
    store = _replay_prefix("probe-gated.jsonl", 4)
    pod = _status(store, "Pod", "probe-0")
    assert pod.state == INIT
    assert pod.ready is not None
    assert pod.ready.status == "False"
    assert "readiness not yet confirmed" in pod.message


def test_unreserved_create_is_tracked_but_held() -> None:
    store = _replay_prefix("unreserved.jsonl", 3)  # create, unreserved provision, failed List
    pod = _status(store, "Pod", "unres-0")
    assert (pod.state, pod.instance_id, pod.ready) == (PROV, "sb-7f3a", None)
    assert _status(store, "NodeClaim", "unres-0-claim").state == PROV


def test_faults_retry_conflicts_and_a_lost_warning_is_redone_without_a_fallback() -> None:
    emitter = MemoryEmitter()
    results = replay(read_trace(TRACES / "faults.jsonl"), MemoryStore(), [emitter])
    by_line = {(r.ref.uid, r.status.state if r.status else None): r for r in results}
    conflicted = by_line[("fault-conflict", INIT)]
    assert conflicted.committed
    assert conflicted.attempts == 3  # two injected conflicts, then the write landed
    failed = [r for r in results if not r.committed and r.error is not None]
    assert len(failed) == 2  # the lost Normal flip and the lost Warning flip
    # No Pod row declares a fallback: the next poll redoes the write and sends the real
    # Warning, so a fallback would say the same thing twice (ADR 0091).
    assert [r.fallback for r in failed] == [(), ()]
    assert not any(e.fallback for e in emitter.events)
    assert [e.reason for e in emitter.events if e.ref.uid == "fault-write"][-1] == "Failed"


def test_legacy_claim_is_read_as_bound_and_never_downgraded() -> None:
    store = _replay_prefix("legacy-claim.jsonl", 4)
    held = _status(store, "NodeClaim", "old-1-claim")
    assert held.state == BOUND
    assert held.pod_uid == "old-1"
