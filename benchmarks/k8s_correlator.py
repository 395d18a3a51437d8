"""Kubernetes Events correlator: emissions per second and memory per cached key.

    python benchmarks/k8s_correlator.py [--quick]

Runs the correlator (``lifecycle.emitters.kubernetes.Correlator``) against a sink that does
nothing, so what is measured is the broadcaster's own work: key, cache, series. Prints one JSON
object: ``new_keys_per_s`` (every Event a new key: cache + create), ``repeats_per_s`` (one key
repeated: counted in memory), ``bytes_per_cached_key`` (tracemalloc, Events of realistic size).
"""

from __future__ import annotations

import argparse
import json
import time
import tracemalloc
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from lifecycle.emitters.kubernetes import Correlator, Event, ObjectReference, build_event

EPOCH = datetime(2026, 11, 30, 10, 0, 0, tzinfo=UTC)


class NullSink:
    def create(self, event: Event) -> None:
        pass

    def patch(self, event: Event, patch: Mapping[str, Any]) -> None:
        pass


def event(i: int, *, distinct: bool = True) -> Event:
    """A realistic Job Event; with ``distinct=False`` every one has the same key."""
    k = i if distinct else 0
    regarding = ObjectReference(
        kind="Job", name=f"cert-gpu-burn-{k}", namespace="certs", uid=f"job-{k:08d}",
        api_version="nvcre.nvidia.com/v1alpha1", resource_version=str(1000 + k),
    )  # fmt: skip
    return build_event(
        regarding,
        type="Normal",
        reason="WorkloadCreated",
        note=f"Workload PyTorchJob/cert-gpu-burn-{k}-workload created and is starting",
        reporting_controller="job-controller",
        reporting_instance="job-controller-node-a",
        now=EPOCH,
        name_nanos=i + 1,
    )


def correlator() -> Correlator:
    return Correlator(NullSink(), clock=lambda: EPOCH, sleep=lambda s: None)


def rate(n: int, *, distinct: bool) -> float:
    batch = [event(i, distinct=distinct) for i in range(n)]
    c = correlator()
    started = time.perf_counter()
    for e in batch:
        c.record(e)
    return n / (time.perf_counter() - started)


def bytes_per_key(n: int) -> float:
    """Everything the cache keeps alive per key: the Event, its reference, strings, entry."""
    c = correlator()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for i in range(n):
        c.record(event(i))
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    assert len(c) == n
    return sum(s.size_diff for s in after.compare_to(before, "filename")) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run")
    n = 20_000 if parser.parse_args().quick else 200_000
    result = {
        "new_keys_per_s": round(rate(n, distinct=True)),
        "repeats_per_s": round(rate(n, distinct=False)),
        "bytes_per_cached_key": round(bytes_per_key(n // 4)),
        "events": n,
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
