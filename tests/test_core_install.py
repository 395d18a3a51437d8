"""The core install (issue 35): with no extra, every public module imports or says which extra
it needs, every command that needs none works, and each that needs one says so once (exit 4).

Each check runs ``scripts/core_check.py`` in a subprocess with the optional SDKs made
unimportable (a meta path finder raising ``ModuleNotFoundError`` for them), the same script
``make core-check`` runs in a clean virtualenv holding the wheel and no extra (ADR 0136).
"""

from __future__ import annotations

import pickle
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from scripts import core_check

import lifecycle
from lifecycle import LifecycleError, MissingExtra
from lifecycle._core.errors import EXTRAS, extra_of

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "core_check.py"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
DECLARED: dict[str, list[str]] = PYPROJECT["project"]["optional-dependencies"]


def blocked(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """``scripts/core_check.py ARGS`` in a fresh interpreter (it blocks the SDKs itself)."""
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
        check=False,
    )


def run_blocked(*argv: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """One ``lifecycle`` command (or ``python SCRIPT``) with the SDKs unimportable."""
    return blocked("--run", "--block", *argv, cwd=cwd)


# -- the class: every public module, without any SDK -------------------------------------------
def test_every_public_module_imports_without_the_sdks_or_raises_missing_extra() -> None:
    done = blocked("imports", "--block")
    assert done.returncode == 0, done.stderr
    assert "core imports: ok" in done.stdout


def test_the_modules_declared_to_need_an_extra_are_public_and_the_extras_declared() -> None:
    public = set(core_check.public_modules(lifecycle))
    assert set(core_check.NEEDS_AT_IMPORT) <= public
    assert set(core_check.NEEDS_AT_IMPORT.values()) <= set(EXTRAS)


def test_the_extras_table_is_pyproject_s_and_the_blocked_sdks_are_its_modules() -> None:
    """``EXTRAS`` names every extra pyproject declares (``all`` aside), and each of its
    requirements is the distribution of one of the modules it lists (so a blocked module set
    that misses an SDK cannot pass for the core install)."""
    assert set(EXTRAS) == set(DECLARED) - {"all"}
    assert set(core_check.BLOCKED) == {m for modules in EXTRAS.values() for m in modules}
    installed = metadata.packages_distributions()
    for extra, requirements in DECLARED.items():
        if extra == "all":
            continue
        brought = {
            dist.lower().replace("_", "-")
            for module in EXTRAS[extra]
            for dist in installed.get(module, [])
        }
        for requirement in requirements:
            name = Requirement(requirement).name.lower().replace("_", "-")
            assert name in brought, (extra, name, brought)


# -- the root cause: the Kubernetes side without urllib3 or the client -------------------------
def test_the_event_simulation_and_the_status_record_code_need_no_sdk(tmp_path: Path) -> None:
    code = tmp_path / "k8s.py"
    code.write_text(
        """
import sys
from datetime import UTC, datetime
from lifecycle import MemoryEmitter, ObjectRef, Runner
from lifecycle.emitters.kubernetes import KubernetesEmitter, MemoryEventSink, simulate_events
from lifecycle.machines.pod import CreateRequested
from lifecycle.stores.kubernetes import PODS, KubernetesStore, Reply

class Gone:
    def send(self, call):
        return Reply(0, error="no server")

store = KubernetesStore(resources={"Pod": PODS}, transport=Gone(), sleep=lambda _: None)
events = MemoryEmitter()
result = Runner(store, [events], links=()).observe(
    ObjectRef("Pod", "ml", "p", uid="u"), CreateRequested(at=datetime.now(UTC), pool="gpu")
)
assert result.error is not None and "no server" in str(result.error), result
rows = simulate_events(
    Runner(links=()).observe(
        ObjectRef("Pod", "ml", "q", uid="v"), CreateRequested(at=datetime.now(UTC), pool="gpu")
    ).transitions
)
assert len(rows) == 1, rows
with KubernetesEmitter(MemoryEventSink()):
    pass
assert not [m for m in sys.modules if m.split(".")[0] in ("kubernetes", "urllib3")]
print("ok")
""",
        encoding="utf-8",
    )
    done = run_blocked(str(code))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_replay_as_kubernetes_events_needs_no_sdk() -> None:
    argv = ["replay", "examples/traces/kubernetes-event-series.jsonl", "--as-kubernetes-events"]
    done = run_blocked("lifecycle", *argv)
    assert done.returncode == 0, done.stderr
    whole = subprocess.run(
        [sys.executable, "-m", "lifecycle", *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    assert done.stdout == whole.stdout  # the same Events, with or without the extra


def test_the_api_sink_and_transport_name_the_kubernetes_extra(tmp_path: Path) -> None:
    code = tmp_path / "api.py"
    code.write_text(
        """
from lifecycle import MissingExtra
from lifecycle.emitters.kubernetes import ApiEventSink
from lifecycle.stores.kubernetes import PODS, ApiTransport, ObjectCache
for build in (ApiEventSink, ApiTransport, lambda: ObjectCache(resources={"Pod": PODS})):
    try:
        build()
    except MissingExtra as e:
        assert e.extra == "kubernetes", e
        print(e)
""",
        encoding="utf-8",
    )
    done = run_blocked(str(code))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 3
    needs = ["Event API sink", "status store's API transport", "object cache"]
    for line, what in zip(lines, needs, strict=True):
        assert line.count("pip install 'lifecycle-machines[kubernetes]'") == 1, line
        assert line.startswith(f"the Kubernetes {what} needs"), line


# -- the commands: one line naming the extra, its pip command once, exit 4 ----------------------
def test_every_readme_command_that_needs_an_extra_says_which_once(tmp_path: Path) -> None:
    done = blocked("readme", str(tmp_path), "--block", "--extras-only")
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("argv", "extra"),
    [
        (["diagram", "pod"], "diagrams"),
        (["diagram", "pod", "--format", "dot"], "diagrams"),
        (["replay", "examples/traces/demo.jsonl", "--metrics", "{tmp}/m.prom"], "prometheus"),
        (["db", "status", "--store", "postgresql://u@localhost:1/db"], "postgres"),
        (["replay", "examples/traces/demo.jsonl", "--store", "postgresql://u@h:1/d"], "postgres"),
        (["check", "examples/quickstart_property_test.py:DoorMachine"], "testing"),
    ],
    ids=["diagram", "dot", "metrics", "db-postgres", "replay-postgres", "check-file"],
)
def test_a_command_that_needs_a_missing_extra_exits_4_naming_it_once(
    argv: list[str], extra: str, tmp_path: Path
) -> None:
    done = run_blocked("lifecycle", *[a.format(tmp=tmp_path) for a in argv])
    assert done.returncode == 4, done.stderr
    assert done.stdout == ""
    assert core_check.one_line_naming(done.stderr, extra) is None, done.stderr
    assert done.stderr.startswith("lifecycle: ")


# -- the error itself --------------------------------------------------------------------------
def test_missing_extra_is_one_line_with_one_pip_command_and_survives_pickling() -> None:
    e = MissingExtra("diagrams", "a diagram", "transitions")
    assert isinstance(e, ImportError)
    assert isinstance(e, LifecycleError)
    assert str(e) == (
        "a diagram needs the 'diagrams' extra (transitions is not installed): "
        "pip install 'lifecycle-machines[diagrams]'"
    )
    assert core_check.one_line_naming(str(e), "diagrams") is None
    back = pickle.loads(pickle.dumps(e))
    assert (type(back), str(back), back.extra, back.missing) == (
        MissingExtra,
        str(e),
        "diagrams",
        "transitions",
    )


def test_missing_extra_of_an_import_error_names_the_extra_of_its_module() -> None:
    error = ModuleNotFoundError("No module named 'prometheus_client.core'", name="x")
    error.name = "prometheus_client.core"
    found = MissingExtra.of(error, "--metrics")
    assert (found.extra, found.missing) == ("prometheus", "prometheus_client")
    assert MissingExtra.of(found, "anything else") is found  # never wrapped twice
    assert MissingExtra.of(ImportError("broken"), "lifecycle docs", "diagrams").extra == "diagrams"
    with pytest.raises(ValueError, match="no extra brings"):
        MissingExtra.of(ModuleNotFoundError("No module named 'numpy'", name="numpy"), "x")
    assert extra_of("urllib3.connection") == "kubernetes"
    assert extra_of("numpy") is None


def test_the_core_check_knows_every_readme_command() -> None:
    """Each README command is run by ``make core-check``, or skipped with a reason; each
    declared key still names a README command."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = [c for c, _ in core_check.readme_commands(readme)]
    for key in [*core_check.README_EXTRAS, *core_check.README_SKIPPED]:
        assert any(c.startswith(key) for c in commands), key
    runnable = ("lifecycle ", "python ", "bash ")
    for command in commands:
        assert command.startswith(runnable) or any(
            command.startswith(k) for k in core_check.README_SKIPPED
        ), command


def test_the_provider_adapters_name_their_extra_when_built_without_their_sdk(
    tmp_path: Path,
) -> None:
    """Built with the SDK's defaults, an adapter says at once which extra it needs (a missing
    boto3 was a ProvisionErrored observation at every call); given a client factory or an SDK
    (a fake), it needs none."""
    code = tmp_path / "adapters.py"
    code.write_text(
        """
from lifecycle import MissingExtra
from lifecycle.adapters.aws import AwsAdapter
from lifecycle.adapters.modal import AsyncModalAdapter, ModalAdapter
from lifecycle.testing.fakes import FakeModal
for build, extra in ((AwsAdapter, "aws"), (AsyncModalAdapter, "modal"), (ModalAdapter, "modal")):
    try:
        build()
    except MissingExtra as e:
        assert e.extra == extra, e
        print(e)
AwsAdapter(client_factory=lambda region: None)
AsyncModalAdapter(sdk=FakeModal())
""",
        encoding="utf-8",
    )
    done = run_blocked(str(code))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 3, lines
    for line, extra in zip(lines, ("aws", "modal", "modal"), strict=True):
        assert core_check.one_line_naming(line, extra) is None, line
