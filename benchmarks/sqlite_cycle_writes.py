"""The SQLite store's part of a poll cycle (issue 37, ADR 0169).

    python -m benchmarks.sqlite_cycle_writes [--quick] [--pods N] [--rounds N]

Each cycle commits the changes of a fleet's poll cycle alone -- the 2 % of the Pods whose
readiness flips (``benchmarks.cycle.Fleet``), by ``Runner.observe_many`` -- so the store's
work is most of what is timed, not the polls that change nothing. Contenders, interleaved in
this one process (``benchmarks.cycle.interleave``):

- ``SQLiteStore`` as it is (schema 5: the journal appended, ADR 0169), at ``FULL`` and
  ``NORMAL``;
- the same store with its journal put back in schema 4's keyed layout (``WITHOUT ROWID`` on
  (uid, version), and the ``objects_by_machine`` index), after it opened: the layout this
  schema replaced, written by the same code;
- ``MemoryStore``: the same changes with no SQL (what the runner costs without a file).

Rows: the keyed layout ÷ the appended one (wall and client CPU, each synchronous setting; above
1: schema 5 is faster), and the appended store ÷ the memory store (client CPU: what the file
still costs a cycle's changes).
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Any

from lifecycle import MemoryStore, Runner, SQLiteStore

from .cycle import PAGE, Cycle, Fleet, interleave
from .fair import Metric, metric, ratios

#: schema 4's journal: keyed by its primary key, entries among their object's
_KEYED = (
    "ALTER TABLE journal RENAME TO appended",
    "CREATE TABLE journal (uid TEXT NOT NULL, version INTEGER NOT NULL, at TEXT NOT NULL, "
    "observation TEXT NOT NULL, fields TEXT NOT NULL, transitions TEXT NOT NULL, "
    "schema_version INTEGER NOT NULL DEFAULT 1, schema_fingerprint TEXT NOT NULL DEFAULT '', "
    "PRIMARY KEY (uid, version)) WITHOUT ROWID",
    "INSERT INTO journal SELECT uid, version, at, observation, fields, transitions, "
    "schema_version, schema_fingerprint FROM appended",
    "DROP TABLE appended",
    "CREATE INDEX objects_by_machine ON objects (machine, state)",
)


def keyed(store: SQLiteStore) -> SQLiteStore:
    """``store`` with its journal in schema 4's layout (the booted fleet's entries kept)."""
    db: sqlite3.Connection = store._db
    db.execute("BEGIN IMMEDIATE")
    for statement in _KEYED:
        db.execute(statement)
    db.execute("COMMIT")
    return store


def changes(store: Any, n: int, prefix: str, layout: Any = None) -> Cycle:
    """A cycle's changes alone on ``store``: the Pods whose readiness flipped, observed by
    pages; ``layout`` is applied to the store once the fleet is booted."""
    runner = Runner(store)
    fleet = Fleet(n, prefix)
    for step in fleet.boot():
        for start in range(0, n, PAGE):
            runner.observe_many(step[start : start + PAGE])
    if layout is not None:
        layout(store)

    def cycle() -> None:
        before = list(fleet.ready)
        polls = fleet.next()
        changed = [p for p, was, now in zip(polls, before, fleet.ready, strict=True) if was != now]
        for start in range(0, len(changed), PAGE):
            runner.observe_many(changed[start : start + PAGE])

    return cycle


def suite(quick: bool, pods: int | None = None, rounds: int | None = None) -> dict[str, Metric]:
    n, rounds = (pods or (2_000 if quick else 10_000)), (rounds or (3 if quick else 5))
    out: dict[str, Metric] = {}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        stores: dict[str, Any] = {
            "appended_full": SQLiteStore(tmp / "af.db"),
            "keyed_full": SQLiteStore(tmp / "kf.db"),
            "appended_normal": SQLiteStore(tmp / "an.db", synchronous="NORMAL"),
            "keyed_normal": SQLiteStore(tmp / "kn.db", synchronous="NORMAL"),
            "memory": MemoryStore(),
        }
        contenders = {
            name: changes(store, n, name, keyed if name.startswith("keyed") else None)
            for name, store in stores.items()
        }
        times = interleave(contenders, rounds)
        for store in stores.values():
            store.close()
    what = f"a poll cycle's changes ({n} Pods, 2 % flipping readiness, observe_many)"
    for sync in ("full", "normal"):
        for clock in ("wall", "cpu"):
            ours, base = times[f"keyed_{sync}"][clock], times[f"appended_{sync}"][clock]
            out[f"sqlite_cycle_changes_keyed_vs_appended_{sync}_{clock}"] = metric(
                ratios(ours, base),
                "info",
                ours=ours,
                base=base,
                unit="ms/cycle",
                scale=1e3,
                what=f"{what} on SQLite {sync.upper()}: the journal in schema 4's keyed layout "
                f"÷ schema 5's appended one ({clock}; above 1: schema 5 is faster)",
            )
        ours, base = times[f"appended_{sync}"]["cpu"], times["memory"]["cpu"]
        out[f"sqlite_cycle_changes_{sync}_vs_memory_cpu"] = metric(
            ratios(ours, base),
            "info",
            ours=ours,
            base=base,
            unit="ms/cycle",
            scale=1e3,
            what=f"{what}: SQLite {sync.upper()} (schema 5) ÷ MemoryStore (client CPU)",
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--pods", type=int, help="Pods in the fleet (default 10 000)")
    parser.add_argument("--rounds", type=int, help="timed cycles per contender")
    args = parser.parse_args(argv)
    for name, m in suite(args.quick, pods=args.pods, rounds=args.rounds).items():
        lo, hi = m["range"]
        sides = f"{m['ours']:.2f} / {m['baseline']:.2f} ms"
        print(f"{name:52} {m['ratio']:6.2f} [{lo:.2f}-{hi:.2f}]  {sides}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
