"""(De)serialisation of statuses and observations.

Statuses read back from our own store go through a ``cattrs`` converter. Observations that come
from outside (trace files, host code handing us dicts) go through :func:`strict_structure`, which
refuses wrong types instead of coercing them (``cattrs`` would turn ``"yes"`` into ``True``).
"""

from __future__ import annotations

import enum
import functools
import sys
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from .bounds import (
    DEPTH_MAX,
    DURATION_MAX,
    INT_MAX,
    INT_MIN,
    ITEMS_MAX,
    TEXT_MAX,
    TIME_MAX,
    TIME_MIN,
    float_problem,
    int_problem,
    is_duration,
    text_problem,
    time_problem,
)
from .codegen import compile_function
from .errors import InvalidObservation, LifecycleError, brief, preview

if TYPE_CHECKING:
    import cattrs

T = TypeVar("T")

#: The converter of stored statuses, built on first use: importing ``cattrs`` and
#: registering the hooks is a fifth of a host's import otherwise (ADR 0139).
_converter: cattrs.Converter | None = None


def parse_time(value: object) -> datetime:
    """An RFC 3339 timestamp with an offset (``Z`` allowed) to an aware datetime. Syntax
    only: stored data is read back with it too; input is also bounded (:func:`_check`)."""
    if not isinstance(value, str):
        raise ValueError(f"expected an RFC 3339 timestamp string, got {type(value).__name__}")
    return _parse_time(value)


def _time_or_none(value: str) -> datetime | None:
    """``parse_time`` for the fast path, within the input bounds: ``None`` instead of an
    error (the full check then says what is wrong)."""
    try:
        parsed = _parse_time(value)
    except ValueError:
        return None
    return parsed if TIME_MIN <= parsed <= TIME_MAX else None  # fixed offsets: no error


@functools.lru_cache(maxsize=4096)
def _parse_time(value: str) -> datetime:
    """Traces repeat timestamps (one poll stamps many objects): parse each string once."""
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{preview(value)} is not an RFC 3339 timestamp") from None
    if parsed.tzinfo is None:
        raise ValueError(f"{preview(value)} has no UTC offset (write Z or +00:00)")
    return parsed


def _is_record_tuple(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, tuple) and hasattr(tp, "_fields")


def _made() -> cattrs.Converter:
    """The converter, built once."""
    global _converter
    if _converter is None:
        import cattrs

        made = cattrs.Converter()
        made.register_unstructure_hook(datetime, lambda d: d.isoformat())
        made.register_structure_hook(datetime, lambda v, _: parse_time(v))
        # NamedTuple status records are stored as objects (field -> value), like attrs
        # records.
        made.register_unstructure_hook_func(
            _is_record_tuple,
            lambda value: {k: made.unstructure(v) for k, v in value._asdict().items()},
        )
        made.register_structure_hook_func(_is_record_tuple, _structure_record_tuple)
        _converter = made
    return _converter


#: Per NamedTuple record class, each field's type and structure hook, found once
#: (``typing.get_type_hints`` resolves every annotation again on each call: ~10 µs, most of
#: a status load; the converter's dispatch per field is another few hundred ns).
_HINTS: dict[type[Any], dict[str, tuple[Callable[[Any, Any], Any], Any]]] = {}


def _hook(tp: Any) -> Callable[[Any, Any], Any]:
    converter = _converter or _made()
    found = getattr(converter, "get_structure_hook", None)  # cattrs >= 24.1
    if found is None:  # pragma: no cover - older cattrs
        return converter.structure
    hook: Callable[[Any, Any], Any] = found(tp)
    return hook


def _structure_record_tuple(data: Mapping[str, Any], cls: Any) -> Any:
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = {
            name: (_hook(tp), tp) for name, tp in typing.get_type_hints(cls).items()
        }
    return cls(**{k: hook(v, tp) for k, v in data.items() for hook, tp in (hints[k],)})


def dump(obj: Any) -> dict[str, Any]:
    data = (_converter or _made()).unstructure(obj)
    assert isinstance(data, dict)
    return data


def load(cls: type[T], data: Mapping[str, Any]) -> T:
    return (_converter or _made()).structure(data, cls)


def _describe(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _bad(where: str, value: Any, problem: str) -> InvalidObservation:
    return InvalidObservation(f"{where}: {preview(value)} {problem}")


def _size(value: Any, where: str) -> None:
    if len(value) > ITEMS_MAX:
        raise InvalidObservation(f"{where}: {len(value)} entries, more than {ITEMS_MAX}")


def _check(value: Any, tp: Any, where: str, duration: bool = False) -> Any:
    """``value`` as a ``tp``, or :class:`InvalidObservation` naming ``where``: wrong types
    are refused, not coerced, and every value is within the input bounds (ADR 0073).
    ``duration``: a number is a duration in seconds (bounded tighter)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return _check_union(value, tp, where, duration)
    if tp is type(None):
        if value is None:
            return None
        raise InvalidObservation(f"{where}: expected null, got {preview(value)}")
    if tp is Any or tp is object:
        return _check_free(value, where)
    if origin is tuple:
        return _check_tuple(value, typing.get_args(tp), where)
    if origin is dict:
        return _check_dict(value, tp, where)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise InvalidObservation(f"{where}: expected true or false, got {preview(value)}")
    if tp is int:
        return _check_int(value, where, duration)
    if tp is float:
        return _check_float(value, where, duration)
    if tp is str:
        return _check_str(value, where)
    if tp is datetime:
        return _check_time(value, where)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _check_enum(value, tp, where)
    if attrs.has(tp):
        return _check_record(value, tp, where)
    raise InvalidObservation(f"{where}: unsupported field type {_describe(tp)}")


def _check_union(value: Any, tp: Any, where: str, duration: bool) -> Any:
    present = [o for o in typing.get_args(tp) if o is not type(None)]
    if value is not None and len(present) == 1:
        # ``X | None`` with a value: say what is wrong with it as an X (a naive
        # timestamp, a bool for an int), not just "expected X | None".
        return _check(value, present[0], where, duration)
    for option in typing.get_args(tp):
        try:
            return _check(value, option, where, duration)
        except InvalidObservation:
            continue
    raise InvalidObservation(f"{where}: expected {_describe(tp)}, got {preview(value)}")


def _check_tuple(value: Any, args: tuple[Any, ...], where: str) -> tuple[Any, ...]:
    if not isinstance(value, list | tuple):
        raise InvalidObservation(f"{where}: expected a list, got {preview(value)}")
    _size(value, where)
    if len(args) == 2 and args[1] is Ellipsis:
        args = (args[0],) * len(value)
    elif len(args) != len(value):
        raise InvalidObservation(f"{where}: expected {len(args)} entries, got {len(value)}")
    pairs = enumerate(zip(value, args, strict=True))
    return tuple(_check(v, a, f"{where}[{i}]") for i, (v, a) in pairs)


def _check_dict(value: Any, tp: Any, where: str) -> dict[Any, Any]:
    key_type, value_type = typing.get_args(tp)
    if not isinstance(value, Mapping):
        raise InvalidObservation(f"{where}: expected an object, got {preview(value)}")
    _size(value, where)
    return {
        _check(k, key_type, f"{where} key"): _check(v, value_type, f"{where}[{preview(k)}]")
        for k, v in value.items()
    }


def _check_int(value: Any, where: str, duration: bool) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidObservation(f"{where}: expected an integer, got {preview(value)}")
    problem = int_problem(value, duration)
    if problem is not None:
        raise _bad(where, value, problem)
    return value


def _check_float(value: Any, where: str, duration: bool) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise InvalidObservation(f"{where}: expected a number, got {preview(value)}")
    try:
        number = float(value)
    except OverflowError:  # an integer beyond any float
        raise _bad(where, value, "is not a finite number") from None
    problem = float_problem(number, duration)
    if problem is not None:
        raise _bad(where, value, problem)
    return number


def _check_str(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise InvalidObservation(f"{where}: expected a string, got {preview(value)}")
    problem = text_problem(value)
    if problem is not None:
        raise _bad(where, value, problem)
    return value


def _check_enum(value: Any, tp: type[enum.Enum], where: str) -> enum.Enum:
    try:
        return tp(value)
    except (ValueError, TypeError):
        allowed = ", ".join(preview(m.value) for m in tp)
        raise _bad(where, value, f"is not one of {allowed}") from None


def _check_record(value: Any, tp: Any, where: str) -> Any:
    if isinstance(value, tp):  # a record built in Python: check it, keep it
        validate(value, where)
        return value
    if not isinstance(value, Mapping):
        raise InvalidObservation(f"{where}: expected an object, got {preview(value)}")
    return strict_structure(tp, value, where)


def _check_time(value: Any, where: str) -> datetime:
    if isinstance(value, datetime):
        parsed = value
    else:
        try:
            parsed = parse_time(value)
        except ValueError as e:
            raise InvalidObservation(f"{where}: {e}") from None
    problem = time_problem(parsed)
    if problem is not None:
        raise _bad(where, value, problem)
    return parsed


def _check_free(value: Any, where: str, depth: int = 0, strict: bool = True) -> Any:
    """A free-form (``Any``) value: JSON values (and times) within the input bounds, at most
    :data:`DEPTH_MAX` deep. Not ``strict`` (a field type this module does not know, in a
    record built in Python): other objects pass unchecked."""
    if value is None or value is True or value is False:
        return value
    if isinstance(value, int | float | str | datetime):
        base = next(b for b in (int, float, str, datetime) if isinstance(value, b))
        return _check(value, base, where)
    if isinstance(value, list | tuple | Mapping):
        if depth >= DEPTH_MAX:
            raise InvalidObservation(f"{where}: nested more than {DEPTH_MAX} deep")
        _size(value, where)
        if isinstance(value, Mapping):
            for k, v in value.items():
                if not isinstance(k, str):
                    raise InvalidObservation(f"{where}: key {preview(k)} is not a string")
                _check(k, str, f"{where} key")
                _check_free(v, f"{where}[{preview(k)}]", depth + 1, strict)
        else:
            for i, v in enumerate(value):
                _check_free(v, f"{where}[{i}]", depth + 1, strict)
        return value
    if strict:
        raise InvalidObservation(
            f"{where}: expected a JSON value, got {preview(value)} ({type(value).__name__})"
        )
    return value


def _supported(tp: Any) -> bool:
    """Whether :func:`_check` knows ``tp`` (else a record built in Python is checked
    leniently, as a free-form value)."""
    origin = typing.get_origin(tp)
    args = [a for a in typing.get_args(tp) if a is not Ellipsis]
    if origin in (typing.Union, types.UnionType, tuple, dict):
        return all(_supported(a) for a in args)
    if tp in (type(None), Any, object, bool, int, float, str, datetime):
        return True
    return (isinstance(tp, type) and issubclass(tp, enum.Enum)) or attrs.has(tp)


#: Names the compiled tests use.
_NAMES: dict[str, Any] = {"DT": datetime, "TZ": timezone, "TMIN": TIME_MIN, "TMAX": TIME_MAX}


def _test_source(tp: Any, v: str = "v", duration: bool = False) -> str | None:
    """Python source for a cheap test of ``v`` that accepts only values ``_check`` returns
    unchanged (within the input bounds), or ``None`` where there is none (then every value
    takes the full check). It runs with :data:`_NAMES`."""
    if tp is str:
        return (
            f"(type({v}) is str and len({v}) <= {TEXT_MAX} and {v}.isascii() "
            f"and '\\x00' not in {v})"
        )
    if tp is bool:
        return f"({v} is True or {v} is False)"
    if tp is int:
        low, high = (-DURATION_MAX, DURATION_MAX) if duration else (INT_MIN, INT_MAX)
        return f"(type({v}) is int and {low} <= {v} <= {high})"
    if tp is float:
        limit = float(DURATION_MAX) if duration else sys.float_info.max
        return f"(type({v}) is float and {-limit!r} <= {v} <= {limit!r})"
    if tp is datetime:  # a fixed offset: comparing cannot fail
        return f"(type({v}) is DT and type({v}.tzinfo) is TZ and TMIN <= {v} <= TMAX)"
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        options = [o for o in typing.get_args(tp) if o is not type(None)]
        allows_none = len(options) < len(typing.get_args(tp))
        if len(options) == 1 and allows_none:
            inner = _test_source(options[0], v, duration)
            if inner is not None:
                return f"({v} is None or {inner})"
    return None


def _fast_test(tp: Any, duration: bool = False) -> Callable[[Any], bool] | None:
    source = _test_source(tp, "v", duration)
    if source is None:
        return None
    kind = tp.__name__ if isinstance(tp, type) else str(tp)
    owner = f"test[{kind}{', a duration' if duration else ''}]"
    test: Callable[[Any], bool] = compile_function(
        "test", f"def test(v):\n    return {source}\n", dict(_NAMES), owner=owner
    )
    return test


_MISSING = object()


def _qualified(cls: type[Any]) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def fast_builder(cls: type[Any]) -> Callable[[Mapping[str, Any], object], Any] | None:
    """For an observation class: one compiled function that builds it from ``fields`` and
    ``at`` when every given field has a plain type (str, bool, int, float, datetime, or one
    of them or None) and every value, ``at`` included, is within the input bounds, or
    returns ``None`` — for anything else, including every mistake, so that
    :func:`strict_structure` then builds it or says what is wrong. ``None`` (no builder) for
    a class with a required field of another type."""
    attrs.resolve_types(cls)
    fields = [f for f in attrs.fields(cls) if f.init and f.name != "at"]
    lines = [
        "def build(data, at):",
        f"    if not {_test_source(datetime, 'at')}:",
        "        return None",
        "    if not NAMES.issuperset(data):",
        "        return None",
        "    kw = {'at': at}",
    ]
    for f in fields:
        test = _test_source(f.type, "v", is_duration(f.name))
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
        **_NAMES,
        "NAMES": frozenset(f.name for f in fields),
        "M": _MISSING,
        "cls": cls,
    }
    build: Callable[[Mapping[str, Any], object], Any] = compile_function(
        "build", "\n".join(lines), namespace, owner=f"build[{_qualified(cls)}]"
    )
    return build


_Field = tuple[str, Any, bool, "Callable[[Any], bool] | None", bool]
_PLANS: dict[type[Any], tuple[dict[str, _Field], frozenset[str]]] = {}


def _plan(cls: type[Any]) -> tuple[dict[str, _Field], frozenset[str]]:
    """Per class, once: each init field's type, whether it is required, its fast test, and
    whether it is a duration."""
    plan = _PLANS.get(cls)
    if plan is None:
        attrs.resolve_types(cls)
        fields = {
            f.name: (
                f.name,
                f.type,
                f.default is attrs.NOTHING,
                _fast_test(f.type, is_duration(f.name)),
                is_duration(f.name),
            )
            for f in attrs.fields(cls)
            if f.init
        }
        plan = _PLANS[cls] = (fields, frozenset(fields))
    return plan


def _names(keys: Iterable[object]) -> str:
    """Field names for a message: sorted, each bounded, at most five."""
    shown = sorted(k if type(k) is str and len(k) <= 40 else preview(k, 40) for k in keys)
    more = f" (and {len(shown) - 5} more)" if len(shown) > 5 else ""
    return ", ".join(shown[:5]) + more


def strict_structure(cls: type[T], data: Mapping[str, Any], where: str = "") -> T:
    """Build ``cls`` from ``data``, refusing unknown fields, missing fields, wrong types and
    values outside the input bounds."""
    fields, names = _plan(cls)
    label = where or cls.__name__
    if not names.issuperset(data):
        unknown = set(data) - names
        raise InvalidObservation(
            f"{label}: unknown field(s) {_names(unknown)}; expected {', '.join(fields)}"
        )
    kwargs: dict[str, Any] = {}
    for name, tp, required, fast, duration in fields.values():
        if name not in data:
            if required:
                raise InvalidObservation(f"{label}: missing required field {name!r}")
            continue
        value = data[name]
        if fast is not None and fast(value):
            kwargs[name] = value
        elif tp is datetime and type(value) is str and (parsed := _time_or_none(value)):
            kwargs[name] = parsed
        else:
            kwargs[name] = _check(value, tp, f"{label}.{name}", duration)
    try:
        return cls(**kwargs)
    except LifecycleError:
        raise
    except Exception as e:  # a validator's refusal (or its own failure)
        raise InvalidObservation(f"{label}: {brief(e)}") from None


# -- records built in Python ------------------------------------------------------------------
_VALIDATORS: dict[type[Any], Callable[[Any, str], None]] = {}
#: The observation :meth:`~lifecycle.Machine.observation` built last (already checked): a
#: replay builds one and observes it at once, so it is not checked twice.
built: list[Any] = [None]


def validate(record: Any, where: str = "") -> None:
    """Refuse (:class:`InvalidObservation`) an observation, or a record nested in one, that
    a host built in Python and whose fields break their declared types or the input bounds.
    Compiled once per class: a value that passes a field's cheap test costs no call."""
    if record is built[0]:
        return
    check = _VALIDATORS.get(record.__class__)
    if check is None:
        check = validator(record.__class__)
    check(record, where)


def validator(cls: type[Any]) -> Callable[[Any, str], None]:
    """:func:`validate`'s compiled check for the records of ``cls`` (built once per class,
    then remembered): a caller that knows the class holds it and calls it directly. It does
    not skip :data:`built`'s record: the caller does."""
    check = _VALIDATORS.get(cls)
    if check is None:
        check = _VALIDATORS[cls] = _validator(cls)
    return check


def _validator(cls: type[Any]) -> Callable[[Any, str], None]:
    if not attrs.has(cls):
        return lambda record, where: None
    attrs.resolve_types(cls)
    namespace: dict[str, Any] = dict(_NAMES)
    fast: list[str] = []  # one test per field, all in one expression: the common case
    slow = ["def full(o, where):"]  # field by field, to say which one is wrong
    for i, f in enumerate(attrs.fields(cls)):
        if f.type is None:
            continue
        duration = is_duration(f.name)
        namespace[f"S{i}"] = _slow(cls, f.name, f.type, duration)
        test = _test_source(f.type, "v", duration)
        slow.append(f"    v = o.{f.name}")
        if test is None:
            slow.append(f"    S{i}(v, where)")
            fast.append("False")
        else:
            slow += [f"    if not {test}:", f"        S{i}(v, where)"]
            fast.append(f"((v := o.{f.name}) is v and {test})")  # ``is v``: always true
    slow.append("    return None")
    lines = [
        *slow,
        "def check(o, where):",
        f"    if not ({' and '.join(fast) or 'True'}):",
        "        full(o, where)",
    ]
    check: Callable[[Any, str], None] = compile_function(
        "check", "\n".join(lines), namespace, owner=f"validate[{_qualified(cls)}]"
    )
    return check


def _slow(cls: type[Any], name: str, tp: Any, duration: bool) -> Callable[[Any, str], None]:
    """The full check of one field of a record built in Python (a message on refusal)."""
    supported = _supported(tp)

    def slow(value: Any, where: str) -> None:
        label = f"{where or cls.__name__}.{name}"
        if supported:
            checked = _check(value, tp, label, duration)
            if not _kept(value, checked):  # the record would keep the unconverted value
                raise InvalidObservation(
                    f"{label}: expected {_describe(tp)}, got {preview(value)} "
                    f"({type(value).__name__}): a record built in Python holds the type "
                    "itself (Machine.observation converts text)"
                )
        else:
            _check_free(value, label, strict=False)

    return slow


def _kept(value: Any, checked: Any) -> bool:
    """Whether a record built in Python may keep ``value`` as it is, ``checked`` being what
    :func:`_check` made of it: the same value, an integer for a number, or a tuple (mapping)
    of such. Text for a time or an enum, a list for a tuple (mutable after the write), a
    mapping for a record are not kept: the status and journal would hold them unconverted."""
    if checked is value:
        return True
    if type(checked) is float:
        return isinstance(value, int | float)
    if type(checked) is tuple:
        return (
            isinstance(value, tuple)
            and len(value) == len(checked)
            and all(_kept(v, c) for v, c in zip(value, checked, strict=True))
        )
    if type(checked) is dict:
        return isinstance(value, Mapping) and all(
            _kept(k, ck) and _kept(v, cv)
            for (k, v), (ck, cv) in zip(value.items(), checked.items(), strict=True)
        )
    return False
