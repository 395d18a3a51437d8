"""PostgreSQL against its floors, in one process, contenders interleaved (issue 19).

    python -m benchmarks.postgres_floor [--quick] [--synchronous-commit on|off] [--json]

A throwaway PostgreSQL server is started for the run (``tests.stores.pg``: ``initdb`` into a
temporary folder, run as the ``postgres`` user under root) with PostgreSQL's durability
defaults (``fsync=on``), and removed afterwards. Every contender uses psycopg 3 over TCP to
the same server, with the same ``synchronous_commit`` (``on`` unless told otherwise).

Single observations, wall time per call (they are durable writes):

- **floor**: one ``INSERT`` of a one-row, status-sized JSON document in autocommit on a plain
  psycopg connection -- one round trip and one commit flush, the least a durable write costs;
- **observe, new object**: ``Runner.observe`` of a ``create`` on an object not yet stored;
- **observe, existing object**: ``Runner.observe`` flipping a stored object (Running <->
  Degraded), so every call loads, commits a new version and delivers one event.

Each round runs a chunk of every contender in turn (in the balanced order of
``benchmarks.fair.order``); the
ratio ``observe ÷ floor`` is taken per round, and its median and range are reported.

Batches, wall time per batch of 500 new objects (and 500 existing ones for ``observe_many``):

- **grouped floor**: the library's three tables (objects, journal, outbox; same columns) in a
  scratch schema, written by hand in one transaction with binary ``COPY`` -- the least a
  grouped durable write of that data costs on this connection;
- **observe_many**: ``Runner.observe_many`` of 500 ``create`` observations (new objects),
  and of 500 flips of stored objects.

The reported ``throughput`` is observations per second; ``ratio`` is ours ÷ the floor's
throughput (higher is better, 1.0 is the floor). Client CPU per batch is reported beside it.

``--trips`` counts the client's round trips per call (a round trip: the client sends, then
waits for the server's answer; pipelined statements sent together count once), from libpq's
protocol trace of the store's only connection.

PostgreSQL (issue 19; ``python -m benchmarks.postgres_floor``, ``synchronous_commit=on``,
fsync on ext4, 2 cores shared with other work at a load average of 4-6: the floor's flush
swung from 0.3 to 5 ms between runs, so read the medians of the per-round ratios, and compare
before and after only from runs made back to back). Before -> after, two pairs of runs:

- round trips per ``Runner.observe``: 3 -> 3 (load, one-statement commit, delivered-mark);
  per ``observe_many`` of 500: 7-8 -> 3 (``commit_many`` is one statement over binary arrays,
  its ordered lock pipelined with it: one round trip instead of BEGIN, the pipelined
  per-item statements, their results and COMMIT);
- ``Runner.observe`` ÷ one-row ``INSERT`` floor, median [range]: new object 2.54 [1.14..18.3]
  and 1.96 [1.07..2.68] -> 1.46 [0.77..2.35] and 1.71 [0.92..4.24]; existing object 2.33 and
  1.68 -> 1.54 and 1.75. With a cheap flush (floor 0.33 ms) the ratio is 3.2-3.5: three round
  trips against the floor's one. Target <= 1.6: not met in general. Holding the mark back
  and pipelining it with the next read made it two round trips, but lost writes went unreported
  in the asynchronous-standby failover test in 2 of 4 runs, so that was taken out again.
- ``observe_many(500)``, new objects: 483 and 1079 -> 4236 and 3907 obs/s; ratio to the grouped
  binary-COPY floor 0.04 -> 0.22 and 0.19; existing objects 411 and 875 -> 2937 and 2559 obs/s.
  Client CPU per batch 51-89 ms -> 28 ms (new) and 31-32 ms (existing) against the floor's
  4-5 ms. With a cheap flush: 8953 obs/s (new) and 7528 (existing) against a 49k floor. Target
  >= 30k obs/s: not reached. The rest of the client CPU is the runner's own work per item
  (decide, stamp, dump to JSON) plus the three pipelined round trips.
- issue 26 (ADR 0127; ``python -m benchmarks.postgres_floor --quick``, the store before and
  after run back to back twice): round trips per ``Runner.observe`` of a change 3 -> 2 (the
  load, then the commit with the previous call's delivered-marks pipelined in front of it),
  per ``observe_many`` of 500 3 -> 2, per conflict 2 -> 1 (the failed CAS returns the stored
  row; ``tests/stores/test_postgres_trips.py``). The timings of those runs are not evidence:
  the machine was loaded (the INSERT floor at 3.9-15 ms instead of 0.36 ms), and the ratios
  swung 1.6-3.2 before and 1.6-2.6 after.
- the epoch check: the commit no longer reads ``pg_control_system()`` and the WAL position
  (about 15 µs of server time per commit, and per item of a batch, on an idle machine);
  each session verifies the epoch once (ADR 0068).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # tests.stores.pg: the throwaway server

import psycopg  # noqa: E402
from tests.stores.pg import PgServer  # noqa: E402

from benchmarks.fair import order  # noqa: E402
from benchmarks.workload import BENCH, OBSERVATIONS  # noqa: E402
from lifecycle import MachineRegistry, ObjectRef, Runner  # noqa: E402
from lifecycle.stores._pgsql import parse_url  # noqa: E402
from lifecycle.stores.postgres import PostgresStore  # noqa: E402

AT = datetime(2026, 11, 30, tzinfo=UTC)
Metric = dict[str, Any]
#: a status-sized JSON document (what ``Runner.observe`` writes for the bench machine)
BODY = json.dumps({"state": "Provisioning", "reason": "Provisioning", "message": "New -> x"})


# -- contenders ------------------------------------------------------------------------------
class Floor:
    """One-row ``INSERT`` + commit (autocommit) on a plain psycopg connection."""

    def __init__(self, conninfo: str, synchronous_commit: str) -> None:
        self.conn = psycopg.connect(conninfo, autocommit=True)
        self.conn.execute(f"SET synchronous_commit = {synchronous_commit}")
        self.conn.execute("CREATE SCHEMA IF NOT EXISTS floor")
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS floor.one (id text PRIMARY KEY, body json NOT NULL)"
        )
        self.n = 0

    def run(self, count: int) -> float:
        sql = "INSERT INTO floor.one (id, body) VALUES (%s, %s::json)"
        ids = [f"f{self.n + i}" for i in range(count)]
        self.n += count
        execute = self.conn.execute
        start = time.perf_counter()
        for i in ids:
            execute(sql, (i, BODY))
        return time.perf_counter() - start


class GroupedFloor:
    """The library's three tables written by hand: one transaction, binary ``COPY`` each."""

    def __init__(self, conninfo: str, synchronous_commit: str) -> None:
        self.conn = psycopg.connect(conninfo, autocommit=True)
        self.conn.execute(f"SET synchronous_commit = {synchronous_commit}")
        self.conn.execute("CREATE SCHEMA IF NOT EXISTS floor")
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS floor.objects (uid text PRIMARY KEY, machine text, "
            "kind text, namespace text, name text, state text, version bigint, status json, "
            "commit_token text, schema_version int, schema_fingerprint text, "
            "updated_at timestamptz NOT NULL DEFAULT now())"
        )
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS floor.journal (uid text, version bigint, at text, "
            "observation text, fields json, transitions json, commit_token text, "
            "schema_version int, schema_fingerprint text, "
            "recorded_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (uid, version))"
        )
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS floor.outbox (id text PRIMARY KEY, uid text, "
            "version bigint, n int, payload json, claimed_by text, claimed_until timestamptz, "
            "created_at timestamptz NOT NULL DEFAULT now())"
        )
        self.conn.execute(
            "CREATE INDEX IF NOT EXISTS outbox_order ON floor.outbox (uid, version, n)"
        )
        self.n = 0

    def run(self, size: int) -> tuple[float, float]:
        """Wall and CPU seconds for one batch of ``size`` new objects."""
        b = self.n
        self.n += 1
        event = json.dumps({"id": "x", "reason": "Provisioning", "message": "New -> x"})
        start, cpu = time.perf_counter(), time.process_time()
        objects = [
            (f"g{b}-{i}", "bench", "Bench", "b", f"o{b}-{i}", "Provisioning", 1, BODY, "t" * 16,
             1, "f" * 12)
            for i in range(size)
        ]  # fmt: skip
        journal = [
            (f"g{b}-{i}", 1, AT.isoformat(), "Create", "{}", f"[{event}]", "t" * 16, 1, "f" * 12)
            for i in range(size)
        ]
        outbox = [(f"g{b}-{i}:1:0", f"g{b}-{i}", 1, 0, event, "me") for i in range(size)]
        with self.conn.transaction(), self.conn.cursor() as cur:
            for table, columns, rows in (
                ("objects", "uid, machine, kind, namespace, name, state, version, status, "
                 "commit_token, schema_version, schema_fingerprint", objects),
                ("journal", "uid, version, at, observation, fields, transitions, commit_token, "
                 "schema_version, schema_fingerprint", journal),
                ("outbox", "id, uid, version, n, payload, claimed_by", outbox),
            ):  # fmt: skip
                with cur.copy(f"COPY floor.{table} ({columns}) FROM STDIN") as copy:
                    for row in rows:
                        copy.write_row(row)
        return time.perf_counter() - start, time.process_time() - cpu


class Ours:
    """``Runner.observe`` / ``observe_many`` on a :class:`PostgresStore` (one connection)."""

    def __init__(self, url: str, synchronous_commit: str, schema: str, cache: int = 0) -> None:
        self.store = PostgresStore(
            url,
            schema=schema,
            pool_size=1,
            synchronous_commit=synchronous_commit,  # type: ignore[arg-type]
            cache=cache,
        )
        if cache:
            assert self.store.settle_cache(), "the status cache's listener did not start"
        self.runner = Runner(self.store, [], machines=MachineRegistry([BENCH]), links=())
        self.n = 0
        self.create = OBSERVATIONS["create"](at=AT)
        self.flip = (OBSERVATIONS["degrade"](at=AT), OBSERVATIONS["recover"](at=AT))
        self.running: list[tuple[ObjectRef, int]] = []  # (ref, 0: Running / 1: Degraded)

    def refs(self, count: int, prefix: str) -> list[ObjectRef]:
        b = self.n
        self.n += 1
        return [
            ObjectRef("Bench", "b", f"{prefix}{b}-{i}", f"{prefix}{b}-{i}") for i in range(count)
        ]

    def prepare_existing(self, count: int) -> None:
        """``count`` stored objects in Running (so a flip is always one transition away)."""
        refs = self.refs(count, "e")
        for name in ("create", "provisioned", "ready"):
            self.runner.observe_many([(r, OBSERVATIONS[name](at=AT)) for r in refs])
        self.running = [(r, 0) for r in refs]

    def flips(self, count: int) -> list[tuple[ObjectRef, Any]]:
        chosen, self.running = self.running[:count], self.running[count:] + self.running[:count]
        out = [(ref, self.flip[side]) for ref, side in chosen]
        flipped = {ref.uid for ref, _ in chosen}
        self.running = [(r, 1 - s if r.uid in flipped else s) for r, s in self.running]
        return out

    def observe_new(self, count: int) -> float:
        refs = self.refs(count, "n")
        observe, create = self.runner.observe, self.create
        start = time.perf_counter()
        for ref in refs:
            observe(ref, create)
        return time.perf_counter() - start

    def observe_existing(self, count: int) -> float:
        work = self.flips(count)
        observe = self.runner.observe
        start = time.perf_counter()
        for ref, obs in work:
            observe(ref, obs)
        return time.perf_counter() - start

    def many_new(self, size: int) -> tuple[float, float]:
        items = [(ref, self.create) for ref in self.refs(size, "m")]
        start, cpu = time.perf_counter(), time.process_time()
        self.runner.observe_many(items)
        return time.perf_counter() - start, time.process_time() - cpu

    def many_existing(self, size: int) -> tuple[float, float]:
        items = self.flips(size)
        start, cpu = time.perf_counter(), time.process_time()
        self.runner.observe_many(items)
        return time.perf_counter() - start, time.process_time() - cpu

    def close(self) -> None:
        self.store.close()


# -- round trips -----------------------------------------------------------------------------
@contextmanager
def traced(conn: psycopg.Connection[Any]) -> Iterator[Callable[[], int]]:
    """Count round trips on ``conn``: turns from client messages (``F``) to server ones
    (``B``) in libpq's protocol trace. ``yield``s a function reading the count so far."""
    fd, path = tempfile.mkstemp(prefix="pgtrace-")
    conn.pgconn.trace(fd)
    conn.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)

    def count() -> int:
        conn.pgconn.untrace()  # flushes libpq's buffered trace; traced again below
        trips, last = 0, "B"
        with open(path) as f:
            for line in f:
                side = line[:1]
                if side == "B" and last == "F":
                    trips += 1
                if side in "FB":
                    last = side
        return trips

    try:
        yield count
    finally:
        conn.pgconn.untrace()
        os.close(fd)
        os.unlink(path)


def round_trips(url: str, synchronous_commit: str) -> dict[str, float]:
    """Client round trips per ``Runner.observe`` (new and existing object) and per
    ``observe_many`` of 500, on a store with one pooled connection."""
    ours = Ours(url, synchronous_commit, "trips")
    cached = Ours(url, synchronous_commit, "trips_cached", cache=4096)
    try:
        ours.prepare_existing(500)
        ours.observe_new(10)
        ours.observe_existing(10)  # warm: statements prepared
        cached.prepare_existing(500)
        cached.observe_existing(500)  # every object now in the cache
        out: dict[str, float] = {}
        with ours.store._pool.connection() as conn:  # the pool's only connection
            pass
        with cached.store._pool.connection() as cached_conn:
            pass
        for name, fn, n, c in (
            ("observe_new", ours.observe_new, 20, conn),
            ("observe_existing", ours.observe_existing, 20, conn),
            ("observe_existing_cached", cached.observe_existing, 20, cached_conn),
            ("observe_many_new", lambda k: ours.many_new(500 * k), 1, conn),
            ("observe_many_existing", lambda k: ours.many_existing(500 * k), 1, conn),
            ("observe_many_existing_cached", lambda k: cached.many_existing(500 * k), 1,
             cached_conn),
        ):  # fmt: skip
            with traced(c) as count:
                fn(n)
                out[name] = count() / n
        return out
    finally:
        ours.close()
        cached.close()


# -- the run ---------------------------------------------------------------------------------
def _spread(ratios: list[float]) -> dict[str, float]:
    return {
        "median": statistics.median(ratios),
        "min": min(ratios),
        "max": max(ratios),
    }


def measure(
    url: str, *, synchronous_commit: str = "on", rounds: int = 9, chunk: int = 30,
    batches: int = 1, size: int = 500,
) -> dict[str, Metric]:  # fmt: skip
    """Every ratio of this module against one server (``url``)."""
    conninfo = parse_url(url).conninfo
    floor = Floor(conninfo, synchronous_commit)
    grouped = GroupedFloor(conninfo, synchronous_commit)
    ours = Ours(url, synchronous_commit, "bench")
    cached = Ours(url, synchronous_commit, "bench_cached", cache=8192)
    try:
        ours.prepare_existing(max(size, chunk) * 2)
        cached.prepare_existing(max(size, chunk) * 2)
        cached.observe_existing(max(size, chunk) * 2)  # every object now in the cache
        # warm every contender (prepared statements, caches), then interleave
        floor.run(chunk)
        ours.observe_new(chunk)
        ours.observe_existing(chunk)
        grouped.run(size)
        ours.many_new(size)
        ours.many_existing(size)
        single: dict[str, list[float]] = {"floor": [], "new": [], "existing": [], "cached": []}
        batch: dict[str, list[tuple[float, float]]] = {"floor": [], "new": [], "existing": []}
        contenders: list[tuple[str, Callable[[], float]]] = [
            ("floor", lambda: floor.run(chunk) / chunk),
            ("new", lambda: ours.observe_new(chunk) / chunk),
            ("existing", lambda: ours.observe_existing(chunk) / chunk),
            ("cached", lambda: cached.observe_existing(chunk) / chunk),
        ]
        grouped_contenders: list[tuple[str, Callable[[], tuple[float, float]]]] = [
            ("floor", lambda: grouped.run(size)),
            ("new", lambda: ours.many_new(size)),
            ("existing", lambda: ours.many_existing(size)),
        ]
        for r in range(rounds):
            gc.collect()
            for name, fn in order(contenders, r):
                single[name].append(fn())
            for b in range(batches):
                for name, gfn in order(grouped_contenders, r * batches + b):
                    batch[name].append(gfn())
    finally:
        ours.close()
        cached.close()
        floor.conn.close()
        grouped.conn.close()
    out: dict[str, Metric] = {}
    for name in ("new", "existing", "cached"):
        ratios = [o / f for o, f in zip(single[name], single["floor"], strict=True)]
        row = "existing_cached" if name == "cached" else name
        out[f"pg_observe_{row}_vs_insert_floor"] = {
            "value_us": statistics.median(single[name]) * 1e6,
            "floor_us": statistics.median(single["floor"]) * 1e6,
            "ratio": _spread(ratios),
            "target": "<= 1.5" if name == "cached" else "<= 1.6",
            "synchronous_commit": synchronous_commit,
        }
    per_floor = [size / w for w, _ in batch["floor"]]
    for name in ("new", "existing"):
        rates = [size / w for w, _ in batch[name]]
        ratios = [size / w / f for (w, _), f in zip(batch[name], per_floor, strict=True)]
        out[f"pg_observe_many_{name}_{size}"] = {
            "throughput": statistics.median(rates),
            "throughput_range": [min(rates), max(rates)],
            "floor_throughput": statistics.median(per_floor),
            "ratio": _spread(ratios),
            "cpu_ms_per_batch": statistics.median(c for _, c in batch[name]) * 1e3,
            "floor_cpu_ms_per_batch": statistics.median(c for _, c in batch["floor"]) * 1e3,
            "target": ">= 30000 obs/s",
            "synchronous_commit": synchronous_commit,
        }
    return out


def run(
    quick: bool = False, synchronous_commit: str = "on", trips: bool = True
) -> dict[str, Metric]:
    """Start a durable throwaway server, measure, stop it. What ``benchmarks.run`` calls."""
    pg = PgServer(durable=True)
    try:
        pg.start()
        url = pg.url()
        out = measure(
            url,
            synchronous_commit=synchronous_commit,
            rounds=3 if quick else 9,
            chunk=10 if quick else 30,
        )
        if trips:
            out["pg_round_trips"] = round_trips(url, synchronous_commit)
        return out
    finally:
        pg.destroy()


def show(results: dict[str, Metric]) -> str:
    lines = []
    for name, m in results.items():
        if name == "pg_round_trips":
            lines.append(f"{name:40} " + ", ".join(f"{k} {v:.2f}" for k, v in m.items()))
            continue
        r = m["ratio"]
        if "value_us" in m:
            head = f"{m['value_us']:8.1f} µs vs floor {m['floor_us']:7.1f} µs"
        else:
            head = (
                f"{m['throughput']:8.0f} obs/s vs floor {m['floor_throughput']:7.0f} "
                f"(cpu {m['cpu_ms_per_batch']:.1f} vs {m['floor_cpu_ms_per_batch']:.1f} ms)"
            )
        lines.append(f"{name:40} {head}  ratio {r['median']:.2f} [{r['min']:.2f}..{r['max']:.2f}]")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--synchronous-commit", default="on", choices=("on", "off"))
    parser.add_argument("--no-trips", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    results = run(args.quick, args.synchronous_commit, trips=not args.no_trips)
    print(json.dumps(results, indent=2) if args.json else show(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
