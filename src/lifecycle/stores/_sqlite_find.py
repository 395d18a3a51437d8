"""The SQLite store's questions (ADR 0159): since when each object is in its state, kept by
the database itself, and the indexed reads of :class:`~lifecycle.stores.FindStore`.

Schema 4 adds ``objects.entered`` (epoch seconds), set by two triggers: when a row is
inserted, and when an update changes its ``state``. The write path does not name the column,
so every writer of the file -- a group commit, a batch, an upgrade, plain SQL -- keeps it
right, and ``objects_by_state_age`` answers "which objects of this machine are in this state
since before T" by one index range, oldest first."""

from __future__ import annotations

import sqlite3
from typing import Any

from .base import Query, StateCount, epoch_time

#: The clock in epoch seconds (SQLite's ``'now'``: millisecond resolution), rounded to the
#: microsecond a :class:`~lifecycle.stores.Found` says, so that it handed back as a cut-off
#: compares equal.
NOW = "round((julianday('now') - 2440587.5) * 86400.0, 6)"

#: Schema 5 (ADR 0169): the store's own writes set ``entered`` in the statement that moves the
#: state (:data:`ENTERED`), one write of the row and of its index entry; the trigger sets it
#: only when a writer that moved the state left ``entered`` as it was (plain SQL, an upgrade).
MOVED = (
    "CREATE TRIGGER IF NOT EXISTS objects_entered_moved AFTER UPDATE OF state ON objects "
    "FOR EACH ROW WHEN OLD.state IS NOT NEW.state AND OLD.entered IS NEW.entered "
    f"BEGIN UPDATE objects SET entered = {NOW} WHERE rowid = NEW.rowid; END"
)
#: What an ``UPDATE objects SET state = ?`` sets ``entered`` to (the new state its one
#: parameter; a SET clause reads the row as it was): now if the state moves, else as it was.
ENTERED = f"entered = CASE WHEN state IS ? THEN entered ELSE {NOW} END"

#: Schema 4, in one transaction. Rows stored before count as entering their state at the
#: migration (the store did not know; an age then never overstates).
MIGRATION = (
    "ALTER TABLE objects ADD COLUMN entered REAL",
    f"UPDATE objects SET entered = {NOW}",
    "CREATE TRIGGER IF NOT EXISTS objects_entered_new AFTER INSERT ON objects "
    f"FOR EACH ROW WHEN NEW.entered IS NULL BEGIN UPDATE objects SET entered = {NOW} "
    "WHERE rowid = NEW.rowid; END",
    # (schema 5's condition, ADR 0169: a store of schema 4 has it replaced by ``moved_trigger``)
    MOVED,
    "CREATE INDEX IF NOT EXISTS objects_by_state_age ON objects (machine, state, entered, uid)",
)

_FIND = (
    "SELECT kind, namespace, name, uid, version, status, schema_version, schema_fingerprint, "
    "entered FROM objects WHERE machine = ?{where} ORDER BY entered, uid LIMIT ?"
)
COUNTS = (
    "SELECT machine, state, count(*), min(entered) FROM objects GROUP BY machine, state "
    "ORDER BY machine, state"
)


def has_entered(db: sqlite3.Connection) -> bool:
    return "entered" in {row[1] for row in db.execute("PRAGMA table_info(objects)")}


def migrate(db: sqlite3.Connection) -> None:
    """Run :data:`MIGRATION` on ``db`` (inside the caller's transaction) unless done."""
    if not has_entered(db):
        for statement in MIGRATION:
            db.execute(statement)


def moved_trigger(db: sqlite3.Connection) -> None:
    """Schema 5 (ADR 0169), inside the caller's transaction: the state trigger of schema 4,
    which wrote every moved row a second time, replaced by :data:`MOVED`."""
    found = db.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = 'objects_entered_moved'"
    ).fetchone()
    if found is not None and "OLD.entered IS NEW.entered" not in found[0]:
        db.execute("DROP TRIGGER objects_entered_moved")
        db.execute(MOVED)


def find_rows(db: sqlite3.Connection, query: Query) -> list[Any]:
    """The rows of ``query``'s answer: kind, namespace, name, uid, version, status, schema
    version and fingerprint, entered."""
    where = ""
    args: list[Any] = [query.machine]
    if query.state is not None:
        where += " AND state = ?"
        args.append(query.state)
    if query.before is not None:
        where += " AND entered < ?"
        args.append(query.before)
    return db.execute(_FIND.format(where=where), (*args, query.limit)).fetchall()


def counts(db: sqlite3.Connection) -> list[StateCount]:
    return [StateCount(m, s, n, epoch_time(at)) for m, s, n, at in db.execute(COUNTS)]
