"""What every provider adapter shares: the provider-neutral instance state, exit-code
classification, the provider error, the mapping from an instance state to a Pod observation,
and the plumbing of a live adapter (its clock, and handing what it returns to a recorder).

Layering follows the domain (``docs/upstream/pod-nodeclaim.md``): provider vocabulary ->
:class:`InstanceState` (each adapter's own mapping) -> a Pod observation (here, once for all).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, TypeVar

from .._core.errors import LifecycleError
from .._core.observation import Observation
from .._core.redact import redact_observation
from .._core.refs import ObjectRef
from ..machines.pod import (
    InstanceFailed,
    InstancePending,
    InstanceRunning,
    InstanceTerminated,
)

if TYPE_CHECKING:
    from .recording import ObservationRecorder

__all__ = [
    "GONE_EXIT_CODES",
    "InstanceObservation",
    "InstanceState",
    "ProviderError",
    "classify_exit",
    "state_observation",
]


class InstanceState(enum.StrEnum):
    """The provider-neutral state of an instance (upstream ``InstanceState``)."""

    PENDING = "Pending"
    RUNNING = "Running"
    TERMINATED = "Terminated"
    FAILED = "Failed"


#: Exit codes that mean "the instance is gone" rather than "it failed": 0 (done), 124 (timeout),
#: 137 (killed). Every other code is a failure. Lossy inference, as upstream (Modal) does it.
GONE_EXIT_CODES = frozenset({0, 124, 137})


def classify_exit(exit_code: int) -> InstanceState:
    """What an instance's exit code says of it, when the provider says no more.

    Args:
        exit_code: the process's exit code; 124 (a timeout) and 137 (killed) count as gone,
            not failed, as upstream reads them, so a timed-out or evicted pod is not a failure.

    Returns:
        ``TERMINATED`` for 0, 124 and 137; ``FAILED`` for any other code.
    """
    return InstanceState.TERMINATED if exit_code in GONE_EXIT_CODES else InstanceState.FAILED


class ProviderError(LifecycleError):
    """A provider call failed. ``rejection`` marks an attributable refusal of the request
    (auth, capacity, quota, unsupported), which fails a pod; anything else is retried.

    Args:
        message: what failed, as the provider said it (redacted before it is journalled).
        rejection: the provider refused this request for a reason a retry will not change;
            ``False`` (transport, 5xx, throttling) makes the pod retry instead of fail.
    """

    def __init__(self, message: str, *, rejection: bool = False) -> None:
        super().__init__(message)
        self.rejection = rejection


InstanceObservation = InstancePending | InstanceRunning | InstanceFailed | InstanceTerminated


def state_observation(
    state: InstanceState,
    at: datetime,
    *,
    instance_id: str = "",
    endpoint: str = "",
    readiness_confirmed: bool = True,
    exit_code: int | None = None,
    detail: str = "",
    preempted: bool = False,
) -> InstanceObservation:
    """The Pod observation for an instance a successful List found in ``state``.

    Args:
        state: the instance's provider-neutral state (each adapter maps its own vocabulary).
        at: when it was observed.
        instance_id: the provider's id of the instance.
        endpoint: where it answers (an address), when known.
        readiness_confirmed: ``False`` while a readiness probe is configured and has not
            passed; such a pod is never Ready. Read only for ``RUNNING``.
        exit_code: the exit code of a finished instance, when known.
        detail: the provider's reason text for a finished instance.
        preempted: the provider took the capacity back (an EC2 spot reclaim), so the pod
            reports why it vanished. Read only for ``TERMINATED``.

    Returns:
        ``InstancePending``, ``InstanceRunning``, ``InstanceFailed`` or ``InstanceTerminated``.
    """
    if state is InstanceState.PENDING:
        return InstancePending(at=at, instance_id=instance_id, endpoint=endpoint)
    if state is InstanceState.RUNNING:
        return InstanceRunning(
            at=at,
            instance_id=instance_id,
            endpoint=endpoint,
            readiness_confirmed=readiness_confirmed,
        )
    if state is InstanceState.FAILED:
        return InstanceFailed(at=at, instance_id=instance_id, exit_code=exit_code, detail=detail)
    return InstanceTerminated(
        at=at, instance_id=instance_id, exit_code=exit_code, detail=detail, preempted=preempted
    )


Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


ObsT = TypeVar("ObsT", bound=Observation)


def check_attempt(attempt: int) -> int:
    """``attempt`` as the provider port takes it: a non-negative int (else ``ValueError``)."""
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 0:
        raise ValueError(f"attempt must be a non-negative int, not {attempt!r}")
    return attempt


def at_or_now(at: datetime | None, clock: Clock) -> datetime:
    """The time an observation is stamped with: the host's ``at``, else the adapter's clock."""
    return clock() if at is None else at


class RecordingMixin:
    """Mixin for a live adapter: every observation it returns is redacted (a provider's text
    enters the library here, so the journal, traces and events only ever see the redacted
    form) and also handed to ``recorder``."""

    recorder: ObservationRecorder | None

    def _emit(self, ref: ObjectRef, obs: ObsT) -> ObsT:
        obs = redact_observation(obs)
        if self.recorder is not None:
            self.recorder.record(ref, obs)
        return obs

    def _emit_all(self, out: dict[ObjectRef, ObsT]) -> dict[ObjectRef, ObsT]:
        return {ref: self._emit(ref, obs) for ref, obs in out.items()}
