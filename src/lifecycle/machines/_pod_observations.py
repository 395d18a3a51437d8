"""The Pod machine's observations: what a provider, a List or the kubelet was seen to do.

Split from :mod:`lifecycle.machines.pod` (which re-exports every name) to keep modules small.
"""

from __future__ import annotations

import attrs

from .._core.observation import Observation


# -- observations ---------------------------------------------------------------------------
@attrs.frozen(slots=True, kw_only=True)
class CreateRequested(Observation):
    """CreatePod started: the pod is about to be provisioned on ``provider`` for ``pool``.

    Attributes:
        pool: the pool the pod asks for.
        provider: the provider it is provisioned on.
    """

    pool: str = "default"
    provider: str = "fake"


@attrs.frozen(slots=True, kw_only=True)
class ConfigInvalid(Observation):
    """CreatePod could not start: the pool is unreadable or an env reference is unresolved.

    Attributes:
        error: what is wrong, for the pod's message.
    """

    error: str


@attrs.frozen(slots=True, kw_only=True)
class ProvisionSucceeded(Observation):
    """Provision returned an instance. ``reserved`` means it holds capacity already.

    Attributes:
        reserved: the instance holds capacity already (an adopted, running one).
        instance_id: the provider's instance id.
        endpoint: where it answers, when known.
    """

    reserved: bool
    instance_id: str
    endpoint: str = ""


@attrs.frozen(slots=True, kw_only=True)
class ProvisionRejected(Observation):
    """The provider refused (auth, capacity, quota, unsupported): the pod fails.

    Attributes:
        error: the provider's refusal, redacted.
    """

    error: str


@attrs.frozen(slots=True, kw_only=True)
class ProvisionErrored(Observation):
    """Provision failed for a reason not attributable to the request (transport, 5xx).

    Attributes:
        error: what failed, redacted; the pod keeps provisioning.
    """

    error: str


@attrs.frozen(slots=True, kw_only=True)
class InstancePending(Observation):
    """A poll found the instance, not yet running (or running with failing status checks).

    Attributes:
        instance_id: the provider's instance id.
        endpoint: where it will answer, when known.
    """

    instance_id: str = ""
    endpoint: str = ""


@attrs.frozen(slots=True, kw_only=True)
class InstanceRunning(Observation):
    """A poll found the instance running. ``readiness_confirmed`` is false while a readiness
    probe is configured and has not yet passed: such a pod is never Ready.

    Attributes:
        instance_id: the provider's instance id.
        endpoint: where it answers; the pod IP when it is an address.
        readiness_confirmed: the readiness probe passed (or none is configured).
    """

    instance_id: str = ""
    endpoint: str = ""
    readiness_confirmed: bool = True


@attrs.frozen(slots=True, kw_only=True)
class InstanceFailed(Observation):
    """A poll found the instance failed (e.g. a non-zero exit other than 124 and 137).

    Attributes:
        instance_id: the provider's instance id.
        exit_code: its exit code, when known.
        detail: the provider's reason, redacted.
    """

    instance_id: str = ""
    exit_code: int | None = None
    detail: str = ""


@attrs.frozen(slots=True, kw_only=True)
class InstanceTerminated(Observation):
    """A poll found the instance stopped or terminated (exit 0, 124 timeout, 137 killed).
    ``preempted`` says the provider took the capacity back (an EC2 spot reclaim).

    Attributes:
        instance_id: the provider's instance id.
        exit_code: its exit code, when known.
        detail: the provider's reason, redacted.
        preempted: the provider reclaimed the capacity.
    """

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
    failed to list). It changes nothing.

    Attributes:
        error: why it could not be observed, redacted.
    """

    error: str


@attrs.frozen(slots=True, kw_only=True)
class DeletionRequested(Observation):
    """The Pod got a deletionTimestamp."""


@attrs.frozen(slots=True, kw_only=True)
class TerminateSucceeded(Observation):
    """DeletePod: the provider's Terminate succeeded (or found nothing to terminate)."""


@attrs.frozen(slots=True, kw_only=True)
class TerminateFailed(Observation):
    """DeletePod: Terminate failed; the kubelet retries and the NodeClaim is the backstop.

    Attributes:
        error: what failed, redacted.
    """

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
