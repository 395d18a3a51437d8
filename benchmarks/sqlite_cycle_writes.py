"""The SQLite store's part of a poll cycle (issue 37, ADR 0169).

    python -m benchmarks.sqlite_cycle_writes [--quick] [--pods N] [--rounds N]

Each cycle commits the changes of a fleet's poll cycle alone -- the 2 % of the Pods whose
readiness flips (``benchmarks.cycle.Fleet``), by ``Runner.observe_many`` -- so the store's
work is most of what is timed, not the polls that change nothing. Contenders, interleaved in
this one process (``benchmarks.cycle.interleave``):

- ``SQLiteStore`` as it is (schema 5: the journal appended, ADR 0169), at ``FULL`` and
  ``NORMAL``;
- the same store put back, after it opened, as schema 4 had it (ADR 0169's "before"): its
  journal keyed (``WITHOUT ROWID`` on (uid, version)), the ``objects_by_machine`` index, the
  state trigger that wrote each moved row again, and -- around its own cycles only -- statuses
  encoded by ``json`` and 256 delivery marks held at most (what it does not undo: a batch
  commit carrying held marks);
- ``MemoryStore``: the same changes with no SQL (what the runner costs without a file).

Rows: schema 4 ÷ schema 5 (wall and client CPU, each synchronous setting; above 1: schema 5
is faster), and the appended store ÷ the memory store (client CPU: what the file
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
from lifecycle.stores import _sqlite_marks, _sqlite_write
from lifecycle.stores._sqlite_codec import dumps
from lifecycle.stores._sqlite_find import NOW

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
    "DROP TRIGGER objects_entered_moved",
    "CREATE TRIGGER objects_entered_moved AFTER UPDATE OF state ON objects FOR EACH ROW "
    f"WHEN OLD.state IS NOT NEW.state BEGIN UPDATE objects SET entered = {NOW} "
    "WHERE rowid = NEW.rowid; END",
)


def keyed(store: SQLiteStore) -> SQLiteStore:
    """``store``'s tables as schema 4 had them (the booted fleet's entries kept)."""
    db: sqlite3.Connection = store._db
    db.execute("BEGIN IMMEDIATE")
    for statement in _KEYED:
        db.execute(statement)
    db.execute("COMMIT")
    return store


def as_before(cycle: Cycle) -> Cycle:
    """``cycle`` run with schema 4's status encoding (``json``) and 256 held marks at most."""
    before = ((_sqlite_write, "dumps_status", dumps), (_sqlite_marks, "HELD_MARKS", 256))

    def run() -> None:
        saved = [(module, name, getattr(module, name)) for module, name, _ in before]
        for module, name, value in before:
            setattr(module, name, value)
        try:
            cycle()
        finally:
            for module, name, value in saved:
                setattr(module, name, value)

    return run


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
        for name in ("keyed_full", "keyed_normal"):
            contenders[name] = as_before(contenders[name])
        times = interleave(contenders, rounds)
        for store in stores.values():
            store.close()
    what = f"a poll cycle's changes ({n} Pods, 2 % flipping readiness, observe_many)"
    for sync in ("full", "normal"):
        for clock in ("wall", "cpu"):
            ours, base = times[f"keyed_{sync}"][clock], times[f"appended_{sync}"][clock]
            out[f"sqlite_cycle_changes_schema4_vs_schema5_{sync}_{clock}"] = metric(
                ratios(ours, base),
                "info",
                ours=ours,
                base=base,
                unit="ms/cycle",
                scale=1e3,
                what=f"{what} on SQLite {sync.upper()}: as schema 4 wrote them (keyed journal, "
                f"the extra index, the trigger's second write, json statuses) ÷ schema 5 "
                f"({clock}; above 1: schema 5 is faster)",
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
