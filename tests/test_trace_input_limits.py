"""Trace lines at the trust boundary: a repeated JSON key (at any depth) and a line over the
size limit are refused with ``FILE:LINE``; the cheap test that spares most lines the second,
duplicate-finding parse is never wrong when it lets a line through."""

from __future__ import annotations

import json
import os
import tracemalloc
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lifecycle import MemoryStore, StoreError, TraceError
from lifecycle.machines import default_registry
from lifecycle.trace import (
    MAX_LINE_BYTES,
    _may_repeat_keys,
    injected,
    parse_line,
    parse_lines,
    read_trace,
    replay,
    stream_trace,
)

MACHINES = default_registry()
SOAK = os.environ.get("LIFECYCLE_SOAK") == "1"

LINE = (
    '{"at": "2026-11-30T10:00:00Z", "machine": "pod", '
    '"object": {"namespace": "ml", "name": "trainer-0", "uid": "pod-a"%s}, '
    '"observe": "CreateRequested", "with": {"pool": "gpu", "provider": "fake"%s}%s}'
)


def parse(*lines: str, limit: int = MAX_LINE_BYTES) -> list[Any]:
    return parse_lines(lines, "t.jsonl", MACHINES, max_line_bytes=limit)


def test_the_template_line_is_accepted() -> None:
    assert len(parse(LINE % ("", "", ""))) == 1


@pytest.mark.parametrize(
    ("line", "key"),
    [
        (LINE % ("", "", ', "machine": "pod"'), "machine"),  # top level, same value
        (LINE % ("", "", ', "at": "2026-11-30T10:00:01Z"'), "at"),
        (LINE % (', "uid": "pod-b"', "", ""), "uid"),  # in "object": last-wins would rename
        (LINE % ("", ', "pool": "cpu"', ""), "pool"),  # in "with"
        (LINE % ("", ', "pool": "gpu:1"', ""), "pool"),  # a ':' in the dropped value
        (LINE % ("", ', "pool": "a\\u003ab"', ""), "pool"),  # an escaped ':' offsets the count
        (LINE % ("", ', "extra": [{"k": 1, "k": 2}]', ""), "k"),  # inside a list
        (LINE % ("", ', "extra": {"k": {"j": 1, "j": 1}}', ""), "j"),  # nested objects
        (LINE % ("", ', "po\\u006fl": "x"', ""), "pool"),  # the same key, spelled escaped
    ],
)
def test_a_repeated_key_is_refused_at_any_depth(line: str, key: str) -> None:
    json.loads(line)  # the line is valid JSON, whose parsers keep the last value
    with pytest.raises(TraceError, match=rf"^t\.jsonl:1: duplicate key '{key}'"):
        parse(line)


def test_a_repeated_key_deeper_than_orjson_writes_is_refused() -> None:
    deep = '{"k": ' * 300 + '{"d": 1, "d": 2}' + "}" * 300
    with pytest.raises(TraceError, match=r"^t\.jsonl:1: duplicate key 'd'"):
        parse(LINE % ("", f', "extra": {deep}', ""))


@pytest.mark.parametrize("depth", [2_000, 100_000])
def test_deep_nesting_is_refused_as_malformed(depth: int) -> None:
    with pytest.raises(TraceError, match=r"^t\.jsonl:1: malformed JSON: depth limit"):
        parse(LINE % ("", ', "extra": ' + "[" * depth + "]" * depth, ""))


# -- the cheap test -------------------------------------------------------------------------
KEYS = st.sampled_from(["a", "b", ":", "a:b", "k"])
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**20), 10**20),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(alphabet=st.sampled_from(list('ab:é"\\\n\x00')), max_size=6),
)


def _pairs_values(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(children, max_size=3),
        st.lists(st.tuples(KEYS, children), max_size=4).map(_Pairs),
    )


class _Pairs(list[tuple[str, Any]]):
    """An object as written, possibly repeating a key."""


VALUES = st.recursive(SCALARS, _pairs_values, max_leaves=12)


def _string(text: str, draw: st.DataObject) -> str:
    """``text`` as a JSON string, each character written plainly or as a \\u escape."""
    mask = draw.draw(st.integers(0, (1 << len(text)) - 1), label="escaped") if text else 0
    out = [
        f"\\u{ord(ch):04x}" if mask >> i & 1 else json.dumps(ch)[1:-1] for i, ch in enumerate(text)
    ]
    return '"' + "".join(out) + '"'


def _write(value: Any, draw: st.DataObject) -> str:
    space = draw.draw(st.sampled_from(["", " ", "\t", "\n "]), label="space")
    if isinstance(value, _Pairs):
        items = [f"{_string(k, draw)}{space}:{space}{_write(v, draw)}" for k, v in value]
        return "{" + f",{space}".join(items) + "}"
    if isinstance(value, list):
        return "[" + f",{space}".join(_write(v, draw) for v in value) + "]"
    if isinstance(value, str):
        return _string(value, draw)
    return json.dumps(value)


def _repeats(value: Any) -> bool:
    if isinstance(value, _Pairs):
        keys = [k for k, _ in value]
        return len(set(keys)) < len(keys) or any(_repeats(v) for _, v in value)
    if isinstance(value, list):
        return any(_repeats(v) for v in value)
    return False


@settings(
    max_examples=5000 if SOAK else 100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(st.lists(st.tuples(KEYS, VALUES), max_size=5).map(_Pairs), st.data())
def test_the_cheap_test_never_lets_a_repeated_key_through(top: _Pairs, data: st.DataObject) -> None:
    text = _write(top, data)
    parsed = orjson.loads(text)
    if _repeats(top):
        assert _may_repeat_keys(parsed, text), text


def test_the_cheap_test_spares_ordinary_lines_the_second_parse() -> None:
    for line in (LINE % ("", "", ""), json.dumps(json.loads(LINE % ("", "", "")))):
        assert not _may_repeat_keys(orjson.loads(line), line)
    compact = orjson.dumps(json.loads(LINE % ("", ', "endpoint": "fake://x:1"', ""))).decode()
    assert not _may_repeat_keys(orjson.loads(compact), compact)


# -- line size ------------------------------------------------------------------------------
def _sized(size: int, filler: str = "x") -> str:
    """The template line grown to ``size`` bytes of UTF-8 with an ``extra`` field."""
    bare = LINE % ("", ', "extra": ""', "")
    room = size - len(bare.encode())
    text = filler * (room // len(filler.encode()))
    return LINE % ("", f', "extra": "{text}"', "")


def test_a_line_at_the_limit_passes_the_size_check_and_one_byte_more_is_refused() -> None:
    at_limit = _sized(400)
    assert len(at_limit.encode()) == 400
    with pytest.raises(TraceError, match="unknown field"):  # past the size check
        parse(at_limit + "\n", limit=400)
    with pytest.raises(TraceError, match=r"^t\.jsonl:1: line longer than 399 bytes"):
        parse(at_limit, limit=399)


def test_the_limit_counts_bytes_of_utf8_not_characters() -> None:
    line = _sized(400, filler="é")  # two bytes each
    assert len(line) < 400 <= len(line.encode()) + 1
    with pytest.raises(TraceError, match="line longer than 300 bytes"):
        parse(line, limit=300)


def test_a_comment_line_is_bounded_too() -> None:
    with pytest.raises(TraceError, match=r"^t\.jsonl:1: line longer than 150 bytes"):
        parse("# " + "c" * 200, LINE % ("", "", ""), limit=150)


@pytest.mark.parametrize("limit", [0, -1, 1.5, True])
def test_the_limit_must_be_a_positive_integer(limit: Any) -> None:
    with pytest.raises(ValueError, match="max_line_bytes"):
        parse(LINE % ("", "", ""), limit=limit)


def test_a_huge_line_is_refused_without_being_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "huge.jsonl"
    with path.open("w") as f:
        f.write(LINE % ("", "", "") + "\n")
        f.write('{"at": "' + "x" * (40 << 20))  # 40 MiB, and no line end
    tracemalloc.start()
    try:
        with pytest.raises(TraceError, match=r"huge\.jsonl:2: line longer than 1048576 bytes"):
            read_trace(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20


def test_the_readers_take_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(_sized(500) + "\n")
    for reader in (read_trace, lambda p, **kw: list(stream_trace(p, **kw))):
        with pytest.raises(TraceError, match="line longer than 499 bytes"):
            reader(path, max_line_bytes=499)
        with pytest.raises(TraceError, match="unknown field"):
            reader(path, max_line_bytes=500)


# -- injected and real write failures -------------------------------------------------------
class _RefusingStore(MemoryStore):
    """A store that refuses every status write of one uid (as a database might)."""

    def __init__(self, uid: str) -> None:
        super().__init__()
        self.uid = uid

    def commit(self, machine: Any, ref: Any, *args: Any, **kwargs: Any) -> int:
        if ref.uid == self.uid:
            raise StoreError("value too long for type character varying(64)")
        return super().commit(machine, ref, *args, **kwargs)


def _errors(lines: Iterable[str], store: MemoryStore) -> list[bool]:
    results = replay(parse(*lines), store, dry_run=False)
    return [injected(r.error) for r in results if r.error is not None]


def _fault(fault: str, times: int) -> str:
    line = json.loads(LINE % ("", "", ""))
    del line["observe"], line["with"]
    return json.dumps({**line, "fault": fault, "times": times})


def test_a_failure_a_fault_line_injected_is_told_from_a_real_one() -> None:
    observe = LINE % ("", "", "")
    assert _errors([_fault("write-error", 1), observe], MemoryStore()) == [True]
    assert _errors([_fault("conflict", 50), observe], MemoryStore()) == [True]  # retries spent
    assert _errors([observe], _RefusingStore("pod-a")) == [False]
    assert _errors([_fault("conflict", 1), observe], _RefusingStore("pod-a")) == [False]


# -- the whole line: every level, escapes and ':' in values ----------------------------------
def _pod_line(draw: st.DataObject) -> tuple[_Pairs, bool]:
    """A valid CreateRequested line as pairs, maybe with keys repeated (with valid values)."""
    word = st.text(alphabet=st.sampled_from(list("ab:-é/")), min_size=1, max_size=6)
    times = st.sampled_from(["2026-11-30T10:00:00Z", "2026-11-30T10:00:00+01:00"])

    def level(pairs: list[tuple[str, st.SearchStrategy[Any]]]) -> _Pairs:
        chosen = [(k, draw.draw(v)) for k, v in pairs]
        for k, v in pairs:
            if draw.draw(st.integers(0, 9), label=f"repeat {k}") == 0:
                chosen.insert(draw.draw(st.integers(0, len(chosen))), (k, draw.draw(v)))
        return _Pairs(chosen)

    obj = level([("namespace", word), ("name", word), ("uid", st.just("pod-a"))])
    fields = level([("pool", word), ("provider", word)])
    top = level(
        [
            ("at", times),
            ("machine", st.just("pod")),
            ("object", st.just(obj)),
            ("observe", st.just("CreateRequested")),
            ("with", st.just(fields)),
        ]
    )
    return top, _repeats(top)


@settings(max_examples=2000 if SOAK else 150, deadline=None)
@given(st.data())
def test_a_trace_line_is_refused_exactly_when_it_repeats_a_key(data: st.DataObject) -> None:
    top, repeats = _pod_line(data)
    text = _write(top, data)
    if repeats:
        with pytest.raises(ValueError, match="duplicate key"):
            parse_line(text, MACHINES, 1)
    else:
        assert parse_line(text, MACHINES, 1) is not None
