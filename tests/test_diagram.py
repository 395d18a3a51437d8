"""``lifecycle diagram``: Mermaid and DOT drawn by ``transitions`` from each declared table."""

from __future__ import annotations

import io
import re
import sys
from typing import Any

import pytest

from lifecycle import Machine, default_registry
from lifecycle._diagram import EMPTY, build, diagram, state_ids
from lifecycle.cli import main
from lifecycle.machines import CERTIFICATION, JOB, POD, RESTORE
from lifecycle.tables import ANY, SAME

MACHINES = list(default_registry().values())
IDS = [m.name for m in MACHINES]


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


def mermaid_edges(text: str) -> dict[tuple[str, str], list[str]]:
    """``A --> B: x | y`` lines as {(A, B): [x, y]} (``[*]`` markers left out)."""
    edges: dict[tuple[str, str], list[str]] = {}
    for m in re.finditer(r"^\s*(\w+) --> (\w+): (.*)$", text, re.M):
        edges[(m[1], m[2])] = sorted(m[3].split(" | "))
    return edges


def dot_edges(text: str) -> dict[tuple[str, str], tuple[list[str], str]]:
    """``A -> B [label="x | y" ...]`` as {(A, B): ([x, y], attributes)}."""
    edges = {}
    for m in re.finditer(r'^\s*(\w+) -> (\w+) \[label="?(.*?)"?(?: (\w+=.*))?\]$', text, re.M):
        edges[(m[1], m[2])] = (sorted(m[3].split(" | ")), m[4] or "")
    return edges


def expected_labels(
    machine: Machine[Any], *, stays: bool = False
) -> dict[tuple[str, str], list[str]]:
    """What every edge must say, straight from the rows: one label per row and source (the
    engine groups an edge's labels by trigger, so they are compared sorted)."""
    table = machine.table
    ids = state_ids(table)
    out: dict[tuple[str, str], list[str]] = {}
    for row in table.rows:
        if row.ignore or (row.target == SAME and not stays):
            continue
        label = row.observation.__name__ + (" (recovery)" if row.recovery else "")
        if row.target == SAME:
            label += " [internal]"
        if row.guard is not None:
            label += f" [{row.guard_name}]"
        for source in table.states if ANY in row.sources else row.sources:
            target = source if row.target == SAME else row.target
            out.setdefault((ids[source], ids[target]), []).append(label)
    return {edge: sorted(labels) for edge, labels in out.items()}


@pytest.mark.parametrize("machine", MACHINES, ids=IDS)
def test_mermaid_draws_every_state_and_every_state_changing_row(machine: Machine[Any]) -> None:
    text = diagram(machine, "mermaid")
    table = machine.table
    ids = state_ids(table)
    assert text.startswith(f"---\ntitle: {machine.kind} lifecycle\n---\nstateDiagram-v2\n")
    for state in table.states:
        label = (state or EMPTY) + (" [terminal]" if state in table.terminal else "")
        assert f'state "{label}" as {ids[state]}\n' in text
        marked = f"  {ids[state]} --> [*]\n" in text
        assert marked == (state in table.terminal), state
    assert f"  [*] --> {ids[table.initial]}\n" in text
    assert mermaid_edges(text) == expected_labels(machine)


@pytest.mark.parametrize("machine", MACHINES, ids=IDS)
def test_dot_draws_the_same_edges_and_marks_terminal_states(machine: Machine[Any]) -> None:
    text = diagram(machine, "dot")
    table = machine.table
    ids = state_ids(table)
    assert text.startswith(f'digraph "{machine.kind} lifecycle" {{')
    assert text.rstrip().endswith("}")
    got = dot_edges(text)
    assert {k: v[0] for k, v in got.items()} == expected_labels(machine)
    for state in table.states:
        node = re.search(rf"^\s*{ids[state]} \[label=.*$", text, re.M)
        assert node is not None, state
        assert ("peripheries=2" in node[0]) == (state in table.terminal)
    recovery = {(ids[s], ids[r.target]) for r in table.recovery_rows for s in r.sources}
    for edge, (_, attributes) in got.items():
        assert ("style=dashed" in attributes) == (edge in recovery), edge


def test_stays_adds_the_rows_that_keep_the_state_as_internal_loops() -> None:
    text = diagram(JOB, "mermaid", stays=True)
    assert mermaid_edges(text) == expected_labels(JOB, stays=True)
    assert "InProgress --> InProgress: SpecUpdated [internal] |" in text
    assert "WorkloadFailed [internal] [can_restart]" in text


def test_the_recovery_rows_and_the_verdicts_are_marked() -> None:
    cert = diagram(CERTIFICATION)
    assert "Failed --> InProgress: WorkflowObserved (recovery) [recovers]" in cert
    restore = mermaid_edges(diagram(RESTORE))
    assert restore[("Rejected", "Skipped")] == ["PodObserved (recovery) [bypass]"]
    job = diagram(JOB)
    assert 'state "HardwareFailed [verdict, Warning when True]" as HardwareFailedVerdict' in job
    assert 'state "ValidationFailed [verdict, Warning when True, Normal when first False]"' in job
    assert "Class HardwareFailedVerdict s_verdict" in job
    assert "Verdict" not in diagram(POD)


def test_the_diagram_is_a_transitions_machine_with_one_transition_per_row_and_source() -> None:
    """transitions holds the rows (the engines only print them): guards as conditions."""
    from transitions.extensions.diagrams import GraphMachine

    graph = build(JOB, "mermaid")
    assert isinstance(graph, GraphMachine)
    drawn = [
        (t.source, t.dest, name, [c.func for c in t.conditions])
        for name, event in graph.events.items()
        for ts in event.transitions.values()
        for t in ts
    ]
    ids = state_ids(JOB.table)
    rows = [
        (ids[s], ids[r.target], r.observation.__name__, [r.guard_name] if r.guard else [])
        for r in JOB.table.rows
        if not r.ignore and r.target != SAME
        for s in r.sources
    ]
    assert sorted(drawn) == sorted(rows)


def test_state_ids_are_plain_unique_names() -> None:
    from lifecycle import Row, Table, Tick

    table = Table(
        "odd",
        states=("", "a-b", "ab", "9 lives", "New"),
        initial="",
        terminal=(),
        observations=(Tick,),
        rows=(Row("", Tick, to="ab", reason="X", event=POD.table.rows[0].event),),
    )
    ids = state_ids(table)
    assert list(ids.values()) == ["New", "ab", "ab2", "S9lives", "New2"]


def test_cli_diagram_prints_mermaid_by_default_and_dot_on_request() -> None:
    code, text = run("diagram", "pod")
    assert code == 0
    assert text == diagram(POD, "mermaid")
    code, text = run("diagram", "certification", "--format", "dot")
    assert code == 0
    assert text == diagram(CERTIFICATION, "dot")
    code, text = run("diagram", "job", "--stays")
    assert code == 0
    assert "[internal]" in text


def test_cli_diagram_refuses_an_unknown_machine(capsys: pytest.CaptureFixture[str]) -> None:
    code, text = run("diagram", "pods")
    assert code == 2
    assert text == ""
    assert "unknown machine 'pods'" in capsys.readouterr().err


def test_dot_without_the_graphviz_package_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "graphviz", None)  # import graphviz -> ImportError
    code, text = run("diagram", "pod", "--format", "dot")
    assert code == 4  # a missing extra, told apart from "no" (1)
    assert text == ""
    assert "lifecycle-machines[diagrams]" in capsys.readouterr().err
    code, text = run("diagram", "pod")  # Mermaid needs nothing more
    assert code == 0
    assert "stateDiagram-v2" in text


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown diagram format"):
        diagram(POD, "svg")  # type: ignore[arg-type]


def test_without_transitions_the_table_still_prints_and_diagram_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delitem(sys.modules, "lifecycle._diagram")
    for name in [m for m in sys.modules if m == "transitions" or m.startswith("transitions.")]:
        monkeypatch.setitem(sys.modules, name, None)  # import transitions... -> ImportError
    monkeypatch.setitem(sys.modules, "transitions", None)
    code, text = run("table", "pod")
    assert code == 0
    assert text.startswith("| # | from | observation |")
    code, text = run("diagram", "pod")
    assert code == 4
    assert text == ""
    assert "pip install 'lifecycle-machines[diagrams]'" in capsys.readouterr().err
