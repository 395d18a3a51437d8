"""Delivery marks a SQLite store holds for its next commit (ADR 0132, ADR 0153).

A delivered event's outbox row is deleted by the next transaction the store runs anyway: a
commit, a claim, a count, the close. :class:`HeldMarks` keeps those ids meanwhile and owns the
*marker thread*, which has them written on their own if no commit took them within the mark
delay. The writing itself is the store's (a transaction on its connection, under its lock: the
marks are taken and deleted as one step, so a claim never leases a row already delivered).
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import weakref
from collections.abc import Callable
from datetime import datetime
from typing import Any

from .._core import threads
from .base import OutboxSummary

__all__ = [
    "HELD_MARKS",
    "MARKER_IDLE",
    "MARK_DELAY",
    "OUTBOX_SUMMARY",
    "HeldMarks",
    "delete_marked",
    "outbox_summary_of",
]

#: Delivery marks a store without group commit holds for the next commit before it writes
#: them in a transaction of their own (a crash loses at most these: their events repeat).
HELD_MARKS = 1024
#: Seconds a held mark waits for a commit to carry it before it is written on its own (well
#: inside any lease, so no other store claims a delivered row).
MARK_DELAY = 0.2
#: Seconds the marker thread waits for a mark before it ends (the next mark starts another).
MARKER_IDLE = 30.0
#: What a store without its marker thread does instead (the log line of ADR 0140).
_NO_MARKER = (
    "SQLite delivery marks are written by the caller, or by the next commit, claim or close"
)


class HeldMarks:
    """The delivery marks held for the next transaction, and the marker thread that has them
    written within ``delay`` if none takes them. ``due`` is the store's turn to write what is
    held (``False``: it is closing), reached weakly, so a store nobody closes is still
    collected; the thread ends when idle for ``idle`` seconds."""

    def __init__(
        self, delay: float, idle: float, due: weakref.WeakMethod[Callable[[], bool]]
    ) -> None:
        self._delay = delay
        self._idle = idle
        self._due = due
        self._held: list[str] = []
        self._lock = threading.Lock()
        #: wakes the thread that writes held marks no commit took within the delay
        self._waiting = threading.Event()
        self._stop = threading.Event()
        #: the marker thread, while one runs
        self.marker: threading.Thread | None = None
        #: Times a marker thread could not be started (ADR 0140): marks were then written
        #: by the caller, or by the next commit, claim or close.
        self.refusals = 0
        self.closing = False

    def __len__(self) -> int:
        with self._lock:
            return len(self._held)

    def take(self) -> list[str]:
        """Every held mark, now the caller's to write."""
        with self._lock:
            marks, self._held = self._held, []
        return marks

    def add(self, ids: list[str]) -> list[str]:
        """Hold ``ids`` for the next commit (or the marker thread). What the caller writes
        now instead: every held mark once ``HELD_MARKS`` wait, or when no marker thread could
        be started; else nothing."""
        with self._lock:
            first = not self._held
            self._held.extend(ids)
            if len(self._held) < HELD_MARKS and (not first or self._wake()):
                return []
            # a full batch, or no marker thread to write them later: written now
            ids, self._held = self._held, []
        return ids

    def hold(self, marks: list[str]) -> None:
        """Put ``marks`` back for the next transaction (the one that took them did not land),
        and have the marker thread see them."""
        if marks:
            with self._lock:
                self._held[:0] = marks
                self._wake()  # no thread: the next commit, claim or close takes them

    def _wake(self) -> bool:
        """Have held marks written within the mark delay if no commit takes them first:
        other stores on the file then never claim a delivered row (they wait out its lease,
        far longer). One thread per store, started with the first held mark (under the
        lock); it ends when idle for ``idle`` seconds and holds the store only weakly, so a
        store nobody closes is still collected. ``False``: no thread could be started (ADR
        0140; logged once per store), so the caller writes the marks itself or leaves them to
        the next commit, claim or close -- the next wake tries again."""
        if self.marker is None and not self.closing:
            marker = threading.Thread(target=self._run, name="lifecycle-sqlite-marks", daemon=True)
            told = self.refusals > 0
            if not threads.start(marker, _NO_MARKER, log=not told):
                self.refusals += 1
                return False
            self.marker = marker  # only a started thread: close joins it
        self._waiting.set()
        return True

    def _ended(self) -> bool:
        """The marker thread found nothing to do for ``idle`` seconds: it ends (and the next
        held mark starts another) unless a wake came meanwhile."""
        with self._lock:
            if self._waiting.is_set() or self.marker is not threading.current_thread():
                return False
            self.marker = None
            return True

    def _run(self) -> None:
        """The marker thread: after each wake, wait the delay for a commit to take the held
        marks, then have the store write what is left; ends at once when the store closes
        (its close writes what is held) or is collected, and after ``idle`` seconds without
        a wake."""
        while not self._stop.is_set():
            if not self._waiting.wait(timeout=self._idle):
                if self._due() is None or self._ended():
                    return
                continue
            self._waiting.clear()
            if self._stop.wait(self._delay):
                return
            due = self._due()
            if due is None or not due():
                return
            del due

    def close(self) -> None:
        """No thread from now on; the running one ends, after a write it started."""
        self.closing = True
        self._stop.set()
        self._waiting.set()
        marker = self.marker
        if marker is not None:  # a write it started finishes before the connection closes
            marker.join(timeout=10)


def delete_marked(db: sqlite3.Connection, ids: list[str]) -> None:
    """Delete the outbox rows of delivered events, inside the caller's transaction."""
    if ids:
        db.executemany("DELETE FROM outbox WHERE id = ?", [(i,) for i in ids])


#: What waits in the outbox: how many rows, and the oldest one's observation time (the
#: transition's ``at``; the SQLite outbox records no commit time).
OUTBOX_SUMMARY = "SELECT count(*), min(json_extract(payload, '$.at')) FROM outbox"


def outbox_summary_of(row: Any) -> OutboxSummary:
    """The :class:`OutboxSummary` of an :data:`OUTBOX_SUMMARY` row."""
    if row is None:
        return OutboxSummary(0, None)
    count, oldest = row
    at = None
    if isinstance(oldest, str):
        with contextlib.suppress(ValueError):
            at = datetime.fromisoformat(oldest)
    return OutboxSummary(int(count), at)
