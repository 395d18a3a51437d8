"""Linked machines analysed together: the product of their tables (ADR 0085).

A link turns a committed change of one object into an observation of another (see
:mod:`lifecycle.links`). Here a link is modelled by the observation types it can send: after
the source takes any row that is not an ignore row (a new state, or new fields the link reads),
the target may receive one of them — or nothing, since a link sends only what changed. The
observations a link sends reach the target only through that link; every other observation of
every machine may arrive at any time. Guards are opaque (each may be true or false).

The product is explored breadth first from every machine's initial state, up to a bound. A
combination is reported when, from it, one machine can never reach a terminal state although
its own table alone could: it waits for an observation that only a link sends, and the other
objects can no longer send it. One object of each machine takes part (a Workflow's many Jobs
are one Job here), and an object in its initial state is not reported as waiting (it has not
been created or observed yet: whether it ever is, is its owner's business).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from ._core.analysis import Assumption, Finding, TableModel, can_finish, show
from ._core.machine import Machine
from ._core.observation import Observation

State = tuple[str, ...]
#: Product states explored at most (the shipped groups have fewer than a hundred).
MAX_STATES = 50_000


@attrs.frozen
class LinkModel:
    """What a link can send: from machine ``source`` to machine ``target``, one of
    ``observations`` after a change of the source. With ``on_state_change`` a change of the
    source's state always sends one (a link is durable: it is applied until the target
    confirms it); other changes (fields only) may or may not.

    Attributes:
        source: the name of the machine whose commits the link reads.
        target: the name of the machine it writes to.
        observations: the observation types it can send the target.
        on_state_change: a change of the source's state always sends one; ``False`` for a
            link that reacts to other fields (the Workflow's groups), so the analysis does not
            assume a send that may not come.
    """

    source: str
    target: str
    observations: tuple[type[Observation], ...]
    on_state_change: bool = True


@attrs.frozen
class LinkedGroup:
    """Machines analysed as one product, the links between them, and the findings of the
    product that are deliberate (finding key -> reason).

    Attributes:
        name: the group's name, as reports and allowances files name it.
        machines: the machines combined; the product grows as the product of their states.
        links: what each link can send between them.
        allowances: finding key -> the reason it is deliberate.
    """

    name: str
    machines: tuple[Machine[Any], ...]
    links: tuple[LinkModel, ...]
    allowances: Mapping[str, str] = attrs.field(factory=dict)


@attrs.frozen
class _Via:
    """How a product state was first reached."""

    parent: State | None
    labels: tuple[str, ...]
    assumes: tuple[Assumption, ...]


@attrs.frozen
class _Outcome:
    state: State
    labels: tuple[str, ...]
    assumes: tuple[Assumption, ...]


class Product:
    """The product of a group's tables, explored breadth first."""

    def __init__(self, group: LinkedGroup, max_states: int = MAX_STATES) -> None:
        self.group = group
        self.names = tuple(m.name for m in group.machines)
        self.models = tuple(
            TableModel(m.table, getattr(m, "effect_targets", None)) for m in group.machines
        )
        self.max_states = max_states
        fed: dict[str, set[type[Observation]]] = {}
        for link in group.links:
            for name in (link.source, link.target):
                if name not in self.names:
                    raise ValueError(f"{group.name}: link names {name!r}, not in the group")
            fed.setdefault(link.target, set()).update(link.observations)
        #: Per machine, the observations that may arrive at any time (not only by a link).
        self.free = tuple(
            tuple(o for o in model.observations if o not in fed.get(name, set()))
            for name, model in zip(self.names, self.models, strict=True)
        )
        self.via: dict[State, _Via] = {}
        self.edges: dict[State, set[State]] = {}
        self.complete = True
        self._explore()

    def _explore(self) -> None:
        start: State = tuple(m.table.initial for m in self.models)
        self.via[start] = _Via(None, (), ())
        queue = deque([start])
        while queue:
            here = queue.popleft()
            nexts = self.edges.setdefault(here, set())
            for outcome in self._successors(here):
                nexts.add(outcome.state)
                if outcome.state in self.via:
                    continue
                if len(self.via) >= self.max_states:
                    self.complete = False
                    continue
                self.via[outcome.state] = _Via(here, outcome.labels, outcome.assumes)
                queue.append(outcome.state)

    def _successors(self, here: State) -> list[_Outcome]:
        out: list[_Outcome] = []
        for i, model in enumerate(self.models):
            for obs in self.free[i]:
                for taken in model.walk(here[i], obs).taken:
                    for target in model.targets(taken.index, here[i]):
                        moved = _Outcome(
                            _with(here, i, target),
                            (f"{self.names[i]}:{obs.__name__}",),
                            self._mark(i, taken.assumes),
                        )
                        ignored = model.rows[taken.index].ignore
                        out += self._follow_links(moved, i, here[i], ignored, 0)
        return out

    def _follow_links(
        self, start: _Outcome, moved: int, was: str, ignored: bool, depth: int
    ) -> list[_Outcome]:
        """Every outcome of the links out of machine ``moved`` (which was in state ``was``)
        delivering what they can send: without fail after a change of state (on a link that
        says so), maybe after a change of fields only. An ignore row writes nothing, so it
        sends nothing; a target that refuses what it is sent stays as it was."""
        outcomes = [start]
        if ignored or depth > len(self.group.links):
            return outcomes
        changed = start.state[moved] != was
        for link in self.group.links:
            if link.source != self.names[moved]:
                continue
            j = self.names.index(link.target)
            model = self.models[j]
            must = changed and link.on_state_change
            grown: dict[State, _Outcome] = {} if must else {o.state: o for o in outcomes}
            for before in outcomes:
                for obs in link.observations:
                    walk = model.walk(before.state[j], obs)
                    if must and walk.falls_through is not None:
                        grown.setdefault(before.state, before)
                    for taken in walk.taken:
                        for target in model.targets(taken.index, before.state[j]):
                            sent = _Outcome(
                                _with(before.state, j, target),
                                (*before.labels, f"-> {link.target}:{obs.__name__}"),
                                (*before.assumes, *self._mark(j, taken.assumes)),
                            )
                            ignore = model.rows[taken.index].ignore
                            was_j = before.state[j]
                            for o in self._follow_links(sent, j, was_j, ignore, depth + 1):
                                grown.setdefault(o.state, o)
            outcomes = list(grown.values())
        return outcomes

    def _mark(self, i: int, assumes: Sequence[Assumption]) -> tuple[Assumption, ...]:
        return tuple(attrs.evolve(a, machine=self.names[i]) for a in assumes)

    def witness(self, state: State) -> tuple[tuple[str, ...], tuple[Assumption, ...]]:
        """A shortest path of observations to ``state`` and what its guards had to decide."""
        labels: list[str] = []
        assumes: list[Assumption] = []
        at: State | None = state
        while at is not None:
            via = self.via[at]
            labels[:0] = via.labels
            assumes[:0] = via.assumes
            at = via.parent
        return tuple(labels), tuple(assumes)

    def finishing(self, i: int) -> set[State]:
        """The product states from which machine ``i`` can still reach a terminal state."""
        back: dict[State, set[State]] = {}
        for state, nexts in self.edges.items():
            for n in nexts:
                back.setdefault(n, set()).add(state)
        terminal = self.models[i].terminal
        good = {s for s in self.via if s[i] in terminal}
        queue = deque(good)
        while queue:
            for before in back.get(queue.popleft(), ()):
                if before not in good:
                    good.add(before)
                    queue.append(before)
        return good

    def waits(self) -> list[Finding]:
        """Every reachable combination in which one machine waits forever for another."""
        out: list[Finding] = []
        for i, model in enumerate(self.models):
            if not model.terminal:
                continue
            alone = can_finish(model, model.states)
            good = self.finishing(i)
            for state in self.via:
                mine = state[i]
                if (
                    mine in model.terminal
                    or mine == model.table.initial
                    or state in good
                    or mine not in alone
                ):
                    continue
                out.append(self._wait(i, state))
        return out

    def _wait(self, i: int, state: State) -> Finding:
        name = self.names[i]
        others = "; ".join(
            f"{n}={show(s)}" for j, (n, s) in enumerate(zip(self.names, state, strict=True))
            if j != i
        )  # fmt: skip
        fed = sorted(
            {o.__name__ for link in self.group.links if link.target == name
             for o in link.observations}
        )  # fmt: skip
        path, assumes = self.witness(state)
        return Finding(
            "waits",
            f"waits: {name}={show(state[i])}; {others}",
            f"{name} in {show(state[i])} waits forever while {others}: its table alone could "
            f"finish from there, but not without {', '.join(fed) or 'its links'}, which the "
            "others can no longer send",
            path,
            assumes,
        )


def _with(state: State, i: int, value: str) -> State:
    return (*state[:i], value, *state[i + 1 :])
