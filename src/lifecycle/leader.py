"""One active controller: leader election on a ``coordination.k8s.io/v1`` Lease (ADR 0160).

- :class:`LeaseLock` -- the Lease as a lock of the official client's leader election (its
  ``get``/``create``/``update`` interface; the API server's ``resourceVersion``
  compare-and-set is the one consensus).
- :class:`LeaderElector` -- client-go's algorithm over that lock, in a thread that stops:
  acquire, renew every ``retry_period``, release on :meth:`~LeaderElector.stop`.
  :meth:`~LeaderElector.is_leader` is the fence: true only until ``renew_deadline`` after
  the start of the last renewal that succeeded, by this process's monotonic clock -- before
  any other replica may take the Lease (``lease_duration`` after it last saw it change).
- :class:`LeaderGate` -- a store wrapper that refuses every write with :class:`NotLeader`
  unless the elector says this process leads, so the guarantee holds whatever host drives
  the runner.

Timings default to client-go's: 15 s lease, 10 s renew deadline, 2 s retry period. The
Lease lock needs the ``kubernetes`` extra; the elector over another lock and the gate do
not.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Protocol

from ._core.errors import LifecycleError
from ._k8s_api.lease import LeaseLock, LockError

__all__ = [
    "LeaderElector",
    "LeaderGate",
    "LeaseLock",
    "Lock",
    "LockError",
    "NotLeader",
    "default_identity",
]

log = logging.getLogger("lifecycle.leader")


class NotLeader(LifecycleError):
    """A write refused because this process does not hold the lease (or can no longer be
    sure it does): nothing was written. Not a ``StoreError``: the runner does not turn it
    into a failed result with a fallback Warning (that Warning would be a write too); it
    reaches the host, which stops driving the runner until it leads again."""


class Lock(Protocol):
    """The lock interface of the official client's leader election."""

    name: str
    namespace: str
    identity: str

    def get(self, name: str, namespace: str) -> tuple[bool, Any]:
        """Read the lock.

        Args:
            name: the lock's name.
            namespace: the lock's namespace.

        Returns:
            ``(True, record)`` (``record`` ``None`` when the lock holds none), or ``(False,
            error)`` with the error's ``body`` as the official loop reads it.
        """
        ...

    def create(self, name: str, namespace: str, election_record: Any) -> bool:
        """Create the lock holding a record.

        Args:
            name: the lock's name.
            namespace: the lock's namespace.
            election_record: the record to write.

        Returns:
            Whether it was created (``False``: it exists, or the request failed).
        """
        ...

    def update(self, name: str, namespace: str, updated_record: Any) -> bool:
        """Replace the lock read by the last ``get``, if no one wrote it since.

        Args:
            name: the lock's name.
            namespace: the lock's namespace.
            updated_record: the record to write.

        Returns:
            Whether it was replaced.
        """
        ...


def default_identity() -> str:
    """This process's candidate name: the host name (a Pod's name) and a random suffix, so
    a restarted process never mistakes its predecessor's lease for its own.

    Returns:
        ``HOST-PID-XXXXXXXX``.
    """
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class _Record:
    """A ``LeaderElectionRecord`` (the official one has just these four attributes)."""

    def __init__(self, holder: str, duration: str, acquired: str, renewed: str) -> None:
        self.holder_identity = holder
        self.lease_duration = duration
        self.acquire_time = acquired
        self.renew_time = renewed

    def key(self) -> tuple[Any, ...]:
        return (self.holder_identity, self.lease_duration, self.acquire_time, self.renew_time)


def _key(record: Any) -> tuple[Any, ...] | None:
    """What tells one state of the lock from another: the record, and the object's
    ``resourceVersion`` where the lock gives it (:class:`LeaseLock` does)."""
    if record is None:
        return None
    return (
        record.holder_identity,
        record.lease_duration,
        record.acquire_time,
        record.renew_time,
        getattr(record, "resource_version", None),
    )


class LeaderElector:
    """Campaign for ``lock`` and keep it: :meth:`start` a thread (or call :meth:`attempt`
    yourself), ask :meth:`is_leader` before every write, :meth:`stop` to release.

    ``lease_duration`` > ``renew_deadline`` > 1.2 x ``retry_period`` > 0 (client-go's
    checks). ``on_started_leading`` / ``on_stopped_leading`` run on the elector's thread
    when it notices the change (notices, not the fence: :meth:`is_leader` turns false at the
    deadline itself, whenever the thread looks next). ``clock`` is a monotonic clock in
    seconds (injectable for tests).

    Args:
        lock: the lock campaigned for (a :class:`LeaseLock`).
        lease_duration: whole seconds another replica waits after it last saw the lock
            change before it takes it over.
        renew_deadline: seconds after the start of the last successful renewal during which
            :meth:`is_leader` is true: shorter than ``lease_duration``, so this replica stops
            writing before another may start.
        retry_period: seconds between tries to acquire or renew.
        on_started_leading: called when this replica notices it leads.
        on_stopped_leading: called when it notices it no longer does.
        release_on_stop: release the lock at :meth:`stop`, so another replica takes it at
            once rather than after ``lease_duration``.
        clock: a monotonic clock in seconds; a test passes a fake one.

    Raises:
        ValueError: timings out of order, or a ``lease_duration`` not whole seconds.
    """

    def __init__(
        self,
        lock: Lock,
        *,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        on_started_leading: Callable[[], None] | None = None,
        on_stopped_leading: Callable[[], None] | None = None,
        release_on_stop: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not retry_period > 0:
            raise ValueError(f"retry_period must be positive, got {retry_period!r}")
        if not renew_deadline > 1.2 * retry_period:
            raise ValueError("renew_deadline must be greater than 1.2 x retry_period")
        if not lease_duration > renew_deadline:
            raise ValueError("lease_duration must be greater than renew_deadline")
        if int(lease_duration) != lease_duration:
            raise ValueError("lease_duration is whole seconds (a Lease's leaseDurationSeconds)")
        self.lock = lock
        self.lease_duration = float(lease_duration)
        self.renew_deadline = float(renew_deadline)
        self.retry_period = float(retry_period)
        self.release_on_stop = release_on_stop
        self._on_started = on_started_leading
        self._on_stopped = on_stopped_leading
        self._clock = clock
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._mutex = threading.Lock()
        #: clock() before the last create/update of ours that succeeded (None: never)
        self._renewed: float | None = None
        self._acquired_at = ""
        #: the record last seen and clock() when it was first seen (a follower's view)
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._leading = False
        #: holder of the Lease as last read ("" when none)
        self.holder = ""

    @property
    def identity(self) -> str:
        return self.lock.identity

    # -- the fence -----------------------------------------------------------------------------
    def is_leader(self) -> bool:
        """True only while the Lease is surely ours: less than ``renew_deadline`` since the
        start of our last successful acquire or renewal, by the monotonic clock.

        Returns:
            Whether this replica may write now.
        """
        with self._mutex:
            renewed = self._renewed
        if renewed is None or self._stopping.is_set():
            return False
        return self._clock() < renewed + self.renew_deadline

    # -- one try ---------------------------------------------------------------------------------
    def attempt(self) -> bool:
        """One try to acquire or renew (a read, then at most one write): whether the Lease is
        ours now. Calls the callbacks when leadership began or ended.

        Returns:
            Whether the lock is held now.
        """
        held = self._try()
        self._notice()
        return held

    def _try(self) -> bool:
        lock = self.lock
        found, record = lock.get(lock.name, lock.namespace)
        now = self._clock()
        stamp = datetime.now(UTC).isoformat()
        if not found:
            if _code(record) != 404:
                return False  # no answer, or an error: try again later
            mine = _Record(self.identity, str(int(self.lease_duration)), stamp, stamp)
            return self._write(lambda: lock.create(lock.name, lock.namespace, mine), stamp)
        key = _key(record)
        if key != self._observed:
            self._observed, self._observed_at = key, now
        holder = "" if record is None else str(record.holder_identity or "")
        self.holder = holder
        if holder and holder != self.identity and now < self._observed_at + self.lease_duration:
            return False  # someone else's, and not yet expired by our clock
        acquired = self._acquired_at if holder == self.identity and self._acquired_at else stamp
        mine = _Record(self.identity, str(int(self.lease_duration)), acquired, stamp)
        return self._write(lambda: lock.update(lock.name, lock.namespace, mine), acquired)

    def _write(self, send: Callable[[], bool], acquired: str) -> bool:
        before = self._clock()  # the write may land at any time after this
        if not send():
            return False
        with self._mutex:
            self._renewed = before
        self._acquired_at = acquired
        self.holder = self.identity
        return True

    def _notice(self) -> None:
        leading = self.is_leader()
        if leading == self._leading:
            return
        self._leading = leading
        log.info("%s %s leading", self.identity, "started" if leading else "stopped")
        callback = self._on_started if leading else self._on_stopped
        if callback is not None:
            try:
                callback()
            except Exception:
                log.exception("leader election callback failed")

    # -- the loop --------------------------------------------------------------------------------
    def run(self) -> None:
        """Try every ``retry_period`` until :meth:`stop`; then release the Lease if held."""
        while not self._stopping.is_set():
            try:
                self.attempt()
            except Exception:  # a lock of the host's that raised: try again later
                log.exception("leader election attempt failed")
            self._stopping.wait(self.retry_period)
        self._finish()

    def start(self) -> LeaderElector:
        """Run :meth:`run` in a daemon thread.

        Returns:
            The elector itself, so ``elector = LeaderElector(lock).start()`` reads as one step.

        Raises:
            RuntimeError: it was started already.
        """
        if self._thread is not None:
            raise RuntimeError("the elector was started already")
        self._thread = threading.Thread(target=self.run, name="lifecycle-leader", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float | None = None) -> None:
        """Stop campaigning: :meth:`is_leader` is false from now on, the Lease is released
        (when held and ``release_on_stop``) so another replica takes it at once.

        Args:
            timeout: the most seconds waited for the thread (and the release); ``None``: until
                it ends.
        """
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout)
        else:
            self._finish()

    def _finish(self) -> None:
        with self._mutex:
            held = self._renewed is not None or self.holder == self.identity
            self._renewed = None
        if held and self.release_on_stop:
            lock = self.lock
            found, record = lock.get(lock.name, lock.namespace)
            if found and record is not None and record.holder_identity == self.identity:
                stamp = datetime.now(UTC).isoformat()
                lock.update(lock.name, lock.namespace, _Record("", "1", stamp, stamp))
        self._notice()

    def __enter__(self) -> LeaderElector:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _code(error: Any) -> int | None:
    """The HTTP code of a failed ``get`` as the official loop reads it (its ``body``)."""
    try:
        return int(json.loads(error.body)["code"])
    except Exception:
        return None


class LeaderGate:
    """``store`` whose writes (``commit``, ``commit_many``, ``mark_delivered``,
    ``claim_undelivered``, ``flush_marks``) raise :class:`NotLeader` unless
    ``leader.is_leader()`` -- checked just before each, nothing written when refused; reads
    and everything else are the store's own. ``leader`` is anything with ``is_leader()``
    (a :class:`LeaderElector`).

    Args:
        store: the store gated.
        leader: anything with ``is_leader()``.
    """

    _WRITES = ("commit", "commit_many", "mark_delivered", "claim_undelivered", "flush_marks")

    def __init__(self, store: Any, leader: Any) -> None:
        self.inner = store
        self.leader = leader
        for name in self._WRITES:
            call = getattr(store, name, None)
            if call is not None:
                setattr(self, name, self._gated(name, call))

    def _gated(self, name: str, call: Callable[..., Any]) -> Callable[..., Any]:
        leader = self.leader

        def refuse() -> None:
            if not leader.is_leader():
                raise NotLeader(f"{name} refused: this process does not hold the lease")

        if inspect.iscoroutinefunction(call):

            async def gated_async(*args: Any, **kwargs: Any) -> Any:
                refuse()
                return await call(*args, **kwargs)

            return gated_async

        def gated(*args: Any, **kwargs: Any) -> Any:
            refuse()
            return call(*args, **kwargs)

        return gated

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
