"""The SQLite store's tables (ADR 0153): their layout and version, and what a store does to a
file at open -- refuse a schema newer than it knows (ADR 0104), create what is missing, and
migrate a store of schema 2 (ADR 0088), 3 (ADR 0159) or 4 (ADR 0169) -- before its first
commit."""

from __future__ import annotations

import sqlite3

from .._core.errors import StoreError, preview
from . import _sqlite_history as history
from ._sqlite_find import migrate as migrate_entered
from ._sqlite_find import moved_trigger
from ._sqlite_write import Tx

__all__ = ["JOURNAL_COLUMNS", "SCHEMA", "SCHEMA_VERSION", "migrate_journal", "prepare"]

SCHEMA_VERSION = 5  # 4: objects.entered (ADR 0159); 5: an appended journal (ADR 0169)

#: The journal's columns. Schema 5 (ADR 0169): a rowid table, so each entry is appended at
#: its end (not inserted among its object's entries: a page split per entry), found by the
#: unique index ``journal_key`` on (uid, version), which :func:`migrate_journal` creates.
JOURNAL_COLUMNS = (
    "uid TEXT NOT NULL, version INTEGER NOT NULL, at TEXT NOT NULL, observation TEXT NOT NULL, "
    "fields TEXT NOT NULL, transitions TEXT NOT NULL, schema_version INTEGER NOT NULL DEFAULT 1, "
    "schema_fingerprint TEXT NOT NULL DEFAULT ''"
)
_JOURNAL_NAMES = ", ".join(column.split()[0] for column in JOURNAL_COLUMNS.split(", "))

SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS lifecycle_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS objects (
    uid TEXT PRIMARY KEY,
    machine TEXT NOT NULL,
    kind TEXT NOT NULL,
    namespace TEXT NOT NULL,
    name TEXT NOT NULL,
    state TEXT NOT NULL,
    version INTEGER NOT NULL,
    status TEXT NOT NULL,
    schema_version INTEGER NOT NULL DEFAULT 1,
    schema_fingerprint TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS journal ("""
    + JOURNAL_COLUMNS
    + """);
CREATE TABLE IF NOT EXISTS outbox (
    id TEXT PRIMARY KEY,
    uid TEXT NOT NULL,
    version INTEGER NOT NULL,
    n INTEGER NOT NULL,
    payload TEXT NOT NULL,
    claimed_by TEXT,
    claimed_until REAL
);
CREATE INDEX IF NOT EXISTS outbox_order ON outbox (uid, version, n);
CREATE TABLE IF NOT EXISTS snapshots (
    uid TEXT PRIMARY KEY,
    version INTEGER NOT NULL,
    status TEXT NOT NULL,
    schema_version INTEGER NOT NULL DEFAULT 1,
    schema_fingerprint TEXT NOT NULL DEFAULT ''
) WITHOUT ROWID;
"""
    + history.EPOCHS_TABLE
)
#: Schema 3 (ADR 0088): every status, journal entry and snapshot records the version and
#: fingerprint of its machine's schema. Rows written before get version 1 and no fingerprint:
#: the tables as they were then are version 1 by definition.
_SCHEMA_COLUMNS = (
    "schema_version INTEGER NOT NULL DEFAULT 1",
    "schema_fingerprint TEXT NOT NULL DEFAULT ''",
)


def prepare(db: sqlite3.Connection, path: str, synchronous: str) -> None:
    """Make the file at ``path`` a store of :data:`SCHEMA_VERSION` on ``db``: WAL mode at
    ``synchronous``, every table, the schema 3 columns, the schema 4 entry times, the schema 5
    journal and state trigger, the version mark. A store of a newer schema is refused first,
    with nothing written (``db`` is then closed)."""
    refuse_a_newer_schema(db, path)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(f"PRAGMA synchronous={synchronous}")
    db.executescript(SCHEMA)
    add_schema_columns(db)
    db.execute("BEGIN IMMEDIATE")  # schema 4 and 5 (ADR 0159, ADR 0169), in one transaction
    try:
        migrate_entered(db)
        migrate_journal(db)
        moved_trigger(db)
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
    db.execute(
        "INSERT INTO lifecycle_meta VALUES ('schema_version', ?) ON CONFLICT (key) "
        "DO UPDATE SET value = excluded.value WHERE CAST(value AS INTEGER) < ?",
        (str(SCHEMA_VERSION), SCHEMA_VERSION),
    )


def migrate_journal(db: sqlite3.Connection) -> None:
    """Schema 5 (ADR 0169), inside the caller's transaction: a journal keyed by its primary
    key (``WITHOUT ROWID``, schema 4 and before) is copied, in key order, into the appended
    layout, and the index ``objects_by_machine`` -- a prefix of ``objects_by_state_age``,
    so one more index each state change updated for nothing -- is dropped. Once: a store of
    schema 5 only has its key index checked."""
    (sql,) = db.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'journal'"
    ).fetchone()
    if "WITHOUT ROWID" in sql.upper():
        db.execute(f"CREATE TABLE journal_appended ({JOURNAL_COLUMNS})")
        db.execute(
            f"INSERT INTO journal_appended ({_JOURNAL_NAMES}) "
            f"SELECT {_JOURNAL_NAMES} FROM journal ORDER BY uid, version"
        )
        db.execute("DROP TABLE journal")
        db.execute("ALTER TABLE journal_appended RENAME TO journal")
    db.execute("CREATE UNIQUE INDEX IF NOT EXISTS journal_key ON journal (uid, version)")
    db.execute("DROP INDEX IF EXISTS objects_by_machine")


def refuse_a_newer_schema(db: sqlite3.Connection, path: str) -> None:
    """Before anything is written (not even the journal mode): a store a newer release
    marked with a schema version this one does not know is refused, as PostgreSQL's is
    (:class:`StoreError`; the CLI exits 2). Its tables may mean what this release cannot
    read, and writing them could break the release that made them."""
    try:
        found = db.execute(
            "SELECT value FROM lifecycle_meta WHERE key = 'schema_version'"
        ).fetchone()
    except sqlite3.OperationalError:  # no such table: a new file, or one before schemas
        return
    version = found[0] if found is not None else None
    try:
        number = int(version) if version is not None else None
    except (TypeError, ValueError):
        number = -1
    if number is None or 0 < number <= SCHEMA_VERSION:
        return
    db.close()
    if number > SCHEMA_VERSION:
        problem = (
            f"its schema is at version {number}, newer than this release knows "
            f"({SCHEMA_VERSION}); upgrade lifecycle"
        )
    else:
        problem = f"its schema version {preview(version)} is not one this release knows"
    raise StoreError(f"SQLite store {path}: {problem} (nothing was written)")


def add_schema_columns(db: sqlite3.Connection) -> None:
    """Migrate a store of schema 2: add the record-schema columns (ADR 0088), once, in
    one transaction (another process opening it at once waits, then finds them)."""
    tables = ("objects", "journal", "snapshots")
    if all(has_schema_columns(db, t) for t in tables):
        return
    with Tx(db):
        for table in tables:
            if not has_schema_columns(db, table):
                for column in _SCHEMA_COLUMNS:
                    db.execute(f"ALTER TABLE {table} ADD COLUMN {column}")


def has_schema_columns(db: sqlite3.Connection, table: str) -> bool:
    names = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
    return "schema_fingerprint" in names
