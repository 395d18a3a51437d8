"""The record schemas in a SQLite store (ADR 0088, ADR 0153): how many statuses, journal entries
and snapshots each machine has at each schema version (``SchemaStore.schema_versions``), and
their rewrite to the machine's present version through its upcasters (``upgrade``), a batch
at a time, each row compared-and-set on the version and schema it was read at."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

from .._core.errors import StoreError
from .._core.machine import Machine
from .._core.schema import SchemaCount, merge_counts, upgraded_observation, upgraded_status
from ._sqlite_codec import dumps, int64, loads
from ._sqlite_write import Connected
from .base import UpgradeReport, check_batch

__all__ = ["schema_versions", "upgrade"]


def schema_versions(store: Connected) -> list[SchemaCount]:
    """Per machine, kind of record, version and fingerprint: how many, one example uid
    (one aggregate read)."""
    with store._lock:
        try:
            rows = store._db.execute(_SCHEMA_VERSIONS).fetchall()
        except sqlite3.Error as e:
            raise store._fail("schema report", e) from e
    return merge_counts(rows)


def upgrade(store: Connected, machine: Machine[Any], batch: int) -> UpgradeReport:
    """Rewrite ``machine``'s statuses, journal entries and snapshots below its schema
    version, ``batch`` rows per transaction (see :class:`~lifecycle.stores.SchemaStore`).
    Rows are read and upcast outside the write transaction; each is then set only if its
    version and schema are still what was read, so a concurrent commit wins."""
    check_batch(batch)
    int64("batch", batch)
    schema = machine.schema
    now = (schema.version, schema.fingerprint)
    name = machine.name

    def status(row: tuple[Any, ...]) -> tuple[Any, ...]:
        uid, version, data, sv, fp = row
        state, new = upgraded_status(machine, loads(data), sv, fp)
        return (state, dumps(new), *now, uid, version, sv, fp)

    def entry(row: tuple[Any, ...]) -> tuple[Any, ...]:
        uid, version, at, obs, fields, sv, fp = row
        obs, new = upgraded_observation(machine, obs, at, loads(fields), sv, fp)
        return (obs, dumps(new), *now, uid, version, sv, fp)

    def snapshot(row: tuple[Any, ...]) -> tuple[Any, ...]:
        uid, version, data, sv, fp = row
        _, new = upgraded_status(machine, loads(data), sv, fp)
        return (dumps(new), *now, uid, version, sv, fp)

    done = [
        _upgrade_rows(store, name, schema.version, batch, select, update, convert)
        for select, update, convert in (
            (_OLD_STATUSES, _UPGRADE_STATUS, status),
            (_OLD_ENTRIES, _UPGRADE_ENTRY, entry),
            (_OLD_SNAPSHOTS, _UPGRADE_SNAPSHOT, snapshot),
        )
    ]
    skipped = sum(n for _, n in done)
    return UpgradeReport(name, done[0][0], done[1][0], done[2][0], skipped)


def _upgrade_rows(
    store: Connected,
    machine: str,
    version: int,
    batch: int,
    select: str,
    update: str,
    convert: Callable[[tuple[Any, ...]], tuple[Any, ...]],
) -> tuple[int, int]:
    """One kind of row, in batches: (rewritten, skipped)."""
    written = skipped = 0
    after: tuple[str, int] = ("", -1)
    while True:
        with store._lock:
            try:
                rows = store._db.execute(select, (machine, version, *after, batch)).fetchall()
            except sqlite3.Error as e:
                raise store._fail("upgrade scan", e) from e
        if not rows:
            return written, skipped
        after = (rows[-1][0], rows[-1][1])
        updates = [_upgraded(convert, row) for row in rows]
        with store._lock:
            try:
                with store._transaction() as db:
                    for params in updates:
                        n = db.execute(update, params).rowcount
                        written += n
                        skipped += 1 - n
            except sqlite3.Error as e:
                raise store._fail("upgrade", e) from e


def _upgraded(
    convert: Callable[[tuple[Any, ...]], tuple[Any, ...]], row: tuple[Any, ...]
) -> tuple[Any, ...]:
    """A row's upgrade parameters; an upcaster that fails or yields a record the machine
    refuses stops the upgrade there (this batch unwritten) with a :class:`StoreError`."""
    try:
        return convert(row)
    except StoreError:
        raise
    except Exception as e:
        raise StoreError(f"upgrade of {row[0]} v{row[1]} failed: {e!r}") from e


# One aggregate read: per machine, kind, version and fingerprint, the count and one uid.
_SCHEMA_VERSIONS = """
SELECT machine, 'status', schema_version, schema_fingerprint, count(*), min(uid)
FROM objects GROUP BY machine, schema_version, schema_fingerprint
UNION ALL
SELECT o.machine, 'journal', j.schema_version, j.schema_fingerprint, count(*), min(j.uid)
FROM journal j JOIN objects o ON o.uid = j.uid
GROUP BY o.machine, j.schema_version, j.schema_fingerprint
UNION ALL
SELECT o.machine, 'snapshot', s.schema_version, s.schema_fingerprint, count(*), min(s.uid)
FROM snapshots s JOIN objects o ON o.uid = s.uid
GROUP BY o.machine, s.schema_version, s.schema_fingerprint
"""
# What ``upgrade`` reads, a batch at a time after a (uid, version) key, and how it writes
# back: compare-and-set on the version and schema that were read.
_OLD_STATUSES = (
    "SELECT uid, version, status, schema_version, schema_fingerprint FROM objects "
    "WHERE machine = ? AND schema_version < ? AND (uid, version) > (?, ?) ORDER BY uid LIMIT ?"
)
_UPGRADE_STATUS = (
    "UPDATE objects SET state = ?, status = ?, schema_version = ?, schema_fingerprint = ? "
    "WHERE uid = ? AND version = ? AND schema_version = ? AND schema_fingerprint = ?"
)
_OLD_ENTRIES = (
    "SELECT j.uid, j.version, j.at, j.observation, j.fields, j.schema_version, "
    "j.schema_fingerprint FROM journal j JOIN objects o ON o.uid = j.uid "
    "WHERE o.machine = ? AND j.schema_version < ? AND (j.uid, j.version) > (?, ?) "
    "ORDER BY j.uid, j.version LIMIT ?"
)
_UPGRADE_ENTRY = (
    "UPDATE journal SET observation = ?, fields = ?, schema_version = ?, schema_fingerprint = ? "
    "WHERE uid = ? AND version = ? AND schema_version = ? AND schema_fingerprint = ?"
)
_OLD_SNAPSHOTS = (
    "SELECT s.uid, s.version, s.status, s.schema_version, s.schema_fingerprint "
    "FROM snapshots s JOIN objects o ON o.uid = s.uid "
    "WHERE o.machine = ? AND s.schema_version < ? AND (s.uid, s.version) > (?, ?) "
    "ORDER BY s.uid LIMIT ?"
)
_UPGRADE_SNAPSHOT = (
    "UPDATE snapshots SET status = ?, schema_version = ?, schema_fingerprint = ? "
    "WHERE uid = ? AND version = ? AND schema_version = ? AND schema_fingerprint = ?"
)
