"""The SVG drawing of a table (ADR 0137): what the machine pages show, laid out by the library.

Every drawing must be well-formed SVG holding every state, every state-changing row's label and
every verdict, with no two boxes overlapping and nothing outside the canvas: checked on the
shipped machines and, by a Hypothesis property, on generated tables.
"""

from __future__ import annotations

import itertools
import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import Any, ClassVar

import attrs
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from lifecycle import (
    EventType,
    Machine,
    ObjectRef,
    Observation,
    Row,
    Table,
    TableError,
    default_registry,
    ignore,
)
from lifecycle._core.table import ANY, SAME
from lifecycle._svg import EMPTY, svg

NS = {"s": "http://www.w3.org/2000/svg"}
MACHINES = list(default_registry().values())
IDS = [m.name for m in MACHINES]

Box = tuple[float, float, float, float]  # x, y, width, height


def parse(text: str) -> ET.Element:
    root = ET.fromstring(text)
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    return root


def texts(root: ET.Element) -> list[str]:
    return [t.text or "" for t in root.iterfind(".//s:text", NS)]


def boxes(root: ET.Element) -> list[Box]:
    """The state, verdict and label boxes (a terminal state's inner border left out)."""
    found = []
    for rect in root.iterfind(".//s:rect", NS):
        if rect.get("class") in ("n", "n x", "n v", "lb") and rect.get("rx") != "6":
            found.append(tuple(float(rect.get(k, "0")) for k in ("x", "y", "width", "height")))
    return found  # type: ignore[return-value]


def overlapping(found: list[Box]) -> list[tuple[Box, Box]]:
    return [
        (a, b)
        for a, b in itertools.combinations(found, 2)
        if a[0] < b[0] + b[2] and b[0] < a[0] + a[2] and a[1] < b[1] + b[3] and b[1] < a[1] + a[3]
    ]


def drawn_labels(machine: Machine[Any], stays: bool) -> set[str]:
    """What each drawn row's label must read, from the table itself."""
    out = set()
    for row in machine.table.rows:
        if row.ignore or (row.target == SAME and not stays):
            continue
        label = row.observation.__name__ + (" (recovery)" if row.recovery else "")
        out.add(label + (f" [{row.guard_name}]" if row.guard is not None else ""))
    return out


def assert_complete_and_clear(machine: Machine[Any], stays: bool) -> None:
    text = svg(machine, stays=stays)
    root = parse(text)
    shown = texts(root)
    assert f"{machine.kind} lifecycle" in shown
    for state in machine.table.states:
        assert (state or EMPTY) in shown, state
    assert drawn_labels(machine, stays) <= set(shown)
    for verdict in machine.verdicts:
        assert verdict.condition in shown
        assert f"{verdict.on_true.value} when True" in shown
    found = boxes(root)
    assert overlapping(found) == []
    width, height = (float(v) for v in root.get("viewBox", "").split()[2:])
    for x, y, w, h in found:
        assert min(x, y) >= 0
        assert x + w <= width
        assert y + h <= height


@pytest.mark.parametrize("machine", MACHINES, ids=IDS)
@pytest.mark.parametrize("stays", [False, True], ids=["changes", "stays"])
def test_every_shipped_machine_is_drawn_whole_and_readable(
    machine: Machine[Any], stays: bool
) -> None:
    assert_complete_and_clear(machine, stays)


def test_a_drawing_is_the_same_every_time() -> None:
    assert svg(MACHINES[0]) == svg(MACHINES[0])


def test_terminal_states_recovery_rows_and_verdicts_are_marked() -> None:
    restore = default_registry()["restore"]
    root = parse(svg(restore))
    classes = [r.get("class") for r in root.iterfind(".//s:rect", NS)]
    # each terminal state: an outer and an inner border
    assert classes.count("n x") == 2 * len(restore.table.terminal)
    assert any(p.get("class") == "e r" for p in root.iterfind(".//s:path", NS))  # recovery
    job = default_registry()["job"]
    verdicts = [r for r in parse(svg(job)).iterfind(".//s:rect", NS) if r.get("class") == "n v"]
    assert len(verdicts) == len(job.verdicts) > 0


def test_a_name_is_escaped_not_read_as_markup() -> None:
    machine = generated(("", "<b>&", "x"), ("x",), [(0, 1, 0, False), (1, 2, 1, False)])
    text = svg(machine)
    parse(text)
    assert "&lt;b&gt;&amp;" in text


# -- generated tables ----------------------------------------------------------------------
@attrs.frozen
class Plain:
    state: str = ""
    reason: str = ""
    message: str = ""


def _observation(name: str) -> type[Observation]:
    cls = attrs.frozen(slots=True, kw_only=True)(type(name, (Observation,), {}))
    cls.__module__ = __name__
    return cls


OBSERVATIONS = [_observation(n) for n in ("Go", "Stop", "InstanceTerminatedLongName", "Poke")]


def _guard(n: int) -> Callable[[Any, Any], bool]:
    def guard(status: Any, obs: Any) -> bool:
        return True

    guard.__name__ = f"guard_number_{n}"
    return guard


GUARDS = [_guard(n) for n in range(4)]


def generated(
    states: tuple[str, ...], terminal: tuple[str, ...], edges: list[tuple[int, int, int, bool]]
) -> Machine[Any]:
    """A machine over ``states`` with a row per (source, target, observation, guarded)."""
    rows = []
    for n, (s, t, o, guarded) in enumerate(edges):
        source = states[s]
        rows.append(
            Row(
                source,
                OBSERVATIONS[o],
                to=states[t],
                reason=f"R{n}",
                event=EventType.NORMAL,
                guard=GUARDS[n % len(GUARDS)] if guarded else None,
                recovery=source in terminal,
            )
        )
    unguarded = {(r.sources, r.observation) for r in rows if r.guard is None}
    for key in dict.fromkeys((r.sources, r.observation) for r in rows):
        if key not in unguarded:  # every pair must have a row that answers
            rows.append(ignore(key[0], key[1], "otherwise nothing"))
    table = Table(
        "gen",
        states=states,
        initial=states[0],
        terminal=terminal,
        observations=OBSERVATIONS,
        rows=rows,
    )

    class M(Machine[Plain]):
        status_type: ClassVar[type[Any]] = Plain

        def initial(self, ref: ObjectRef) -> Plain:
            return Plain()

    M.name, M.kind, M.table = "gen", "Gen", table
    return M()


@st.composite
def tables(draw: st.DrawFn) -> Machine[Any]:
    count = draw(st.integers(2, 8))
    names = draw(
        st.lists(
            st.text(
                "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz", min_size=1, max_size=14
            ),
            min_size=count - 1,
            max_size=count - 1,
            unique=True,
        )
    )
    states = ("", *names)
    terminal = tuple(draw(st.sets(st.sampled_from(names), max_size=max(0, count - 2))))
    edge = st.tuples(
        st.integers(0, count - 1),
        st.integers(0, count - 1),
        st.integers(0, len(OBSERVATIONS) - 1),
        st.booleans(),
    )
    edges = draw(st.lists(edge, min_size=1, max_size=16))
    try:
        return generated(states, terminal, edges)
    except TableError:
        assume(False)
        raise


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables(), st.booleans())
def test_any_table_is_drawn_whole_with_no_box_over_another(
    machine: Machine[Any], stays: bool
) -> None:
    assert_complete_and_clear(machine, stays)


def test_a_row_from_any_state_is_drawn_from_each() -> None:
    table = Table(
        "anyrow",
        states=("", "a", "b"),
        initial="",
        terminal=(),
        observations=OBSERVATIONS,
        rows=(Row(ANY, OBSERVATIONS[0], to="b", reason="R", event=EventType.NORMAL),),
    )
    machine = generated(("", "a", "b"), (), [(0, 1, 1, False)])
    type(machine).table = table
    root = parse(svg(machine))
    # from ∅, from a, and b's own row (to b, named: a loop, as Mermaid draws it)
    assert texts(root).count("Go") == 3
    arrows = [p for p in root.iterfind(".//s:path", NS) if p.get("marker-end")]
    assert len(arrows) == 4  # and the start's into ∅
