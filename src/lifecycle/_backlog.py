"""What an interrupted call committed but did not finish (ADR 0105).

A call can be interrupted after its commit landed: an asyncio cancellation (a host's
``wait_for`` timing out, a task group failing), ``KeyboardInterrupt``, an emitter raising a
``BaseException``. Its events may then not have reached every emitter, and the ids it
delivered may not be marked. Those rows are in the outbox (so a crash is covered by
``redeliver`` and the ``Dispatcher``), and the runner keeps them here: its next call, and
``redeliver``, send the events first -- each object's in commit order, before any newer event
of it -- and mark the ids. The link intents such a call left go back to the runner's pending
intents (:class:`lifecycle._link_intents.PendingIntents`), which its next call applies first,
lane by lane. Sans-I/O: the drivers of ``lifecycle._batch`` and ``Runner`` move it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from ._core.transition import Transition


class Backlog:
    """Events an interrupted call did not deliver and ids it did not mark; thread-safe."""

    __slots__ = ("_events", "_lock", "_marks", "held")

    def __init__(self) -> None:
        self._events: list[Transition] = []
        self._marks: list[str] = []
        self._lock = threading.Lock()
        #: Whether anything is held (an attribute: the runner's hot path reads it).
        self.held = False

    def __bool__(self) -> bool:
        return self.held

    def hold_events(self, events: Iterable[Transition]) -> None:
        """Committed events to send again (some emitters may have had them: at least once)."""
        with self._lock:
            known = {t.id for t in self._events}
            self._events += [t for t in events if t.id not in known]
            self.held = bool(self._events or self._marks)

    def hold_marks(self, ids: Iterable[str]) -> None:
        """Outbox ids delivered (or intents confirmed) but not yet marked."""
        with self._lock:
            known = set(self._marks)
            self._marks += [i for i in ids if i not in known]
            self.held = bool(self._events or self._marks)

    def take(self) -> tuple[list[Transition], list[str]]:
        """Everything held, removed: (events, ids to mark). The caller holds back what it
        does not finish."""
        with self._lock:
            events, marks = self._events, self._marks
            self._events, self._marks = [], []
            self.held = False
            return events, marks
