"""Hypothesis strategies that generate observations and scenarios from a machine's table."""

from __future__ import annotations

import contextlib
import enum
import types
import typing
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Protocol, TypeVar

import attrs
from hypothesis import reject
from hypothesis import strategies as st

from .._core.machine import Machine
from .._core.observation import Observation
from .._core.refs import ObjectRef
from .._core.table import SAME
from ..machines.nodeclaim import NodeClaimMachine
from ..machines.pod import PodMachine
from .doubles import InjectFault, Redeliver, Step

_T = TypeVar("_T")

#: Where generated time starts (observations need aware datetimes).
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)

#: Per-field value overrides: ``"Class.field"`` or ``"field"`` -> values or a strategy.
Samples = Mapping[str, Sequence[Any] | st.SearchStrategy[Any]]

#: Values that drive the shipped Pod machine into every state (the machine's own
#: :attr:`~lifecycle.Machine.samples`).
POD_SAMPLES: Samples = PodMachine.samples

#: Values that drive the shipped NodeClaim machine into every state (the machine's own).
NODECLAIM_SAMPLES: Samples = NodeClaimMachine.samples

#: Samples a host adds for a machine, by machine name, over the machine's own
#: :attr:`~lifecycle.Machine.samples` (a machine's own are the place for them: ADR 0147).
SAMPLES: dict[str, Samples] = {}


def machine_samples(machine: Machine[Any], samples: Samples | None) -> dict[str, Any]:
    """The samples for ``machine``: its own, then :data:`SAMPLES`' for its name, then
    ``samples`` (each over the one before)."""
    merged: dict[str, Any] = dict(machine.samples)
    merged.update(SAMPLES.get(machine.name, {}))
    merged.update(samples or {})
    return merged


#: Seconds between consecutive observations: repeats at the same instant, and steps that
#: cross typical grace windows.
_STEP_SECONDS = st.sampled_from((0, 0, 1, 2, 5, 10, 14, 15, 16, 30, 60, 600))


# -- strategies -------------------------------------------------------------------------------
#: Characters a field may hold: any but NUL and lone surrogates (the input bounds, ADR 0073).
_SURROGATES: tuple[Literal["Cs"]] = ("Cs",)
TEXT_ALPHABET = st.characters(exclude_categories=_SURROGATES, exclude_characters="\x00")


def text(max_size: int | None = None) -> st.SearchStrategy[str]:
    """Text within the input bounds (no NUL, no lone surrogate)."""
    return st.text(TEXT_ALPHABET, max_size=max_size)


def _guard_strings(fn: object) -> set[str]:
    """String constants a guard compares against: literals, module constants, closure cells."""
    out: set[str] = set()
    code = getattr(fn, "__code__", None)
    names: Mapping[str, object] = getattr(fn, "__globals__", {})
    doc = getattr(fn, "__doc__", None)
    stack = [code] if isinstance(code, types.CodeType) else []
    while stack:
        c = stack.pop()
        for k in c.co_consts:
            if isinstance(k, types.CodeType):
                stack.append(k)
            elif not isinstance(k, str) or (k != doc and len(k) <= 64 and "\n" not in k):
                out |= _strings_in(k)
        for name in c.co_names:
            out |= _strings_in(names.get(name))
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if isinstance(value, str):
            out.add(value)
    return out


def _strings_in(value: object) -> set[str]:
    """``value`` if it is a string, the strings of a tuple or frozenset, else none."""
    if isinstance(value, str):
        return {value}
    if isinstance(value, tuple | frozenset):
        return {v for v in value if isinstance(v, str)}
    return set()


def table_strings(machine: Machine[Any]) -> tuple[str, ...]:
    """Strings that matter to ``machine``: its states, reasons, and what its guards compare.

    Args:
        machine: the machine under test.

    Returns:
        The strings, sorted.
    """
    table = machine.table
    found = set(table.states) | {r.reason for r in table.rows}
    for guard in table.guards:
        found |= _guard_strings(guard)
    return tuple(sorted(s for s in found if s))


def _lookup(samples: Samples, cls: type[Any], field: str) -> st.SearchStrategy[Any] | None:
    value = samples.get(f"{cls.__name__}.{field}", samples.get(field))
    if value is None:
        return None
    if isinstance(value, st.SearchStrategy):
        return value
    values = list(value)
    if not values:
        raise ValueError(f"samples for {cls.__name__}.{field} are empty")
    return st.sampled_from(values)


def _for_type(
    tp: Any, strings: st.SearchStrategy[str], samples: Samples, where: str
) -> st.SearchStrategy[Any]:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return st.one_of(*(_for_type(a, strings, samples, where) for a in args))
    if tp is type(None):
        return st.none()
    if origin is Literal:
        return st.sampled_from(args)
    if tp is bool:
        return st.booleans()
    if tp is int:
        return st.one_of(st.sampled_from((0, 1)), st.integers(-1, 300))
    if tp is float:
        return st.floats(0, 3600, allow_nan=False, allow_infinity=False)
    if tp is str:
        return strings
    if tp is datetime:
        return st.integers(-3600, 3600).map(lambda s: EPOCH + timedelta(seconds=s))
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            inner = _for_type(args[0], strings, samples, where)
            return st.lists(inner, max_size=3).map(tuple)
        return st.tuples(*(_for_type(a, strings, samples, where) for a in args))
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return st.sampled_from(tp)
    if isinstance(tp, type) and attrs.has(tp):
        return _builds(tp, strings, samples, where)
    try:
        return st.from_type(tp)
    except Exception:
        raise TypeError(
            f"{where}: no strategy for type {tp!r}; pass samples={{{where!r}: [...]}}"
        ) from None


def _field_strategies(
    cls: type[Any], strings: st.SearchStrategy[str], samples: Samples
) -> dict[str, st.SearchStrategy[Any]]:
    try:
        attrs.resolve_types(cls)
    except NameError as e:
        raise TypeError(f"cannot resolve the field types of {cls.__name__}: {e}") from None
    out: dict[str, st.SearchStrategy[Any]] = {}
    for field in attrs.fields(cls):
        if not field.init or field.name == "at":
            continue
        where = f"{cls.__name__}.{field.name}"
        chosen = _lookup(samples, cls, field.name)
        out[field.name] = (
            chosen if chosen is not None else _for_type(field.type, strings, samples, where)
        )
    return out


def _builds(
    cls: type[Any], strings: st.SearchStrategy[str], samples: Samples, where: str
) -> st.SearchStrategy[Any]:
    def build(kw: dict[str, Any]) -> Any:
        try:
            return cls(**kw)
        except (ValueError, TypeError):  # a validator refused the combination
            return _REFUSED

    fields = st.fixed_dictionaries(_field_strategies(cls, strings, samples))
    return fields.map(build).filter(lambda v: v is not _REFUSED)


_REFUSED = object()


class _Draw(Protocol):
    """What ``@st.composite``'s ``draw`` and ``st.data()``'s ``draw`` have in common."""

    def __call__(self, strategy: st.SearchStrategy[_T], /) -> _T: ...


@attrs.frozen(slots=True)
class _Partition:
    live: tuple[tuple[type[Observation], ...], ...]
    ending: tuple[tuple[type[Observation], ...], ...]
    staying: tuple[type[Observation], ...]


class _Vocabulary:
    """Field strategies for each observation of one machine, built once."""

    def __init__(
        self,
        machine: Machine[Any],
        samples: Samples | None,
        ref: ObjectRef | None,
        step: st.SearchStrategy[float] | None,
        start: datetime,
    ) -> None:
        self.machine = machine
        self.ref = ref if ref is not None else default_ref(machine)
        self.start = start
        self.step = step if step is not None else _STEP_SECONDS
        merged = machine_samples(machine, samples)
        known = table_strings(machine)
        strings: st.SearchStrategy[str] = (
            st.one_of(st.sampled_from(known), text(max_size=10)) if known else text()
        )
        self.classes = tuple(machine.table.observations)
        self.fields = {cls: _field_strategies(cls, strings, merged) for cls in self.classes}
        self._partitions: dict[str, _Partition] = {}

    def observation(self, cls: type[Observation], at: datetime) -> st.SearchStrategy[Observation]:
        fields = st.fixed_dictionaries(self.fields[cls])

        @st.composite
        def build(draw: st.DrawFn) -> Observation:
            for _ in range(3):
                try:
                    return cls(at=at, **draw(fields))
                except (ValueError, TypeError):  # a validator refused the combination
                    continue
            reject()

        return build()

    def _partition(self, state: str) -> _Partition:
        """What ``state`` accepts, grouped: by live target state, by terminal target state,
        and the classes whose rows only stay (ignore rows, same-state rows)."""
        cached = self._partitions.get(state)
        if cached is not None:
            return cached
        table = self.machine.table
        live: dict[str, list[type[Observation]]] = {}
        ending: dict[str, list[type[Observation]]] = {}
        staying: list[type[Observation]] = []
        for cls in self.classes:
            if not table.accepts(state, cls):
                continue
            targets = {
                row.target
                for row in table.by_pair[(state, cls)]
                if not row.ignore and row.target not in (SAME, state)
            }
            for target in sorted(targets):
                group = ending if target in table.terminal else live
                group.setdefault(target, []).append(cls)
            if not targets:
                staying.append(cls)
        cached = _Partition(
            tuple(tuple(v) for _, v in sorted(live.items())),
            tuple(tuple(v) for _, v in sorted(ending.items())),
            tuple(staying),
        )
        self._partitions[state] = cached
        return cached

    def next(self, draw: _Draw, state: str, at: datetime, progress: float = 0.0) -> Observation:
        """An observation for a status in ``state``, ``progress`` (0..1) into a sequence.

        Mostly one that can move ``state`` on to another live state (a target state is
        drawn first, then a class with a row to it, so rare targets are not crowded out);
        sometimes one that only stays; one that ends the lifecycle more often as the
        sequence goes on (so terminal states are entered from deep states); and sometimes
        any observation at all (so refusals are exercised).
        """
        part = self._partition(state)
        ending = 3 + int(25 * min(max(progress, 0.0), 1.0))  # percent: 3 early, 28 late
        pick = draw(st.integers(0, 99))
        groups: tuple[tuple[type[Observation], ...], ...] = ()
        if pick >= 95:
            groups = (self.classes,)
        elif pick >= 95 - ending:
            groups = part.ending
        elif pick >= 75 - ending:
            groups = (part.staying,) if part.staying else ()
        else:
            groups = part.live
        if not groups:
            groups = part.live or part.ending or (part.staying or self.classes,)
        pool = draw(st.sampled_from(groups))
        cls = draw(st.sampled_from(pool))
        return draw(self.observation(cls, at))

    def advance(self, draw: _Draw, at: datetime) -> datetime:
        return at + timedelta(seconds=draw(self.step))


def default_ref(machine: Machine[Any]) -> ObjectRef:
    """The object the property suite drives for ``machine``: kind ``machine.kind``, namespace
    ``default``, name ``<machine>-0``, uid ``<machine>-uid-0``.

    Args:
        machine: the machine under test.

    Returns:
        The object's ref.
    """

    return ObjectRef(machine.kind, "default", f"{machine.name}-0", f"{machine.name}-uid-0")


def _fault_steps(attempts: int) -> st.SearchStrategy[Step]:
    return st.one_of(
        st.builds(
            InjectFault,
            st.sampled_from(("conflict", "write-error")),
            st.integers(1, attempts + 1),
        ),
        st.builds(InjectFault, st.just("emitter-error"), st.integers(1, 3)),
        st.just(Redeliver()),
    )


#: Steps drawn after the lifecycle ended: enough to check that terminal states absorb.
_AFTER_END = 3


def _sequence(
    vocab: _Vocabulary, min_size: int, max_size: int, faults: bool, attempts: int
) -> st.SearchStrategy[list[Step]]:
    fault_steps = _fault_steps(attempts)

    @st.composite
    def build(draw: st.DrawFn) -> list[Step]:
        machine = vocab.machine
        status = machine.initial(vocab.ref)
        at = vocab.start
        out: list[Step] = []
        size = draw(st.integers(min_size, max_size))
        after_end = 0  # observations made after a terminal state was entered
        while len(out) < size and (len(out) < min_size or after_end < _AFTER_END):
            live = status.state not in machine.table.terminal
            after_end += 0 if live else 1
            if faults and draw(st.integers(0, 7)) == 7:
                out.append(draw(fault_steps))
                continue
            at = vocab.advance(draw, at)
            obs = vocab.next(draw, status.state, at, len(out) / max(size, 1))
            with contextlib.suppress(Exception):  # track the state to steer the next draw
                status = machine.apply(status, obs)
            out.append(obs)
        return out

    return build()


def observations(
    machine: Machine[Any],
    cls: type[Observation],
    *,
    at: datetime = EPOCH,
    samples: Samples | None = None,
) -> st.SearchStrategy[Observation]:
    """One ``cls`` observation at ``at``, its fields drawn from their types and ``samples``.

    Args:
        machine: the machine under test.
        cls: the observation class.
        at: the observation's ``at``.
        samples: values for observation fields, by ``"Class.field"`` or ``"field"``: what
            the guards need to be reached, which random text rarely hits.

    Returns:
        A Hypothesis strategy of such observations.
    """
    return _Vocabulary(machine, samples, None, None, at).observation(cls, at)


def observation_sequences(
    machine: Machine[Any],
    *,
    samples: Samples | None = None,
    min_size: int = 0,
    max_size: int = 30,
    start: datetime = EPOCH,
    step: st.SearchStrategy[float] | None = None,
) -> st.SearchStrategy[list[Observation]]:
    """Sequences of ``machine``'s observations with non-decreasing ``at``.

    Each next observation is mostly one the table accepts in the state the sequence has
    reached so far (so sequences get deep), and sometimes any observation (so refusals are
    exercised). String fields come from ``samples`` (``"Class.field"`` or ``"field"``), else
    from :func:`table_strings` mixed with arbitrary text; ``step`` draws the seconds between
    observations.

    Args:
        machine: the machine under test.
        samples: values for observation fields, by ``"Class.field"`` or ``"field"``: what
            the guards need to be reached, which random text rarely hits.
        min_size: the shortest sequence.
        max_size: the longest.
        start: the first observation's ``at``.
        step: draws the seconds between observations; ``None``: the default spread.

    Returns:
        A Hypothesis strategy of observation lists.
    """
    vocab = _Vocabulary(machine, samples, None, step, start)
    steps = _sequence(vocab, min_size, max_size, faults=False, attempts=1)
    return steps.map(lambda s: [x for x in s if isinstance(x, Observation)])


def scenarios(
    machine: Machine[Any],
    *,
    samples: Samples | None = None,
    ref: ObjectRef | None = None,
    min_size: int = 0,
    max_size: int = 30,
    faults: bool = True,
    attempts: int = 5,
    start: datetime = EPOCH,
    step: st.SearchStrategy[float] | None = None,
) -> st.SearchStrategy[list[Step]]:
    """Like :func:`observation_sequences`, interleaved (if ``faults``) with injected write
    conflicts and errors, failing deliveries, and redelivery: input for :func:`check_scenario`.

    Args:
        machine: the machine under test.
        samples: values for observation fields, by ``"Class.field"`` or ``"field"``: what
            the guards need to be reached, which random text rarely hits.
        ref: the object driven; ``None``: :func:`default_ref`.
        min_size: the shortest scenario.
        max_size: the longest.
        faults: mix in injected faults and redeliveries.
        attempts: the runner's commit attempts (its retry policy).
        start: the first observation's ``at``.
        step: draws the seconds between observations; ``None``: the default spread.

    Returns:
        A Hypothesis strategy of step lists.
    """
    vocab = _Vocabulary(machine, samples, ref, step, start)
    return _sequence(vocab, min_size, max_size, faults, attempts)
