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
import json
import math
import threading
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
from .._core.refs import ObjectRef
from .._core.schema import load_status
from .._core.serde import parse_time
from .._core.transition import Transition
from .._k8s_status import NoStatusBody, kubernetes_status, kubernetes_time
from .._log import get_logger
from .base import OutboxSummary, Record, transition_from_row, transition_to_row

#: The condition type of the library's record in ``status.conditions`` (a qualified name, as
#: the API requires of a condition type that is not a well-known one).
RECORD_CONDITION = "lifecycle-machines.io/Record"
#: The format of the record's JSON (its ``format`` field).
RECORD_FORMAT = 1
#: The default bound on the record's JSON: ``metav1.Condition`` caps a message at 32768.
MAX_RECORD_BYTES = 32768
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
    """The record (status and undelivered events) is over the store's bound, or the object
    over the API server's: the write is refused before it is sent, nothing written. Deliver
    the outbox (the emitter is failing?) or raise ``max_record_bytes`` where the schema
    allows it."""


@attrs.frozen(slots=True)
class CustomResource:
    """Where objects of one kind live: ``group``/``version``/``plural`` (``group`` empty for
    the core API: :data:`PODS`). The resource must have a status subresource."""

    group: str
    version: str
    plural: str
    #: ``False`` for a cluster-scoped resource (a Karpenter NodeClaim): its refs have no
    #: namespace.
    namespaced: bool = True

    def __attrs_post_init__(self) -> None:
        for name in ("version", "plural"):
            value = getattr(self, name)
            if not value or "/" in value or not value.isascii():
                raise ValueError(f"CustomResource.{name} must be a path segment, got {value!r}")
        if "/" in self.group:
            raise ValueError(f"CustomResource.group must not contain '/', got {self.group!r}")

    def base(self) -> str:
        return f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"

    def path(self, namespace: str, name: str) -> str:
        if not self.namespaced:
            return f"{self.base()}/{self.plural}/{name}"
        if not namespace:
            raise StoreError(f"{self.plural} are namespaced: {name!r} needs a namespace")
        return f"{self.base()}/namespaces/{namespace}/{self.plural}/{name}"

    def collection(self, namespace: str | None) -> str:
        if namespace is None or not self.namespaced:
            return f"{self.base()}/{self.plural}"
        return f"{self.base()}/namespaces/{namespace}/{self.plural}"


#: Built-in Pods: their status is written as a virtual node writes it (``pods/status``).
PODS = CustomResource("", "v1", "pods")


@attrs.frozen(slots=True)
class Call:
    """One request to the API server (a path below its root)."""

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
    """Its answer: ``code`` 0 when none came (``error`` says why)."""

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

    # -- what is remembered -------------------------------------------------------------------
    def _resource(self, kind: str) -> CustomResource:
        resource = self.resources.get(kind)
        if resource is None:
            known = ", ".join(sorted(self.resources))
            raise StoreError(f"no resource is configured for kind {kind!r} (known: {known})")
        return resource

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
        if uid != ref.uid:
            raise ObjectGone(
                f"{ref.kind} {ref.namespace}/{ref.name} is now uid {uid!r}, not {ref.uid!r}: "
                "the object was deleted (and maybe created again)"
            )
        found = _record_condition(obj)
        if found is None:
            return None
        try:
            data = json.loads(str(found.get("message") or ""))
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
            )
        except (ValueError, KeyError, TypeError, IndexError) as e:
            raise StoreError(
                f"{ref.uid}: the {RECORD_CONDITION} condition is not a record: {e}"
            ) from e
        if stored.machine != machine.name:
            where = (ref.kind, ref.namespace, ref.name)
            raise IdentityMismatch(ref.uid, where, where, machines=(stored.machine, machine.name))
        return stored

    def record(self, machine: Machine[Any], ref: ObjectRef, stored: _Stored) -> Record:
        try:
            status = load_status(machine, stored.status, *stored.schema)
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
        if obj is not None and not _newer_or_same(obj, self._cached(ref.uid)):
            obj = yield from self.read(ref)  # the reader lags behind what this store wrote
        if obj is None:
            return None
        stored = self.stored(machine, ref, obj)
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
                return expected + 1  # the write whose answer was lost landed
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
            new = self._written(
                machine, ref, obj, stored, body, dumped, rows, expected + 1, token, observation.at
            )
            call = Call("PUT", resource.path(ref.namespace, ref.name) + "/status", new)
            reply = yield from self.request(call, retry=False)
            if reply.code in (200, 201):
                self._accepted(ref, reply, token)
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
        kept = found is not None and f'"token":"{token}"' in str(found.get("message") or "")
        if found is None or not kept:
            self._forget(ref.uid)
            raise StatusRefused(
                f"{ref.kind} {ref.namespace}/{ref.name}: the API server kept the status "
                f"without the {RECORD_CONDITION} condition: the resource's schema must keep "
                "status.conditions (metav1.Condition items)"
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
    ) -> dict[str, Any]:
        """``obj`` with the new status: the rendered body over what was there (fields this
        store wrote before and no longer renders are removed; others' conditions kept), and
        the record with the outbox (delivered ids dropped, ``rows`` appended)."""
        status = dict(obj.get("status") or {})
        for name in stored.fields if stored is not None else ():
            status.pop(name, None)
        rendered = dict(body)
        ours = list(rendered.pop("conditions", []))
        status.update(rendered)
        done = self.delivered(ref.uid)
        kept = stored.outbox if stored is not None else ()
        outbox = [r for r in kept if _row_id(r) not in done]
        record = {
            "format": RECORD_FORMAT,
            "machine": machine.name,
            "version": version,
            "schema": [machine.schema.version, machine.schema.fingerprint],
            "status": dumped,
            "outbox": [*outbox, *rows],
            "fields": sorted(rendered),
            "conditions": [c["type"] for c in ours],
            "token": token,
        }
        since = stored.since if stored is not None and stored.since else kubernetes_time(at)
        condition = self._condition(ref, record, since)
        owned = {*(c["type"] for c in ours), RECORD_CONDITION}
        owned.update(stored.conditions if stored is not None else ())
        others = [c for c in status.get("conditions") or () if c.get("type") not in owned]
        status["conditions"] = [*others, *ours, condition]
        return {
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "metadata": obj.get("metadata") or {},
            "spec": obj.get("spec"),
            "status": status,
        }

    def _condition(self, ref: ObjectRef, record: dict[str, Any], since: str) -> dict[str, Any]:
        message = json.dumps(record, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
        size = len(message.encode("utf-8"))
        if size > self.max_record_bytes:
            raise RecordTooLarge(
                f"{ref.kind} {ref.namespace}/{ref.name}: its record would be {size} bytes "
                f"({len(record['outbox'])} undelivered events), over max_record_bytes="
                f"{self.max_record_bytes}: nothing written"
            )
        return {
            "type": RECORD_CONDITION,
            "status": "True",
            "reason": "Committed",
            "message": message,
            "lastTransitionTime": since,
        }

    # -- the outbox ---------------------------------------------------------------------------
    def mark(self, ids: Iterable[str]) -> Steps:
        """Note ``ids`` delivered: they ride each object's next write, or are written now once
        ``pending_marks`` objects wait (a delivered id's Event already exists: a crash before
        the write only redelivers it, and the API answers AlreadyExists)."""
        with self._lock:
            for tid in ids:
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
                if obj is None or (obj.get("metadata") or {}).get("uid") != uid:
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
            new = _without(obj, found, done)
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
            ref = ObjectRef(kind, str(meta.get("namespace") or ""), str(meta["name"]), uid)
            mine = self._cached(uid)
            if mine is not None and _newer_or_same(mine, obj):
                obj = mine
            found = _record_condition(obj)
            if found is None:
                return None
            data = json.loads(str(found.get("message") or ""))
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


def _record_condition(obj: Any) -> dict[str, Any] | None:
    status = obj.get("status") if isinstance(obj, dict) else None
    for c in (status or {}).get("conditions") or ():
        if isinstance(c, dict) and c.get("type") == RECORD_CONDITION:
            return c
    return None


def _row_id(row: Mapping[str, Any]) -> str:
    return transition_from_row(dict(row)).id


def _ids_in(condition: Mapping[str, Any]) -> set[str]:
    try:
        data = json.loads(str(condition.get("message") or ""))
    except ValueError:
        return set()
    return {_row_id(r) for r in data.get("outbox") or ()}


def _without(obj: dict[str, Any], found: dict[str, Any], done: set[str]) -> dict[str, Any]:
    """``obj`` with the ids in ``done`` removed from its record's outbox (nothing else
    changes: a mark keeps the version)."""
    data = json.loads(str(found.get("message") or ""))
    data["outbox"] = [r for r in data.get("outbox") or () if _row_id(r) not in done]
    message = json.dumps(data, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    new = copy.deepcopy(obj)
    for c in new["status"]["conditions"]:
        if c.get("type") == RECORD_CONDITION:
            c["message"] = message
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
        return int(json.loads(str(found.get("message") or "")).get("version") or 0)
    except (ValueError, TypeError, AttributeError):
        return 0


def _newer_or_same(obj: Mapping[str, Any], cached: Mapping[str, Any] | None) -> bool:
    """Whether ``obj`` holds a record at least as new as ``cached``'s (what this store last
    read or wrote)."""
    return cached is None or _version_in(obj) >= _version_in(cached)
