"""Every metric of issue 19, each a ratio to a floor or a peer measured in the same run:
``make bench`` (or ``--quick``, the < 1 min smoke run CI does).

    python -m benchmarks.run [--quick] [--only SUITE ...] [--out benchmarks/latest.json]
    python -m benchmarks.run --only cycle pg_commit --merge [--why TEXT]

``--merge`` puts the suites run into the existing ``--out`` file instead of rewriting it: their
rows replaced, the rest kept, the partial run recorded (``benchmarks.merge``).

Contenders run interleaved in chunks in this one process (``benchmarks.fair``): CPU time for
pure work, wall time for durable writes, the same chunks and rounds for everyone. Each row of
``latest.json`` is a ratio's median over rounds with its range, its target, and whether the
median meets it; ``docs/performance.md`` explains every floor. Nothing here is asserted by the
test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from . import (
    acked_delivery,
    cached_poll,
    cycle,
    durable,
    hot_path,
    import_time,
    k8s_content,
    peer_observe,
    peers,
    pure,
    replay,
    sqlite_cycle_writes,
    telemetry_cost,
    tricks,
)
from .fair import Metric
from .merge import merge

ROOT = Path(__file__).resolve().parent.parent


def _postgres(quick: bool) -> dict[str, Metric]:
    from . import postgres_floor  # a throwaway server from the PostgreSQL binaries

    found = postgres_floor.run(quick=quick, trips=True)
    trips = found.pop("pg_round_trips")
    out: dict[str, Metric] = {
        "pg_change_round_trips_cached": {
            "ratio": trips["observe_existing_cached"],
            "range": [trips["observe_existing_cached"]] * 2,
            "target": "<= 1",
            "met": trips["observe_existing_cached"] <= 1,
            "unit": "round trips",
            "what": "round trips per Runner.observe changing a stored object with the status "
            "cache, counted on the pool's only connection (the delivered-marks ride in front "
            "of the commit)",
            "note": ", ".join(f"{k} {v:.2f}" for k, v in trips.items()),
        }
    }
    for name, m in found.items():
        r = m["ratio"]
        row: Metric = {"ratio": r["median"], "range": [r["min"], r["max"]],
                       "target": m["target"], "what": name}  # fmt: skip
        if "value_us" in m:
            cached = " with the status cache" if "cached" in name else ""
            row.update(ours=m["value_us"], baseline=m["floor_us"], unit="us/obs",
                       what="PostgreSQL Runner.observe ÷ one-row INSERT floor (autocommit), "
                       f"{name.split('_')[2]} object{cached}; wall time")  # fmt: skip
            row["met"] = row["ratio"] <= float(m["target"].split()[1])
            if cached:
                row["note"] = (
                    "one round trip (pg_change_round_trips_cached); what is left is the "
                    "commit's own work -- a status UPDATE, a journal and an outbox INSERT and a "
                    "NOTIFY in one transaction -- against a one-row INSERT"
                )
        else:
            rate = m["throughput"]
            row.update(ours=rate, baseline=m["floor_throughput"], unit="obs/s",
                       what="PostgreSQL observe_many(500) obs/s (ratio: ÷ hand-written grouped "
                       "binary COPY floor); target on the throughput",
                       note=f"throughput range {m['throughput_range'][0]:.0f}-"
                       f"{m['throughput_range'][1]:.0f} obs/s; client CPU "
                       f"{m['cpu_ms_per_batch']:.0f} ms per batch against the floor's "
                       f"{m['floor_cpu_ms_per_batch']:.0f}: the protocol's work per item "
                       "(decide, stamp, encode)")  # fmt: skip
            row["met"] = rate >= 30_000
        out[name] = row
    return out


def _pg_notify(quick: bool) -> dict[str, Metric]:
    from . import pg_notify  # a throwaway durable server

    return pg_notify.suite(quick)


def _pg_commit(quick: bool) -> dict[str, Metric]:
    from . import pg_commit  # a throwaway server

    return pg_commit.suite(quick)


def _pg_replicas(quick: bool) -> dict[str, Metric]:
    from . import pg_replicas  # a throwaway server and writer processes

    return pg_replicas.suite(quick)


SUITES: dict[str, Callable[[bool], dict[str, Metric]]] = {
    "apply": pure.apply_suite,
    "peers": peer_observe.suite,  # issue 35: the peers against Runner.observe and the kernel
    "observe": pure.observe_suite,
    "hot_path": hot_path.suite,  # the same floors, per step (apply, observe, store)
    "memory": pure.memory_suite,
    "sqlite": durable.single_suite,
    "group": durable.group_suite,
    "existing": durable.existing_suite,
    "eventsourcing": durable.eventsourcing_suite,
    "replay": replay.replay_suite,
    "scaling": pure.scaling_suite,
    "telemetry": telemetry_cost.suite,  # issue 25: what metrics and traces cost a runner
    "postgres": _postgres,
    # acknowledged Kubernetes delivery ÷ fire-and-forget: SQLite FULL; PostgreSQL too unless
    # --quick (a server takes seconds to start)
    "acked": lambda quick: acked_delivery.suite(quick, postgres=not quick),
    "k8s_content": k8s_content.suite,  # issue 34: the content check on Event delivery
    "startup": import_time.suite,  # fresh interpreters: import lifecycle, the CLI
    # issue 26: an unchanged poll with the status cache; PostgreSQL too unless --quick
    "cached_poll": lambda quick: cached_poll.suite(quick, postgres=not quick),
    "pg_replicas": lambda quick: _pg_replicas(quick),  # 1 and 4 writer processes
    "pg_notify": _pg_notify,  # issue 34: every write notifying, on ÷ off
    "pg_commit": _pg_commit,  # issue 37: a change ÷ the one-row INSERT; round trips
    # issue 26: peak RSS at 1 M lines on 100 k objects in flight
    "replay_wide_rss": replay.wide_rss_suite,
    # issue 37: a poll cycle of 10 000 Pods (2 % changing) ÷ hand-written one-statement floors
    "cycle": lambda quick: cycle.suite(quick, postgres=not quick),
    # issue 37: a cycle's changes on SQLite, schema 5 ÷ as schema 4 wrote them (ADR 0169)
    "sqlite_cycle_writes": sqlite_cycle_writes.suite,
    # issue 36: each hand-built result or status, plain ÷ by hand (ADR 0154)
    "tricks": tricks.suite,
}
#: what --quick leaves out (a PostgreSQL server takes seconds to start)
NOT_QUICK = {"postgres", "pg_replicas", "pg_notify", "pg_commit"}


def environment() -> dict[str, Any]:
    return {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "peers": {
            d: peers.version(d)
            for d in ("transitions", "python-statemachine", "eventsourcing", "orjson")
        },
    }


def run(quick: bool, only: set[str] | None) -> dict[str, Any]:
    results: dict[str, Metric] = {}
    took: dict[str, float] = {}
    for name, suite in SUITES.items():
        if (only is not None and name not in only) or (only is None and quick and
                                                       name in NOT_QUICK):  # fmt: skip
            continue
        start = time.perf_counter()
        rows = suite(quick)
        for row in rows.values():
            row["suite"] = name  # what --merge replaces
        results.update(rows)
        took[name] = round(time.perf_counter() - start, 1)
        print(f"  {name}: {took[name]} s", file=sys.stderr, flush=True)
    env = environment()
    env["seconds"] = took
    env["quick"] = quick
    return {"environment": env, "metrics": results}


def show(results: dict[str, Metric]) -> str:
    rows = [f"{'metric':<46} {'ratio':>8} {'range':>17}  {'target':<8} {'met':<4} ours / base"]
    for name, m in results.items():
        lo, hi = m["range"]
        met = {True: "yes", False: "NO", None: ""}[m["met"]]
        sides = ""
        if "ours" in m:
            sides = f"{m['ours']:.4g}" + (f" / {m['baseline']:.4g}" if "baseline" in m else "")
            sides += f" {m.get('unit', '')}"
        rows.append(f"{name:<46} {m['ratio']:>8.3g} {f'[{lo:.3g}, {hi:.3g}]':>17}  "
                    f"{m['target']:<8} {met:<4} {sides}")  # fmt: skip
    return "\n".join(rows)


def unexplained(results: dict[str, Metric]) -> list[str]:
    """The rows that miss their target and carry no ``reason``."""
    return [name for name, m in results.items() if m.get("met") is False and not m.get("reason")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run, under a minute")
    parser.add_argument("--only", nargs="*", choices=list(SUITES))
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "latest.json"))
    parser.add_argument(
        "--merge",
        action="store_true",
        help="replace only the --only suites' rows of the --out file, keep the others",
    )
    parser.add_argument("--why", default="", help="with --merge: why the partial run was made")
    args = parser.parse_args(argv)
    out = Path(args.out)
    before: dict[str, Any] | None = None
    if args.merge:
        if not args.only:
            parser.error("--merge needs --only SUITE ...")
        if out.exists():
            before = json.loads(out.read_text(encoding="utf-8"))
            if bool(before["environment"].get("quick")) != args.quick:
                parser.error(f"--merge: {out} is {'not ' * args.quick}a --quick run's file")
    found = run(args.quick, set(args.only) if args.only else None)
    print(show(found["metrics"]))
    for name, m in found["metrics"].items():
        if m.get("reason"):
            print(f"  {name}: {m['reason']}")
    missing = unexplained(found["metrics"])
    if missing:
        print(f"unmet, without a reason: {', '.join(missing)}", file=sys.stderr)
    if before is not None:
        found = merge(before, found, args.only, args.why)
        dropped = found["environment"]["partial_runs"][-1].get("dropped", [])
        if dropped:
            print(f"dropped (no longer produced): {', '.join(dropped)}", file=sys.stderr)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(found, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
