"""Durable links (ADR 0090): a link's observation is an intent in its source's own commit.

A committed status of one object is an observation for another (links). What a link derives is
pure, so it is derived *before* the source's commit, from the status read in that attempt, and
written in the same atomic commit as outbox entries after the source's events: a
:class:`~lifecycle.Transition` whose ``intent`` names the target, its machine and the
observation (never handed to an emitter). After the commit the runner applies the intents in
order; an intent is marked done only when its target confirms it (the target's write committed,
or it had nothing to change). A target write that fails keeps the intent pending, in this
process (:class:`PendingIntents`, retried at the start of the runner's next call) and in the
store's outbox (applied by ``Runner.redeliver``, ``AsyncRunner.redeliver`` and the
``Dispatcher`` after a crash or once a lease ran out).

Intents of one source to one target form a *lane*, applied in commit order: an intent never
overtakes an earlier one of its lane that is still pending. A target that refuses the
observation (a :class:`~lifecycle.LifecycleError`) will refuse it again: that intent is logged
and dropped, as a refused linked observation always was.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from ._backlog import Backlog
from ._core.errors import LifecycleError, StoreError
from ._core.machine import Machine
from ._core.observation import Observation
from ._core.refs import EventType, ObjectRef
from ._core.transition import Intent, Transition
from ._link import Link

Lane = tuple[str, str]


def lane(t: Transition) -> Lane:
    """The (source uid, target uid) an intent belongs to."""
    assert t.intent is not None
    return (t.ref.uid, t.intent.target.uid)


def derive(
    links: Sequence[Link],
    ref: ObjectRef,
    machine: str,
    before: Any,
    after: Any,
    at: datetime,
    version: int,
    first: int,
    epoch: str = "",
) -> tuple[Transition, ...]:
    """The intents the change ``before -> after`` of ``ref`` (to be committed as ``version``)
    makes, numbered from ``first`` (after the commit's events)."""
    out: list[Transition] = []
    for link in links:
        for target, observation in link.derive(ref, before, after, at):
            name = observation.name()
            out.append(
                Transition(
                    ref,
                    machine,
                    "",
                    "",
                    name,
                    EventType.NORMAL,
                    "",
                    version,
                    at,
                    first + len(out),
                    epoch=epoch,
                    intent=Intent(target, link.target, name, observation),
                )
            )
    return tuple(out)


def reach(links: Iterable[Link]) -> dict[str, frozenset[str]]:
    """Per source machine, every machine its links lead to, directly or through others (a
    machine linked to itself, directly or round a cycle, reaches itself)."""
    step: dict[str, set[str]] = {}
    for link in links:
        step.setdefault(link.source, set()).add(link.target)
    out: dict[str, frozenset[str]] = {}
    for source in step:
        seen: set[str] = set()
        todo = list(step[source])
        while todo:
            name = todo.pop()
            if name not in seen:
                seen.add(name)
                todo.extend(step.get(name, ()))
        out[source] = frozenset(seen)
    return out


def observation_of(machine: Machine[Any], t: Transition) -> Observation:
    """The observation an intent carries: the one this process derived, or its stored form
    rebuilt by the target's machine."""
    intent = t.intent
    assert intent is not None
    if intent.live is not None:
        return intent.live
    return machine.load_observation(intent.observation, t.at.isoformat(), intent.data())


def split(pending: Iterable[Transition]) -> tuple[list[Transition], list[Transition]]:
    """Outbox rows as (events, intents)."""
    events: list[Transition] = []
    intents: list[Transition] = []
    for t in pending:
        (events if t.intent is None else intents).append(t)
    return events, intents


def confirmed(error: Exception | None) -> bool:
    """Whether a target's result settles its intent: it committed, changed nothing, or refused
    the observation (it would refuse it again). A store failure leaves it pending."""
    if error is None:
        return True
    return isinstance(error, LifecycleError) and not isinstance(error, StoreError)


class Rounds:
    """The order intents of one call are applied in: one lane at a time, in commit order.

    :meth:`next` picks the intents to apply now -- the first of each lane not blocked
    (``batch``: one round of many lanes), or just the first of them (depth-first, one by one);
    an intent whose lane is blocked (an earlier one of it is pending, or being applied by
    another call) is held pending instead. :meth:`settle` takes each applied intent's outcome:
    confirmed intents are ``done`` (to be marked), the others are held and block their lane.
    A call interrupted meanwhile holds what it did not settle (:meth:`interrupted`).
    Sans-I/O: every runner drives it.
    """

    __slots__ = ("batch", "blocked", "done", "intents", "open", "pending", "todo")

    def __init__(
        self, pending: PendingIntents, intents: Sequence[Transition], *, batch: bool
    ) -> None:
        self.pending = pending
        self.intents = intents
        self.batch = batch
        #: lanes with an earlier intent pending or in flight (not one of these ``intents``)
        self.blocked: set[Lane] = pending.lanes(intents) if pending.busy() else set()
        self.todo = list(range(len(intents)))
        #: indices chosen by :meth:`next` and not settled yet
        self.open: list[int] = []
        #: ids of the intents their targets confirmed, in order
        self.done: list[str] = []

    def next(self) -> list[int]:
        """Indices of the intents to apply now (none left: ``[]``)."""
        chosen: list[int] = []
        later: list[int] = []
        lanes: set[Lane] = set()
        for i in self.todo:
            key = lane(self.intents[i])
            if key in self.blocked:
                self.pending.hold(self.intents[i])
            elif later or key in lanes or (chosen and not self.batch):
                # (a batch round is a run of the intents in order: one of a lane applied
                # twice ends it, so no later intent overtakes that lane's second one)
                later.append(i)
            else:
                lanes.add(key)
                chosen.append(i)
        self.todo = later
        self.open = chosen[:]
        return chosen

    def settle(self, i: int, error: Exception | None) -> None:
        """Intent ``i`` was applied, with the target's ``error`` (``None``: it committed or
        had nothing to change)."""
        t = self.intents[i]
        self.open.remove(i)
        if confirmed(error):
            self.done.append(t.id)
            self.pending.settled(t)
        else:
            self.blocked.add(lane(t))
            self.pending.hold(t)

    def interrupted(self, backlog: Backlog) -> None:
        """The call was interrupted (ADR 0105): every intent not settled is held pending, in
        commit order, and the ids of those confirmed wait in ``backlog`` to be marked."""
        for i in sorted(self.open + self.todo):
            self.pending.hold(self.intents[i])
        self.open, self.todo = [], []
        if self.done:
            backlog.hold_marks(self.done)


class PendingIntents:
    """Intents this process has not applied yet (their target write failed, or the call
    applying them was interrupted), each lane in commit order; thread-safe. Those a call
    took to apply are *in flight* until settled: their lanes stay blocked for other calls.

    With its :attr:`backlog` (the events and marks an interrupted call left, ADR 0105) it is
    everything a runner's next call finishes first: true while any of it is left; ``len``
    counts the intents."""

    def __init__(self) -> None:
        self._items: list[Transition] = []
        self._flight: dict[str, Transition] = {}
        self._lock = threading.Lock()
        #: Held while the pending intents are being retried (one retrier at a time).
        self.retrying = threading.Lock()
        #: Events and marks an interrupted call left (ADR 0105).
        self.backlog = Backlog()

    def __bool__(self) -> bool:
        return bool(self._items) or self.backlog.held

    def __len__(self) -> int:
        return len(self._items)

    def busy(self) -> bool:
        """Whether any intent is pending or in flight."""
        return bool(self._items or self._flight)

    def hold(self, t: Transition) -> None:
        """Keep ``t`` pending (no longer in flight), after the earlier intents of its lane."""
        with self._lock:
            self._flight.pop(t.id, None)
            if any(p.id == t.id for p in self._items):
                return
            key, order = lane(t), (t.version, t.n)
            at = next(
                (
                    i
                    for i, p in enumerate(self._items)
                    if lane(p) == key and (p.version, p.n) > order
                ),
                len(self._items),
            )
            self._items.insert(at, t)

    def settled(self, t: Transition) -> None:
        """``t``'s target confirmed it: no longer in flight."""
        if self._flight:
            with self._lock:
                self._flight.pop(t.id, None)

    def lanes(self, besides: Iterable[Transition] = ()) -> set[Lane]:
        """The lanes of the intents pending or in flight, other than ``besides``."""
        skip = {t.id for t in besides}
        with self._lock:
            held = [*self._items, *self._flight.values()]
        return {lane(t) for t in held if t.id not in skip}

    def take(self) -> list[Transition]:
        """Every pending intent, now in flight (the caller retries them, holding what fails
        and settling what its target confirms)."""
        with self._lock:
            items, self._items = self._items, []
            for t in items:
                self._flight[t.id] = t
            return items

    def claim(self, intents: Iterable[Transition]) -> None:
        """Intents found in the outbox, applied now: in flight (no longer held), so that an
        intent derived meanwhile never overtakes one of them in its lane."""
        with self._lock:
            for t in intents:
                self._flight[t.id] = t
            self._items = [t for t in self._items if t.id not in self._flight]

    def drop(self, ids: Iterable[str]) -> None:
        gone = set(ids)
        with self._lock:
            self._items = [t for t in self._items if t.id not in gone]
            for i in gone & self._flight.keys():
                del self._flight[i]
