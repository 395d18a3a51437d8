"""(De)serialisation of statuses and observations.

Statuses read back from our own store go through a ``cattrs`` converter. Observations that come
from outside (trace files, host code handing us dicts) go through :func:`strict_structure`, which
refuses wrong types instead of coercing them (``cattrs`` would turn ``"yes"`` into ``True``).
"""

from __future__ import annotations

import enum
import functools
import types
import typing
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, TypeVar

import attrs
import cattrs

from .errors import InvalidObservation

T = TypeVar("T")

converter = cattrs.Converter()
converter.register_unstructure_hook(datetime, lambda d: d.isoformat())


def parse_time(value: object) -> datetime:
    """An RFC 3339 timestamp with an offset (``Z`` allowed) to an aware datetime."""
    if not isinstance(value, str):
        raise ValueError(f"expected an RFC 3339 timestamp string, got {type(value).__name__}")
    return _parse_time(value)


def _time_or_none(value: str) -> datetime | None:
    """``parse_time`` for the fast path: ``None`` instead of an error (the full check then
    says what is wrong)."""
    try:
        return _parse_time(value)
    except ValueError:
        return None


@functools.lru_cache(maxsize=4096)
def _parse_time(value: str) -> datetime:
    """Traces repeat timestamps (one poll stamps many objects): parse each string once."""
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{value!r} is not an RFC 3339 timestamp") from None
    if parsed.tzinfo is None:
        raise ValueError(f"{value!r} has no UTC offset (write Z or +00:00)")
    return parsed


converter.register_structure_hook(datetime, lambda v, _: parse_time(v))


def _is_record_tuple(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, tuple) and hasattr(tp, "_fields")


# NamedTuple status records are stored as objects (field -> value), like attrs records.
converter.register_unstructure_hook_func(
    _is_record_tuple,
    lambda value: {k: converter.unstructure(v) for k, v in value._asdict().items()},
)


def _structure_record_tuple(data: Mapping[str, Any], cls: Any) -> Any:
    hints = typing.get_type_hints(cls)
    return cls(**{k: converter.structure(v, hints[k]) for k, v in data.items()})


converter.register_structure_hook_func(_is_record_tuple, _structure_record_tuple)


def dump(obj: Any) -> dict[str, Any]:
    data = converter.unstructure(obj)
    assert isinstance(data, dict)
    return data


def load(cls: type[T], data: Mapping[str, Any]) -> T:
    return converter.structure(data, cls)


def _describe(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _check(value: Any, tp: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        present = [o for o in typing.get_args(tp) if o is not type(None)]
        if value is not None and len(present) == 1:
            # ``X | None`` with a value: say what is wrong with it as an X (a naive
            # timestamp, a bool for an int), not just "expected X | None".
            return _check(value, present[0], where)
        errors = []
        for option in typing.get_args(tp):
            try:
                return _check(value, option, where)
            except InvalidObservation as e:
                errors.append(str(e))
        raise InvalidObservation(f"{where}: expected {_describe(tp)}, got {value!r}")
    if tp is type(None):
        if value is None:
            return None
        raise InvalidObservation(f"{where}: expected null, got {value!r}")
    if tp is Any:
        return value
    if origin is tuple:
        args = typing.get_args(tp)
        if not isinstance(value, list | tuple):
            raise InvalidObservation(f"{where}: expected a list, got {value!r}")
        inner = args[0]
        return tuple(_check(v, inner, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        key_type, value_type = typing.get_args(tp)
        if not isinstance(value, Mapping):
            raise InvalidObservation(f"{where}: expected an object, got {value!r}")
        return {
            _check(k, key_type, f"{where} key"): _check(v, value_type, f"{where}[{k!r}]")
            for k, v in value.items()
        }
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise InvalidObservation(f"{where}: expected true or false, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise InvalidObservation(f"{where}: expected an integer, got {value!r}")
    if tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        raise InvalidObservation(f"{where}: expected a number, got {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise InvalidObservation(f"{where}: expected a string, got {value!r}")
    if tp is datetime:
        if isinstance(value, datetime):
            if value.tzinfo is None:
                raise InvalidObservation(f"{where}: datetime has no timezone")
            return value
        try:
            return parse_time(value)
        except ValueError as e:
            raise InvalidObservation(f"{where}: {e}") from None
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(value)
        except ValueError:
            allowed = ", ".join(repr(m.value) for m in tp)
            raise InvalidObservation(f"{where}: {value!r} is not one of {allowed}") from None
    if attrs.has(tp):
        if not isinstance(value, Mapping):
            raise InvalidObservation(f"{where}: expected an object, got {value!r}")
        return strict_structure(tp, value, where)
    raise InvalidObservation(f"{where}: unsupported field type {_describe(tp)}")


def _test_source(tp: Any, v: str = "v") -> str | None:
    """Python source for a cheap test of ``v`` that accepts exactly the values ``_check``
    returns unchanged, or ``None`` where there is none (then every value takes the full
    check)."""
    if tp is str:
        return f"type({v}) is str"
    if tp is bool:
        return f"({v} is True or {v} is False)"
    if tp is int:
        return f"type({v}) is int"
    if tp is float:
        return f"type({v}) is float"
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        options = [o for o in typing.get_args(tp) if o is not type(None)]
        allows_none = len(options) < len(typing.get_args(tp))
        if len(options) == 1 and allows_none:
            inner = _test_source(options[0], v)
            if inner is not None:
                return f"({v} is None or {inner})"
    return None


def _fast_test(tp: Any) -> Callable[[Any], bool] | None:
    source = _test_source(tp)
    if source is None:
        return None
    test: Callable[[Any], bool] = eval(f"lambda v: {source}")
    return test


_MISSING = object()


def fast_builder(cls: type[Any]) -> Callable[[Mapping[str, Any], datetime], Any] | None:
    """For an observation class: one compiled function that builds it from ``fields`` and an
    aware ``at`` when every given field has a plain type (str, bool, int, float, or one of
    them or None), or returns ``None`` — for anything else, including every mistake, so that
    :func:`strict_structure` then builds it or says what is wrong. ``None`` (no builder) for
    a class with a required field of another type."""
    attrs.resolve_types(cls)
    fields = [f for f in attrs.fields(cls) if f.init and f.name != "at"]
    lines = [
        "def build(data, at):",
        "    if not NAMES.issuperset(data):",
        "        return None",
        "    kw = {'at': at}",
    ]
    for f in fields:
        test = _test_source(f.type)
        required = f.default is attrs.NOTHING
        if test is None and required:
            return None
        if test is None:
            lines += [f"    if {f.name!r} in data:", "        return None"]
        elif required:
            lines += [
                f"    v = data.get({f.name!r}, M)",
                f"    if v is M or not {test}:",
                "        return None",
                f"    kw[{f.name!r}] = v",
            ]
        else:
            lines += [
                f"    v = data.get({f.name!r}, M)",
                "    if v is not M:",
                f"        if not {test}:",
                "            return None",
                f"        kw[{f.name!r}] = v",
            ]
    lines += [
        "    try:",
        "        return cls(**kw)",
        "    except (TypeError, ValueError):",
        "        return None",
    ]
    namespace: dict[str, Any] = {
        "NAMES": frozenset(f.name for f in fields),
        "M": _MISSING,
        "cls": cls,
    }
    exec("\n".join(lines) + "\n", namespace)  # like attrs' own __init__
    build: Callable[[Mapping[str, Any], datetime], Any] = namespace["build"]
    return build


_Field = tuple[str, Any, bool, "Callable[[Any], bool] | None"]
_PLANS: dict[type[Any], tuple[dict[str, _Field], frozenset[str]]] = {}


def _plan(cls: type[Any]) -> tuple[dict[str, _Field], frozenset[str]]:
    """Per class, once: each init field's type, whether it is required, and its fast test."""
    plan = _PLANS.get(cls)
    if plan is None:
        attrs.resolve_types(cls)
        fields = {
            f.name: (f.name, f.type, f.default is attrs.NOTHING, _fast_test(f.type))
            for f in attrs.fields(cls)
            if f.init
        }
        plan = _PLANS[cls] = (fields, frozenset(fields))
    return plan


def strict_structure(cls: type[T], data: Mapping[str, Any], where: str = "") -> T:
    """Build ``cls`` from ``data``, refusing unknown fields, missing fields and wrong types."""
    fields, names = _plan(cls)
    label = where or cls.__name__
    if not names.issuperset(data):
        unknown = sorted(set(data) - names)
        raise InvalidObservation(
            f"{label}: unknown field(s) {', '.join(unknown)}; expected {', '.join(fields)}"
        )
    kwargs: dict[str, Any] = {}
    for name, tp, required, fast in fields.values():
        if name not in data:
            if required:
                raise InvalidObservation(f"{label}: missing required field {name!r}")
            continue
        value = data[name]
        if fast is not None and fast(value):
            kwargs[name] = value
        elif tp is datetime and type(value) is str and (parsed := _time_or_none(value)):
            kwargs[name] = parsed
        elif tp is datetime and type(value) is datetime and value.tzinfo is not None:
            kwargs[name] = value
        else:
            kwargs[name] = _check(value, tp, f"{label}.{name}")
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as e:
        raise InvalidObservation(f"{label}: {e}") from None
