"""Bounds on every request the API sink makes (issue 23): a total deadline, not a per-read
timeout, and a cap on every reply's size.

urllib3's read timeout restarts at every byte, so a server that answers one byte at a time
holds a worker forever. Here each request runs under a :class:`Deadlines` guard: the
connection it uses registers itself, and a watchdog thread shuts its socket down when the
deadline passes, which ends the blocked read at once (the sink then raises
:class:`RequestDeadline`, a transport error: retried). Every reply body is read through a
cap: beyond ``max_reply_bytes`` the rest is not read, the connection is dropped and the
request is flagged ``oversized`` (the sink counts and logs it, and keeps the Event as sent).

The pool classes are set on the sink's own ``PoolManager`` only (the sink builds its own
``ApiClient`` from the host's configuration), so nothing of the host's other calls changes.
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

from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.response import HTTPResponse

from ..._core import threads
from .correlator import SinkError

_current = threading.local()


class RequestDeadline(SinkError):
    """No complete answer within the request's total deadline: the connection was cut."""


class Guard:
    """One request's bounds, and what happened to it."""

    __slots__ = ("conn", "expired", "limit", "oversized")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.conn: HTTPConnection | None = None
        self.expired = False
        self.oversized = False

    def cut(self) -> None:
        self.expired = True
        sock = getattr(self.conn, "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


class _BoundedResponse(HTTPResponse):
    """An ``HTTPResponse`` whose whole-body read stops at the request's cap."""

    def read(self, amt: int | None = None, *args: Any, **kwargs: Any) -> bytes:
        guard: Guard | None = getattr(_current, "guard", None)
        if guard is None or amt is not None:
            return super().read(amt, *args, **kwargs)
        if self._body is not None:
            body = self._body
            return body if isinstance(body, bytes) else body.encode()
        data = super().read(guard.limit + 1, *args, **kwargs)
        if len(data) > guard.limit:
            guard.oversized = True
            self.drain_conn = lambda: None  # type: ignore[method-assign]
            with contextlib.suppress(Exception):
                self.close()
            data = data[: guard.limit]
        self._body = data
        return data


class _Registering:
    """Mixed into the connection classes: the request in progress knows its connection, and
    its response reads through the cap."""

    def request(self, *args: Any, **kwargs: Any) -> None:
        guard: Guard | None = getattr(_current, "guard", None)
        if guard is not None:
            guard.conn = self  # type: ignore[assignment]
            if guard.expired:
                guard.cut()
        super().request(*args, **kwargs)  # type: ignore[misc]

    def getresponse(self, *args: Any, **kwargs: Any) -> Any:
        response: HTTPResponse = super().getresponse(*args, **kwargs)  # type: ignore[misc]
        if getattr(_current, "guard", None) is not None:
            response.__class__ = _BoundedResponse
        return response


class _Connection(_Registering, HTTPConnection):
    pass


class _SecureConnection(_Registering, HTTPSConnection):
    pass


class _Pool(HTTPConnectionPool):
    ConnectionCls = _Connection


class _SecurePool(HTTPSConnectionPool):
    ConnectionCls = _SecureConnection


def bound(pool_manager: Any) -> None:
    """Make ``pool_manager`` (the sink's own) use the registering connection classes."""
    pool_manager.pool_classes_by_scheme = {"http": _Pool, "https": _SecurePool}
    pool_manager.clear()


#: What requests do without the deadline thread (the log line of ADR 0140).
_NO_DEADLINES = "Kubernetes requests are bounded only by their socket timeouts"


class Deadlines:
    """A watchdog thread that cuts the connection of every request past its deadline."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._heap: list[tuple[float, int, Guard]] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
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

    def _watch(self) -> None:
        while True:
            with self._cond:
                while not self._heap:
                    self._cond.wait()
                due, _, g = self._heap[0]
                wait = due - time.monotonic()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                heapq.heappop(self._heap)
                g.cut()
