"""Group commit for the SQLite store (ADR 0026, ADR 0153): concurrent ``commit`` calls share
one transaction and one flush.

Each caller's write is queued as a :class:`Slot`; the first caller to find no transaction in
progress *leads*: it writes the whole queue -- and the delivery marks made meanwhile -- in one
transaction on the store's connection, each item with its own compare-and-set, commits once,
and only then answers every caller with its own outcome; then it hands the lead to the first
caller queued meanwhile. There is no thread of its own: the leader is always a caller.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Callable
from typing import Any, Protocol

from .._core.errors import Conflict, IdentityMismatch, StoreError
from ._sqlite_marks import delete_marked
from ._sqlite_write import INSERT_JOURNAL, Connected, Row, Writer

__all__ = ["GroupCommit", "Slot"]


class Coordinator(Connected, Protocol):
    """What a group commit uses of the store that holds it besides its connection: its
    writer, its clock and lease, its history tag and its count of flushes, and its
    writing of delivery marks."""

    #: transactions ``commit`` ran (with group commit, fewer than the commits answered)
    flushes: int

    @property
    def _writer(self) -> Writer: ...
    @property
    def _clock(self) -> Callable[[], float]: ...
    @property
    def _lease(self) -> float: ...
    def _writing(self) -> None: ...
    def _mark_quietly(self, ids: list[str]) -> None: ...


class Slot:
    """One caller's write in a group commit: its answer once its transaction is over (the
    new version or the exception to raise), and the lock its caller sleeps on meanwhile."""

    __slots__ = ("outcome", "row", "wake")

    def __init__(self, row: Row) -> None:
        self.row = row
        self.outcome: int | BaseException | None = None
        self.wake = threading.Lock()
        self.wake.acquire()


class GroupCommit:
    """The queue of a group commit: writes and delivery marks waiting for the next
    transaction, and whether a caller leads one (``mutex`` guards the three)."""

    __slots__ = ("leading", "marks", "mutex", "queue")

    def __init__(self) -> None:
        self.mutex = threading.Lock()
        self.queue: list[Slot] = []
        #: outbox ids marked delivered, for the next transaction to delete
        self.marks: list[str] = []
        self.leading = False

    def commit(self, store: Coordinator, row: Row) -> int:
        """Queue ``row``. The first caller to find no transaction in progress leads
        (:meth:`lead`); the others sleep until their write's transaction is over, each on its
        own lock, and are woken one by one with their own outcome -- or, the first of the
        queue, with none: it leads the next transaction."""
        slot = Slot(row)
        with self.mutex:
            self.queue.append(slot)
            lead = not self.leading
            self.leading = True
        if not lead:
            slot.wake.acquire()  # until answered, or handed the lead
            lead = slot.outcome is None
        if lead:
            self.lead(store)
        outcome = slot.outcome
        if isinstance(outcome, BaseException):
            raise outcome
        assert outcome is not None
        return outcome

    def mark(self, store: Coordinator, ids: list[str]) -> None:
        """Delivery marks share transactions too: a mark made while one is in progress is
        carried by the next; else the caller leads one, for every mark (and commit) waiting."""
        with self.mutex:
            self.marks.extend(ids)
            if self.leading:  # a transaction is in progress: the next one carries them
                return
            self.leading = True  # else lead one, for every mark (and commit) waiting
        self.lead(store)

    def take_marks(self) -> list[str]:
        """The delivery marks waiting for the next transaction, now the caller's to write."""
        with self.mutex:
            marks, self.marks = self.marks, []
        return marks

    def lead(self, store: Coordinator) -> None:
        """As the group's leader: write the whole queue and the waiting delivery marks in one
        transaction (:meth:`flush`), answer each caller, then hand the lead to the first
        caller queued meanwhile -- or stand down. Marks alone (no commit waiting) are deleted
        by the leader itself."""
        while True:
            # the marks are taken and written under the store's lock: a claim between the two
            # would lease rows already delivered and hand them out again
            with store._lock:
                with self.mutex:
                    batch, self.queue = self.queue, []
                    marks, self.marks = self.marks, []
                    if not batch and not marks:
                        self.leading = False
                        return
                try:
                    if batch:
                        self.flush(store, batch, marks)
                    else:
                        store._mark_quietly(marks)
                finally:
                    for slot in batch:  # every outcome is set: wake its caller
                        slot.wake.release()
                    with self.mutex:
                        successor = self.queue[0] if self.queue else None
                        again = successor is None and bool(self.marks)  # marks only: do them
                        if successor is None and not again:
                            self.leading = False
            if successor is not None:
                successor.wake.release()  # woken without an outcome: it leads
            if not again:
                return

    def flush(self, store: Coordinator, batch: list[Slot], marks: list[str]) -> None:
        """Write ``batch`` (and delete the delivered ``marks``) in one transaction, each item
        with its own compare-and-set, and commit once. If the transaction cannot be begun or
        committed, every item of the batch gets a :class:`StoreError`."""
        lease_until = store._clock() + store._lease
        with store._lock:
            try:
                store._writing()
            except StoreError as e:
                for slot in batch:
                    slot.outcome = e
                return
            store.flushes += 1
            try:
                if len(batch) == 1:  # a lone caller: the plain commit
                    self._flush_one(store, batch[0], marks, lease_until)
                else:
                    self._flush_many(store, batch, marks, lease_until)
            except sqlite3.Error as e:
                for slot in batch:  # one flush for all: its failure is every caller's
                    what = f"commit of {slot.row.ref.uid} v{slot.row.expected + 1}"
                    if len(batch) > 1:
                        what = f"group commit of {len(batch)} writes ({what})"
                    slot.outcome = store._fail(what, e)
            except BaseException as e:  # never leave a caller waiting for an answer
                with contextlib.suppress(sqlite3.Error):
                    if store._db.in_transaction:
                        store._db.execute("ROLLBACK")
                for slot in batch:
                    if not isinstance(slot.outcome, int):
                        slot.outcome = StoreError(f"group commit interrupted: {e!r}")
                raise

    def _flush_one(
        self, store: Coordinator, slot: Slot, marks: list[str], lease_until: float
    ) -> None:
        try:
            with store._transaction() as db:
                store._writer.write(db, slot.row, lease_until)
                delete_marked(db, marks)
        except (Conflict, IdentityMismatch) as e:
            slot.outcome = e
            return
        slot.outcome = slot.row.expected + 1

    def _flush_many(
        self, store: Coordinator, batch: list[Slot], marks: list[str], lease_until: float
    ) -> None:
        """As :meth:`~.sqlite.SQLiteStore.commit_many`: every item's compare-and-set, then the
        journal and outbox rows of those that passed in one statement each; if a stray row
        refuses an insert, the transaction is done again with each item in its own savepoint."""
        writer = store._writer
        written: list[Slot] = []
        try:
            with store._transaction() as db:
                journal: list[tuple[Any, ...]] = []
                outbox: list[tuple[Any, ...]] = []
                passed = writer.cas_all(db, [slot.row for slot in batch])
                for slot in batch:
                    try:
                        if passed is None:
                            writer.cas(db, slot.row)  # a refused CAS writes nothing
                        elif slot.row.ref.uid not in passed:
                            row = slot.row
                            raise writer.conflict(db, row.machine, row.ref, row.expected)
                    except (Conflict, IdentityMismatch) as e:
                        slot.outcome = e
                        continue
                    written.append(slot)
                    journal.append(writer.journal_row(slot.row))
                    outbox.extend(writer.outbox_rows(slot.row, lease_until))
                if writer.keep_journal and journal:
                    db.executemany(INSERT_JOURNAL, journal)
                if outbox:
                    db.executemany("INSERT INTO outbox VALUES (?, ?, ?, ?, ?, ?, ?)", outbox)
                delete_marked(db, marks)
        except sqlite3.IntegrityError:  # a stray row: find the item it belongs to
            written = []
            with store._transaction() as db:
                for slot in batch:
                    slot.outcome = self._item_in_savepoint(store, db, slot.row, lease_until)
                    if slot.outcome is None:
                        written.append(slot)
                delete_marked(db, marks)
        for slot in written:  # committed: only now is anyone told
            slot.outcome = slot.row.expected + 1

    def _item_in_savepoint(
        self, store: Coordinator, db: sqlite3.Connection, row: Row, lease_until: float
    ) -> BaseException | None:
        """One item of a group in its own savepoint: ``None`` once written, else why not."""
        db.execute("SAVEPOINT item")
        try:
            store._writer.write(db, row, lease_until)
        except (Conflict, IdentityMismatch) as e:
            db.execute("ROLLBACK TO item")
            return e
        except sqlite3.IntegrityError as e:
            db.execute("ROLLBACK TO item")
            return store._fail(f"commit of {row.ref.uid} v{row.expected + 1}", e)
        finally:
            db.execute("RELEASE item")
        return None
