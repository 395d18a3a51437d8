"""The listener that keeps a PostgreSQL store's status cache coherent (ADR 0134).

One thread per store handle holds its own connection, ``LISTEN``s on the schema's channel and
hands every ``"VERSION UID"`` a committing transaction sent to the cache. While it is not
listening -- before its first ``LISTEN``, after its connection broke, during a failover -- the
cache is suspended (dropped, and passing every read to the store), and it starts empty again
once the listener is back. It serves the synchronous and the asyncio store alike: the cache is
plain memory behind a lock.

A barrier (:meth:`Listener.barrier`) is a notification the handle sends itself: PostgreSQL
delivers notifications in commit order, so once it arrives, every commit made before it was
sent has been handed to the cache.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import psycopg

from .._core import threads
from .._log import get_logger
from ._cache import StatusCache

__all__ = ["Listener"]

_log = get_logger("lifecycle.stores.postgres")

#: how often a listening connection is asked to answer (a half-open one is found within this
#: and the connection's TCP timeouts)
_PING = 2.0
#: how long a wait for notifications lasts before the stop flag is looked at again
_TICK = 0.05
#: a listener that has not come round its loop for this long is taken for deaf: the cache
#: is suspended until it does (a thread stuck in a call, or starved)
_SILENT = 3 * _PING
_BACKOFF = (0.05, 2.0)
#: the listener's ``application_name``: how an operator finds it in ``pg_stat_activity``
APPLICATION = "lifecycle-listen"


#: What a store does without its listener thread (the log line of ADR 0140).
_NO_LISTENER = "the status cache is unused: every read goes to the database"


class Listener:
    """Hands ``channel``'s notifications to ``cache``; :meth:`close` stops it."""

    def __init__(self, conninfo: str, channel: str, cache: StatusCache, *, name: str) -> None:
        self._conninfo = conninfo
        self.channel = channel
        self._cache = cache
        self._stop = threading.Event()
        #: set while a LISTEN is in force
        self.listening = threading.Event()
        self._barriers: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None
        #: how many times the connection was (re)established
        self.connects = 0
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
                conn.close()

    def _listen(self, conn: psycopg.Connection[Any]) -> None:
        conn.execute(f'LISTEN "{self.channel}"')
        with self._lock:
            self._conn = conn
        self.connects += 1
        self._cache.resume()
        self.listening.set()
        cache = self._cache
        pinged = time.monotonic()
        while not self._stop.is_set():
            self._came_round()
            for note in conn.notifies(timeout=_TICK):
                self._came_round()
                version, _, uid = note.payload.partition(" ")
                if version == "sync":
                    self._reached(uid)
                    continue
                try:
                    cache.signalled(uid, int(version))
                except ValueError:  # not ours: the whole cache, to be safe
                    cache.drop("an unreadable notification")
                if self._stop.is_set():
                    return
            if time.monotonic() - pinged >= _PING:
                conn.execute("SELECT 1")  # a connection that no longer answers raises here
                pinged = time.monotonic()

    def _came_round(self) -> None:
        self.alive_at = time.monotonic()
        if self._silenced:  # check() suspended the cache meanwhile: start empty
            self._silenced = False
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
