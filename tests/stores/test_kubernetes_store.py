"""The status-subresource store (issue 27, ADR 0133) against the validating fake API server,
through the real ``kubernetes`` client: the conformance check every store passes, the
compare-and-set against other writers of the status, each refusal typed with nothing
written, hostile servers, marks riding the next write, the asyncio twin, and a replayed
trace giving the same events as through SQLite."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes import client as kubernetes_client  # type: ignore[import-untyped]

from lifecycle import (
    AsyncRunner,
    CommitUnknown,
    Conflict,
    IdentityMismatch,
    MemoryEmitter,
    MemoryStore,
    ObjectRef,
    RetryPolicy,
    Runner,
    SQLiteStore,
)
from lifecycle.machines import POD, default_registry, pod, workflow
from lifecycle.stores.kubernetes import (
    PODS,
    RECORD_CONDITION,
    ApiTransport,
    AsyncKubernetesStore,
    Call,
    CustomResource,
    KubernetesStore,
    ObjectGone,
    RecordTooLarge,
    Reply,
    StatusRefused,
)
from lifecycle.testing import (
    FakeApiServer,
    check_store,
    conditions_crd_schema,
    nodeclaim_crd_schema,
    observation_sequences,
)
from lifecycle.testing.fakes import FailingEmitter
from lifecycle.trace import read_trace, replay

ROOT = Path(__file__).resolve().parents[2]
AT = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
NODECLAIMS = CustomResource("karpenter.sh", "v1", "nodeclaims", namespaced=False)
GROUP = "lifecycle.example.com"
#: The kinds the shipped machines live in (Pods are built in; the rest custom resources).
CRDS = {
    kind: CustomResource(GROUP, "v1", kind.lower() + "s")
    for kind in ("Job", "Workflow", "Certification", "WorkloadRun", "RestoreAttempt")
}
RESOURCES = {"Pod": PODS, "NodeClaim": NODECLAIMS, **CRDS}


def serve() -> FakeApiServer:
    server = FakeApiServer()
    server.register_crd(
        "karpenter.sh", "v1", "nodeclaims", "NodeClaim", nodeclaim_crd_schema(), namespaced=False
    )
    for kind, resource in CRDS.items():
        server.register_crd(GROUP, "v1", resource.plural, kind, conditions_crd_schema(kind))
    return server


def api(server: FakeApiServer) -> Any:
    config = kubernetes_client.Configuration()
    config.host = server.url
    return kubernetes_client.ApiClient(config)


@pytest.fixture(autouse=True)
def groups_that_fit() -> Iterator[None]:
    """A Workflow record of 10 000 groups does not fit 32 KiB: runners on this store refuse
    to start at that limit (ADR 0144), so these tests run at a count that fits."""
    before = workflow.Partitioned.limits.set("groups", 600)
    yield
    workflow.Partitioned.limits.set("groups", before)


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    s = serve()
    yield s
    s.release()
    s.close()


@pytest.fixture
def store(server: FakeApiServer) -> Iterator[KubernetesStore]:
    s = KubernetesStore(api(server), resources=RESOURCES, sleep=lambda _: None)
    yield s
    s.close()


def resource_of(kind: str) -> str:
    return RESOURCES[kind].plural


#: What Karpenter's schema requires of a NodeClaim's spec.
CLAIM_SPEC = {
    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
    "requirements": [],
}


def add(server: FakeApiServer, ref: ObjectRef, **kw: Any) -> dict[str, Any]:
    if ref.kind == "NodeClaim":
        kw.setdefault("spec", CLAIM_SPEC)
    return server.add_object(resource_of(ref.kind), ref.namespace, ref.name, uid=ref.uid, **kw)


def stored(server: FakeApiServer, ref: ObjectRef) -> dict[str, Any]:
    obj = server.object(resource_of(ref.kind), ref.namespace, ref.name)
    assert obj is not None
    return obj


def record_of(server: FakeApiServer, ref: ObjectRef) -> dict[str, Any] | None:
    for c in stored(server, ref).get("status", {}).get("conditions") or ():
        if c["type"] == RECORD_CONDITION:
            data: dict[str, Any] = json.loads(c["message"])
            return data
    return None


POD_A = ObjectRef("Pod", "ml", "trainer-0", "uid-a")


def observe(runner: Runner, ref: ObjectRef = POD_A) -> list[str]:
    reasons = []
    for obs in (
        pod.CreateRequested(at=AT, pool="gpu", provider="fake"),
        pod.ProvisionSucceeded(at=AT, reserved=True, instance_id="i-1"),
        pod.InstanceRunning(at=AT + timedelta(seconds=30), instance_id="i-1"),
    ):
        reasons += [t.reason for t in runner.observe(ref, obs).transitions]
    return reasons


# -- conformance ----------------------------------------------------------------------------
def test_the_store_passes_the_conformance_check_every_store_passes() -> None:
    servers: list[FakeApiServer] = []

    def fresh() -> KubernetesStore:
        s = serve()
        servers.append(s)
        for uid in ("a", "b", "r", "m0", "m1", "m2", "fresh", "keep"):
            s.add_object("pods", "conformance", f"pod-{uid}", uid=uid)
        return KubernetesStore(api(s), resources=RESOURCES, sleep=lambda _: None)

    try:
        check_store(fresh)
    finally:
        for s in servers:
            s.close()
    assert len(servers) == 2


def test_a_commit_writes_status_record_and_outbox_in_one_put(
    server: FakeApiServer, store: KubernetesStore
) -> None:
    add(server, POD_A)
    events = MemoryEmitter()
    runner = Runner(store, [events], links=())
    assert observe(runner) == ["Provisioning", "Initializing", "Running"]
    status = stored(server, POD_A)["status"]
    assert (status["phase"], status["reason"]) == ("Running", "Running")
    assert [c["type"] for c in status["conditions"]] == ["Ready", RECORD_CONDITION]
    record = record_of(server, POD_A)
    assert record is not None
    assert (record["version"], record["machine"]) == (3, "pod")
    puts = [r for r in server.requests if r.method == "PUT"]
    assert len(puts) == 3  # one status write per change: the marks rode the next one
    assert [r["reason"] for r in record["outbox"]] == ["Running"]  # delivered, not yet written
    store.flush_marks()
    assert record_of(server, POD_A)["outbox"] == []  # type: ignore[index]
    loaded = store.load(POD, POD_A)
    assert loaded is not None
    assert (loaded.version, loaded.status.state) == (3, "Running")


def test_a_reader_answers_loads_so_a_change_is_one_request(server: FakeApiServer) -> None:
    add(server, POD_A)
    s = KubernetesStore(
        api(server),
        resources=RESOURCES,
        reader=lambda res, ns, name: server.object(res.plural, ns, name),
    )
    runner = Runner(s, [MemoryEmitter()], links=())
    before = len(server.requests)
    observe(runner)
    verbs = [r.method for r in server.requests[before:]]
    assert verbs == ["PUT", "PUT", "PUT"], verbs
    s.close()


# -- other writers of the status ---------------------------------------------------------------
def test_a_write_by_another_writer_of_the_status_is_kept_and_the_commit_retried(
    server: FakeApiServer, store: KubernetesStore
) -> None:
    add(server, POD_A)
    runner = Runner(store, [MemoryEmitter()], links=())
    runner.observe(POD_A, pod.CreateRequested(at=AT, pool="gpu", provider="fake"))
    # a kubelet-like writer adds its own condition and field: the store's cached object is stale
    obj = stored(server, POD_A)
    obj["status"]["conditions"].insert(0, {"type": "PodScheduled", "status": "True"})
    obj["status"]["hostIP"] = "10.0.0.9"
    kubernetes_client.CoreV1Api(api(server)).replace_namespaced_pod_status(
        "trainer-0", "ml", obj
    )  # through the API, as the other writer would: the resourceVersion moves
    runner.observe(POD_A, pod.ProvisionSucceeded(at=AT, reserved=True, instance_id="i-1"))
    status = stored(server, POD_A)["status"]
    assert status["hostIP"] == "10.0.0.9"
    assert status["conditions"][0]["type"] == "PodScheduled"
    assert record_of(server, POD_A)["version"] == 2  # type: ignore[index]
    assert any(r.method == "PUT" for r in server.requests)


def test_a_stale_version_is_a_conflict_and_writes_nothing(
    server: FakeApiServer, store: KubernetesStore
) -> None:
    add(server, POD_A)
    Runner(store, [MemoryEmitter()], links=()).observe(POD_A, pod.CreateRequested(at=AT))
    before = stored(server, POD_A)
    status = POD.apply(POD.initial(POD_A), pod.CreateRequested(at=AT))
    with pytest.raises(Conflict) as e:
        store.commit(POD, POD_A, 0, status, pod.CreateRequested(at=AT), ())
    assert (e.value.expected, e.value.actual) == (0, 1)
    assert stored(server, POD_A) == before


# -- refusals: typed, nothing written --------------------------------------------------------
def test_an_object_not_there_is_gone_and_loads_as_none(store: KubernetesStore) -> None:
    assert store.load(POD, POD_A) is None
    status = POD.apply(POD.initial(POD_A), pod.CreateRequested(at=AT))
    with pytest.raises(ObjectGone, match="not found"):
        store.commit(POD, POD_A, 0, status, pod.CreateRequested(at=AT), ())


def test_a_name_reused_by_another_object_is_gone(
    server: FakeApiServer, store: KubernetesStore
) -> None:
    server.add_object("pods", "ml", "trainer-0", uid="another-uid")
    with pytest.raises(ObjectGone, match="another-uid"):
        store.load(POD, POD_A)
    assert record_of(server, POD_A) is None


def test_a_record_over_the_bound_is_refused_before_it_is_sent(server: FakeApiServer) -> None:
    """A status whose record cannot fit even deflated, its text cut and every undelivered
    event given up (ADR 0144, 0145) is refused before any write: nothing written."""
    add(server, POD_A)
    small = KubernetesStore(api(server), resources={"Pod": PODS}, max_record_bytes=1500)
    down = FailingEmitter(10**6)  # an emitter that is down: nothing is ever delivered
    runner = Runner(small, [down], links=())
    runner.observe(POD_A, pod.CreateRequested(at=AT))
    before = record_of(server, POD_A)
    writes = server.writes
    tiny = KubernetesStore(api(server), resources={"Pod": PODS}, max_record_bytes=300)
    error = (
        Runner(tiny, [down], links=())
        .observe(POD_A, pod.ProvisionSucceeded(at=AT, reserved=True, instance_id="i-1"))
        .error
    )
    assert isinstance(error, RecordTooLarge), error
    assert "given up" in str(error)
    assert "max_record_bytes=300" in str(error)
    assert record_of(server, POD_A) == before
    assert server.writes == writes
    small.close()
    tiny.close()


def test_a_status_the_schema_refuses_is_refused_typed(server: FakeApiServer) -> None:
    ref = ObjectRef("Pod", "ml", "trainer-1", "uid-b")
    add(server, ref)
    server.fail_path("/status", 422)
    s = KubernetesStore(api(server), resources=RESOURCES)
    status = POD.apply(POD.initial(ref), pod.CreateRequested(at=AT))
    with pytest.raises(StatusRefused, match="422"):
        s.commit(POD, ref, 0, status, pod.CreateRequested(at=AT), ())
    assert record_of(server, ref) is None
    s.close()


def test_a_schema_that_prunes_the_record_is_refused(server: FakeApiServer) -> None:
    schema = conditions_crd_schema("Bare")  # with a status of one field: conditions pruned
    schema["properties"]["status"] = {"type": "object", "properties": {"phase": {"type": "string"}}}
    server.register_crd(GROUP, "v1", "bares", "Bare", schema)
    ref = ObjectRef("Bare", "ml", "b", "uid-bare")
    server.add_object("bares", "ml", "b", uid="uid-bare")
    s = KubernetesStore(api(server), resources={"Bare": CustomResource(GROUP, "v1", "bares")})
    status = POD.apply(POD.initial(ref), pod.CreateRequested(at=AT))
    with pytest.raises(StatusRefused, match="without the"):
        s.commit(POD, ref, 0, status, pod.CreateRequested(at=AT), ())
    s.close()


def test_an_unmapped_kind_and_a_uid_seen_elsewhere_are_refused(
    server: FakeApiServer, store: KubernetesStore
) -> None:
    add(server, POD_A)
    store.load(POD, POD_A)
    with pytest.raises(IdentityMismatch):
        store.load(POD, ObjectRef("Pod", "ml", "impostor", POD_A.uid))
    from lifecycle import StoreError

    with pytest.raises(StoreError, match="no resource is configured for kind 'Gizmo'"):
        store.load(POD, ObjectRef("Gizmo", "ml", "g", "uid-g"))


# -- hostile servers ---------------------------------------------------------------------------
@pytest.mark.parametrize("answer", [500, (429, {"Retry-After": "1"}), "reset", "drop"])
def test_a_failing_server_is_retried_and_the_commit_lands_once(
    server: FakeApiServer, store: KubernetesStore, answer: Any
) -> None:
    add(server, POD_A)
    server.fail_path("/status", answer)
    events = MemoryEmitter()
    runner = Runner(store, [events], links=())
    result = runner.observe(POD_A, pod.CreateRequested(at=AT, pool="gpu", provider="fake"))
    assert (result.committed, result.version) == (True, 1), result
    assert record_of(server, POD_A)["version"] == 1  # type: ignore[index]
    assert [t.reason for t in events.events] == ["Provisioning"]


@pytest.mark.parametrize("answer", ["drop", 504], ids=["no-answer", "504"])
def test_a_write_whose_answer_was_lost_after_it_landed_is_resolved_by_its_token(
    server: FakeApiServer, store: KubernetesStore, answer: Any
) -> None:
    add(server, POD_A)
    server.fail_path("/status", ("landed", answer))
    status = POD.apply(POD.initial(POD_A), pod.CreateRequested(at=AT))
    assert store.commit(POD, POD_A, 0, status, pod.CreateRequested(at=AT), ()) == 1
    assert record_of(server, POD_A)["version"] == 1  # type: ignore[index]
    assert server.writes == 1  # landed once, not written again


def test_a_lost_write_overtaken_by_another_is_unknown_not_a_conflict(
    server: FakeApiServer,
) -> None:
    add(server, POD_A)
    real = ApiTransport(api(server))
    obs = pod.CreateRequested(at=AT)
    status = POD.apply(POD.initial(POD_A), obs)

    class Overtaken:
        """Our write lands, its answer is lost, and another writer commits on it first."""

        lost = False

        def send(self, call: Call) -> Reply:
            reply = real.send(call)
            if call.method == "PUT" and not self.lost:
                self.lost = True
                other = KubernetesStore(api(server), resources=RESOURCES)
                other.load(POD, POD_A)
                other.commit(POD, POD_A, 1, status, obs, ())
                other.close()
                return Reply(0, error="connection reset")
            return reply

    store = KubernetesStore(resources=RESOURCES, transport=Overtaken(), sleep=lambda _: None)
    with pytest.raises(CommitUnknown, match="now at version 2"):
        store.commit(POD, POD_A, 0, status, obs, ())
    real.close()


def test_a_429_is_never_taken_for_a_write_that_may_have_landed(
    server: FakeApiServer, store: KubernetesStore
) -> None:
    add(server, POD_A)
    server.fail_path("/status", (429, {"Retry-After": "nan"}))
    status = POD.apply(POD.initial(POD_A), pod.CreateRequested(at=AT))
    assert store.commit(POD, POD_A, 0, status, pod.CreateRequested(at=AT), ()) == 1


def test_a_lagging_reader_is_not_trusted_past_what_the_store_wrote(server: FakeApiServer) -> None:
    add(server, POD_A)
    snapshot: dict[str, Any] = {}

    def informer(res: Any, ns: str, name: str) -> dict[str, Any] | None:
        return snapshot.get(name) or server.object(res.plural, ns, name)

    s = KubernetesStore(api(server), resources=RESOURCES, reader=informer)
    runner = Runner(s, [MemoryEmitter()], links=())
    runner.observe(POD_A, pod.CreateRequested(at=AT, pool="gpu", provider="fake"))
    snapshot["trainer-0"] = stored(server, POD_A)  # the informer stops at version 1
    runner.observe(POD_A, pod.ProvisionSucceeded(at=AT, reserved=True, instance_id="i-1"))
    result = runner.observe(POD_A, pod.InstanceRunning(at=AT + timedelta(seconds=30)))
    assert (result.committed, result.version) == (True, 3), result
    s.close()


def test_a_reader_copy_without_a_resource_version_never_skips_the_compare_and_set(
    server: FakeApiServer,
) -> None:
    add(server, POD_A)

    def informer(res: Any, ns: str, name: str) -> dict[str, Any] | None:
        obj = server.object(res.plural, ns, name)
        if obj is not None:
            obj["metadata"].pop("resourceVersion")  # a typed model's to_dict(), say
        return obj

    s = KubernetesStore(api(server), resources=RESOURCES, reader=informer)
    runner = Runner(s, [MemoryEmitter()], links=())
    runner.observe(POD_A, pod.CreateRequested(at=AT, pool="gpu", provider="fake"))
    obj = stored(server, POD_A)
    obj["status"]["hostIP"] = "10.0.0.9"  # a kubelet's write in between
    kubernetes_client.CoreV1Api(api(server)).replace_namespaced_pod_status("trainer-0", "ml", obj)
    runner.observe(POD_A, pod.ProvisionSucceeded(at=AT, reserved=True, instance_id="i-1"))
    assert stored(server, POD_A)["status"]["hostIP"] == "10.0.0.9"
    s.close()


def test_a_kind_named_otherwise_by_its_crd_keeps_its_refs_after_a_claim(
    server: FakeApiServer,
) -> None:
    server.register_crd(GROUP, "v1", "gpupods", "GPUPod", conditions_crd_schema("GPUPod"))
    ref = ObjectRef("Pod", "ml", "g", "uid-g")  # the Pod machine, in a CRD of kind GPUPod
    server.add_object("gpupods", "ml", "g", uid="uid-g")
    s = KubernetesStore(api(server), resources={"Pod": CustomResource(GROUP, "v1", "gpupods")})
    runner = Runner(s, [FailingEmitter(1)], links=())
    runner.observe(ref, pod.CreateRequested(at=AT, pool="gpu", provider="fake"))
    assert runner.redeliver() == 1  # claims: lists the objects
    result = runner.observe(ref, pod.ProvisionSucceeded(at=AT, reserved=True, instance_id="i"))
    assert (result.committed, result.version) == (True, 2), result
    s.close()


def test_a_status_the_machine_cannot_render_is_refused_before_any_request(
    server: FakeApiServer, store: KubernetesStore
) -> None:
    add(server, POD_A)
    before = len(server.requests)
    with pytest.raises(StatusRefused, match="no status body"):
        store.commit(POD, POD_A, 0, "not a status", pod.CreateRequested(at=AT), ())
    assert [r.method for r in server.requests[before:]] == []
    assert record_of(server, POD_A) is None


# -- the asyncio store -----------------------------------------------------------------------
def test_the_asyncio_store_gives_what_the_synchronous_one_gives(server: FakeApiServer) -> None:
    a, b = POD_A, ObjectRef("Pod", "ml", "trainer-1", "uid-b")
    add(server, a)
    add(server, b)
    sync_events = MemoryEmitter()
    sync = KubernetesStore(api(server), resources=RESOURCES)
    observe(Runner(sync, [sync_events], links=()), a)
    sync.close()

    async def main() -> list[str]:
        events = MemoryEmitter()
        store = AsyncKubernetesStore(api(server), resources=RESOURCES)
        runner = AsyncRunner(store, [events], links=())
        try:
            for obs in (
                pod.CreateRequested(at=AT, pool="gpu", provider="fake"),
                pod.ProvisionSucceeded(at=AT, reserved=True, instance_id="i-1"),
                pod.InstanceRunning(at=AT + timedelta(seconds=30), instance_id="i-1"),
            ):
                await runner.observe(b, obs)
        finally:
            await runner.close()
        await store.close()
        return [t.reason for t in events.events]

    assert asyncio.run(main()) == [t.reason for t in sync_events.events]
    ra, rb = record_of(server, a), record_of(server, b)
    assert ra is not None
    assert rb is not None
    assert (ra["version"], ra["status"]) == (rb["version"], rb["status"])


# -- a replayed trace ---------------------------------------------------------------------------
TRACES = sorted((ROOT / "examples" / "traces").glob("*.jsonl"))


def _events(emitter: MemoryEmitter) -> list[tuple[str, str, str, str]]:
    """Each object's events in its order (a checked SQLite replay commits linked families in
    chunks, so the order across objects may differ; an id holds uid, version and n)."""
    return sorted((_plain(t.id), t.reason, t.type.value, t.message) for t in emitter.events)


def _plain(tid: str) -> str:
    """An id without its store epoch (each store handle draws its own: ADR 0146)."""
    return tid.split("@", 1)[0]


@pytest.mark.parametrize("path", TRACES, ids=[p.stem for p in TRACES])
def test_a_replayed_trace_gives_the_events_it_gives_through_sqlite(
    path: Path, tmp_path: Path
) -> None:
    trace = read_trace(path)
    through_memory = MemoryStore()
    replay(trace, through_memory, [MemoryEmitter()])
    registry = default_registry()
    refs = {r.ref for name in registry for r in through_memory.records(registry[name])}
    if not {r.kind for r in refs} <= set(RESOURCES):
        pytest.skip(f"kinds outside the mapped resources: {sorted({r.kind for r in refs})}")
    names = [(r.kind, r.namespace, r.name) for r in refs]
    if len(set(names)) < len(names):  # attempts named alike: one object at a time in a cluster
        pytest.skip("one name held by several uids at once")
    sqlite_events = MemoryEmitter()
    sqlite = SQLiteStore(tmp_path / "replay.db")
    replay(trace, sqlite, [sqlite_events])
    sqlite.close()
    server = serve()
    try:
        for ref in refs:
            add(server, ref)
        k8s_events = MemoryEmitter()
        store = KubernetesStore(api(server), resources=RESOURCES, sleep=lambda _: None)
        replay(trace, store, [k8s_events])
        store.close()
        assert _events(k8s_events) == _events(sqlite_events)
    finally:
        server.close()


# -- a differential property -------------------------------------------------------------------
Disturbance = tuple[str, Any]
DISTURBANCES: st.SearchStrategy[Disturbance] = st.one_of(
    st.just(("none", None)),
    st.just(("foreign", None)),  # another writer of the status (a kubelet) writes first
    st.sampled_from([500, (429, {"Retry-After": "0"}), "reset", "drop"]).map(
        lambda a: ("fault", a)
    ),
)


def _outcome(runner: Runner, ref: ObjectRef, obs: Any) -> tuple[Any, ...]:
    try:
        r = runner.observe(ref, obs)
    except Exception as e:  # a refused observation: refused alike on both
        return ("refused", type(e).__name__)
    return (r.outcome, r.version, r.status, tuple(_plain(t.id) for t in r.transitions))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    observations=observation_sequences(POD, max_size=10),
    disturbances=st.lists(DISTURBANCES, min_size=10, max_size=10),
)
def test_any_observations_under_other_writers_and_faults_give_what_memory_gives(
    observations: list[Any], disturbances: list[Disturbance]
) -> None:
    """Whatever the observations, however other writers and a failing server interleave: every
    result, status and event is the memory store's, and the object's record is the status."""
    server = serve()
    try:
        ref = ObjectRef("Pod", "ml", "trainer-0", "uid-p")
        add(server, ref)
        store = KubernetesStore(api(server), resources=RESOURCES, sleep=lambda _: None)
        k8s_events, memory_events = MemoryEmitter(), MemoryEmitter()
        k8s = Runner(store, [k8s_events], links=(), policy=RetryPolicy(backoff=0.0))
        reference = MemoryStore()
        memory = Runner(reference, [memory_events], links=(), policy=RetryPolicy(backoff=0.0))
        for obs, (what, arg) in zip(observations, disturbances, strict=False):
            if what == "foreign":
                obj = stored(server, ref)
                obj.setdefault("status", {}).setdefault("conditions", []).insert(
                    0, {"type": "PodScheduled", "status": "True"}
                )
                kubernetes_client.CoreV1Api(api(server)).replace_namespaced_pod_status(
                    ref.name, ref.namespace, obj
                )
            elif what == "fault":
                server.fail_path("/status", arg)
            assert _outcome(k8s, ref, obs) == _outcome(memory, ref, obs)
        assert _events(k8s_events) == _events(memory_events)
        loaded = store.load(POD, ref)
        expected = reference.load(POD, ref)
        assert (loaded is None) == (expected is None)
        if loaded is not None and expected is not None:
            assert (loaded.version, loaded.status) == (expected.version, expected.status)
        store.close()
        record = record_of(server, ref)
        assert record is None or record["outbox"] == []  # every delivered id written out
    finally:
        server.release()
        server.close()
