"""Test machines that declare fallback rows where the shipped ones do not.

The shipped Pod machine declares no fallback (every lost Pod write is redone by the next
poll), so the runner's fallback mechanics (ids, wording, batching) are exercised on a copy of it
whose rows entering a Warning state declare ``fallback=True``.
"""

from __future__ import annotations

from typing import Any

import attrs

from lifecycle import MachineRegistry
from lifecycle._core.machine import Machine
from lifecycle._core.refs import EventType
from lifecycle._core.table import Table
from lifecycle.machines import default_registry
from lifecycle.machines.pod import PodMachine


def declaring_fallbacks(table: Table) -> Table:
    """``table`` with ``fallback=True`` on every row that enters a state with a Warning."""
    rows = [
        attrs.evolve(r, fallback=True) if r.event is EventType.WARNING and r.reason else r
        for r in table.rows
    ]
    return Table(
        table.machine,
        states=table.states,
        initial=table.initial,
        terminal=table.terminal,
        observations=table.observations,
        rows=rows,
        context=table.context,
    )


class FallbackPodMachine(PodMachine):
    """The Pod machine, with a fallback declared on every row entering a Warning state."""

    table = declaring_fallbacks(PodMachine.table)


FALLBACK_POD = FallbackPodMachine()


def with_fallback_pod() -> MachineRegistry:
    """The default machines, the Pod replaced by :data:`FALLBACK_POD`."""
    machines: list[Machine[Any]] = [
        FALLBACK_POD if m.name == "pod" else m for m in default_registry().values()
    ]
    return MachineRegistry(machines)
