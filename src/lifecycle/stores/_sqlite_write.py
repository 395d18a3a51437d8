"""What one commit writes to the SQLite store (ADR 0153): its values encoded once as a
:class:`Row`, then -- inside a transaction the caller holds -- the object's compare-and-set,
its journal entry and its outbox rows (:class:`Writer`); and the transaction itself
(:class:`Tx`). A plain commit, a batch and a group commit all write through here."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Sequence
from typing import Any, Protocol

import attrs

from .._core.errors import Conflict, StoreError
from .._core.machine import Machine
from .._core.observation import Observation
from .._core.refs import ObjectRef
from .._core.transition import Transition
from ._sqlite_codec import dumps_bounded, dumps_status, int64
from ._sqlite_find import ENTERED, NOW
from .base import check_identity, transition_to_row

__all__ = ["CHUNK", "INSERT_JOURNAL", "LOAD", "Connected", "Row", "Tx", "Writer", "encode"]

CHUNK = 500  # uids per IN (...) query: well under SQLite's variable limit

#: (``entered`` set here, so its trigger does not write the row again: ADR 0159, ADR 0169)
_NEW_VALUES = f"(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, {NOW})"
INSERT_OBJECT = (
    "INSERT INTO objects (uid, machine, kind, namespace, name, state, version, status, "
    f"schema_version, schema_fingerprint, entered) VALUES {_NEW_VALUES}"
)
INSERT_JOURNAL = (
    "INSERT INTO journal (uid, version, at, observation, fields, transitions, schema_version, "
    "schema_fingerprint) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)

#: Group commit (ADR 0026): the compare-and-set of many objects in one statement each.
_NEW_RETURNING = "ON CONFLICT (uid) DO NOTHING RETURNING uid"
_UPDATE_ALL = (
    "WITH v (uid, expected, machine, kind, namespace, name, state, version, status, sv, fp) "
    "AS (VALUES {values}) "
    "UPDATE objects SET state = v.state, version = v.version, status = v.status, "
    "schema_version = v.sv, schema_fingerprint = v.fp, "
    f"entered = CASE WHEN objects.state IS v.state THEN objects.entered ELSE {NOW} END FROM v "
    "WHERE objects.uid = v.uid AND objects.version = v.expected AND objects.machine = v.machine "
    "AND objects.kind = v.kind AND objects.namespace = v.namespace AND objects.name = v.name "
    "RETURNING objects.uid"
)

#: An object's row with its identity, to check it in the same read (``check_identity``).
LOAD = (
    "SELECT version, status, machine, kind, namespace, name, schema_version, schema_fingerprint "
    "FROM objects WHERE uid = ?"
)


@attrs.frozen(slots=True)
class Row:
    """One commit, serialised: what :meth:`Writer.write` inserts."""

    machine: str
    ref: ObjectRef
    expected: int
    state: str
    status: str
    observation: Observation
    fields: str
    transitions: tuple[Transition, ...]
    events: list[str]
    schema_version: int
    fingerprint: str


def encode(
    machine: Machine[Any],
    ref: ObjectRef,
    expected: int,
    status: Any,
    observation: Observation,
    transitions: Sequence[Transition],
) -> Row:
    """One commit's :class:`Row`, or a :class:`StoreError` if its values cannot be stored
    (before anything is written)."""
    int64("expected version", expected, ref.uid, room=1)
    try:
        status_json = dumps_status(machine.dump_status(status))
        fields_json = dumps_bounded(machine.dump_observation(observation))
        events = [dumps_bounded(transition_to_row(t)) for t in transitions]
    except (TypeError, ValueError) as e:
        raise StoreError(f"cannot serialise the status of {ref}: {e}") from e
    return Row(
        machine.name,
        ref,
        expected,
        status.state,
        status_json,
        observation,
        fields_json,
        tuple(transitions),
        events,
        machine.schema.version,
        machine.schema.fingerprint,
    )


class Writer:
    """Writes a commit's rows inside the caller's transaction, each object with its own
    compare-and-set: outbox rows leased to ``owner``, journal entries only if ``journal``."""

    __slots__ = ("keep_journal", "owner")

    def __init__(self, owner: str, journal: bool) -> None:
        self.owner = owner
        self.keep_journal = journal

    def write(self, db: sqlite3.Connection, row: Row, lease_until: float) -> None:
        """The compare-and-set write of one object, inside the caller's transaction."""
        self.cas(db, row)
        if self.keep_journal:
            db.execute(INSERT_JOURNAL, self.journal_row(row))
        if row.transitions:
            db.executemany(
                "INSERT INTO outbox VALUES (?, ?, ?, ?, ?, ?, ?)",
                self.outbox_rows(row, lease_until),
            )

    def journal_row(self, row: Row) -> tuple[Any, ...]:
        obs = row.observation
        events = "[" + ",".join(row.events) + "]"
        return (row.ref.uid, row.expected + 1, obs.at.isoformat(), obs.name(), row.fields, events,
                row.schema_version, row.fingerprint)  # fmt: skip

    def outbox_rows(self, row: Row, lease_until: float) -> list[tuple[Any, ...]]:
        uid = row.ref.uid
        return [
            (t.id, uid, t.version, t.n, e, self.owner, lease_until)
            for t, e in zip(row.transitions, row.events, strict=True)
        ]

    def cas(self, db: sqlite3.Connection, row: Row) -> None:
        """Compare and set the object's row (raises :class:`Conflict`)."""
        ref, expected = row.ref, row.expected
        version = expected + 1
        if expected == 0:
            try:
                db.execute(
                    INSERT_OBJECT,
                    (
                        ref.uid,
                        row.machine,
                        ref.kind,
                        ref.namespace,
                        ref.name,
                        row.state,
                        version,
                        row.status,
                        row.schema_version,
                        row.fingerprint,
                    ),
                )
            except sqlite3.IntegrityError:
                raise self.conflict(db, row.machine, ref, expected) from None
        else:
            # the identity is part of the compare-and-set: a row stored for another object
            # is not updated, and conflict says which it was
            cur = db.execute(
                f"UPDATE objects SET {ENTERED}, state = ?, version = ?, status = ?, "
                "schema_version = ?, schema_fingerprint = ? WHERE uid = ? "
                "AND version = ? AND machine = ? AND kind = ? AND namespace = ? AND name = ?",
                (
                    row.state,
                    row.state,
                    version,
                    row.status,
                    row.schema_version,
                    row.fingerprint,
                    ref.uid,
                    expected,
                    row.machine,
                    ref.kind,
                    ref.namespace,
                    ref.name,
                ),
            )
            if cur.rowcount != 1:
                raise self.conflict(db, row.machine, ref, expected)

    def cas_all(self, db: sqlite3.Connection, rows: list[Row]) -> set[str] | None:
        """Every row's compare-and-set in a few statements -- an ``INSERT ... ON CONFLICT DO
        NOTHING`` of the new objects and an ``UPDATE ... FROM`` of the stored ones, each
        ``RETURNING`` the uids it wrote, :data:`CHUNK` rows at a time -- so a group or a
        batch costs a few calls into SQLite, not one per item. ``None`` (nothing written) when
        a uid appears twice: the rows then go one by one, in order."""
        if len({row.ref.uid for row in rows}) != len(rows):
            return None
        passed: set[str] = set()
        new = [row for row in rows if row.expected == 0]
        stored = [row for row in rows if row.expected != 0]
        insert = INSERT_OBJECT.partition(" VALUES ")[0]
        for start in range(0, len(new), CHUNK):
            part = new[start : start + CHUNK]
            params: list[Any] = []
            for row in part:
                ref = row.ref
                params += (ref.uid, row.machine, ref.kind, ref.namespace, ref.name, row.state,
                           1, row.status, row.schema_version, row.fingerprint)  # fmt: skip
            values = ",".join([_NEW_VALUES] * len(part))
            sql = f"{insert} VALUES {values} {_NEW_RETURNING}"
            passed.update(uid for (uid,) in db.execute(sql, params).fetchall())
        for start in range(0, len(stored), CHUNK):
            part = stored[start : start + CHUNK]
            params = []
            for row in part:
                ref = row.ref
                params += (ref.uid, row.expected, row.machine, ref.kind, ref.namespace, ref.name,
                           row.state, row.expected + 1, row.status, row.schema_version,
                           row.fingerprint)  # fmt: skip
            values = ",".join(["(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"] * len(part))
            sql = _UPDATE_ALL.format(values=values)
            passed.update(uid for (uid,) in db.execute(sql, params).fetchall())
        return passed

    def conflict(
        self, db: sqlite3.Connection, machine: str, ref: ObjectRef, expected: int
    ) -> Conflict:
        """Why a compare-and-set failed: the :class:`Conflict` to raise, or (raised here)
        :class:`~lifecycle.IdentityMismatch` when the uid is stored for another object."""
        row = db.execute(LOAD, (ref.uid,)).fetchone()
        if row is None:
            return Conflict(ref.uid, expected, None)
        check_identity(row[2], row[3], row[4], row[5], machine, ref)
        return Conflict(ref.uid, expected, row[0])


class Tx:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``, or ``ROLLBACK`` on any exception (a ``COMMIT``
    that fails is rolled back too, so the connection is never left inside a transaction)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> sqlite3.Connection:
        self._db.execute("BEGIN IMMEDIATE")
        return self._db

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            try:
                self._db.execute("COMMIT")
            except BaseException:  # a failed COMMIT leaves the transaction open: end it
                with contextlib.suppress(sqlite3.Error):
                    self._db.execute("ROLLBACK")
                raise
        else:
            self._db.execute("ROLLBACK")


class Connected(Protocol):
    """What a part of the store (ADR 0153) uses of the :class:`~.sqlite.SQLiteStore` that
    holds it: the connection, the lock every use of it takes, a transaction on it, and the
    :class:`StoreError` a failed statement becomes."""

    @property
    def _db(self) -> sqlite3.Connection: ...
    @property
    def _lock(self) -> threading.RLock: ...
    def _transaction(self) -> Tx: ...
    def _fail(self, what: str, e: BaseException) -> StoreError: ...
