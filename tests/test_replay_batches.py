"""A checked replay into a store that commits batches goes in chunks of ``observe_many``; it
must end exactly where the line-by-line replay ends: the same events per line, in the same
order, and the same final statuses -- on every bundled trace, on generated traces of many
interleaved objects, and whatever the chunk size (Hypothesis)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from benchmarks import gen_trace
from hypothesis import given, settings
from hypothesis import strategies as st

from lifecycle import MemoryEmitter, MemoryStore, SQLiteStore, Store, default_registry
from lifecycle.trace import REPLAY_BATCH, TraceLine, iter_trace, read_trace, replay

TRACES = sorted((Path(__file__).resolve().parent.parent / "examples" / "traces").glob("*.jsonl"))


def run(trace: list[TraceLine], store: Store, batch: int) -> tuple[list[Any], dict[str, Any]]:
    events = MemoryEmitter()
    lines: list[Any] = []

    def each(record: TraceLine, result: Any) -> None:
        if hasattr(result, "all_transitions"):
            lines.append((record.line, [tuple(t) for t in result.all_transitions()]))

    replay(trace, store, [events], on_result=each, batch=batch, keep_results=False)
    final: dict[str, Any] = {}
    for machine in default_registry().values():
        for record in store.records(machine):
            final[record.ref.uid] = (record.version, record.status)
    by_object: dict[str, list[Any]] = {}
    for t in events.events:  # every field of every event: its time too (issue 37)
        by_object.setdefault(t.ref.uid, []).append(tuple(t))
    return [lines, by_object], final


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_every_bundled_trace_replays_the_same_in_chunks(path: Path, tmp_path: Path) -> None:
    trace = read_trace(path)
    plain = run(trace, MemoryStore(), 1)
    for batch in (2, 5, REPLAY_BATCH):
        store = SQLiteStore(tmp_path / f"b{batch}.db")
        try:
            assert run(trace, store, batch) == plain, batch
        finally:
            store.close()


@settings(max_examples=15, deadline=None)
@given(
    pods=st.integers(1, 12),
    per_pod=st.sampled_from([5, 8, 20]),
    live=st.integers(1, 6),
    batch=st.integers(2, 40),
)
def test_generated_interleavings_replay_the_same_in_chunks(
    pods: int, per_pod: int, live: int, batch: int
) -> None:
    text = "\n".join(gen_trace.lines(pods * per_pod, per_pod=per_pod, live=live))
    trace = list(_parse(text))
    assert run(trace, MemoryStore(), batch) == run(trace, MemoryStore(), 1)


def _parse(text: str) -> list[TraceLine]:
    return list(iter_trace(text.splitlines(), "<generated>", default_registry()))


def test_a_replay_into_sqlite_commits_a_chunk_per_transaction(tmp_path: Path) -> None:
    """The point of it: far fewer commits than lines."""
    text = "\n".join(gen_trace.lines(400, per_pod=5, live=80))
    trace = _parse(text)
    store = SQLiteStore(tmp_path / "s.db")
    calls = {"commit": 0, "commit_many": 0}
    for name in calls:
        original = getattr(store, name)

        def counted(*args: Any, _name: str = name, _original: Any = original) -> Any:
            calls[_name] += 1
            return _original(*args)

        setattr(store, name, counted)
    replay(trace, store, [])
    assert calls["commit"] == 0
    assert 0 < calls["commit_many"] < 400 // 10
    store.close()


def test_a_machine_linked_to_itself_is_never_batched() -> None:
    from types import SimpleNamespace

    from lifecycle.trace import _link_components

    link = SimpleNamespace
    runner: Any = SimpleNamespace(
        protocol=SimpleNamespace(
            links={"a": [link(source="a", target="a")], "b": [link(source="b", target="a")]}
        )
    )
    found = _link_components(runner)
    assert found["a"] == -1  # line by line, each closing the chunk before it
    assert found["b"] >= 0
