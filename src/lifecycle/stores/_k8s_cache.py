"""A small informer-like cache of Kubernetes objects, fed by the official client's list and
watch: where a controller gets its objects' real uids (for :class:`~lifecycle.ObjectRef`), the
Kubernetes emitter its ``resolve=`` and the Kubernetes store its ``reader=``."""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from .._core.refs import ObjectRef
from .._k8s_api.client import configuration, kubernetes_client
from .._k8s_api.uids import is_derived_uid
from ._k8s_record import CustomResource

_GONE = 410
#: Who needs the ``kubernetes`` extra, in the message that names it.
_NEEDS = "the Kubernetes object cache"
_TYPES = frozenset({"ADDED", "MODIFIED", "DELETED"})


@attrs.frozen(slots=True)
class ObjectChange:
    """What a list or watch brought: ``type`` (``ADDED``, ``MODIFIED``, ``DELETED``), the
    object's ref (its real uid) and the object as the API server sent it.

    Attributes:
        type: ``ADDED``, ``MODIFIED`` or ``DELETED``.
        ref: the object's ref, with the uid the API server gave it.
        object: the object as the API server sent it.
    """

    type: str
    ref: ObjectRef
    object: Mapping[str, Any]


class ObjectCache:
    """The objects of ``resources`` (ref kind -> :class:`CustomResource`, the map a
    :class:`KubernetesStore` takes) as the API server last listed or watched them.

    :meth:`sync` lists each resource (one ``GET`` of its collection, in ``namespace`` or all,
    filtered by ``label_selector``); :meth:`watch` follows one kind's changes from there
    (``kubernetes.watch.Watch`` over the client, re-listing when the API answers ``410
    Expired``); :meth:`feed` takes an object from a watch of the host's own (kopf, an
    informer). Then:

    - :meth:`ref` / :meth:`refs`: the :class:`~lifecycle.ObjectRef` of an object, with the uid
      the API server gave it -- the ref a host observes through its runner;
    - :meth:`resolve` is a :data:`~lifecycle.emitters.kubernetes.Resolver` (the emitter's
      ``resolve=``): ``(uid, resourceVersion)`` of the object a ref names;
    - :meth:`get` is the store's ``reader=``: the object a ``(resource, namespace, name)``
      names, or ``None`` (the store then reads it from the API server).

    ``api``: an ``ApiClient`` (its configuration is used), or ``None`` for the loaded default
    one (``kubernetes.config.load_incluster_config()`` or ``load_kube_config()`` first).
    Thread-safe: the runner's thread and the emitter's read while a watch thread writes.

    Args:
        api: an ``ApiClient`` (its configuration is used), or ``None`` for the loaded default.
        resources: ref kind to :class:`CustomResource`, the map a :class:`KubernetesStore`
            takes, so the store and its reader agree on where each kind lives.
        namespace: list and watch in this namespace; ``None``: every namespace.
        label_selector: only objects it selects, so a host holds only what it controls.
        request_timeout: seconds one list request may wait for its reply.
    """

    def __init__(
        self,
        api: Any = None,
        *,
        resources: Mapping[str, CustomResource],
        namespace: str | None = None,
        label_selector: str = "",
        request_timeout: float = 10.0,
    ) -> None:
        self.api_client = kubernetes_client(_NEEDS).ApiClient(configuration(api, _NEEDS))
        self.resources = dict(resources)
        self.namespace = namespace
        self.label_selector = label_selector
        self.request_timeout = request_timeout
        self._kinds = {resource: kind for kind, resource in self.resources.items()}
        self._objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self._versions: dict[str, str] = {}
        self._lock = threading.Lock()

    # -- filling it ---------------------------------------------------------------------------
    def sync(self, kinds: Iterable[str] | None = None) -> list[ObjectChange]:
        """List ``kinds`` (default: every kind) and hold exactly what the API server has;
        each object listed comes back as an ``ADDED`` change (reconcile them all). An answer
        that is not a list raises the client's ``ApiException`` (what was held of that kind
        stays as it was).

        Args:
            kinds: the ref kinds listed; default every kind of ``resources``.

        Returns:
            One ``ADDED`` change per object listed.

        Raises:
            KeyError: a kind ``resources`` does not map.
        """
        changes: list[ObjectChange] = []
        for kind in self.resources if kinds is None else kinds:
            resource = self._resource(kind)
            response = self._get(resource.collection(self.namespace))
            listed = json.loads(response.data)
            with self._lock:
                for key in [k for k in self._objects if k[0] == kind]:
                    del self._objects[key]
                for item in listed.get("items") or []:
                    changes.append(self._put(kind, "ADDED", item))
                self._versions[kind] = str((listed.get("metadata") or {}).get("resourceVersion"))
        return changes

    def watch(self, kind: str, *, timeout_seconds: int = 30) -> list[ObjectChange]:
        """Follow ``kind``'s changes from the last list or watch for up to
        ``timeout_seconds`` (the API server ends the watch then) and apply them; the changes,
        in order. Lists first when ``kind`` was never listed, and again (every object
        ``ADDED``) when the API server no longer has the changes since (``410``).

        Args:
            kind: the ref kind followed.
            timeout_seconds: how long the API server keeps the watch open: a bound on one call.

        Returns:
            The changes applied, in order.
        """
        from kubernetes import watch  # type: ignore[import-untyped]

        if kind not in self._versions:
            return self.sync([kind])
        resource = self._resource(kind)
        changes = []
        try:
            stream = watch.Watch().stream(
                self._get,
                resource.collection(self.namespace),
                resource_version=self._versions[kind],
                timeout_seconds=timeout_seconds,
            )
            for event in stream:  # plain dicts: _get names no model for the client to build
                with self._lock:
                    if event["type"] == "BOOKMARK":
                        version = event["object"]["metadata"].get("resourceVersion")
                        self._versions[kind] = str(version or self._versions[kind])
                        continue
                    changes.append(self._put(kind, event["type"], event["object"]))
        except kubernetes_client(_NEEDS).exceptions.ApiException as e:
            if e.status != _GONE:
                raise
            return changes + self.sync([kind])
        return changes

    def feed(self, kind: str, type: str, obj: Mapping[str, Any]) -> ObjectChange:
        """Apply one change a watch of the host's own saw (``type`` ``ADDED``, ``MODIFIED``
        or ``DELETED``; ``obj`` the object as a dict). ``ValueError`` for another type or an
        object without its name, uid (or namespace, when namespaced), nothing applied.

        Args:
            kind: the ref kind of the object.
            type: ``ADDED``, ``MODIFIED`` or ``DELETED``.
            obj: the object as a dict.

        Returns:
            The change applied.

        Raises:
            ValueError: another type, or an object without its name, uid or namespace.
        """
        resource = self._resource(kind)
        if type not in _TYPES:
            raise ValueError(f"a change is one of {sorted(_TYPES)}, not {type!r}")
        metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
        needed = ("name", "uid", "namespace") if resource.namespaced else ("name", "uid")
        missing = [k for k in needed if not isinstance(metadata, Mapping) or not metadata.get(k)]
        if missing:
            raise ValueError(f"the {kind} object has no metadata.{missing[0]}")
        with self._lock:
            return self._put(kind, type, obj)

    # -- reading it ---------------------------------------------------------------------------
    def ref(self, kind: str, namespace: str, name: str) -> ObjectRef | None:
        """The ref of the object held under that name, with its real uid, or ``None``.

        Args:
            kind: the ref kind.
            namespace: the object's namespace (``""`` for a cluster-scoped resource).
            name: the object's name.

        Returns:
            The ref, or ``None`` when no object is held under that name.
        """
        found = self._find(kind, namespace, name)
        return None if found is None else _ref(kind, found)

    def refs(self, kind: str) -> list[ObjectRef]:
        """The refs of every ``kind`` object held, by namespace and name.

        Args:
            kind: the ref kind.

        Returns:
            The refs, sorted by namespace and name.
        """
        with self._lock:
            held = [obj for (k, _, _), obj in sorted(self._objects.items()) if k == kind]
        return [_ref(kind, obj) for obj in held]

    def resolve(self, ref: ObjectRef) -> tuple[str, str] | None:
        """``(uid, resourceVersion)`` of the object ``ref`` names, for the Kubernetes
        emitter's ``resolve=``; ``None`` when none is held under its name, or the one held
        is another object (another uid) -- unless ``ref``'s uid is one the library derived
        (a NodeClaim's ``<pod uid>-claim``), which no object has.

        Args:
            ref: the ref asked about.

        Returns:
            ``(uid, resourceVersion)``, or ``None``.
        """
        found = self._find(ref.kind, ref.namespace, ref.name)
        if found is None:
            return None
        metadata = found["metadata"]
        uid = str(metadata.get("uid") or "")
        if uid != ref.uid and not is_derived_uid(ref):
            return None
        return uid, str(metadata.get("resourceVersion") or "")

    def get(self, resource: CustomResource, namespace: str, name: str) -> dict[str, Any] | None:
        """A copy of the object, for the Kubernetes store's ``reader=``; ``None`` when it is
        not held (the store then reads the API server).

        Args:
            resource: the resource the ref's kind maps to.
            namespace: the object's namespace (``""`` for a cluster-scoped resource).
            name: the object's name.

        Returns:
            A copy of the object, or ``None``.
        """
        kind = self._kinds.get(resource)
        return None if kind is None else self._find(kind, namespace, name)

    def close(self) -> None:
        self.api_client.close()

    # -- inside ---------------------------------------------------------------------------------
    def _resource(self, kind: str) -> CustomResource:
        resource = self.resources.get(kind)
        if resource is None:
            raise KeyError(f"{kind!r} is not one of the cache's kinds {sorted(self.resources)}")
        return resource

    def _key(self, kind: str, namespace: str, name: str) -> tuple[str, str, str]:
        return (kind, namespace if self._resource(kind).namespaced else "", name)

    def _find(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        key = self._key(kind, namespace, name)
        with self._lock:
            found = self._objects.get(key)
            return copy.deepcopy(found) if found is not None else None

    def _put(self, kind: str, type: str, obj: Mapping[str, Any]) -> ObjectChange:
        """Apply a change (under the lock)."""
        body = copy.deepcopy(dict(obj))
        metadata = body.get("metadata") or {}
        key = self._key(kind, str(metadata.get("namespace") or ""), str(metadata.get("name")))
        if type == "DELETED":
            self._objects.pop(key, None)
        else:
            self._objects[key] = body
        version = metadata.get("resourceVersion")
        if version:
            self._versions[kind] = str(version)
        return ObjectChange(type, _ref(kind, body), body)

    def _get(self, path: str, **options: Any) -> Any:
        """One ``GET`` through the client, its answer unread (a list, or a watch's stream)."""
        query = [("labelSelector", self.label_selector)] if self.label_selector else []
        timeout: Any = self.request_timeout
        if options.get("watch"):
            seconds = int(options.get("timeout_seconds") or 30)
            query += [("watch", "true"), ("timeoutSeconds", str(seconds))]
            query.append(("resourceVersion", str(options.get("resource_version") or "0")))
            timeout = (self.request_timeout, seconds + self.request_timeout)
        return self.api_client.call_api(
            path,
            "GET",
            query_params=query,
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
            _return_http_data_only=True,
            _preload_content=False,
            _request_timeout=timeout,
        )


def _ref(kind: str, obj: Mapping[str, Any]) -> ObjectRef:
    metadata = obj.get("metadata") or {}
    return ObjectRef(
        kind,
        str(metadata.get("namespace") or ""),
        str(metadata.get("name") or ""),
        uid=str(metadata.get("uid") or ""),
    )
