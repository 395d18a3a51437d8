"""The machine is the one home of what the library knows about it (issue 36, ADR 0147).

The guide's checklist for adding a machine (``docs/guides/tables.md``, "Adding a machine to
the library") is held to the code: every shipped machine has each file it lists, the list
stays within six files, and no module of the package outside it names a shipped machine --
by its name or kind as a string, or by its constant -- except where the library declares how
machines link (each such module listed below, with what it links). A module that keys a
table by a machine's name fails here: the fact belongs on the machine.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

from lifecycle.machines import SHIPPED, default_registry

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "lifecycle"
GUIDE = ROOT / "docs" / "guides" / "tables.md"

#: Modules that name shipped machines because they declare how machines relate (or, for the
#: test kit, drive the Pod as its example), with the machines each names. Anything else that
#: names a machine should ask the machine instead.
LINKED: dict[str, set[str]] = {
    # the links between machines and the linked groups `lifecycle check` analyses
    "links.py": {"pod", "nodeclaim", "job", "workflow", "certification", "workloadrun"},
    "analysis.py": {"pod", "nodeclaim", "job", "workflow", "certification", "workloadrun"},
    # a machine that drives another's objects
    "machines/workflow.py": {"job", "workloadrun"},
    "machines/_workflow_records.py": {"job"},
    "machines/restore/_rules.py": {"pod"},
    "machines/_claims.py": {"nodeclaim"},  # a Pod's NodeClaim ref (the Pod -> NodeClaim link)
    # the core API's Pods, whose status a machine with `writes_pod_conditions` also patches
    "manifests.py": {"pod"},
    # provider adapters: what a cloud reports, as the Pod machine's observations
    "adapters/_aws_mapping.py": {"pod"},
    "adapters/aws.py": {"pod"},
    "adapters/base.py": {"pod"},
    "adapters/modal.py": {"pod"},
    "adapters/provider.py": {"pod"},
    # the Workflow's timeout write on a Job, reported by workflow-controller
    "emitters/kubernetes.py": {"job"},
    # a NodeClaim's derived uid (the Pod -> NodeClaim link), told apart by the store and the
    # emitter alike
    "_k8s_api/uids.py": {"nodeclaim"},
    # `lifecycle restore check`: the Restore gate's own offline command
    "cli/__init__.py": {"restore"},
    "cli/parsers.py": {"restore"},
    # the test kit's worked examples and the shipped machines' samples
    "_testing/emitter.py": {"pod"},
    "_testing/fake_api/objects.py": {"pod"},
    "_testing/fake_provider.py": {"pod", "nodeclaim"},
    "_testing/provider.py": {"pod"},
    "_testing/store.py": {"pod", "nodeclaim"},
    "_testing/strategies.py": {"pod", "nodeclaim"},
    "_testing/telemetry.py": {"pod", "job"},
}


def checklist() -> list[str]:
    """The paths of the guide's checklist, in order."""
    text = GUIDE.read_text(encoding="utf-8")
    section = text.split("## Adding a machine to the library", 1)[1].split("\n## ", 1)[0]
    paths: list[str] = []
    for line in section.splitlines():
        if line.startswith("- [ ] "):
            paths += re.findall(r"`([^`]+\.(?:py|md|jsonl))`", line)
    return paths


def test_the_checklist_is_at_most_six_files() -> None:
    paths = checklist()
    assert paths == [
        "src/lifecycle/machines/<module>.py",
        "src/lifecycle/machines/__init__.py",
        "tests/machines/test_<module>.py",
        "examples/traces/<story>.jsonl",
        "docs/machines/<name>.md",
        "docs/machines/README.md",
    ]
    assert len(paths) <= 6


def test_every_shipped_machine_has_every_file_of_the_checklist() -> None:
    traces = [p.read_text(encoding="utf-8") for p in (ROOT / "examples" / "traces").glob("*")]
    registry = (PACKAGE / "machines" / "__init__.py").read_text(encoding="utf-8")
    index = (ROOT / "docs" / "machines" / "README.md").read_text(encoding="utf-8")
    for name, kind, module, constant in SHIPPED:
        home = PACKAGE / "machines"
        assert (home / f"{module}.py").is_file() or (home / module / "__init__.py").is_file()
        assert f'("{name}", "{kind}", "{module}", "{constant}")' in registry
        assert (ROOT / "tests" / "machines" / f"test_{module}.py").is_file(), name
        assert any(f'"machine": "{name}"' in t for t in traces), f"no example trace of {name}"
        assert (ROOT / "docs" / "machines" / f"{name}.md").is_file(), name
        assert f"[`{name}`]({name}.md)" in index


def named_machines(path: Path) -> set[str]:
    """The shipped machines ``path``'s code names: a string equal to a machine's name or
    kind, its constant, or an import of its module (docstrings and comments do not count)."""
    by_string = {s: e[0] for e in SHIPPED for s in (e[0], e[1])}
    by_constant = {e[3]: e[0] for e in SHIPPED}
    by_module = {e[2]: e[0] for e in SHIPPED}
    tree = ast.parse(path.read_text(encoding="utf-8"))
    prose = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in prose and node.value in by_string:
                found.add(by_string[node.value])
        elif isinstance(node, ast.Name) and node.id in by_constant:
            found.add(by_constant[node.id])
        elif isinstance(node, ast.Attribute) and node.attr in by_constant:
            found.add(by_constant[node.attr])
        elif isinstance(node, ast.ImportFrom):
            last = (node.module or "").rpartition(".")[2]
            if last in by_module:
                found.add(by_module[last])
            for alias in node.names:
                if alias.name in by_constant:
                    found.add(by_constant[alias.name])
                elif alias.name in by_module and (node.module or "").endswith("machines"):
                    found.add(by_module[alias.name])
    return found


def own(relative: str, machine: str) -> bool:
    """Whether ``relative`` is one of ``machine``'s own files on the checklist."""
    module = next(e[2] for e in SHIPPED if e[0] == machine)
    return relative in (
        "machines/__init__.py",
        f"machines/{module}.py",
    ) or relative.startswith(f"machines/{module}/")


def test_no_module_outside_the_checklist_names_a_shipped_machine() -> None:
    naming: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        names = {m for m in named_machines(path) if not own(relative, m)}
        if names:
            naming[relative] = names
    assert naming == LINKED


def test_the_scan_sees_a_table_keyed_by_a_machines_name(tmp_path: Path) -> None:
    """What the rule is for: ``CONTROLLERS = {"pod": ...}`` and ``_SHIPPED = {"restore":
    ...}`` were tables keyed by machine name; the scan names them."""
    keyed = tmp_path / "keyed.py"
    keyed.write_text(
        '"""A module; "pod" in prose does not count."""\n'
        'CONTROLLERS = {"pod": "pod-controller"}\n'
        "from lifecycle.machines import RESTORE\n"
        "from lifecycle.machines.job import JobMachine\n",
        encoding="utf-8",
    )
    assert named_machines(keyed) == {"pod", "restore", "job"}


def test_the_registry_lists_every_machine_once_in_its_order() -> None:
    registry = default_registry()
    assert list(registry) == [e[0] for e in SHIPPED]
    assert [registry[e[0]].kind for e in SHIPPED] == [e[1] for e in SHIPPED]


def test_a_row_reads_back_what_it_was_given() -> None:
    """``Row(to=...)`` was read back only as ``.target``."""
    from lifecycle import EventType, Observation, Row

    class Seen(Observation):
        pass

    row = Row("a", Seen, to="b", reason="Seen", event=EventType.NORMAL)
    assert (row.to, row.target) == ("b", "b")


def _returning_machine(reason: str) -> tuple[Any, Any, Any, Any]:
    """A volume that returns to Detached two ways: detached as asked (Normal), or forced off
    a failed node (Warning, with ``reason``)."""
    from typing import ClassVar

    import attrs

    from lifecycle import EventType, Machine, ObjectRef, Observation, Row, Table

    @attrs.frozen
    class Status:
        state: str = "Detaching"
        reason: str = ""
        message: str = ""

    class Detached(Observation):
        pass

    class NodeLost(Observation):
        pass

    class Returning(Machine[Status]):
        name: ClassVar[str] = "returning"
        kind: ClassVar[str] = "Returning"
        status_type: ClassVar[type[Any]] = Status
        table: ClassVar[Table] = Table(
            "returning",
            states=("Detaching", "Failed", "Detached"),
            initial="Detaching",
            terminal=(),
            observations=(Detached, NodeLost),
            rows=(
                Row("Detaching", NodeLost, to="Failed", reason="NodeLost", event=EventType.WARNING),
                Row(
                    "Detaching", Detached, to="Detached", reason="Detached", event=EventType.NORMAL
                ),
                Row("Failed", Detached, to="Detached", reason=reason, event=EventType.WARNING),
            ),
        )

        def initial(self, ref: ObjectRef) -> Status:
            return Status()

    return Returning(), Status, Detached, NodeLost


def test_a_row_returning_to_a_state_has_its_own_event_type() -> None:
    """The event type was per state: a second way into Detached, as a Warning, needed an
    ``event_type`` override. Now a row giving its own reason decides its own type."""
    from lifecycle import EventType
    from lifecycle.testing import EPOCH

    machine, status_type, detached, node_lost = _returning_machine("ForceDetached")
    asked = machine.apply(status_type(), detached(at=EPOCH))
    (flip,) = machine.flips(status_type(), asked)
    assert (flip.reason, flip.type) == ("Detached", EventType.NORMAL)
    failed = machine.apply(status_type(), node_lost(at=EPOCH))
    forced = machine.apply(failed, detached(at=EPOCH))
    (flip,) = machine.flips(failed, forced)
    assert (flip.reason, flip.type) == ("ForceDetached", EventType.WARNING)
    assert machine.event_type(forced) is EventType.WARNING


def test_rows_of_both_types_giving_one_reason_still_need_an_override() -> None:
    import pytest

    from lifecycle import TableError

    with pytest.raises(TableError, match="entered as Normal and as Warning with the reason"):
        _returning_machine("Detached")
    with pytest.raises(TableError, match="by a row giving no reason"):
        _returning_machine("")
