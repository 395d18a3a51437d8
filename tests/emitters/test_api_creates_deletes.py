"""Creating and deleting objects through the fake API server's API (issue 38): POST to a
collection and DELETE on an object, for namespaced and cluster-scoped custom resources and
Pods, driven by the real ``kubernetes`` client; each answer's status code and what a watch
sees. Out-of-band :meth:`FakeApiServer.add_object` / ``remove_object`` share the code: a
property replays a mix of both against the watch log."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lifecycle._testing.fake_api.objects import ObjectStore, Resource
from lifecycle._testing.fake_api.schema import conditions_crd_schema
from lifecycle.testing import FakeApiServer

kubernetes_client = pytest.importorskip("kubernetes.client")
kubernetes_watch = pytest.importorskip("kubernetes.watch")
ApiException = kubernetes_client.ApiException

GROUP, VERSION = "batch.example.com", "v1"
JOBS_PATH = f"/apis/{GROUP}/{VERSION}/namespaces/ml/jobs"
CLUSTER_PATH = f"/apis/{GROUP}/{VERSION}/clusterjobs"
PODS_PATH = "/api/v1/namespaces/ml/pods"
CONDITION = {
    "type": "Ready",
    "status": "True",
    "reason": "Done",
    "message": "",
    "lastTransitionTime": "2026-11-30T10:00:00Z",
}


def schema(kind: str) -> dict[str, Any]:
    """A conditions status and a spec whose ``image`` is a string."""
    out = conditions_crd_schema(kind)
    out["properties"]["spec"] = {"type": "object", "properties": {"image": {"type": "string"}}}
    return out


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as s:
        s.register_crd(GROUP, VERSION, "jobs", "Job", schema("Job"))
        s.register_crd(
            GROUP, VERSION, "clusterjobs", "ClusterJob", schema("ClusterJob"), namespaced=False
        )
        yield s


@pytest.fixture
def custom(server: FakeApiServer) -> Iterator[Any]:
    configuration = server.configuration()
    configuration.retries = False
    api = kubernetes_client.ApiClient(configuration)
    yield kubernetes_client.CustomObjectsApi(api)
    api.close()


def job(name: str = "", kind: str = "Job", **metadata: Any) -> dict[str, Any]:
    meta = {"name": name, **metadata} if name else dict(metadata)
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": kind,
        "metadata": meta,
        "spec": {"image": "busybox"},
        "status": {"conditions": [CONDITION]},
    }


def watch(custom: Any, path: str, since: str) -> list[tuple[str, dict[str, Any]]]:
    """One watch of ``path`` from ``since``: (type, object) of every event until it ends."""
    params = [("watch", "true"), ("timeoutSeconds", "1"), ("resourceVersion", since)]
    response = custom.api_client.call_api(
        path, "GET", query_params=params, _preload_content=False, _return_http_data_only=True
    )
    lines = kubernetes_watch.watch.iter_resp_lines(response)
    return [(e["type"], e["object"]) for e in map(json.loads, lines)]


def revision(custom: Any, path: str) -> str:
    response = custom.api_client.call_api(
        path, "GET", _preload_content=False, _return_http_data_only=True
    )
    return str(json.loads(response.data)["metadata"]["resourceVersion"])


def refused(call: Any, *args: Any, **kwargs: Any) -> tuple[int, dict[str, Any]]:
    with pytest.raises(ApiException) as e:
        call(*args, **kwargs)
    return e.value.status, json.loads(e.value.body)


# -- create --------------------------------------------------------------------------------------
def test_a_create_assigns_the_system_metadata_ignores_status_and_is_watched(
    server: FakeApiServer, custom: Any
) -> None:
    since = revision(custom, JOBS_PATH)
    made = custom.create_namespaced_custom_object(
        GROUP, VERSION, "ml", "jobs", job("a", labels={"app": "x"}, uid="mine")
    )
    meta = made["metadata"]
    assert (meta["name"], meta["namespace"], meta["labels"]) == ("a", "ml", {"app": "x"})
    assert meta["uid"] != "mine"  # the server's, not the body's
    assert meta["generation"] == 1
    assert meta["creationTimestamp"].endswith("Z")
    assert int(meta["resourceVersion"]) > int(since)
    assert "status" not in made  # the status subresource owns it
    assert server.object("jobs", "ml", "a") == made
    assert server.writes == 1
    ((kind, seen),) = watch(custom, JOBS_PATH, since)
    assert (kind, seen) == ("ADDED", made)


def test_a_taken_name_is_already_exists_and_changes_nothing(
    server: FakeApiServer, custom: Any
) -> None:
    made = custom.create_namespaced_custom_object(GROUP, VERSION, "ml", "jobs", job("a"))
    code, body = refused(
        custom.create_namespaced_custom_object, GROUP, VERSION, "ml", "jobs", job("a")
    )
    assert (code, body["reason"]) == (409, "AlreadyExists")
    assert body["details"] == {"name": "a", "group": GROUP, "kind": "jobs"}
    assert server.object("jobs", "ml", "a") == made


def test_generate_name_makes_a_name_and_no_name_is_invalid(
    server: FakeApiServer, custom: Any
) -> None:
    made = custom.create_namespaced_custom_object(
        GROUP, VERSION, "ml", "jobs", job(generateName="run-")
    )
    name = made["metadata"]["name"]
    assert name.startswith("run-")
    assert len(name) > len("run-")
    assert server.object("jobs", "ml", name) is not None
    code, body = refused(
        custom.create_namespaced_custom_object, GROUP, VERSION, "ml", "jobs", job()
    )
    assert (code, body["reason"]) == (422, "Invalid")
    assert body["details"]["causes"][0]["field"] == "metadata.name"


def test_a_create_is_validated_by_the_schema_and_a_refused_one_leaves_nothing(
    server: FakeApiServer, custom: Any
) -> None:
    bad = job("bad")
    bad["spec"] = {"image": 7}  # a string in the schema
    code, body = refused(custom.create_namespaced_custom_object, GROUP, VERSION, "ml", "jobs", bad)
    assert (code, body["reason"]) == (422, "Invalid")
    assert server.object("jobs", "ml", "bad") is None
    wrong = job("w", kind="Other")
    code, _ = refused(custom.create_namespaced_custom_object, GROUP, VERSION, "ml", "jobs", wrong)
    assert code == 400
    elsewhere = job("e", namespace="other")
    code, _ = refused(
        custom.create_namespaced_custom_object, GROUP, VERSION, "ml", "jobs", elsewhere
    )
    assert code == 400
    code, _ = refused(
        custom.create_namespaced_custom_object, GROUP, VERSION, "ml", "jobs", job("Upper")
    )
    assert code == 422
    assert server.writes == 0


def test_a_cluster_scoped_object_is_created_and_deleted_without_a_namespace(
    server: FakeApiServer, custom: Any
) -> None:
    since = revision(custom, CLUSTER_PATH)
    made = custom.create_cluster_custom_object(
        GROUP, VERSION, "clusterjobs", job("c", kind="ClusterJob")
    )
    assert "namespace" not in made["metadata"]
    assert server.object("clusterjobs", "", "c") == made
    custom.delete_cluster_custom_object(GROUP, VERSION, "clusterjobs", "c")
    assert server.object("clusterjobs", "", "c") is None
    events = watch(custom, CLUSTER_PATH, since)
    assert [kind for kind, _ in events] == ["ADDED", "DELETED"]


def test_a_pod_is_created_without_its_status_and_needs_containers(
    server: FakeApiServer, custom: Any
) -> None:
    core = kubernetes_client.CoreV1Api(custom.api_client)
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p0"},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
        "status": {"phase": "Running"},
    }
    made = core.create_namespaced_pod("ml", body)
    assert made.metadata.uid
    assert made.metadata.generation == 1
    assert made.status is None or made.status.phase is None
    assert "status" not in (server.object("pods", "ml", "p0") or {"status": 1})
    empty = {"metadata": {"name": "p1"}, "spec": {"containers": []}}
    code, answer = refused(core.create_namespaced_pod, "ml", empty)
    assert (code, answer["reason"]) == (422, "Invalid")
    assert server.object("pods", "ml", "p1") is None
    gone = core.delete_namespaced_pod("p0", "ml")
    assert gone.metadata.name == "p0"  # a Pod's delete answers the object
    assert server.object("pods", "ml", "p0") is None


# -- delete --------------------------------------------------------------------------------------
def test_a_delete_removes_the_object_and_a_watch_sees_its_last_state(
    server: FakeApiServer, custom: Any
) -> None:
    made = custom.create_namespaced_custom_object(GROUP, VERSION, "ml", "jobs", job("a"))
    status = {"status": {"conditions": [CONDITION]}}
    last = custom.patch_namespaced_custom_object_status(GROUP, VERSION, "ml", "jobs", "a", status)
    since = last["metadata"]["resourceVersion"]
    answer = custom.delete_namespaced_custom_object(GROUP, VERSION, "ml", "jobs", "a")
    assert answer["status"] == "Success"
    assert answer["details"]["uid"] == made["metadata"]["uid"]
    assert server.object("jobs", "ml", "a") is None
    ((kind, seen),) = watch(custom, JOBS_PATH, since)
    assert kind == "DELETED"
    assert seen["status"] == last["status"]
    assert int(seen["metadata"]["resourceVersion"]) > int(since)
    code, body = refused(custom.delete_namespaced_custom_object, GROUP, VERSION, "ml", "jobs", "a")
    assert (code, body["reason"]) == (404, "NotFound")


@pytest.mark.parametrize("field", ["uid", "resourceVersion"])
def test_a_delete_whose_precondition_fails_is_a_conflict_and_deletes_nothing(
    server: FakeApiServer, custom: Any, field: str
) -> None:
    made = custom.create_namespaced_custom_object(GROUP, VERSION, "ml", "jobs", job("a"))
    options = kubernetes_client.V1DeleteOptions(preconditions={field: "not-it"})
    code, body = refused(
        custom.delete_namespaced_custom_object, GROUP, VERSION, "ml", "jobs", "a", body=options
    )
    assert (code, body["reason"]) == (409, "Conflict")
    assert "Precondition failed" in body["message"]
    assert server.object("jobs", "ml", "a") == made
    current = {field: made["metadata"][field]}
    options = kubernetes_client.V1DeleteOptions(preconditions=current)
    custom.delete_namespaced_custom_object(GROUP, VERSION, "ml", "jobs", "a", body=options)
    assert server.object("jobs", "ml", "a") is None


def test_the_status_subresource_cannot_be_deleted(server: FakeApiServer, custom: Any) -> None:
    custom.create_namespaced_custom_object(GROUP, VERSION, "ml", "jobs", job("a"))
    with pytest.raises(ApiException) as e:
        custom.api_client.call_api(f"{JOBS_PATH}/a/status", "DELETE")
    assert e.value.status == 405
    assert server.object("jobs", "ml", "a") is not None


# -- both paths are one --------------------------------------------------------------------------
_STEPS = st.lists(
    st.tuples(
        st.sampled_from(["post", "add", "delete", "remove"]),
        st.sampled_from(["a", "b", "c"]),
        st.booleans(),  # namespaced or cluster-scoped
    ),
    max_size=12,
)


@settings(max_examples=40, deadline=None)
@given(steps=_STEPS)
def test_the_watch_log_replays_to_the_objects_whichever_path_wrote(
    steps: list[tuple[str, str, bool]],
) -> None:
    """Creates and deletes through the API and out of band, mixed: replaying every ``ADDED``
    and ``DELETED`` in order gives exactly the stored objects; a name's second create is 409,
    a delete of a missing one 404, and neither writes a change."""
    store = ObjectStore()
    for plural, kind, namespaced in (("jobs", "Job", True), ("clusterjobs", "ClusterJob", False)):
        store.register(Resource(GROUP, VERSION, plural, kind, namespaced, schema(kind)))
    for step, name, namespaced in steps:
        plural, path = ("jobs", JOBS_PATH) if namespaced else ("clusterjobs", CLUSTER_PATH)
        namespace = "ml" if namespaced else ""
        there = (plural, namespace, name) in store.objects
        changes = len(store.changes)
        if step == "post":
            body = job(name, kind="Job" if namespaced else "ClusterJob")
            code, _, _ = store.serve("POST", path, "application/json", json.dumps(body).encode())
            assert code == (409 if there else 201)
        elif step == "add":
            if there:
                continue
            store.add(plural, namespace, name, uid=None, spec={}, status=None, labels=None)
        elif step == "delete":
            code, _, _ = store.serve("DELETE", f"{path}/{name}", "application/json", b"")
            assert code == (200 if there else 404)
        else:
            store.remove(plural, namespace, name)
        assert len(store.changes) == changes + (step in ("post", "add") and not there) + (
            step in ("delete", "remove") and there
        )
    replayed: dict[tuple[str, str, str], dict[str, Any]] = {}
    for _, kind, plural, namespace, obj in store.changes:
        key = (plural, namespace, obj["metadata"]["name"])
        if kind == "ADDED":
            assert key not in replayed
            replayed[key] = obj
        else:
            assert kind == "DELETED"
            assert replayed.pop(key)["metadata"]["uid"] == obj["metadata"]["uid"]
    assert replayed == store.objects
