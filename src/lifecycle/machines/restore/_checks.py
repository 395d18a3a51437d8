"""The Restore gate's checks table, and the pure rules behind it.

Every rule here is a pure function of recorded facts (:class:`Manifest`) and target facts
(:class:`TargetFacts`). A gate runs *all* of its checks in the fixed order of :data:`CHECKS`;
the primary code is the first failure and the message lists every problem
(``docs/upstream/restore-gate.md``, "The checks"). Compared values are shown in messages by
privacy class ("Privacy" there); :attr:`GateReport.debug` keeps the full values for debug logs only.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Sequence

import attrs

from ..._core.errors import preview
from ..._core.redact import redact
from .._quantity import QuantityError, parse_limit
from ._facts import (
    CPU_ARCH_MISMATCH,
    CPU_LIMIT_INSUFFICIENT,
    DRIVER_BELOW_MINIMUM,
    DRIVER_VERSION_MISMATCH,
    EPHEMERAL_KINDS,
    FACTS_INCOMPLETE,
    GPU_COUNT_MISMATCH,
    GPU_MODEL_MISMATCH,
    IMAGE_DIGEST_MISMATCH,
    KERNEL_BELOW_MINIMUM,
    KERNEL_VERSION_MISMATCH,
    LEGACY_MANIFEST,
    MANIFEST_SCHEMA_UNSUPPORTED,
    MEMORY_LIMIT_INSUFFICIENT,
    REBUILT_MOUNTS,
    SUPPORTED_SCHEMA,
    TARGET_FACTS_UNAVAILABLE,
    VOLUME_IDENTITY_MISMATCH,
    VOLUME_MISSING,
    Gpu,
    GpuPair,
    Manifest,
    RestorePolicy,
    TargetFacts,
    Volume,
)

PASS, FAIL, NA, SKIPPED, UNKNOWN = "pass", "fail", "n/a", "skipped", "unknown"
KERNEL_FLOOR = (5, 13)
DRIVER_FLOOR = 580
ARCH_ALIASES = {"x86_64": "amd64", "aarch64": "arm64"}


# -- the checks table ---------------------------------------------------------------------------
@attrs.frozen(slots=True)
class CheckSpec:
    """One row of the checks table. C4, C6 and C8 are reserved (the design doc skips them)."""

    id: str
    name: str
    gate: str
    codes: tuple[str, ...]
    facts: tuple[str, ...]
    rule: str


CHECKS: tuple[CheckSpec, ...] = (
    CheckSpec("C5", "cpu-arch", "A", (CPU_ARCH_MISMATCH,), ("host.cpuArch",),
              "exact, after the alias map (x86_64=amd64, aarch64=arm64)"),
    CheckSpec("C7", "kernel-version", "A", (KERNEL_VERSION_MISMATCH,), ("host.kernelVersion",),
              "exact release string"),
    CheckSpec("C7m", "kernel-minimum", "A", (KERNEL_BELOW_MINIMUM,), (),
              "target major.minor >= 5.13; n/a if unparseable"),
    CheckSpec("C9", "memory-limit", "A", (MEMORY_LIMIT_INSUFFICIENT,), ("k8s.memoryLimit",),
              "quantities: target >= source; target unset = unlimited; source unset = n/a"),
    CheckSpec("C10", "cpu-limit", "A", (CPU_LIMIT_INSUFFICIENT,), ("k8s.cpuLimit",),
              "quantities: target >= source; target unset = unlimited; source unset = n/a"),
    CheckSpec("C12", "image-digest", "B", (IMAGE_DIGEST_MISMATCH,), ("k8s.imageId",),
              "digest equality after unwrapping scheme:// and repo@; references not compared"),
    CheckSpec("C11", "mount", "B", (VOLUME_MISSING, VOLUME_IDENTITY_MISMATCH),
              ("criuDump.extMnt", "k8s.declaredVolumes"),
              "externalized paths exist (except / and /dev/shm); identity policy: kind and "
              "identifier match, ephemeral kinds by kind"),
    CheckSpec("C1", "gpu-model", "B", (GPU_MODEL_MISMATCH,), ("cudaRestore.sourceGpus",),
              "multiset of trimmed names; pairing by model, then UUID order"),
    CheckSpec("C2", "gpu-count", "B", (GPU_COUNT_MISMATCH,),
              ("cudaRestore.sourceGpus", "cudaRestore.sourceGpuUuids"),
              "exact; source 0 = n/a"),
    CheckSpec("C3", "driver-version", "B", (DRIVER_VERSION_MISMATCH,),
              ("cudaRestore.sourceDriverVersion",), "exact build string"),
    CheckSpec("C3m", "driver-minimum", "B", (DRIVER_BELOW_MINIMUM,), (),
              "target major >= 580; n/a if unparseable"),
)  # fmt: skip
RESERVED_IDS = ("C4", "C6", "C8")
_SPEC = {c.id: c for c in CHECKS}
#: Facts a legacy (v0, no header) manifest has: only checks reading these are compared.
LEGACY_FACTS = frozenset({"criuDump.extMnt", "cudaRestore.sourceGpuUuids"})


@attrs.frozen(slots=True)
class CheckResult:
    """What one check found. ``detail`` is privacy-safe (shown in conditions and Events).

    Attributes:
        id: the check's id (``C1`` ...).
        name: the check's name.
        outcome: what it found (pass, fail, unknown, not applicable, skipped).
        code: the reason code of a problem.
        detail: what differed, privacy-safe.
    """

    id: str
    name: str
    outcome: str
    code: str = ""
    detail: str = ""

    @property
    def problem(self) -> bool:
        return self.outcome in (FAIL, UNKNOWN)


@attrs.frozen(slots=True)
class GateReport:
    """A gate's verdict: every check's result in order, the GPU pairing, and debug lines.

    Attributes:
        gate: ``"A"`` or ``"B"``.
        results: every check's result, in order.
        pairing: the GPU pairing, when the models matched.
        debug: the compared values in full, for debug-level logs only.
        header_code: a problem with the manifest as a whole (an unsupported schema, an incomplete
            manifest).
        header_detail: what that problem is.
    """

    gate: str
    results: tuple[CheckResult, ...]
    pairing: tuple[GpuPair, ...] = ()
    debug: tuple[str, ...] = ()
    header_code: str = ""
    header_detail: str = ""

    @property
    def verdict(self) -> str:
        if any(r.outcome == FAIL for r in self.results):
            return FAIL
        if self.header_code or any(r.outcome == UNKNOWN for r in self.results):
            return UNKNOWN
        return PASS

    @property
    def code(self) -> str:
        """The primary code: the first failure, else the header's or first unknown's code."""
        first = next((r for r in self.results if r.outcome == FAIL), None)
        if first is None and self.header_code:
            return self.header_code
        first = first or next((r for r in self.results if r.outcome == UNKNOWN), None)
        return "" if first is None else first.code

    @property
    def skipped_facts(self) -> tuple[str, ...]:
        """On a legacy manifest: every fact either gate skips (listed once, at gate A)."""
        if not any(r.outcome == SKIPPED for r in self.results):
            return ()
        keys: list[str] = []
        for spec in CHECKS:
            if spec.facts and not set(spec.facts) & LEGACY_FACTS:
                keys.extend(f for f in spec.facts if f not in keys)
        return tuple(keys)

    def summary(self) -> str:
        """``code=X gate=A: X (C5 ...); Y (C9 ...)`` or a pass line; privacy-safe.

        Returns:
            One line for a condition or an Event.
        """
        if self.verdict == PASS:
            counts = {o: sum(r.outcome == o for r in self.results) for o in (PASS, NA, SKIPPED)}
            shown = ", ".join(f"{n} {o}" for o, n in counts.items() if n)
            return f"gate {self.gate} passed ({shown or 'no checks'})"
        problems = [f"{r.code} ({r.id} {r.name}: {r.detail})" for r in self.results if r.problem]
        if self.header_code:
            problems.insert(0, f"{self.header_code} ({self.header_detail})")
        return f"code={self.code} gate={self.gate}: " + "; ".join(problems)


# -- single-fact rules ---------------------------------------------------------------------------
def normalize_arch(arch: str) -> str:
    arch = arch.strip()
    return ARCH_ALIASES.get(arch, arch)


_DIGEST = re.compile(r"[a-z0-9]+(?:[+._-][a-z0-9]+)*:[0-9a-fA-F]{32,}")


def image_digest(image_id: str) -> str | None:
    """``docker-pullable://repo@sha256:…`` → ``sha256:…``; ``None`` when there is no digest
    (a tag reference is never compared)."""
    value = image_id.strip()
    if "://" in value:
        value = value.split("://", 1)[1]
    if "@" in value:
        value = value.rsplit("@", 1)[1]
    return value if _DIGEST.fullmatch(value) else None


def kernel_major_minor(release: str) -> tuple[int, int] | None:
    match = re.match(r"([0-9]+)\.([0-9]+)", release.strip())
    return None if match is None else (int(match[1]), int(match[2]))


def driver_major(version: str) -> int | None:
    match = re.match(r"([0-9]+)(?:\.|$)", version.strip())
    return None if match is None else int(match[1])


def pair_gpus(source: Sequence[Gpu], target: Sequence[Gpu]) -> tuple[GpuPair, ...] | None:
    """Pair source GPUs to target GPUs: group by trimmed model, then pair in sorted UUID order
    within each model. ``None`` when the model multisets differ. Independent of input order;
    a bijection within each model. UUIDs must be unique on each side.

    Args:
        source: the snapshot's GPUs.
        target: the node's GPUs.

    Returns:
        One pair per source GPU, or ``None`` when the two sides' models differ.
    """
    for side, gpus in (("source", source), ("target", target)):
        uuids = [g.uuid for g in gpus]
        if len(set(uuids)) != len(uuids):
            raise ValueError(f"{side} GPUs have duplicate UUIDs")
    src, dst = _by_model(source), _by_model(target)
    if {m: len(u) for m, u in src.items()} != {m: len(u) for m, u in dst.items()}:
        return None
    return tuple(
        GpuPair(model, s, t)
        for model in sorted(src)
        for s, t in zip(src[model], dst[model], strict=True)
    )


def _by_model(gpus: Iterable[Gpu]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for g in gpus:
        out.setdefault(g.model.strip(), []).append(g.uuid)
    return {m: sorted(u) for m, u in out.items()}


# -- privacy classes -----------------------------------------------------------------------------
def _hash8(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:8]


def redact_digest(digest: str | None) -> str:
    if not digest:
        return "none"
    algo, _, hexa = digest.partition(":")
    return f"{algo}:{hexa[:4]}…"


_ID_PREFIX = {"PersistentVolumeClaim": "pvc", "HostPath": "path"}
#: Longest value shown as-is (arch, kernel, driver, GPU model, quantity) in a message.
SHOWN_MAX = 64
#: Longest redacted free-text error in a condition or Event.
ERROR_MAX = 160
_QUOTED = re.compile(r"\"[^\"]*\"|'[^']*'|`[^`]*`")
_PLAIN = re.compile(r"[A-Za-z]+(?:[-_][A-Za-z]+)*|[0-9]{1,6}|<redacted>|([\"'`]?)#[0-9a-f]{8}\1")
_EDGE = "()[]{},;:.!?"


def shown(value: str) -> str:
    """A value of a shown-as-is class (arch, kernel, driver, model, quantity), bounded to
    :data:`SHOWN_MAX` characters and one line."""
    flat = " ".join(value.split())
    return flat if len(flat) <= SHOWN_MAX else flat[: SHOWN_MAX - 1] + "…"


def _hashed_token(token: str) -> str:
    head = len(token) - len(token.lstrip(_EDGE))
    tail = len(token) - len(token.rstrip(_EDGE))
    core = token[head : len(token) - tail]
    if not core or _PLAIN.fullmatch(core):
        return token
    return f"{token[:head]}#{_hash8(core)}{token[len(token) - tail :]}"


def redact_error(error: str) -> str:
    """The form of a free-text error (a provider's, CRIU's, the API server's) that may be shown
    in a condition or Event: secrets removed, then every quoted part and every word that is
    not plain letters or a small number replaced by ``#<hash8>`` (paths, PVC and node names,
    UUIDs, addresses, versions), on one line of at most :data:`ERROR_MAX` characters. The full
    text stays in the observation, for debug logs; equal tokens hash alike, so the two can
    be matched up."""
    text = _QUOTED.sub(lambda q: f"{q[0][0]}#{_hash8(q[0][1:-1])}{q[0][-1]}", redact(error))
    out = " ".join(_hashed_token(t) for t in text.split())
    return out if len(out) <= ERROR_MAX else out[: ERROR_MAX - 1] + "…"


def redact_volume(v: Volume) -> str:
    if not v.identifier:
        return v.kind or "unknown"
    return f"{v.kind}/{_ID_PREFIX.get(v.kind, v.kind.lower())}#{_hash8(v.identifier)}"


# -- the checks -----------------------------------------------------------------------------------
Outcome = tuple[str, str, str, str]  # outcome, code, privacy-safe detail, full-value debug detail
#: The recorded facts that say whether (and how) the snapshot holds CUDA state.
CUDA_FACTS = (
    "cudaRestore.pids",
    "cudaRestore.sourceGpuUuids",
    "cudaRestore.sourceGpus",
    "cudaRestore.sourceDriverVersion",
)


def _missing(m: Manifest, key: str, value: object) -> Outcome | None:
    """UNKNOWN when the header marks ``key`` unavailable or a v1 manifest lacks the fact."""
    err = m.unavailable(key)
    if err is not None:
        return UNKNOWN, FACTS_INCOMPLETE, f"{key} unavailable ({err})", ""
    if value is None or value == "":
        return UNKNOWN, FACTS_INCOMPLETE, f"{key} not recorded", ""
    return None


def _target_missing(what: str) -> Outcome:
    return UNKNOWN, TARGET_FACTS_UNAVAILABLE, f"target {what} unknown", ""


def _cpu_arch(m: Manifest, t: TargetFacts, p: RestorePolicy) -> Outcome:
    gap = _missing(m, "host.cpuArch", m.cpu_arch)
    if gap:
        return gap
    if not t.cpu_arch:
        return _target_missing("architecture")
    s, d = normalize_arch(m.cpu_arch or ""), normalize_arch(t.cpu_arch)
    return (
        (PASS if s == d else FAIL),
        CPU_ARCH_MISMATCH,
        f"snapshot {shown(s)}, node {shown(d)}",
        "",
    )


def _kernel(m: Manifest, t: TargetFacts, p: RestorePolicy) -> Outcome:
    gap = _missing(m, "host.kernelVersion", m.kernel_version)
    if gap:
        return gap
    if not t.kernel_version:
        return _target_missing("kernel release")
    same = (m.kernel_version or "").strip() == t.kernel_version.strip()
    detail = f"snapshot {shown(m.kernel_version or '')}, node {shown(t.kernel_version)}"
    return (PASS if same else FAIL), KERNEL_VERSION_MISMATCH, detail, ""


def _kernel_floor(m: Manifest, t: TargetFacts, p: RestorePolicy) -> Outcome:
    found = kernel_major_minor(t.kernel_version)
    if found is None:
        return NA, "", f"node kernel {preview(shown(t.kernel_version))} unparseable", ""
    ok = found >= KERNEL_FLOOR
    detail = f"node {found[0]}.{found[1]}, minimum {KERNEL_FLOOR[0]}.{KERNEL_FLOOR[1]}"
    return (PASS if ok else FAIL), KERNEL_BELOW_MINIMUM, detail, ""


def _limit(key: str, code: str, source: str | None, target: str | None) -> Outcome:
    if not source:
        return NA, "", "no limit recorded at capture", ""
    try:
        need = parse_limit(source)
    except QuantityError:
        return UNKNOWN, FACTS_INCOMPLETE, f"{key} {preview(shown(source))} malformed", ""
    if not target:
        return PASS, code, f"snapshot {shown(source)}, target unlimited", ""
    try:
        have = parse_limit(target)
    except QuantityError:
        return UNKNOWN, TARGET_FACTS_UNAVAILABLE, f"target limit {preview(shown(target))}", ""
    detail = f"snapshot {shown(source)}, target {shown(target)}"
    return (PASS if have >= need else FAIL), code, detail, ""


def _memory(m: Manifest, t: TargetFacts, p: RestorePolicy) -> Outcome:
    err = m.unavailable("k8s.memoryLimit")
    if err is not None:
        return UNKNOWN, FACTS_INCOMPLETE, f"k8s.memoryLimit unavailable ({err})", ""
    return _limit("k8s.memoryLimit", MEMORY_LIMIT_INSUFFICIENT, m.memory_limit, t.memory_limit)


def _cpu(m: Manifest, t: TargetFacts, p: RestorePolicy) -> Outcome:
    err = m.unavailable("k8s.cpuLimit")
    if err is not None:
        return UNKNOWN, FACTS_INCOMPLETE, f"k8s.cpuLimit unavailable ({err})", ""
    return _limit("k8s.cpuLimit", CPU_LIMIT_INSUFFICIENT, m.cpu_limit, t.cpu_limit)


def _image(m: Manifest, t: TargetFacts, p: RestorePolicy) -> Outcome:
    gap = _missing(m, "k8s.imageId", m.image_id)
    if gap:
        return gap
    source = image_digest(m.image_id or "")
    if source is None:
        return UNKNOWN, FACTS_INCOMPLETE, "k8s.imageId has no digest", ""
    target = image_digest(t.image_id)
    if target is None:
        return _target_missing("image digest")
    detail = f"snapshot {redact_digest(source)}, container {redact_digest(target)}"
    debug = f"snapshot {m.image_id}, container {t.image_id}"
    return (PASS if source == target else FAIL), IMAGE_DIGEST_MISMATCH, detail, debug


def _identity(v: Volume, there: Volume | None, present: bool) -> tuple[str, str] | None:
    """Under the identity policy: ``(code, detail)`` of a problem with volume ``v``, or None.
    A target that shows the path but not its kind and identifier has not proven anything:
    its identity is unknown (``TargetFactsUnavailable``), never a pass."""
    if not v.kind or (v.kind not in EPHEMERAL_KINDS and not v.identifier):
        return FACTS_INCOMPLETE, f"{v.path} recorded without its identity"
    if there is None:
        if present:
            return TARGET_FACTS_UNAVAILABLE, f"{v.path} identity not reported by the target"
        return VOLUME_MISSING, f"{v.path} missing"
    if not there.kind or (v.kind not in EPHEMERAL_KINDS and not there.identifier):
        return TARGET_FACTS_UNAVAILABLE, f"{v.path} identity not reported by the target"
    same = there.kind == v.kind and (v.kind in EPHEMERAL_KINDS or there.identifier == v.identifier)
    if same:
        return None
    shown_ = f"{v.path} snapshot {redact_volume(v)}, target {redact_volume(there)}"
    return VOLUME_IDENTITY_MISMATCH, shown_


def _volumes(m: Manifest, t: TargetFacts, p: RestorePolicy) -> Outcome:
    for key in ("criuDump.extMnt", "k8s.declaredVolumes"):
        err = m.unavailable(key)
        if err is not None and not (m.legacy and key == "k8s.declaredVolumes"):
            return UNKNOWN, FACTS_INCOMPLETE, f"{key} unavailable ({err})", ""
    if not m.ext_mounts:  # every dump externalizes at least its root: empty = not recorded
        return UNKNOWN, FACTS_INCOMPLETE, "criuDump.extMnt not recorded", ""
    identity = p.volumes == "identity" and not m.legacy
    problems = _volume_problems(m, t, identity)
    if not problems:
        mode = "identity" if identity else "presence"
        count = len((set(m.ext_mounts) | {v.path for v in m.volumes}) - REBUILT_MOUNTS)
        return PASS, "", f"{count} mounts ({mode})", ""
    detail = ", ".join(d for _, _, d in problems)
    failed = [c for _, c, _ in problems if c in (VOLUME_MISSING, VOLUME_IDENTITY_MISMATCH)]
    if failed:
        return FAIL, failed[0], detail, ""
    codes = {c for _, c, _ in problems}
    gap = FACTS_INCOMPLETE if FACTS_INCOMPLETE in codes else TARGET_FACTS_UNAVAILABLE
    return UNKNOWN, gap, detail, ""


def _volume_problems(m: Manifest, t: TargetFacts, identity: bool) -> list[tuple[str, str, str]]:
    """Each mount of the snapshot the target lacks, and with ``identity`` each volume it
    holds as another: (path, code, detail), sorted."""
    problems: list[tuple[str, str, str]] = []
    present = set(t.paths) | {v.path for v in t.volumes}
    for path in sorted(set(m.ext_mounts) - REBUILT_MOUNTS):
        if path not in present:
            problems.append((path, VOLUME_MISSING, f"{path} missing"))
    mounted = {v.path: v for v in t.volumes}
    for v in sorted(m.volumes, key=lambda v: v.path) if identity else ():
        found = _identity(v, mounted.get(v.path), v.path in present)
        if found is not None and (v.path, VOLUME_MISSING, found[1]) not in problems:
            problems.append((v.path, *found))
    return sorted(problems)


def _gpu_state(m: Manifest) -> bool:
    return m.cuda is not None and m.cuda.has_state


def _no_cuda(m: Manifest) -> Outcome:
    """No CUDA state recorded: n/a, unless the header says a CUDA fact could not be read
    (then whether the snapshot holds CUDA state at all is unknown)."""
    for key in CUDA_FACTS:
        err = m.unavailable(key)
        if err is not None:
            return UNKNOWN, FACTS_INCOMPLETE, f"{key} unavailable ({err}): CUDA state unknown", ""
    return NA, "", "snapshot has no CUDA state", ""


def _gpu_model(m: Manifest, t: TargetFacts, p: RestorePolicy) -> Outcome:
    if not _gpu_state(m):
        return _no_cuda(m)
    assert m.cuda is not None
    gap = _missing(m, "cudaRestore.sourceGpus", m.cuda.gpus)
    if gap:
        return gap
    gpus = m.cuda.gpus or ()
    if not gpus:
        return UNKNOWN, FACTS_INCOMPLETE, "cudaRestore.sourceGpus empty, yet CUDA state", ""
    if any(not g.model.strip() for g in gpus):
        return UNKNOWN, FACTS_INCOMPLETE, "a snapshot GPU has no product name", ""
    if len({g.uuid for g in gpus}) != len(gpus):
        return UNKNOWN, FACTS_INCOMPLETE, "snapshot GPU UUIDs repeat", ""
    if len({g.uuid for g in t.gpus}) != len(t.gpus):
        return UNKNOWN, TARGET_FACTS_UNAVAILABLE, "target GPU UUIDs repeat", ""
    pairing = pair_gpus(gpus, t.gpus)
    s = ", ".join(sorted(shown(g.model.strip()) for g in gpus))
    d = ", ".join(sorted(shown(g.model.strip()) for g in t.gpus))
    detail = f"snapshot [{s}], node [{d}]"
    return (FAIL if pairing is None else PASS), GPU_MODEL_MISMATCH, detail, ""


def _gpu_count(m: Manifest, t: TargetFacts, p: RestorePolicy) -> Outcome:
    if not _gpu_state(m):
        return _no_cuda(m)
    assert m.cuda is not None
    recorded = m.cuda.gpus if m.cuda.gpus is not None and not m.legacy else m.cuda.gpu_uuids
    count = len(recorded)
    if count == 0:
        return NA, "", "snapshot used no GPU", ""
    ok = len(t.gpus) == count
    return (PASS if ok else FAIL), GPU_COUNT_MISMATCH, f"snapshot {count}, node {len(t.gpus)}", ""


def _driver(m: Manifest, t: TargetFacts, p: RestorePolicy) -> Outcome:
    if not _gpu_state(m):
        return _no_cuda(m)
    assert m.cuda is not None
    gap = _missing(m, "cudaRestore.sourceDriverVersion", m.cuda.driver_version)
    if gap:
        return gap
    if not t.driver_version:
        return _target_missing("driver version")
    same = (m.cuda.driver_version or "").strip() == t.driver_version.strip()
    detail = f"snapshot {shown(m.cuda.driver_version or '')}, node {shown(t.driver_version)}"
    return (PASS if same else FAIL), DRIVER_VERSION_MISMATCH, detail, ""


def _driver_floor(m: Manifest, t: TargetFacts, p: RestorePolicy) -> Outcome:
    if not _gpu_state(m):
        return NA, "", "snapshot has no CUDA state", ""
    major = driver_major(t.driver_version)
    if major is None:
        return NA, "", f"node driver {preview(shown(t.driver_version))} unparseable", ""
    ok = major >= DRIVER_FLOOR
    return (PASS if ok else FAIL), DRIVER_BELOW_MINIMUM, f"node {major}, minimum {DRIVER_FLOOR}", ""


Rule = Callable[[Manifest, TargetFacts, RestorePolicy], Outcome]
RULES: dict[str, Rule] = {
    "C5": _cpu_arch,
    "C7": _kernel,
    "C7m": _kernel_floor,
    "C9": _memory,
    "C10": _cpu,
    "C12": _image,
    "C11": _volumes,
    "C1": _gpu_model,
    "C2": _gpu_count,
    "C3": _driver,
    "C3m": _driver_floor,
}


def _legacy_skips(spec: CheckSpec, m: Manifest) -> bool:
    return m.legacy and bool(spec.facts) and not (set(spec.facts) & LEGACY_FACTS)


def _run(
    gate: str, manifest: Manifest, target: TargetFacts, policy: RestorePolicy
) -> tuple[list[CheckResult], list[str]]:
    results: list[CheckResult] = []
    debug: list[str] = []
    for spec in CHECKS:
        if spec.gate != gate:
            continue
        if _legacy_skips(spec, manifest):
            outcome: Outcome = (SKIPPED, LEGACY_MANIFEST, "legacy manifest: fact not recorded", "")
        else:
            outcome = RULES[spec.id](manifest, target, policy)
        state, code, detail, full = outcome
        code = code if state in (FAIL, UNKNOWN, SKIPPED) else ""
        results.append(CheckResult(spec.id, spec.name, state, code, detail))
        shown_ = f"{state} {code}" if code else state
        debug.append(f"{spec.id} {spec.name} {shown_}: {full or detail}")
    return results, debug


def source_gaps(manifest: Manifest, policy: RestorePolicy) -> tuple[CheckResult, ...]:
    """Gate B's checks that can never pass on this manifest, whatever the target: a recorded
    fact they read is unavailable, empty or malformed (``FactsIncomplete``). Gate A reports
    them, so such an attempt ends Unknown before anything is claimed."""
    results, _ = _run("B", manifest, _mirror(manifest), policy)
    return tuple(r for r in results if r.outcome == UNKNOWN and r.code == FACTS_INCOMPLETE)


def _mirror(m: Manifest) -> TargetFacts:
    """A target identical to the snapshot's source, as far as the manifest tells: against it
    every comparison passes, so what is still unknown is unknown on the source side."""
    cuda = m.cuda
    return TargetFacts(
        image_id=m.image_id or "",
        paths=tuple(m.ext_mounts),
        volumes=m.volumes,
        gpus=tuple(cuda.gpus or ()) if cuda else (),
        driver_version=(cuda.driver_version or "") if cuda else "",
    )


def evaluate(
    gate: str, manifest: Manifest, target: TargetFacts, policy: RestorePolicy
) -> GateReport:
    """Run every check of ``gate`` ("A" or "B") in order; never stops at the first failure.
    Gate A also reports gate B's source gaps (:func:`source_gaps`) as its header.

    Args:
        gate: ``"A"`` or ``"B"``.
        manifest: what the snapshot recorded.
        target: what the destination offers.
        policy: how to decide.

    Returns:
        The gate's report.
    """
    if manifest.schema_version is not None and manifest.schema_version > SUPPORTED_SCHEMA:
        detail = f"schema {manifest.schema_version} > supported {SUPPORTED_SCHEMA}"
        return GateReport(gate, (), header_code=MANIFEST_SCHEMA_UNSUPPORTED, header_detail=detail)
    results, debug = _run(gate, manifest, target, policy)
    pairing: tuple[GpuPair, ...] = ()
    model = next((r for r in results if r.id == "C1"), None)
    if model is not None and model.outcome == PASS and manifest.cuda and manifest.cuda.gpus:
        pairing = pair_gpus(manifest.cuda.gpus, target.gpus) or ()
    headers: list[str] = []
    if not manifest.legacy and not manifest.complete:
        headers.append("manifest marked incomplete")
    gaps = source_gaps(manifest, policy) if gate == "A" else ()
    if gaps:
        headers.append("gate B facts unknown: " + "; ".join(f"{r.id} {r.detail}" for r in gaps))
    return GateReport(
        gate,
        tuple(results),
        pairing,
        tuple(debug),
        FACTS_INCOMPLETE if headers else "",
        "; ".join(headers),
    )
