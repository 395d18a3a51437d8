"""Flips (what a status change means) and Transitions (a flip committed at a version)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, NamedTuple

import attrs

from . import serde
from .observation import Observation
from .refs import EventType, ObjectRef

#: How the empty (initial) state is shown wherever a state is printed.
EMPTY = "∅"


@attrs.frozen(slots=True)
class Flip:
    """An exclusive-state change, or a declared verdict condition change, not yet written.

    ``condition`` is ``""`` for the exclusive state; for a verdict it names the condition and
    ``source``/``target`` are its statuses (``""`` meaning absent). ``controller`` is who
    reports it (``""``: not named), e.g. ``workflow-controller`` for a timeout it wrote on a Job.

    Attributes:
        source: the state (or condition status) left.
        target: the state (or condition status) entered.
        reason: the event's reason.
        type: Normal or Warning.
        message: the event's message.
        condition: the verdict's condition, ``""`` for the exclusive state.
        controller: who reports it, ``""`` for the machine's own controller.
    """

    source: str
    target: str
    reason: str
    type: EventType
    message: str
    condition: str = ""
    controller: str = ""


@attrs.frozen(slots=True, eq=False)
class Intent:
    """A linked write recorded in its source's commit: observe ``observation`` (by name) on
    ``target`` of machine ``machine``, at the source's ``at`` (ADR 0090).

    It rides in the outbox as a :class:`Transition` whose ``intent`` is set (never handed to an
    emitter) and is applied until the target confirms it. ``live`` is the observation itself
    when this process derived it; ``fields`` its stored form (JSON-ready, ``at`` left out) when
    read back from a store. Two intents are equal when they name the same write, whichever
    form they hold.
    """

    target: ObjectRef
    machine: str
    observation: str
    live: Observation | None = None
    fields: Mapping[str, Any] | None = None

    def data(self) -> Mapping[str, Any]:
        """The observation's fields, JSON-ready, without ``at``."""
        if self.fields is not None:
            return self.fields
        assert self.live is not None
        data = serde.dump(self.live)
        data.pop("at", None)
        return data

    def _key(self) -> tuple[Any, ...]:
        import json  # here: a host's import does not load it (ADR 0139)

        text = json.dumps(self.data(), sort_keys=True, separators=(",", ":"))
        return (self.target, self.machine, self.observation, text)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Intent):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def as_row(self) -> dict[str, Any]:
        """JSON-ready data for the outbox and journal payload."""
        t = self.target
        return {
            "ref": [t.kind, t.namespace, t.name, t.uid],
            "machine": self.machine,
            "observe": self.observation,
            "with": self.data(),
        }

    @classmethod
    def from_row(cls, data: Mapping[str, Any]) -> Intent:
        kind, namespace, name, uid = data["ref"]
        return cls(
            ObjectRef(kind, namespace, name, uid),
            data["machine"],
            data["observe"],
            None,
            dict(data["with"]),
        )


class Transition(NamedTuple):
    """The event: a flip that was durably written as ``version`` of ``ref``'s status.

    ``id`` is stable across redelivery: ``<uid>:<version>:<n>``. A fallback Warning (the write
    failed) regards the last committed ``version`` and has the id
    ``<uid>:<version>:f<n>-<reason>``.
    An ``action`` event (a row's :class:`~lifecycle.tables.Action`: not a transition, status
    untouched, may repeat) regards the version it was sent at and has no id (``""``).
    ``controller`` names the reporting controller when the machine declares one.

    An immutable named tuple, since one is made per event and a tuple is built in one call
    where an attrs record sets each field in turn (ADR 0067): read it by field name, copy it
    with ``_replace``.

    Attributes:
        ref: the object.
        machine: the machine's name.
        source: the state (or condition status) left; ``""`` for a new object.
        target: the state (or condition status) entered.
        reason: the event's reason.
        type: Normal or Warning.
        message: the event's message.
        version: the status version the event was committed with.
        at: the observation's time.
        n: the event's number within its commit (its id's last part).
        condition: a verdict's condition, ``""`` for the exclusive state.
        fallback: a Warning sent because the write failed (the status was not written).
        controller: the reporting controller, when the machine names one.
        action: a row's action event, not a transition (no id, may repeat).
        epoch: the store epoch of the commit (see below).
        intent: set on a link intent (see below).
        trace: the committing span's ``traceparent`` (see below).
    """

    ref: ObjectRef
    machine: str
    source: str
    target: str
    reason: str
    type: EventType
    message: str
    version: int
    at: datetime
    n: int = 0
    condition: str = ""
    fallback: bool = False
    controller: str = ""
    action: bool = False
    #: the store epoch of the commit ("" unless the store's history changed: ADR 0068)
    epoch: str = ""
    #: Set on a link intent (ADR 0090): an outbox entry applied to ``intent.target``,
    #: never an event; its id follows the source's events, ``<uid>:<version>:<n>``.
    intent: Intent | None = None
    #: The W3C ``traceparent`` of the span that committed it, where a tracing telemetry
    #: adapter is on (``lifecycle.telemetry``): a redelivery links to it. Not part of the id.
    trace: str = ""

    @property
    def id(self) -> str:
        """The event's id, stable across redelivery (see the class); ``""`` for an action."""
        known = _IDS.get(id(self))
        if known is not None and known[0] is self:
            return known[1]
        if self.action:
            return ""
        if self.fallback:  # two different lost writes at one version must not share an id
            return f"{self.ref.uid}:{self.version}:f{self.n}-{self.reason}"
        if self.epoch:  # a version recommitted after a lost history is another event
            return f"{self.ref.uid}:{self.version}:{self.n}@{self.epoch}"
        return f"{self.ref.uid}:{self.version}:{self.n}"

    @property
    def flip(self) -> str:
        """The change, as every output of the library shows it: ``∅ → Provisioning``, with
        the condition first for a verdict (``HardwareFailed: ∅ → True``)."""
        text = f"{self.source or EMPTY} → {self.target or EMPTY}"
        return f"{self.condition}: {text}" if self.condition else text

    def as_dict(self) -> dict[str, object]:
        """A flat, JSON-ready projection (the ``--format jsonl`` line). ``controller`` and
        ``action`` appear only when set.

        Returns:
            The fields as plain values, ``at`` in ISO 8601 and the id included.
        """
        # Equal instants in other zones (or either side of a DST fold) print differently.
        key = (self.at, self.at.tzinfo, self.at.fold)
        at = _ISO.get(key)
        if at is None:
            if len(_ISO) >= 4096:
                _ISO.clear()
            at = _ISO[key] = self.at.isoformat()
        out: dict[str, object] = {
            "at": at,
            "machine": self.machine,
            "kind": self.ref.kind,
            "namespace": self.ref.namespace,
            "name": self.ref.name,
            "uid": self.ref.uid,
            "type": self.type.value,
            "reason": self.reason,
            "from": self.source,
            "to": self.target,
            "condition": self.condition,
            "message": self.message,
            "version": self.version,
            "id": self.id,
            "fallback": self.fallback,
        }
        if self.controller:
            out["controller"] = self.controller
        if self.action:
            out["action"] = True
        return out


#: ``isoformat`` of recent event times (events of one tick share their time).
_ISO: dict[tuple[datetime, object, int], str] = {}

#: The ids of the transitions the last :func:`stamp` made, by object identity: the store's
#: commit and the delivery each ask for the id of a new event, and it is built once, when the
#: event is stamped (ADR 0015). Only the last stamp's are kept (an observation stamps, commits
#: and delivers before the next stamps); each entry holds its transition, so an ``id()`` is
#: not reused while its entry is here. Any other transition builds its id when asked.
_IDS: dict[int, tuple[Transition, str]] = {}
#: Builds a :class:`Transition` from all its fields in order: the named tuple's own ``_make``,
#: which refuses a missing or an extra field (``tuple.__new__`` paid under 2 %; ADR 0154).
_new: Callable[[type[Transition], tuple[Any, ...]], Transition] = Transition._make.__func__  # type: ignore[attr-defined]


def store_epoch(store: object) -> str:
    """The epoch a store stamps its events with (``""`` for a store without epochs; a
    wrapper's ``store`` is looked through)."""
    epoch = getattr(store, "epoch", None)
    if epoch is None:
        epoch = getattr(getattr(store, "store", None), "epoch", None)
    return str(epoch or "")


def stamp(
    flips: tuple[Flip, ...],
    ref: ObjectRef,
    machine: str,
    version: int,
    at: datetime,
    epoch: str = "",
) -> tuple[Transition, ...]:
    """Give each flip its committed version and position (and the store's ``epoch``)."""
    _IDS.clear()
    uid = ref.uid
    out = []
    for n, f in enumerate(flips):
        # All seventeen fields in order (ADR 0067), counted by ``_make``.
        t: Transition = _new(Transition, (
            ref, machine, f.source, f.target, f.reason, f.type, f.message, version, at, n,
            f.condition, False, f.controller, False, epoch, None, "",
        ))  # fmt: skip
        _IDS[id(t)] = (t, f"{uid}:{version}:{n}@{epoch}" if epoch else f"{uid}:{version}:{n}")
        if len(flips) == 1:  # most commits: one flip, returned without the list (ADR 0170)
            return (t,)
        out.append(t)
    return tuple(out)
