"""The Kubernetes Events a run would leave, computed on the run's own clock (no API server).

:func:`simulate` (``kubernetes.simulate_events``) feeds committed transitions (a trace's, in
order) through the emitter's Event building and correlator, over an in-memory API, with the
clock set to each transition's ``at``; the 6-minute finish and 30-minute refresh fire when
the trace's clock reaches them. The result is the Event table ``kubectl get events`` would
show: one row per Event object, its API-visible series count, first and last time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from .event import Event
from .sinks import MemoryEventSink

if TYPE_CHECKING:
    from ..._core.transition import Transition

#: Enough finish periods after the last transition for every series to get its final patch
#: (a series closes 6 to 12 minutes after its last Event).
_SETTLE_TICKS = 3


@attrs.frozen(slots=True)
class EventTableRow:
    """One Event object as the API server holds it after the run.

    Attributes:
        namespace: the Event's namespace.
        name: the Event's name.
        type: ``Normal`` or ``Warning``.
        reason: its reason.
        kind: the regarding object's kind.
        object: the regarding object's name.
        note: its message.
        count: ``series.count`` as the API server has it (1 without a series).
        first_time: when the series' first Event was recorded.
        last_time: when it was last seen.
    """

    namespace: str
    name: str
    type: str
    reason: str
    kind: str
    object: str
    note: str
    #: ``series.count`` as the API server has it (1 for an Event without a series)
    count: int
    #: ``eventTime``: when the first Event of the series was recorded
    first_time: datetime
    #: ``series.lastObservedTime`` as the API server has it, else ``eventTime``
    last_time: datetime


class _Clock:
    """The trace's clock: set, never read from the wall."""

    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def move_to(self, at: datetime) -> None:
        self.now = max(self.now, at)


class Simulated(Protocol):
    """What a simulation drives of an emitter: its Event building and its correlator."""

    @property
    def correlator(self) -> Any: ...

    def build(self, transition: Transition) -> Event | None: ...


#: ``(sink, clock) -> emitter``: an emitter on the in-memory API ``sink`` and the trace's
#: ``clock``, with no timers or workers of its own. The emitter's module supplies it
#: (:func:`lifecycle.emitters.kubernetes.simulate_events`): this module does not import the
#: module that imports it.
MakeEmitter = Callable[[MemoryEventSink, Callable[[], datetime]], Simulated]


def simulate(
    transitions: Iterable[Transition], make_emitter: MakeEmitter, *, settle: bool = True
) -> list[EventTableRow]:
    """The Event table the transitions would leave through the emitter ``make_emitter``
    builds, each transition recorded at its ``at`` (see
    :func:`lifecycle.emitters.kubernetes.simulate_events`)."""
    pending = list(transitions)
    sink = MemoryEventSink()
    if not pending:
        return []
    clock = _Clock(pending[0].at)
    emitter = make_emitter(sink, clock)
    correlator = emitter.correlator
    seen: set[str] = set()
    for t in pending:
        _run_timers_until(correlator, clock, t.at)
        clock.move_to(t.at)
        tid = "" if t.action else t.id
        if tid:
            if tid in seen:
                continue
            seen.add(tid)
        event = emitter.build(t)
        if event is not None:
            correlator.record(event)
    if settle:
        for _ in range(_SETTLE_TICKS * 2):
            if not len(correlator):
                break
            clock.move_to(correlator.next_due)
            correlator.tick()
    return table(sink.events())


def _run_timers_until(correlator: Any, clock: _Clock, until: datetime) -> None:
    while correlator.next_due <= until:
        clock.move_to(correlator.next_due)
        correlator.tick()


def table(bodies: Iterable[Mapping[str, Any]]) -> list[EventTableRow]:
    """Rows of stored Event bodies, sorted by first time, then name."""
    rows = []
    for body in bodies:
        event = Event.from_body(body)
        series = event.series
        rows.append(
            EventTableRow(
                namespace=event.namespace,
                name=event.name,
                type=event.type,
                reason=event.reason,
                kind=event.regarding.kind,
                object=event.regarding.name,
                note=event.note,
                count=series.count if series else 1,
                first_time=event.event_time,
                last_time=series.last_observed_time if series else event.event_time,
            )
        )
    return sorted(rows, key=lambda r: (r.first_time, r.name))


def format_event_table(rows: Sequence[EventTableRow]) -> str:
    """The rows as a text table in ``kubectl get events`` order of columns, with absolute
    times (a replay has no "now" to count ages from).

    Args:
        rows: the rows, as :func:`simulate_events` returns them.

    Returns:
        The table, one line per row under a header.
    """
    header = ("FIRST SEEN", "LAST SEEN", "TYPE", "REASON", "OBJECT", "COUNT", "MESSAGE")
    lines = [header] + [
        (
            r.first_time.strftime("%Y-%m-%dT%H:%M:%SZ"),
            r.last_time.strftime("%Y-%m-%dT%H:%M:%SZ"),
            r.type,
            r.reason,
            f"{r.kind.lower()}/{r.object}",
            str(r.count),
            " ".join(r.note.split()),
        )
        for r in rows
    ]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header) - 1)]
    return "\n".join(
        "   ".join(cell.ljust(w) for cell, w in zip(line[:-1], widths, strict=True))
        + "   "
        + line[-1]
        for line in lines
    )
