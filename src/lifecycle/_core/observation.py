"""The observation base: every observation carries the time it was made, and nothing else is
implicit. Time enters a machine only through ``at``, never a clock read inside it, so the same
observations replay to the same statuses anywhere (ADR 0003)."""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar

import attrs


@attrs.frozen(slots=True, kw_only=True)
class Observation:
    """What a provider or a child object was seen to do, at ``at`` (timezone-aware).

    Attributes:
        at: when it was seen, timezone-aware: the only time a machine ever reads.
    """

    at: datetime

    #: Set by subclasses that are time-only observations (``Tick``).
    is_tick: ClassVar[bool] = False

    @classmethod
    def name(cls) -> str:
        """The observation's name, as traces and journals write it.

        Returns:
            The class's name.
        """
        return cls.__name__


@attrs.frozen(slots=True, kw_only=True)
class Tick(Observation):
    """Time passed. Timeouts and grace windows are decided on ticks, never on a clock.

    Attributes:
        at: the host's time now; a timer row compares it with its deadline.
    """

    is_tick: ClassVar[bool] = True
