"""Generated code is named, readable and made in one place (issue 17, item 2).

Every function the kernel compiles from source it writes comes from
:func:`lifecycle._core.codegen.compile_function`: its source is filed under a readable name in
:mod:`linecache`, so :func:`inspect.getsource` shows it and a profile names it. No other
module of the library runs ``exec`` or ``eval``.
"""

from __future__ import annotations

import cProfile
import inspect
import io
import itertools
import linecache
import pstats
import tokenize
import types
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs
import pytest

from lifecycle import Machine, ObjectRef
from lifecycle._core import serde
from lifecycle._core.codegen import PREFIX, compile_function
from lifecycle._core.machine import evolver
from lifecycle.machines import default_registry
from lifecycle.machines import pod as pod_module

SRC = Path(__file__).resolve().parent.parent / "src" / "lifecycle"
MACHINES = default_registry()
AT = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


def _generated(fn: object) -> bool:
    code = getattr(fn, "__code__", None)
    return isinstance(code, types.CodeType) and code.co_filename.startswith(PREFIX)


def _reachable(roots: list[Any]) -> Iterator[types.FunctionType]:
    """Every generated function among ``roots`` and the functions their namespaces hold."""
    seen: set[int] = set()
    todo = list(roots)
    while todo:
        fn = todo.pop()
        if id(fn) in seen or not _generated(fn):
            continue
        seen.add(id(fn))
        yield fn
        todo += [v for v in fn.__globals__.values() if callable(v)]


def _machine_functions(machine: Machine[Any]) -> list[types.FunctionType]:
    """What ``machine`` compiled: its steps (and the entries they call), its observation
    builders, the copy function of its status class and the validators of its observations."""
    status_type = machine.status_type
    roots: list[Any] = [*machine._steps.values(), *machine._builders.values()]
    if attrs.has(status_type):
        roots.append(evolver(status_type))
    for cls in machine.vocabulary.values():
        roots.append(serde._validator(cls))
        fields, _ = serde._plan(cls)
        roots += [fast for _, _, _, fast, _ in fields.values() if fast is not None]
    return list(_reachable(roots))


@pytest.mark.parametrize("name", sorted(MACHINES))
def test_inspect_shows_the_source_of_every_generated_function_of_every_machine(
    name: str,
) -> None:
    machine = MACHINES[name]
    functions = _machine_functions(machine)
    assert any(f.__name__ == "build" for f in functions) or not machine._builders
    for fn in functions:
        source = inspect.getsource(fn)
        assert source.startswith(f"def {fn.__name__}("), source
        code = fn.__code__
        assert code.co_filename.endswith(">")
        first = linecache.getline(code.co_filename, code.co_firstlineno)
        assert first == source.splitlines(keepends=True)[0]


@pytest.mark.parametrize("name", sorted(MACHINES))
def test_every_step_of_every_machine_is_a_named_function(name: str) -> None:
    """A step is compiled (filed under the machine, state and observation) or a plain module
    function (an ignore row's); never an anonymous lambda."""
    machine = MACHINES[name]
    for (state, obs), step in machine._steps.items():
        assert step.__name__ != "<lambda>", (state, obs)
        if step.__name__ == "step":
            expected = f"{PREFIX}{machine.name}.step[{state or '∅'},{obs.__name__}]"
            assert step.__code__.co_filename.startswith(expected)


def test_a_generated_step_reads_as_its_rows() -> None:
    pod = MACHINES["pod"]
    step = pod._steps[("Provisioning", pod.vocabulary["ProvisionSucceeded"])]
    assert step.__code__.co_filename == (
        "<lifecycle generated pod.step[Provisioning,ProvisionSucceeded]>"
    )
    source = inspect.getsource(step)
    assert "# Provisioning x ProvisionSucceeded [reserved] -> Initializing" in source
    assert "# Provisioning x ProvisionSucceeded -> =" in source


def test_a_profile_names_every_generated_function() -> None:
    pod = MACHINES["pod"]
    obs = pod_module
    status = pod.initial(ObjectRef("Pod", "ml", "p", "u"))
    seen = [
        obs.CreateRequested(at=AT),
        obs.ProvisionSucceeded(at=AT, reserved=True, instance_id="i-1"),
        obs.InstanceRunning(at=AT, instance_id="i-1"),
        obs.InstanceTerminated(at=AT, instance_id="i-1", preempted=True),
    ]
    profile = cProfile.Profile()
    profile.enable()
    for o in seen:
        status = pod.apply(status, o)
    pod.observation("InstanceRunning", AT, {"instance_id": "i-2"})
    profile.disable()
    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out)
    files = {filename for filename, _, _ in stats.stats}  # type: ignore[attr-defined]
    assert not any(f == "<string>" for f in files)
    assert "<lifecycle generated pod.step[Provisioning,ProvisionSucceeded]>" in files
    assert "<lifecycle generated build[lifecycle.machines._pod_observations.InstanceRunning]>" in (
        files
    )
    assert status.state == "Terminated"


def test_the_same_name_with_another_source_gets_its_own_file() -> None:
    first = compile_function("f", "def f():\n    return 1\n", {}, owner="test.same-name")
    again = compile_function("f", "def f():\n    return 1\n", {}, owner="test.same-name")
    other = compile_function("f", "def f():\n    return 2\n", {}, owner="test.same-name")
    assert first.__code__.co_filename == again.__code__.co_filename
    assert other.__code__.co_filename == f"{PREFIX}test.same-name #2>"
    assert (first(), other()) == (1, 2)
    assert inspect.getsource(other) == "def f():\n    return 2\n"


def test_generated_code_sees_only_its_namespace() -> None:
    make: Callable[..., Any] = compile_function(
        "g", "def g(x):\n    return K + x", {"K": 40}, owner="test.namespace"
    )
    assert make(2) == 42
    with pytest.raises(NameError):
        compile_function("h", "def h():\n    return K", {}, owner="test.namespace-h")()


def _calls(path: Path, names: frozenset[str]) -> list[int]:
    """Lines of ``path`` where one of ``names`` is called (tokens, so ``with_exec(`` or a
    comment does not count)."""
    with path.open("rb") as f:
        tokens = list(tokenize.tokenize(f.readline))
    return [
        tok.start[0]
        for tok, after in itertools.pairwise(tokens)
        if tok.type == tokenize.NAME
        and tok.string in names
        and after.string == "("
        and tok.line[: tok.start[1]].rstrip()[-1:] not in (".",)
    ]


def test_no_exec_or_eval_outside_the_codegen_helper() -> None:
    found = {
        str(path.relative_to(SRC)): lines
        for path in sorted(SRC.rglob("*.py"))
        if path.name != "codegen.py" or path.parent.name != "_core"
        if (lines := _calls(path, frozenset({"exec", "eval"})))
    }
    assert found == {}
    assert _calls(SRC / "_core" / "codegen.py", frozenset({"exec"}))  # the check can see one


def test_the_shipped_machines_exercise_every_kind_of_generated_function() -> None:
    names = {f.__name__ for m in MACHINES.values() for f in _machine_functions(m)}
    assert names >= {"step", "enter", "evolve", "build", "check", "full", "test"}
