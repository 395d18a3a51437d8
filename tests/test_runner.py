"""The write-then-emit protocol (DESIGN.md): commit, then deliver; conflicts retried with flips
recomputed in each attempt; a lost write emits nothing but one fallback Warning for a Warning
flip; an emitter that raises never undoes a commit and its events are redelivered."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import pytest

from lifecycle import (
    Conflict,
    EventType,
    InvalidTransition,
    LifecycleError,
    MemoryEmitter,
    MemoryStore,
    ObjectRef,
    Observation,
    Outcome,
    RetryPolicy,
    Runner,
    Store,
    StoreError,
    Transition,
    UnknownObservation,
)
from lifecycle.links import claim_ref
from lifecycle.machines import nodeclaim as nc
from lifecycle.machines import pod
from lifecycle.stores.base import JournalEntry, Record
from lifecycle.testing.fakes import FailingEmitter, FaultyStore

from .conftest import pod_ref, t
from .fallback_machines import with_fallback_pod

REF = pod_ref()
CLAIM_UID = f"{REF.uid}-claim"
NOT_CLAIMED = re.compile(r"\b(was|were|been|is) (written|persisted|recorded|saved|stored)\b")


def boot(runner: Runner, ref: ObjectRef = REF) -> None:
    """CreatePod, then a reserved Provision: the pod is Initializing at version 2."""
    runner.observe(ref, pod.CreateRequested(at=t(0)))
    runner.observe(ref, pod.ProvisionSucceeded(at=t(1), reserved=True, instance_id="i-1"))


def snapshot(store: Store, ref: ObjectRef = REF) -> tuple[Any, int, int]:
    record = store.load(pod.POD, ref)
    journal = store.journal(pod.POD, ref)
    return (
        None if record is None else record.status,
        0 if record is None else record.version,
        len(journal),
    )


class Wrapper:
    """Delegates the Store protocol to ``inner``; subclasses override what they test."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner

    def load(self, machine: Any, ref: ObjectRef) -> Record | None:
        return self.inner.load(machine, ref)

    def commit(
        self,
        machine: Any,
        ref: ObjectRef,
        expected: int,
        status: Any,
        observation: Observation,
        transitions: Sequence[Transition],
    ) -> int:
        return self.inner.commit(machine, ref, expected, status, observation, transitions)

    def journal(self, machine: Any, ref: ObjectRef) -> list[JournalEntry]:
        return self.inner.journal(machine, ref)

    def records(self, machine: Any) -> Iterator[Record]:
        return self.inner.records(machine)

    def claim_undelivered(self, limit: int = 1000) -> list[Transition]:
        return self.inner.claim_undelivered(limit)

    def mark_delivered(self, ids: Iterable[str]) -> None:
        self.inner.mark_delivered(ids)

    def close(self) -> None:
        self.inner.close()


class CountingStore(Wrapper):
    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.commits = 0

    def commit(self, *args: Any) -> int:
        self.commits += 1
        return super().commit(*args)


class RacingStore(Wrapper):
    """Before the first commit of ``uid``, another controller (its own runner, its own
    emitter, the same database) commits ``theirs``: our commit then loses the CAS."""

    def __init__(self, inner: Store, uid: str, theirs: Observation) -> None:
        super().__init__(inner)
        self.uid = uid
        self.theirs: Observation | None = theirs
        self.other_emitter = MemoryEmitter()
        self.other = Runner(inner, [self.other_emitter])
        self.conflicts: list[Conflict] = []

    def commit(
        self,
        machine: Any,
        ref: ObjectRef,
        expected: int,
        status: Any,
        observation: Observation,
        transitions: Sequence[Transition],
    ) -> int:
        if ref.uid == self.uid and self.theirs is not None:
            theirs, self.theirs = self.theirs, None
            assert self.other.observe(ref, theirs).committed
        try:
            return super().commit(machine, ref, expected, status, observation, transitions)
        except Conflict as e:
            self.conflicts.append(e)
            raise


class BrokenLoadStore(Wrapper):
    def load(self, machine: Any, ref: ObjectRef) -> Record | None:
        raise StoreError("database is locked")


def pod_events(emitter: MemoryEmitter, ref: ObjectRef = REF) -> list[Transition]:
    return emitter.for_uid(ref.uid)


# -- commit, then deliver ---------------------------------------------------------------------
def test_events_are_delivered_only_after_their_write_committed(store: Store) -> None:
    seen: list[tuple[int, bool]] = []

    class Inspecting:
        def emit(self, transition: Transition) -> None:
            machine = pod.POD if transition.ref.kind == "Pod" else nc.NODECLAIM
            record = store.load(machine, transition.ref)
            journal = store.journal(machine, transition.ref)
            in_journal = any(
                transition in e.transitions for e in journal if e.version == transition.version
            )
            seen.append((0 if record is None else record.version, in_journal))
            assert record is not None
            assert record.version >= transition.version

    runner = Runner(store, [Inspecting()])
    boot(runner)
    runner.observe(REF, pod.InstanceRunning(at=t(2)))
    assert seen
    assert all(version >= 1 and in_journal for version, in_journal in seen)


def test_committed_result_carries_version_and_stamped_ids(
    runner: Runner, emitter: MemoryEmitter
) -> None:
    first = runner.observe(REF, pod.CreateRequested(at=t(0)))
    assert first.outcome is Outcome.COMMITTED
    assert first.version == 1
    assert first.attempts == 1
    assert [tr.id for tr in first.transitions] == [f"{REF.uid}:1:0"]
    assert pod_events(emitter) == list(first.transitions)
    assert first.transitions[0].source == ""
    assert first.transitions[0].target == "Provisioning"


def test_unchanged_status_writes_nothing_and_emits_nothing(store: Store) -> None:
    counting = CountingStore(store)
    emitter = MemoryEmitter()
    runner = Runner(counting, [emitter])
    boot(runner)
    commits, events = counting.commits, len(emitter.events)
    before = snapshot(store)
    for _ in range(3):  # repeated observations, and one that could not be made
        result = runner.observe(
            REF, pod.ProvisionSucceeded(at=t(2), reserved=True, instance_id="i")
        )
        assert result.outcome is Outcome.UNCHANGED
        assert result.version == 2
    result = runner.observe(REF, pod.InstanceUnknown(at=t(3), error="List failed"))
    assert result.outcome is Outcome.UNCHANGED
    assert counting.commits == commits
    assert len(emitter.events) == events
    assert snapshot(store) == before


def test_message_only_change_is_written_but_emits_nothing(
    runner: Runner, emitter: MemoryEmitter, store: Store
) -> None:
    runner.observe(REF, pod.CreateRequested(at=t(0)))
    result = runner.observe(REF, pod.ProvisionErrored(at=t(1), error="connection reset"))
    assert result.outcome is Outcome.COMMITTED
    assert result.transitions == ()
    assert store.load(pod.POD, REF).status.message == "retrying: connection reset"  # type: ignore[union-attr]
    assert emitter.reasons(REF.uid) == ["Provisioning"]


def test_refused_observation_raises_and_leaves_the_store_untouched(
    runner: Runner, emitter: MemoryEmitter, store: Store
) -> None:
    with pytest.raises(InvalidTransition, match="not accepted in state"):
        runner.observe(REF, pod.ProvisionSucceeded(at=t(0), reserved=True, instance_id="i-1"))
    assert snapshot(store) == (None, 0, 0)
    with pytest.raises(UnknownObservation):
        runner.observe(REF, nc.PodAbsent(at=t(0)))
    assert snapshot(store) == (None, 0, 0)
    assert emitter.events == []
    assert store.claim_undelivered() == []


# -- conflicts --------------------------------------------------------------------------------
def test_a_concurrent_writer_that_made_the_same_flip_suppresses_ours(
    store: Store, emitter: MemoryEmitter
) -> None:
    Runner(store, []).observe(REF, pod.CreateRequested(at=t(0)))
    Runner(store, []).observe(
        REF, pod.ProvisionSucceeded(at=t(1), reserved=True, instance_id="i-1")
    )
    store.mark_delivered(t.id for t in store.claim_undelivered())
    racing = RacingStore(store, REF.uid, pod.InstanceRunning(at=t(2)))
    runner = Runner(racing, [emitter])

    result = runner.observe(REF, pod.InstanceRunning(at=t(2)))

    assert len(racing.conflicts) == 1
    assert (racing.conflicts[0].expected, racing.conflicts[0].actual) == (2, 3)
    assert result.outcome is Outcome.UNCHANGED
    assert result.attempts == 2
    assert result.transitions == ()
    assert pod_events(emitter) == []
    running = [e for e in racing.other_emitter.for_uid(REF.uid) if e.target == "Running"]
    assert [e.id for e in running] == [f"{REF.uid}:3:0"]  # exactly one Running event, theirs
    assert [e.version for e in store.journal(pod.POD, REF)] == [1, 2, 3]


def test_flips_are_recomputed_against_the_state_read_in_the_winning_attempt(
    store: Store, emitter: MemoryEmitter
) -> None:
    boot(Runner(store, []))
    racing = RacingStore(store, REF.uid, pod.InstanceRunning(at=t(2)))
    runner = Runner(racing, [emitter])

    result = runner.observe(REF, pod.InstanceFailed(at=t(3), exit_code=1))

    assert result.outcome is Outcome.COMMITTED
    assert result.attempts == 2
    assert result.version == 4
    (event,) = result.transitions
    assert (event.source, event.target, event.reason) == ("Running", "Failed", "Failed")
    assert event.id == f"{REF.uid}:4:0"
    assert event.type is EventType.WARNING
    assert pod_events(emitter) == [event]
    journal = store.journal(pod.POD, REF)
    assert journal[-1].transitions == (event,)


def test_conflicts_within_the_budget_are_retried(store: Store, emitter: MemoryEmitter) -> None:
    faulty = FaultyStore(store)
    sleeps: list[float] = []
    runner = Runner(
        faulty, [emitter], policy=RetryPolicy(backoff=0.2, jitter=0.1, sleep=sleeps.append)
    )
    boot(runner)
    faulty.inject(REF.uid, "conflict", 4)
    result = runner.observe(REF, pod.InstanceRunning(at=t(2)))
    assert result.outcome is Outcome.COMMITTED
    assert result.attempts == 5
    assert [e.reason for e in result.transitions] == ["Running"]
    assert len(sleeps) == 4
    assert all(0.18 <= s <= 0.22 for s in sleeps)


def test_exhausted_budget_fails_without_a_transition_event_and_one_fallback_warning(
    store: Store, emitter: MemoryEmitter
) -> None:
    faulty = FaultyStore(store)
    runner = Runner(
        faulty, [emitter], machines=with_fallback_pod(), policy=RetryPolicy(backoff=0.0)
    )
    boot(runner)
    before = snapshot(store)
    emitted = len(emitter.events)
    faulty.inject(REF.uid, "conflict", 5)

    result = runner.observe(REF, pod.InstanceFailed(at=t(3), exit_code=1))

    assert result.outcome is Outcome.FAILED
    assert result.attempts == 5
    assert isinstance(result.error, Conflict)
    assert result.transitions == ()
    assert snapshot(store) == before
    assert store.claim_undelivered() == []
    new = emitter.events[emitted:]
    assert new == list(result.fallback)
    (fallback,) = new
    assert fallback.fallback
    assert fallback.type is EventType.WARNING
    assert fallback.reason == "FailedStatusUpdateFailed"
    assert fallback.id == f"{REF.uid}:2:f0-FailedStatusUpdateFailed"
    assert fallback.version == 2
    assert pod.MSG_FAILED in fallback.message  # the cause
    assert str(result.error) in fallback.message  # the write error
    assert "also failed" in fallback.message
    assert not NOT_CLAIMED.search(fallback.message)
    assert faulty.pending_faults(REF.uid) == 0


def test_a_lost_warning_on_a_row_without_a_declared_fallback_sends_nothing(
    store: Store, emitter: MemoryEmitter
) -> None:
    """The shipped Pod declares no fallback row: the next poll redoes a lost write and sends
    the real Warning once, so a fallback first would say it twice (ADR 0091)."""
    faulty = FaultyStore(store)
    runner = Runner(faulty, [emitter], policy=RetryPolicy(backoff=0.0))
    boot(runner)
    emitted = len(emitter.events)
    faulty.inject(REF.uid, "conflict", 5)
    lost = runner.observe(REF, pod.InstanceFailed(at=t(3), exit_code=1))
    assert (lost.outcome, lost.fallback) == (Outcome.FAILED, ())
    faulty.inject(REF.uid, "write-error")
    lost = runner.observe(REF, pod.InstanceFailed(at=t(3), exit_code=1))
    assert (lost.outcome, lost.fallback) == (Outcome.FAILED, ())
    redone = runner.observe(REF, pod.InstanceFailed(at=t(4), exit_code=1))
    assert redone.committed
    assert [e.reason for e in emitter.events[emitted:] if e.ref == REF] == ["Failed"]


def test_exhausted_budget_on_a_normal_flip_emits_nothing(
    store: Store, emitter: MemoryEmitter
) -> None:
    faulty = FaultyStore(store)
    runner = Runner(faulty, [emitter], policy=RetryPolicy(backoff=0.0))
    boot(runner)
    emitted = len(emitter.events)
    faulty.inject(REF.uid, "conflict", 5)
    result = runner.observe(REF, pod.InstanceRunning(at=t(2)))
    assert result.outcome is Outcome.FAILED
    assert result.fallback == ()
    assert emitter.events[emitted:] == []


def test_a_custom_budget_is_honoured(store: Store) -> None:
    faulty = FaultyStore(store)
    runner = Runner(faulty, [], policy=RetryPolicy(attempts=2, backoff=0.0))
    boot(runner)
    faulty.inject(REF.uid, "conflict", 3)
    result = runner.observe(REF, pod.InstanceRunning(at=t(2)))
    assert result.outcome is Outcome.FAILED
    assert result.attempts == 2
    assert faulty.pending_faults(REF.uid) == 1
    again = runner.observe(REF, pod.InstanceRunning(at=t(3)))
    assert again.committed
    assert again.attempts == 2


# -- store errors -----------------------------------------------------------------------------
def test_store_error_on_commit_fails_at_once_with_a_fallback_for_a_warning_flip(
    store: Store, emitter: MemoryEmitter
) -> None:
    faulty = FaultyStore(store)
    runner = Runner(
        faulty, [emitter], machines=with_fallback_pod(), policy=RetryPolicy(backoff=0.0)
    )
    boot(runner)
    before = snapshot(store)
    emitted = len(emitter.events)
    claim_of_ref = ObjectRef("NodeClaim", "", "ml-trainer-0", CLAIM_UID)  # a uid: one object
    claim_version = len(store.journal(nc.NODECLAIM, claim_of_ref))
    faulty.inject(REF.uid, "write-error", 2)

    result = runner.observe(REF, pod.InstanceTerminated(at=t(3), exit_code=137))

    assert result.outcome is Outcome.FAILED
    assert result.attempts == 1
    assert type(result.error) is StoreError
    assert faulty.pending_faults(REF.uid) == 1  # not retried
    assert snapshot(store) == before
    (fallback,) = emitter.events[emitted:]
    assert fallback.reason == "TerminatedStatusUpdateFailed"
    assert "injected write error" in fallback.message
    assert pod.MSG_TERMINATED in fallback.message
    assert not NOT_CLAIMED.search(fallback.message)
    # the cascade did not run: the claim never heard of a status that was not written
    claim = store.load(nc.NODECLAIM, ObjectRef("NodeClaim", "", "ml-trainer-0", CLAIM_UID))
    assert claim is not None
    assert claim.status.state == nc.BOUND
    assert claim.version == claim_version
    assert not [e for e in emitter.events[emitted:] if e.ref.uid == CLAIM_UID]


def test_store_error_on_a_normal_flip_emits_nothing(store: Store, emitter: MemoryEmitter) -> None:
    faulty = FaultyStore(store)
    runner = Runner(faulty, [emitter])
    faulty.inject(REF.uid, "write-error")
    result = runner.observe(REF, pod.CreateRequested(at=t(0)))
    assert result.outcome is Outcome.FAILED
    assert result.fallback == ()
    assert emitter.events == []
    assert snapshot(store) == (None, 0, 0)


def test_store_error_on_load_fails_without_writing(emitter: MemoryEmitter) -> None:
    inner = MemoryStore()
    runner = Runner(BrokenLoadStore(inner), [emitter])
    result = runner.observe(REF, pod.ConfigInvalid(at=t(0), error="pool unreadable"))
    assert result.outcome is Outcome.FAILED
    assert result.attempts == 1
    assert "database is locked" in str(result.error)
    assert result.transitions == ()
    assert emitter.events == []
    assert inner.load(pod.POD, REF) is None


# -- emitters that fail -----------------------------------------------------------------------
def test_a_failing_emitter_never_undoes_the_commit_and_redelivery_keeps_the_ids(
    store: Store,
) -> None:
    failing = FailingEmitter(failures=100)
    runner = Runner(store, [failing])
    result = runner.observe(REF, pod.CreateRequested(at=t(0)))
    assert result.committed
    assert result.version == 1
    assert snapshot(store)[1] == 1
    queued = store.claim_undelivered()
    assert [e.id for e in queued if e.ref.uid == REF.uid] == [f"{REF.uid}:1:0"]
    assert {e.id for e in queued} == {e.id for e in failing.refused}

    failing.arm(0)
    delivered = runner.redeliver()
    assert delivered == len(queued)
    assert [e.id for e in failing.events] == [e.id for e in queued]
    assert failing.events == queued  # the same events, under the same ids
    assert store.claim_undelivered() == []
    assert runner.redeliver() == 0


def test_one_failing_emitter_of_two_redelivers_to_both_under_the_same_id(store: Store) -> None:
    good, bad = MemoryEmitter(), FailingEmitter(failures=1)
    runner = Runner(store, [good, bad], links=())
    runner.observe(REF, pod.CreateRequested(at=t(0)))
    assert good.ids() == [f"{REF.uid}:1:0"]
    assert bad.events == []
    assert runner.redeliver() == 1
    assert good.ids() == [f"{REF.uid}:1:0"] * 2  # at least once: sinks dedupe on the id
    assert good.unique() == good.events[:1]
    assert bad.ids() == [f"{REF.uid}:1:0"]


def test_a_failing_emitter_does_not_stop_the_others_or_the_cascade(store: Store) -> None:
    good = MemoryEmitter()
    runner = Runner(store, [FailingEmitter(failures=100), good])
    boot(runner)
    assert good.reasons(REF.uid) == ["Provisioning", "Initializing"]
    assert [e.target for e in good.for_uid(CLAIM_UID)] == ["Provisioning", "Bound"]


def test_failed_mark_delivered_only_repeats_events(store: Store) -> None:
    class ForgetfulMarks(Wrapper):
        def mark_delivered(self, ids: Iterable[str]) -> None:
            raise StoreError("disk full")

    emitter = MemoryEmitter()
    runner = Runner(ForgetfulMarks(store), [emitter], links=())
    assert runner.observe(REF, pod.CreateRequested(at=t(0))).committed
    assert runner.redeliver() == 1
    assert emitter.ids() == [f"{REF.uid}:1:0"] * 2


# -- the retry policy -------------------------------------------------------------------------
def test_retry_policy_defaults_and_validation() -> None:
    assert RetryPolicy().attempts == 5
    for bad in (
        {"attempts": 0},
        {"attempts": -1},
        {"backoff": -0.1},
        {"jitter": -1.0},
    ):
        with pytest.raises(ValueError, match="must"):
            RetryPolicy(**bad)


def test_retry_policy_pause_sleeps_backoff_with_jitter() -> None:
    sleeps: list[float] = []
    policy = RetryPolicy(backoff=1.0, jitter=0.1, sleep=sleeps.append)
    for _ in range(50):
        policy.pause()
    assert all(0.9 <= s <= 1.1 for s in sleeps)
    assert len(set(sleeps)) > 1
    quiet: list[float] = []
    RetryPolicy(backoff=0.0, sleep=quiet.append).pause()
    assert quiet == []


def test_result_lists_cascade_events_in_emission_order(runner: Runner) -> None:
    runner.observe(REF, pod.CreateRequested(at=t(0)))
    result = runner.observe(REF, pod.ProvisionSucceeded(at=t(1), reserved=True, instance_id="i"))
    events = result.all_transitions()
    assert [(e.ref.kind, e.target) for e in events] == [
        ("Pod", "Initializing"),
        ("NodeClaim", "Bound"),
    ]


def test_lifecycle_errors_are_typed() -> None:
    assert issubclass(Conflict, StoreError)
    assert issubclass(StoreError, LifecycleError)
    conflict = Conflict("u", 3, 4)
    assert (conflict.uid, conflict.expected, conflict.actual) == ("u", 3, 4)


def test_two_different_lost_warnings_at_one_version_have_distinct_fallback_ids() -> None:
    store = FaultyStore(MemoryStore())
    emitter = MemoryEmitter()
    runner = Runner(
        store,
        [emitter],
        machines=with_fallback_pod(),
        links=(),
        policy=RetryPolicy(backoff=0.0),
    )
    runner.observe(REF, pod.CreateRequested(at=t(0)))
    store.inject(REF.uid, "write-error")
    first = runner.observe(REF, pod.ProvisionRejected(at=t(1), error="quota"))
    store.inject(REF.uid, "write-error")
    second = runner.observe(REF, pod.InstanceFailed(at=t(2)))
    (a,), (b,) = first.fallback, second.fallback
    assert (a.version, b.version) == (1, 1)
    assert a.id != b.id
    assert {a.id, b.id} == {
        f"{REF.uid}:1:f0-ProvisionFailedStatusUpdateFailed",
        f"{REF.uid}:1:f0-FailedStatusUpdateFailed",
    }


def test_a_cascade_target_whose_write_failed_catches_up_without_resync() -> None:
    """ADR 0090 (was 0016's resync): the claim's observation is an intent in the pod's commit;
    its failed write stays pending and the runner's next call applies it first."""
    store = FaultyStore(MemoryStore())
    emitter = MemoryEmitter()
    runner = Runner(store, [emitter], policy=RetryPolicy(backoff=0.0))
    claim = claim_ref(REF)
    runner.observe(REF, pod.CreateRequested(at=t(0)))
    store.inject(claim.uid, "write-error")  # the claim's commit is lost
    result = runner.observe(REF, pod.ProvisionSucceeded(at=t(1), reserved=True, instance_id="i"))
    assert result.committed
    assert [r.outcome for r in result.linked] == [Outcome.FAILED]
    behind = store.load(nc.NODECLAIM, claim)
    assert behind is not None
    assert behind.status.state == nc.PROVISIONING  # behind the pod
    assert [t.intent.target for t in store.claim_undelivered() if t.intent] == [claim]
    # the next call, on any object, applies the pending intent first
    other = runner.observe(pod_ref(uid="other"), pod.CreateRequested(at=t(2)))
    assert [r.outcome for r in other.caught_up] == [Outcome.COMMITTED]
    caught_up = store.load(nc.NODECLAIM, claim)
    assert caught_up is not None
    assert caught_up.status.state == nc.BOUND
    assert [e.target for e in emitter.for_uid(claim.uid)] == [nc.PROVISIONING, nc.BOUND]
    assert not [t for t in store.claim_undelivered() if t.intent]
    # in step now: resync changes nothing and emits nothing
    (again,) = runner.resync(REF, t(3))
    assert again.outcome is Outcome.UNCHANGED
    assert runner.resync(pod_ref(uid="never-seen"), t(4)) == ()


def test_a_machine_that_overrides_actions_gets_them_sent() -> None:
    """Action events may come from an ``actions`` override, not only from table rows."""
    from lifecycle import MachineRegistry
    from lifecycle.tables import Flip

    class NoisyPod(pod.PodMachine):
        def actions(self, status: Any, obs: Observation) -> tuple[Flip, ...]:
            return (Flip(status.state, status.state, "Polled", EventType.NORMAL, "saw it"),)

    noisy = NoisyPod()
    assert noisy.has_actions
    emitter = MemoryEmitter()
    runner = Runner(MemoryStore(), [emitter], machines=MachineRegistry([noisy]), links=())
    result = runner.observe(REF, pod.CreateRequested(at=t(0)))
    assert [a.reason for a in result.actions] == ["Polled"]
    assert emitter.reasons() == ["Polled", "Provisioning"]
