"""Delivery: hand committed events to every emitter, then mark them delivered -- once, for the
``Runner``, the ``AsyncRunner`` and the outbox ``Dispatcher`` (ADR 0092).

One ordering guarantee everywhere: within one delivery, each object's events go out in the
order they were committed (version, then position), and an object stops at its first event
that some emitter refused -- its later events stay in the outbox behind it, so none overtakes
it (they follow with it on redelivery). Every emitter gets every event it is handed; one
emitter failing never keeps an event from the others. Only events every emitter took are
marked delivered; a mark that fails is logged (the events repeat, under their ids: delivery
is at least once). A store without an outbox (no ``mark_delivered``) delivers inline only.

Best-effort events that are not in the outbox (a row's action events, a fallback Warning) are
:meth:`Delivery.announce`-d: handed to every emitter, a failure logged, nothing queued.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ._core.errors import StoreError
from ._core.transition import Transition
from .emitters.base import Emitter

#: Marks outbox ids delivered (a store's ``mark_delivered``).
Mark = Callable[[Sequence[str]], None]


class Delivery:
    """Hands events to ``emitters`` in the one order and says which to mark delivered."""

    __slots__ = ("emitters", "log")

    def __init__(self, emitters: Sequence[Emitter], log: Any) -> None:
        self.emitters = tuple(emitters)
        #: structlog-style logger for emitter and mark failures
        self.log = log

    def send(self, events: Sequence[Transition]) -> list[str]:
        """Hand ``events`` (committed, in commit order per object) to every emitter; the ids
        every emitter took. An object stops at its first refused event."""
        if not self.emitters:
            return [t.id for t in events]
        delivered: list[str] = []
        stopped: set[str] = set()
        for t in events:
            if stopped and t.ref.uid in stopped:
                continue
            if self._hand(t):
                delivered.append(t.id)
            else:
                stopped.add(t.ref.uid)
        return delivered

    def announce(self, events: Sequence[Transition]) -> None:
        """Hand best-effort events (actions, a fallback Warning) to every emitter: not in
        the outbox, so nothing is marked or repeated."""
        if self.emitters:
            for t in events:
                self._hand(t)

    def deliver(self, events: Sequence[Transition], mark: Mark | None) -> int:
        """:meth:`send`, then ``mark`` what every emitter took; how many that was."""
        if not events:
            return 0
        if self.emitters:
            delivered = self.send(events)
        elif len(events) == 1:  # nobody to hand it to: it is delivered (the hot path)
            delivered = [events[0].id]
        else:
            delivered = [t.id for t in events]
        if delivered and mark is not None:
            try:
                mark(delivered)
            except StoreError as e:
                self.unmarked(e)
        return len(delivered)

    def unmarked(self, error: StoreError, what: str = "events delivered") -> None:
        """Log a mark that failed: the events (or intents) will repeat, under their ids."""
        self.log.warning(f"could not mark {what}; they will repeat", error=str(error))

    def _hand(self, t: Transition) -> bool:
        """``t`` to every emitter; whether every one took it."""
        ok = True
        for emitter in self.emitters:
            try:
                emitter.emit(t)
            except Exception as e:  # an emitter must never undo a commit
                ok = False
                self.log.warning(
                    "emitter failed; event stays in the outbox",
                    id=t.id,
                    emitter=type(emitter).__name__,
                    error=repr(e),
                )
        return ok


def in_order(rows: Sequence[Transition]) -> list[Transition]:
    """Claimed outbox rows in delivery order: objects as they first appear, each object's
    rows by version and position."""
    first: dict[str, int] = {}
    for t in rows:
        first.setdefault(t.ref.uid, len(first))
    return sorted(rows, key=lambda t: (first[t.ref.uid], t.version, t.n))


def marker(store: object) -> Mark | None:
    """``store``'s ``mark_delivered``, or ``None`` for a store without an outbox."""
    mark: Mark | None = getattr(store, "mark_delivered", None)
    return mark
