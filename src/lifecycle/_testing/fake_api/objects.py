"""Objects and their status subresource in the fake API server (:mod:`.server`): Pods
(core/v1) and custom resources of registered CRDs, answered as the Kubernetes API
conventions say.

- ``resourceVersion`` is opaque (one large revision counter over every object, as a
  string) and changes on every write; a no-op update is no write (same version, as etcd's
  store skips it). A body's ``metadata.resourceVersion`` that is not the current one is 409
  Conflict; none is an unconditional update of a Pod, and 422 for a custom resource (its
  strategy allows no unconditional update). A body's ``metadata.uid`` that is not the
  object's is 409 (the UID precondition).
- The status subresource takes only ``status`` (a body without one clears it); the main
  resource keeps the stored ``status``. ``metadata.generation`` grows only when the spec
  (for a custom resource: anything but metadata and status) changes.
- A custom resource is pruned and defaulted by its structural schema, then validated (422
  Invalid with ``details.causes``); a Pod is decoded against the ``kubernetes`` client's
  models (a JSON type its Go field refuses is 400) and its conditions validated (422).
  Unknown fields follow ``fieldValidation``: ``Strict`` 400, ``Warn`` (default) dropped
  with a ``Warning: 299`` header each, ``Ignore`` dropped.
- Objects are created through the API (POST to a collection: 201 with a server-assigned
  ``uid``, ``resourceVersion``, ``creationTimestamp`` and ``generation: 1``; a name or a
  ``generateName``; 409 AlreadyExists for a taken name; a given ``status`` is ignored, as
  for every kind with a status subresource) and deleted (DELETE: gone at once, 404 when
  missing, 409 when ``preconditions`` name another uid or resourceVersion); a watch sees
  ``ADDED`` and ``DELETED`` (the last state). :meth:`ObjectStore.add` and
  :meth:`ObjectStore.remove` (out of band) share that code. Leases are checked as
  :mod:`.leases` says; a Lease has no status and no ``generation``.
- Size: a body over 3 MiB is 413; an object whose JSON would exceed 1.5 MiB is 500
  ``etcdserver: request is too large`` and is not stored.
"""

from __future__ import annotations

import copy
import json
import re
import uuid
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, urlsplit

import attrs

from .leases import check_micro_times, lease_causes, name_causes
from .schema import (
    Cause,
    DecodeError,
    PatchError,
    decode_custom,
    decode_model,
    json_patch,
    merge_patch,
    validate_custom,
)

#: the API server's limit on a request body (``MaxRequestBodyBytes``)
BODY_LIMIT = 3 * 1024 * 1024
#: etcd's default request size limit (``--max-request-bytes``)
ETCD_LIMIT = 1572864

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
OPTIMISTIC_LOCK = (
    "the object has been modified; please apply your changes to the latest version and try again"
)
#: Pod condition types the API server takes without the qualified-name check
POD_CONDITIONS = frozenset(
    {
        "PodScheduled",
        "Ready",
        "Initialized",
        "ContainersReady",
        "PodReadyToStartContainers",
        "DisruptionTarget",
        "PodResizePending",
        "PodResizeInProgress",
    }
)
_QUALIFIED = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
#: what a Pod update may change in its spec (``ValidatePodUpdate``)
_POD_MUTABLE = ("activeDeadlineSeconds", "terminationGracePeriodSeconds", "tolerations")

Headers = list[tuple[str, str]]
Reply = tuple[int, Any, Headers]


@attrs.define
class Resource:
    """A resource the fake serves: its group (``""`` for core), version, plural, kind, and
    either a CRD's ``openAPIV3Schema`` or the client model its objects decode as."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    schema: dict[str, Any] | None = None
    model: str | None = None

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def group_kind(self) -> str:
        return f"{self.kind}.{self.group}" if self.group else self.kind

    def details(self, name: str) -> dict[str, str]:
        out = {"name": name, "kind": self.plural}
        if self.group:
            out["group"] = self.group
        return out


POD = Resource("", "v1", "pods", "Pod", model="V1Pod")
LEASE = Resource("coordination.k8s.io", "v1", "leases", "Lease", model="V1Lease")
DEFAULT_POD_SPEC: dict[str, Any] = {"containers": [{"name": "main", "image": "busybox"}]}


class ApiError(Exception):  # internal: never reaches a caller (tests/test_exception_tree.py)
    def __init__(
        self, code: int, reason: str, message: str, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details


def status_body(code: int, reason: str, message: str, details: dict[str, Any] | None) -> Any:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "code": code,
    }
    if reason:
        body["reason"] = reason
    if details is not None:
        body["details"] = details
    return body


def _invalid(resource: Resource, name: str, causes: list[Cause]) -> ApiError:
    texts = [c.text() for c in causes]
    shown = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    details: dict[str, Any] = {**resource.details(name), "kind": resource.kind}
    details["causes"] = [c.as_json() for c in causes]
    message = f'{resource.group_kind} "{name}" is invalid: {shown}'
    return ApiError(422, "Invalid", message, details)


def _conflict(resource: Resource, name: str, why: str) -> ApiError:
    message = f'Operation cannot be fulfilled on {resource.qualified} "{name}": {why}'
    return ApiError(409, "Conflict", message, resource.details(name))


def _uid_conflict(resource: Resource, name: str, given: str, stored: str) -> ApiError:
    why = f"Precondition failed: UID in precondition: {given}, UID in object meta: {stored}"
    return _conflict(resource, name, why)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ObjectStore:
    """The objects of the fake API server, keyed by (plural, namespace, name); every method
    runs under the server's lock."""

    def __init__(self) -> None:
        self.resources: dict[tuple[str, str, str], Resource] = {
            ("", "v1", "pods"): POD,
            ("coordination.k8s.io", "v1", "leases"): LEASE,
        }
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        #: successful object writes (a no-op update is none)
        self.writes = 0
        #: every change, in order, for watches: (revision, type, plural, namespace, object)
        self.changes: list[tuple[int, str, str, str, dict[str, Any]]] = []
        # an opaque revision: large, shared by every object, never a per-object count
        self._revision = 7_340_000_000 + uuid.uuid4().int % 1_000_000

    @property
    def revision(self) -> int:
        """The latest revision (a list's ``resourceVersion``)."""
        return self._revision

    def _next_version(self) -> str:
        self._revision += 1 + self._revision % 7
        return str(self._revision)

    def by_plural(self, plural: str) -> Resource:
        for resource in self.resources.values():
            if resource.plural == plural:
                return resource
        raise KeyError(f"no resource {plural!r} (register its CRD first)")

    def register(self, resource: Resource) -> None:
        self.resources[(resource.group, resource.version, resource.plural)] = resource

    # -- out of band ------------------------------------------------------------------------
    def add(
        self,
        plural: str,
        namespace: str,
        name: str,
        *,
        uid: str | None,
        spec: dict[str, Any] | None,
        status: dict[str, Any] | None,
        labels: dict[str, str] | None,
    ) -> dict[str, Any]:
        resource = self.by_plural(plural)
        namespace = namespace if resource.namespaced else ""
        metadata: dict[str, Any] = {"name": name}
        if namespace:
            metadata["namespace"] = namespace
        if labels:
            metadata["labels"] = dict(labels)
        body: dict[str, Any] = {
            "apiVersion": resource.api_version,
            "kind": resource.kind,
            "metadata": metadata,
        }
        if spec is not None or resource is POD:
            body["spec"] = copy.deepcopy(spec if spec is not None else DEFAULT_POD_SPEC)
        if status is not None:
            body["status"] = copy.deepcopy(status)
        try:
            body, _ = self._decode(resource, body, "Strict")
        except ApiError as e:
            raise ValueError(e.message) from e
        causes = self._causes(resource, body, None, "")
        if causes:
            raise ValueError(_invalid(resource, name, causes).message)
        return self._insert(resource, namespace, body, uid=uid)

    def remove(self, plural: str, namespace: str, name: str) -> None:
        """Delete an object out of band; a watch sees it ``DELETED`` at a new revision."""
        resource = self.by_plural(plural)
        namespace = namespace if resource.namespaced else ""
        if (plural, namespace, name) in self.objects:
            self._drop_object(resource, namespace, name)

    # -- the two paths share these: out of band and through the API --------------------------
    def _insert(
        self, resource: Resource, namespace: str, body: dict[str, Any], *, uid: str | None
    ) -> dict[str, Any]:
        """Store a new, checked object with the metadata the system owns; a watch sees it
        ``ADDED``. A Lease has no ``generation``."""
        system: dict[str, Any] = {
            "uid": uid or str(uuid.uuid4()),
            "resourceVersion": self._next_version(),
            "creationTimestamp": _now(),
        }
        if resource is not LEASE:
            system["generation"] = 1
        body["metadata"].update(system)
        key = (resource.plural, namespace, body["metadata"]["name"])
        self.objects[key] = body
        self._changed("ADDED", resource.plural, namespace, body)
        return copy.deepcopy(body)

    def _drop_object(self, resource: Resource, namespace: str, name: str) -> dict[str, Any]:
        """Remove a stored object; a watch sees it ``DELETED`` with its last state at a new
        revision. The removed object, as the watch sees it."""
        gone = copy.deepcopy(self.objects.pop((resource.plural, namespace, name)))
        gone["metadata"]["resourceVersion"] = self._next_version()
        self._changed("DELETED", resource.plural, namespace, gone)
        return gone

    def _changed(self, kind: str, plural: str, namespace: str, obj: dict[str, Any]) -> None:
        revision = int(obj["metadata"]["resourceVersion"])
        self.changes.append((revision, kind, plural, namespace, copy.deepcopy(obj)))

    # -- serving ----------------------------------------------------------------------------
    def serve(self, method: str, target: str, content_type: str, raw: bytes) -> Reply:
        try:
            return self._serve(method, target, content_type, raw)
        except ApiError as e:
            return e.code, status_body(e.code, e.reason, e.message, e.details), []

    def _serve(self, method: str, target: str, content_type: str, raw: bytes) -> Reply:
        split = urlsplit(target)
        query = {k: v[-1] for k, v in parse_qs(split.query).items()}
        route = self._match(split.path)
        if route is None:
            message = "the server could not find the requested resource"
            raise ApiError(404, "NotFound", message, {})
        resource, namespace, name, sub = route
        if name is None:
            if method == "POST":
                return self._create(resource, namespace, raw, query)
            if method != "GET":
                raise _not_allowed()
            return 200, self._list(resource, namespace, query), []
        if method == "GET":
            return 200, self._get(resource, namespace, name), []
        if method == "DELETE" and sub is None:
            return self._delete(resource, namespace, name, raw)
        if method not in ("PUT", "PATCH"):
            raise _not_allowed()
        if len(raw) > BODY_LIMIT:
            message = f"Request entity too large: limit is {BODY_LIMIT}"
            raise ApiError(413, "RequestEntityTooLarge", message)
        try:
            body = json.loads(raw) if raw else None
        except ValueError as e:
            raise ApiError(400, "BadRequest", f"invalid JSON in the body: {e}") from e
        validation = query.get("fieldValidation", "Warn")
        if validation not in ("Strict", "Warn", "Ignore"):
            message = (
                f'fieldValidation must be one of "Ignore", "Warn", "Strict", not "{validation}"'
            )
            raise ApiError(400, "BadRequest", message)
        stored = self._get(resource, namespace, name)
        if method == "PATCH":
            body = self._patch(stored, content_type, body)
        elif not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the body is not a JSON object")
        return self._update(resource, namespace, name, sub, stored, body, validation, method)

    def watched(self, target: str) -> tuple[Resource, str, Any] | None:
        """The collection a watch request (``?watch=true``) names: its resource, namespace
        (``""``: all) and label selector; ``None`` when ``target`` is no watch of one."""
        split = urlsplit(target)
        query = {k: v[-1] for k, v in parse_qs(split.query).items()}
        if query.get("watch", "").lower() not in ("true", "1"):
            return None
        route = self._match(split.path)
        if route is None or route[2] is not None:
            return None
        return route[0], route[1], _selector(query.get("labelSelector", ""))

    def _match(self, path: str) -> tuple[Resource, str, str | None, str | None] | None:
        parts = path.strip("/").split("/")
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif parts[0] == "apis" and len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return None
        namespace = ""
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3 or (len(rest) == 3 and rest[2] != "status"):
            return None
        resource = self.resources.get((group, version, rest[0]))
        if resource is None or (namespace and not resource.namespaced):
            return None
        name = rest[1] if len(rest) > 1 else None
        if name is not None and resource.namespaced != bool(namespace):
            return None
        return resource, namespace, name, rest[2] if len(rest) == 3 else None

    def _get(self, resource: Resource, namespace: str, name: str) -> dict[str, Any]:
        found = self.objects.get((resource.plural, namespace, name))
        if found is None:
            message = f'{resource.qualified} "{name}" not found'
            raise ApiError(404, "NotFound", message, resource.details(name))
        return copy.deepcopy(found)

    def _list(self, resource: Resource, namespace: str, query: dict[str, str]) -> Any:
        wanted = _selector(query.get("labelSelector", ""))
        items = []
        for (plural, ns, _), obj in sorted(self.objects.items()):
            if plural != resource.plural or (namespace and ns != namespace):
                continue
            if not wanted(obj["metadata"].get("labels") or {}):
                continue
            item = copy.deepcopy(obj)
            if resource.model is not None:  # a typed list's items carry no kind of their own
                item.pop("apiVersion", None)
                item.pop("kind", None)
            items.append(item)
        return {
            "kind": f"{resource.kind}List",
            "apiVersion": resource.api_version,
            "metadata": {"resourceVersion": str(self._revision)},
            "items": items,
        }

    @staticmethod
    def _patch(stored: dict[str, Any], content_type: str, patch: Any) -> Any:
        kind = content_type.split(";")[0].strip()
        if kind == MERGE_PATCH:
            if not isinstance(patch, dict):
                raise ApiError(400, "BadRequest", "a merge patch must be a JSON object")
            return merge_patch(stored, patch)
        if kind == JSON_PATCH:
            if not isinstance(patch, list):
                message = "json: cannot unmarshal object into Go value of type jsonpatch.Patch"
                raise ApiError(400, "BadRequest", message)
            try:
                return json_patch(stored, patch)
            except PatchError as e:
                raise ApiError(422, "Invalid", str(e)) from e
        message = (
            "the body of the request was in an unknown format - accepted media "
            f"types include: {JSON_PATCH}, {MERGE_PATCH}"
        )
        raise ApiError(415, "UnsupportedMediaType", message)

    def _decode(
        self, resource: Resource, body: dict[str, Any], validation: str
    ) -> tuple[dict[str, Any], Headers]:
        unknown: list[str] = []
        metadata = body.get("metadata")
        if isinstance(metadata, dict):
            try:
                decode_model(metadata, "V1ObjectMeta", "metadata", unknown)
            except DecodeError as e:
                raise ApiError(400, "BadRequest", self._undecodable(resource, e)) from e
            body = _drop(body, unknown)
        if resource.schema is not None:
            decoded = decode_custom(body, resource.schema)
            unknown += decoded.unknown
            body = decoded.value
        else:
            assert resource.model is not None
            rest = {k: v for k, v in body.items() if k != "metadata"}
            try:
                decode_model(rest, resource.model, "", unknown)
                if resource is LEASE:
                    check_micro_times(rest)
            except DecodeError as e:
                raise ApiError(400, "BadRequest", self._undecodable(resource, e)) from e
            body = _drop(body, [u for u in unknown if not u.startswith("metadata.")])
        if unknown and validation == "Strict":
            fields = ", ".join(f'unknown field "{u}"' for u in unknown)
            raise ApiError(400, "BadRequest", f"strict decoding error: {fields}")
        if validation == "Warn":
            return body, [("Warning", f'299 - "unknown field \\"{u}\\""') for u in unknown]
        return body, []

    @staticmethod
    def _undecodable(resource: Resource, e: DecodeError) -> str:
        kind = resource.kind
        return f'{kind} in version "{resource.version}" cannot be handled as a {kind}: {e}'

    def _update(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        sub: str | None,
        stored: dict[str, Any],
        body: dict[str, Any],
        validation: str,
        method: str,
    ) -> Reply:
        metadata = body.get("metadata")
        if not isinstance(metadata, dict):
            metadata = {}
        _check_identity(resource, namespace, name, metadata, body)
        body, warnings = self._decode(resource, body, validation)
        _check_precondition(resource, name, stored["metadata"], metadata, method)
        result = self._strategy(resource, stored, body, sub)
        causes = self._causes(resource, result, stored, sub)
        if causes:
            raise _invalid(resource, name, causes)
        if result == stored:  # no change: no write, the version stays
            return 200, result, warnings
        if _spec(result) != _spec(stored) and resource is not LEASE:
            generation = stored["metadata"].get("generation")
            result["metadata"]["generation"] = int(generation or 0) + 1
        result["metadata"]["resourceVersion"] = self._next_version()
        if len(json.dumps(result).encode()) > ETCD_LIMIT:
            raise ApiError(500, "", "etcdserver: request is too large")
        self.objects[(resource.plural, namespace, name)] = result
        self.writes += 1
        self._changed("MODIFIED", resource.plural, namespace, result)
        return 200, copy.deepcopy(result), warnings

    def _create(
        self, resource: Resource, namespace: str, raw: bytes, query: dict[str, str]
    ) -> Reply:
        """POST to a collection: the object as given (its system metadata set here, a name
        made from ``generateName`` when none is given), 201; 409 AlreadyExists for a taken
        name. A create ignores ``status`` (every kind served here but the Lease has a status
        subresource, and a Lease has no status), as the API server's create strategies do."""
        if len(raw) > BODY_LIMIT:
            message = f"Request entity too large: limit is {BODY_LIMIT}"
            raise ApiError(413, "RequestEntityTooLarge", message)
        try:
            body = json.loads(raw) if raw else None
        except ValueError as e:
            raise ApiError(400, "BadRequest", f"invalid JSON in the body: {e}") from e
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the body is not a JSON object")
        metadata = body.get("metadata")
        if not isinstance(metadata, dict):
            metadata = {}
        given_ns = metadata.get("namespace") or ""
        if given_ns and given_ns != namespace:
            message = (
                "the namespace of the provided object does not match the namespace sent "
                "on the request"
            )
            raise ApiError(400, "BadRequest", message)
        _check_kind(resource, body)
        name = str(metadata.get("name") or "")
        prefix = str(metadata.get("generateName") or "")
        if not name and prefix:
            name = prefix + uuid.uuid4().hex[:5]
        if not name:
            cause = Cause(
                "metadata.name",
                "FieldValueRequired",
                "Required value: name or generateName is required",
            )
            raise _invalid(resource, name, [cause])
        validation = query.get("fieldValidation", "Warn")
        body, warnings = self._decode(resource, body, validation)
        body["apiVersion"], body["kind"] = resource.api_version, resource.kind
        body.pop("status", None)
        causes = name_causes(name) + self._causes(resource, body, None, None)
        if resource is POD and not (body.get("spec") or {}).get("containers"):
            causes.append(Cause("spec.containers", "FieldValueRequired", "Required value"))
        if causes:
            raise _invalid(resource, name, causes)
        if (resource.plural, namespace, name) in self.objects:
            message = f'{resource.qualified} "{name}" already exists'
            raise ApiError(409, "AlreadyExists", message, resource.details(name))
        kept = {k: v for k, v in body["metadata"].items() if k in _CREATE_METADATA}
        body["metadata"] = kept | {"name": name}
        if namespace:
            body["metadata"]["namespace"] = namespace
        if len(json.dumps(body).encode()) > ETCD_LIMIT:
            raise ApiError(500, "", "etcdserver: request is too large")
        created = self._insert(resource, namespace, body, uid=None)
        self.writes += 1
        return 201, created, warnings

    def _delete(self, resource: Resource, namespace: str, name: str, raw: bytes) -> Reply:
        """DELETE an object: gone at once (no finalizers, no grace period are served), 200
        with the object as it was (a Pod) or a ``Success`` Status (a custom resource or a
        Lease); 404 when missing; 409 when the body's ``preconditions`` name another uid or
        resourceVersion than the stored one."""
        stored = self._get(resource, namespace, name)
        try:
            options = json.loads(raw) if raw else {}
        except ValueError as e:
            raise ApiError(400, "BadRequest", f"invalid JSON in the body: {e}") from e
        preconditions = (options or {}).get("preconditions") or {}
        if not isinstance(preconditions, dict):
            raise ApiError(400, "BadRequest", "preconditions is not an object")
        meta = stored["metadata"]
        uid, version = preconditions.get("uid"), preconditions.get("resourceVersion")
        if uid and uid != meta["uid"]:
            raise _uid_conflict(resource, name, uid, meta["uid"])
        if version and version != meta["resourceVersion"]:
            why = (
                f"Precondition failed: ResourceVersion in precondition: {version}, "
                f"ResourceVersion in object meta: {meta['resourceVersion']}"
            )
            raise _conflict(resource, name, why)
        gone = self._drop_object(resource, namespace, name)
        self.writes += 1
        if resource is POD:
            return 200, gone, []
        details = {**resource.details(name), "uid": meta["uid"]}
        success = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": details,
        }
        return 200, success, []

    @staticmethod
    def _strategy(
        resource: Resource, stored: dict[str, Any], body: dict[str, Any], sub: str | None
    ) -> dict[str, Any]:
        """What of ``body`` the endpoint takes: the status subresource only ``status``, the
        main resource all but ``status`` and the metadata the system owns."""
        result = copy.deepcopy(stored)
        if sub == "status":
            if "status" in body:
                result["status"] = copy.deepcopy(body["status"])
            else:
                result.pop("status", None)
            return result
        for key in [k for k in result if k not in ("metadata", "status", "apiVersion", "kind")]:
            del result[key]
        for key, value in body.items():
            if key not in ("metadata", "status", "apiVersion", "kind"):
                result[key] = copy.deepcopy(value)
        given = body.get("metadata") or {}
        for key in ("labels", "annotations", "finalizers", "ownerReferences"):
            if given.get(key):
                result["metadata"][key] = copy.deepcopy(given[key])
            else:
                result["metadata"].pop(key, None)
        return result

    def _causes(
        self,
        resource: Resource,
        result: dict[str, Any],
        stored: dict[str, Any] | None,
        sub: str | None,
    ) -> list[Cause]:
        causes = _label_causes(result["metadata"].get("labels") or {})
        if resource.schema is not None:
            props = resource.schema.get("properties") or {}
            for key in resource.schema.get("required") or []:
                if key not in result:
                    causes.append(Cause(key, "FieldValueRequired", "Required value"))
            for key, value in result.items():
                if key != "metadata" and key in props and (sub != "status" or key == "status"):
                    causes += validate_custom(value, props[key], key)
            return causes
        if resource is LEASE:
            return causes + lease_causes(result)
        for i, condition in enumerate((result.get("status") or {}).get("conditions") or []):
            causes += _pod_condition_causes(condition, f"status.conditions[{i}]")
        if (
            stored is not None
            and sub is None
            and _pod_spec_locked(result) != _pod_spec_locked(stored)
        ):
            message = (
                "Forbidden: pod updates may not change fields other than "
                "`spec.containers[*].image`, `spec.initContainers[*].image`, "
                "`spec.activeDeadlineSeconds`, `spec.tolerations` (only additions to "
                "existing tolerations) or `spec.terminationGracePeriodSeconds`"
            )
            causes.append(Cause("spec", "FieldValueForbidden", message))
        return causes


#: the metadata a create keeps from its body (the rest the system owns)
_CREATE_METADATA = ("labels", "annotations", "finalizers", "ownerReferences", "generateName")


def _check_kind(resource: Resource, body: dict[str, Any]) -> None:
    """Refuse a created body that names another API version or kind than the collection (a
    custom resource's body must name both)."""
    api_version, kind = body.get("apiVersion"), body.get("kind")
    if resource.schema is not None and (not api_version or not kind):
        missing = "Kind" if api_version else "apiVersion"
        raise ApiError(
            400, "BadRequest", f"Object '{missing}' is missing in '{json.dumps(body)[:200]}'"
        )
    if (api_version or resource.api_version) != resource.api_version or (
        kind or resource.kind
    ) != resource.kind:
        message = (
            f"the API version in the data ({api_version}) does not match the expected API "
            f"version ({resource.api_version})"
        )
        raise ApiError(400, "BadRequest", message)


def _not_allowed() -> ApiError:
    message = "the server does not allow this method on the requested resource"
    return ApiError(405, "MethodNotAllowed", message, {})


def _spec(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


def _drop(body: dict[str, Any], paths: list[str]) -> dict[str, Any]:
    """``body`` without the fields at dotted ``paths`` (list items as ``a[0]``)."""
    out = copy.deepcopy(body)
    for path in paths:
        node: Any = out
        parts = re.findall(r"[^.\[\]]+|\[\d+\]", path)
        for part in parts[:-1]:
            node = node[int(part[1:-1])] if part.startswith("[") else node.get(part)
            if node is None:
                break
        if isinstance(node, dict):
            node.pop(parts[-1], None)
    return out


def _pod_spec_locked(pod: dict[str, Any]) -> Any:
    spec = copy.deepcopy(pod.get("spec") or {})
    for key in _POD_MUTABLE:
        spec.pop(key, None)
    for key in ("containers", "initContainers"):
        for container in spec.get(key) or []:
            if isinstance(container, dict):
                container.pop("image", None)
    return spec


def _qualified_name(value: str) -> bool:
    prefix, slash, name = value.rpartition("/")
    if slash and not (prefix and len(prefix) <= 253 and _SUBDOMAIN.fullmatch(prefix)):
        return False
    return len(name) <= 63 and _QUALIFIED.fullmatch(name) is not None


def _label_causes(labels: dict[str, Any]) -> list[Cause]:
    causes = []
    for key, value in labels.items():
        if not _qualified_name(str(key)):
            message = (
                f"Invalid value: {json.dumps(key)}: a qualified name must consist of "
                "alphanumeric characters, '-', '_' or '.'"
            )
            causes.append(Cause("metadata.labels", "FieldValueInvalid", message))
        if not isinstance(value, str) or (
            value and (len(value) > 63 or not _QUALIFIED.fullmatch(value))
        ):
            message = (
                f"Invalid value: {json.dumps(value)}: a valid label must be an empty "
                "string or consist of alphanumeric characters, '-', '_' or '.'"
            )
            causes.append(Cause("metadata.labels", "FieldValueInvalid", message))
    return causes


def _pod_condition_causes(condition: Any, path: str) -> list[Cause]:
    if not isinstance(condition, dict):
        return []
    causes = []
    kind = condition.get("type") or ""
    if kind not in POD_CONDITIONS and not _qualified_name(kind):
        message = (
            f"Invalid value: {json.dumps(kind)}: name part must consist of "
            "alphanumeric characters, '-', '_' or '.', and must start and end with "
            "an alphanumeric character"
        )
        causes.append(Cause(f"{path}.type", "FieldValueInvalid", message))
    status = condition.get("status")
    if status not in ("True", "False", "Unknown"):
        message = (
            f'Unsupported value: {json.dumps(status)}: supported values: "False", "True", "Unknown"'
        )
        causes.append(Cause(f"{path}.status", "FieldValueNotSupported", message))
    return causes


def _selector(text: str) -> Any:
    """An equality-based label selector (``a=b``, ``a==b``, ``a!=b``, ``a``, ``!a``)."""
    terms = [t.strip() for t in text.split(",") if t.strip()]

    def matches(labels: dict[str, str]) -> bool:
        for term in terms:
            if "!=" in term:
                key, value = term.split("!=", 1)
                if labels.get(key.strip()) == value.strip():
                    return False
            elif "=" in term:
                key, value = term.replace("==", "=").split("=", 1)
                if labels.get(key.strip()) != value.strip():
                    return False
            elif term.startswith("!"):
                if term[1:] in labels:
                    return False
            elif term not in labels:
                return False
        return True

    return matches


def _check_identity(
    resource: Resource, namespace: str, name: str, metadata: dict[str, Any], body: dict[str, Any]
) -> None:
    """Refuse an update whose body names another object, namespace, API version or kind
    than the request (a custom resource's body must name its API version and kind)."""
    given_name = metadata.get("name") or ""
    if given_name != name:
        message = (
            f"the name of the object ({given_name}) does not match the name on the URL ({name})"
        )
        raise ApiError(400, "BadRequest", message)
    given_ns = metadata.get("namespace") or ""
    if given_ns and given_ns != namespace:
        message = (
            f"the namespace of the object ({given_ns}) does not match the namespace "
            f"on the request ({namespace})"
        )
        raise ApiError(400, "BadRequest", message)
    given_api = (body.get("apiVersion"), body.get("kind"))
    if resource.schema is not None and (not given_api[0] or not given_api[1]):
        missing = "Kind" if given_api[0] else "apiVersion"
        raise ApiError(
            400, "BadRequest", f"Object '{missing}' is missing in '{json.dumps(body)[:200]}'"
        )
    if (given_api[0] or resource.api_version) != resource.api_version or (
        given_api[1] or resource.kind
    ) != resource.kind:
        message = (
            f"the API version in the data ({given_api[0]}) does not match the "
            f"expected API version ({resource.api_version})"
        )
        raise ApiError(400, "BadRequest", message)


def _check_precondition(
    resource: Resource,
    name: str,
    stored_meta: dict[str, Any],
    metadata: dict[str, Any],
    method: str,
) -> None:
    """Refuse an update whose uid or resource version is not the stored object's (a custom
    resource's ``PUT`` must give a resource version)."""
    uid = metadata.get("uid")
    if method == "PUT" and uid and uid != stored_meta["uid"]:
        raise _uid_conflict(resource, name, uid, stored_meta["uid"])
    version = metadata.get("resourceVersion")
    if not version and method == "PUT" and resource.schema is not None:
        # a custom resource allows no unconditional update
        cause = Cause(
            "metadata.resourceVersion",
            "FieldValueInvalid",
            "Invalid value: 0x0: must be specified for an update",
        )
        raise _invalid(resource, name, [cause])
    if version and version != stored_meta["resourceVersion"]:
        raise _conflict(resource, name, OPTIMISTIC_LOCK)
