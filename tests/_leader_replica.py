"""One replica of a controller for the two-replica leader election test (ADR 0160): leader
election on a Lease, then -- only while it leads -- a Runner on the Kubernetes store and
emitter driving a scripted sequence of Pod observations against the fake API server whose
URL it is given. Run as ``python tests/_leader_replica.py URL IDENTITY PODS``; it prints
``leading`` when it starts to lead and runs until killed."""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes import client  # type: ignore[import-untyped]

from lifecycle import ObjectRef, Runner
from lifecycle.emitters.kubernetes import ApiEventSink, KubernetesEmitter
from lifecycle.leader import LeaderElector, LeaderGate, LeaseLock, NotLeader
from lifecycle.machines import POD, MachineRegistry, pod
from lifecycle.stores.kubernetes import PODS, KubernetesStore

AT = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
NAMESPACE = "ops"
#: the timings of the test: a lease of 4 s, a renew deadline of 3 s, a retry every 0.5 s
LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 4.0, 3.0, 0.5


def script(i: int) -> list[Any]:
    """The observations of Pod ``i``, in order; each commits one transition."""
    at = AT + timedelta(seconds=i)
    return [
        pod.CreateRequested(at=at, pool="gpu", provider="fake"),
        pod.ProvisionSucceeded(at=at, reserved=True, instance_id=f"i-{i}"),
        pod.InstanceRunning(at=at + timedelta(seconds=30), instance_id=f"i-{i}"),
    ]


def ref(i: int) -> ObjectRef:
    return ObjectRef("Pod", NAMESPACE, f"web-{i}", f"uid-web-{i}")


def main(url: str, identity: str, pods: int) -> None:
    configuration = client.Configuration()
    configuration.host = url
    configuration.api_key = {"authorization": identity}  # the fake server keeps who sent what
    api = client.ApiClient(configuration)
    elector = LeaderElector(
        LeaseLock("controller", NAMESPACE, identity, api=api),
        lease_duration=LEASE_DURATION,
        renew_deadline=RENEW_DEADLINE,
        retry_period=RETRY_PERIOD,
    )
    elector.start()
    store = KubernetesStore(api, resources={"Pod": PODS}, namespace=NAMESPACE)
    emitter = KubernetesEmitter(ApiEventSink(api), hostname=identity, timers=False)
    runner = Runner(
        LeaderGate(store, elector), [emitter], machines=MachineRegistry([POD]), links=()
    )
    said = False
    while True:
        if not elector.is_leader():
            said = False
            time.sleep(0.05)
            continue
        if not said:
            print("leading", flush=True)
            said = True
        try:
            runner.redeliver()  # what a killed leader committed and did not deliver
            for i in range(pods):
                record = store.load(POD, ref(i))
                for observation in script(i)[record.version if record else 0 :]:
                    runner.observe(ref(i), observation)
                    time.sleep(0.02)  # a controller's pace: the kill lands mid-run
            runner.flush()
        except NotLeader:
            continue
        time.sleep(0.1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
