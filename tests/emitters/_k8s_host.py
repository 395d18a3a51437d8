"""A controller host in its own process, for the crash and shutdown tests of Kubernetes Event
delivery (ADR 0121): a runner on a store with the Kubernetes emitter against the fake API
server, as the README's ``with`` block builds it.

``python -m tests.emitters._k8s_host API_URL STORE_URL WORKDIR MODE [PODS] [BOUND]``
(``STORE_URL`` ``kubernetes``: the objects' status on the same API server, ADR 0133)

- ``run``: observe ``PODS`` Pods through create, provision and running (each Pod's NodeClaim
  follows), appending every committed transition's id and object name to
  ``WORKDIR/committed.jsonl`` as it commits, then write ``WORKDIR/committed`` and wait to be
  killed.
- ``close``: the same, then close the runner with a ``BOUND``-second flush and exit.
- ``restart``: redeliver what the outbox holds until it is empty, close, and write the
  emitter's stats to ``WORKDIR/restart.json``.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from kubernetes import client as kubernetes_client  # type: ignore[import-untyped]

from lifecycle import ObjectRef, Runner, open_store
from lifecycle.emitters.kubernetes import KubernetesEmitter
from lifecycle.machines.pod import CreateRequested, InstanceRunning, ProvisionSucceeded
from lifecycle.stores.kubernetes import PODS, CustomResource, KubernetesStore

EPOCH = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


#: Where the Kubernetes-native store keeps each kind (``STORE_URL`` ``kubernetes``, ADR 0133).
RESOURCES = {
    "Pod": PODS,
    "NodeClaim": CustomResource("karpenter.sh", "v1", "nodeclaims", namespaced=False),
}


def status_store(api_url: str) -> KubernetesStore:
    """The objects' status subresource as the store, on the same API server."""
    config = kubernetes_client.Configuration()
    config.host = api_url
    return KubernetesStore(kubernetes_client.ApiClient(config), resources=RESOURCES)


def emitter(api_url: str) -> KubernetesEmitter:
    config = kubernetes_client.Configuration()
    config.host = api_url
    return KubernetesEmitter.for_api(
        kubernetes_client.ApiClient(config),
        request_timeout=30.0,
        hostname="host-0",
        timers=False,
        retry_interval=0.05,
    )


def run(runner: Runner, pods: int, workdir: Path) -> None:
    with (workdir / "committed.jsonl").open("a") as out:

        def note(results: list[Any]) -> None:
            for r in results:
                for t in r.all_transitions():
                    if not t.action and not t.fallback:
                        out.write(json.dumps({"id": t.id, "name": t.ref.name}) + "\n")
            out.flush()
            os.fsync(out.fileno())

        for i in range(pods):
            pod = ObjectRef("Pod", "ml", f"trainer-{i}", f"pod-{i}")
            at = EPOCH + timedelta(seconds=i)
            note([runner.observe(pod, CreateRequested(at=at, pool="gpu", provider="fake"))])
            ok = ProvisionSucceeded(at=at, reserved=True, instance_id=f"i-{i}")
            note([runner.observe(pod, ok)])
            running = InstanceRunning(at=at + timedelta(seconds=30), instance_id=f"i-{i}")
            note([runner.observe(pod, running)])
    (workdir / "committed").write_text("ok")


def main(argv: list[str]) -> int:
    api_url, store_url, workdir_text, mode = argv[:4]
    pods = int(argv[4]) if len(argv) > 4 else 10
    bound = float(argv[5]) if len(argv) > 5 else 5.0
    workdir = Path(workdir_text)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(message)s")
    store = (
        status_store(api_url)
        if store_url == "kubernetes"
        else open_store(store_url, owner="host-0")
    )
    events = emitter(api_url)
    runner = Runner(store, [events])
    if mode == "restart":
        for _ in range(200):
            runner.redeliver()
            runner.flush(10.0)
            if not store.undelivered_count():  # type: ignore[attr-defined]
                break
        left = runner.close(10.0)
        stats = events.stats
        (workdir / "restart.json").write_text(
            json.dumps(
                {
                    "left": left,
                    "undelivered": store.undelivered_count(),  # type: ignore[attr-defined]
                    "created": stats.created,
                    "already_delivered": stats.already_delivered,
                }
            )
        )
        store.close()
        return 0
    run(runner, pods, workdir)
    if mode == "close":
        left = runner.close(bound)
        (workdir / "closed.json").write_text(json.dumps({"left": left}))
        store.close()
        return 0
    while True:  # killed here
        time.sleep(1)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
