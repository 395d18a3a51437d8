"""What the questions of the store cost on SQLite (issue 38, ADR 0159), each row a ratio in one
run, contenders interleaved (``benchmarks.fair``):

- ``find_stuck_vs_scan``: ``SQLiteStore.find(POD, state="Provisioning", older_than=600,
  limit=100)`` on 100 000 objects ÷ what a host did before: ``records()`` filtered by hand
  (state only: the age was not stored); CPU time. Target <= 0.05.
- ``state_counts_vs_scan``: ``state_counts()`` (what a scrape of the gauges runs, once per
  database) on the same file ÷ the same scan; CPU time. Target <= 0.2; its absolute
  milliseconds are the row's ``ours``.
- ``commit_entered_triggers_vs_none``: ``commit`` on SQLite at ``synchronous=OFF`` (every
  commit a change of state: a new object, then its move on) with the schema-4 triggers ÷ the
  same file without them; CPU time. Target <= 1.10.

    python -m benchmarks.state_queries [--quick]
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

from lifecycle import ObjectRef, SQLiteStore
from lifecycle._core.transition import stamp
from lifecycle.machines import POD, pod

from .fair import CPU, Metric, interleave, metric, ratios
from .pure import AT

__all__ = ["suite"]


def _step(store: SQLiteStore, ref: ObjectRef, obs: Any) -> None:
    record = store.load(POD, ref)
    before = POD.initial(ref) if record is None else record.status
    version = 0 if record is None else record.version
    after = POD.apply(before, obs)
    flips = stamp(POD.flips(before, after), ref, POD.name, version + 1, obs.at)
    store.commit(POD, ref, version, after, obs, flips)


def _fill(path: Path, n: int) -> None:
    """``n`` pods: a quarter in each of Provisioning, Initializing, Running and ProvisionFailed,
    entered at spread times (copies of four real records, the triggers setting ``entered``)."""
    store = SQLiteStore(path, synchronous="OFF")
    seeds = []
    create, placed = (
        pod.CreateRequested(at=AT),
        pod.ProvisionSucceeded(at=AT, reserved=True, instance_id="i"),
    )
    paths = ([create], [create, placed], [create, placed, pod.InstanceRunning(at=AT)],
             [create, pod.ProvisionRejected(at=AT, error="x")])  # fmt: skip
    for i, steps in enumerate(paths):
        ref = ObjectRef("Pod", "ml", f"seed-{i}", f"seed-{i}")
        for obs in steps:
            _step(store, ref, obs)
        seeds.append(ref.uid)
    store.close()
    with sqlite3.connect(path) as db:
        for k, seed in enumerate(seeds):
            db.execute(
                "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ?) "
                "INSERT INTO objects (uid, machine, kind, namespace, name, state, version, "
                "status, schema_version, schema_fingerprint) SELECT 'u' || ? || '-' || i, "
                "machine, kind, namespace, name || '-' || i, state, version, status, "
                "schema_version, schema_fingerprint FROM objects, n WHERE uid = ?",
                (n // 4 - 1, k, seed),
            )
        db.execute("UPDATE objects SET entered = entered - (abs(random()) % 3600)")


def _scan(store: SQLiteStore) -> int:
    found = [r for r in store.records(POD) if r.status.state == pod.PROVISIONING]
    assert found
    return 1


def suite(quick: bool = False) -> dict[str, Metric]:
    n = 20_000 if quick else 100_000
    rounds = 3 if quick else 7
    out: dict[str, Metric] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "q.db"
        _fill(path, n)
        store = SQLiteStore(path, synchronous="OFF")
        try:

            def find() -> int:
                store.find(POD, state=pod.PROVISIONING, older_than=600, limit=100)
                return 1

            def counts() -> int:
                store.state_counts()
                return 1

            t = interleave(
                {"find": find, "counts": counts, "scan": lambda: _scan(store)}, rounds, CPU
            )
        finally:
            store.close()
        what = f"{n} objects, SQLite"
        out["find_stuck_vs_scan"] = metric(
            ratios(t["find"], t["scan"]), "<= 0.05", ours=t["find"], base=t["scan"],
            unit="us", what=f"find(state, older_than, limit=100) / records() filtered; {what}",
        )  # fmt: skip
        out["state_counts_vs_scan"] = metric(
            ratios(t["counts"], t["scan"]), "<= 0.2", ours=t["counts"], base=t["scan"],
            unit="us", what=f"state_counts() (one scrape) / records() filtered; {what}",
        )  # fmt: skip
        out["commit_entered_triggers_vs_none"] = _commits(Path(tmp), rounds)
    return out


def _commits(tmp: Path, rounds: int) -> Metric:
    stores = {}
    for name in ("triggers", "none"):
        stores[name] = SQLiteStore(tmp / f"{name}.db", synchronous="OFF")
    with sqlite3.connect(tmp / "none.db") as db:
        db.executescript("DROP TRIGGER objects_entered_new; DROP TRIGGER objects_entered_moved;")
    counters = dict.fromkeys(stores, 0)

    def chunk(name: str) -> int:
        store = stores[name]
        for _ in range(200):
            counters[name] += 1
            ref = ObjectRef("Pod", "ml", f"p-{counters[name]}", f"u-{counters[name]}")
            _step(store, ref, pod.CreateRequested(at=AT))
            _step(store, ref, pod.ProvisionRejected(at=AT, error="x"))
        return 400

    try:
        t = interleave({name: (lambda name=name: chunk(name)) for name in stores}, rounds, CPU)
    finally:
        for store in stores.values():
            store.close()
    return metric(
        ratios(t["triggers"], t["none"]), "<= 1.10", ours=t["triggers"], base=t["none"],
        unit="us", what="commit (each a change of state) with the entered triggers / without",
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20 000 objects, 3 rounds")
    args = parser.parse_args()
    print(json.dumps(suite(args.quick), indent=2))


if __name__ == "__main__":
    main()
