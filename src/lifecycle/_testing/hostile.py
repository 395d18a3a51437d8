"""Hostile input: Hypothesis strategies for values no well-behaved host sends, to check that a
machine (and the runner around it) refuses them with a typed error or keeps working after
accepting them.

The values come in two kinds, mixed: ones outside the input bounds (ADR 0073) that must be
refused — NaN and infinities, integers past 64 bits, NUL characters, lone surrogates, text
longer than the bound, nesting 1000 deep, far-future, far-past and naive times, wrong types —
and ones exactly *at* the bounds, which must be accepted and must keep the object working
(the latest time, the longest duration, the largest integer)::

    from lifecycle.testing import hostile_observations

    @given(hostile_observations(MY_MACHINE))
    def test_my_machine_refuses_cleanly(args):
        name, at, fields = args
        try:
            MY_MACHINE.observation(name, at, fields)
        except LifecycleError:
            pass

:func:`hostile_counts` draws well-formed observations whose integers are extreme (the 64-bit
edges, each limit a record declares and one past it, ADR 0100), for a property that whatever
is accepted is applied within a bounded memory and time budget.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import attrs
from hypothesis import strategies as st

from .._core import bounds
from .._core.machine import Machine
from .._core.observation import Observation
from .._core.refs import ObjectRef
from .strategies import EPOCH, Samples, _Vocabulary

#: Well-formed values where a field's type alone rarely gives one (a manifest's fact states).
SAMPLES: Samples = {
    "Manifest.facts": (
        {},
        {"cpu_arch": "recorded", "kernel_version": "recorded"},
        {"gpus": "unavailable:NVMLError"},
    ),
}

_VOCABULARIES: dict[int, _Vocabulary] = {}


def _vocabulary(machine: Machine[Any]) -> _Vocabulary:
    """The field strategies of ``machine``'s observations (built once per machine)."""
    found = _VOCABULARIES.get(id(machine))
    if found is None or found.machine is not machine:
        found = _VOCABULARIES[id(machine)] = _Vocabulary(machine, SAMPLES, None, None, EPOCH)
    return found


def _deep(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


#: The last instant the input bounds accept, and the first they refuse.
LATEST = bounds.TIME_MAX
EARLIEST = bounds.TIME_MIN

#: Times (as RFC 3339 text and as datetimes) outside the bounds, or without a timezone.
BAD_TIMES: tuple[object, ...] = (
    "9999-12-31T23:59:59Z",
    "9001-01-01T00:00:00Z",
    "0001-01-01T00:00:00Z",
    "1969-12-31T23:59:59Z",
    "2026-01-01T00:00:00",  # no offset
    "2026-13-01T00:00:00Z",
    "",
    "\x00",
    datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC),
    datetime.max.replace(tzinfo=timezone(timedelta(hours=-14))),
    datetime.min.replace(tzinfo=timezone(timedelta(hours=14))),
    datetime(2026, 1, 1),  # naive
    datetime(1969, 12, 31, tzinfo=UTC),
    1e300,
    -1,
    None,
    [],
)
#: Times at the edges of the bounds: accepted.
EDGE_TIMES: tuple[datetime, ...] = (
    LATEST,
    EARLIEST,
    LATEST.astimezone(timezone(timedelta(hours=-14))),
    EARLIEST.astimezone(timezone(timedelta(hours=14))),
)

#: Values outside the bounds (or of a type no field has), for any field.
BAD_VALUES: tuple[object, ...] = (
    math.nan,
    math.inf,
    -math.inf,
    2**63,
    -(2**63) - 1,
    10**400,
    "a\x00b",
    "\x00",
    "\ud800",
    "ok\udfffok",
    "x" * (bounds.TEXT_MAX + 1),
    _deep(1000),
    _deep(bounds.DEPTH_MAX + 1),
    ["x"] * (bounds.ITEMS_MAX + 1),
    {1: "x"},
    {"k": math.nan},
    object(),
    b"bytes",
    {"nested": {"deeper": [math.inf]}},
    *BAD_TIMES,
)
#: Values exactly at the bounds (accepted where the type fits).
EDGE_VALUES: tuple[object, ...] = (
    0,
    -1,
    1,
    bounds.INT_MAX,
    bounds.INT_MIN,
    bounds.DURATION_MAX,
    -bounds.DURATION_MAX,
    float(bounds.DURATION_MAX),
    1.7976931348623157e308,
    -1.7976931348623157e308,
    5e-324,
    0.0,
    -0.0,
    "",
    " ",
    "x" * bounds.TEXT_MAX,
    "\U0010ffff\u202e\ufeff",
    "é" * 100,
    True,
    False,
    None,
    [],
    {},
    *EDGE_TIMES,
    "9000-12-31T23:59:59.999999Z",
    "1970-01-01T00:00:00Z",
)


def hostile_values() -> st.SearchStrategy[Any]:
    """One value outside the bounds or at them, or arbitrary JSON-like data.

    Returns:
        A Hypothesis strategy of such values.
    """
    json_like = st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
        max_leaves=8,
    )
    return st.one_of(st.sampled_from(BAD_VALUES), st.sampled_from(EDGE_VALUES), json_like)


def hostile_times() -> st.SearchStrategy[object]:
    """An ``at``: out of bounds, naive, of a wrong type, or at an edge of the bounds.

    Returns:
        A Hypothesis strategy of such values.
    """
    return st.one_of(st.sampled_from(BAD_TIMES), st.sampled_from(EDGE_TIMES))


def hostile_fields(
    machine: Machine[Any], cls: type[Observation]
) -> st.SearchStrategy[dict[str, Any]]:
    """Fields for ``cls``: each a well-formed value or (often) a hostile one; sometimes a
    field is left out or an unknown one is added.

    Args:
        machine: the machine whose vocabulary gives the well-formed values.
        cls: the observation class.

    Returns:
        A Hypothesis strategy of field mappings, as a trace line would carry them.
    """
    normal = _vocabulary(machine).fields[cls]
    keys = [f.name for f in attrs.fields(cls) if f.init and f.name != "at"]

    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in keys:
            pick = draw(st.integers(0, 9))
            if pick == 0:
                continue  # left out
            if pick <= 4:
                out[key] = draw(hostile_values())
            else:
                value = draw(normal[key])
                out[key] = _unstructure(value)
        if draw(st.integers(0, 9)) == 0:
            out[draw(st.sampled_from(("at", "", "\x00", "unknown", "x" * 300)))] = 1
        return out

    return build()


def _unstructure(value: Any) -> Any:
    """A generated field value as a trace line would carry it (records as mappings)."""
    if attrs.has(type(value)):
        return {f.name: _unstructure(getattr(value, f.name)) for f in attrs.fields(type(value))}
    if isinstance(value, tuple):
        return [_unstructure(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _unstructure(v) for k, v in value.items()}
    return value


def hostile_observations(machine: Machine[Any]) -> st.SearchStrategy[tuple[Any, Any, Any]]:
    """``(name, at, fields)`` for :meth:`~lifecycle.Machine.observation`: a known name (or
    sometimes a hostile one), a normal or hostile ``at``, and hostile fields.

    Args:
        machine: the machine under test.

    Returns:
        A Hypothesis strategy of ``(name, at, fields)``.
    """
    names = sorted(machine.vocabulary)

    @st.composite
    def build(draw: st.DrawFn) -> tuple[Any, Any, Any]:
        pick = draw(st.integers(0, 19))
        if pick == 0:
            return draw(hostile_values()), EPOCH, {}
        name = draw(st.sampled_from(names))
        at: object = EPOCH if pick < 12 else draw(hostile_times())
        fields: Any = draw(hostile_fields(machine, machine.vocabulary[name]))
        if pick == 1:
            fields = draw(hostile_values())
        return name, at, fields

    return build()


def hostile_built(machine: Machine[Any]) -> st.SearchStrategy[Observation]:
    """Observations a host builds in Python with hostile values, bypassing
    :meth:`~lifecycle.Machine.observation` (attrs validators still run: combinations they
    refuse are not drawn).

    Args:
        machine: the machine under test.

    Returns:
        A Hypothesis strategy of observations.
    """
    names = sorted(machine.vocabulary)

    @st.composite
    def build(draw: st.DrawFn) -> Observation:
        cls = machine.vocabulary[draw(st.sampled_from(names))]
        at: Any = draw(st.one_of(st.just(EPOCH), hostile_times()))
        vocab = _vocabulary(machine)
        for _ in range(5):
            fields = {
                k: draw(hostile_values()) if draw(st.booleans()) else draw(s)
                for k, s in vocab.fields[cls].items()
            }
            try:
                return cls(at=at, **fields)
            except Exception:  # the host's own constructor refused it
                continue
        return cls(at=at) if not vocab.fields[cls] else draw(vocab.observation(cls, EPOCH))

    return build()


def hostile_refs(machine: Machine[Any]) -> st.SearchStrategy[ObjectRef]:
    """References of ``machine``'s kind with hostile namespace, name or uid (or kind).

    Args:
        machine: the machine under test.

    Returns:
        A Hypothesis strategy of refs.
    """
    part = st.one_of(
        st.sampled_from(("", "x" * (bounds.REF_MAX + 1), "a\x00b", "\ud800", "ns")),
        st.sampled_from(BAD_VALUES),
    )
    return st.builds(
        ObjectRef,
        st.one_of(st.just(machine.kind), part),
        st.one_of(st.just("default"), part),
        st.one_of(st.just("obj"), part),
        st.one_of(st.just("uid-1"), part),
    )


# -- numbers that size work (ADR 0100) --------------------------------------------------------
#: Integers a count field is likely to meet at its worst: powers of two and ten around common
#: limits, 32-, 53- and 64-bit edges.
EXTREME_INTS: tuple[int, ...] = (
    0,
    1,
    2,
    255,
    256,
    1_000,
    1_001,
    65_535,
    65_536,
    10**6,
    10**9,
    2**31 - 1,
    2**32,
    2**53,
    2**62,
    bounds.INT_MAX,
    bounds.INT_MIN,
)


def _limit_edges(machine: Machine[Any]) -> set[int]:
    """Each declared limit of ``machine``'s observations, and one past it."""
    out: set[int] = set()
    for cls in machine.vocabulary.values():
        limits = getattr(cls, "limits", None)
        if isinstance(limits, Mapping):
            for value in limits.values():
                out.update((value - 1, value, value + 1))
    return out


def extreme_ints(machine: Machine[Any] | None = None) -> st.SearchStrategy[int]:
    """An integer from :data:`EXTREME_INTS`, or (given ``machine``) at or just past one of
    the limits its observations declare.

    Args:
        machine: whose declared limits to add; ``None``: only :data:`EXTREME_INTS`.

    Returns:
        A Hypothesis strategy of integers.
    """
    values = set(EXTREME_INTS) | (_limit_edges(machine) if machine is not None else set())
    return st.sampled_from(sorted(values))


def _extremes(draw: st.DrawFn, value: Any, ints: st.SearchStrategy[int], every: bool) -> Any:
    """``value`` (plain data) with each integer in it, nested ones too, often (``every``:
    always) replaced by an extreme one."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return draw(ints) if every or draw(st.integers(0, 3)) else value
    if isinstance(value, list):
        return [_extremes(draw, v, ints, every) for v in value]
    if isinstance(value, dict):
        return {k: _extremes(draw, v, ints, every) for k, v in value.items()}
    return value


def hostile_counts(machine: Machine[Any]) -> st.SearchStrategy[tuple[str, datetime, Any]]:
    """``(name, at, fields)`` for :meth:`~lifecycle.Machine.observation`: a well-formed
    observation whose integers (every int field, nested ones included) are mostly extreme --
    the largest, at a declared limit and just past it, 32/53/64-bit edges. What is accepted
    must still apply within a bounded budget (no work proportional to a number the input
    carries); integer fields the values leave unset are filled in, so every count is tried.

    Args:
        machine: the machine under test.

    Returns:
        A Hypothesis strategy of ``(name, at, fields)``.
    """
    names = sorted(machine.vocabulary)
    ints = extreme_ints(machine)

    @st.composite
    def build(draw: st.DrawFn) -> tuple[str, datetime, Any]:
        name = draw(st.sampled_from(names))
        cls = machine.vocabulary[name]
        normal = _vocabulary(machine).fields[cls]
        # a quarter of the time one extreme value for every integer: counts that must agree
        # (a partition's nodes, groups and nodes per job) then do, and reach the machine
        every = draw(st.integers(0, 3)) == 0
        chosen = st.just(draw(ints)) if every else ints
        fields = {
            k: _extremes(draw, _unstructure(draw(s)), chosen, every) for k, s in normal.items()
        }
        return name, EPOCH, fields

    return build()
