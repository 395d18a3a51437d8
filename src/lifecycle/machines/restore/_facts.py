"""Records of the Restore gate: the manifest's recorded facts, the target's facts, the policy,
the attempt key, and the table of machine-readable codes.

Behaviour follows ``docs/upstream/restore-gate.md`` (the checks, the manifest). Every record is a
frozen attrs class; observations of :mod:`lifecycle.machines.restore` nest them, so a trace
line can carry a whole manifest as nested JSON.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import attrs

from ..._core.errors import preview
from ..._core.refs import ObjectRef

#: The highest ``compat.schemaVersion`` this library understands.
SUPPORTED_SCHEMA = 1
#: Ephemeral volume kinds compare by kind only (there is no identity to compare).
EPHEMERAL_KINDS = frozenset({"EmptyDir", "Projected", "DownwardAPI"})
#: Externalized mounts CRIU rebuilds itself; they need not exist under the target rootfs.
REBUILT_MOUNTS = frozenset({"/", "/dev/shm"})

# -- codes: one CamelCase token on every surface (condition reason, log ``code``, Event note) --
CPU_ARCH_MISMATCH = "CpuArchMismatch"
KERNEL_VERSION_MISMATCH = "KernelVersionMismatch"
KERNEL_BELOW_MINIMUM = "KernelBelowMinimum"
IMAGE_DIGEST_MISMATCH = "ImageDigestMismatch"
MEMORY_LIMIT_INSUFFICIENT = "MemoryLimitInsufficient"
CPU_LIMIT_INSUFFICIENT = "CpuLimitInsufficient"
VOLUME_MISSING = "VolumeMissing"
VOLUME_IDENTITY_MISMATCH = "VolumeIdentityMismatch"
GPU_MODEL_MISMATCH = "GpuModelMismatch"
GPU_COUNT_MISMATCH = "GpuCountMismatch"
DRIVER_VERSION_MISMATCH = "DriverVersionMismatch"
DRIVER_BELOW_MINIMUM = "DriverBelowMinimum"

COMPAT_CHECK_SKIPPED = "CompatCheckSkipped"
MANIFEST_UNREADABLE = "ManifestUnreadable"
FACTS_INCOMPLETE = "FactsIncomplete"
MANIFEST_SCHEMA_UNSUPPORTED = "ManifestSchemaUnsupported"
TARGET_FACTS_UNAVAILABLE = "TargetFactsUnavailable"
LEGACY_MANIFEST = "LegacyManifest"
COMPATIBLE = "Compatible"

#: Mismatch codes and the kebab-case check names the Go implementation used (interop only).
#: Released codes are never renamed.
IMPL_NAMES: dict[str, str] = {
    CPU_ARCH_MISMATCH: "cpu-arch",
    KERNEL_VERSION_MISMATCH: "kernel-version",
    KERNEL_BELOW_MINIMUM: "kernel-minimum",
    IMAGE_DIGEST_MISMATCH: "image-digest",
    MEMORY_LIMIT_INSUFFICIENT: "memory-limit",
    CPU_LIMIT_INSUFFICIENT: "cpu-limit",
    VOLUME_MISSING: "mount",
    VOLUME_IDENTITY_MISMATCH: "mount",
    GPU_MODEL_MISMATCH: "gpu-model",
    GPU_COUNT_MISMATCH: "gpu-count",
    DRIVER_VERSION_MISMATCH: "driver-version",
    DRIVER_BELOW_MINIMUM: "driver-minimum",
}
#: Codes that are not a mismatch: the gate could not decide, was bypassed, or passed.
STATUS_CODES = (
    COMPAT_CHECK_SKIPPED,
    MANIFEST_UNREADABLE,
    FACTS_INCOMPLETE,
    MANIFEST_SCHEMA_UNSUPPORTED,
    TARGET_FACTS_UNAVAILABLE,
    LEGACY_MANIFEST,
    COMPATIBLE,
)


#: An error class as shown in messages; anything else (free text) is shown as ``unclassified``.
_ERRCLASS = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}")


def _nonempty(_: object, attribute: attrs.Attribute[str], value: str) -> None:
    if not value.strip():
        raise ValueError(f"{attribute.name} must not be empty")


def _one_of(*allowed: str) -> Any:
    def check(_: object, attribute: attrs.Attribute[str], value: str) -> None:
        if value not in allowed:
            raise ValueError(
                f"{attribute.name} must be one of {', '.join(allowed)}, not {preview(value)}"
            )

    return check


# -- facts ------------------------------------------------------------------------------------
@attrs.frozen(slots=True)
class Gpu:
    """One GPU: its UUID and product name (``productName`` as nvidia-smi reports it).

    Attributes:
        uuid: the GPU's UUID.
        model: its product name; GPUs pair only within one model.
    """

    uuid: str
    model: str = ""


@attrs.frozen(slots=True)
class Volume:
    """A mount: container ``path``, volume ``kind`` and its ``identifier`` (claim name, host
    path, CSI driver; empty for ephemeral kinds). ``PersistentVolumeClaim/models`` is
    ``Volume(path, "PersistentVolumeClaim", "models")``.

    Attributes:
        path: where it is mounted in the container, not empty.
        kind: the volume's kind (``PersistentVolumeClaim``, ``HostPath`` ...).
        identifier: what names it within its kind; empty for an ephemeral kind.
    """

    path: str = attrs.field(validator=_nonempty)
    kind: str = ""
    identifier: str = ""

    @classmethod
    def from_source(cls, path: str, volume_source: str) -> Volume:
        """From the manifest's ``volumeSource: "Kind[/identifier]"`` notation.

        Args:
            path: where it is mounted in the container.
            volume_source: the manifest's ``"Kind[/identifier]"``.

        Returns:
            The mount.
        """
        kind, _, identifier = volume_source.partition("/")
        return cls(path, kind, identifier)


@attrs.frozen(slots=True)
class CudaFacts:
    """``cudaRestore``: its presence with pids or GPUs means the snapshot has CUDA state.
    ``gpus`` is ``None`` in manifests older than v1 (only ``gpu_uuids`` was recorded).

    Attributes:
        pids: the processes whose CUDA state was captured.
        gpu_uuids: the source GPUs' UUIDs (all a v0 manifest recorded).
        gpus: the source GPUs with their models; ``None`` in a manifest older than v1.
        driver_version: the source's NVIDIA driver version, when recorded.
    """

    pids: tuple[int, ...] = ()
    gpu_uuids: tuple[str, ...] = ()
    gpus: tuple[Gpu, ...] | None = None
    driver_version: str | None = None

    @property
    def has_state(self) -> bool:
        return bool(self.pids or self.gpu_uuids or self.gpus)


def _fact_states(_: object, attribute: attrs.Attribute[Any], value: dict[str, str]) -> None:
    for key, state in value.items():
        if state != "recorded" and not state.startswith("unavailable:"):
            raise ValueError(
                f"{attribute.name}[{preview(key)}] must be 'recorded' or "
                f"'unavailable:<errclass>', not {preview(state)}"
            )


def _schema(_: object, attribute: attrs.Attribute[int | None], value: int | None) -> None:
    if value is not None and value < 0:
        raise ValueError(f"{attribute.name} must not be negative, got {value}")


@attrs.frozen(slots=True)
class Manifest:
    """The facts a snapshot recorded at capture (``manifest.yaml``), as the gates read them.

    ``schema_version`` is ``None`` when the manifest has no ``compat:`` header: a legacy v0
    manifest, of which only the v0 facts are compared. With a header, ``complete`` and
    ``facts`` (``{key: "recorded" | "unavailable:<errclass>"}``) say what the writer managed
    to record. ``None`` for a single fact means it was not recorded.

    Attributes:
        schema_version: the ``compat:`` header's schema, not negative; ``None``: a legacy v0
            manifest.
        complete: the writer recorded every fact it meant to.
        facts: each fact's state, ``"recorded"`` or ``"unavailable:<errclass>"``.
        cpu_arch: the source's CPU architecture.
        kernel_version: the source's kernel release.
        image_id: the source container's image, with its digest.
        memory_limit: the source container's memory limit, a Kubernetes quantity.
        cpu_limit: the source container's CPU limit, a Kubernetes quantity.
        ext_mounts: the externalized mount paths the restore needs under the target rootfs.
        volumes: the source container's mounts.
        cuda: the CUDA state captured, when there was any.
    """

    schema_version: int | None = attrs.field(default=None, validator=_schema)
    complete: bool = True
    facts: dict[str, str] = attrs.field(factory=dict, validator=_fact_states)
    cpu_arch: str | None = None
    kernel_version: str | None = None
    image_id: str | None = None
    memory_limit: str | None = None
    cpu_limit: str | None = None
    ext_mounts: tuple[str, ...] = ()
    volumes: tuple[Volume, ...] = ()
    cuda: CudaFacts | None = None

    @property
    def legacy(self) -> bool:
        return self.schema_version is None or self.schema_version == 0

    def unavailable(self, key: str) -> str | None:
        """The error class when the header marks ``key`` unavailable, else ``None`` (a class
        that is not one short token is ``unclassified``: it is shown in conditions).

        Args:
            key: the fact's key (``criuDump.extMnt`` ...).

        Returns:
            Why the writer could not record it (its error class), or ``None`` when it was recorded.
        """
        state = self.facts.get(key, "recorded")
        if state == "recorded":
            return None
        errclass = state.partition(":")[2]
        return errclass if _ERRCLASS.fullmatch(errclass) else "unclassified"


@attrs.frozen(slots=True)
class TargetFacts:
    """What the destination offers. Gate A reads the node and container spec; gate B the
    container status, rootfs and GPUs (``paths``: externalized mount paths present under the
    target rootfs; ``volumes``: the destination's mounts).

    Attributes:
        cpu_arch: the node's CPU architecture (gate A).
        kernel_version: the node's kernel release (gate A).
        memory_limit: the destination container's memory limit (gate A).
        cpu_limit: the destination container's CPU limit (gate A).
        image_id: the placeholder container's image (gate B).
        paths: the externalized mount paths present under the target rootfs (gate B).
        volumes: the destination's mounts (gate B).
        gpus: the node's GPUs (gate B).
        driver_version: the node's NVIDIA driver version (gate B).
    """

    cpu_arch: str = ""
    kernel_version: str = ""
    memory_limit: str | None = None
    cpu_limit: str | None = None
    image_id: str = ""
    paths: tuple[str, ...] = ()
    volumes: tuple[Volume, ...] = ()
    gpus: tuple[Gpu, ...] = ()
    driver_version: str = ""


@attrs.frozen(slots=True)
class GpuPair:
    """Source GPU ``source`` is restored onto target GPU ``target`` (same ``model``).

    Attributes:
        model: the model both GPUs are.
        source: the source GPU's UUID.
        target: the target GPU's UUID.
    """

    model: str
    source: str
    target: str


# -- policy and attempt key ---------------------------------------------------------------------
@attrs.frozen(slots=True)
class RestorePolicy:
    """How the gates decide. Only ``on_unknown`` and ``volumes`` change a verdict, so only
    they enter :meth:`hash` (and with it the attempt key).

    Attributes:
        on_unknown: ``"block"`` refuses a restore a check cannot decide; ``"warn"`` lets it run
            with an Unknown condition.
        volumes: ``"identity"`` compares what each mount is; ``"presence"`` only that it is there.
        publish_pass: write ``SnapshotRestoreCompatible=True`` on a pass too (by default only a
            problem is written, to spare the Pod a write).
        write_backoff_seconds: the first wait before a failed Pod write is retried, positive.
        write_backoff_cap_seconds: the longest wait between retries, positive.
        target_facts_deadline_seconds: how long target discovery may keep failing before the
            attempt gives up, not negative.
    """

    on_unknown: str = attrs.field(default="block", validator=_one_of("block", "warn"))
    volumes: str = attrs.field(default="identity", validator=_one_of("identity", "presence"))
    publish_pass: bool = False
    write_backoff_seconds: float = 5.0
    write_backoff_cap_seconds: float = 300.0
    target_facts_deadline_seconds: float = 300.0

    def __attrs_post_init__(self) -> None:
        if self.write_backoff_seconds <= 0 or self.write_backoff_cap_seconds <= 0:
            raise ValueError("write backoff and its cap must be positive")
        if self.target_facts_deadline_seconds < 0:
            raise ValueError("target_facts_deadline_seconds must not be negative")

    def hash(self) -> str:
        """The policy's fingerprint: ``on_unknown`` and ``volumes``, which change a verdict.

        Returns:
            12 hex characters of the verdict-changing fields: a policy change opens a new attempt.
        """
        canon = f"restore-policy/v1|on_unknown={self.on_unknown}|volumes={self.volumes}"
        return hashlib.sha256(canon.encode()).hexdigest()[:12]


@attrs.frozen(slots=True)
class AttemptKey:
    """One restore attempt: (pod UID, artifact = content UID + source container, policy hash).
    Never the container ID: a kubelet restart gives a new one, and must not open a new attempt.

    Attributes:
        pod_uid: the Pod's UID.
        content_uid: the snapshot content's UID.
        container: the source container's name.
        policy_hash: :meth:`RestorePolicy.hash` of the policy in force.
    """

    pod_uid: str
    content_uid: str
    container: str
    policy_hash: str

    @property
    def uid(self) -> str:
        """A stable object uid: ``<pod uid>-<16 hex of the artifact and policy>``."""
        canon = "\0".join((self.content_uid, self.container, self.policy_hash))
        return f"{self.pod_uid}-{hashlib.sha256(canon.encode()).hexdigest()[:16]}"


def attempt_ref(
    namespace: str,
    pod_name: str,
    pod_uid: str,
    content_uid: str,
    container: str,
    policy: RestorePolicy | None = None,
) -> ObjectRef:
    """The ref of a restore attempt; every replica and every trace derive the same uid.

    Args:
        namespace: the Pod's namespace.
        pod_name: the Pod's name.
        pod_uid: the Pod's UID.
        content_uid: the snapshot content's UID.
        container: the container restored.
        policy: the policy in force; ``None``: the default.

    Returns:
        The attempt's ref, its uid that of :class:`AttemptKey`.
    """
    key = AttemptKey(pod_uid, content_uid, container, (policy or RestorePolicy()).hash())
    return ObjectRef("RestoreAttempt", namespace, f"{pod_name}.{container}", key.uid)


@attrs.frozen(slots=True)
class PriorVerdict:
    """A refusal the pod already carries (its conditions outlive the agent): ``attempt`` is
    the attempt uid written beside it, ``condition`` is ``SnapshotRestoreCompatible`` (reason =
    the code) or ``Restored`` (reason ``RestoreIncompatible``).

    Attributes:
        attempt: the attempt uid written beside the condition; a refusal counts only for the
            same attempt.
        condition: the condition's type.
        status: the condition's status.
        reason: the condition's reason (the refusal's code).
        gate: the gate that refused, when written.
    """

    attempt: str
    condition: str = "SnapshotRestoreCompatible"
    status: str = "False"
    reason: str = ""
    gate: str = ""
