"""What telemetry costs a runner (issue 25), each row a ratio in one run, contenders
interleaved in chunks (``benchmarks.fair``):

- ``telemetry_prometheus_memory_on_vs_off``: ``Runner.observe`` (changes of state, the
  benchmark machine, MemoryStore) with :class:`PrometheusTelemetry` ÷ the same without any
  telemetry; CPU time. Target <= 1.10.
- ``telemetry_prometheus_poll_on_vs_off``: the same for a repeated poll (nothing changes);
  informational (the cheapest call there is, so the largest share).
- ``telemetry_prometheus_sqlite_full_on_vs_off``: ``Runner.observe`` of a new object on SQLite
  at ``synchronous=FULL``, on ÷ off; wall time (the flush is the work), the two contenders
  taking turns call by call rather than chunk by chunk. Target <= 1.02.
- ``telemetry_otel_memory_on_vs_off``: with :class:`OpenTelemetryTelemetry` on an SDK tracer
  provider with no exporter (spans made and dropped); informational.
- ``telemetry_counting_floor_memory``: an inline wrapper doing the least a per-observe
  metric can (time it, count it by machine and outcome under a lock) ÷ off; informational,
  the floor the 1.10 target is measured against in the same run.
- ``telemetry_prometheus_memory_vs_hand_rolled``: :class:`PrometheusTelemetry` on ÷ the
  peer a controller author writes without this library: a wrapper that times each observe
  and counts it and its transitions with ``prometheus_client``'s own ``Counter`` and
  ``Histogram`` (fewer facts than the adapter exports); informational.
- ``telemetry_sqlite_full_control``: no telemetry ÷ no telemetry on the SQLite row's
  harness (its resolution); informational.
- ``telemetry_off_vs_plain``: a runner built with ``telemetry=None`` ÷ the runner's class
  method called directly -- the no-telemetry path installs nothing, so this is the same code;
  target <= 1.01.

    python -m benchmarks.telemetry_cost [--quick]
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import threading
from collections.abc import Callable
from time import perf_counter
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

from lifecycle import MachineRegistry, MemoryStore, Runner, SQLiteStore
from lifecycle.telemetry.prometheus import DEFAULT_BUCKETS, PrometheusTelemetry

from .durable import Names, folder
from .fair import CPU, WALL, Metric, interleave, metric, ratios
from .hot_path import POLLING, Poll, _observing, _work
from .pure import AT
from .workload import OBSERVATIONS

__all__ = ["suite"]


def _runner(store: Any, telemetry: Any = None) -> Runner:
    return Runner(store, [], machines=MachineRegistry([POLLING]), links=(), telemetry=telemetry)


def _row(
    t: dict[str, list[float]], ours: str, base: str, target: str, *, what: str, note: str = ""
) -> Metric:
    """The row of contender ``ours`` ÷ ``base``, in µs per observe."""
    return metric(
        ratios(t[ours], t[base]), target, ours=t[ours], base=t[base], unit="us/obs", what=what,
        note=note,
    )  # fmt: skip


def _counting_floor(runner: Runner) -> Callable[[Any, Any], Any]:
    """The least a metrics adapter can do per observe, written inline with no port at all:
    time the call, count it by machine and outcome and add up its time, under a lock (no
    transitions, no buckets, no begin/end). Prometheus on ÷ this floor is what the port and
    the fold add."""
    call, lock = runner.observe, threading.Lock()
    counts: dict[tuple[str, object], int] = {}
    spent = [0.0]
    acquire, release = lock.acquire, lock.release
    kinds: dict[str, str] = {}

    def observe(ref: Any, observation: Any) -> Any:
        start = perf_counter()
        found = call(ref, observation)
        took = perf_counter() - start
        kind = ref.kind
        key = (kinds.get(kind) or kinds.setdefault(kind, kind.lower()), found[0])
        acquire()
        counts[key] = counts.get(key, 0) + 1
        spent[0] += took
        release()
        return found

    return observe


def _hand_rolled(runner: Runner) -> Callable[[Any, Any], Any]:
    """The peer: what a controller author writes with ``prometheus_client`` alone, around
    the same runner -- an observe's outcome by machine, its transitions by machine, from, to
    and type, and its duration, each through the client's ``labels(...)`` children (no
    conflicts, fallbacks, store latency or failure guard: fewer facts than the adapter)."""
    registry = CollectorRegistry()
    observations = Counter("peer_observations", "", ("machine", "outcome"), registry=registry)
    transitions = Counter(
        "peer_transitions", "", ("machine", "from", "to", "type"), registry=registry
    )
    durations = Histogram(
        "peer_observe_duration_seconds", "", ("operation",), registry=registry,
        buckets=DEFAULT_BUCKETS,
    )  # fmt: skip
    call, for_kind = runner.observe, runner.machines.for_kind
    names: dict[str, str] = {}

    def observe(ref: Any, observation: Any) -> Any:
        start = perf_counter()
        found = call(ref, observation)
        machine = names.get(ref.kind) or names.setdefault(ref.kind, for_kind(ref.kind).name)
        observations.labels(machine, found.outcome.name.lower()).inc()
        for t in found.transitions:
            transitions.labels(machine, t.source, t.target, t.type.value).inc()
        durations.labels("observe").observe(perf_counter() - start)
        return found

    return observe


def _otel() -> Any:
    from opentelemetry.sdk.trace import TracerProvider

    from lifecycle.telemetry.otel import OpenTelemetryTelemetry

    return OpenTelemetryTelemetry(TracerProvider())


def memory_rows(rounds: int, chunk: int, objects: int) -> dict[str, Metric]:
    per = (rounds + 2) * chunk // objects + 1
    work = _work(objects, per)
    refs = list({ref.uid: ref for ref, _ in work}.values())
    poll = Poll(at=AT)
    polls = [(refs[k % objects], poll) for k in range((rounds + 2) * chunk)]
    off, on = _runner(MemoryStore()), _runner(MemoryStore(), PrometheusTelemetry(None))
    plain, direct = _runner(MemoryStore()), _runner(MemoryStore())
    floor = _runner(MemoryStore())
    traced = _runner(MemoryStore(), _otel()) if _has_sdk() else None
    off_poll, on_poll = _runner(MemoryStore()), _runner(MemoryStore(), PrometheusTelemetry(None))
    create = OBSERVATIONS["create"](at=AT)
    for r in refs:
        off_poll.observe(r, create)
        on_poll.observe(r, create)

    def unbound(runner: Runner) -> Callable[[Any, Any], Any]:
        method = Runner.observe
        return lambda ref, obs: method(runner, ref, obs)

    contenders = {
        "off": _observing(off.observe, list(work), chunk),
        "on": _observing(on.observe, list(work), chunk),
        "off poll": _observing(off_poll.observe, polls, chunk),
        "on poll": _observing(on_poll.observe, polls, chunk),
        "plain": _observing(plain.observe, list(work), chunk),
        "direct": _observing(unbound(direct), list(work), chunk),
        "floor": _observing(_counting_floor(floor), list(work), chunk),
        "hand-rolled": _observing(_hand_rolled(_runner(MemoryStore())), list(work), chunk),
    }
    if traced is not None:
        contenders["otel"] = _observing(traced.observe, list(work), chunk)
    t = interleave(contenders, rounds, CPU)
    what = f"Runner.observe, benchmark machine, MemoryStore, {objects} objects; CPU time"
    rows = {
        "telemetry_prometheus_memory_on_vs_off": _row(
            t, "on", "off", "<= 1.10",
            what=f"PrometheusTelemetry on ÷ no telemetry, a change of state: {what}",
            note="a changed observe here is ~5.5 µs of Python; the adapter adds the observe's "
            "wrapper (two clock reads, one observe_ended call) and its fold (one lock, a bucket, "
            "two counter keys); compare the counting floor and the hand-rolled peer: ADR 0130",
        ),
        "telemetry_prometheus_poll_on_vs_off": _row(
            t, "on poll", "off poll", "info",
            what=f"PrometheusTelemetry on ÷ no telemetry, a repeated poll: {what}",
        ),
        "telemetry_counting_floor_memory": _row(
            t, "floor", "off", "info",
            what="an inline wrapper that only times each observe and counts it by machine and "
            f"outcome under a lock (no port, no transitions, no histogram) ÷ no telemetry: {what}",
            note="the least a per-observe metric costs in Python here; Prometheus on ÷ off "
            "minus this is what the port and the full fold add: ADR 0130",
        ),
        "telemetry_prometheus_memory_vs_hand_rolled": _row(
            t, "on", "hand-rolled", "info",
            what="PrometheusTelemetry on ÷ a wrapper counting outcomes and transitions and "
            f"timing each observe with prometheus_client's Counter and Histogram: {what}",
            note="the peer exports three of the adapter's families; below 1 is the adapter "
            "cheaper than hand-rolled client metrics: ADR 0130",
        ),
        "telemetry_off_vs_plain": _row(
            t, "plain", "direct", "<= 1.01",
            what="Runner(telemetry=None).observe ÷ Runner.observe called through the class "
            f"(the same code: nothing is installed without telemetry): {what}",
        ),
    }  # fmt: skip
    if traced is not None:
        rows["telemetry_otel_memory_on_vs_off"] = _row(
            t, "otel", "off", "info",
            what=f"OpenTelemetryTelemetry (SDK provider, no exporter) on ÷ off: {what}",
        )  # fmt: skip
    return rows


def _has_sdk() -> bool:
    try:
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError:
        return False
    return True


def sqlite_rows(rounds: int, chunk: int) -> dict[str, Metric]:
    """On ÷ off where an fsync is the work, beside an A/A control (no telemetry ÷ no
    telemetry) that shows what the row can resolve.

    An fsync's time varies more from one call to the next than telemetry costs, so the
    contenders take turns call by call (the order rotating through every permutation) and each
    round's ratio is of their summed wall times over ``chunk`` turns. Each database file also
    has a speed of its own (measured: one of two identical files ran 1.5-3 % faster for a
    whole run, more than the target allows), so the files rotate between the contenders from
    one round to the next: each contender writes to each file equally often."""
    create = OBSERVATIONS["create"](at=AT)
    kinds = ("on", "off", "control")
    with folder() as tmp:
        stores = [SQLiteStore(tmp / f"{n}.db", synchronous="FULL") for n in range(len(kinds))]
        metrics = PrometheusTelemetry(CollectorRegistry())
        # a runner per contender and file: a contender's runner changes with its file
        runners = {
            (k, n): _runner(store, metrics if k == "on" else None)
            for k in kinds
            for n, store in enumerate(stores)
        }
        names = {k: Names(k[:2]) for k in kinds}  # two-letter prefixes: equal key lengths
        turns = list(itertools.permutations(kinds))
        t: dict[str, list[float]] = {k: [] for k in kinds}
        for r in range(rounds + 1):  # the first round warms up
            gc.collect()  # between rounds, as ``interleave`` does, never inside one
            spent = dict.fromkeys(kinds, 0.0)
            refs = {k: v.take(chunk) for k, v in names.items()}
            observe = {k: runners[(k, (i + r) % len(stores))].observe for i, k in enumerate(kinds)}
            for i in range(chunk):
                for k in turns[(r * chunk + i) % len(turns)]:
                    call, ref = observe[k], refs[k][i]
                    start = WALL()
                    call(ref, create)
                    spent[k] += WALL() - start
            if r:
                for k in kinds:
                    t[k].append(spent[k] / chunk)
        for store in stores:
            store.close()
    how = (
        "Runner.observe of a new object, SQLite synchronous=FULL, the contenders taking "
        "turns call by call and the files rotating between them round by round; wall time"
    )
    return {
        "telemetry_prometheus_sqlite_full_on_vs_off": _row(
            t, "on", "off", "<= 1.02",
            what=f"PrometheusTelemetry on ÷ no telemetry: {how}",
            note="the memory store's Python plus three timed store calls (at synchronous=OFF: "
            "~2.5 µs of wrappers and ~2 µs of fold) beside a ~300 µs fsync'd commit, on "
            "caches the fsync left cold; compare the A/A row: ADR 0130",
        ),
        "telemetry_sqlite_full_control": _row(
            t, "control", "off", "info",
            what=f"A/A control, no telemetry ÷ no telemetry (the row's resolution): {how}",
        ),
    }  # fmt: skip


def suite(quick: bool) -> dict[str, Metric]:
    """Every row of this module (``SUITES["telemetry"]`` in ``run.py``)."""
    # Enough rounds that the median settles: identical code measured against itself spreads
    # 0.8-1.3 a round on a loaded 2-core machine, and an fsync's time varies more than that.
    rounds, chunk, objects = (5, 1000, 500) if quick else (25, 4000, 1000)
    out = memory_rows(rounds, chunk, objects)
    out.update(sqlite_rows(4 if quick else 60, 8 if quick else 25))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    print(json.dumps(suite(args.quick), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
