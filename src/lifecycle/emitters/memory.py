"""An emitter that keeps what it receives, with assertions for tests."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from .._core.refs import EventType
from .._core.transition import Transition
from .base import DeliveryKey, delivery_key


class MemoryEmitter:
    """Collects transitions in delivery order. Use it in tests the way you would use
    ``structlog.testing.capture_logs``: run the code, then query or assert."""

    def __init__(self) -> None:
        self.events: list[Transition] = []
        self._lock = threading.Lock()

    def emit(self, transition: Transition) -> None:
        """Keep ``transition`` (thread-safe: an acknowledging host may call from any thread).

        Args:
            transition: the transition received, appended to :attr:`events`.
        """
        with self._lock:
            self.events.append(transition)

    # -- queries --------------------------------------------------------------------------
    def for_uid(self, uid: str) -> list[Transition]:
        """The events of one object.

        Args:
            uid: the object's ``ref.uid``.

        Returns:
            Its events, in delivery order (repeats included: see :meth:`unique`).
        """
        return [t for t in self.events if t.ref.uid == uid]

    def for_kind(self, kind: str) -> list[Transition]:
        """The events of one kind of object.

        Args:
            kind: the objects' ``ref.kind`` (``"Pod"``, ``"NodeClaim"``).

        Returns:
            Their events, in delivery order.
        """
        return [t for t in self.events if t.ref.kind == kind]

    def reasons(self, uid: str | None = None) -> list[str]:
        """The reasons emitted, in order: the shortest way to assert a path.

        Args:
            uid: only this object's events; ``None`` for all.

        Returns:
            Each event's ``reason``.
        """
        events = self.events if uid is None else self.for_uid(uid)
        return [t.reason for t in events]

    def ids(self) -> list[str]:
        """The transition ids, in delivery order.

        Returns:
            Each event's ``id`` (``""`` for an action event, which has none).
        """
        return [t.id for t in self.events]

    def unique(self) -> list[Transition]:
        """The events with repeats (same ``id`` and content, from redelivery) removed, first
        kept; an id handed out again for other content is another event (ADR 0141). Action
        events have no id and are all kept.

        Returns:
            The events without redelivered repeats, in first-delivery order.
        """
        seen: set[DeliveryKey] = set()
        out = []
        for t in self.events:
            if t.action:
                out.append(t)
                continue
            key = delivery_key(t)
            if key not in seen:
                seen.add(key)
                out.append(t)
        return out

    def clear(self) -> None:
        with self._lock:
            self.events.clear()

    # -- assertions -----------------------------------------------------------------------
    def assert_reasons(self, uid: str, expected: Sequence[str]) -> None:
        """The reasons emitted for ``uid``, in order, are exactly ``expected``.

        Args:
            uid: the object's ``ref.uid``.
            expected: its reasons in order, all of them: a missing or extra one fails.

        Raises:
            AssertionError: when they differ, naming both lists.
        """
        got = self.reasons(uid)
        if got != list(expected):
            raise AssertionError(f"events for {uid}: expected {list(expected)}, got {got}")

    def assert_emitted(
        self, reason: str, *, uid: str | None = None, type: EventType | None = None
    ) -> Transition:
        """Exactly one event with ``reason`` (and ``uid``/``type`` if given).

        Args:
            reason: the event's reason.
            uid: only this object's events, if given.
            type: only events of this type (Normal or Warning), if given.

        Returns:
            That event, to assert on its message or times.

        Raises:
            AssertionError: when none or more than one matches, listing every event.
        """
        found = [
            t
            for t in self.events
            if t.reason == reason
            and (uid is None or t.ref.uid == uid)
            and (type is None or t.type == type)
        ]
        if len(found) != 1:
            raise AssertionError(
                f"expected one {reason!r} event, found {len(found)}: "
                f"{[(t.ref.uid, t.reason, t.type.value) for t in self.events]}"
            )
        return found[0]

    def assert_none(self, uid: str | None = None) -> None:
        """Nothing was emitted.

        Args:
            uid: only this object's events; ``None`` for all.

        Raises:
            AssertionError: naming the ids of what was emitted.
        """
        events = self.events if uid is None else self.for_uid(uid)
        if events:
            raise AssertionError(f"expected no events, got {[t.id for t in events]}")

    def assert_no_duplicates(self) -> None:
        """No event (id and content, :func:`~lifecycle.emitters.base.delivery_key`) was
        delivered twice, and no (uid, version, n) came under two ids.

        Raises:
            AssertionError: naming the ids delivered more than once.
        """
        keys = [delivery_key(t) for t in self.events if t.id]  # action events carry no id
        if len(keys) != len(set(keys)):
            dupes = sorted({k[0] for k in keys if keys.count(k) > 1})
            raise AssertionError(f"delivered more than once: {dupes}")
