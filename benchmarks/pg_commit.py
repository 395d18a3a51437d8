"""A PostgreSQL change against the one-row ``INSERT`` floor (issue 37, ADR 0157).

    python -m benchmarks.pg_commit [--quick] [--json] [--profile] [--pieces] [--steps]

One throwaway server (the tests' settings: no fsync, so the flush does not swamp the work
being measured), and in this one process, interleaved in chunks (the order rotating):

- **floor**: a one-row ``INSERT`` of a status-sized JSON document in autocommit on a plain
  psycopg connection (one round trip, one transaction, prepared by psycopg);
- **memory**: the same change on a ``MemoryStore`` (no database): the runner's share of a
  change, for the rows' reasons;
- **change**: ``Runner.observe`` flipping a stored object (Running <-> Degraded) on a
  ``PostgresStore(url, pool_size=1, cache=4096)``: the status comes from the cache, so the
  call is the one-statement commit (objects, journal, outbox), its event delivered to an
  emitter and its delivered-mark riding with the next commit.

Each chunk is timed on three clocks: wall time, client CPU (``time.process_time``: this
process, every thread -- the cache's listener and the mark thread included) and server CPU
(``utime + stime`` of the contender's backend from ``/proc/PID/stat``; the backend's pid from
``pg_backend_pid()``, the server being local). Rows: change ÷ floor per clock (targets: wall
<= 2, client CPU <= 3; server CPU informational), the median of per-round ratios with range.

Round trips (libpq's protocol trace of the store's only connection, as
``benchmarks.postgres_floor``): per change with changes 1 s apart -- the gap simulated on the
delivered-marks' clock, whose timer sends a held mark on its own once it is due (target <= 1.1)
-- and per list page of 500 objects (``observe_many`` of 500 changes, cached; target <= 2).

The outbox claim: server CPU of ``claim_undelivered(500)`` on a large outbox ÷ on a small one
(target <= 1.5: a claim's cost follows what it takes).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # tests.stores.pg: the throwaway server

import attrs  # noqa: E402
import psycopg  # noqa: E402
from tests.stores.pg import PgServer  # noqa: E402

from benchmarks.fair import Metric, explain, met, metric, ratios  # noqa: E402
from benchmarks.postgres_floor import AT, BODY, Ours, traced  # noqa: E402
from benchmarks.store_throughput import fill_outbox  # noqa: E402
from benchmarks.workload import BENCH, OBSERVATIONS  # noqa: E402
from lifecycle import MachineRegistry, MemoryEmitter, MemoryStore, ObjectRef, Runner  # noqa: E402
from lifecycle._core.transition import stamp  # noqa: E402
from lifecycle.stores.postgres import PostgresStore  # noqa: E402

_TICK = os.sysconf("SC_CLK_TCK")
Clocks = tuple[float, float, float]


def backend_cpu(pid: int) -> float:
    """Seconds of CPU the server process ``pid`` used (user + system, ``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


class Floor:
    """One-row ``INSERT`` in autocommit, positional parameters (psycopg prepares it)."""

    def __init__(self, url: str) -> None:
        self.conn = psycopg.connect(url, autocommit=True)
        self.conn.execute("CREATE SCHEMA IF NOT EXISTS floor")
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS floor.one (id text PRIMARY KEY, body json NOT NULL)"
        )
        self.pid = int(self.conn.info.backend_pid)
        self.n = 0

    def run(self, count: int) -> int:
        sql = "INSERT INTO floor.one (id, body) VALUES (%s, %s::json)"
        execute = self.conn.execute
        for i in range(self.n, self.n + count):
            execute(sql, (f"f{i}", BODY))
        self.n += count
        return count


class Change(Ours):
    """``Runner.observe`` changing a stored, cached object; its event delivered."""

    def __init__(self, url: str, schema: str) -> None:
        super().__init__(url, "off", schema, cache=4096)
        self.runner = Runner(
            self.store, [MemoryEmitter()], machines=MachineRegistry([BENCH]), links=()
        )
        with self.store._pool.connection() as conn:  # the pool's only connection
            self.pid = int(conn.info.backend_pid)
            self.conn = conn

    def run(self, count: int) -> int:
        self.runner.emitters[0].events.clear()  # type: ignore[attr-defined]
        self.observe_existing(count)
        return count


class MemoryChange:
    """The same change on a ``MemoryStore``: what the runner's part of a change costs the
    client, with no database (each chunk flips the next ``count`` of ``n`` stored objects)."""

    def __init__(self, n: int) -> None:
        self.runner = Runner(
            MemoryStore(), [MemoryEmitter()], machines=MachineRegistry([BENCH]), links=()
        )
        self.refs = [ObjectRef("Bench", "b", f"m{i}", f"m{i}") for i in range(n)]
        for name in ("create", "provisioned", "ready"):
            self.runner.observe_many([(r, OBSERVATIONS[name](at=AT)) for r in self.refs])
        self.flip = (OBSERVATIONS["degrade"](at=AT), OBSERVATIONS["recover"](at=AT))
        self.sides = [0] * n
        self.at = 0

    def run(self, count: int) -> int:
        self.runner.emitters[0].events.clear()  # type: ignore[attr-defined]
        observe, refs, sides, flip, n = (
            self.runner.observe, self.refs, self.sides, self.flip, len(self.refs)
        )  # fmt: skip
        for i in range(self.at, self.at + count):
            j = i % n
            observe(refs[j], flip[sides[j]])
            sides[j] ^= 1
        self.at += count
        return count


def _interleave(
    contenders: Mapping[str, tuple[Callable[[int], int], int]], rounds: int, chunk: int
) -> dict[str, list[Clocks]]:
    """Per contender and round: (wall, client CPU, server CPU) seconds per operation."""
    names = list(contenders)
    out: dict[str, list[Clocks]] = {n: [] for n in names}
    for r in range(rounds + 1):  # the first round warms (statements prepared, caches full)
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            run, pid = contenders[name]
            w0, c0, s0 = time.perf_counter(), time.process_time(), backend_cpu(pid)
            n = run(chunk)
            w1, c1, s1 = time.perf_counter(), time.process_time(), backend_cpu(pid)
            if r:
                out[name].append(((w1 - w0) / n, (c1 - c0) / n, (s1 - s0) / n))
    return out


class Commits:
    """``PostgresStore.commit`` alone (no runner, no cache), flipping stored objects, on a
    schema shaped by ``shape``: what each part of the statement costs the server."""

    def __init__(self, url: str, schema: str, shape: str) -> None:
        if shape == "generic":
            sep = "&" if "?" in url else "?"
            url += sep + "options=-c%20plan_cache_mode%3Dforce_generic_plan"
        self.store = PostgresStore(url, schema=schema, pool_size=1, journal=shape != "no_journal")
        with psycopg.connect(url, autocommit=True) as conn:
            if shape == "no_notify":
                conn.execute(f'ALTER TABLE "{schema}".objects DISABLE TRIGGER lifecycle_notify')
            if shape in ("no_state_index", "hot"):
                conn.execute(f'DROP INDEX "{schema}".objects_by_machine')
            if shape == "hot":  # what migration 7 does (ADR 0157)
                conn.execute(f'CREATE INDEX objects_of_machine ON "{schema}".objects (machine)')
                conn.execute(f'ALTER TABLE "{schema}".objects SET (fillfactor = 90)')
        runner = Runner(self.store, [], machines=MachineRegistry([BENCH]), links=())
        self.refs = [ObjectRef("Bench", "b", f"c{i}", f"c{i}") for i in range(400)]
        for name in ("create", "provisioned", "ready"):
            runner.observe_many([(r, OBSERVATIONS[name](at=AT)) for r in self.refs])
        self.state = {r.uid: self.store.load(BENCH, r) for r in self.refs}
        self.flip = (OBSERVATIONS["degrade"](at=AT), OBSERVATIONS["recover"](at=AT))
        self.side = 0
        with self.store._pool.connection() as conn:
            self.pid = int(conn.info.backend_pid)
        self.n = 0

    def run(self, count: int) -> int:
        commit, store = self.store.commit, self.store
        obs = self.flip[self.side]
        self.side = 1 - self.side
        for ref in self.refs[:count]:
            record = self.state[ref.uid]
            assert record is not None
            after = BENCH.apply(record.status, obs)
            flips = stamp(BENCH.flips(record.status, after), ref, BENCH.name,
                          record.version + 1, AT, store.epoch)  # fmt: skip
            version = commit(BENCH, ref, record.version, after, obs, flips)
            store.mark_delivered(t.id for t in flips)
            self.state[ref.uid] = attrs.evolve(record, status=after, version=version)
        return count


SHAPES = ("full", "no_notify", "no_state_index", "hot", "no_journal")


@contextmanager
def _server() -> Iterator[tuple[PgServer, str, Floor]]:
    """A throwaway server, its URL and the floor's connection on it (closed afterwards)."""
    server = PgServer()
    try:
        server.start()
        floor = Floor(server.url())
        yield server, server.url(), floor
        floor.conn.close()
    finally:
        server.destroy()


def server_steps(quick: bool) -> dict[str, Metric]:
    """Server CPU of the commit statement on schemas without one part each, ÷ the whole."""
    rounds, chunk = (4, 200) if quick else (10, 400)
    with _server() as (_, url, floor):
        sides = {shape: Commits(url, f"step_{shape}", shape) for shape in SHAPES}
        found = _interleave(
            {"floor": (floor.run, floor.pid)}
            | {shape: (side.run, side.pid) for shape, side in sides.items()},
            rounds,
            chunk,
        )
        for side in sides.values():
            side.store.close()
    whole = statistics.fmean(c[2] for c in found["full"])
    out: dict[str, Metric] = {}
    for shape in ("floor", *SHAPES[1:]):
        part = statistics.fmean(c[2] for c in found[shape])
        out[f"pg_commit_server_cpu_{shape}_vs_full"] = _single(
            part / whole,
            "info",
            f"server CPU of PostgresStore.commit (a flip, one event) on a schema with "
            f"{shape.replace('_', ' ')} ÷ on the full schema (backend utime+stime, mean over "
            f"{rounds} rounds of {chunk})",
            ours=part * 1e6,
            baseline=whole * 1e6,
            unit="us/commit",
        )
    return out


def _single(value: float, target: str, what: str, **extra: Any) -> Metric:
    """A row measured once (a count, or a mean over the whole run): no range to speak of."""
    row: Metric = {"ratio": value, "range": [value, value], "target": target, "what": what}
    row["met"] = met(value, target)
    return row | extra


def _gap_trips(change: Change, count: int, gap: float) -> float:
    """Round trips per change with changes ``gap`` seconds apart: the marks' clock is moved
    on by ``gap`` after each change and what is then due is sent, as the mark thread would."""
    marks = change.store._marks
    offset = [0.0]
    marks.clock = lambda: time.monotonic() + offset[0]
    try:
        with traced(change.conn) as count_trips:
            for _ in range(count):
                change.observe_existing(1)
                offset[0] += gap
                marks.send_due()
            trips = count_trips()
    finally:
        marks.clock = time.monotonic
    return trips / count


def _page_trips(change: Change, pages: int, size: int) -> float:
    with traced(change.conn) as count_trips:
        for _ in range(pages):
            change.many_existing(size)
        return count_trips() / pages


def _page_costs(change: Change, pages: int, size: int) -> tuple[float, float]:
    """Client CPU and server CPU per item of ``observe_many`` pages of ``size`` changes."""
    change.many_existing(size)  # warm
    client = server = 0.0
    for _ in range(pages):
        s0 = backend_cpu(change.pid)
        client += change.many_existing(size)[1]
        server += backend_cpu(change.pid) - s0
    return client / (pages * size), server / (pages * size)


def claim_growth(server: PgServer, small: int, large: int, rounds: int = 4) -> dict[str, Metric]:
    """Server CPU of one ``claim_undelivered(500)`` on an outbox of ``large`` events ÷ on one
    of ``small`` (40 per object): a claim's cost should follow what it takes, not the table."""
    cost: dict[int, list[float]] = {}
    for events in (small, large):
        target = server.url(schema=f"claims_{events}")
        fill_outbox(target, events // 40, 40)
        store = PostgresStore(target, pool_size=1, owner="claimer")
        with store._pool.connection() as conn:
            pid = int(conn.info.backend_pid)
        store.claim_undelivered(500)  # warm; then its own leases are claimed again each time
        spent = []
        for _ in range(rounds):
            s0 = backend_cpu(pid)
            store.claim_undelivered(500)
            spent.append(backend_cpu(pid) - s0)
        cost[events] = spent
        store.close()
    grow = statistics.fmean(cost[large]) / max(statistics.fmean(cost[small]), 1 / _TICK)
    what = (
        f"server CPU of claim_undelivered(500) on an outbox of {large} events ÷ of {small} "
        "(40 per object; before ADR 0157 a claim scanned the whole outbox)"
    )
    large_us, small_us = (statistics.fmean(cost[n]) * 1e6 for n in (large, small))
    row = explain(
        _single(grow, "<= 1.5", what, unit="us/claim", ours=large_us, baseline=small_us),
        f"server CPU per claim of 500: {small_us:.0f} us on {small} events, {large_us:.0f} us "
        f"on {large}",
    )
    return {"pg_claim_server_cpu_growth": row}


def suite(quick: bool) -> dict[str, Metric]:
    rounds, chunk = (5, 100) if quick else (15, 300)
    with _server() as (server, url, floor):
        change = Change(url, "commit_bench")
        change.prepare_existing(1000)
        change.observe_existing(1000)  # every object in the cache
        memory = MemoryChange(1000)  # the runner's share of a change (no server: its pid unused)
        found = _interleave(
            {
                "floor": (floor.run, floor.pid),
                "change": (change.run, change.pid),
                "memory": (memory.run, floor.pid),
            },
            rounds,
            chunk,
        )
        gap_trips = _gap_trips(change, 20 if quick else 100, 1.0)
        page_trips = _page_trips(change, 2 if quick else 4, 500)
        page_client, page_server = _page_costs(change, 4 if quick else 10, 500)
        change.close()
        claims = claim_growth(server, *((2000, 8000) if quick else (4000, 16000)))
    out: dict[str, Metric] = {}
    targets = {"wall": "<= 2", "client_cpu": "<= 3", "server_cpu": "info"}
    for k, (clock, target) in enumerate(targets.items()):
        ours = [c[k] for c in found["change"]]
        base = [c[k] for c in found["floor"]]
        if clock == "server_cpu":  # clock ticks (10 ms): only the whole run's mean holds
            tick = 1 / _TICK / (rounds * chunk)  # a run under one tick counts as one
            ours, base = [statistics.fmean(ours)], [max(statistics.fmean(base), tick)]
        out[f"pg_change_{clock}_vs_insert_floor"] = metric(
            ratios(ours, base),
            target,
            ours=ours,
            base=base,
            unit="us/change",
            what=f"PostgreSQL Runner.observe of a change (cached status, one event delivered) "
            f"÷ a one-row INSERT in autocommit, {clock.replace('_', ' ')} per call",
        )
    us = {
        name: [statistics.fmean(c[k] for c in found[name]) * 1e6 for k in range(3)]
        for name in found
    }
    (_, c_floor, s_floor), (_, c_ours, s_ours), (_, c_memory, _) = (
        us["floor"],
        us["change"],
        us["memory"],
    )
    share = (
        f"client CPU {c_ours:.0f} us a change against the INSERT's {c_floor:.0f} us: the same "
        f"change on a MemoryStore (the runner's part: admit, decide, the events, delivery; no "
        f"database) {c_memory:.0f} us, the rest -- the PostgreSQL store: the statement's "
        f"encoding, psycopg, the wire, the cache listener's thread -- {c_ours - c_memory:.0f} us "
        f"({(c_ours - c_memory) / c_floor:.1f}x the INSERT's)"
    )
    explain(out["pg_change_client_cpu_vs_insert_floor"], share)
    explain(
        out["pg_change_wall_vs_insert_floor"],
        f"server CPU {s_ours:.0f} us a change against the INSERT's {s_floor:.0f} us "
        f"({s_ours / s_floor:.1f}x: one statement writing the status, the journal and the "
        f"outbox, and the notify trigger); {share}",
    )
    out.update(claims)
    out["pg_change_round_trips_1s_apart"] = explain(
        _single(
            gap_trips,
            "<= 1.1",
            "round trips per Runner.observe of a change with changes 1 s apart (the gap "
            "simulated on the delivered-marks' clock), cached status, marks included",
            unit="round trips",
        ),
        f"{gap_trips:.2f} round trips a change over {20 if quick else 100} changes 1 s apart: "
        "a held mark sent alone by its timer costs its own",
    )
    floor_client = statistics.fmean(c[1] for c in found["floor"])
    floor_server = statistics.fmean(c[2] for c in found["floor"])
    for clock, item, floor_item in (
        ("client_cpu", page_client, floor_client),
        ("server_cpu", page_server, floor_server),
    ):
        out[f"pg_page_item_{clock}_vs_insert_floor"] = _single(
            item / floor_item,
            "info",
            f"{clock.replace('_', ' ')} per item of Runner.observe_many pages of 500 changes "
            "(cached statuses; one statement, its columns as JSON arrays, ADR 0167) ÷ a "
            "one-row INSERT's, the whole run's mean",
            ours=item * 1e6,
            baseline=floor_item * 1e6,
            unit="us/item",
        )
    out["pg_page_round_trips_500"] = explain(
        _single(
            page_trips,
            "<= 2",
            "round trips per Runner.observe_many of a list page of 500 changes (cached "
            "statuses), the delivered-marks included",
            unit="round trips",
        ),
        f"{page_trips:.2f} round trips a page of 500 changes",
    )
    return out


@contextmanager
def _warm_change(schema: str) -> Iterator[Change]:
    """A throwaway server and a :class:`Change` on it, its 1000 objects stored and cached."""
    server = PgServer()
    try:
        server.start()
        change = Change(server.url(), schema)
        change.prepare_existing(1000)
        change.observe_existing(1000)
        yield change
        change.close()
    finally:
        server.destroy()


def profile(count: int = 3000) -> None:
    """Where a change's client CPU goes: ``cProfile`` of ``count`` changes, top entries."""
    with _warm_change("commit_profile") as change:
        prof = cProfile.Profile(time.process_time)
        prof.enable()
        change.run(count)
        prof.disable()
    stats = pstats.Stats(prof).sort_stats("tottime")
    stats.print_stats(30)
    stats.print_callers("_conn|wait")


def pieces(count: int = 1000, rounds: int = 3) -> None:
    """Where a change's client CPU goes *in the loop* (caches as cold as the run leaves
    them, unlike ``timeit`` of a piece alone): each piece's thread CPU per change, wrapped
    in ``time.thread_time``, and every thread's CPU per change (the listener's included)."""
    from lifecycle.stores import postgres

    with _warm_change("commit_pieces") as change:
        store, spent = change.store, dict[str, float]()
        pieces_ = [
            (store, "commit", "store.commit"),
            (postgres.sql, "commit_params", "commit_params"),  # type: ignore[attr-defined]
            (store, "_commit", "_commit"),
            (store._commit_statement, "first_row", "statement"),
            (store._pool, "getconn", "getconn"),
            (store._pool, "putconn", "putconn"),
        ]
        for owner, name, label in pieces_:
            spent[label] = 0.0
            setattr(owner, name, _timed(getattr(owner, name), label, spent))
        for _ in range(rounds):
            spent.update(dict.fromkeys(spent, 0.0))
            threads = {t.name: t.ident for t in threading.enumerate() if t.ident}
            before = {n: _thread_cpu(i) for n, i in threads.items()}
            change.run(count)
            after = {n: _thread_cpu(i) - before[n] for n, i in threads.items()}
            line = [f"{k} {v / count * 1e6:.0f}" for k, v in spent.items()]
            line += [f"[{n}] {v / count * 1e6:.0f}" for n, v in after.items() if v > 0]
            print("us/change: " + ", ".join(line))


def _timed(f: Callable[..., Any], label: str, spent: dict[str, float]) -> Callable[..., Any]:
    def timed(*args: Any, **kwargs: Any) -> Any:
        t0 = time.thread_time()
        try:
            return f(*args, **kwargs)
        finally:
            spent[label] += time.thread_time() - t0

    return timed


def _thread_cpu(ident: int) -> float:
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(ident))
    except (OSError, AttributeError):
        return 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--pieces", action="store_true", help="client CPU per piece, in the loop")
    parser.add_argument("--steps", action="store_true", help="the server's CPU per part")
    args = parser.parse_args(argv)
    if args.profile:
        profile()
        return 0
    if args.pieces:
        pieces()
        return 0
    found = server_steps(args.quick) if args.steps else suite(args.quick)
    if args.json:
        json.dump(found, sys.stdout, indent=2)
        return 0
    for name, m in found.items():
        lo, hi = m["range"]
        extra = ""
        if "ours" in m:
            extra = f"  ours {m['ours']:.0f} base {m['baseline']:.0f} {m.get('unit', '')}"
        print(f"{name:40} {m['ratio']:7.3f} [{lo:.3f}-{hi:.3f}]  target {m['target']}{extra}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
