"""Manifests from the machines (issue 38, ADR 0150): every status the Kubernetes store writes
validates against the generated CRD on the validating fake API server, the CRD is a published
``apiextensions.k8s.io/v1`` object with a structural schema, the RBAC allows every request
the store, its cache and the emitter make, the health server answers the probes, and
``lifecycle manifests`` writes them (or refuses, exit 2)."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

import attrs
import pytest
import yaml  # type: ignore[import-untyped]
from hypothesis import HealthCheck, given, settings
from kubernetes import client as kubernetes_client  # type: ignore[import-untyped]

from lifecycle import InvalidObservation, InvalidTransition, ObjectRef, Runner
from lifecycle._testing.fake_api.schema import decode_custom, validate_custom
from lifecycle.cli import main
from lifecycle.emitters.kubernetes import KubernetesEmitter
from lifecycle.machines import JOB, POD, WorkflowMachine, default_registry, job, pod
from lifecycle.machines.restore import AttemptOpened
from lifecycle.manifests import (
    DEFAULT_GROUP,
    DEFAULT_VERSION,
    HEALTH_PORT,
    LIVE_PATH,
    READY_PATH,
    Health,
    ManifestError,
    api_resource,
    crd,
    deployment,
    manifests,
    rbac,
    status_schema,
    to_yaml,
)
from lifecycle.stores.kubernetes import (
    PODS,
    RECORD_CONDITION,
    CustomResource,
    KubernetesStore,
    ObjectCache,
)
from lifecycle.tables import Condition
from lifecycle.testing import FakeApiServer, nodeclaim_crd_schema, observation_sequences

from .stores.test_kubernetes_store import groups_that_fit as groups_that_fit  # autouse: ADR 0144

AT = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
#: The shipped machines whose kind the library defines (a CRD each).
DEFINED = ("job", "workflow", "certification", "workloadrun", "restore")
SHIPPED = ("pod", "nodeclaim", "job", "workflow", "certification", "workloadrun", "restore")


def machine(name: str) -> Any:
    return default_registry()[name]


def schema_of(doc: dict[str, Any]) -> dict[str, Any]:
    schema: dict[str, Any] = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def serve(*names: str) -> tuple[FakeApiServer, dict[str, CustomResource]]:
    """A fake API server serving the generated CRDs of ``names``; the store's resources."""
    server = FakeApiServer()
    resources: dict[str, CustomResource] = {"Pod": PODS}
    for name in names:
        m = machine(name)
        r = api_resource(m)
        doc = crd(m)
        server.register_crd(r.group, r.version, r.plural, r.kind, schema_of(doc))
        resources[m.kind] = CustomResource(r.group, r.version, r.plural)
    return server, resources


def api(server: FakeApiServer) -> Any:
    config = kubernetes_client.Configuration()
    config.host = server.url
    return kubernetes_client.ApiClient(config)


def check_status(server: FakeApiServer, plural: str, ref: ObjectRef, schema: dict[str, Any]) -> int:
    """Every status the store sent validates against ``schema`` with nothing to prune, the
    object keeps it as sent, and the store's record is its last condition; how many."""
    sent = [
        r.body["status"]
        for r in server.requests
        if r.method == "PUT" and r.path.endswith("/status") and isinstance(r.body, dict)
    ]
    for status in sent:
        decoded = decode_custom({"status": status}, schema)
        assert decoded.unknown == [], decoded.unknown
        assert decoded.value == {"status": status}
        errors = validate_custom(status, schema["properties"]["status"], "status")
        assert errors == [], [e.text() for e in errors]
        assert status["conditions"][-1]["type"] == RECORD_CONDITION
    obj = server.object(plural, ref.namespace, ref.name)
    assert obj is not None
    if sent:
        assert obj["status"] == sent[-1]  # kept as sent: nothing pruned
    return len(sent)


# -- the CRD accepts every status the store writes ----------------------------------------------
#: Statuses written by the property, per machine (the last test checks none was vacuous).
WRITTEN: dict[str, int] = {}


@pytest.mark.parametrize("name", DEFINED)
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=__import__("hypothesis").strategies.data())
def test_every_status_the_store_writes_validates_against_the_generated_crd(
    name: str, data: Any
) -> None:
    m = machine(name)
    observations = data.draw(observation_sequences(m, max_size=12, start=AT))
    if name == "restore":  # the generated ones alone never open an attempt
        opened = AttemptOpened(at=AT, pod_uid="pod-1", content_uid="content-1", container="main")
        observations = [opened, *observations]
    server, resources = serve(name)
    try:
        r = api_resource(m)
        schema = schema_of(crd(m))
        ref = ObjectRef(m.kind, "ml", "one", "uid-1")
        server.add_object(r.plural, ref.namespace, ref.name, uid=ref.uid)
        store = KubernetesStore(api(server), resources=resources, sleep=lambda _: None)
        runner = Runner(store, [], links=())
        for obs in observations:
            try:
                runner.observe(ref, obs)
            except (InvalidTransition, InvalidObservation):
                continue  # refused by the machine: nothing written (a store error fails)
            check_status(server, r.plural, ref, schema)
        assert not server.refused, server.refused
        WRITTEN[name] = WRITTEN.get(name, 0) + check_status(server, r.plural, ref, schema)
        store.close()
    finally:
        server.close()


def test_the_property_wrote_statuses_for_every_machine() -> None:
    if set(WRITTEN) != set(DEFINED):
        pytest.skip("run with the property above")
    assert all(WRITTEN[name] > 0 for name in DEFINED), WRITTEN


def test_a_long_job_run_writes_every_condition_the_crd_types() -> None:
    """A run through to the end: the record and the machine's conditions all kept."""
    server, resources = serve("job")
    try:
        ref = ObjectRef("Job", "ml", "train", "uid-j")
        server.add_object("jobs", "ml", "train", uid=ref.uid)
        store = KubernetesStore(api(server), resources=resources, sleep=lambda _: None)
        runner = Runner(store, [], links=())
        runner.observe(ref, job.WorkloadCreated(at=AT))
        runner.observe(ref, job.WorkloadRunning(at=AT))
        status = server.status("jobs", "ml", "train")
        assert status is not None
        types = [c["type"] for c in status["conditions"]]
        assert len(types) >= 2
        assert types[-1] == RECORD_CONDITION
        assert check_status(server, "jobs", ref, schema_of(crd(JOB))) == 2
        store.close()
    finally:
        server.close()


def test_the_fake_server_refuses_a_status_the_generated_crd_forbids() -> None:
    """The schema is not vacuous: a condition without its reason, or a bad status value, or
    two conditions of one type, is refused; an unknown status field is pruned."""
    schema = schema_of(crd(JOB))["properties"]["status"]
    good = {
        "type": "Ready",
        "status": "True",
        "reason": "Up",
        "message": "",
        "lastTransitionTime": "2026-11-30T10:00:00Z",
    }
    assert validate_custom({"conditions": [good]}, schema, "status") == []
    for bad in (
        {k: v for k, v in good.items() if k != "reason"},
        {**good, "status": "Yes"},
        {**good, "lastTransitionTime": "yesterday"},
        {**good, "reason": "not a reason"},
    ):
        assert validate_custom({"conditions": [bad]}, schema, "status") != []
    assert validate_custom({"conditions": [good, good]}, schema, "status") != []
    assert decode_custom({"status": {"phase": "x"}}, schema_of(crd(JOB))).unknown == [
        "status.phase"
    ]


# -- the published apiextensions.k8s.io/v1 structure ---------------------------------------------
class _Response:
    def __init__(self, doc: dict[str, Any]) -> None:
        self.data = json.dumps(doc)


MODELS = {
    "CustomResourceDefinition": "V1CustomResourceDefinition",
    "ServiceAccount": "V1ServiceAccount",
    "ClusterRole": "V1ClusterRole",
    "ClusterRoleBinding": "V1ClusterRoleBinding",
    "Role": "V1Role",
    "RoleBinding": "V1RoleBinding",
    "Deployment": "V1Deployment",
}


@pytest.mark.parametrize("names", [(n,) for n in SHIPPED] + [SHIPPED])
def test_every_document_is_a_published_api_object_with_nothing_unknown(
    names: tuple[str, ...],
) -> None:
    """Deserialized into the ``kubernetes`` client's model of its kind and written back, each
    document is unchanged: every field is one the published API has, of its type."""
    client = kubernetes_client.ApiClient()
    docs = manifests([machine(n) for n in names], namespace="ops", image="reg.example/ctl:1")
    assert [d["kind"] for d in docs].count("CustomResourceDefinition") == len(
        {api_resource(machine(n)).crd_name for n in names if n in DEFINED}
    )
    for doc in docs:
        model = client.deserialize(_Response(doc), MODELS[doc["kind"]])
        assert client.sanitize_for_serialization(model) == doc


def structural_problems(schema: dict[str, Any], path: str = "") -> list[str]:
    """The structural-schema rules of ``apiextensions.k8s.io/v1`` a node breaks."""
    out = []
    preserve = schema.get("x-kubernetes-preserve-unknown-fields") is True
    if "type" not in schema and not preserve and not schema.get("x-kubernetes-int-or-string"):
        out.append(f"{path}: no type")
    if "properties" in schema and "additionalProperties" in schema:
        out.append(f"{path}: properties and additionalProperties")
    for word in ("$ref", "allOf", "anyOf", "oneOf", "not", "definitions", "dependencies"):
        if word in schema:
            out.append(f"{path}: {word}")
    if schema.get("type") == "array" and not isinstance(schema.get("items"), dict):
        out.append(f"{path}: an array needs one items schema")
    if schema.get("x-kubernetes-list-type") == "map":
        item = schema["items"]
        for key in schema.get("x-kubernetes-list-map-keys") or ["?"]:
            if key not in item.get("required", []) and "default" not in item["properties"].get(
                key, {}
            ):
                out.append(f"{path}: map key {key} neither required nor defaulted")
    for key, sub in (schema.get("properties") or {}).items():
        out += structural_problems(sub, f"{path}.{key}")
    if isinstance(schema.get("items"), dict):
        out += structural_problems(schema["items"], f"{path}[]")
    return out


@pytest.mark.parametrize("name", DEFINED)
def test_the_generated_schema_is_structural(name: str) -> None:
    schema = schema_of(crd(machine(name)))
    assert structural_problems(schema) == []
    assert schema["properties"]["metadata"] == {"type": "object"}  # nothing more is allowed
    assert crd(machine(name))["spec"]["versions"][0]["subresources"] == {"status": {}}


def test_the_structural_check_finds_what_it_looks_for() -> None:
    assert structural_problems({"properties": {"a": {}}}) == [": no type", ".a: no type"]
    bad = {"type": "object", "properties": {}, "additionalProperties": {"type": "string"}}
    assert structural_problems(bad) == [": properties and additionalProperties"]


def _without_descriptions(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_descriptions(v) for k, v in value.items() if k != "description"}
    if isinstance(value, list):
        return [_without_descriptions(v) for v in value]
    return value


def test_the_conditions_are_the_published_metav1_condition() -> None:
    """Karpenter's published ``status.conditions`` (its own Condition, controller-gen output)
    but for what upstream ``metav1.Condition`` makes stricter: a reason and a message are
    required, the reason non-empty (the apimachinery kubebuilder markers)."""
    published = _without_descriptions(
        nodeclaim_crd_schema()["properties"]["status"]["properties"]["conditions"]
    )
    ours = _without_descriptions(status_schema(JOB)["properties"]["conditions"])
    upstream = published["items"]
    upstream["required"] = sorted([*upstream["required"], "reason", "message"])
    upstream["properties"]["reason"].update(
        minLength=1, pattern="^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
    )
    ours["items"]["required"] = sorted(ours["items"]["required"])
    assert ours == published


def test_printer_columns_show_state_reason_and_age_first_match_is_the_machines() -> None:
    columns = crd(JOB)["spec"]["versions"][0]["additionalPrinterColumns"]
    assert [c["name"] for c in columns] == ["State", "Reason", "Age"]
    assert columns[2] == {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
    for column in columns[:2]:
        assert column["jsonPath"].startswith('.status.conditions[?(@.status=="True")].')


def test_pods_and_nodeclaims_get_no_crd_and_a_status_without_shape_is_refused() -> None:
    for name in ("pod", "nodeclaim"):
        with pytest.raises(ManifestError, match="no CRD"):
            crd(machine(name))
    with pytest.raises(ManifestError, match="no Kubernetes shape"):
        status_schema(PlainMachine())  # neither conditions nor a body of its own
    assert api_resource(machine("nodeclaim")).namespaced is False


def test_the_restore_attempt_gets_its_crd_and_its_controller_the_pods() -> None:
    """Its record needs an object of its own (a RestoreAttempt); its conditions are the Pod's
    as a Pod writes them (no reason needed), and the host merges them into the Pod too."""
    restore = machine("restore")
    assert crd(restore)["metadata"]["name"] == f"restoreattempts.{DEFAULT_GROUP}"
    item = status_schema(restore)["properties"]["conditions"]["items"]
    assert item["required"] == ["type", "status"]
    pod_condition = {"type": "Restored", "status": "False"}
    assert validate_custom(pod_condition, item, "c") == []
    assert validate_custom({**pod_condition, "reason": ""}, item, "c") == []
    assert validate_custom({**pod_condition, "reason": "no good"}, item, "c") != []
    [cluster] = [d for d in rbac([restore]) if d["kind"] == "ClusterRole"]
    assert allowed(cluster["rules"], ("", "pods/status", "patch"))
    assert allowed(cluster["rules"], (DEFAULT_GROUP, "restoreattempts/status", "update"))


# -- host machines ------------------------------------------------------------------------------
@attrs.frozen
class GateStatus:
    state: str = ""
    conditions: tuple[Condition, ...] = ()


@attrs.frozen
class PlainStatus:
    state: str = ""
    attempts: int = 0
    since: datetime | None = None
    ratio: float = 0.0
    nodes: tuple[str, ...] = ()
    flagged: bool = False


class GateMachine(WorkflowMachine):
    """A host's machine (the shipped Workflow's table, another name, kind and status)."""

    name: ClassVar[str] = "gate"
    kind: ClassVar[str] = "Gate"
    api_version: ClassVar[str] = ""  # not the Workflow's: the library's default group
    growth = None  # its status keeps no groups
    status_type: ClassVar[type[Any]] = GateStatus


class PlainMachine(GateMachine):
    name: ClassVar[str] = "plain"
    kind: ClassVar[str] = "Plain"
    status_type: ClassVar[type[Any]] = PlainStatus


class OwnShapeMachine(PlainMachine):
    name: ClassVar[str] = "own"
    kind: ClassVar[str] = "Own"

    def kubernetes_status(self, status: PlainStatus) -> dict[str, Any]:  # type: ignore[override]
        return {"phase": status.state}


class DeclaredShapeMachine(OwnShapeMachine):
    name: ClassVar[str] = "declared"
    kind: ClassVar[str] = "Declared"

    def kubernetes_status_schema(self) -> dict[str, Any]:
        return {"type": "object", "properties": {"phase": {"type": "string"}}}


def test_a_host_machine_with_conditions_gets_its_own_group_and_plural() -> None:
    doc = crd(GateMachine())
    assert doc["metadata"]["name"] == f"gates.{DEFAULT_GROUP}"
    assert doc["spec"]["versions"][0]["name"] == DEFAULT_VERSION
    assert schema_of(doc)["properties"]["status"] == status_schema(JOB)


def test_a_host_body_is_typed_from_its_annotations_or_its_declared_schema() -> None:
    status = status_schema(OwnShapeMachine())
    assert status["x-kubernetes-preserve-unknown-fields"] is True  # its own names are kept
    assert {k: v for k, v in status["properties"].items() if k != "conditions"} == {
        "state": {"type": "string"},
        "attempts": {"type": "integer", "format": "int64"},
        "since": {"type": "string", "format": "date-time"},
        "ratio": {"type": "number"},
        "nodes": {"type": "array", "items": {"type": "string"}},
        "flagged": {"type": "boolean"},
    }
    assert status["properties"]["conditions"] == status_schema(JOB)["properties"]["conditions"]
    declared = status_schema(DeclaredShapeMachine())
    assert set(declared["properties"]) == {"conditions", "phase"}
    assert structural_problems(schema_of(crd(DeclaredShapeMachine()))) == []
    with pytest.raises(ManifestError, match=r"'plain': its status \(PlainStatus\) has no"):
        manifests([PlainMachine()])


def test_the_command_refuses_a_host_machine_without_a_kubernetes_shape(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "host.py").write_text(
        "from tests.test_manifests import PlainMachine\nMACHINE = PlainMachine()\n"
    )
    assert run_cli(f"{tmp_path / 'host.py'}:MACHINE") == (2, "")
    assert "no Kubernetes shape" in capsys.readouterr().err
    (tmp_path / "gate.py").write_text(
        "from tests.test_manifests import GateMachine\nMACHINE = GateMachine()\n"
    )
    code, text = run_cli(f"{tmp_path / 'gate.py'}:MACHINE")
    assert code == 0
    assert next(yaml.safe_load_all(text))["metadata"]["name"] == f"gates.{DEFAULT_GROUP}"


# -- RBAC: every request the controller makes is allowed ----------------------------------------
def request_rule(method: str, path: str) -> tuple[str, str, str]:
    """(apiGroup, resource, verb) of a request to the API server, as the authorizer sees it."""
    route, _, query = path.partition("?")
    parts = route.strip("/").split("/")
    if parts[0] == "api":
        group, rest = "", parts[2:]
    else:
        group, rest = parts[1], parts[3:]
    if rest[:1] == ["namespaces"] and len(rest) > 2:
        rest = rest[2:]
    resource = rest[0] + (f"/{rest[2]}" if len(rest) > 2 else "")
    named = len(rest) > 1
    if method == "GET":
        verb = "watch" if "watch=" in query else ("get" if named else "list")
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}[method]
    return group, resource, verb


def allowed(rules: list[dict[str, Any]], want: tuple[str, str, str]) -> bool:
    group, resource, verb = want
    return any(
        group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"] for r in rules
    )


def test_the_rules_cover_every_request_of_the_store_its_cache_and_the_emitter() -> None:
    server, resources = serve("job")
    try:
        client = api(server)
        job_obj = server.add_object("jobs", "ml", "train")
        pod_obj = server.add_object("pods", "ml", "trainer-0")
        cache = ObjectCache(client, resources=resources)
        cache.sync()
        cache.watch("Job", timeout_seconds=1)
        job_ref = ObjectRef("Job", "ml", "train", job_obj["metadata"]["uid"])
        pod_ref = ObjectRef("Pod", "ml", "trainer-0", pod_obj["metadata"]["uid"])
        store = KubernetesStore(client, resources=resources, sleep=lambda _: None)
        with KubernetesEmitter.for_api(
            client, hostname="h", timers=False, resolve=cache.resolve
        ) as events:
            runner = Runner(store, [events], links=())
            runner.observe(pod_ref, pod.CreateRequested(at=AT, pool="gpu", provider="fake"))
            runner.observe(job_ref, job.WorkloadCreated(at=AT))
            runner.observe(job_ref, job.WorkloadRunning(at=AT))
            assert events.flush(10)
        list(store.records(JOB))
        store.flush_marks()
        store.close()
        seen = {request_rule(r.method, r.path) for r in server.requests}
        assert {v for _, _, v in seen} >= {"get", "list", "watch", "update", "create"}
        assert ("events.k8s.io", "events", "create") in seen
        [cluster] = [d for d in rbac([JOB, POD]) if d["kind"] == "ClusterRole"]
        missing = sorted(w for w in seen if not allowed(cluster["rules"], w))
        assert missing == []
        assert not allowed(cluster["rules"], ("", "pods", "delete"))  # and no more
    finally:
        server.close()


def test_the_role_grants_leases_in_the_namespace_and_the_bindings_name_the_account() -> None:
    docs = {d["kind"]: d for d in rbac([JOB], namespace="ops", name="ctl")}
    assert docs["Role"]["metadata"]["namespace"] == "ops"
    assert allowed(docs["Role"]["rules"], ("coordination.k8s.io", "leases", "update"))
    for kind in ("ClusterRoleBinding", "RoleBinding"):
        assert docs[kind]["subjects"] == [
            {"kind": "ServiceAccount", "name": "ctl", "namespace": "ops"}
        ]
    assert docs["ServiceAccount"]["metadata"] == {
        "name": "ctl",
        "labels": {"app.kubernetes.io/name": "ctl", "app.kubernetes.io/managed-by": "lifecycle"},
        "namespace": "ops",
    }


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"namespace": "Bad_NS"}, "namespace"),
        ({"name": "x" * 64}, "name"),
        ({"image": "has space"}, "image"),
    ],
)
def test_bad_names_are_refused(kw: dict[str, str], match: str) -> None:
    with pytest.raises(ManifestError, match=match):
        manifests([JOB], **kw)


# -- the Deployment and its probes -------------------------------------------------------------
def test_the_deployment_probes_the_health_servers_paths() -> None:
    doc = deployment(namespace="ops", image="reg.example/ctl:1")
    [container] = doc["spec"]["template"]["spec"]["containers"]
    assert container["livenessProbe"]["httpGet"] == {"path": LIVE_PATH, "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": READY_PATH, "port": "health"}
    assert container["ports"][0]["containerPort"] == HEALTH_PORT
    assert doc["spec"]["template"]["spec"]["serviceAccountName"] == "lifecycle"


def _get(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def test_health_is_ready_after_ready_and_live_while_the_loop_beats() -> None:
    now = [0.0]
    with Health(stall_after=30, clock=lambda: now[0]) as health:
        port = health.serve(0, "127.0.0.1")
        assert (_get(port, LIVE_PATH), _get(port, READY_PATH)) == (200, 503)
        health.ready()
        assert (_get(port, LIVE_PATH), _get(port, READY_PATH)) == (200, 200)
        now[0] = 25.0
        health.beat()
        now[0] = 50.0
        assert _get(port, LIVE_PATH) == 200  # 25 s since the last turn
        now[0] = 56.0
        assert (_get(port, LIVE_PATH), _get(port, READY_PATH)) == (503, 503)  # stalled
        assert _get(port, "/other") == 404
    with pytest.raises(ValueError, match="stall_after"):
        Health(stall_after=0)


# -- the command ------------------------------------------------------------------------------
def run_cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(["manifests", *argv], out), out.getvalue()


@pytest.mark.parametrize("name", SHIPPED)
def test_the_command_writes_the_manifests_of_each_shipped_machine(name: str) -> None:
    code, text = run_cli(name, "--namespace", "ops", "--image", "reg.example/ctl:1")
    assert code == 0
    docs = list(yaml.safe_load_all(text))
    assert docs == manifests([machine(name)], namespace="ops", image="reg.example/ctl:1")
    kinds = [d["kind"] for d in docs]
    assert ("CustomResourceDefinition" in kinds) == (name in DEFINED)
    assert kinds[-1] == "Deployment"


def test_the_command_writes_one_file_each_into_a_folder(tmp_path: Path) -> None:
    code, text = run_cli("job", "workflow", "-o", str(tmp_path / "out"))
    assert code == 0
    files = sorted((tmp_path / "out").iterdir())
    assert [p.name for p in files] == [
        "01-customresourcedefinition-jobs.nvcre.nvidia.com.yaml",
        "02-customresourcedefinition-workflows.nvcre.nvidia.com.yaml",
        "03-serviceaccount-lifecycle.yaml",
        "04-clusterrole-lifecycle.yaml",
        "05-clusterrolebinding-lifecycle.yaml",
        "06-role-lifecycle.yaml",
        "07-rolebinding-lifecycle.yaml",
        "08-deployment-lifecycle.yaml",
    ]
    assert text.splitlines() == [str(p) for p in files]
    assert to_yaml(manifests([JOB, machine("workflow")])) == "---\n".join(
        p.read_text() for p in files
    )


def test_the_command_refuses_a_bad_machine_a_bad_namespace_and_an_unwritable_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli("nope") == (2, "")
    assert re.search(r"unknown machine 'nope'; known: .*job", capsys.readouterr().err)
    assert run_cli("job", "--namespace", "NOT OK") == (2, "")
    assert "namespace" in capsys.readouterr().err
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert run_cli("job", "-o", str(blocker)) == (2, "")
    assert "cannot write" in capsys.readouterr().err
    assert run_cli("math:pi")[0] == 2  # a reference naming no machine
    assert "names no machines" in capsys.readouterr().err


def test_the_command_runs_on_the_core_install_without_any_sdk() -> None:
    """No extra needed: with the optional SDKs unimportable (``kubernetes`` among them) the
    command writes the same YAML."""
    root = Path(__file__).resolve().parents[1]
    script = str(root / "scripts" / "core_check.py")
    done = subprocess.run(
        [sys.executable, script, "--run", "--block", "lifecycle", "manifests", "job", "pod"],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert list(yaml.safe_load_all(done.stdout)) == manifests([JOB, POD])
