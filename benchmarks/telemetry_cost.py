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
- ``telemetry_off_vs_plain``: a runner built with ``telemetry=None`` ÷ the runner's class
  method called directly -- the no-telemetry path installs nothing, so this is the same code;
  target <= 1.01.

    python -m benchmarks.telemetry_cost [--quick]
"""

from __future__ import annotations

import argparse
import gc
import json
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry

from lifecycle import MachineRegistry, MemoryStore, Runner, SQLiteStore
from lifecycle.telemetry.prometheus import PrometheusTelemetry

from .durable import Names, folder
from .fair import CPU, WALL, Metric, interleave, metric, ratios
from .hot_path import POLLING, Poll, _observing, _work
from .pure import AT
from .workload import OBSERVATIONS

__all__ = ["suite"]


def _runner(store: Any, telemetry: Any = None) -> Runner:
    return Runner(store, [], machines=MachineRegistry([POLLING]), links=(), telemetry=telemetry)


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
    }
    if traced is not None:
        contenders["otel"] = _observing(traced.observe, list(work), chunk)
    t = interleave(contenders, rounds, CPU)
    what = f"Runner.observe, benchmark machine, MemoryStore, {objects} objects; CPU time"
    rows = {
        "telemetry_prometheus_memory_on_vs_off": metric(
            ratios(t["on"], t["off"]), "<= 1.10", ours=t["on"], base=t["off"], unit="us/obs",
            what=f"PrometheusTelemetry on ÷ no telemetry, a change of state: {what}",
            note="a changed observe here is ~7 µs of Python; the wrappers alone (a telemetry "
            "whose calls do nothing) are ~1.07 and the adapter's fold (one lock, two clock "
            "reads, a bucket, two counter keys) the rest: ADR 0130",
        ),
        "telemetry_prometheus_poll_on_vs_off": metric(
            ratios(t["on poll"], t["off poll"]), "info", ours=t["on poll"], base=t["off poll"],
            unit="us/obs", what=f"PrometheusTelemetry on ÷ no telemetry, a repeated poll: {what}",
        ),
        "telemetry_off_vs_plain": metric(
            ratios(t["plain"], t["direct"]), "<= 1.01", ours=t["plain"], base=t["direct"],
            unit="us/obs",
            what="Runner(telemetry=None).observe ÷ Runner.observe called through the class "
            f"(the same code: nothing is installed without telemetry): {what}",
        ),
    }  # fmt: skip
    if traced is not None:
        rows["telemetry_otel_memory_on_vs_off"] = metric(
            ratios(t["otel"], t["off"]),
            "info",
            ours=t["otel"],
            base=t["off"],
            unit="us/obs",
            what=f"OpenTelemetryTelemetry (SDK provider, no exporter) on ÷ off: {what}",
        )
    return rows


def _has_sdk() -> bool:
    try:
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError:
        return False
    return True


def sqlite_rows(rounds: int, chunk: int) -> dict[str, Metric]:
    """On ÷ off where an fsync is the work: its time varies more from one call to the next
    than telemetry costs, so the two contenders take turns call by call (which goes first
    alternating) and each round's ratio is of their summed wall times over ``chunk`` pairs."""
    create = OBSERVATIONS["create"](at=AT)
    with folder() as tmp:
        off_store = SQLiteStore(tmp / "off.db", synchronous="FULL")
        on_store = SQLiteStore(tmp / "on.db", synchronous="FULL")
        off = _runner(off_store)
        on = _runner(on_store, PrometheusTelemetry(CollectorRegistry()))
        names = {"off": Names("a"), "on": Names("b")}
        runners = {"off": off, "on": on}
        t: dict[str, list[float]] = {"off": [], "on": []}
        for r in range(rounds + 1):  # the first round warms up
            gc.collect()  # between rounds, as ``interleave`` does, never inside one
            spent = {"off": 0.0, "on": 0.0}
            refs = {k: v.take(chunk) for k, v in names.items()}
            for i in range(chunk):
                for k in ("off", "on") if (r + i) % 2 else ("on", "off"):
                    observe, ref = runners[k].observe, refs[k][i]
                    start = WALL()
                    observe(ref, create)
                    spent[k] += WALL() - start
            if r:
                for k in t:
                    t[k].append(spent[k] / chunk)
        off_store.close()
        on_store.close()
    return {
        "telemetry_prometheus_sqlite_full_on_vs_off": metric(
            ratios(t["on"], t["off"]),
            "<= 1.02",
            ours=t["on"],
            base=t["off"],
            unit="us/obs",
            what="PrometheusTelemetry on ÷ no telemetry: Runner.observe of a new object, SQLite "
            "synchronous=FULL, the two taking turns call by call; wall time",
            note="the same Python as on the memory store plus three timed store calls "
            "(~0.4 µs each): ~10-15 µs beside a ~400 µs fsync'd commit: ADR 0130",
        )
    }


def suite(quick: bool) -> dict[str, Metric]:
    """Every row of this module (``SUITES["telemetry"]`` in ``run.py``)."""
    # Enough rounds that the median settles: identical code measured against itself spreads
    # 0.8-1.3 a round on a loaded 2-core machine, and an fsync's time varies more than that.
    rounds, chunk, objects = (5, 1000, 500) if quick else (25, 4000, 1000)
    out = memory_rows(rounds, chunk, objects)
    out.update(sqlite_rows(4 if quick else 30, 8 if quick else 25))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    print(json.dumps(suite(args.quick), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
