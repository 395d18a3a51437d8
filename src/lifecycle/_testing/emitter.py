"""The emitter conformance check (ADR 0121): what an emitter must do to be crash-safe.

:func:`check_emitter` runs an emitter of the host's (built by ``make``, every instance
delivering to one destination) through the runner on a memory store and checks:

1. **A crash loses nothing and repeats nothing**: a first host commits Pod and NodeClaim
   transitions and dies without closing (its acknowledgements, if any, never marked); a
   second host, with a new emitter, redelivers the outbox until it is empty. With ``holds``
   (what the destination has, as keys) every committed transition is there exactly once.
2. **Acknowledgements** (an acknowledging emitter only): each event ``deliver`` took is
   answered exactly once with an :class:`~lifecycle.emitters.base.Ack`; ``DELIVERED``
   only for what the destination holds; ``close(timeout)`` returns within its bound and
   answers everything it took (failed is allowed: the outbox keeps it); a ``flush(timeout)``
   that returns True has answered everything taken before it (the runner marks then).
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from .._core.refs import ObjectRef
from .._core.transition import Transition
from ..emitters.base import Ack, Emitter
from ..machines.pod import CreateRequested, InstanceRunning, ProvisionSucceeded
from ..runner import Runner
from ..stores.memory import MemoryStore

__all__ = ["check_emitter"]

_EPOCH = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


def _observe(runner: Runner, pods: range) -> list[Transition]:
    committed: list[Transition] = []
    for i in pods:
        pod = ObjectRef("Pod", "conformance", f"pod-{i}", f"conformance-{i}")
        at = _EPOCH + timedelta(seconds=i)
        for obs in (
            CreateRequested(at=at, pool="gpu", provider="fake"),
            ProvisionSucceeded(at=at, reserved=True, instance_id=f"i-{i}"),
            InstanceRunning(at=at + timedelta(seconds=30), instance_id=f"i-{i}"),
        ):
            result = runner.observe(pod, obs)
            committed += [t for t in result.all_transitions() if not t.action and not t.fallback]
    return committed


def _close(emitter: object, timeout: float) -> None:
    close = getattr(emitter, "close", None)
    if callable(close):
        try:
            close(timeout=timeout)
        except TypeError:  # a close() without a bound
            close()


def check_emitter(
    make: Callable[[], Emitter],
    *,
    holds: Callable[[], Iterable[str]] | None = None,
    key: Callable[[Transition], str] = lambda t: t.id,
    pods: int = 4,
    timeout: float = 10.0,
) -> None:
    """Check that emitters built by ``make`` keep the crash-safety contract of
    :mod:`lifecycle.emitters.base`; raise ``AssertionError`` naming the first breach.

    ``holds`` lists what the destination has, one key per stored copy (``key`` maps a
    transition to its key; default its id: a Kubernetes Event's would be its name), so that
    "exactly once" can be checked; without it only the outbox and the acknowledgements are.
    ``timeout`` bounds each flush and close.

    Args:
        make: makes an emitter delivering to the destination under test.
        holds: lists what the destination holds, one key per stored copy, so "exactly once" is
            checked; ``None``: only the outbox and the acknowledgements are.
        key: maps a transition to its key in ``holds``.
        pods: how many pods the run drives.
        timeout: the bound on each flush and close, in seconds.

    Raises:
        AssertionError: the emitter broke the contract; the message says where.
    """
    store = MemoryStore()
    first = make()
    crashed = Runner(store, [first])
    committed = _observe(crashed, range(pods))
    assert committed, "the check commits transitions"
    # the first host dies here: nothing flushed, closed or marked after this point
    second = make()
    restarted = Runner(store, [second])
    for _ in range(50):
        restarted.redeliver()
        restarted.flush(timeout)
        if not store.undelivered_count():
            break
    left = store.undelivered_count()
    assert left == 0, f"{left} events still undelivered after redelivery to a working emitter"
    restarted.close(timeout)
    _close(first, timeout)
    if holds is not None:
        counts = collections.Counter(holds())
        for t in committed:
            n = counts[key(t)]
            assert n == 1, f"the destination holds {t.id} {n} times, not once"
    if callable(getattr(second, "deliver", None)):
        _check_acknowledgements(make, holds, key, pods, timeout)


def _check_acknowledgements(
    make: Callable[[], Emitter],
    holds: Callable[[], Iterable[str]] | None,
    key: Callable[[Transition], str],
    pods: int,
    timeout: float,
) -> None:
    source = MemoryStore()
    transitions = _observe(Runner(source), range(pods, 2 * pods))
    emitter: Any = make()
    answers: dict[str, list[Ack]] = collections.defaultdict(list)
    lock = threading.Lock()

    def ack(t: Transition, outcome: Ack) -> None:
        assert isinstance(outcome, Ack), f"acknowledged {t.id} with {outcome!r}, not an Ack"
        time.sleep(0.002)  # an acknowledgement takes time: the runner marks the outbox
        with lock:
            answers[t.id].append(outcome)

    taken = []
    for t in transitions:
        try:
            emitter.deliver(t, ack)
        except Exception:
            continue  # not taken: the outbox keeps it
        taken.append(t)
    flush = getattr(emitter, "flush", None)
    if callable(flush) and flush(timeout) is True:
        with lock:
            open_ = [t.id for t in taken if not answers.get(t.id)]
        assert not open_, f"flush() returned True with {len(open_)} deliveries unanswered"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with lock:
            if all(answers.get(t.id) for t in taken):
                break
        time.sleep(0.005)
    started = time.monotonic()
    _close(emitter, timeout)
    took = time.monotonic() - started
    assert took <= timeout + 1.0, f"close({timeout}) took {took:.1f} s"
    with lock:
        for t in taken:
            got = answers.get(t.id, [])
            assert len(got) == 1, f"{t.id} acknowledged {len(got)} times, not once"
        delivered = [t for t in taken if answers[t.id] == [Ack.DELIVERED]]
    if holds is not None:
        have = set(holds())
        for t in delivered:
            assert key(t) in have, f"{t.id} acknowledged delivered, not in the destination"
