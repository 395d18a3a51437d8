"""The synchronous PostgreSQL store is generated from the asyncio one (ADR 0126).

``src/lifecycle/stores/postgres.py`` must be exactly what ``scripts/async_to_sync.py`` makes of
``postgres_async.py`` today (CI fails while it is stale: run ``make generate``), it says so in
its first lines, and the transform itself turns any nesting of the constructs it knows into
their synchronous twins and refuses what it does not know.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "async_to_sync", ROOT / "scripts/async_to_sync.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("async_to_sync", module)
    spec.loader.exec_module(module)
    return module


gen = _script()


@pytest.mark.parametrize(("source", "target"), gen.PAIRS)
def test_the_generated_module_is_current(source: str, target: str) -> None:
    wanted = gen.generate(source, target)
    found = (ROOT / target).read_text()
    assert found == wanted, f"{target} is stale: run `make generate` (scripts/async_to_sync.py)"


@pytest.mark.parametrize(("source", "target"), gen.PAIRS)
def test_the_generated_module_says_so_first(source: str, target: str) -> None:
    head = (ROOT / target).read_text().splitlines()[:3]
    assert head[0].startswith(f"# GENERATED from {Path(source).name} by scripts/async_to_sync.py")
    assert "do not edit" in head[0]
    text = (ROOT / source).read_text()
    assert "GENERATED" not in text.splitlines()[0]  # the source is the hand-written one


def test_the_generated_store_has_no_async_left() -> None:
    tree = ast.parse((ROOT / "src/lifecycle/stores/postgres.py").read_text())
    kinds = (ast.Await, ast.AsyncFunctionDef, ast.AsyncWith, ast.AsyncFor)
    assert not [n for n in ast.walk(tree) if isinstance(n, kinds)]
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    assert "asyncio" not in names
    assert "ASYNC" not in names


def test_both_stores_offer_the_same_methods() -> None:
    from lifecycle.stores.postgres import PostgresStore
    from lifecycle.stores.postgres_async import AsyncPostgresStore

    def public(cls: type) -> set[str]:
        return {n for n in vars(cls) if not n.startswith("__")}

    assert public(PostgresStore) == public(AsyncPostgresStore)


# -- the transform on any nesting of what it knows ----------------------------------------------
Pair = tuple[list[str], list[str]]  # (async lines, sync lines), unindented


def _indent(lines: list[str]) -> list[str]:
    return ["    " + line for line in lines]


LEAVES: list[Pair] = [
    (["x = await f(a)"], ["x = f(a)"]),
    (["await asyncio.sleep(0.1)"], ["time.sleep(0.1)"]),
    (["c: AsyncConn = AsyncConnectionPool(await g())"], ["c: Conn = ConnectionPool(g())"]),
    (["y = p if ASYNC else q"], ["y = q"]),
    (
        ["z = [await h(i) for i in range(3)]  # a comment"],
        ["z = [h(i) for i in range(3)]  # a comment"],
    ),
    (["conn = await psycopg.AsyncConnection.connect(u)"], ["conn = psycopg.Connection.connect(u)"]),
    (["return (await k())"], ["return (k())"]),
]


def _blocks(children: st.SearchStrategy[list[Pair]]) -> st.SearchStrategy[Pair]:
    def join(body: list[Pair]) -> Pair:
        return [a for p in body for a in p[0]], [s for p in body for s in p[1]]

    def with_(body: list[Pair]) -> Pair:
        a, s = join(body)
        return ["async with m() as c:", *_indent(a)], ["with m() as c:", *_indent(s)]

    def for_(body: list[Pair]) -> Pair:
        a, s = join(body)
        return ["async for i in g():", *_indent(a)], ["for i in g():", *_indent(s)]

    def branch(pair: tuple[list[Pair], list[Pair]]) -> Pair:
        (a1, _), (a2, s2) = join(pair[0]), join(pair[1])
        return ["if ASYNC:", *_indent(a1), "else:", *_indent(a2)], s2

    def only_sync(body: list[Pair]) -> Pair:
        a, s = join(body)
        return ["if not ASYNC:  # sync only", *_indent(a)], s

    def plain_if(body: list[Pair]) -> Pair:
        a, s = join(body)
        return ["if cond:", *_indent(a)], ["if cond:", *_indent(s)]

    return st.one_of(
        children.map(with_),
        children.map(for_),
        st.tuples(children, children).map(branch),
        children.map(only_sync),
        children.map(plain_if),
    )


STATEMENTS = st.recursive(
    st.sampled_from(LEAVES), lambda inner: _blocks(st.lists(inner, min_size=1, max_size=3))
)


@settings(max_examples=150, deadline=None)
@given(st.lists(STATEMENTS, min_size=1, max_size=4))
def test_any_nesting_turns_into_its_synchronous_twin(body: list[Pair]) -> None:
    a = [line for p in body for line in p[0]]
    s = [line for p in body for line in p[1]]
    source = (
        "\n".join(
            [
                "ASYNC: Final = True",
                "",
                "",
                "class AsyncPostgresStore:",
                "    @contextlib.asynccontextmanager",
                "    async def run(self) -> AsyncIterator[int]:",
                *_indent(_indent(a)),
            ]
        )
        + "\n"
    )
    wanted = (
        "\n".join(
            [
                "",
                "",
                "class PostgresStore:",
                "    @contextlib.contextmanager",
                "    def run(self) -> Iterator[int]:",
                *_indent(_indent(s)),
            ]
        )
        + "\n"
    )
    assert gen.to_sync(source) == wanted
    ast.parse(wanted)


@pytest.mark.parametrize(
    ("source", "why"),
    [
        ("async def f():\n    await asyncio.gather(a, b)\n", "asyncio.gather"),
        ("async def f():\n    return [x async for x in g()]\n", "async comprehension"),
        ("async def f():\n    return AsyncThing()\n", "AsyncThing has no synchronous twin"),
        ("def f():\n    return ASYNC\n", "ASYNC used outside"),
        ("async def f():\n    return asyncio\n", "asyncio used"),
        ("if ASYNC:\n    a = 1\nelif b:\n    a = 2\n", "`elif` after `if ASYNC`"),
    ],
)
def test_what_has_no_synchronous_form_is_refused_with_its_line(source: str, why: str) -> None:
    with pytest.raises(gen.TransformError, match=why) as caught:
        gen.to_sync(source, "src.py")
    assert str(caught.value).startswith("src.py:")


def test_the_check_mode_reports_a_stale_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "a.py"
    source.write_text(
        textwrap.dedent('''\
        """Doc."""

        import asyncio


        async def f() -> None:
            await asyncio.sleep(0)
        ''')
    )
    monkeypatch.setattr(gen, "ROOT", tmp_path)
    monkeypatch.setattr(gen, "PAIRS", [("a.py", "b.py")])
    assert gen.main(["--check"]) == 1  # b.py is missing
    assert gen.main([]) == 0
    assert gen.main(["--check"]) == 0
    written = (tmp_path / "b.py").read_text()
    assert written.startswith("# GENERATED from a.py by scripts/async_to_sync.py")
    assert "def f() -> None:\n    time.sleep(0)\n" in written
    (tmp_path / "b.py").write_text(written + "# edited by hand\n")
    assert gen.main(["--check"]) == 1
