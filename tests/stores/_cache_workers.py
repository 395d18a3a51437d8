"""A runner on its own store handle, driven over a pipe: the status cache's differential test
(``test_status_cache.py``) runs several of them as threads or as processes, each with its own
SQLite connection or PostgreSQL pool, on the same objects.

Messages: ``("open", kind, target, cache)``, ``("observe", uid, index, seconds)`` answered with
a :func:`summary`, ``("settle",)``, ``("run", uids, steps, seed)`` (observe at random, as fast
as it can; answers the summaries), ``("load", uids)`` (each record as the next observe reads it),
``("close",)`` and ``("stop",)``."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

from lifecycle import LifecycleError, MemoryEmitter, ObjectRef, Result, Runner
from lifecycle.machines import POD, pod
from lifecycle.stores.base import Record

EPOCH = datetime(2026, 11, 30, 10, 0, 0, tzinfo=UTC)
#: A step's observation by index: the pod's lifecycle and its flapping instance.
KINDS = 6


def ref(uid: str) -> ObjectRef:
    return ObjectRef("Pod", "ml", f"trainer-{uid}", uid)


def observation(index: int, seconds: float) -> Any:
    at = EPOCH + timedelta(seconds=seconds)
    index %= KINDS
    if index == 0:
        return pod.CreateRequested(at=at)
    if index == 1:
        return pod.ProvisionSucceeded(at=at, reserved=True, instance_id="i-1")
    if index == 2:
        return pod.InstanceRunning(at=at, instance_id="i-1")
    if index == 3:
        return pod.InstancePending(at=at, instance_id="i-1")
    if index == 4:
        return pod.InstanceRunning(at=at, instance_id="i-1", readiness_confirmed=False)
    return pod.InstanceTerminated(at=at, instance_id="i-1", exit_code=1)


def summary(result: Result | LifecycleError) -> tuple[Any, ...]:
    """What a step decided, comparable across runs: outcome, version, attempts (a decision
    from a stale entry shows as a second attempt), status and events (ids, reasons, types,
    messages), or the refusal's type. Fallback Warnings are left out."""
    if isinstance(result, LifecycleError):
        return ("refused", type(result).__name__)
    events = tuple(
        (t.id, t.reason, str(t.type), t.message)
        for r in (result, *result.linked)
        for t in (*r.actions, *r.transitions)
    )
    return (result.outcome.value, result.version, result.attempts, repr(result.status), events)


def record_summary(record: Record | None) -> tuple[Any, ...] | None:
    return None if record is None else (record.version, repr(record.status))


def open_store(kind: str, target: str, cache: int, *, notify: bool | None = None) -> Any:
    if kind == "sqlite":
        from lifecycle import SQLiteStore

        return SQLiteStore(target, synchronous="OFF", cache=cache)
    from lifecycle.stores.postgres import PostgresStore

    return PostgresStore(target, cache=cache, pool_size=2, notify=notify)


def serve(conn: Any) -> None:
    """Answer messages on ``conn`` until ``("stop",)``."""
    store: Any = None
    runner: Runner | None = None
    while True:
        message = conn.recv()
        what = message[0]
        try:
            if what == "open":
                _, kind, target, cache = message
                store = open_store(kind, target, cache)
                runner = Runner(store, [MemoryEmitter()], links=())
                conn.send(None)
            elif what == "observe":
                _, uid, index, seconds = message
                assert runner is not None
                try:
                    done: Result | LifecycleError = runner.observe(
                        ref(uid), observation(index, seconds)
                    )
                except LifecycleError as e:
                    done = e
                conn.send(summary(done))
            elif what == "run":
                _, uids, steps, seed = message
                assert runner is not None
                rng = random.Random(seed)
                out = []
                for n in range(steps):
                    try:
                        got: Result | LifecycleError = runner.observe(
                            ref(rng.choice(uids)), observation(rng.randrange(KINDS), n)
                        )
                    except LifecycleError as e:
                        got = e
                    out.append(summary(got))
                conn.send(out)
            elif what == "settle":
                conn.send(store.settle_cache() if hasattr(store, "settle_cache") else True)
            elif what == "load":  # through the cache, as the next observe would read
                conn.send({uid: record_summary(store.load(POD, ref(uid))) for uid in message[1]})
            elif what == "close":
                if store is not None:
                    store.close()
                store = runner = None
                conn.send(None)
            elif what == "stop":
                if store is not None:
                    store.close()
                conn.send(None)
                return
        except Exception as e:  # the test sees it as the answer
            conn.send(e)
