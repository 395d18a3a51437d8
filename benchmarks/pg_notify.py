"""What every write notifying costs a PostgreSQL change (issue 34, ADR 0143).

    python -m benchmarks.pg_notify [--quick] [--json]

Since migration 5 a trigger on ``objects`` sends a ``NOTIFY`` for every row any writer
writes, so a status cache never misses one. This measures its price on the writer: one
durable throwaway server (``fsync=on``, ``synchronous_commit=on``), two schemas migrated
alike, one with the trigger disabled by hand (``off``), and on each an uncached
``PostgresStore`` at its defaults (one pooled connection). Contenders, interleaved in chunks
in one process (``benchmarks.fair``, wall time: these are durable writes):

- ``Runner.observe`` changing a stored object (Running <-> Degraded: a load, then the
  one-statement commit), notify on and off;
- ``Runner.observe_many`` of 50 such changes (one ``commit_many`` statement: 50 rows, 50
  notifications), notify on and off;
- an A/A control: a second schema with notify on, against the first -- the ratio the noise
  alone makes.

No handle listens: a notification is queued at commit whether or not anyone listens, and a
listener's work happens in another replica. Rows: each ``on ÷ off`` (target ``<= 1.05``)
and the control.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import psycopg

from .fair import WALL, Metric, interleave, metric, ratios


def _disable(url: str, schema: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'ALTER TABLE "{schema}".objects DISABLE TRIGGER lifecycle_notify')


def suite(quick: bool) -> dict[str, Metric]:
    from tests.stores.pg import PgServer

    from .postgres_floor import Ours

    rounds, chunk, batch = (5, 20, 50) if quick else (15, 40, 50)
    pg = PgServer(durable=True)
    sides: dict[str, Any] = {}
    try:
        pg.start()
        url = pg.url()
        for name in ("on", "off", "on_again"):
            sides[name] = Ours(url, "on", f"notify_{name}")
        _disable(url, "notify_off")
        for side in sides.values():
            side.prepare_existing(max(chunk, batch) * 2)
        contenders = {
            f"one_{name}": (lambda side=side: (side.observe_existing(chunk), chunk)[1])
            for name, side in sides.items()
        }
        contenders.update(
            {
                f"many_{name}": (lambda side=side: (side.many_existing(batch), batch)[1])
                for name, side in sides.items()
                if name != "on_again"
            }
        )
        times = interleave(contenders, rounds, clock=WALL)
    finally:
        for side in sides.values():
            side.close()
        pg.destroy()
    note = (
        "a trigger on objects notifies for every row any writer writes (ADR 0143); "
        "off: that trigger disabled by hand"
    )
    return {
        "pg_change_notify_on_vs_off": metric(
            ratios(times["one_on"], times["one_off"]),
            "<= 1.05",
            ours=times["one_on"],
            base=times["one_off"],
            unit="us/obs",
            what="PostgreSQL Runner.observe of a change, every write notifying ÷ no "
            "notification (uncached handle at the defaults; durable server; wall time)",
            note=note,
        ),
        "pg_change_many_notify_on_vs_off": metric(
            ratios(times["many_on"], times["many_off"]),
            "<= 1.05",
            ours=times["many_on"],
            base=times["many_off"],
            unit="us/obs",
            what=f"the same for Runner.observe_many of {batch} changes (one statement, "
            f"{batch} notifications)",
            note=note,
        ),
        "pg_change_notify_control_aa": metric(
            ratios(times["one_on_again"], times["one_on"]),
            "info",
            ours=times["one_on_again"],
            base=times["one_on"],
            unit="us/obs",
            what="A/A control: the change with notify on, on a second schema ÷ the first "
            "(the spread the noise alone makes)",
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    found = suite(args.quick)
    if args.json:
        json.dump(found, sys.stdout, indent=2)
        return 0
    for name, m in found.items():
        lo, hi = m["range"]
        print(f"{name:40} {m['ratio']:7.3f} [{lo:.3f}-{hi:.3f}]  target {m['target']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
