"""A redelivery's count is what it handed over, for every kind of emitter (issue 35, ADR 0135).

An acknowledging emitter (the Kubernetes one) answers on its own thread, later: a redelivery
that counted only what was acknowledged by the time it returned said "redelivered: 0" while
every waiting event was queued. The count is the events handed over; ``acknowledged`` says
how many of them every emitter had confirmed.
"""

from __future__ import annotations

import asyncio
import pickle
from collections.abc import Iterator

import pytest

from lifecycle import (
    AsyncRunner,
    Dispatcher,
    MemoryEmitter,
    MemoryStore,
    ObjectRef,
    Runner,
    Transition,
)
from lifecycle.emitters.base import Ack, Acknowledge
from lifecycle.emitters.kubernetes import KubernetesEmitter, MemoryEventSink
from lifecycle.machines.pod import CreateRequested
from lifecycle.runner import Redelivery

from .test_acknowledged_delivery import EPOCH, k8s


class Down:
    def emit(self, transition: Transition) -> None:
        raise ConnectionError("down")


class Holding:
    """An acknowledging emitter that answers only when told (:meth:`answer`)."""

    def __init__(self, *, refuse: bool = False) -> None:
        self.held: list[tuple[Transition, Acknowledge]] = []
        self.refuse = refuse

    def emit(self, transition: Transition) -> None:  # (best-effort events)
        pass

    def deliver(self, transition: Transition, ack: Acknowledge) -> None:
        if self.refuse:
            raise ConnectionError("queue full")
        self.held.append((transition, ack))

    def answer(self, outcome: Ack = Ack.DELIVERED) -> None:
        held, self.held = self.held, []
        for t, ack in held:
            ack(t, outcome)


def stuck_store(pods: int = 7) -> tuple[MemoryStore, int]:
    """A store whose outbox holds what a runner whose emitter was down committed."""
    store = MemoryStore()
    runner = Runner(store, [Down()])
    for i in range(pods):
        ref = ObjectRef("Pod", "ml", f"p-{i}", f"u-{i}")
        runner.observe(ref, CreateRequested(at=EPOCH, pool="gpu", provider="fake"))
    waiting = store.undelivered_count()
    assert waiting == 2 * pods  # each Pod's event and its NodeClaim's
    return store, waiting


@pytest.fixture
def made() -> Iterator[list[KubernetesEmitter]]:
    emitters: list[KubernetesEmitter] = []
    yield emitters
    for e in emitters:
        e.close(timeout=2.0)


def test_the_kubernetes_emitter_redelivery_counts_what_it_handed_over(
    made: list[KubernetesEmitter],
) -> None:
    store, waiting = stuck_store(pods=7)  # 14 events wait
    sink = MemoryEventSink()
    emitter = k8s(sink)
    made.append(emitter)
    runner = Runner(store, [emitter])
    redelivered = runner.redeliver()
    assert redelivered == waiting
    assert 0 <= redelivered.acknowledged <= waiting
    runner.flush(5.0)
    assert len(sink.events()) == waiting
    assert store.undelivered_count() == 0
    assert runner.redeliver() == 0  # nothing left: nothing handed over


def test_through_the_api_server_the_count_is_every_event_queued() -> None:
    """The issue's case: a host's start-up line said "redelivered: 0" while the Kubernetes
    emitter had queued every waiting event for the API server."""
    from kubernetes import client as kubernetes_client  # type: ignore[import-untyped]

    from lifecycle.emitters.kubernetes import ManualClock
    from lifecycle.testing import FakeApiServer

    store, waiting = stuck_store(pods=10)
    server = FakeApiServer()
    config = kubernetes_client.Configuration()
    config.host = server.url
    api = kubernetes_client.ApiClient(config)
    try:
        with KubernetesEmitter.for_api(api, clock=ManualClock(EPOCH), hostname="h") as emitter:
            runner = Runner(store, [emitter])
            assert f"redelivered: {runner.redeliver()}" == f"redelivered: {waiting}"
            runner.close(5.0)
        assert server.verbs().count("POST") == waiting
        assert store.undelivered_count() == 0
    finally:
        api.close()
        server.close()


def test_acknowledged_counts_the_answers_that_came_before_it_returned() -> None:
    store, waiting = stuck_store(pods=3)
    holding = Holding()
    runner = Runner(store, [holding, MemoryEmitter()])
    redelivered = runner.redeliver()
    assert (redelivered, redelivered.acknowledged, redelivered.in_flight) == (
        waiting,
        0,
        waiting,
    )
    assert runner.redeliver() == 0  # in flight: not handed out twice
    holding.answer()
    assert runner.flush(1.0) == waiting
    assert store.undelivered_count() == 0


def test_a_synchronous_emitter_has_what_it_took_acknowledged() -> None:
    store, waiting = stuck_store(pods=2)
    redelivered = Runner(store, [MemoryEmitter()]).redeliver()
    assert redelivered == redelivered.acknowledged == waiting
    assert repr(redelivered) == f"Redelivery(handed={waiting}, acknowledged={waiting})"


def test_an_emitter_that_takes_nothing_is_handed_nothing() -> None:
    store, waiting = stuck_store(pods=2)
    assert Runner(store, [Holding(refuse=True)]).redeliver() == 0
    assert Runner(store, [Down()]).redeliver() == 0
    assert store.undelivered_count() == waiting


def test_the_asyncio_runner_and_the_dispatcher_count_what_they_handed_over() -> None:
    store, waiting = stuck_store(pods=2)
    holding = Holding()

    async def main() -> Redelivery:
        runner = AsyncRunner(store, [holding], owns_store=False)
        return await runner.redeliver()

    redelivered = asyncio.run(main())
    assert (int(redelivered), redelivered.acknowledged) == (waiting, 0)

    store, waiting = stuck_store(pods=3)
    held = Holding()
    dispatcher = Dispatcher(store, [held])
    assert dispatcher.dispatch_once() == waiting
    held.answer()
    dispatcher.close(1.0)
    assert store.undelivered_count() == 0


def test_a_redelivery_count_is_an_int_that_keeps_its_parts() -> None:
    r = Redelivery(5, 2)
    assert (r, r + 1, f"{r}", r.handed, r.in_flight) == (5, 6, "5", 5, 3)
    both = r.joined(Redelivery(1))
    assert (both, both.acknowledged) == (6, 3)
    copied = pickle.loads(pickle.dumps(r))
    assert (copied, copied.acknowledged) == (5, 2)
    assert Redelivery(3).acknowledged == 3
    with pytest.raises(ValueError, match="acknowledged"):
        Redelivery(2, 3)
