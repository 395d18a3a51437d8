"""The machine base: pure ``apply`` driven by a compiled table, and flip computation."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import attrs

from . import serde
from .errors import InvalidObservation, InvalidTransition, UnknownObservation
from .observation import Observation
from .refs import Condition, EventType, ObjectRef
from .table import SAME, Row, Table, render
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


@attrs.frozen(slots=True)
class Verdict(Generic[S]):
    """A condition outside the exclusive set whose status flips are events of their own.

    An event fires when the condition becomes True (``on_true``), and, if ``on_absent_to_false``
    is set, when it first appears as False. True -> False, and unchanged status, emit nothing.
    """

    condition: str
    read: Callable[[S], Condition | None]
    on_true: EventType = EventType.WARNING
    on_absent_to_false: EventType | None = None

    def flip(self, before: S, after: S) -> Flip | None:
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
    #: The reporting controller stamped on this machine's events (``""``: not named).
    controller: ClassVar[str] = ""
    #: Write attempts this machine allows per observation (``None``: the runner's policy).
    #: ``1`` is a direct write: a conflict is not retried, the next observation re-reads.
    write_attempts: ClassVar[int | None] = None

    def __init__(self) -> None:
        self._vocabulary = {o.name(): o for o in self.table.observations}
        self._dispatch = self.table.dispatch
        self._has_actions = any(r.action is not None for r in self.table.rows)

    # -- vocabulary ---------------------------------------------------------------------
    @property
    def vocabulary(self) -> Mapping[str, type[Observation]]:
        return self._vocabulary

    def observation_type(self, name: str) -> type[Observation]:
        try:
            return self._vocabulary[name]
        except KeyError:
            known = ", ".join(sorted(self._vocabulary))
            raise UnknownObservation(
                f"{self.name}: unknown observation {name!r}; known: {known}"
            ) from None

    def observation(self, name: str, at: object, fields: Mapping[str, Any]) -> Observation:
        """Build an observation from untrusted data, refusing anything malformed."""
        cls = self.observation_type(name)
        if "at" in fields:
            raise InvalidObservation(f"{name}: 'at' is given once, beside the fields")
        return serde.strict_structure(cls, {**fields, "at": at}, name)

    # -- the pure core ------------------------------------------------------------------
    def initial(self, ref: ObjectRef) -> S:
        raise NotImplementedError

    def state(self, status: S) -> str:
        return status.state

    def is_terminal(self, status: S) -> bool:
        return status.state in self.table.terminal

    def select(self, status: S, obs: Observation) -> Row:
        """The row that ``obs`` takes from ``status``, or a clear error."""
        steps = self._dispatch.get((status.state, obs.__class__))
        if steps is None:
            if obs.__class__ not in self.table.observations:
                raise UnknownObservation(
                    f"{self.name}: {obs.__class__.__name__} is not one of its observations"
                )
            raise InvalidTransition(self.name, status.state, obs.__class__.__name__)
        for step in steps:
            if step.guard is None or step.guard(status, obs):
                return step.row
        raise InvalidTransition(self.name, status.state, obs.__class__.__name__)  # unreachable

    def apply(self, status: S, obs: Observation) -> S:
        """The next status. Pure: no clock, no I/O, no randomness."""
        steps = self._dispatch.get((status.state, obs.__class__))
        if steps is None:
            self.select(status, obs)  # raises the right error
        assert steps is not None
        for step in steps:
            if step.guard is None or step.guard(status, obs):
                row = step.row
                if row.ignore:
                    return status
                if step.effect is not None:
                    result: S = step.effect(status, obs, row)
                    return result
                return self.enter(status, obs, row)
        raise InvalidTransition(self.name, status.state, obs.__class__.__name__)  # unreachable

    def enter(self, status: S, obs: Observation, row: Row) -> S:
        """The default effect: take the row's target, reason and message."""
        target = status.state if row.target == SAME else row.target
        result: S = attrs.evolve(
            status,  # type: ignore[misc]
            state=target,
            reason=row.reason or status.reason,
            message=row.render(obs),
        )
        return result

    def context(self, status: S, obs: Observation) -> Mapping[str, Any]:
        """Values for message placeholders the table declares in ``context`` (e.g. a name
        taken from the status). The default supplies none."""
        return {}

    def actions(self, status: S, obs: Observation) -> tuple[Flip, ...]:
        """The action events (not transitions) of the row ``obs`` takes from ``status``."""
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

    def fallback_message(self, ref: ObjectRef, flip: Flip, error: Exception) -> str:
        """The message of the fallback Warning sent when the write carrying ``flip`` failed.
        It names both the cause and the error, and never claims the status was written."""
        what = flip.condition or flip.target
        cause = flip.message or flip.reason
        return f"{cause}; recording the {ref.kind} {what} status also failed: {error}"

    def event_type(self, status: S) -> EventType:
        """The type of the event for entering ``status``'s state."""
        return EventType.WARNING if status.state in self.warning_states else EventType.NORMAL

    def flips(self, before: S, after: S) -> tuple[Flip, ...]:
        """What changed that people should hear about: the exclusive state, or a verdict."""
        out: tuple[Flip, ...] = ()
        if before.state != after.state:
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
        status: S = self.initial(ref)
        for obs in observations:
            status = self.apply(status, obs)
        return status

    # -- records ------------------------------------------------------------------------
    def dump_status(self, status: S) -> dict[str, Any]:
        return serde.dump(status)

    def load_status(self, data: Mapping[str, Any]) -> S:
        result: S = serde.load(self.status_type, data)
        return result

    def dump_observation(self, obs: Observation) -> dict[str, Any]:
        data = serde.dump(obs)
        data.pop("at", None)
        return data

    def load_observation(self, name: str, at: str, fields: Mapping[str, Any]) -> Observation:
        """Rebuild an observation this library wrote itself (journal rows)."""
        cls = self.observation_type(name)
        return serde.load(cls, {**fields, "at": at})
