"""The operator's offline check: a manifest and a target facts file in, the verdict out.

    restore check MANIFEST TARGET [--on-unknown block|warn] [--volumes identity|presence]

``MANIFEST`` is the snapshot's ``manifest.yaml`` (shape of ``docs/upstream/restore-gate.md``,
"The manifest", camelCase). ``TARGET`` holds the destination's facts (every key optional; a
missing string fact is unknown, a missing list is empty, an unknown key is refused)::

    cpuArch: amd64
    kernelVersion: 6.8.0-1015-aws
    memoryLimit: 64Gi          # optional; absent = unlimited
    cpuLimit: "16"
    imageId: containerd://sha256:...
    paths: [/models]           # externalized mount paths present under the target rootfs
    volumes: [{path: /models, volumeSource: PersistentVolumeClaim/models}]
    gpus: [{uuid: GPU-..., productName: NVIDIA L4}]
    driverVersion: 580.65.06

Both files are read strictly (:mod:`._input`): bounded in size and nesting, no YAML
anchors or aliases, one type per field; a wrong one is named by its path.

Exit codes: 0 compatible, 1 incompatible, 3 unknown, 2 bad input (``FILE: what is wrong``).
:func:`main` is what a ``lifecycle restore check`` subcommand dispatches to.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from .._quantity import QuantityError, parse_limit
from ._checks import FAIL, UNKNOWN, GateReport, evaluate
from ._facts import (
    SUPPORTED_SCHEMA,
    CudaFacts,
    Gpu,
    Manifest,
    RestorePolicy,
    TargetFacts,
    Volume,
)
from ._input import (
    MAX_DEPTH,
    MAX_FILE_BYTES,
    MAX_ITEMS,
    MAX_TEXT,
    InputError,
    boolean,
    integer,
    items,
    load_document,
    mapping,
    nonempty,
    one_line,
    only,
    optional,
    quantity,
    required,
    text,
)

EXIT_COMPATIBLE, EXIT_INCOMPATIBLE, EXIT_BAD_INPUT, EXIT_UNKNOWN = 0, 1, 2, 3
#: Keys of a target facts file.
TARGET_KEYS = (
    "cpuArch",
    "kernelVersion",
    "memoryLimit",
    "cpuLimit",
    "imageId",
    "paths",
    "volumes",
    "gpus",
    "driverVersion",
)
MAX_PID = 2**31 - 1
MAX_SCHEMA = 2**31 - 1


# -- manifest ----------------------------------------------------------------------------------
def _fact_state(value: object, where: str) -> str:
    state = text(value, where)
    if state != "recorded" and not state.startswith("unavailable:"):
        raise InputError(f"{where}: expected 'recorded' or 'unavailable:<errclass>', got {state!r}")
    return state


def _facts(value: object, where: str) -> dict[str, str]:
    found = mapping(value, where)
    return {k: _fact_state(v, f"{where}[{k!r}]") for k, v in found.items()}


def _source_gpu(value: object, where: str) -> Gpu:
    g = mapping(value, where)
    return Gpu(required(g, "uuid", where, nonempty), optional(g, "productName", where, text) or "")


def _volume(value: object, where: str) -> Volume:
    v = mapping(value, where)
    path = required(v, "path", where, nonempty)
    return Volume.from_source(path, optional(v, "volumeSource", where, text) or "")


def _pid(value: object, where: str) -> int:
    return integer(value, where, 1, MAX_PID)


def _mounts(value: object, where: str) -> tuple[str, ...]:
    found = mapping(value, where)
    for k, v in found.items():
        text(k, f"{where} key")
        if v is not None:
            text(v, f"{where}[{k!r}]")
    return tuple(found)


def _cuda(value: object, where: str) -> CudaFacts:
    c = mapping(value, where)
    return CudaFacts(
        pids=optional(c, "pids", where, lambda v, w: items(v, w, _pid)) or (),
        gpu_uuids=optional(c, "sourceGpuUuids", where, lambda v, w: items(v, w, nonempty)) or (),
        gpus=optional(c, "sourceGpus", where, lambda v, w: items(v, w, _source_gpu)),
        driver_version=optional(c, "sourceDriverVersion", where, text),
    )


def _identity(data: dict[str, Any], legacy: bool) -> None:
    """The manifest names its snapshot: ``artifact`` (v1), or ``checkpointId`` (legacy v0)."""
    if legacy and data.get("artifact") is None and data.get("checkpointId") is not None:
        nonempty(data["checkpointId"], "checkpointId")
        return
    if data.get("artifact") is None:
        hint = " (a legacy manifest without compat may name checkpointId)" if legacy else ""
        raise InputError(f"artifact: required{hint}")
    artifact = mapping(data["artifact"], "artifact")
    required(artifact, "contentUID", "artifact", nonempty)
    required(artifact, "containerName", "artifact", nonempty)


def manifest_from_yaml(data: Any) -> Manifest:
    """A loaded ``manifest.yaml`` as the gates read it; :class:`InputError` names a bad field.

    The snapshot's identity (``artifact``) and ``criuDump`` are required; with a ``compat``
    header, ``schemaVersion`` is too. A newer schema is read no further than its header."""
    if not isinstance(data, dict):
        raise InputError(f"the manifest must be a mapping, got {type(data).__name__}")
    root = mapping(data, "")
    compat = optional(root, "compat", "", mapping)
    schema: int | None = None
    complete, facts = True, {}
    if compat is not None:
        schema = required(
            compat, "schemaVersion", "compat", lambda v, w: integer(v, w, 0, MAX_SCHEMA)
        )
        complete = optional(compat, "complete", "compat", boolean) or False
        facts = optional(compat, "facts", "compat", _facts) or {}
        if schema > SUPPORTED_SCHEMA:  # not interpreted: the gates stop at the header
            return Manifest(schema_version=schema, complete=complete, facts=facts)
    _identity(root, legacy=schema is None or schema == 0)
    criu = required(root, "criuDump", "", mapping)
    host = optional(root, "host", "", mapping) or {}
    k8s = optional(root, "k8s", "", mapping) or {}
    declared = optional(k8s, "declaredVolumes", "k8s", lambda v, w: items(v, w, _volume))
    return Manifest(
        schema_version=schema,
        complete=complete,
        facts=facts,
        cpu_arch=optional(host, "cpuArch", "host", text),
        kernel_version=optional(host, "kernelVersion", "host", text),
        image_id=optional(k8s, "imageId", "k8s", text),
        memory_limit=optional(k8s, "memoryLimit", "k8s", quantity),
        cpu_limit=optional(k8s, "cpuLimit", "k8s", quantity),
        ext_mounts=optional(criu, "extMnt", "criuDump", _mounts) or (),
        volumes=declared or (),
        cuda=optional(root, "cudaRestore", "", _cuda),
    )


# -- target --------------------------------------------------------------------------------------
def _target_gpu(value: object, where: str) -> Gpu:
    g = mapping(value, where)
    only(g, ("uuid", "productName"), where)
    return Gpu(required(g, "uuid", where, nonempty), required(g, "productName", where, nonempty))


def _target_volume(value: object, where: str) -> Volume:
    only(mapping(value, where), ("path", "volumeSource"), where)
    return _volume(value, where)


def _limit(value: object, where: str) -> str:
    found = quantity(value, where)
    try:
        parse_limit(found)
    except QuantityError as e:
        raise InputError(f"{where}: {e}") from None
    return found


def target_from_yaml(data: Any) -> TargetFacts:
    """A loaded target facts file; every key optional, each with one type, no other keys."""
    if not isinstance(data, dict):
        raise InputError(f"the target facts must be a mapping, got {type(data).__name__}")
    root = mapping(data, "")
    only(root, TARGET_KEYS, "")
    gpus = optional(root, "gpus", "", lambda v, w: items(v, w, _target_gpu)) or ()
    seen: dict[str, int] = {}
    for i, g in enumerate(gpus):
        if g.uuid in seen:
            raise InputError(f"gpus[{i}].uuid: repeats gpus[{seen[g.uuid]}].uuid")
        seen[g.uuid] = i
    return TargetFacts(
        cpu_arch=optional(root, "cpuArch", "", text) or "",
        kernel_version=optional(root, "kernelVersion", "", text) or "",
        memory_limit=optional(root, "memoryLimit", "", _limit),
        cpu_limit=optional(root, "cpuLimit", "", _limit),
        image_id=optional(root, "imageId", "", text) or "",
        paths=optional(root, "paths", "", lambda v, w: items(v, w, nonempty)) or (),
        volumes=optional(root, "volumes", "", lambda v, w: items(v, w, _target_volume)) or (),
        gpus=gpus,
        driver_version=optional(root, "driverVersion", "", text) or "",
    )


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


EPILOG = f"""exit codes: 0 compatible, 1 incompatible, 3 unknown (blocked by --on-unknown block),
2 bad input (one line on stderr: FILE: what is wrong).
input bounds: each file at most {MAX_FILE_BYTES} bytes, nesting at most {MAX_DEPTH} levels, strings
at most {MAX_TEXT} characters, lists at most {MAX_ITEMS} items; YAML anchors, aliases, merge keys
and duplicate keys are refused."""


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``lifecycle restore check``."""
    parser = argparse.ArgumentParser(
        prog="lifecycle restore check",
        description=(__doc__ or "").split("\n")[0],
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("manifest", help="the snapshot's manifest.yaml (YAML or JSON)")
    parser.add_argument("target", help="the target's facts (YAML or JSON)")
    parser.add_argument(
        "--on-unknown",
        choices=("block", "warn"),
        default="block",
        help="a fact the target cannot answer: block the restore (exit 3, the default) or "
        "warn and go on",
    )
    parser.add_argument(
        "--volumes",
        choices=("identity", "presence"),
        default="identity",
        help="identity (the default): each volume must be the very one the snapshot had; "
        "presence: a volume at each path is enough",
    )
    return parser


def main(
    argv: Sequence[str] | None = None, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """Run the check; ``out`` and ``err`` default to the streams current at call time."""
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    args = build_parser().parse_args(argv)
    policy = RestorePolicy(on_unknown=args.on_unknown, volumes=args.volumes)
    try:
        manifest = _read(args.manifest, manifest_from_yaml)
        target = _read(args.target, target_from_yaml)
    except _Refused as e:
        err.write(f"{e}\n")
        return EXIT_BAD_INPUT
    code, lines = check(manifest, target, policy)
    out.write("\n".join(lines) + "\n")
    return code


class _Refused(Exception):  # internal: never reaches a caller (tests/test_exception_tree.py)
    """A file refused, with its one-line message (``FILE: what is wrong``)."""


def _read(path: str, build: Any) -> Any:
    try:
        return build(load_document(path))
    except (InputError, ValueError, TypeError) as e:
        raise _Refused(one_line(f"{path}: {e}")) from None
