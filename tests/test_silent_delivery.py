"""A runner with no emitter on the memory store journals its events without queueing them
(ADR 0170): nothing waits for them, so they are committed as delivered -- the store and every
result are what the queue-then-mark path leaves, without the outbox round trip."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from lifecycle import MachineRegistry, MemoryStore, ObjectRef, Observation, Runner
from lifecycle._core.machine import Machine
from lifecycle._core.transition import Intent, Transition
from lifecycle.emitters import MemoryEmitter
from tests.test_hot_path import AT, REF, Lamp, LoudLamp, SwitchOff, SwitchOn

OTHER = ObjectRef("Lamp", "home", "hall", "lamp-2")


class Counting(MemoryStore):
    """Counts the marks (``commit`` is the memory store's own)."""

    def __init__(self) -> None:
        super().__init__()
        self.marks: list[list[str]] = []

    def mark_delivered(self, ids: Any) -> None:
        self.marks.append(list(ids))
        super().mark_delivered(ids)


class Queueing(Counting):
    """Overrides ``commit`` (with the plain signature): the runner queues and marks."""

    def commit(
        self,
        machine: Machine[Any],
        ref: ObjectRef,
        expected: int,
        status: Any,
        observation: Observation,
        transitions: Sequence[Transition],
    ) -> int:
        self.queued = self.undelivered_count() + len(transitions)
        version = super().commit(machine, ref, expected, status, observation, transitions)
        assert self.undelivered_count() == self.queued  # every event waits for its mark
        return version


def _runner(store: MemoryStore, machine: Machine[Any] | None = None) -> Runner:
    return Runner(store, [], machines=MachineRegistry([machine or Lamp()]), links=())


def test_events_nobody_waits_for_are_journaled_not_queued_nor_marked() -> None:
    store = Counting()
    runner = _runner(store, LoudLamp())  # two events per commit
    done = [runner.observe(REF, SwitchOn(at=AT)), runner.observe(REF, SwitchOff(at=AT))]
    assert [len(r.transitions) for r in done] == [2, 2]
    assert store.marks == []  # the queue-then-mark path marks each commit's events
    assert store.undelivered_count() == 0
    entries = store.journal(LoudLamp(), REF)
    assert [e.transitions for e in entries] == [r.transitions for r in done]


def test_a_store_overriding_commit_gets_the_plain_call_and_its_marks() -> None:
    store = Queueing()
    runner = _runner(store)
    result = runner.observe(REF, SwitchOn(at=AT))
    assert store.marks == [[result.transitions[0].id]]
    assert store.undelivered_count() == 0


def test_a_wrapped_store_gets_the_plain_call() -> None:
    inner = Counting()

    class Wrapper:
        def __getattr__(self, name: str) -> Any:
            return getattr(inner, name)

    runner = Runner(Wrapper(), [], machines=MachineRegistry([Lamp()]), links=())
    result = runner.observe(REF, SwitchOn(at=AT))
    assert inner.marks == [[result.transitions[0].id]]


def test_an_emitter_added_later_gets_the_events_and_they_are_marked() -> None:
    store = Counting()
    runner = _runner(store)
    runner.observe(REF, SwitchOn(at=AT))
    emitter = MemoryEmitter()
    runner.emitters = [emitter]
    result = runner.observe(REF, SwitchOff(at=AT))
    assert emitter.events == list(result.transitions)
    assert store.marks == [[result.transitions[0].id]]
    runner.emitters = []
    runner.observe(REF, SwitchOn(at=AT))
    assert len(emitter.events) == 1
    assert len(store.marks) == 1


def test_link_intents_after_the_delivered_events_stay_queued() -> None:
    store = MemoryStore()
    lamp = Lamp()
    (event,) = lamp.flips(lamp.initial(REF), lamp.apply(lamp.initial(REF), SwitchOn(at=AT)))
    stamped = Transition(REF, "lamp", event.source, event.target, event.reason, event.type,
                         event.message, 1, AT)  # fmt: skip
    intent = stamped._replace(n=1, intent=Intent(OTHER, "lamp", "SwitchOn", SwitchOn(at=AT)))
    status = lamp.apply(lamp.initial(REF), SwitchOn(at=AT))
    store.commit_delivered(lamp, REF, 0, status, SwitchOn(at=AT), (stamped, intent), 1)
    assert store.claim_undelivered() == [intent]
    assert store.journal(lamp, REF)[0].transitions[0] == stamped


STEPS = st.lists(st.tuples(st.booleans(), st.sampled_from([SwitchOn, SwitchOff])), max_size=12)


@settings(max_examples=40, deadline=None)
@given(steps=STEPS, loud=st.booleans())
def test_silent_and_queued_commits_leave_the_same_store_and_results(
    steps: list[tuple[bool, type[Observation]]], loud: bool
) -> None:
    """The same observations through both paths: the same results, records, journals and
    (empty) outbox, refusals included."""
    machine: Machine[Any] = LoudLamp() if loud else Lamp()
    silent, queued = Counting(), Queueing()
    outcomes = []
    for store in (silent, queued):
        runner, seen = _runner(store, machine), list[object]()
        for k, (other, cls) in enumerate(steps):
            ref = OTHER if other else REF
            try:
                seen.append(runner.observe(ref, cls(at=AT + timedelta(seconds=k))))
            except Exception as e:  # the table refuses it in this state
                seen.append(type(e))
        outcomes.append(seen)
    assert outcomes[0] == outcomes[1]
    for ref in (REF, OTHER):
        assert silent.load(machine, ref) == queued.load(machine, ref)
        assert silent.journal(machine, ref) == queued.journal(machine, ref)
    assert silent.undelivered_count() == queued.undelivered_count() == 0
    assert silent.marks == []
