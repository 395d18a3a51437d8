"""The kernel's table: every way a malformed table is refused, the order rows are tried, and
the table as the single source of event types."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple

import attrs
import pytest

from lifecycle import (
    EventType,
    InvalidTransition,
    Machine,
    MachineRegistry,
    ObjectRef,
    Observation,
    Row,
    Runner,
    SQLiteStore,
    Table,
    TableError,
    ignore,
)
from lifecycle._core.table import name_of
from lifecycle.machines import default_registry
from lifecycle.tables import ANY, SAME

from .conftest import t

N, W = EventType.NORMAL, EventType.WARNING


@attrs.frozen(slots=True, kw_only=True)
class Go(Observation):
    why: str = ""


@attrs.frozen(slots=True, kw_only=True)
class Stop(Observation):
    pass


@attrs.frozen(slots=True, kw_only=True)
class Stray(Observation):
    pass


@attrs.frozen(slots=True)
class Status:
    state: str = "A"
    reason: str = ""
    message: str = ""


def never(status: Any, obs: Any) -> bool:
    return False


def table(*rows: Row, **overrides: Any) -> Table:
    spec: dict[str, Any] = {
        "states": ("A", "B", "End"),
        "initial": "A",
        "terminal": ("End",),
        "observations": (Go, Stop),
        "rows": rows,
    }
    spec.update(overrides)
    return Table("t", **spec)


@pytest.mark.parametrize(
    ("rows", "overrides", "problem"),
    [
        ((), {"initial": "Z"}, "initial state 'Z' is not declared"),
        ((), {"terminal": ("Z",)}, "terminal states ['Z'] are not declared"),
        (
            (Row("A", Stray, to="B", reason="B", event=N),),
            {},
            "observation is not in the vocabulary",
        ),
        ((Row("Z", Go, to="B", reason="B", event=N),), {}, "unknown source state 'Z'"),
        ((Row("A", Go, to="Z", reason="Z", event=N),), {}, "unknown target state 'Z'"),
        ((Row("A", Go, to="B", ignore=True),), {}, "an ignore row cannot change state"),
        (
            (Row("A", Go, to="B", reason="B", event=N, guard="maybe"),),  # type: ignore[arg-type]
            {},
            "the guard must be a function, got 'maybe'",
        ),
        (
            (Row("A", Go, to="B", reason="B", event=N, effect="poof"),),  # type: ignore[arg-type]
            {},
            "the effect must be a function, got 'poof'",
        ),
        (
            (Row("A", Go, to="B", reason="B"),),
            {},
            "a state-changing row must declare its event type",
        ),
        (
            (Row("A", Go, to="B", reason="B", event=N, message="{nope}"),),
            {},
            "message names unknown fields ['nope']",
        ),
        ((Row("A", Go, to="B", reason="B", event=N, guard=never),), {}, "every row is guarded"),
        (
            (Row("End", Go, to="A", reason="A", event=N),),
            {},
            "terminal state 'End' has a row leaving it",
        ),
        (
            (Row("A", Go, to="B", reason="B", event=N, recovery=True),),
            {},
            "must leave a terminal state",
        ),
        ((Row("End", Go, to=SAME, recovery=True),), {}, "a recovery row must change state"),
    ],
)
def test_malformed_tables_are_refused(rows: tuple[Row, ...], overrides: Any, problem: str) -> None:
    with pytest.raises(TableError, match=problem.replace("[", r"\[").replace("]", r"\]")):
        table(*rows, **overrides)


def test_specific_rows_win_over_wildcards_and_guards_run_in_order() -> None:
    t_ = table(
        Row("A", Go, to="B", reason="B", event=N, guard=never),
        Row("A", Go, to="End", reason="End", event=W),
        Row(ANY, Go, to=SAME, message="noted"),
        ignore("End", Stop, "terminal"),
    )
    rows = t_.by_pair[("A", Go)]
    assert [r.target for r in rows] == ["B", "End"]  # the unguarded row ends the list
    assert [r.message for r in t_.by_pair[("B", Go)]] == ["noted"]  # the wildcard
    assert not t_.accepts("A", Stop)
    assert t_.accepts("End", Stop)


def _machine(rows: tuple[Row, ...], warnings: frozenset[str] = frozenset()) -> Machine[Any]:
    built = table(*rows)

    class M(Machine[Status]):
        name: ClassVar[str] = "t"
        kind: ClassVar[str] = "T"
        status_type: ClassVar[type[Any]] = Status
        table: ClassVar[Table] = built
        warning_states: ClassVar[frozenset[str]] = warnings

        def initial(self, ref: ObjectRef) -> Status:
            return Status()

    return M()


def test_event_types_come_from_the_table() -> None:
    m = _machine(
        (
            Row("A", Go, to="B", reason="B", event=N, message="went: {why}"),
            Row("B", Stop, to="End", reason="End", event=W),
        )
    )
    b = m.apply(Status(), Go(at=t(), why="asked"))
    assert (b.state, b.reason, b.message) == ("B", "B", "went: asked")
    end = m.apply(b, Stop(at=t()))
    assert [f.type for f in m.flips(Status(), b)] == [N]
    assert [f.type for f in m.flips(b, end)] == [W]


def test_a_state_entered_with_both_types_needs_an_override() -> None:
    with pytest.raises(TableError, match="entered as Normal and as Warning"):
        _machine(
            (
                Row("A", Go, to="End", reason="End", event=N),
                Row("B", Go, to="End", reason="End", event=W),
            )
        )


def test_declared_warning_states_must_agree_with_the_table() -> None:
    with pytest.raises(TableError, match="disagrees with the table"):
        _machine((Row("A", Go, to="End", reason="End", event=W),), warnings=frozenset({"B"}))


def test_a_pair_without_a_row_is_a_clear_error() -> None:
    m = _machine((Row("A", Go, to="B", reason="B", event=N),))
    with pytest.raises(InvalidTransition, match="Stop is not accepted in state A"):
        m.apply(Status(), Stop(at=t()))


def test_message_only_changes_and_repeats_emit_nothing() -> None:
    m = _machine((Row(("A", "B"), Go, to="B", reason="B", event=N, message="went: {why}"),))
    b = m.apply(Status(), Go(at=t(), why="one"))
    again = m.apply(b, Go(at=t(1), why="two"))
    assert again.message == "went: two"
    assert m.flips(b, again) == ()
    assert m.flips(again, again) == ()


class TupleStatus(NamedTuple):
    state: str = "A"
    reason: str = ""
    message: str = ""
    note: str = "kept"


def test_namedtuple_status_records_work_end_to_end(tmp_path: Any) -> None:
    """The fast record kind (ADR 0015): the generated default effect, flips, a durable store
    and the journal fold all work on a NamedTuple status, and untouched fields are kept."""
    built = table(
        Row("A", Go, to="B", reason="B", event=N, message="went: {why}"),
        Row("B", Stop, to="End", reason="End", event=W),
    )

    class M(Machine[TupleStatus]):
        name: ClassVar[str] = "t"
        kind: ClassVar[str] = "T"
        status_type: ClassVar[type[Any]] = TupleStatus
        table: ClassVar[Table] = built

        def initial(self, ref: ObjectRef) -> TupleStatus:
            return TupleStatus()

    m = M()
    b = m.apply(TupleStatus(note="mine"), Go(at=t(), why="asked"))
    assert b == TupleStatus("B", "B", "went: asked", "mine")
    assert type(b) is TupleStatus
    store = SQLiteStore(tmp_path / "t.db")
    runner = Runner(store, [], machines=MachineRegistry([m]), links=())
    ref = ObjectRef("T", "ns", "x", "x1")
    runner.observe(ref, Go(at=t(), why="asked"))
    result = runner.observe(ref, Stop(at=t(1)))
    assert [tr.type for tr in result.transitions] == [W]
    record = store.load(m, ref)
    assert record is not None
    assert record.status == TupleStatus("End", "End", "", "kept")
    assert type(record.status) is TupleStatus
    assert m.fold(ref, [e.observation for e in store.journal(m, ref)]) == record.status
    store.close()


@attrs.frozen(slots=True)
class SubStatus(Status):
    extra: int = 0


@attrs.define(frozen=True, init=False)
class HandInit:
    state: str
    reason: str
    message: str

    def __init__(self, message: str = "", reason: str = "", state: str = "A") -> None:
        self.__attrs_init__(state, reason, message)


@pytest.mark.parametrize(
    ("before", "expected"),
    [
        (SubStatus(extra=42), SubStatus("B", "B", "went: x", 42)),  # the subclass is kept
        (HandInit(), HandInit(state="B", reason="B", message="went: x")),  # by keyword
    ],
)
def test_the_compiled_default_effect_matches_machine_enter(before: Any, expected: Any) -> None:
    m = _machine((Row("A", Go, to="B", reason="B", event=N, message="went: {why}"),))
    row = m.select(before, Go(at=t(), why="x"))
    after = m.apply(before, Go(at=t(), why="x"))
    assert after == expected
    assert type(after) is type(expected)
    assert m.enter(before, Go(at=t(), why="x"), row) == after


def test_an_overridden_enter_renders_with_the_machine_context() -> None:
    built = Table(
        "t",
        states=("A", "B", "End"),
        initial="A",
        terminal=("End",),
        observations=(Go, Stop),
        rows=(Row("A", Go, to="B", reason="B", event=N, message="went for {who}"),),
        context=("who",),
    )

    class M(Machine[Status]):
        name: ClassVar[str] = "t"
        kind: ClassVar[str] = "T"
        status_type: ClassVar[type[Any]] = Status
        table: ClassVar[Table] = built

        def initial(self, ref: ObjectRef) -> Status:
            return Status()

        def context(self, status: Status, obs: Observation) -> dict[str, Any]:
            return {"who": "alice"}

        def enter(self, status: Status, obs: Observation, row: Row) -> Status:
            return super().enter(status, obs, row)

    assert M().apply(Status(), Go(at=t())).message == "went for alice"


# -- rows read as sentences; guards and effects are the functions (issue 17, item 3) ---------
def test_a_row_takes_only_its_source_and_observation_by_position() -> None:
    with pytest.raises(TypeError, match="positional"):
        Row("A", Go, "B")  # type: ignore[call-arg]
    row = Row("A", Go, to="B", reason="B", event=N)
    assert (row.source, row.observation, row.target, row.reason) == ("A", Go, "B", "B")


def stamped(status: Any, obs: Any, row: Row) -> Any:
    return attrs.evolve(status, message="stamped")


def test_a_row_names_its_guard_and_effect_by_the_functions() -> None:
    row = Row("A", Go, to="B", reason="B", event=N, guard=never, effect=stamped)
    plain = Row("A", Go, to="B")
    assert (row.guard_name, row.effect_name) == ("never", "stamped")
    assert (plain.guard_name, plain.effect_name) == ("", "")
    assert row.label == "A x Go [never] -> B"
    assert "guard=never, effect=stamped" in repr(row)  # no function addresses in reports


def test_a_table_lists_the_functions_its_rows_name_once_each() -> None:
    t_ = table(
        Row("A", Go, to="B", reason="B", event=N, guard=never, effect=stamped),
        Row("A", Go, to=SAME, effect=stamped),
        Row("B", Go, to="End", reason="End", event=W, guard=never),
        Row("B", Go, to=SAME),
    )
    assert t_.guards == (never,)
    assert t_.effects == (stamped,)
    machine = _machine(t_.rows)
    assert machine.apply(Status("A"), Go(at=t())) == Status("A", message="stamped")


def test_two_different_guards_of_one_name_are_refused() -> None:
    def twin(status: Any, obs: Any) -> bool:
        return True

    other = twin

    def twin(status: Any, obs: Any) -> bool:  # type: ignore[no-redef]
        return False

    with pytest.raises(TableError, match="two different guards are named 'twin'"):
        table(
            Row("A", Go, to="B", reason="B", event=N, guard=other),
            Row("A", Go, to="End", reason="End", event=W, guard=twin),
            Row("A", Go, to=SAME),
        )


def test_every_guard_and_effect_of_a_shipped_table_is_found_under_its_name() -> None:
    """The name a machine page prints is the function's own, bound in its module: grep it and
    the function is there (a factory's guards are bound to their names too)."""
    for machine in default_registry().values():
        functions: list[Callable[..., Any]] = [*machine.table.guards, *machine.table.effects]
        for fn in functions:
            assert getattr(sys.modules[fn.__module__], name_of(fn)) is fn, (machine.name, fn)
