"""Which refusals heal (issue 34, ADR 0142): 401/403 are retried for a bounded window, a 404
on a create (namespace gone) is given up once, counted and logged once per object, and a
server trickling its answers cannot keep a worker thread past ``close(timeout)``."""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime
from typing import Any

import pytest

from lifecycle import EventType, ObjectRef, Transition
from lifecycle._testing.fake_api.server import FakeApiServer, Request
from lifecycle.emitters.base import Ack
from lifecycle.emitters.kubernetes import (
    FORBIDDEN_RETRY_SECONDS,
    ApiEventSink,
    KubernetesEmitter,
    ManualClock,
    MemoryEventSink,
    Rejected,
)

EPOCH = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
LOGGER = "lifecycle.emitters.kubernetes"


def transition(i: int = 0, pod: str = "trainer") -> Transition:
    ref = ObjectRef("Pod", "ml", f"{pod}-{i}", f"uid-{pod}-{i}")
    return Transition(ref, "pod", "", "Running", "Running", EventType.NORMAL, "m", 1, EPOCH)


def emitter(sink: Any, **kw: Any) -> KubernetesEmitter:
    kw.setdefault("clock", ManualClock(EPOCH))
    kw.setdefault("hostname", "node-a")
    kw.setdefault("timers", False)
    kw.setdefault("jitter", lambda: 0.0)
    return KubernetesEmitter(sink, **kw)


def deliver(e: KubernetesEmitter, *ts: Transition, timeout: float = 20) -> list[Ack]:
    acks: list[Ack] = []
    for t in ts:
        e.deliver(t, lambda t, o: acks.append(o))
    assert e.flush(timeout)
    return acks


@pytest.mark.parametrize("code", [403, 401])
def test_a_forbidden_events_api_heals_and_every_event_lands(
    server: FakeApiServer, api_client: Any, caplog: pytest.LogCaptureFixture, code: int
) -> None:
    """A Role applied after the Deployment: 403 for 2 s, then 201."""
    until = time.monotonic() + 2.0

    def forbidden(r: Request) -> bool:
        return r.method == "POST" and time.monotonic() < until

    server.fail_when(forbidden, *([code] * 10_000))
    caplog.set_level(logging.WARNING, logger=LOGGER)
    e = emitter(
        ApiEventSink(api_client, request_timeout=2.0),
        retry_interval=0.05,
        max_tries=2,  # the window (default: minutes), not the tries, bounds a forbidden Event
    )
    with e:
        acks = deliver(e, *(transition(i) for i in range(20)))
        stats = e.stats
    assert acks == [Ack.DELIVERED] * 20
    assert len(server.events) == 20
    assert stats.forbidden >= 20
    assert (stats.rejected, stats.gave_up, stats.acked_refused) == (0, 0, 0)
    forbids = [r for r in caplog.records if "forbids" in r.getMessage()]
    # once per outage, not once per Event (a 403 answered just before the heal but read after
    # another Event's 201 opens a second, short one)
    assert 1 <= len(forbids) <= 2, [r.getMessage() for r in caplog.records]
    assert any("reachable again" in r.getMessage() for r in caplog.records)


def test_forbidden_waits_back_off(server: FakeApiServer, api_client: Any) -> None:
    server.fail("POST", *([403] * 8))
    sleeps: list[float] = []
    e = emitter(
        ApiEventSink(api_client, request_timeout=2.0),
        sleep=sleeps.append,
        retry_interval=1.0,
        forbidden_retry_seconds=3600,
    )
    with e:
        assert deliver(e, transition()) == [Ack.DELIVERED]
    assert sleeps == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0]  # doubling, at most 60 s


def test_forbidden_past_the_window_fails_and_stays_in_the_outbox() -> None:
    sink = MemoryEventSink()
    sink.fail_next(*(Rejected("forbidden", 403, "Forbidden") for _ in range(10_000)))
    e = emitter(sink, retry_interval=0.02, forbidden_retry_seconds=0.3)
    with e:
        started = time.monotonic()
        assert deliver(e, transition()) == [Ack.FAILED]  # not refused: redelivered later
        assert time.monotonic() - started >= 0.3
        assert (e.stats.gave_up, e.stats.acked_failed, e.stats.rejected) == (1, 1, 0)


def test_the_default_forbidden_window_is_minutes_and_outlasts_the_tries() -> None:
    assert 120 <= FORBIDDEN_RETRY_SECONDS <= 900
    sink = MemoryEventSink()
    sink.fail_next(*(Rejected("forbidden", 403, "Forbidden") for _ in range(6)))
    sleeps: list[float] = []
    e = emitter(sink, sleep=sleeps.append, max_tries=3)  # default window
    assert e.correlator.forbidden_retry_seconds == FORBIDDEN_RETRY_SECONDS
    with e:
        assert deliver(e, transition()) == [Ack.DELIVERED]  # 6 forbidden tries, then in
    assert sleeps == [10.0, 20.0, 40.0, 60.0, 60.0, 60.0]  # 4 minutes and 10 s


def test_the_default_forbidden_window_ends_after_five_minutes_of_waits() -> None:
    sink = MemoryEventSink()
    sink.fail_next(*(Rejected("forbidden", 403, "Forbidden") for _ in range(100)))
    sleeps: list[float] = []
    e = emitter(sink, sleep=sleeps.append)
    with e:
        assert deliver(e, transition()) == [Ack.FAILED]  # stays in the outbox
        assert (e.stats.gave_up, e.stats.forbidden) == (1, 8)
    assert sleeps == [10.0, 20.0, 40.0, 60.0, 60.0, 60.0, 60.0]  # 310 s >= 300 s: given up


def test_a_gone_namespace_is_given_up_once_counted_and_logged_once_per_object(
    server: FakeApiServer, api_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    server.fail("POST", *([404] * 5))
    caplog.set_level(logging.INFO, logger=LOGGER)
    e = emitter(ApiEventSink(api_client, request_timeout=2.0), retry_interval=0.01)
    gone = [transition(0)._replace(version=v) for v in (1, 2, 3)]
    gone += [transition(1)._replace(version=v) for v in (1, 2)]
    with e:
        acks = deliver(e, *gone)
        stats = e.stats
    assert acks == [Ack.REFUSED] * 5  # for good: not retried, not redelivered forever
    assert server.verbs() == ["POST"] * 5  # each tried once
    assert (stats.gone, stats.rejected, stats.transport_errors) == (5, 0, 0)
    assert stats.dropped == 5
    lines = [r for r in caplog.records if "gone" in r.getMessage()]
    assert len(lines) == 2  # one per object
    assert all(r.levelno == logging.ERROR for r in lines)


def _emitter_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("lifecycle-k8s")]


def test_a_trickling_server_cannot_keep_a_thread_past_close(
    server: FakeApiServer, api_client: Any
) -> None:
    """Every answer one byte a second: close(3) returns within its bound and no thread of
    the emitter (workers, deadline watchdog) is left."""
    before = set(_emitter_threads())
    server.fail_when(lambda r: True, *([("drip", 1.0)] * 100))
    e = KubernetesEmitter.for_api(
        api_client, request_timeout=5.0, hostname="node-a", timers=False, retry_interval=0.05
    )
    acks: list[Ack] = []
    for i in range(12):
        e.deliver(transition(i), lambda t, o: acks.append(o))
    time.sleep(0.5)  # the 8 workers are each reading a trickle now
    assert len(set(_emitter_threads()) - before) >= 9
    started = time.monotonic()
    e.close(3)
    took = time.monotonic() - started
    assert took <= 3.2, f"close(3) took {took:.2f} s"
    left = [t for t in set(_emitter_threads()) - before if t.is_alive()]
    assert left == [], f"threads outlived close: {[t.name for t in left]}"
    assert sorted(acks, key=str) == [Ack.FAILED] * 12  # all stay in the outbox
    assert e.stats.acked_failed == 12


def test_a_try_cut_at_its_deadline_waits_longer_before_the_next() -> None:
    """A server that trickles: each retry would trickle again, so the waits double."""
    from lifecycle.emitters.kubernetes import RequestDeadline

    sink = MemoryEventSink()
    sink.fail_next(*(RequestDeadline("cut") for _ in range(3)), ConnectionResetError("reset"))
    sleeps: list[float] = []
    e = emitter(sink, sleep=sleeps.append)
    with e:
        assert deliver(e, transition()) == [Ack.DELIVERED]
    assert sleeps == [10.0, 20.0, 40.0, 10.0]  # a plain transport error: client-go's 10 s


def test_a_sink_the_host_passed_is_interrupted_not_closed(
    server: FakeApiServer, api_client: Any
) -> None:
    """The host may use its sink again: close cuts what is in flight and leaves it open."""
    sink = ApiEventSink(api_client, request_timeout=5.0)
    server.fail_when(lambda r: True, ("drip", 1.0))
    first = emitter(sink, retry_interval=0.05)
    first.deliver(transition(0), lambda t, o: None)
    time.sleep(0.3)
    started = time.monotonic()
    first.close(2)
    assert time.monotonic() - started <= 2.2
    assert not any(t.is_alive() for t in first.dispatcher.threads)
    with emitter(sink) as second:  # the same sink, a new emitter: it still sends
        assert deliver(second, transition(1)) == [Ack.DELIVERED]
