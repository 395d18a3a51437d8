"""A deployable controller for the Job machine: ``Job`` objects in by list and watch, their
status and Events out, crash-safe (the walkthrough: ``docs/guides/walkthrough.md``).

Run it against the fake cluster the library ships (no cluster needed)::

    python jobs_controller.py --fake

against the cluster of your kubeconfig (``KUBECONFIG`` or ``--kubeconfig``), or, in a Pod, the
in-cluster one (the image of ``Dockerfile``, the manifests of ``deploy/``)::

    python jobs_controller.py --namespace ml

What the controller knows of a Job comes from the object alone, through :func:`job_observations`:
its spec (``maxRestarts``, its ``metadata.generation``) and the workload's phase. A real Job
controller would create the workload and watch it; this example takes the phase from the Job's
annotation :data:`WORKLOAD` (``Pending``, ``Running``, ``Succeeded``, ``Failed``), so that you can
play the workload with ``kubectl annotate``. Every observation it makes is safe to make again
(a relist after a restart changes nothing and sends no Event twice).

Configuration, by flag or environment: ``--namespace`` (``WATCH_NAMESPACE``; all by default),
``--health-port`` (``LIFECYCLE_HEALTH_PORT``, 8081; the Deployment's probes), ``--kubeconfig``
(``KUBECONFIG``), ``--fake`` (start a :class:`~lifecycle.testing.FakeApiServer` in this process
with the Job CRD registered and one Job, ``default/demo``, and write its kubeconfig to
``--fake-kubeconfig``; create, update and delete Jobs there with ``kubectl`` or the
``kubernetes`` client: ``docs/guides/walkthrough.md``). ``SIGTERM`` or ``SIGINT`` ends it
within ``--shutdown-timeout`` seconds.

Two replicas or more: ``--leader-election`` (``LEADER_ELECTION=1``). The replicas campaign for
the Lease ``--lease-name`` (``jobs-controller``) in ``--lease-namespace`` (the Pod's own
namespace); only the holder writes (its store behind a :class:`~lifecycle.leader.LeaderGate`),
the others watch and keep their caches warm, and when the holder dies another takes over
within ``--lease-duration`` plus two ``--retry-period`` (client-go's timings by default: 15 s,
10 s ``--renew-deadline``, 2 s), sending what the dead one committed and did not deliver. Each
replica's identity is ``--leader-identity`` (``LEADER_IDENTITY``; by default its host name,
which is its Pod's name, and a random suffix).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from lifecycle import Observation, Runner
from lifecycle.emitters.kubernetes import KubernetesEmitter
from lifecycle.host import HostLoop, Leader, Watched
from lifecycle.leader import LeaderElector, LeaderGate, LeaseLock, default_identity
from lifecycle.machines import MachineRegistry
from lifecycle.machines.job import (
    JOB,
    SpecUpdated,
    Submitted,
    WorkloadCreated,
    WorkloadFailed,
    WorkloadPending,
    WorkloadRunning,
    WorkloadSucceeded,
)
from lifecycle.manifests import HEALTH_PORT, Health, api_resource, crd
from lifecycle.stores.kubernetes import CustomResource, KubernetesStore, ObjectCache, ObjectChange

__all__ = [
    "JOBS",
    "WORKLOAD",
    "build",
    "elector",
    "job_observations",
    "main",
    "register_crd",
]

_JOB = api_resource(JOB)
#: where Job objects live (the CRD ``lifecycle manifests job`` writes)
JOBS = CustomResource(_JOB.group, _JOB.version, _JOB.plural)
#: the annotation that stands in for the workload's phase in this example
WORKLOAD = "example.lifecycle.dev/workload"

_PHASES: dict[str, type[Observation]] = {
    "Pending": WorkloadPending,
    "Running": WorkloadRunning,
    "Succeeded": WorkloadSucceeded,
    "Failed": WorkloadFailed,
}


def job_observations(change: ObjectChange, at: datetime) -> list[Observation] | None:
    """What a change of a Job object means to its machine: the spec it was submitted with,
    its workload created, its generation, and the workload's phase (from :data:`WORKLOAD`).
    A deletion needs nothing: the status lived on the object."""
    if change.type == "DELETED":
        return None
    metadata = change.object.get("metadata") or {}
    spec = change.object.get("spec") or {}
    generation = int(metadata.get("generation") or 1)
    seen: list[Observation] = [
        Submitted(at=at, max_restarts=int(spec.get("maxRestarts", 0)), generation=generation),
        WorkloadCreated(at=at),  # here the controller would create the workload
        SpecUpdated(at=at, generation=generation),
    ]
    phase = (metadata.get("annotations") or {}).get(WORKLOAD, "")
    if phase in _PHASES:
        seen.append(_PHASES[phase](at=at))
    return seen


def register_crd(cluster: Any) -> None:
    """Serve the Job CRD ``lifecycle manifests job`` writes on a fake cluster (as
    ``kubectl apply -f deploy/`` does on a real one)."""
    schema = crd(JOB)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    cluster.register_crd(_JOB.group, _JOB.version, _JOB.plural, _JOB.kind, schema)


def build(
    api: Any = None,
    *,
    namespace: str | None = None,
    health: Health | None = None,
    leader: Leader | None = None,
    **options: Any,
) -> HostLoop:
    """The controller: a :class:`~lifecycle.host.HostLoop` watching Jobs (in ``namespace``, or
    all), their status kept by :class:`KubernetesStore` on the objects themselves, each
    transition a Kubernetes Event. ``api``: a ``kubernetes.client.ApiClient`` or ``None`` for
    the loaded configuration. ``leader``: anything with ``is_leader()`` (a Lease elector:
    :func:`elector`); the store writes only while it answers yes. ``None`` writes always (one
    replica). ``options`` go to the loop. What a crashed (or deposed) predecessor committed
    and did not deliver, the loop sends at its first cycle as the writer."""
    resources = {"Job": JOBS}
    cache = ObjectCache(api, resources=resources, namespace=namespace)
    store: Any = KubernetesStore(api, resources=resources, reader=cache.get)
    if leader is not None:
        store = LeaderGate(store, leader)  # every write refused unless we hold the Lease
    events = KubernetesEmitter.for_api(api, resolve=cache.resolve, machines=[JOB])
    runner = Runner(store, [events], machines=MachineRegistry([JOB]), links=())
    watched = {"Job": Watched(JOBS, job_observations, namespace=namespace)}
    return HostLoop(runner, watched, api=api, cache=cache, health=health, leader=leader, **options)


def elector(api: Any, args: argparse.Namespace, on_started: Any = None) -> LeaderElector:
    """The candidate of this replica for the Lease ``args.lease_name``; ``on_started`` runs
    when it starts to lead (the loop's ``wake``, so it need not wait to notice)."""
    lock = LeaseLock(args.lease_name, args.lease_namespace, args.leader_identity, api=api)
    return LeaderElector(
        lock,
        lease_duration=args.lease_duration,
        renew_deadline=args.renew_deadline,
        retry_period=args.retry_period,
        on_started_leading=on_started,
    )


def _own_namespace() -> str:
    """The namespace this Pod runs in (its service account's), else ``default``."""
    path = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    return "default"


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="A controller for the Job machine.")
    parser.add_argument("--namespace", default=os.environ.get("WATCH_NAMESPACE") or None)
    parser.add_argument(
        "--health-port", type=int, default=int(os.environ.get("LIFECYCLE_HEALTH_PORT", HEALTH_PORT))
    )
    parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG") or None)
    parser.add_argument(
        "--fake", action="store_true", help="run against an in-process fake cluster"
    )
    parser.add_argument("--fake-kubeconfig", default="fake-kubeconfig")
    parser.add_argument("--shutdown-timeout", type=float, default=10.0)
    parser.add_argument("--resync", type=float, default=300.0)
    election = parser.add_argument_group("leader election (two replicas or more)")
    election.add_argument(
        "--leader-election",
        action="store_true",
        default=os.environ.get("LEADER_ELECTION", "").lower() in ("1", "true", "yes"),
    )
    election.add_argument("--lease-name", default="jobs-controller")
    election.add_argument("--lease-namespace", default=None)
    election.add_argument(
        "--leader-identity", default=os.environ.get("LEADER_IDENTITY") or default_identity()
    )
    election.add_argument("--lease-duration", type=float, default=15.0)
    election.add_argument("--renew-deadline", type=float, default=10.0)
    election.add_argument("--retry-period", type=float, default=2.0)
    args = parser.parse_args(argv)
    args.lease_namespace = args.lease_namespace or _own_namespace()
    return args


def _api_client(args: argparse.Namespace) -> Any:
    from kubernetes import client, config  # type: ignore[import-untyped]

    if args.kubeconfig:
        config.load_kube_config(config_file=args.kubeconfig)
    else:
        try:
            config.load_incluster_config()  # in a Pod, with its service account
        except config.ConfigException:
            config.load_kube_config()  # ~/.kube/config
    return client.ApiClient()


def main(argv: Sequence[str] | None = None) -> int:
    args = _arguments(argv)
    fake = None
    if args.fake:
        from lifecycle.testing import FakeApiServer

        fake = FakeApiServer()
        register_crd(fake)
        fake.add_object(JOBS.plural, "default", "demo", spec={"maxRestarts": 1})
        args.kubeconfig = fake.kubeconfig(args.fake_kubeconfig)
        print(f"fake cluster at {fake.url}; kubeconfig {args.kubeconfig}", flush=True)
    health = Health()
    port = health.serve(args.health_port)
    api = _api_client(args)
    leader = None
    loop: HostLoop
    if args.leader_election:
        leader = elector(api, args, on_started=lambda: loop.wake())
    loop = build(
        api,
        namespace=args.namespace,
        health=health,
        leader=leader,
        shutdown_timeout=args.shutdown_timeout,
        resync=args.resync,
    )
    if leader is not None:
        leader.start()
        print(f"campaigning for the Lease as {leader.identity}", flush=True)
    print(f"watching Jobs; probes on port {port}", flush=True)
    try:
        loop.run()  # until SIGTERM or SIGINT; closes the runner
    finally:
        loop.runner.store.close()  # writes the delivered marks
        if leader is not None:
            leader.stop()  # releases the Lease: another replica takes over at once
        health.close()
        if fake is not None:
            fake.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
