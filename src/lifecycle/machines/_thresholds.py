"""Performance thresholds of a Job: the records, and the ``ValidationFailed`` verdict.

Upstream's threshold language and the note text of ``ThresholdViolated`` /
``InvalidThresholdExpression`` / ``UnknownThresholdKey`` are not known (domain doc §(f)); the
choice here: a threshold is a measurement ``key`` and an expression ``OP NUMBER`` with OP one
of ``>= <= > < == !=``; the first threshold that is invalid or missed decides the verdict.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Iterable

import attrs

from .._core.errors import preview
from ._conditions import FALSE, TRUE, go_list

UNKNOWN_THRESHOLD_KEY = "UnknownThresholdKey"
MEASUREMENT_TIMEOUT = "MeasurementTimeout"
THRESHOLD_VIOLATED = "ThresholdViolated"
INVALID_THRESHOLD_EXPRESSION = "InvalidThresholdExpression"
THRESHOLDS_MET = "ThresholdsMet"

MSG_THRESHOLDS_MET = "All performance thresholds satisfied"
MSG_MEASUREMENT_TIMEOUT = "Measurement data not available within {} for keys: {}"
MSG_UNKNOWN_KEY = "Unknown threshold key(s): {}"
MSG_VIOLATED = "Threshold violated: {} = {:g}, required {}"
MSG_INVALID_EXPRESSION = "Invalid threshold expression for {}: {} (expected OP NUMBER)"

#: What the GoodputMeasurement reports; a threshold on any other key is UnknownThresholdKey.
MEASUREMENT_KEYS = (
    "goodput",
    "badput",
    "mfu",
    "step_time_seconds",
    "tokens_per_second",
    "bus_bandwidth_gbps",
)

_OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    ">": operator.gt,
    "<": operator.lt,
    "==": operator.eq,
    "!=": operator.ne,
}
_EXPR = re.compile(r"^\s*(>=|<=|==|!=|>|<)\s*([-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?)\s*$")

#: (status, reason, message) of a ValidationFailed condition.
Decision = tuple[str, str, str]


@attrs.frozen(slots=True)
class Threshold:
    """``key`` must satisfy ``expr`` (``OP NUMBER``, e.g. ``">= 0.9"``).

    Attributes:
        key: the measurement the threshold is on (one of the GoodputMeasurement's keys, else the
            verdict is ``UnknownThresholdKey``).
        expr: the comparison it must pass, an operator and a number (``">= 0.9"``).
    """

    key: str
    expr: str


@attrs.frozen(slots=True)
class Measurement:
    """One measured value under ``key``, compared against the Job's thresholds of that key.

    Attributes:
        key: what was measured (``goodput``, ``mfu`` ...).
        value: the value measured.
    """

    key: str
    value: float


def missing_keys(thresholds: Iterable[Threshold], measurements: Iterable[Measurement]) -> list[str]:
    have = {m.key for m in measurements}
    return [t.key for t in thresholds if t.key not in have]


def decide(
    thresholds: tuple[Threshold, ...],
    known_keys: tuple[str, ...],
    measurements: tuple[Measurement, ...],
) -> Decision | None:
    """The verdict, or ``None`` while a key has no value yet. Unknown keys are decided at
    once (before waiting for data)."""
    unknown = [t.key for t in thresholds if t.key not in known_keys]
    if unknown:
        return TRUE, UNKNOWN_THRESHOLD_KEY, MSG_UNKNOWN_KEY.format(go_list(unknown))
    if missing_keys(thresholds, measurements):
        return None
    values = {m.key: m.value for m in measurements}
    for t in thresholds:
        match = _EXPR.match(t.expr)
        if match is None:
            message = MSG_INVALID_EXPRESSION.format(t.key, preview(t.expr))
            return TRUE, INVALID_THRESHOLD_EXPRESSION, message
        op, bound = match.group(1), float(match.group(2))
        value = values[t.key]
        if math.isnan(value) or not _OPS[op](value, bound):
            return TRUE, THRESHOLD_VIOLATED, MSG_VIOLATED.format(t.key, value, f"{op} {bound:g}")
    return FALSE, THRESHOLDS_MET, MSG_THRESHOLDS_MET


def merge(
    measurements: tuple[Measurement, ...], new: Iterable[Measurement]
) -> tuple[Measurement, ...]:
    """The latest value per key, sorted by key."""
    values = {m.key: m for m in measurements}
    for m in new:
        values[m.key] = m
    return tuple(sorted(values.values(), key=lambda m: m.key))
