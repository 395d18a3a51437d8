"""A user's machine is first-class (issue 36, ADR 0147): the Volume machine, defined in a file
outside the package and registered nowhere, goes through every CLI command by ``FILE.py:NAME``
and ``MODULE:NAME`` alike, and the Kubernetes emitter sends its Events with the apiVersion
and reporting controller the machine declares. (Its stores:
``tests/stores/test_user_machine_stores.py``.)
"""

from __future__ import annotations

import io
import json
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from lifecycle import MachineRegistry, ObjectRef, Runner, kubernetes_status
from lifecycle.cli import main
from lifecycle.emitters.kubernetes import KubernetesEmitter, ManualClock, MemoryEventSink

from .conftest import EPOCH
from .user_machine import VOLUME_REASONS, VOLUME_TRACE, load_volume, write_volume


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out)
    return code, out.getvalue()


@pytest.fixture
def volume_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return write_volume(tmp_path)


@pytest.mark.parametrize("spec", ["volume.py:VOLUME", "volume:VOLUME", "volume.py:VolumeMachine"])
def test_table_diagram_check_and_machines_take_a_users_machine(
    volume_file: Path, spec: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delitem(sys.modules, "volume", raising=False)
    code, table = run("table", spec)
    assert code == 0
    assert "| Attaching | AttachFailed |  | Failed | AttachFailed | Warning |" in table
    code, diagram = run("diagram", spec)
    assert code == 0
    assert "Attaching --> Failed: AttachFailed" in diagram
    # its deliberate findings are allowed with the public helpers of lifecycle.tables
    code, checked = run("check", spec)
    assert code == 0, checked
    assert "1 checked, 0 finding(s)" in checked
    code, listed = run("machines", "--machines", spec, "--format", "json")
    assert code == 0
    (described,) = json.loads(listed)
    assert (described["name"], described["kind"]) == ("volume", "Volume")


def test_replay_takes_a_users_machine_on_every_store_url(volume_file: Path, tmp_path: Path) -> None:
    trace = tmp_path / "volume.jsonl"
    trace.write_text(VOLUME_TRACE, encoding="utf-8")
    for store in ("memory://", f"sqlite:///{tmp_path / 'v.db'}"):
        code, out = run(
            "replay", str(trace), "--machines", "volume.py:VOLUME", "--store", store,
            "--format", "jsonl",
        )  # fmt: skip
        assert code == 0, out
        events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        assert [e["reason"] for e in events] == VOLUME_REASONS
        assert {e["machine"] for e in events} == {"volume"}
    # without it the trace names a machine the shipped registry does not have: refused
    code, _ = run("replay", str(trace))
    assert code == 2


def test_replay_as_kubernetes_events_uses_the_machines_own_facts(volume_file: Path) -> None:
    trace = volume_file.parent / "volume.jsonl"
    trace.write_text(VOLUME_TRACE, encoding="utf-8")
    code, out = run(
        "replay", str(trace), "--machines", "volume.py:VOLUME", "--as-kubernetes-events"
    )
    assert code == 0, out
    assert "AttachFailed" in out
    assert "node-2 has no free slot" in out


def test_docs_generates_a_page_for_a_users_machine(volume_file: Path, tmp_path: Path) -> None:
    pytest.importorskip("transitions")
    out_dir = tmp_path / "pages"
    code, out = run("docs", "--machines", "volume.py:VOLUME", "--out", str(out_dir))
    assert code == 0, out
    page = (out_dir / "volume.md").read_text(encoding="utf-8")
    assert "# Volume (`volume`)" in page
    assert "Attaches a volume to a node" in page
    code, out = run("docs", "--machines", "volume.py:VOLUME", "--out", str(out_dir), "--check")
    assert code == 0, out


def test_a_file_inside_a_package_loads_with_its_relative_imports(tmp_path: Path) -> None:
    """``lifecycle check FILE.py:NAME`` on a module of a package: it was loaded as a lone
    file, so its ``from .x import y`` failed where ``MODULE:NAME`` worked."""
    package = tmp_path / "volumes_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("", encoding="utf-8")
    write_volume(package)
    (package / "shipped.py").write_text("from .volume import VOLUME\n", encoding="utf-8")
    code, out = run("table", f"{package / 'shipped.py'}:VOLUME")
    assert code == 0, out
    assert "AttachFailed" in out
    # and the library's own modules, as a contributor checks them from a checkout
    source = Path(__file__).resolve().parents[1] / "src" / "lifecycle" / "machines"
    code, out = run("check", f"{source / 'certification.py'}:CERTIFICATION")
    assert code == 0, out


def test_the_kubernetes_emitter_sends_a_users_machine_with_its_own_api_version(
    tmp_path: Path,
) -> None:
    volume = load_volume(tmp_path)
    sink = MemoryEventSink()
    emitter = KubernetesEmitter(sink, machines=[volume], clock=ManualClock(EPOCH))
    runner = Runner(emitters=[emitter], machines=MachineRegistry([volume]))
    ref = ObjectRef("Volume", "data", "vol-a", "vol-a-uid")
    module = sys.modules[type(volume).__module__]
    runner.observe(ref, module.AttachRequested(at=EPOCH, node="node-1"))
    runner.observe(ref, module.AttachFailed(at=EPOCH + timedelta(seconds=5), error="no slot"))
    assert emitter.flush(timeout=10.0)
    emitter.close()
    events = sink.events()
    assert sorted(e["reason"] for e in events) == ["AttachFailed", "Attaching"]
    for event in events:
        assert event["regarding"]["apiVersion"] == "storage.example.com/v1"
        assert event["reportingController"] == "volume-attacher"
    assert emitter.api_versions["Pod"] == "v1"  # the shipped machines' own, beneath
    # and its status body is the machine's own shape
    status = runner.store.load(volume, ref)
    assert status is not None
    assert kubernetes_status(volume, status.status) == {"phase": "Failed", "message": "no slot"}


def test_the_property_suite_takes_a_users_machine(tmp_path: Path) -> None:
    """``lifecycle.testing`` on the Volume: every row reached, every property held; its
    ``samples`` (declared on the machine) are used without naming it anywhere."""
    from lifecycle.testing import check_machine, row_paths

    volume = load_volume(tmp_path)
    check_machine(volume, max_examples=10)
    type(volume).samples = {"node": ("node-from-samples",)}
    try:
        paths, unreached = row_paths(volume)
        assert not unreached
        nodes = {getattr(o, "node", None) for p in paths for o in p.observations}
        assert nodes - {None} == {"node-from-samples"}
    finally:
        del type(volume).samples


def test_a_file_in_a_folder_named_as_another_package_still_loads(tmp_path: Path) -> None:
    """A folder with ``__init__.py`` whose name another package holds (``json``): the file is
    not that package's module, so it is loaded on its own, as before."""
    folder = tmp_path / "json"
    folder.mkdir()
    (folder / "__init__.py").write_text("", encoding="utf-8")
    write_volume(folder)
    code, out = run("table", f"{folder / 'volume.py'}:VOLUME")
    assert code == 0, out
    assert "AttachFailed" in out
