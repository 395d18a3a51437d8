"""The machine base: pure ``apply`` driven by a compiled table, and flip computation."""

from __future__ import annotations

import sys
from collections.abc import Callable, Hashable, Iterable, Mapping
from datetime import datetime
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import attrs

from . import serde, unchanged
from .codegen import compile_function
from .errors import (
    InvalidObservation,
    InvalidTransition,
    TableError,
    UnknownObservation,
    preview,
)
from .kubernetes_shape import kubernetes_conditions
from .limits import Limits
from .observation import Observation
from .redact import redact
from .refs import Condition, EventType, ObjectRef
from .schema import Schema, Upcaster
from .table import SAME, Effect, Row, Table, render
from .transition import Flip


class Status(Protocol):
    """What every machine's status record offers the kernel."""

    @property
    def state(self) -> str: ...
    @property
    def reason(self) -> str: ...
    @property
    def message(self) -> str: ...


S = TypeVar("S", bound=Status)
R = TypeVar("R")


@attrs.frozen(slots=True)
class Verdict(Generic[S]):
    """A condition outside the exclusive set whose status flips are events of their own.

    An event fires when the condition becomes True (``on_true``), and, if ``on_absent_to_false``
    is set, when it first appears as False. True -> False, and unchanged status, emit nothing.

    Attributes:
        condition: the condition's type.
        read: finds the condition in a status (``None`` while absent).
        on_true: the event type when it becomes True.
        on_absent_to_false: the event type when it first appears False; ``None`` sends
            nothing then, as most conditions start False without news.
    """

    condition: str
    read: Callable[[S], Condition | None]
    on_true: EventType = EventType.WARNING
    on_absent_to_false: EventType | None = None

    def flip(self, before: S, after: S) -> Flip | None:
        """The event the condition's change between two statuses calls for.

        Args:
            before: the status before the observation.
            after: the status after it.

        Returns:
            The flip, or ``None`` when no event is due.
        """
        old, new = self.read(before), self.read(after)
        if new is None:
            return None
        was = "" if old is None else old.status
        if was == new.status:
            return None
        if new.status == "True":
            kind: EventType | None = self.on_true
        elif new.status == "False" and old is None:
            kind = self.on_absent_to_false
        else:
            kind = None
        if kind is None:
            return None
        return Flip(was, new.status, new.reason, kind, new.message, self.condition)


_FLIP_MEMO_SIZE = 4096


def _unchanged(status: Any, obs: Any) -> Any:
    return status


#: The row constants a compiled entry step can hold (see :func:`_enter_step`).
_CONSTANTS = frozenset({"TARGET", "REASON", "MESSAGE"})


def is_record_tuple(tp: object) -> bool:
    """Whether ``tp`` is a ``typing.NamedTuple`` record, the fastest status record: one
    ``tuple.__new__`` builds it where an attrs class sets each field in turn (ADR 0015).
    attrs classes are the other kind of status the kernel accepts."""
    return isinstance(tp, type) and issubclass(tp, tuple) and hasattr(tp, "_fields")


def _enter_step(
    status_type: type[Any], row: Row, machine: Machine[Any]
) -> Callable[[Any, Any], Any]:
    """The default effect of ``row`` — take its target, reason and message — compiled to one
    constructor call for this row: constants are bound, a constant message is not rendered,
    and the other fields are copied positionally (attrs validators still run)."""

    def render(status: Any, obs: Any) -> str:
        return row.render(obs, machine.context(status, obs))

    def generic(status: Any, obs: Any) -> Any:
        return replace(
            status,
            state=status.state if row.target == SAME else row.target,
            reason=row.reason or status.reason,
            message=render(status, obs),
        )

    record_tuple = is_record_tuple(status_type)
    if record_tuple:
        fields: list[str] = list(status_type._fields)
    elif (
        attrs.has(status_type)
        and not hasattr(status_type, "__attrs_init__")  # a hand-written __init__: by keyword
        and not any(f.kw_only for f in attrs.fields(status_type))
    ):
        fields = [f.name for f in attrs.fields(status_type) if f.init]
    else:
        fields = []
    if not {"state", "reason", "message"} <= set(fields):
        return generic
    values = {
        "state": "s.state" if row.target == SAME else "TARGET",
        "reason": "REASON" if row.reason else "s.reason",
        "message": "render(s, o)" if "{" in row.message else "MESSAGE",
    }
    items = ", ".join(
        values.get(f) or (f"s[{i}]" if record_tuple else f"s.{f}") for i, f in enumerate(fields)
    )
    call = f"new(cls, ({items},))" if record_tuple else f"cls({items})"
    namespace: dict[str, Any] = {
        "cls": status_type,
        "new": tuple.__new__,
        "render": render,
        "generic": generic,
        "TARGET": row.target,
        "REASON": row.reason,
        "MESSAGE": row.message,
    }
    if record_tuple and all(values.get(f, "s") in _CONSTANTS for f in fields):
        # Every field is the row's own constant: the values are one tuple, built once.
        namespace["VALUES"] = tuple(namespace[values[f]] for f in fields)
        call = "new(cls, VALUES)"
    # A status of a subclass keeps its class (and its own fields): the generic path.
    source = (
        "def enter(s, o):\n"
        "    if s.__class__ is not cls:\n"
        "        return generic(s, o)\n"
        f"    return {call}\n"
    )
    enter: Callable[[Any, Any], Any] = compile_function(
        "enter", source, namespace, owner=f"{machine.name}.enter[{row.label}]"
    )
    return enter


def apply_reference(machine: Machine[S], status: S, obs: Observation) -> S:
    """What :meth:`Machine.apply` does, in plain Python (the compiled steps are held to it by
    the tests): the row :meth:`Machine.select` picks for ``obs`` in ``status``'s state gives
    the status back unchanged if it is an ignore row, else its effect's result, else
    :meth:`Machine.enter`'s (the row's target, reason and message)."""
    row = machine.select(status, obs)
    if row.ignore:
        return status
    if row.effect is not None:
        result: S = row.effect(status, obs, row)
        return result
    return machine.enter(status, obs, row)


def replace(status: R, /, **changes: Any) -> R:
    """A copy of a status record with ``changes``: attrs classes and NamedTuples alike.

    For attrs classes this is ``attrs.evolve`` (the changes are init names, the class's own
    ``__init__`` runs, validators included) compiled once per class to one call."""
    if isinstance(status, tuple):
        return status._replace(**changes)  # type: ignore[attr-defined,no-any-return]
    evolve = _EVOLVERS.get(status.__class__)
    if evolve is None:
        evolve = _EVOLVERS[status.__class__] = evolver(status.__class__)
    copy: R = evolve(status, **changes)
    return copy


def enter(
    status: R,
    obs: Observation,
    row: Row,
    /,
    *,
    context: Mapping[str, Any] | None = None,
    **changes: Any,
) -> R:
    """What a row's effect returns when it takes the row as the default does and sets more:
    the row's target (the state kept for ``SAME``), its reason (else the status's), its
    message rendered from ``obs`` (and ``context``), and ``changes`` -- evolved from
    ``status``, so every field neither the row nor ``changes`` names survives (ADR 0147)::

        def attaching(status, obs, row):
            return enter(status, obs, row, node=obs.node)

    Args:
        status: the object's status.
        obs: the observation, whose fields fill the message's placeholders.
        row: the row taken.
        context: more placeholder values (the machine's :meth:`Machine.context`).
        **changes: more fields to set on the status.

    Returns:
        The new status.
    """
    state = status.state if row.target == SAME else row.target  # type: ignore[attr-defined]
    return replace(
        status,
        state=state,
        reason=row.reason or status.reason,  # type: ignore[attr-defined]
        message=row.render(obs, context or {}),
        **changes,
    )


_EVOLVERS: dict[type[Any], Callable[..., Any]] = {}
_KEEP = object()
#: The names the generated ``evolve`` uses besides the fields' own (and the comprehension's).
_EVOLVER_NAMES = frozenset({"_s_", "_cls_", "_keep_", "_replace_", "k", "v"})


def evolver(cls: type[R]) -> Callable[..., R]:
    """:func:`replace` for statuses of ``cls``, compiled to one function with each init field
    as a keyword parameter that defaults to the status's own value. A machine module binds
    it once (``_evolve = evolver(PodStatus)``): that saves :func:`replace` packing the changes
    twice. A status of a subclass is handed to :func:`replace` (it keeps its class)."""
    fields = [f for f in attrs.fields(cls) if f.init]  # type: ignore[arg-type]
    names = {f.alias for f in fields} | {f.name for f in fields}
    if not fields or names & _EVOLVER_NAMES:  # a field the generated code's names would hide
        return lambda status, /, **changes: attrs.evolve(status, **changes)
    params = ", ".join(f"{f.alias}=_keep_" for f in fields)
    given = ", ".join(f"({f.alias!r}, {f.alias})" for f in fields)
    args = ", ".join(
        f"{f.alias}=_s_.{f.name} if {f.alias} is _keep_ else {f.alias}" for f in fields
    )
    source = (
        f"def evolve(_s_, /, *, {params}):\n"
        "    if _s_.__class__ is not _cls_:\n"
        f"        return _replace_(_s_, **{{k: v for k, v in ({given},) if v is not _keep_}})\n"
        f"    return _cls_({args})\n"
    )
    namespace: dict[str, Any] = {"_cls_": cls, "_keep_": _KEEP, "_replace_": replace}
    owner = f"evolve[{cls.__module__}.{cls.__qualname__}]"
    evolve: Callable[..., R] = compile_function("evolve", source, namespace, owner=owner)
    return evolve


def field_setter(cls: type[R], *names: str) -> Callable[..., R]:
    """A copy of a status of ``cls`` with the init fields ``names`` set, given positionally
    in that order: ``set_fields(status, *values)``, compiled to one constructor call in
    which every other field is the status's own. An effect that sets most of a status (the
    Pod's poll) costs what building it field by field costs, and a field it does not name --
    one added later among them -- survives (ADR 0147). A status of a subclass is handed to
    :func:`replace` (it keeps its class and its own fields)."""
    fields = [f for f in attrs.fields(cls) if f.init]  # type: ignore[arg-type]
    aliases = {f.alias for f in fields}
    unknown = [n for n in names if n not in aliases]
    if unknown or len(set(names)) != len(names):
        raise TypeError(f"field_setter({cls.__name__}): not distinct init fields: {names}")
    if ({f.alias for f in fields} | {f.name for f in fields}) & _EVOLVER_NAMES:
        return lambda status, /, *values: attrs.evolve(
            status, **dict(zip(names, values, strict=True))
        )
    given = ", ".join(f"{n}={n}" for n in names)
    args = ", ".join(
        f"{f.alias}={f.alias}" if f.alias in names else f"{f.alias}=_s_.{f.name}" for f in fields
    )
    source = (
        f"def set_fields(_s_, {', '.join(names)}):\n"
        "    if _s_.__class__ is not _cls_:\n"
        f"        return _replace_(_s_, {given})\n"
        f"    return _cls_({args})\n"
    )
    namespace: dict[str, Any] = {"_cls_": cls, "_replace_": replace}
    owner = f"set_fields[{cls.__module__}.{cls.__qualname__}]"
    set_fields: Callable[..., R] = compile_function("set_fields", source, namespace, owner=owner)
    return set_fields


def _bound_apply(machine: Machine[Any]) -> Callable[[Any, Any], Any]:
    """:meth:`Machine.apply` for ``machine``: its compiled steps, one dict lookup and a call;
    a status an equal observation left unchanged is answered from memory (ADR 0166)."""
    steps = machine._steps
    select = machine.select
    memory = machine._unchanged
    known = memory.get
    free = unchanged.FREE

    def apply(status: Any, obs: Any) -> Any:
        held = known(id(status))
        if (  # left unchanged by an observation equal in every field that counts
            held is not None
            and held() is status
            and held.cls is obs.__class__
            and held.key_of(obs) == held.key
            and (held.at is free or held.at == obs.at)
        ):
            return status
        step = steps.get((status.state, obs.__class__))
        if step is None:
            select(status, obs)  # raises the right error
            raise AssertionError("unreachable")  # pragma: no cover
        after = step(status, obs)
        if after is status or after == status:
            unchanged.remember(memory, step, status, obs)
            return status
        return after

    apply.__doc__ = Machine.apply.__doc__
    return apply


def _memoised_flips(machine: Machine[Any]) -> Callable[[Any, Any], tuple[Flip, ...]]:
    """:meth:`Machine.flips` for a machine whose flips depend on (from, to, reason, message)
    alone: memoised by them (bounded; ``Flip`` records are immutable, sharing is safe)."""
    memo = machine._flip_memo
    compute = machine._state_flips

    def flips(before: Any, after: Any) -> tuple[Flip, ...]:
        source = before.state
        target = after.state
        if source == target:
            return ()
        key = (source, target, after.reason, after.message)
        found = memo.get(key)
        if found is None:
            found = compute(before, after)
            if len(memo) >= _FLIP_MEMO_SIZE:
                memo.clear()
            memo[key] = found
        return found

    flips.__doc__ = Machine.flips.__doc__
    return flips


@attrs.frozen(slots=True)
class Growth:
    """A machine whose status grows with one declared limit (ADR 0144): ``limits()`` is the
    :class:`~lifecycle.tables.Limits` holding it, ``field`` the limit's name, and
    ``build(machine, n)`` the largest status with ``n`` of them. A runner on a store that
    bounds its records measures it at start-up and refuses a store too small for the limit."""

    limits: Callable[[], Limits]
    field: str
    build: Callable[[Any, int], Any]


class Machine(Generic[S]):
    """A pure, table-driven lifecycle. Subclasses set the class attributes and ``initial``.

    One instance serves every tracked object: statuses are plain records, never machine
    objects, so tracking 100k objects costs 100k small records and nothing more.
    """

    name: ClassVar[str]
    kind: ClassVar[str]
    status_type: ClassVar[type[Any]]
    table: ClassVar[Table]
    verdicts: ClassVar[tuple[Verdict[Any], ...]] = ()
    #: States whose entry is a Warning event (everything else is Normal).
    warning_states: ClassVar[frozenset[str]] = frozenset()
    #: The reporting controller stamped on this machine's events (``""``: not named; the
    #: Kubernetes emitter then reports them as :attr:`reporting_controller`).
    controller: ClassVar[str] = ""
    #: The ``apiVersion`` of this machine's objects in Kubernetes (``"v1"``,
    #: ``"example.com/v1alpha1"``; ``""``: not a Kubernetes object): the Kubernetes emitter
    #: names it in each Event's ``regarding``, and the Kubernetes store finds the object's
    #: resource from it and :attr:`plural` when the host maps no resource for the kind.
    api_version: ClassVar[str] = ""
    #: The resource's plural name in the API (``""``: the kind in lower case, plus ``s``).
    plural: ClassVar[str] = ""
    #: Whether the objects live in a namespace (``False``: cluster-scoped, as a NodeClaim).
    namespaced: ClassVar[bool] = True
    #: Whether the library defines this kind's resource (``lifecycle manifests`` writes its
    #: CRD); ``False`` for a kind another project defines (a Pod, Karpenter's NodeClaim).
    defines_resource: ClassVar[bool] = True
    #: Whether the host also merges this machine's conditions into a Pod's status (its
    #: controller then needs to patch Pods, and its conditions are written as a Pod's are).
    writes_pod_conditions: ClassVar[bool] = False
    #: Field values the property suite (``lifecycle.testing``) draws observations from, as
    #: its ``samples=`` takes them (``{"Class.field": [...], "field": [...]}``): what drives
    #: this machine into every state where a field's type alone rarely does.
    samples: ClassVar[Mapping[str, Any]] = {}
    #: How this machine's status grows with one of its declared limits, for the stores that
    #: bound a record (``None``: it does not grow with any); see :class:`Growth`.
    growth: ClassVar[Growth | None] = None
    #: Write attempts this machine allows per observation (``None``: the runner's policy).
    #: ``1`` is a direct write: a conflict is not retried, the next observation re-reads.
    write_attempts: ClassVar[int | None] = None
    #: The names of :meth:`signature`'s parts, where a machine declares one beyond the state
    #: (the Pod's); a replay's timeline then says which part a same-state event changed.
    signature_names: ClassVar[tuple[str, ...]] = ()
    #: Findings of ``lifecycle check`` that are deliberate: finding key -> reason (ADR 0085).
    analysis_allowances: ClassVar[Mapping[str, str]] = {}
    #: Effects that may enter a state other than their row's target: effect -> those states
    #: (``lifecycle check`` counts them as possible targets of every row with that effect).
    effect_targets: ClassVar[Mapping[Effect, tuple[str, ...]]] = {}
    #: The version of this machine's stored records (statuses, journal entries): bump it when
    #: the status, the observations or the states change, and declare how older records read
    #: in ``upcasters`` (ADR 0088).
    schema_version: ClassVar[int] = 1
    #: Per older version N, the :class:`~lifecycle.tables.Upcaster` from N's records to N+1's.
    upcasters: ClassVar[Mapping[int, Upcaster]] = {}
    #: The version and fingerprint stores write beside each record (computed once).
    schema: Schema

    def __init__(self) -> None:
        self._vocabulary = {o.name(): o for o in self.table.observations}
        # Compiled builders for observations of plain fields, unless a subclass decides
        # which class a name means.
        self._builders = {
            name: build
            for name, cls in self._vocabulary.items()
            if type(self).observation_type is Machine.observation_type
            and (build := serde.fast_builder(cls)) is not None
        }
        self._by_pair = self.table.by_pair
        self._has_actions = any(r.action is not None for r in self.table.rows)
        #: Whether this machine can send action events (a row declares one, or a subclass
        #: overrides ``actions``); the runner skips the lookup otherwise.
        self.has_actions = self._has_actions or type(self).actions is not Machine.actions
        #: The observation types this machine accepts, for an O(1) membership check.
        self.accepted = frozenset(self.table.observations)
        # The hot path: one callable per (state, observation type), compiled once here so
        # that ``apply`` is a dict lookup and a call: no row is searched per observation
        # (ADR 0015).
        self._steps: dict[tuple[str, type[Observation]], Callable[[Any, Any], Any]] = {
            key: self._compile(key, rows) for key, rows in self._by_pair.items()
        }
        # Entering a state is an event whose type depends on the state alone unless a
        # subclass decides otherwise; then flips can be memoised by their content.
        self._type_by_state = type(self).event_type is Machine.event_type
        self._mixed: frozenset[str] = frozenset()
        self._warning_reasons: frozenset[tuple[str, str]] = frozenset()
        self._warning_states = self._declared_warnings() if self._type_by_state else None
        self._flip_memo: dict[tuple[str, str, str, str], tuple[Flip, ...]] = {}
        #: The statuses an observation left unchanged, by ``id`` (ADR 0166).
        self._unchanged: dict[int, unchanged.Entry] = {}
        # A machine declaring a wider flip signature (the Pod) also flips without a change of
        # state; every other machine keeps the state-only test below.
        self._signed = type(self).signature is not Machine.signature
        # ``verdicts``, ``event_type`` and ``controller`` are declared on the class, so what
        # a flip is depends only on (from, to, reason, message) when no verdict is declared.
        self._memoise_flips = not self.verdicts and self._type_by_state and not self._signed
        self.schema = Schema.of(self)
        # ``apply`` and ``flips`` as plain functions closed over this machine's tables, set on
        # the instance (no bound method, no attribute lookups per call), unless a subclass
        # overrides them (ADR 0015).
        #: Whether ``apply`` returns the status itself for every result equal to it (the
        #: compiled ``apply``, ADR 0166): then "unchanged" is an identity test.
        self.unchanged_is_identity = type(self).apply is Machine.apply
        if self.unchanged_is_identity:
            self.__dict__["apply"] = _bound_apply(self)
        if type(self).flips is Machine.flips and self._memoise_flips:
            self.__dict__["flips"] = _memoised_flips(self)

    def _compile(
        self, key: tuple[str, type[Observation]], rows: tuple[Row, ...]
    ) -> Callable[[Any, Any], Any]:
        """The rows of one (state, observation type) as one function that does what
        :func:`apply_reference` does for that pair: each guard in table order, then the first
        holding row's effect, with no loop over the rows and no lookups. A lone row that needs
        no call of its own is its own step: an ignore row's, or its compiled entry."""
        first = rows[0]
        if len(rows) == 1 and first.guard is None and first.effect is None:
            if first.ignore:
                return _unchanged
            if type(self).enter is Machine.enter:
                return _enter_step(self.status_type, first, self)
        namespace: dict[str, Any] = {"InvalidTransition": InvalidTransition, "NAME": self.name}
        lines = ["def step(s, o):"]
        for i, row in enumerate(rows):
            lines.append(f"    # {' '.join(row.label.splitlines())}")
            take = self._take(i, row, namespace)
            if row.guard is None:
                lines.append(f"    {take}")
                break
            namespace[f"G{i}"] = row.guard
            lines += [f"    if G{i}(s, o):", f"        {take}"]
        else:  # every row guarded: the table's validation makes this unreachable
            lines.append("    raise InvalidTransition(NAME, s.state, o.__class__.__name__)")
        owner = f"{self.name}.step[{key[0] or '∅'},{key[1].__name__}]"
        step_fn: Callable[[Any, Any], Any] = compile_function(
            "step", "\n".join(lines), namespace, owner=owner
        )
        return step_fn

    def _take(self, i: int, row: Row, namespace: dict[str, Any]) -> str:
        """The statement that takes row ``i`` in a compiled step (its names go in
        ``namespace``): the status itself for an ignore row, else the row's effect, else
        :meth:`enter` (compiled for the row unless a subclass overrides it)."""
        if row.ignore:
            return "return s"
        namespace[f"R{i}"] = row
        if row.effect is not None:
            namespace[f"E{i}"] = row.effect
            return f"return E{i}(s, o, R{i})"
        if type(self).enter is not Machine.enter:
            namespace[f"E{i}"] = self.enter
            return f"return E{i}(s, o, R{i})"
        namespace[f"E{i}"] = _enter_step(self.status_type, row, self)
        return f"return E{i}(s, o)"

    # -- vocabulary ---------------------------------------------------------------------
    @property
    def vocabulary(self) -> Mapping[str, type[Observation]]:
        return self._vocabulary

    def observation_type(self, name: str) -> type[Observation]:
        """The observation class a name (a trace's ``observe``) stands for.

        Args:
            name: the class's name, as traces and journals write it.

        Returns:
            The class, one of the table's observations.

        Raises:
            UnknownObservation: no observation of this machine has that name (the known
                ones are listed).
        """
        try:
            return self._vocabulary[name]
        except (KeyError, TypeError):  # TypeError: not a name at all (unhashable)
            known = ", ".join(sorted(self._vocabulary))
            raise UnknownObservation(
                f"{self.name}: unknown observation {preview(name)}; known: {known}"
            ) from None

    def observation(self, name: str, at: object, fields: Mapping[str, Any]) -> Observation:
        """Build an observation from untrusted data, refusing anything malformed or outside
        the input bounds (ADR 0073) with :class:`~lifecycle.InvalidObservation`.

        Args:
            name: the observation's class name.
            at: its time: an aware datetime or an RFC 3339 string.
            fields: its other fields, as JSON data; ``at`` is given apart, once.

        Returns:
            The observation.

        Raises:
            UnknownObservation: an unknown name.
            InvalidObservation: malformed fields, or a value past the input bounds, so a
                hostile trace or a buggy host cannot plant a huge value in the journal.
        """
        if type(name) is str and type(fields) is dict:
            build = self._builders.get(name)
            if build is not None:
                built: Observation | None = build(fields, at)
                if built is not None:
                    serde.built[0] = built
                    return built
        cls = self.observation_type(name)
        if not isinstance(fields, Mapping):
            raise InvalidObservation(
                f"{name}: fields must be an object (a mapping), got {preview(fields)}"
            )
        if "at" in fields:
            raise InvalidObservation(f"{name}: 'at' is given once, beside the fields")
        made = serde.strict_structure(cls, {**fields, "at": at}, name)
        serde.built[0] = made
        return made

    # -- the pure core ------------------------------------------------------------------
    def initial(self, ref: ObjectRef) -> S:
        """The status of an object never observed (a subclass defines it).

        Args:
            ref: the object.

        Returns:
            Its status in the table's initial state.
        """
        raise NotImplementedError

    def state(self, status: S) -> str:
        """The exclusive state of a status.

        Args:
            status: the object's status.

        Returns:
            ``status.state``.
        """
        return status.state

    def is_terminal(self, status: S) -> bool:
        """Whether the object is done.

        Args:
            status: the object's status.

        Returns:
            ``True`` in one of the table's terminal states.
        """
        return status.state in self.table.terminal

    def select(self, status: S, obs: Observation) -> Row:
        """The row that ``obs`` takes from ``status``, or a clear error.

        Args:
            status: the object's status.
            obs: the observation; the first row of its (state, type) pair whose guard holds
                is taken, in declared order.

        Returns:
            The row.

        Raises:
            UnknownObservation: ``obs`` is none of the table's observations.
            InvalidTransition: the table has no row for it in this state: a refused
                observation is loud, never silently ignored (declare an ``ignore`` row).
        """
        rows = self._by_pair.get((status.state, obs.__class__))
        if rows is None:
            if obs.__class__ not in self.table.observations:
                raise UnknownObservation(
                    f"{self.name}: {obs.__class__.__name__} is not one of its observations"
                )
            raise InvalidTransition(self.name, status.state, obs.__class__.__name__)
        for row in rows:
            if row.guard is None or row.guard(status, obs):
                return row
        raise InvalidTransition(self.name, status.state, obs.__class__.__name__)  # unreachable

    def apply(self, status: S, obs: Observation) -> S:
        """The next status. Pure: no clock, no I/O, no randomness, so a replay of the journal
        gives the same statuses anywhere.

        Args:
            status: the object's status.
            obs: the observation.

        Returns:
            The next status (``status`` itself when nothing changes).

        Raises:
            UnknownObservation: as :meth:`select`.
            InvalidTransition: as :meth:`select`.
        """
        step = self._steps.get((status.state, obs.__class__))
        if step is None:
            self.select(status, obs)  # raises the right error
            raise AssertionError("unreachable")  # pragma: no cover
        result: S = step(status, obs)
        return result

    def next_tick(self, status: S) -> datetime | None:
        """When ``status`` next needs a :class:`~lifecycle.Tick`, from the deadlines its
        table's timer rows declare (:meth:`Table.next_tick`), or ``None``: no timer runs.
        A host requeues the object for then (ADR 0149).

        Args:
            status: the object's status.

        Returns:
            The earliest deadline, or ``None`` when no timer runs in its state.
        """
        return self.table.next_tick(status)

    def enter(self, status: S, obs: Observation, row: Row) -> S:
        """The default effect: take the row's target, reason and message.

        Args:
            status: the object's status.
            obs: the observation, whose fields fill the message's placeholders.
            row: the row taken.

        Returns:
            The status in the row's target (the same state for ``SAME``), with its reason
            (the status's own when the row gives none) and rendered message.
        """
        target = status.state if row.target == SAME else row.target
        result: S = replace(
            status,
            state=target,
            reason=row.reason or status.reason,
            message=row.render(obs, self.context(status, obs)),
        )
        return result

    def context(self, status: S, obs: Observation) -> Mapping[str, Any]:
        """Values for message placeholders the table declares in ``context`` (e.g. a name
        taken from the status). The default supplies none.

        Args:
            status: the object's status.
            obs: the observation.

        Returns:
            Placeholder name -> value.
        """
        return {}

    def actions(self, status: S, obs: Observation) -> tuple[Flip, ...]:
        """The action events (not transitions) of the row ``obs`` takes from ``status``.

        Args:
            status: the object's status.
            obs: the observation.

        Returns:
            The row's action as a flip that keeps the state, or ``()``.
        """
        if not self._has_actions:
            return ()
        action = self.select(status, obs).action
        if action is None:
            return ()
        message = render(action.message, obs, self.context(status, obs))
        return (
            Flip(
                status.state,
                status.state,
                action.reason,
                action.type,
                message,
                controller=self.controller,
            ),
        )

    @property
    def description(self) -> str:
        """What this machine's reference page says of it (``lifecycle docs``): its module's
        docstring, where a machine explains its behaviour, else its class's (``""``: none)."""
        module = sys.modules.get(type(self).__module__)
        text = getattr(module, "__doc__", None) or type(self).__doc__
        return text or ""

    @property
    def reporting_controller(self) -> str:
        """Who reports this machine's Events: :attr:`controller`, else ``<name>-controller``."""
        return self.controller or f"{self.name}-controller"

    def kubernetes_status(self, status: S) -> dict[str, Any]:
        """The status subresource body (the API's camelCase names, JSON-ready) ``status``
        writes to Kubernetes (ADR 0099). The default writes a status's ``conditions`` as
        ``metav1.Condition`` s; a machine of another shape (the Pod's phase and Ready, the
        NodeClaim's phase) overrides it.

        Args:
            status: the object's status.

        Returns:
            The body, as the status subresource takes it.

        Raises:
            ValueError: a status with no Kubernetes shape (no conditions, and no override).
        """
        conditions = getattr(status, "conditions", None)
        if isinstance(conditions, tuple) and all(isinstance(c, Condition) for c in conditions):
            return {"conditions": kubernetes_conditions(conditions)}
        raise ValueError(
            f"machine {self.name!r}: a {type(status).__name__} has no Kubernetes status shape "
            "(give the machine a kubernetes_status(status) method)"
        )

    def fallback_message(self, ref: ObjectRef, flip: Flip, error: Exception) -> str:
        """The message of the fallback Warning sent when the write carrying ``flip`` failed.
        It names both the cause and the error (redacted: a store error can quote a connection
        string), and never claims the status was written.

        Args:
            ref: the object.
            flip: the change whose write failed.
            error: the store's error.

        Returns:
            The Warning's message.
        """
        what = flip.condition or flip.target
        cause = flip.message or flip.reason
        return f"{cause}; recording the {ref.kind} {what} status also failed: {redact(str(error))}"

    def _declared_warnings(self) -> frozenset[str]:
        """The states whose entry the table declares a Warning: the table is the source of
        event types. A state its rows enter with both types is decided per row, by the
        reason the row gives (a row returning to a state as a Warning beside a Normal one:
        ADR 0147); rows of both types giving one reason need an ``event_type`` override (the
        Pod's Terminated is one), and a ``warning_states`` that disagrees is an error."""
        by_state, by_reason = self._entry_types()
        mixed = {state for state, kinds in by_state.items() if len(kinds) > 1}
        self._check_mixed(mixed, by_reason)
        # states entered with both types, and the (state, reason) pairs of them that warn
        self._mixed = frozenset(mixed)
        self._warning_reasons = frozenset(
            key
            for key, kinds in by_reason.items()
            if key[0] in mixed and EventType.WARNING in kinds
        )
        warnings = frozenset(
            s for s, kinds in by_state.items() if s not in mixed and EventType.WARNING in kinds
        )
        if self.warning_states and self.warning_states != warnings:
            raise TableError(
                f"{self.name}: warning_states {sorted(self.warning_states)} disagrees with the "
                f"table, which enters {sorted(warnings)} with a Warning"
            )
        return warnings

    def _entry_types(
        self,
    ) -> tuple[dict[str, set[EventType]], dict[tuple[str, str], set[EventType]]]:
        """The event types each state is entered with by the reachable rows, and each
        (state, reason)."""
        by_state: dict[str, set[EventType]] = {}
        by_reason: dict[tuple[str, str], set[EventType]] = {}
        reachable = {id(r): r for rows in self._by_pair.values() for r in rows}
        for row in reachable.values():
            if row.ignore or row.event is None or row.target == SAME:
                continue
            by_state.setdefault(row.target, set()).add(row.event)
            by_reason.setdefault((row.target, row.reason), set()).add(row.event)
        return by_state, by_reason

    def _check_mixed(
        self, mixed: set[str], by_reason: dict[tuple[str, str], set[EventType]]
    ) -> None:
        """Refuse a state entered with both types where one reason (or none) gives both."""
        for (state, reason), kinds in by_reason.items():
            if state in mixed and (len(kinds) > 1 or not reason):
                raise TableError(
                    f"{self.name} table: state {state!r} is entered as Normal and as Warning "
                    + (f"with the reason {reason!r}" if reason else "by a row giving no reason")
                    + "; give each row its own reason, or override event_type to decide from "
                    "the status"
                )

    def event_type(self, status: S) -> EventType:
        """The type of the event for entering ``status``'s state, as the table declares it:
        by the state, or for a state entered with both types by the reason its row gave.

        Args:
            status: the status entered.

        Returns:
            ``EventType.WARNING`` or ``EventType.NORMAL``.
        """
        if status.state in self._mixed:
            warns = (status.state, status.reason) in self._warning_reasons
            return EventType.WARNING if warns else EventType.NORMAL
        warnings = self._warning_states or self.warning_states
        return EventType.WARNING if status.state in warnings else EventType.NORMAL

    def signature(self, status: S) -> Hashable:
        """What an exclusive-state event is a change of: the state itself by default. A
        machine whose events follow more declares it here (the Pod: phase, reason, Ready and
        pod IP); the event still names the state it leaves and enters, and its reason and
        message are the status's own (ADR 0001).

        Args:
            status: the object's status.

        Returns:
            A hashable value; an event is sent when it differs between two statuses.
        """
        return status.state

    def flips(self, before: S, after: S) -> tuple[Flip, ...]:
        """What changed that people should hear about: the exclusive state (or the declared
        :meth:`signature`), or a verdict.

        Args:
            before: the status before the observation.
            after: the status after it.

        Returns:
            The changes, each becoming one event; ``()`` when nothing people hear about
            changed.
        """
        if self._memoise_flips:
            if before.state == after.state:
                return ()
            key = (before.state, after.state, after.reason, after.message)
            memo = self._flip_memo.get(key)
            if memo is None:
                memo = self._state_flips(before, after)
                if len(self._flip_memo) >= _FLIP_MEMO_SIZE:
                    self._flip_memo.clear()
                self._flip_memo[key] = memo
            return memo
        return self._state_flips(before, after)

    def _state_flips(self, before: S, after: S) -> tuple[Flip, ...]:
        out: tuple[Flip, ...] = ()
        if before.state != after.state or (
            self._signed and self.signature(before) != self.signature(after)
        ):
            out = (
                Flip(
                    before.state,
                    after.state,
                    after.reason,
                    self.event_type(after),
                    after.message,
                    controller=self.controller,
                ),
            )
        for verdict in self.verdicts:
            flip = verdict.flip(before, after)
            if flip is not None:
                if self.controller:
                    flip = attrs.evolve(flip, controller=self.controller)
                out = (*out, flip)
        return out

    def fold(self, ref: ObjectRef, observations: Iterable[Observation]) -> S:
        """The status a journal of observations leads to, from the initial one.

        Args:
            ref: the object.
            observations: applied in order.

        Returns:
            The status.

        Raises:
            InvalidTransition: an observation the table refuses where it comes.
        """
        status: S = self.initial(ref)
        for obs in observations:
            status = self.apply(status, obs)
        return status

    # -- records ------------------------------------------------------------------------
    def dump_status(self, status: S) -> dict[str, Any]:
        """A status as JSON data, as stores keep it.

        Args:
            status: the status.

        Returns:
            Plain values; :meth:`load_status` reads them back.
        """
        return serde.dump(status)

    def load_status(self, data: Mapping[str, Any]) -> S:
        """A status from what :meth:`dump_status` wrote.

        Args:
            data: the stored data.

        Returns:
            The status, of :attr:`status_type`.
        """
        result: S = serde.load(self.status_type, data)
        return result

    def dump_observation(self, obs: Observation) -> dict[str, Any]:
        """An observation's fields as JSON data, ``at`` left out (it is stored apart).

        Args:
            obs: the observation.

        Returns:
            Plain values.
        """
        data = serde.dump(obs)
        data.pop("at", None)
        return data

    def load_observation(self, name: str, at: str, fields: Mapping[str, Any]) -> Observation:
        """Rebuild an observation this library wrote itself (journal rows): trusted, so not
        bounded as :meth:`observation` bounds untrusted input.

        Args:
            name: the observation's class name.
            at: its time, as stored.
            fields: its fields, as :meth:`dump_observation` wrote them.

        Returns:
            The observation.

        Raises:
            UnknownObservation: an unknown name.
        """
        cls = self.observation_type(name)
        return serde.load(cls, {**fields, "at": at})
