"""Properties of a reporting :class:`~lifecycle.Dispatcher` over generated rounds (issue 25).

A crashed runner leaves events and link intents in an SQLite outbox; a dispatcher then drains
it over rounds whose emitter refuses some hand-offs and whose store fails some intent writes.
The same scenario runs twice, without telemetry and with one (a recording double, Prometheus,
or one whose every call raises), and:

- telemetry changes nothing: each round's return, what reached the emitter, the outbox left
  and the statuses written are the same with it as without it;
- a recording sees every round that claimed something begin and end, every hand-off once, and
  every claimed row as redelivered;
- Prometheus agrees with what happened, scraped after every round: sends and failures with the
  emitter's own record, redelivered rows with what the store handed out, the outbox gauge with
  the store's own summary;
- a raising telemetry is counted, never propagated.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lifecycle import Dispatcher, Runner, SQLiteStore, default_registry
from lifecycle.links import claim_ref
from lifecycle.machines import pod
from lifecycle.testing import RecordingTelemetry
from lifecycle.testing.fakes import FailingEmitter, FaultyStore

from ..conftest import pod_ref, t

prometheus_client = pytest.importorskip("prometheus_client")

from lifecycle.telemetry.prometheus import PrometheusTelemetry  # noqa: E402


class Raising(RecordingTelemetry):
    """A telemetry whose every call raises (after recording it)."""

    def begin(self, operation: str, machine: str) -> object:
        super().begin(operation, machine)
        raise RuntimeError("telemetry down")

    def end(self, *args: Any) -> None:
        raise RuntimeError("telemetry down")

    def store_call(self, *args: Any) -> None:
        raise RuntimeError("telemetry down")

    def emitted(self, *args: Any) -> None:
        raise RuntimeError("telemetry down")

    def redelivered(self, *args: Any) -> None:
        raise RuntimeError("telemetry down")


class Claims(FaultyStore):
    """A faulty store that also keeps how many rows each claim handed out and how many calls
    of each timed kind it took (the ground truth the reports are checked against)."""

    def __init__(self, inner: SQLiteStore) -> None:
        super().__init__(inner)
        self.sqlite = inner
        self.claimed: list[int] = []
        self.calls: Counter[str] = Counter()

    def load(self, *args: Any) -> Any:
        self.calls["load"] += 1
        return super().load(*args)

    def commit(self, *args: Any) -> Any:
        self.calls["commit"] += 1
        return super().commit(*args)

    def mark_delivered(self, ids: Any) -> None:
        self.calls["mark_delivered"] += 1
        super().mark_delivered(ids)

    def claim_undelivered(self, limit: int = 1000) -> list[Any]:
        self.calls["claim_undelivered"] += 1
        rows = super().claim_undelivered(limit)
        self.claimed.append(len(rows))
        return rows


@dataclass(frozen=True)
class Scenario:
    #: per pod: how many NodeClaim writes fail, first in the crashed runner, then in rounds
    intent_failures: tuple[int, ...]
    #: per round: how many hand-offs the dispatcher's emitter refuses
    refusals: tuple[int, ...]
    batch: int


scenarios = st.builds(
    Scenario,
    intent_failures=st.lists(st.integers(0, 3), min_size=1, max_size=3).map(tuple),
    refusals=st.lists(st.integers(0, 4), min_size=1, max_size=6).map(tuple),
    batch=st.integers(1, 8),
)


@dataclass
class World:
    """What one run did, telemetry aside."""

    returns: list[int] = field(default_factory=list)
    delivered: list[tuple[str, str, str]] = field(default_factory=list)
    refused: int = 0
    undelivered: int = 0
    statuses: dict[str, str] = field(default_factory=dict)


class Ticks:
    """The stores' clock: a second passes at every reading, so a lease of 0 s has always
    expired by the next claim, however fast the machine (the real clock can read the same
    value twice, and then which rows a round claims depends on the machine's speed)."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def _crashed(path: Path, scenario: Scenario, clock: Ticks) -> list[Any]:
    """A runner that committed its pods, sent none of their events and failed the NodeClaim
    writes the scenario says, then went away (its lease is 0 s)."""
    faulty = FaultyStore(SQLiteStore(path, lease_seconds=0, synchronous="OFF", clock=clock))
    refs = [pod_ref(f"p{i}", f"pod-{i}") for i in range(len(scenario.intent_failures))]
    for ref, n in zip(refs, scenario.intent_failures, strict=True):
        if n:
            faulty.inject(claim_ref(ref).uid, "write-error", times=n)
    runner = Runner(faulty, [FailingEmitter(failures=10**6)])
    for ref in refs:
        assert runner.observe(ref, pod.CreateRequested(at=t(0))).committed
    faulty.close()
    return refs


def _key(event: Any) -> tuple[str, str, str]:
    return (event.ref.uid, event.reason, event.target)


def _scrape(registry: Any) -> dict[str, float]:
    from prometheus_client.exposition import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    found: dict[str, float] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            found[sample.name] = found.get(sample.name, 0.0) + sample.value
    return found


def _run(folder: Path, scenario: Scenario, telemetry: Any, check: Any = None) -> World:
    path = folder / "s.db"
    clock = Ticks()
    refs = _crashed(path, scenario, clock)
    store = Claims(SQLiteStore(path, owner="d", lease_seconds=0, synchronous="OFF", clock=clock))
    for ref, n in zip(refs, scenario.intent_failures, strict=True):
        if n:  # the faults the crashed runner did not use up, now met by the rounds
            store.inject(claim_ref(ref).uid, "write-error", times=n)
    emitter = FailingEmitter(failures=0)
    dispatcher = Dispatcher(store, [emitter], batch=scenario.batch, telemetry=telemetry)
    world = World()
    for refusing in scenario.refusals:
        emitter.arm(refusing)
        world.returns.append(dispatcher.dispatch_once())
        if check is not None:
            check(dispatcher, store, emitter)
    summary = store.sqlite.outbox_summary()
    world.delivered = [_key(e) for e in emitter.events]
    world.refused = len(emitter.refused)
    world.undelivered = summary.undelivered
    machines = default_registry()
    for ref in refs:
        for target in (ref, claim_ref(ref)):
            record = store.sqlite.load(machines.for_kind(target.kind), target)
            world.statuses[target.uid] = "" if record is None else repr(record.status)
    if check is not None:
        check(dispatcher, store, emitter)
    store.close()
    return world


def _same(scenario: Scenario, telemetry: Any, check: Any = None) -> tuple[World, World]:
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        plain = _run(Path(a), scenario, None)
        reported = _run(Path(b), scenario, telemetry, check)
    assert reported == plain, "telemetry changed what the dispatcher did"
    return plain, reported


PROPERTY = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(scenarios)
def test_a_recording_sees_every_round_hand_off_and_claimed_row(scenario: Scenario) -> None:
    recording = RecordingTelemetry()
    claims: list[int] = []
    calls: Counter[str] = Counter()

    def check(dispatcher: Any, store: Claims, emitter: FailingEmitter) -> None:
        claims[:] = store.claimed
        calls.clear()
        calls.update(store.calls)
        assert not recording.open, "a round began and did not end"

    plain, _ = _same(scenario, recording, check)
    opened = {token: op for op, _, token in recording.of("begin")}
    assert set(opened.values()) <= {"redeliver", "check_schema"}
    rounds = [f for f in recording.of("end") if opened[f[0]] == "redeliver"]
    assert len(rounds) == sum(1 for n in claims if n), "one operation per round that claimed"
    rows = sum(len(r) for (r,) in recording.of("redelivered"))
    assert rows == sum(claims), "every claimed row is redelivered, once"
    handed = recording.of("emitted")
    assert [_key(f[1]) for f in handed if f[3] is None] == plain.delivered
    assert sum(1 for f in handed if f[3] is not None) == plain.refused
    ops = Counter(f[1] for f in recording.of("store_call"))
    assert ops == calls, "every store call is reported once, by its operation"
    written = [seen for _, observed, _ in rounds for seen in observed]
    intents = sum(1 for seen in written if seen.machine == "nodeclaim")
    pending = sum(1 for n in scenario.intent_failures if n)
    assert intents <= pending * (1 + max(scenario.intent_failures)), "only intents write"


@PROPERTY
@given(scenarios)
def test_prometheus_agrees_with_the_store_and_the_emitter_after_every_round(
    scenario: Scenario,
) -> None:
    registry = prometheus_client.CollectorRegistry()
    metrics = PrometheusTelemetry(registry)

    def check(dispatcher: Any, store: Claims, emitter: FailingEmitter) -> None:
        if dispatcher not in metrics._watched:
            metrics.watch(dispatcher)
        found = _scrape(registry)  # a labelled counter with no sample yet is absent: 0
        assert found.get("lifecycle_emitter_sends_total", 0) == len(emitter.events) + len(
            emitter.refused
        )
        assert found.get("lifecycle_emitter_failures_total", 0) == len(emitter.refused)
        assert found.get("lifecycle_redelivered_total", 0) == sum(store.claimed)
        assert found["lifecycle_outbox_undelivered"] == store.sqlite.outbox_summary().undelivered
        assert found["lifecycle_telemetry_failures_total"] == 0

    _same(scenario, metrics, check)


@PROPERTY
@given(scenarios)
def test_a_raising_telemetry_changes_nothing_and_is_counted(scenario: Scenario) -> None:
    raising = Raising()
    failures: Counter[str] = Counter()
    calls = [0]

    def check(dispatcher: Any, store: Claims, emitter: FailingEmitter) -> None:
        # the dispatcher's guard, and that of the runner applying its link intents
        guards = {id(g): g for g in (dispatcher.telemetry, dispatcher.runner.telemetry)}
        failures.clear()
        for guard in guards.values():
            failures.update(guard.failures)
        calls[0] = sum(store.calls.values())

    plain, _ = _same(scenario, raising, check)
    assert failures["store_call"] == calls[0], "each store call's report raised, caught"
    assert failures["emitted"] == len(plain.delivered) + plain.refused, "each hand-off's too"
