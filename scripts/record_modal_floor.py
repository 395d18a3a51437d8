"""Record the API of the lowest ``modal`` the package allows, for the Modal contract test.

The contract test compares the SDK fake and every call the Modal adapter makes with the
*installed* ``modal``, and with this record of the *floor* version (the ``modal>=X`` of the
``modal`` extra in ``pyproject.toml``), so an SDK call that a newer release added cannot slip
past a floor that lacks it. Run it once whenever the floor moves (it needs the package index):

    .venv/bin/python scripts/record_modal_floor.py

It downloads the floor's wheel (``pip download --no-deps``) into a temporary directory,
unpacks it, imports ``modal`` from there in a subprocess (its dependencies come from the
current environment) and writes ``tests/adapters/data/modal_floor_api.json``: the signature
of each SDK surface the adapter calls, the exception classes with their bases, the ``Probe``
fields and the handle properties the adapter reads.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "adapters" / "data" / "modal_floor_api.json"

#: The SDK surfaces the adapter calls: name -> (attribute path from ``modal``, is ``.aio``).
SURFACES = {
    "App.lookup": ("App.lookup", True),
    "Image.from_registry": ("Image.from_registry", False),
    "Sandbox.create": ("Sandbox.create", True),
    "Sandbox.list": ("Sandbox.list", True),
    "Sandbox.from_id": ("Sandbox.from_id", True),
    "Sandbox.from_name": ("Sandbox.from_name", True),
    "Sandbox.get_tags": ("Sandbox.get_tags", True),
    "Sandbox.poll": ("Sandbox.poll", True),
    "Sandbox.wait_until_ready": ("Sandbox.wait_until_ready", True),
    "Sandbox.terminate": ("Sandbox.terminate", True),
    "Probe.with_tcp": ("Probe.with_tcp", False),
    "Probe.with_exec": ("Probe.with_exec", False),
}
PROPERTIES = {"Sandbox": ("object_id", "returncode"), "App": ("app_id",)}
EXCEPTIONS = (
    "Error",
    "InvalidError",
    "ConflictError",
    "AlreadyExistsError",
    "NotFoundError",
    "AuthError",
    "PermissionDeniedError",
    "ResourceExhaustedError",
    "ServiceError",
    "InternalError",
    "TimeoutError",
    "SandboxTimeoutError",
)


def floor_version(pyproject: Path = ROOT / "pyproject.toml") -> str:
    """The ``X`` of ``modal>=X`` in the ``modal`` extra."""
    match = re.search(r'^modal = \["modal>=([^",\]]+)"\]', pyproject.read_text(), re.M)
    if match is None:
        raise SystemExit('pyproject.toml: no `modal = ["modal>=X"]` extra found')
    return match.group(1)


def _default(value: Any) -> Any:
    """A parameter default as JSON: the value itself when JSON holds it, else its repr."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | dict) and not value:
        return value
    return {"repr": repr(value)}


def inspect_installed() -> dict[str, Any]:
    """The API of the ``modal`` importable here (run with the floor's wheel on the path)."""
    import dataclasses
    import inspect

    import modal

    def resolve(path: str) -> Any:
        obj: Any = modal
        for part in path.split("."):
            obj = getattr(obj, part)
        return obj

    surfaces: dict[str, Any] = {}
    for name, (path, aio) in SURFACES.items():
        fn = resolve(path)
        sig = inspect.signature(fn.aio if aio else fn)
        surfaces[name] = {
            "parameters": [
                {
                    "name": p.name,
                    "kind": p.kind.name,
                    **({} if p.default is p.empty else {"default": _default(p.default)}),
                }
                for p in sig.parameters.values()
            ],
            "returns": "" if sig.return_annotation is sig.empty else str(sig.return_annotation),
        }
    return {
        "version": modal.__version__,
        "surfaces": surfaces,
        "properties": {
            cls: sorted(
                a
                for a in attrs
                if isinstance(inspect.getattr_static(getattr(modal, cls), a), property)
            )
            for cls, attrs in PROPERTIES.items()
        },
        "exceptions": {
            name: [c.__name__ for c in getattr(modal.exception, name).__mro__]
            for name in EXCEPTIONS
            if hasattr(modal.exception, name)
        },
        "probe_fields": [[f.name, _default(f.default)] for f in dataclasses.fields(modal.Probe)],
    }


def record(version: str, out: Path) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="modal-floor-") as tmp:
        download = ["pip", "download", f"modal=={version}", "--no-deps", "-q", "--dest", tmp]
        subprocess.run(
            [sys.executable, "-m", *download],
            check=True,
        )
        (wheel,) = Path(tmp).glob("modal-*.whl")
        site = Path(tmp) / "site"
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(site)
        answer = subprocess.run(
            [sys.executable, __file__, "--inspect"],
            check=True,
            capture_output=True,
            text=True,
            env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin", "HOME": tmp},
        )
    api: dict[str, Any] = json.loads(answer.stdout)
    if api["version"] != version:
        raise SystemExit(f"imported modal {api['version']}, not the floor {version}")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(api, indent=1, sort_keys=True) + "\n")
    return api


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inspect", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    if args.inspect:
        print(json.dumps(inspect_installed()))
        return 0
    api = record(floor_version(), args.out)
    print(f"recorded modal {api['version']}: {len(api['surfaces'])} surfaces -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
