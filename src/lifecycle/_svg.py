"""A machine's diagram as a self-contained SVG, laid out here from its declared table.

No renderer, browser or binary is involved (ADR 0137): the table gives the graph, a small
layered layout places it left to right, and the SVG is plain text, so ``lifecycle docs`` writes
it beside each machine page and the site shows it offline, and ``lifecycle diagram --format
svg`` prints the same drawing. What is drawn is what the Mermaid source says (ADR 0050):

- one box per exclusive state (``∅`` is the empty initial state, entered from a black dot);
  terminal states are grey with a double border;
- one arrow per (source, target) pair of state-changing rows, labelled with each row's
  ``Observation [guard]`` on a line of its own (``(recovery)`` on a recovery row, whose arrow
  is dashed); with ``stays=True`` the rows that keep the state are drawn too, as loops; ignore
  rows never are;
- one dashed yellow box per verdict condition, under the graph, with the events its flips send.

The layout is the classic layered one: back edges reversed, ranks by longest path, a label box
on every arrow in the rank between its ends (so labels take room and never overlap), orders by
barycenter sweeps, then positions pulled toward the neighbours' mean. Text widths are estimated
for a monospace font, which the SVG asks for.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any
from xml.sax.saxutils import escape

import attrs

from ._core.machine import Machine
from ._core.table import ANY, SAME, Row, Table

#: How the empty initial state is shown (as ``lifecycle machines`` and the pages show it).
EMPTY = "∅"

FONT = 12.0
LABEL_FONT = 11.0
#: Advance of one character of the monospace font, as a share of its size.
CHAR = 0.62
LINE = 1.35
PAD_X, PAD_Y = 12.0, 8.0
RANK_GAP = 28.0
NODE_GAP = 14.0
MARGIN = 16.0
LOOP = 26.0


@attrs.define
class _Node:
    key: str
    lines: list[str]
    kind: str  # start, state, terminal, label, dummy, verdict
    font: float = FONT
    width: float = 0.0
    height: float = 0.0
    #: room kept above the box for a self-loop and its label
    above: float = 0.0
    rank: int = 0
    x: float = 0.0
    y: float = 0.0  # the centre of the box (x is its left side)

    def measure(self) -> None:
        if self.kind == "start":
            self.width = self.height = 14.0
        elif self.kind == "dummy":
            self.width, self.height = 0.0, 0.0
        else:
            longest = max(len(line) for line in self.lines)
            self.width = round(longest * self.font * CHAR + 2 * PAD_X, 1)
            self.height = round(len(self.lines) * self.font * LINE + 2 * PAD_Y, 1)

    @property
    def span(self) -> float:
        """The height the layout reserves: the box and the room above it."""
        return self.height + self.above


@attrs.define
class _Edge:
    source: str
    target: str
    labels: list[str]
    dashed: bool
    path: list[str] = attrs.Factory(list)  # node keys, source to target, label included
    label: str = ""


def _sources(table: Table, row: Row) -> tuple[str, ...]:
    return table.states if ANY in row.sources else row.sources


def _row_label(row: Row) -> str:
    text = row.observation.__name__
    if row.recovery:
        text += " (recovery)"
    if row.guard is not None:
        text += f" [{row.guard_name}]"
    return text


def _graph(machine: Machine[Any], stays: bool) -> tuple[list[_Node], list[_Edge], list[_Edge]]:
    """(nodes, edges between states, self-loops) of ``machine``'s table."""
    table = machine.table
    nodes = [_Node("start", [], "start")]
    for i, state in enumerate(table.states):
        kind = "terminal" if state in table.terminal else "state"
        nodes.append(_Node(f"s{i}", [state or EMPTY], kind))
    key = {state: f"s{i}" for i, state in enumerate(table.states)}
    pairs: dict[tuple[str, str], _Edge] = {}
    for row in table.rows:
        if row.ignore or (row.target == SAME and not stays):
            continue
        for source in _sources(table, row):
            target = source if row.target == SAME else row.target
            edge = pairs.setdefault(
                (key[source], key[target]), _Edge(key[source], key[target], [], True)
            )
            label = _row_label(row)
            if label not in edge.labels:
                edge.labels.append(label)
            edge.dashed = edge.dashed and row.recovery
    edges = [_Edge("start", key[table.initial], [], False)]
    edges += [e for e in pairs.values() if e.source != e.target]
    loops = [e for e in pairs.values() if e.source == e.target]
    for n, verdict in enumerate(machine.verdicts):
        lines = [verdict.condition, f"{verdict.on_true.value} when True"]
        if verdict.on_absent_to_false is not None:
            lines.append(f"{verdict.on_absent_to_false.value} when first False")
        nodes.append(_Node(f"v{n}", lines, "verdict"))
    return nodes, edges, loops


# -- layout ----------------------------------------------------------------------------------
def _back_edges(keys: Sequence[str], edges: Sequence[_Edge]) -> set[int]:
    """Indexes of the edges a depth-first walk from the start finds closing a cycle."""
    out: dict[str, list[int]] = {k: [] for k in keys}
    for i, e in enumerate(edges):
        out[e.source].append(i)
    back: set[int] = set()
    state: dict[str, int] = {}  # 1 on the stack, 2 done

    def visit(k: str) -> None:
        state[k] = 1
        for i in out[k]:
            t = edges[i].target
            if state.get(t) == 1:
                back.add(i)
            elif t not in state:
                visit(t)
        state[k] = 2

    for k in keys:
        if k not in state:
            visit(k)
    return back


def _ranks(keys: Sequence[str], forward: Sequence[tuple[str, str]]) -> dict[str, int]:
    """Longest-path ranks of an acyclic graph."""
    rank = dict.fromkeys(keys, 0)
    for _ in keys:  # at most len(keys) rounds settle a DAG
        changed = False
        for s, t in forward:
            if rank[t] < rank[s] + 1:
                rank[t] = rank[s] + 1
                changed = True
        if not changed:
            break
    return rank


def _crossings(layers: list[list[str]], links: list[tuple[str, str]], pos: dict[str, int]) -> int:
    by_rank: dict[int, list[tuple[int, int]]] = {}
    rank_of = {k: r for r, layer in enumerate(layers) for k in layer}
    for s, t in links:
        by_rank.setdefault(rank_of[s], []).append((pos[s], pos[t]))
    total = 0
    for segs in by_rank.values():
        for i, (a1, b1) in enumerate(segs):
            for a2, b2 in segs[i + 1 :]:
                if (a1 - a2) * (b1 - b2) < 0:
                    total += 1
    return total


def _order(layers: list[list[str]], links: list[tuple[str, str]]) -> list[list[str]]:
    """Barycenter sweeps, keeping the order with the fewest crossings."""
    preds: dict[str, list[str]] = {}
    succs: dict[str, list[str]] = {}
    for s, t in links:
        succs.setdefault(s, []).append(t)
        preds.setdefault(t, []).append(s)

    def positions(ls: list[list[str]]) -> dict[str, int]:
        return {k: i for layer in ls for i, k in enumerate(layer)}

    best = [list(layer) for layer in layers]
    best_count = _crossings(best, links, positions(best))
    current = [list(layer) for layer in layers]
    for sweep in range(16):
        down = sweep % 2 == 0
        indexes = range(1, len(current)) if down else range(len(current) - 2, -1, -1)
        for r in indexes:
            pos = positions(current)
            near = preds if down else succs

            def weight(
                item: tuple[int, str],
                near: dict[str, list[str]] = near,
                pos: dict[str, int] = pos,
            ) -> float:
                i, k = item
                others = near.get(k, [])
                return sum(pos[o] for o in others) / len(others) if others else float(i)

            current[r] = [k for _, k in sorted(enumerate(current[r]), key=weight)]
        count = _crossings(current, links, positions(current))
        if count < best_count:
            best, best_count = [list(layer) for layer in current], count
    return best


def _place(layers: list[list[str]], nodes: dict[str, _Node], links: list[tuple[str, str]]) -> None:
    """x by rank, y pulled toward the neighbours' mean, with the gaps kept."""
    x = MARGIN
    for layer in layers:
        widest = max(nodes[k].width for k in layer)
        for k in layer:
            nodes[k].x = x + (widest - nodes[k].width) / 2
        x += widest + RANK_GAP
    for layer in layers:  # first: stacked
        y = 0.0
        for k in layer:
            n = nodes[k]
            n.y = y + n.above + n.height / 2
            y += n.span + NODE_GAP
    neighbours: dict[str, list[str]] = {}
    for s, t in links:
        neighbours.setdefault(s, []).append(t)
        neighbours.setdefault(t, []).append(s)
    for _ in range(24):
        for layer in layers:
            wanted = [
                sum(nodes[o].y for o in neighbours[k]) / len(neighbours[k])
                if neighbours.get(k)
                else nodes[k].y
                for k in layer
            ]
            _spread(layer, nodes, wanted)
    top = min(n.y - n.above - n.height / 2 for n in nodes.values() if n.kind != "verdict")
    for n in nodes.values():
        n.y = round(n.y - top + MARGIN + FONT * 2, 1)
        n.x = round(n.x, 1)


def _spread(layer: list[str], nodes: dict[str, _Node], wanted: list[float]) -> None:
    """Centres as near ``wanted`` as the order and the gaps allow (two passes, averaged)."""

    def gap(a: str, b: str) -> float:
        return nodes[a].height / 2 + NODE_GAP + nodes[b].above + nodes[b].height / 2

    down = list(wanted)
    for i in range(1, len(layer)):
        down[i] = max(down[i], down[i - 1] + gap(layer[i - 1], layer[i]))
    up = list(wanted)
    for i in range(len(layer) - 2, -1, -1):
        up[i] = min(up[i], up[i + 1] - gap(layer[i], layer[i + 1]))
    mid = [(a + b) / 2 for a, b in zip(down, up, strict=True)]
    for i in range(1, len(layer)):
        mid[i] = max(mid[i], mid[i - 1] + gap(layer[i - 1], layer[i]))
    for k, y in zip(layer, mid, strict=True):
        nodes[k].y = y


def layout(
    machine: Machine[Any], *, stays: bool = False
) -> tuple[list[_Node], list[_Edge], list[_Edge]]:
    """The placed nodes (states, label boxes, bends and verdicts), edges and loops."""
    nodes, edges, loops = _graph(machine, stays)
    by_key = {n.key: n for n in nodes}
    for e in loops:
        label = by_key[e.source]
        label.above = round(LOOP + len(e.labels) * LABEL_FONT * LINE + 4, 1)
    for n in nodes:
        n.measure()
    graph_keys = [n.key for n in nodes if n.kind != "verdict"]
    back = _back_edges(graph_keys, edges)
    forward = [
        (e.target, e.source) if i in back else (e.source, e.target) for i, e in enumerate(edges)
    ]
    rank = _ranks(graph_keys, forward)
    for k in graph_keys:
        by_key[k].rank = 2 * rank[k]
    links: list[tuple[str, str]] = []
    for i, (e, (s, t)) in enumerate(zip(edges, forward, strict=True)):
        chain = _chain(i, e, s, t, i in back, nodes, by_key)
        links += list(itertools.pairwise(chain))
        e.path = list(reversed(chain)) if i in back else chain
    placed = [n for n in nodes if n.kind != "verdict"]
    _place(_order(_layers(placed), links), by_key, links)
    bottom = max(n.y + n.height / 2 for n in placed) + RANK_GAP
    x = MARGIN
    for n in nodes:
        if n.kind == "verdict":
            n.x, n.y = x, round(bottom + n.height / 2, 1)
            x += n.width + NODE_GAP
    return nodes, edges, loops


def _layers(placed: list[_Node]) -> list[list[str]]:
    """The keys of ``placed`` per rank, ranks without nodes left out; declaration order
    first in each: the start, the states, then the boxes."""
    depth = max(n.rank for n in placed) + 1
    layers: list[list[str]] = [[] for _ in range(depth)]
    for n in placed:
        layers[n.rank].append(n.key)
    return [layer for layer in layers if layer]


def _chain(
    i: int,
    e: _Edge,
    s: str,
    t: str,
    back: bool,
    nodes: list[_Node],
    by_key: dict[str, _Node],
) -> list[str]:
    """The keys from ``s`` to ``t`` (edge ``i``, drawn from source to target, or reversed if
    it goes ``back``), one per rank: its label box next to the source, dummies elsewhere
    (each added to ``nodes`` and ``by_key``)."""
    chain = [s]
    for r in range(by_key[s].rank + 1, by_key[t].rank):
        near_source = r == (by_key[t].rank - 1 if back else by_key[s].rank + 1)
        if near_source and e.labels:
            node = _Node(f"l{i}", e.labels, "label", font=LABEL_FONT)
            e.label = node.key
        else:
            node = _Node(f"d{i}.{r}", [], "dummy")
        node.rank = r
        node.measure()
        nodes.append(node)
        by_key[node.key] = node
        chain.append(node.key)
    chain.append(t)
    return chain


# -- drawing ---------------------------------------------------------------------------------
def _num(v: float) -> str:
    text = f"{v:.1f}"
    return text[:-2] if text.endswith(".0") else text


def _text(n: _Node, out: list[str], cls: str) -> None:
    step = n.font * LINE
    first = n.y - step * (len(n.lines) - 1) / 2
    cx = n.x + n.width / 2
    for i, line in enumerate(n.lines):
        out.append(
            f'<text class="{cls}" x="{_num(cx)}" y="{_num(first + i * step)}">{escape(line)}</text>'
        )


def _curve(points: list[tuple[float, float]]) -> str:
    (x0, y0), rest = points[0], points[1:]
    d = [f"M{_num(x0)},{_num(y0)}"]
    for x1, y1 in rest:
        dx = (x1 - x0) / 2
        d.append(f"C{_num(x0 + dx)},{_num(y0)} {_num(x1 - dx)},{_num(y1)} {_num(x1)},{_num(y1)}")
        x0, y0 = x1, y1
    return " ".join(d)


def _edge_points(e: _Edge, nodes: dict[str, _Node]) -> list[list[tuple[float, float]]]:
    """The pieces of an edge's path: it stops at its label box and goes on past it."""
    path = [nodes[k] for k in e.path]
    leftward = path[0].x > path[-1].x
    pieces: list[list[tuple[float, float]]] = [[]]
    for i, n in enumerate(path):
        left, right = (n.x, n.y), (n.x + n.width, n.y)
        enter, leave = (right, left) if leftward else (left, right)
        if i == 0:
            pieces[-1].append(leave)
        elif i == len(path) - 1:
            pieces[-1].append(enter)
        elif n.kind == "label":
            pieces[-1].append(enter)
            pieces.append([leave])
        else:
            pieces[-1].append((n.x, n.y))
    return pieces


STYLE = (
    "text{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,'DejaVu Sans Mono',monospace;"
    f"font-size:{_num(FONT)}px;text-anchor:middle;dominant-baseline:central;fill:#000}}"
    f"text.l{{font-size:{_num(LABEL_FONT)}px;fill:#333}}"
    "text.t{font-weight:bold}"
    ".e{fill:none;stroke:#444;stroke-width:1.2}"
    ".e.r{stroke:#c05600;stroke-dasharray:5 3}"
    ".n{fill:#fff;stroke:#000;stroke-width:1.2}"
    ".n.x{fill:#ddd}"
    ".n.v{fill:#ffffe0;stroke-dasharray:4 3}"
    ".lb{fill:#fff;stroke:none}"
)


def svg(machine: Machine[Any], *, stays: bool = False) -> str:
    """The diagram of ``machine``'s table as SVG text (one line per element)."""
    nodes, edges, loops = layout(machine, stays=stays)
    by_key = {n.key: n for n in nodes}
    width = max(n.x + n.width for n in nodes) + MARGIN
    height = max(n.y + n.height / 2 for n in nodes) + MARGIN
    title = f"{machine.kind} lifecycle"
    out = [
        '<svg xmlns="http://www.w3.org/2000/svg" '
        f'viewBox="0 0 {_num(width)} {_num(height)}" width="{_num(width)}" '
        f'height="{_num(height)}" role="img" aria-label="{escape(title)}">',
        f"<title>{escape(title)}</title>",
        f"<style>{STYLE}</style>",
        '<defs><marker id="a" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="8" '
        'markerHeight="8" orient="auto-start-reverse"><path d="M0,0L10,5L0,10z" fill="#444"/>'
        "</marker></defs>",
        f'<rect width="{_num(width)}" height="{_num(height)}" fill="#fff"/>',
        f'<text class="t" x="{_num(MARGIN)}" y="{_num(MARGIN)}" '
        f'style="text-anchor:start">{escape(title)}</text>',
    ]
    for e in edges:
        pieces = _edge_points(e, by_key)
        cls = "e r" if e.dashed else "e"
        for i, piece in enumerate(pieces):
            end = ' marker-end="url(#a)"' if i == len(pieces) - 1 else ""
            out.append(f'<path class="{cls}" d="{_curve(piece)}"{end}/>')
    for e in loops:
        n = by_key[e.source]
        top = n.y - n.height / 2
        a, b = n.x + n.width * 0.7, n.x + n.width * 0.3
        cls = "e r" if e.dashed else "e"
        out.append(
            f'<path class="{cls}" d="M{_num(a)},{_num(top)} C{_num(a)},{_num(top - LOOP)} '
            f'{_num(b)},{_num(top - LOOP)} {_num(b)},{_num(top)}" marker-end="url(#a)"/>'
        )
        step = LABEL_FONT * LINE
        for i, line in enumerate(reversed(e.labels)):
            y = top - LOOP - 2 - step / 2 - i * step
            out.append(
                f'<text class="l" x="{_num(n.x + n.width / 2)}" y="{_num(y)}">{escape(line)}</text>'
            )
    for n in nodes:
        top = n.y - n.height / 2
        box = f'x="{_num(n.x)}" y="{_num(top)}" width="{_num(n.width)}" height="{_num(n.height)}"'
        if n.kind == "start":
            out.append(f'<circle cx="{_num(n.x + 7)}" cy="{_num(n.y)}" r="7" fill="#000"/>')
        elif n.kind == "label":
            out.append(f'<rect class="lb" {box}/>')
            _text(n, out, "l")
        elif n.kind in ("state", "terminal", "verdict"):
            cls = {"state": "n", "terminal": "n x", "verdict": "n v"}[n.kind]
            out.append(f'<rect class="{cls}" {box} rx="8"/>')
            if n.kind == "terminal":
                inner = (
                    f'x="{_num(n.x + 3)}" y="{_num(top + 3)}" width="{_num(n.width - 6)}" '
                    f'height="{_num(n.height - 6)}"'
                )
                out.append(f'<rect class="n x" {inner} rx="6"/>')
            _text(n, out, "s")
    out.append("</svg>")
    return "\n".join(out) + "\n"
