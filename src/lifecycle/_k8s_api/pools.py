"""The urllib3 side of the request bounds (:mod:`lifecycle._k8s_api.deadlines`): the
connection classes that register each request with its guard, and the response whose
whole-body read stops at the request's cap.

The pool classes are set on the sink's (or the store's) own ``PoolManager`` only (each builds
its own ``ApiClient`` from the host's configuration), so nothing of the host's other calls
changes. This is the one module of the Kubernetes side that imports urllib3 (which comes with
the ``kubernetes`` extra): it is imported when a client is built, never at import time.
"""

from __future__ import annotations

import contextlib
from typing import Any

from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.response import HTTPResponse

from .deadlines import Guard, current

__all__ = ["bound"]


class _BoundedResponse(HTTPResponse):
    """An ``HTTPResponse`` whose whole-body read stops at the request's cap."""

    def read(self, amt: int | None = None, *args: Any, **kwargs: Any) -> bytes:
        guard: Guard | None = current()
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
        guard: Guard | None = current()
        if guard is not None:
            guard.conn = self
            if guard.expired:
                guard.cut()
        super().request(*args, **kwargs)  # type: ignore[misc]

    def getresponse(self, *args: Any, **kwargs: Any) -> Any:
        response: HTTPResponse = super().getresponse(*args, **kwargs)  # type: ignore[misc]
        if current() is not None:
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
    """Make ``pool_manager`` (a sink's or a store's own) use the registering connection classes."""
    pool_manager.pool_classes_by_scheme = {"http": _Pool, "https": _SecurePool}
    pool_manager.clear()
