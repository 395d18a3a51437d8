"""The Restore attempt's states, reasons, status record and observations."""

from __future__ import annotations

from datetime import datetime

import attrs

from ..._core.observation import Observation, Tick
from ..._core.refs import Condition
from .._quantity import parse_limit
from ._checks import CheckResult
from ._facts import (
    AttemptKey,
    Gpu,
    GpuPair,
    Manifest,
    PriorVerdict,
    RestorePolicy,
    TargetFacts,
    Volume,
)

# -- states ------------------------------------------------------------------------------------
NEW = ""
PENDING = "Pending"
GATE_A = "GateA"
SKIPPED = "Skipped"
CLAIMED = "Claimed"
GATE_B = "GateB"
RESTORING = "Restoring"
RECORDING = "Recording"
REJECTED = "Rejected"
UNKNOWN = "Unknown"
RESTORED = "Restored"
FAILED = "Failed"
TERMINAL = (REJECTED, UNKNOWN, RESTORED, FAILED)
STATES = (NEW, PENDING, GATE_A, SKIPPED, CLAIMED, GATE_B, RESTORING, RECORDING, *TERMINAL)

# -- conditions --------------------------------------------------------------------------------
COMPATIBLE_CONDITION = "SnapshotRestoreCompatible"
RESTORED_CONDITION = "Restored"
SKIP_ANNOTATION = "nvidia.com/snapshot-skip-compat-check"

# -- event reasons (state events) --------------------------------------------------------------
COMPAT_CHECK_SKIPPED = "CompatCheckSkipped"
COMPAT_CHECK_STARTED = "CompatCheckStarted"
RESTORE_REQUESTED = "RestoreRequested"
RESTORE_STARTED = "RestoreStarted"
RESTORE_INCOMPATIBLE = "RestoreIncompatible"
RESTORE_COMPAT_UNKNOWN = "RestoreCompatUnknown"
RESTORE_ALREADY_FAILED = "RestoreAlreadyFailed"
RESTORE_SUCCEEDED = "RestoreSucceeded"
RESTORE_FAILED = "RestoreFailed"
RESTORE_VERDICT_RECORDED = "RestoreVerdictRecorded"
RESTORE_ATTEMPT_OPENED = "RestoreAttemptOpened"
# -- action reasons (events that are not transitions) ------------------------------------------
INVALID_SKIP_ANNOTATION = "InvalidSkipAnnotation"
RESTORE_COMPAT_PARTIAL = "RestoreCompatPartial"
RESTORE_COMPAT_UNCHECKED = "RestoreCompatUnchecked"
RESTORE_STATUS_UPDATE_FAILED = "RestoreStatusUpdateFailed"
# -- Restored condition reasons ----------------------------------------------------------------
ARTIFACT_PENDING = "ArtifactPending"
SNAPSHOT_PENDING = "SnapshotPending"
RESTORE_IN_PROGRESS = "RestoreInProgress"

# -- cleanup steps (each idempotent, each recorded when done) ----------------------------------
KILL_PLACEHOLDER = "kill-placeholder"
UNDO_MOUNTS = "undo-mounts"
RELEASE_CLAIM = "release-claim"
REMOVE_FINALIZER = "remove-finalizer"


@attrs.frozen(slots=True)
class RestoreStatus:
    """One restore attempt. ``state`` is the exclusive state; ``reason``/``message`` belong to
    the last state event. ``compatible`` and ``restored`` are the Pod conditions the host
    writes (``SnapshotRestoreCompatible``, ``Restored``). In ``Recording``, ``recording`` names
    the settled state the verdict will enter once the Pod write succeeded: the verdict is
    memoised here, before that write, and nothing re-enters a gate while it holds.
    ``pairing`` is gate B's GPU pairing for the device-map builder. ``message``, the
    conditions' messages and ``write_error`` hold free-text errors only redacted (the full
    text is in the observation).

    Attributes:
        state: the attempt's exclusive state.
        reason: the last state event's reason.
        message: the last state event's message, redacted.
        pod_uid: the Pod's UID; empty until the attempt is opened.
        content_uid: the snapshot content's UID.
        container: the container restored.
        policy: the policy in force.
        policy_hash: its :meth:`~RestorePolicy.hash`, part of the attempt's key.
        bypass: what skipped the check (``"pod"`` annotation, ``"node"`` switch) or ``""``.
        code: the verdict's primary code.
        gate: the gate that gave it (``"A"``, ``"B"``).
        checks: that gate's check results.
        pairing: gate B's GPU pairing, for the device-map builder.
        skipped_facts: on a legacy manifest, the facts neither gate could compare.
        compatible: the Pod's ``SnapshotRestoreCompatible`` condition, when set.
        restored: the Pod's ``Restored`` condition, when set.
        recording: in ``Recording``, the state the verdict enters once its Pod write succeeded.
        write_failures: how many Pod writes of the verdict failed in a row (the backoff's
            exponent).
        write_error: the last write error, redacted.
        retry_at: when the next Pod write is due.
        quiet_until: until when a further write failure emits no Warning, so a failing API server
            is not flooded.
        unavailable_since: when target discovery first failed; its deadline counts from here.
        target_failures: how many target discoveries failed in a row.
        invalid_annotation: the skip annotation's value when it was invalid (kept to say so once).
        cleanup_pending: the cleanup steps the verdict asks for.
        cleanup_done: the steps done so far (each is idempotent).
    """

    state: str = NEW
    reason: str = ""
    message: str = ""
    pod_uid: str = ""
    content_uid: str = ""
    container: str = ""
    policy: RestorePolicy = attrs.field(factory=RestorePolicy)
    policy_hash: str = ""
    bypass: str = ""
    code: str = ""
    gate: str = ""
    checks: tuple[CheckResult, ...] = ()
    pairing: tuple[GpuPair, ...] = ()
    skipped_facts: tuple[str, ...] = ()
    compatible: Condition | None = None
    restored: Condition | None = None
    recording: str = ""
    write_failures: int = 0
    write_error: str = ""
    retry_at: datetime | None = None
    quiet_until: datetime | None = None
    unavailable_since: datetime | None = None
    target_failures: int = 0
    invalid_annotation: str | None = None
    cleanup_pending: tuple[str, ...] = ()
    cleanup_done: tuple[str, ...] = ()

    @property
    def key(self) -> AttemptKey:
        return AttemptKey(self.pod_uid, self.content_uid, self.container, self.policy_hash)

    @property
    def opened(self) -> bool:
        return bool(self.pod_uid)


# -- observations ------------------------------------------------------------------------------
def _nonempty(_: object, attribute: attrs.Attribute[str], value: str) -> None:
    if not value.strip():
        raise ValueError(f"{attribute.name} must not be empty")


def _limit(_: object, attribute: attrs.Attribute[str | None], value: str | None) -> None:
    if value:
        parse_limit(value)  # QuantityError is a ValueError: the observation is refused


def _target_gpus(
    _: object, attribute: attrs.Attribute[tuple[Gpu, ...]], value: tuple[Gpu, ...]
) -> None:
    if any(not g.model.strip() or not g.uuid for g in value):
        raise ValueError(f"{attribute.name}: every target GPU needs a uuid and a model")
    if len({g.uuid for g in value}) != len(value):
        raise ValueError(f"{attribute.name}: target GPU UUIDs repeat")


@attrs.frozen(slots=True, kw_only=True)
class AttemptOpened(Observation):
    """The agent decided to restore ``container`` of pod ``pod_uid`` from snapshot content
    ``content_uid`` under ``policy``. Keys the attempt; never names a container ID.

    Attributes:
        pod_uid: the Pod's UID, not empty.
        content_uid: the snapshot content's UID, not empty.
        container: the container to restore, not empty.
        policy: the policy in force.
    """

    pod_uid: str = attrs.field(validator=_nonempty)
    content_uid: str = attrs.field(validator=_nonempty)
    container: str = attrs.field(validator=_nonempty)
    policy: RestorePolicy = attrs.field(factory=RestorePolicy)

    @property
    def key(self) -> AttemptKey:
        return AttemptKey(self.pod_uid, self.content_uid, self.container, self.policy.hash())


@attrs.frozen(slots=True, kw_only=True)
class PodObserved(Observation):
    """A reconcile read the pod: the skip ``annotation`` (``None``: absent), the node-wide
    switch (read live), conditions it already carries, and whether the artifact (PodSnapshot)
    and its bound content are Ready.

    Attributes:
        annotation: the Pod's skip annotation; ``None`` when absent.
        node_skip: the node-wide skip switch is on.
        priors: refusals the Pod already carries.
        artifact_ready: the PodSnapshot is Ready.
        content_ready: its bound content is Ready.
    """

    annotation: str | None = None
    node_skip: bool = False
    priors: tuple[PriorVerdict, ...] = ()
    artifact_ready: bool = True
    content_ready: bool = True


@attrs.frozen(slots=True, kw_only=True)
class GateAFacts(Observation):
    """Gate A's inputs: the manifest, and the node and destination container spec.

    Attributes:
        manifest: what the snapshot recorded.
        cpu_arch: the node's CPU architecture, not empty.
        kernel_version: the node's kernel release, not empty.
        memory_limit: the destination container's memory limit, a quantity when set.
        cpu_limit: the destination container's CPU limit, a quantity when set.
    """

    manifest: Manifest
    cpu_arch: str = attrs.field(validator=_nonempty)
    kernel_version: str = attrs.field(validator=_nonempty)
    memory_limit: str | None = attrs.field(default=None, validator=_limit)
    cpu_limit: str | None = attrs.field(default=None, validator=_limit)

    @property
    def target(self) -> TargetFacts:
        return TargetFacts(
            cpu_arch=self.cpu_arch,
            kernel_version=self.kernel_version,
            memory_limit=self.memory_limit,
            cpu_limit=self.cpu_limit,
        )


@attrs.frozen(slots=True, kw_only=True)
class ManifestUnreadable(Observation):
    """The manifest could not be read or parsed.

    Attributes:
        error: why it could not be read.
    """

    error: str


@attrs.frozen(slots=True, kw_only=True)
class PlaceholderResolved(Observation):
    """The placeholder container was resolved and the node's GPUs discovered."""


@attrs.frozen(slots=True, kw_only=True)
class GateBFacts(Observation):
    """Gate B's inputs: the manifest again, and the placeholder's status, rootfs and GPUs
    (``paths``: externalized mount paths present under the target rootfs). Every fact is
    stated: an empty ``image_id`` or ``driver_version`` means it could not be read.

    Attributes:
        manifest: what the snapshot recorded.
        image_id: the placeholder's image; empty when it could not be read.
        paths: the externalized mount paths present under the target rootfs.
        volumes: the destination's mounts.
        gpus: the node's GPUs, each with a UUID and a model, UUIDs distinct.
        driver_version: the node's NVIDIA driver version; empty when it could not be read.
    """

    manifest: Manifest
    image_id: str
    paths: tuple[str, ...]
    volumes: tuple[Volume, ...]
    gpus: tuple[Gpu, ...] = attrs.field(validator=_target_gpus)
    driver_version: str

    @property
    def target(self) -> TargetFacts:
        return TargetFacts(
            image_id=self.image_id,
            paths=self.paths,
            volumes=self.volumes,
            gpus=self.gpus,
            driver_version=self.driver_version,
        )


@attrs.frozen(slots=True, kw_only=True)
class TargetFactsUnavailable(Observation):
    """Target discovery failed (nvidia-smi, the rootfs read): retried until the deadline.

    Attributes:
        error: why discovery failed.
    """

    error: str


@attrs.frozen(slots=True, kw_only=True)
class RestoreCompleted(Observation):
    """CRIU, CUDA and the sentinel all succeeded."""


@attrs.frozen(slots=True, kw_only=True)
class RestoreErrored(Observation):
    """CRIU or CUDA failed.

    Attributes:
        error: what failed, in full (the status keeps it redacted).
    """

    error: str


@attrs.frozen(slots=True, kw_only=True)
class StatusWritten(Observation):
    """The host wrote the verdict's Pod conditions (and released what the verdict releases)."""


@attrs.frozen(slots=True, kw_only=True)
class StatusWriteFailed(Observation):
    """Writing the verdict's Pod conditions failed; only the write is retried.

    Attributes:
        error: why the write failed, in full (the status keeps it redacted).
    """

    error: str


@attrs.frozen(slots=True, kw_only=True)
class CleanupStepDone(Observation):
    """One idempotent cleanup step finished (``undo-mounts``, ``remove-finalizer`` ...).

    Attributes:
        step: the step's name.
    """

    step: str


OBSERVATIONS: tuple[type[Observation], ...] = (
    AttemptOpened,
    PodObserved,
    GateAFacts,
    ManifestUnreadable,
    PlaceholderResolved,
    GateBFacts,
    TargetFactsUnavailable,
    RestoreCompleted,
    RestoreErrored,
    StatusWritten,
    StatusWriteFailed,
    CleanupStepDone,
    Tick,
)
