"""The listener that keeps a PostgreSQL store's status cache coherent (ADR 0134).

One thread per store handle holds its own connection, ``LISTEN``s on the schema's channel and
hands every ``"VERSION UID"`` a committing transaction sent to the cache. While it is not
listening -- before its first ``LISTEN``, after its connection broke, during a failover -- the
cache is suspended (dropped, and passing every read to the store), and it starts empty again
once the listener is back. It serves the synchronous and the asyncio store alike: the cache is
plain memory behind a lock.

A barrier (:meth:`Listener.barrier`) is a notification the handle sends itself: PostgreSQL
delivers notifications in commit order, so once it arrives, every commit made before it was
sent has been handed to the cache. A barrier whose notification cannot arrive any more (sent
before the listener's new ``LISTEN`` after a reconnection) is released by the resumption
itself: the cache starts empty then, which is all a barrier promises.

Every second the listener also asks its guard (ADR 0143): whether the trigger that makes every
write of an object notify is in force. While it is not, the cache is suspended with a warning;
a change of the trigger's catalogue rows since the last check (disabled and enabled again in
between) drops the cache, since a write may have gone unannounced meanwhile.
"""

from __future__ import annotations

import selectors
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg

from .._core import threads
from .._log import get_logger
from ._cache import StatusCache

__all__ = ["Listener"]

_log = get_logger("lifecycle.stores.postgres")

#: how often a listening connection is asked its guard -- which is also how a half-open one is
#: found, within this and the connection's TCP timeouts
_GUARD = 1.0
#: (how long the loop may go without coming round: see _SILENT)
_PING = 2.0
#: how long a wait for notifications lasts before the stop flag is looked at again
_TICK = 0.05
#: after handing notifications over, how long the listener lets the next ones gather before
#: it reads again (ADR 0167): one wake-up per few commits of a busy writer instead of one
#: each; a notice after a quiet spell is read at once
_GATHER = 0.005
#: a listener that has not come round its loop for this long is taken for deaf: the cache
#: is suspended until it does (a thread stuck in a call, or starved)
_SILENT = 3 * _PING
_BACKOFF = (0.05, 2.0)
#: the listener's ``application_name``: how an operator finds it in ``pg_stat_activity``
APPLICATION = "lifecycle-listen"


#: What a store does without its listener thread (the log line of ADR 0140).
_NO_LISTENER = "the status cache is unused: every read goes to the database"


def _exec(pgconn: psycopg.pq.abc.PGconn, statement: str) -> psycopg.pq.abc.PGresult:
    """Run ``statement`` through libpq itself: psycopg's own calls would take the
    notifications that arrive meanwhile into a queue of their own, which :func:`_notes`
    does not read. Raises psycopg's error for a failed statement."""
    result = pgconn.exec_(statement.encode())
    if result.status not in (psycopg.pq.ExecStatus.COMMAND_OK, psycopg.pq.ExecStatus.TUPLES_OK):
        raise psycopg.errors.error_from_result(result)
    return result


def _notes(pgconn: psycopg.pq.abc.PGconn, encoding: str) -> Iterator[str]:
    """The payloads of the notifications libpq has read (ADR 0167: libpq's own queue, a few
    microseconds each, where psycopg's ``notifies()`` cost tens)."""
    while (note := pgconn.notifies()) is not None:
        yield note.extra.decode(encoding)


class Listener:
    """Hands ``channel``'s notifications to ``cache``; :meth:`close` stops it."""

    def __init__(
        self, conninfo: str, channel: str, cache: StatusCache, *, name: str, guard: str
    ) -> None:
        self._conninfo = conninfo
        self.channel = channel
        self._cache = cache
        #: the query saying whether every writer notifies, and a fingerprint of why
        self._guard = guard
        self._fingerprint: str | None = None
        #: whether the guard found every writer notifying at its last check
        self.trusted = False
        #: the listening backend's process id (``pg_stat_activity.pid``), 0 while unconnected
        self.backend_pid = 0
        self._stop = threading.Event()
        #: set while a LISTEN is in force
        self.listening = threading.Event()
        self._barriers: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None
        #: when the loop last came round (``time.monotonic``), and whether :meth:`check`
        #: found it silent since
        self.alive_at = time.monotonic()
        self._silenced = False
        self._name = name
        self._thread: threading.Thread | None = None
        #: times no listener thread could be started (ADR 0140): the cache stays suspended
        #: (every read goes to the database) and the next read through it tries again
        self.refusals = 0
        self._start()

    def _start(self) -> None:
        thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        if threads.start(thread, _NO_LISTENER, log=not self.refusals):
            self._thread = thread
        else:
            self.refusals += 1
            self._cache.suspend("no listener thread could be started")

    def _run(self) -> None:
        delay = _BACKOFF[0]
        while not self._stop.is_set():
            self.alive_at = time.monotonic()
            try:
                conn = psycopg.Connection.connect(
                    self._conninfo, autocommit=True, application_name=APPLICATION
                )
            except Exception as e:  # psycopg's, or anything else: never a dead thread
                _log.warning("status cache listener cannot connect; cache unused", error=str(e))
                self._stop.wait(delay)
                delay = min(_BACKOFF[1], delay * 2)
                continue
            delay = _BACKOFF[0]
            try:
                self._listen(conn)
            except Exception as e:
                if not self._stop.is_set():
                    _log.warning("status cache listener lost its connection", error=repr(e))
                    self._stop.wait(delay)
            finally:
                self.listening.clear()
                self._cache.suspend("the listener's connection was lost")
                with self._lock:
                    self._conn = None
                self.backend_pid = 0
                conn.close()

    def _listen(self, conn: psycopg.Connection[Any]) -> None:
        pgconn = conn.pgconn
        _exec(pgconn, f'LISTEN "{self.channel}"')
        with self._lock:
            self._conn = conn
        self.backend_pid = conn.info.backend_pid
        self._fingerprint = None  # what changed while away is unknown: resumed empty
        self.trusted = False
        self._check_guard(conn)
        guarded = time.monotonic()
        encoding = conn.info.encoding
        with selectors.DefaultSelector() as waiting:
            waiting.register(pgconn.socket, selectors.EVENT_READ)
            while not self._stop.is_set():
                self._came_round()
                if waiting.select(_TICK):
                    pgconn.consume_input()  # a connection that broke raises here
                handed = False
                for payload in _notes(pgconn, encoding):
                    if not self._note(payload):
                        return
                    handed = True
                if handed and _GATHER:  # a stream of commits: take the next ones together
                    self._stop.wait(_GATHER)
                if time.monotonic() - guarded >= _GUARD:
                    self._check_guard(conn)  # a connection that no longer answers raises here
                    guarded = time.monotonic()

    def _note(self, payload: str) -> bool:
        """Hand one notification to the cache; ``False`` once the listener is stopping."""
        self._came_round()
        version, _, uid = payload.partition(" ")
        if version == "sync":
            self._reached(uid)
            return True
        try:
            self._cache.signalled(uid, int(version))
        except ValueError:  # "drop" (a TRUNCATE), or not ours: the whole cache
            self._cache.drop("a truncation" if version == "drop" else "an odd notification")
        return not self._stop.is_set()

    def _check_guard(self, conn: psycopg.Connection[Any]) -> None:
        """Ask the guard; suspend the cache while a writer may not notify, drop it when the
        trigger changed since the last check, resume it (empty) once trusted again."""
        result = _exec(conn.pgconn, self._guard)
        row = (result.get_value(0, 0), result.get_value(0, 1)) if result.ntuples else None
        trusted, fingerprint = (
            (row[0] == b"t", (row[1] or b"").decode()) if row is not None else (False, "")
        )
        if trusted and self.trusted:
            if fingerprint != self._fingerprint:
                self._cache.drop("the notify trigger changed")
        elif trusted:
            self.trusted = True
            self._resume()
        else:
            if self.trusted or self._fingerprint is None:
                _log.warning(
                    "a writer may not notify: the notify trigger of the store's objects is "
                    "missing or disabled (run `lifecycle db migrate`, or enable it); the status "
                    "cache is unused until it is back",
                    channel=self.channel,
                )
            self.trusted = False
            self.listening.clear()
            self._cache.suspend("a writer may not notify")
        self._fingerprint = fingerprint

    def _resume(self) -> None:
        """Start the cache again, empty; release the barriers waiting so far: what they wait
        for may have been sent before this ``LISTEN``, and an empty cache holds nothing older
        than they ask."""
        with self._lock:
            waiting = list(self._barriers)
        self._cache.resume()
        self.listening.set()
        for token in waiting:
            self._reached(token)

    def _came_round(self) -> None:
        self.alive_at = time.monotonic()
        if self._silenced:  # check() suspended the cache meanwhile: start empty
            self._silenced = False
            if self.trusted:
                self._cache.resume()

    def _reached(self, token: str) -> None:
        with self._lock:
            event = self._barriers.pop(token, None)
        if event is not None:
            event.set()

    def barrier(self) -> tuple[str, threading.Event]:
        """A token to notify ``"sync TOKEN"`` with, and the event set when it arrives."""
        token = uuid.uuid4().hex
        event = threading.Event()
        with self._lock:
            self._barriers[token] = event
        return token, event

    def forget(self, token: str) -> None:
        """A barrier that timed out: its token is not waited for any more."""
        with self._lock:
            self._barriers.pop(token, None)

    def check(self) -> None:
        """Before a read through the cache: suspend it if the loop has been silent for
        :data:`_SILENT` (it resumes, empty, when the loop comes round again)."""
        if self._thread is None and not self._stop.is_set():
            self._start()
            return
        if time.monotonic() - self.alive_at > _SILENT and not self._silenced:
            self._cache.suspend("the listener was silent")
            self._silenced = True  # after the suspension: the loop's resume follows it

    def stop(self) -> None:
        """Stop without waiting: the thread ends within a tick (the asyncio store's close)."""
        self._stop.set()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:  # only a started thread can be joined
            self._thread.join(timeout=_TICK + 5.0)
