"""Committed observations per second with 1, 2 and 4 writer processes, on PostgreSQL and on
SQLite, beside the ``eventsourcing`` library's PostgreSQL and SQLite application recorders
doing the same writes, in the same run, on the same server and disk::

    .venv/bin/python -m benchmarks.store_throughput [--seconds 3] [--writers 1 2 4]

Durability, stated: PostgreSQL runs with its defaults (``fsync=on``,
``synchronous_commit=on``: every commit is flushed to disk before it returns); SQLite runs
in WAL mode with ``synchronous=FULL`` (ours explicitly; eventsourcing's by SQLite's
default). A throwaway server is started from the PostgreSQL binaries on the machine.

What one write is. *lifecycle*: one observation of one Pod (Initializing <-> Running, so
every write flips the state): the status compare-and-set, a journal entry and one outbox
row, in one transaction. ``store.commit`` calls the store directly; ``Runner.observe`` adds
the read, the machine, the delivery to an (empty) emitter list and the outbox mark -- the
full protocol; ``observe_many`` does the same for batches of 100 objects. *eventsourcing*:
one ``StoredEvent`` (the same status and observation JSON) through ``insert_events`` of its
application recorder -- the row, its (originator, version) uniqueness check and its
notification id. Each writer process writes its own objects (no conflicts); the figure is the
sum over writers of committed writes in the timed window, per second.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.stores.pg: the throwaway server

from tests.stores.pg import PASSWORD, USER, PgServer  # noqa: E402

AT = datetime(2026, 11, 30, tzinfo=UTC)
OBJECTS = 100  # per writer
BATCH = 100


# -- one writer -----------------------------------------------------------------------------
def _pods(worker: int, n: int) -> list[Any]:
    from lifecycle import ObjectRef

    return [ObjectRef("Pod", "bench", f"w{worker}-{i}", f"w{worker}-{i}") for i in range(n)]


def _observation(k: int) -> Any:
    from lifecycle.machines import pod

    at = AT + timedelta(seconds=k)
    return pod.InstanceRunning(at=at) if k % 2 == 0 else pod.InstancePending(at=at)


def _open(backend: str, target: str, cache: int = 0) -> Any:
    if backend == "postgres":
        from lifecycle.stores.postgres import PostgresStore

        return PostgresStore(target, pool_size=2, cache=cache)
    from lifecycle import SQLiteStore

    return SQLiteStore(target, synchronous="FULL", cache=cache)


def _floor_writer(target: str, notify: bool = False) -> Callable[[], int]:
    """PostgreSQL's floor for one write: a one-row ``INSERT`` of a status-sized JSON document
    in autocommit on a plain connection (one round trip, one flush). ``notify``: the same
    statement also sends a ``NOTIFY`` in its transaction, as every write of the store does
    (ADR 0143) -- what the server's notification lock costs any notifying writer."""
    import psycopg

    from lifecycle.stores._pgsql import parse_url

    conn = psycopg.connect(parse_url(target).conninfo, autocommit=True)
    conn.execute("CREATE TABLE IF NOT EXISTS floor_rows (id bigserial PRIMARY KEY, doc json)")
    doc = json.dumps({"state": "Running", "conditions": [{"type": "Ready", "status": "True"}]})

    statement = "INSERT INTO floor_rows (doc) VALUES (%s::json)"
    if notify:
        statement = (
            "WITH w AS (INSERT INTO floor_rows (doc) VALUES (%s::json) RETURNING id) "
            "SELECT pg_notify('floor', id::text) FROM w"
        )

    def write() -> int:
        conn.execute(statement, (doc,))
        return 1

    return write


class _Discard:
    """An emitter that takes every event and does nothing with it."""

    def emit(self, transition: Any) -> None:
        pass


def fill_outbox(target: str, objects: int, versions: int) -> int:
    """Commit ``versions`` flips of each of ``objects`` new Pods straight through the store,
    leaving one undelivered event per commit (nothing delivers them): what dispatchers drain.
    Leased for a millisecond, so any replica may claim them at once."""
    from lifecycle._core.transition import stamp
    from lifecycle.machines import POD, pod
    from lifecycle.stores.base import CommitItem
    from lifecycle.stores.postgres import PostgresStore

    store = PostgresStore(target, lease_seconds=0.001)
    try:
        refs = _pods(10_000, objects)
        statuses = {r.uid: POD.initial(r) for r in refs}
        events = 0
        for v in range(versions):
            obs = pod.CreateRequested(at=AT) if v == 0 else _observation(v)
            items = []
            for r in refs:
                before = statuses[r.uid]
                after = POD.apply(before, obs)
                flips = stamp(POD.flips(before, after), r, POD.name, v + 1, obs.at)
                items.append(CommitItem(POD, r, v, after, obs, flips))
                statuses[r.uid] = after
                events += len(flips)
            for start in range(0, len(items), 500):
                assert all(
                    isinstance(x, int) for x in store.commit_many(items[start : start + 500])
                )
        return events
    finally:
        store.close()


def _dispatch_writer(target: str, worker: int) -> Callable[[], int]:
    """A replica's dispatcher on its own store handle: one round per call (claim up to 500,
    deliver to an emitter that discards, mark)."""
    from lifecycle import Dispatcher
    from lifecycle.stores.postgres import PostgresStore

    store = PostgresStore(target, pool_size=2, owner=f"dispatcher-{worker}")
    dispatcher = Dispatcher(store, [_Discard()])
    return dispatcher.dispatch_once


def _lifecycle_writer(mode: str, backend: str, target: str, worker: int) -> Callable[[], int]:
    """Boot this writer's pods, return ``write()``: one timed step, returning writes done."""
    from lifecycle import MachineRegistry, Runner
    from lifecycle._core.transition import stamp
    from lifecycle.machines import POD, pod

    store = _open(backend, target, 4096 if mode == "observe_cached" else 0)
    runner = Runner(store, [], machines=MachineRegistry([POD]), links=())
    refs = _pods(worker, OBJECTS)
    runner.observe_many([(r, pod.CreateRequested(at=AT)) for r in refs])
    runner.observe_many(
        [(r, pod.ProvisionSucceeded(at=AT, reserved=True, instance_id="i")) for r in refs]
    )
    state = {"k": 0}

    if mode in ("observe", "observe_cached"):

        def write() -> int:
            k = state["k"]
            state["k"] += 1
            result = runner.observe(refs[k % OBJECTS], _observation(k // OBJECTS))
            return int(result.committed)

        return write
    if mode == "observe_many":

        def write_many() -> int:
            k = state["k"]
            state["k"] += 1
            obs = _observation(k)
            return sum(r.committed for r in runner.observe_many([(r, obs) for r in refs]))

        return write_many
    # store.commit: the store's own write, statuses computed once
    records = {r.uid: store.load(POD, r) for r in refs}
    versions = {uid: rec.version for uid, rec in records.items()}
    statuses = {uid: rec.status for uid, rec in records.items()}

    def write_store() -> int:
        k = state["k"]
        state["k"] += 1
        ref = refs[k % OBJECTS]
        obs = _observation(k // OBJECTS)
        before = statuses[ref.uid]
        after = POD.apply(before, obs)
        version = versions[ref.uid]
        flips = stamp(POD.flips(before, after), ref, POD.name, version + 1, obs.at)
        store.commit(POD, ref, version, after, obs, flips)
        versions[ref.uid], statuses[ref.uid] = version + 1, after
        return 1

    return write_store


def _eventsourcing_recorder(backend: str, target: str) -> Any:
    if backend == "postgres":
        from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore

        port, table = target.split("/")
        datastore: Any = PostgresDatastore(
            "postgres", "127.0.0.1", port, USER, PASSWORD, pool_size=1
        )
        recorder: Any = PostgresApplicationRecorder(datastore, events_table_name=table)
    else:
        from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteDatastore

        datastore = SQLiteDatastore(target)
        recorder = SQLiteApplicationRecorder(datastore)
    return recorder


def _eventsourcing_writer(backend: str, target: str, worker: int) -> Callable[[], int]:
    from eventsourcing.persistence import StoredEvent

    from lifecycle.machines import POD

    recorder = _eventsourcing_recorder(backend, target)
    refs = _pods(worker, OBJECTS)
    ids = [uuid.uuid5(uuid.NAMESPACE_URL, r.uid) for r in refs]
    status = POD.initial(refs[0])
    versions = dict.fromkeys(ids, 0)
    state = {"k": 0}

    def write() -> int:
        k = state["k"]
        state["k"] += 1
        i = k % OBJECTS
        obs = _observation(k // OBJECTS)
        payload = {
            "status": POD.dump_status(status),
            "observation": obs.name(),
            "fields": POD.dump_observation(obs),
            "at": obs.at.isoformat(),
        }
        versions[ids[i]] += 1
        recorder.insert_events(
            [
                StoredEvent(
                    ids[i], versions[ids[i]], "lifecycle#Observed", json.dumps(payload).encode()
                )
            ]
        )
        return 1

    return write


def _writer(row: str, target: str, worker: int, seconds: float, barrier: Any, out: Any) -> None:
    implementation, backend = row.split(":")
    try:
        if implementation == "eventsourcing":
            write = _eventsourcing_writer(backend, target, worker)
        elif implementation in ("floor", "floor_notify"):
            write = _floor_writer(target, notify=implementation == "floor_notify")
        elif implementation == "dispatch":
            write = _dispatch_writer(target, worker)
        else:
            write = _lifecycle_writer(implementation, backend, target, worker)
        barrier.wait()
        done = errors = idle = 0
        start = last = time.perf_counter()
        deadline = start + seconds
        while time.perf_counter() < deadline:
            try:
                n = write()
            except Exception:
                errors += 1
                continue
            done += n
            if n:
                last, idle = time.perf_counter(), 0
            elif implementation == "dispatch":  # the outbox is drained: stop the clock
                idle += 1
                if idle >= 3:
                    break
        # a dispatcher's window ends with its last delivery (a drained outbox is no work)
        out.put((worker, done, errors, last - start if implementation == "dispatch" else seconds))
    except Exception as e:  # report, never hang the parent
        barrier.abort()
        out.put((worker, -1, repr(e), seconds))


# -- the run --------------------------------------------------------------------------------
ROWS = [
    ("lifecycle store.commit", "commit"),
    ("lifecycle Runner.observe", "observe"),
    (f"lifecycle Runner.observe_many ({BATCH})", "observe_many"),
    ("eventsourcing insert_events", "eventsourcing"),
]


def cell(
    ctx: Any, implementation: str, backend: str, writers: int, seconds: float, target: str
) -> tuple[float, int]:
    if implementation == "eventsourcing":  # its tables, once (its DDL is not race-safe)
        _eventsourcing_recorder(backend, target).create_table()
    barrier = ctx.Barrier(writers)
    out = ctx.Queue()
    procs = [
        ctx.Process(
            target=_writer,
            args=(f"{implementation}:{backend}", target, w, seconds, barrier, out),
        )
        for w in range(writers)
    ]
    for p in procs:
        p.start()
    results = [out.get(timeout=120 + seconds) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    failed = [r[2] for r in results if r[1] < 0]
    failed.sort(key=lambda e: "BrokenBarrier" in e)  # the cause first, its echoes after
    if failed:
        raise RuntimeError(f"{implementation} on {backend}: {failed[0]}")
    window = max(r[3] for r in results) or seconds
    return sum(r[1] for r in results) / window, sum(int(r[2]) for r in results)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="timed window per cell")
    parser.add_argument("--writers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    ctx = multiprocessing.get_context("spawn")
    figures: dict[str, dict[str, float]] = {}
    errors: dict[str, int] = {}
    server = PgServer(durable=True)
    server.start()
    try:
        with tempfile.TemporaryDirectory(prefix="lifecycle-bench-") as tmp:
            for backend in ("postgres", "sqlite"):
                for label, implementation in ROWS:
                    name = f"{label} [{backend}]"
                    figures[name] = {}
                    for writers in args.writers:
                        tag = f"{implementation}_{writers}_{uuid.uuid4().hex[:6]}"
                        if backend == "postgres":
                            target = (
                                f"{server.port}/es_{tag}"
                                if implementation == "eventsourcing"
                                else server.url(schema=f"lc_{tag}")
                            )
                        else:
                            target = str(Path(tmp) / f"{tag}.db")
                        rate, failed = cell(
                            ctx, implementation, backend, writers, args.seconds, target
                        )
                        figures[name][str(writers)] = rate
                        errors[f"{name} x{writers}"] = failed
                        print(f"  {name:<48} {writers} writer(s): {rate:10,.0f} obs/s", flush=True)
    finally:
        server.destroy()
    print()
    print(
        f"committed observations/s ({args.seconds:g} s per cell; PostgreSQL fsync=on "
        "synchronous_commit=on; SQLite WAL synchronous=FULL)"
    )
    head = f"{'':<50}" + "".join(
        f"{f'{w} writer' + ('s' if w > 1 else ''):>12}" for w in args.writers
    )
    print(head)
    for name, by in figures.items():
        print(f"{name:<50}" + "".join(f"{by[str(w)]:>12,.0f}" for w in args.writers))
    failures = {k: v for k, v in errors.items() if v}
    if failures:
        print(f"write errors (counted, not in the figures): {failures}")
    if args.json:
        Path(args.json).write_text(json.dumps({"figures": figures, "errors": errors}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
