"""A linked NodeClaim on a real cluster (ADR 0162): the Pod machine's link names the claim
``<namespace>-<name>`` with the uid ``<pod uid>-claim`` (``lifecycle.links.claim_ref``), but a
NodeClaim the API created has its own server-assigned uid. The Kubernetes store keys and
checks objects by uid, so it refuses the claim's status write (the object "is now" another
uid); the emitter already resolves the real uid by name (``ObjectCache.resolve``).

The store side is not fixed yet: this test reproduces it and is expected to fail until it is
(strict: a fix turns it into a failure to remove the mark)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from lifecycle import ObjectRef, Runner
from lifecycle.emitters.kubernetes import KubernetesEmitter
from lifecycle.machines.pod import CreateRequested, InstanceRunning, ProvisionSucceeded
from lifecycle.stores.kubernetes import PODS, CustomResource, KubernetesStore, ObjectCache
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


@pytest.mark.xfail(
    strict=True,
    reason="ADR 0162: the Kubernetes store matches a NodeClaim by its derived uid, which no "
    "object the API created has",
)
def test_a_claim_the_api_created_gets_its_status_and_events_under_its_own_uid(
    server: FakeApiServer, api_client: Any
) -> None:
    server.register_crd(
        "karpenter.sh", "v1", "nodeclaims", "NodeClaim", nodeclaim_crd_schema(), namespaced=False
    )
    pod = server.add_object("pods", "ml", "trainer-0")  # server-assigned uids, both
    claim = server.add_object("nodeclaims", "", "ml-trainer-0", spec=CLAIM_SPEC)
    real = claim["metadata"]["uid"]
    assert real != f"{pod['metadata']['uid']}-claim"
    cache = ObjectCache(api_client, resources=RESOURCES)
    cache.sync()
    events = KubernetesEmitter.for_api(
        api_client, hostname="host-0", timers=False, resolve=cache.resolve
    )
    store = KubernetesStore(api_client, resources=RESOURCES)
    runner = Runner(store, [events])
    ref = ObjectRef("Pod", "ml", "trainer-0", pod["metadata"]["uid"])
    runner.observe(ref, CreateRequested(at=AT, pool="gpu", provider="fake"))
    runner.observe(ref, ProvisionSucceeded(at=AT, reserved=True, instance_id="i-0"))
    results = runner.observe(ref, InstanceRunning(at=AT + timedelta(seconds=30), instance_id="i-0"))
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
