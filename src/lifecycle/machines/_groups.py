"""A Workflow's group bookkeeping (domain doc §(a) "Workflow", Groups and Timeout).

Pure functions over :class:`Group` records: what a Job report or a Tick makes of the groups
of the current iteration, and whether that completes the iteration or the Workflow.

- ``terminal = hardware || failed || succeeded``; ``jobFailed = failed || hardware ||
  validation``; a Succeeded Job still awaiting its verdict keeps its group Running.
- jobFailed: the workload is deleted and the group held Running for the drain grace, then
  retried (a fresh Pending group) while ``retries < retryFailedGroups`` and the Job did not
  time out, else Failed. The window is decided on a Tick (a zero grace: at once).
- Timeout (Tick only): ``now - workloadStartTime > timeoutPerJob``; never while the workload
  exists but was not yet seen running; before any workload exists, from the group's start.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

import attrs

from .._core.machine import replace
from ._conditions import FAILED, SUCCEEDED, TERMINAL, seconds
from ._timers import EARLIEST, expiry

PENDING = "Pending"
RUNNING = "Running"
ITERATION_COMPLETED = "IterationCompleted"
#: The Job's Failed reason when the Workflow timed it out (never retried).
JOB_TIMED_OUT = "JobTimedOut"


@attrs.frozen(slots=True)
class Group:
    """One partition of the nodes: its current Job, and that Job's last committed status.

    Attributes:
        index: the group's position among the Workflow's groups, from 0.
        state: the group's state (``Pending``, ``Running``, ``Succeeded``, ``Failed``).
        job: the name of the group's current Job.
        job_uid: that Job's UID, so a report from an older Job of the same name is told apart.
        retries: how many times the group was retried after its Job failed.
        started_at: when the group's Job was launched: its timeout counts from here while the Job
            has no workload.
        job_state: the Job's state as last reported.
        job_reason: the Job's reason as last reported.
        hardware_failed: the Job reported a hardware failure.
        validation_failed: the Job's measurements failed its thresholds.
        awaiting_validation: the Job succeeded and its verdict is pending, so the group stays
            Running.
        workload_start_time: when the Job's workload started: its timeout counts from here.
        workload_exists: the Job's workload exists.
        failed_at: when the Job's failure was first seen: the drain window starts.
        timed_out: the Workflow timed the Job out, so the group is never retried.
    """

    index: int
    state: str = PENDING
    job: str = ""
    job_uid: str = ""
    retries: int = 0
    started_at: datetime | None = None
    job_state: str = ""
    job_reason: str = ""
    hardware_failed: bool = False
    validation_failed: bool = False
    awaiting_validation: bool = False
    workload_start_time: datetime | None = None
    workload_exists: bool = False
    #: When jobFailed was first seen: the drain window starts.
    failed_at: datetime | None = None
    #: The Workflow wrote JobTimedOut on this group's Job: it is never retried.
    timed_out: bool = False

    @property
    def job_failed(self) -> bool:
        return self.job_state == FAILED or self.hardware_failed or self.validation_failed

    @property
    def job_terminal(self) -> bool:
        return self.job_state in TERMINAL


class Spec(Protocol):
    """What the bookkeeping reads from a Workflow status."""

    @property
    def drain_grace_s(self) -> float: ...
    @property
    def retry_failed_groups(self) -> int: ...
    @property
    def timeout_per_job_s(self) -> float | None: ...
    @property
    def iteration(self) -> int: ...
    @property
    def iterations(self) -> int: ...
    @property
    def failed_groups(self) -> int: ...
    @property
    def hardware_failures(self) -> bool: ...
    @property
    def validation_failures(self) -> bool: ...


@attrs.frozen(slots=True)
class Plan:
    """What the groups become, and whether that ends the iteration or the Workflow."""

    groups: tuple[Group, ...]
    iteration: int
    failed_groups: int
    hardware: bool
    validation: bool
    outcome: str  # RUNNING, ITERATION_COMPLETED, SUCCEEDED or FAILED


def settle(spec: Spec, g: Group, at: datetime, tick: bool) -> Group:
    """One Running group after its Job's latest report (and, on a Tick, the clock)."""
    if g.job_state == SUCCEEDED and g.awaiting_validation and not g.job_failed:
        return g  # the verdict is pending: the group stays Running
    if g.job_failed:
        return _drained(spec, g, at, tick)
    if g.job_state == SUCCEEDED:
        return replace(g, state=SUCCEEDED)
    limit = spec.timeout_per_job_s
    if tick and limit is not None and not g.timed_out and not g.job_terminal:
        start = _timer_start(g)
        if start is not None and seconds(at, start) > limit:
            return replace(g, timed_out=True)
    return g


def _drained(spec: Spec, g: Group, at: datetime, tick: bool) -> Group:
    """A group whose Job failed: its drain window opens (``failed_at``); once the grace is
    over, it is retried (back to Pending) while retries are left and it did not time out,
    else it fails."""
    failed_at = g.failed_at or at
    g = g if g.failed_at is not None else replace(g, failed_at=failed_at)
    grace = spec.drain_grace_s
    if (tick or grace == 0) and seconds(at, failed_at) >= grace:
        timed_out = g.timed_out or g.job_reason == JOB_TIMED_OUT
        if g.retries < spec.retry_failed_groups and not timed_out:
            return Group(g.index, retries=g.retries + 1)  # the Job is deleted: Pending
        return replace(g, state=FAILED)
    return g


def _timer_start(g: Group) -> datetime | None:
    """Where a group's timeout is measured from: its workload's start, or with no workload
    yet, the group's own."""
    start = g.workload_start_time
    if start is None and not g.workload_exists:
        start = g.started_at
    return start


def deadline(spec: Spec, groups: Sequence[Group]) -> datetime | None:
    """The first moment a Tick moves a Running group (its drain grace or its timeout runs
    out), or ``None``: no Running group has a timer (ADR 0149)."""
    found = [d for g in groups if g.state == RUNNING and (d := _deadline(spec, g)) is not None]
    return min(found, default=None)


def _deadline(spec: Spec, g: Group) -> datetime | None:
    """When :func:`settle` on a Tick first changes ``g`` (its branches, in its order)."""

    def moves(at: datetime) -> bool:
        return settle(spec, g, at, True) != g

    if g.job_state == SUCCEEDED and g.awaiting_validation and not g.job_failed:
        return None
    if g.job_failed:
        if g.failed_at is None:  # the drain window opens on the next Tick
            return EARLIEST
        return expiry(g.failed_at, spec.drain_grace_s, moves)
    if g.job_state == SUCCEEDED:
        return EARLIEST
    limit = spec.timeout_per_job_s
    if limit is None or g.timed_out or g.job_terminal:
        return None
    start = _timer_start(g)
    return None if start is None else expiry(start, limit, moves)


def plan(spec: Spec, groups: Sequence[Group], at: datetime, tick: bool) -> Plan:
    """Settle every Running group; complete the iteration (or the Workflow) when all are
    terminal. Failed groups add up across iterations, with whether any had a hardware or a
    validation failure (the final reason's precedence)."""
    settled = tuple(settle(spec, g, at, tick) if g.state == RUNNING else g for g in groups)
    if not settled or any(g.state not in TERMINAL for g in settled):
        return Plan(
            settled,
            spec.iteration,
            spec.failed_groups,
            spec.hardware_failures,
            spec.validation_failures,
            RUNNING,
        )
    failed = [g for g in settled if g.state == FAILED]
    total = spec.failed_groups + len(failed)
    hardware = spec.hardware_failures or any(g.hardware_failed for g in failed)
    validation = spec.validation_failures or any(g.validation_failed for g in failed)
    if spec.iteration < spec.iterations:
        fresh = tuple(Group(i) for i in range(len(settled)))
        return Plan(fresh, spec.iteration + 1, total, hardware, validation, ITERATION_COMPLETED)
    outcome = FAILED if total else SUCCEEDED
    return Plan(settled, spec.iteration, total, hardware, validation, outcome)


def running(groups: Sequence[Group]) -> int:
    return sum(1 for g in groups if g.state == RUNNING)
