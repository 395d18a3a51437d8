"""The Pod machine's observations: what a provider, a List or the kubelet was seen to do.

Split from :mod:`lifecycle.machines.pod` (which re-exports every name) to keep modules small.
"""

from __future__ import annotations

import attrs

from .._core.observation import Observation


# -- observations ---------------------------------------------------------------------------
@attrs.frozen(slots=True, kw_only=True)
class CreateRequested(Observation):
    """CreatePod started: the pod is about to be provisioned on ``provider`` for ``pool``."""

    pool: str = "default"
    provider: str = "fake"


@attrs.frozen(slots=True, kw_only=True)
class ConfigInvalid(Observation):
    """CreatePod could not start: the pool is unreadable or an env reference is unresolved."""

    error: str


@attrs.frozen(slots=True, kw_only=True)
class ProvisionSucceeded(Observation):
    """Provision returned an instance. ``reserved`` means it holds capacity already."""

    reserved: bool
    instance_id: str
    endpoint: str = ""


@attrs.frozen(slots=True, kw_only=True)
class ProvisionRejected(Observation):
    """The provider refused (auth, capacity, quota, unsupported): the pod fails."""

    error: str


@attrs.frozen(slots=True, kw_only=True)
class ProvisionErrored(Observation):
    """Provision failed for a reason not attributable to the request (transport, 5xx)."""

    error: str


@attrs.frozen(slots=True, kw_only=True)
class InstancePending(Observation):
    """A poll found the instance, not yet running (or running with failing status checks)."""

    instance_id: str = ""
    endpoint: str = ""


@attrs.frozen(slots=True, kw_only=True)
class InstanceRunning(Observation):
    """A poll found the instance running. ``readiness_confirmed`` is false while a readiness
    probe is configured and has not yet passed: such a pod is never Ready."""

    instance_id: str = ""
    endpoint: str = ""
    readiness_confirmed: bool = True


@attrs.frozen(slots=True, kw_only=True)
class InstanceFailed(Observation):
    """A poll found the instance failed (e.g. a non-zero exit other than 124 and 137)."""

    instance_id: str = ""
    exit_code: int | None = None
    detail: str = ""


@attrs.frozen(slots=True, kw_only=True)
class InstanceTerminated(Observation):
    """A poll found the instance stopped or terminated (exit 0, 124 timeout, 137 killed).
    ``preempted`` says the provider took the capacity back (an EC2 spot reclaim)."""

    instance_id: str = ""
    exit_code: int | None = None
    detail: str = ""
    preempted: bool = False


@attrs.frozen(slots=True, kw_only=True)
class InstanceAbsent(Observation):
    """A successful List did not contain the pod's claim: the instance is gone."""


@attrs.frozen(slots=True, kw_only=True)
class InstanceUnknown(Observation):
    """The instance could not be observed (List failed, tags unreadable, poll error, a region
    failed to list). It changes nothing."""

    error: str


@attrs.frozen(slots=True, kw_only=True)
class DeletionRequested(Observation):
    """The Pod got a deletionTimestamp."""


@attrs.frozen(slots=True, kw_only=True)
class TerminateSucceeded(Observation):
    """DeletePod: the provider's Terminate succeeded (or found nothing to terminate)."""


@attrs.frozen(slots=True, kw_only=True)
class TerminateFailed(Observation):
    """DeletePod: Terminate failed; the kubelet retries and the NodeClaim is the backstop."""

    error: str


OBSERVATIONS: tuple[type[Observation], ...] = (
    CreateRequested,
    ConfigInvalid,
    ProvisionSucceeded,
    ProvisionRejected,
    ProvisionErrored,
    InstancePending,
    InstanceRunning,
    InstanceFailed,
    InstanceTerminated,
    InstanceAbsent,
    InstanceUnknown,
    DeletionRequested,
    TerminateSucceeded,
    TerminateFailed,
)
