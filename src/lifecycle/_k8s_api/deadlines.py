"""Bounds on every request to the API server, the Event sink's and the status store's
(issue 23): a total deadline, not a per-read timeout, and a cap on every reply's size.

urllib3's read timeout restarts at every byte, so a server that answers one byte at a time
holds a worker forever. Here each request runs under a :class:`Deadlines` guard: the
connection it uses registers itself, and a watchdog thread shuts its socket down when the
deadline passes, which ends the blocked read at once (the sink then raises
:class:`RequestDeadline`, a transport error: retried; the store answers a ``Reply`` with no
status). Every reply body is read through a cap: beyond ``max_reply_bytes`` the rest is not
read, the connection is dropped and the request is flagged ``oversized`` (the sink counts and
logs it, and keeps the Event as sent).

The connection and pool classes that register themselves are in
:mod:`lifecycle._k8s_api.pools`, the one module of the Kubernetes side that imports urllib3: it
is imported when a sink or a store builds its client (:func:`lifecycle._k8s_api.client.own_client`),
so the Events simulation, the store's record code and everything else of the Kubernetes side
import on the core install, with no extra.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

from .._core import threads
from .errors import RequestDeadline

_current = threading.local()


def current() -> Guard | None:
    """The guard of the request this thread is making, if any."""
    guard: Guard | None = getattr(_current, "guard", None)
    return guard


class Guard:
    """One request's bounds, and what happened to it."""

    __slots__ = ("conn", "expired", "limit", "oversized")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.conn: Any = None  # the urllib3 connection the request uses, once it has one
        self.expired = False
        self.oversized = False

    def cut(self) -> None:
        self.expired = True
        sock = getattr(self.conn, "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


#: What requests do without the deadline thread (the log line of ADR 0140).
_NO_DEADLINES = "Kubernetes requests are bounded only by their socket timeouts"


class Deadlines:
    """A watchdog thread that cuts the connection of every request past its deadline.

    :meth:`interrupt` cuts every request in progress at once; :meth:`close` also refuses new
    ones and ends the watchdog: the sink's owner (the emitter's ``close``) gets every thread
    back in bound."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._heap: list[tuple[float, int, Guard]] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        self._closed = False
        #: times no watchdog thread could be started (ADR 0140): requests were then bounded
        #: only by their socket timeouts; the next request tries again
        self.refusals = 0

    @contextlib.contextmanager
    def guard(self, seconds: float, limit: int) -> Iterator[Guard]:
        """Run the block's request within ``seconds`` in all, its reply within ``limit``
        bytes."""
        g = Guard(limit)
        entry = (time.monotonic() + seconds, next(self._seq), g)
        with self._cond:
            if self._closed:
                raise RequestDeadline("the sink is closed: no further requests")
            heapq.heappush(self._heap, entry)
            if self._thread is None:
                thread = threading.Thread(
                    target=self._watch, name="lifecycle-k8s-deadlines", daemon=True
                )
                if threads.start(thread, _NO_DEADLINES, log=not self.refusals):
                    self._thread = thread
                else:
                    self.refusals += 1
            self._cond.notify()
        _current.guard = g
        try:
            yield g
        finally:
            _current.guard = None
            with self._cond:
                g.conn = None  # done: never cut a connection back in the pool
                with contextlib.suppress(ValueError):
                    self._heap.remove(entry)
                    heapq.heapify(self._heap)

    def interrupt(self) -> None:
        """Cut every request in progress now (each raises :class:`RequestDeadline`); later
        requests run as usual."""
        with self._cond:
            guards = [g for _, _, g in self._heap]
        for g in guards:
            g.cut()

    def close(self, timeout: float = 1.0) -> None:
        """Cut every request in progress, refuse new ones, and end the watchdog thread
        (joined within ``timeout``)."""
        with self._cond:
            self._closed = True
            guards = [g for _, _, g in self._heap]
            self._heap.clear()
            thread = self._thread
            self._cond.notify_all()
        for g in guards:
            g.cut()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _watch(self) -> None:
        while True:
            with self._cond:
                while not self._heap and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                due, _, g = self._heap[0]
                wait = due - time.monotonic()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                heapq.heappop(self._heap)
                g.cut()
