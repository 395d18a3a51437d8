"""Every comparison, side by side in one run: ``make bench`` (or ``--quick`` for a smoke run).

    python -m benchmarks.run [--quick] [--only NAME ...] [--out benchmarks/latest.json]

Prints a table and writes ``latest.json``: metric -> {value, unit, baseline, ratio, target}.
Timings are the best of several repeats (the machines are shared and noisy); nothing here is
asserted by the test suite.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lifecycle import MachineRegistry, MemoryStore, ObjectRef, Runner, SQLiteStore

from . import baselines, gen_trace
from .workload import BENCH, BENCH_ATTRS, OBSERVATIONS, SlotObject, dict_step, stream

ROOT = Path(__file__).resolve().parent.parent
AT = datetime(2026, 11, 30, tzinfo=UTC)
Metric = dict[str, Any]


def best(fn: Callable[[], float], repeats: int) -> float:
    """The smallest of ``repeats`` runs of ``fn`` (which returns seconds)."""
    results = []
    for _ in range(repeats):
        gc.collect()
        results.append(fn())
    return min(results)


def bench_runner(objects: int = 1) -> Runner:
    return Runner(MemoryStore(), [], machines=MachineRegistry([BENCH]), links=())


# -- pure apply ------------------------------------------------------------------------------
def apply_costs(objects: int, per_object: int, repeats: int) -> dict[str, float]:
    """Seconds per observation for ours and each baseline, over the same stream."""
    events = stream(objects, per_object)
    n = len(events)
    obs = {e: cls(at=AT) for e, cls in OBSERVATIONS.items()}
    ours_stream = [(i, obs[e]) for i, e in events]

    def ours(machine: Any = BENCH) -> float:
        statuses = [machine.initial(ObjectRef("Bench", "", "x", "x"))] * objects
        apply, flips = machine.apply, machine.flips
        start = time.perf_counter()
        for i, o in ours_stream:
            before = statuses[i]
            after = apply(before, o)
            flips(before, after)
            statuses[i] = after
        return time.perf_counter() - start

    def limit() -> float:
        objs = [SlotObject() for _ in range(objects)]
        start = time.perf_counter()
        for i, e in events:
            dict_step(objs[i], e)
        return time.perf_counter() - start

    def transitions() -> float:
        _, models = baselines.transitions_machine(objects)
        start = time.perf_counter()
        for i, e in events:
            models[i].trigger(e)
        return time.perf_counter() - start

    def statemachine() -> float:
        sms = baselines.statemachine_objects(objects)
        start = time.perf_counter()
        for i, e in events:
            sms[i].send(e)
        return time.perf_counter() - start

    return {
        "ours": best(ours, repeats) / n,
        "ours_attrs": best(lambda: ours(BENCH_ATTRS), repeats) / n,
        "dict": best(limit, repeats) / n,
        "transitions": best(transitions, max(1, repeats // 2)) / n,
        "statemachine": best(statemachine, max(1, repeats // 2)) / n,
    }


# -- memory ----------------------------------------------------------------------------------
def memory_per_object(objects: int) -> float:
    create = OBSERVATIONS["create"]
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    runner = bench_runner()
    for i in range(objects):
        runner.observe(ObjectRef("Bench", "bench", f"obj-{i}", f"u{i:08d}"), create(at=AT))
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert runner.store is not None
    return (after - before) / objects


# -- durable commits -------------------------------------------------------------------------
def sqlite_commit(commits: int, repeats: int, synchronous: str = "FULL") -> dict[str, float]:
    """Seconds per durable commit of one observation: ours vs eventsourcing (both WAL, at
    ``synchronous``)."""
    obs = [OBSERVATIONS["create"](at=AT), OBSERVATIONS["provisioned"](at=AT)]

    def ours() -> float:
        with tempfile.TemporaryDirectory() as tmp:
            store = SQLiteStore(Path(tmp) / "ours.db", synchronous=synchronous)
            runner = Runner(store, [], machines=MachineRegistry([BENCH]), links=())
            refs = [ObjectRef("Bench", "bench", f"o{i}", f"u{i}") for i in range(commits)]
            start = time.perf_counter()
            for ref in refs:
                runner.observe(ref, obs[0])
            took = time.perf_counter() - start
            store.close()
            return took

    def theirs() -> float:
        with tempfile.TemporaryDirectory() as tmp:
            save = baselines.eventsourcing_recorder(Path(tmp) / "es.db", synchronous)
            names = [f"u{i}" for i in range(commits)]
            start = time.perf_counter()
            for name in names:
                save(name, 1)
            return time.perf_counter() - start

    return {"ours": best(ours, repeats) / commits, "eventsourcing": best(theirs, repeats) / commits}


def sqlite_batched(batches: int, size: int, repeats: int) -> float | None:
    """Observations per second through ``Runner.observe_many`` on SQLite, batches of ``size``."""
    if not hasattr(Runner, "observe_many"):
        return None
    create = OBSERVATIONS["create"](at=AT)

    def run() -> float:
        with tempfile.TemporaryDirectory() as tmp:
            store = SQLiteStore(Path(tmp) / "batch.db", synchronous="FULL")
            runner = Runner(store, [], machines=MachineRegistry([BENCH]), links=())
            items = [
                [(ObjectRef("Bench", "b", f"o{b}-{i}", f"u{b}-{i}"), create) for i in range(size)]
                for b in range(batches)
            ]
            start = time.perf_counter()
            for batch in items:
                runner.observe_many(batch)
            took = time.perf_counter() - start
            store.close()
            return took

    return batches * size / best(run, repeats)


# -- replay ----------------------------------------------------------------------------------
def replay_rate(observations: int, repeats: int) -> float:
    """Observations per second of the whole command (interpreter start included), the best
    of ``repeats`` runs like every other timing here."""
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.jsonl"
        gen_trace.write(str(trace), observations)
        cmd = [sys.executable, "-m", "lifecycle.cli", "replay", str(trace), "--store",
               "memory://", "--format", "jsonl"]  # fmt: skip

        def run() -> float:
            start = time.perf_counter()
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env={**os.environ})
            return time.perf_counter() - start

        return observations / best(run, repeats)


# -- scaling ---------------------------------------------------------------------------------
def runner_cost(objects: int, per_object: int) -> float:
    """Seconds per observation through Runner.observe on the memory store."""
    events = stream(objects, per_object)
    obs = {e: cls(at=AT) for e, cls in OBSERVATIONS.items()}
    refs = [ObjectRef("Bench", "bench", f"obj-{i}", f"u{i:08d}") for i in range(objects)]
    work = [(refs[i], obs[e]) for i, e in events]
    runner = bench_runner()
    observe = runner.observe
    gc.collect()
    start = time.perf_counter()
    for ref, o in work:
        observe(ref, o)
    return (time.perf_counter() - start) / len(work)


# -- the run ---------------------------------------------------------------------------------
def metric(value: float, unit: str, baseline: float | None, ratio: float | None,
           target: str) -> Metric:  # fmt: skip
    return {"value": value, "unit": unit, "baseline": baseline, "ratio": ratio, "target": target}


def run(quick: bool, only: set[str] | None) -> dict[str, Metric]:
    out: dict[str, Metric] = {}

    def want(name: str) -> bool:
        return only is None or name in only

    if want("apply"):
        objects, per = (500, 40) if quick else (5000, 40)
        c = apply_costs(objects, per, 3 if quick else 7)
        ns = c["ours"] * 1e9
        out["apply_vs_dict"] = metric(ns, "ns/obs", c["dict"] * 1e9, c["ours"] / c["dict"], "<= 5")
        out["apply_attrs_vs_dict"] = metric(
            c["ours_attrs"] * 1e9,
            "ns/obs (attrs status record)",
            c["dict"] * 1e9,
            c["ours_attrs"] / c["dict"],
            "info",
        )
        out["apply_vs_transitions"] = metric(
            ns, "ns/obs", c["transitions"] * 1e9, c["transitions"] / c["ours"], ">= 10"
        )
        out["apply_vs_statemachine"] = metric(
            ns, "ns/obs", c["statemachine"] * 1e9, c["statemachine"] / c["ours"], ">= 50"
        )
    if want("memory"):
        objects = 10_000 if quick else 100_000
        b = memory_per_object(objects)
        out["memory_per_object_bytes"] = metric(b, f"bytes/object at {objects}", None, None,
                                                "<= 1024")  # fmt: skip
    if want("sqlite"):
        for name, synchronous, note, target in (
            ("sqlite_commit_vs_eventsourcing", "FULL", "", ">= 3"),
            ("sqlite_normal_vs_eventsourcing", "NORMAL", ": no fsync per commit", "info"),
        ):
            c = sqlite_commit(100 if quick else 1000, 1 if quick else 3, synchronous)
            out[name] = metric(
                c["ours"] * 1e6,
                f"us/commit (WAL, synchronous={synchronous}{note})",
                c["eventsourcing"] * 1e6,
                c["eventsourcing"] / c["ours"],
                target,
            )
        rate = sqlite_batched(4 if quick else 40, 500, 1 if quick else 3)
        out["sqlite_batched_obs_per_s"] = metric(
            rate if rate is not None else float("nan"),
            "obs/s (batches of 500, FULL)",
            None,
            None,
            ">= 20000",
        )
    if want("replay"):
        n = 50_000 if quick else 1_000_000
        runs = 1 if quick else 2
        unit = f"obs/s ({n} obs, memory://, best of {runs})"
        out["replay_obs_per_s"] = metric(replay_rate(n, runs), unit, None, None, ">= 100000")
    if want("scaling"):
        small = min(runner_cost(1_000, 20) for _ in range(3))
        big_objects = 10_000 if quick else 100_000
        big = runner_cost(big_objects, 20 if not quick else 5)
        out["scaling_100k_vs_1k"] = metric(
            big * 1e9, f"ns/obs at {big_objects} objects", small * 1e9, big / small, "<= 1.5"
        )
    return out


def show(results: dict[str, Metric]) -> str:
    rows = [f"{'metric':<32} {'value':>14} {'baseline':>14} {'ratio':>8}  target   unit"]
    for name, m in results.items():
        base = "" if m["baseline"] is None else f"{m['baseline']:.1f}"
        ratio = "" if m["ratio"] is None else f"{m['ratio']:.2f}"
        rows.append(f"{name:<32} {m['value']:>14.1f} {base:>14} {ratio:>8}  {m['target']:<8} "
                    f"{m['unit']}")  # fmt: skip
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a smoke run, under a minute")
    parser.add_argument("--only", nargs="*", choices=["apply", "memory", "sqlite", "replay",
                                                       "scaling"])  # fmt: skip
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "latest.json"))
    args = parser.parse_args(argv)
    results = run(args.quick, set(args.only) if args.only else None)
    print(show(results))
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
