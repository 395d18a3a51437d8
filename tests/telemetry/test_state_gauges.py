"""The gauges of objects per machine and state and of the oldest in each state (issue 38,
ADR 0159), read from a real scrape; and the ``LifecycleObjectsStuck`` rule of
``docs/operating/alerts.yml`` evaluated on that scrape: it fires for an object stuck in a state
that is not terminal, and not for a terminal one as old, nor for a fresh one."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest
import yaml  # type: ignore[import-untyped]

pytest.importorskip("prometheus_client")

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from lifecycle import MemoryEmitter, MemoryStore, ObjectRef, Runner, SQLiteStore
from lifecycle.machines import pod
from lifecycle.telemetry.prometheus import PrometheusTelemetry

from ..stores.helpers import t

ALERTS = Path(__file__).resolve().parents[2] / "docs" / "operating" / "alerts.yml"
STUCK = re.compile(r'max by \(([a-z, ]+)\) \((lifecycle_[a-z_]+)\{terminal="false"\}\) > (\d+)')


def ref(uid: str) -> ObjectRef:
    return ObjectRef("Pod", "ml", f"p-{uid}", uid)


def samples(registry: CollectorRegistry, name: str) -> dict[tuple[str, str, str], float]:
    text = generate_latest(registry).decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name:
                out[(s.labels["machine"], s.labels["state"], s.labels["terminal"])] = s.value
    return out


def stuck_rule() -> tuple[str, float]:
    rules = yaml.safe_load(ALERTS.read_text())
    (rule,) = [
        r for g in rules["groups"] for r in g["rules"] if r["alert"] == "LifecycleObjectsStuck"
    ]
    found = STUCK.fullmatch(str(rule["expr"]))
    assert found is not None, rule["expr"]
    return found.group(2), float(found.group(3))


def firing(registry: CollectorRegistry) -> set[tuple[str, str]]:
    """The (machine, state) series the stuck rule's expression selects above its threshold."""
    metric, threshold = stuck_rule()
    return {
        (machine, state)
        for (machine, state, terminal), age in samples(registry, metric).items()
        if terminal == "false" and age > threshold and machine == "pod"
    }


def test_gauges_and_the_stuck_alert_on_a_real_scrape(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    registry = CollectorRegistry()
    metrics = PrometheusTelemetry(registry)
    runner = Runner(store, [MemoryEmitter()], telemetry=metrics)
    metrics.watch(runner)
    for uid in ("a", "b", "c"):
        runner.observe(ref(uid), pod.CreateRequested(at=t(0)))
    runner.observe(ref("c"), pod.ProvisionRejected(at=t(1), error="no capacity"))
    pods = {k: v for k, v in samples(registry, "lifecycle_objects").items() if k[0] == "pod"}
    assert pods == {  # (the pod machine's linked NodeClaims are counted under theirs)
        ("pod", "Provisioning", "false"): 2,
        ("pod", "ProvisionFailed", "true"): 1,
    }
    assert firing(registry) == set()  # all fresh
    claims = samples(registry, "lifecycle_objects")
    assert {k for k in claims if k[0] == "nodeclaim"}  # every machine in the store is counted
    with sqlite3.connect(store.path) as db:  # a and c entered their states two hours ago
        db.execute("UPDATE objects SET entered = entered - 7200 WHERE uid IN ('a', 'c')")
    ages = samples(registry, "lifecycle_state_oldest_age_seconds")
    assert 7200 <= ages[("pod", "Provisioning", "false")] < 7300
    assert 7200 <= ages[("pod", "ProvisionFailed", "true")] < 7300
    assert firing(registry) == {("pod", "Provisioning")}  # not the terminal one
    runner.observe(ref("a"), pod.ProvisionRejected(at=t(2), error="no capacity"))
    ages = samples(registry, "lifecycle_state_oldest_age_seconds")
    assert ages[("pod", "Provisioning", "false")] < 60  # only b is left there
    assert firing(registry) == set()
    store.close()


def test_a_store_watched_alone_has_no_terminal_flag() -> None:
    store = MemoryStore()
    registry = CollectorRegistry()
    metrics = PrometheusTelemetry(registry)
    metrics.watch(store)
    Runner(store, [MemoryEmitter()]).observe(ref("a"), pod.CreateRequested(at=t(0)))
    assert samples(registry, "lifecycle_objects")[("pod", "Provisioning", "")] == 1
