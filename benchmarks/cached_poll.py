"""An unchanged poll with the status cache (issue 26, ADR 0134), against the dict-lookup floor.

    python -m benchmarks.cached_poll [--quick] [--no-postgres]

The call a polling controller makes most: ``Runner.observe`` of an observation that changes
nothing, on an object the runner already serves. Contenders, interleaved in chunks in one
process (``benchmarks.fair``), CPU time of the calling thread:

- **floor**: ``dict.get`` of the object's record by uid -- what "decided in memory" costs at
  the least;
- ``Runner.observe`` on the memory store, on SQLite (``synchronous=NORMAL``) with and without
  ``cache=``, and on PostgreSQL with and without it (``--no-postgres`` leaves those out; their
  rows then use wall time, since an uncached poll waits on the server).

Rows: each poll ÷ the floor (target for the cached ones: ``<= 3``, the issue's; the
runner's own decision -- admit, apply, compare -- is most of a poll, so the memory store is
shown beside it), each cached poll ÷ the memory store's, and for PostgreSQL the round trips
per poll counted on the pool's connection (target 0 with the cache).
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lifecycle import MemoryStore, ObjectRef, Runner, SQLiteStore
from lifecycle.machines import pod

from .fair import CPU, WALL, Metric, explain, interleave, metric, ratios

AT_REF = ObjectRef("Pod", "ml", "poll-0", "poll-0")


def _poller(store: Any) -> Callable[[int], int]:
    """A chunk: ``n`` unchanged polls of one running pod."""
    from datetime import UTC, datetime

    at = datetime(2026, 12, 1, tzinfo=UTC)
    runner = Runner(store, [], links=())
    runner.observe(AT_REF, pod.CreateRequested(at=at))
    runner.observe(AT_REF, pod.ProvisionSucceeded(at=at, reserved=True, instance_id="i-1"))
    runner.observe(AT_REF, pod.InstanceRunning(at=at, instance_id="i-1"))
    poll = pod.InstanceRunning(at=at, instance_id="i-1")
    observe = runner.observe
    assert observe(AT_REF, poll).outcome.value == "unchanged"

    def chunk(n: int) -> int:
        for _ in range(n):
            observe(AT_REF, poll)
        return n

    return chunk


def _floor() -> Callable[[int], int]:
    records = {f"poll-{i}": (i, object()) for i in range(1000)}
    get = records.get

    def chunk(n: int) -> int:
        for _ in range(n):
            get("poll-0")
        return n

    return chunk


def suite(quick: bool, postgres: bool = True) -> dict[str, Metric]:
    rounds, chunk = (5, 500) if quick else (15, 2000)
    out: dict[str, Metric] = {}
    with tempfile.TemporaryDirectory() as tmp:
        stores: dict[str, Any] = {
            "memory": MemoryStore(),
            "sqlite": SQLiteStore(Path(tmp) / "plain.db", synchronous="NORMAL", cache=0),
            "sqlite_cached": SQLiteStore(Path(tmp) / "cached.db", synchronous="NORMAL", cache=1000),
        }
        pg = None
        if postgres:
            from tests.stores.pg import PgServer

            from lifecycle.stores.postgres import PostgresStore

            pg = PgServer()
            pg.start()
            stores["postgres"] = PostgresStore(pg.url(schema="plain"), pool_size=1, cache=0)
            cached = PostgresStore(pg.url(schema="cached"), pool_size=1, cache=1000)
            assert cached.settle_cache()
            stores["postgres_cached"] = cached
        try:
            floor = _floor()
            polls = {name: _poller(s) for name, s in stores.items()}
            contenders: dict[str, Callable[[], int]] = {"floor": lambda: floor(chunk)}
            for name, fn in polls.items():
                n = chunk if name != "postgres" else max(20, chunk // 20)
                contenders[name] = functools.partial(fn, n)
            clock = CPU if not postgres else WALL
            times = interleave(contenders, rounds, clock=clock)
            for name in polls:
                is_cached = name.endswith("_cached")
                out[f"poll_unchanged_{name}_vs_dict_floor"] = metric(
                    ratios(times[name], times["floor"]),
                    "<= 3" if is_cached else "info",
                    ours=times[name],
                    base=times["floor"],
                    unit="us/poll",
                    what=f"Runner.observe of an unchanged poll, {name.replace('_', ' ')} store "
                    f"÷ dict.get of the record ({'wall' if postgres else 'CPU'} time)",
                    note="the runner's own decision (admit, apply, compare) is most of a poll: "
                    "see poll_unchanged_memory_vs_dict_floor, the least a runner's poll costs"
                    if is_cached
                    else "",
                )
                if is_cached:  # the least a poll through a runner costs: the memory store's
                    us = {k: statistics.median(times[k]) * 1e6 for k in (name, "memory", "floor")}
                    explain(
                        out[f"poll_unchanged_{name}_vs_dict_floor"],
                        f"the same poll on the memory store (no store work: admit's checks, the "
                        f"machine's step, the runner's body, the Result) is {us['memory']:.2f} us, "
                        f"{us['memory'] / us['floor']:.0f}x the floor's dict.get "
                        f"({us['floor']:.3f} us) by itself; the {name.replace('_', ' ')} store's "
                        f"cached read adds {us[name] - us['memory']:.2f} us",
                    )
                    out[f"poll_unchanged_{name}_vs_memory_store"] = metric(
                        ratios(times[name], times["memory"]),
                        "info",
                        ours=times[name],
                        base=times["memory"],
                        unit="us/poll",
                        what=f"the same poll, {name.replace('_', ' ')} ÷ the memory store",
                    )
            if pg is not None:
                out["poll_unchanged_postgres_round_trips"] = _trips(
                    stores["postgres"], stores["postgres_cached"], polls
                )
        finally:
            for s in stores.values():
                s.close()
            if pg is not None:
                pg.destroy()
    return out


def _trips(plain: Any, cached: Any, polls: dict[str, Callable[[int], int]]) -> Metric:
    """Round trips per unchanged poll on each PostgreSQL store's only pooled connection."""
    from .postgres_floor import traced

    found = {}
    for name, store in (("postgres", plain), ("postgres_cached", cached)):
        with store._pool.connection() as conn:
            pass
        with traced(conn) as count:
            polls[name](50)
            found[name] = count() / 50
    return {
        "ratio": found["postgres_cached"],
        "range": [found["postgres_cached"], found["postgres_cached"]],
        "target": "<= 0",
        "met": found["postgres_cached"] == 0,
        "what": "round trips per unchanged poll with the cache "
        f"(without it: {found['postgres']:.2f})",
        "unit": "round trips",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    found = suite(args.quick, postgres=not args.no_postgres)
    if args.json:
        json.dump(found, sys.stdout, indent=2)
        return 0
    for name, m in found.items():
        lo, hi = m["range"]
        print(f"{name:52} {m['ratio']:7.2f} [{lo:.2f}-{hi:.2f}]  target {m['target']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
