"""The rows of issue 37's targets carry the issue's thresholds and, when unmet, a reason built
from the run's own figures. No benchmark runs: the replicas suite gets made-up cells, so only
its row building is exercised."""

from __future__ import annotations

from typing import Any

import pytest
from benchmarks import pg_replicas

#: made-up obs/s (events/s for dispatch) per (contender, writers)
RATES = {
    ("floor", 1): 1000.0,
    ("floor", 4): 2400.0,
    ("floor_notify", 1): 900.0,
    ("floor_notify", 4): 1200.0,
    ("observe", 1): 300.0,
    ("observe", 4): 420.0,
    ("observe_cached", 1): 320.0,
    ("observe_cached", 4): 400.0,
    ("dispatch", 1): 2500.0,
    ("dispatch", 4): 2600.0,
}


class _Server:
    def __init__(self, durable: bool = False) -> None:
        self.destroyed = False

    def start(self) -> None:
        pass

    def url(self, schema: str = "") -> str:
        return f"postgresql://fake/{schema}"

    def destroy(self) -> None:
        self.destroyed = True


def _cell(ctx: Any, implementation: str, kind: str, writers: int, *_: Any) -> tuple[float, Any]:
    return RATES[(implementation, writers)], None


def test_the_replica_rows_carry_the_issue_targets_and_reasons_from_their_own_rates(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pg_replicas, "PgServer", _Server)
    monkeypatch.setattr(pg_replicas, "cell", _cell)
    monkeypatch.setattr(pg_replicas, "fill_outbox", lambda *a: None)
    rows = pg_replicas.suite(quick=True)
    dispatch = rows["pg_dispatch_4_vs_1"]
    assert dispatch["target"] == ">= 2"  # issue 37 (was >= 3)
    assert dispatch["ratio"] == pytest.approx(2600 / 2500)
    assert dispatch["met"] is False
    assert "1 replica 2500, 4 replicas 2600" in dispatch["reason"]
    assert dispatch["reason_measured"] is True
    uncached = rows["pg_replicas_4_uncached_scaling_vs_floor"]
    assert uncached["target"] == ">= 0.8"
    assert uncached["ratio"] == pytest.approx((420 / 300) / (2400 / 1000))
    assert "ours 1.40, the plain INSERT floor 2.40" in uncached["reason"]
    assert "a NOTIFY (as every store write does) 1.33" in uncached["reason"]
    assert "notification lock alone leaves 0.56 of the floor's scaling" in uncached["reason"]
    assert "pg_replicas_4_cached_scaling_vs_floor" in rows
    over_notifying = rows["pg_replicas_4_uncached_scaling_vs_floor_notify"]
    assert over_notifying["met"] is True  # 1.40 ÷ 1.33: met, so no reason
    assert "reason" not in over_notifying
    assert [name for name, m in rows.items() if m["met"] is False and "reason" not in m] == []


def test_the_peer_rows_read_as_the_speed_up_with_the_issue_targets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from benchmarks import peer_observe

    cost = {"observe": 10e-6, "kernel": 2e-6, "transitions": 12e-6}

    def timed(contenders: dict[str, Any], rounds: int, clock: Any) -> dict[str, list[float]]:
        return {
            name: [cost.get(name, 25e-6 if "2.6" in name else 150e-6)] * rounds
            for name in contenders
        }

    monkeypatch.setattr(peer_observe, "interleave", timed)
    rows = peer_observe.suite(quick=True)
    transitions = rows["peer_transitions_vs_observe"]
    assert transitions["target"] == ">= 3"
    assert transitions["ratio"] == pytest.approx(1.2)  # theirs ÷ ours: the speed-up
    assert transitions["met"] is False
    assert "the target needs observe at 4000 ns, 2.50x less than now" in transitions["reason"]
    assert "of which the kernel (apply + flips) 2000 ns" in transitions["reason"]
    older = [name for name in rows if name.startswith("peer_statemachine_2.6")]
    if older:  # python-statemachine 2.6 fetched beside the installed one
        row = rows[older[0].replace("_vs_kernel", "_vs_observe")]
        assert row["target"] == ">= 5"
        assert row["ratio"] == pytest.approx(2.5)
    assert all(m["target"] == "info" for name, m in rows.items() if "statemachine_3" in name)
