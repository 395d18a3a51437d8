"""A proposed change to the Pod table, to try on recorded traffic before shipping it: the
Warning a failed instance sends names its exit code.

    lifecycle replay examples/traces/faults.jsonl \
        --compare-with examples/proposed_tables.py:proposed

replays the trace under the shipped tables and under these, and prints a unified diff of the
events that change (exit 1; 0 when a trace's events are the same under both).
"""

import attrs

from lifecycle import MachineRegistry, Row, Table, default_registry
from lifecycle.machines import pod

#: The proposed message of the Running/Initializing -> Failed row (was: "external instance
#: entered a failed state"); placeholders name the observation's fields.
FAILED_MESSAGE = "external instance failed with exit code {exit_code}"


def _proposed(row: Row) -> Row:
    if row.observation is pod.InstanceFailed and row.target == pod.FAILED:
        return attrs.evolve(row, message=FAILED_MESSAGE)
    return row


class ProposedPod(pod.PodMachine):
    """The shipped Pod machine with the proposed table (states, guards and effects unchanged)."""

    table = Table(
        "pod",
        states=pod.TABLE.states,
        initial=pod.TABLE.initial,
        terminal=pod.TABLE.terminal,
        observations=pod.TABLE.observations,
        rows=tuple(_proposed(row) for row in pod.ROWS),
    )


def proposed() -> MachineRegistry:
    """The shipped machines, with the proposed Pod (``--compare-with FILE.py:proposed``)."""
    return MachineRegistry(
        ProposedPod() if machine.name == "pod" else machine
        for machine in default_registry().values()
    )
