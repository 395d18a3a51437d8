"""The fair comparison's order of contenders (``benchmarks.fair``): over each cycle of rounds
every contender runs in each place, and right after each other contender, equally often. The
old rotation (A B C, B C A, C A B) always ran B right after A: whatever A leaves behind (a
warm cache, garbage) always fell on B. No timing here: the schedule is checked structurally,
and an A/A comparison runs on a simulated clock whose cost depends on the previous chunk."""

from __future__ import annotations

import functools
import itertools
import statistics
from collections import Counter
from collections.abc import Callable

import pytest
from benchmarks.fair import balanced, interleave, order
from hypothesis import given, settings
from hypothesis import strategies as st


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 9), cycles=st.integers(1, 3), seed=st.integers(0, 2**16))
def test_every_cycle_puts_each_contender_in_each_place_and_after_each_other_equally(
    n: int, cycles: int, seed: int
) -> None:
    names = [f"c{i}" for i in range(n)]
    rows = len(balanced(n))
    assert rows == (n if n % 2 == 0 else 2 * n if n > 1 else 1)
    rounds = [order(names, r, seed) for r in range(cycles * rows)]
    assert all(sorted(row) == names for row in rounds)  # every contender once a round
    places = Counter((i, name) for row in rounds for i, name in enumerate(row))
    assert set(places.values()) == {cycles * rows // n}
    assert len(places) == n * n
    pairs = Counter((a, b) for row in rounds for a, b in itertools.pairwise(row))
    if n > 1:
        assert len(pairs) == n * (n - 1)  # every ordered pair of two contenders ...
        assert len(set(pairs.values())) == 1  # ... equally often


def test_the_order_is_repeatable_and_the_seed_changes_it() -> None:
    names = list("abcdef")
    assert [order(names, r) for r in range(12)] == [order(names, r) for r in range(12)]
    assert [order(names, r, 1) for r in range(6)] != [order(names, r, 2) for r in range(6)]


def test_no_items_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="at least one"):
        balanced(0)


class CarryOver:
    """A simulated clock and ``n`` contenders: a chunk costs 1, plus 0.5 when it runs right
    after the ``heavy`` contender's chunk in the same round (its garbage, its evicted cache;
    the collector between rounds clears it)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.now = 0.0
        self.last = ""
        self.chunks = 0

    def clock(self) -> float:
        return self.now

    def chunk(self, name: str) -> int:
        self.now += 1.5 if self.last == "heavy" else 1.0
        self.chunks += 1
        self.last = name if self.chunks % self.n else ""  # a round ends: collected
        return 1


def test_an_a_a_comparison_next_to_a_heavy_neighbour_comes_out_at_one() -> None:
    """Two identical contenders and one that leaves a cost to whoever runs next: the A/A
    ratio is exactly 1 over a whole number of cycles (the rotation gave 1.5: A always ran
    right after the heavy one)."""
    names = ("a", "a2", "heavy")
    sim = CarryOver(len(names))
    contenders: dict[str, Callable[[], int]] = {
        name: functools.partial(sim.chunk, name) for name in names
    }
    rounds = 4 * len(balanced(3))
    times = interleave(contenders, rounds, clock=sim.clock, warmup=0, collect=False)
    per_round = [x / y for x, y in zip(times["a"], times["a2"], strict=True)]
    assert statistics.median(per_round) == 1.0
    assert sum(times["a"]) == sum(times["a2"])
