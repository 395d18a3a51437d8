"""The fair comparison every metric of ``benchmarks.run`` goes through (issue 19).

Contenders run in one process, interleaved in small chunks, each round in another order
(:func:`order`: over each cycle of rounds every contender runs in each place, and right after
each other contender, equally often, so what one chunk leaves behind -- a warm cache, garbage
to collect -- favours or costs no contender more than another), each chunk timed alone on
the clock that suits it: CPU time of the calling thread for pure work (another process's load
does not count), wall time only for durable writes (the flush is the work). Every contender
gets the same chunks and the same rounds. A round yields one ratio per pair; a metric is the
median of its ratio over rounds, with the range (lowest, highest), so a noisy machine widens
the range instead of moving the figure.
"""

from __future__ import annotations

import functools
import gc
import random
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

#: A contender: runs one chunk and returns how many operations it did.
Chunk = Callable[[], int]
Metric = dict[str, Any]

CPU = time.thread_time
WALL = time.perf_counter
#: The seed of the order of rounds within each cycle (a run is repeatable).
SEED = 19
T = TypeVar("T")


@functools.cache
def balanced(n: int) -> tuple[tuple[int, ...], ...]:
    """A Williams design of ``n`` items: rows (rounds) in which each item takes each place
    equally often and follows each other item equally often (once each over ``n`` rows for
    even ``n``; twice over ``2n`` rows for odd ``n``: the rows and their mirrors)."""
    if n < 1:
        raise ValueError(f"need at least one item, got {n}")
    first = [0]
    low, high = 1, n - 1
    while low <= high:
        first.append(low)
        if low != high:
            first.append(high)
        low, high = low + 1, high - 1
    rows = [tuple((x + i) % n for x in first) for i in range(n)]
    if n % 2 and n > 1:
        rows += [row[::-1] for row in rows]
    return tuple(rows)


def order(items: Sequence[T], r: int, seed: int = SEED) -> list[T]:
    """The ``r``-th round's order of ``items``: the rows of :func:`balanced`, shuffled within
    each cycle by a seeded generator. Every complete cycle is balanced (each item in each
    place, and right after each other item, equally often); a run's rounds are best a whole
    number of cycles (``len(balanced(len(items)))``)."""
    rows = balanced(len(items))
    cycle, at = divmod(r, len(rows))
    shuffled = list(rows)
    random.Random(seed * 1_000_003 + cycle).shuffle(shuffled)
    return [items[i] for i in shuffled[at]]


def interleave(
    contenders: dict[str, Chunk],
    rounds: int,
    clock: Callable[[], float] = CPU,
    warmup: int = 1,
    collect: bool = True,
) -> dict[str, list[float]]:
    """Seconds per operation of each contender, one figure per round (after ``warmup``
    untimed rounds), each round in its :func:`order` (the timed rounds from the start of a
    cycle). ``collect`` runs the garbage collector between rounds, never inside a chunk."""
    names = list(contenders)
    out: dict[str, list[float]] = {name: [] for name in names}
    for r in range(warmup + rounds):
        if collect:
            gc.collect()
        for name in order(names, r - warmup if r >= warmup else r):
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


def explain(row: Metric, reason: str, *, measured: bool = True) -> Metric:
    """Give a row that misses its target its reason (a row that meets it, or sets none, is
    left as it is). ``measured``: the text is computed from figures of the same run; if not,
    it is a short static text naming a cause measured elsewhere, and says so."""
    if row.get("met") is False:
        row["reason"] = reason if measured else f"(static, not measured in this run) {reason}"
        row["reason_measured"] = measured
    return row
