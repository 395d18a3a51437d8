"""One watched kind of :class:`lifecycle.host.HostLoop`: a list, then watches from the last
``resourceVersion`` seen, over the official ``kubernetes`` client (ADR 0158).

Each object delivered is remembered by its (namespace, name) with its uid, version and last
state, so that a replayed event or a relisted unchanged object is not delivered again, and a
relist (after ``410``, or at the resync period) finds what changed or went while the watch
was away: gone from the list is ``DELETED`` (its last seen state), another uid under the
name is the old one ``DELETED`` and the new one ``ADDED``.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from ._core.refs import ObjectRef
from ._log import get_logger
from .stores.kubernetes import CustomResource, ObjectChange

_log = get_logger("lifecycle.host")

_GONE = 410
_TYPES = frozenset({"ADDED", "MODIFIED", "DELETED"})
#: the first and the longest pause after a watch or list that failed
BACKOFF = (0.05, 5.0)

Deliver = Callable[[Sequence[ObjectChange]], None]
Report = Callable[[str, BaseException, ObjectRef | None], None]


@attrs.frozen(slots=True)
class _Seen:
    uid: str
    version: str
    object: Mapping[str, Any]


class KindWatch:
    """The list and watches of one kind, run by :meth:`run` on a thread of its own until
    ``stopping`` is set; what changed goes to ``deliver``, what failed to ``report``."""

    def __init__(
        self,
        api_client: Any,
        kind: str,
        resource: CustomResource,
        *,
        namespace: str | None,
        label_selector: str,
        timeout_seconds: int,
        request_timeout: float,
        resync: float,
        deliver: Deliver,
        report: Report,
        stopping: threading.Event,
    ) -> None:
        self.api_client = api_client
        self.kind = kind
        self.resource = resource
        self.namespace = namespace
        self.label_selector = label_selector
        self.timeout_seconds = timeout_seconds
        self.request_timeout = request_timeout
        self.resync = resync
        self.deliver = deliver
        self.report = report
        self.stopping = stopping
        #: the version the next watch starts from (``None``: list first)
        self.version: str | None = None
        #: set once the first list was delivered
        self.listed = threading.Event()
        self.lists = 0
        self._known: dict[tuple[str, str], _Seen] = {}
        self._listed_at = 0.0
        self._watch: Any = None
        self._response: Any = None
        self._lock = threading.RLock()  # stop() may run in a signal handler on any thread

    # -- the thread ---------------------------------------------------------------------------
    def run(self) -> None:
        from kubernetes.client.exceptions import ApiException  # type: ignore[import-untyped]

        pause = 0.0
        while not self.stopping.is_set():
            try:
                if self.version is None or time.monotonic() - self._listed_at >= self.resync:
                    self.relist()
                self.follow()
                pause = 0.0
            except ApiException as e:
                if e.status == _GONE:  # the changes since our version are gone: list again
                    _log.info("watch expired, listing again", kind=self.kind)
                    self.version = None
                    continue
                pause = self._failed(e, pause)
            except Exception as e:  # a dropped or refused connection, an unreadable answer
                if self.stopping.is_set():
                    break
                if _dropped(e):  # resume from the last version at once
                    _log.info("watch dropped, resuming", kind=self.kind, version=self.version)
                    continue
                pause = self._failed(e, pause)
            if pause:
                self.stopping.wait(pause)

    def stop(self) -> None:
        """End the watch in flight: its stream's socket is shut for reading, so the thread
        blocked on it wakes at once and sees ``stopping``."""
        with self._lock:
            watch, response = self._watch, self._response
        if watch is not None:
            watch.stop()
        if response is not None:
            with contextlib.suppress(Exception):  # already released, or closed meanwhile
                shutdown = getattr(response, "shutdown", None)  # urllib3 >= 2.3
                (shutdown or response.close)()

    def _failed(self, error: BaseException, pause: float) -> float:
        self.report("watch", error, None)
        return min(max(pause * 2, BACKOFF[0]), BACKOFF[1])

    # -- a list and a watch -------------------------------------------------------------------
    def relist(self) -> None:
        """List the kind and deliver what differs from what was delivered before."""
        response = self._get(self.resource.collection(self.namespace))
        listed = json.loads(response.data)
        changes: list[ObjectChange] = []
        present: set[tuple[str, str]] = set()
        for item in listed.get("items") or []:
            present.add(self._key(item))
            changes += self._apply("ADDED", item)
        for key in [k for k in self._known if k not in present]:
            gone = self._known.pop(key)
            changes.append(ObjectChange("DELETED", self._ref(gone.object), gone.object))
        self.version = str((listed.get("metadata") or {}).get("resourceVersion") or "") or None
        self._listed_at = time.monotonic()
        self.lists += 1
        if changes:
            self.deliver(changes)
        self.listed.set()

    def follow(self) -> None:
        """One watch from :attr:`version`, until the API server ends it (``timeoutSeconds``)
        or :meth:`stop`; raises what the stream raises (``410`` as ``ApiException``)."""
        from kubernetes import watch  # type: ignore[import-untyped]

        follower = watch.Watch()
        with self._lock:
            self._watch = follower
        try:
            if self.stopping.is_set():
                return
            stream = follower.stream(
                self._get,
                self.resource.collection(self.namespace),
                resource_version=self.version,
                timeout_seconds=self.timeout_seconds,
                allow_watch_bookmarks=True,
            )
            for event in stream:  # plain dicts: _get names no model for the client to build
                kind = event.get("type")
                obj = event.get("raw_object") or event.get("object") or {}
                version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
                if kind in _TYPES:
                    changes = self._apply(kind, obj)
                    if changes:
                        self.deliver(changes)
                if version and kind in (*_TYPES, "BOOKMARK"):
                    self.version = version
                if self.stopping.is_set():
                    break
        finally:
            with self._lock:
                self._watch = self._response = None

    def _apply(self, kind: str, obj: Mapping[str, Any]) -> list[ObjectChange]:
        """What ``kind`` of ``obj`` means given what was delivered before (nothing, for a
        version already delivered or a deletion of an object never delivered)."""
        metadata = obj.get("metadata") or {}
        uid = str(metadata.get("uid") or "")
        version = str(metadata.get("resourceVersion") or "")
        key = self._key(obj)
        before = self._known.get(key)
        if kind == "DELETED":
            if before is None or before.uid != uid:
                return []
            del self._known[key]
            return [ObjectChange("DELETED", self._ref(obj), obj)]
        out: list[ObjectChange] = []
        if before is not None and before.uid != uid:  # deleted and made again while away
            out.append(ObjectChange("DELETED", self._ref(before.object), before.object))
            before = None
        if before is not None and before.version == version:
            return out
        ref = self._ref(obj)  # before remembering it: an object without a name is refused
        self._known[key] = _Seen(uid, version, obj)
        out.append(ObjectChange("ADDED" if before is None else "MODIFIED", ref, obj))
        return out

    def _key(self, obj: Mapping[str, Any]) -> tuple[str, str]:
        metadata = obj.get("metadata") or {}
        namespace = str(metadata.get("namespace") or "") if self.resource.namespaced else ""
        return namespace, str(metadata.get("name") or "")

    def _ref(self, obj: Mapping[str, Any]) -> ObjectRef:
        metadata = obj.get("metadata") or {}
        namespace, name = self._key(obj)
        return ObjectRef(self.kind, namespace, name, uid=str(metadata.get("uid") or ""))

    def _get(self, path: str, **options: Any) -> Any:
        """One ``GET`` through the client, its answer unread (a list, or a watch's stream)."""
        query = [("labelSelector", self.label_selector)] if self.label_selector else []
        timeout: Any = self.request_timeout
        if options.get("watch"):
            seconds = int(options.get("timeout_seconds") or self.timeout_seconds)
            query += [("watch", "true"), ("timeoutSeconds", str(seconds))]
            query.append(("resourceVersion", str(options.get("resource_version") or "0")))
            if options.get("allow_watch_bookmarks"):
                query.append(("allowWatchBookmarks", "true"))
            timeout = (self.request_timeout, seconds + self.request_timeout)
        response = self.api_client.call_api(
            path,
            "GET",
            query_params=query,
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
            _return_http_data_only=True,
            _preload_content=False,
            _request_timeout=timeout,
        )
        if options.get("watch"):
            with self._lock:
                self._response = response
            if self.stopping.is_set():  # stop() came while the request was on its way
                self.stop()
        return response


def _dropped(error: BaseException) -> bool:
    """Whether ``error`` is a stream the server or the network broke (resume at once)."""
    from urllib3.exceptions import ProtocolError

    return isinstance(error, ProtocolError | ConnectionResetError)
