"""A real scrape: prometheus_client's HTTP exposition on a loopback port, a runner driven
through bundled traces with faults, the endpoint read over HTTP and parsed with the client's
own parser, and every metric checked against what the run did."""

from __future__ import annotations

import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

prometheus_client = pytest.importorskip("prometheus_client")

from prometheus_client import CollectorRegistry, start_http_server  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from lifecycle import MemoryEmitter, ObjectRef, Runner, SQLiteStore  # noqa: E402
from lifecycle.machines.pod import CreateRequested  # noqa: E402
from lifecycle.telemetry.prometheus import METRICS, PrometheusTelemetry  # noqa: E402
from lifecycle.testing.fakes import FailingEmitter  # noqa: E402
from lifecycle.trace import read_trace, replay  # noqa: E402

from ..conftest import t  # noqa: E402

TRACES = Path(__file__).resolve().parents[2] / "examples" / "traces"

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture
def endpoint() -> Iterator[tuple[PrometheusTelemetry, str]]:
    registry = CollectorRegistry()
    metrics = PrometheusTelemetry(registry)
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    port = server.server_address[1]
    try:
        yield metrics, f"http://127.0.0.1:{port}/metrics"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=10) as reply:  # loopback only
        text = reply.read().decode()
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum over every sample of ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= set(ls))


def test_a_scrape_counts_what_the_faults_trace_did(
    endpoint: tuple[PrometheusTelemetry, str], tmp_path: Path
) -> None:
    metrics, url = endpoint
    store = SQLiteStore(tmp_path / "s.db")
    events = MemoryEmitter()
    metrics.watch(store)
    results = replay(
        read_trace(TRACES / "faults.jsonl"), store, [events], telemetry=metrics, dry_run=False
    )
    samples = scrape(url)
    flips = Counter((e.machine, e.source, e.target, e.type.value) for e in events.events)
    for (machine, source, target, kind), n in flips.items():
        got = value(
            samples, "lifecycle_transitions_total", machine=machine, to=target, type=kind,
            **{"from": source},
        )  # fmt: skip
        assert got == n, (machine, source, target)
    assert total(samples, "lifecycle_transitions_total") == len(events.events)
    written = [r for r in results if r.error is not None]
    assert total(samples, "lifecycle_observations_total", outcome="failed") == len(written)
    retried = sum(r.attempts - 1 for r in results)
    assert total(samples, "lifecycle_write_retries_total") == retried > 0
    assert total(samples, "lifecycle_write_conflicts_total", machine="pod") == retried
    assert value(samples, "lifecycle_outbox_undelivered", store="sqlite") == 0
    commits = value(
        samples, "lifecycle_store_operation_duration_seconds_count", store="sqlite",
        operation="commit",
    )  # fmt: skip
    assert commits >= len(results)
    store.close()


def test_fallback_warnings_are_counted_by_machine_and_reason(
    endpoint: tuple[PrometheusTelemetry, str],
) -> None:
    metrics, url = endpoint
    events = MemoryEmitter()
    from lifecycle import MemoryStore

    results = replay(
        read_trace(TRACES / "certification-fallback-then-transition.jsonl"),
        MemoryStore(),
        [events],
        telemetry=metrics,
    )
    sent = Counter(
        (t.machine, t.reason) for r in results for t in r.all_transitions() if t.fallback
    )
    assert sent, "the trace sends fallback Warnings"
    samples = scrape(url)
    for (machine, reason), n in sent.items():
        assert (
            value(samples, "lifecycle_fallback_warnings_total", machine=machine, reason=reason) == n
        )


def test_outbox_depth_before_and_after_redelivery(
    endpoint: tuple[PrometheusTelemetry, str], tmp_path: Path
) -> None:
    metrics, url = endpoint
    store = SQLiteStore(tmp_path / "s.db")
    failing = FailingEmitter(failures=10**6)
    runner = Runner(store, [failing], telemetry=metrics)
    metrics.watch(runner)
    for i in range(3):
        runner.observe(ObjectRef("Pod", "ml", f"p{i}", uid=f"u{i}"), CreateRequested(at=t()))
    before = scrape(url)
    # three Pods and their NodeClaims: each an event the emitter refused
    assert value(before, "lifecycle_outbox_undelivered", store="sqlite") == 6
    assert value(before, "lifecycle_outbox_oldest_age_seconds", store="sqlite") > 0
    assert value(before, "lifecycle_emitter_failures_total", emitter="FailingEmitter") == 6
    failing.arm(0)
    assert runner.redeliver() == 6
    after = scrape(url)
    assert value(after, "lifecycle_outbox_undelivered", store="sqlite") == 0
    assert value(after, "lifecycle_outbox_oldest_age_seconds", store="sqlite") == 0
    assert value(after, "lifecycle_redelivered_total") == 6
    assert value(after, "lifecycle_emitter_sends_total", emitter="FailingEmitter") == 12
    store.close()


def test_no_label_names_an_object(endpoint: tuple[PrometheusTelemetry, str]) -> None:
    """Bounded cardinality: no uid, name or namespace is ever a label value."""
    metrics, url = endpoint
    runner = Runner(telemetry=metrics)
    metrics.watch(runner)
    for i in range(20):
        runner.observe(
            ObjectRef("Pod", f"ns{i}", f"pod{i}", uid=f"uid{i}"), CreateRequested(at=t())
        )
    samples = scrape(url)
    values = {v for _, labels in samples for _, v in labels}
    assert not any(v.startswith(("uid", "pod", "ns")) and v[-1].isdigit() for v in values)
    names = {n for n, _ in samples}
    for name in names:
        base = name.removeprefix("lifecycle_")
        for suffix in ("_bucket", "_count", "_sum", "_created"):
            base = base.removesuffix(suffix)
        assert base in METRICS or f"{base}_total" in METRICS or base + "_total" in METRICS, name


def test_a_prefix_and_buckets_are_the_hosts() -> None:
    registry = CollectorRegistry()
    PrometheusTelemetry(registry, prefix="ctl", buckets=(0.5, 0.1))
    names = {f.name for f in registry.collect()}
    assert "ctl_observations" in names
    assert not any(n.startswith("lifecycle") for n in names)
    for bad in ("", "9x", "a-b"):
        with pytest.raises(ValueError, match="prefix"):
            PrometheusTelemetry(None, prefix=bad)
    with pytest.raises(ValueError, match="buckets"):
        PrometheusTelemetry(None, buckets=(0.0,))


def test_kubernetes_answers_already_delivered_reused_and_gone_are_counted(
    endpoint: tuple[PrometheusTelemetry, str],
) -> None:
    """Every answer of the Events API is in a metric (issue 34): an Event already there with
    the same content, an id handed out again (a new Event under another name), a namespace
    gone."""
    from datetime import UTC, datetime

    from lifecycle import EventType, Transition
    from lifecycle.emitters.kubernetes import KubernetesEmitter, MemoryEventSink, NotFound

    metrics, url = endpoint
    sink = MemoryEventSink()
    ref = ObjectRef("Pod", "ml", "trainer-0", "pod-a")
    at = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
    old = Transition(ref, "pod", "", "Running", "Running", EventType.NORMAL, "a", 3, at)
    new = old._replace(reason="Failed", target="Failed", type=EventType.WARNING, message="b")
    emitters = [KubernetesEmitter(sink, hostname=h, timers=False) for h in ("a", "b")]
    metrics.watch(*emitters)
    try:
        for e, t in ((emitters[0], old), (emitters[1], old), (emitters[1], new)):
            e.deliver(t, lambda t, o: None)
            assert e.flush(10)
        sink.fail_next(NotFound('namespaces "gone" not found'))
        emitters[1].deliver(old._replace(version=4), lambda t, o: None)
        assert emitters[1].flush(10)
        samples = scrape(url)
    finally:
        for e in emitters:
            e.close(2)
    events = "lifecycle_kubernetes_events_total"
    assert value(samples, events, result="created") == 2
    assert value(samples, events, result="already_delivered") == 1
    assert value(samples, events, result="reused_ids") == 1
    gone = value(
        samples, "lifecycle_emitter_dropped_total", emitter="KubernetesEmitter", reason="gone"
    )
    assert gone == 1
