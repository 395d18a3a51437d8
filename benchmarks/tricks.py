"""What each hand-built result or status buys, against the plain construction (ADR 0154).

    python -m benchmarks.tricks [--quick]

The hot paths build some records by hand instead of calling their constructor: a
``Result``/``Write``/``Transition`` in one ``tuple.__new__`` (ADR 0067), a status copied by a
compiled ``evolver`` instead of ``attrs.evolve``, and a machine's ``apply`` as one compiled
step per (state, observation type) instead of :func:`~lifecycle._core.machine.apply_reference`
(ADR 0015). Each stays only where it pays more than 5 % on a hot row. Every contender runs in
one process, interleaved in chunks (``benchmarks.fair``), on the same objects, with one
construction built by hand or plainly for the chunk's length (the rest as shipped):

- ``tuple.__new__`` against the named tuple's ``_make`` (one Python frame, as its own
  ``__new__`` costs, and a missing or extra field refused);
- the Pod's ``evolver`` against ``attrs.evolve``; the compiled steps against
  ``apply_reference``.

Rows (ratio: plain ÷ by hand; above 1.05 the hand one pays): ``Runner.observe`` on the memory
store (the bench machine's changing stream, and a Pod's lifecycle), the cached unchanged poll
(SQLite ``cache=``), ``Runner.observe`` on SQLite ``synchronous=FULL`` (CPU time too: the
flush is the same for both), and ``trace.parse_line`` (what a replay reads).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs

from lifecycle import (
    MachineRegistry,
    MemoryStore,
    ObjectRef,
    Runner,
    SQLiteStore,
    _protocol,
    runner,
    trace,
)
from lifecycle._core import machine as kernel
from lifecycle._core import transition
from lifecycle.machines import default_registry, pod
from lifecycle.telemetry import _instrument, _port

from .fair import CPU, Metric, interleave, metric, ratios
from .workload import BENCH, OBSERVATIONS, stream

AT = datetime(2026, 12, 1, tzinfo=UTC)


def _plain(cls: Any) -> Any:
    """The named tuple's own ``_make`` as ``(cls, fields)``: one Python frame, as its
    constructor costs, and a missing or extra field refused."""
    return cls._make.__func__


#: The shipped machines, one registry for every Pod runner here (the steps swap is theirs).
PODS = default_registry()

#: Each construction that was (or is) built by hand: the module global it lives in, the hand
#: version (the trick) and the plain one. As shipped (ADR 0154): ``evolver`` and the compiled
#: steps (below) are kept, each behind one helper; the ``tuple.__new__`` ones are plain.
VARIANTS: dict[str, tuple[Any, str, Any, Any]] = {
    "result": (runner, "_result", tuple.__new__, _plain(runner.Result)),
    "write": (_protocol, "_write", tuple.__new__, _plain(_protocol.Write)),
    "transition": (transition, "_new", tuple.__new__, _plain(transition.Transition)),
    "observation_line": (trace, "_new_tuple", tuple.__new__, _plain(trace.ObservationLine)),
    "evolver": (pod, "_evolve", kernel.evolver(pod.PodStatus), attrs.evolve),
    "observed": (_instrument, "_observed", tuple.__new__, _plain(_port.Observed)),
}
SHIPPED = {name: getattr(module, attr) for name, (module, attr, _, _) in VARIANTS.items()}
SHIPPED_APPLY: dict[str, Any] = {}


def _as_shipped(machines: list[Any]) -> None:
    for name, (module, attr, _, _) in VARIANTS.items():
        setattr(module, attr, SHIPPED[name])
    for m in machines:
        m.__dict__["apply"] = SHIPPED_APPLY[m.name]


def _contender(
    run: Callable[[], int], trick: str, hand: bool, machines: list[Any]
) -> Callable[[], int]:
    """``run`` with ``trick`` built by hand (``hand``) or plainly, for the chunk's length;
    everything else as shipped."""

    def chunk() -> int:
        _as_shipped(machines)
        if trick == "steps":
            for m in machines:
                m.__dict__["apply"] = SHIPPED_APPLY[m.name] if hand else _reference(m)
        else:
            module, attr, by_hand, plain = VARIANTS[trick]
            setattr(module, attr, by_hand if hand else plain)
        try:
            return run()
        finally:
            _as_shipped(machines)

    return chunk


def _reference(m: Any) -> Callable[[Any, Any], Any]:
    """The plain ``apply``: :func:`~lifecycle._core.machine.apply_reference`."""

    def apply(status: Any, obs: Any) -> Any:
        return kernel.apply_reference(m, status, obs)

    return apply


def _chunks(items: list[Any], n: int) -> Iterator[list[Any]]:
    """``items`` in runs of ``n``, in order (each object's observations stay in order)."""
    for at in range(0, len(items) - n + 1, n):
        yield items[at : at + n]


def _bench_observe(
    store: Any, chunk: int, objects: int, chunks: int, telemetry: Any = None
) -> Callable[[], int]:
    """``Runner.observe`` of the bench machine's stream, ``chunks`` runs of ``chunk`` at most
    (each call reported to ``telemetry`` if given)."""
    runner_ = Runner(store, [], machines=MachineRegistry([BENCH]), links=(), telemetry=telemetry)
    obs = {e: cls(at=AT) for e, cls in OBSERVATIONS.items()}
    refs = [ObjectRef("Bench", "bench", f"obj-{i}", f"u{i:08d}") for i in range(objects)]
    work = [(refs[i], obs[e]) for i, e in stream(objects, chunks * chunk // objects + 2)]
    runs = _chunks(work, chunk)
    observe = runner_.observe

    def run() -> int:
        for ref, o in next(runs):
            observe(ref, o)
        return chunk

    return run


class _Quiet:
    """A telemetry that keeps nothing: what reporting itself costs the runner."""

    traces = False

    def begin(self, operation: str, machine: str) -> object:
        return None

    def end(self, token: object, observed: Any, error: BaseException | None) -> None:
        pass

    def store_call(self, *args: Any) -> None:
        pass

    def emitted(self, *args: Any) -> None:
        pass


def _pod_lifecycle(chunk: int) -> Callable[[], int]:
    runner_ = Runner(MemoryStore(), [], machines=PODS, links=())
    life = [
        pod.CreateRequested(at=AT),
        pod.ProvisionSucceeded(at=AT, reserved=True, instance_id="i-1", endpoint="10.0.0.1"),
        pod.InstanceRunning(at=AT, instance_id="i-1", endpoint="10.0.0.1"),
        pod.InstanceRunning(at=AT, instance_id="i-1", endpoint="10.0.0.1"),
        pod.DeletionRequested(at=AT),
        pod.InstanceTerminated(at=AT, instance_id="i-1", exit_code=0),
    ]
    count = iter(range(10**9))
    observe = runner_.observe

    def run() -> int:
        done = 0
        while done < chunk:
            i = next(count)
            ref = ObjectRef("Pod", "ml", f"p-{i}", f"p-{i}")
            for o in life:
                observe(ref, o)
            done += len(life)
        return done

    return run


def _cached_poll(store: Any, chunk: int) -> Callable[[], int]:
    runner_ = Runner(store, [], machines=PODS, links=())
    ref = ObjectRef("Pod", "ml", "poll-0", "poll-0")
    runner_.observe(ref, pod.CreateRequested(at=AT))
    runner_.observe(ref, pod.ProvisionSucceeded(at=AT, reserved=True, instance_id="i-1"))
    runner_.observe(ref, pod.InstanceRunning(at=AT, instance_id="i-1"))
    poll = pod.InstanceRunning(at=AT, instance_id="i-1")
    observe = runner_.observe

    def run() -> int:
        for _ in range(chunk):
            observe(ref, poll)
        return chunk

    return run


def _parse_lines(chunk: int) -> Callable[[], int]:
    """``trace.parse_line`` of Pod observation lines (what a replay reads)."""
    lines = [
        json.dumps(
            {
                "at": "2026-12-01T00:00:00Z",
                "machine": "pod",
                "object": {"namespace": "ml", "name": f"p-{i}", "uid": f"p-{i}"},
                "observe": "InstanceRunning",
                "with": {"instance_id": "i-1"},
            }
        )
        for i in range(chunk)
    ]

    def run() -> int:
        for line in lines:
            trace.parse_line(line, PODS)
        return chunk

    return run


ROWS: dict[str, tuple[str, ...]] = {
    # row -> the constructions it exercises (each by hand and plain)
    "observe_memory": ("result", "write", "transition", "steps"),
    "observe_pod_memory": ("result", "write", "evolver", "steps"),
    "poll_cached_sqlite": ("result", "steps"),
    "observe_sqlite_full": ("result", "write", "transition", "steps"),
    "parse_line": ("observation_line",),
    "observe_memory_reported": ("observed",),
}


def suite(quick: bool) -> dict[str, Metric]:
    rounds, chunk = (5, 500) if quick else (11, 2000)
    out: dict[str, Metric] = {}
    with tempfile.TemporaryDirectory() as tmp:
        full = SQLiteStore(Path(tmp) / "full.db", synchronous="FULL")
        cached = SQLiteStore(Path(tmp) / "cached.db", synchronous="NORMAL", cache=1000)
        try:
            slow = max(chunk // 50, 10)
            rows: dict[str, tuple[Callable[[], int], Callable[[], float]]] = {
                "observe_memory": (
                    _bench_observe(MemoryStore(), chunk, 500, 10 * (rounds + 1)),
                    CPU,
                ),
                "observe_pod_memory": (_pod_lifecycle(chunk), CPU),
                "poll_cached_sqlite": (_cached_poll(cached, chunk), CPU),
                # CPU time: what a construction costs is the thread's work, not the flush
                "observe_sqlite_full": (_bench_observe(full, slow, 200, 10 * (rounds + 1)), CPU),
                "parse_line": (_parse_lines(chunk), CPU),
                "observe_memory_reported": (
                    _bench_observe(MemoryStore(), chunk, 500, 2 * (rounds + 1), _Quiet()),
                    CPU,
                ),
            }
            machines = [BENCH, PODS.for_kind("Pod")]
            for m in machines:
                SHIPPED_APPLY[m.name] = m.__dict__["apply"]
            for row, (run, clock) in rows.items():
                contenders = {}
                for trick in ROWS[row]:
                    contenders[f"{trick}:hand"] = _contender(run, trick, True, machines)
                    contenders[f"{trick}:plain"] = _contender(run, trick, False, machines)
                times = interleave(contenders, rounds, clock=clock)
                for trick in ROWS[row]:
                    hand, plain = times[f"{trick}:hand"], times[f"{trick}:plain"]
                    out[f"trick_{trick}_{row}"] = metric(
                        ratios(plain, hand),
                        "info",
                        ours=hand,
                        base=plain,
                        unit="us/op",
                        what=f"{row}: {trick} built plainly ÷ by hand (> 1.05: the hand one pays)",
                    )
        finally:
            full.close()
            cached.close()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true", help="the rows as JSON too")
    args = parser.parse_args(argv)
    results = suite(args.quick)
    for name, m in results.items():
        print(f"{name:45} {m['ratio']:.3f}  [{m['range'][0]:.3f}, {m['range'][1]:.3f}]")
    if args.json:
        json.dump(results, sys.stdout, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
