"""Static analysis of one transition table: what it can reach, where it can get stuck, and
which pairs raise at run time (ADR 0085).

The table is read as declared (its rows, not the compiled ``Table.by_pair``), so a declaration that
:class:`~lifecycle.Table` would refuse can still be analysed and every problem listed at once.
Rows are tried exactly as the :class:`~lifecycle.Table` tries them: the rows naming the state,
in order, then the ``ANY`` rows, in order; the first row whose guard holds (or that has none)
is taken. Guards are opaque: each may be true or false, except that one guard asked twice
about the same status and observation gives the same answer twice (guards are pure).

Every finding that holds only if some guard can take a given value lists it in ``assumes``;
a finding with an empty ``assumes`` holds whatever the guards decide.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, Protocol

import attrs

from .observation import Observation
from .table import ANY, SAME, Effect, Guard, Row

#: The kinds of finding, in report order.
KINDS = (
    "unreachable",
    "dead-row",
    "no-terminal",
    "stuck",
    "tick-only",
    "no-deadline",
    "implicit-error",
    "terminal-exit",
    "waits",
    "unused-allowance",
)


class TableLike(Protocol):
    """What the analysis reads of a table: a compiled :class:`~lifecycle.Table` or a
    :class:`TableSpec` (a declaration that was never compiled)."""

    @property
    def machine(self) -> str: ...
    @property
    def states(self) -> Sequence[str]: ...
    @property
    def initial(self) -> str: ...
    @property
    def terminal(self) -> Collection[str]: ...
    @property
    def observations(self) -> Sequence[type[Observation]]: ...
    @property
    def rows(self) -> Sequence[Row]: ...


@attrs.frozen
class TableSpec:
    """A table as declared, without the validation :class:`~lifecycle.Table` does on
    construction: what a table author can analyse before it compiles.

    Attributes:
        machine: the machine's name, as findings are reported under.
        states: every state, in order.
        initial: the state a new object is in.
        terminal: the states an object ends in.
        observations: the observation types the table accepts.
        rows: the rows, in declared order (the first that matches wins).
    """

    machine: str
    states: tuple[str, ...]
    initial: str
    terminal: frozenset[str]
    observations: tuple[type[Observation], ...]
    rows: tuple[Row, ...]


@attrs.frozen
class Assumption:
    """A finding holds only if ``guard`` can be ``holds`` for ``observation`` in ``state``:
    the analysis does not run guards, so it says which outcome each finding relies on.

    Attributes:
        guard: the guard's name.
        holds: the outcome assumed.
        state: the state the row is taken in.
        observation: the observation type's name.
        machine: the machine whose guard it is, in a linked product where several take part.
    """

    guard: str  # its name
    holds: bool
    state: str
    observation: str
    #: The machine whose guard it is (set in a linked product, where several take part).
    machine: str = ""

    def __str__(self) -> str:
        word = "true" if self.holds else "false"
        whose = f"{self.machine}: " if self.machine else ""
        return f"{whose}{self.guard} {word} ({show(self.state)} x {self.observation})"


@attrs.frozen
class Finding:
    """One problem of a table. ``key`` is stable across unrelated edits of the table and is
    what an allowance names; ``path`` is a shortest observation sequence that shows it.

    Attributes:
        kind: one of :data:`~lifecycle.analysis.KINDS`.
        key: the stable key an allowance names (``"implicit-error: jammed x Opened"``).
        message: the finding for people.
        path: a shortest observation sequence from the initial state that shows it.
        assumes: the guard outcomes that path relies on.
    """

    kind: str
    key: str
    message: str
    path: tuple[str, ...] = ()
    assumes: tuple[Assumption, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """The finding as JSON data (``lifecycle check --format json``).

        Returns:
            ``kind``, ``key``, ``message``, ``path`` and ``assumes``.
        """
        return {
            "kind": self.kind,
            "key": self.key,
            "message": self.message,
            "path": list(self.path),
            "assumes": [attrs.asdict(a) for a in self.assumes],
        }


def show(state: str) -> str:
    """A state as reports and keys spell it (the empty new state is ``∅``)."""
    return state if state else "∅"


def is_tick(obs: type[Observation]) -> bool:
    return bool(getattr(obs, "is_tick", False))


@attrs.frozen
class Taken:
    """A row that can be taken for one (state, observation): ``assumes`` is what its guards
    must decide for it (earlier guards false, its own true)."""

    index: int
    assumes: tuple[Assumption, ...]


@attrs.frozen
class Walk:
    """Dispatch of one (state, observation), guards opaque: the rows that can be taken, the
    rows that never can be (each with the row that shadows it) and, if every row tried can
    be passed over, the assumptions under which the pair falls through and raises."""

    taken: tuple[Taken, ...]
    shadowed: Mapping[int, int]
    falls_through: tuple[Assumption, ...] | None


class TableModel:
    """A table read for analysis: the order rows are tried for every pair and the states each row
    can enter (an effect declared in ``effect_targets`` may enter more than its target)."""

    def __init__(
        self, table: TableLike, effect_targets: Mapping[Effect, Collection[str]] | None = None
    ) -> None:
        self.table = table
        self.states = tuple(table.states)
        self.terminal = frozenset(table.terminal)
        self.observations = tuple(table.observations)
        self.rows = tuple(table.rows)
        self.effect_targets = {k: tuple(v) for k, v in (effect_targets or {}).items()}
        specific: dict[tuple[str, type[Observation]], list[int]] = {}
        wildcard: dict[type[Observation], list[int]] = {}
        for i, row in enumerate(self.rows):
            for s in row.sources:
                if s == ANY:
                    wildcard.setdefault(row.observation, []).append(i)
                else:
                    specific.setdefault((s, row.observation), []).append(i)
        self._order = {
            (s, o): specific.get((s, o), []) + wildcard.get(o, [])
            for s in self.states
            for o in self.observations
        }
        self._walks: dict[tuple[str, type[Observation]], Walk] = {}

    def candidates(self, state: str, obs: type[Observation]) -> list[int]:
        """The rows tried for ``obs`` in ``state``, in the order they are tried."""
        return self._order.get((state, obs), [])

    def walk(self, state: str, obs: type[Observation]) -> Walk:
        key = (state, obs)
        done = self._walks.get(key)
        if done is None:
            done = self._walks[key] = self._walk(state, obs)
        return done

    def _walk(self, state: str, obs: type[Observation]) -> Walk:
        taken: list[Taken] = []
        shadowed: dict[int, int] = {}
        passed: list[Assumption] = []  # guards assumed false so far
        asked: dict[Guard, int] = {}  # guard -> the earlier row that asked it
        stop: int | None = None
        name = obs.__name__
        for i in self.candidates(state, obs):
            row = self.rows[i]
            if stop is not None:
                shadowed[i] = stop
            elif row.guard is None:
                taken.append(Taken(i, tuple(passed)))
                stop = i
            elif row.guard in asked:  # the same pure guard said false a row ago
                shadowed[i] = asked[row.guard]
            else:
                guard = row.guard_name
                taken.append(Taken(i, (*passed, Assumption(guard, True, state, name))))
                passed.append(Assumption(guard, False, state, name))
                asked[row.guard] = i
        return Walk(tuple(taken), shadowed, None if stop is not None else tuple(passed))

    def targets(self, index: int, state: str) -> tuple[str, ...]:
        """The states row ``index`` can leave ``state`` in."""
        row = self.rows[index]
        first = state if row.target == SAME else row.target
        extra = self.effect_targets.get(row.effect, ()) if row.effect is not None else ()
        return tuple(dict.fromkeys((first, *extra)))

    def label(self, index: int) -> str:
        """A row as keys and reports name it: ``SOURCE x Observation [guard] -> TARGET`` (``#2``
        and so on for a repeated declaration)."""
        text = self._plain_label(index)
        same = sum(1 for j in range(index) if self._plain_label(j) == text)
        return text if not same else f"{text} #{same + 1}"

    def _plain_label(self, index: int) -> str:
        row = self.rows[index]
        source = ",".join(show(s) for s in row.sources)
        guard = f" [{row.guard_name}]" if row.guard is not None else ""
        target = "(ignore)" if row.ignore else "=" if row.target == SAME else show(row.target)
        return f"{source} x {row.observation.__name__}{guard} -> {target}"


@attrs.frozen
class Witness:
    """How a state is first reached: the observations on the way and what their guards had to
    decide."""

    path: tuple[str, ...]
    assumes: tuple[Assumption, ...]


def reachable(model: TableModel) -> dict[str, Witness]:
    """Every state reachable from the initial one (every guard free), with a shortest path."""
    start = model.table.initial
    seen = {start: Witness((), ())}
    queue = deque([start])
    while queue:
        state = queue.popleft()
        here = seen[state]
        for obs in model.observations:
            for taken in model.walk(state, obs).taken:
                for target in model.targets(taken.index, state):
                    if target not in seen:
                        seen[target] = Witness(
                            (*here.path, obs.__name__), (*here.assumes, *taken.assumes)
                        )
                        queue.append(target)
    return seen


def can_finish(model: TableModel, states: Iterable[str]) -> set[str]:
    """The states among ``states``' successors closure from which a terminal state can be
    reached (every guard free)."""
    back: dict[str, set[str]] = {}
    for state in states:
        for obs in model.observations:
            for taken in model.walk(state, obs).taken:
                for target in model.targets(taken.index, state):
                    back.setdefault(target, set()).add(state)
    good = set(model.terminal)
    queue = deque(good)
    while queue:
        for before in back.get(queue.popleft(), ()):
            if before not in good:
                good.add(before)
                queue.append(before)
    return good


def analyse_table(
    table: TableLike, effect_targets: Mapping[Effect, Collection[str]] | None = None
) -> list[Finding]:
    """Every finding of one table, in :data:`KINDS` order, allowances not applied.

    Args:
        table: a compiled :class:`~lifecycle.Table` or a :class:`TableSpec`.
        effect_targets: for each effect, the states it may lead to, so rows whose target an
            effect decides are followed rather than taken as dead ends.

    Returns:
        The findings.
    """
    model = TableModel(table, effect_targets)
    seen = reachable(model)
    found: list[Finding] = []
    for state in model.states:
        if state not in seen:
            found.append(
                Finding(
                    "unreachable",
                    f"unreachable: {show(state)}",
                    f"{show(state)} cannot be reached from {show(table.initial)}, whatever the "
                    "guards decide",
                )
            )
    found += _dead_rows(model, seen)
    found += _stuck(model, seen)
    found += _undated_timers(model)
    found += _implicit_errors(model, seen)
    found += _terminal_exits(model)
    return found


def _dead_rows(model: TableModel, seen: Mapping[str, Witness]) -> list[Finding]:
    out: list[Finding] = []
    for i, row in enumerate(model.rows):
        sources = model.states if ANY in row.sources else row.sources
        live = [s for s in sources if s in seen]
        if any(i not in model.walk(s, row.observation).shadowed for s in live):
            continue
        label = model.label(i)
        if not live:
            why = "its source is unreachable" if len(sources) == 1 else "no source is reachable"
        else:
            by = sorted({model.walk(s, row.observation).shadowed[i] for s in live})
            names = "; ".join(model.label(j) for j in by)
            why = f"an earlier row is always tried first: {names}"
        out.append(Finding("dead-row", f"dead-row: {label}", f"row {label} is never taken: {why}"))
    return out


def _stuck(model: TableModel, seen: Mapping[str, Witness]) -> list[Finding]:
    if not model.terminal:
        why = "the table declares no terminal state: no lifecycle ever ends"
        return [Finding("no-terminal", "no-terminal", why)]
    out: list[Finding] = []
    good = can_finish(model, seen)
    for state in (s for s in model.states if s in seen and s not in model.terminal):
        w = seen[state]
        if state not in good:
            out.append(
                Finding(
                    "stuck",
                    f"stuck: {show(state)}",
                    f"no terminal state can be reached from {show(state)}, whatever the guards "
                    "decide: an object there is stuck",
                    w.path,
                    w.assumes,
                )
            )
            continue
        exits = {
            obs
            for obs in model.observations
            for taken in model.walk(state, obs).taken
            if any(t != state for t in model.targets(taken.index, state))
        }
        if exits and all(is_tick(o) for o in exits):
            ticks = ", ".join(sorted(o.__name__ for o in exits))
            out.append(
                Finding(
                    "tick-only",
                    f"tick-only: {show(state)}",
                    f"{show(state)} is left only on {ticks}: an object there waits for a timer "
                    "(a host that sends no ticks leaves it there)",
                    w.path,
                    w.assumes,
                )
            )
    return out


def _undated_timers(model: TableModel) -> list[Finding]:
    """Timer rows (non-ignore ``Tick`` rows) that declare no ``deadline`` (ADR 0149)."""
    out: list[Finding] = []
    for i, row in enumerate(model.rows):
        if is_tick(row.observation) and not row.ignore and row.deadline is None:
            label = model.label(i)
            out.append(
                Finding(
                    "no-deadline",
                    f"no-deadline: {label}",
                    f"timer row {label} declares no deadline: when an object there next "
                    "needs a Tick is not known (Machine.next_tick raises; give the row "
                    "deadline=, or no_timer if it only restates the status)",
                )
            )
    return out


def _implicit_errors(model: TableModel, seen: Mapping[str, Witness]) -> list[Finding]:
    out: list[Finding] = []
    for state in (s for s in model.states if s in seen):
        w = seen[state]
        for obs in model.observations:
            walk = model.walk(state, obs)
            if walk.falls_through is None:
                continue
            pair = f"{show(state)} x {obs.__name__}"
            if not walk.taken:
                why = "no row and no ignore row names it"
            else:
                why = "every row for it is guarded and the guards can all be false"
            out.append(
                Finding(
                    "implicit-error",
                    f"implicit-error: {pair}",
                    f"{pair} raises InvalidTransition: {why}",
                    (*w.path, obs.__name__),
                    (*w.assumes, *walk.falls_through),
                )
            )
    return out


def _terminal_exits(model: TableModel) -> list[Finding]:
    out: list[Finding] = []
    for i, row in enumerate(model.rows):
        if row.recovery or row.ignore:
            continue
        sources = model.states if ANY in row.sources else row.sources
        left = [s for s in sources if s in model.terminal and model.targets(i, s) != (s,)]
        if left:
            label = model.label(i)
            names = ", ".join(show(s) for s in left)
            out.append(
                Finding(
                    "terminal-exit",
                    f"terminal-exit: {label}",
                    f"row {label} leaves terminal {names} but is not declared recovery=True "
                    "(ADR 0011)",
                )
            )
    return out


def allow(reason: str, *keys: str) -> dict[str, str]:
    """Allowances for ``Machine.analysis_allowances``: each finding key, with the one reason
    it is deliberate (a reason is required: an allowance says why).

    Args:
        reason: why the findings are deliberate; shown in every report that allows them.
        *keys: the findings' keys, as reports print them.

    Returns:
        ``{key: reason}``, to merge into ``analysis_allowances``.

    Raises:
        ValueError: an empty reason.
    """
    if not reason.strip():
        raise ValueError("an allowance needs a reason")
    return dict.fromkeys(keys, reason)


def allow_refused(
    reason: str, states: Iterable[str], observations: Iterable[type[Observation]]
) -> dict[str, str]:
    """Allowances for ``implicit-error`` findings: every pair of ``states`` x ``observations``
    is refused on purpose (a host that sends it has a bug the runner should make loud).

    Args:
        reason: why these pairs are refused.
        states: the states.
        observations: the observation types refused in each.

    Returns:
        ``{key: reason}`` for each pair.

    Raises:
        ValueError: an empty reason.
    """
    names = [o.__name__ for o in observations]
    return allow(reason, *(f"implicit-error: {show(s)} x {n}" for s in states for n in names))


def order(findings: Iterable[Finding]) -> list[Finding]:
    """Findings in :data:`KINDS` order, stable within a kind."""
    rank: Callable[[Finding], int] = lambda f: KINDS.index(f.kind) if f.kind in KINDS else 99  # noqa: E731
    return sorted(findings, key=rank)
