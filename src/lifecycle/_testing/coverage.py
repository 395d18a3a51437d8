"""Row coverage: a short observation path that exercises each row of a machine's table.

Random sequences reach common rows often and rare rows (a rejection while provisioning, a
grace window running out) seldom. A breadth-first search over the pure machine finds, for
every row it can reach, the first path that takes it; the property suite replays each path
(plus fault variants) before it generates anything, so every row is checked every run.

Candidate observations vary one field at a time from a base (field defaults, else the first
candidate), with values from the samples, the table's own strings, and a few per type.
"""

from __future__ import annotations

import enum
import itertools
import typing
from collections.abc import Iterator, Mapping
from datetime import datetime, timedelta
from typing import Any, Literal

import attrs
from hypothesis import strategies as st

from .._core.errors import LifecycleError
from .._core.machine import Machine
from .._core.observation import Observation
from .._core.refs import ObjectRef
from .._core.table import Row
from .strategies import EPOCH, Samples, default_ref, machine_samples, table_strings

#: Seconds between steps tried by the search: same instant, and across grace windows.
TIME_STEPS = (0, 1, 16, 61, 3600)


def _type_values(tp: Any, strings: tuple[str, ...]) -> list[Any] | None:
    """A few values of ``tp`` worth trying, or ``None`` if there is no finite guess."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, typing.get_origin(int | None)):
        out: list[Any] = []
        for a in args:
            values = _type_values(a, strings)
            if values is None:
                return None
            out.extend(values)
        return out
    if tp is type(None):
        return [None]
    if origin is Literal:
        return list(args)
    if tp is bool:
        return [False, True]
    if tp is int:
        return [0, 1, -1, 2]
    if tp is float:
        return [0.0, 1.0, 15.0, 60.0, 150.0]
    if tp is str:
        return ["", *strings]
    if tp is datetime:
        return [EPOCH, EPOCH - timedelta(seconds=30)]
    if origin is tuple:
        return [()]
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return list(tp)
    return None


def _field_values(
    cls: type[Any], samples: Samples, strings: tuple[str, ...]
) -> dict[str, list[Any]]:
    attrs.resolve_types(cls)
    out: dict[str, list[Any]] = {}
    for field in attrs.fields(cls):
        if not field.init or field.name == "at":
            continue
        chosen = samples.get(f"{cls.__name__}.{field.name}", samples.get(field.name))
        values: list[Any] | None
        if chosen is not None and not isinstance(chosen, st.SearchStrategy):
            values = list(chosen)
        else:
            values = _type_values(field.type, strings)
        default = field.default
        if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
            default = attrs.NOTHING  # a factory default is left to the class
        if default is not attrs.NOTHING:
            values = [default, *(values or [])]
        if not values:
            if default is attrs.NOTHING:
                raise TypeError(f"{cls.__name__}.{field.name}: no values to try")
            continue
        unique: list[Any] = []
        for v in values:
            if not any(v is u or (type(v) is type(u) and v == u) for u in unique):
                unique.append(v)
        out[field.name] = unique
    return out


def _variants(values: Mapping[str, list[Any]]) -> Iterator[dict[str, Any]]:
    """The base (first value of each field), then one field changed at a time."""
    base = {name: vs[0] for name, vs in values.items()}
    yield base
    for name, vs in values.items():
        for v in itertools.islice(vs, 1, None):
            yield {**base, name: v}


@attrs.frozen(slots=True)
class RowPath:
    """The first path found that takes ``row`` (its last observation does).

    Attributes:
        index: the row's position in the table.
        row: the row.
        observations: the path, from the initial status; the last one takes the row.
    """

    index: int
    row: Row
    observations: tuple[Observation, ...]


def _shape(status: Any) -> tuple[Any, ...]:
    """A status with its datetimes reduced to set/unset: the search's notion of "new"."""
    if not attrs.has(type(status)):
        return (status,)
    return tuple(
        True if isinstance(v, datetime) else v for v in attrs.astuple(status, recurse=False)
    )


def _candidates(
    machine: Machine[Any], samples: Samples | None
) -> dict[type[Observation], list[dict[str, Any]]]:
    """Per observation type of ``machine``, the field values to try (none if its fields
    cannot be sampled)."""
    merged = machine_samples(machine, samples)
    strings = table_strings(machine)
    candidates: dict[type[Observation], list[dict[str, Any]]] = {}
    for cls in machine.table.observations:
        try:
            candidates[cls] = list(_variants(_field_values(cls, merged, strings)))
        except TypeError:
            candidates[cls] = []
    return candidates


def _moves(
    machine: Machine[Any],
    status: Any,
    at: datetime,
    path: tuple[Observation, ...],
    candidates: dict[type[Observation], list[dict[str, Any]]],
    time_steps: tuple[float, ...],
) -> Iterator[tuple[Observation, Row, Any, datetime]]:
    """Each observation tried from ``status`` (reached by ``path``, at ``at``) that the
    machine takes: with the row it takes, the status after and the time. An ``apply`` that raises
    anything but a :class:`~lifecycle.LifecycleError` fails the search."""
    for cls in machine.table.observations:
        if not machine.table.accepts(status.state, cls) or not candidates[cls]:
            continue
        tries = [(dt, candidates[cls][0]) for dt in time_steps]
        tries += [(0, kw) for kw in candidates[cls][1:]]
        for dt, kwargs in tries:
            when = at + timedelta(seconds=dt)
            try:
                obs = cls(at=when, **kwargs)
            except (TypeError, ValueError):  # a validator refused the combination
                continue
            try:
                row = machine.select(status, obs)
                after = machine.apply(status, obs)
            except LifecycleError:
                continue
            except Exception as e:
                raise AssertionError(
                    f"{machine.name}: apply raised {e!r} instead of a LifecycleError "
                    f"after {[*path, obs]!r}"
                ) from e
            yield obs, row, after, when


def row_paths(
    machine: Machine[Any],
    *,
    samples: Samples | None = None,
    ref: ObjectRef | None = None,
    max_depth: int = 8,
    budget: int = 400,
    time_steps: tuple[float, ...] = TIME_STEPS,
) -> tuple[list[RowPath], list[tuple[int, Row]]]:
    """Search the pure machine, breadth first, for a shortest path to every row.

    Each status of a new shape (datetimes counted as set or unset) is expanded once, up to
    ``budget`` expansions. Returns the paths found and the rows never reached.

    Args:
        machine: the machine under test.
        samples: values for observation fields, by ``"Class.field"`` or ``"field"``: what the
            guards need to be reached.
        ref: the object driven; ``None``: :func:`default_ref`.
        max_depth: the longest path tried.
        budget: the most statuses expanded, a bound on the search's time.
        time_steps: the seconds tried between observations, so timer rows are reached.

    Returns:
        The paths found, one per row reached, and the rows never reached with their index.
    """
    table = machine.table
    candidates = _candidates(machine, samples)
    index = {id(row): i for i, row in enumerate(table.rows)}
    subject = ref if ref is not None else default_ref(machine)
    found: dict[int, RowPath] = {}
    start = machine.initial(subject)
    seen = {_shape(start)}
    frontier: list[tuple[Any, datetime, tuple[Observation, ...]]] = [(start, EPOCH, ())]
    expansions = 0
    for _ in range(max_depth):
        grown: list[tuple[Any, datetime, tuple[Observation, ...]]] = []
        for status, at, path in frontier:
            if len(found) == len(table.rows) or expansions >= budget:
                break
            expansions += 1
            for obs, row, after, when in _moves(machine, status, at, path, candidates, time_steps):
                walked = (*path, obs)
                i = index[id(row)]
                if i not in found:
                    found[i] = RowPath(i, row, walked)
                shape = _shape(after)
                if shape not in seen:
                    seen.add(shape)
                    grown.append((after, when, walked))
        if not grown:
            break
        frontier = grown
    missing = [(i, row) for i, row in enumerate(table.rows) if i not in found]
    return sorted(found.values(), key=lambda p: p.index), missing
