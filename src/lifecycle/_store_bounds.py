"""Whether a store holds everything its machines accept (ADR 0144), checked when a runner is
built.

A machine's declared limits (:class:`~lifecycle.tables.Limits`, ADR 0100) say how large an
accepted observation may make its status: a Workflow of 10 000 groups keeps 10 000 group
records. A store may hold less: the Kubernetes store keeps each record in one condition
message (32 KiB). A store declares its bound with ``record_limit(kind)`` -- the most bytes one
record of ``kind`` may take, ``None`` for no bound the limits can reach (memory, SQLite,
PostgreSQL) -- and measures a status with ``record_size(machine, status)``. For each machine
whose status grows with a limit (its ``growth``), :func:`check_bounds` builds its largest
status at the limit in force (measured at two small counts and extended linearly: deflate does no
better per item on more of them) and refuses the runner with :class:`StoreTooSmall`, naming
the limit to lower and the count that fits, instead of a commit refused on every retry.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._core.errors import LifecycleError
from ._core.limits import Limits
from ._core.machine import Growth, Machine

__all__ = ["StoreTooSmall", "check_bounds"]


class StoreTooSmall(LifecycleError, ValueError):
    """A runner refused to start: a status its machines accept at a declared limit would not
    fit its store's record bound, so its commit would be refused on every retry. The message
    names the limit, the count that fits, and the store setting to raise; ``limits`` and
    ``field`` are that limit (``limits.set(field, fits)`` lowers it), ``fits`` the largest
    count the store holds (0: none).

    Args:
        message: the refusal, naming the setting to raise.
        limits: the record class's limits.
        field: the count field whose limit does not fit.
        fits: the largest count the store holds.
    """

    def __init__(self, message: str, limits: Limits, field: str, fits: int) -> None:
        super().__init__(message)
        self.limits = limits
        self.field = field
        self.fits = fits


#: The two counts the growth is measured at.
_SMALL, _LARGER = 32, 96


def check_bounds(store: object, machines: Any) -> None:
    """Refuse (:class:`StoreTooSmall`) a ``store`` whose record bound a status of
    ``machines`` (a :class:`~lifecycle.machines.MachineRegistry`, or names to machines)
    reaches at a declared limit in force. A store without ``record_limit`` is not bounded."""
    limit_of = getattr(store, "record_limit", None)
    size_of = getattr(store, "record_size", None)
    if not callable(limit_of) or not callable(size_of):
        return
    for machine in machines.values():
        growth: Growth | None = machine.growth
        if growth is None:
            continue
        kind = machine.kind
        bound = limit_of(kind)
        if bound is None:
            continue
        limits = growth.limits()
        count = limits[growth.field]
        needed, fits = _measure(machine, growth, count, bound, size_of)
        if needed <= bound:
            continue
        where = f"{limits.owner}[{growth.field!r}]"
        cls = limits.owner.rsplit(".", 1)[0].rsplit(".", 1)[-1]
        advice = (
            f"lower it ({cls}.limits.set({growth.field!r}, {fits}) fits)"
            if fits >= 1
            else "no count of them fits"
        )
        raise StoreTooSmall(
            f"{type(store).__name__} holds at most {bound} bytes per {kind} record, "
            f"but a {kind} at {where} = {count} needs about {needed} bytes: {advice}, or "
            f"raise the store's bound (max_record_bytes, where the resource allows it); "
            f"else its commits would be refused on every retry (ADR 0144)",
            limits,
            growth.field,
            fits,
        )


def _measure(
    machine: Machine[Any],
    growth: Growth,
    count: int,
    bound: int,
    size_of: Callable[[Machine[Any], Any], int],
) -> tuple[int, int]:
    """``(bytes a status at count takes, the largest count that fits bound)``."""
    if count <= _LARGER:
        needed = size_of(machine, growth.build(machine, count))
        if needed <= bound:
            return needed, count
        sizes = [size_of(machine, growth.build(machine, n)) for n in range(1, count)]
        return needed, max((n for n, s in enumerate(sizes, 1) if s <= bound), default=0)
    small = size_of(machine, growth.build(machine, _SMALL))
    larger = size_of(machine, growth.build(machine, _LARGER))
    each = max((larger - small) / (_LARGER - _SMALL), 1.0)
    needed = int(larger + each * (count - _LARGER)) + 1
    fits = _LARGER + int((bound - 1 - larger) / each) if larger < bound else 0
    return needed, min(fits, count)
