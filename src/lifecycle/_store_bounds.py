"""Whether a store holds everything its machines accept (ADR 0144), checked when a runner is
built.

A machine's declared limits (:class:`~lifecycle.tables.Limits`, ADR 0100) say how large an
accepted observation may make its status: a Workflow of 10 000 groups keeps 10 000 group
records. A store may hold less: the Kubernetes store keeps each record in one condition
message (32 KiB). A store declares its bound with ``record_limit(kind)`` -- the most bytes one
record of ``kind`` may take, ``None`` for no bound the limits can reach (memory, SQLite,
PostgreSQL) -- and measures a status with ``record_size(machine, status)``. For each shipped
machine whose status grows with a limit, :func:`check_bounds` builds its largest status at
the limit in force (measured at two small counts and extended linearly: deflate does no
better per item on more of them) and refuses the runner with :class:`StoreTooSmall`, naming
the limit to lower and the count that fits, instead of a commit refused on every retry.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs

from ._core.errors import LifecycleError
from ._core.limits import Limits
from ._core.machine import Machine
from ._core.refs import ObjectRef

__all__ = ["StoreTooSmall", "check_bounds"]

_AT = datetime(2026, 1, 1, tzinfo=UTC)


class StoreTooSmall(LifecycleError, ValueError):
    """A runner refused to start: a status its machines accept at a declared limit would not
    fit its store's record bound, so its commit would be refused on every retry. The message
    names the limit, the count that fits, and the store setting to raise; ``limits`` and
    ``field`` are that limit (``limits.set(field, fits)`` lowers it), ``fits`` the largest
    count the store holds (0: none)."""

    def __init__(self, message: str, limits: Limits, field: str, fits: int) -> None:
        super().__init__(message)
        self.limits = limits
        self.field = field
        self.fits = fits


@attrs.frozen(slots=True)
class _Growth:
    """A machine whose status grows with one declared limit: ``build(machine, n)`` is its
    largest status with ``n`` of them."""

    kind: str
    limits: Callable[[], Limits]
    field: str
    build: Callable[[Machine[Any], int], Any]


def _workflow_limits() -> Limits:
    from .machines.workflow import Partitioned

    return Partitioned.limits


def _workflow_status(machine: Machine[Any], groups: int) -> Any:
    """A Workflow of ``groups`` groups, each with a Job of the longest name Kubernetes takes
    (63 characters) and its uid launched, started and failed."""
    from .machines.workflow import Partitioned, Submitted

    ref = ObjectRef("Workflow", "n" * 63, "w" * 63, str(uuid.UUID(int=0)))
    start = [
        Submitted(at=_AT, owner_kind="Certification", owner="o" * 63, owner_uid=ref.uid),
        Partitioned(at=_AT, nodes=groups, groups=groups, nodes_per_job=1),
    ]
    status = machine.fold(ref, start)
    filled = tuple(
        attrs.evolve(
            group,
            state="Running",
            job=f"{'j' * 50}-{i:012d}",
            job_uid=str(uuid.UUID(int=(i + 1) * 0x9E3779B97F4A7C15 % (1 << 128))),
            retries=i % 7,
            started_at=_AT + timedelta(seconds=i),
            job_state="Failed",
            job_reason="BackoffLimitExceeded",
            workload_start_time=_AT + timedelta(seconds=i, microseconds=i),
            failed_at=_AT + timedelta(seconds=2 * i + 1),
        )
        for i, group in enumerate(status.groups)
    )
    return attrs.evolve(status, groups=filled)


#: The shipped machines whose status grows with a declared limit, by machine name.
GROWTH: dict[str, _Growth] = {
    "workflow": _Growth("Workflow", _workflow_limits, "groups", _workflow_status),
}

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
    for name, growth in GROWTH.items():
        if name not in machines:
            continue
        bound = limit_of(growth.kind)
        if bound is None:
            continue
        machine = machines[name]
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
            f"{type(store).__name__} holds at most {bound} bytes per {growth.kind} record, "
            f"but a {growth.kind} at {where} = {count} needs about {needed} bytes: {advice}, or "
            f"raise the store's bound (max_record_bytes, where the resource allows it); "
            f"else its commits would be refused on every retry (ADR 0144)",
            limits,
            growth.field,
            fits,
        )


def _measure(
    machine: Machine[Any],
    growth: _Growth,
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
