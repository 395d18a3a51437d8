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

__all__ = ["DEFAULT_CACHE", "CacheStats", "StatusCache"]

#: The most objects a store's status cache holds unless ``cache=`` says otherwise (ADR 0155):
#: the PostgreSQL and SQLite stores cache by default. The cache holds the objects the handle
#: has read or committed, so its memory grows with the objects it serves, up to this bound;
#: ``cache=0`` turns it off.
DEFAULT_CACHE = 262_144


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
    """Up to ``size`` records by uid, the one kept longest ago evicted first; thread-safe. A
    store's ``cache`` (``cache=N``; :data:`DEFAULT_CACHE` by default) is one;
    ``store.cache.stats`` is its :class:`CacheStats`.

    Reads take no lock (ADR 0156): :meth:`get` is one ``dict`` read, atomic in CPython, and a
    read racing a drop answers what the cache held just before it, as a read that came first
    would. Every change to the entries is made under the lock. A hit does not move its entry
    (that would be a write): eviction is by when an entry was kept, not when it was last
    read, so past the bound an object polled but never written is read again once per
    ``size`` keeps. The counters in :attr:`stats` are not locked either: exact for one
    thread, a close count under contention.

    Args:
        size: the most objects held: a bound on the memory a handle spends on records.
        usable: ``False`` starts the cache suspended (it keeps nothing until
            :meth:`resume`), for a store whose change signal is not received yet.

    Raises:
        ValueError: a ``size`` below 1.
    """

    def __init__(self, size: int, *, usable: bool = True) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"the status cache holds at least 1 object, not {size!r}")
        self.size = size
        #: uid -> (record, the schema its status is in: a machine's ``schema``); a reader of
        #: another schema (a machine upgraded in place) misses and reads the store, which
        #: upcasts
        self._records: OrderedDict[str, tuple[Record, object]] = OrderedDict()
        self._lock = threading.Lock()
        #: bumped by every drop: a read or commit begun before it is not kept
        self.generation = 0
        #: the store's coherence token last seen (SQLite: ``PRAGMA data_version``)
        self._token: object = None
        #: uid -> [reads and commits in flight, highest version signalled, read or committed
        #: meanwhile]
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
        ``None``: read the store between :meth:`begin` and :meth:`end`.

        Args:
            machine: the machine reading; a record kept under another schema misses, so the
                store upcasts it.
            ref: the object.

        Returns:
            The record, or ``None`` (a miss).

        Raises:
            IdentityMismatch: the uid is held for another object.
        """
        entry = self._records.get(ref.uid) if self._usable else None  # lock-free: one dict read
        if entry is None or entry[1] is not machine.schema:
            self.stats.misses += 1
            return None
        self.stats.hits += 1
        record = entry[0]
        if record.ref is not ref or record.machine != machine.name:
            check_record(record, machine.name, ref)  # IdentityMismatch, as the store raises
        return record

    def begin(self, uid: str) -> int:
        """Before a read or a commit of ``uid``: the generation to hand :meth:`end`.

        Args:
            uid: the object's uid.

        Returns:
            The cache's generation now.
        """
        with self._lock:
            flight = self._flights.get(uid)
            if flight is None:
                self._flights[uid] = [1, 0]
            else:
                flight[0] += 1
            return self.generation

    def end(self, uid: str, generation: int, record: Record | None, schema: object = None) -> None:
        """After it: keep ``record`` (what was read, or what was committed, its status in
        ``schema``) if nothing overtook it; ``None`` (the read found nothing, the commit
        failed) forgets ``uid``.

        Overtaken: the cache was dropped since :meth:`begin`, or a signal, a read or a commit
        ended meanwhile with a higher version (the flights of one uid share that highest
        version: a read that began before this handle's own commit and ends after it is not
        kept, since nothing else would ever say it is stale). A record not kept still removes
        an older entry.

        Args:
            uid: the object's uid.
            generation: what :meth:`begin` returned, so a read begun before a drop is not kept.
            record: what was read or committed, or ``None``.
            schema: the schema ``record``'s status is in (the machine's ``schema``).
        """
        with self._lock:
            flight = self._flights.get(uid)
            seen = 0
            if flight is not None:
                seen = flight[1]
                if record is not None and record.version > seen:
                    flight[1] = record.version  # for the flights still open
                flight[0] -= 1
                if flight[0] <= 0:
                    del self._flights[uid]
            held = self._records.get(uid)
            if record is None:
                if held is not None:
                    del self._records[uid]
                return
            if held is not None and held[0].version >= record.version:
                return
            if generation != self.generation or not self._usable or record.version < seen:
                if held is not None:
                    del self._records[uid]
                return
            if held is not None:  # kept anew: it goes to the back of the eviction order
                del self._records[uid]
            self._records[uid] = (record, schema)
            while len(self._records) > self.size:
                self._records.popitem(last=False)

    # -- signals ------------------------------------------------------------------------
    def signalled(self, uid: str, version: int) -> None:
        """Another commit (maybe this handle's own) wrote ``uid`` at ``version``.

        Args:
            uid: the object's uid.
            version: the version written; an entry below it is dropped.
        """
        with self._lock:
            flight = self._flights.get(uid)
            if flight is not None and version > flight[1]:
                flight[1] = version
            held = self._records.get(uid)
            if held is not None and held[0].version < version:
                del self._records[uid]

    def forget(self, uid: str) -> None:
        """Drop the entry of one object.

        Args:
            uid: the object's uid.
        """
        with self._lock:
            self._records.pop(uid, None)

    def observe_token(self, token: object) -> None:
        """The store's coherence token now: a different one than last seen drops the cache
        (the first one seen too, unless the cache is still empty: a store reads it once at
        open, before anything is kept).

        Args:
            token: the store's token (SQLite: ``PRAGMA data_version``).
        """
        if token != self._token:
            with self._lock:
                if token != self._token:
                    if self._token is not None or self._records:
                        self._drop("another connection wrote")
                    self._token = token

    def drop(self, why: str) -> None:
        """Forget everything (a signal may have been missed).

        Args:
            why: the reason, counted in :attr:`stats`.
        """
        with self._lock:
            self._drop(why)

    def suspend(self, why: str) -> None:
        """The signal is lost (a listener's connection broke): drop, and keep nothing until
        :meth:`resume`.

        Args:
            why: the reason, counted in :attr:`stats`.
        """
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

    # -- what the stores wrap their reads and commits in ------------------------------------
    def flight(self, machine: Machine[Any], ref: ObjectRef) -> Flight:
        """One read or commit of ``ref`` by ``machine``: set ``.record`` to what was read or
        committed; it is kept on leaving (if nothing overtook it), and ``None`` forgets the
        object.

        Args:
            machine: the machine reading or committing.
            ref: the object.

        Returns:
            A context manager for the read or commit.
        """
        return Flight(self, ref.uid, self.begin(ref.uid), machine.schema)

    def reads(self, items: Sequence[tuple[Machine[Any], ObjectRef]]) -> Reads:
        """A batch read: the cached records now, ``.missing`` to read from the store and hand
        to ``.read``; ``.records`` is every item's, in order.

        Args:
            items: ``(machine, ref)`` pairs, as ``load_many`` takes them.

        Returns:
            A context manager for the batch read.
        """
        return Reads(self, items)

    def commits(self, items: Sequence[CommitItem]) -> Commits:
        """A ``commit_many``: set ``.results``; written items are kept on leaving.

        Args:
            items: the writes, as ``commit_many`` takes them.

        Returns:
            A context manager for the batch commit.
        """
        return Commits(self, items)


class Flight:
    __slots__ = ("cache", "generation", "record", "schema", "uid")

    def __init__(self, cache: StatusCache, uid: str, generation: int, schema: object) -> None:
        self.cache, self.uid, self.generation, self.schema = cache, uid, generation, schema
        self.record: Record | None = None

    def __enter__(self) -> Flight:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cache.end(self.uid, self.generation, self.record, self.schema)


class Reads:
    """See :meth:`StatusCache.reads`."""

    def __init__(self, cache: StatusCache, items: Sequence[tuple[Machine[Any], ObjectRef]]) -> None:
        self.cache, self.items = cache, items
        self.found = [cache.get(machine, ref) for machine, ref in items]
        self.flights: dict[str, tuple[int, object]] = {}
        self.missing: list[tuple[Machine[Any], ObjectRef]] = []
        for item, record in zip(items, self.found, strict=True):
            if record is None:
                self.missing.append(item)
                if item[1].uid not in self.flights:
                    self.flights[item[1].uid] = (cache.begin(item[1].uid), item[0].schema)
        self._read: dict[str, Record | None] = {}

    def read(self, records: Sequence[Record | None]) -> None:
        for (_, ref), record in zip(self.missing, records, strict=True):
            self._read[ref.uid] = record

    @property
    def records(self) -> list[Record | None]:
        return [
            record if record is not None else self._read.get(ref.uid)
            for (_, ref), record in zip(self.items, self.found, strict=True)
        ]

    def __enter__(self) -> Reads:
        return self

    def __exit__(self, *exc: object) -> None:
        """End the reads: a uid not read (the read failed) keeps nothing."""
        for uid, (generation, schema) in self.flights.items():
            self.cache.end(uid, generation, self._read.get(uid), schema)


class Commits:
    """See :meth:`StatusCache.commits`."""

    def __init__(self, cache: StatusCache, items: Sequence[CommitItem]) -> None:
        self.cache, self.items = cache, items
        self.flights = [cache.begin(item.ref.uid) for item in items]
        self.results: list[int | StoreError] = []

    def __enter__(self) -> Commits:
        return self

    def __exit__(self, *exc: object) -> None:
        """Each written item kept at its version, a refused one forgotten (all of them when
        the batch raised)."""
        results = self.results
        for index, (item, generation) in enumerate(zip(self.items, self.flights, strict=True)):
            done = results[index] if index < len(results) else None
            self.cache.end(
                item.ref.uid,
                generation,
                Record(item.ref, item.machine.name, item.status, done)
                if isinstance(done, int)
                else None,
                item.machine.schema,
            )
