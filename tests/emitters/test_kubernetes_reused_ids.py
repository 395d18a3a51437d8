"""An id never names two contents (issue 34, ADR 0141): a transition id handed out again for
other content (a store that lost writes) is a new Event in the API, reported and counted,
before and after a restart; a redelivery of the same content is still one Event."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lifecycle import EventType, ObjectRef, Transition
from lifecycle._log import get_logger
from lifecycle.emitters.base import Ack
from lifecycle.emitters.kubernetes import (
    ApiEventSink,
    KubernetesEmitter,
    ManualClock,
    MemoryEventSink,
)
from lifecycle.testing import FakeApiServer

EPOCH = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
POD = ObjectRef("Pod", "ml", "trainer-0", "pod-a")
#: what one version of the Pod's status may record, after one history or another
CONTENTS = [
    ("Running", EventType.NORMAL, "started on node-a"),
    ("Failed", EventType.WARNING, "OOMKilled"),
    ("Failed", EventType.WARNING, "Evicted"),
    ("Running", EventType.NORMAL, "started on node-b"),
]


def transition(version: int = 3, content: int = 0, ref: ObjectRef = POD) -> Transition:
    reason, type, message = CONTENTS[content]
    return Transition(ref, "pod", "Pending", reason, reason, type, message, version, EPOCH)


def in_api(events: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return sorted((e["reason"], e["type"], e["note"]) for e in events)


def content(t: Transition) -> tuple[str, str, str]:
    return (t.reason, t.type.value, t.message)


def emitter(sink: Any, **kw: Any) -> KubernetesEmitter:
    kw.setdefault("clock", ManualClock(EPOCH))
    kw.setdefault("hostname", "node-a")
    kw.setdefault("timers", False)
    kw.setdefault("retry_interval", 0.01)
    kw.setdefault("jitter", lambda: 0.0)
    return KubernetesEmitter(sink, **kw)


def deliver(e: KubernetesEmitter, *ts: Transition) -> list[Ack]:
    acks: list[Ack] = []
    for t in ts:
        e.deliver(t, lambda t, o: acks.append(o))
    assert e.flush(20)
    return acks


def test_a_reused_id_after_a_restart_is_a_new_event_reported_and_counted(
    server: FakeApiServer, api_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    old, new = transition(content=0), transition(content=1)
    assert old.id == new.id  # a rewound store handed version 3 out again
    with emitter(ApiEventSink(api_client)) as before:
        assert deliver(before, old) == [Ack.DELIVERED]
    caplog.set_level(logging.WARNING, logger="lifecycle.emitters.kubernetes")
    with emitter(ApiEventSink(api_client), hostname="node-b") as after:  # restarted
        assert deliver(after, new) == [Ack.DELIVERED]
        stats = after.stats
    assert in_api(list(server.events.values())) == sorted([content(old), content(new)])
    assert (stats.reused_ids, stats.created, stats.already_delivered) == (1, 1, 0)
    reports = [r for r in caplog.records if "id reused" in r.getMessage()]
    assert len(reports) == 1


def test_a_reused_id_in_the_same_process_is_not_a_duplicate(
    server: FakeApiServer, api_client: Any
) -> None:
    old, new = transition(content=1), transition(content=2)  # same reason, other note
    with emitter(ApiEventSink(api_client)) as e:
        assert deliver(e, old, new) == [Ack.DELIVERED, Ack.DELIVERED]
        stats = e.stats
    assert in_api(list(server.events.values())) == sorted([content(old), content(new)])
    assert all("series" not in ev for ev in server.events.values())  # two Events, no series
    assert (stats.duplicates, stats.reused_ids) == (0, 1)


def test_a_redelivery_of_the_same_content_is_still_one_event(
    server: FakeApiServer, api_client: Any
) -> None:
    old, new = transition(content=0), transition(content=1)
    with emitter(ApiEventSink(api_client)) as e:
        deliver(e, old, new, old, new)  # the repeats are answered from memory
        assert e.stats.duplicates == 2
    for host in ("node-b", "node-c"):  # restarts: each redelivers both
        with emitter(ApiEventSink(api_client), hostname=host) as e:
            assert deliver(e, old, new) == [Ack.DELIVERED, Ack.DELIVERED]
            assert (e.stats.already_delivered, e.stats.created, e.stats.reused_ids) == (2, 0, 0)
    assert in_api(list(server.events.values())) == sorted([content(old), content(new)])
    assert set(server.creates.values()) == {1}


def test_a_series_of_the_new_content_patches_its_own_event() -> None:
    """A repeat that correlates with an Event created under a content-derived name patches
    that Event, not the one its id's name holds (resolved resourceVersions: a series)."""
    sink = MemoryEventSink()
    old, new = transition(content=0), transition(content=1)
    with emitter(sink, resolve=lambda ref: ("pod-a", "77")) as before:
        deliver(before, old)
    with emitter(sink, resolve=lambda ref: ("pod-a", "77"), hostname="node-b") as after:
        again = new._replace(version=4)  # same key (reason, resourceVersion): its series
        assert deliver(after, new, again) == [Ack.DELIVERED, Ack.DELIVERED]
    events = {e["metadata"]["name"]: e for e in sink.events()}
    assert len(events) == 2
    series = [e for e in events.values() if "series" in e]
    assert [(e["reason"], e["note"], e["series"]["count"]) for e in series] == [
        ("Failed", "OOMKilled", 2)
    ]
    assert [e["note"] for e in events.values() if "series" not in e] == ["started on node-a"]


def test_a_sink_without_read_trusts_the_name_as_before() -> None:
    class NoRead:
        def __init__(self) -> None:
            self.inner = MemoryEventSink()

        def create(self, event: Any) -> Any:
            return self.inner.create(event)

        def patch(self, event: Any, patch: Any) -> Any:
            return self.inner.patch(event, patch)

    sink = NoRead()
    with emitter(sink) as e:
        deliver(e, transition(content=0))
    with emitter(sink, hostname="node-b") as e:
        assert deliver(e, transition(content=1)) == [Ack.DELIVERED]
        assert e.stats.already_delivered == 1


# -- the property --------------------------------------------------------------------------
Op = tuple[str, int, int]
ops = st.lists(
    st.one_of(
        st.tuples(st.just("emit"), st.integers(0, 2), st.integers(0, len(CONTENTS) - 1)),
        st.just(("restart", 0, 0)),
    ),
    min_size=1,
    max_size=14,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=ops, resolved=st.booleans())
def test_every_emitted_content_is_in_the_api_once(ops: list[Op], resolved: bool) -> None:
    """Any interleaving of deliveries of (id, content) pairs, ids reused for other content,
    with restarts (a new emitter, the API kept): every content delivered is in the API, as
    one Event, and no Event is anything but a content delivered."""
    sink = MemoryEventSink()
    resolve = (lambda ref: ("pod-a", "")) if resolved else None
    e = emitter(sink, resolve=resolve, workers=2)
    emitted: set[tuple[str, str, str, str]] = set()
    try:
        for n, (op, version, c) in enumerate(ops):
            if op == "restart":
                e.close(5)
                e = emitter(sink, resolve=resolve, workers=2, hostname=f"node-{n}")
                continue
            reason, type, message = CONTENTS[c]
            t = transition(version, c)._replace(message=f"v{version}: {message}")
            assert deliver(e, t) == [Ack.DELIVERED]
            emitted.add((t.id, reason, type.value, t.message))
    finally:
        e.close(5)
    stored = sorted((ev["reason"], ev["type"], ev["note"]) for ev in sink.events())
    assert stored == sorted((r, ty, note) for _, r, ty, note in emitted)


# -- every memory that dedupes by id -------------------------------------------------------
class Holding:
    """An acknowledging emitter that answers only when told."""

    name = "holding"

    def __init__(self) -> None:
        self.taken: list[Transition] = []
        self.acks: list[tuple[Transition, Any]] = []

    def emit(self, transition: Transition) -> None:
        pass

    def deliver(self, transition: Transition, ack: Any) -> None:
        self.taken.append(transition)
        self.acks.append((transition, ack))


def test_delivery_hands_out_a_reused_id_with_other_content_and_marks_only_its_answer() -> None:
    from lifecycle._delivery import Delivery

    emitter_ = Holding()
    delivery = Delivery([emitter_], get_logger("lifecycle.test"))
    old, new = transition(content=0), transition(content=1)
    assert delivery.send([old]) == []
    assert delivery.send([old]) == []  # the same event in flight: not handed out again
    assert delivery.send([new]) == []  # the id again, other content: a new event
    assert emitter_.taken == [old, new]
    (t_old, ack_old), (t_new, ack_new) = emitter_.acks
    ack_old(t_old, Ack.DELIVERED)  # the replaced event's answer marks nothing
    assert delivery.take_acked(force=True) == []
    ack_new(t_new, Ack.DELIVERED)
    assert delivery.take_acked(force=True) == [new.id]
    assert delivery.in_flight() == 0


def test_delivery_does_not_mark_a_reused_id_by_an_acknowledgement_of_other_content() -> None:
    from lifecycle._delivery import Delivery

    emitter_ = Holding()
    delivery = Delivery([emitter_], get_logger("lifecycle.test"), mark_batch=1000)
    old, new = transition(content=0), transition(content=1)
    delivery.send([old])
    t_old, ack_old = emitter_.acks[0]
    ack_old(t_old, Ack.DELIVERED)  # acknowledged, not yet marked
    assert delivery.send([new]) == []  # not answered by the old acknowledgement
    assert emitter_.taken == [old, new]
    assert delivery.take_acked(force=True) == []  # the old answer no longer marks the id


def test_memory_emitter_unique_keeps_a_reused_id_with_other_content() -> None:
    from lifecycle import MemoryEmitter

    m = MemoryEmitter()
    old, new = transition(content=0), transition(content=1)
    for t in (old, old, new, new):
        m.emit(t)
    assert m.unique() == [old, new]
    with pytest.raises(AssertionError, match="more than once"):
        m.assert_no_duplicates()
    m.clear()
    m.emit(old)
    m.emit(new)
    m.assert_no_duplicates()  # one id, two events: no duplicate
