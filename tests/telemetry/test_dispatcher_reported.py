"""A :class:`~lifecycle.Dispatcher` reports what a runner's ``redeliver`` reports (issue 25):
each round is a ``"redeliver"`` operation whose ``end`` holds the writes its link intents made,
its claims and marks are store calls, the rows it claimed are ``redelivered``, and each hand-off
to an emitter is ``emitted`` -- so the counts of a fleet do not depend on which replica
delivered an event, and an outbox left by a crash is visible in the metrics as it drains."""

from __future__ import annotations

from pathlib import Path

import pytest

from lifecycle import Dispatcher, MemoryEmitter, Runner, SQLiteStore
from lifecycle.links import claim_ref
from lifecycle.machines import pod
from lifecycle.testing import RecordingTelemetry
from lifecycle.testing.fakes import FailingEmitter, FaultyStore

from ..conftest import pod_ref, t


def crashed_with_work_left(path: Path) -> int:
    """A runner that committed a pod whose events it could not send and whose NodeClaim write
    failed, then went away: its outbox holds both, leased to nobody (its lease is 0 s).
    Returns the events left undelivered."""
    faulty = FaultyStore(SQLiteStore(path, lease_seconds=0))
    ref = pod_ref()
    faulty.inject(claim_ref(ref).uid, "write-error", times=100)
    gone = FailingEmitter(failures=100)
    result = Runner(faulty, [gone]).observe(ref, pod.CreateRequested(at=t(0)))
    assert result.committed
    assert result.transitions
    assert any(r.error is not None for r in result.linked)
    return len(gone.refused)


def test_a_dispatch_round_reports_its_claims_deliveries_and_intent_writes(
    tmp_path: Path,
) -> None:
    left = crashed_with_work_left(tmp_path / "s.db")
    recording = RecordingTelemetry()
    events = MemoryEmitter()
    dispatcher = Dispatcher(
        SQLiteStore(tmp_path / "s.db", owner="d"), [events], telemetry=recording
    )
    delivered = dispatcher.drain()
    assert delivered >= left
    assert len(events.events) >= left
    assert not recording.open, "every round that began ended"

    opened = {token: op for op, _, token in recording.of("begin")}
    rounds = [
        (token, observed)
        for token, observed, _ in recording.of("end")
        if opened.get(token) == "redeliver"
    ]
    assert rounds, "no round was reported"
    written = [seen.machine for _, observed in rounds for seen in observed]
    assert "nodeclaim" in written, "the link intent's write is an observation of the round"

    calls = {(store_, op) for store_, op, *_ in recording.of("store_call")}
    assert ("sqlite", "claim_undelivered") in calls
    assert ("sqlite", "mark_delivered") in calls
    claimed = sum(len(rows) for (rows,) in recording.of("redelivered"))
    assert claimed >= left + 1, "the claimed events and the intent are redelivered rows"
    sent = [t for name, t, _, error in recording.of("emitted") if error is None]
    assert {t.id for t in events.events} <= {t.id for t in sent}


def test_without_telemetry_nothing_is_wrapped(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    dispatcher = Dispatcher(store, [MemoryEmitter()])
    assert dispatcher.store is store
    assert dispatcher.telemetry is None
    assert "_dispatch" not in vars(dispatcher)


def test_a_raising_telemetry_loses_no_delivery(tmp_path: Path) -> None:
    class Broken(RecordingTelemetry):
        def end(self, *args: object) -> None:
            raise RuntimeError("broken telemetry")

        def store_call(self, *args: object) -> None:
            raise RuntimeError("broken telemetry")

    left = crashed_with_work_left(tmp_path / "s.db")
    events = MemoryEmitter()
    store = SQLiteStore(tmp_path / "s.db", owner="d")
    dispatcher = Dispatcher(store, [events], telemetry=Broken())
    assert dispatcher.drain() >= left
    assert len(events.events) >= left
    assert store.outbox_summary().undelivered == 0
    assert dispatcher.telemetry is not None
    assert dispatcher.telemetry.failures


def test_prometheus_watching_a_dispatcher_sees_its_outbox_drain(tmp_path: Path) -> None:
    pytest.importorskip("prometheus_client")
    from prometheus_client import CollectorRegistry
    from prometheus_client.exposition import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from lifecycle.telemetry.prometheus import PrometheusTelemetry

    def gauge(registry: CollectorRegistry, name: str) -> float:
        text = generate_latest(registry).decode()
        return sum(
            s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if s.name == name
        )

    left = crashed_with_work_left(tmp_path / "s.db")
    registry = CollectorRegistry()
    metrics = PrometheusTelemetry(registry)
    dispatcher = Dispatcher(
        SQLiteStore(tmp_path / "s.db", owner="d"), [MemoryEmitter()], telemetry=metrics
    )
    # a runner on the same database, watched too: its outbox is the dispatcher's, counted once
    beside = Runner(SQLiteStore(tmp_path / "s.db", owner="r"), [], telemetry=metrics)
    metrics.watch(beside, dispatcher)
    summary = SQLiteStore(tmp_path / "s.db").outbox_summary()
    assert gauge(registry, "lifecycle_outbox_undelivered") == summary.undelivered
    assert gauge(registry, "lifecycle_outbox_undelivered") >= left + 1
    dispatcher.drain()
    assert gauge(registry, "lifecycle_outbox_undelivered") == 0
    assert gauge(registry, "lifecycle_redelivered_total") >= left + 1
    assert gauge(registry, "lifecycle_observations_total") >= 1  # the intent's write
    assert gauge(registry, "lifecycle_emitter_sends_total") >= left


def test_an_idle_poll_is_only_its_claim(tmp_path: Path) -> None:
    """Dispatcher.run polls an empty outbox every second: that is a claim, not a round (no
    span a second per replica, no duration histogram of empty rounds)."""
    recording = RecordingTelemetry()
    dispatcher = Dispatcher(SQLiteStore(tmp_path / "s.db"), [MemoryEmitter()], telemetry=recording)
    assert dispatcher.dispatch_once() == 0
    assert not recording.of("begin")
    assert [op for _, op, *_ in recording.of("store_call")] == ["claim_undelivered"]


def test_a_store_already_reporting_is_not_wrapped_again(tmp_path: Path) -> None:
    left = crashed_with_work_left(tmp_path / "s.db")
    recording = RecordingTelemetry()
    runner = Runner(SQLiteStore(tmp_path / "s.db", owner="d"), [], telemetry=recording)
    events = MemoryEmitter()
    dispatcher = Dispatcher(runner.store, [events], runner=runner, telemetry=recording)
    assert dispatcher.store is runner.store
    dispatcher.drain()
    assert events.events, "the claimed events were delivered"
    sent = {t.id for _, t, _, error in recording.of("emitted") if error is None}
    assert {t.id for t in events.events} <= sent, "its hand-offs are reported all the same"
    claims = [f for f in recording.of("store_call") if f[1] == "claim_undelivered"]
    rows = [len(rows) for (rows,) in recording.of("redelivered")]
    assert sum(rows) == left + 1, "each claimed row once: the events and the intent"
    assert {f[0] for f in claims} == {"sqlite"}, "labelled by the store, not the wrapper"


def test_a_refused_schema_is_counted_once() -> None:
    """A dispatcher's first round builds its runner, whose schema check refuses: the check is
    the one refusal, not also the round that raised it."""
    pytest.importorskip("prometheus_client")
    from lifecycle import SchemaRefused
    from lifecycle.telemetry.prometheus import PrometheusTelemetry

    metrics = PrometheusTelemetry(None)
    refused = SchemaRefused(("pod v9: 1 record",))
    round_ = metrics.begin("redeliver", "")
    metrics.end(metrics.begin("check_schema", ""), (), refused)
    metrics.end(round_, (), refused)
    found = {s.name: s.value for family in metrics.collect() for s in family.samples}
    assert found["lifecycle_schema_refusals_total"] == 1
