"""Acknowledged delivery (issue 28, ADR 0121): an outbox row is marked only when every emitter
has its event; acknowledgements arrive later and are marked in batches; the conformance check
of ``lifecycle.testing`` holds for every shipped emitter and catches one that acknowledges
what its destination does not have."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, ClassVar

import pytest

from lifecycle import EventType, LogEmitter, MemoryEmitter, MemoryStore, ObjectRef, Transition
from lifecycle._delivery import Delivery
from lifecycle.emitters.base import Ack, Acknowledge
from lifecycle.emitters.kubernetes import (
    KubernetesEmitter,
    ManualClock,
    MemoryEventSink,
    event_name,
    id_suffix,
)
from lifecycle.testing import check_emitter

EPOCH = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
POD = ObjectRef("Pod", "ml", "trainer-0", "pod-a")


def transition(version: int = 1, n: int = 0, ref: ObjectRef = POD) -> Transition:
    return Transition(
        ref, "pod", "", "Running", "Running", EventType.WARNING, "m", version, EPOCH, n
    )


def k8s(sink: MemoryEventSink, **kw: Any) -> KubernetesEmitter:
    kw.setdefault("clock", ManualClock(EPOCH))
    kw.setdefault("hostname", "node-a")
    kw.setdefault("timers", False)
    kw.setdefault("retry_interval", 0.01)
    kw.setdefault("jitter", lambda: 0.0)
    return KubernetesEmitter(sink, **kw)


def name_of(t: Transition) -> str:
    return event_name(t.ref.name, id_suffix(t.id))


@pytest.fixture
def made() -> Iterator[list[KubernetesEmitter]]:
    emitters: list[KubernetesEmitter] = []
    yield emitters
    for e in emitters:
        e.close(timeout=2.0)


# -- the conformance check -----------------------------------------------------------------
def test_the_kubernetes_emitter_is_crash_safe(made: list[KubernetesEmitter]) -> None:
    sink = MemoryEventSink()

    def make() -> KubernetesEmitter:
        made.append(k8s(sink))
        return made[-1]

    check_emitter(make, holds=lambda: [e["metadata"]["name"] for e in sink.events()], key=name_of)


def test_the_memory_and_log_emitters_are_crash_safe() -> None:
    seen: list[Transition] = []

    class Shared(MemoryEmitter):
        def emit(self, transition: Transition) -> None:
            seen.append(transition)

    check_emitter(Shared, holds=lambda: [t.id for t in seen])
    check_emitter(LogEmitter)


class Lossy:
    """Today's fire-and-forget shape: ``emit`` queues and returns; the queue is sent later,
    so a crash loses it (here: it is never sent)."""

    destination: ClassVar[list[str]] = []

    def __init__(self) -> None:
        self.queue: list[Transition] = []

    def emit(self, transition: Transition) -> None:
        self.queue.append(transition)


def test_the_check_catches_an_emitter_that_says_delivered_before_its_destination_has_it() -> None:
    with pytest.raises(AssertionError, match=r"holds .* 0 times"):
        check_emitter(Lossy, holds=lambda: Lossy.destination)


class Hasty:
    """Acknowledges at once and sends later (never, here): the lie the check must find."""

    destination: ClassVar[list[str]] = []

    def emit(self, transition: Transition) -> None:
        pass

    def deliver(self, transition: Transition, ack: Acknowledge) -> None:
        ack(transition, Ack.DELIVERED)


class Twice(Hasty):
    def deliver(self, transition: Transition, ack: Acknowledge) -> None:
        if transition.id not in Twice.destination:  # idempotent, but answers twice
            Twice.destination.append(transition.id)
        ack(transition, Ack.DELIVERED)
        ack(transition, Ack.DELIVERED)


def test_the_check_catches_acknowledgements_that_lie_or_repeat() -> None:
    with pytest.raises(AssertionError, match="0 times"):
        check_emitter(Hasty, holds=lambda: Hasty.destination)
    with pytest.raises(AssertionError, match="acknowledged 2 times"):
        check_emitter(Twice, holds=lambda: Twice.destination)


# -- the delivery: marks only what every emitter has, in batches ----------------------------
class Later:
    """An acknowledging emitter that answers when the test says so."""

    def __init__(self) -> None:
        self.taken: list[tuple[Transition, Acknowledge]] = []

    def emit(self, transition: Transition) -> None:
        pass

    def deliver(self, transition: Transition, ack: Acknowledge) -> None:
        self.taken.append((transition, ack))

    def answer(self, outcome: Ack, count: int | None = None) -> None:
        taken, self.taken = self.taken[:count], self.taken[len(self.taken[:count]) :]
        for t, ack in taken:
            ack(t, outcome)


class Marks:
    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def __call__(self, ids: Sequence[str]) -> None:
        self.calls.append(list(ids))


def test_nothing_is_marked_until_every_emitter_acknowledged() -> None:
    later, memory, marks = Later(), MemoryEmitter(), Marks()
    d = Delivery([memory, later], logging.getLogger("t"), mark_batch=3, mark_interval=3600)
    events = [transition(v) for v in range(1, 6)]
    assert d.deliver(events, marks) == 0  # the memory emitter has them; Later does not yet
    assert len(memory.events) == 5
    later.answer(Ack.DELIVERED, 2)
    assert d.deliver([transition(9)], marks) == 0  # two acknowledged: below the batch
    later.answer(Ack.DELIVERED, 2)
    assert d.deliver([transition(10)], marks) == 4  # a batch of four, in one mark
    assert marks.calls == [["pod-a:1:0", "pod-a:2:0", "pod-a:3:0", "pod-a:4:0"]]


def test_refused_is_marked_failed_stays_and_an_id_in_flight_is_not_handed_twice() -> None:
    later, marks = Later(), Marks()
    d = Delivery([later], logging.getLogger("t"), mark_batch=1)
    a, b, c = transition(1), transition(2), transition(3)
    d.deliver([a, b, c], marks)
    d.deliver([a, b, c], marks)  # a redelivery while they are in flight
    assert [t.id for t, _ in later.taken] == [a.id, b.id, c.id]
    later.answer(Ack.REFUSED, 1)
    later.answer(Ack.FAILED, 1)
    later.answer(Ack.DELIVERED, 1)
    assert d.flush(marks) == 2
    assert sorted(i for call in marks.calls for i in call) == [a.id, c.id]
    d.deliver([b], marks)  # failed: handed again by the next redelivery
    assert [t.id for t, _ in later.taken] == [b.id]


def test_runner_close_marks_what_the_emitter_acknowledged(made: list[KubernetesEmitter]) -> None:
    from lifecycle import Runner

    sink = MemoryEventSink()
    emitter = k8s(sink)
    made.append(emitter)
    store = MemoryStore()
    runner = Runner(store, [emitter])
    from lifecycle.machines.pod import CreateRequested

    for i in range(5):
        ref = ObjectRef("Pod", "ml", f"p-{i}", f"u-{i}")
        runner.observe(ref, CreateRequested(at=EPOCH, pool="gpu", provider="fake"))
    assert runner.close(5.0) == 0
    assert store.undelivered_count() == 0
    assert len(sink.events()) == 10  # the Pods' and their NodeClaims'


def test_acknowledgements_to_an_idle_runner_are_marked_without_another_call(
    made: list[KubernetesEmitter],
) -> None:
    import time

    from lifecycle import Runner
    from lifecycle.machines.pod import CreateRequested

    sink = MemoryEventSink()
    emitter = k8s(sink)
    made.append(emitter)
    store = MemoryStore()
    runner = Runner(store, [emitter])
    runner.observe(POD, CreateRequested(at=EPOCH, pool="gpu", provider="fake"))
    assert emitter.flush(5.0)  # the API has both Events; the runner is not called again
    deadline = time.monotonic() + 10.0
    while store.undelivered_count() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert store.undelivered_count() == 0  # marked within the mark interval (0.5 s)
    assert runner.close(5.0) == 0


def test_the_asyncio_runner_flushes_and_closes_what_the_emitter_acknowledged(
    made: list[KubernetesEmitter],
) -> None:
    import asyncio

    from lifecycle import AsyncRunner
    from lifecycle.machines.pod import CreateRequested

    sink = MemoryEventSink()
    emitter = k8s(sink)
    made.append(emitter)
    store = MemoryStore()

    async def main() -> tuple[int, int, int]:
        runner = AsyncRunner(store, [emitter])
        for i in range(3):
            ref = ObjectRef("Pod", "ml", f"p-{i}", f"u-{i}")
            await runner.observe(ref, CreateRequested(at=EPOCH, pool="gpu", provider="fake"))
        await runner.flush(5.0)
        flushed = store.undelivered_count()  # every acknowledgement marked
        ref = ObjectRef("Pod", "ml", "p-9", "u-9")
        await runner.observe(ref, CreateRequested(at=EPOCH, pool="gpu", provider="fake"))
        left = await runner.close(5.0)
        return flushed, left, store.undelivered_count()

    assert asyncio.run(main()) == (0, 0, 0)
    assert len(sink.events()) == 8  # the Pods' and their NodeClaims'


def test_the_asyncio_runner_close_keeps_what_was_not_acknowledged_in_the_outbox() -> None:
    import asyncio

    from lifecycle import AsyncRunner
    from lifecycle.machines.pod import CreateRequested

    sink = MemoryEventSink()
    sink.fail_next(*(ConnectionRefusedError("down") for _ in range(1000)))  # an outage
    emitter = k8s(sink, max_tries=1000)
    store = MemoryStore()

    async def main() -> int:
        runner = AsyncRunner(store, [emitter])
        ref = ObjectRef("Pod", "ml", "p-0", "u-0")
        await runner.observe(ref, CreateRequested(at=EPOCH, pool="gpu", provider="fake"))
        return await runner.close(0.3)

    left = asyncio.run(main())
    assert left == 2  # the Pod's and its NodeClaim's: said, and kept for the next start
    assert store.undelivered_count() == 2


# -- series across a restart ----------------------------------------------------------------
def test_a_series_resumes_across_a_restart_when_its_first_event_is_redelivered(
    made: list[KubernetesEmitter],
) -> None:
    """Three Warnings of one key (one resourceVersion): create, patch (count 2), a count in
    memory acknowledged by the close's patch (count 3). After a crash that lost every mark,
    a new emitter's cache starts empty: the first is AlreadyExists, the second patches the
    same Event -- no second Event, no count beyond what was observed."""
    sink = MemoryEventSink()
    first = k8s(sink, resource_version=lambda t: "7")
    made.append(first)
    acks: list[tuple[str, Ack]] = []
    done = threading.Event()

    def ack(t: Transition, outcome: Ack) -> None:
        acks.append((t.id, outcome))
        if len(acks) == 3:
            done.set()

    events = [transition(v) for v in (1, 2, 3)]
    for t in events:
        first.deliver(t, ack)
    first.close(5.0)
    assert done.wait(5)
    assert sorted(acks) == sorted((t.id, Ack.DELIVERED) for t in events)
    [stored] = sink.events()
    assert stored["series"]["count"] == 3
    second = k8s(sink, resource_version=lambda t: "7")  # a restart: nothing was marked
    made.append(second)
    again: list[Ack] = []
    for t in events[:2]:
        second.deliver(t, lambda t, o: again.append(o))
    assert second.flush(5)
    assert again == [Ack.DELIVERED, Ack.DELIVERED]
    assert second.stats.already_delivered == 1
    assert len(sink.events()) == 1


# -- an outage: one line when it starts, one when it ends -----------------------------------
def test_an_api_outage_logs_one_line_when_it_starts_and_one_when_it_ends(
    made: list[KubernetesEmitter], caplog: pytest.LogCaptureFixture
) -> None:
    sink = MemoryEventSink()
    sink.fail_next(*(ConnectionRefusedError("down") for _ in range(27)))  # 9 Events x 3
    emitter = k8s(sink, max_tries=12)
    made.append(emitter)
    caplog.set_level(logging.WARNING, logger="lifecycle.emitters.kubernetes")
    acks: list[Ack] = []
    for v in range(9):
        emitter.deliver(transition(v + 1, ref=ObjectRef("Pod", "ml", f"p-{v}", f"u-{v}")),
                        lambda t, o: acks.append(o))  # fmt: skip
    assert emitter.flush(10)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert lines[0].startswith("API server unreachable")
    assert lines[1].startswith("API server reachable again")
    assert "failed_tries=27" in lines[1]
    assert acks == [Ack.DELIVERED] * 9


def test_the_dispatcher_delivers_a_stuck_outbox_through_an_acknowledging_emitter(
    made: list[KubernetesEmitter],
) -> None:
    from lifecycle import Dispatcher, Runner
    from lifecycle.machines.pod import CreateRequested

    class Down:
        def emit(self, transition: Transition) -> None:
            raise ConnectionError("down")

    store = MemoryStore()
    runner = Runner(store, [Down()])
    for i in range(6):
        ref = ObjectRef("Pod", "ml", f"p-{i}", f"u-{i}")
        runner.observe(ref, CreateRequested(at=EPOCH, pool="gpu", provider="fake"))
    stuck = store.undelivered_count()
    sink = MemoryEventSink()
    emitter = k8s(sink)
    made.append(emitter)
    dispatcher = Dispatcher(store, [emitter], runner=Runner(store, [emitter]))
    dispatcher.drain()
    dispatcher.drain()  # handed out already (in flight or acknowledged): not sent twice
    assert dispatcher.close(5.0) == 0
    assert store.undelivered_count() == 0
    assert len(sink.events()) == stuck
    assert sink.verbs().count("create") == stuck
