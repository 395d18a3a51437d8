"""What every write notifying costs a PostgreSQL change (issue 34, ADR 0143).

    python -m benchmarks.pg_notify [--quick] [--synchronous-commit on|off] [--json]

Since migration 5 a trigger on ``objects`` sends a ``NOTIFY`` for every row any writer
writes, so a status cache never misses one. This measures its price on the writer: one
durable throwaway server (``fsync=on``), two schemas migrated alike, one with the trigger
disabled by hand (``off``), and on each an uncached ``PostgresStore`` at its defaults (one
pooled connection). Contenders, interleaved in chunks
in one process (``benchmarks.fair``, wall time: these are durable writes):

- ``Runner.observe`` changing a stored object (Running <-> Degraded: a load, then the
  one-statement commit), notify on and off;
- ``Runner.observe_many`` of 50 such changes (one ``commit_many`` statement: 50 rows, 50
  notifications), notify on and off;
- an A/A control: a second schema with notify on, against the first -- the ratio the noise
  alone makes.

The stores run at ``synchronous_commit=off`` (``--synchronous-commit on`` for durable
commits): the flush a durable commit waits for is the same with and without the trigger, and
on a loaded machine it swings by milliseconds between chunks, which would hide the trigger's
cost rather than measure it; without it the ratio is an upper bound of the durable one.

No handle listens: a notification is queued at commit whether or not anyone listens, and a
listener's work happens in another replica. Rows: each ``on ÷ off`` (target ``<= 1.05``)
and the control.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from .fair import WALL, Chunk, Metric, interleave, metric, ratios


def _backend_pid(side: Any) -> int:
    with side.store._pool.connection() as conn:  # the pool's only connection
        return int(conn.info.backend_pid)


def _cpu_clock(pids: list[int]) -> Callable[[], float]:
    """Seconds of CPU: this thread's, and the server backends' of ``pids``
    (``/proc/PID/schedstat``, nanoseconds on a CPU). Only the contender running uses its
    backend, so a chunk's difference is its own client and server work."""
    files = [Path(f"/proc/{pid}/schedstat") for pid in pids]

    def clock() -> float:
        server = sum(int(f.read_text().split()[0]) for f in files)
        return time.thread_time() + server / 1e9

    return clock


#: A loop of one-row commits run inside the server (a procedure may commit): the commit's
#: own cost, with no client, no network and no runner to dilute the trigger's share.
_LOOP = """
CREATE OR REPLACE PROCEDURE public.notify_bench(target text, n int) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        EXECUTE format('UPDATE %I.objects SET version = version + 1, updated_at = now() '
                       'WHERE uid = ''notify-bench''', target);
        COMMIT;
    END LOOP;
END $$"""


def _loops(
    url: str, schemas: list[str], n: int
) -> tuple[dict[str, Chunk], psycopg.Connection[Any]]:
    """A chunk per schema: ``n`` commits of one row by the server's own loop; and the pid of
    the connection running them."""
    conn = psycopg.connect(url, autocommit=True)
    conn.execute("SET synchronous_commit = off")
    conn.execute(_LOOP)
    for schema in schemas:
        conn.execute(
            f'INSERT INTO "{schema}".objects (uid, machine, kind, namespace, name, state, '
            "version, status) VALUES ('notify-bench', 'bench', 'Bench', 'b', 'notify-bench', "
            "'Running', 1, '{}')"
        )

    def loop(schema: str) -> Chunk:
        def chunk() -> int:
            conn.execute("CALL public.notify_bench(%s, %s)", (schema, n))
            return n

        return chunk

    chunks = {f"loop_{s}": loop(s) for s in schemas}
    return chunks, conn


def _chunk(work: Callable[[int], object], n: int) -> Chunk:
    def chunk() -> int:
        work(n)
        return n

    return chunk


def _disable(url: str, schema: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'ALTER TABLE "{schema}".objects DISABLE TRIGGER lifecycle_notify')


def suite(quick: bool, synchronous_commit: str = "off") -> dict[str, Metric]:
    from tests.stores.pg import PgServer

    from .postgres_floor import Ours

    # small chunks, many rounds: a burst of another process's load lands in few rounds, and
    # the median over rounds leaves it out
    rounds, chunk, batch = (11, 5, 50) if quick else (151, 5, 50)
    pg = PgServer(durable=True)
    sides: dict[str, Any] = {}
    cpu: dict[str, list[float]] = {}
    try:
        pg.start()
        url = pg.url()
        for name in ("on", "off", "on_again"):
            sides[name] = Ours(url, synchronous_commit, f"notify_{name}")
        _disable(url, "notify_off")
        for side in sides.values():
            side.prepare_existing(max(chunk, batch) * 2)
        pids = [_backend_pid(side) for side in sides.values()]
        # each kind in its own interleaving: a chunk always follows one of its own kind (a
        # 50-row batch before a single change would tilt the single changes' figures)
        groups = [
            {f"one_{name}": _chunk(side.observe_existing, chunk) for name, side in sides.items()},
            {
                f"many_{name}": _chunk(side.many_existing, batch)
                for name, side in sides.items()
                if name != "on_again"
            },
        ]
        times: dict[str, list[float]] = {}
        for group, n in zip(groups, (rounds, rounds // 3 + 1), strict=True):
            times.update(interleave(group, n, clock=WALL))
        loops, looping = _loops(url, [f"notify_{name}" for name in sides], 200)
        loop_pid = int(looping.info.backend_pid)
        if all(Path(f"/proc/{pid}/schedstat").exists() for pid in [*pids, loop_pid]):
            for group, n in zip(groups, (rounds, rounds // 3 + 1), strict=True):
                cpu.update(interleave(group, n, clock=_cpu_clock(pids)))
            cpu.update(interleave(loops, 3 * rounds // 5 + 1, clock=_cpu_clock([loop_pid])))
            looping.close()
    finally:
        for side in sides.values():
            side.close()
        pg.destroy()
    note = (
        "a trigger on objects notifies for every row any writer writes (ADR 0143); "
        "off: that trigger disabled by hand"
    )
    out: dict[str, Metric] = {}
    kinds = [("", times, "wall time")]
    if cpu:
        kinds.insert(0, ("cpu_", cpu, "CPU time of the client thread and its server backend"))
    for prefix, found, clock in kinds:
        target = "<= 1.05" if prefix == "cpu_" else "info"
        out[f"pg_change_{prefix}notify_on_vs_off"] = metric(
            ratios(found["one_on"], found["one_off"]),
            target,
            ours=found["one_on"],
            base=found["one_off"],
            unit="us/obs",
            what="PostgreSQL Runner.observe of a change, every write notifying ÷ no "
            f"notification (uncached handle at the defaults; synchronous_commit="
            f"{synchronous_commit}; {clock})",
            note=note,
        )
        out[f"pg_change_many_{prefix}notify_on_vs_off"] = metric(
            ratios(found["many_on"], found["many_off"]),
            target,
            ours=found["many_on"],
            base=found["many_off"],
            unit="us/obs",
            what=f"the same for Runner.observe_many of {batch} changes (one statement, "
            f"{batch} notifications; {clock})",
            note=note,
        )
        out[f"pg_change_{prefix}notify_control_aa"] = metric(
            ratios(found["one_on_again"], found["one_on"]),
            "info",
            ours=found["one_on_again"],
            base=found["one_on"],
            unit="us/obs",
            what="A/A control: the change with notify on, on a second schema ÷ the first "
            f"(the spread the noise alone makes; {clock})",
        )
    if cpu:
        out["pg_commit_cpu_notify_on_vs_off"] = metric(
            ratios(cpu["loop_notify_on"], cpu["loop_notify_off"]),
            "info",
            ours=cpu["loop_notify_on"],
            base=cpu["loop_notify_off"],
            unit="us/commit",
            what="a one-row UPDATE and its COMMIT, looped inside the server (a procedure), "
            "notifying ÷ not: the commit's own cost, nothing to dilute the trigger's share "
            "(server CPU time)",
        )
        out["pg_commit_cpu_notify_control_aa"] = metric(
            ratios(cpu["loop_notify_on_again"], cpu["loop_notify_on"]),
            "info",
            ours=cpu["loop_notify_on_again"],
            base=cpu["loop_notify_on"],
            unit="us/commit",
            what="A/A control of the server loop: notifying, a second schema ÷ the first",
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--synchronous-commit", default="off", choices=["on", "off"])
    args = parser.parse_args(argv)
    found = suite(args.quick, args.synchronous_commit)
    if args.json:
        json.dump(found, sys.stdout, indent=2)
        return 0
    for name, m in found.items():
        lo, hi = m["range"]
        print(f"{name:40} {m['ratio']:7.3f} [{lo:.3f}-{hi:.3f}]  target {m['target']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
