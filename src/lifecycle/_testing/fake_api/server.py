"""A small HTTP server on loopback that answers like the API server's ``events.k8s.io/v1``
endpoints and validates what it is sent as the API server does.

Create: 201, 409 AlreadyExists for a taken name, 400 when the body's namespace is not the
request's, 422 Invalid for a body the API server's Event validation refuses
(:func:`event_errors`). Patch: strategic merge patch only (415 otherwise), 404 for an unknown
Event, the merge applied as the API server applies it to ``series`` (maps merge key by key,
``null`` deletes) and the result validated (422). Get: the Event, or 404. List: the EventList.
``fail(method, *answers)`` scripts the next answers to a method, and ``fail_when(predicate,
*answers)`` the next answers to requests a predicate picks: a status code (a ``metav1.Status``
error), ``(code, headers)``, ``"hang"`` (no answer until the server closes), ``"drop"`` (close
the connection) or ``("slow", seconds)`` (answer normally after a pause). ``arrivals`` keeps
when each request arrived (``time.monotonic``).

Deterministic crash points for the kill tests (ADR 0121): :meth:`FakeApiServer.hold` makes
every create hang, either before it lands (``landed=False``: the Event is not stored, as a
request still in flight) or after (``landed=True``: stored, the answer never sent), and
:attr:`FakeApiServer.held` counts the requests now hanging, so a test kills its host at a
known point instead of a guessed time. ``delay`` slows every answer (a slow server), or
those ``delayed`` picks; ``creates`` counts the Events each name was created as (the API
has one per name).

Hostile answers (issue 23): ``("drip", seconds)`` sends a valid answer one byte every
``seconds``; ``("huge", n)`` answers 201 with an ``n``-byte body; ``"reset"`` resets the
connection (RST); codes 500 and ``(429, {"Retry-After": "1"})`` are plain scripted answers;
``("landed", "drop")`` or ``("landed", 504)`` applies the request, then drops the connection or
answers that code (a write whose answer was lost).

Objects and their status subresource (:mod:`.objects`): Pods under ``/api/v1``, Leases
under ``/apis/coordination.k8s.io/v1`` (created through the API as well, for leader
election; ``fail_path("/leases/", "hang")`` hangs the next renewal) and custom resources
of CRDs :meth:`FakeApiServer.register_crd` registers under ``/apis``, put
in place out of band with :meth:`FakeApiServer.add_object` (as a user's ``kubectl apply``)
and then read, replaced and patched through the API as its conventions say. Every scripted
answer above reaches these paths too (:meth:`FakeApiServer.fail_path`).
"""

from __future__ import annotations

import bisect
import contextlib
import copy
import json
import os
import re
import socket
import struct
import threading
import time
from collections.abc import Callable
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import attrs

from .objects import ObjectStore, Resource
from .schema import conditions_crd_schema, nodeclaim_crd_schema

__all__ = [
    "PREFIX",
    "Answer",
    "FakeApiServer",
    "Request",
    "conditions_crd_schema",
    "event_errors",
    "nodeclaim_crd_schema",
    "strategic_merge",
]

PREFIX = "/apis/events.k8s.io/v1"

#: The API server's limits on an Event (``k8s.io/kubernetes/pkg/apis/core/validation``).
NAME_LIMIT = 253
NOTE_LIMIT = 1024
FIELD_LIMIT = 128

_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_QUALIFIED_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


@attrs.define
class Request:
    method: str
    path: str
    content_type: str
    body: Any
    arrived: float = 0.0
    raw: bytes = b""
    #: the request's headers, names in lower case (``authorization`` tells clients apart)
    headers: dict[str, str] = attrs.Factory(dict)


Answer = (
    int | str | tuple[int, dict[str, str]] | tuple[str, float] | tuple[str, bytes] | tuple[str, Any]
)
Predicate = Callable[[Request], bool]


def _subdomain(value: str) -> bool:
    return len(value) <= NAME_LIMIT and _SUBDOMAIN.fullmatch(value) is not None


def _qualified_name(value: str) -> bool:
    prefix, slash, name = value.rpartition("/")
    if slash and not (prefix and _subdomain(prefix)):
        return False
    return len(name) <= 63 and _QUALIFIED_NAME.fullmatch(name) is not None


def _time(value: object) -> bool:
    if not isinstance(value, str):
        return False
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def event_errors(body: Any) -> list[str]:
    """What the API server's validation of an ``events.k8s.io/v1`` Event refuses."""
    if not isinstance(body, dict):
        return ["body: must be an object"]
    metadata = body.get("metadata") or {}
    namespace = str(metadata.get("namespace") or "")
    return [
        *_metadata_errors(str(metadata.get("name") or ""), namespace),
        *_reporting_errors(body),
        *_regarding_errors(body.get("regarding") or {}, namespace),
        *_series_errors(body),
    ]


def _metadata_errors(name: str, namespace: str) -> list[str]:
    errors = []
    if not name:
        errors.append("metadata.name: Required value")
    elif not _subdomain(name):
        errors.append(f"metadata.name: Invalid value: {name!r}: a lowercase RFC 1123 subdomain")
    if not namespace:
        errors.append("metadata.namespace: Required value")
    return errors


def _reporting_errors(body: dict[str, Any]) -> list[str]:
    """The event's time, type, reporter, action, reason and note."""
    errors = []
    if not _time(body.get("eventTime")):
        errors.append("eventTime: Required value")
    if body.get("type") not in ("Normal", "Warning"):
        errors.append(f"type: Unsupported value: {body.get('type')!r}")
    controller = str(body.get("reportingController") or "")
    if not controller:
        errors.append("reportingController: Required value")
    elif not _qualified_name(controller):
        errors.append("reportingController: Invalid value: not a qualified name")
    for field in ("reportingInstance", "action", "reason"):
        value = str(body.get(field) or "")
        if not value:
            errors.append(f"{field}: Required value")
        elif len(value) > FIELD_LIMIT:
            errors.append(f"{field}: Too long: may not be more than {FIELD_LIMIT} bytes")
    if len(str(body.get("note") or "").encode("utf-8")) > NOTE_LIMIT:
        errors.append(f"note: Too long: may not be more than {NOTE_LIMIT} bytes")
    return errors


def _regarding_errors(regarding: dict[str, Any], namespace: str) -> list[str]:
    errors = []
    if not regarding.get("kind") or not regarding.get("name"):
        errors.append("regarding: Required value")
    regarding_ns = str(regarding.get("namespace") or "")
    if regarding_ns and regarding_ns != namespace:
        errors.append("regarding.namespace: Invalid value: does not match event.namespace")
    if not regarding_ns and namespace not in ("", "default"):
        errors.append("metadata.namespace: Invalid value: cluster-scoped object, not default")
    return errors


def _series_errors(body: dict[str, Any]) -> list[str]:
    """The series (a repeated event's count and last time) and the legacy fields."""
    errors = []
    series = body.get("series")
    if series is not None:
        if not isinstance(series, dict) or int(series.get("count") or 0) < 2:
            errors.append("series.count: Invalid value: should be at least 2")
        elif not _time(series.get("lastObservedTime")):
            errors.append("series.lastObservedTime: Required value")
    for legacy in ("deprecatedCount", "deprecatedFirstTimestamp", "deprecatedLastTimestamp"):
        if body.get(legacy):
            errors.append(f"{legacy}: Invalid value: needs to be unset")
    return errors


def strategic_merge(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """A strategic merge patch of an Event (no lists in the patched fields): maps merge key
    by key, ``null`` deletes, anything else replaces."""
    merged = copy.deepcopy(target)
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = strategic_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _chunk(h: BaseHTTPRequestHandler, event: dict[str, Any]) -> None:
    data = json.dumps(event).encode() + b"\n"
    h.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
    h.wfile.flush()


def _expired(asked: int, oldest: int) -> dict[str, Any]:
    """The ``410 Expired`` Status a watch from too old a version gets."""
    message = f"too old resource version: {asked} ({oldest})"
    expired = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "code": 410}
    return expired | {"status": "Failure", "reason": "Expired", "message": message}


def _huge(n: int) -> bytes:
    return b'{"kind": "Event", "padding": "' + b"x" * n + b'"}'


class _Unanswered:
    """A handler stand-in that keeps the answer instead of sending it (a create that lands
    but whose answer never leaves; a dripped answer's bytes)."""

    def __init__(self, h: BaseHTTPRequestHandler) -> None:
        self.command = h.command
        self.path = h.path
        self.headers = h.headers
        self.data = b""

    def answer(self, code: int, body: bytes, headers: list[tuple[str, str]]) -> None:
        head = [f"HTTP/1.1 {code} X", "Content-Type: application/json"]
        head += [f"Content-Length: {len(body)}", *(f"{k}: {v}" for k, v in headers)]
        self.data = ("\r\n".join(head) + "\r\n\r\n").encode() + body


class FakeApiServer:
    """A validating fake Kubernetes API server on loopback (stdlib ``http.server``, one
    thread per request), for testing a controller with the real ``kubernetes`` client.

    It serves ``events.k8s.io/v1`` Events (create, strategic-merge patch, list; refused as
    the API server refuses them), Pods and the custom resources :meth:`register_crd`
    registers, with their status subresource, ``resourceVersion`` compare-and-set, merge and
    JSON patches, pruning and validation by the CRD's schema, the size limits, and watches
    of a collection (``?watch=true``; :meth:`compact` expires old resourceVersions;
    :meth:`bookmark`, :meth:`drop_watches` and :meth:`expire_watches` script what an open
    watch gets, :meth:`wait_watching` waits for watches to open).

    Point a client at it with :meth:`configuration` or :meth:`kubeconfig`; create and delete
    objects through the API (POST to a collection, DELETE on an object), or out of band with
    :meth:`add_object` and :meth:`remove_object` (the same code); read them back with
    :meth:`object`, :meth:`status` and :meth:`events_regarding`; script faults with
    :meth:`fail`, :meth:`fail_path` and :meth:`fail_when` (a status code, ``"hang"``,
    ``"drop"``, ``"reset"``, ``("slow", s)``, ``("drip", s)``, ``("huge", n)``,
    ``("landed", then)``), :meth:`hold` and ``delay``; take a whole API down for a while
    with :meth:`outage` and bring it back with :meth:`restore`. Every request is kept in
    ``requests``. Use it as a context manager, or call :meth:`close`. What it cannot show:
    ADR 0138."""

    def __init__(self) -> None:
        self.events: dict[tuple[str, str], dict[str, Any]] = {}
        self.requests: list[Request] = []
        self.refused: list[tuple[Request, list[str]]] = []
        self._script: list[tuple[Predicate, Answer]] = []
        self._outages: list[tuple[str, int]] = []
        self._lock = threading.Lock()
        self._released = threading.Event()
        self._version = 0
        self._holding: tuple[bool, threading.Event] | None = None
        #: creates hanging now (see :meth:`hold`)
        self.held = 0
        #: seconds every answer waits (a slow server)
        self.delay = 0.0
        #: which requests ``delay`` slows (``None``: all)
        self.delayed: Predicate | None = None
        #: successful creates per Event name
        self.creates: dict[str, int] = {}
        self._objects = ObjectStore()
        self._compacted = 0
        # watch faults: each open watch acts on a count that moved since it last looked
        self._bookmarks = 0
        self._drops = 0
        self._expiries = 0
        self._watching = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            wbufsize = 1 << 16  # headers and body in one segment: no delayed-ACK stalls
            disable_nagle_algorithm = True

            def do_POST(self) -> None:
                server._handle(self)

            do_PATCH = do_GET = do_PUT = do_DELETE = do_POST

            def log_message(self, format: str, *args: object) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: object, client_address: object) -> None:
                pass  # a client that timed out and left

        self._httpd = Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``: the server's address (a client's ``host``)."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def close(self) -> None:
        """End every hanging request and stop serving."""
        self._released.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)
        assert not self._thread.is_alive()

    def release(self) -> None:
        """End every hanging request now."""
        self._released.set()

    def hold(self, *, landed: bool) -> None:
        """From now on every Event create hangs: stored first when ``landed``, else not
        stored (a Lease create is answered as usual).

        Args:
            landed: store each hanging Event before it hangs, as when the answer, not the
                request, is lost.
        """
        with self._lock:
            self._holding = (landed, threading.Event())

    def let_go(self) -> None:
        """End :meth:`hold`: the hanging creates close their connections unanswered, and
        later ones are answered normally."""
        with self._lock:
            holding, self._holding = self._holding, None
        if holding is not None:
            holding[1].set()

    def wait_held(self, n: int, timeout: float = 20.0) -> bool:
        """Wait until ``n`` creates hang.

        Args:
            n: how many hanging creates to wait for.
            timeout: the longest wait, in seconds.

        Returns:
            Whether ``n`` hung in time.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if self.held >= n:
                    return True
            time.sleep(0.005)
        return False

    def fail(self, method: str, *answers: Answer) -> None:
        """Script the next answers to requests of ``method`` (``"POST"``, ``"PUT"``, ...).

        Args:
            method: the HTTP method.
            *answers: one per request picked, in order: a status code, or a scripted misbehaviour
                (a ``(code, headers)`` pair, ``("huge", size)`` ...).
        """
        self.fail_when(lambda r: r.method == method, *answers)

    def fail_path(self, substring: str, *answers: Answer) -> None:
        """Script the next answers to requests whose path holds ``substring``.

        Args:
            substring: what the request path must hold.
            *answers: one per request picked, in order: a status code, or a scripted misbehaviour
                (a ``(code, headers)`` pair, ``("huge", size)`` ...).
        """
        self.fail_when(lambda r: substring in r.path, *answers)

    def fail_when(self, predicate: Predicate, *answers: Answer) -> None:
        """Script the next answers to the requests ``predicate`` picks, one each, in order.

        Args:
            predicate: picks the requests, given each :class:`Request`.
            *answers: one per request picked, in order: a status code, or a scripted misbehaviour
                (a ``(code, headers)`` pair, ``("huge", size)`` ...).
        """
        # a huge body is built now, not while the client is being measured
        answers = tuple(
            ("huge", _huge(int(a[1])))
            if isinstance(a, tuple) and a[0] == "huge" and not isinstance(a[1], bytes)
            else a
            for a in answers
        )
        with self._lock:
            self._script.extend((predicate, a) for a in answers)

    def outage(self, substring: str, code: int = 503) -> None:
        """Answer every request whose path holds ``substring`` with ``code`` until
        :meth:`restore` (``outage("/events")``: the Events API is down, objects still
        answer).

        Args:
            substring: what the request path must hold.
            code: the HTTP status answered.
        """
        with self._lock:
            self._outages.append((substring, code))

    def restore(self) -> None:
        """End every :meth:`outage`: those requests are answered normally again."""
        with self._lock:
            self._outages.clear()

    def verbs(self) -> list[str]:
        """The method of every request so far, in order.

        Returns:
            The methods.
        """
        return [r.method for r in self.requests]

    def evict(self, name: str) -> None:
        """Delete the Events named ``name`` out of band (as their TTL would).

        Args:
            name: the Events' name.
        """
        with self._lock:
            for key in [k for k in self.events if k[1] == name]:
                del self.events[key]

    # -- objects (see .objects) --------------------------------------------------------------
    def register_crd(
        self,
        group: str,
        version: str,
        plural: str,
        kind: str,
        schema: dict[str, Any],
        *,
        namespaced: bool = True,
    ) -> None:
        """Serve the custom resource ``plural`` of ``group/version`` (with a status
        subresource), validated and pruned by ``schema`` (its ``openAPIV3Schema``).

        Args:
            group: the API group.
            version: the API version.
            plural: the resource's plural, its path segment.
            kind: the resource's kind.
            schema: the ``openAPIV3Schema`` that validates and prunes each write, as the API server
                does, so a status the schema does not allow fails here as in a cluster.
            namespaced: the resource is namespaced.
        """
        resource = Resource(group, version, plural, kind, namespaced, copy.deepcopy(schema))
        with self._lock:
            self._objects.register(resource)

    def add_object(
        self,
        resource: str,
        namespace: str,
        name: str,
        *,
        uid: str | None = None,
        spec: dict[str, Any] | None = None,
        status: dict[str, Any] | None = None,
        labels: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """Create an object out of band (``"pods"`` or a registered CRD's plural; a Pod
        without ``spec`` gets one container): a copy of it as stored. An object the API
        would refuse raises ``ValueError``.

        Args:
            resource: ``"pods"`` or a registered CRD's plural.
            namespace: the object's namespace (ignored for a cluster-scoped resource).
            name: the object's name.
            uid: its UID; ``None``: a fresh one.
            spec: its ``spec``.
            status: its ``status``.
            labels: its labels.

        Returns:
            A copy of the stored object.

        Raises:
            ValueError: the API server would refuse the object.
            KeyError: ``resource`` is not served.
        """
        with self._lock:
            return self._objects.add(
                resource, namespace, name, uid=uid, spec=spec, status=status, labels=labels
            )

    def object(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        """A copy of the stored object, or None.

        Args:
            resource: ``"pods"`` or a registered CRD's plural.
            namespace: the object's namespace (ignored for a cluster-scoped resource).
            name: the object's name.

        Returns:
            The copy, or ``None`` when there is no such object.

        Raises:
            KeyError: ``resource`` is not served (register its CRD first).
        """
        with self._lock:
            plural = self._objects.by_plural(resource)
            key = (resource, namespace if plural.namespaced else "", name)
            found = self._objects.objects.get(key)
            return copy.deepcopy(found) if found is not None else None

    def remove_object(self, resource: str, namespace: str, name: str) -> None:
        """Delete an object out of band (as a user's ``kubectl delete``).

        Args:
            resource: ``"pods"`` or a registered CRD's plural.
            namespace: the object's namespace (ignored for a cluster-scoped resource).
            name: the object's name.

        Raises:
            KeyError: ``resource`` is not served (register its CRD first).
        """
        with self._lock:
            self._objects.remove(resource, namespace, name)

    def compact(self) -> None:
        """Forget the changes so far, as etcd's compaction does: a watch from a
        ``resourceVersion`` before now is answered ``410 Expired``, and its client must list
        again. A watch open now goes on unharmed (it reads from the watch cache), as on the
        API server: the change log is kept for it, only new watches are refused."""
        with self._lock:
            self._compacted = self._objects.revision

    def bookmark(self) -> None:
        """Make every open watch that asked for bookmarks (``allowWatchBookmarks=true``) send a
        ``BOOKMARK`` event now: the object's kind and apiVersion and only
        ``metadata.resourceVersion``, the revision up to which the watch has sent every change
        (a client resumes from it)."""
        with self._lock:
            self._bookmarks += 1

    def drop_watches(self) -> None:
        """End every open watch now, mid-stream: the connection closes with no closing chunk,
        as a load balancer or a restarting API server drops it (its client sees a broken
        stream and must watch again from the last version it saw)."""
        with self._lock:
            self._drops += 1

    def expire_watches(self) -> None:
        """Answer every open watch with an ``ERROR`` event carrying a ``410 Expired`` Status
        and end it, as the API server does when a watcher falls out of its watch cache (its
        client must list again); :meth:`compact` then makes a watch from an older version
        expire too."""
        with self._lock:
            self._expiries += 1

    @property
    def watching(self) -> int:
        """Watches open now."""
        with self._lock:
            return self._watching

    def wait_watching(self, n: int, timeout: float = 20.0) -> bool:
        """Wait until at least ``n`` watches are open.

        Args:
            n: how many watches to wait for.
            timeout: the longest wait, in seconds.

        Returns:
            Whether ``n`` were open in time.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.watching >= n:
                return True
            time.sleep(0.005)
        return False

    def status(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        """A copy of the object's ``status`` (``{}`` when it has none), or None when there is
        no such object.

        Args:
            resource: ``"pods"`` or a registered CRD's plural.
            namespace: the object's namespace (ignored for a cluster-scoped resource).
            name: the object's name.

        Returns:
            The copy, or ``None``.

        Raises:
            KeyError: ``resource`` is not served (register its CRD first).
        """
        found = self.object(resource, namespace, name)
        return None if found is None else dict(found.get("status") or {})

    def events_regarding(self, name: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """The Events stored about the object ``name`` (in ``namespace``, or any), oldest
        first.

        Args:
            name: the object's name.
            namespace: the Events' namespace; ``None``: any.

        Returns:
            The Events, copies.
        """
        with self._lock:
            found = [
                copy.deepcopy(e)
                for (ns, _), e in self.events.items()
                if (e.get("regarding") or {}).get("name") == name
                and (namespace is None or ns == namespace)
            ]
        return sorted(found, key=lambda e: int(e["metadata"]["resourceVersion"]))

    def configuration(self) -> Any:
        """A ``kubernetes.client.Configuration`` whose host is this server (needs the
        ``kubernetes`` client).

        Returns:
            The configuration, for ``kubernetes.client.ApiClient``.
        """
        from kubernetes import client  # type: ignore[import-untyped]

        configuration = client.Configuration()
        configuration.host = self.url
        return configuration

    def kubeconfig(self, path: str | os.PathLike[str]) -> str:
        """Write a kubeconfig whose current context is this server to ``path`` (for
        ``kubernetes.config.load_kube_config(config_file=...)`` or ``KUBECONFIG``) and
        return it as a string.

        Args:
            path: where to write it.

        Returns:
            The kubeconfig's text.
        """
        text = json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
                "users": [{"name": "fake", "user": {}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
                "current-context": "fake",
            },
            indent=2,
        )
        Path(path).write_text(text, encoding="utf-8")
        return str(path)

    def __enter__(self) -> FakeApiServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.let_go()
        self.close()

    @property
    def writes(self) -> int:
        """Successful object writes through the API (a no-op update is none)."""
        with self._lock:
            return self._objects.writes

    # -- serving ----------------------------------------------------------------------------
    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        request = Request(
            h.command,
            h.path,
            h.headers.get("Content-Type", ""),
            body,
            time.monotonic(),
            raw,
            {k.lower(): v for k, v in h.headers.items()},
        )
        with self._lock:
            self.requests.append(request)
            answer = next(((i, a) for i, (p, a) in enumerate(self._script) if p(request)), None)
            if answer is not None:
                del self._script[answer[0]]
            down = next((code for part, code in self._outages if part in request.path), None)
        if down is not None and answer is None:
            self._status(h, down, "ServiceUnavailable" if down == 503 else "Scripted")
            return
        if self.delay and (self.delayed is None or self.delayed(request)):
            time.sleep(self.delay)
        if answer is not None and self._scripted(h, request, answer[1]):
            return
        self._serve(h, request)

    def _scripted(self, h: BaseHTTPRequestHandler, request: Request, scripted: Any) -> bool:
        """Answer ``request`` as the script says; ``False``: it only slowed it down (served
        as usual after)."""
        if scripted in ("reset", "hang", "drop"):
            self._hang_up(h, scripted)
            return True
        kind = scripted[0] if isinstance(scripted, tuple) else None
        if kind == "drip":
            self._drip(h, request, float(scripted[1]))
        elif kind == "huge":
            data = scripted[1]
            assert isinstance(data, bytes)
            h.send_response(201)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            with contextlib.suppress(OSError):
                h.wfile.write(data)
        elif kind == "landed":
            with self._lock:  # applied, then answered with what follows (or not at all)
                self._route(_Unanswered(h), request)
            then = scripted[1]
            if isinstance(then, int):
                self._status(h, then, "InternalError" if then >= 500 else "Scripted")
            else:
                h.close_connection = True  # "drop": the answer never comes
        elif kind == "slow":
            time.sleep(float(scripted[1]))
            return False
        else:
            code, headers = scripted if isinstance(scripted, tuple) else (scripted, {})
            assert isinstance(code, int)
            assert isinstance(headers, dict)
            reason = "InternalError" if code >= 500 else "Scripted"
            self._status(h, code, reason, headers)
        return True

    def _hang_up(self, h: BaseHTTPRequestHandler, how: str) -> None:
        """No answer: the connection ``reset``, or closed after a ``hang`` (until released)
        or at once (``drop``)."""
        if how == "reset":
            with contextlib.suppress(OSError):
                h.connection.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )
        elif how == "hang":
            self._released.wait(10)
        h.close_connection = True

    def _serve(self, h: BaseHTTPRequestHandler, request: Request) -> None:
        """Answer ``request`` as the API server does: a watch streams, a held create waits."""
        if request.method == "GET" and "watch=" in h.path:
            with self._lock:
                watched = self._objects.watched(h.path)
            if watched is not None:
                return self._watch(h, *watched)
        with self._lock:
            event_create = request.method == "POST" and request.path.startswith(PREFIX)
            holding = self._holding if event_create else None
            if holding is None:
                self._route(h, request)
                return
            landed, gate = holding
            if landed:  # stored, but the answer is never sent
                self._route(_Unanswered(h), request)
            self.held += 1
        gate.wait(60)
        with self._lock:
            self.held -= 1
        h.close_connection = True

    def _watch(
        self,
        h: BaseHTTPRequestHandler,
        resource: Resource,
        namespace: str,
        wanted: Callable[[dict[str, str]], bool],
    ) -> None:
        """Stream a watch of a collection as the API server does: one JSON event a line
        (``ADDED``, ``MODIFIED``, ``DELETED``), after the request's ``resourceVersion`` (none
        or ``"0"``: the objects there now, as ``ADDED``, then what follows), until its
        ``timeoutSeconds`` (at most 600) or the server closes; one from before
        :meth:`compact` gets an ``ERROR`` event with a ``410 Expired`` Status. With
        ``allowWatchBookmarks=true`` it sends a ``BOOKMARK`` at each :meth:`bookmark`;
        :meth:`drop_watches` and :meth:`expire_watches` end it early."""
        query = {k: v[-1] for k, v in parse_qs(urlsplit(h.path).query).items()}
        since = query.get("resourceVersion") or "0"
        bookmarks = query.get("allowWatchBookmarks", "").lower() in ("true", "1")
        try:
            timeout = min(float(query.get("timeoutSeconds") or 600), 600.0)
            after = int(since)
        except ValueError:
            return self._status(h, 400, "BadRequest", message=f"invalid watch {since!r}")

        def picked(plural: str, ns: str, obj: dict[str, Any]) -> bool:
            labels = obj["metadata"].get("labels") or {}
            return plural == resource.plural and namespace in ("", ns) and wanted(labels)

        first: list[dict[str, Any]] = []
        with self._lock:
            changes = self._objects.changes
            if after == 0:
                first = [
                    {"type": "ADDED", "object": copy.deepcopy(obj)}
                    for (plural, ns, _), obj in sorted(self._objects.objects.items())
                    if picked(plural, ns, obj)
                ]
                position = len(changes)
            elif after < self._compacted:
                first = [{"type": "ERROR", "object": _expired(after, self._compacted)}]
                position = -1
            else:
                position = bisect.bisect_right([c[0] for c in changes], after)
            faults = (self._bookmarks, self._drops, self._expiries)
            sent = self._objects.revision
            self._watching += 1
        try:
            self._stream(h, resource, first, position, timeout, picked, bookmarks, faults, sent)
        finally:
            with self._lock:
                self._watching -= 1

    def _stream(
        self,
        h: BaseHTTPRequestHandler,
        resource: Resource,
        first: list[dict[str, Any]],
        position: int,
        timeout: float,
        picked: Callable[[str, str, dict[str, Any]], bool],
        bookmarks: bool,
        faults: tuple[int, int, int],
        sent: int,
    ) -> None:
        """The body of :meth:`_watch`: ``first``, then the changes from ``position`` on, with
        the faults scripted since ``faults`` was read."""
        marked, dropped, expired = faults
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Transfer-Encoding", "chunked")
        h.send_header("Connection", "close")  # a client must not reuse it after the stream
        h.end_headers()
        h.wfile.flush()  # the headers now, as the API server sends them, before any event
        deadline = time.monotonic() + timeout
        try:
            for event in first:
                _chunk(h, event)
            while position >= 0 and time.monotonic() < deadline:
                with self._lock:
                    new = self._objects.changes[position:]
                    position += len(new)
                    sent = self._objects.revision  # every change up to it is now sent
                    now = (self._bookmarks, self._drops, self._expiries)
                if now[1] != dropped:  # mid-stream, before any later change: no closing chunk
                    h.close_connection = True
                    return
                if now[2] != expired:
                    _chunk(h, {"type": "ERROR", "object": _expired(sent, sent)})
                    break
                for _, kind, plural, ns, obj in new:
                    if picked(plural, ns, obj):
                        _chunk(h, {"type": kind, "object": obj})
                if now[0] != marked and bookmarks:
                    marked = now[0]
                    version = {"resourceVersion": str(sent)}
                    mark = {"kind": resource.kind, "apiVersion": resource.api_version}
                    _chunk(h, {"type": "BOOKMARK", "object": mark | {"metadata": version}})
                if not new and self._released.wait(0.02):
                    break
            h.wfile.write(b"0\r\n\r\n")
            h.wfile.flush()
        except OSError:
            pass  # the client left
        h.close_connection = True

    def _drip(self, h: BaseHTTPRequestHandler, request: Request, every: float) -> None:
        """Answer ``request`` properly, one byte every ``every`` seconds (a slow reader's
        worst case), until done or the client leaves."""
        buffer = _Unanswered(h)
        with self._lock:
            self._route(buffer, request)
        try:
            for i in range(len(buffer.data)):
                h.wfile.write(buffer.data[i : i + 1])
                h.wfile.flush()
                if self._released.wait(every):
                    break
        except OSError:
            pass
        h.close_connection = True

    def _route(self, h: BaseHTTPRequestHandler | _Unanswered, request: Request) -> None:
        if not h.path.startswith(PREFIX + "/") and h.path.split("?")[0] != PREFIX:
            code, answer, headers = self._objects.serve(
                request.method, h.path, request.content_type, request.raw
            )
            return self._json(h, code, answer, headers)
        if h.command not in ("GET", "POST", "PATCH"):
            message = "the server does not allow this method on the requested resource"
            return self._status(h, 405, "MethodNotAllowed", message=message)
        parts = h.path.split("?")[0].removeprefix(PREFIX).strip("/").split("/")
        if h.command == "GET" and len(parts) == 4:  # one Event, by name
            found = self.events.get((parts[1], parts[3]))
            if found is None:
                return self._status(h, 404, "NotFound", message=f'events "{parts[3]}" not found')
            return self._json(h, 200, found)
        if h.command == "GET":
            items = [e for (ns, _), e in self.events.items() if len(parts) == 1 or ns == parts[1]]
            return self._json(
                h,
                200,
                {
                    "kind": "EventList",
                    "apiVersion": "events.k8s.io/v1",
                    "metadata": {},
                    "items": items,
                },
            )
        if h.command == "POST":
            return self._create_event(h, request, parts[1])
        return self._patch_event(h, request, parts[1], parts[3])

    def _create_event(
        self, h: BaseHTTPRequestHandler | _Unanswered, request: Request, namespace: str
    ) -> None:
        body = request.body
        given = (body or {}).get("metadata", {}).get("namespace")
        if given and given != namespace:
            message = "the namespace of the object does not match the request"
            return self._status(h, 400, "BadRequest", message=message)
        errors = event_errors(body)
        if errors:
            self.refused.append((request, errors))
            return self._status(h, 422, "Invalid", message="; ".join(errors))
        name = body["metadata"]["name"]
        if (namespace, name) in self.events:
            return self._status(h, 409, "AlreadyExists", message=f'"{name}" already exists')
        self._version += 1
        body["metadata"]["resourceVersion"] = str(self._version)
        self.events[(namespace, name)] = body
        self.creates[name] = self.creates.get(name, 0) + 1
        return self._json(h, 201, body)

    def _patch_event(
        self,
        h: BaseHTTPRequestHandler | _Unanswered,
        request: Request,
        namespace: str,
        name: str,
    ) -> None:
        body = request.body
        if h.headers.get("Content-Type") != "application/strategic-merge-patch+json":
            return self._status(h, 415, "UnsupportedMediaType")
        stored = self.events.get((namespace, name))
        if stored is None:
            return self._status(h, 404, "NotFound", message=f'events "{name}" not found')
        if not isinstance(body, dict):
            return self._status(h, 400, "BadRequest", message="patch is not an object")
        merged = strategic_merge(stored, body)
        errors = event_errors(merged)
        if errors:
            self.refused.append((request, errors))
            return self._status(h, 422, "Invalid", message="; ".join(errors))
        self._version += 1
        merged["metadata"]["resourceVersion"] = str(self._version)
        self.events[(namespace, name)] = merged
        return self._json(h, 200, merged)

    def _status(
        self,
        h: BaseHTTPRequestHandler | _Unanswered,
        code: int,
        reason: str,
        headers: dict[str, str] | None = None,
        message: str = "",
    ) -> None:
        status = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message or reason,
            "reason": reason,
            "code": code,
        }
        self._json(h, code, status, headers)

    @staticmethod
    def _json(
        h: BaseHTTPRequestHandler | _Unanswered,
        code: int,
        obj: Any,
        headers: dict[str, str] | list[tuple[str, str]] | None = None,
    ) -> None:
        data = json.dumps(obj).encode()
        pairs = list(headers.items()) if isinstance(headers, dict) else list(headers or [])
        if isinstance(h, _Unanswered):
            h.answer(code, data, pairs)
            return
        h.send_response(code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        for k, v in pairs:
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(data)
