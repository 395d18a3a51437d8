"""The fair comparison every metric of ``benchmarks.run`` goes through (issue 19).

Contenders run in one process, interleaved in small chunks (A, B, C, then B, C, A, ...: the
order rotates each round), each chunk timed alone on the clock that suits it: CPU time of the
calling thread for pure work (another process's load does not count), wall time only for
durable writes (the flush is the work). Every contender gets the same chunks and the same
rounds. A round yields one ratio per pair; a metric is the median of its ratio over rounds,
with the range (lowest, highest), so a noisy machine widens the range instead of moving the
figure.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

#: A contender: runs one chunk and returns how many operations it did.
Chunk = Callable[[], int]
Metric = dict[str, Any]

CPU = time.thread_time
WALL = time.perf_counter


def interleave(
    contenders: dict[str, Chunk],
    rounds: int,
    clock: Callable[[], float] = CPU,
    warmup: int = 1,
    collect: bool = True,
) -> dict[str, list[float]]:
    """Seconds per operation of each contender, one figure per round (after ``warmup``
    untimed rounds). ``collect`` runs the garbage collector between rounds, never inside a
    chunk."""
    names = list(contenders)
    out: dict[str, list[float]] = {name: [] for name in names}
    for r in range(warmup + rounds):
        if collect:
            gc.collect()
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            start = clock()
            n = contenders[name]()
            took = clock() - start
            if r >= warmup:
                out[name].append(took / n)
    return out


def spread(values: Sequence[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "low": min(values), "high": max(values)}


def ratios(a: Sequence[float], b: Sequence[float]) -> list[float]:
    """Per round: ``a / b``."""
    return [x / y for x, y in zip(a, b, strict=True)]


def metric(
    ratio: Sequence[float],
    target: str,
    *,
    ours: Sequence[float] | None = None,
    base: Sequence[float] | None = None,
    unit: str = "",
    scale: float = 1e6,
    what: str = "",
    note: str = "",
) -> Metric:
    """One row of ``latest.json``: the ratio's median and range over rounds, whether the
    target is met (by the median), and the two sides' medians (``scale``: seconds to
    ``unit``)."""
    s = spread(ratio)
    out: Metric = {
        "ratio": s["median"],
        "range": [s["low"], s["high"]],
        "rounds": len(ratio),
        "target": target,
        "met": met(s["median"], target),
        "what": what,
    }
    if ours is not None:
        out["ours"] = statistics.median(ours) * scale
    if base is not None:
        out["baseline"] = statistics.median(base) * scale
    if unit:
        out["unit"] = unit
    if note:
        out["note"] = note
    return out


def met(value: float, target: str) -> bool | None:
    """``"<= 1.2"`` / ``">= 3"`` against ``value``; ``None`` for an informational row."""
    op, _, bound = target.partition(" ")
    if op == "<=":
        return value <= float(bound)
    if op == ">=":
        return value >= float(bound)
    return None
