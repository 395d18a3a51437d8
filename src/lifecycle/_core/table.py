"""Transition tables as data.

A machine declares its rows once; the table validates them, compiles them to a dict keyed by
``(state, observation type)`` (:attr:`Table.by_pair`) and is then the single source for the
rows a machine tries, docs and tests.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

import attrs

from .errors import TableError, preview
from .observation import Observation
from .refs import EventType

#: A row source that matches every state. For a (state, observation) pair the rows that name the
#: state are tried first, in declaration order, then the ``ANY`` rows: an ``ANY`` row loses to
#: every row naming the state, wherever it is declared (:attr:`Table.by_pair` is that order).
ANY = "*"
#: A row target meaning "stay in the current state" (fields may still change).
SAME = "="
#: Appended to a Warning's reason for the fallback sent when its write was lost.
FALLBACK_SUFFIX = "StatusUpdateFailed"

Guard = Callable[[Any, Any], bool]
Effect = Callable[[Any, Any, "Row"], Any]
#: A timer row's deadline: ``deadline(status) -> datetime | None`` (ADR 0149).
Deadline = Callable[[Any], "datetime | None"]


@attrs.frozen(slots=True)
class Action:
    """An event that is not a transition: it touches no status, carries no transition id, is
    sent when its row is taken (before any write, whatever the write's fate) and may repeat.

    Attributes:
        reason: the event's reason, a CamelCase word as Kubernetes shows it.
        type: the event type, ``Normal`` or ``Warning``.
        message: the event's message, a template like a row's ``message`` (observation
            fields, then the table's ``context``).
    """

    reason: str
    type: EventType
    message: str = ""


def no_timer(status: Any) -> datetime | None:
    """The deadline of a ``Tick`` row that only restates the status (a message counting down
    the time left, say): it is no timer, so no host is woken for it, and a ``Tick`` taking it
    may change the status before :meth:`Table.next_tick` (ADR 0149).

    Args:
        status: the status the ``Tick`` would find; not read.

    Returns:
        Always ``None``: the row is never the reason a host wakes the object.
    """
    return None


def name_of(fn: Callable[..., Any]) -> str:
    """The name a guard or effect goes by in docs, diagrams and reports: its ``__name__``
    (a factory that makes one per use names what it makes)."""
    name = getattr(fn, "__name__", None)
    return name if isinstance(name, str) else type(fn).__name__


def _show_callable(fn: Callable[..., Any] | None) -> str:
    return "None" if fn is None else name_of(fn)


@attrs.frozen(slots=True, kw_only=True)
class Row:
    """One declared transition, read as a sentence: from ``source``, on ``observation``,
    go ``to`` a state, giving ``reason``, an ``event`` and a ``message``; only where the
    ``guard`` holds; by the ``effect``.

    For each (state, observation) pair the rows naming the state are tried before the ``ANY``
    rows, each group in declaration order, and the first whose guard holds answers.
    ``source`` and ``observation`` may be given by position, everything else by keyword.
    Docs, diagrams and reports name a guard, an effect or a deadline by its ``__name__``.

    Args:
        source: the state the row leaves, a tuple of states it leaves alike, or ``ANY`` for
            every state (tried after the rows that name the state).
        observation: the observation type the row answers; it must be in the table's
            vocabulary.
        to: the state the row enters, or ``SAME`` to stay (fields may still change); read
            back as the attribute :attr:`target` (also :attr:`to`).
        reason: the reason of the row's event, a CamelCase word as Kubernetes shows it; a
            state-changing row's event is what users see of the transition.
        event: the event type, ``Normal`` or ``Warning``; required on a row that changes
            state, so no transition goes unannounced, and optional on one that does not.
        message: the event's message, a template whose ``{name}`` placeholders are filled
            from the observation's fields, the table's ``context``, then the observation's
            properties; the table refuses a placeholder nothing supplies.
        guard: ``guard(status, obs) -> bool``, the condition under which the row applies
            (``None``: always); every pair needs an unguarded row so none falls through.
        effect: ``effect(status, obs, row) -> status``, the function that computes the new
            status; without one the row takes its target, reason and message
            (:meth:`~lifecycle.Machine.enter`).
        ignore: whether the row is an explicit "this observation changes nothing here" (use
            :func:`ignore`); it documents the pair as considered rather than forgotten.
        note: why the row exists, for docs and reports; an ignore row says here why the
            observation changes nothing.
        recovery: whether this is a row allowed to leave a terminal state; tables refuse
            any other, and :attr:`Table.recovery_rows` lists these so property tests exempt
            exactly them.
        action: an extra event, not a transition, sent whenever the row is taken (before
            any write, whatever the write's fate).
        fallback: whether a lost write of this row is never redone by a later pass, so the
            runner sends one ``<Reason>StatusUpdateFailed`` Warning in its place; the row
            must enter a state with a Warning event, and elsewhere the next pass redoes the
            write and sends the real Warning (ADR 0091).
        deadline: a timer row's (one on a ``Tick``) ``deadline(status)``, the earliest
            moment a ``Tick`` taking the row can change ``status``, or ``None`` while it
            never can; a host requeues the object for then, via :meth:`Table.next_tick`
            (ADR 0149).
    """

    source: str | tuple[str, ...] = attrs.field(kw_only=False)
    observation: type[Observation] = attrs.field(kw_only=False)
    target: str = attrs.field(alias="to")
    reason: str = ""
    event: EventType | None = None
    message: str = ""
    guard: Guard | None = attrs.field(default=None, repr=_show_callable)
    effect: Effect | None = attrs.field(default=None, repr=_show_callable)
    ignore: bool = False
    note: str = ""
    recovery: bool = False
    action: Action | None = None
    fallback: bool = False
    deadline: Deadline | None = attrs.field(default=None, repr=_show_callable)

    @property
    def to(self) -> str:
        """The state the row goes to, under the name it was given (``Row(..., to=...)``);
        the same as :attr:`target`."""
        return self.target

    @property
    def guard_name(self) -> str:
        """The guard's name (``""``: no guard)."""
        return "" if self.guard is None else name_of(self.guard)

    @property
    def effect_name(self) -> str:
        """The effect's name (``""``: no effect)."""
        return "" if self.effect is None else name_of(self.effect)

    @property
    def sources(self) -> tuple[str, ...]:
        return self.source if isinstance(self.source, tuple) else (self.source,)

    @property
    def label(self) -> str:
        """The row as reports name it: ``SOURCES x Observation [guard] -> TARGET``."""
        sources = "|".join(s or "∅" for s in self.sources)
        guard = f" [{self.guard_name}]" if self.guard is not None else ""
        target = "(ignore)" if self.ignore else self.target or "∅"
        return f"{sources} x {self.observation.__name__}{guard} -> {target}"

    def render(self, obs: Observation, context: Mapping[str, Any] | None = None) -> str:
        """The row's message with ``{name}`` placeholders filled from the observation's
        fields, then ``context`` (names the table declares), then observation properties.

        Args:
            obs: the observation that took the row; its fields fill the placeholders first.
            context: the values of the names the table's ``context`` declares (the
                machine's ``context``), for what the observation does not carry.

        Returns:
            The message as the event carries it.

        Raises:
            KeyError: a placeholder that nothing supplies (a table refuses such a row, so
                only a ``context`` missing a declared name gets here).
        """
        if "{" not in self.message:
            return self.message
        return render(self.message, obs, context)


@functools.lru_cache(maxsize=1024)
def _placeholders(template: str) -> tuple[str, ...]:
    import string  # here: a host that reads no templated row does not import it (ADR 0139)

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
    guard: Guard | None = None,
) -> Row:
    """An explicit "this observation changes nothing here" row: it documents the pair as
    considered, and can give an otherwise guarded pair its unguarded last row.

    Args:
        source: the state, states or ``ANY`` where the observation changes nothing.
        observation: the observation type ignored there.
        note: why it changes nothing, for docs and reports (required: the reason is the
            point of the row).
        guard: ``guard(status, obs) -> bool``, to ignore it only where it holds
            (``None``: always).

    Returns:
        A :class:`Row` with ``to=SAME`` and ``ignore=True``.
    """
    return Row(source, observation, to=SAME, guard=guard, ignore=True, note=note)


class Table:
    """A validated, compiled transition table: the machine's rows checked once,
    so a mistake fails when the machine is defined, not on the first observation that
    reaches it.

    Args:
        machine: the machine's name, which errors and reports name the table by.
        states: every state the machine has; rows may name no other.
        initial: the state a new object starts in; it must be among ``states``.
        terminal: the states an object does not leave, except by a row declared
            ``recovery=True``.
        observations: the machine's observation vocabulary; rows may answer no other type.
        rows: the transitions, in declaration order, which is the order they are tried in.
        context: the message placeholders the machine supplies (``Machine.context``) beyond
            the observations' fields, so the table can check every message's names.

    Raises:
        TableError: a row names an undeclared state or observation, breaks a rule (an
            unannounced state change, a pair with no unguarded row, a row leaving a terminal
            state undeclared, ...), or two guards or effects share a ``__name__``.
    """

    __slots__ = (
        "by_pair",
        "context",
        "effects",
        "fallback_reasons",
        "guards",
        "initial",
        "machine",
        "observations",
        "recovery_rows",
        "rows",
        "states",
        "terminal",
        "timers",
        "untimed",
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
        context: Iterable[str] = (),
    ) -> None:
        self.machine = machine
        self.states = tuple(states)
        self.initial = initial
        self.terminal = frozenset(terminal)
        self.observations = tuple(observations)
        self.rows = tuple(rows)
        #: The guards and the effects the rows name, each once, in row order.
        self.guards: tuple[Guard, ...] = tuple(
            dict.fromkeys(r.guard for r in self.rows if r.guard is not None)
        )
        self.effects: tuple[Effect, ...] = tuple(
            dict.fromkeys(r.effect for r in self.rows if r.effect is not None)
        )
        #: Message placeholders the machine supplies (``Machine.context``) beyond observations.
        self.context = frozenset(context)
        #: The declared exceptions to terminal absorption.
        self.recovery_rows = tuple(r for r in self.rows if r.recovery)
        #: ``<Reason>StatusUpdateFailed`` for each row declared ``fallback=True``, in order.
        self.fallback_reasons = tuple(
            dict.fromkeys(f"{r.reason}{FALLBACK_SUFFIX}" for r in self.rows if r.fallback)
        )
        #: The rows tried, in order, for each (state, observation type) pair the table names.
        self.by_pair = self._compile()
        #: Per state, the deadlines of the timer rows a ``Tick`` can take from it (ADR 0149);
        #: a state with none is absent.
        self.timers: dict[str, tuple[Deadline, ...]] = {}
        #: Per state, a timer row a ``Tick`` can take from it that declares no deadline: there
        #: :meth:`next_tick` cannot answer (``lifecycle check`` reports it).
        self.untimed: dict[str, Row] = {}
        self._find_timers()
        self._check_names()

    def _find_timers(self) -> None:
        """Fill :attr:`timers` and :attr:`untimed` from the ``Tick`` rows of each state."""
        for (state, obs), rows in self.by_pair.items():
            if not obs.is_tick:
                continue
            found = tuple(r.deadline for r in rows if r.deadline is not None)
            if found:
                self.timers[state] = tuple(dict.fromkeys(self.timers.get(state, ()) + found))
            bare = next((r for r in rows if not r.ignore and r.deadline is None), None)
            if bare is not None:
                self.untimed.setdefault(state, bare)

    def _check_names(self) -> None:
        """Refuse two different guards (or effects) of one ``__name__``."""
        for what, functions in (("guards", self.guards), ("effects", self.effects)):
            names = [name_of(f) for f in functions]
            twice = sorted({n for n in names if names.count(n) > 1})
            if twice:
                raise self._fail(
                    f"two different {what} are named {', '.join(map(repr, twice))}: docs, "
                    "diagrams and reports name them by their __name__"
                )

    def _fail(self, problem: str) -> TableError:
        return TableError(f"{self.machine} table: {problem}")

    def _compile(self) -> dict[tuple[str, type[Observation]], tuple[Row, ...]]:
        """Validate the rows and order them per (state, observation type): the rows naming
        the state, in declaration order, then the ``ANY`` rows, up to the first unguarded."""
        known = set(self.states)
        if self.initial not in known:
            raise self._fail(f"initial state {self.initial!r} is not declared")
        if not self.terminal <= known:
            raise self._fail(f"terminal states {sorted(self.terminal - known)} are not declared")
        specific: dict[tuple[str, type[Observation]], list[Row]] = {}
        wildcard: dict[type[Observation], list[Row]] = {}
        for row in self.rows:
            self._check_row(row, known)
            for s in row.sources:
                if s == ANY:
                    wildcard.setdefault(row.observation, []).append(row)
                else:
                    specific.setdefault((s, row.observation), []).append(row)
        by_pair: dict[tuple[str, type[Observation]], tuple[Row, ...]] = {}
        for state in self.states:
            for obs in self.observations:
                rows = specific.get((state, obs), []) + wildcard.get(obs, [])
                if rows:
                    by_pair[(state, obs)] = self._tried(state, obs, rows)
        return by_pair

    def _check_row(self, row: Row, known: set[str]) -> None:
        """Refuse a row that names what the table does not declare, or that breaks a rule."""
        where = f"row {row.sources} x {row.observation.__name__}"
        if row.observation not in self.observations:
            raise self._fail(f"{where}: observation is not in the vocabulary")
        for s in row.sources:
            if s != ANY and s not in known:
                raise self._fail(f"{where}: unknown source state {s!r}")
        if row.target != SAME and row.target not in known:
            raise self._fail(f"{where}: unknown target state {row.target!r}")
        problem = self._row_rule_broken(row)
        if problem:
            raise self._fail(f"{where}: {problem}")
        missing = self._unknown_placeholders(row)
        if missing:
            raise self._fail(f"{where}: message names unknown fields {missing}")

    def _row_rule_broken(self, row: Row) -> str:
        """The first rule ``row`` breaks (ignore, deadline, functions, event, then recovery
        and fallback), or ``""``."""
        changes = row.target != SAME
        if row.ignore and changes:
            return "an ignore row cannot change state"
        if row.deadline is not None and (row.ignore or not row.observation.is_tick):
            return "only a non-ignore Tick row has a deadline"
        checked = (("guard", row.guard), ("effect", row.effect), ("deadline", row.deadline))
        for what, fn in checked:
            if fn is not None and not callable(fn):
                return f"the {what} must be a function, got {preview(fn)}"
        if not row.ignore and changes and row.event is None:
            return "a state-changing row must declare its event type"
        return self._exception_rule_broken(row)

    def _exception_rule_broken(self, row: Row) -> str:
        """The rule a recovery or fallback ``row`` breaks, or ``""``."""
        if row.recovery and not any(s in self.terminal for s in row.sources):
            return "a recovery row must leave a terminal state"
        warns = row.event is EventType.WARNING and bool(row.reason)
        if row.fallback and (row.ignore or not warns):
            return "a fallback row must enter a state with a Warning event and a reason"
        if row.recovery and (row.ignore or row.target in (SAME, *row.sources)):
            return "a recovery row must change state"
        return ""

    def _unknown_placeholders(self, row: Row) -> list[str]:
        """The placeholders of ``row``'s messages that neither its observation nor the
        machine's context supplies."""
        templates = [row.message] + ([row.action.message] if row.action else [])
        names = {a.name for a in attrs.fields(row.observation)} | self.context
        return [
            p
            for template in templates
            for p in _placeholders(template)
            if p not in names and not hasattr(row.observation, p)
        ]

    def _tried(self, state: str, obs: type[Observation], rows: list[Row]) -> tuple[Row, ...]:
        """The rows tried for (``state``, ``obs``): up to the first unguarded one, which must
        exist; from a terminal state, only a recovery row may leave it."""
        unguarded = [i for i, r in enumerate(rows) if r.guard is None]
        if not unguarded:
            raise self._fail(
                f"({state!r}, {obs.__name__}): every row is guarded; add an unguarded "
                "row or an ignore row so no pair falls through"
            )
        if state in self.terminal and any(
            r.target not in (SAME, state) and not r.recovery for r in rows
        ):
            raise self._fail(
                f"terminal state {state!r} has a row leaving it (only a row declared "
                "recovery=True may)"
            )
        return tuple(rows[: unguarded[0] + 1])

    def next_tick(self, status: Any) -> datetime | None:
        """When ``status`` next needs a ``Tick``: the earliest deadline of the timer rows a
        ``Tick`` can take from its state, or ``None`` (no timer runs: a terminal state, or
        every deadline is ``None``). A ``Tick`` before it changes nothing; one at it (or
        later) does (ADR 0149).

        Args:
            status: the object's status; its ``state`` picks the timer rows.

        Returns:
            The earliest deadline, or ``None`` when no timer runs.

        Raises:
            TableError: the state has a timer row that declares no deadline, so the
                answer is not known; the error names the row.
        """
        state = status.state
        deadlines = self.timers.get(state)
        if state in self.untimed:
            raise self._fail(
                f"{self.untimed[state].label} declares no deadline, so when a status in "
                f"{state!r} next needs a Tick is not known; give the row deadline=..."
            )
        if deadlines is None:
            return None
        soonest: datetime | None = None
        for deadline in deadlines:
            at = deadline(status)
            if at is not None and (soonest is None or at < soonest):
                soonest = at
        return soonest

    def rows_from(self, state: str) -> list[Row]:
        """Every reachable row (in the order they are tried) whose source is ``state``.

        Args:
            state: a declared state.

        Returns:
            The rows, ``ANY`` rows included, for every observation type in turn.
        """
        return [r for (s, _), rows in self.by_pair.items() if s == state for r in rows]

    def accepts(self, state: str, observation: type[Observation]) -> bool:
        """Whether the table has a row for ``observation`` in ``state``.

        Args:
            state: a declared state.
            observation: an observation type.

        Returns:
            ``True`` if some row (an ignore row included) answers the pair.
        """
        return (state, observation) in self.by_pair
