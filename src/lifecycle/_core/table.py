"""Transition tables as data.

A machine declares its rows once; the table validates them, compiles them to a dict keyed by
``(state, observation type)`` and is then the single source for dispatch, docs and tests.
"""

from __future__ import annotations

import functools
import string
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from .errors import TableError
from .observation import Observation
from .refs import EventType

#: A row source that matches every state not named more specifically.
ANY = "*"
#: A row target meaning "stay in the current state" (fields may still change).
SAME = "="
#: Appended to a Warning's reason for the fallback sent when its write was lost.
FALLBACK_SUFFIX = "StatusUpdateFailed"

Guard = Callable[[Any, Any], bool]
Effect = Callable[[Any, Any, "Row"], Any]


@attrs.frozen(slots=True)
class Action:
    """An event that is not a transition: it touches no status, carries no transition id, is
    sent when its row is taken (before any write, whatever the write's fate) and may repeat.

    ``message`` is a template like a row's (observation fields and the table's ``context``).
    """

    reason: str
    type: EventType
    message: str = ""


@attrs.frozen(slots=True)
class Row:
    """One declared transition. ``source`` is a state, a tuple of states, or ``ANY``.

    ``recovery`` declares the one kind of row allowed to leave a terminal state (tables refuse
    any other); :attr:`Table.recovery_rows` lists them so property tests exempt exactly those.
    ``action`` is an extra, non-transition event sent whenever the row is taken.
    ``fallback`` declares that a lost write of this row is never redone by a later pass, so
    the runner sends one ``<Reason>StatusUpdateFailed`` Warning in its place (the row must
    enter a state with a Warning event); elsewhere the next pass redoes the write and sends
    the real Warning, and a fallback would say the same thing twice (ADR 0091).
    """

    source: str | tuple[str, ...]
    observation: type[Observation]
    target: str
    reason: str = ""
    event: EventType | None = None
    message: str = ""
    guard: str | None = None
    effect: str | None = None
    ignore: bool = False
    note: str = ""
    recovery: bool = False
    action: Action | None = None
    fallback: bool = False

    @property
    def sources(self) -> tuple[str, ...]:
        return self.source if isinstance(self.source, tuple) else (self.source,)

    @property
    def label(self) -> str:
        """The row as reports name it: ``SOURCES x Observation [guard] -> TARGET``."""
        sources = "|".join(s or "∅" for s in self.sources)
        guard = f" [{self.guard}]" if self.guard else ""
        target = "(ignore)" if self.ignore else self.target or "∅"
        return f"{sources} x {self.observation.__name__}{guard} -> {target}"

    def render(self, obs: Observation, context: Mapping[str, Any] | None = None) -> str:
        """The row's message with ``{name}`` placeholders filled from the observation's
        fields, then ``context`` (names the table declares), then observation properties."""
        if "{" not in self.message:
            return self.message
        return render(self.message, obs, context)


@functools.lru_cache(maxsize=1024)
def _placeholders(template: str) -> tuple[str, ...]:
    return tuple(f for _, f, _, _ in string.Formatter().parse(template) if f)


_FIELD_NAMES: dict[type[Any], frozenset[str]] = {}


def _field_names(cls: type[Observation]) -> frozenset[str]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = frozenset(a.name for a in attrs.fields(cls))
    return names


def render(template: str, obs: Observation, context: Mapping[str, Any] | None = None) -> str:
    """Fill ``template`` from the observation's fields, then ``context``, then the
    observation's other attributes (properties)."""
    if "{" not in template:
        return template
    fields = _field_names(obs.__class__)
    values: dict[str, Any] = {}
    for name in _placeholders(template):
        if name in fields:
            values[name] = getattr(obs, name)
        elif context is not None and name in context:
            values[name] = context[name]
        elif hasattr(obs, name):
            values[name] = getattr(obs, name)
        else:
            raise KeyError(f"{template!r}: nothing supplies {{{name}}}")
    return template.format_map(values)


def ignore(
    source: str | tuple[str, ...],
    observation: type[Observation],
    note: str,
    guard: str | None = None,
) -> Row:
    """An explicit "this observation changes nothing here" row."""
    return Row(source, observation, SAME, guard=guard, ignore=True, note=note)


@attrs.frozen(slots=True)
class Step:
    """A compiled row: the declared row with its guard and effect resolved to functions."""

    row: Row
    guard: Guard | None
    effect: Effect | None


class Table:
    """A validated, compiled transition table."""

    __slots__ = (
        "context",
        "dispatch",
        "fallback_reasons",
        "guards",
        "initial",
        "machine",
        "observations",
        "recovery_rows",
        "rows",
        "states",
        "terminal",
    )

    def __init__(
        self,
        machine: str,
        *,
        states: Iterable[str],
        initial: str,
        terminal: Iterable[str],
        observations: Iterable[type[Observation]],
        rows: Iterable[Row],
        guards: Mapping[str, Guard],
        effects: Mapping[str, Effect],
        context: Iterable[str] = (),
    ) -> None:
        self.machine = machine
        self.states = tuple(states)
        self.initial = initial
        self.terminal = frozenset(terminal)
        self.observations = tuple(observations)
        self.rows = tuple(rows)
        self.guards = dict(guards)
        #: Message placeholders the machine supplies (``Machine.context``) beyond observations.
        self.context = frozenset(context)
        #: The declared exceptions to terminal absorption.
        self.recovery_rows = tuple(r for r in self.rows if r.recovery)
        #: ``<Reason>StatusUpdateFailed`` for each row declared ``fallback=True``, in order.
        self.fallback_reasons = tuple(
            dict.fromkeys(f"{r.reason}{FALLBACK_SUFFIX}" for r in self.rows if r.fallback)
        )
        self.dispatch = self._compile(effects)

    def _fail(self, problem: str) -> TableError:
        return TableError(f"{self.machine} table: {problem}")

    def _compile(
        self, effects: Mapping[str, Effect]
    ) -> dict[tuple[str, type[Observation]], tuple[Step, ...]]:
        known = set(self.states)
        if self.initial not in known:
            raise self._fail(f"initial state {self.initial!r} is not declared")
        if not self.terminal <= known:
            raise self._fail(f"terminal states {sorted(self.terminal - known)} are not declared")
        vocabulary = set(self.observations)
        specific: dict[tuple[str, type[Observation]], list[Step]] = {}
        wildcard: dict[type[Observation], list[Step]] = {}
        for row in self.rows:
            where = f"row {row.sources} x {row.observation.__name__}"
            if row.observation not in vocabulary:
                raise self._fail(f"{where}: observation is not in the vocabulary")
            for s in row.sources:
                if s != ANY and s not in known:
                    raise self._fail(f"{where}: unknown source state {s!r}")
            if row.target != SAME and row.target not in known:
                raise self._fail(f"{where}: unknown target state {row.target!r}")
            if row.ignore and row.target != SAME:
                raise self._fail(f"{where}: an ignore row cannot change state")
            if row.guard is not None and row.guard not in self.guards:
                raise self._fail(f"{where}: unknown guard {row.guard!r}")
            if row.effect is not None and row.effect not in effects:
                raise self._fail(f"{where}: unknown effect {row.effect!r}")
            if not row.ignore and row.target != SAME and row.event is None:
                raise self._fail(f"{where}: a state-changing row must declare its event type")
            if row.recovery and not any(s in self.terminal for s in row.sources):
                raise self._fail(f"{where}: a recovery row must leave a terminal state")
            warns = row.event is EventType.WARNING and bool(row.reason)
            if row.fallback and (row.ignore or not warns):
                raise self._fail(
                    f"{where}: a fallback row must enter a state with a Warning event and a reason"
                )
            if row.recovery and (row.ignore or row.target in (SAME, *row.sources)):
                raise self._fail(f"{where}: a recovery row must change state")
            templates = [row.message] + ([row.action.message] if row.action else [])
            names = {a.name for a in attrs.fields(row.observation)} | self.context
            missing = [
                p
                for template in templates
                for p in _placeholders(template)
                if p not in names and not hasattr(row.observation, p)
            ]
            if missing:
                raise self._fail(f"{where}: message names unknown fields {missing}")
            step = Step(
                row,
                None if row.guard is None else self.guards[row.guard],
                None if row.effect is None else effects[row.effect],
            )
            for s in row.sources:
                if s == ANY:
                    wildcard.setdefault(row.observation, []).append(step)
                else:
                    specific.setdefault((s, row.observation), []).append(step)
        dispatch: dict[tuple[str, type[Observation]], tuple[Step, ...]] = {}
        for state in self.states:
            for obs in self.observations:
                steps = specific.get((state, obs), []) + wildcard.get(obs, [])
                if not steps:
                    continue
                unguarded = [i for i, st in enumerate(steps) if st.guard is None]
                if not unguarded:
                    raise self._fail(
                        f"({state!r}, {obs.__name__}): every row is guarded; add an unguarded "
                        "row or an ignore row so no pair falls through"
                    )
                if state in self.terminal and any(
                    st.row.target not in (SAME, state) and not st.row.recovery for st in steps
                ):
                    raise self._fail(
                        f"terminal state {state!r} has a row leaving it (only a row declared "
                        "recovery=True may)"
                    )
                dispatch[(state, obs)] = tuple(steps[: unguarded[0] + 1])
        return dispatch

    def rows_from(self, state: str) -> list[Row]:
        """Every reachable row (in dispatch order) whose source is ``state``."""
        return [st.row for (s, _), steps in self.dispatch.items() if s == state for st in steps]

    def accepts(self, state: str, observation: type[Observation]) -> bool:
        return (state, observation) in self.dispatch
