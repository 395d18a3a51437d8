"""The hot path against its floors, one step at a time (issue 19): what ``benchmarks.pure``
measures as a whole, split where the time goes, so that a change to one step shows in its
own ratio.

    python -m benchmarks.hot_path [--quick]        # prints the rows; run.py: hot_path.suite

Every row is a ratio measured in one process, contenders interleaved in chunks on the
thread's CPU clock with the same chunks and rounds (``benchmarks.fair``): the median over
rounds and its range. The floors are hand-written for this benchmark on the same seeded stream:

- **apply**: the library's kernel (apply + flips) ÷ ``pure.hand_apply``/``pure.hand_flips``
  (a new ``NamedTuple`` status and a memoised flip: the library's own shape);
- **observe, changed** and **observe, unchanged** (a repeated poll, an ignore row):
  ``Runner.observe`` on a ``MemoryStore`` ÷ ``pure.HandRunner.observe`` (the runner's steps
  on plain dicts and tuples);
- **load + commit**: ``MemoryStore.load`` then ``commit`` of a changed status with its
  transition ÷ the same on a dict (read, compare-and-set, record, journal entry, outbox row).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any, ClassVar

from lifecycle import MachineRegistry, MemoryStore, ObjectRef, Observation, Runner, Table
from lifecycle._core.table import ignore
from lifecycle._core.transition import stamp

from .fair import CPU, Metric, interleave, metric, ratios
from .pure import AT, HAND_ROWS, Cursor, HandRunner, HandStatus, hand_apply, hand_flips
from .workload import BENCH, EDGES, OBSERVATIONS, STATES, TABLE, BenchMachine, stream


def _poll() -> type[Observation]:
    import attrs

    cls: type[Observation] = attrs.make_class(
        "Poll", {}, bases=(Observation,), slots=True, frozen=True, kw_only=True
    )
    return cls


Poll = _poll()


class PollingBench(BenchMachine):
    """The benchmark lifecycle with a repeated poll: an ignore row from every state."""

    name: ClassVar[str] = "bench"
    table: ClassVar[Table] = Table(
        "bench",
        states=STATES,
        initial="New",
        terminal=(),
        observations=(*TABLE.observations, Poll),
        rows=[*TABLE.rows, *(ignore(s, Poll, "a repeated poll") for s in STATES)],
    )


POLLING = PollingBench()
#: The hand-written floor's poll: every polled object is in Provisioning, entered from New,
#: so the row gives an equal status (the hand-written observe then finds no change).
HAND_ROWS[("Provisioning", Poll)] = ("Provisioning", "Provisioning", "New -> Provisioning")


def _work(objects: int, per: int) -> list[tuple[ObjectRef, Any]]:
    obs = {e: cls(at=AT) for e, cls in OBSERVATIONS.items()}
    refs = [ObjectRef("Bench", "bench", f"obj-{i}", f"u{i:08d}") for i in range(objects)]
    return [(refs[i], obs[e]) for i, e in stream(objects, per)]


def _observing(observe: Callable[[ObjectRef, Any], Any], work: list[Any], chunk: int) -> Any:
    cursor = Cursor(work, chunk)

    def run() -> int:
        for ref, o in cursor.next():
            observe(ref, o)
        return chunk

    return run


def apply_rows(rounds: int, chunk: int, objects: int) -> dict[str, Metric]:
    per = (rounds + 2) * chunk // objects + 1
    obs = {e: cls(at=AT) for e, cls in OBSERVATIONS.items()}
    items = [(i, obs[e]) for i, e in stream(objects, per)]

    def kernel(apply: Callable[..., Any], flips: Callable[..., Any], initial: Any) -> Any:
        statuses = [initial] * objects
        cursor = Cursor(items, chunk)

        def run() -> int:
            for i, o in cursor.next():
                before = statuses[i]
                after = apply(before, o)
                flips(before, after)
                statuses[i] = after
            return chunk

        return run

    ref = ObjectRef("Bench", "", "x", "x")
    t = interleave(
        {"ours": kernel(BENCH.apply, BENCH.flips, BENCH.initial(ref)),
         "hand": kernel(hand_apply, hand_flips, HandStatus("New", "", ""))},
        rounds, CPU,
    )  # fmt: skip
    return {
        "hot_apply_vs_handwritten": metric(
            ratios(t["ours"], t["hand"]), "<= 1.2", ours=t["ours"], base=t["hand"],
            unit="ns/obs", scale=1e9,
            what="Machine.apply + flips ÷ hand-written apply of the same shape; CPU time",
        )
    }  # fmt: skip


def observe_rows(rounds: int, chunk: int, objects: int) -> dict[str, Metric]:
    per = (rounds + 2) * chunk // objects + 1
    changed = _work(objects, per)
    refs = list({ref.uid: ref for ref, _ in changed}.values())
    poll = Poll(at=AT)
    polls = [(refs[k % objects], poll) for k in range((rounds + 2) * chunk)]

    def runner() -> Runner:
        return Runner(MemoryStore(), [], machines=MachineRegistry([POLLING]), links=())

    ours, ours_poll = runner(), runner()
    hand, hand_poll = HandRunner(), HandRunner()
    hand.accepts = hand_poll.accepts = frozenset({*OBSERVATIONS.values(), Poll})
    create = OBSERVATIONS["create"](at=AT)
    for r in refs:  # every polled object exists, in Provisioning
        ours_poll.observe(r, create)
        hand_poll.observe(r, create)

    t = interleave(
        {"changed": _observing(ours.observe, changed, chunk),
         "hand changed": _observing(hand.observe, changed, chunk),
         "unchanged": _observing(ours_poll.observe, polls, chunk),
         "hand unchanged": _observing(hand_poll.observe, polls, chunk)},
        rounds, CPU,
    )  # fmt: skip
    what = f"Runner.observe (MemoryStore, {objects} objects) ÷ hand-written observe; CPU time"
    return {
        "hot_observe_changed_vs_handwritten": metric(
            ratios(t["changed"], t["hand changed"]), "<= 1.5", ours=t["changed"],
            base=t["hand changed"], unit="us/obs", what=f"a change of state: {what}",
        ),
        "hot_observe_unchanged_vs_handwritten": metric(
            ratios(t["unchanged"], t["hand unchanged"]), "info", ours=t["unchanged"],
            base=t["hand unchanged"], unit="us/obs", what=f"a repeated poll: {what}",
        ),
    }  # fmt: skip


class DictStore:
    """The floor of ``load`` + ``commit``: a record, a journal entry and an outbox row in
    dicts, with the compare-and-set."""

    def __init__(self) -> None:
        self.records: dict[str, tuple[Any, int]] = {}
        self.journal: dict[str, list[Any]] = {}
        self.outbox: dict[str, Any] = {}

    def load(self, ref: ObjectRef) -> tuple[Any, int] | None:
        return self.records.get(ref.uid)

    def commit(self, ref: ObjectRef, expected: int, status: Any, obs: Any, ts: Any) -> int:
        uid = ref.uid
        current = self.records.get(uid)
        if (0 if current is None else current[1]) != expected:
            raise AssertionError("conflict")
        self.records[uid] = (status, expected + 1)
        self.journal.setdefault(uid, []).append((expected + 1, obs, ts))
        for t in ts:
            self.outbox[f"{uid}:{expected + 1}:{t.n}"] = t
        return expected + 1


def store_rows(rounds: int, chunk: int, objects: int) -> dict[str, Metric]:
    """``load`` + ``commit`` alone: the transitions are stamped before the timing (what the
    protocol hands the store), the store does the rest."""
    per = (rounds + 2) * chunk // objects + 1
    work = _work(objects, per)
    statuses: dict[str, Any] = {}
    prepared = []
    for ref, o in work:  # the protocol's part, outside the timing
        before = statuses.get(ref.uid, BENCH.initial(ref))
        after = BENCH.apply(before, o)
        statuses[ref.uid] = after
        prepared.append((ref, o, after, BENCH.flips(before, after)))

    def ours() -> Any:
        store = MemoryStore()
        cursor = Cursor(prepared, chunk)
        load, commit, machine = store.load, store.commit, BENCH

        def run() -> int:
            for ref, o, after, flips in cursor.next():
                record = load(machine, ref)
                version = 0 if record is None else record.version
                ts = stamp(flips, ref, "bench", version + 1, o.at)
                commit(machine, ref, version, after, o, ts)
            return chunk

        return run

    def hand() -> Any:
        store = DictStore()
        cursor = Cursor(prepared, chunk)
        load, commit = store.load, store.commit

        def run() -> int:
            for ref, o, after, flips in cursor.next():
                record = load(ref)
                version = 0 if record is None else record[1]
                ts = stamp(flips, ref, "bench", version + 1, o.at)
                commit(ref, version, after, o, ts)
            return chunk

        return run

    t = interleave({"ours": ours(), "hand": hand()}, rounds, CPU)
    return {
        "hot_memory_load_commit_vs_dicts": metric(
            ratios(t["ours"], t["hand"]), "info", ours=t["ours"], base=t["hand"],
            unit="us/obs", what="MemoryStore.load + commit ÷ the same on dicts (stamping "
            "included on both sides); CPU time",
        )
    }  # fmt: skip


def scaling_rows(rounds: int, chunk: int, sizes: tuple[int, ...]) -> dict[str, Metric]:
    """``Runner.observe`` per observation on a memory store of each size, the stores side by
    side in this one process (every object observed twice first, then observations at random
    objects), chunks interleaved, the garbage collector on. The collector's heap is shared,
    so each size also pays for the others' objects: ``pure.scaling_suite`` runs each size in
    its own process; this one takes the machine's noise out of the ratio."""
    import random

    out_edges: dict[str, list[tuple[str, str]]] = {}
    for src, ev, dst, _ in EDGES:
        out_edges.setdefault(src, []).append((ev, dst))
    obs = {e: cls(at=AT) for e, cls in OBSERVATIONS.items()}
    contenders = {}
    for n in sizes:
        rng = random.Random(11)
        refs = [ObjectRef("Bench", "bench", f"obj-{i}", f"s{n}-{i:08d}") for i in range(n)]
        runner = Runner(MemoryStore(), [], machines=MachineRegistry([BENCH]), links=())
        states = ["New"] * n

        def step(i: int, refs: list[ObjectRef] = refs, states: list[str] = states,
                 rng: random.Random = rng) -> tuple[ObjectRef, Any]:  # fmt: skip
            ev, states[i] = rng.choice(out_edges[states[i]])
            return refs[i], obs[ev]

        for _ in range(2):
            for i in range(n):
                runner.observe(*step(i))
        work = [step(rng.randrange(n)) for _ in range((rounds + 1) * chunk)]
        contenders[str(n)] = _observing(runner.observe, work, chunk)
    t = interleave(contenders, rounds, CPU, collect=False)
    small = str(sizes[0])
    return {
        f"hot_scaling_{_label(n)}_vs_{_label(sizes[0])}": metric(
            ratios(t[str(n)], t[small]), "info", ours=t[str(n)], base=t[small], unit="us/obs",
            what=f"Runner.observe (MemoryStore) per observation at {n} objects ÷ at "
            f"{sizes[0]}, side by side in one process; CPU time, gc on",
        )
        for n in sizes[1:]
    }  # fmt: skip


def _label(n: int) -> str:
    return f"{n // 1_000_000}M" if n >= 1_000_000 else f"{n // 1000}k"


def suite(quick: bool) -> dict[str, Metric]:
    """Every row of this module: ``SUITES["hot_path"] = hot_path.suite`` in ``run.py``."""
    rounds, chunk, objects = (5, 1000, 500) if quick else (15, 2000, 1000)
    out = apply_rows(rounds, chunk, objects)
    out.update(observe_rows(rounds, chunk, objects))
    out.update(store_rows(rounds, chunk, objects))
    out.update(scaling_rows(rounds, chunk, (1_000, 10_000) if quick else (1_000, 100_000)))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    rows = suite(args.quick)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for name, m in rows.items():
        lo, hi = m["range"]
        print(f"{name:<40} {m['ratio']:6.3f} [{lo:.3f}, {hi:.3f}]  {m['target']:<7} "
              f"{m['ours']:.4g} / {m['baseline']:.4g} {m['unit']}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
