"""When an object next needs a ``Tick``, from its table's timer rows (ADR 0149).

A :class:`~lifecycle.Result` holds a status, not its machine; the machine is found once per
status class among the :class:`~lifecycle.Machine` classes (a status class names one table).
``due`` reads a store's records: what is due survives a restart, and the hot path keeps no
per-object state.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from ._core.machine import Machine
from ._core.refs import ObjectRef
from ._core.table import Table

_TABLES: dict[type[Any], Table] = {}


def _machine_classes() -> Iterable[type[Machine[Any]]]:
    pending: list[type[Machine[Any]]] = [Machine]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        yield cls


def table_for(status: Any) -> Table | None:
    """The table of the machine whose statuses are of ``status``'s class, or ``None``.

    Where several machine classes share the status class with different tables (a subclass
    that changes its table), the one the others derive from answers; a ``TypeError`` when
    none does. Such a host asks its machine: :meth:`~lifecycle.Machine.next_tick`."""
    cls = status.__class__
    table = _TABLES.get(cls)
    if table is not None:
        return table
    found: dict[int, tuple[Table, type[Any]]] = {}
    for kind in cls.__mro__:
        for machine in _machine_classes():
            candidate = getattr(machine, "table", None)
            if getattr(machine, "status_type", None) is kind and isinstance(candidate, Table):
                found.setdefault(id(candidate), (candidate, machine))
        if found:
            break
    if not found:
        return None
    roots = [
        (t, m)
        for t, m in found.values()
        if not any(m is not o and issubclass(m, o) for _, o in found.values())
    ]
    if len(roots) != 1:
        names = sorted(m.__name__ for _, m in roots)
        raise TypeError(
            f"statuses of {cls.__name__} belong to {', '.join(names)}: ask the machine, "
            "machine.next_tick(status)"
        )
    table = _TABLES[cls] = roots[0][0]
    return table


def next_tick(status: Any) -> datetime | None:
    """When ``status`` next needs a ``Tick``, or ``None`` (no status, no machine, no timer)."""
    if status is None:
        return None
    table = table_for(status)
    return None if table is None else table.next_tick(status)


def seconds_until(when: datetime | None, now: datetime) -> float | None:
    """Seconds from ``now`` to ``when`` (0.0 when it is past), rounded up to the millisecond
    (a host that sleeps that long does not wake a hair early); ``None`` for ``None``."""
    if when is None:
        return None
    if when <= now:
        return 0.0
    return math.ceil((when - now).total_seconds() * 1000) / 1000


def due(machines: Iterable[Machine[Any]], records: Any, now: datetime) -> list[ObjectRef]:
    """The refs among ``records(machine)`` whose next ``Tick`` is at or before ``now``,
    machine by machine (machines without a timer row are not read)."""
    out: list[ObjectRef] = []
    for machine in machines:
        if machine.table.timers:
            out += due_among(machine, records(machine), now)
    return out


def due_among(machine: Machine[Any], records: Iterable[Any], now: datetime) -> list[ObjectRef]:
    """The refs of ``machine``'s ``records`` whose next ``Tick`` is at or before ``now``."""
    out: list[ObjectRef] = []
    for record in records:
        when = machine.next_tick(record.status)
        if when is not None and when <= now:
            out.append(record.ref)
    return out
