"""Process entry points for the multi-process SQLite tests (spawned: import-light on purpose)."""

from __future__ import annotations

import json
import os
import random
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from lifecycle import ObjectRef, RetryPolicy, Runner, SQLiteStore, Transition
from lifecycle.machines import pod

EPOCH = datetime(2026, 11, 30, 10, 0, 0, tzinfo=UTC)


def ref(uid: str) -> ObjectRef:
    return ObjectRef("Pod", "ml", f"trainer-{uid}", uid)


class FileSink:
    """Collects delivered events as dicts; written to a JSON file at the end."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def emit(self, transition: Transition) -> None:
        self.events.append(transition.as_dict())


class SlowReads:
    """The store, with a pause after each read: widens the read-to-commit window so the two
    processes' writes really race on the version (SQLite's lock alone serialises them)."""

    def __init__(self, inner: SQLiteStore, rng: random.Random) -> None:
        self.inner = inner
        self.rng = rng

    def load(self, machine: Any, ref: ObjectRef) -> Any:
        record = self.inner.load(machine, ref)
        time.sleep(self.rng.uniform(0, 0.002))
        return record

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def hammer(path: str, worker: int, uids: list[str], rounds: int, out: str, barrier: Any) -> None:
    """Race another process on the same pods: flap them Initializing <-> Running, redeliver
    now and then, and end with a terminal race (first terminal status wins)."""
    store = SQLiteStore(path, synchronous="NORMAL")
    rng = random.Random(worker)
    sink = FileSink()
    runner = Runner(
        SlowReads(store, rng), [sink], policy=RetryPolicy(attempts=1000, backoff=0.0005)
    )
    committed: list[tuple[str, int, str]] = []
    failed = retried = 0

    def observe(uid: str, obs: Any) -> None:
        nonlocal failed, retried
        result = runner.observe(ref(uid), obs)
        for r in (result, *result.linked):
            retried += r.attempts > 1
            if r.committed:
                what = type(obs).__name__ if r is result else "PodObserved"
                committed.append((r.ref.uid, r.version, what))
            elif r.outcome.value == "failed":
                failed += 1

    barrier.wait()
    for i in range(rounds):
        at = EPOCH + timedelta(seconds=10 + i)
        order = list(uids)
        rng.shuffle(order)
        for uid in order:
            choice = rng.randrange(3)
            if choice == 0:
                observe(uid, pod.InstancePending(at=at, instance_id="i-1"))
            else:
                observe(uid, pod.InstanceRunning(at=at, readiness_confirmed=choice == 1))
        if i % 7 == worker:
            runner.redeliver()
    end = EPOCH + timedelta(seconds=10 + rounds)
    for uid in uids:
        if worker == 0:
            observe(uid, pod.InstanceFailed(at=end, exit_code=1))
        else:
            observe(uid, pod.TerminateSucceeded(at=end))
    runner.redeliver()
    store.close()
    with open(out, "w", encoding="utf-8") as f:
        json.dump(
            {"events": sink.events, "committed": committed, "failed": failed, "retried": retried},
            f,
        )


def commit_then_crash(path: str, uid: str) -> None:
    """Commit a transition whose delivery fails, then die without cleaning up."""

    class Down:
        def emit(self, transition: Transition) -> None:
            raise ConnectionError("API server unreachable")

    store = SQLiteStore(path)
    runner = Runner(store, [Down()], links=())
    result = runner.observe(ref(uid), pod.CreateRequested(at=EPOCH))
    assert result.committed
    os._exit(17)  # a crash: no close, no redelivery
