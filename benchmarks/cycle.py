"""A controller's poll cycle at the physical floor, with the defaults (issue 37).

    python -m benchmarks.cycle [--quick] [--no-postgres] [--json]

The workload: a fleet of Pods on the shipped Pod machine, running; each cycle polls every Pod
once (``InstanceRunning``) and 2 % of them change (their readiness flips: Running <->
Initializing), a different 2 % each cycle. Contenders run interleaved in this one process
(``benchmarks.fair``'s balanced order, one cycle per chunk), each timed on the wall clock and on
this thread's CPU clock:

- **floors** ("handj"): hand-written, one dict of what each Pod is (its version and
  readiness), every poll decided against it in memory, the cycle's changes written in *one*
  batched statement -- a status upsert and a journal row per change: SQLite ``FULL`` and
  ``NORMAL`` (one transaction, WAL, as the library's store) and PostgreSQL (one ``INSERT ...
  ON CONFLICT`` and the journal ``INSERT`` in one statement: one round trip a cycle);
- **the library, as the README shows it**: ``Runner(store)`` -- the shipped machines and
  links (a Pod's change also writes its NodeClaim) -- on ``MemoryStore()``,
  ``SQLiteStore(path)`` (``synchronous=FULL``; the status cache on, the default since ADR
  0155), ``SQLiteStore(path, synchronous="NORMAL")`` and ``PostgresStore(url)`` (the cache
  on), polled by ``observe_many`` in pages of 500 (the cycle API, ADR 0155) and by an
  ``observe`` loop.

Rows: each contender's cycle ÷ its floor, wall and client CPU (SQLite FULL and memory ÷ the
SQLite FULL floor, SQLite NORMAL ÷ the NORMAL floor, PostgreSQL ÷ the PostgreSQL floor);
round trips per list page of 500 on PostgreSQL (counted in libpq's protocol trace on a
one-connection pool, ``postgres_floor.traced``); a cached unchanged poll (one
``Runner.observe`` at the defaults) ÷ a hand-written poll deciding the same, per store (the
``cycle_poll_*`` rows, client CPU), with its pieces timed alone beside it (the store's read,
the machine's step); the host's building of a cycle's observations alone ÷ each floor (a
lower bound of the library's ratio: the floor builds none); and the growth -- cost per Pod at
100 000 Pods ÷ at 1 000 of the default ``observe_many`` cycle on memory, SQLite and
PostgreSQL, the floor's own growth in the row (full suite only). The issue's targets are the
rows' ``target``: at most 3 times the floor for the default configuration's ``observe_many``
cycle on SQLite FULL, NORMAL and PostgreSQL; at most 2 round trips a page; at most twice a
hand-written poll on the memory store, 3 times on SQLite and PostgreSQL; growth at most 1.5.
An unmet row's ``reason`` is computed from the pieces timed in the same run.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from lifecycle import MemoryStore, ObjectRef, Runner, SQLiteStore
from lifecycle.machines import pod

from .fair import Metric, explain, metric, order, ratios

CHANGING = 0.02
PAGE = 500
#: the status cache of the poll rows: ``lifecycle.stores.DEFAULT_CACHE``'s value, given
POLL_CACHE = 262_144
START = datetime(2026, 12, 1, tzinfo=UTC)

#: a contender: runs one cycle
Cycle = Callable[[], None]


class Fleet:
    """The Pods and what they report: cycle ``c`` flips the readiness of a window of 2 % of
    them (a different window each cycle); every other Pod reports what it reported before.
    Every contender gets its own fleet and so the same polls."""

    def __init__(self, n: int, prefix: str) -> None:
        self.refs = [ObjectRef("Pod", "fleet", f"{prefix}-{i}", f"{prefix}-{i}") for i in range(n)]
        self.ready = [True] * n
        self.cycles = 0
        self.width = max(1, int(n * CHANGING))

    def boot(self) -> list[list[tuple[ObjectRef, Any]]]:
        """The observations that bring every Pod to Running (ready), in three steps."""
        return [
            [(r, pod.CreateRequested(at=START)) for r in self.refs],
            [
                (r, pod.ProvisionSucceeded(at=START, reserved=True, instance_id=r.uid))
                for r in self.refs
            ],
            [(r, pod.InstanceRunning(at=START, instance_id=r.uid)) for r in self.refs],
        ]

    def advance(self) -> datetime:
        """The next cycle: flip this cycle's window; the time it polls at."""
        self.cycles += 1
        n = len(self.refs)
        first = (self.cycles * self.width) % n
        for i in range(first, first + self.width):
            self.ready[i % n] = not self.ready[i % n]
        return START + timedelta(seconds=self.cycles)

    def next(self) -> list[tuple[ObjectRef, pod.InstanceRunning]]:
        """The next cycle's polls, every Pod once, as the library takes them: a host builds
        an observation per poll (its cost is the library's, as a host pays it)."""
        at = self.advance()
        return [
            (r, pod.InstanceRunning(at=at, instance_id=r.uid, readiness_confirmed=ready))
            for r, ready in zip(self.refs, self.ready, strict=True)
        ]


# -- the library --------------------------------------------------------------------------
def library(store: Any, n: int, prefix: str, *, many: bool) -> Cycle:
    """``Runner(store)``'s cycle: an ``observe`` loop, or ``observe_many`` by pages."""
    runner = Runner(store)
    fleet = Fleet(n, prefix)
    for step in fleet.boot():
        for start in range(0, n, PAGE):
            runner.observe_many(step[start : start + PAGE])

    def loop() -> None:
        observe = runner.observe
        for ref, obs in fleet.next():
            observe(ref, obs)

    def paged() -> None:
        polls = fleet.next()
        for start in range(0, n, PAGE):
            runner.observe_many(polls[start : start + PAGE])

    return paged if many else loop


def building(n: int) -> Cycle:
    """The host's side of a cycle alone: the ``n`` observations built (``Fleet.next``), nothing
    observed. Every library contender's cycle includes it and the floor's does not, so its
    ratio to a floor bounds theirs from below."""
    fleet = Fleet(n, "build")

    def cycle() -> None:
        fleet.next()

    return cycle


# -- the floors ("handj") -------------------------------------------------------------------
class _Handj:
    """One dict; a poll is decided against it; the cycle's changes are the rows to write."""

    def __init__(self, n: int, prefix: str) -> None:
        self.fleet = Fleet(n, prefix)
        self.known = {r.uid: [1, True] for r in self.fleet.refs}

    def changes(self) -> list[tuple[str, int, str, str]]:
        """The cycle's polls (what a poll reads: the Pod's readiness), decided in the dict."""
        rows = []
        known = self.known
        fleet = self.fleet
        at = fleet.advance().isoformat()
        for ref, ready in zip(fleet.refs, fleet.ready, strict=True):
            mine = known[ref.uid]
            if mine[1] != ready:
                mine[0] += 1
                mine[1] = ready
                state = "Running" if ready else "Initializing"
                status = json.dumps({"state": state, "ready": ready, "since": at})
                event = json.dumps({"reason": state, "at": at, "version": mine[0]})
                rows.append((ref.uid, mine[0], status, event))
        return rows


def handj_sqlite(path: Path, synchronous: str, n: int) -> Cycle:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(f"PRAGMA synchronous={synchronous}")
    db.execute("CREATE TABLE status (uid TEXT PRIMARY KEY, version INTEGER, status TEXT)")
    db.execute("CREATE TABLE journal (uid TEXT, version INTEGER, event TEXT)")
    floor = _Handj(n, "handj")
    db.execute("BEGIN")
    db.executemany("INSERT INTO status VALUES (?, 1, '{}')", [(u,) for u in floor.known])
    db.execute("COMMIT")

    def cycle() -> None:
        rows = floor.changes()
        db.execute("BEGIN")
        db.executemany(
            "INSERT INTO status VALUES (?, ?, ?) ON CONFLICT (uid) DO UPDATE "
            "SET version = excluded.version, status = excluded.status",
            [(u, v, s) for u, v, s, _ in rows],
        )
        db.executemany("INSERT INTO journal VALUES (?, ?, ?)", [(u, v, e) for u, v, _, e in rows])
        db.execute("COMMIT")

    return cycle


_PG_CYCLE = (
    "WITH s AS (INSERT INTO status SELECT * FROM unnest(%s::text[], %s::int[], %s::jsonb[]) "
    "ON CONFLICT (uid) DO UPDATE SET version = excluded.version, status = excluded.status) "
    "INSERT INTO journal SELECT * FROM unnest(%s::text[], %s::int[], %s::jsonb[])"
)


def handj_postgres(server: Any, schema: str, n: int) -> tuple[Cycle, Any]:
    """The PostgreSQL floor's cycle, and its connection (to count its round trips)."""
    import psycopg

    conn = psycopg.connect(server.url(), autocommit=True)
    conn.execute(f'CREATE SCHEMA "{schema}"')
    conn.execute(f'SET search_path TO "{schema}"')
    conn.execute("CREATE TABLE status (uid text PRIMARY KEY, version int, status jsonb)")
    conn.execute("CREATE TABLE journal (uid text, version int, event jsonb)")
    floor = _Handj(n, "handj")
    with conn.cursor() as cur:
        cur.execute(
            "INSERT INTO status SELECT u, 1, '{}' FROM unnest(%s::text[]) u", [list(floor.known)]
        )

    def cycle() -> None:
        rows = floor.changes()
        uids = [r[0] for r in rows]
        versions = [r[1] for r in rows]
        conn.execute(
            _PG_CYCLE, [uids, versions, [r[2] for r in rows], uids, versions, [r[3] for r in rows]]
        )

    return cycle, conn


# -- timing ---------------------------------------------------------------------------------
def interleave(
    contenders: dict[str, Cycle], rounds: int, warmup: int = 1
) -> dict[str, dict[str, list[float]]]:
    """Seconds per cycle of each contender, wall and this thread's CPU, one figure per
    round; each round in its balanced order (``benchmarks.fair.interleave``, with both clocks)."""
    names = list(contenders)
    out: dict[str, dict[str, list[float]]] = {n: {"wall": [], "cpu": []} for n in names}
    for r in range(warmup + rounds):
        gc.collect()
        for name in order(names, r - warmup if r >= warmup else r):
            wall, cpu = time.perf_counter(), time.thread_time()
            contenders[name]()
            wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
            if r >= warmup:
                out[name]["wall"].append(wall)
                out[name]["cpu"].append(cpu)
    return out


@contextmanager
def _postgres() -> Iterator[Any]:
    from tests.stores.pg import PgServer

    server = PgServer(durable=True)  # the server's defaults: fsync on, as a deployment's
    server.start()
    try:
        yield server
    finally:
        server.destroy()


def _rows(
    times: dict[str, dict[str, list[float]]], floors: dict[str, str], n: int, rounds: int
) -> dict[str, Metric]:
    out: dict[str, Metric] = {}
    for name, floor in floors.items():
        base = times[floor]
        for clock in ("wall", "cpu"):
            ours = times[name][clock]
            out[f"cycle_{name}_vs_{floor}_{clock}"] = metric(
                ratios(ours, base[clock]),
                TARGETS.get(name, "info"),
                ours=ours,
                base=base[clock],
                unit="ms/cycle",
                scale=1e3,
                what=f"a poll cycle of {n} Pods (2 % changing), {name.replace('_', ' ')} "
                f"÷ the hand-written floor {floor.replace('_', ' ')} "
                f"({'wall' if clock == 'wall' else 'client CPU'} time, {rounds} rounds)",
            )
    return out


CONTENDERS = {
    # name: (store kind, observe_many?)
    "memory_loop": ("memory", False),
    "memory_many": ("memory", True),
    "sqlite_loop": ("sqlite", False),
    "sqlite_many": ("sqlite", True),
    "sqlite_normal_many": ("sqlite_normal", True),
    "postgres_loop": ("postgres", False),
    "postgres_many": ("postgres", True),
}
#: the target of each contender's ratio to its floor (issue 37: the default configuration's
#: cycle, by the cycle API)
TARGETS = {"sqlite_many": "<= 3", "sqlite_normal_many": "<= 3", "postgres_many": "<= 3"}


def _library_store(kind: str, tmp: Path, server: Any, name: str) -> Any:
    if kind == "memory":
        return MemoryStore()
    if kind == "sqlite":
        return SQLiteStore(tmp / f"{name}.db")  # the defaults: FULL, the status cache on
    if kind == "sqlite_normal":
        return SQLiteStore(tmp / f"{name}.db", synchronous="NORMAL")  # the cache on
    from lifecycle.stores.postgres import PostgresStore

    store = PostgresStore(server.url(schema=name))  # the defaults: the status cache on
    assert store.settle_cache(), "the status cache's listener did not start"
    return store


def cycles(
    n: int, rounds: int, postgres: bool, tmp: Path, server: Any = None
) -> tuple[dict[str, dict[str, list[float]]], list[Any]]:
    """Every contender's seconds per cycle at ``n`` Pods (and the stores to close)."""
    contenders: dict[str, Cycle] = {
        "floor_sqlite_full": handj_sqlite(tmp / f"floor-full-{n}.db", "FULL", n),
        "floor_sqlite_normal": handj_sqlite(tmp / f"floor-normal-{n}.db", "NORMAL", n),
    }
    opened: list[Any] = []
    if postgres:
        cycle, conn = handj_postgres(server, f"floor{n}", n)
        contenders["floor_postgres"] = cycle
        opened.append(conn)
    contenders["build"] = building(n)
    for name, (kind, many) in CONTENDERS.items():
        if kind == "postgres" and not postgres:
            continue
        store = _library_store(kind, tmp, server, f"{name}{n}")
        opened.append(store)
        contenders[name] = library(store, n, name, many=many)
    return interleave(contenders, rounds), opened


def round_trips(server: Any, n: int) -> Metric:
    """Round trips per list page of a cycle on PostgreSQL (the library's ``observe_many`` by
    pages, a store with one pooled connection, its other settings the defaults); the floor's
    and the ``observe`` loop's per cycle in the note."""
    from lifecycle.stores.postgres import PostgresStore

    from .postgres_floor import traced

    found: dict[str, float] = {}
    cycle, conn = handj_postgres(server, "trips_floor", n)
    cycle()
    with traced(conn) as count:
        cycle()
        found["floor_postgres"] = count()
    conn.close()
    for name, many in (("postgres_loop", False), ("postgres_many", True)):
        store = PostgresStore(server.url(schema=f"trips_{name}"), pool_size=1)
        try:
            run = library(store, n, name, many=many)
            run()  # warm: statements prepared
            with store._pool.connection() as pooled:  # the pool's only connection
                pass
            with traced(pooled) as count:
                run()
                found[name] = count()
        finally:
            store.close()
    pages = -(-n // PAGE)
    per_page = found["postgres_many"] / pages
    row: Metric = {
        "ratio": per_page,
        "range": [per_page] * 2,
        "target": "<= 2",
        "met": per_page <= 2,
        "unit": "round trips",
        "what": f"round trips per list page of {PAGE} objects in a poll cycle of {n} Pods on "
        "PostgreSQL, observe_many by pages (the defaults, the delivered-marks included; "
        "counted in libpq's trace on a one-connection pool)",
        "note": f"per cycle of {pages} pages: "
        + ", ".join(f"{k} {v:.0f}" for k, v in found.items()),
    }
    return explain(
        row,
        f"{found['postgres_many']:.0f} round trips for the cycle's {pages} pages "
        f"({found['postgres_loop']:.0f} for the observe loop's {n} polls)",
    )


#: the growth's contenders: the default configuration's cycle on each store
GROWTH = ("memory_many", "sqlite_many", "postgres_many")


def growth(
    tmp: Path, postgres: bool, server: Any, small: int = 1_000, large: int = 100_000
) -> dict[str, Metric]:
    """Cost per Pod of a cycle at 100 000 Pods ÷ at 1 000, each contender beside its floor
    (three rounds at the small size, one at the large: a cycle of 100 000 Pods is long)."""
    picked = [g for g in GROWTH if postgres or not g.startswith("postgres")]
    per_pod: dict[int, dict[str, float]] = {}
    paused: dict[int, dict[str, float]] = {}  # per Pod, one more cycle with the collector off
    tracked: dict[int, int] = {}  # objects the cyclic collector tracks, every contender's
    for n in (small, large):
        floors: dict[str, Cycle] = {
            "floor_sqlite_full": handj_sqlite(tmp / f"g-floor-{n}.db", "FULL", n)
        }
        opened: list[Any] = []
        if postgres:
            cycle, conn = handj_postgres(server, f"gfloor{n}", n)
            floors["floor_postgres"] = cycle
            opened.append(conn)
        contenders = dict(floors)
        for name in picked:
            kind, many = CONTENDERS[name]
            store = _library_store(kind, tmp, server, f"g{name}{n}")
            opened.append(store)
            contenders[name] = library(store, n, name, many=many)
        times = interleave(contenders, rounds=3 if n == small else 1)
        per_pod[n] = {k: statistics.median(v["wall"]) / n for k, v in times.items()}
        paused[n] = _without_gc({k: contenders[k] for k in picked}, n)
        tracked[n] = len(gc.get_objects())
        for o in opened:
            o.close()
    out: dict[str, Metric] = {}
    for name in picked:
        floor = "floor_postgres" if name.startswith("postgres") else "floor_sqlite_full"
        ours = per_pod[large][name] / per_pod[small][name]
        theirs = per_pod[large][floor] / per_pod[small][floor]
        row: Metric = {
            "ratio": ours,
            "range": [ours, ours],
            "target": "<= 1.5",
            "met": ours <= 1.5,
            "floor": floor,
            "floor_growth": theirs,
            "ours": per_pod[large][name] * 1e6,
            "baseline": per_pod[small][name] * 1e6,
            "unit": "us/Pod",
            "what": f"wall time per Pod of a cycle at {large} Pods ÷ at {small}, "
            f"{name.replace('_', ' ')} (the defaults); floor_growth: the same for the floor "
            f"{floor.replace('_', ' ')}, measured beside it",
            "note": f"per Pod: {per_pod[small][name] * 1e6:.1f} -> "
            f"{per_pod[large][name] * 1e6:.1f} us (the floor {per_pod[small][floor] * 1e6:.2f} "
            f"-> {per_pod[large][floor] * 1e6:.2f} us, {theirs:.2f}x)",
        }
        without = paused[large][name] / paused[small][name]
        row["growth_without_gc"] = without
        out[f"cycle_growth_{name}"] = explain(
            row,
            f"per Pod {per_pod[small][name] * 1e6:.1f} -> {per_pod[large][name] * 1e6:.1f} us "
            f"({large} Pods: 1 cycle, {small}: 3); the floor beside it grows {theirs:.2f}x. "
            f"One more cycle each with Python's cyclic garbage collector paused: "
            f"{paused[small][name] * 1e6:.1f} -> {paused[large][name] * 1e6:.1f} us per Pod, "
            f"{without:.2f}x: the growth is the collector's full passes over a heap of "
            f"{tracked[large] / large / max(1, len(picked)):.0f} tracked objects per Pod and "
            "contender (statuses, records, refs, the cache's and the memory's entries; the "
            "memory store's journal too), which the floor's one dict does not have",
        )
    return out


def _without_gc(contenders: dict[str, Cycle], n: int) -> dict[str, float]:
    """Wall seconds per Pod of one more cycle of each contender, the cyclic garbage
    collector paused for it (collected before, enabled after)."""
    found: dict[str, float] = {}
    for name, cycle in contenders.items():
        gc.collect()
        gc.disable()
        try:
            began = time.perf_counter()
            cycle()
            found[name] = (time.perf_counter() - began) / n
        finally:
            gc.enable()
    return found


def bounds(
    times: dict[str, dict[str, list[float]]], floors: dict[str, str], n: int, rounds: int
) -> dict[str, Metric]:
    """The host's building of a cycle's observations ÷ each target row's floor, per clock."""
    out: dict[str, Metric] = {}
    for floor in sorted({floors[name] for name in TARGETS if name in floors}):
        for clock in ("wall", "cpu"):
            ours, base = times["build"][clock], times[floor][clock]
            out[f"cycle_observations_build_vs_{floor}_{clock}"] = metric(
                ratios(ours, base),
                "info",
                ours=ours,
                base=base,
                unit="ms/cycle",
                scale=1e3,
                what=f"building a cycle's {n} observations alone (Fleet.next: the host's side, "
                f"inside every library contender's cycle) ÷ the hand-written floor "
                f"{floor.replace('_', ' ')}'s whole cycle, which builds none "
                f"({'wall' if clock == 'wall' else 'client CPU'}, {rounds} rounds): a lower "
                "bound of the library's ratio to that floor",
            )
    return out


def reasons(
    out: dict[str, Metric], times: dict[str, dict[str, list[float]]], floors: dict[str, str], n: int
) -> None:
    """Each cycle target row's reason, from this run's figures: what the pieces every path
    through the machine pays -- building the observations, the machine's step for each
    unchanged poll (timed alone in :func:`polls`) -- take of the floor's whole cycle."""
    unchanged = n - max(1, int(n * CHANGING))
    pieces = out["cycle_poll_unchanged_memory_vs_hand"]["pieces"]
    for name in TARGETS:
        if name not in floors:
            continue
        floor = floors[name]
        for clock in ("wall", "cpu"):
            row = out[f"cycle_{name}_vs_{floor}_{clock}"]
            base = statistics.median(times[floor][clock])
            build = out[f"cycle_observations_build_vs_{floor}_{clock}"]["ratio"]
            step = unchanged * pieces["step"] * 1e-6 / base
            explain(
                row,
                f"the floor's cycle {base * 1e3:.2f} ms, ours {row['ours']:.1f} ms; timed alone "
                f"in this run: building the {n} observations (Fleet.next, the host's side) is "
                f"{build:.1f}x the floor's cycle, the machine's step for the "
                f"{unchanged} unchanged polls (POD.apply, {pieces['step']:.2f} us CPU "
                f"each) {step:.1f}x: together a bound of {build + step:.1f}x that no store or "
                "commit removes; the floor builds no observation and decides each poll in a "
                f"dict ({pieces['hand']:.2f} us)",
            )


def suite(
    quick: bool, postgres: bool = True, pods: int | None = None, rounds: int | None = None
) -> dict[str, Metric]:
    n, rounds = (pods or (1_000 if quick else 10_000)), (rounds or 3)
    floors = {
        "memory_loop": "floor_sqlite_full",
        "memory_many": "floor_sqlite_full",
        "sqlite_loop": "floor_sqlite_full",
        "sqlite_many": "floor_sqlite_full",
        "sqlite_normal_many": "floor_sqlite_normal",
    }
    if postgres:
        floors |= {"postgres_loop": "floor_postgres", "postgres_many": "floor_postgres"}
    out: dict[str, Metric] = {}
    with tempfile.TemporaryDirectory() as d, _postgres() if postgres else _none() as server:
        tmp = Path(d)
        times, opened = cycles(n, rounds, postgres, tmp, server)
        for o in opened:
            o.close()
        out |= _rows(times, floors, n, rounds)
        out |= bounds(times, floors, n, rounds)
        normal = times["floor_sqlite_normal"]["wall"]
        full = times["floor_sqlite_full"]["wall"]
        out["cycle_floor_sqlite_normal_vs_full_wall"] = metric(
            ratios(normal, full),
            "info",
            ours=normal,
            base=full,
            unit="ms/cycle",
            scale=1e3,
            what=f"the floor itself: SQLite NORMAL ÷ FULL, a cycle of {n} Pods (wall)",
        )
        if postgres:
            out["cycle_postgres_round_trips_per_page"] = round_trips(server, n)
        out |= polls(tmp, server, rounds=5 if quick else 15, chunk=2_000)
        reasons(out, times, floors, n)
        if not quick:
            out |= growth(tmp, postgres, server)
    return out


# -- a cached unchanged poll against a hand-written one ----------------------------------
def _library_poll(store: Any) -> Callable[[int], int]:
    """``n`` unchanged polls of one running Pod: ``Runner.observe`` at the defaults."""
    runner = Runner(store)
    fleet = Fleet(1, "poll")
    for step in fleet.boot():
        runner.observe_many(step)
    ref = fleet.refs[0]
    poll = pod.InstanceRunning(at=START, instance_id=ref.uid)
    observe = runner.observe
    assert observe(ref, poll).outcome.value == "unchanged"

    def chunk(n: int) -> int:
        for _ in range(n):
            observe(ref, poll)
        return n

    return chunk


def _hand_poll() -> Callable[[int], int]:
    """``n`` polls decided by hand as the floor's cycle decides them: the Pod's record in a
    dict (its version, readiness and instance), compared with what the poll says; a call per
    poll, as the library's."""
    ref = ObjectRef("Pod", "fleet", "hand-0", "hand-0")
    known = {ref.uid: (3, True, ref.uid)}
    poll = pod.InstanceRunning(at=START, instance_id=ref.uid)

    def decide(ref: ObjectRef, seen: pod.InstanceRunning) -> bool:
        mine = known.get(ref.uid)
        return mine is None or mine[1] != seen.readiness_confirmed or mine[2] != seen.instance_id

    assert not decide(ref, poll)

    def chunk(n: int) -> int:
        for _ in range(n):
            decide(ref, poll)
        return n

    return chunk


def polls(tmp: Path, server: Any, rounds: int, chunk: int) -> dict[str, Metric]:
    """A cached unchanged poll on each store at its defaults ÷ the hand-written poll (client
    CPU, interleaved in chunks: ``benchmarks.fair``)."""
    from .fair import CPU
    from .fair import interleave as chunks

    # the default cache's size, given: an older release (cache off by default) runs the same
    stores: dict[str, Any] = {
        "memory": MemoryStore(),
        "sqlite": SQLiteStore(tmp / "poll.db", cache=POLL_CACHE),
    }
    if server is not None:
        from lifecycle.stores.postgres import PostgresStore

        cached = PostgresStore(server.url(schema="pollcached"), cache=POLL_CACHE)
        assert cached.settle_cache(), "the status cache's listener did not start"
        stores["postgres"] = cached
    try:
        runs: dict[str, Callable[[int], int]] = {"hand": _hand_poll()}
        for name, store in stores.items():
            runs[name] = _library_poll(store)
            runs[f"{name}_read"] = _read(store)  # after the poll's boot: the Pod is stored
        runs["step"] = _step(stores["memory"])
        contenders: dict[str, Callable[[], int]] = {
            name: functools.partial(run, chunk) for name, run in runs.items()
        }
        times = chunks(contenders, rounds, clock=CPU)
    finally:
        for store in stores.values():
            store.close()
    out: dict[str, Metric] = {}
    us = {name: statistics.median(t) * 1e6 for name, t in times.items()}
    for name in stores:
        rest = us[name] - us[f"{name}_read"] - us["step"]
        out[f"cycle_poll_unchanged_{name}_vs_hand"] = explain(
            metric(
                ratios(times[name], times["hand"]),
                "<= 2" if name == "memory" else "<= 3",
                ours=times[name],
                base=times["hand"],
                unit="us/poll",
                what=f"a cached unchanged poll, Runner.observe on the {name} store at its "
                "defaults ÷ a hand-written poll deciding the same (a dict of each Pod's "
                f"readiness; client CPU, {rounds} rounds of {chunk})",
                note=f"its pieces, timed alone beside it: the store's read {us[name + '_read']:.2f}"
                f" us, the machine's step {us['step']:.2f} us",
            )
            | {
                "pieces": {
                    "read": us[f"{name}_read"],
                    "step": us["step"],
                    "rest": rest,
                    "hand": us["hand"],
                }
            },
            f"of the poll's {us[name]:.2f} us: the store's read (store.load) "
            f"{us[name + '_read']:.2f} us, the machine's step (POD.apply, from its memory) "
            f"{us['step']:.2f} us, the rest (admit's checks, the runner's body, the Result) "
            f"{rest:.2f} us; the hand poll, a dict lookup and two compares: {us['hand']:.2f} us",
        )
    return out


def _read(store: Any) -> Callable[[int], int]:
    """``n`` reads of the polled Pod's record from ``store`` (its status cache), alone."""
    ref = Fleet(1, "poll").refs[0]
    load, machine = store.load, pod.POD
    assert load(machine, ref) is not None

    def chunk(n: int) -> int:
        for _ in range(n):
            load(machine, ref)
        return n

    return chunk


def _step(store: Any) -> Callable[[int], int]:
    """``n`` of the machine's steps on the polled Pod's status for the unchanged poll, each
    tested as the runner tests it (``Machine.apply`` returns the status itself: ADR 0166's
    memory answers a poll it has seen leave the status unchanged), alone."""
    ref = Fleet(1, "poll").refs[0]
    record = store.load(pod.POD, ref)
    status, apply = record.status, pod.POD.apply
    poll = pod.InstanceRunning(at=START, instance_id=ref.uid)
    assert apply(status, poll) is status

    def chunk(n: int) -> int:
        for _ in range(n):
            if apply(status, poll) is not status:
                raise AssertionError("the poll changed the status")
        return n

    return chunk


@contextmanager
def _none() -> Iterator[None]:
    yield None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--pods", type=int, help="Pods in the fleet (default 10 000; quick 1 000)")
    parser.add_argument("--rounds", type=int, help="timed cycles per contender (default 3)")
    args = parser.parse_args(argv)
    found = suite(args.quick, postgres=not args.no_postgres, pods=args.pods, rounds=args.rounds)
    if args.json:
        json.dump(found, sys.stdout, indent=2)
        return 0
    for name, m in found.items():
        lo, hi = m["range"]
        unit = str(m.get("unit", "")).split("/")[0]
        sides = f"  {m['ours']:.2f} / {m['baseline']:.2f} {unit}" if "ours" in m else ""
        print(f"{name:52} {m['ratio']:8.2f} [{lo:.2f}-{hi:.2f}]{sides}  {m.get('note', '')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
