"""Event sinks: the API server through the official ``kubernetes`` client, and an in-memory
fake of it for tests (users' tests included)."""

from __future__ import annotations

import contextlib
import copy
import json
import threading
from collections.abc import Callable, Mapping
from typing import Any

from ..._k8s_api.client import configuration, kubernetes_client, own_client
from ..._k8s_api.deadlines import Deadlines
from ..._k8s_api.errors import RequestDeadline, SinkError
from ..._log import get_logger
from .correlator import Counters, NotFound, Rejected, RequestConstructionError
from .event import Event

_log = get_logger("lifecycle.emitters.kubernetes")

#: The longest a request may take in all (connect, send, every byte of the answer).
REQUEST_DEADLINE = 30.0
#: The largest reply read (an Event's is a few KiB): the rest is dropped, counted, logged.
MAX_REPLY_BYTES = 64 * 1024

STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"

#: Who needs the ``kubernetes`` extra, in the message that names it.
_NEEDS = "the Kubernetes Event API sink"


class ServerBusy(SinkError):
    """429, or a 5xx carrying ``Retry-After``: client-go's REST client retries these itself
    before the broadcaster sees an error; here the broadcaster's tries cover them."""


class ApiEventSink:
    """Creates and patches Events with ``EventsV1Api`` (``events.k8s.io/v1``).

    ``api`` is an ``EventsV1Api``, an ``ApiClient``, or ``None`` for the default
    configuration (call ``kubernetes.config.load_kube_config()`` or ``load_incluster_config()``
    first); a configuration with no API server raises :class:`ApiNotConfigured` here. The
    sink sends through its own ``ApiClient`` built from a copy of that configuration, with
    the client's own retries off: the emitter's tries (12, 10 s apart) are the one retry
    policy. Each request waits at most ``request_timeout`` seconds per read and
    ``deadline`` seconds in all (a server answering one byte at a time is cut off:
    :class:`RequestDeadline`, retried); a reply is read up to ``max_reply_bytes``, the rest
    dropped (counted in ``oversized_replies``, logged). A successful answer is decoded into
    the :class:`Event` the server stored (``None`` when it cannot be), which the correlator
    keeps as its cached copy, as client-go keeps the Event its sink returns.

    Args:
        api: an ``EventsV1Api``, an ``ApiClient``, or ``None`` for the loaded default
            configuration.
        request_timeout: the client's timeout per request (connect, read), in seconds.
        deadline: the longest a request may take in all, in seconds, positive: a stalled server
            never holds a worker longer.
        max_reply_bytes: the largest reply read, at least 1.

    Raises:
        ApiNotConfigured: the configuration names no API server.
        MissingExtra: the ``kubernetes`` client is not installed.
        ValueError: ``deadline`` or ``max_reply_bytes`` is not positive.
    """

    def __init__(
        self,
        api: Any = None,
        *,
        request_timeout: float | tuple[float, float] | None = 10.0,
        deadline: float = REQUEST_DEADLINE,
        max_reply_bytes: int = MAX_REPLY_BYTES,
    ) -> None:
        found = configuration(api, _NEEDS)
        client = kubernetes_client(_NEEDS)
        if deadline <= 0 or max_reply_bytes < 1:
            raise ValueError("deadline and max_reply_bytes must be positive")
        self.api = client.EventsV1Api(own_client(found))  # one retry policy: the emitter's
        self.request_timeout = request_timeout
        self.deadline = deadline
        self.max_reply_bytes = max_reply_bytes
        #: the emitter's counters (set by it), for oversized replies and cut requests
        self.counters: Counters | None = None
        self._deadlines = Deadlines()
        self._exceptions = client.exceptions

    def create(self, event: Event) -> Event | None:
        """Create ``event`` in its namespace.

        Args:
            event: the Event.

        Returns:
            The Event as stored, or ``None`` when the reply cannot be decoded.

        Raises:
            Rejected: the server refused it (:class:`NotFound` for a 404).
            RequestDeadline: the request was cut at its deadline (retried).
        """
        return self._call(
            lambda: self.api.create_namespaced_event(
                event.namespace,
                event.to_body(),
                _preload_content=False,
                _request_timeout=self.request_timeout,
            )
        )

    def patch(self, event: Event, patch: Mapping[str, Any]) -> Event | None:
        """Patch the stored ``event`` with a strategic-merge patch (a series update).

        Args:
            event: the Event.
            patch: the patch.

        Returns:
            The Event as stored, or ``None`` when the reply cannot be decoded.

        Raises:
            Rejected: the server refused it (:class:`NotFound`: the Event was evicted).
            RequestDeadline: the request was cut at its deadline (retried).
        """
        return self._call(
            lambda: self.api.patch_namespaced_event(
                event.name,
                event.namespace,
                dict(patch),
                _content_type=STRATEGIC_MERGE_PATCH,
                _preload_content=False,
                _request_timeout=self.request_timeout,
            )
        )

    def read(self, event: Event) -> Event | None:
        """The Event stored under ``event``'s namespace and name (:class:`NotFound` when
        there is none): read back when a create answers AlreadyExists (ADR 0141).

        Args:
            event: names the Event to read.

        Returns:
            The Event as stored, or ``None`` when the reply cannot be decoded.

        Raises:
            NotFound: there is no such Event.
        """
        return self._call(
            lambda: self.api.read_namespaced_event(
                event.name,
                event.namespace,
                _preload_content=False,
                _request_timeout=self.request_timeout,
            )
        )

    def interrupt(self) -> None:
        """Cut every request in progress (each raises :class:`RequestDeadline`, retried);
        the sink stays usable. An emitter closing over a sink it was given calls this."""
        self._deadlines.interrupt()

    def close(self, timeout: float = 1.0) -> None:
        """Cut every request in progress (each raises :class:`RequestDeadline`), refuse new
        ones and end the deadline watchdog, so no thread of the sink outlives its owner's
        ``close`` (ADR 0142). The emitter :meth:`~KubernetesEmitter.for_api` built closes
        its sink this way; a sink passed to an emitter is only interrupted.

        Args:
            timeout: how long to wait for the watchdog thread, in seconds.
        """
        self._deadlines.close(timeout)
        with contextlib.suppress(Exception):
            self.api.api_client.rest_client.pool_manager.clear()

    def _call(self, request: Callable[[], Any]) -> Event | None:
        with self._deadlines.guard(self.deadline, self.max_reply_bytes) as guard:
            try:
                return self._answer(request)
            except SinkError:
                raise
            except Exception as e:
                if guard.expired:
                    self._count("deadlines")
                    raise RequestDeadline(
                        f"no complete answer within {self.deadline} s: connection cut"
                    ) from e
                raise
            finally:
                if guard.oversized:
                    self._count("oversized_replies")
                    _log.warning(
                        "API server reply too large; the rest was not read",
                        limit=self.max_reply_bytes,
                    )

    def _count(self, name: str) -> None:
        if self.counters is not None:
            self.counters.add(name)

    def _answer(self, request: Callable[[], Any]) -> Event | None:
        exc = self._exceptions
        try:
            response = request()
        except (exc.ApiTypeError, exc.ApiValueError) as e:
            raise RequestConstructionError(str(e)) from e
        except exc.ApiException as e:
            status = int(e.status or 0)
            if status == 0:  # no answer (TLS failure): transport
                raise
            reason, message = _status_of(e.body)
            headers = {k.lower(): v for k, v in dict(e.headers or {}).items()}
            text = f"{status} {reason or e.reason}: {message}".strip()
            if status == 404:
                raise NotFound(text, reason or "NotFound") from e
            if status == 429 or (status >= 500 and "retry-after" in headers):
                raise ServerBusy(text) from e
            raise Rejected(text, status, reason) from e
        try:
            return _reply(getattr(response, "data", None))
        finally:  # the connection goes back to the pool
            release = getattr(response, "release_conn", None)
            if callable(release):
                release()


def _reply(data: object) -> Event | None:
    """The Event of a JSON answer, or ``None`` when the answer is not one."""
    try:
        body = json.loads(data) if isinstance(data, str | bytes) else None
        return Event.from_body(body) if isinstance(body, dict) else None
    except (KeyError, TypeError, ValueError):
        return None


def _status_of(body: object) -> tuple[str, str]:
    """``(reason, message)`` of a ``metav1.Status`` body, or empty strings."""
    try:
        status = json.loads(body) if isinstance(body, str | bytes) else None
    except ValueError:
        status = None
    if not isinstance(status, dict):
        return "", ""
    return str(status.get("reason", "")), str(status.get("message", ""))


class MemoryEventSink:
    """An in-memory stand-in for the API server's Event store: create answers AlreadyExists
    for a taken name, patch answers NotFound for a missing one, ``evict`` plays the TTL; a
    success answers the Event as stored.

    ``calls`` records ``(verb, name, body)`` for every request, failed ones included;
    ``fail_next`` makes the next requests raise.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: dict[tuple[str, str], dict[str, Any]] = {}
        self._failures: list[Exception] = []
        self._version = 0
        self.calls: list[tuple[str, str, dict[str, Any]]] = []

    def fail_next(self, *errors: Exception) -> None:
        """The next ``len(errors)`` requests raise these, in order.

        Args:
            *errors: what the next requests raise, one each.
        """
        with self._lock:
            self._failures.extend(errors)

    def create(self, event: Event) -> Event:
        """Create ``event``, as the API server would.

        Args:
            event: the Event.

        Returns:
            The Event as stored.

        Raises:
            Rejected: the name is taken (``AlreadyExists``), or a scripted failure.
        """
        body = event.to_body()
        with self._lock:
            self.calls.append(("create", event.name, body))
            self._maybe_fail()
            key = (event.namespace, event.name)
            if key in self._events:
                raise Rejected(f'events "{event.name}" already exists', 409, "AlreadyExists")
            self._version += 1
            stored = copy.deepcopy(body)
            stored["metadata"]["resourceVersion"] = str(self._version)
            self._events[key] = stored
            return Event.from_body(stored)

    def read(self, event: Event) -> Event:
        """The Event stored under ``event``'s name (:class:`NotFound` when there is none).

        Args:
            event: names the Event to read.

        Returns:
            The Event as stored.

        Raises:
            NotFound: there is no such Event.
        """
        with self._lock:
            self.calls.append(("read", event.name, {}))
            self._maybe_fail()
            stored = self._events.get((event.namespace, event.name))
            if stored is None:
                raise NotFound(f'events "{event.name}" not found')
            return Event.from_body(copy.deepcopy(stored))

    def put(self, event: Event) -> None:
        """Store ``event`` under its name out of band, replacing what is there (an Event an
        earlier life of the controller left).

        Args:
            event: the Event to store.
        """
        with self._lock:
            self._version += 1
            stored = event.to_body()
            stored["metadata"]["resourceVersion"] = str(self._version)
            self._events[(event.namespace, event.name)] = stored

    def patch(self, event: Event, patch: Mapping[str, Any]) -> Event:
        """Merge ``patch`` into the stored Event (a strategic-merge patch of top-level fields).

        Args:
            event: names the Event.
            patch: the patch.

        Returns:
            The Event as stored.

        Raises:
            NotFound: there is no such Event (it was evicted).
        """
        with self._lock:
            self.calls.append(("patch", event.name, copy.deepcopy(dict(patch))))
            self._maybe_fail()
            stored = self._events.get((event.namespace, event.name))
            if stored is None:
                raise NotFound(f'events "{event.name}" not found')
            for field, value in patch.items():
                if isinstance(value, Mapping) and isinstance(stored.get(field), dict):
                    stored[field] = {**stored[field], **value}
                else:
                    stored[field] = value
            self._version += 1
            stored["metadata"]["resourceVersion"] = str(self._version)
            return Event.from_body(stored)

    def _maybe_fail(self) -> None:
        if self._failures:
            raise self._failures.pop(0)

    def evict(self, name: str | None = None, namespace: str = "") -> int:
        """Delete one Event (or all of them, ``name=None``), as the 1 h TTL would.

        Args:
            name: the Event's name; ``None``: every Event.
            namespace: its namespace; ``""``: any.

        Returns:
            How many Events were deleted.
        """
        with self._lock:
            keys = [
                k
                for k in self._events
                if name is None or (k[1] == name and (not namespace or k[0] == namespace))
            ]
            for k in keys:
                del self._events[k]
            return len(keys)

    def events(self) -> list[dict[str, Any]]:
        """The stored Events, as the API would list them (copies).

        Returns:
            The Events' bodies.
        """
        with self._lock:
            return [copy.deepcopy(e) for e in self._events.values()]

    def verbs(self) -> list[str]:
        """The verb of every request so far, in order (``create``, ``patch``, ``read``).

        Returns:
            The verbs.
        """
        return [verb for verb, _, _ in self.calls]
