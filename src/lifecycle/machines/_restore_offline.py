"""The operator's offline check: a manifest and a target facts file in, the verdict out.

    restore check MANIFEST TARGET [--on-unknown block|warn] [--volumes identity|presence]

``MANIFEST`` is the snapshot's ``manifest.yaml`` (shape of ``docs/upstream/restore-gate.md``,
"The manifest", camelCase; YAML is safe-loaded). ``TARGET`` holds the destination's facts::

    cpuArch: amd64
    kernelVersion: 6.8.0-1015-aws
    memoryLimit: 64Gi          # optional; absent = unlimited
    cpuLimit: "16"
    imageId: containerd://sha256:...
    paths: [/models]           # externalized mount paths present under the target rootfs
    volumes: [{path: /models, volumeSource: PersistentVolumeClaim/models}]
    gpus: [{uuid: GPU-..., productName: NVIDIA L4}]
    driverVersion: 580.65.06

Exit codes: 0 compatible, 1 incompatible, 3 unknown, 2 bad input (``FILE: what is wrong``).
:func:`main` is what a ``lifecycle restore check`` subcommand dispatches to.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from ._quantity import QuantityError, parse_limit
from ._restore_checks import FAIL, UNKNOWN, GateReport, evaluate
from ._restore_facts import CudaFacts, Gpu, Manifest, RestorePolicy, TargetFacts, Volume

EXIT_COMPATIBLE, EXIT_INCOMPATIBLE, EXIT_BAD_INPUT, EXIT_UNKNOWN = 0, 1, 2, 3


def _get(data: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = data.get(key)
    if value is not None and not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise ValueError(f"{where}{key}: expected {names}, got {value!r}")
    return value


def _map(data: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    return _get(data, key, dict, where) or {}


def _scalar(data: Mapping[str, Any], key: str, where: str) -> str | None:
    value = _get(data, key, (str, int, float), where)
    return None if value is None else str(value)


def _gpus(items: Any, where: str) -> tuple[Gpu, ...]:
    if not isinstance(items, list):
        raise ValueError(f"{where}: expected a list, got {items!r}")
    out = []
    for i, g in enumerate(items):
        if not isinstance(g, dict) or not isinstance(g.get("uuid"), str):
            raise ValueError(f"{where}[{i}]: expected {{uuid, productName}}")
        out.append(Gpu(g["uuid"], str(g.get("productName") or "")))
    return tuple(out)


def _volumes(items: Any, where: str) -> tuple[Volume, ...]:
    if not isinstance(items, list):
        raise ValueError(f"{where}: expected a list, got {items!r}")
    out = []
    for i, v in enumerate(items):
        if not isinstance(v, dict) or not isinstance(v.get("path"), str):
            raise ValueError(f"{where}[{i}]: expected {{path, volumeSource}}")
        out.append(Volume.from_source(v["path"], str(v.get("volumeSource") or "")))
    return tuple(out)


def manifest_from_yaml(data: Any) -> Manifest:
    """A loaded ``manifest.yaml`` as the gates read it; ``ValueError`` names a bad field."""
    if not isinstance(data, dict):
        raise ValueError("the manifest must be a mapping")
    compat = _get(data, "compat", dict, "")
    host, k8s = _map(data, "host", ""), _map(data, "k8s", "")
    criu, cuda = _map(data, "criuDump", ""), _get(data, "cudaRestore", dict, "")
    facts = {}
    if compat is not None:
        facts = {str(k): str(v) for k, v in (_get(compat, "facts", dict, "compat.") or {}).items()}
    cuda_facts = None
    if cuda is not None:
        gpus = cuda.get("sourceGpus")
        cuda_facts = CudaFacts(
            pids=tuple(int(p) for p in cuda.get("pids") or ()),
            gpu_uuids=tuple(str(u) for u in cuda.get("sourceGpuUuids") or ()),
            gpus=None if gpus is None else _gpus(gpus, "cudaRestore.sourceGpus"),
            driver_version=_scalar(cuda, "sourceDriverVersion", "cudaRestore."),
        )
    return Manifest(
        schema_version=None if compat is None else _get(compat, "schemaVersion", int, "compat."),
        complete=True if compat is None else bool(_get(compat, "complete", bool, "compat.")),
        facts=facts,
        cpu_arch=_scalar(host, "cpuArch", "host."),
        kernel_version=_scalar(host, "kernelVersion", "host."),
        image_id=_scalar(k8s, "imageId", "k8s."),
        memory_limit=_scalar(k8s, "memoryLimit", "k8s."),
        cpu_limit=_scalar(k8s, "cpuLimit", "k8s."),
        ext_mounts=tuple(str(k) for k in _map(criu, "extMnt", "criuDump.")),
        volumes=_volumes(k8s.get("declaredVolumes") or [], "k8s.declaredVolumes"),
        cuda=cuda_facts,
    )


def target_from_yaml(data: Any) -> TargetFacts:
    """A loaded target facts file; malformed limits are refused here, clearly."""
    if not isinstance(data, dict):
        raise ValueError("the target facts must be a mapping")
    target = TargetFacts(
        cpu_arch=_scalar(data, "cpuArch", "") or "",
        kernel_version=_scalar(data, "kernelVersion", "") or "",
        memory_limit=_scalar(data, "memoryLimit", ""),
        cpu_limit=_scalar(data, "cpuLimit", ""),
        image_id=_scalar(data, "imageId", "") or "",
        paths=tuple(str(p) for p in data.get("paths") or ()),
        volumes=_volumes(data.get("volumes") or [], "volumes"),
        gpus=_gpus(data.get("gpus") or [], "gpus"),
        driver_version=_scalar(data, "driverVersion", "") or "",
    )
    for key, value in (("memoryLimit", target.memory_limit), ("cpuLimit", target.cpu_limit)):
        if value:
            try:
                parse_limit(value)
            except QuantityError as e:
                raise ValueError(f"{key}: {e}") from None
    return target


def check(manifest: Manifest, target: TargetFacts, policy: RestorePolicy) -> tuple[int, list[str]]:
    """Both gates, every check, the pairing: the exit code and the lines to print."""
    reports: list[GateReport] = [evaluate(g, manifest, target, policy) for g in ("A", "B")]
    lines: list[str] = []
    for r in reports:
        lines.append(f"gate {r.gate}: {r.verdict} {r.summary()}")
        if r.header_code:
            lines.append(f"  {r.header_code}: {r.header_detail}")
        lines.extend(f"  {line}" for line in r.debug)
    pairing = reports[1].pairing
    lines.append(
        "gpu pairing: "
        + (", ".join(f"{p.source}->{p.target} ({p.model})" for p in pairing) or "none")
    )
    verdicts = {r.verdict for r in reports}
    if FAIL in verdicts:
        code, word = EXIT_INCOMPATIBLE, "incompatible"
    elif UNKNOWN in verdicts and policy.on_unknown == "block":
        code, word = EXIT_UNKNOWN, "unknown"
    else:
        code, word = EXIT_COMPATIBLE, "compatible"
    first = next((r.code for r in reports if r.code), "")
    lines.insert(0, f"verdict: {word}" + (f" code={first}" if first else ""))
    return code, lines


def _load(path: str) -> Any:
    try:
        yaml: Any = importlib.import_module("yaml")  # optional; untyped
    except ImportError:  # pragma: no cover - depends on the environment
        raise ValueError("reading YAML needs PyYAML (pip install pyyaml)") from None
    try:
        return yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise ValueError(f"cannot read: {e}".replace("\n", " ")) from None


def main(
    argv: Sequence[str] | None = None, out: TextIO = sys.stdout, err: TextIO = sys.stderr
) -> int:
    parser = argparse.ArgumentParser(
        prog="lifecycle restore check", description=__doc__.split("\n")[0]
    )
    parser.add_argument("manifest")
    parser.add_argument("target")
    parser.add_argument("--on-unknown", choices=("block", "warn"), default="block")
    parser.add_argument("--volumes", choices=("identity", "presence"), default="identity")
    args = parser.parse_args(argv)
    policy = RestorePolicy(on_unknown=args.on_unknown, volumes=args.volumes)
    parsed: list[Any] = []
    for path, build in ((args.manifest, manifest_from_yaml), (args.target, target_from_yaml)):
        try:
            parsed.append(build(_load(path)))
        except (ValueError, TypeError) as e:
            err.write(f"{path}: {e}\n")
            return EXIT_BAD_INPUT
    code, lines = check(parsed[0], parsed[1], policy)
    out.write("\n".join(lines) + "\n")
    return code
