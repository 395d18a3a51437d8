"""The peers against the call a host makes (issue 35): ``transitions`` and python-statemachine
(2.6 and the installed 3.x) against ``Runner.observe`` on the memory store, as well as against
the bare kernel (apply + flips), all in one interleaved run.

    python -m benchmarks.peer_observe [--quick]      # prints the rows; run.py: suite ``peers``

The ``apply`` suite compares the peers with the kernel alone: a step that stores nothing,
journals nothing and delivers nothing. A host calls ``Runner.observe``, which also reads the
stored record, checks the observation, compares and sets the status, appends the journal
entry and the outbox row, and delivers the events. Both comparisons are measured here, on the
shipped machines' status style (a frozen attrs record), with every contender fed the same
chunks of the same seeded stream on the thread's CPU clock (``benchmarks.fair``). A row is
*theirs ÷ ours*: above 1, the peer costs more per event.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from typing import Any

from lifecycle import MachineRegistry, MemoryStore, ObjectRef, Runner

from . import baselines, peers
from .fair import CPU, Metric, explain, interleave, metric, ratios
from .pure import AT, Cursor
from .workload import BENCH_ATTRS, OBSERVATIONS, stream

#: issue 37: Runner.observe at least 3 times as fast as transitions' trigger, 5 times as
#: python-statemachine 2.6's send (the row's ratio is theirs ÷ ours: the speed-up)
TARGETS = {"transitions": ">= 3", "statemachine_2.6": ">= 5"}


def suite(quick: bool) -> dict[str, Metric]:
    rounds, chunk, objects = (5, 1000, 500) if quick else (15, 2000, 1000)
    per = (rounds + 2) * chunk // objects + 1
    events = stream(objects, per)
    obs = {e: cls(at=AT) for e, cls in OBSERVATIONS.items()}
    refs = [ObjectRef("Bench", "bench", f"obj-{i}", f"u{i:08d}") for i in range(objects)]
    work = [(refs[i], obs[e]) for i, e in events]

    def observe() -> Callable[[], int]:
        runner = Runner(MemoryStore(), [], machines=MachineRegistry([BENCH_ATTRS]), links=())
        cursor = Cursor(work, chunk)
        call = runner.observe

        def run() -> int:
            for ref, o in cursor.next():
                call(ref, o)
            return chunk

        return run

    def kernel() -> Callable[[], int]:
        apply, flips = BENCH_ATTRS.apply, BENCH_ATTRS.flips
        statuses = [BENCH_ATTRS.initial(refs[0])] * objects
        cursor = Cursor([(i, obs[e]) for i, e in events], chunk)

        def run() -> int:
            for i, o in cursor.next():
                before = statuses[i]
                after = apply(before, o)
                flips(before, after)
                statuses[i] = after
            return chunk

        return run

    def transitions() -> Callable[[], int]:
        _, models = baselines.transitions_machine(objects)
        cursor = Cursor(events, chunk)

        def run() -> int:
            for i, e in cursor.next():
                models[i].trigger(e)
            return chunk

        return run

    def statemachine(module_set: peers.ModuleSet) -> Callable[[], int]:
        with module_set.active():
            sms = baselines.statemachine_objects(objects)
        cursor = Cursor(events, chunk)

        def run() -> int:
            with module_set.active():  # a few dict operations: < 0.1 % of a chunk
                for i, e in cursor.next():
                    sms[i].send(e)
            return chunk

        return run

    contenders: dict[str, Any] = {
        "observe": observe(),
        "kernel": kernel(),
        "transitions": transitions(),
    }
    versions, missing = peers.statemachine_versions()
    names = {"transitions": f"transitions {peers.version('transitions')}"}
    for ms in versions:
        contenders[f"statemachine {ms.version}"] = statemachine(ms)
        names[f"statemachine {ms.version}"] = f"python-statemachine {ms.version}"
    t = interleave(contenders, rounds, CPU)
    ns = 1e9
    out: dict[str, Metric] = {}
    for peer, title in names.items():
        key = peer.replace("statemachine ", "statemachine_")
        target = TARGETS.get(key.rpartition(".")[0] if "statemachine" in key else key, "info")
        row = metric(
            ratios(t[peer], t["observe"]), target, ours=t["observe"], base=t[peer],
            unit="ns/obs", scale=ns, note=missing if "statemachine" in peer else "",
            what=f"{title} ÷ Runner.observe (MemoryStore, {objects} objects, frozen attrs "
            "status: the shipped machines' style); CPU time: how many times faster the "
            "call a host makes is than the peer's",
        )  # fmt: skip
        if target != "info":
            theirs, mine = row["baseline"], row["ours"]
            kernel_ns = statistics.median(t["kernel"]) * ns
            need = theirs / float(target.split()[1])
            explain(row, f"Runner.observe {mine:.0f} ns an event, of which the kernel (apply "
                    f"+ flips) {kernel_ns:.0f} ns; {title} {theirs:.0f} ns: the target needs "
                    f"observe at {need:.0f} ns, {mine / need:.2f}x less than now")  # fmt: skip
        out[f"peer_{key}_vs_observe"] = row
        out[f"peer_{key}_vs_kernel"] = metric(
            ratios(t[peer], t["kernel"]), "info", ours=t["kernel"], base=t[peer],
            unit="ns/obs", scale=ns,
            what=f"{title} ÷ the kernel (apply + flips, frozen attrs status), same run",
        )  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    args = parser.parse_args(argv)
    for name, m in suite(args.quick).items():
        lo, hi = m["range"]
        print(
            f"{name:<40} {m['ratio']:6.2f}  [{lo:.2f}, {hi:.2f}]  "
            f"{m['baseline']:8.0f} vs {m['ours']:6.0f} ns/obs"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
