"""``ObjectCache``: the informer-like cache a controller builds its refs, the emitter's
``resolve=`` and the store's ``reader=`` from, over the real ``kubernetes`` client and the
shipped fake API server's list and watch (issue 35, point 5; ADR 0138)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes import client as kubernetes_client  # type: ignore[import-untyped]
from kubernetes import watch as kubernetes_watch

from lifecycle import ObjectRef, Runner
from lifecycle.emitters.kubernetes import ApiNotConfigured, KubernetesEmitter
from lifecycle.machines.pod import CreateRequested
from lifecycle.stores.kubernetes import (
    PODS,
    CustomResource,
    KubernetesStore,
    ObjectCache,
    ObjectChange,
)
from lifecycle.testing import FakeApiServer, nodeclaim_crd_schema

NODECLAIMS = CustomResource("karpenter.sh", "v1", "nodeclaims", namespaced=False)
RESOURCES = {"Pod": PODS, "NodeClaim": NODECLAIMS}
CLAIM_SPEC = {
    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
    "requirements": [],
}
AT = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as s:
        s.register_crd(
            "karpenter.sh",
            "v1",
            "nodeclaims",
            "NodeClaim",
            nodeclaim_crd_schema(),
            namespaced=False,
        )
        yield s


@pytest.fixture
def api(server: FakeApiServer) -> Any:
    return kubernetes_client.ApiClient(server.configuration())


def watch_events(api: Any, path: str, **query: str) -> list[dict[str, Any]]:
    """One watch through the client, its events as the API server sent them."""
    params = [("watch", "true"), ("timeoutSeconds", "1"), *query.items()]
    response = api.call_api(
        path, "GET", query_params=params, _preload_content=False, _return_http_data_only=True
    )
    return [json.loads(line) for line in kubernetes_watch.watch.iter_resp_lines(response)]


# -- the fake's watch ---------------------------------------------------------------------------
def test_a_watch_sees_every_change_after_its_resource_version(
    server: FakeApiServer, api: Any
) -> None:
    server.add_object("pods", "ml", "before", labels={"team": "ml"})
    core = kubernetes_client.CoreV1Api(api)
    listed = core.list_namespaced_pod("ml")
    since = listed.metadata.resource_version
    server.add_object("pods", "ml", "trainer-0", labels={"team": "ml"})
    server.add_object("pods", "other", "elsewhere")
    pod = core.read_namespaced_pod("trainer-0", "ml")
    pod.status = kubernetes_client.V1PodStatus(phase="Pending")
    core.replace_namespaced_pod_status("trainer-0", "ml", pod)
    server.remove_object("pods", "ml", "trainer-0")

    events = watch_events(api, "/api/v1/namespaces/ml/pods", resourceVersion=since)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "trainer-0"),
        ("MODIFIED", "trainer-0"),
        ("DELETED", "trainer-0"),
    ]
    assert events[1]["object"]["status"]["phase"] == "Pending"
    versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert versions == sorted(versions)
    assert versions[0] > int(since)


def test_a_watch_without_a_version_starts_with_what_is_there_and_filters_labels(
    server: FakeApiServer, api: Any
) -> None:
    server.add_object("pods", "ml", "a", labels={"team": "ml"})
    server.add_object("pods", "ml", "b", labels={"team": "web"})
    events = watch_events(api, "/api/v1/pods", labelSelector="team=ml")
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "a")]


def test_a_watch_from_before_a_compaction_is_expired(server: FakeApiServer, api: Any) -> None:
    server.add_object("pods", "ml", "a")
    since = kubernetes_client.CoreV1Api(api).list_pod_for_all_namespaces().metadata
    server.add_object("pods", "ml", "b")
    server.compact()
    (event,) = watch_events(api, "/api/v1/pods", resourceVersion=since.resource_version)
    assert event["type"] == "ERROR"
    assert (event["object"]["code"], event["object"]["reason"]) == (410, "Expired")


# -- the cache ----------------------------------------------------------------------------------
def test_sync_gives_refs_with_the_uids_the_api_server_gave(server: FakeApiServer, api: Any) -> None:
    pod = server.add_object("pods", "ml", "trainer-0")
    claim = server.add_object("nodeclaims", "", "ml-trainer-0", spec=CLAIM_SPEC)
    cache = ObjectCache(api, resources=RESOURCES)
    changes = cache.sync()
    assert {(c.type, c.ref) for c in changes} == {
        ("ADDED", ObjectRef("Pod", "ml", "trainer-0", pod["metadata"]["uid"])),
        ("ADDED", ObjectRef("NodeClaim", "", "ml-trainer-0", claim["metadata"]["uid"])),
    }
    assert cache.ref("Pod", "ml", "trainer-0") == ObjectRef(
        "Pod", "ml", "trainer-0", pod["metadata"]["uid"]
    )
    assert cache.refs("NodeClaim") == [
        ObjectRef("NodeClaim", "", "ml-trainer-0", claim["metadata"]["uid"])
    ]
    assert cache.ref("Pod", "ml", "nobody") is None


def test_resolve_answers_the_uid_and_version_of_the_object_a_ref_names(
    server: FakeApiServer, api: Any
) -> None:
    pod = server.add_object("pods", "ml", "trainer-0")
    claim = server.add_object("nodeclaims", "", "ml-trainer-0", spec=CLAIM_SPEC)
    cache = ObjectCache(api, resources=RESOURCES)
    cache.sync()
    uid, version = pod["metadata"]["uid"], pod["metadata"]["resourceVersion"]
    assert cache.resolve(ObjectRef("Pod", "ml", "trainer-0", uid)) == (uid, version)
    # the name now held by another object: not this ref's
    assert cache.resolve(ObjectRef("Pod", "ml", "trainer-0", "an-older-uid")) is None
    assert cache.resolve(ObjectRef("Pod", "ml", "trainer-1", uid)) is None
    # a NodeClaim ref the library derived from its Pod (<pod uid>-claim) gets the real one
    derived = ObjectRef("NodeClaim", "", "ml-trainer-0", f"{uid}-claim")
    assert cache.resolve(derived) == (
        claim["metadata"]["uid"],
        claim["metadata"]["resourceVersion"],
    )


def test_watch_applies_changes_and_relists_when_expired(server: FakeApiServer, api: Any) -> None:
    server.add_object("pods", "ml", "trainer-0")
    cache = ObjectCache(api, resources={"Pod": PODS}, namespace="ml")
    cache.sync()
    added = server.add_object("pods", "ml", "trainer-1")
    server.remove_object("pods", "ml", "trainer-0")
    changes = cache.watch("Pod", timeout_seconds=1)
    assert [(c.type, c.ref.name) for c in changes] == [
        ("ADDED", "trainer-1"),
        ("DELETED", "trainer-0"),
    ]
    assert cache.resolve(changes[0].ref) == (
        added["metadata"]["uid"],
        added["metadata"]["resourceVersion"],
    )
    assert cache.ref("Pod", "ml", "trainer-0") is None

    server.add_object("pods", "ml", "trainer-2")
    server.compact()  # the changes since the last watch are gone: list again
    changes = cache.watch("Pod", timeout_seconds=1)
    assert sorted((c.type, c.ref.name) for c in changes) == [
        ("ADDED", "trainer-1"),
        ("ADDED", "trainer-2"),
    ]


def test_a_watch_thread_keeps_the_cache_current(server: FakeApiServer, api: Any) -> None:
    cache = ObjectCache(api, resources={"Pod": PODS})
    cache.sync()
    seen = threading.Event()

    def follow() -> None:
        for _ in range(20):
            if any(c.ref.name == "late" for c in cache.watch("Pod", timeout_seconds=1)):
                seen.set()
                return

    thread = threading.Thread(target=follow)
    thread.start()
    server.add_object("pods", "ml", "late")
    thread.join(30)
    assert seen.is_set()
    assert cache.ref("Pod", "ml", "late") is not None


def test_feed_takes_a_change_from_a_watch_of_the_hosts_own() -> None:
    configuration = kubernetes_client.Configuration()
    configuration.host = "http://127.0.0.1:9"  # never reached
    cache = ObjectCache(kubernetes_client.ApiClient(configuration), resources={"Pod": PODS})
    obj = {"metadata": {"name": "p", "namespace": "ml", "uid": "u-1", "resourceVersion": "5"}}
    change = cache.feed("Pod", "ADDED", obj)
    assert change == ObjectChange("ADDED", ObjectRef("Pod", "ml", "p", "u-1"), obj)
    assert cache.resolve(ObjectRef("Pod", "ml", "p", "u-1")) == ("u-1", "5")
    assert cache.get(PODS, "ml", "p") == obj
    cache.feed("Pod", "DELETED", obj)
    assert cache.get(PODS, "ml", "p") is None
    with pytest.raises(KeyError, match="Job"):
        cache.feed("Job", "ADDED", obj)
    for kind_of_change, bad in [
        ("BOOKMARK", obj),
        ("ADDED", {"metadata": {"name": "q", "namespace": "ml"}}),  # no uid
        ("ADDED", {"metadata": {"name": "q", "uid": "u-2"}}),  # a Pod has a namespace
        ("MODIFIED", {"spec": {}}),
        ("ADDED", []),
    ]:
        with pytest.raises(ValueError, match=r"change is one of|has no metadata"):
            cache.feed("Pod", kind_of_change, bad)  # type: ignore[arg-type]
    assert cache.refs("Pod") == []  # nothing applied


def test_a_refused_list_leaves_what_was_held(server: FakeApiServer, api: Any) -> None:
    server.add_object("pods", "ml", "a")
    cache = ObjectCache(api, resources={"Pod": PODS})
    cache.sync()
    server.fail_path("/api/v1/pods", 403)
    with pytest.raises(kubernetes_client.ApiException) as refused:
        cache.sync()
    assert refused.value.status == 403
    assert [r.name for r in cache.refs("Pod")] == ["a"]


def test_without_an_api_server_the_cache_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kubernetes_client.Configuration, "_default", None)
    with pytest.raises(ApiNotConfigured):
        ObjectCache(resources={"Pod": PODS})


def test_the_emitter_and_the_store_take_the_cache(server: FakeApiServer, api: Any) -> None:
    """The emitter's Event regards the object by its real uid and resourceVersion; the store
    reads the object from the cache instead of the API server."""
    pod = server.add_object("pods", "ml", "trainer-0")
    cache = ObjectCache(api, resources={"Pod": PODS})
    cache.sync()
    ref = cache.ref("Pod", "ml", "trainer-0")
    assert ref is not None
    store = KubernetesStore(api, resources={"Pod": PODS}, reader=cache.get)
    reads_before = sum(1 for r in server.requests if r.method == "GET")
    with (
        KubernetesEmitter.for_api(api, resolve=cache.resolve, hostname="ctl-0") as events,
        Runner(store, [events], links=()) as runner,
    ):
        result = runner.observe(ref, CreateRequested(at=AT, pool="gpu", provider="fake"))
        assert events.flush(10)
    assert result.status.phase == "Pending"
    # the load came from the cache: the only GETs are none (the write carried its version)
    assert sum(1 for r in server.requests if r.method == "GET") == reads_before
    (event,) = server.events_regarding("trainer-0", "ml")
    assert event["regarding"]["uid"] == pod["metadata"]["uid"]
    assert event["regarding"]["resourceVersion"] == pod["metadata"]["resourceVersion"]
    assert server.status("pods", "ml", "trainer-0")["phase"] == "Pending"  # type: ignore[index]


NAMES = ("a", "b", "c")
OPS = st.lists(
    st.tuples(
        st.sampled_from(("add", "write", "remove", "recreate", "compact")), st.sampled_from(NAMES)
    ),
    max_size=12,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(before=OPS, after=OPS)
def test_after_a_watch_the_cache_holds_what_the_api_server_holds(
    before: list[tuple[str, str]], after: list[tuple[str, str]]
) -> None:
    """Whatever happens between a list and a watch -- objects created, written, deleted and
    created again under the same name (a new uid), the change log compacted -- one watch
    leaves the cache holding exactly the server's objects: same uids, same versions, and no
    ref of a deleted object resolving to its successor."""
    with FakeApiServer() as server:
        api = kubernetes_client.ApiClient(server.configuration())
        core = kubernetes_client.CoreV1Api(api)
        cache = ObjectCache(api, resources={"Pod": PODS}, namespace="ml")
        seen: list[ObjectRef] = []

        def run(ops: list[tuple[str, str]]) -> None:
            for op, name in ops:
                held = server.object("pods", "ml", name)
                if op == "add" and held is None:
                    server.add_object("pods", "ml", name)
                elif op == "write" and held is not None:
                    pod = core.read_namespaced_pod(name, "ml")
                    pod.status = kubernetes_client.V1PodStatus(message=f"m{len(seen)}")
                    core.replace_namespaced_pod_status(name, "ml", pod)
                elif op == "remove" and held is not None:
                    server.remove_object("pods", "ml", name)
                elif op == "recreate" and held is not None:  # the name, a new uid
                    server.remove_object("pods", "ml", name)
                    server.add_object("pods", "ml", name)
                elif op == "compact":
                    server.compact()

        run(before)
        seen += [c.ref for c in cache.sync()]
        run(after)
        server.release()  # a watch sends what happened, then ends at once
        seen += [c.ref for c in cache.watch("Pod", timeout_seconds=1)]
        held = {name: server.object("pods", "ml", name) for name in NAMES}
        for name, obj in held.items():
            got = cache.get(PODS, "ml", name)
            if obj is None:
                assert got is None
                continue
            assert got is not None
            assert got["metadata"] == obj["metadata"]
            assert got.get("status") == obj.get("status")
        for ref in seen:
            obj = held[ref.name]
            expected = None
            if obj is not None and obj["metadata"]["uid"] == ref.uid:
                expected = (ref.uid, obj["metadata"]["resourceVersion"])
            assert cache.resolve(ref) == expected
        api.close()
        cache.close()
