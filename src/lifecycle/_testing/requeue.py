"""Whether a machine's declared deadlines tell a host when to tick (ADR 0149).

:func:`check_next_tick` holds one status to its :meth:`~lifecycle.Machine.next_tick`, to the
microsecond: a ``Tick`` before it changes nothing, one at it changes the status.
:func:`check_requeue` runs two hosts over the same observations, one ticking every period and
one only when :meth:`~lifecycle.Machine.next_tick` says a ``Tick`` is due, and holds them to
the same changes at the same times.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from .._core.errors import LifecycleError
from .._core.machine import Machine
from .._core.observation import Observation, Tick
from .._core.refs import ObjectRef
from .._core.table import no_timer
from .._core.transition import Flip
from .strategies import default_ref

_STEP = timedelta(microseconds=1)
#: How far past ``now`` a status without a deadline is probed with a ``Tick``.
_FAR = timedelta(days=3650)


class Change(NamedTuple):
    """One change a host saw: when, what caused it (an observation's name), the status after,
    and the events it makes.

    Attributes:
        at: when the change happened.
        cause: the name of the observation that caused it (``Tick`` for a timer).
        status: the status after it.
        flips: the events it makes.
    """

    at: datetime
    cause: str
    status: Any
    flips: tuple[Flip, ...]


def _tick(machine: Machine[Any], status: Any, at: datetime) -> Any:
    return machine.apply(status, Tick(at=at))


def check_next_tick(machine: Machine[Any], status: Any, now: datetime) -> datetime | None:
    """Hold ``status`` to its :meth:`~lifecycle.Machine.next_tick` as a host at ``now`` (no
    earlier than the status's own latest time) sees it, and return it.

    With a deadline ``d``: a ``Tick`` at ``now`` (if before ``d``), in between, and a
    microsecond before ``d`` changes nothing (but by a row declared
    :func:`~lifecycle.tables.no_timer`), and one at ``max(d, now)`` changes the status. Without
    one: a ``Tick`` at ``now`` and ten years on changes nothing (but by such a row). An
    ``AssertionError`` says which.

    Each timer row is held to its own deadline too: a ``Tick`` that takes it at ``now`` or a
    microsecond before its deadline (or, with none, ten years on) changes nothing.

    Args:
        machine: the machine under test.
        status: the status to check.
        now: the host's time.

    Returns:
        The status's next tick, ``None`` when it has none.

    Raises:
        AssertionError: a property failed; the message says which and where.
    """
    due = machine.next_tick(status)
    name = machine.name
    _check_rows(machine, status, now)
    if due is None:
        for at in (now, now + _FAR):
            assert not _timed_change(machine, status, at), (
                f"{name}: next_tick is None in {status.state!r}, but a Tick at {at} changes "
                f"the status to {_tick(machine, status, at)!r}"
            )
        return None
    if due > now:
        for at in sorted({now, now + (due - now) / 2, due - _STEP}):
            assert at >= due or not _timed_change(machine, status, at), (
                f"{name}: a Tick at {at}, before next_tick {due}, changes the status in "
                f"{status.state!r} to {_tick(machine, status, at)!r}: the deadline is late"
            )
    at = max(due, now)
    assert _timed_change(machine, status, at), (
        f"{name}: a Tick at next_tick {at} changes nothing in {status.state!r}: the deadline "
        "is early (a host would wake for nothing, again and again)"
    )
    return due


def _check_rows(machine: Machine[Any], status: Any, now: datetime) -> None:
    for row in machine.table.by_pair.get((status.state, Tick), ()):
        if row.deadline is None or row.deadline is no_timer:
            continue
        own = row.deadline(status)
        probes = {now, now + _FAR} if own is None else {now, own - _STEP}
        for at in sorted(p for p in probes if p >= now and (own is None or p < own)):
            if machine.select(status, Tick(at=at)) is row:
                assert _tick(machine, status, at) == status, (
                    f"{machine.name}: {row.label} changes the status at {at}, before its "
                    f"deadline {own}: the deadline is late"
                )


def _restates(machine: Machine[Any], status: Any, at: datetime) -> bool:
    """Whether a ``Tick`` at ``at`` takes a row declared to only restate the status."""
    return machine.select(status, Tick(at=at)).deadline is no_timer


def _timed_change(machine: Machine[Any], status: Any, at: datetime) -> bool:
    """Whether a ``Tick`` at ``at`` changes the status by a timer (not a restating row)."""
    return _tick(machine, status, at) != status and not _restates(machine, status, at)


def _observe(machine: Machine[Any], status: Any, obs: Observation) -> Any:
    try:
        return machine.apply(status, obs)
    except LifecycleError:
        return status  # refused: a host keeps the status it had


def _host(
    machine: Machine[Any],
    ref: ObjectRef,
    observations: list[Observation],
    start: datetime,
    end: datetime,
    period: timedelta,
    *,
    every: bool,
) -> tuple[list[Change], list[datetime]]:
    """One host: the changes it saw, and (ticking when due) the ticks that changed nothing."""
    status = machine.initial(ref)
    changes: list[Change] = []
    idle: list[datetime] = []
    pending = iter(observations)
    following = next(pending, None)
    now = start
    while now <= end:
        while following is not None and following.at <= now:
            after = _observe(machine, status, following)
            if after != status:
                flips = machine.flips(status, after)
                changes.append(Change(following.at, following.name(), after, flips))
                status = after
            following = next(pending, None)
        if every:
            tick = True
        else:
            due = check_next_tick(machine, status, now)
            tick = due is not None and due <= now
        if tick:
            after = _tick(machine, status, now)
            if after != status:
                if not _restates(machine, status, now):
                    flips = machine.flips(status, after)
                    changes.append(Change(now, Tick.name(), after, flips))
                status = after
            elif not every:
                idle.append(now)
        now += period
    return changes, idle


def _seen(change: Change) -> tuple[Any, ...]:
    s = change.status
    return (change.at, change.cause, change.flips, s.state, s.reason)


def check_requeue(
    machine: Machine[Any],
    observations: Iterable[Observation],
    *,
    ref: ObjectRef | None = None,
    period: timedelta = timedelta(seconds=1),
    horizon: timedelta = timedelta(seconds=60),
) -> list[Change]:
    """Two hosts see ``observations`` (their ``Tick`` s left out) in time order: host A ticks
    every ``period``, host B only when :meth:`~lifecycle.Machine.next_tick` is due (at the
    first period at or after it). Both must see the same changes -- same causes, statuses and
    events -- at the same times, until ``horizon`` after the last observation; B's every tick
    must change the status, and each status B holds passes :func:`check_next_tick`. For a
    machine with a row declared :func:`~lifecycle.tables.no_timer` (a message counting down,
    which only host A restates), the changes compared are the events and the ``Tick`` s', and
    the whole status at each event. Returns the changes (host A's); an ``AssertionError``
    names the first difference.

    Args:
        machine: the machine under test.
        observations: what both hosts see; Ticks in it are left out.
        ref: the object driven; ``None``: :func:`default_ref`.
        period: how often host A ticks.
        horizon: how long after the last observation the hosts keep ticking.

    Returns:
        The changes, host A's.

    Raises:
        AssertionError: a property failed; the message says which and where.
    """
    subject = ref if ref is not None else default_ref(machine)
    listed = sorted((o for o in observations if not o.is_tick), key=lambda o: o.at)
    if not listed:
        return []
    start = listed[0].at
    end = listed[-1].at + horizon
    every, _ = _host(machine, subject, listed, start, end, period, every=True)
    due, idle = _host(machine, subject, listed, start, end, period, every=False)
    assert not idle, f"{machine.name}: the due host ticked for nothing at {idle[:3]}"
    # A row that only restates the status (no_timer) changes what the every-period host holds
    # (a message counting down) and nothing the due host holds: there, the changes compared
    # are the events and the timers', by what is seen of them (and the whole status at an
    # event).
    exact = not any(r.deadline is no_timer for r in machine.table.rows)
    if not exact:  # a restated message also decides whether a later observation changes it
        every = [c for c in every if c.flips or c.cause == Tick.name()]
        due = [c for c in due if c.flips or c.cause == Tick.name()]
    for i, (a, b) in enumerate(zip(every, due, strict=False)):
        same = a == b if exact or a.flips else _seen(a) == _seen(b)
        assert same, (
            f"{machine.name}: change {i} differs: ticking every {period} saw {a!r}, ticking "
            f"when due saw {b!r}"
        )
    assert len(every) == len(due), (
        f"{machine.name}: ticking every {period} saw {len(every)} changes, ticking when due "
        f"{len(due)}; the first unmatched: {(every[len(due) :] or due[len(every) :])[0]!r}"
    )
    return every
