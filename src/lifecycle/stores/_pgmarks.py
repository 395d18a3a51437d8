"""Delivered-marks held back and sent with the PostgreSQL store's next read (issue 19).

A mark (deleting delivered outbox rows) is not a durable write (ADR 0062): lost to a crash, the
events are delivered again under their ids. So the synchronous store does not spend a round trip
on it: :class:`HeldMarks` keeps the ids, and the store's next read on any connection -- the next
``load`` of ``Runner.observe``, ``load_many``, a claim, a count -- pipelines the mark in front
of it, one round trip for both. A mark is never held longer than ``delay`` seconds (a quarter
of the lease at most, so another replica never takes over events that were delivered): a
background thread sends what is due, and ``close`` sends the rest.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

#: The longest a mark is held back, in seconds (less when the lease is short).
MARK_DELAY = 0.2


class HeldMarks:
    """Outbox ids delivered and not yet marked, oldest first. Thread-safe.

    ``send(ids)`` marks ids on its own (the background thread and :meth:`close` call it); it
    must not raise, and gives the ids back with :meth:`restore` if it could not mark them."""

    def __init__(self, delay: float, send: Callable[[list[str]], None]) -> None:
        self.delay = delay
        self._send = send
        self._ids: list[str] = []
        self._since = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, ids: Iterable[str]) -> None:
        with self._lock:
            if not self._ids:
                self._since = time.monotonic()
            self._ids.extend(ids)
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(target=self._watch, name="lifecycle-pg-marks")
                self._thread.daemon = True
                self._thread.start()

    def take(self) -> list[str]:
        """Every held id (sorted, once each), now the caller's to mark."""
        if not self._ids:  # unlocked peek: the common case costs one attribute read
            return []
        with self._lock:
            ids, self._ids = self._ids, []
        return sorted(set(ids))

    def restore(self, ids: list[str]) -> None:
        """Give back ids a mark failed to send: they are sent with a later read."""
        if ids:
            with self._lock:
                if not self._ids:
                    self._since = time.monotonic()
                self._ids[:0] = ids

    def __len__(self) -> int:
        return len(self._ids)

    def _watch(self) -> None:
        while not self._stop.wait(min(self.delay / 2, 0.1)):
            if self._ids and time.monotonic() - self._since >= self.delay:
                ids = self.take()
                if ids:
                    self._send(ids)

    def close(self) -> None:
        """Stop the thread and send what is held."""
        self._stop.set()
        ids = self.take()
        if ids:
            self._send(ids)
