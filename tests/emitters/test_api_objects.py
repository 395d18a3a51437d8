"""The fake API server's objects and status subresource
(:mod:`lifecycle._testing.fake_api.objects`), driven by the
real ``kubernetes`` client: each API convention the fake claims gets a test here, so a store
tested against the fake is tested against the conventions, not against the fake's habits."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import urllib3
from hypothesis import given, settings
from hypothesis import strategies as st

from lifecycle._testing.fake_api.objects import ETCD_LIMIT
from lifecycle._testing.fake_api.schema import (
    conditions_crd_schema,
    json_patch,
    merge_patch,
    nodeclaim_crd_schema,
)
from lifecycle.testing import FakeApiServer

kubernetes_client = pytest.importorskip("kubernetes.client")
ApiException = kubernetes_client.ApiException

GROUP, VERSION = "karpenter.sh", "v1"
NODECLAIM_SPEC = {
    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
    "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}],
}
READY = {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-30T10:00:00Z"}


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    s = FakeApiServer()
    s.register_crd(GROUP, VERSION, "nodeclaims", "NodeClaim", nodeclaim_crd_schema())
    s.register_crd("batch.example.com", "v1", "jobs", "Job", conditions_crd_schema("Job"))
    yield s
    s.close()


@pytest.fixture
def api(server: FakeApiServer) -> Iterator[Any]:
    config = kubernetes_client.Configuration()
    config.host = server.url
    config.retries = False
    client = kubernetes_client.ApiClient(config)
    yield client
    client.close()


def core(api: Any) -> Any:
    return kubernetes_client.CoreV1Api(api)


def custom(api: Any) -> Any:
    return kubernetes_client.CustomObjectsApi(api)


def raw(
    api: Any,
    method: str,
    path: str,
    body: Any = None,
    *,
    content_type: str = "application/json",
    query: list[tuple[str, str]] | None = None,
) -> tuple[int, Any, Any]:
    """A raw request through ``ApiClient.call_api``: (status, decoded body, headers)."""
    try:
        response = api.call_api(
            path,
            method,
            query_params=query or [],
            header_params={"Content-Type": content_type, "Accept": "application/json"},
            body=body,
            _preload_content=False,
        )
    except ApiException as e:
        return e.status, json.loads(e.body), e.headers
    return response.status, json.loads(response.data), response.headers


def nodeclaim(server: FakeApiServer, name: str = "nc-0", **kw: Any) -> dict[str, Any]:
    return server.add_object("nodeclaims", "ml", name, spec=NODECLAIM_SPEC, **kw)


def stored(server: FakeApiServer, resource: str, namespace: str, name: str) -> dict[str, Any]:
    found = server.object(resource, namespace, name)
    assert found is not None
    return found


NC_PATH = "/apis/karpenter.sh/v1/namespaces/ml/nodeclaims/nc-0"
POD_PATH = "/api/v1/namespaces/ml/pods/p0"


# -- objects out of band ----------------------------------------------------------------------
def test_add_object_sets_the_system_metadata_and_returns_a_copy(server: FakeApiServer) -> None:
    made = nodeclaim(server, uid="u-1", labels={"app": "x"})
    meta = made["metadata"]
    assert (made["apiVersion"], made["kind"]) == ("karpenter.sh/v1", "NodeClaim")
    assert (meta["uid"], meta["generation"], meta["labels"]) == ("u-1", 1, {"app": "x"})
    assert meta["creationTimestamp"].endswith("Z")
    assert int(meta["resourceVersion"]) > 10**6
    assert made["spec"]["expireAfter"] == "720h"  # the schema's default
    made["spec"]["nodeClassRef"]["name"] = "changed"
    assert stored(server, "nodeclaims", "ml", "nc-0")["spec"]["nodeClassRef"]["name"] == "default"
    pod = server.add_object("pods", "ml", "p0")
    assert pod["kind"] == "Pod"
    assert pod["metadata"]["uid"] != meta["uid"]
    server.remove_object("pods", "ml", "p0")
    assert server.object("pods", "ml", "p0") is None
    assert server.writes == 0


def test_add_object_refuses_what_the_api_would(server: FakeApiServer) -> None:
    with pytest.raises(ValueError, match=r"spec\.nodeClassRef: Required value"):
        server.add_object("nodeclaims", "ml", "bad", spec={"requirements": []})
    with pytest.raises(KeyError, match="register its CRD"):
        server.add_object("widgets", "ml", "w")


# -- reads -----------------------------------------------------------------------------------
def test_reads_through_the_typed_client_and_lists(server: FakeApiServer, api: Any) -> None:
    server.add_object("pods", "ml", "p0", status={"phase": "Pending"})
    server.add_object("pods", "other", "p1", labels={"team": "a"})
    nodeclaim(server)
    pod = core(api).read_namespaced_pod_status("p0", "ml")
    assert (pod.metadata.name, pod.status.phase) == ("p0", "Pending")
    assert core(api).read_namespaced_pod("p0", "ml").spec.containers[0].image == "busybox"
    every = core(api).list_pod_for_all_namespaces()
    assert sorted(p.metadata.name for p in every.items) == ["p0", "p1"]
    assert every.metadata.resource_version
    assert [p.metadata.name for p in core(api).list_namespaced_pod("ml").items] == ["p0"]
    assert [
        p.metadata.name for p in core(api).list_namespaced_pod("ml", label_selector="team=a").items
    ] == []
    got = custom(api).get_namespaced_custom_object(GROUP, VERSION, "ml", "nodeclaims", "nc-0")
    assert got["metadata"]["uid"] == stored(server, "nodeclaims", "ml", "nc-0")["metadata"]["uid"]
    listed = custom(api).list_cluster_custom_object(GROUP, VERSION, "nodeclaims")
    assert listed["kind"] == "NodeClaimList"
    assert listed["items"][0]["kind"] == "NodeClaim"
    code, body, _ = raw(api, "GET", "/apis/karpenter.sh/v1/namespaces/ml/nodeclaims")
    assert code == 200
    assert [i["metadata"]["name"] for i in body["items"]] == ["nc-0"]


def test_a_missing_object_or_path_is_404_with_a_status(server: FakeApiServer, api: Any) -> None:
    with pytest.raises(ApiException) as e:
        core(api).read_namespaced_pod_status("nope", "ml")
    body = json.loads(e.value.body)
    assert (e.value.status, body["kind"], body["reason"]) == (404, "Status", "NotFound")
    assert body["details"] == {"name": "nope", "kind": "pods"}
    assert body["message"] == 'pods "nope" not found'
    code, body, _ = raw(api, "PUT", NC_PATH + "/status", {"metadata": {"name": "nc-0"}})
    assert (code, body["details"]) == (404, {"name": "nc-0", "kind": "nodeclaims", "group": GROUP})
    for path in (
        "/apis/karpenter.sh/v1/namespaces/ml/widgets/x",
        "/nothing",
        "/api/v1/namespaces/ml/pods/p0/exec",
    ):
        code, body, _ = raw(api, "GET", path)
        assert (code, body["reason"]) == (404, "NotFound")


# -- resourceVersion -----------------------------------------------------------------------------
def test_the_resource_version_is_opaque_and_changes_on_every_write(
    server: FakeApiServer, api: Any
) -> None:
    nodeclaim(server)
    seen = [stored(server, "nodeclaims", "ml", "nc-0")["metadata"]["resourceVersion"]]
    for i in range(5):
        status = {"status": {"nodeName": f"node-{i}"}}
        got = custom(api).patch_namespaced_custom_object_status(
            GROUP, VERSION, "ml", "nodeclaims", "nc-0", status
        )
        seen.append(got["metadata"]["resourceVersion"])
    assert len(set(seen)) == 6
    assert server.writes == 5
    assert all(isinstance(v, str) and len(v) >= 10 for v in seen)
    steps = {int(b) - int(a) for a, b in itertools.pairwise(seen)}
    assert steps != {1}  # not a per-object count a client could do arithmetic on


def test_a_no_op_update_is_no_write(server: FakeApiServer, api: Any) -> None:
    made = nodeclaim(server, status={"nodeName": "n"})
    code, body, _ = raw(api, "PUT", NC_PATH + "/status", made)
    assert code == 200
    assert body["metadata"]["resourceVersion"] == made["metadata"]["resourceVersion"]
    assert server.writes == 0


def test_a_stale_resource_version_is_409_and_none_is_unconditional(
    server: FakeApiServer, api: Any
) -> None:
    server.add_object("pods", "ml", "p0")
    pod = core(api).read_namespaced_pod_status("p0", "ml")
    stale = pod.metadata.resource_version
    pod.status = kubernetes_client.V1PodStatus(phase="Running")
    core(api).replace_namespaced_pod_status("p0", "ml", pod)
    pod.status.phase = "Succeeded"
    with pytest.raises(ApiException) as e:
        core(api).replace_namespaced_pod_status("p0", "ml", pod)
    body = json.loads(e.value.body)
    assert (e.value.status, body["reason"], body["details"]) == (
        409,
        "Conflict",
        {"name": "p0", "kind": "pods"},
    )
    assert body["message"] == (
        'Operation cannot be fulfilled on pods "p0": the object has been modified; please apply '
        "your changes to the latest version and try again"
    )
    assert stored(server, "pods", "ml", "p0")["status"] == {"phase": "Running"}
    pod.metadata.resource_version = None
    assert core(api).replace_namespaced_pod_status("p0", "ml", pod).status.phase == "Succeeded"
    # a merge patch's resourceVersion is a precondition too
    code, body, _ = raw(
        api,
        "PATCH",
        POD_PATH + "/status",
        {"metadata": {"resourceVersion": stale}, "status": {"phase": "Failed"}},
        content_type="application/merge-patch+json",
    )
    assert (code, body["reason"]) == (409, "Conflict")
    assert stored(server, "pods", "ml", "p0")["status"] == {"phase": "Succeeded"}


def test_a_custom_resource_put_needs_a_resource_version(server: FakeApiServer, api: Any) -> None:
    made = nodeclaim(server)
    del made["metadata"]["resourceVersion"]
    made["status"] = {"nodeName": "n"}
    for path in (NC_PATH + "/status", NC_PATH):
        code, body, _ = raw(api, "PUT", path, made)
        assert code == 422
        assert body["details"]["causes"] == [
            {
                "reason": "FieldValueInvalid",
                "message": "Invalid value: 0x0: must be specified for an update",
                "field": "metadata.resourceVersion",
            }
        ]
    assert server.writes == 0


def test_a_changed_uid_is_a_failed_precondition(server: FakeApiServer, api: Any) -> None:
    made = nodeclaim(server, uid="uid-a")
    made["metadata"]["uid"] = "uid-b"
    made["status"] = {"nodeName": "n"}
    for path in (NC_PATH + "/status", NC_PATH):
        code, body, _ = raw(api, "PUT", path, made)
        assert (code, body["reason"]) == (409, "Conflict")
        assert body["message"] == (
            'Operation cannot be fulfilled on nodeclaims.karpenter.sh "nc-0": Precondition failed: '
            "UID in precondition: uid-b, UID in object meta: uid-a"
        )
    # a patch carries no uid precondition, and the status subresource ignores metadata
    code, body, _ = raw(
        api,
        "PATCH",
        NC_PATH + "/status",
        {"metadata": {"uid": "uid-c"}, "status": {"nodeName": "m"}},
        content_type="application/merge-patch+json",
    )
    assert (code, body["metadata"]["uid"], body["status"]) == (200, "uid-a", {"nodeName": "m"})


# -- status and main resource -------------------------------------------------------------------
def test_the_status_subresource_ignores_spec_and_metadata(server: FakeApiServer, api: Any) -> None:
    made = nodeclaim(server, labels={"a": "1"})
    made["spec"]["nodeClassRef"]["name"] = "other"
    made["metadata"]["labels"] = {"a": "2"}
    made["metadata"]["generation"] = 9
    made["status"] = {"nodeName": "n"}
    got = custom(api).replace_namespaced_custom_object_status(
        GROUP, VERSION, "ml", "nodeclaims", "nc-0", made
    )
    assert got["spec"]["nodeClassRef"]["name"] == "default"
    assert got["status"] == {"nodeName": "n"}
    assert (got["metadata"]["labels"], got["metadata"]["generation"]) == ({"a": "1"}, 1)
    del made["status"]  # a status PUT without a status clears it
    made["metadata"]["resourceVersion"] = got["metadata"]["resourceVersion"]
    code, body, _ = raw(api, "PUT", NC_PATH + "/status", made)
    assert code == 200
    assert "status" not in body


def test_the_main_resource_ignores_status_and_bumps_generation_only_on_spec(
    server: FakeApiServer, api: Any
) -> None:
    made = nodeclaim(server, status={"nodeName": "n"})
    made["status"] = {"nodeName": "elsewhere"}
    made["metadata"]["labels"] = {"team": "a"}
    got = custom(api).replace_namespaced_custom_object(
        GROUP, VERSION, "ml", "nodeclaims", "nc-0", made
    )
    assert got["status"] == {"nodeName": "n"}
    assert got["metadata"]["labels"] == {"team": "a"}
    assert got["metadata"]["generation"] == 1  # labels are no spec
    got["spec"]["nodeClassRef"]["name"] = "other"
    got = custom(api).replace_namespaced_custom_object(
        GROUP, VERSION, "ml", "nodeclaims", "nc-0", got
    )
    assert got["metadata"]["generation"] == 2
    got["status"] = {"nodeName": "m"}
    got = custom(api).replace_namespaced_custom_object_status(
        GROUP, VERSION, "ml", "nodeclaims", "nc-0", got
    )
    assert got["metadata"]["generation"] == 2  # a status write never bumps it
    # a Pod likewise, and its spec is immutable but for images
    server.add_object("pods", "ml", "p0", status={"phase": "Pending"})
    pod = core(api).read_namespaced_pod("p0", "ml")
    pod.status.phase = "Running"
    pod.spec.containers[0].image = "busybox:2"
    pod = core(api).replace_namespaced_pod("p0", "ml", pod)
    assert (pod.status.phase, pod.metadata.generation) == ("Pending", 2)
    pod.spec.containers[0].name = "renamed"
    with pytest.raises(ApiException) as e:
        core(api).replace_namespaced_pod("p0", "ml", pod)
    assert e.value.status == 422
    assert "pod updates may not change" in e.value.body


def test_a_body_for_another_object_is_400(server: FakeApiServer, api: Any) -> None:
    made = nodeclaim(server)
    for change, word in (({"name": "nc-1"}, "name"), ({"namespace": "other"}, "namespace")):
        body = {**made, "metadata": {**made["metadata"], **change}}
        code, answer, _ = raw(api, "PUT", NC_PATH + "/status", body)
        assert (code, answer["reason"]) == (400, "BadRequest")
        assert word in answer["message"]
    code, answer, _ = raw(
        api, "PUT", NC_PATH + "/status", {k: v for k, v in made.items() if k != "kind"}
    )
    assert code == 400
    assert "'Kind' is missing" in answer["message"]


# -- merge and JSON patch ------------------------------------------------------------------------
def test_merge_patch_deletes_on_null_merges_maps_and_replaces_lists(
    server: FakeApiServer, api: Any
) -> None:
    other = {"type": "Drifted", "status": "False", "lastTransitionTime": "2026-11-30T10:00:00Z"}
    nodeclaim(server, status={"nodeName": "n", "imageID": "ami-1", "conditions": [READY, other]})
    patch = {"status": {"imageID": None, "providerID": "aws:///i-1", "conditions": [other]}}
    got = custom(api).patch_namespaced_custom_object_status(
        GROUP, VERSION, "ml", "nodeclaims", "nc-0", patch
    )
    assert got["status"] == {"nodeName": "n", "providerID": "aws:///i-1", "conditions": [other]}
    code, body, _ = raw(
        api,
        "PATCH",
        NC_PATH + "/status",
        {"spec": {"requirements": []}},
        content_type="application/merge-patch+json",
    )
    assert code == 200
    assert body["spec"]["requirements"] == NODECLAIM_SPEC["requirements"]


def test_json_patch_test_add_replace_remove(server: FakeApiServer, api: Any) -> None:
    server.add_object("pods", "ml", "p0", status={"phase": "Pending", "message": "m"})
    ops = [
        {"op": "test", "path": "/status/phase", "value": "Pending"},
        {"op": "replace", "path": "/status/phase", "value": "Running"},
        {"op": "add", "path": "/status/conditions", "value": [{"type": "Ready", "status": "True"}]},
        {"op": "remove", "path": "/status/message"},
    ]
    pod = core(api).patch_namespaced_pod_status("p0", "ml", ops)
    assert pod.status.phase == "Running"
    assert pod.status.message is None
    assert [c.type for c in pod.status.conditions] == ["Ready"]
    failing = [
        {"op": "test", "path": "/status/phase", "value": "Pending"},
        {"op": "remove", "path": "/status/phase"},
    ]
    code, body, _ = raw(
        api, "PATCH", POD_PATH + "/status", failing, content_type="application/json-patch+json"
    )
    assert code == 422
    assert "test failed" in body["message"]
    assert stored(server, "pods", "ml", "p0")["status"]["phase"] == "Running"


def test_other_patch_types_are_415(server: FakeApiServer, api: Any) -> None:
    nodeclaim(server)
    for kind in (
        "application/strategic-merge-patch+json",
        "application/apply-patch+yaml",
        "text/plain",
    ):
        code, body, _ = raw(api, "PATCH", NC_PATH + "/status", '{"status": {}}', content_type=kind)
        assert (code, body["reason"]) == (415, "UnsupportedMediaType")


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text("ab", max_size=2),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text("abc", max_size=2), inner, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(target=_JSON, patch=_JSON)
def test_merge_patch_follows_rfc_7386(target: Any, patch: Any) -> None:
    merged = merge_patch(target, patch)
    if not isinstance(patch, dict):
        assert merged == patch
        return
    assert isinstance(merged, dict)
    for key, value in patch.items():
        if value is None:
            assert key not in merged
        elif not isinstance(value, dict):
            assert merged[key] == value  # lists and scalars replace
    base = target if isinstance(target, dict) else {}
    for key in set(base) - set(patch):
        assert merged[key] == base[key]
    assert merge_patch(merged, patch) == merged  # idempotent


@settings(max_examples=100, deadline=None)
@given(doc=st.dictionaries(st.text("abc", min_size=1, max_size=2), _JSON, max_size=4), value=_JSON)
def test_json_patch_add_then_remove_is_the_identity(doc: dict[str, Any], value: Any) -> None:
    added = json_patch(doc, [{"op": "add", "path": "/new~1key", "value": value}])
    assert added["new/key"] == value
    assert (
        json_patch(
            added,
            [
                {"op": "test", "path": "/new~1key", "value": value},
                {"op": "remove", "path": "/new~1key"},
            ],
        )
        == doc
    )


# -- validation ----------------------------------------------------------------------------------
def test_a_custom_status_is_validated_with_field_paths(server: FakeApiServer, api: Any) -> None:
    nodeclaim(server)
    bad = [
        {
            "type": "Ready",
            "status": "Maybe",
            "lastTransitionTime": "yesterday",
            "message": "x" * 32769,
        },
        {
            "type": "not a type!",
            "status": "True",
            "lastTransitionTime": "2026-11-30T10:00:00Z",
            "reason": "has space",
            "observedGeneration": -1,
        },
        {"status": "True"},
        READY,
        READY,
    ]
    code, body, _ = raw(
        api,
        "PATCH",
        NC_PATH + "/status",
        {"status": {"conditions": bad, "nodeName": 7}},
        content_type="application/merge-patch+json",
    )
    assert (code, body["reason"]) == (422, "Invalid")
    causes = {(c["field"], c["reason"]) for c in body["details"]["causes"]}
    assert causes == {
        ("status.conditions[0].status", "FieldValueNotSupported"),
        ("status.conditions[0].lastTransitionTime", "FieldValueInvalid"),
        ("status.conditions[0].message", "FieldValueTooLong"),
        ("status.conditions[1].type", "FieldValueInvalid"),
        ("status.conditions[1].reason", "FieldValueInvalid"),
        ("status.conditions[1].observedGeneration", "FieldValueInvalid"),
        ("status.conditions[2].type", "FieldValueRequired"),
        ("status.conditions[2].lastTransitionTime", "FieldValueRequired"),
        ("status.conditions[3]", "FieldValueDuplicate"),  # a list-map keyed by type
        ("status.conditions[4]", "FieldValueDuplicate"),
        ("status.nodeName", "FieldValueTypeInvalid"),
    }
    assert (
        "status.conditions[0].message: Too long: may not be more than 32768 bytes"
        in body["message"]
    )
    assert body["message"].startswith('NodeClaim.karpenter.sh "nc-0" is invalid: [')
    assert "status" not in stored(server, "nodeclaims", "ml", "nc-0")
    assert server.writes == 0


def test_max_items_and_spec_validation_on_the_main_resource(
    server: FakeApiServer, api: Any
) -> None:
    made = nodeclaim(server)
    made["spec"]["requirements"] = [{"key": "k", "operator": "In", "values": ["v"]}] * 101
    code, body, _ = raw(api, "PUT", NC_PATH, made)
    assert code == 422
    assert [(c["field"], c["reason"]) for c in body["details"]["causes"]] == [
        ("spec.requirements", "FieldValueTooMany")
    ]


def test_unknown_custom_fields_are_pruned_unless_preserved(server: FakeApiServer, api: Any) -> None:
    nodeclaim(server)
    patch = {
        "status": {"nodeName": "n", "mystery": 1, "conditions": [{**READY, "extra": "x"}]},
        "top": 1,
    }
    code, body, headers = raw(
        api, "PATCH", NC_PATH + "/status", patch, content_type="application/merge-patch+json"
    )
    assert code == 200
    assert body["status"] == {"nodeName": "n", "conditions": [READY]}
    warnings = headers.getlist("Warning") if hasattr(headers, "getlist") else [headers["Warning"]]
    assert sorted(warnings) == sorted(
        f'299 - "unknown field \\"{f}\\""'
        for f in ("top", "status.mystery", "status.conditions[0].extra")
    )
    server.add_object("jobs", "ml", "j0", spec={"anything": {"goes": 1}})
    job = custom(api).patch_namespaced_custom_object_status(
        "batch.example.com",
        "v1",
        "ml",
        "jobs",
        "j0",
        {"status": {"phase": "Running", "conditions": [READY]}},
    )
    assert job["status"] == {"phase": "Running", "conditions": [READY]}
    assert job["spec"] == {"anything": {"goes": 1}}
    code, body, _ = raw(
        api,
        "PATCH",
        "/apis/batch.example.com/v1/namespaces/ml/jobs/j0/status",
        {"status": {"conditions": [{**READY, "status": "Maybe", "extra": 1}]}},
        content_type="application/merge-patch+json",
    )
    assert code == 422
    assert body["details"]["causes"][0]["field"] == "status.conditions[0].status"


@pytest.mark.parametrize("mode", ["Strict", "Warn", "Ignore"])
def test_field_validation_modes(server: FakeApiServer, api: Any, mode: str) -> None:
    nodeclaim(server)
    server.add_object("pods", "ml", "p0")
    for path, body in (
        (NC_PATH + "/status", {"status": {"nodeName": "n", "x": 1}}),
        (POD_PATH + "/status", {"status": {"phase": "Running", "x": 1}}),
    ):
        code, answer, headers = raw(
            api,
            "PATCH",
            path,
            body,
            content_type="application/merge-patch+json",
            query=[("fieldValidation", mode)],
        )
        if mode == "Strict":
            assert (code, answer["reason"]) == (400, "BadRequest")
            assert answer["message"] == 'strict decoding error: unknown field "status.x"'
            continue
        assert code == 200
        assert "x" not in answer["status"]
        assert headers.get("Warning") == (
            '299 - "unknown field \\"status.x\\""' if mode == "Warn" else None
        )
    assert server.writes == (0 if mode == "Strict" else 2)


def test_a_pod_status_is_decoded_by_the_clients_models(server: FakeApiServer, api: Any) -> None:
    server.add_object("pods", "ml", "p0")
    for status, fragment in (
        ({"phase": 3}, "PodStatus.status.phase of type string"),
        ({"conditions": {"type": "Ready"}}, "[]V1PodCondition"),
        (
            {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "soon"}]},
            "parsing time",
        ),
        ({"containerStatuses": [{"name": "c", "restartCount": "two"}]}, "of type int64"),
    ):
        code, body, _ = raw(
            api,
            "PATCH",
            POD_PATH + "/status",
            {"status": status},
            content_type="application/merge-patch+json",
        )
        assert (code, body["reason"]) == (400, "BadRequest"), body
        assert fragment in body["message"], body
    for condition, field in (
        ({"type": "not a type!", "status": "True"}, "status.conditions[0].type"),
        ({"type": "example.com/Ok", "status": "Yes"}, "status.conditions[0].status"),
    ):
        code, body, _ = raw(
            api,
            "PATCH",
            POD_PATH + "/status",
            {"status": {"conditions": [condition]}},
            content_type="application/merge-patch+json",
        )
        assert code == 422
        assert [c["field"] for c in body["details"]["causes"]] == [field]
        assert body["message"].startswith('Pod "p0" is invalid: ')
    ok = {
        "type": "example.com/Ok",
        "status": "Unknown",
        "lastTransitionTime": "2026-11-30T10:00:00Z",
    }
    code, body, _ = raw(
        api,
        "PATCH",
        POD_PATH + "/status",
        {"status": {"conditions": [ok]}},
        content_type="application/merge-patch+json",
    )
    assert code == 200
    assert body["status"]["conditions"] == [ok]
    assert server.writes == 1


# -- size limits ---------------------------------------------------------------------------------
def test_a_body_over_3_mib_is_413(server: FakeApiServer, api: Any) -> None:
    nodeclaim(server)
    code, body, _ = raw(
        api,
        "PATCH",
        NC_PATH + "/status",
        {"status": {"nodeName": "x" * (3 * 1024 * 1024)}},
        content_type="application/merge-patch+json",
    )
    assert (code, body["reason"]) == (413, "RequestEntityTooLarge")
    assert server.writes == 0


def test_an_object_over_etcds_limit_is_500_and_not_stored(server: FakeApiServer, api: Any) -> None:
    server.register_crd("ex.com", "v1", "notes", "Note", conditions_crd_schema("Note"))
    server.add_object("notes", "ml", "n0")
    path = "/apis/ex.com/v1/namespaces/ml/notes/n0/status"
    code, body, _ = raw(
        api,
        "PATCH",
        path,
        {"status": {"blob": "x" * ETCD_LIMIT}},
        content_type="application/merge-patch+json",
    )
    assert (code, body["message"]) == (500, "etcdserver: request is too large")
    assert "status" not in stored(server, "notes", "ml", "n0")
    assert server.writes == 0
    code, _, _ = raw(
        api,
        "PATCH",
        path,
        {"status": {"blob": "x" * (ETCD_LIMIT - 1000)}},
        content_type="application/merge-patch+json",
    )
    assert code == 200


# -- hostile modes -------------------------------------------------------------------------------
def test_scripted_failures_reach_the_object_paths(server: FakeApiServer, api: Any) -> None:
    nodeclaim(server)
    server.fail_path("/nodeclaims/nc-0/status", 500, (429, {"Retry-After": "1"}))
    for expected in (500, 429):
        with pytest.raises(ApiException) as e:
            custom(api).get_namespaced_custom_object_status(
                GROUP, VERSION, "ml", "nodeclaims", "nc-0"
            )
        assert e.value.status == expected
    assert e.value.headers["Retry-After"] == "1"
    server.fail_when(lambda r: r.method == "PATCH" and "/status" in r.path, "reset", "drop")
    for _ in range(2):
        with pytest.raises(urllib3.exceptions.HTTPError):  # the connection itself fails
            custom(api).patch_namespaced_custom_object_status(
                GROUP, VERSION, "ml", "nodeclaims", "nc-0", {"status": {"nodeName": "n"}}
            )
    assert server.writes == 0
    server.fail_path("/nodeclaims/", ("slow", 0.01), ("drip", 0.0005))
    for _ in range(2):
        got = custom(api).get_namespaced_custom_object(GROUP, VERSION, "ml", "nodeclaims", "nc-0")
        assert got["metadata"]["name"] == "nc-0"
    server.fail_path("/pods/", "hang")
    with pytest.raises(urllib3.exceptions.HTTPError):  # a read timeout
        core(api).read_namespaced_pod("p0", "ml", _request_timeout=0.2)
    assert [r.path for r in server.requests].count(NC_PATH + "/status") == 4


# -- scope, main-resource patch ------------------------------------------------------------------
def test_a_cluster_scoped_crd_is_served_without_a_namespace(api: Any) -> None:
    server = FakeApiServer()
    try:
        config = kubernetes_client.Configuration()
        config.host = server.url
        client = kubernetes_client.CustomObjectsApi(kubernetes_client.ApiClient(config))
        schema = nodeclaim_crd_schema()  # upstream, NodeClaims are cluster-scoped
        server.register_crd(GROUP, VERSION, "nodeclaims", "NodeClaim", schema, namespaced=False)
        made = server.add_object("nodeclaims", "", "nc-0", spec=NODECLAIM_SPEC)
        assert "namespace" not in made["metadata"]
        made["status"] = {"nodeName": "n"}
        got = client.replace_cluster_custom_object_status(
            GROUP, VERSION, "nodeclaims", "nc-0", made
        )
        assert got["status"] == {"nodeName": "n"}
        assert stored(server, "nodeclaims", "", "nc-0")["status"] == {"nodeName": "n"}
        with pytest.raises(ApiException) as e:
            client.get_namespaced_custom_object(GROUP, VERSION, "ml", "nodeclaims", "nc-0")
        assert e.value.status == 404
        client.api_client.close()
    finally:
        server.close()


def test_the_main_resource_takes_patches_but_not_into_status(
    server: FakeApiServer, api: Any
) -> None:
    nodeclaim(server, status={"nodeName": "n"})
    patch = {"metadata": {"labels": {"a": "b"}}, "status": {"nodeName": "m"}}
    got = custom(api).patch_namespaced_custom_object(
        GROUP, VERSION, "ml", "nodeclaims", "nc-0", patch
    )
    assert got["metadata"]["labels"] == {"a": "b"}
    assert got["status"] == {"nodeName": "n"}
    assert got["metadata"]["generation"] == 1
    code, body, _ = raw(api, "DELETE", NC_PATH + "/status")
    assert (code, body["reason"]) == (405, "MethodNotAllowed")


# -- the schema validator, hostile ----------------------------------------------------------------
_CONDITION_TYPES = st.from_regex(r"\A([a-z]{1,5}\.[a-z]{2,3}/)?[A-Z][A-Za-z0-9]{0,12}\Z")
_CONDITION = st.fixed_dictionaries(
    {
        "type": _CONDITION_TYPES,
        "status": st.sampled_from(["True", "False", "Unknown"]),
        "lastTransitionTime": st.datetimes(
            datetime(1970, 1, 1), datetime(9999, 1, 1), timezones=st.just(UTC)
        ).map(lambda d: d.strftime("%Y-%m-%dT%H:%M:%SZ")),
    },
    optional={
        "reason": st.from_regex(r"\A([A-Za-z]([A-Za-z0-9_,:]{0,10}[A-Za-z0-9_])?)?\Z"),
        "message": st.text(max_size=20),
        "observedGeneration": st.integers(0, 2**40),
    },
)
#: one invalid value per field, and the cause the API gives for it
_BROKEN = {
    "type": ("has space", "FieldValueInvalid"),
    "status": ("Maybe", "FieldValueNotSupported"),
    "lastTransitionTime": ("2026-13-01T00:00:00Z", "FieldValueInvalid"),
    "reason": ("1starts-with-digit", "FieldValueInvalid"),
    "message": ("x" * 32769, "FieldValueTooLong"),
    "observedGeneration": (-1, "FieldValueInvalid"),
}


@settings(max_examples=40, deadline=None)
@given(
    conditions=st.lists(_CONDITION, min_size=1, max_size=4, unique_by=lambda c: c["type"]),
    data=st.data(),
)
def test_valid_conditions_are_stored_and_each_broken_field_is_named(
    conditions: list[dict[str, Any]], data: st.DataObject
) -> None:
    server = FakeApiServer()
    try:
        server.register_crd("batch.example.com", "v1", "jobs", "Job", conditions_crd_schema("Job"))
        made = server.add_object("jobs", "ml", "j0")
        config = kubernetes_client.Configuration()
        config.host = server.url
        with kubernetes_client.ApiClient(config) as client:
            path = "/apis/batch.example.com/v1/namespaces/ml/jobs/j0/status"
            body = {**made, "status": {"conditions": conditions}}
            code, got, _ = raw(client, "PUT", path, body)
            assert code == 200, got
            assert got["status"]["conditions"] == conditions
            i = data.draw(st.integers(0, len(conditions) - 1))
            field = data.draw(st.sampled_from(sorted(_BROKEN)))
            value, reason = _BROKEN[field]
            broken = [dict(c) for c in conditions]
            broken[i][field] = value
            body = {**got, "status": {"conditions": broken}}
            code, answer, _ = raw(client, "PUT", path, body)
            assert code == 422, answer
            causes = [(c["field"], c["reason"]) for c in answer["details"]["causes"]]
            assert causes == [(f"status.conditions[{i}].{field}", reason)]
            assert stored(server, "jobs", "ml", "j0")["status"]["conditions"] == conditions
    finally:
        server.close()
