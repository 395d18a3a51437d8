"""A kopf operator that runs the Job machine for a custom resource, its status kept in the resource.

    kopf run examples/kopf_operator.py --all-namespaces     # a cluster with this CRD:

    apiVersion: apiextensions.k8s.io/v1
    kind: CustomResourceDefinition
    metadata: {name: jobs.gpu.example.com}
    spec:
      group: gpu.example.com
      scope: Namespaced
      names: {kind: Job, plural: jobs, singular: job, shortNames: [gpujob]}
      versions:
        - name: v1
          served: true
          storage: true
          subresources: {status: {}}            # the store writes the status subresource
          schema:
            openAPIV3Schema:
              type: object
              properties:
                spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
                status: {type: object, x-kubernetes-preserve-unknown-fields: true}

Each ``jobs.gpu.example.com`` object is one lifecycle Job (``ObjectRef("Job", ns, name, uid)``).
kopf's watch events and timers become observations for one :class:`lifecycle.Runner`:

- ``@kopf.on.create`` / ``@kopf.on.resume``: ``Submitted`` (the spec), then the provider
  creates the workload (``WorkloadCreated``; ``BuildFailed``, ``CreateRejected``).
- ``@kopf.on.update`` of the spec: ``SpecUpdated`` (the new generation, status only).
- ``@kopf.timer``: poll the provider and feed what it says (``WorkloadPending``, ...), then a
  ``Tick`` (the machine's own timers: stalls, the measurement timeout).
- ``@kopf.on.delete``: delete the workload and deliver this object's undelivered Events, which
  live in its status and go with it (the Job machine has no deletion observation).
- ``@kopf.on.startup``: kopf's bookkeeping goes to annotations, the runner is built and
  :meth:`~lifecycle.Runner.redeliver` sends what a crash left; ``@kopf.on.cleanup`` closes it.

The machine's record, with its outbox, is the store's: in production a
``lifecycle.stores.kubernetes.KubernetesStore`` on the status subresource (the CRD needs
``subresources: {status: {}}`` and a status schema that keeps the store's fields). Whatever
kopf itself writes must stay out of ``status``: handlers return nothing (a returned value is
written into ``status.<handler id>``), no handler touches ``patch.status`` (a JSON merge patch
replaces a list such as ``status.conditions`` whole), and the startup handler moves kopf's
handler progress and its diff base to annotations.

kopf calls synchronous handlers from its thread pool: the one runner takes concurrent calls
(each commit is a compare-and-set on the object's record; a lost race is re-read and retried).

A host embedding the operator (``kopf.operator(memo=kopf.Memo(...))``, as the tests do) may
pass ``store``, ``emitters``, ``provider`` and ``clock`` in the operator's memo; what it leaves
out is built for production by :func:`production_store`, :func:`production_emitters` and
:class:`FakeWorkloads` (a scripted provider: put your workload API behind
:class:`WorkloadProvider`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import kopf

from lifecycle import Emitter, ObjectRef, Observation, Runner, Tick
from lifecycle.machines import job as j
from lifecycle.stores import CommitStore

GROUP, VERSION, PLURAL = "gpu.example.com", "v1", "jobs"
#: The prefix of kopf's annotations (handler progress, diff base, finalizer).
PREFIX = "gpu.example.com"
#: Seconds between two polls of one workload. No ``idle``: kopf's idle time restarts on every
#: change of the object's spec, labels or annotations, and would postpone polls while a user
#: edits the object, when they matter most.
POLL_INTERVAL = 15.0
#: Seconds after the object appears before its first poll: the create handler runs first.
FIRST_POLL_DELAY = 5.0
#: Seconds kopf waits before calling a handler again after a retryable failure.
RETRY_DELAY = 30.0

Clock = Callable[[], datetime]
#: The Job machine's states this operator tells apart: submitted (no workload yet), running.
SUBMITTED, IN_PROGRESS = "", "InProgress"


# -- the provider ---------------------------------------------------------------------------
@dataclass(frozen=True)
class WorkloadReport:
    """What the provider says about one workload: its ``phase`` (one of :data:`PHASES`)."""

    phase: str
    message: str = ""
    failure_log: str = ""
    nodes: tuple[str, ...] = ()


PHASES = ("Pending", "Running", "Succeeded", "Failed", "Missing")


class WorkloadRejected(Exception):
    """The provider refused to create the workload (retried: the operator backs off)."""


class WorkloadUnbuildable(Exception):
    """The workload cannot be built from the spec (the Job fails); ``unsupported``: no builder
    for its kind."""

    def __init__(self, error: str, *, unsupported: bool = False) -> None:
        super().__init__(error)
        self.unsupported = unsupported


class WorkloadProvider(Protocol):
    """Where the workloads run. Each call names a workload ``namespace/name`` (the Job's)."""

    def create(self, workload: str, spec: Mapping[str, Any]) -> None:
        """Create it; one that exists already is not an error (the call is retried). Raises
        :class:`WorkloadRejected` or :class:`WorkloadUnbuildable`."""

    def poll(self, workload: str) -> WorkloadReport:
        """Its current state (``Missing`` when the provider does not know it). Raises
        :class:`ConnectionError` when the provider cannot say."""

    def delete(self, workload: str) -> None:
        """Delete it; one that does not exist is not an error."""


@dataclass
class FakeWorkloads:
    """An in-memory :class:`WorkloadProvider`: each poll answers the next of the workload's
    scripted reports (the last one repeats); unscripted workloads are Pending, then Running,
    then Succeeded. ``refuse`` makes the next create of a workload raise that error."""

    scripts: dict[str, list[WorkloadReport]] = field(default_factory=dict)
    refuse: dict[str, Exception] = field(default_factory=dict)
    created: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)

    def script(self, workload: str, *reports: WorkloadReport) -> None:
        self.scripts[workload] = list(reports)

    def create(self, workload: str, spec: Mapping[str, Any]) -> None:
        error = self.refuse.pop(workload, None)
        if error is not None:
            raise error
        self.created.append(workload)  # every call, so a test sees a repeated one
        if workload not in self.scripts:
            self.script(workload, *(WorkloadReport(p) for p in ("Pending", "Running")))
            self.scripts[workload].append(WorkloadReport("Succeeded", "3 epochs"))

    def poll(self, workload: str) -> WorkloadReport:
        if workload not in self.created or workload in self.deleted:
            return WorkloadReport("Missing")
        reports = self.scripts[workload]
        return reports.pop(0) if len(reports) > 1 else reports[0]

    def delete(self, workload: str) -> None:
        self.deleted.append(workload)


def observation(report: WorkloadReport, at: datetime) -> Observation:
    """The Job machine's observation of a provider's report."""
    if report.phase == "Pending":
        return j.WorkloadPending(at=at, message=report.message)
    if report.phase == "Running":
        return j.WorkloadRunning(at=at)
    if report.phase == "Succeeded":
        return j.WorkloadSucceeded(at=at, message=report.message)
    if report.phase == "Failed":
        return j.WorkloadFailed(
            at=at, message=report.message, failure_log=report.failure_log, nodes=report.nodes
        )
    if report.phase == "Missing":
        return j.WorkloadMissing(at=at)
    raise ValueError(f"unknown workload phase {report.phase!r}; known: {', '.join(PHASES)}")


def submitted(spec: Mapping[str, Any], generation: int, at: datetime) -> j.Submitted:
    """The Job's ``Submitted`` from the custom resource's spec: ``workloadKind``, ``nodes``,
    ``maxRestarts``, ``checkpoint``, ``startupTimeoutSeconds``, ``stallThresholdSeconds``.
    Raises :class:`kopf.PermanentError` (kopf does not retry it) for a spec it refuses."""
    try:
        return _submitted(spec, generation, at)
    except (TypeError, ValueError) as e:
        raise kopf.PermanentError(f"invalid spec, nothing observed: {e}") from e


def _submitted(spec: Mapping[str, Any], generation: int, at: datetime) -> j.Submitted:
    return j.Submitted(
        at=at,
        workload_kind=str(spec.get("workloadKind", j.DEFAULT_WORKLOAD_KIND)),
        nodes=tuple(spec.get("nodes", ())),
        max_restarts=int(spec.get("maxRestarts", 0)),
        checkpoint=bool(spec.get("checkpoint", False)),
        startup_timeout_s=spec.get("startupTimeoutSeconds"),
        stall_threshold_s=spec.get("stallThresholdSeconds"),
        generation=generation,
    )


# -- building the runner --------------------------------------------------------------------
def make_runner(store: CommitStore, emitters: Sequence[Emitter]) -> Runner:
    """The operator's one runner: every object's observations, on ``store``."""
    return Runner(store, emitters)


def production_store() -> CommitStore:
    """The Job records in the custom resources' status subresource (in-cluster credentials,
    else the local kubeconfig)."""
    from kubernetes import client, config  # type: ignore[import-untyped]

    from lifecycle.stores.kubernetes import CustomResource, KubernetesStore

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    resources = {"Job": CustomResource(GROUP, VERSION, PLURAL)}
    store: CommitStore = KubernetesStore(client.ApiClient(), resources=resources)
    return store


def production_emitters() -> list[Emitter]:
    """Kubernetes Events regarding the custom resource (its apiVersion, not the default Job's)."""
    from lifecycle.emitters.kubernetes import KubernetesEmitter

    return [KubernetesEmitter.for_api(api_versions={"Job": f"{GROUP}/{VERSION}"})]


@dataclass
class Operator:
    """What the handlers share (``memo.operator``)."""

    runner: Runner
    provider: WorkloadProvider
    clock: Clock

    def ref(self, namespace: str | None, name: str, uid: str) -> ObjectRef:
        return ObjectRef("Job", namespace or "", name, uid)

    def state(self, ref: ObjectRef) -> str | None:
        """The committed state (``""`` before the workload exists), ``None`` if no record."""
        record = self.runner.store.load(self.runner.machine_for(ref), ref)
        return None if record is None else str(record.status.state)

    def undelivered(self, ref: ObjectRef) -> int:
        """How many of ``ref``'s committed events the outbox still holds (a leasing store
        leases them to this runner, which :meth:`~lifecycle.Runner.redeliver` takes back)."""
        claim = getattr(self.runner.store, "claim_undelivered", None)
        return 0 if claim is None else sum(t.ref.uid == ref.uid for t in claim())


def _operator(memo: kopf.Memo) -> Operator:
    operator: Operator = memo.operator
    return operator


def _workload(namespace: str | None, name: str) -> str:
    return f"{namespace or ''}/{name}"


# -- the handlers (each returns None: a returned value would be written into the status) ------
@kopf.on.startup()
def start(settings: kopf.OperatorSettings, memo: kopf.Memo, logger: Any, **_: Any) -> None:
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=PREFIX, key="last-handled-configuration"
    )
    settings.persistence.finalizer = f"{PREFIX}/lifecycle"
    store = memo.get("store")
    emitters = memo.get("emitters")
    runner = make_runner(
        production_store() if store is None else store,
        production_emitters() if emitters is None else emitters,
    )
    provider = memo.get("provider")
    clock = memo.get("clock")
    memo.operator = Operator(
        runner,
        FakeWorkloads() if provider is None else provider,
        _utc_now if clock is None else clock,
    )
    delivered = runner.redeliver()  # what a crashed predecessor committed and never sent
    logger.info("lifecycle runner ready; %d undelivered events sent", delivered)


@kopf.on.cleanup()
def stop(memo: kopf.Memo, logger: Any, **_: Any) -> None:
    operator: Operator | None = memo.get("operator")
    if operator is None:
        return
    left = operator.runner.close()  # the outbox keeps them for the next start-up
    close = getattr(operator.runner.store, "close", None)
    if close is not None:
        close()
    logger.info("lifecycle runner closed; %d events left undelivered", left)


@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.resume(GROUP, VERSION, PLURAL)
def submit(
    spec: kopf.Spec,
    meta: kopf.Meta,
    name: str,
    namespace: str | None,
    uid: str,
    memo: kopf.Memo,
    logger: Any,
    **_: Any,
) -> None:
    operator = _operator(memo)
    ref = operator.ref(namespace, name, uid)
    now = operator.clock()
    operator.runner.observe(ref, submitted(spec, int(meta.get("generation", 1)), now))
    if operator.state(ref) != SUBMITTED:
        return  # resumed: the workload exists already, or the Job is decided
    try:
        operator.provider.create(_workload(namespace, name), spec)
    except WorkloadUnbuildable as e:
        error = str(e)
        operator.runner.observe(ref, j.BuildFailed(at=now, error=error, unsupported=e.unsupported))
        return
    except WorkloadRejected as e:
        operator.runner.observe(ref, j.CreateRejected(at=now, error=str(e)))
        raise kopf.TemporaryError(f"workload create rejected: {e}", delay=RETRY_DELAY) from e
    operator.runner.observe(ref, j.WorkloadCreated(at=now))


@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
def respec(
    meta: kopf.Meta,
    name: str,
    namespace: str | None,
    uid: str,
    memo: kopf.Memo,
    **_: Any,
) -> None:
    operator = _operator(memo)
    generation = int(meta.get("generation", 1))
    ref = operator.ref(namespace, name, uid)
    operator.runner.observe(ref, j.SpecUpdated(at=operator.clock(), generation=generation))


@kopf.timer(GROUP, VERSION, PLURAL, interval=POLL_INTERVAL, initial_delay=FIRST_POLL_DELAY)
def poll(
    name: str,
    namespace: str | None,
    uid: str,
    memo: kopf.Memo,
    logger: Any,
    **_: Any,
) -> None:
    operator = _operator(memo)
    ref = operator.ref(namespace, name, uid)
    state = operator.state(ref)
    if state is None or state == SUBMITTED:
        return  # the create handler has not created the workload yet
    now = operator.clock()
    if state == IN_PROGRESS:
        try:
            report = operator.provider.poll(_workload(namespace, name))
        except ConnectionError as e:
            logger.warning("workload poll failed, nothing observed: %s", e)
            return
        operator.runner.observe(ref, observation(report, now))
    operator.runner.observe(ref, Tick(at=now))  # the machine's timers (stalls, verdicts)


@kopf.on.delete(GROUP, VERSION, PLURAL)
def remove(
    name: str,
    namespace: str | None,
    uid: str,
    memo: kopf.Memo,
    logger: Any,
    **_: Any,
) -> None:
    operator = _operator(memo)
    ref = operator.ref(namespace, name, uid)
    operator.provider.delete(_workload(namespace, name))
    operator.runner.redeliver()
    operator.runner.flush()
    left = operator.undelivered(ref)
    if left:  # its outbox goes with the object: kopf keeps the finalizer until they are out
        raise kopf.TemporaryError(f"{left} events not delivered yet", delay=RETRY_DELAY)


def _utc_now() -> datetime:
    return datetime.now(UTC)


__all__ = [
    "FIRST_POLL_DELAY",
    "GROUP",
    "IN_PROGRESS",
    "PHASES",
    "PLURAL",
    "POLL_INTERVAL",
    "PREFIX",
    "RETRY_DELAY",
    "SUBMITTED",
    "VERSION",
    "FakeWorkloads",
    "Operator",
    "WorkloadProvider",
    "WorkloadRejected",
    "WorkloadReport",
    "WorkloadUnbuildable",
    "make_runner",
    "observation",
    "poll",
    "production_emitters",
    "production_store",
    "remove",
    "respec",
    "start",
    "stop",
    "submit",
    "submitted",
]
