"""Diagrams of a machine, drawn from its declared table by the ``transitions`` library.

The table becomes a ``transitions`` graph machine, and transitions' own engines write the
source, so the diagrams read as any ``transitions`` user expects and this library keeps no
drawing code of its own (ADR 0050): no renderer here. What goes in:

- one state per exclusive state (``∅`` is the empty initial state); terminal states are
  tagged ``terminal`` and declared ``final`` (Mermaid draws ``--> [*]``, Graphviz a double
  border);
- one transition per state-changing row and source state, triggered by the row's observation
  and conditioned on its guard, so an edge reads ``Observation [guard]``; a recovery row reads
  ``Observation (recovery) [guard]`` and is dashed in Graphviz; with ``stays=True`` the rows
  that keep the state but change fields are drawn too (``[internal]`` self-loops); ignore rows
  never are;
- one node per verdict condition (outside the exclusive set), tagged ``verdict`` with the event
  types its flips send.

Mermaid needs nothing beyond ``transitions``; DOT source needs the ``graphviz`` Python package
(not the ``dot`` binary). Both come with the ``diagrams`` extra.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar, Literal

from ._core.errors import MissingExtra

try:
    from transitions.extensions.diagrams import HierarchicalGraphMachine
    from transitions.extensions.nesting import NestedState
except ImportError as e:  # pragma: no cover - depends on the environment
    raise MissingExtra.of(e, "a diagram", "diagrams") from e

from ._core.machine import Machine
from ._core.table import ANY, SAME, Row, Table

Format = Literal["mermaid", "dot"]
FORMATS: tuple[Format, ...] = ("mermaid", "dot")

#: How the empty initial state is shown (as ``lifecycle machines`` and replay show it).
EMPTY = "∅"


class _State(NestedState):
    """A state with the two extras the diagram engines print: a label and tags."""

    def __init__(self, *args: Any, label: str = "", tags: list[str] | None = None, **kw: Any):
        self.label = label
        self.tags = list(tags or ())
        super().__init__(*args, **kw)


class _Diagram(HierarchicalGraphMachine):
    """A flat graph machine (no nesting is used): the hierarchical flavour is the one whose
    Mermaid engine marks final states."""

    state_cls = _State
    style_attributes: ClassVar[dict[str, Any]] = {  # type: ignore[misc]
        "node": {
            "default": {
                "style": "rounded,filled",
                "shape": "rectangle",
                "fillcolor": "white",
                "color": "black",
                "peripheries": "1",
            },
            "terminal": {"fillcolor": "lightgrey", "color": "black", "peripheries": "2"},
            "verdict": {
                "style": "dashed,rounded,filled",
                "fillcolor": "lightyellow",
                "color": "black",
                "peripheries": "1",
            },
        },
        "edge": {
            "default": {"color": "black"},
            "recovery": {"color": "darkorange", "style": "dashed"},
        },
        "graph": {"default": {"color": "black", "fillcolor": "white", "style": "solid"}},
    }


def state_ids(table: Table) -> dict[str, str]:
    """A node id for each state: letters and digits only (engines and ``transitions`` name
    nodes by id; ``_`` is its nesting separator), ``New`` for the empty state, unique."""
    out: dict[str, str] = {}
    for state in table.states:
        base = re.sub(r"[^A-Za-z0-9]", "", state) or "New"
        if base[0].isdigit():
            base = f"S{base}"
        name, n = base, 2
        while name in out.values():
            name, n = f"{base}{n}", n + 1
        out[state] = name
    return out


def _sources(table: Table, row: Row) -> tuple[str, ...]:
    return table.states if ANY in row.sources else row.sources


def _verdict_tags(verdict: Any) -> list[str]:
    tags = ["verdict", f"{verdict.on_true.value} when True"]
    if verdict.on_absent_to_false is not None:
        tags.append(f"{verdict.on_absent_to_false.value} when first False")
    return tags


def build(machine: Machine[Any], fmt: Format = "mermaid", *, stays: bool = False) -> _Diagram:
    """The ``transitions`` graph machine for ``machine``'s table."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown diagram format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if fmt == "dot":  # without the package, transitions would fall back to Mermaid silently
        try:
            import graphviz  # type: ignore[import-untyped]  # noqa: F401
        except ImportError as e:
            raise MissingExtra.of(
                e, "DOT source (the graphviz Python package, not the dot binary)", "diagrams"
            ) from None
    table = machine.table
    ids = state_ids(table)
    states: list[dict[str, Any]] = []
    for state in table.states:
        terminal = state in table.terminal
        states.append(
            {
                "name": ids[state],
                "label": state or EMPTY,
                "tags": ["terminal"] if terminal else [],
                "final": terminal,
            }
        )
    taken = set(ids.values())
    for verdict in machine.verdicts:
        name = re.sub(r"[^A-Za-z0-9]", "", verdict.condition) + "Verdict"
        while name in taken:
            name += "X"
        taken.add(name)
        states.append({"name": name, "label": verdict.condition, "tags": _verdict_tags(verdict)})
    transitions: list[dict[str, Any]] = []
    for row in table.rows:
        if row.ignore or (row.target == SAME and not stays):
            continue
        obs = row.observation.__name__
        for source in _sources(table, row):
            t: dict[str, Any] = {
                "trigger": obs,
                "source": ids[source],
                "dest": None if row.target == SAME else ids[row.target],
                "label": f"{obs} (recovery)" if row.recovery else obs,
            }
            if row.guard is not None:
                t["conditions"] = [row.guard_name]
            transitions.append(t)
    graph = _Diagram(
        states=states,
        transitions=transitions,
        initial=ids[table.initial],
        auto_transitions=False,
        graph_engine="graphviz" if fmt == "dot" else "mermaid",
        show_conditions=True,
        show_state_attributes=True,
        title=f"{machine.kind} lifecycle",
    )
    return graph


def diagram(machine: Machine[Any], fmt: Format = "mermaid", *, stays: bool = False) -> str:
    """Mermaid (``stateDiagram-v2``) or DOT source for ``machine``'s table."""
    graph = build(machine, fmt, stays=stays)
    table = machine.table
    ids = state_ids(table)
    drawn = graph.model_graphs[id(graph)]
    drawn.reset_styling()  # transitions marks the model's current state "active": not wanted
    for state in table.terminal:
        drawn.set_node_style(ids[state], "terminal")
    for state in graph.states:
        if state not in ids.values():
            drawn.set_node_style(state, "verdict")
    styles: Any = getattr(drawn, "custom_styles", {})
    for row in table.recovery_rows:
        for source in _sources(table, row):
            styles["edge"][ids[source]][ids[row.target]] = "recovery"
    kind = f"{machine.kind} lifecycle"
    # transitions writes the title as Mermaid front matter; Mermaid reads it as ``title: ...``
    graph_source: Any = drawn.get_graph(title=f"title: {kind}" if fmt == "mermaid" else kind)
    text = str(graph_source.source)
    return "\n".join(line.rstrip() for line in text.splitlines()) + "\n"
