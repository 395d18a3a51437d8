"""A linked NodeClaim on a real cluster (ADR 0162): the Pod machine's link names the claim
``<namespace>-<name>`` with the uid ``<pod uid>-claim`` (``lifecycle.links.claim_ref``), but a
NodeClaim the API created has its own server-assigned uid. The Kubernetes store refused its
status write (the object "is now" another uid); it now finds the claim by name, keeps the
library's key and the object's uid in the record, and refuses an object made again under the
name. The emitter resolves the real uid by name (``ObjectCache.resolve``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from lifecycle import ObjectRef, Runner
from lifecycle.emitters.kubernetes import KubernetesEmitter
from lifecycle.machines import NODECLAIM
from lifecycle.machines.pod import CreateRequested, InstanceRunning, ProvisionSucceeded
from lifecycle.stores.kubernetes import (
    PODS,
    CustomResource,
    KubernetesStore,
    ObjectCache,
    ObjectGone,
)
from lifecycle.testing import FakeApiServer, nodeclaim_crd_schema

AT = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
RESOURCES = {
    "Pod": PODS,
    "NodeClaim": CustomResource("karpenter.sh", "v1", "nodeclaims", namespaced=False),
}
CLAIM_SPEC = {
    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
    "requirements": [],
}


def cluster(server: FakeApiServer) -> tuple[ObjectRef, str]:
    """A Pod and its NodeClaim as a cluster has them: server-assigned uids, both."""
    server.register_crd(
        "karpenter.sh", "v1", "nodeclaims", "NodeClaim", nodeclaim_crd_schema(), namespaced=False
    )
    pod = server.add_object("pods", "ml", "trainer-0")
    claim = server.add_object("nodeclaims", "", "ml-trainer-0", spec=CLAIM_SPEC)
    real = str(claim["metadata"]["uid"])
    assert real != f"{pod['metadata']['uid']}-claim"
    return ObjectRef("Pod", "ml", "trainer-0", pod["metadata"]["uid"]), real


def runner_on(api_client: Any) -> Runner:
    """A runner on the Kubernetes store whose emitter resolves uids through an object cache."""
    cache = ObjectCache(api_client, resources=RESOURCES)
    cache.sync()
    events = KubernetesEmitter.for_api(
        api_client, hostname="host-0", timers=False, resolve=cache.resolve
    )
    return Runner(KubernetesStore(api_client, resources=RESOURCES), [events])


def provision(runner: Runner, ref: ObjectRef) -> Any:
    runner.observe(ref, CreateRequested(at=AT, pool="gpu", provider="fake"))
    runner.observe(ref, ProvisionSucceeded(at=AT, reserved=True, instance_id="i-0"))
    return runner.observe(ref, InstanceRunning(at=AT + timedelta(seconds=30), instance_id="i-0"))


def test_a_claim_the_api_created_gets_its_status_and_events_under_its_own_uid(
    server: FakeApiServer, api_client: Any
) -> None:
    ref, real = cluster(server)
    runner = runner_on(api_client)
    results = provision(runner, ref)
    assert results.error is None
    assert all(sub.error is None for sub in results.linked), [s.error for s in results.linked]
    runner.close(10.0)
    stored = server.object("nodeclaims", "", "ml-trainer-0")
    assert stored is not None
    conditions = (stored.get("status") or {}).get("conditions") or []
    assert conditions, "the claim's linked transitions wrote no status"
    regarding = [
        e["regarding"] for e in server.events.values() if e["regarding"]["kind"] == "NodeClaim"
    ]
    assert regarding
    assert {r["uid"] for r in regarding} == {real}


def test_a_restarted_store_finds_the_claims_outbox_under_the_librarys_key(
    server: FakeApiServer, api_client: Any
) -> None:
    """What a replica committed for the claim and never delivered: another store's scan
    hands it out under the derived key, and its marks empty the claim's outbox."""
    ref, _ = cluster(server)
    silent = Runner(KubernetesStore(api_client, resources=RESOURCES), [Refusing()])
    provision(silent, ref)
    store = KubernetesStore(api_client, resources=RESOURCES)
    held = store.claim_undelivered()
    claims = {t.ref for t in held if t.ref.kind == "NodeClaim"}
    assert claims == {ObjectRef("NodeClaim", "", "ml-trainer-0", f"{ref.uid}-claim")}
    runner = Runner(store, [KubernetesEmitter.for_api(api_client, hostname="h", timers=False)])
    for _ in range(20):
        runner.redeliver()
        runner.flush(10.0)
        if not store.undelivered_count():
            break
    assert store.undelivered_count() == 0
    runner.close(10.0)


def test_a_claim_made_again_under_the_name_is_another_object(
    server: FakeApiServer, api_client: Any
) -> None:
    ref, _ = cluster(server)
    runner = runner_on(api_client)
    provision(runner, ref)
    runner.close(10.0)
    before = server.object("nodeclaims", "", "ml-trainer-0")
    assert before is not None
    server.remove_object("nodeclaims", "", "ml-trainer-0")
    server.add_object(
        "nodeclaims", "", "ml-trainer-0", spec=CLAIM_SPEC, status=before.get("status")
    )  # its old record copied over: still not the object the record was written to
    store = KubernetesStore(api_client, resources=RESOURCES)
    claim = ObjectRef("NodeClaim", "", "ml-trainer-0", f"{ref.uid}-claim")
    with pytest.raises(ObjectGone):
        store.load(NODECLAIM, claim)
    store.close()


class Refusing:
    def emit(self, transition: Any) -> None:
        raise ConnectionError("events down")
