"""The status-subresource store without its I/O (ADR 0133): every step of
:class:`~lifecycle.stores.kubernetes.KubernetesStore` and its asyncio twin, written once.

Each operation is a generator that yields what it needs done -- a :class:`Call` to the API
server, or a :class:`Pause` before a retry -- and is sent the :class:`Reply`; the synchronous
store drives it with a blocking transport, the asyncio store awaits each step. So the
compare-and-set, the merge of the status body, the outbox and the error mapping exist once.

The object's status holds the machine's status as Kubernetes writes it
(:func:`~lifecycle.kubernetes_status`: the resource's own field names) and one condition of
the library's, :data:`RECORD_CONDITION`, whose message is the record as JSON: the machine,
the version, the schema the status was written under, the status itself and the outbox of
undelivered events. One ``PUT`` of the status subresource with the ``resourceVersion`` read
writes all of it, so the events a commit causes are in the same atomic write as the status.
"""

from __future__ import annotations

import copy
import math
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Generator, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import attrs

from .._core.errors import CommitUnknown, Conflict, IdentityMismatch, StoreError, brief, preview
from .._core.machine import Machine
from .._core.observation import Observation
from .._core.printable import escape
from .._core.refs import EventType, ObjectRef
from .._core.schema import load_status
from .._core.serde import parse_time
from .._core.transition import EMPTY, Transition
from .._k8s_api.uids import DERIVED_KINDS, is_derived_uid
from .._k8s_status import NoStatusBody, kubernetes_status, kubernetes_time
from .._log import get_logger
from . import _k8s_encoding as encoding
from ._k8s_rewinds import RewindWatch
from .base import (
    Found,
    OutboxSummary,
    Query,
    Record,
    StateCount,
    epoch_time,
    transition_from_row,
    transition_to_row,
)

#: The condition type of the library's record in ``status.conditions`` (a qualified name, as
#: the API requires of a condition type that is not a well-known one).
RECORD_CONDITION = "lifecycle-machines.io/Record"
#: The format of the record's JSON (its ``format`` field; a record that does not fit as it is
#: is written deflated, format 2 around it: :mod:`lifecycle.stores._k8s_encoding`).
RECORD_FORMAT = 1
#: The reason of the one Warning that stands for the events given up while the Events API
#: was unavailable (ADR 0145); its id is the first given-up event's with ``@undelivered``.
UNDELIVERED_REASON = "EventsNotDelivered"
#: The epoch that marks that Warning's id apart from every committed event's.
UNDELIVERED_EPOCH = "undelivered"
#: The default bound on the record's JSON: ``metav1.Condition`` caps a message at 32768.
MAX_RECORD_BYTES = 32768
#: A write token as long as any (what :meth:`StatusCore.record_size` measures with).
_A_TOKEN = "5f0c8a3e9b7d41c2a6e8f0b4d3c1a97e"
#: The bound on a record kept in a status field of its own (``CustomResource.record_field``):
#: 1 MiB, within the 1.5 MiB the API server's etcd takes for the whole object.
FIELD_RECORD_BYTES = 1024 * 1024
#: Objects a list asks for at a time (its ``limit``; the ``continue`` token pages on).
LIST_PAGE = 500

_log = get_logger("lifecycle.stores")

#: Writes of one commit or mark that lose the compare-and-set to writers of other fields (a
#: kubelet, kopf) before it gives up: each loss re-reads the object.
MAX_RACES = 8


class ObjectGone(StoreError):
    """The object is not there (404), or its name now belongs to another object (a uid that
    is not the ref's): the status of a deleted object cannot be written."""


class StatusRefused(StoreError):
    """The API server refused the status (400 or 422: the resource's schema or validation),
    or kept the write without the library's record (a schema that prunes it)."""


class RecordTooLarge(StoreError):
    """The record is over the store's bound even deflated, its long text cut and its
    undelivered events given up (link intents are kept; ADR 0144, 0145), or the object over
    the API server's: the write is refused before it is sent, nothing written. Raise
    ``max_record_bytes``, or name a ``record_field`` where the schema allows it."""


@attrs.frozen(slots=True)
class CustomResource:
    """Where objects of one kind live: ``group``/``version``/``plural`` (``group`` empty for
    the core API: :data:`PODS`). The resource must have a status subresource.

    Attributes:
        group: the API group; ``""`` for the core API.
        version: the API version.
        plural: the resource's plural name, as in its path.
        namespaced: ``False`` for a cluster-scoped resource (a Karpenter NodeClaim).
        record_field: a string status field of the resource's own schema to hold the record,
            which may then take more than a condition message's 32 KiB (ADR 0144); ``""``:
            the record is the condition's message.

    Raises:
        ValueError: a field that is no path segment, or a ``record_field`` that is no field
            name.
    """

    group: str
    version: str
    plural: str
    #: ``False`` for a cluster-scoped resource (a Karpenter NodeClaim): its refs have no
    #: namespace.
    namespaced: bool = True
    #: A status field of the resource's own schema (a string) to hold the record, where the
    #: CRD declares one (``lifecycleRecord``): the record condition then only points at it,
    #: and the record may take :data:`FIELD_RECORD_BYTES` instead of a condition message's
    #: 32 KiB (ADR 0144). ``""``: the record is the condition's message.
    record_field: str = ""

    def __attrs_post_init__(self) -> None:
        field = self.record_field
        if field and (not field.isascii() or not field.isidentifier() or field == "conditions"):
            raise ValueError(
                f"CustomResource.record_field must be a status field name, got {field!r}"
            )
        for name in ("version", "plural"):
            value = getattr(self, name)
            if not value or "/" in value or not value.isascii():
                raise ValueError(f"CustomResource.{name} must be a path segment, got {value!r}")
        if "/" in self.group:
            raise ValueError(f"CustomResource.group must not contain '/', got {self.group!r}")

    def base(self) -> str:
        """The API path of the resource's group and version.

        Returns:
            ``/api/VERSION`` for the core API, else ``/apis/GROUP/VERSION``.
        """
        return f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"

    def path(self, namespace: str, name: str) -> str:
        """One object's path.

        Args:
            namespace: the object's namespace (ignored for a cluster-scoped resource).
            name: the object's name.

        Returns:
            The path below the API server's root.

        Raises:
            StoreError: a namespaced resource and no namespace.
        """
        if not self.namespaced:
            return f"{self.base()}/{self.plural}/{name}"
        if not namespace:
            raise StoreError(f"{self.plural} are namespaced: {name!r} needs a namespace")
        return f"{self.base()}/namespaces/{namespace}/{self.plural}/{name}"

    def collection(self, namespace: str | None) -> str:
        """The path that lists the resource's objects.

        Args:
            namespace: list in this namespace; ``None`` (or a cluster-scoped resource): all.

        Returns:
            The path below the API server's root.
        """
        if namespace is None or not self.namespaced:
            return f"{self.base()}/{self.plural}"
        return f"{self.base()}/namespaces/{namespace}/{self.plural}"


#: Built-in Pods: their status is written as a virtual node writes it (``pods/status``).
PODS = CustomResource("", "v1", "pods")


@attrs.frozen(slots=True)
class Call:
    """One request to the API server (a path below its root).

    Attributes:
        method: the HTTP method.
        path: the path below the API server's root.
        body: the JSON body, or ``None``.
        content_type: the body's content type (a merge patch names its own).
        query: query parameters, as pairs.
        target: the object a read is of (resource, namespace, name), so a host's informer
            may answer it in place of a ``GET``; ``None`` for any other call.
    """

    method: str
    path: str
    body: Any = None
    content_type: str = "application/json"
    #: Query parameters.
    query: tuple[tuple[str, str], ...] = ()
    #: The object a read is of (resource, namespace, name): a host's informer may answer it.
    target: tuple[CustomResource, str, str] | None = None


@attrs.frozen(slots=True)
class Reply:
    """Its answer: ``code`` 0 when none came (``error`` says why).

    Attributes:
        code: the HTTP status, or 0 when no answer came.
        body: the decoded JSON body, or ``None``.
        headers: the reply's headers (``Retry-After`` is read).
        error: why no answer came; ``""`` when one did.
    """

    code: int
    body: Any = None
    headers: Mapping[str, str] = attrs.field(factory=dict)
    error: str = ""


@attrs.frozen(slots=True)
class Pause:
    """Wait ``seconds`` before the next call (a retry)."""

    seconds: float


Step = Call | Pause
Steps = Generator[Step, Reply | None, Any]


@attrs.frozen(slots=True)
class _Stored:
    """The record read from an object's status."""

    machine: str
    version: int
    schema: tuple[int, str]
    status: Any
    outbox: tuple[dict[str, Any], ...]
    fields: tuple[str, ...]
    conditions: tuple[str, ...]
    token: str
    since: str
    #: The clock (epoch seconds) at the write that put the object in its present state (ADR
    #: 0159); a record written before says none: then since its first write (``since``).
    entered: float | None = None

    def entered_at(self) -> float:
        return _entered_of(self.entered, self.since)


def _reason(reply: Reply) -> str:
    body = reply.body if isinstance(reply.body, dict) else {}
    return str(body.get("reason") or "")


def _message(reply: Reply) -> str:
    body = reply.body if isinstance(reply.body, dict) else {}
    text = str(body.get("message") or reply.error or "")
    return escape(brief(text, 300))  # the text itself, on one line: quoted once, where shown


def _too_large(reply: Reply) -> bool:
    return reply.code == 413 or (reply.code == 500 and "too large" in _message(reply))


def _transient(reply: Reply) -> bool:
    return reply.code == 429 or (reply.code >= 500 and not _too_large(reply))


def _ambiguous(reply: Reply) -> bool:
    """Whether a write so answered may have landed: no answer, or a 5xx (a 429 never is)."""
    return reply.code == 0 or (reply.code >= 500 and not _too_large(reply))


class StatusCore:
    """The steps, and what they remember between calls: the objects last read or written
    (each commit's compare-and-set uses the ``resourceVersion`` it has: one round trip when no
    one else wrote), where each uid lives (the identity rule), and the delivered ids not yet
    removed from an outbox (they ride the object's next write). Thread-safe."""

    def __init__(
        self,
        resources: Mapping[str, CustomResource],
        *,
        namespace: str | None = None,
        max_record_bytes: int = MAX_RECORD_BYTES,
        max_tries: int = 4,
        max_retry_after: float = 10.0,
        cache_size: int = 4096,
        pending_marks: int = 256,
    ) -> None:
        for kind, resource in resources.items():
            if not isinstance(resource, CustomResource):
                raise TypeError(f"resources[{kind!r}] must be a CustomResource, got {resource!r}")
        for name, value in (
            ("max_record_bytes", max_record_bytes),
            ("max_tries", max_tries),
            ("cache_size", cache_size),
            ("pending_marks", pending_marks),
        ):
            if type(value) is not int or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.resources = dict(resources)
        self.namespace = namespace
        self.max_record_bytes = max_record_bytes
        self.max_tries = max_tries
        self.max_retry_after = max_retry_after
        self.cache_size = cache_size
        self.pending_marks = pending_marks
        self._lock = threading.Lock()
        self._objects: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._where: OrderedDict[str, tuple[str, str, str]] = OrderedDict()
        self._delivered: dict[str, set[str]] = {}
        #: Undelivered events given up so that the status could be written (ADR 0145).
        self.events_given_up = 0
        self._giving_up = False  # logged once per outage: until a summary is delivered
        #: this handle's epoch and the rewinds it found (ADR 0146)
        self.watch = RewindWatch()

    # -- what is remembered -------------------------------------------------------------------
    def _resource(self, kind: str) -> CustomResource:
        resource = self.resources.get(kind)
        if resource is None:
            known = ", ".join(sorted(self.resources))
            raise StoreError(f"no resource is configured for kind {kind!r} (known: {known})")
        return resource

    def bound(self, kind: str) -> int:
        """The most bytes one record of ``kind`` takes (ADR 0144)."""
        field = self._resource(kind).record_field
        return FIELD_RECORD_BYTES if field else self.max_record_bytes

    def _remember(self, ref: ObjectRef, obj: dict[str, Any]) -> None:
        with self._lock:
            self._where[ref.uid] = (ref.kind, ref.namespace, ref.name)
            self._where.move_to_end(ref.uid)
            self._objects[ref.uid] = obj
            self._objects.move_to_end(ref.uid)
            while len(self._objects) > self.cache_size:
                self._objects.popitem(last=False)
            while len(self._where) > 16 * self.cache_size:
                self._where.popitem(last=False)

    def _forget(self, uid: str) -> None:
        with self._lock:
            self._objects.pop(uid, None)

    def _cached(self, uid: str) -> dict[str, Any] | None:
        with self._lock:
            return self._objects.get(uid)

    def check_where(self, machine: Machine[Any], ref: ObjectRef) -> None:
        """The identity rule for what this store has seen: a uid it knows under another kind,
        namespace or name is refused before any request."""
        if not ref.uid:
            raise StoreError(f"{ref.kind} {ref.namespace}/{ref.name}: a ref needs the object's uid")
        if machine.kind not in self.resources:
            self.learn(machine)
        with self._lock:
            known = self._where.get(ref.uid)
        if known is not None and known != (ref.kind, ref.namespace, ref.name):
            raise IdentityMismatch(ref.uid, known, (ref.kind, ref.namespace, ref.name))

    def learn(self, machine: Machine[Any]) -> None:
        """Map ``machine``'s kind to the resource the machine declares (its
        :attr:`~lifecycle.Machine.api_version`, ``plural`` and ``namespaced``; ADR 0147),
        unless the host mapped the kind itself or the machine declares no apiVersion."""
        if machine.kind in self.resources or not machine.api_version:
            return
        group, _, version = machine.api_version.rpartition("/")
        plural = machine.plural or f"{machine.kind.lower()}s"
        resource = CustomResource(group, version, plural, namespaced=machine.namespaced)
        with self._lock:
            self.resources.setdefault(machine.kind, resource)

    def delivered(self, uid: str) -> set[str]:
        with self._lock:
            return set(self._delivered.get(uid, ()))

    # -- requests -----------------------------------------------------------------------------
    def request(self, call: Call, *, retry: bool = True) -> Steps:
        """``call``, retried (up to ``max_tries``) on 429, a 5xx and, for a read, no answer;
        ``Retry-After`` is honoured up to ``max_retry_after`` seconds."""
        reply: Reply | None = None
        for attempt in range(self.max_tries):
            reply = yield call
            assert reply is not None
            again = _transient(reply) or (reply.code == 0 and call.method == "GET")
            if not (retry and again) or attempt + 1 == self.max_tries:
                return reply
            yield Pause(self._delay(reply, attempt))
        return reply

    def _delay(self, reply: Reply, attempt: int) -> float:
        after = {k.lower(): v for k, v in reply.headers.items()}.get("retry-after", "")
        try:
            seconds = float(after)
        except ValueError:
            seconds = math.nan
        if not math.isfinite(seconds):
            seconds = 0.05 * 2**attempt
        return min(max(seconds, 0.0), self.max_retry_after)

    def error(self, reply: Reply, ref: ObjectRef, what: str) -> StoreError:
        where = f"{ref.kind} {ref.namespace}/{ref.name}"
        text = f"{what} {where}: {reply.code or 'no answer'} {_reason(reply)} {_message(reply)}"
        text = " ".join(text.split())
        if reply.code == 404:
            return ObjectGone(text)
        if _too_large(reply):
            return RecordTooLarge(text)
        if reply.code in (400, 422):
            return StatusRefused(text)
        return StoreError(text)

    # -- reading a record ---------------------------------------------------------------------
    def stored(self, machine: Machine[Any], ref: ObjectRef, obj: Any) -> _Stored | None:
        """The record in ``obj``'s status (``None``: none yet), after the identity rule."""
        if not isinstance(obj, dict):
            raise StoreError(f"{ref.uid}: the API server answered {preview(obj)}, not an object")
        meta = obj.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        if uid != ref.uid and not _found_by_name(ref, obj):
            raise ObjectGone(
                f"{ref.kind} {ref.namespace}/{ref.name} is now uid {uid!r}, not {ref.uid!r}: "
                "the object was deleted (and maybe created again)"
            )
        found = _record_condition(obj)
        if found is None:
            return None
        try:
            data = encoding.unpack(str(found.get("message") or ""))
            if data.get("format") != RECORD_FORMAT:
                raise ValueError(f"record format {data.get('format')!r}, this store reads 1")
            schema = data["schema"]
            stored = _Stored(
                str(data["machine"]),
                int(data["version"]),
                (int(schema[0]), str(schema[1])),
                data["status"],
                tuple(data.get("outbox") or ()),
                tuple(data.get("fields") or ()),
                tuple(data.get("conditions") or ()),
                str(data.get("token") or ""),
                str(found.get("lastTransitionTime") or ""),
                _entered(data.get("entered")),
            )
        except (ValueError, KeyError, TypeError, IndexError, AttributeError) as e:
            raise StoreError(
                f"{ref.uid}: the {RECORD_CONDITION} condition is not a record: {e}"
            ) from e
        if stored.machine != machine.name:
            where = (ref.kind, ref.namespace, ref.name)
            raise IdentityMismatch(ref.uid, where, where, machines=(stored.machine, machine.name))
        return stored

    def record(self, machine: Machine[Any], ref: ObjectRef, stored: _Stored) -> Record:
        data = stored.status
        if stored.schema != (machine.schema.version, machine.schema.fingerprint):
            data = copy.deepcopy(data)  # a host's upcaster may change it; what is read is shared
        try:
            status = load_status(machine, data, *stored.schema)
        except Exception as e:
            raise StoreError(f"{ref.uid}: its stored status does not load: {e}") from e
        return Record(ref, machine.name, status, stored.version)

    def read(self, ref: ObjectRef, *, fresh: bool = True) -> Steps:
        """GET the object: its body, or ``None`` when it is not there. ``fresh=False`` lets a
        host's reader (an informer, which may lag) answer; a re-read never does."""
        resource = self._resource(ref.kind)
        path = resource.path(ref.namespace, ref.name)
        target = None if fresh else (resource, ref.namespace, ref.name)
        reply = yield from self.request(Call("GET", path, target=target))
        if reply.code == 404:
            return None
        if reply.code != 200:
            raise self.error(reply, ref, "read")
        return reply.body

    # -- the operations -----------------------------------------------------------------------
    def load(self, machine: Machine[Any], ref: ObjectRef) -> Steps:
        self.check_where(machine, ref)
        obj = yield from self.read(ref, fresh=False)
        if obj is not None and (
            not _newer_or_same(obj, self._cached(ref.uid))
            or self.watch.behind(ref.uid, _version_in(obj))
        ):
            obj = yield from self.read(ref)  # the reader lags behind what this store wrote
        if obj is None:
            return None
        stored = self.stored(machine, ref, obj)
        self.watch.seen(ref, None if stored is None else stored.version)
        self._remember(ref, obj)
        return None if stored is None else self.record(machine, ref, stored)

    def commit(
        self,
        machine: Machine[Any],
        ref: ObjectRef,
        expected: int,
        status: Any,
        observation: Observation,
        transitions: Sequence[Transition],
    ) -> Steps:
        self.check_where(machine, ref)
        if self.watch.stale(transitions):  # stamped before this handle found a rewind
            raise Conflict(ref.uid, expected, expected)
        resource = self._resource(ref.kind)
        rows = [transition_to_row(t) for t in transitions]
        body = _rendered(machine, ref, status)
        dumped = machine.dump_status(status)
        token = uuid.uuid4().hex
        obj = self._cached(ref.uid)
        cached = obj is not None  # a copy of this store's: a conflict on it is read again
        lost = False  # a write whose answer never came (or a 5xx): it may have landed
        for attempt in range(MAX_RACES + 1):
            if obj is None or not _has_version(obj):
                cached = False
                try:
                    obj = yield from self.read(ref)
                except StoreError as e:
                    if lost:
                        raise CommitUnknown((ref.uid,), f"{ref.uid}: {e}") from e
                    raise
                if obj is None:
                    if lost:
                        raise CommitUnknown((ref.uid,), f"{ref.uid}: gone after a lost write")
                    raise ObjectGone(f"{ref.kind} {ref.namespace}/{ref.name}: not found")
            stored = self.stored(machine, ref, obj)
            actual = 0 if stored is None else stored.version
            if stored is not None and stored.token == token:
                self._remember(ref, obj)
                self.watch.acknowledged(ref.uid, expected + 1)
                return expected + 1  # the write whose answer was lost landed
            if not cached:  # read from the API server: behind what this handle wrote?
                self.watch.seen(ref, None if stored is None else actual)
            if self.watch.stale(transitions):  # a rewind found: stamp the new epoch's ids
                self._remember(ref, obj)
                if lost:
                    raise CommitUnknown(
                        (ref.uid,),
                        f"{ref.uid}: a write's answer was lost "
                        "and the record has gone back since (a rewind)",
                    )
                raise Conflict(ref.uid, expected, actual)
            if actual != expected and cached:
                obj = None  # the copy may be older than the object: confirm with a read
                continue
            if actual != expected:
                self._remember(ref, obj)
                if lost:  # ours may have landed and been written over since
                    raise CommitUnknown(
                        (ref.uid,),
                        f"{ref.uid}: a write's answer was lost and the object is now at "
                        f"version {actual}; whether it landed is unknown",
                    )
                raise Conflict(ref.uid, expected, actual)
            if attempt == MAX_RACES:
                break  # the last round only read: how the lost write ended
            new, given_up = self._written(
                machine, ref, obj, stored, body, dumped, rows, expected + 1, token, observation.at
            )
            call = Call("PUT", resource.path(ref.namespace, ref.name) + "/status", new)
            reply = yield from self.request(call, retry=False)
            if reply.code in (200, 201):
                self._accepted(ref, reply, token)
                if given_up:
                    self._gave_up(ref, given_up)
                self.watch.acknowledged(ref.uid, expected + 1)
                return expected + 1
            if reply.code == 409:
                obj = None  # another writer's: re-read
                continue
            if reply.code == 429 or _ambiguous(reply):
                lost = lost or _ambiguous(reply)
                yield Pause(self._delay(reply, attempt))
                obj = None
                continue
            self._forget(ref.uid)
            raise self.error(reply, ref, "status write of")
        if lost:
            raise CommitUnknown((ref.uid,), f"{ref.uid}: the outcome of its write is unknown")
        raise StoreError(f"{ref.uid}: the status write lost {MAX_RACES} races to other writers")

    def _accepted(self, ref: ObjectRef, reply: Reply, token: str) -> None:
        """Keep the object the server stored; refuse a write that came back without the
        record (the resource's schema pruned or rewrote it)."""
        found = _record_condition(reply.body) if isinstance(reply.body, dict) else None
        kept = found is not None and _data_in(found).get("token") == token
        if found is None or not kept:
            self._forget(ref.uid)
            raise StatusRefused(
                f"{ref.kind} {ref.namespace}/{ref.name}: the API server kept the status "
                f"without the {RECORD_CONDITION} condition: the resource's schema must keep "
                "status.conditions (metav1.Condition items), and the record_field a "
                "CustomResource names (a string)"
            )
        self._remember(ref, reply.body)
        with self._lock:
            done = self._delivered.get(ref.uid)
            if done is not None:
                left = done & _ids_in(found)  # the rest were removed by this write
                if left:
                    self._delivered[ref.uid] = left
                else:
                    del self._delivered[ref.uid]

    def _written(
        self,
        machine: Machine[Any],
        ref: ObjectRef,
        obj: dict[str, Any],
        stored: _Stored | None,
        body: dict[str, Any],
        dumped: dict[str, Any],
        rows: list[dict[str, Any]],
        version: int,
        token: str,
        at: datetime,
    ) -> tuple[dict[str, Any], int]:
        """``obj`` with the new status: the rendered body over what was there (fields this
        store wrote before and no longer renders are removed; others' conditions kept), and
        the record with the outbox (delivered ids dropped, ``rows`` appended)."""
        status = dict(obj.get("status") or {})
        for name in stored.fields if stored is not None else ():
            status.pop(name, None)
        rendered = dict(body)
        ours = [_cut_message(c) for c in rendered.pop("conditions", [])]
        status.update(rendered)
        done = self.delivered(ref.uid)
        kept = stored.outbox if stored is not None else ()
        outbox = [encoding.cut_row(r) for r in (*kept, *rows) if not done or _row_id(r) not in done]
        record = {
            "format": RECORD_FORMAT,
            "machine": machine.name,
            "version": version,
            "schema": [machine.schema.version, machine.schema.fingerprint],
            "status": dumped,
            "outbox": outbox,
            "fields": sorted(rendered),
            "conditions": [c["type"] for c in ours],
            "token": token,
            "entered": _entered_now(stored, dumped),
        }
        if is_derived_uid(ref):  # found by name: the library's key, the object's uid (0162)
            record["key"] = ref.uid
            record["object"] = str((obj.get("metadata") or {}).get("uid") or "")
        since = stored.since if stored is not None and stored.since else kubernetes_time(at)
        message, given_up = self._pack(ref, record)
        field = self._resource(ref.kind).record_field
        if field:  # the record in its own field; the condition points at it
            status[field] = message
            message = encoding.pointer(field)
        condition = {
            "type": RECORD_CONDITION,
            "status": "True",
            "reason": "Committed",
            "message": message,
            "lastTransitionTime": since,
        }
        owned = {*(c["type"] for c in ours), RECORD_CONDITION}
        owned.update(stored.conditions if stored is not None else ())
        others = [c for c in status.get("conditions") or () if c.get("type") not in owned]
        status["conditions"] = [*others, *ours, condition]
        new = {
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "metadata": obj.get("metadata") or {},
            "spec": obj.get("spec"),
            "status": status,
        }
        return new, given_up

    def _pack(self, ref: ObjectRef, record: dict[str, Any]) -> tuple[str, int]:
        """The record's message within ``max_record_bytes``, and how many undelivered events
        were given up for it (ADR 0144, 0145): as it is; else deflated; else with the
        status's long strings cut (to 4 096 characters, then shorter); else without the
        oldest undelivered events, one Warning standing for them (:func:`_giving_up`). Link
        intents are never given up: a record they alone overflow is :class:`RecordTooLarge`,
        nothing written."""
        bound = self.bound(ref.kind)
        message = encoding.pack(record, bound)
        if message is not None:
            return message, 0
        for limit in encoding.TEXT_CUTS:
            record = {**record, "status": encoding.cut_strings(record["status"], limit)}
            message = encoding.pack(record, bound)
            if message is not None:
                return message, 0
        outbox: list[dict[str, Any]] = record["outbox"]
        events = [
            i
            for i, r in enumerate(outbox)
            if "intent" not in r and r.get("epoch") != UNDELIVERED_EPOCH
        ]
        found: tuple[str, int] | None = None
        low, high = 1, len(events)
        while low <= high:  # the fewest oldest events whose giving up makes it fit
            k = (low + high) // 2
            message = encoding.pack(_giving_up(record, events[:k]), bound)
            if message is not None:
                found, high = (message, k), k - 1
            else:
                low = k + 1
        if found is not None:
            return found
        least = encoding.deflate(encoding.dumps(_giving_up(record, events)))
        raise RecordTooLarge(
            f"{ref.kind} {ref.namespace}/{ref.name}: its record would be "
            f"{encoding.size(least)} bytes deflated, with its long text cut and all "
            f"{len(events)} undelivered events given up ({len(outbox) - len(events)} rows "
            f"kept: link intents and the undelivered-events Warning), over its bound of "
            f"{bound} bytes (max_record_bytes={self.max_record_bytes}): nothing written"
        )

    def record_size(self, machine: Machine[Any], status: Any) -> int:
        """The bytes the record of ``status`` takes in this store with nothing undelivered
        (deflated when that is smaller; no text cut): what the start-up check of a machine's
        declared limits measures (ADR 0144)."""
        try:
            body = dict(kubernetes_status(machine, status))
        except NoStatusBody:
            body = {}
        record = {
            "format": RECORD_FORMAT,
            "machine": machine.name,
            "version": 2**31,
            "schema": [machine.schema.version, machine.schema.fingerprint],
            "status": machine.dump_status(status),
            "outbox": [],
            "fields": sorted(k for k in body if k != "conditions"),
            "conditions": [c["type"] for c in body.get("conditions", ())],
            "token": _A_TOKEN,  # the same each time: one status, one size
        }
        plain = encoding.dumps(record)
        return min(encoding.size(plain), encoding.size(encoding.deflate(plain)))

    # -- the outbox ---------------------------------------------------------------------------
    def _gave_up(self, ref: ObjectRef, n: int) -> None:
        with self._lock:
            self.events_given_up += n
            first, self._giving_up = not self._giving_up, True
        if first:  # once per outage; each object's record holds its own count
            _log.warning(
                "undelivered events given up so that statuses can be written: the Events "
                "are not being delivered (one Warning per object will count them once "
                "delivery is back)",
                uid=ref.uid,
                given_up=n,
                max_record_bytes=self.max_record_bytes,
            )

    def mark(self, ids: Iterable[str]) -> Steps:
        """Note ``ids`` delivered: they ride each object's next write, or are written now once
        ``pending_marks`` objects wait (a delivered id's Event already exists: a crash before
        the write only redelivers it, and the API answers AlreadyExists)."""
        with self._lock:
            for tid in ids:
                if tid.endswith("@" + UNDELIVERED_EPOCH):
                    self._giving_up = False  # a summary is delivered: the outage is over
                uid = tid.rsplit(":", 2)[0] if tid.count(":") >= 2 else ""
                if uid and uid in self._where:
                    self._delivered.setdefault(uid, set()).add(tid)
            waiting = len(self._delivered)
        if waiting >= self.pending_marks:
            yield from self.flush_marks()

    def flush_marks(self) -> Steps:
        """Write every object's delivered ids out of its outbox now."""
        with self._lock:
            uids = list(self._delivered)
        for uid in uids:
            try:
                yield from self._flush_one(uid)
            except StoreError as e:  # kept for a later write; the others go on
                _log.warning("delivered ids not written out yet", uid=uid, error=str(e))

    def _flush_one(self, uid: str) -> Steps:
        with self._lock:
            where = self._where.get(uid)
        if where is None:
            with self._lock:
                self._delivered.pop(uid, None)
            return
        ref = ObjectRef(*where, uid)
        resource = self._resource(ref.kind)
        obj = self._cached(uid)
        for _ in range(MAX_RACES):
            if obj is None:
                obj = yield from self.read(ref)
                if obj is None or not _same_object(ref, obj):
                    with self._lock:  # gone: nothing to remove
                        self._delivered.pop(uid, None)
                    self._forget(uid)
                    return
            found = _record_condition(obj)
            done = self.delivered(uid)
            if found is None or not (_ids_in(found) & done):
                with self._lock:
                    left = self._delivered.get(uid, set()) - done
                    if left:
                        self._delivered[uid] = left
                    else:
                        self._delivered.pop(uid, None)
                return
            new = _without(obj, found, done, self.bound(ref.kind))
            call = Call("PUT", resource.path(ref.namespace, ref.name) + "/status", new)
            reply = yield from self.request(call)
            if reply.code in (200, 201) and isinstance(reply.body, dict):
                self._remember(ref, reply.body)
                obj = reply.body
                continue  # loops once more to clear what it removed
            if reply.code == 404:
                obj = None
                continue
            if reply.code in (400, 403, 413, 422):  # would fail again: redelivered instead
                with self._lock:
                    self._delivered.pop(uid, None)
                _log.warning(
                    "delivered ids left in the outbox (redelivered: AlreadyExists)",
                    uid=uid,
                    error=_message(reply),
                )
                return
            if reply.code == 429 or reply.code >= 500:
                yield Pause(self._delay(reply, 0))
            obj = None  # 409, no answer: re-read and try again
        # left for a later write; claiming skips them meanwhile

    def listed(self, machines: Mapping[str, Machine[Any]] | None = None) -> Steps:
        """Every object of the configured resources with a record: ``(ref, object, data)``,
        page by page (``LIST_PAGE``); the ref's kind is the one ``resources`` maps to the
        resource. Where this store holds a copy at least as new, that copy stands (a list
        answered before a write of this store's must not bring back what it removed).
        ``machines`` (by name): only their records. A record that cannot be read is logged
        and skipped."""
        for machine in (machines or {}).values():
            self.learn(machine)
        seen: set[CustomResource] = set()
        out: list[tuple[ObjectRef, dict[str, Any], dict[str, Any]]] = []
        for kind, resource in list(self.resources.items()):
            if resource in seen:
                continue
            seen.add(resource)
            token = ""
            while True:
                query = (("limit", str(LIST_PAGE)),) + ((("continue", token),) if token else ())
                path = resource.collection(self.namespace)
                reply = yield from self.request(Call("GET", path, query=query))
                if reply.code != 200 or not isinstance(reply.body, dict):
                    raise StoreError(
                        f"list {resource.plural}: {reply.code or 'no answer'} {_message(reply)}"
                    )
                for obj in reply.body.get("items") or ():
                    item = self._item(kind, obj, machines)
                    if item is not None:
                        out.append(item)
                token = str((reply.body.get("metadata") or {}).get("continue") or "")
                if not token:
                    break
        return out

    def _item(
        self, kind: str, obj: Any, machines: Mapping[str, Machine[Any]] | None
    ) -> tuple[ObjectRef, dict[str, Any], dict[str, Any]] | None:
        try:
            meta = obj.get("metadata") or {}
            uid = str(meta["uid"])
            if kind in DERIVED_KINDS:  # written under the library's key? (ADR 0162)
                uid = str(_record_of(obj).get("key") or uid)
            ref = ObjectRef(kind, str(meta.get("namespace") or ""), str(meta["name"]), uid)
            mine = self._cached(uid)
            if mine is not None and _newer_or_same(mine, obj):
                obj = mine
            found = _record_condition(obj)
            if found is None:
                return None
            data = encoding.unpack(str(found.get("message") or ""))
            if machines is not None and data.get("machine") not in machines:
                return None
            return ref, obj, data
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            _log.warning("an object's record cannot be read; skipped", error=repr(e))
            return None

    def claim(self, limit: int) -> Steps:
        yield from self.flush_marks()
        listed = yield from self.listed()
        rows: list[Transition] = []
        for ref, obj, data in listed:
            self._remember(ref, obj)
            done = self.delivered(ref.uid)
            for row in data.get("outbox") or ():
                try:
                    t = transition_from_row(row)
                except (KeyError, TypeError, ValueError) as e:
                    _log.warning(
                        "an outbox row cannot be read; skipped uid=%s error=%r", ref.uid, e
                    )
                    continue
                if t.id not in done:
                    rows.append(t)
        rows.sort(key=lambda t: (t.ref.uid, t.version, t.n))
        return rows[:limit]

    def records(self, machine: Machine[Any]) -> Steps:
        listed = yield from self.listed({machine.name: machine})
        out = []
        for ref, obj, _ in listed:
            stored = self.stored(machine, ref, obj)
            if stored is not None:
                out.append(self.record(machine, ref, stored))
        return out

    def find(self, machine: Machine[Any], query: Query) -> Steps:
        """The answer to ``query``: every listed object of the machine, filtered here (a status
        write cannot set a label to select by; ADR 0159)."""
        listed = yield from self.listed({machine.name: machine})
        hits = []
        for ref, obj, _ in listed:
            stored = self.stored(machine, ref, obj)
            if stored is None:
                continue
            entered = stored.entered_at()
            state = stored.status.get("state") if isinstance(stored.status, dict) else None
            if state is not None and query.matches(stored.machine, state, entered):
                hits.append((entered, ref.uid, ref, stored))
        hits.sort(key=lambda hit: hit[:2])
        return [
            Found(self.record(machine, ref, stored), epoch_time(entered))
            for entered, _, ref, stored in hits[: query.limit]
        ]

    def counts(self) -> Steps:
        """Per machine and state (as stored): how many objects, and since when the oldest."""
        listed = yield from self.listed()
        counts: dict[tuple[str, str], list[Any]] = {}
        for _, obj, data in listed:
            status = data.get("status")
            state = status.get("state") if isinstance(status, dict) else None
            if not isinstance(state, str):
                continue
            since = str((_record_condition(obj) or {}).get("lastTransitionTime") or "")
            entered = _entered_of(_entered(data.get("entered")), since)
            seen = counts.setdefault((str(data.get("machine")), state), [0, entered])
            seen[0] += 1
            seen[1] = min(seen[1], entered)
        return [
            StateCount(machine, state, n, epoch_time(at))
            for (machine, state), (n, at) in sorted(counts.items())
        ]

    def summary(self) -> Steps:
        listed = yield from self.listed()
        count = 0
        oldest: datetime | None = None
        for ref, _, data in listed:
            done = self.delivered(ref.uid)
            for row in data.get("outbox") or ():
                try:
                    if _row_id(row) in done:
                        continue
                    at = parse_time(row["at"])
                except (KeyError, TypeError, ValueError):
                    continue  # claiming logs it
                count += 1
                oldest = at if oldest is None or at < oldest else oldest
        return OutboxSummary(count, oldest)


def _entered(value: Any) -> float | None:
    """A record's ``entered`` as read (``None``: not a time this store wrote)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _entered_of(entered: float | None, since: str) -> float:
    """Since when a record's object is in its state: its ``entered``, or for a record written
    before there was one, its first write (the record condition's ``lastTransitionTime``)."""
    if entered is not None:
        return entered
    try:
        return parse_time(since).timestamp() if since else 0.0
    except ValueError:
        return 0.0


def _entered_now(stored: _Stored | None, dumped: Any) -> float:
    """The ``entered`` a write records: kept while the state stays, the clock when the write
    changes it (or is the object's first)."""
    same = (
        stored is not None
        and isinstance(stored.status, dict)
        and isinstance(dumped, dict)
        and stored.status.get("state") == dumped.get("state")
    )
    return stored.entered_at() if same and stored is not None else round(time.time(), 6)


def _cut_message(condition: dict[str, Any]) -> dict[str, Any]:
    """A rendered condition whose message fits ``metav1.Condition`` (32768 bytes)."""
    message = condition.get("message")
    if isinstance(message, str) and len(message) > 8192:
        return {**condition, "message": encoding.cut(message, 8192)}
    return condition


def _brief(row: Mapping[str, Any]) -> dict[str, Any]:
    """What the undelivered-events Warning says of one event given up."""
    keys = ("version", "n", "reason", "from", "to", "condition", "at")
    return {k: row.get(k, "") for k in keys}


def _flip(brief: Mapping[str, Any]) -> str:
    text = f"{brief.get('from') or EMPTY} → {brief.get('to') or EMPTY}"
    return f"{brief['condition']}: {text}" if brief.get("condition") else text


def _giving_up(record: dict[str, Any], indices: Sequence[int]) -> dict[str, Any]:
    """``record`` without the outbox rows at ``indices`` (the oldest undelivered events),
    one Warning standing for them and for those given up before (its id: the first one's
    with ``@undelivered``, so it is delivered once however often it is rewritten)."""
    outbox: list[dict[str, Any]] = record["outbox"]
    if not indices:
        return record
    gone = [outbox[i] for i in indices]
    skip = set(indices)
    old = next((r for r in outbox if r.get("epoch") == UNDELIVERED_EPOCH), None)
    rest = [r for i, r in enumerate(outbox) if i not in skip and r is not old]
    lost = (old or {}).get("lost") or {}
    first = lost.get("first") or _brief(gone[0])
    last = _brief(gone[-1])
    count = int(lost.get("count") or 0) + len(gone)
    head = old or gone[0]
    summary = {
        "ref": head["ref"],
        "machine": head["machine"],
        "from": first["from"],
        "to": last["to"],
        "reason": UNDELIVERED_REASON,
        "type": EventType.WARNING.value,
        "message": (
            f"{count} transitions were not delivered while the Events API was unavailable: "
            f"first {_flip(first)} ({first['reason']}, version {first['version']}) at "
            f"{first['at']}, last {_flip(last)} ({last['reason']}, version "
            f"{last['version']}) at {last['at']}"
        ),
        "version": first["version"],
        "at": last["at"],
        "n": first["n"],
        "condition": "",
        "controller": "",
        "epoch": UNDELIVERED_EPOCH,
        "lost": {"count": count, "first": first, "last": last},
    }
    return {**record, "outbox": [summary, *rest]}


def _record_of(obj: Any) -> dict[str, Any]:
    """The record in ``obj``'s status, unpacked; ``{}`` when there is none or it does not
    read (the caller's own reading reports that)."""
    found = _record_condition(obj)
    if found is None:
        return {}
    try:
        data = encoding.unpack(str(found.get("message") or ""))
    except (ValueError, TypeError, KeyError, AttributeError):
        return {}
    return data if isinstance(data, dict) else {}


def _found_by_name(ref: ObjectRef, obj: Any) -> bool:
    """Whether ``obj``, read by ``ref``'s name, is the object a ref with a derived uid (a
    linked NodeClaim's ``<pod uid>-claim``) names although its uid differs (ADR 0162): one
    without a record yet, or the one its record was first written to. Another one (no
    recorded uid, or another) was deleted and made again under the name."""
    if not is_derived_uid(ref):
        return False
    if _record_condition(obj) is None:
        return True
    uid = str((obj.get("metadata") or {}).get("uid") or "")
    return _record_of(obj).get("object") == uid


def _same_object(ref: ObjectRef, obj: dict[str, Any]) -> bool:
    """Whether ``obj`` is still the object ``ref`` names (the identity rule of :meth:`stored`)."""
    return (obj.get("metadata") or {}).get("uid") == ref.uid or _found_by_name(ref, obj)


def _record_condition(obj: Any) -> dict[str, Any] | None:
    """The library's condition in ``obj``'s status; when it points at a status field of its
    own (``CustomResource.record_field``), a copy whose message is that field's."""
    status = obj.get("status") if isinstance(obj, dict) else None
    for c in (status or {}).get("conditions") or ():
        if isinstance(c, dict) and c.get("type") == RECORD_CONDITION:
            field = encoding.pointed(str(c.get("message") or ""))
            if field is None:
                return c
            return {**c, "message": str((status or {}).get(field) or "")}
    return None


def _row_id(row: Mapping[str, Any]) -> str:
    """The id of the event an outbox row holds (:attr:`Transition.id`, without building
    one: an outbox is never a fallback or an action)."""
    epoch = row.get("epoch")
    tid = f"{row['ref'][3]}:{int(row['version'])}:{int(row['n'])}"
    return f"{tid}@{epoch}" if epoch else tid


def _data_in(condition: Mapping[str, Any]) -> dict[str, Any]:
    """The record a condition holds (``{}`` when it holds none that can be read)."""
    try:
        data = encoding.unpack(str(condition.get("message") or ""))
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _ids_in(condition: Mapping[str, Any]) -> set[str]:
    return {_row_id(r) for r in _data_in(condition).get("outbox") or ()}


def _without(
    obj: dict[str, Any], found: dict[str, Any], done: set[str], bound: int
) -> dict[str, Any]:
    """``obj`` with the ids in ``done`` removed from its record's outbox (nothing else
    changes: a mark keeps the version)."""
    data = dict(_data_in(found))  # a copy: what is read is shared
    data["outbox"] = [r for r in data.get("outbox") or () if _row_id(r) not in done]
    plain = encoding.dumps(data)
    message = encoding.pack(data, bound) or encoding.deflate(plain)  # smaller than before
    new = copy.deepcopy(obj)
    for c in new["status"]["conditions"]:
        if c.get("type") == RECORD_CONDITION:
            field = encoding.pointed(str(c.get("message") or ""))
            if field is None:
                c["message"] = message
            else:
                new["status"][field] = message
    return new


def _rendered(machine: Machine[Any], ref: ObjectRef, status: Any) -> dict[str, Any]:
    """The status body Kubernetes keeps for ``status`` (nothing for a status that has none,
    such as a deleted NodeClaim's: only the record is written); a status the machine cannot
    render is refused before any request."""
    try:
        return kubernetes_status(machine, status)
    except NoStatusBody:
        return {}
    except Exception as e:
        raise StatusRefused(
            f"{ref.kind} {ref.namespace}/{ref.name}: machine {machine.name} gives no status "
            f"body for it: {e}"
        ) from e


def _has_version(obj: Mapping[str, Any]) -> bool:
    """Whether ``obj`` carries the ``resourceVersion`` a compare-and-set needs (an object
    from a reader may not: it is read again)."""
    return bool((obj.get("metadata") or {}).get("resourceVersion"))


def _version_in(obj: Mapping[str, Any] | None) -> int:
    found = _record_condition(obj) if obj is not None else None
    if found is None:
        return 0
    try:
        return int(_data_in(found).get("version") or 0)
    except (ValueError, TypeError):
        return 0


def _newer_or_same(obj: Mapping[str, Any], cached: Mapping[str, Any] | None) -> bool:
    """Whether ``obj`` holds a record at least as new as ``cached``'s (what this store last
    read or wrote)."""
    return cached is None or _version_in(obj) >= _version_in(cached)
