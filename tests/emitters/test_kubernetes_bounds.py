"""Every request bounded in time, every reply and cache in size, one retry policy, and a
missing configuration refused at construction (issues 23 and 24): against hostile modes of
the fake API server (slow drip, huge reply, reset, 500, 429 with Retry-After)."""

from __future__ import annotations

import logging
import tracemalloc
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client as kubernetes_client  # type: ignore[import-untyped]

from lifecycle import EventType, ObjectRef, Transition
from lifecycle._testing.fake_api.server import Answer
from lifecycle.emitters.base import Ack
from lifecycle.emitters.kubernetes import (
    ApiEventSink,
    ApiNotConfigured,
    KubernetesEmitter,
    ManualClock,
    MemoryEventSink,
)
from lifecycle.testing import FakeApiServer

EPOCH = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


def transition(i: int = 0, reason: str = "Running") -> Transition:
    ref = ObjectRef("Pod", "ml", f"trainer-{i}", f"pod-{i}")
    return Transition(ref, "pod", "", reason, reason, EventType.NORMAL, "m", 1, EPOCH)


@pytest.fixture
def made() -> Iterator[list[KubernetesEmitter]]:
    emitters: list[KubernetesEmitter] = []
    yield emitters
    for e in emitters:
        e.close(timeout=2.0)


def emitter(made: list[KubernetesEmitter], sink: Any, **kw: Any) -> KubernetesEmitter:
    kw.setdefault("clock", ManualClock(EPOCH))
    kw.setdefault("hostname", "node-a")
    kw.setdefault("timers", False)
    kw.setdefault("retry_interval", 0.01)
    kw.setdefault("jitter", lambda: 0.0)
    made.append(KubernetesEmitter(sink, **kw))
    return made[-1]


def deliver(e: KubernetesEmitter, *ts: Transition) -> list[Ack]:
    acks: list[Ack] = []
    for t in ts:
        e.deliver(t, lambda t, o: acks.append(o))
    assert e.flush(20)
    return acks


def test_for_api_without_a_configuration_fails_at_construction() -> None:
    with pytest.raises(ApiNotConfigured, match="no API server"):
        KubernetesEmitter.for_api()
    with pytest.raises(ApiNotConfigured):
        KubernetesEmitter.for_api(kubernetes_client.ApiClient(kubernetes_client.Configuration()))


def test_the_clients_own_retries_are_off_one_policy_is_the_emitters(
    server: FakeApiServer, api_client: Any, made: list[KubernetesEmitter]
) -> None:
    sink = ApiEventSink(api_client, request_timeout=2.0)
    retries = sink.api.api_client.rest_client.pool_manager.connection_pool_kw["retries"]
    assert retries is False or retries.total is False
    assert api_client.configuration.retries is None  # the host's client is left alone
    e = emitter(made, sink, max_tries=2)
    server.fail("POST", "reset", "reset", "reset")
    assert deliver(e, transition()) == [Ack.FAILED]  # two tries, then left in the outbox
    assert server.verbs() == ["POST", "POST"]


@pytest.mark.parametrize(
    "answer",
    ["reset", 500, (429, {"Retry-After": "1"}), (503, {"Retry-After": "1"})],
    ids=["reset", "500", "429-retry-after", "503-retry-after"],
)
def test_a_failing_server_is_retried_and_the_event_lands(
    server: FakeApiServer, api_client: Any, made: list[KubernetesEmitter], answer: Answer
) -> None:
    e = emitter(made, ApiEventSink(api_client, request_timeout=2.0))
    server.fail("POST", answer)
    assert deliver(e, transition()) == [Ack.DELIVERED]
    assert len(server.events) == 1


def test_a_server_dripping_one_byte_at_a_time_is_cut_at_the_total_deadline(
    server: FakeApiServer, api_client: Any, made: list[KubernetesEmitter]
) -> None:
    sink = ApiEventSink(api_client, request_timeout=5.0, deadline=0.5)
    e = emitter(made, sink)
    server.fail("POST", ("drip", 0.05))  # ~800 bytes: 40 s, each byte inside the read timeout
    assert deliver(e, transition()) == [Ack.DELIVERED]  # cut, retried, then answered
    assert e.stats.deadlines == 1
    assert e.stats.transport_errors == 1


def test_a_huge_reply_is_not_read_whole(
    server: FakeApiServer,
    api_client: Any,
    made: list[KubernetesEmitter],
    caplog: pytest.LogCaptureFixture,
) -> None:
    sink = ApiEventSink(api_client, request_timeout=5.0, max_reply_bytes=64 * 1024)
    e = emitter(made, sink)
    server.fail("POST", ("huge", 50 * 1024 * 1024))
    caplog.set_level(logging.WARNING, logger="lifecycle.emitters.kubernetes")
    tracemalloc.start()
    try:
        acks = deliver(e, transition())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert acks == [Ack.DELIVERED]  # 201: created; the reply is not kept as the cached copy
    assert peak < 8 * 1024 * 1024, f"{peak} bytes traced: the reply was read whole"
    assert e.stats.oversized_replies == 1
    assert any("reply too large" in r.getMessage() for r in caplog.records)


def test_the_correlation_cache_is_bounded_and_says_when_it_drops(
    made: list[KubernetesEmitter], caplog: pytest.LogCaptureFixture
) -> None:
    sink = MemoryEventSink()
    sink.fail_next(*(ConnectionRefusedError("down") for _ in range(150)))  # an outage
    e = emitter(made, sink, max_cached=100, max_tries=1000)
    caplog.set_level(logging.WARNING, logger="lifecycle.emitters.kubernetes")
    acks = deliver(e, *(transition(i) for i in range(300)))
    assert len(e.correlator) <= 100
    assert e.stats.cache_evicted == 200
    assert any("event cache full" in r.getMessage() for r in caplog.records)
    assert acks.count(Ack.DELIVERED) == 300  # dropping a key loses no Event
