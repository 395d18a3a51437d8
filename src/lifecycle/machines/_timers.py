"""When a timer row's guard first holds: the deadlines the shipped tables declare (ADR 0149).

A timer compares an observation's ``at`` with a status time plus a duration, in seconds as a
float or as a ``timedelta``, strictly or not. :func:`expiry` starts from ``since + seconds``
and moves by a microsecond (the resolution of ``datetime``) until the timer's own comparison
says the first moment it holds, so a deadline and its guard agree to the microsecond.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from .._core.observation import Tick

_STEP = timedelta(microseconds=1)
#: A deadline already past whatever the time is: a ``Tick`` now changes the status.
EARLIEST = datetime.min.replace(tzinfo=UTC)


def expiry(since: datetime, seconds: float, holds: Callable[[datetime], bool]) -> datetime | None:
    """The first moment ``holds`` (a timer's comparison, false then true as time passes),
    starting from ``since + seconds``; ``None`` when it never holds (a duration beyond the
    calendar, or not a number)."""
    try:
        at = since + timedelta(seconds=seconds)
        for _ in range(4):
            if not holds(at - _STEP):
                break
            at -= _STEP
        for _ in range(4):
            if holds(at):
                return at
            at += _STEP
    except (OverflowError, ValueError):
        return None
    return None


def ticked(guard: Callable[[Any, Any], bool], status: Any) -> Callable[[datetime], bool]:
    """Whether ``guard`` holds for ``status`` on a ``Tick`` at a given moment."""
    return lambda at: guard(status, Tick(at=at))
