"""The integration harness's view of Events: filtered by the regarded object's UID and
projected to ``(type, reason, message, kind, name, count)``, sorted by the first five."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from ..._k8s_api.client import kubernetes_client


@attrs.frozen(slots=True, order=True)
class EventRow:
    """One Event as ``kubectl describe`` shows it; ``count`` is ``series.count``, or 1.

    Attributes:
        type: ``Normal`` or ``Warning``.
        reason: the Event's reason.
        message: its note (core/v1: message).
        kind: the regarding object's kind.
        name: the regarding object's name.
        count: how many times it was seen.
    """

    type: str
    reason: str
    message: str
    kind: str
    name: str
    count: int

    def as_tuple(self) -> tuple[str, str, str, str, str, int]:
        """The row as a plain tuple, in field order (what a test compares against).

        Returns:
            ``(type, reason, message, kind, name, count)``.
        """
        return (self.type, self.reason, self.message, self.kind, self.name, self.count)


def _get(obj: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        if key in obj and obj[key] is not None:
            return obj[key]
    return None


def project(events: Iterable[Mapping[str, Any]], uid: str | None = None) -> list[EventRow]:
    """Rows for the Events regarding ``uid`` (all of them for ``None``), sorted.

    Accepts ``events.k8s.io/v1`` bodies (``regarding``, ``note``, ``series``) and core/v1
    ones (``involvedObject``, ``message``, ``count``), camelCase, as the API lists them.

    Args:
        events: the Event bodies, as the API lists them.
        uid: the regarding object's uid; ``None``: every object.

    Returns:
        The rows, sorted.
    """
    rows = []
    for event in events:
        regarding = _get(event, "regarding", "involvedObject") or {}
        if uid is not None and regarding.get("uid") != uid:
            continue
        series = event.get("series")
        if isinstance(series, Mapping) and series.get("count"):
            count = int(series["count"])
        else:
            count = int(event.get("count") or event.get("deprecatedCount") or 1)
        rows.append(
            EventRow(
                str(event.get("type") or ""),
                str(event.get("reason") or ""),
                str(_get(event, "note", "message") or ""),
                str(regarding.get("kind") or ""),
                str(regarding.get("name") or ""),
                count,
            )
        )
    return sorted(rows, key=lambda r: r.as_tuple()[:5])


class EventCollector:
    """Reads Events from a source (the API, or a :class:`MemoryEventSink`) and projects the
    rows of one object, as the upstream integration harness does.

    Args:
        source: lists the Event bodies, called on each read.
    """

    def __init__(self, source: Callable[[], Iterable[Mapping[str, Any]]]) -> None:
        self._source = source

    @classmethod
    def from_api(cls, api: Any = None, namespace: str | None = None) -> EventCollector:
        """Lists with ``EventsV1Api`` (one namespace, or all of them); ``api`` is an
        ``EventsV1Api``, an ``ApiClient`` or ``None`` for the default configuration.

        Args:
            api: an ``EventsV1Api``, an ``ApiClient`` or ``None`` for the default configuration.
            namespace: the namespace to list; ``None``: all.

        Returns:
            The collector.

        Raises:
            MissingExtra: the ``kubernetes`` client is not installed.
        """
        client = kubernetes_client("the Kubernetes Event collector")
        serializer = client.ApiClient()
        events_api = (
            client.EventsV1Api(api) if api is None or isinstance(api, client.ApiClient) else api
        )

        def source() -> list[Mapping[str, Any]]:
            if namespace is None:
                listed = events_api.list_event_for_all_namespaces()
            else:
                listed = events_api.list_namespaced_event(namespace)
            body = serializer.sanitize_for_serialization(listed)
            return list(body.get("items") or [])

        return cls(source)

    def events(self) -> list[Mapping[str, Any]]:
        """The Event bodies, read now.

        Returns:
            The bodies.
        """
        return list(self._source())

    def rows(self, uid: str | None = None) -> list[EventRow]:
        """The rows of the Events about one object (or all), read now.

        Args:
            uid: the regarding object's uid; ``None``: every object.

        Returns:
            The rows, sorted.
        """
        return project(self._source(), uid)
