"""The condition model shared by the Job, Workflow, Certification and WorkloadRun machines.

Behaviour follows ``docs/upstream/workflow-job-certification.md`` ("The condition model"):

- a condition is ``{type, status, reason, message, observedGeneration, lastTransitionTime}``;
  upserting one keeps ``lastTransitionTime`` unless its status changed (:func:`upsert`);
- the exclusive set is ``InProgress / Succeeded / Failed``, in that order: one True, the others
  False with reason ``NotApplicable`` (WorkloadRun: ``Superseded``) (:func:`apply_exclusive`);
- the state is :func:`true_type`: the first True type in that order, else ``""``. A dual-true
  status (InProgress and Failed True, as an older controller could leave it) reads InProgress.

A status here keeps only its conditions: ``state``, ``reason`` and ``message`` are read from
them (:class:`Conditioned`), so the exclusive state and the conditions can never disagree.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, ClassVar, Protocol, TypeVar

import attrs

from .._core.errors import InvalidObservation
from .._core.machine import Machine, replace
from .._core.observation import Observation
from .._core.refs import Condition, EventType, ObjectRef, set_condition
from .._core.table import ANY, SAME, Action, Row, ignore

NEW = ""
IN_PROGRESS = "InProgress"
SUCCEEDED = "Succeeded"
FAILED = "Failed"
EXCLUSIVE = (IN_PROGRESS, SUCCEEDED, FAILED)
STATES = (NEW, *EXCLUSIVE)
TERMINAL = (SUCCEEDED, FAILED)
LIVE = (NEW, IN_PROGRESS)

TRUE = "True"
FALSE = "False"
NOT_APPLICABLE = "NotApplicable"
SUPERSEDED = "Superseded"


def find(conditions: Iterable[Condition], type_: str) -> Condition | None:
    for c in conditions:
        if c.type == type_:
            return c
    return None


def true_type(conditions: Iterable[Condition]) -> str:
    """The first exclusive type with status True, in the order InProgress, Succeeded, Failed."""
    found = {c.type for c in conditions if c.status == TRUE}
    for type_ in EXCLUSIVE:
        if type_ in found:
            return type_
    return NEW


def upsert(
    conditions: tuple[Condition, ...],
    type_: str,
    status: str,
    reason: str,
    message: str,
    at: datetime,
    generation: int | None,
) -> tuple[Condition, ...]:
    """Set one condition; ``lastTransitionTime`` moves only on a status change (or when new).

    Returns ``conditions`` itself when nothing differs (status, reason, message, generation).
    """
    current = find(conditions, type_)
    updated = set_condition(current, type_, status, reason, message, at)
    if updated.observed_generation != generation:
        updated = replace(updated, observed_generation=generation)
    if current is None:
        return (*conditions, updated)
    if updated == current:
        return conditions
    return tuple(updated if c.type == type_ else c for c in conditions)


def apply_exclusive(
    conditions: tuple[Condition, ...],
    target: str,
    reason: str,
    message: str,
    at: datetime,
    generation: int | None,
    *,
    others: str = NOT_APPLICABLE,
) -> tuple[Condition, ...]:
    """``target`` True with ``reason``/``message``; every other exclusive type False with
    ``others`` and an empty message; ``generation`` stamped on all three (``None``: not)."""
    if target not in EXCLUSIVE:
        raise ValueError(f"{target!r} is not one of {EXCLUSIVE}")
    out = conditions
    for type_ in EXCLUSIVE:
        if type_ == target:
            out = upsert(out, type_, TRUE, reason, message, at, generation)
        else:
            out = upsert(out, type_, FALSE, others, "", at, generation)
    return _ordered(out)


def _ordered(conditions: tuple[Condition, ...]) -> tuple[Condition, ...]:
    """The exclusive set first, in its order; other conditions after, as they came."""
    head = [c for t in EXCLUSIVE for c in conditions if c.type == t]
    if len(head) == len(conditions) and all(a is b for a, b in zip(head, conditions, strict=True)):
        return conditions
    return (*head, *(c for c in conditions if c.type not in EXCLUSIVE))


class Conditioned:
    """Mixin for a status that is its conditions: ``state``/``reason``/``message`` derive."""

    __slots__ = ()
    conditions: tuple[Condition, ...]

    @property
    def state(self) -> str:
        return true_type(self.conditions)

    @property
    def reason(self) -> str:
        c = find(self.conditions, self.state) if self.state else None
        return "" if c is None else c.reason

    @property
    def message(self) -> str:
        c = find(self.conditions, self.state) if self.state else None
        return "" if c is None else c.message

    def condition(self, type_: str) -> Condition | None:
        """The status's condition of one type.

        Args:
            type_: the condition type (``Succeeded``, ``ValidationFailed`` ...).

        Returns:
            The status's condition of that type, or ``None`` when it has none.
        """
        return find(self.conditions, type_)


class StatusLike(Protocol):
    @property
    def state(self) -> str: ...
    @property
    def reason(self) -> str: ...
    @property
    def message(self) -> str: ...
    @property
    def clock(self) -> datetime | None: ...


CS = TypeVar("CS", bound=StatusLike)


class ConditionMachine(Machine[CS]):
    """A machine over :class:`Conditioned` statuses.

    Every status records ``clock``: the latest ``at`` of an observation that changed it. A
    :class:`~lifecycle.Tick` before that clock is refused (time does not go back); the clock
    moves only with a real change, so a no-op observation leaves the status identical.
    """

    warning_states: ClassVar[frozenset[str]] = frozenset({FAILED})

    def initial(self, ref: ObjectRef) -> CS:
        """A fresh status named after ``ref``, with no condition yet.

        Args:
            ref: the object the status is for; its name becomes the status's ``name``.

        Returns:
            The empty status: no condition is true, so its ``state`` is ``""``.
        """
        result: CS = self.status_type(name=ref.name)
        return result

    def apply(self, status: CS, obs: Observation) -> CS:
        clock = status.clock
        if obs.is_tick and clock is not None and obs.at < clock:
            raise InvalidObservation(
                f"{self.name}: Tick at {obs.at.isoformat()} goes back in time (the status "
                f"last changed at {clock.isoformat()})"
            )
        after = super().apply(status, obs)
        if after is status or after == status:
            return status
        if clock is None or obs.at > clock:
            after = replace(after, clock=obs.at)
        return after


def exclusive(
    status: Any,
    obs: Observation,
    row: Row,
    message: str,
    *,
    generation: bool = True,
    others: str = NOT_APPLICABLE,
    **changes: Any,
) -> Any:
    """The common effect: the row's target (or the current state for ``SAME``) becomes the
    true condition with the row's reason and ``message``; ``changes`` ride along."""
    target = status.state if row.target == SAME else row.target
    conditions = apply_exclusive(
        status.conditions,
        target,
        row.reason or status.reason,
        message,
        obs.at,
        status.generation if generation else None,
        others=others,
    )
    return replace(status, conditions=conditions, **changes)


class HasConditions(Protocol):
    @property
    def conditions(self) -> tuple[Condition, ...]: ...


HC = TypeVar("HC", bound=HasConditions)


def with_condition(
    status: HC,
    type_: str,
    value: str,
    reason: str,
    message: str,
    at: datetime,
    generation: int | None,
    **changes: Any,
) -> HC:
    """A condition outside the exclusive set (a verdict such as ``ValidationFailed``) set on
    ``status`` with :func:`upsert`; ``changes`` ride along."""
    conditions = upsert(status.conditions, type_, value, reason, message, at, generation)
    return replace(status, conditions=conditions, **changes)


def positive(_: object, attribute: attrs.Attribute[Any], value: int) -> None:
    if value < 1:
        raise ValueError(f"{attribute.name} must be at least 1, got {value}")


@attrs.frozen(slots=True, kw_only=True)
class SpecUpdated(Observation):
    """``metadata.generation`` moved on: stamped as observedGeneration on the exclusive
    conditions, status-only (an observedGeneration bump never emits).

    Attributes:
        generation: the object's ``metadata.generation``, at least 1.
    """

    generation: int = attrs.field(validator=positive)


def stale_generation(status: Any, obs: SpecUpdated) -> bool:
    """Guard: the observed generation is not newer than the stamped one."""
    return bool(obs.generation <= status.generation)


def stamp_generation(status: Any, obs: SpecUpdated, row: Row) -> Any:
    """Effect: a newer ``metadata.generation``, stamped on every exclusive condition
    (status-only)."""
    conditions = tuple(
        replace(c, observed_generation=obs.generation) if c.type in EXCLUSIVE else c
        for c in status.conditions
    )
    return replace(status, generation=obs.generation, conditions=conditions)


#: The rows of :class:`SpecUpdated` on a live status: a spec not newer than the stamped
#: generation (:func:`stale_generation`) changes nothing, a newer one is stamped
#: (:func:`stamp_generation`).
SPEC_UPDATED_ROWS: tuple[Row, ...] = (
    ignore(LIVE, SpecUpdated, "not newer than the stamped generation", guard=stale_generation),
    Row(
        LIVE,
        SpecUpdated,
        to=SAME,
        effect=stamp_generation,
        note="observedGeneration only: no event",
    ),
)


def action_row(
    obs: type[Observation],
    reason: str,
    kind: EventType,
    message: str,
    *,
    source: str | tuple[str, ...] = ANY,
    note: str = "informational",
) -> Row:
    """A row that only sends an action event (no status change; it may repeat)."""
    return Row(source, obs, to=SAME, ignore=True, note=note, action=Action(reason, kind, message))


def not_negative(_: object, attribute: attrs.Attribute[Any], value: float | None) -> None:
    if value is not None and value < 0:
        raise ValueError(f"{attribute.name} must not be negative, got {value}")


def seconds(later: datetime, earlier: datetime) -> float:
    return (later - earlier).total_seconds()


def go_duration(value: float) -> str:
    """Seconds as Go's ``time.Duration.String()`` writes them: ``5m0s``, ``4m30s``, ``1h0m0s``."""
    if value == 0:
        return "0s"
    sign = "-" if value < 0 else ""
    value = abs(value)
    if value < 1:
        return f"{sign}{value * 1000:g}ms"
    whole = int(value)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    fraction = f"{secs + (value - whole):.9f}".rstrip("0").rstrip(".")
    out = f"{hours}h" if hours else ""
    if hours or minutes:
        out += f"{minutes}m"
    return f"{sign}{out}{fraction}s"


def go_list(items: Iterable[str]) -> str:
    """A string slice as Go's ``%v`` prints it: ``[n1 n2]``."""
    return "[" + " ".join(items) + "]"
