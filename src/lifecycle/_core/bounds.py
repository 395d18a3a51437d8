"""Input bounds: what an observation field or an object reference may hold (ADR 0073).

Everything a machine accepts is stored, replayed and later computed with (a deadline is a
time plus a duration). So every value is bounded where it enters, for every store alike,
and nothing accepted can fail to apply later:

- times are timezone-aware and within :data:`TIME_MIN` .. :data:`TIME_MAX` (UTC), which
  leaves room for many of the longest duration added to the latest time before Python's
  year 9999;
- a duration (a number field named ``*_s`` or ``*_seconds``) is at most
  :data:`DURATION_MAX` seconds either way;
- integers fit a signed 64-bit column; other numbers are finite (no NaN, no infinity);
- text has no NUL character and no lone surrogate (PostgreSQL refuses the one, UTF-8 the
  other) and is at most :data:`TEXT_MAX` characters; an object reference's kind, namespace,
  name and uid at most :data:`REF_MAX` (kind, name and uid not empty);
- a list or mapping holds at most :data:`ITEMS_MAX` entries, and a free-form (``Any``)
  value nests at most :data:`DEPTH_MAX` deep.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta

from .errors import InvalidReference, preview
from .refs import ObjectRef

#: The earliest time an observation may carry or name (inclusive).
TIME_MIN = datetime(1970, 1, 1, tzinfo=UTC)
#: The latest time an observation may carry or name (inclusive).
TIME_MAX = datetime(9000, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
#: The longest duration, in seconds (about 31.7 years).
DURATION_MAX = 1_000_000_000
#: Integers: a signed 64-bit range (Kubernetes' int64, every store's integer column).
INT_MIN, INT_MAX = -(2**63), 2**63 - 1
#: The longest text of an observation field, in characters.
TEXT_MAX = 65_536
#: The longest kind, namespace, name or uid of an object reference, in characters: twice
#: Kubernetes' longest name (253), so names this library derives from two of them fit.
REF_MAX = 512
#: The most entries of one list or mapping.
ITEMS_MAX = 10_000
#: The deepest nesting of a free-form (``Any``) value.
DEPTH_MAX = 32

# The room left after TIME_MAX before Python's last datetime, in whole durations.
assert datetime.max.replace(tzinfo=UTC) - TIME_MAX > 30 * timedelta(seconds=DURATION_MAX)

_SURROGATE = re.compile("[\ud800-\udfff]")


def is_duration(name: str) -> bool:
    """Whether a number field named ``name`` is a duration in seconds (the naming rule)."""
    return name.endswith(("_s", "_seconds"))


def text_problem(value: str, limit: int = TEXT_MAX) -> str | None:
    """What is wrong with ``value`` as stored text, or ``None``."""
    if len(value) > limit:
        return f"is {len(value)} characters long, more than {limit}"
    if "\x00" in value:
        return "contains a NUL character"
    if not value.isascii() and _SURROGATE.search(value):
        return "contains a lone surrogate (not valid Unicode text)"
    return None


def time_problem(value: datetime) -> str | None:
    """What is wrong with ``value`` as an observed time, or ``None``."""
    try:
        if value.utcoffset() is None:
            return "has no timezone (write Z or +00:00)"
        inside = TIME_MIN <= value <= TIME_MAX
    except Exception:  # a tzinfo that cannot say its offset
        return "has a timezone that gives no valid UTC offset"
    if not inside:
        return f"is outside {TIME_MIN:%Y-%m-%d}..{TIME_MAX:%Y-%m-%d} (UTC)"
    return None


def int_problem(value: int, duration: bool = False) -> str | None:
    """What is wrong with ``value`` as a stored integer (a duration if ``duration``)."""
    if duration and not -DURATION_MAX <= value <= DURATION_MAX:
        return f"is longer than {DURATION_MAX} seconds"
    if not INT_MIN <= value <= INT_MAX:
        return "does not fit a signed 64-bit integer"
    return None


def float_problem(value: float, duration: bool = False) -> str | None:
    """What is wrong with ``value`` as a stored number (a duration if ``duration``)."""
    if not math.isfinite(value):
        return "is not a finite number"
    if duration and not -DURATION_MAX <= value <= DURATION_MAX:
        return f"is longer than {DURATION_MAX} seconds"
    return None


_REF_FIELDS = ("kind", "namespace", "name", "uid")


def check_ref(ref: object) -> None:
    """Refuse an object reference whose kind, namespace, name or uid is not bounded text
    (:class:`~lifecycle.InvalidReference`). A reference once accepted is remembered by
    identity (references are immutable), so a host that reuses its refs pays once."""
    exact = type(ref) is ObjectRef
    if exact:
        if _ACCEPTED.get(id(ref)) is ref:
            return
        kind, namespace, name, uid = ref.kind, ref.namespace, ref.name, ref.uid  # type: ignore[attr-defined]
        if (
            type(kind) is str
            and type(namespace) is str
            and type(name) is str
            and type(uid) is str
            and 0 < len(kind) <= REF_MAX
            and len(namespace) <= REF_MAX
            and 0 < len(name) <= REF_MAX
            and 0 < len(uid) <= REF_MAX
            and (joined := kind + namespace + name + uid).isascii()
            and "\x00" not in joined
        ):
            _accept(ref)
            return
    for field in _REF_FIELDS:
        value = getattr(ref, field, None)
        if not isinstance(value, str):
            raise InvalidReference(f"object {field}: expected a string, got {preview(value)}")
        problem = text_problem(value, REF_MAX)
        if problem is None and not value and field != "namespace":
            problem = "is empty"
        if problem is not None:
            raise InvalidReference(f"object {field} {preview(value)} {problem}")
    if exact:
        _accept(ref)


def _accept(ref: object) -> None:
    if len(_ACCEPTED) >= _ACCEPTED_MAX:
        _ACCEPTED.clear()
    _ACCEPTED[id(ref)] = ref  # holding the ref keeps its id from being reused


_ACCEPTED: dict[int, object] = {}
_ACCEPTED_MAX = 4096
