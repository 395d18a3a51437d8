"""What a host's first import loads (ADR 0139): ``from lifecycle import ObjectRef, Runner,
SQLiteStore`` in a fresh interpreter imports no module that only a later call needs.

Not timed (the ratio to ``python -c pass`` is the ``startup`` benchmark's row): each check
runs a fresh interpreter and compares the modules it holds afterwards with those of an
interpreter that imported nothing, so a change that pulls a heavy module back into the import
fails here whatever the machine's speed.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
HOST = "from lifecycle import ObjectRef, Runner, SQLiteStore"

#: Imported on first use, never by the host's import: the status converter (cattrs and what
#: it imports), logging (a record's first call), hashlib (a schema fingerprint, a history
#: tag), URL parsing and paths (opening a store by URL or a file), the retry jitter, JSON
#: (``json``, and ``orjson`` with what it imports: a store's first write or read), and the
#: optional extras, every shipped machine and emitter, the CLI, the trace reader, and the
#: batch driver (``observe_many``, ``redeliver``).
LAZY = (
    "cattrs",
    "typing_extensions",
    "logging",
    "traceback",
    "string",
    "hashlib",
    "secrets",
    "urllib.parse",
    "pathlib",
    "random",
    "json",
    "orjson",
    "dataclasses",
    "uuid",
    "structlog",
    "asyncio",
    "psycopg",
    "psycopg_pool",
    "prometheus_client",
    "opentelemetry",
    "kubernetes",
    "lifecycle.machines.pod",
    "lifecycle.machines.nodeclaim",
    "lifecycle.stores.postgres",
    "lifecycle.emitters.kubernetes",
    "lifecycle.emitters.log",
    "lifecycle.emitters.memory",
    "lifecycle.telemetry.prometheus",
    "lifecycle.aio",
    "lifecycle.cli",
    "lifecycle.trace",
    "lifecycle.links",
    "lifecycle._batch",
)


def loaded(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running ``code``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "LIFECYCLE"))}
    env["PYTHONPATH"] = str(SRC)
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys\nprint(sorted(sys.modules))"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = ast.literal_eval(out.strip().splitlines()[-1])
    assert isinstance(found, list)
    return set(found)


@pytest.fixture(scope="module")
def baseline() -> set[str]:
    return loaded("pass")


def pulled_in(modules: set[str], baseline: set[str]) -> list[str]:
    """The lazy modules (or their submodules) in ``modules`` that ``python -c pass`` lacks."""
    return sorted(
        name
        for name in modules - baseline
        if any(name == lazy or name.startswith(lazy + ".") for lazy in LAZY)
    )


def test_a_hosts_first_import_loads_nothing_it_does_not_use(baseline: set[str]) -> None:
    modules = loaded(HOST)
    assert {"lifecycle.runner", "lifecycle.stores.sqlite", "lifecycle._core.refs"} <= modules
    assert pulled_in(modules, baseline) == []


def test_import_lifecycle_loads_only_the_face(baseline: set[str]) -> None:
    modules = loaded("import lifecycle")
    assert sorted(m for m in modules - baseline if m.startswith("lifecycle")) == [
        "lifecycle",
        "lifecycle._version",
    ]
    assert "attrs" not in modules


def test_the_lazy_parts_load_when_used(baseline: set[str], tmp_path: Path) -> None:
    """The deferred imports happen where they are needed: a store opened on a file, a
    status written and read back (the converter), the first record (logging), so a host
    pays for each when it uses it, and the import check above is not passing because
    something is never loaded at all."""
    code = f"""
{HOST}
from datetime import datetime, timezone
from lifecycle.machines import pod
store = SQLiteStore({str(tmp_path / "x.db")!r})
runner = Runner(store, [])
ref = ObjectRef("Pod", "ml", "p", "u1")
runner.observe(ref, pod.CreateRequested(at=datetime(2026, 1, 1, tzinfo=timezone.utc)))
record = store.load(runner.machines.for_kind("Pod"), ref)
assert record is not None and record.status.state == "Provisioning", record
import lifecycle._log
lifecycle._log.get_logger("lifecycle.test").debug("first record")
"""
    modules = loaded(code)
    assert {"cattrs", "logging", "hashlib", "pathlib", "json", "orjson"} <= modules
