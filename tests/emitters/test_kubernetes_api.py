"""The emitter and ``ApiEventSink`` against a small HTTP server on loopback that answers and
validates like the API server's ``events.k8s.io/v1`` endpoints
(:class:`lifecycle.testing.FakeApiServer`), and the
end-to-end flow of the example traces.

Request bodies are checked by deserialising them into the ``kubernetes`` client's own models.
The server is started per test on a free port and shut down (threads joined) at teardown.
"""

from __future__ import annotations

import json
import time
import types
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs
import pytest

from lifecycle import EventType, MemoryStore, ObjectRef, Runner, Transition
from lifecycle._testing.fake_api.server import PREFIX, Answer, strategic_merge
from lifecycle.emitters.kubernetes import (
    ApiEventSink,
    EventCollector,
    EventRow,
    EventSeries,
    KubernetesEmitter,
    ManualClock,
    NotFound,
    ObjectReference,
    QueueFull,
    Rejected,
    build_event,
    truncate_note,
)
from lifecycle.testing import FakeApiServer
from lifecycle.trace import read_trace, replay

kubernetes_client = pytest.importorskip("kubernetes.client")

EPOCH = datetime(2026, 11, 30, 10, 0, 0, tzinfo=UTC)
#: Bundled traces whose transitions all come back in the replay's results: a trace with a
#: host-level fault line (another writer, a crash and restart) also sends events that no result
#: holds, and one of action events only has no transition (both covered in test_trace_faults).
TRACES = sorted(
    path
    for path in (Path(__file__).parents[2] / "examples" / "traces").glob("*.jsonl")
    if '"concurrent-write"' not in (text := path.read_text())
    and '"crash-after-commit"' not in text
    and path.stem != "kubernetes-event-series"
)
POD = ObjectRef("Pod", "ml", "trainer-0", "pod-a")


# -- fixtures ----------------------------------------------------------------------------------
@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    s = FakeApiServer()
    yield s
    s.close()


@pytest.fixture
def api_client(server: FakeApiServer) -> Iterator[Any]:
    config = kubernetes_client.Configuration()
    config.host = server.url
    client = kubernetes_client.ApiClient(config)
    yield client
    client.close()


@attrs.define
class Made:
    emitter: KubernetesEmitter
    sleeps: list[float]


@pytest.fixture
def make(api_client: Any) -> Iterator[Callable[..., Made]]:
    made: list[KubernetesEmitter] = []

    def factory(**kw: Any) -> Made:
        sleeps: list[float] = []
        kw.setdefault("clock", ManualClock(EPOCH))
        kw.setdefault("sleep", sleeps.append)
        kw.setdefault("jitter", lambda: 0.0)
        kw.setdefault("hostname", "node-a")
        kw.setdefault("timers", False)
        timeout = kw.pop("request_timeout", 2.0)
        emitter = KubernetesEmitter(ApiEventSink(api_client, request_timeout=timeout), **kw)
        made.append(emitter)
        return Made(emitter, sleeps)

    yield factory
    for emitter in made:
        emitter.close(timeout=2.0)
        assert not any(t.is_alive() for t in emitter.dispatcher.threads)


def transition(
    reason: str = "Running", *, version: int = 3, n: int = 0, ref: ObjectRef = POD
) -> Transition:
    return Transition(
        ref,
        "pod",
        "Initializing",
        reason,
        reason,
        EventType.NORMAL,
        f"external instance: {reason}",
        version,
        EPOCH,
        n,
    )


def model(body: Any, klass: str = "EventsV1Event") -> Any:
    """The request body as the kubernetes client's own model (raises if it does not fit)."""
    return kubernetes_client.ApiClient().deserialize(
        types.SimpleNamespace(data=json.dumps(body)), klass
    )


def sent(m: Made) -> Made:
    assert m.emitter.flush(5), "the worker did not drain its queue"
    return m


# -- create / patch / 404 ----------------------------------------------------------------------
def test_create_posts_an_events_v1_event(server: FakeApiServer, make: Callable[..., Made]) -> None:
    m = make()
    m.emitter.emit(transition(version=7))
    sent(m)
    [request] = server.requests
    assert (request.method, request.path) == ("POST", f"{PREFIX}/namespaces/ml/events")
    assert request.content_type == "application/json"
    event = model(request.body)
    assert isinstance(event, kubernetes_client.EventsV1Event)
    assert event.metadata.name.startswith("trainer-0.")
    assert event.metadata.namespace == "ml"
    assert event.event_time == EPOCH
    assert (event.type, event.reason, event.action) == ("Normal", "Running", "Running")
    assert event.note == "external instance: Running"
    assert (event.reporting_controller, event.reporting_instance) == (
        "pod-controller",
        "pod-controller-node-a",
    )
    regarding = event.regarding
    assert (regarding.kind, regarding.api_version, regarding.namespace, regarding.name) == (
        "Pod",
        "v1",
        "ml",
        "trainer-0",
    )
    # the store's version is not the object's resourceVersion: left out, never invented
    assert (regarding.uid, regarding.resource_version) == ("pod-a", None)
    assert event.series is None
    assert m.emitter.stats.created == 1


def test_a_repeat_patches_series_with_a_strategic_merge_patch(
    server: FakeApiServer, make: Callable[..., Made]
) -> None:
    m = make()
    m.emitter.emit(transition(n=0))
    m.emitter.emit(transition(n=1))  # same key: same object, version and reason
    m.emitter.emit(transition(n=2))
    sent(m)
    assert server.verbs() == ["POST", "PATCH"]
    patch = server.requests[1]
    name = server.requests[0].body["metadata"]["name"]
    assert patch.path == f"{PREFIX}/namespaces/ml/events/{name}"
    assert patch.content_type == "application/strategic-merge-patch+json"
    assert set(patch.body) == {"series"}
    series = model(patch.body["series"], "EventsV1EventSeries")
    assert (series.count, series.last_observed_time) == (2, EPOCH)
    rows = EventCollector.from_api(m.emitter.sink.api).rows("pod-a")  # type: ignore[attr-defined]
    assert [r.count for r in rows] == [2]
    assert m.emitter.correlator.cached()[0].count == 3


def test_a_404_on_the_patch_of_an_evicted_event_creates_it(
    server: FakeApiServer, make: Callable[..., Made]
) -> None:
    m = make()
    m.emitter.emit(transition(n=0))
    sent(m)
    server.evict(server.requests[0].body["metadata"]["name"])
    m.emitter.emit(transition(n=1))
    sent(m)
    assert server.verbs() == ["POST", "PATCH", "POST"]
    recreated = model(server.requests[2].body)
    assert recreated.series.count == 2
    assert recreated.metadata.name == server.requests[0].body["metadata"]["name"]
    assert (m.emitter.stats.recreated, m.emitter.stats.rejected) == (1, 0)


# -- rejections, retries, timeouts -------------------------------------------------------------
@pytest.mark.parametrize("code", [422, 400])  # 401/403 heal: test_kubernetes_refusals
def test_server_rejections_are_dropped_and_counted(
    server: FakeApiServer, make: Callable[..., Made], code: int
) -> None:
    m = make()
    server.fail("POST", code)
    m.emitter.emit(transition())
    sent(m)
    assert server.verbs() == ["POST"]
    assert m.sleeps == []
    stats = m.emitter.stats
    assert (stats.rejected, stats.created, stats.dropped) == (1, 0, 1)


def test_a_409_on_create_is_the_event_already_delivered(
    server: FakeApiServer, make: Callable[..., Made]
) -> None:
    first = make(clock=ManualClock(EPOCH))
    second = make(clock=ManualClock(EPOCH + timedelta(hours=1)))  # a restarted host, later
    first.emitter.emit(transition())
    sent(first)
    second.emitter.emit(transition())  # the same transition: the same name
    sent(second)
    assert server.verbs() == ["POST", "POST", "GET"]  # the Event there is read: the same
    assert server.requests[2].path.endswith(server.requests[0].body["metadata"]["name"])
    assert (second.emitter.stats.rejected, second.emitter.stats.already_delivered) == (0, 1)
    assert len(server.events) == 1


@pytest.mark.parametrize(
    "answer",
    [429, (503, {"Retry-After": "1"}), "drop", 500],
    ids=["429", "503-retry-after", "dropped-connection", "500"],
)
def test_transient_failures_are_retried_after_the_injected_sleep(
    server: FakeApiServer, make: Callable[..., Made], answer: Answer
) -> None:
    m = make(jitter=lambda: 1.0)
    server.fail("POST", answer, answer)
    m.emitter.emit(transition())
    sent(m)
    assert server.verbs() == ["POST", "POST", "POST"]
    assert m.sleeps == [12.5, 12.5]
    stats = m.emitter.stats
    assert (stats.transport_errors, stats.created, stats.dropped) == (2, 1, 0)
    assert len(server.events) == 1


def test_a_timeout_is_a_transport_error_and_retried(
    server: FakeApiServer, make: Callable[..., Made]
) -> None:
    m = make(request_timeout=0.2)
    server.fail("POST", "hang")
    started = time.monotonic()
    m.emitter.emit(transition())
    sent(m)
    assert time.monotonic() - started < 3
    assert server.verbs() == ["POST", "POST"]
    assert (m.emitter.stats.transport_errors, m.emitter.stats.created) == (1, 1)
    assert m.sleeps == [10.0]


def test_a_send_gives_up_after_12_tries(server: FakeApiServer, make: Callable[..., Made]) -> None:
    m = make()
    server.fail("POST", *(["drop"] * 12))
    m.emitter.emit(transition())
    sent(m)
    assert server.verbs() == ["POST"] * 12
    assert len(m.sleeps) == 11
    stats = m.emitter.stats
    assert (stats.transport_errors, stats.gave_up, stats.created) == (12, 1, 0)


def test_a_patch_timeout_is_retried_as_a_patch(
    server: FakeApiServer, make: Callable[..., Made]
) -> None:
    m = make(request_timeout=0.2)
    m.emitter.emit(transition(n=0))
    server.fail("PATCH", "hang")
    m.emitter.emit(transition(n=1))
    sent(m)
    assert server.verbs() == ["POST", "PATCH", "PATCH"]
    assert [e["series"]["count"] for e in server.events.values()] == [2]


# -- the queue ---------------------------------------------------------------------------------
def test_a_full_queue_drops_and_counts(server: FakeApiServer, make: Callable[..., Made]) -> None:
    m = make(start=False, queue_size=3)
    for n in range(5):
        m.emitter.emit(transition(f"Reason{n}", n=n))
    assert (m.emitter.stats.enqueued, m.emitter.stats.dropped_queue_full) == (3, 2)
    m.emitter.start()
    sent(m)
    assert server.verbs() == ["POST"] * 3
    assert sorted(e["reason"] for e in server.events.values()) == ["Reason0", "Reason1", "Reason2"]


def test_the_default_queue_holds_1000_events(make: Callable[..., Made]) -> None:
    m = make(start=False)
    for n in range(1001):
        m.emitter.emit(transition(version=n + 1))
    assert (m.emitter.stats.enqueued, m.emitter.stats.dropped_queue_full) == (1000, 1)
    m.emitter.close(timeout=0.1)  # never started: nothing to join


def test_emit_never_waits_for_the_api_server(
    server: FakeApiServer, make: Callable[..., Made]
) -> None:
    m = make(request_timeout=5.0, workers=2)
    server.fail("POST", "hang", "hang")
    runner = Runner(MemoryStore(), [m.emitter])
    started = time.monotonic()
    for n in range(50):
        m.emitter.emit(transition(version=n + 1))
    assert time.monotonic() - started < 0.5
    assert m.emitter.stats.enqueued == 50
    assert runner.redeliver() == 0
    started = time.monotonic()
    m.emitter.close(timeout=0.2)  # both workers are stuck in a request: close does not wait
    assert time.monotonic() - started < 1.5
    server.release()  # the hung requests end; the workers see the stop and exit
    for thread in m.emitter.dispatcher.threads:
        thread.join(5)
        assert not thread.is_alive()
    assert m.emitter.stats.dropped_on_close == 48


def test_raise_when_full_keeps_the_event_in_the_runners_outbox(
    server: FakeApiServer, make: Callable[..., Made]
) -> None:
    m = make(start=False, queue_size=1, raise_when_full=True)
    store = MemoryStore()
    other = ObjectRef("Pod", "ml", "other-0", "other")
    m.emitter.emit(transition("A", ref=other))
    with pytest.raises(QueueFull):
        m.emitter.emit(transition("B", n=1, ref=other))
    assert m.emitter.stats.dropped_queue_full == 1
    trace = read_trace(next(p for p in TRACES if p.name == "happy-path.jsonl"))
    results = replay(trace, store, [m.emitter])
    committed = [t for r in results for t in r.all_transitions()]
    assert committed, "the trace commits transitions"
    m.emitter.start()
    sent(m)
    runner = Runner(store, [m.emitter])
    for _ in range(4 * len(committed)):  # the queue takes one at a time
        if not store.undelivered_count():
            break
        runner.redeliver()
        sent(m)
        runner.flush()
    assert store.undelivered_count() == 0
    expected = 1 + len(committed)  # "A", and every transition once
    assert len(server.events) == expected
    assert m.emitter.stats.duplicates == 0


def test_close_interrupts_a_retry_sleep(server: FakeApiServer, make: Callable[..., Made]) -> None:
    m = make(sleep=None, retry_interval=30.0)  # the emitter's own, interruptible sleep
    server.fail("POST", "drop")
    m.emitter.emit(transition())
    deadline = time.monotonic() + 5
    while m.emitter.stats.transport_errors == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    started = time.monotonic()
    m.emitter.close(timeout=0.2)
    assert time.monotonic() - started < 1.5
    assert m.emitter.stats.gave_up == 1
    with pytest.raises(RuntimeError, match="closed"):
        m.emitter.emit(transition())


# -- the collector -----------------------------------------------------------------------------
def test_for_api_wraps_an_api_client(server: FakeApiServer, api_client: Any) -> None:
    with KubernetesEmitter.for_api(api_client, clock=ManualClock(EPOCH), hostname="h") as emitter:
        assert isinstance(emitter.sink, ApiEventSink)
        emitter.emit(transition())
        assert emitter.flush(5)
    assert server.verbs() == ["POST"]
    assert emitter.dispatcher.threads
    assert not any(t.is_alive() for t in emitter.dispatcher.threads)


def test_the_collector_lists_through_the_api(
    server: FakeApiServer, make: Callable[..., Made], api_client: Any
) -> None:
    m = make()
    other = ObjectRef("Pod", "other", "trainer-9", "pod-z")
    m.emitter.emit(transition("Running"))
    m.emitter.emit(transition("Initializing", version=2))
    m.emitter.emit(transition("Running", ref=other))
    sent(m)
    collector = EventCollector.from_api(api_client)
    assert collector.rows("pod-a") == [
        EventRow(
            "Normal", "Initializing", "external instance: Initializing", "Pod", "trainer-0", 1
        ),
        EventRow("Normal", "Running", "external instance: Running", "Pod", "trainer-0", 1),
    ]
    assert EventCollector.from_api(api_client, "other").rows() == [
        EventRow("Normal", "Running", "external instance: Running", "Pod", "trainer-9", 1)
    ]
    assert server.requests[-1].path.startswith(f"{PREFIX}/namespaces/other/events")


# -- end to end: a Runner replaying the example traces -----------------------------------------
def api_uid(ref: ObjectRef) -> str:
    """The uid the API server gave the object ``ref`` names (in these tests: made up)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{ref.kind}/{ref.namespace}/{ref.name}/{ref.uid}"))


def expected_rows(emitted: list[Transition], emitter: KubernetesEmitter) -> list[EventRow]:
    """What client-go would show for these emissions without a refresh: one row per
    correlation key, the first note, count 1, or 2 once the key repeats."""
    groups: dict[tuple[object, ...], list[Transition]] = {}
    for t in emitted:
        key = (t.type, t.reason, emitter.controller_for(t), t.ref.uid, t.version)
        groups.setdefault(key, []).append(t)
    rows = [
        EventRow(
            g[0].type.value,
            g[0].reason,
            truncate_note(g[0].message),
            g[0].ref.kind,
            g[0].ref.name,
            min(len(g), 2),
        )
        for g in groups.values()
    ]
    return sorted(rows, key=lambda r: r.as_tuple()[:5])


@pytest.mark.parametrize("path", TRACES, ids=[p.stem for p in TRACES])
def test_each_transition_of_a_trace_is_one_event_row_with_count_1(
    server: FakeApiServer, make: Callable[..., Made], api_client: Any, path: Path
) -> None:
    # the host resolves each object to the uid the API server gave it (kubectl describe
    # finds Events by it), but not its resourceVersion
    m = make(resolve=lambda ref: (api_uid(ref), ""))
    results = replay(read_trace(path), MemoryStore(), [m.emitter], name=str(path))
    sent(m)
    emitted = [t for r in results for t in r.all_transitions()]
    transitions = [t for t in emitted if not t.action]
    assert transitions, f"{path.name} emits nothing"
    collector = EventCollector.from_api(api_client)
    for ref in {t.ref for t in emitted}:
        on_ref = [t for t in emitted if t.ref == ref]
        assert collector.rows(api_uid(ref)) == expected_rows(on_ref, m.emitter), ref
    # one row, count 1, per transition: no two transitions share a correlation key
    keyed = {
        (t.type, t.reason, m.emitter.controller_for(t), t.ref.uid, t.version)
        for t in emitted
        if not t.action
    }
    assert len(keyed) == len(transitions)
    for t in transitions:
        row = EventRow(t.type.value, t.reason, truncate_note(t.message), t.ref.kind, t.ref.name, 1)
        assert row in collector.rows(api_uid(t.ref)), t
    # every Event regards its object by the API's uid, and claims no resourceVersion it
    # does not know (a NodeClaim's store key "<pod uid>-claim" never reaches the wire)
    for event in server.events.values():
        assert "resourceVersion" not in event["regarding"]
        assert any(
            (api_uid(t.ref), t.reason) == (event["regarding"]["uid"], event["reason"])
            for t in emitted
        )
    assert server.refused == []
    for request in server.requests:
        if request.method == "POST":
            model(request.body)
    stats = m.emitter.stats
    assert (stats.dropped, stats.transport_errors) == (0, 0)
    if not any(t.action for t in emitted):
        assert server.verbs().count("PATCH") == 0
        assert stats.created == len(transitions)


def test_outbox_redelivery_does_not_count_a_transition_twice(
    server: FakeApiServer, make: Callable[..., Made], api_client: Any
) -> None:
    class Flaky:
        down = True

        def emit(self, transition: Transition) -> None:
            if self.down:
                raise ConnectionError("down")

    m = make()
    flaky = Flaky()
    store = MemoryStore()
    trace = read_trace(next(p for p in TRACES if p.name == "vanished.jsonl"))
    results = replay(trace, store, [m.emitter, flaky])
    transitions = [t for r in results for t in r.all_transitions() if not t.fallback]
    flaky.down = False
    runner = Runner(store, [m.emitter, flaky])
    runner.redeliver()
    sent(m)
    runner.flush()  # the acknowledgements marked (some, perhaps, by the idle timer first)
    assert store.undelivered_count() == 0
    assert m.emitter.stats.duplicates == len(transitions)
    rows = EventCollector.from_api(api_client).rows()
    assert len(rows) == len(transitions)
    assert {r.count for r in rows} == {1}


# -- the server validates as the API server does -----------------------------------------------
def _built(name: str = "trainer-0.1", **changes: Any) -> Any:
    event = build_event(
        ObjectReference(kind="Pod", name="trainer-0", namespace="ml", uid="pod-a"),
        type="Normal",
        reason="Running",
        note="running",
        reporting_controller="pod-controller",
        reporting_instance="pod-controller-node-a",
        now=EPOCH,
    )
    return attrs.evolve(event, name=name, **changes)


@pytest.mark.parametrize(
    ("changes", "refusal"),
    [
        ({"name": "p" * 240 + ".18ecca50d8f34000"}, "metadata.name"),
        ({"name": "Trainer-0.1"}, "metadata.name"),
        ({"note": "n" * 1025}, "note: Too long"),
        ({"note": "é" * 513}, "note: Too long"),  # 1026 bytes in 513 characters
        ({"reporting_controller": ""}, "reportingController: Required"),
        ({"reporting_controller": "pod controller"}, "reportingController: Invalid"),
        ({"reporting_instance": "i" * 129}, "reportingInstance: Too long"),
        ({"action": ""}, "action: Required"),
        ({"reason": ""}, "reason: Required"),
        ({"type": "Info"}, "type: Unsupported"),
        ({"regarding": ObjectReference(kind="Pod")}, "regarding: Required"),
        ({"series": EventSeries(1, EPOCH)}, "series.count"),
    ],
)
def test_the_server_refuses_what_the_api_server_refuses(
    server: FakeApiServer, api_client: Any, changes: dict[str, Any], refusal: str
) -> None:
    sink = ApiEventSink(api_client)
    with pytest.raises(Rejected) as refused:
        sink.create(_built(**changes))
    assert refused.value.status == 422
    assert refusal in str(refused.value)
    assert server.events == {}


def test_a_patch_of_an_unknown_event_is_404_and_series_merge_strategically(
    server: FakeApiServer, api_client: Any
) -> None:
    sink = ApiEventSink(api_client)
    event = _built()
    with pytest.raises(NotFound):
        sink.patch(event, {"series": {"count": 2, "lastObservedTime": "2026-11-30T10:00:00Z"}})
    sink.create(event)
    sink.patch(event, {"series": {"count": 2, "lastObservedTime": "2026-11-30T10:00:05.000000Z"}})
    reply = sink.patch(event, {"series": {"count": 7}})  # merged into the stored series
    assert reply is not None
    assert reply.series == EventSeries(7, EPOCH + timedelta(seconds=5))
    with pytest.raises(Rejected) as refused:  # the merge would leave an invalid series
        sink.patch(event, {"series": {"count": 1}})
    assert refused.value.status == 422
    sink.patch(event, {"series": None})  # null deletes
    assert "series" not in server.events[("ml", event.name)]


def test_strategic_merge_of_maps_and_nulls() -> None:
    stored = {"series": {"count": 2, "lastObservedTime": "t1"}, "note": "n"}
    assert strategic_merge(stored, {"series": {"count": 3}}) == {
        "series": {"count": 3, "lastObservedTime": "t1"},
        "note": "n",
    }
    assert strategic_merge(stored, {"series": None}) == {"note": "n"}
    assert stored["series"] == {"count": 2, "lastObservedTime": "t1"}  # not changed in place


def test_an_event_of_a_long_named_object_is_accepted(
    server: FakeApiServer, make: Callable[..., Made], api_client: Any
) -> None:
    """On the old ``<name>.<hex nanos>`` the server answered 422 and the Event was lost."""
    long_pod = ObjectRef("Pod", "ml", "p" * 240, "pod-long")
    m = make()
    m.emitter.emit(transition(ref=long_pod))
    sent(m)
    assert server.refused == []
    [stored] = server.events.values()
    assert uuid.UUID(stored["metadata"]["name"])
    assert stored["regarding"]["name"] == "p" * 240
    assert (m.emitter.stats.created, m.emitter.stats.rejected) == (1, 0)
    assert EventCollector.from_api(api_client).rows("pod-long")[0].name == "p" * 240


def test_the_resolved_uid_and_resource_version_reach_the_api(
    server: FakeApiServer, make: Callable[..., Made], api_client: Any
) -> None:
    """``kubectl describe`` finds Events by the object's uid: a NodeClaim's Event carries
    the uid the host resolved, not the store's ``<pod uid>-claim``."""
    claim = ObjectRef("NodeClaim", "", "ml-trainer-0", "pod-a-claim")
    real = {claim: ("0e8c2b44-claim-real", "77"), POD: ("pod-a", "41")}
    m = make(resolve=real.get)
    m.emitter.emit(transition(ref=claim)._replace(machine="nodeclaim", reason="Bound"))
    m.emitter.emit(transition())
    sent(m)
    by_kind = {e["regarding"]["kind"]: e["regarding"] for e in server.events.values()}
    assert by_kind["NodeClaim"]["uid"] == "0e8c2b44-claim-real"
    assert by_kind["NodeClaim"]["resourceVersion"] == "77"
    assert "namespace" not in by_kind["NodeClaim"]
    assert by_kind["Pod"]["resourceVersion"] == "41"
    assert [r.reason for r in EventCollector.from_api(api_client).rows("0e8c2b44-claim-real")] == [
        "Bound"
    ]
    assert server.refused == []


def test_a_failing_object_does_not_delay_another_over_http(
    server: FakeApiServer, make: Callable[..., Made]
) -> None:
    """Every request for A's Event is cut off (12 tries, 50 ms apart); B's Event, emitted
    just after, reaches the server while A is still being retried."""
    stuck = ObjectRef("Pod", "ml", "stuck-0", "pod-s")
    server.fail_when(
        lambda r: isinstance(r.body, dict) and r.body["regarding"]["name"] == "stuck-0",
        *["drop"] * 12,
    )
    m = make(sleep=None, retry_interval=0.05)
    m.emitter.emit(transition(ref=stuck))
    emitted_b = time.monotonic()
    m.emitter.emit(transition())
    sent(m)
    arrivals = {(r.body["regarding"]["name"], r.arrived) for r in server.requests}
    b_arrived = min(t for name, t in arrivals if name == "trainer-0")
    a_last = max(t for name, t in arrivals if name == "stuck-0")
    assert b_arrived - emitted_b < 0.3
    assert b_arrived < a_last
    assert [r.body["regarding"]["name"] for r in server.requests].count("stuck-0") == 12
    stats = m.emitter.stats
    assert (stats.created, stats.gave_up) == (1, 1)
