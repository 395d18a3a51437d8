"""The fake provider: an in-memory stand-in for Modal or EC2 that tests and examples script.

It implements the provider port (:class:`~lifecycle.adapters.provider.Provider`, with
:class:`FakeSpec` as its spec), as upstream's fake does (``docs/upstream/pod-nodeclaim.md``,
"Providers"): Provision gives id ``fake-N``, endpoint ``fake://<id>``, ``reserved=True``,
idempotent by claim, and the instance is Running at once, so the first poll reads
Running/Ready. Terminate deletes it; List returns them all.

On top of that it is scriptable, so a test can make an instance boot slowly
(``boot_ticks``/``start_pending`` and :meth:`FakeProvider.boot`), wait on a readiness probe
(``probe`` and :meth:`FakeProvider.confirm_ready`), fail, stop, exit, vanish, and make the
next List, Provision or Terminate fail. :meth:`FakeProvider.observe` turns what a List shows
into the Pod machine's observations, and :class:`FakeNode` plays the virtual node's
CreatePod / poll / DeletePod loop against a runner, optionally recording a replayable trace::

    provider = FakeProvider(boot_ticks=1)
    recorder = TraceRecorder()
    node = FakeNode(provider, Runner(), recorder=recorder)
    node.create_pod(pod, at)           # CreateRequested, ProvisionSucceeded -> Initializing
    node.poll(at + 15s)                # InstancePending (booting)
    node.poll(at + 30s)                # InstanceRunning -> Running, Ready
    recorder.write("saw.jsonl")        # lifecycle replay saw.jsonl
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Protocol

import attrs

from .._core.observation import Observation
from .._core.redact import redact, redact_observation
from .._core.refs import ObjectRef
from ..adapters.base import (
    Clock,
    InstanceState,
    ProviderError,
    at_or_now,
    check_attempt,
    classify_exit,
    state_observation,
    utc_now,
)
from ..adapters.provider import PollOutcome, ProvisionOutcome, TerminateOutcome, Tracked
from ..adapters.recording import ObservationRecorder
from ..machines._claims import claim_name, claim_ref
from ..machines.nodeclaim import PodAbsent
from ..machines.pod import (
    CreateRequested,
    DeletionRequested,
    InstanceAbsent,
    InstanceUnknown,
    ProvisionErrored,
    ProvisionRejected,
    ProvisionSucceeded,
    TerminateFailed,
    TerminateSucceeded,
)

__all__ = ["FakeInstance", "FakeNode", "FakeProvider", "FakeSpec", "ObservationSink"]


@attrs.frozen(slots=True)
class FakeSpec:
    """What a pod asks of the fake provider: how its instance boots. ``None`` takes the
    provider's default (see :class:`FakeProvider`).

    Attributes:
        boot_ticks: how many Lists show the new instance Pending before it runs.
        start_pending: keep it Pending until :meth:`FakeProvider.boot`.
        probe: give it a readiness probe that has not passed yet.
    """

    boot_ticks: int | None = None
    start_pending: bool | None = None
    probe: bool | None = None


#: The spec of a pod that takes every default.
DEFAULT_SPEC = FakeSpec()


@attrs.frozen(slots=True)
class FakeInstance:
    """What :meth:`FakeProvider.list` shows of one instance (a snapshot, not a handle).

    Attributes:
        id: the instance's id.
        claim: the claim name it is tagged with.
        state: its state.
        endpoint: where it answers.
        exit_code: its exit code once it ended.
        ready: its readiness probe passed (or it has none).
    """

    id: str
    claim: str
    state: InstanceState
    endpoint: str
    exit_code: int | None = None
    ready: bool = True


@attrs.define(slots=True)
class _Instance:
    id: str
    claim: str
    state: InstanceState
    endpoint: str
    exit_code: int | None = None
    ready: bool = True
    #: Lists left that show it Pending before it runs by itself (None: wait for ``boot``).
    boot_left: int | None = 0

    def snapshot(self) -> FakeInstance:
        return FakeInstance(
            self.id, self.claim, self.state, self.endpoint, self.exit_code, self.ready
        )


class FakeProvider:
    """An in-memory provider keyed by claim name, scripted by the test that owns it.

    ``reserved`` is what Provision reports (upstream fake: ``True``; ``False`` behaves like a
    Modal create, held at Provisioning until a poll sees it). ``boot_ticks=N`` shows a new
    instance Pending for its first ``N`` Lists, then Running; ``start_pending=True`` keeps it
    Pending until :meth:`boot`. ``probe=True`` gives new instances a readiness probe that has
    not passed until :meth:`confirm_ready`. Each can also be set per pod by its
    :class:`FakeSpec`. ``clock`` stamps observations when a call passes no ``at``.

    Args:
        reserved: what Provision reports as ``reserved``.
        boot_ticks: how many Lists a new instance shows Pending before it runs, not negative.
        start_pending: new instances stay Pending until :meth:`boot`.
        probe: new instances have a readiness probe that has not passed.
        clock: what stamps an observation when a call passes no ``at``; a test passes a fixed
            clock to replay a run exactly.

    Raises:
        ValueError: ``boot_ticks`` is negative.
    """

    name = "fake"

    def __init__(
        self,
        *,
        reserved: bool = True,
        boot_ticks: int = 0,
        start_pending: bool = False,
        probe: bool = False,
        clock: Clock = utc_now,
    ) -> None:
        if boot_ticks < 0:
            raise ValueError(f"boot_ticks must not be negative, got {boot_ticks}")
        self.reserved = reserved
        self.boot_ticks = boot_ticks
        self.start_pending = start_pending
        self.probe = probe
        self.clock = clock
        self._instances: dict[str, _Instance] = {}
        self._by_claim: dict[str, str] = {}
        self._next = 0
        self._list_errors: deque[str] = deque()
        self._provision_script: deque[tuple[str, str]] = deque()
        self._terminate_errors: deque[str] = deque()
        #: Every provider call, in order: ``("provision", claim)``, ``("terminate", id)``,
        #: ``("list",)``. Tests assert on it (e.g. that Terminate was called once).
        self.calls: list[tuple[str, ...]] = []

    @staticmethod
    def claim(ref: ObjectRef) -> str:
        """The claim name that tags ``ref``'s instance: ``<ns>-<name>``.

        Args:
            ref: the pod.

        Returns:
            The claim name.
        """
        return claim_name(ref.namespace, ref.name)

    # -- the provider port --------------------------------------------------------------------
    def provision(
        self,
        ref: ObjectRef,
        spec: FakeSpec = DEFAULT_SPEC,
        *,
        attempt: int = 0,
        at: datetime | None = None,
    ) -> ProvisionOutcome:
        """Create an instance for ``ref``'s claim (or find the one it has) and say so as the
        Pod observation: :class:`ProvisionSucceeded`, or a scripted rejection or error.
        ``attempt`` changes nothing here: a claim has one instance while it has any.

        Args:
            ref: the pod.
            spec: how its instance boots.
            attempt: which CreatePod attempt this is, from 0.
            at: when; ``None``: the provider's clock.

        Returns:
            The Pod observation of the outcome.
        """
        check_attempt(attempt)
        at = at_or_now(at, self.clock)
        claim = self.claim(ref)
        self.calls.append(("provision", claim))
        if self._provision_script:
            kind, error = self._provision_script.popleft()
            if kind == "reject":
                return ProvisionRejected(at=at, error=redact(error))
            return ProvisionErrored(at=at, error=redact(error))
        existing = self._by_claim.get(claim)
        inst = self._create(claim, spec) if existing is None else self._instances[existing]
        return ProvisionSucceeded(
            at=at, reserved=self.reserved, instance_id=inst.id, endpoint=inst.endpoint
        )

    def observe(
        self, pods: Mapping[ObjectRef, Tracked[FakeSpec]], *, at: datetime | None = None
    ) -> dict[ObjectRef, PollOutcome]:
        """One List, read for each pod (as a poll of every tracked pod does).

        A failed List is :class:`InstanceUnknown` for all (it changes nothing); a pod whose
        instance (by its tracked id, else by its claim) the List does not contain is
        :class:`InstanceAbsent`; otherwise the instance's state.

        Args:
            pods: the tracked pods, each with its instance id when known.
            at: when; ``None``: the provider's clock.

        Returns:
            One Pod observation per pod.
        """
        at = at_or_now(at, self.clock)
        try:
            listing = self.list()
        except ProviderError as e:
            return {ref: InstanceUnknown(at=at, error=redact(str(e))) for ref in pods}
        by_id = {inst.id: inst for inst in listing}
        by_claim = {inst.claim: inst for inst in listing}
        out: dict[ObjectRef, PollOutcome] = {}
        for ref, pod in pods.items():
            inst = by_id.get(pod.instance_id) or by_claim.get(self.claim(ref))
            if inst is None:
                out[ref] = InstanceAbsent(at=at)
            else:
                out[ref] = state_observation(
                    inst.state,
                    at,
                    instance_id=inst.id,
                    endpoint=inst.endpoint,
                    readiness_confirmed=inst.ready,
                    exit_code=inst.exit_code,
                )
        return out

    def terminate(
        self, ref: ObjectRef, pod: Tracked[FakeSpec], *, at: datetime | None = None
    ) -> TerminateOutcome:
        """Delete the pod's instance (by id, else its claim's). Idempotent: an unknown id, or a
        pod without an instance, is success. A scripted failure (see
        :meth:`fail_next_terminate`) is :class:`TerminateFailed`.

        Args:
            ref: the pod.
            pod: what is tracked of it (its instance id, when known).
            at: when; ``None``: the provider's clock.

        Returns:
            :class:`TerminateSucceeded` or :class:`TerminateFailed`.
        """
        at = at_or_now(at, self.clock)
        instance_id = pod.instance_id or self._by_claim.get(self.claim(ref), "")
        self.calls.append(("terminate", instance_id))
        if self._terminate_errors:
            return TerminateFailed(at=at, error=redact(self._terminate_errors.popleft()))
        self._drop(instance_id)
        return TerminateSucceeded(at=at)

    # -- inspection ---------------------------------------------------------------------------
    def list(self) -> list[FakeInstance]:
        """Every instance, as snapshots. Each successful List is one tick for booting
        instances. Raises a scripted :class:`ProviderError` (see :meth:`fail_next_list`).

        Returns:
            A snapshot of every instance.

        Raises:
            ProviderError: a scripted List failure.
        """
        self.calls.append(("list",))
        if self._list_errors:
            raise ProviderError(self._list_errors.popleft())
        shown = [inst.snapshot() for inst in self._instances.values()]
        for inst in self._instances.values():
            if inst.state is InstanceState.PENDING and inst.boot_left:
                inst.boot_left -= 1
                if inst.boot_left == 0:
                    inst.state = InstanceState.RUNNING
        return shown

    def find(self, claim: str) -> FakeInstance | None:
        """The instance tagged with ``claim``, without a List (no tick, no scripted error).

        Args:
            claim: the claim name.

        Returns:
            A snapshot of its instance, or ``None`` when it has none.
        """
        iid = self._by_claim.get(claim)
        return None if iid is None else self._instances[iid].snapshot()

    def get(self, instance_id: str) -> FakeInstance:
        """One instance, as a snapshot.

        Args:
            instance_id: the instance's id (``fake-1`` ...).

        Returns:
            Its snapshot.

        Raises:
            KeyError: no instance has that id.
        """
        return self._get(instance_id).snapshot()

    # -- scripting ----------------------------------------------------------------------------
    def boot(self, instance_id: str) -> None:
        """A Pending instance finishes booting: Running.

        Args:
            instance_id: the instance's id (``fake-1`` ...).

        Raises:
            KeyError: no instance has that id.
        """
        inst = self._get(instance_id)
        inst.state, inst.boot_left = InstanceState.RUNNING, 0

    def pend(self, instance_id: str) -> None:
        """The instance reads Pending again (e.g. EC2 status checks failing) until :meth:`boot`.

        Args:
            instance_id: the instance's id (``fake-1`` ...).

        Raises:
            KeyError: no instance has that id.
        """
        inst = self._get(instance_id)
        inst.state, inst.boot_left = InstanceState.PENDING, None

    def confirm_ready(self, instance_id: str) -> None:
        """The instance's readiness probe passed (the latch never demotes).

        Args:
            instance_id: the instance's id (``fake-1`` ...).

        Raises:
            KeyError: no instance has that id.
        """
        self._get(instance_id).ready = True

    def fail(self, instance_id: str, exit_code: int | None = 1) -> None:
        """The instance entered a failed state (e.g. exited 1).

        Args:
            instance_id: the instance's id (``fake-1`` ...).
            exit_code: its exit code; ``None``: unknown.

        Raises:
            KeyError: no instance has that id.
        """
        inst = self._get(instance_id)
        inst.state, inst.exit_code = InstanceState.FAILED, exit_code

    def stop(self, instance_id: str, exit_code: int | None = 0) -> None:
        """The instance stopped or was terminated but is still listed.

        Args:
            instance_id: the instance's id (``fake-1`` ...).
            exit_code: its exit code; ``None``: unknown.

        Raises:
            KeyError: no instance has that id.
        """
        inst = self._get(instance_id)
        inst.state, inst.exit_code = InstanceState.TERMINATED, exit_code

    def exit(self, instance_id: str, exit_code: int) -> None:
        """The instance exited with ``exit_code``, classified as upstream does: 0, 124 and
        137 are Terminated, anything else Failed.

        Args:
            instance_id: the instance's id (``fake-1`` ...).
            exit_code: its exit code, which decides Terminated or Failed.

        Raises:
            KeyError: no instance has that id.
        """
        inst = self._get(instance_id)
        inst.state, inst.exit_code = classify_exit(exit_code), exit_code

    def vanish(self, instance_id: str) -> None:
        """The instance disappears from List (reclaimed, filtered out, deleted behind our back).

        Args:
            instance_id: the instance's id (``fake-1`` ...).

        Raises:
            KeyError: no instance has that id.
        """
        self._get(instance_id)
        self._drop(instance_id)

    def fail_next_list(self, error: str = "fake: List failed", times: int = 1) -> None:
        """The next ``times`` Lists raise :class:`ProviderError` (polls read InstanceUnknown).

        Args:
            error: the List's error, as the provider would word it.
            times: how many calls fail, at least 1.

        Raises:
            ValueError: ``times`` is less than 1.
        """
        self._list_errors.extend([error] * _positive(times))

    def reject_next_provision(
        self, error: str = "fake: InsufficientCapacity", times: int = 1
    ) -> None:
        """The next ``times`` Provisions are refused: :class:`ProvisionRejected` (the pod fails).

        Args:
            error: the refusal, as the provider would word it.
            times: how many calls fail, at least 1.

        Raises:
            ValueError: ``times`` is less than 1.
        """
        self._provision_script.extend([("reject", error)] * _positive(times))

    def error_next_provision(self, error: str = "fake: 503 unavailable", times: int = 1) -> None:
        """The next ``times`` Provisions fail unattributably: :class:`ProvisionErrored`
        (the pod keeps provisioning, and CreatePod is retried).

        Args:
            error: the error, as the provider would word it.
            times: how many calls fail, at least 1.

        Raises:
            ValueError: ``times`` is less than 1.
        """
        self._provision_script.extend([("error", error)] * _positive(times))

    def fail_next_terminate(self, error: str = "fake: Terminate failed", times: int = 1) -> None:
        """The next ``times`` Terminates fail: :class:`TerminateFailed` (nothing is deleted).

        Args:
            error: the error, as the provider would word it.
            times: how many calls fail, at least 1.

        Raises:
            ValueError: ``times`` is less than 1.
        """
        self._terminate_errors.extend([error] * _positive(times))

    # -- internals ----------------------------------------------------------------------------
    def _create(self, claim: str, spec: FakeSpec) -> _Instance:
        ticks = self.boot_ticks if spec.boot_ticks is None else spec.boot_ticks
        if ticks < 0:
            raise ValueError(f"boot_ticks must not be negative, got {ticks}")
        pending = self.start_pending if spec.start_pending is None else spec.start_pending
        self._next += 1
        iid = f"fake-{self._next}"
        inst = _Instance(
            iid,
            claim,
            InstanceState.PENDING if pending or ticks else InstanceState.RUNNING,
            f"fake://{iid}",
            ready=not (self.probe if spec.probe is None else spec.probe),
            boot_left=None if pending else ticks,
        )
        self._instances[iid] = inst
        self._by_claim[claim] = iid
        return inst

    def _get(self, instance_id: str) -> _Instance:
        try:
            return self._instances[instance_id]
        except KeyError:
            known = ", ".join(self._instances) or "none"
            raise KeyError(f"no fake instance {instance_id!r} (known: {known})") from None

    def _drop(self, instance_id: str) -> None:
        inst = self._instances.pop(instance_id, None)
        if inst is not None:
            self._by_claim.pop(inst.claim, None)


def _positive(times: int) -> int:
    if times < 1:
        raise ValueError(f"times must be at least 1, got {times}")
    return times


class ObservationSink(Protocol):
    """Whatever takes observations: a :class:`~lifecycle.Runner`, or a test double."""

    def observe(self, ref: ObjectRef, observation: Observation) -> Any:
        """Take one observation of ``ref``.

        Args:
            ref: the object observed.
            observation: what was seen.

        Returns:
            Whatever the sink returns (a runner: the outcome).
        """
        ...


class FakeNode:
    """The virtual node's loop on the fake provider, feeding ``sink`` (a runner).

    ``create_pod`` is CreatePod (CreateRequested, then the Provision outcome), ``poll`` one
    List read for every tracked pod, ``delete_pod`` DeletePod (DeletionRequested, then the
    Terminate outcome), ``pod_gone`` the NodeClaim controller finding the pod absent. Each
    method returns what the sink returned, one per observation, and every observation is also
    handed to ``recorder`` so the run can be saved as a trace.

    Args:
        provider: the fake provider the node places pods on.
        sink: what takes the observations (a runner).
        recorder: what also records every observation, so the run can be saved as a trace;
            ``None``: nothing records.
        pool: the pool a pod is created for when :meth:`create_pod` names none.
    """

    def __init__(
        self,
        provider: FakeProvider,
        sink: ObservationSink,
        *,
        recorder: ObservationRecorder | None = None,
        pool: str = "default",
    ) -> None:
        self.provider = provider
        self.sink = sink
        self.recorder = recorder
        self.pool = pool
        #: Pods whose instance the node knows, by uid: their ref and what the provider
        #: needs to find the instance (polled by :meth:`poll`).
        self.tracked: dict[str, tuple[ObjectRef, Tracked[FakeSpec]]] = {}

    claim = staticmethod(FakeProvider.claim)

    def feed(self, ref: ObjectRef, observation: Observation) -> Any:
        """Redact ``observation``, record it (if recording) and hand it to the sink.

        Args:
            ref: the object observed.
            observation: what was seen.

        Returns:
            What the sink returned.
        """
        observation = redact_observation(observation)
        if self.recorder is not None:
            self.recorder.record(ref, observation)
        return self.sink.observe(ref, observation)

    def create_pod(
        self,
        ref: ObjectRef,
        at: datetime,
        *,
        pool: str | None = None,
        spec: FakeSpec = DEFAULT_SPEC,
    ) -> list[Any]:
        """CreatePod: :class:`CreateRequested`, then the Provision outcome; a provisioned pod is
        tracked for :meth:`poll`.

        Args:
            ref: the pod.
            at: when.
            pool: the pool; ``None``: the node's.
            spec: how its instance boots.

        Returns:
            What the sink returned, one per observation.
        """
        results = [
            self.feed(
                ref,
                CreateRequested(at=at, pool=pool or self.pool, provider=self.provider.name),
            )
        ]
        outcome = self.provider.provision(ref, spec, at=at)
        results.append(self.feed(ref, outcome))
        if isinstance(outcome, ProvisionSucceeded):
            self.tracked[ref.uid] = (ref, Tracked(spec, outcome.instance_id))
        elif isinstance(outcome, ProvisionRejected):  # a rejected pod is tracked with id ""
            self.tracked[ref.uid] = (ref, Tracked(spec))
        return results

    def poll(self, at: datetime) -> list[Any]:
        """One List read for every tracked pod.

        Args:
            at: when.

        Returns:
            What the sink returned, one per tracked pod.
        """
        if not self.tracked:
            return []
        pods = dict(self.tracked.values())
        seen = self.provider.observe(pods, at=at)
        return [self.feed(ref, seen[ref]) for ref in pods]

    def delete_pod(self, ref: ObjectRef, at: datetime) -> list[Any]:
        """DeletePod: :class:`DeletionRequested`, then the Terminate outcome; a terminated pod is no
        longer tracked.

        Args:
            ref: the pod.
            at: when.

        Returns:
            What the sink returned, one per observation.
        """
        results = [self.feed(ref, DeletionRequested(at=at))]
        _, pod = self.tracked.get(ref.uid, (ref, Tracked(DEFAULT_SPEC)))
        outcome = self.provider.terminate(ref, pod, at=at)
        if isinstance(outcome, TerminateSucceeded):
            self.tracked.pop(ref.uid, None)
        results.append(self.feed(ref, outcome))
        return results

    def pod_gone(self, ref: ObjectRef, at: datetime) -> Any:
        """The NodeClaim controller reconciles and finds ``ref`` gone.

        Args:
            ref: the pod.
            at: when.

        Returns:
            What the sink returned for the claim's :class:`PodAbsent`.
        """
        self.tracked.pop(ref.uid, None)
        return self.feed(claim_ref(ref), PodAbsent(at=at))
