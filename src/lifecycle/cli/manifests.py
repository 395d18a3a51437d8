"""``lifecycle manifests MACHINE...``: the CRDs, RBAC and Deployment of a controller of the
machines (:mod:`lifecycle.manifests`), as YAML on stdout or one file each in ``-o DIR``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, TextIO

from .common import EXIT_REFUSED, say
from .targets import machine_named


def _file_name(n: int, doc: dict[str, Any]) -> str:
    return f"{n:02d}-{doc['kind'].lower()}-{doc['metadata']['name']}.yaml"


def cmd_manifests(args: argparse.Namespace, out: TextIO) -> int:
    from ..manifests import DEFAULT_IMAGE, manifests, to_yaml

    machines = [m for spec in args.machine for m in machine_named(spec)]
    docs = manifests(
        machines, namespace=args.namespace, name=args.name, image=args.image or DEFAULT_IMAGE
    )
    if args.out is None:
        out.write(to_yaml(docs))
        return 0
    folder = Path(args.out)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for n, doc in enumerate(docs, 1):
            path = folder / _file_name(n, doc)
            path.write_text(to_yaml([doc]), encoding="utf-8")
            out.write(f"{path}\n")
    except OSError as e:
        say(f"lifecycle manifests: {args.out}: cannot write: {e.strerror or e}")
        return EXIT_REFUSED
    return 0
