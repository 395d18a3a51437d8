"""A store handle's coherent status cache (ADR 0134): the last committed record of the objects
it serves, so an observation that changes nothing is decided without a read.

The cache belongs to one store handle (one SQLite connection, one PostgreSQL pool), never to a
runner: every write through the handle passes here. What another writer commits reaches it by
the store's own signal -- SQLite's ``PRAGMA data_version`` (any other connection committed:
everything is dropped) or PostgreSQL's ``NOTIFY`` from the committing transaction (that
object is dropped unless the cache already holds that version or a later one). Whenever the
signal itself may have been missed (the listener reconnects, the database's history changed)
the whole cache is dropped, and it stays unused until the signal is back.

The rules every entry obeys:

- An entry is only ever replaced by a higher version of the same object.
- A record read or committed is kept only if the cache was not dropped since just before the
  read or the commit began (its *generation*), and no signal named a higher version of that
  object meanwhile (its *flight*). So a read that raced a drop, or a commit overtaken by another
  writer whose signal already arrived, is not kept.
- A decision made from a stale entry can only be ``unchanged`` or a commit: the commit's
  compare-and-set refuses it (:class:`~lifecycle.Conflict`), the entry is forgotten, and the
  runner's next attempt reads the store.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from .._core.errors import StoreError
from .._core.machine import Machine
from .._core.refs import ObjectRef
from .base import CommitItem, Record, check_record

__all__ = ["CacheStats", "StatusCache"]


class CacheStats:
    """What a :class:`StatusCache` did: reads it answered (``hits``), reads it passed to the
    store (``misses``), and how often it was dropped whole (``drops``) and why (``reasons``)."""

    __slots__ = ("drops", "hits", "misses", "reasons")

    def __init__(self) -> None:
        self.hits = 0
        self.misses = 0
        self.drops = 0
        self.reasons: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"CacheStats(hits={self.hits}, misses={self.misses}, drops={self.drops})"


class StatusCache:
    """Up to ``size`` records by uid, least recently used evicted first; thread-safe. A
    store made with ``cache=N`` holds one as ``store.cache``; ``store.cache.stats`` is its
    :class:`CacheStats`."""

    def __init__(self, size: int, *, usable: bool = True) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"the status cache holds at least 1 object, not {size!r}")
        self.size = size
        self._records: OrderedDict[str, Record] = OrderedDict()
        self._lock = threading.Lock()
        #: bumped by every drop: a read or commit begun before it is not kept
        self.generation = 0
        #: the store's coherence token last seen (SQLite: ``PRAGMA data_version``)
        self._token: object = None
        #: uid -> [reads and commits in flight, highest version signalled meanwhile]
        self._flights: dict[str, list[int]] = {}
        #: whether the store's signal is known to be received (a listener that is not
        #: listening makes the cache pass every read through and keep nothing)
        self._usable = usable
        self.stats = CacheStats()

    def __len__(self) -> int:
        return len(self._records)

    @property
    def usable(self) -> bool:
        return self._usable

    # -- reads --------------------------------------------------------------------------
    def get(self, machine: Machine[Any], ref: ObjectRef) -> Record | None:
        """The cached record of ``ref`` (checked as a store checks a stored identity), or
        ``None``: read the store between :meth:`begin` and :meth:`end`."""
        with self._lock:
            record = self._records.get(ref.uid) if self._usable else None
            if record is None:
                self.stats.misses += 1
                return None
            self._records.move_to_end(ref.uid)
            self.stats.hits += 1
        if record.ref is not ref or record.machine != machine.name:
            check_record(record, machine.name, ref)  # IdentityMismatch, as the store raises
        return record

    def begin(self, uid: str) -> int:
        """Before a read or a commit of ``uid``: the generation to hand :meth:`end`."""
        with self._lock:
            flight = self._flights.get(uid)
            if flight is None:
                self._flights[uid] = [1, 0]
            else:
                flight[0] += 1
            return self.generation

    def end(self, uid: str, generation: int, record: Record | None) -> None:
        """After it: keep ``record`` (what was read, or what was committed) if nothing
        overtook it; ``None`` (the read found nothing, the commit failed) forgets ``uid``."""
        with self._lock:
            flight = self._flights.get(uid)
            signalled = 0
            if flight is not None:
                signalled = flight[1]
                flight[0] -= 1
                if flight[0] <= 0:
                    del self._flights[uid]
            if record is None:
                self._records.pop(uid, None)
                return
            if generation != self.generation or not self._usable or record.version < signalled:
                return
            held = self._records.get(uid)
            if held is not None and held.version >= record.version:
                return
            self._records[uid] = record
            self._records.move_to_end(uid)
            while len(self._records) > self.size:
                self._records.popitem(last=False)

    # -- signals ------------------------------------------------------------------------
    def signalled(self, uid: str, version: int) -> None:
        """Another commit (maybe this handle's own) wrote ``uid`` at ``version``."""
        with self._lock:
            flight = self._flights.get(uid)
            if flight is not None and version > flight[1]:
                flight[1] = version
            held = self._records.get(uid)
            if held is not None and held.version < version:
                del self._records[uid]

    def forget(self, uid: str) -> None:
        with self._lock:
            self._records.pop(uid, None)

    def observe_token(self, token: object) -> None:
        """The store's coherence token now: a different one than last seen drops the cache."""
        if token == self._token:
            return
        with self._lock:
            if token != self._token:
                if self._token is not None:
                    self._drop("another connection wrote")
                self._token = token

    def drop(self, why: str) -> None:
        """Forget everything (a signal may have been missed)."""
        with self._lock:
            self._drop(why)

    def suspend(self, why: str) -> None:
        """The signal is lost (a listener's connection broke): drop, and keep nothing until
        :meth:`resume`."""
        with self._lock:
            self._usable = False
            self._drop(why)

    def resume(self) -> None:
        """The signal is back (listening again): what changed meanwhile is unknown, so start
        empty."""
        with self._lock:
            self._drop("listening again")
            self._usable = True

    def _drop(self, why: str) -> None:
        self.generation += 1
        self._records.clear()
        stats = self.stats
        stats.drops += 1
        stats.reasons[why] = stats.reasons.get(why, 0) + 1

    # -- batches ------------------------------------------------------------------------
    def lookup(
        self, items: list[tuple[Machine[Any], ObjectRef]] | Any
    ) -> tuple[list[Record | None], dict[str, int]]:
        """Each item's cached record or ``None``, and for the uids to read from the store
        their generations (hand both to :meth:`settle` with what the store read)."""
        found = [self.get(machine, ref) for machine, ref in items]
        flights: dict[str, int] = {}
        for (_, ref), record in zip(items, found, strict=True):
            if record is None and ref.uid not in flights:
                flights[ref.uid] = self.begin(ref.uid)
        return found, flights

    def settle(self, flights: dict[str, int], read: dict[str, Record | None]) -> None:
        """End the reads :meth:`lookup` began with what they found (a uid missing from
        ``read``: the read failed, nothing is kept)."""
        for uid, generation in flights.items():
            self.end(uid, generation, read.get(uid))

    def settle_commits(
        self, items: Sequence[CommitItem], flights: list[int], results: list[int | StoreError]
    ) -> None:
        """End the commits of a ``commit_many`` begun with ``flights`` (one :meth:`begin` per
        item): each written item is kept at its version, a refused one forgotten; ``results``
        shorter than ``items`` (the batch raised) forgets the rest."""
        for index, (item, generation) in enumerate(zip(items, flights, strict=True)):
            done = results[index] if index < len(results) else None
            self.end(
                item.ref.uid,
                generation,
                Record(item.ref, item.machine.name, item.status, done)
                if isinstance(done, int)
                else None,
            )
