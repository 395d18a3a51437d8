"""The cost of checking the store's identity in every PostgreSQL commit (ADR 0146), side by
side in one process.

    python -m benchmarks.pg_epoch_check [--rounds N] [--chunk N]

A throwaway PostgreSQL server (``tests.stores.pg``, ``synchronous_commit=off`` so the flush
does not drown the difference) holds two schemas. Two ``PostgresStore`` s commit alike
(``Runner.observe`` flipping a stored object between Running and Degraded: a load and a
commit each): **identity**, the store as shipped (each commit's epoch check compares the session's
setting with ``e:IDENTITY:TAG``, one ``to_regclass`` lookup), and **tag only**, the same
store with its statements rewritten to ADR 0068's check (``e:TAG``). Each round runs a chunk
of each in turn (the order alternates); reported: the median and range of the per-round
ratio identity ÷ tag only of wall time per observe (1.00: no cost).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.stores.pg import PgServer

from benchmarks.workload import BENCH, OBSERVATIONS
from lifecycle import MachineRegistry, ObjectRef, Runner
from lifecycle.stores import _pgsql
from lifecycle.stores.postgres import PostgresStore

AT = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


def tag_only(store: PostgresStore) -> PostgresStore:
    """``store`` with ADR 0068's epoch check: the identity taken out of every statement."""
    s = _pgsql.q(store.target.schema)
    identity = f"'e:' || {_pgsql.identity_sql(s)} || ':'"
    changed = []
    for name, value in list(vars(store._sql).items()):
        if isinstance(value, str) and identity in value:
            setattr(store._sql, name, value.replace(identity, "'e:'"))
            changed.append(name)
    assert {"epoch_ok", "epoch_verify", "commit"} <= set(changed), changed
    with store._pool.connection() as conn:  # the pooled session verifies again, old style
        conn.execute(store._sql.epoch_verify)
    return store


def flips(runner: Runner, ref: ObjectRef, n: int, start: int) -> float:
    began = time.perf_counter()
    for i in range(start, start + n):
        name = "degrade" if i % 2 else "recover"
        assert runner.observe(ref, OBSERVATIONS[name](at=AT + timedelta(seconds=i))).committed
    return (time.perf_counter() - began) / n


def measure(url: str, rounds: int, chunk: int) -> dict[str, float]:
    ours = PostgresStore(url + "?schema=identity", pool_size=1, synchronous_commit="off")
    old = tag_only(PostgresStore(url + "?schema=tagonly", pool_size=1, synchronous_commit="off"))
    ref = ObjectRef("Bench", "b", "bench-0", "bench-0")
    machines = MachineRegistry([BENCH])
    runners = {
        "identity": Runner(ours, [], machines=machines, links=()),
        "tag only": Runner(old, [], machines=machines, links=()),
    }
    for r in runners.values():  # to Running, where the flips start
        for name in ("create", "provisioned", "ready"):
            r.observe(ref, OBSERVATIONS[name](at=AT))
        flips(r, ref, chunk, 1)  # warm
    ratios = []
    for k in range(rounds):
        order = list(runners) if k % 2 == 0 else list(reversed(runners))
        took = {name: flips(runners[name], ref, chunk, 1 + (k + 1) * chunk) for name in order}
        ratios.append(took["identity"] / took["tag only"])
    ours.close()
    old.close()
    return {
        "median": statistics.median(ratios),
        "min": min(ratios),
        "max": max(ratios),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--chunk", type=int, default=100)
    args = parser.parse_args(argv)
    pg = PgServer()
    try:
        pg.start()
        r = measure(pg.url(), args.rounds, args.chunk)
    finally:
        pg.destroy()
    print(
        f"observe with the identity check ÷ tag only: median {r['median']:.3f} "
        f"[{r['min']:.3f}..{r['max']:.3f}] over {args.rounds} rounds of {args.chunk}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
