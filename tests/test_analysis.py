"""``lifecycle check``: each finding on a small table made to show it, the shipped machines and
linked groups passing with their allowances, the CLI's exit codes and JSON, and a Hypothesis
property tying the analysis to what the runtime actually does."""

from __future__ import annotations

import io
import itertools
import json
import os
import textwrap
from collections import deque
from pathlib import Path
from typing import Any, ClassVar

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lifecycle import (
    EventType,
    InvalidTransition,
    Machine,
    ObjectRef,
    Observation,
    Row,
    Table,
    TableError,
    Tick,
    ignore,
)
from lifecycle._core.analysis import TableModel
from lifecycle._testing.coverage import row_paths
from lifecycle._testing.strategies import default_ref
from lifecycle.analysis import (
    AllowanceError,
    Assumption,
    Finding,
    LinkedGroup,
    LinkModel,
    TableSpec,
    allow,
    check_group,
    check_machine,
    check_table,
    load_allowances,
    shipped_groups,
)
from lifecycle.cli import main
from lifecycle.links import default_links
from lifecycle.machines import default_registry
from lifecycle.tables import ANY, SAME

from .conftest import t

N = EventType.NORMAL
ROOT = Path(__file__).resolve().parent.parent


@attrs.frozen(slots=True, kw_only=True)
class Go(Observation):
    pass


@attrs.frozen(slots=True, kw_only=True)
class Stop(Observation):
    pass


def spec(rows: tuple[Row, ...], states: tuple[str, ...] = ("a", "b", "c"),
         terminal: tuple[str, ...] = ("c",),
         observations: tuple[type[Observation], ...] = (Go, Stop, Tick)) -> TableSpec:  # fmt: skip
    return TableSpec("t", states, states[0], frozenset(terminal), observations, rows)


def keys(table: TableSpec, **kw: Any) -> list[str]:
    return [f.key for f in check_table(table, **kw).findings]


# -- each finding, on a table made to show it -----------------------------------------------------
def test_an_unreachable_state_and_the_rows_from_it() -> None:
    table = spec(
        (
            Row("a", Go, to="c", reason="Done", event=N),
            Row("b", Go, to="c", reason="Done", event=N),
            ignore(("a", "c"), (Stop), "nothing to stop"),
            ignore(ANY, Tick, "no timers"),
            ignore("c", Go, "done"),
        )
    )
    report = check_table(table)
    assert [f.key for f in report.findings] == [
        "unreachable: b",
        "dead-row: b x Go -> c",
    ]
    unreachable, dead = report.findings
    assert unreachable.message == "b cannot be reached from a, whatever the guards decide"
    assert dead.message == "row b x Go -> c is never taken: its source is unreachable"
    assert unreachable.assumes == ()
    assert dead.assumes == ()
    assert "holds whatever the guards decide" in report.text()


BASE = (ignore(ANY, Tick, "no timers"), ignore(ANY, Stop, "nothing to stop"))


# Guards and an effect the analysis never calls: it reads them as opaque, by name.
def g(status: Any, obs: Any) -> bool:
    return True


def expired(status: Any, obs: Any) -> bool:
    return True


def may_stop(status: Any, obs: Any) -> bool:
    return True


def lucky(status: Any, obs: Any) -> bool:
    return True


def parent_done(status: Any, obs: Any) -> bool:
    return True


def decides(status: Any, obs: Any, row: Row) -> Any:
    return status


def test_an_unguarded_row_shadows_every_later_row_for_the_pair() -> None:
    table = spec(
        (
            Row("a", Go, to="c", reason="Done", event=N),
            Row("a", Go, to="b", reason="Half", event=N, guard=g),
            Row("b", Go, to="c", reason="Done", event=N),
            ignore("c", Go, "done"),
            *BASE,
        )
    )
    report = check_table(table)
    assert [f.key for f in report.findings] == ["unreachable: b", "dead-row: a x Go [g] -> b",
                                                "dead-row: b x Go -> c"]  # fmt: skip
    shadowed = report.findings[1]
    assert shadowed.message == (
        "row a x Go [g] -> b is never taken: an earlier row is always tried first: a x Go -> c"
    )


def test_a_guard_asked_twice_answers_the_same_so_its_second_row_is_dead() -> None:
    table = spec(
        (
            Row("a", Go, to="b", reason="Half", event=N, guard=g),
            Row("a", Go, to="c", reason="Done", event=N, guard=g),
            Row("a", Go, to=SAME),
            Row("b", Go, to="c", reason="Done", event=N),
            ignore("c", Go, "done"),
            *BASE,
        )
    )
    assert keys(table) == ["dead-row: a x Go [g] -> c"]


def test_a_guard_is_the_function_not_its_name() -> None:
    """Two functions of one name are two guards (an undeclared spec may hold them; a Table
    refuses it): the second row is not taken to repeat the first's answer."""

    def g(status: Any, obs: Any) -> bool:  # another guard named like the module's ``g``
        return False

    table = spec(
        (
            Row("a", Go, to="b", reason="Half", event=N, guard=globals()["g"]),
            Row("a", Go, to="c", reason="Done", event=N, guard=g),
            Row("a", Go, to=SAME),
            Row("b", Go, to="c", reason="Done", event=N),
            ignore("c", Go, "done"),
            *BASE,
        )
    )
    assert keys(table) == []


def test_an_any_row_overridden_in_some_states_is_not_dead() -> None:
    table = spec(
        (
            Row("a", Go, to="b", reason="Half", event=N),
            Row(ANY, Go, to="c", reason="Done", event=N),  # shadowed in a, taken in b
            ignore("c", Go, "done"),
            *BASE,
        )
    )
    assert keys(table) == []


def test_a_state_that_cannot_reach_a_terminal_one_is_stuck() -> None:
    table = spec(
        (
            Row("a", Go, to="b", reason="Half", event=N),
            Row("a", Stop, to="c", reason="Done", event=N),
            ignore("b", (Go), "b loops"),
            Row("b", Stop, to="b", reason="Again", event=N),
            ignore("c", Go, "done"),
            ignore("c", Stop, "done"),
            ignore(ANY, Tick, "no timers"),
        )
    )
    report = check_table(table)
    assert [f.key for f in report.findings] == ["stuck: b"]
    (stuck,) = report.findings
    assert stuck.path == ("Go",)
    assert "no terminal state can be reached from b" in stuck.message


def test_a_state_left_only_on_a_tick_is_reported() -> None:
    table = spec(
        (
            Row("a", Go, to="b", reason="Waiting", event=N),
            Row("a", Stop, to="c", reason="Done", event=N),
            Row("b", Tick, to="c", reason="TimedOut", event=N, guard=expired),
            ignore("b", Tick, "not yet"),
            ignore("b", (Go, Stop)[0], "waiting"),
            ignore("b", Stop, "waiting"),
            ignore("a", Tick, "no timer"),
            ignore("c", (Go), "done"),
            ignore("c", Stop, "done"),
            ignore("c", Tick, "done"),
        )
    )
    report = check_table(table)
    assert [f.key for f in report.findings] == [
        "tick-only: b",
        "no-deadline: b x Tick [expired] -> c",
    ]
    assert report.findings[0].message.startswith("b is left only on Tick")


def test_a_timer_row_without_a_deadline_is_reported() -> None:
    """A timer row must say when: else a host cannot requeue from the table (ADR 0149)."""
    rows = (
        Row("a", Go, to="b", reason="Waiting", event=N),
        Row("a", Stop, to="c", reason="Done", event=N),
        Row("b", Stop, to="c", reason="Done", event=N),
        ignore("b", Go, "waiting"),
        ignore(("a", "c"), Tick, "no timer"),
        ignore("c", Go, "done"),
        ignore("c", Stop, "done"),
    )
    timed = Row("b", Tick, to="c", reason="TimedOut", event=N, guard=expired)
    report = check_table(spec((*rows, timed, ignore("b", Tick, "not yet"))))
    (finding,) = report.findings
    assert finding.key == "no-deadline: b x Tick [expired] -> c"
    assert "declares no deadline" in finding.message
    dated = attrs.evolve(timed, deadline=lambda status: None)
    assert not check_table(spec((*rows, dated, ignore("b", Tick, "not yet")))).findings


def test_every_pair_with_neither_row_nor_ignore_is_listed_at_once() -> None:
    table = spec(
        (
            Row("a", Go, to="b", reason="Half", event=N),
            Row("b", Go, to="c", reason="Done", event=N),
            Row("b", Stop, to="c", reason="Stopped", event=N, guard=may_stop),
            ignore(ANY, Tick, "no timers"),
        )
    )
    report = check_table(table)
    assert [f.key for f in report.findings] == [
        "implicit-error: a x Stop",
        "implicit-error: b x Stop",
        "implicit-error: c x Go",
        "implicit-error: c x Stop",
    ]
    guarded = report.findings[1]
    assert guarded.message == (
        "b x Stop raises InvalidTransition: every row for it is guarded and the guards can all "
        "be false"
    )
    assert guarded.assumes == (Assumption("may_stop", False, "b", "Stop"),)
    assert guarded.path == ("Go", "Stop")
    assert "assumes: may_stop false (b x Stop)" in report.text()


def test_a_terminal_state_left_by_a_row_not_declared_recovery() -> None:
    rows = (
        Row("a", Go, to="c", reason="Done", event=N),
        Row("c", Go, to="a", reason="Again", event=N),  # Table refuses this; the analysis lists it
        Row("c", Stop, to="b", reason="Reopened", event=N, recovery=True),
        Row("b", Go, to="c", reason="Done", event=N),
        ignore(("a", "b"), Stop, "nothing to stop"),
        ignore(ANY, Tick, "no timers"),
    )
    with pytest.raises(TableError):
        Table("t", states=("a", "b", "c"), initial="a", terminal=("c",),
              observations=(Go, Stop, Tick), rows=rows)  # fmt: skip
    report = check_table(spec(rows))
    assert [f.key for f in report.findings] == ["terminal-exit: c x Go -> a"]
    assert "not declared recovery=True" in report.findings[0].message


def test_a_table_without_terminal_states() -> None:
    table = spec((Row("a", Go, to="b", reason="B", event=N),
                  Row("b", Go, to="a", reason="A", event=N),
                  ignore(ANY, (Stop), "-"), ignore(ANY, Tick, "-")), terminal=())  # fmt: skip
    assert keys(table) == ["unreachable: c", "no-terminal"]


def test_a_state_reached_only_through_a_guard_says_so() -> None:
    table = spec(
        (
            Row("a", Go, to="b", reason="Half", event=N, guard=lucky),
            ignore("a", Go, "unlucky"),
            ignore(ANY, Stop, "-"),
            ignore(ANY, Tick, "-"),
        )
    )
    report = check_table(table)
    assert [f.key for f in report.findings] == [
        "unreachable: c",
        "stuck: a",
        "stuck: b",
        "implicit-error: b x Go",
    ]
    stuck_a, stuck_b = report.findings[1:3]
    assert stuck_a.assumes == ()
    assert stuck_b.assumes == (Assumption("lucky", True, "a", "Go"),)
    assert "assumes: lucky true (a x Go)" in report.text()


def test_an_effect_that_enters_another_state_is_counted() -> None:
    rows = (
        Row("a", Go, to=SAME, effect=decides),
        Row("b", Go, to="c", reason="Done", event=N),
        ignore("c", Go, "done"),
        *BASE,
    )
    assert keys(spec(rows)) == [
        "unreachable: b",
        "unreachable: c",
        "dead-row: b x Go -> c",
        "dead-row: c x Go -> (ignore)",
        "stuck: a",
    ]
    assert keys(spec(rows), effect_targets={decides: ("b",)}) == []


# -- allowances -----------------------------------------------------------------------------------
def test_an_allowance_moves_its_finding_aside_and_a_stale_one_is_a_finding() -> None:
    table = spec((Row("a", Go, to="c", reason="Done", event=N), *BASE), states=("a", "c"))
    report = check_table(table, allow("c refuses Go on purpose", "implicit-error: c x Go"))
    assert report.ok
    assert [(a.finding.key, a.reason) for a in report.allowed] == [
        ("implicit-error: c x Go", "c refuses Go on purpose")
    ]
    stale = check_table(table, {**report_allowances(), "stuck: a": "old"})
    assert [f.key for f in stale.findings] == ["unused-allowance: stuck: a"]


def report_allowances() -> dict[str, str]:
    return allow("c refuses Go on purpose", "implicit-error: c x Go")


def test_an_allowance_needs_a_reason() -> None:
    with pytest.raises(ValueError, match="needs a reason"):
        allow(" ", "stuck: a")
    with pytest.raises(AllowanceError, match="gives no reason"):
        check_table(
            spec((Row("a", Go, to="c", reason="Done", event=N), *BASE)), {"unreachable: b": ""}
        )


def test_allowance_files(tmp_path: Path) -> None:
    good = tmp_path / "ok.json"
    good.write_text(json.dumps({"door": {"stuck: a": "why"}}))
    assert load_allowances(good) == {"door": {"stuck: a": "why"}}
    for text in ("[]", "{", '{"door": []}', '{"door": {"stuck: a": ""}}', '{"d": {"k": 1}}'):
        bad = tmp_path / "bad.json"
        bad.write_text(text)
        with pytest.raises(AllowanceError):
            load_allowances(bad)
    with pytest.raises(AllowanceError):
        load_allowances(tmp_path / "missing.json")


# -- linked machines ------------------------------------------------------------------------------
@attrs.frozen
class Plain:
    state: str = ""
    reason: str = ""
    message: str = ""


@attrs.frozen(slots=True, kw_only=True)
class Started(Observation):
    pass


@attrs.frozen(slots=True, kw_only=True)
class Finished(Observation):
    pass


@attrs.frozen(slots=True, kw_only=True)
class Created(Observation):
    pass


@attrs.frozen(slots=True, kw_only=True)
class ParentSeen(Observation):
    pass


def plain_machine(name: str, table: Table) -> Machine[Any]:
    class M(Machine[Plain]):
        status_type: ClassVar[type[Any]] = Plain

        def initial(self, ref: ObjectRef) -> Plain:
            return Plain()

    M.name, M.kind, M.table = name, name.title(), table
    return M()


PARENT = plain_machine(
    "parent",
    Table(
        "parent",
        states=("", "Running", "Done"),
        initial="",
        terminal=("Done",),
        observations=(Started, Finished),
        rows=(
            Row("", Started, to="Running", reason="Started", event=N),
            Row(("", "Running"), Finished, to="Done", reason="Finished", event=N),
            ignore(("Running", "Done"), Started, "started already"),
            ignore("Done", Finished, "done"),
        ),
    ),
)


def child_machine(escape: bool) -> Machine[Any]:
    """A child that, once created, is finished only by what its parent's link tells it (or,
    with ``escape``, also by a Tick of its own)."""
    rows = [
        Row("", Created, to="Waiting", reason="Created", event=N),
        ignore(("Waiting", "Done"), Created, "created already"),
        ignore("", ParentSeen, "not created yet"),
        Row("Waiting", ParentSeen, to="Done", reason="ParentDone", event=N, guard=parent_done),
        ignore("Waiting", ParentSeen, "parent still running"),
        ignore("Done", ParentSeen, "done"),
        ignore(("", "Done"), Tick, "no timer"),
        Row("Waiting", Tick, to="Done", reason="GaveUp", event=N)
        if escape
        else ignore("Waiting", Tick, "-"),
    ]
    table = Table(
        "child",
        states=("", "Waiting", "Done"),
        initial="",
        terminal=("Done",),
        observations=(Created, ParentSeen, Tick),
        rows=tuple(rows),
    )
    return plain_machine("child", table)


LINK = (LinkModel("parent", "child", (ParentSeen,)),)


def test_a_child_created_after_its_parent_finished_waits_forever() -> None:
    report = check_group(LinkedGroup("parent+child", (PARENT, child_machine(False)), LINK))
    assert [f.key for f in report.findings] == ["waits: child=Waiting; parent=Done"]
    (wait,) = report.findings
    assert wait.kind == "waits"
    assert wait.path == ("parent:Finished", "-> child:ParentSeen", "child:Created")
    assert wait.message == (
        "child in Waiting waits forever while parent=Done: its table alone could finish from "
        "there, but not without ParentSeen, which the others can no longer send"
    )
    assert report.summary == "8 combinations of parent, child"  # never (parent=∅, child=Done)
    # the child alone is fine: its table can finish from Waiting (on ParentSeen)
    assert check_machine(child_machine(False)).ok


def test_a_timer_of_its_own_means_the_child_never_waits_forever() -> None:
    assert check_group(LinkedGroup("parent+child", (PARENT, child_machine(True)), LINK)).ok


def test_the_product_bound_is_reported() -> None:
    report = check_group(
        LinkedGroup("parent+child", (PARENT, child_machine(False)), LINK), max_states=2
    )
    assert not report.complete
    assert "the bound was reached" in report.text()


# -- the shipped machines -------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(default_registry()))
def test_every_shipped_machine_passes_with_its_allowances(name: str) -> None:
    report = check_machine(default_registry()[name])
    assert report.ok, report.text()
    for allowed in report.allowed:
        assert allowed.reason.strip()


@pytest.mark.parametrize("group", shipped_groups(), ids=lambda g: g.name)
def test_every_shipped_linked_group_passes(group: LinkedGroup) -> None:
    report = check_group(group)
    assert report.ok, report.text()
    assert report.complete


def test_the_groups_model_every_shipped_link() -> None:
    modelled = {(m.source, m.target) for g in shipped_groups() for m in g.links}
    assert {(link.source, link.target) for link in default_links()} == modelled


@pytest.mark.parametrize("name", ["pod", "nodeclaim", "certification", "workloadrun"])
def test_shipped_effects_enter_their_rows_targets(name: str) -> None:
    """Why no shipped machine declares ``effect_targets``: every row the search reaches lands
    in its declared target (or stays, for ``SAME``), effect or not."""
    machine = default_registry()[name]
    found, _ = row_paths(machine, budget=150)
    assert found
    for path in found:
        status = machine.initial(default_ref(machine))
        for obs in path.observations[:-1]:
            status = machine.apply(status, obs)
        after = machine.apply(status, path.observations[-1])
        target = status.state if path.row.target == SAME else path.row.target
        assert after.state == target, (path.row, status.state, after.state)


def test_pod_link_sends_what_its_model_says() -> None:
    machine = default_registry()["pod"]
    model = next(m for g in shipped_groups() for m in g.links if m.source == "pod")
    (link,) = [lk for lk in default_links() if lk.source == "pod"]
    sent: set[type[Observation]] = set()
    found, _ = row_paths(machine, budget=150)
    for path in found:
        ref = default_ref(machine)
        status = machine.fold(ref, path.observations[:-1])
        after = machine.apply(status, path.observations[-1])
        sent |= {type(obs) for _, obs in link.derive(ref, status, after, t())}
        if status.state != after.state and after.state:  # a change of state always sends
            assert link.derive(ref, status, after, t())
    assert sent == set(model.observations)


# -- the CLI --------------------------------------------------------------------------------------
def run(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    code = main(["check", *argv], out=out)
    return code, out.getvalue()


STUCK_MODULE = textwrap.dedent(
    """
    from typing import Any, ClassVar
    import attrs
    from lifecycle import EventType, Machine, ObjectRef, Observation, Row, Table, ignore

    @attrs.frozen
    class S:
        state: str = "a"
        reason: str = ""
        message: str = ""

    @attrs.frozen(kw_only=True)
    class Go(Observation):
        pass

    @attrs.frozen(kw_only=True)
    class Stop(Observation):
        pass

    class Stuck(Machine[S]):
        name: ClassVar[str] = "stuck"
        kind: ClassVar[str] = "Stuck"
        status_type: ClassVar[type[Any]] = S
        table: ClassVar[Table] = Table(
            "stuck", states=("a", "b", "c"), initial="a", terminal=("c",),
            observations=(Go, Stop),
            rows=(
                Row("a", Go, to="b", reason="B", event=EventType.NORMAL),
                Row("a", Stop, to="c", reason="C", event=EventType.NORMAL),
                ignore(("b", "c"), Go, "-"),
                ignore(("b", "c"), Stop, "-"),
            ),
        )

        def initial(self, ref: ObjectRef) -> S:
            return S()

    NOT_A_MACHINE = 42
    """
)


def test_cli_exit_0_on_every_shipped_machine_and_group() -> None:
    code, text = run([])
    assert code == 0, text
    checked = len(default_registry()) + len(shipped_groups())  # every machine and group
    assert text.splitlines()[-1].startswith(
        f"lifecycle check: {checked} checked, 0 finding(s) in 0, "
    )
    assert run(["pod"])[0] == 0
    assert run(["pod+nodeclaim"])[0] == 0


def test_cli_exit_1_on_findings_by_path_and_by_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "stuck_table.py").write_text(STUCK_MODULE)
    code, text = run([f"{tmp_path / 'stuck_table.py'}:Stuck"])
    assert code == 1
    assert "stuck: 1 finding(s)" in text
    assert "stuck: no terminal state can be reached" in text
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert run(["stuck_table:Stuck"])[0] == 1
    allowances = tmp_path / "allow.json"
    allowances.write_text(json.dumps({"stuck": {"stuck: b": "b is a parking state"}}))
    assert run(["stuck_table:Stuck", "--allow", str(allowances)])[0] == 0


def test_cli_json_shape(tmp_path: Path) -> None:
    (tmp_path / "stuck_table.py").write_text(STUCK_MODULE)
    code, text = run([f"{tmp_path / 'stuck_table.py'}:Stuck", "--format", "json"])
    assert code == 1
    data = json.loads(text)
    assert set(data) == {"ok", "findings", "allowed", "reports"}
    assert (data["ok"], data["findings"], data["allowed"]) == (False, 1, 0)
    (report,) = data["reports"]
    assert set(report) == {"subject", "what", "summary", "ok", "complete", "findings", "allowed"}
    assert (report["subject"], report["what"]) == ("stuck", "machine")
    assert report["findings"] == [
        {
            "kind": "stuck",
            "key": "stuck: b",
            "message": "no terminal state can be reached from b, whatever the guards decide: "
            "an object there is stuck",
            "path": ["Go"],
            "assumes": [],
        }
    ]
    code, text = run(["pod", "--format", "json"])
    pod = json.loads(text)["reports"][0]
    assert code == 0
    assert pod["ok"]
    assert len(pod["allowed"]) == 6
    assert all(a["reason"] for a in pod["allowed"])


@pytest.mark.parametrize(
    ("target", "says"),
    [
        ("nope", "unknown machine 'nope'; known: pod, nodeclaim"),
        ("no_such_module_xyz:Thing", "'no_such_module_xyz': cannot import it: ModuleNotFound"),
        ("json:nope", "'json' has no 'nope'"),
        ("json:dumps", "'json:dumps': calling it failed: TypeError"),
        ("json:JSONDecodeError", "'json:JSONDecodeError' names no machines: it is a type"),
        ("missing/file.py:Thing", "'missing/file.py': no such file"),
    ],
)
def test_cli_exit_2_on_bad_input(
    target: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = run([target])
    assert code == 2
    assert out == ""
    err = capsys.readouterr().err
    assert says in err
    assert len(err.strip().splitlines()) == 1


def test_cli_exit_2_on_a_module_that_fails_or_names_no_machine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "stuck_table.py").write_text(STUCK_MODULE)
    assert run([f"{tmp_path / 'stuck_table.py'}:NOT_A_MACHINE"])[0] == 2
    assert "names no machines: it is a int" in capsys.readouterr().err
    (tmp_path / "broken.py").write_text("raise RuntimeError('boom')\n")
    assert run([f"{tmp_path / 'broken.py'}:X"])[0] == 2
    assert "RuntimeError: boom" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert run(["pod", "--allow", str(bad)])[0] == 2


def test_cli_checks_the_quickstart_door_from_the_repo_root(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(ROOT)
    allowances = "examples/door_allowances.json"
    code, text = run(["examples/quickstart_property_test.py:DoorMachine", "--allow", allowances])
    assert code == 0, text
    assert "door: ok, 3 allowed" in text
    code, text = run(["examples/quickstart_property_test.py:DoorMachine"])
    assert code == 1
    assert "implicit-error: jammed x Opened" in text


# -- the analysis against the runtime, on random tables -------------------------------------------
@attrs.frozen(slots=True, kw_only=True)
class Probe(Observation):
    """An observation whose flags decide the random table's guards: ``g0`` reads flag 0."""

    flags: tuple[bool, bool] = (False, False)


@attrs.frozen(slots=True, kw_only=True)
class Ping(Probe):
    pass


@attrs.frozen(slots=True, kw_only=True)
class Pong(Probe):
    pass


@attrs.frozen(slots=True, kw_only=True)
class Beat(Probe):
    is_tick: ClassVar[bool] = True


POOL = (Ping, Pong, Beat)


def g0(status: Any, obs: Probe) -> bool:
    return obs.flags[0]


def g1(status: Any, obs: Probe) -> bool:
    return obs.flags[1]


STATES = ("s0", "s1", "s2", "s3")


@st.composite
def random_tables(draw: st.DrawFn) -> Table:
    n = draw(st.integers(2, 4))
    states = STATES[:n]
    terminal = draw(st.sets(st.sampled_from(states), max_size=2))
    source = st.one_of(
        st.sampled_from(states),
        st.just(ANY),
        st.lists(st.sampled_from(states), min_size=2, max_size=3, unique=True).map(tuple),
    )
    rows: list[Row] = []
    for _ in range(draw(st.integers(1, 9))):
        src = draw(source)
        obs = draw(st.sampled_from(POOL))
        guard = draw(st.sampled_from([None, None, g0, g1]))
        if draw(st.booleans()):
            rows.append(ignore(src, obs, "-", guard=guard))
            continue
        target = draw(st.sampled_from((SAME, *states)))
        names = states if src == ANY else (src,) if isinstance(src, str) else src
        leaves = any(s in terminal and target not in (SAME, s) for s in names)
        recovery = leaves and src != ANY and target != SAME and target not in names
        if leaves and not recovery:
            continue  # Table refuses it; the terminal-exit finding has its own test
        event = None if target == SAME else N
        rows.append(
            Row(src, obs, to=target, reason="R", event=event, guard=guard, recovery=recovery)
        )
    # every pair whose rows are all guarded gets an unguarded ignore, as Table requires
    for s in states:
        for o in POOL:
            tried = [r for r in rows if r.observation is o and (s in r.sources or ANY in r.sources)]
            if tried and all(r.guard is not None for r in tried):
                rows.append(ignore(s, o, "repair"))
    return Table("random", states=states, initial="s0", terminal=terminal, observations=POOL,
                 rows=tuple(rows))  # fmt: skip


@attrs.frozen
class Simple:
    state: str = "s0"
    reason: str = ""
    message: str = ""


class RandomMachine(Machine[Simple]):
    name: ClassVar[str] = "random"
    kind: ClassVar[str] = "Random"
    status_type: ClassVar[type[Any]] = Simple

    def initial(self, ref: ObjectRef) -> Simple:
        return Simple()


FLAGS: list[tuple[bool, bool]] = [(a, b) for a in (False, True) for b in (False, True)]


def brute_force(machine: Machine[Any]) -> tuple[set[str], set[tuple[str, str]], set[int]]:
    """Every state the runtime reaches from the initial one, trying every observation with
    every guard both ways; the pairs that raise there; the rows taken."""
    start = machine.initial(ObjectRef("Random", "", "r", "u"))
    seen = {start.state}
    raised: set[tuple[str, str]] = set()
    taken: set[int] = set()
    index = {id(row): i for i, row in enumerate(machine.table.rows)}
    queue = deque([start])
    while queue:
        status = queue.popleft()
        for cls, flags in itertools.product(POOL, FLAGS):
            obs = cls(at=t(), flags=flags)
            try:
                taken.add(index[id(machine.select(status, obs))])
                after = machine.apply(status, obs)
            except InvalidTransition:
                raised.add((status.state, cls.__name__))
                continue
            if after.state not in seen:
                seen.add(after.state)
                queue.append(after)
    return seen, raised, taken


#: 150 examples in ``make test``; LIFECYCLE_SOAK=1 runs 3000.
EXAMPLES = 3000 if os.environ.get("LIFECYCLE_SOAK") else 150


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_tables())
def test_the_analysis_agrees_with_the_runtime_on_random_tables(table: Table) -> None:
    machine = type("M", (RandomMachine,), {"table": table})()
    reached, raised, taken = brute_force(machine)
    report = check_table(table)
    by_kind: dict[str, set[str]] = {}
    for f in report.findings:
        by_kind.setdefault(f.kind, set()).add(f.key)
    unreachable = {k.removeprefix("unreachable: ") for k in by_kind.get("unreachable", set())}
    assert reached == set(table.states) - unreachable
    implicit = {k.removeprefix("implicit-error: ") for k in by_kind.get("implicit-error", set())}
    assert implicit == {f"{s} x {o}" for s, o in raised}
    model = TableModel(table)
    untaken = {model.label(i) for i in range(len(table.rows)) if i not in taken}
    assert {k.removeprefix("dead-row: ") for k in by_kind.get("dead-row", set())} == untaken
    for f in report.findings:
        if f.path:
            replay_witness(machine, f)


def replay_witness(machine: Machine[Any], finding: Finding) -> None:
    """A finding's path, with its guards decided as ``assumes`` says, does what it claims:
    reaches the state named (stuck, tick-only) or raises (implicit-error)."""
    decided = {(a.state, a.observation, a.guard): a.holds for a in finding.assumes}
    status = machine.initial(ObjectRef("Random", "", "r", "u"))
    named = finding.key.split(": ", 1)[1].split(" x ")[0]
    for i, name in enumerate(finding.path):
        cls = next(c for c in POOL if c.__name__ == name)
        flags = (
            decided.get((status.state, name, "g0"), False),
            decided.get((status.state, name, "g1"), False),
        )
        obs = cls(at=t(), flags=flags)
        if finding.kind == "implicit-error" and i == len(finding.path) - 1:
            assert status.state == named
            with pytest.raises(InvalidTransition):
                machine.apply(status, obs)
            return
        status = machine.apply(status, obs)
    assert status.state == named
