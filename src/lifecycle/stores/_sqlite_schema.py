"""The SQLite store's tables (ADR 0153): their layout and version, and what a store does to a
file at open -- refuse a schema newer than it knows (ADR 0104), create what is missing, and
migrate a store of schema 2 (ADR 0088) -- before its first commit."""

from __future__ import annotations

import sqlite3

from .._core.errors import StoreError, preview
from . import _sqlite_history as history
from ._sqlite_find import migrate as migrate_entered
from ._sqlite_write import Tx

__all__ = ["SCHEMA", "SCHEMA_VERSION", "prepare"]

SCHEMA_VERSION = 4  # 4: objects.entered and its triggers (ADR 0159)

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
CREATE INDEX IF NOT EXISTS objects_by_machine ON objects (machine, state);
CREATE TABLE IF NOT EXISTS journal (
    uid TEXT NOT NULL,
    version INTEGER NOT NULL,
    at TEXT NOT NULL,
    observation TEXT NOT NULL,
    fields TEXT NOT NULL,
    transitions TEXT NOT NULL,
    schema_version INTEGER NOT NULL DEFAULT 1,
    schema_fingerprint TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (uid, version)
) WITHOUT ROWID;
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
    ``synchronous``, every table, the schema 3 columns, the schema 4 entry times, the version
    mark. A store of a newer schema is refused first, with nothing written (``db`` is then
    closed)."""
    refuse_a_newer_schema(db, path)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(f"PRAGMA synchronous={synchronous}")
    db.executescript(SCHEMA)
    add_schema_columns(db)
    db.execute("BEGIN IMMEDIATE")  # schema 4: the entry times and their triggers (ADR 0159)
    try:
        migrate_entered(db)
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
    db.execute(
        "INSERT INTO lifecycle_meta VALUES ('schema_version', ?) ON CONFLICT (key) "
        "DO UPDATE SET value = excluded.value WHERE CAST(value AS INTEGER) < ?",
        (str(SCHEMA_VERSION), SCHEMA_VERSION),
    )


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
