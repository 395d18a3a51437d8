"""Replicas on one PostgreSQL server (issue 26): how committed observations per second grow
from 1 to 4 writer processes, against how the server's own floor grows on the same server in
the same run.

    python -m benchmarks.pg_replicas [--quick]

Contenders, each a cell of ``benchmarks.store_throughput`` (writer processes started together
behind a barrier, each on its own objects, the sum of their commits in the timed window):

- **floor**: a one-row ``INSERT`` in autocommit per write (one round trip, one flush);
- **floor, notifying**: the same ``INSERT`` sending a ``NOTIFY`` in its transaction, as every
  write of the store does (ADR 0143): what the server's notification lock -- held by a
  notifying commit until it is flushed, so notifying commits cannot share a flush -- costs
  any writer, ours or not (issue 37: the share of the scaling that is the server's);
- **observe**: ``Runner.observe`` flipping a stored Pod, no status cache;
- **observe, cached**: the same with ``cache=4096``, so each commit also ``NOTIFY``s
  (ADR 0134) and a change is one round trip;
- **dispatch**: ``Dispatcher.dispatch_once`` in a loop, each replica its own store handle and
  owner, draining an outbox filled beforehand (one event per commit, over 400 objects).

Cells run in rounds, in a balanced order (``benchmarks.fair.order``). Rows: ours' scaling
(4 writers ÷ 1) ÷ the floor's
scaling, per round (target >= 0.8); the cached store's 4-writer rate ÷ the uncached one's
(what NOTIFY's database-wide commit lock costs with 4 writers, and what the saved read gains);
the dispatchers' events/s with 4 replicas ÷ with 1 (target >= 2, issue 37).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import uuid

from tests.stores.pg import PgServer

from .fair import Metric, explain, metric, order
from .store_throughput import cell, fill_outbox

CONTENDERS = ("floor", "floor_notify", "observe", "observe_cached", "dispatch")
#: what each dispatch cell drains: one undelivered event per (object, version); the cell's
#: window ends at the last delivery, so a drained outbox does not cap the rate
OUTBOX = (400, 40)


def suite(quick: bool) -> dict[str, Metric]:
    seconds, rounds = (1.5, 2) if quick else (3.0, 3)
    ctx = multiprocessing.get_context("spawn")
    server = PgServer(durable=True)
    server.start()
    rates: dict[tuple[str, int], list[float]] = {(c, n): [] for c in CONTENDERS for n in (1, 4)}
    try:
        cells = list(rates)
        for r in range(rounds):
            for implementation, writers in order(cells, r):
                target = server.url(schema=f"r_{implementation}_{writers}_{uuid.uuid4().hex[:6]}")
                if implementation == "dispatch":
                    fill_outbox(target, *OUTBOX)
                rate, _ = cell(ctx, implementation, "postgres", writers, seconds, target)
                rates[(implementation, writers)].append(rate)
    finally:
        server.destroy()

    def scaling(c: str) -> list[float]:
        return [a / b for a, b in zip(rates[(c, 4)], rates[(c, 1)], strict=True)]

    floor = scaling("floor")
    notifying = scaling("floor_notify")
    server_share = statistics.median(notifying) / statistics.median(floor)
    out: dict[str, Metric] = {}
    for c, label in (("observe", "uncached"), ("observe_cached", "cached")):
        ours = scaling(c)
        out[f"pg_replicas_4_{label}_scaling_vs_floor"] = explain(metric(
            [o / f for o, f in zip(ours, floor, strict=True)],
            ">= 0.8",
            what=f"Runner.observe ({label}) obs/s at 4 writer processes ÷ at 1, over the same "
            "for one-row INSERTs on the same server; wall time, each writer its own objects",
            note=f"scaling: ours {statistics.median(ours):.2f}, "
            f"floor {statistics.median(floor):.2f}; the floor's INSERTs share flushes, ours "
            f"are CPU work too (the client's protocol, the server's larger statement) on "
            f"{os.cpu_count()} CPUs"
            + ("; NOTIFY serialises the flushes" if c != "observe" else ""),
        ), f"4 writers ÷ 1: ours {statistics.median(ours):.2f}, the plain INSERT floor "
           f"{statistics.median(floor):.2f}, the same INSERT sending a NOTIFY (as every store "
           f"write does) {statistics.median(notifying):.2f}: the server's notification lock "
           f"alone leaves {server_share:.2f} of the floor's scaling; "
           f"{statistics.median(ours) / statistics.median(notifying):.2f} of the notifying "
           f"floor's is ours; {os.cpu_count()} CPUs")  # fmt: skip
    out["pg_replicas_4_floor_notify_scaling_vs_floor"] = metric(
        [n / f for n, f in zip(notifying, floor, strict=True)],
        "info",
        what="the INSERT floor sending a NOTIFY in each transaction: its 4 ÷ 1 scaling over "
        "the plain floor's -- what PostgreSQL's notification lock (held through the commit's "
        "flush) takes from any notifying writer: the server's share",
        note=f"scaling: notifying floor {statistics.median(notifying):.2f}, floor "
        f"{statistics.median(floor):.2f}",
    )
    ours = scaling("observe")
    out["pg_replicas_4_uncached_scaling_vs_floor_notify"] = explain(metric(
        [o / n for o, n in zip(ours, notifying, strict=True)],
        ">= 0.8",
        what="Runner.observe (uncached) 4 ÷ 1 scaling over the notifying floor's: what is "
        "ours once the server's notification lock is counted on both sides",
    ), f"4 writers ÷ 1: ours {statistics.median(ours):.2f}, the notifying floor "
       f"{statistics.median(notifying):.2f}; obs/s at 1 writer: ours "
       f"{statistics.median(rates[('observe', 1)]):.0f}, the floor's "
       f"{statistics.median(rates[('floor_notify', 1)]):.0f}: each of ours is more CPU on "
       f"{os.cpu_count()} CPUs shared by writers and server")  # fmt: skip
    dispatch = scaling("dispatch")

    one, four = (statistics.median(rates[("dispatch", k)]) for k in (1, 4))
    out["pg_dispatch_4_vs_1"] = explain(metric(
        dispatch,
        ">= 2",
        what="Dispatcher events/s with 4 replica processes (each its own store handle and "
        "owner) ÷ with 1, draining one outbox on one server; wall time",
        note=f"events/s: 1 replica {statistics.median(rates[('dispatch', 1)]):.0f}, "
        f"4 replicas {statistics.median(rates[('dispatch', 4)]):.0f}"
        + f" (each drains {OUTBOX[0] * OUTBOX[1]} events; its clock stops at the last)"
        + f"; {os.cpu_count()} CPUs: a drain is CPU work (the claim's scan, delivery, the "
        "mark), so it cannot scale past the cores, where the INSERT floor scales by sharing "
        "flushes",
    ), f"events/s: 1 replica {one:.0f}, 4 replicas {four:.0f}; the client processes and the "
       f"server share {os.cpu_count()} CPUs, so a drain that is CPU work on both sides "
       f"scales at most {os.cpu_count()}x; the INSERT floor's writers scale "
       f"{statistics.median(floor):.2f}x by sharing flushes")  # fmt: skip
    out["pg_replicas_4_cached_vs_uncached"] = metric(
        [a / b for a, b in zip(rates[("observe_cached", 4)], rates[("observe", 4)], strict=True)],
        "info",
        what="4 writers: obs/s with the status cache (NOTIFY on each commit, no read before it) "
        "÷ without",
        note=f"obs/s: cached {statistics.median(rates[('observe_cached', 4)]):.0f}, uncached "
        f"{statistics.median(rates[('observe', 4)]):.0f}, floor "
        f"{statistics.median(rates[('floor', 4)]):.0f}",
    )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    for name, m in suite(args.quick).items():
        lo, hi = m["range"]
        note = m.get("note", "")
        print(f"{name:44} {m['ratio']:6.2f} [{lo:.2f}-{hi:.2f}] target {m['target']}  {note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
