"""The Grafana dashboard and the Prometheus alert rules under docs/operating use only metrics
the library exports: each name is declared in ``METRICS`` and appears in a real exposition."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml  # type: ignore[import-untyped]

pytest.importorskip("prometheus_client")

from prometheus_client import CollectorRegistry, generate_latest

from lifecycle import MemoryEmitter, SQLiteStore
from lifecycle.telemetry.prometheus import METRICS, PrometheusTelemetry
from lifecycle.trace import read_trace, replay

DOCS = Path(__file__).resolve().parents[2] / "docs" / "operating"
NAME = re.compile(r"\blifecycle_[a-z_]+")
SUFFIXES = ("_bucket", "_count", "_sum")


def dashboard_exprs() -> list[str]:
    dashboard = json.loads((DOCS / "dashboard.json").read_text())
    return [t["expr"] for p in dashboard["panels"] for t in p["targets"]]


def alert_rules() -> list[dict[str, object]]:
    rules = yaml.safe_load((DOCS / "alerts.yml").read_text())
    return [r for g in rules["groups"] for r in g["rules"]]


def declared(name: str) -> bool:
    base = name.removeprefix("lifecycle_")
    for suffix in SUFFIXES:
        if (
            base.endswith(suffix)
            and METRICS.get(base.removesuffix(suffix), ("",))[0] == "histogram"
        ):
            return True
    return base in METRICS


def test_every_referenced_metric_is_declared() -> None:
    exprs = dashboard_exprs() + [str(r["expr"]) for r in alert_rules()]
    names = {n for e in exprs for n in NAME.findall(e)}
    assert len(names) >= 10
    assert not [n for n in names if not declared(n)]


def test_every_referenced_metric_is_in_a_real_exposition(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    metrics = PrometheusTelemetry(registry)
    store = SQLiteStore(tmp_path / "s.db")
    metrics.watch(store, MemoryEmitter())
    trace = Path(__file__).resolve().parents[2] / "examples" / "traces" / "faults.jsonl"
    replay(read_trace(trace), store, [MemoryEmitter()], telemetry=metrics)
    exposed = set(NAME.findall(generate_latest(registry).decode()))
    referenced = {n for e in dashboard_exprs() for n in NAME.findall(e)}
    referenced |= {n for r in alert_rules() for n in NAME.findall(str(r["expr"]))}
    # a family with no sample yet (no Kubernetes emitter, no rewinds) still has its HELP line
    assert referenced - exposed == set()
    store.close()


def test_the_alert_rules_have_the_shape_prometheus_loads() -> None:
    for rule in alert_rules():
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}
        assert re.fullmatch(r"Lifecycle[A-Za-z]+", str(rule["alert"]))
        assert isinstance(rule["labels"], dict)
        assert rule["labels"]["severity"] in (
            "warning",
            "critical",
        )
        assert "summary" in rule["annotations"]  # type: ignore[operator]
        assert str(rule["expr"]).count("(") == str(rule["expr"]).count(")")


def test_the_dashboard_is_a_grafana_dashboard() -> None:
    dashboard = json.loads((DOCS / "dashboard.json").read_text())
    assert dashboard["uid"]
    assert dashboard["panels"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert panel["datasource"]["type"] == "prometheus"
        assert panel["targets"]
