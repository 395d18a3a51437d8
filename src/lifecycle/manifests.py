"""Kubernetes manifests from the machines (ADR 0150): the CRD of each machine's kind, the RBAC
its controller needs and a Deployment whose probes the host's :class:`Health` answers.

``lifecycle manifests MACHINE...`` writes them as YAML; in Python::

    from lifecycle.machines import JOB
    from lifecycle.manifests import manifests, to_yaml

    print(to_yaml(manifests([JOB], namespace="ops", image="registry.example/ctl:1.0")))

- **CRD** (``apiextensions.k8s.io/v1``) for a kind the library's machines define: a status
  subresource, a structural OpenAPI v3 schema of the status as
  :func:`~lifecycle.kubernetes_status` writes it (``conditions``: ``metav1.Condition`` items,
  a map keyed by ``type``, which also holds the store's record condition), printer columns
  for the state, the reason and the age. Pods are built in and Karpenter publishes the
  NodeClaim CRD: for those only RBAC. The Restore machine's ``RestoreAttempt`` holds Pod
  conditions (as a Pod writes them) and its controller also writes the Pod's.
- **RBAC**: a ServiceAccount; a ClusterRole with ``get/list/watch`` on each kind,
  ``update/patch`` on its ``status`` and ``create/patch`` on ``events.k8s.io`` Events (what
  :class:`~lifecycle.stores.kubernetes.KubernetesStore` and
  :class:`~lifecycle.emitters.kubernetes.KubernetesEmitter` call); a Role in the controller's
  namespace with ``get/create/update`` on ``coordination.k8s.io`` Leases (leader election);
  a binding for each.
- **Deployment** of the controller's image, its liveness probe on :data:`LIVE_PATH` and its
  readiness probe on :data:`READY_PATH`, port :data:`HEALTH_PORT`: the contract
  :class:`Health` serves (ready once the store opened and its schema check passed, live while
  the loop turns).
"""

from __future__ import annotations

import re
import threading
import time
import types
import typing
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import attrs

from ._core.errors import LifecycleError, preview
from ._core.machine import Machine
from ._core.refs import Condition
from .stores._k8s_record import MAX_RECORD_BYTES, RECORD_CONDITION

__all__ = [
    "DEFAULT_GROUP",
    "DEFAULT_IMAGE",
    "DEFAULT_VERSION",
    "HEALTH_PORT",
    "LIVE_PATH",
    "READY_PATH",
    "ApiResource",
    "Health",
    "ManifestError",
    "api_resource",
    "crd",
    "deployment",
    "manifests",
    "rbac",
    "status_schema",
    "to_yaml",
]

#: The API group and version of a host machine's kind when nothing names one.
DEFAULT_GROUP = "lifecycle-machines.io"
DEFAULT_VERSION = "v1alpha1"
#: The image of the Deployment when ``image`` is not given (replace it with yours).
DEFAULT_IMAGE = "lifecycle-controller:latest"
#: The port and paths of the health server (:class:`Health`) the probes call.
HEALTH_PORT = 8081
LIVE_PATH = "/livez"
READY_PATH = "/readyz"

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
#: ``metav1.Condition``'s published validations (k8s.io/apimachinery/pkg/apis/meta/v1).
_CONDITION_TYPE_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
_REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
_OPTIONAL_REASON_PATTERN = r"^([A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?|)$"
_CONDITION_LIMITS: dict[str, dict[str, Any]] = {
    "type": {"maxLength": 316, "pattern": _CONDITION_TYPE_PATTERN},
    "status": {"enum": ["True", "False", "Unknown"]},
    "reason": {"maxLength": 1024, "minLength": 1, "pattern": _REASON_PATTERN},
    "message": {"maxLength": 32768},
    "observedGeneration": {"minimum": 0},
}
_CONDITION_REQUIRED = ["type", "status", "reason", "message", "lastTransitionTime"]


class ManifestError(LifecycleError, ValueError):
    """No manifest can be made: a machine whose status has no Kubernetes shape, a bad name
    or namespace, two machines claiming one kind differently."""


@attrs.frozen(slots=True)
class ApiResource:
    """Where a machine's objects live: the API group (``""`` for the core API), version,
    kind and plural, whether they are namespaced, and whether the library defines their CRD
    (``False`` for Pods and Karpenter's NodeClaims).

    Attributes:
        group: the API group; ``""`` for the core API (Pods).
        version: the API version within the group (``v1``).
        kind: the object kind, as the machine names it.
        plural: the resource's plural name, as URLs and RBAC rules name it.
        namespaced: whether objects live in a namespace; NodeClaims are cluster-scoped.
        defined_here: whether the library writes the CRD; ``False`` for kinds another
            project owns, whose CRD a cluster already has.
    """

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool = True
    defined_here: bool = True

    @property
    def api_version(self) -> str:
        """``group/version``, or the version alone for the core API."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def crd_name(self) -> str:
        """``plural.group``: the name a CustomResourceDefinition must have."""
        return f"{self.plural}.{self.group}"


_PODS = ApiResource("", "v1", "Pod", "pods", defined_here=False)


def _api_version(machine: Machine[Any]) -> str:
    """The ``apiVersion`` of ``machine``'s kind, as its Events name it (the machine's own,
    ADR 0147)."""
    return machine.api_version


def api_resource(machine: Machine[Any]) -> ApiResource:
    """The resource ``machine``'s objects live in. Pods are core ``v1``; NodeClaims are
    Karpenter's, cluster-scoped; every other kind (the Restore machine's ``RestoreAttempt``
    among them: its record needs an object of its own) is a custom resource of the group its
    Events name (else :data:`DEFAULT_GROUP`/:data:`DEFAULT_VERSION`), plural
    ``<kind lowercased>s``.

    Args:
        machine: the machine whose objects are asked about.

    Returns:
        Their group, version, kind, plural and scope.

    Raises:
        TypeError: ``machine`` is not a :class:`~lifecycle.Machine`.
    """
    if not isinstance(machine, Machine):
        raise TypeError(f"api_resource: expected a Machine, got {preview(machine)}")
    group, _, version = _api_version(machine).rpartition("/")
    if not version:
        group, version = DEFAULT_GROUP, DEFAULT_VERSION
    plural = machine.plural or machine.kind.lower() + "s"
    return ApiResource(
        group, version, machine.kind, plural, machine.namespaced, machine.defines_resource
    )


# -- the status schema ---------------------------------------------------------------------------
def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _conditions_schema(*, pod: bool = False) -> dict[str, Any]:
    """``status.conditions``: ``metav1.Condition`` items (their fields typed from
    :class:`~lifecycle.tables.Condition`'s, named as the API names them), a map keyed by type.
    ``pod``: as a Pod's conditions are written (an empty reason or message left out, a time
    only when known): only type and status required, a reason may be empty."""
    item = _object_schema(Condition)
    for name, limits in _CONDITION_LIMITS.items():
        item["properties"][name].update(limits)
    item["required"] = list(_CONDITION_REQUIRED)
    if pod:
        item["required"] = ["type", "status"]
        del item["properties"]["reason"]["minLength"]
        item["properties"]["reason"]["pattern"] = _OPTIONAL_REASON_PATTERN
    item["description"] = (
        "metav1.Condition; the library's record is the condition of type "
        f"{RECORD_CONDITION} (its message: at most {MAX_RECORD_BYTES} bytes of JSON)"
    )
    return {
        "type": "array",
        "items": item,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
    }


def _object_schema(cls: type[Any]) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    properties = {_camel(f.name): _field_schema(hints.get(f.name, Any)) for f in attrs.fields(cls)}
    return {"type": "object", "properties": properties}


def _field_schema(tp: Any) -> dict[str, Any]:
    """The OpenAPI v3 schema of a value of the Python type ``tp`` (an attrs annotation)."""
    origin = typing.get_origin(tp)
    args = [a for a in typing.get_args(tp) if a is not type(None) and a is not Ellipsis]
    if origin in (typing.Union, types.UnionType):
        kinds = [_field_schema(a) for a in args]
        return kinds[0] if len(kinds) == 1 else {"x-kubernetes-preserve-unknown-fields": True}
    if tp is Condition:
        return _object_schema(Condition)
    if tp is bool:
        return {"type": "boolean"}
    if tp is int:
        return {"type": "integer", "format": "int64"}
    if tp is float:
        return {"type": "number"}
    if tp is str:
        return {"type": "string"}
    if tp is datetime:
        return {"type": "string", "format": "date-time"}
    if origin in (tuple, list, frozenset, set) or tp in (tuple, list):
        if args and args[0] is Condition:
            return _conditions_schema()
        return {"type": "array", "items": _field_schema(args[0]) if args else _ANY}
    if isinstance(tp, type) and attrs.has(tp):
        return _object_schema(tp)
    return dict(_ANY)


_ANY: dict[str, Any] = {"x-kubernetes-preserve-unknown-fields": True}


def status_schema(machine: Machine[Any]) -> dict[str, Any]:
    """The ``status`` schema of ``machine``'s kind: the body
    :func:`~lifecycle.kubernetes_status` writes. A status that is its conditions:
    ``conditions`` alone. A machine with its own ``kubernetes_status(status)``: the schema its
    ``kubernetes_status_schema()`` returns, if it has one, else its status type's fields
    (camelCase, typed from the attrs annotations), unknown fields kept (the body is the
    host's); ``conditions`` added to either (the store's record lives there).

    Args:
        machine: the machine whose status is described.

    Returns:
        An OpenAPI v3 structural schema, as a CRD's ``status`` property takes it.

    Raises:
        ManifestError: the status has no Kubernetes shape (neither conditions nor a
            ``kubernetes_status`` method), so no resource can hold it.
    """
    status_type: Any = getattr(machine, "status_type", None)
    # its own body: a machine overriding the default (conditions only) of ``Machine``
    own = getattr(type(machine), "kubernetes_status", None) is not Machine.kubernetes_status
    if machine.writes_pod_conditions:
        # the Pod conditions the host writes (kubernetes_status), and the record beside them
        return {"type": "object", "properties": {"conditions": _conditions_schema(pod=True)}}
    shaped = isinstance(status_type, type) and attrs.has(status_type)
    names = {f.name for f in attrs.fields(status_type)} if shaped else set()
    declared = getattr(machine, "kubernetes_status_schema", None)
    if callable(declared):  # the host says what its own body is
        body = dict(declared())
        body.setdefault("type", "object")
        body["properties"] = {"conditions": _conditions_schema(), **body.get("properties", {})}
        return body
    if own and shaped:
        body = _object_schema(status_type)
        body["properties"]["conditions"] = _conditions_schema()
        body["x-kubernetes-preserve-unknown-fields"] = True
        return body
    if "conditions" in names and not own:
        schema = _field_schema(typing.get_type_hints(status_type)["conditions"])
        if schema.get("x-kubernetes-list-type") == "map":
            return {"type": "object", "properties": {"conditions": schema}}
    raise ManifestError(
        f"machine {machine.name!r}: its status ({getattr(status_type, '__name__', '?')}) has "
        "no Kubernetes shape to define a resource by: give it conditions "
        "(tuple[Condition, ...]) or the machine a kubernetes_status(status) method"
    )


def crd(machine: Machine[Any]) -> dict[str, Any]:
    """The ``CustomResourceDefinition`` of ``machine``'s kind.

    Args:
        machine: a machine whose kind the library defines.

    Returns:
        The CRD as a dict: the status subresource, the schema of :func:`status_schema`, and
        State/Reason/Age printer columns for ``kubectl get``.

    Raises:
        ManifestError: a kind the library does not define (Pods, NodeClaims), or a status
            with no Kubernetes shape.
    """
    resource = api_resource(machine)
    if not resource.defined_here:
        raise ManifestError(
            f"machine {machine.name!r}: {resource.kind} is not defined here "
            f"({resource.api_version}): no CRD to write"
        )
    root = {
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            "status": status_schema(machine),
        },
    }
    true = '.status.conditions[?(@.status=="True")]'
    columns = [
        {"name": "State", "type": "string", "jsonPath": f"{true}.type"},
        {"name": "Reason", "type": "string", "jsonPath": f"{true}.reason"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": resource.crd_name, "labels": _labels(machine.name)},
        "spec": {
            "group": resource.group,
            "names": {
                "kind": resource.kind,
                "listKind": f"{resource.kind}List",
                "plural": resource.plural,
                "singular": resource.kind.lower(),
            },
            "scope": "Namespaced" if resource.namespaced else "Cluster",
            "versions": [
                {
                    "name": resource.version,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": root},
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                }
            ],
        },
    }


# -- RBAC and the Deployment --------------------------------------------------------------------
def _labels(name: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": name, "app.kubernetes.io/managed-by": "lifecycle"}


def _checked(value: str, what: str) -> str:
    if len(value) > 63 or not _DNS_LABEL.fullmatch(value):
        raise ManifestError(
            f"{what} {preview(value)}: expected a DNS label (lowercase letters, digits and "
            "'-', at most 63)"
        )
    return value


def _resources(machines: Sequence[Machine[Any]]) -> list[ApiResource]:
    found: dict[tuple[str, str], ApiResource] = {}
    for m in machines:
        for r in (api_resource(m), *((_PODS,) if m.writes_pod_conditions else ())):
            seen = found.setdefault((r.group, r.plural), r)
            if seen != r:
                raise ManifestError(f"{r.crd_name}: two machines define it differently")
    return list(found.values())


def rbac(
    machines: Sequence[Machine[Any]], *, namespace: str = "default", name: str = "lifecycle"
) -> list[dict[str, Any]]:
    """ServiceAccount, ClusterRole (the kinds, their status, Events) and its binding, Role
    (Leases in ``namespace``) and its binding, for a controller of ``machines``.

    Args:
        machines: the machines the controller runs; each kind gets read access to its
            objects and write access to their status, nothing more.
        namespace: where the ServiceAccount and the Leases live.
        name: the name of every object made (and their ``app.kubernetes.io/name`` label).

    Returns:
        The five documents, in the order to apply them.

    Raises:
        ManifestError: ``namespace`` or ``name`` is not a DNS label, or two machines claim
            one kind differently.
    """
    _checked(namespace, "namespace")
    _checked(name, "name")
    rules: list[dict[str, Any]] = []
    for r in _resources(machines):
        rules.append(
            {"apiGroups": [r.group], "resources": [r.plural], "verbs": ["get", "list", "watch"]}
        )
        rules.append(
            {
                "apiGroups": [r.group],
                "resources": [f"{r.plural}/status"],
                "verbs": ["update", "patch"],
            }
        )
    rules.append(
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]}
    )
    leases = {
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "verbs": ["get", "create", "update"],
    }
    meta = {"name": name, "labels": _labels(name)}
    local = {**meta, "namespace": namespace}
    account = [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]
    rbac_api = "rbac.authorization.k8s.io/v1"
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": local},
        {"apiVersion": rbac_api, "kind": "ClusterRole", "metadata": meta, "rules": rules},
        {
            "apiVersion": rbac_api,
            "kind": "ClusterRoleBinding",
            "metadata": meta,
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": name,
            },
            "subjects": account,
        },
        {"apiVersion": rbac_api, "kind": "Role", "metadata": local, "rules": [leases]},
        {
            "apiVersion": rbac_api,
            "kind": "RoleBinding",
            "metadata": local,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": account,
        },
    ]


def deployment(
    *, namespace: str = "default", name: str = "lifecycle", image: str = DEFAULT_IMAGE
) -> dict[str, Any]:
    """The controller's Deployment: one replica of ``image`` under the ServiceAccount
    :func:`rbac` makes, probed on :data:`HEALTH_PORT` (:class:`Health` answers).

    Args:
        namespace: where it runs; the ServiceAccount's namespace.
        name: its name and its ServiceAccount's.
        image: the controller's image reference.

    Returns:
        The Deployment, one replica: a second replica would write the same objects at once.

    Raises:
        ManifestError: a bad namespace or name, or an image reference that is empty or holds
            whitespace.
    """
    _checked(namespace, "namespace")
    _checked(name, "name")
    if not image or any(c.isspace() for c in image):
        raise ManifestError(f"image {preview(image)}: expected an image reference")

    def probe(path: str, period: int) -> dict[str, Any]:
        return {"httpGet": {"path": path, "port": "health"}, "periodSeconds": period}

    selector = {"app.kubernetes.io/name": name}
    container = {
        "name": "controller",
        "image": image,
        "env": [{"name": "LIFECYCLE_HEALTH_PORT", "value": str(HEALTH_PORT)}],
        "ports": [{"name": "health", "containerPort": HEALTH_PORT, "protocol": "TCP"}],
        "livenessProbe": {**probe(LIVE_PATH, 10), "initialDelaySeconds": 15, "failureThreshold": 3},
        "readinessProbe": {**probe(READY_PATH, 5), "failureThreshold": 1},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": _labels(name)},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": {**_labels(name), **selector}},
                "spec": {"serviceAccountName": name, "containers": [container]},
            },
        },
    }


def manifests(
    machines: Iterable[Machine[Any]],
    *,
    namespace: str = "default",
    name: str = "lifecycle",
    image: str = DEFAULT_IMAGE,
) -> list[dict[str, Any]]:
    """Everything a controller of ``machines`` needs, in the order to apply it: the CRDs
    of the kinds the library defines, the RBAC, the Deployment.

    Args:
        machines: the machines the controller runs; repeats are dropped.
        namespace: as :func:`rbac`.
        name: as :func:`rbac`.
        image: as :func:`deployment`.

    Returns:
        CRDs first, so the RBAC and the Deployment never refer to a kind not yet defined.

    Raises:
        TypeError: something in ``machines`` is not a machine.
        ManifestError: no machines, or one of the errors of :func:`crd`, :func:`rbac` or
            :func:`deployment`.
    """
    chosen: list[Machine[Any]] = []
    for m in machines:
        if not isinstance(m, Machine):
            raise TypeError(f"manifests: expected machines, got {preview(m)}")
        if all(m.name != c.name for c in chosen):
            chosen.append(m)
    if not chosen:
        raise ManifestError("manifests: name at least one machine")
    resources = _resources(chosen)  # refuses two machines claiming one kind differently
    defined = {r.crd_name for r in resources if r.defined_here}
    crds: dict[str, dict[str, Any]] = {}
    for m in chosen:
        r = api_resource(m)
        if r.crd_name in defined and r.crd_name not in crds:
            crds[r.crd_name] = crd(m)
    return [
        *crds.values(),
        *rbac(chosen, namespace=namespace, name=name),
        deployment(namespace=namespace, name=name, image=image),
    ]


def to_yaml(documents: Iterable[dict[str, Any]]) -> str:
    """The documents as one YAML stream (``---`` between them), keys in their order.

    Args:
        documents: Kubernetes objects as dicts (what :func:`manifests` returns).

    Returns:
        The YAML text, for ``kubectl apply -f -``.
    """
    import yaml  # type: ignore[import-untyped]

    text: str = yaml.safe_dump_all(list(documents), sort_keys=False, width=100)
    return text


# -- the health server the probes call ----------------------------------------------------------
class Health:
    """The probes' answers, served over HTTP (stdlib) for the Deployment :func:`deployment`
    writes: :data:`READY_PATH` answers 200 once :meth:`ready` was called (the store opened and
    its schema check passed), 503 before; :data:`LIVE_PATH` answers 200 while :meth:`beat`
    is called at least every ``stall_after`` seconds (the loop turns; counted from the start),
    503 once it stops. The host calls :meth:`ready` once and :meth:`beat` every turn of its
    loop; :meth:`serve` starts answering on ``port`` (0: any free port) in a daemon thread.

    Args:
        stall_after: seconds without a :meth:`beat` after which the controller counts as
            stalled (``/livez`` answers 503 and the kubelet restarts it); longer than the
            slowest turn of the host's loop.
        clock: the monotonic clock read; a test gives its own to stall without waiting.

    Raises:
        ValueError: ``stall_after`` is not positive.
    """

    def __init__(
        self, *, stall_after: float = 60.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if not stall_after > 0:
            raise ValueError(f"stall_after must be positive, got {stall_after!r}")
        self.stall_after = stall_after
        self._clock = clock
        self._ready = False
        self._last = clock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def ready(self) -> None:
        """Mark the controller ready: the store opened and its schema check passed."""
        self._ready = True

    def beat(self) -> None:
        """Record one turn of the host's loop: the controller is live."""
        self._last = self._clock()

    @property
    def is_ready(self) -> bool:
        """Ready and live: a stalled controller stops taking traffic too."""
        return self._ready and self.is_live

    @property
    def is_live(self) -> bool:
        """Whether the last :meth:`beat` (or the start) is at most ``stall_after`` ago."""
        return self._clock() - self._last <= self.stall_after

    def answer(self, path: str) -> int:
        """The status code for a probe of ``path``.

        Args:
            path: the request's path, query removed.

        Returns:
            200 or 503 for :data:`LIVE_PATH` and :data:`READY_PATH`, 404 for anything else.
        """
        if path == LIVE_PATH:
            return 200 if self.is_live else 503
        if path == READY_PATH:
            return 200 if self.is_ready else 503
        return 404

    def serve(self, port: int = HEALTH_PORT, host: str = "") -> int:
        """Answer probes on ``host:port`` in a daemon thread, until :meth:`close`.

        Args:
            port: the TCP port; 0 binds any free one (tests).
            host: the address to bind; ``""`` for every address, as a kubelet probes the
                pod's IP.

        Returns:
            The port bound.
        """
        health = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                code = health.answer(self.path.partition("?")[0])
                body = b"ok\n" if code == 200 else b"no\n"
                self.send_response(code)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        server = ThreadingHTTPServer((host, port), Handler)
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, daemon=True)
        self._thread.start()
        return int(server.server_address[1])

    def close(self) -> None:
        """Stop answering and free the port."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> Health:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
