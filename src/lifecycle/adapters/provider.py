"""The provider port: the one interface the fake, Modal and AWS adapters implement.

A host controller talks to any provider through three calls, each answering with the Pod
observation it feeds to :meth:`lifecycle.Runner.observe`::

    outcome = provider.provision(pod, spec)              # ProvisionSucceeded | Rejected | Errored
    tracked = {pod: Tracked.provisioned(spec, outcome)}  # what the host keeps (or rebuilds)
    for ref, seen in provider.observe(tracked).items():  # one List pass over tracked pods
        runner.observe(ref, seen)
    runner.observe(pod, provider.terminate(pod, tracked[pod]))  # TerminateSucceeded | Failed

What every implementation promises (:func:`lifecycle.testing.check_provider` checks it):

- **Idempotent by claim**: a pod's instance is found by its claim (``<namespace>-<name>``)
  before one is created, so a repeated ``provision`` adopts the first instance; ``attempt``
  counts the host's *deliberate* re-creates (0 for the first), never retries.
- **Errors are observations**: a provider failure is ``ProvisionErrored``/``ProvisionRejected``,
  ``InstanceUnknown`` (a poll that could not be made: never ``InstanceAbsent``) or
  ``TerminateFailed``, its text redacted; a provider call never raises for what the provider
  answered. Only a host's own mistake (an argument out of range) raises ``ValueError``.
- **Terminate is idempotent**: an unknown id, or a pod with no instance, is success; an empty
  id terminates whatever the pod's claim holds.
- **Time is the host's**: ``at`` stamps the observation (default: the provider's clock).

:class:`AsyncProvider` is the same port for asyncio hosts (the Modal adapter's core).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Generic, Protocol, TypeVar

import attrs

from .._core.refs import ObjectRef
from ..machines.pod import (
    InstanceAbsent,
    InstanceFailed,
    InstancePending,
    InstanceRunning,
    InstanceTerminated,
    InstanceUnknown,
    ProvisionErrored,
    ProvisionRejected,
    ProvisionSucceeded,
    TerminateFailed,
    TerminateSucceeded,
)

__all__ = [
    "AsyncProvider",
    "PollOutcome",
    "Provider",
    "ProvisionOutcome",
    "TerminateOutcome",
    "Tracked",
]

S = TypeVar("S")

#: What ``provision`` answers.
ProvisionOutcome = ProvisionSucceeded | ProvisionRejected | ProvisionErrored
#: What ``observe`` answers for one pod: its instance's state, absent, or unknown.
PollOutcome = (
    InstancePending
    | InstanceRunning
    | InstanceFailed
    | InstanceTerminated
    | InstanceAbsent
    | InstanceUnknown
)
#: What ``terminate`` answers.
TerminateOutcome = TerminateSucceeded | TerminateFailed


@attrs.frozen(slots=True)
class Tracked(Generic[S]):
    """A pod the host tracks on a provider: the ``spec`` it was provisioned from and the
    ``instance_id`` its ``ProvisionSucceeded`` reported (``""`` while unknown: the provider
    then finds the pod's instance by its claim). A host keeps it, or rebuilds it from the pod
    and its status after a restart.

    Attributes:
        spec: what the pod was provisioned from, in the provider's own spec type.
        instance_id: the instance's id; ``""`` while unknown, so a host that lost it (a
            restart mid-provision) still finds the instance by the pod's claim.
    """

    spec: S
    instance_id: str = ""

    @classmethod
    def provisioned(cls, spec: S, outcome: ProvisionOutcome) -> Tracked[S]:
        """The pod as ``provision`` left it: the instance id of a ``ProvisionSucceeded``,
        ``""`` otherwise.

        Args:
            spec: the spec the pod was provisioned from.
            outcome: what ``provision`` answered.

        Returns:
            The pod to keep and pass to ``observe`` and ``terminate``.
        """
        instance_id = outcome.instance_id if isinstance(outcome, ProvisionSucceeded) else ""
        return cls(spec, instance_id)


class Provider(Protocol[S]):
    """A provider that places pods on instances, generic over its spec type ``S``
    (:class:`~lifecycle.testing.fakes.FakeSpec`, ``SandboxSpec``, ``FleetSpec``)."""

    @property
    def name(self) -> str:
        """The provider's name, as ``CreateRequested.provider`` records it."""
        ...

    def provision(
        self, ref: ObjectRef, spec: S, *, attempt: int = 0, at: datetime | None = None
    ) -> ProvisionOutcome:
        """Adopt the pod's instance (found by its claim) or create one.

        Args:
            ref: the Pod; its claim (``<namespace>-<name>``) names the instance, so a
                repeated call adopts the first instance instead of creating a second.
            spec: what to run, in the provider's spec type.
            attempt: the host's deliberate re-creates of this pod (0 for the first), never a
                retry count: a new attempt gets a new instance.
            at: the time stamped on the observation; by default the provider's clock.

        Returns:
            ``ProvisionSucceeded``, ``ProvisionRejected`` (fails the pod) or
            ``ProvisionErrored`` (retried): a provider failure is an answer, not an exception.

        Raises:
            ValueError: ``attempt`` is not a non-negative int (the host's mistake).
        """
        ...

    def observe(
        self, pods: Mapping[ObjectRef, Tracked[S]], *, at: datetime | None = None
    ) -> dict[ObjectRef, PollOutcome]:
        """One observation pass: an outcome for every pod in ``pods``, and no other.

        Args:
            pods: the pods the host tracks, each with its spec and known instance id.
            at: the time stamped on the observations; by default the provider's clock.

        Returns:
            An outcome per pod: its instance's state, ``InstanceAbsent`` when a successful
            List did not find it, ``InstanceUnknown`` when it could not be looked at (never
            taken for absent, so a provider outage does not fail pods).
        """
        ...

    def terminate(
        self, ref: ObjectRef, pod: Tracked[S], *, at: datetime | None = None
    ) -> TerminateOutcome:
        """Terminate the pod's instance (by id, else whatever its claim holds).

        Args:
            ref: the Pod, whose claim finds the instance when ``pod.instance_id`` is empty.
            pod: the tracked pod.
            at: the time stamped on the observation; by default the provider's clock.

        Returns:
            ``TerminateSucceeded`` (an unknown or already gone instance included: terminate
            is idempotent) or ``TerminateFailed``.
        """
        ...


class AsyncProvider(Protocol[S]):
    """:class:`Provider` for asyncio hosts: the same calls, awaited."""

    @property
    def name(self) -> str: ...

    async def provision(
        self, ref: ObjectRef, spec: S, *, attempt: int = 0, at: datetime | None = None
    ) -> ProvisionOutcome:
        """:meth:`Provider.provision`, awaited.

        Args:
            ref: the Pod, whose claim names the instance.
            spec: what to run.
            attempt: the host's deliberate re-creates (0 for the first).
            at: the time stamped on the observation; by default the provider's clock.

        Returns:
            As :meth:`Provider.provision`.
        """
        ...

    async def observe(
        self, pods: Mapping[ObjectRef, Tracked[S]], *, at: datetime | None = None
    ) -> dict[ObjectRef, PollOutcome]:
        """:meth:`Provider.observe`, awaited.

        Args:
            pods: the pods the host tracks.
            at: the time stamped on the observations.

        Returns:
            An outcome per pod, as :meth:`Provider.observe`.
        """
        ...

    async def terminate(
        self, ref: ObjectRef, pod: Tracked[S], *, at: datetime | None = None
    ) -> TerminateOutcome:
        """:meth:`Provider.terminate`, awaited.

        Args:
            ref: the Pod.
            pod: the tracked pod.
            at: the time stamped on the observation.

        Returns:
            As :meth:`Provider.terminate`.
        """
        ...
