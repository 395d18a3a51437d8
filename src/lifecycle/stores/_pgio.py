"""What the two PostgreSQL drivers need beside the one store source (ADR 0126): the call
bounds of each (a watchdog thread for the synchronous store, the event loop's timers for the
asyncio one -- one interface, so the store's code is the same), the in-flight-loss signal,
the history report and the record-scan result types. No statement runs here."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Coroutine, Iterable, Iterator, Sequence
from typing import Any, TypeAlias

import attrs

from .._core import threads
from .._core.machine import Machine
from . import _pgsql as sql
from ._pgsql import psycopg
from .base import Record

__all__ = [
    "MARK_DELAY",
    "HeldMarks",
    "HistoryReport",
    "LoopMarks",
    "LoopWatch",
    "Lost",
    "RecordIterator",
    "RecordList",
    "Watchdog",
    "sever",
    "snapshot_rows",
]

#: The longest a delivered-mark is held back for a commit to carry it, in seconds (a quarter
#: of the lease at most, so no other replica takes over events already delivered): long
#: enough that changes a second apart carry each other's marks (ADR 0157).
MARK_DELAY = 2.0

#: What the asyncio store's ``records`` returns ...
RecordList: TypeAlias = list[Record]
#: ... and what the synchronous store's does (the :class:`~lifecycle.stores.Store` protocol).
RecordIterator: TypeAlias = Iterator[Record]


def sever(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> None:
    """Shut a connection's socket down from outside: a call blocked on a server that does not
    answer (stopped, not dead: its kernel still acknowledges) wakes up with an error."""
    with contextlib.suppress(Exception):
        fd = os.dup(conn.pgconn.socket)
        with socket.socket(fileno=fd) as sock:
            sock.shutdown(socket.SHUT_RDWR)


def snapshot_rows(machine: Machine[Any], rows: Sequence[Sequence[Any]]) -> list[tuple[Any, ...]]:
    return sql.status_rows(machine, rows, snapshots=True)


#: What a store without its watchdog thread does (the log line of ADR 0140).
_NO_WATCHDOG = "PostgreSQL calls are bounded only by the connection's TCP timeouts"
#: What a store without its mark thread does (ADR 0140).
_NO_MARK_THREAD = "PostgreSQL delivery marks are sent by the caller, or by the next commit"


class Watchdog:
    """Bounds every call of the synchronous store: a connection still busy ``bound`` seconds
    after it was armed is severed (:func:`sever`), so the call fails with a connection error
    instead of waiting for ever. One daemon thread per store, started on first use; arming
    and disarming cost a dict write each."""

    def __init__(self, bound: float) -> None:
        self.bound = bound
        self._armed: dict[int, tuple[float, psycopg.Connection[Any]]] = {}
        self._keys = itertools.count()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.severed: set[int] = set()
        #: times no watchdog thread could be started (ADR 0140): calls were then bounded
        #: only by the connection's own timeouts; the next call tries again
        self.refusals = 0

    def arm(self, conn: psycopg.Connection[Any]) -> int:
        key = next(self._keys)
        self._armed[key] = (time.monotonic() + self.bound, conn)
        if self._thread is None:
            thread = threading.Thread(target=self._watch, name="lifecycle-pg-watchdog")
            thread.daemon = True
            if threads.start(thread, _NO_WATCHDOG, log=not self.refusals):
                self._thread = thread
            else:
                self.refusals += 1
        return key

    def disarm(self, key: int) -> bool:
        """Forget ``key``; whether its connection was severed."""
        self._armed.pop(key, None)
        if key in self.severed:
            self.severed.discard(key)
            return True
        return False

    def _watch(self) -> None:
        tick = min(0.25, self.bound / 4)
        while not self._stop.wait(tick):
            now = time.monotonic()
            for key, (deadline, conn) in list(self._armed.items()):
                if now >= deadline and self._armed.pop(key, None) is not None:
                    self.severed.add(key)
                    sever(conn)

    def close(self) -> None:
        self._stop.set()


class LoopWatch:
    """:class:`Watchdog` for the asyncio store, on the running loop's clock: arming sets a
    timer that severs the connection when ``bound`` seconds pass, disarming cancels it."""

    def __init__(self, bound: float) -> None:
        self.bound = bound
        self._timers: dict[int, asyncio.TimerHandle] = {}
        self._keys = itertools.count()
        self.severed: set[int] = set()

    def arm(self, conn: psycopg.AsyncConnection[Any]) -> int:
        key = next(self._keys)

        def hung() -> None:
            if self._timers.pop(key, None) is not None:
                self.severed.add(key)
                sever(conn)

        self._timers[key] = asyncio.get_running_loop().call_later(self.bound, hung)
        return key

    def disarm(self, key: int) -> bool:
        """Forget ``key``; whether its connection was severed."""
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        if key in self.severed:
            self.severed.discard(key)
            return True
        return False

    def close(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()


class Lost(Exception):  # internal: never reaches a caller (tests/test_exception_tree.py)
    """A write's connection failed while the write was in flight: its outcome is unknown
    until resolved. ``server`` is where it ran (host, port, backend pid)."""

    def __init__(self, error: BaseException, server: tuple[str, str, int]) -> None:
        super().__init__(str(error))
        self.error = error
        self.server = server


#: The comment on a store's ``epochs`` table that records the history an operator reviewed
#: (``lifecycle db check --acknowledge``, ADR 0163): the last epoch and the rewinds seen.
REVIEWED = re.compile(r"^lifecycle reviewed: epoch ([0-9]+), ([0-9]+) rewind\(s\)$")


def reviewed_query(schema: str) -> str:
    """The comment of ``schema``'s epochs table (``None``: no review recorded)."""
    return f"SELECT obj_description('{sql.q(schema)}.epochs'::regclass, 'pg_class')"


def review_statement(schema: str, epoch: int, rewinds: int) -> str:
    """Record that the history through epoch ``epoch`` and the first ``rewinds`` rewinds
    were reviewed (a comment: no table, no migration; only digits are formatted in)."""
    return (
        f"COMMENT ON TABLE {sql.q(schema)}.epochs IS "
        f"'lifecycle reviewed: epoch {int(epoch)}, {int(rewinds)} rewind(s)'"
    )


def parse_review(comment: object) -> tuple[int, int] | None:
    """``(epoch, rewinds)`` of a :func:`review_statement` comment; ``None`` for anything else."""
    found = REVIEWED.match(comment) if isinstance(comment, str) else None
    return (int(found[1]), int(found[2])) if found else None


@attrs.frozen(slots=True)
class HistoryReport:
    """What ``lifecycle db check`` reports of a PostgreSQL store's history: its epochs (more
    than one: the database's history changed -- a failover or a restore -- and writes
    acknowledged before may have been lost) and the rewinds replicas saw (an object found
    behind a version they had committed: acknowledged writes that were lost).

    ``reviewed``: the epoch and the number of rewinds an operator recorded as reviewed
    (``lifecycle db check --acknowledge``); the history up to there is listed, marked
    reviewed, and is no finding: a failover is reported until it is acknowledged, once.

    Attributes:
        where: the store, as its redacted URL names it.
        epochs: per epoch: its sequence number, its tag (``""`` for the first), the server
            history it began on, when it started and which replica started it.
        rewinds: per rewind: the object's uid, the version a replica had committed, the
            version found (``None``: nothing), the epoch, the replica that saw it and when.
        reviewed: the epoch and the number of rewinds last acknowledged, or ``None``.
    """

    where: str
    epochs: list[tuple[int, str, str, str, str]]
    rewinds: list[tuple[str, int, int | None, str, str, str]]
    reviewed: tuple[int, int] | None = None

    @property
    def _reviewed_epoch(self) -> int:
        first = self.epochs[0][0] if self.epochs else 0  # the first epoch is no change
        return max(first, self.reviewed[0]) if self.reviewed is not None else first

    @property
    def _reviewed_rewinds(self) -> int:
        return self.reviewed[1] if self.reviewed is not None else 0

    @property
    def ok(self) -> bool:
        changed = any(seq > self._reviewed_epoch for seq, *_ in self.epochs)
        return not changed and len(self.rewinds) <= self._reviewed_rewinds

    def lines(self) -> list[str]:
        """The report as ``lifecycle db check`` prints it.

        Returns:
            One line per epoch and rewind, after a summary line.
        """
        out = [f"{self.where}: {len(self.epochs)} epoch(s), {len(self.rewinds)} rewind(s)"]
        for seq, tag, history, started, by in self.epochs:
            who = f" by {by}" if by else ""
            first = seq == self.epochs[0][0]
            seen = " (reviewed)" if not first and seq <= self._reviewed_epoch else ""
            out.append(
                f"epoch {seq} {tag or '(first)'}: history {history}, since {started}{who}{seen}"
            )
        for n, (uid, acknowledged, found, epoch, by, seen_at) in enumerate(self.rewinds):
            held = "nothing" if found is None else f"v{found}"
            mark = " (reviewed)" if n < self._reviewed_rewinds else ""
            out.append(
                f"LOST {uid}: v{acknowledged} was acknowledged, the store held {held} "
                f"(epoch {epoch or '(first)'}, seen by {by} at {seen_at}){mark}"
            )
        if any(seq > self._reviewed_epoch for seq, *_ in self.epochs):
            out.append(
                "the database's history changed: writes acknowledged just before each epoch "
                "change may be lost (an asynchronous standby); event ids of later commits "
                "carry @EPOCH, so none names two events"
            )
        if not self.ok:
            out.append(
                "to do: replay the LOST writes (if any) from their source; then "
                "`lifecycle db check --store URL --acknowledge` records this history as "
                "reviewed, and later checks pass until it changes again"
            )
        return out


class _Held:
    """Delivered outbox ids not yet marked, oldest first: the next commit carries them in
    its round trip (ADR 0127); what waits ``delay`` seconds without one is sent on its own."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self._ids: list[str] = []
        self._since = 0.0
        #: the lists :meth:`riding` handed to commits and not yet given back to
        #: :meth:`restore`: those events are delivered, their rows possibly not yet deleted
        self._riding: list[list[str]] = []
        #: the clock the delay runs on (a benchmark or a test moves it on instead of waiting)
        self.clock: Callable[[], float] = time.monotonic

    def _ride(self, ids: list[str]) -> list[str]:
        if ids:
            self._riding.append(ids)
        return ids

    def _landed(self, ids: list[str]) -> None:
        for n, riding in enumerate(self._riding):
            if riding is ids:
                del self._riding[n]
                return

    def in_flight(self) -> frozenset[str]:
        """Ids a commit is carrying right now: a claim must not hand their rows out again,
        though it may find them still in the table (the commit's DELETE not yet run)."""
        if not self._riding:
            return frozenset()
        return frozenset(i for ids in list(self._riding) for i in ids)

    def _hold(self, ids: Iterable[str]) -> None:
        if not self._ids:
            self._since = self.clock()
        self._ids.extend(ids)

    def _take(self) -> list[str]:
        ids, self._ids = self._ids, []
        return sorted(set(ids))

    def __len__(self) -> int:
        return len(self._ids)


class HeldMarks(_Held):
    """:class:`_Held` for the synchronous store, thread-safe; a daemon thread (started on
    first use) sends what is due through ``send``, which must not raise. ``sending`` is held
    while ids are on their way: who must see every mark landed (a claim, a count) takes it."""

    def __init__(self, delay: float, send: Callable[[list[str]], None]) -> None:
        super().__init__(delay)
        self._send = send
        self._lock = threading.Lock()
        self.sending = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: times no thread could be started (ADR 0140): the ids were then sent at once
        self.refusals = 0

    def add(self, ids: Iterable[str]) -> None:
        with self._lock:
            self._hold(ids)
            if self._thread is not None or self._stop.is_set():
                return
            thread = threading.Thread(target=self._watch, name="lifecycle-pg-marks")
            thread.daemon = True
            if threads.start(thread, _NO_MARK_THREAD, log=not self.refusals):
                self._thread = thread
                return
            self.refusals += 1
        with self.sending:  # no thread to send them later: sent now (the next add tries again)
            held = self.take()
            if held:
                self._send(held)

    def take(self) -> list[str]:
        """Every held id (sorted, once each), now the caller's to mark (under
        :attr:`sending`)."""
        if not self._ids:  # the common case: one attribute read, no lock
            return []
        with self._lock:
            return self._take()

    def riding(self) -> list[str]:
        """:meth:`take` for a commit that carries the marks in its own round trip: they are
        :meth:`in_flight` until the commit hands the list back to :meth:`restore`."""
        if not self._ids:
            return []
        with self._lock:
            return self._ride(self._take())

    def restore(self, ids: list[str]) -> None:
        """Hold again ids whose mark may not have landed (marking twice is harmless); a list
        from :meth:`riding` is no longer in flight."""
        if ids or self._riding:
            with self._lock:
                self._landed(ids)
                if ids:
                    self._hold(ids)

    def in_flight(self) -> frozenset[str]:
        with self._lock:
            return super().in_flight()

    def send_due(self) -> None:
        """Send the held ids on their own if the oldest has waited ``delay`` seconds (what
        the thread does on each tick)."""
        if self._ids and self.clock() - self._since >= self.delay:
            with self.sending:
                ids = self.take()
                if ids:
                    self._send(ids)

    def _watch(self) -> None:
        while not self._stop.wait(min(self.delay / 2, 0.05)):
            self.send_due()

    def close(self) -> None:
        """Stop the thread (what is still held stays for the caller to send)."""
        self._stop.set()


class LoopMarks(_Held):
    """:class:`HeldMarks` for the asyncio store: a timer on the running loop sends what is
    due through ``send`` (a coroutine that must not raise)."""

    def __init__(
        self, delay: float, send: Callable[[list[str]], Coroutine[Any, Any, None]]
    ) -> None:
        super().__init__(delay)
        self._send = send
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.sending = asyncio.Lock()

    def add(self, ids: Iterable[str]) -> None:
        self._hold(ids)
        if self._timer is None and self._ids:
            self._timer = asyncio.get_running_loop().call_later(self.delay, self._due)

    def take(self) -> list[str]:
        if not self._ids:
            return []
        return self._take()

    def riding(self) -> list[str]:
        if not self._ids:
            return []
        return self._ride(self._take())

    def restore(self, ids: list[str]) -> None:
        self._landed(ids)
        if ids:
            self.add(ids)

    def _due(self) -> None:
        self._timer = None
        if self._ids:
            task: asyncio.Task[None] = asyncio.get_running_loop().create_task(self._flush())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _flush(self) -> None:
        async with self.sending:
            ids = self.take()
            if ids:
                await self._send(ids)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
