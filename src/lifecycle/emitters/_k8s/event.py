"""The ``events.k8s.io/v1`` Event a client-go recorder builds, and its wire form.

Only what client-go's ``recorderImpl.makeEvent`` sets is modelled: name, namespace, eventTime,
series, reportingController, reportingInstance, action, reason, regarding, related, note and
type. Records are frozen; the correlator replaces a cached Event to move its series on.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs

from ..._core.redact import redact

#: ``events.k8s.io/v1`` refuses a note longer than this many bytes.
NOTE_LIMIT = 1024
#: Appended to a note cut to fit :data:`NOTE_LIMIT`.
TRUNCATED_SUFFIX = "... [truncated]"
NORMAL = "Normal"
WARNING = "Warning"
EVENT_TYPES = frozenset({NORMAL, WARNING})

#: The longest name the API server accepts for an Event (a DNS subdomain).
NAME_LIMIT = 253
#: Names of UUID-named Events (a name ``<regarding>.<hex nanos>`` that is not a valid DNS
#: subdomain) are version-5 UUIDs in this namespace: as unique as the name they replace, and
#: the same in a replay.
EVENT_NAME_NAMESPACE = uuid.UUID("5c0f3a52-8e0b-4f5e-9a57-1d0c6b7e2a10")

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SURROGATES = re.compile("[\ud800-\udfff]")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


@attrs.frozen(slots=True)
class ObjectReference:
    """``corev1.ObjectReference`` as client-go's ``GetReference`` fills it for ``regarding``:
    kind, apiVersion, namespace, name, uid **and resourceVersion**. It is part of the
    correlation key, so a new resourceVersion makes a new Event row.

    ``store_version`` is never sent. When the host cannot supply the object's real
    resourceVersion it is left out of the Event (never invented), and ``store_version`` (the
    version the library's store committed the status at) keeps two transitions' Events apart
    in correlation, as the resourceVersion a Go controller's status write moves would. It is
    empty when the real resourceVersion is known.

    Attributes:
        kind: the object's kind.
        name: its name.
        namespace: its namespace.
        uid: its uid, as the API server knows it (what ``kubectl describe`` finds Events by).
        api_version: its kind's apiVersion.
        resource_version: its resourceVersion; empty when the host could not supply it.
        field_path: the part of the object meant, when not all of it.
        store_version: the library's committed version, for correlation only (never sent).
    """

    kind: str = ""
    name: str = ""
    namespace: str = ""
    uid: str = ""
    api_version: str = ""
    resource_version: str = ""
    field_path: str = ""
    store_version: str = ""

    def to_body(self) -> dict[str, str]:
        """The JSON object, with Go's ``omitempty`` (empty fields left out).

        Returns:
            The reference in the API's camelCase.
        """
        fields = (
            ("kind", self.kind),
            ("namespace", self.namespace),
            ("name", self.name),
            ("uid", self.uid),
            ("apiVersion", self.api_version),
            ("resourceVersion", self.resource_version),
            ("fieldPath", self.field_path),
        )
        return {k: v for k, v in fields if v}

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> ObjectReference:
        """The reference of a JSON object as the API returns it (camelCase).

        Args:
            body: the reference as the API returns it.

        Returns:
            The reference (``store_version`` empty).
        """
        return cls(
            kind=str(body.get("kind") or ""),
            name=str(body.get("name") or ""),
            namespace=str(body.get("namespace") or ""),
            uid=str(body.get("uid") or ""),
            api_version=str(body.get("apiVersion") or ""),
            resource_version=str(body.get("resourceVersion") or ""),
            field_path=str(body.get("fieldPath") or ""),
        )


#: ``related`` when there is none: Go keys a nil ``related`` as the zero reference.
NO_REFERENCE = ObjectReference()


@attrs.frozen(slots=True)
class EventSeries:
    """``series``: set on the second emission of a key (count 2), then counted in memory.

    Attributes:
        count: how many times the Event was seen.
        last_observed_time: when it was last seen.
    """

    count: int
    last_observed_time: datetime

    def to_body(self) -> dict[str, Any]:
        """The JSON object (``count``, ``lastObservedTime``).

        Returns:
            The series in the API's camelCase.
        """
        return {"count": self.count, "lastObservedTime": micro_time(self.last_observed_time)}

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> EventSeries:
        """The series of a JSON object as the API returns it.

        Args:
            body: the ``series`` object.

        Returns:
            The series.

        Raises:
            KeyError: a field is missing.
            ValueError: a field is malformed.
        """
        return cls(int(body["count"]), parse_micro_time(str(body["lastObservedTime"])))


EventKey = tuple[str, str, str, str, str, ObjectReference, ObjectReference]


@attrs.frozen(slots=True)
class Event:
    """One ``events.k8s.io/v1`` Event as the recorder built it (and the correlator cached it).

    Attributes:
        name: the Event's name (``<regarding.name>.<hex>``).
        namespace: its namespace, the regarding object's.
        event_time: when it was first recorded.
        type: ``"Normal"`` or ``"Warning"``.
        reason: why, in a word (the machine's reason).
        action: what the controller did.
        note: the message, at most 1 KiB of UTF-8.
        reporting_controller: who reports it.
        reporting_instance: which replica (its host name).
        regarding: the object it is about.
        related: a second object it names, when there is one.
        series: its repeats, from the second on.
    """

    name: str
    namespace: str
    event_time: datetime
    type: str
    reason: str
    action: str
    note: str
    reporting_controller: str
    reporting_instance: str
    regarding: ObjectReference
    related: ObjectReference | None = None
    series: EventSeries | None = None

    @property
    def key(self) -> EventKey:
        """client-go's ``eventKey``: the note, name and times are not part of it."""
        return (
            self.type,
            self.action,
            self.reason,
            self.reporting_controller,
            self.reporting_instance,
            self.regarding,
            self.related if self.related is not None else NO_REFERENCE,
        )

    @property
    def count(self) -> int:
        return self.series.count if self.series is not None else 1

    def to_body(self) -> dict[str, Any]:
        """The JSON body of a create request (camelCase, ``omitempty``).

        Returns:
            The body.
        """
        body: dict[str, Any] = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "eventTime": micro_time(self.event_time),
            "reportingController": self.reporting_controller,
            "reportingInstance": self.reporting_instance,
            "action": self.action,
            "reason": self.reason,
            "regarding": self.regarding.to_body(),
            "note": self.note,
            "type": self.type,
        }
        if self.related is not None:
            body["related"] = self.related.to_body()
        if self.series is not None:
            body["series"] = self.series.to_body()
        return body

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Event:
        """The Event of a JSON body as the API server returns it (its reply to a create or a
        patch). Raises ``KeyError``, ``TypeError`` or ``ValueError`` for a body that is not
        one; fields the recorder does not set are ignored.

        Args:
            body: the API server's reply.

        Returns:
            The Event.

        Raises:
            KeyError: a required field is missing.
            TypeError: a field is of the wrong type.
            ValueError: a field is malformed.
        """
        metadata = body["metadata"]
        related = body.get("related")
        series = body.get("series")
        return cls(
            name=str(metadata["name"]),
            namespace=str(metadata.get("namespace") or ""),
            event_time=parse_micro_time(str(body["eventTime"])),
            type=str(body["type"]),
            reason=str(body.get("reason") or ""),
            action=str(body.get("action") or ""),
            note=str(body.get("note") or ""),
            reporting_controller=str(body.get("reportingController") or ""),
            reporting_instance=str(body.get("reportingInstance") or ""),
            regarding=ObjectReference.from_body(body.get("regarding") or {}),
            related=ObjectReference.from_body(related) if related else None,
            series=EventSeries.from_body(series) if series else None,
        )

    def series_patch(self) -> dict[str, Any]:
        """The strategic-merge patch client-go sends for a series: the two-way diff between
        this Event without ``series`` and with it, which is ``{"series": {...}}``.

        Returns:
            The patch.

        Raises:
            ValueError: the Event has no series.
        """
        if self.series is None:
            raise ValueError(f"event {self.name} has no series to patch")
        return {"series": self.series.to_body()}


def micro_time(at: datetime) -> str:
    """``metav1.MicroTime`` on the wire: RFC 3339 in UTC with six fractional digits."""
    return _utc(at).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_micro_time(text: str) -> datetime:
    """A ``metav1.MicroTime`` (or ``metav1.Time``) from the wire, as an aware datetime."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def is_dns_subdomain(name: str) -> bool:
    """Whether the API server accepts ``name`` as an Event name (RFC 1123 subdomain, at most
    :data:`NAME_LIMIT` characters).

    Args:
        name: the candidate name.

    Returns:
        Whether it is valid.
    """
    return len(name) <= NAME_LIMIT and _DNS_SUBDOMAIN.fullmatch(name) is not None


def event_name(regarding_name: str, nanos: int) -> str:
    """client-go's Event name ``<regarding.name>.<hex unixNano>``, or a UUID when that is not
    a valid DNS subdomain (a long or unusual object name): the API server would refuse it.

    The UUID is derived from the name it replaces (version 5, :data:`EVENT_NAME_NAMESPACE`)
    where client-go draws a random one, so a replay names the Event the same way.

    Args:
        regarding_name: the regarding object's name.
        nanos: the number the name ends in (the clock's, or :func:`id_suffix` of a transition).

    Returns:
        The Event's name.
    """
    name = f"{regarding_name}.{nanos:x}"
    if is_dns_subdomain(name):
        return name
    return str(uuid.uuid5(EVENT_NAME_NAMESPACE, name))


def unix_nanos(at: datetime) -> int:
    """Nanoseconds since the epoch, exactly (``datetime`` carries microseconds)."""
    return (_utc(at) - _EPOCH) // timedelta(microseconds=1) * 1000


def _utc(at: datetime) -> datetime:
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)


def truncate_note(note: str | bytes, limit: int = NOTE_LIMIT) -> str:
    """Make ``note`` valid UTF-8 of at most ``limit`` bytes, with any secret in it redacted
    (before the cut, so a secret cut in half is still found).

    Invalid UTF-8 (undecodable bytes; lone surrogates in a ``str``) becomes U+FFFD. A note
    over the limit is cut on a character boundary and ends in :data:`TRUNCATED_SUFFIX`, the
    whole staying within ``limit`` bytes.

    Args:
        note: the message.
        limit: the most bytes (the API server's limit by default).

    Returns:
        The note as it can be sent.
    """
    text = redact(
        note.decode("utf-8", "replace")
        if isinstance(note, bytes)
        else _SURROGATES.sub("\ufffd", note)
    )
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    suffix = TRUNCATED_SUFFIX.encode("utf-8")
    room = max(limit - len(suffix), 0)
    # a cut inside a multi-byte character leaves an incomplete tail, which "ignore" drops
    head = data[:room].decode("utf-8", "ignore")
    return head + TRUNCATED_SUFFIX


def build_event(
    regarding: ObjectReference,
    *,
    type: str,
    reason: str,
    note: str | bytes,
    reporting_controller: str,
    reporting_instance: str,
    now: datetime,
    name_nanos: int | None = None,
    action: str | None = None,
    related: ObjectReference | None = None,
) -> Event:
    """What client-go's ``Eventf`` builds: name ``<regarding.name>.<hex unixNano>`` (a UUID
    when that is not a valid name: :func:`event_name`), the regarding namespace (or
    ``default``), ``eventTime=now``, no series, ``action`` = ``reason`` unless given. Raises
    ``ValueError`` for a type other than Normal or Warning (client-go drops those).

    Args:
        regarding: the object the Event is about.
        type: ``"Normal"`` or ``"Warning"``.
        reason: the Event's reason.
        note: its message (truncated and redacted by :func:`truncate_note`).
        reporting_controller: who reports it.
        reporting_instance: which replica.
        now: the event time.
        name_nanos: the number the name ends in; ``None``: ``now`` in nanoseconds.
        action: what the controller did; ``None``: ``reason``.
        related: a second object it names.

    Returns:
        The Event.

    Raises:
        ValueError: ``type`` is neither Normal nor Warning.
    """
    if type not in EVENT_TYPES:
        raise ValueError(f"unsupported event type {type!r}: only Normal and Warning")
    nanos = unix_nanos(now) if name_nanos is None else name_nanos
    return Event(
        name=event_name(regarding.name, nanos),
        namespace=regarding.namespace or "default",
        event_time=now,
        type=type,
        reason=reason,
        action=reason if action is None else action,
        note=truncate_note(note),
        reporting_controller=reporting_controller,
        reporting_instance=reporting_instance,
        regarding=regarding,
        related=related,
    )


def id_suffix(transition_id: str) -> int:
    """The number an Event's name ends in (in hex) when it records the committed transition
    ``transition_id``: 63 bits of its SHA-256, where client-go puts the clock's nanoseconds.
    The same transition always gets the same name, so a redelivery after a restart is an
    ``AlreadyExists`` rather than a second Event (ADR 0121).

    Args:
        transition_id: the transition's id.

    Returns:
        A non-negative 63-bit number.
    """
    digest = hashlib.sha256(transition_id.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") >> 1


#: How many names an Event is tried under when the ones before it hold other content (ADR
#: 0141): its id's name, then names derived from its content, each from the one before.
MAX_NAMES = 4


def same_content(stored: Event, sent: Event) -> bool:
    """Whether the Event ``stored`` under a name records what ``sent`` records: the same type,
    reason, action and note about the same object (kind, namespace, name, and uid when both
    carry one). Times, series, reporter and resourceVersion are not content: a redelivery
    after a restart differs in them and is still the same Event (ADR 0141)."""
    a, b = stored.regarding, sent.regarding
    return (
        stored.type == sent.type
        and stored.reason == sent.reason
        and stored.action == sent.action
        and stored.note == sent.note
        and (a.kind, a.namespace, a.name) == (b.kind, b.namespace, b.name)
        and (not a.uid or not b.uid or a.uid == b.uid)
    )


def content_name(event: Event) -> str:
    """The name ``event`` takes when its own is held by other content (a transition id
    handed out again): derived from that name and what ``event`` records, so the same
    content under the same id always gets the same one (a redelivery finds it) and other
    content gets another (ADR 0141)."""
    r = event.regarding
    parts = (event.name, event.type, event.reason, event.action, event.note, r.kind, r.namespace)
    digest = hashlib.sha256("\0".join(parts).encode("utf-8", "surrogatepass")).digest()
    return event_name(r.name, int.from_bytes(digest[:8], "big") >> 1)
