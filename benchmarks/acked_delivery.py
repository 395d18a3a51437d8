"""What acknowledged delivery costs (issue 28, ADR 0121): ``Runner.observe`` with the
Kubernetes emitter acknowledging each Event when the API has it (outbox rows marked in
batches) ÷ the same with today's fire-and-forget (the row marked as soon as ``emit`` queued
the Event), on SQLite ``synchronous=FULL`` and on PostgreSQL.

    python -m benchmarks.acked_delivery [--quick] [--no-postgres]

Both contenders send to an in-memory API (``MemoryEventSink``), so the figure is the
library's own cost; each observe commits one new object (one Event). Interleaved chunks,
wall time (the commit's flush is the work), median ratio over rounds with its range.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # tests.stores.pg: the throwaway PostgreSQL server

from benchmarks.durable import OBS, Names, folder  # noqa: E402
from benchmarks.fair import WALL, Metric, interleave, metric, ratios  # noqa: E402
from benchmarks.workload import BENCH  # noqa: E402
from lifecycle import MachineRegistry, Runner, SQLiteStore, Transition  # noqa: E402
from lifecycle.emitters.kubernetes import KubernetesEmitter, MemoryEventSink  # noqa: E402

TARGET = "<= 1.05"


class FireAndForget:
    """Today's contract: ``emit`` queues the Event and returns; the row is marked at once."""

    def __init__(self, inner: KubernetesEmitter) -> None:
        self.inner = inner

    def emit(self, transition: Transition) -> None:
        self.inner.emit(transition)


def _emitter() -> KubernetesEmitter:
    return KubernetesEmitter(MemoryEventSink(), hostname="bench", timers=False)


def _contender(store: Any, emitter: Any, prefix: str, chunk: int) -> Callable[[], int]:
    runner = Runner(store, [emitter], machines=MachineRegistry([BENCH]), links=())
    names, create = Names(prefix), OBS["create"]

    def run() -> int:
        for ref in names.take(chunk):
            runner.observe(ref, create)
        return chunk

    return run


def _pair(stores: tuple[Any, Any], rounds: int, chunk: int, name: str) -> Metric:
    acked, today = _emitter(), _emitter()
    try:
        t = interleave(
            {
                "acked": _contender(stores[0], acked, "a", chunk),
                "today": _contender(stores[1], FireAndForget(today), "t", chunk),
            },
            rounds,
            WALL,
        )
    finally:
        acked.close(10.0)
        today.close(10.0)
    return metric(
        ratios(t["acked"], t["today"]),
        TARGET,
        ours=t["acked"],
        base=t["today"],
        unit="us/obs",
        what=f"{name}: Runner.observe (new object, one Event) with the Kubernetes emitter "
        "acknowledging delivery (marks batched) ÷ fire-and-forget (marked when queued); wall",
    )


def sqlite_row(quick: bool) -> Metric:
    rounds, chunk = (4, 20) if quick else (12, 50)
    with folder() as tmp:
        stores = (
            SQLiteStore(tmp / "acked.db", synchronous="FULL"),
            SQLiteStore(tmp / "today.db", synchronous="FULL"),
        )
        try:
            return _pair(stores, rounds, chunk, "SQLite FULL")
        finally:
            for s in stores:
                s.close()


def postgres_row(quick: bool) -> Metric:
    from tests.stores.pg import PgServer

    from lifecycle.stores.postgres import PostgresStore

    pg = PgServer(durable=True)
    try:
        pg.start()
        stores = (
            PostgresStore(pg.url(schema="acked")),
            PostgresStore(pg.url(schema="today")),
        )
        try:
            rounds, chunk = (3, 20) if quick else (9, 50)
            return _pair(stores, rounds, chunk, "PostgreSQL")
        finally:
            for s in stores:
                s.close()
    finally:
        pg.destroy()


def suite(quick: bool, postgres: bool = True) -> dict[str, Metric]:
    out = {"acked_delivery_sqlite_full_vs_fire_and_forget": sqlite_row(quick)}
    if postgres:
        out["acked_delivery_postgres_vs_fire_and_forget"] = postgres_row(quick)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args(argv)
    for name, m in suite(args.quick, not args.no_postgres).items():
        lo, hi = m["range"]
        print(
            f"{name:48} {m['ours']:8.1f} vs {m['baseline']:8.1f} us/obs  "
            f"ratio {m['ratio']:.3f} [{lo:.3f}..{hi:.3f}] target {m['target']} met={m['met']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
