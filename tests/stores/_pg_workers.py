"""Process entry points for the multi-process PostgreSQL tests (spawned: import-light)."""

from __future__ import annotations

import json
import os
import random
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import structlog

from lifecycle import ObjectRef, RetryPolicy, Runner, Transition
from lifecycle.machines import pod
from lifecycle.stores.postgres import PostgresStore

#: Workers log nothing: the flaky sink's refusals are expected, by the hundred.
SILENT = structlog.wrap_logger(structlog.ReturnLogger(), processors=[])
EPOCH = datetime(2026, 11, 30, 10, 0, 0, tzinfo=UTC)


def ref(uid: str) -> ObjectRef:
    return ObjectRef("Pod", "ml", f"trainer-{uid}", uid)


def raise_flag(flag: str, text: str) -> None:
    """Write ``text`` to ``flag`` atomically: a temporary name, then a rename. A reader that
    sees the file sees all of it (``write_text`` creates the file empty, then writes: a
    parent polling for it could read ``""``, or kill the writer between the two)."""
    temporary = f"{flag}.{os.getpid()}.tmp"
    with open(temporary, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, flag)


class FileSink:
    """Appends each delivered event to a JSON Lines file at once (a SIGKILL loses nothing it
    took). Refuses ``fail_rate`` of deliveries (they stay in the outbox). With ``block_after``
    it hangs, *before* taking it, on that delivery (or on the first one after ``block_now`` is
    set), after raising ``flag`` with the event's id: the parent then kills the process
    between commit and delivery."""

    def __init__(
        self,
        path: str,
        rng: random.Random,
        fail_rate: float = 0.0,
        block_after: int | None = None,
        flag: str = "",
    ) -> None:
        self.file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - kept open on purpose
        self.rng = rng
        self.fail_rate = fail_rate
        self.block_after = block_after
        self.flag = flag
        self.block_now = False
        self.taken = 0

    def emit(self, transition: Transition) -> None:
        if self.block_now or (self.block_after is not None and self.taken >= self.block_after):
            raise_flag(self.flag, transition.id)
            time.sleep(3600)
        if self.rng.random() < self.fail_rate:
            raise ConnectionError("sink unavailable")
        self.file.write(json.dumps(transition.as_dict()) + "\n")
        self.file.flush()
        self.taken += 1


def soak(
    url: str,
    worker: int,
    uids: list[str],
    seconds: float,
    out: str,
    barrier: Any,
    block_after: int | None = None,
    flag: str = "",
) -> None:
    """Race the other workers on the same pods (and, through the cascade, their claims):
    single observations and batches, periodic redelivery through a flaky sink, then a
    terminal race. Writes what it committed to ``out``."""
    rng = random.Random(worker)
    store = PostgresStore(url, lease_seconds=2.0, pool_size=2)
    sink = FileSink(f"{out}.events", rng, 0.05, block_after, flag)
    runner = Runner(store, [sink], policy=RetryPolicy(attempts=1000, backoff=0.0005), logger=SILENT)
    committed: list[tuple[str, int, str]] = []
    failed = 0

    def record(result: Any, what: str) -> None:
        nonlocal failed
        if result.committed:
            committed.append((result.ref.uid, result.version, what))
        elif result.outcome.value == "failed":
            failed += 1
        for sub in result.linked:
            record(sub, "PodObserved")

    def observation(i: int) -> Any:
        at = EPOCH + timedelta(seconds=10 + i)
        choice = rng.randrange(3)
        if choice == 0:
            return pod.InstancePending(at=at, instance_id="i-1")
        return pod.InstanceRunning(at=at, readiness_confirmed=choice == 1)

    barrier.wait()
    deadline = time.monotonic() + seconds
    i = 0
    while time.monotonic() < deadline:
        i += 1
        if rng.random() < 0.3:
            chosen = rng.sample(uids, k=rng.randint(2, len(uids)))
            obs = observation(i)
            for result in runner.observe_many([(ref(u), obs) for u in chosen]):
                record(result, type(obs).__name__)
        else:
            obs = observation(i)
            record(runner.observe(ref(rng.choice(uids)), obs), type(obs).__name__)
        if i % 15 == worker:
            runner.redeliver()
    if block_after is not None:  # a slow machine took fewer events: hang on the next one
        sink.block_now = True
    end = EPOCH + timedelta(seconds=100_000)
    for uid in uids:
        final: Any = (
            pod.InstanceFailed(at=end, exit_code=1)
            if worker % 2
            else pod.TerminateSucceeded(at=end)
        )
        record(runner.observe(ref(uid), final), type(final).__name__)
    for _ in range(500):  # deliver everything this worker still holds
        runner.redeliver()
        if not store.claim_undelivered():
            break
    store.close()
    Path(out).write_text(json.dumps({"committed": committed, "failed": failed, "ops": i}))


def commit_then_hang(url: str, uid: str, flag: str) -> None:
    """Commit a transition, then hang in its delivery until killed."""
    store = PostgresStore(url, lease_seconds=2.0)
    sink = FileSink(flag + ".events", random.Random(0), 0.0, block_after=0, flag=flag)
    runner = Runner(store, [sink], links=())
    runner.observe(ref(uid), pod.CreateRequested(at=EPOCH))
    os._exit(3)  # pragma: no cover - never reached: the sink hangs
