"""The fake provider adapter: its provider contract, its scripts, its observations, and an
end-to-end run (FakeNode -> Runner -> Pod and NodeClaim events) whose recorded trace replays
to the same events."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from lifecycle import MemoryEmitter, MemoryStore, ObjectRef, Runner, SQLiteStore, Store, Transition
from lifecycle.adapters import (
    InstanceState,
    PollOutcome,
    ProviderError,
    Tracked,
    classify_exit,
    state_observation,
)
from lifecycle.cli import main
from lifecycle.machines.pod import (
    InstanceAbsent,
    InstanceFailed,
    InstancePending,
    InstanceRunning,
    InstanceTerminated,
    InstanceUnknown,
    ProvisionErrored,
    ProvisionRejected,
    ProvisionSucceeded,
    TerminateFailed,
    TerminateSucceeded,
)
from lifecycle.testing.fakes import FakeNode, FakeProvider, FakeSpec
from lifecycle.trace import TraceRecorder, read_trace, replay

from .conftest import pod_ref, t

SPEC = FakeSpec()


def ref(name: str) -> ObjectRef:
    """The pod ``ml/<name>``, whose claim is ``ml-<name>``."""
    return pod_ref(name, f"uid-{name}")


def poll(p: FakeProvider, name: str, at: Any) -> PollOutcome:
    """One List read for the pod ``ml/<name>`` (tracked without an id: found by its claim)."""
    return p.observe({ref(name): Tracked(SPEC)}, at=at)[ref(name)]


def poll_all(p: FakeProvider, names: list[str], at: Any) -> dict[str, PollOutcome]:
    """One List read for each pod, by claim name."""
    seen = p.observe({ref(n): Tracked(SPEC) for n in names}, at=at)
    return {p.claim(r): obs for r, obs in seen.items()}


# -- the provider contract (domain §4 "fake") -------------------------------------------------
def test_provision_gives_fake_ids_reserved_and_an_endpoint() -> None:
    p = FakeProvider()
    first = p.provision(ref("a"), at=t(0))
    second = p.provision(ref("b"), at=t(1))
    assert first == ProvisionSucceeded(
        at=t(0), reserved=True, instance_id="fake-1", endpoint="fake://fake-1"
    )
    assert (second.instance_id, second.endpoint) == ("fake-2", "fake://fake-2")  # type: ignore[union-attr]


def test_provision_is_idempotent_by_claim() -> None:
    p = FakeProvider()
    p.provision(ref("a"), at=t(0))
    again = p.provision(ref("a"), at=t(5))
    assert isinstance(again, ProvisionSucceeded)
    assert again.instance_id == "fake-1"
    assert [i.id for i in p.list()] == ["fake-1"]


def test_instances_run_at_once_by_default() -> None:
    p = FakeProvider()
    p.provision(ref("a"), at=t(0))
    assert poll(p, "a", t(15)) == InstanceRunning(
        at=t(15), instance_id="fake-1", endpoint="fake://fake-1", readiness_confirmed=True
    )


def test_terminate_deletes_and_is_idempotent() -> None:
    p = FakeProvider()
    p.provision(ref("a"), at=t(0))
    gone = p.terminate(ref("a"), Tracked(SPEC, "fake-1"), at=t(1))
    assert gone == TerminateSucceeded(at=t(1))
    assert p.terminate(ref("a"), Tracked(SPEC, "fake-1"), at=t(1)) == gone  # unknown id
    assert p.terminate(ref("a"), Tracked(SPEC), at=t(1)) == gone  # no id, no instance
    assert p.list() == []
    assert p.find("ml-a") is None
    assert p.calls.count(("terminate", "fake-1")) == 2
    # A new provision for the same claim is a new instance.
    again = p.provision(ref("a"), at=t(1))
    assert isinstance(again, ProvisionSucceeded)
    assert again.instance_id == "fake-2"


def test_list_returns_snapshots_of_all() -> None:
    p = FakeProvider()
    p.provision(ref("a"), at=t(0))
    p.provision(ref("b"), at=t(0))
    listed = p.list()
    assert [(i.id, i.claim, i.state) for i in listed] == [
        ("fake-1", "ml-a", InstanceState.RUNNING),
        ("fake-2", "ml-b", InstanceState.RUNNING),
    ]
    p.fail("fake-1")
    assert listed[0].state is InstanceState.RUNNING  # a snapshot, not a handle
    assert p.get("fake-1").state is InstanceState.FAILED


def test_unreserved_provider_reports_reserved_false() -> None:
    outcome = FakeProvider(reserved=False).provision(ref("a"), at=t(0))
    assert isinstance(outcome, ProvisionSucceeded)
    assert outcome.reserved is False


# -- scripts ------------------------------------------------------------------------------------
def test_boot_ticks_show_pending_first() -> None:
    p = FakeProvider(boot_ticks=2)
    p.provision(ref("a"), at=t(0))
    assert isinstance(poll(p, "a", t(1)), InstancePending)
    assert isinstance(poll(p, "a", t(2)), InstancePending)
    assert isinstance(poll(p, "a", t(3)), InstanceRunning)
    assert isinstance(poll(p, "a", t(4)), InstanceRunning)


def test_boot_ticks_per_provision_override_the_default() -> None:
    p = FakeProvider(boot_ticks=5)
    p.provision(ref("a"), FakeSpec(boot_ticks=0), at=t(0))
    assert isinstance(poll(p, "a", t(1)), InstanceRunning)


def test_start_pending_waits_for_boot() -> None:
    p = FakeProvider(start_pending=True)
    p.provision(ref("a"), at=t(0))
    for i in range(5):
        assert isinstance(poll(p, "a", t(i)), InstancePending)
    p.boot("fake-1")
    assert isinstance(poll(p, "a", t(9)), InstanceRunning)


def test_pend_demotes_until_boot() -> None:
    p = FakeProvider()
    p.provision(ref("a"), at=t(0))
    p.pend("fake-1")
    assert isinstance(poll(p, "a", t(1)), InstancePending)
    assert isinstance(poll(p, "a", t(2)), InstancePending)
    p.boot("fake-1")
    assert isinstance(poll(p, "a", t(3)), InstanceRunning)


def test_probe_gates_readiness() -> None:
    p = FakeProvider(probe=True)
    p.provision(ref("a"), at=t(0))
    seen = poll(p, "a", t(1))
    assert isinstance(seen, InstanceRunning)
    assert seen.readiness_confirmed is False
    p.confirm_ready("fake-1")
    seen = poll(p, "a", t(2))
    assert isinstance(seen, InstanceRunning)
    assert seen.readiness_confirmed is True


def test_fail_stop_and_exit() -> None:
    p = FakeProvider()
    for name in "abcde":
        p.provision(ref(name), at=t(0))
    p.fail("fake-1", exit_code=1)
    p.stop("fake-2")
    p.exit("fake-3", 137)
    p.exit("fake-4", 2)
    p.exit("fake-5", 124)
    seen = poll_all(p, ["a", "b", "c", "d", "e"], t(5))
    assert seen["ml-a"] == InstanceFailed(at=t(5), instance_id="fake-1", exit_code=1)
    assert seen["ml-b"] == InstanceTerminated(at=t(5), instance_id="fake-2", exit_code=0)
    assert seen["ml-c"] == InstanceTerminated(at=t(5), instance_id="fake-3", exit_code=137)
    assert seen["ml-d"] == InstanceFailed(at=t(5), instance_id="fake-4", exit_code=2)
    assert seen["ml-e"] == InstanceTerminated(at=t(5), instance_id="fake-5", exit_code=124)


def test_vanish_reads_absent() -> None:
    p = FakeProvider()
    p.provision(ref("a"), at=t(0))
    p.vanish("fake-1")
    assert poll(p, "a", t(1)) == InstanceAbsent(at=t(1))
    assert poll(p, "never", t(1)) == InstanceAbsent(at=t(1))


def test_a_failed_list_is_unknown_for_every_claim_once() -> None:
    p = FakeProvider()
    p.provision(ref("a"), at=t(0))
    p.fail_next_list("ListSandboxes: deadline exceeded")
    seen = poll_all(p, ["a", "b"], t(1))
    assert seen == {
        "ml-a": InstanceUnknown(at=t(1), error="ListSandboxes: deadline exceeded"),
        "ml-b": InstanceUnknown(at=t(1), error="ListSandboxes: deadline exceeded"),
    }
    assert isinstance(poll(p, "a", t(2)), InstanceRunning)
    p.fail_next_list(times=2)
    with pytest.raises(ProviderError):
        p.list()
    with pytest.raises(ProviderError):
        p.list()
    assert len(p.list()) == 1


def test_a_failed_list_does_not_advance_booting() -> None:
    p = FakeProvider(boot_ticks=1)
    p.provision(ref("a"), at=t(0))
    p.fail_next_list()
    assert isinstance(poll(p, "a", t(1)), InstanceUnknown)
    assert isinstance(poll(p, "a", t(2)), InstancePending)
    assert isinstance(poll(p, "a", t(3)), InstanceRunning)


def test_scripted_provision_rejection_and_error() -> None:
    p = FakeProvider()
    p.reject_next_provision("InsufficientCapacity: no GPUs")
    p.error_next_provision("503 Service Unavailable")
    assert p.provision(ref("a"), at=t(0)) == ProvisionRejected(
        at=t(0), error="InsufficientCapacity: no GPUs"
    )
    assert p.provision(ref("a"), at=t(1)) == ProvisionErrored(
        at=t(1), error="503 Service Unavailable"
    )
    assert p.list() == []  # neither created anything
    assert isinstance(p.provision(ref("a"), at=t(2)), ProvisionSucceeded)


def test_scripted_terminate_failure() -> None:
    p = FakeProvider()
    p.provision(ref("a"), at=t(0))
    p.fail_next_terminate("RequestLimitExceeded")
    failed = p.terminate(ref("a"), Tracked(SPEC, "fake-1"), at=t(1))
    assert failed == TerminateFailed(at=t(1), error="RequestLimitExceeded")
    assert p.find("ml-a") is not None
    assert isinstance(p.terminate(ref("a"), Tracked(SPEC, "fake-1"), at=t(2)), TerminateSucceeded)
    assert p.find("ml-a") is None


def test_terminate_without_an_id_finds_the_instance_by_claim() -> None:
    p = FakeProvider()
    p.provision(ref("a"), at=t(0))
    p.provision(ref("b"), at=t(0))
    assert isinstance(p.terminate(ref("a"), Tracked(SPEC), at=t(1)), TerminateSucceeded)
    assert [i.claim for i in p.list()] == ["ml-b"]
    assert ("terminate", "fake-1") in p.calls


def test_observe_prefers_the_tracked_id_and_answers_for_exactly_the_pods_asked() -> None:
    p = FakeProvider()
    p.provision(ref("a"), at=t(0))
    p.provision(ref("b"), at=t(0))
    seen = p.observe({ref("a"): Tracked(SPEC, "fake-2"), ref("c"): Tracked(SPEC)}, at=t(1))
    assert set(seen) == {ref("a"), ref("c")}
    assert getattr(seen[ref("a")], "instance_id", None) == "fake-2"
    assert seen[ref("c")] == InstanceAbsent(at=t(1))


def test_calls_without_a_time_use_the_providers_clock() -> None:
    p = FakeProvider(clock=lambda: t(42))
    assert p.provision(ref("a")).at == t(42)
    assert poll(p, "a", None).at == t(42)
    assert p.terminate(ref("a"), Tracked(SPEC)).at == t(42)


def test_scripts_refuse_unknown_instances_and_bad_counts() -> None:
    p = FakeProvider()
    with pytest.raises(KeyError, match="no fake instance 'fake-9'"):
        p.boot("fake-9")
    with pytest.raises(KeyError):
        p.vanish("fake-9")
    with pytest.raises(ValueError, match="times must be at least 1"):
        p.fail_next_list(times=0)
    with pytest.raises(ValueError, match="boot_ticks must not be negative"):
        FakeProvider(boot_ticks=-1)
    with pytest.raises(ValueError, match="attempt must be a non-negative int"):
        p.provision(ref("a"), attempt=-1, at=t(0))
    with pytest.raises(ValueError, match="boot_ticks must not be negative"):
        p.provision(ref("a"), FakeSpec(boot_ticks=-1), at=t(0))
    assert p.list() == []  # neither created anything


# -- the shared mapping ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("code", "state"),
    [
        (0, InstanceState.TERMINATED),
        (124, InstanceState.TERMINATED),
        (137, InstanceState.TERMINATED),
        (1, InstanceState.FAILED),
        (2, InstanceState.FAILED),
        (127, InstanceState.FAILED),
        (139, InstanceState.FAILED),
    ],
)
def test_exit_classification(code: int, state: InstanceState) -> None:
    assert classify_exit(code) is state


def test_state_observation_covers_every_state() -> None:
    kinds = {s: type(state_observation(s, t(0))) for s in InstanceState}
    assert kinds == {
        InstanceState.PENDING: InstancePending,
        InstanceState.RUNNING: InstanceRunning,
        InstanceState.FAILED: InstanceFailed,
        InstanceState.TERMINATED: InstanceTerminated,
    }


# -- end to end ---------------------------------------------------------------------------------
def _flat(events: list[Transition]) -> list[tuple[str, ...]]:
    return [(e.id, e.type.value, e.reason, e.source, e.target, e.message) for e in events]


@pytest.fixture(params=["memory", "sqlite"])
def live_store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    s: Store = MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "live.db")
    yield s
    s.close()


def _drive(store: Store) -> tuple[MemoryEmitter, TraceRecorder, FakeProvider, FakeNode]:
    """A small cluster's life on the fake provider."""
    provider = FakeProvider(boot_ticks=1)
    emitter = MemoryEmitter()
    recorder = TraceRecorder()
    node = FakeNode(provider, Runner(store, [emitter]), recorder=recorder, pool="gpu")
    a, b, c, d = (pod_ref(f"w-{n}", f"pod-{n}") for n in "abcd")
    node.create_pod(a, t(0))
    node.create_pod(b, t(1))
    node.create_pod(c, t(2))
    provider.reject_next_provision("InsufficientCapacity: no GPUs")
    node.create_pod(d, t(3))
    node.poll(t(15))  # booting: Pending
    node.poll(t(30))  # Running, Ready
    provider.fail_next_list("List: connection reset")
    node.poll(t(45))  # unknown: nothing changes
    provider.exit("fake-1", 1)  # a crashes
    provider.vanish("fake-2")  # b is reclaimed
    node.poll(t(60))
    node.delete_pod(c, t(70))  # c is deleted by its owner
    node.pod_gone(c, t(75))  # ... and its claim is reclaimed at once
    node.poll(t(90))
    return emitter, recorder, provider, node


def test_fake_node_drives_pods_and_claims(live_store: Store) -> None:
    emitter, _, provider, node = _drive(live_store)

    def seq(uid: str) -> list[tuple[str, str, str]]:
        return [(e.type.value, e.source, e.target) for e in emitter.for_uid(uid)]

    boot = [("Normal", "", "Provisioning"), ("Normal", "Provisioning", "Initializing")]
    boot.append(("Normal", "Initializing", "Initializing"))  # first poll: Ready absent -> False
    boot.append(("Normal", "Initializing", "Running"))
    assert seq("pod-a") == [*boot, ("Warning", "Running", "Failed")]
    assert seq("pod-b") == [*boot, ("Warning", "Running", "Terminated")]
    assert seq("pod-c") == [*boot, ("Normal", "Running", "Terminated")]
    assert seq("pod-d") == [
        ("Normal", "", "Provisioning"),
        ("Warning", "Provisioning", "ProvisionFailed"),
    ]
    bound = [("Normal", "", "Provisioning"), ("Normal", "Provisioning", "Bound")]
    assert seq("pod-a-claim") == [*bound, ("Normal", "Bound", "Terminated")]
    assert seq("pod-b-claim") == [*bound, ("Normal", "Bound", "Terminated")]
    assert seq("pod-c-claim") == [
        *bound,
        ("Normal", "Bound", "Terminating"),
        ("Normal", "Terminating", "Terminated"),
        ("Normal", "Terminated", "Deleted"),
    ]
    assert seq("pod-d-claim") == [
        ("Normal", "", "Provisioning"),
        ("Normal", "Provisioning", "Terminated"),
    ]
    emitter.assert_no_duplicates()
    assert "pod-c" not in node.tracked
    assert ("terminate", "fake-3") in provider.calls
    assert provider.find(node.claim(pod_ref("w-c", "pod-c"))) is None
    # The instance id reached the claim through the pod.
    claims = {
        r.ref.uid: r.status for r in live_store.records(Runner(live_store).machines["nodeclaim"])
    }
    assert claims["pod-a-claim"].instance_id == "fake-1"


def test_a_recorded_run_replays_to_the_same_events(live_store: Store, tmp_path: Path) -> None:
    emitter, recorder, _, _ = _drive(live_store)
    path = tmp_path / "saved.jsonl"
    recorder.write(path, comment="recorded from a FakeNode run")
    # The library replays it to the same events, ids and messages included ...
    again = MemoryEmitter()
    replay(read_trace(path), MemoryStore(), [again])
    assert _flat(again.events) == _flat(emitter.events)
    # ... and so does the CLI, on a fresh SQLite store.
    out = io.StringIO()
    url = f"sqlite:///{tmp_path / 'replayed.db'}"
    assert main(["replay", str(path), "--store", url, "--format", "jsonl"], out=out) == 0
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert lines == [e.as_dict() for e in emitter.events]


def test_delete_with_a_failing_terminate_keeps_the_pod_tracked() -> None:
    provider = FakeProvider()
    emitter = MemoryEmitter()
    node = FakeNode(provider, Runner(MemoryStore(), [emitter]))
    a = pod_ref()
    node.create_pod(a, t(0))
    node.poll(t(15))
    provider.fail_next_terminate("Terminate: throttled")
    results = node.delete_pod(a, t(20))
    assert results[-1].status.state == "Running"  # TerminateFailed changes nothing
    assert a.uid in node.tracked
    assert provider.find(node.claim(a)) is not None
    results = node.delete_pod(a, t(25))
    assert results[-1].status.state == "Terminated"
    assert results[-1].status.phase == "Succeeded"
    assert emitter.reasons("pod-a-claim")[-2:] == ["Terminating", "Terminated"]


def test_an_errored_provision_is_not_tracked_and_create_is_retried() -> None:
    provider = FakeProvider()
    emitter = MemoryEmitter()
    node = FakeNode(provider, Runner(MemoryStore(), [emitter]))
    a = pod_ref()
    provider.error_next_provision("503")
    results = node.create_pod(a, t(0))
    assert results[-1].status.message == "retrying: 503"
    assert a.uid not in node.tracked
    assert node.poll(t(5)) == []
    node.create_pod(a, t(10))
    node.poll(t(15))
    assert emitter.reasons("pod-a") == ["Provisioning", "Initializing", "Running"]


def test_claim_name_is_namespace_dash_name() -> None:
    assert FakeNode.claim(ObjectRef("Pod", "ml", "trainer-0", "u")) == "ml-trainer-0"
