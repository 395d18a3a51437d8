"""What the content check costs Event delivery (issue 34, ADR 0141).

``KubernetesEmitter.deliver`` of new transitions until the API has them, with dedupe keyed on
id and content, the content token in the correlation key and a sink that can read an Event
back ÷ the same emitter keyed on the id alone, without the token, over a sink without
``read`` (today's acknowledgement).

    python -m benchmarks.k8s_content [--quick]

Both send to an API that takes every create and keeps nothing, so the figure is the
library's own cost. Each chunk delivers new transitions (a 201 each: the steady path) and
waits for every acknowledgement, every send made on the calling thread as a worker makes it
(no thread hand-offs measured); interleaved chunks, CPU time of that thread, median ratio
over rounds with its range. A redelivery answered ``AlreadyExists`` costs one ``GET`` more:
a request, not CPU, and not part of this row.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from collections.abc import Callable, Hashable, Mapping
from datetime import UTC, datetime
from typing import Any

from benchmarks.fair import Metric, interleave, metric, ratios
from lifecycle import EventType, ObjectRef, Transition
from lifecycle.emitters.kubernetes import Event, KubernetesEmitter

TARGET = "<= 1.05"
EPOCH = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


class IdOnly(KubernetesEmitter):
    """Today's acknowledgement: remembered by id alone, no content token in the key."""

    @staticmethod
    def _key(t: Transition) -> Hashable:
        return t.id

    @staticmethod
    def _token(t: Transition) -> str:
        return ""


class NoRead:
    """An API that takes every create (201) and keeps nothing, and cannot read an Event back:
    an AlreadyExists would be trusted, as today."""

    def create(self, event: Event) -> None:
        return None

    def patch(self, event: Event, patch: Mapping[str, Any]) -> None:
        return None


class Readable(NoRead):
    """The same API with ``read`` (never called on the steady path: no AlreadyExists)."""

    def read(self, event: Event) -> None:
        raise AssertionError("no AlreadyExists on the steady path")


def drain(emitter: KubernetesEmitter) -> None:
    """Make every queued send on this thread, as a worker would (no thread hand-offs in the
    measurement: the emitter is built with ``start=False``)."""
    d = emitter.dispatcher
    while True:
        with d.lock:
            if not d._ready:
                return
            key = d._ready.popleft()
            send = d._lanes[key].popleft()
            d._busy.add(key)
            d._waiting -= 1
        sent = d.correlator.try_send(send)
        send.answer(sent)
        with d.lock:
            d._busy.discard(key)
            d._done(key)


def _contender(emitter: KubernetesEmitter, prefix: str, chunk: int) -> Callable[[], int]:
    counter = itertools.count()

    def ack(t: Transition, outcome: Any) -> None:
        pass

    def run() -> int:
        for _ in range(chunk):
            i = next(counter)
            ref = ObjectRef("Job", "certs", f"cert-gpu-burn-{i}", f"{prefix}-{i:08d}")
            t = Transition(
                ref, "job", "Pending", "Running", "WorkloadCreated", EventType.NORMAL,
                f"Workload PyTorchJob/cert-gpu-burn-{i}-workload created", 2, EPOCH,
            )  # fmt: skip
            emitter.deliver(t, ack)
        drain(emitter)
        return chunk

    return run


def row(quick: bool) -> Metric:
    rounds, chunk = (7, 200) if quick else (31, 400)
    # no cache bound reached, no timers: only the per-Event path is measured
    options: dict[str, Any] = {
        "hostname": "bench",
        "timers": False,
        "start": False,
        "max_cached": 1 << 20,
    }
    checked = KubernetesEmitter(Readable(), **options)
    today = IdOnly(NoRead(), **options)
    try:
        t = interleave(
            {"checked": _contender(checked, "c", chunk), "today": _contender(today, "t", chunk)},
            rounds,
            time.thread_time,  # one thread does it all (see drain)
        )
    finally:
        checked.close(10.0)
        today.close(10.0)
    assert checked.stats.created == today.stats.created
    return metric(
        ratios(t["checked"], t["today"]),
        TARGET,
        ours=t["checked"],
        base=t["today"],
        unit="us/event",
        what="KubernetesEmitter.deliver of a new transition until acknowledged, content-checked "
        "(id+content keys, content token, read-back sink) ÷ id-only acknowledgement; "
        "CPU",
    )


def suite(quick: bool) -> dict[str, Metric]:
    return {"k8s_content_check_vs_id_only": row(quick)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    for name, m in suite(args.quick).items():
        lo, hi = m["range"]
        print(
            f"{name:36} {m['ours']:8.1f} vs {m['baseline']:8.1f} us/event  "
            f"ratio {m['ratio']:.3f} [{lo:.3f}..{hi:.3f}] target {m['target']} met={m['met']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
