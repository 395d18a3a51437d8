"""Per-observation cost against object count and journal length, as a PNG for the docs.

    python -m benchmarks.plot [--out docs/performance.png] [--quick]

Runs ``Runner.observe`` on the benchmark workload (memory store; SQLite with
synchronous=NORMAL for the journal-length curve, so fsync does not hide the index cost).
"""

from __future__ import annotations

import argparse
import gc
import tempfile
import time
from pathlib import Path
from typing import Any

from lifecycle import MachineRegistry, MemoryStore, ObjectRef, Runner, SQLiteStore, Store

from .pure import AT
from .workload import BENCH, OBSERVATIONS, stream

ROOT = Path(__file__).resolve().parent.parent


def runner_cost(objects: int, per_object: int) -> float:
    """Seconds per observation through Runner.observe on the memory store."""
    events = stream(objects, per_object)
    obs = {e: cls(at=AT) for e, cls in OBSERVATIONS.items()}
    refs = [ObjectRef("Bench", "bench", f"obj-{i}", f"u{i:08d}") for i in range(objects)]
    work = [(refs[i], obs[e]) for i, e in events]
    observe = Runner(MemoryStore(), [], machines=MachineRegistry([BENCH]), links=()).observe
    gc.collect()
    start = time.perf_counter()
    for ref, o in work:
        observe(ref, o)
    return (time.perf_counter() - start) / len(work)


def journal_cost(store: Store, objects: int, history: int, sample: int = 2000) -> float:
    """Seconds per observation once each object already has ``history`` journal entries."""
    runner = Runner(store, [], machines=MachineRegistry([BENCH]), links=())
    obs = {e: cls(at=AT) for e, cls in OBSERVATIONS.items()}
    refs = [ObjectRef("Bench", "bench", f"o{i}", f"u{i}") for i in range(objects)]
    events = stream(objects, history + sample // objects + 1)
    warm = objects * history
    for i, e in events[:warm]:
        runner.observe(refs[i], obs[e])
    work = [(refs[i], obs[e]) for i, e in events[warm : warm + sample]]
    gc.collect()
    start = time.perf_counter()
    for ref, o in work:
        runner.observe(ref, o)
    return (time.perf_counter() - start) / len(work)


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default=str(ROOT / "docs" / "performance.png"))
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    counts = [1_000, 3_000, 10_000, 30_000] + ([] if args.quick else [100_000])
    by_count = [min(runner_cost(n, 5) for _ in range(2)) * 1e6 for n in counts]
    lengths = [1, 10, 100] + ([] if args.quick else [1000])
    mem = [journal_cost(MemoryStore(), 100, h) * 1e6 for h in lengths]
    sql: list[float] = []
    for h in lengths:
        with tempfile.TemporaryDirectory() as tmp:
            store: Any = SQLiteStore(Path(tmp) / "j.db", synchronous="NORMAL")
            sql.append(journal_cost(store, 100, h, sample=1000) * 1e6)
            store.close()
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    a.plot(counts, by_count, marker="o")
    a.set_xscale("log")
    a.set_ylim(bottom=0)
    a.set_xlabel("tracked objects")
    a.set_ylabel("µs per observation (Runner.observe, memory store)")
    a.set_title("Cost against object count")
    b.plot(lengths, mem, marker="o", label="memory store")
    b.plot(lengths, sql, marker="s", label="SQLite (WAL, synchronous=NORMAL)")
    b.set_xscale("log")
    b.set_ylim(bottom=0)
    b.set_xlabel("journal entries per object before the measured observation")
    b.set_ylabel("µs per observation")
    b.set_title("Cost against journal length")
    b.legend()
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    for n, c in zip(counts, by_count, strict=True):
        print(f"objects={n:>7}  {c:7.2f} µs/obs")
    for h, m, s in zip(lengths, mem, sql, strict=True):
        print(f"journal={h:>5}  memory {m:7.2f} µs/obs  sqlite {s:7.2f} µs/obs")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
