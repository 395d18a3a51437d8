"""Event sinks: the API server through the official ``kubernetes`` client, and an in-memory
fake of it for tests (users' tests included)."""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Callable, Mapping
from typing import Any

from .correlator import NotFound, Rejected, RequestConstructionError, SinkError
from .event import Event

STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


def _client() -> Any:
    try:
        import kubernetes.client  # type: ignore[import-untyped]
    except ImportError as e:
        raise ImportError(
            "lifecycle.emitters.kubernetes needs the official client: "
            "pip install 'lifecycle-machines[kubernetes]'"
        ) from e
    return kubernetes.client


class ServerBusy(SinkError):
    """429, or a 5xx carrying ``Retry-After``: client-go's REST client retries these itself
    before the broadcaster sees an error; here the broadcaster's tries cover them."""


class ApiEventSink:
    """Creates and patches Events with ``EventsV1Api`` (``events.k8s.io/v1``).

    ``api`` is an ``EventsV1Api``, an ``ApiClient`` (wrapped), or ``None`` for the default
    configuration (call ``kubernetes.config.load_kube_config()`` or ``load_incluster_config()``
    first). Each request waits at most ``request_timeout`` seconds; a timeout is a transport
    error and is retried. A successful answer is decoded into the :class:`Event` the server
    stored (``None`` when it cannot be), which the correlator keeps as its cached copy, as
    client-go keeps the Event its sink returns.
    """

    def __init__(
        self, api: Any = None, *, request_timeout: float | tuple[float, float] | None = 10.0
    ) -> None:
        client = _client()
        if api is None:
            api = client.EventsV1Api()
        elif isinstance(api, client.ApiClient):
            api = client.EventsV1Api(api)
        self.api = api
        self.request_timeout = request_timeout
        self._exceptions = client.exceptions

    def create(self, event: Event) -> Event | None:
        return self._call(
            lambda: self.api.create_namespaced_event(
                event.namespace,
                event.to_body(),
                _preload_content=False,
                _request_timeout=self.request_timeout,
            )
        )

    def patch(self, event: Event, patch: Mapping[str, Any]) -> Event | None:
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

    def _call(self, request: Callable[[], Any]) -> Event | None:
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
        """The next ``len(errors)`` requests raise these, in order."""
        with self._lock:
            self._failures.extend(errors)

    def create(self, event: Event) -> Event:
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

    def patch(self, event: Event, patch: Mapping[str, Any]) -> Event:
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
        """Delete one Event (or all of them, ``name=None``), as the 1 h TTL would."""
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
        """The stored Events, as the API would list them (copies)."""
        with self._lock:
            return [copy.deepcopy(e) for e in self._events.values()]

    def verbs(self) -> list[str]:
        return [verb for verb, _, _ in self.calls]
