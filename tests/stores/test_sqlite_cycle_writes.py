"""What a cycle's changes write on SQLite (ADR 0169): the journal appended (schema 5) and
migrated from the keyed layout of schema 4 with every entry kept, and a batch commit carrying
the delivery marks held for the next commit, as a single commit does (ADR 0132)."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lifecycle import IdentityMismatch, ObjectRef, Runner, SQLiteStore
from lifecycle.machines import POD, pod
from lifecycle.stores import sqlite as sqlite_module
from lifecycle.stores._sqlite_codec import dumps, dumps_status, loads
from lifecycle.stores.base import CommitItem
from lifecycle.stores.sqlite import SCHEMA_VERSION

from ..conftest import pod_ref, t

#: schema 4's journal, as a release before ADR 0169 created it
_KEYED_JOURNAL = (
    "CREATE TABLE journal (uid TEXT NOT NULL, version INTEGER NOT NULL, at TEXT NOT NULL, "
    "observation TEXT NOT NULL, fields TEXT NOT NULL, transitions TEXT NOT NULL, "
    "schema_version INTEGER NOT NULL DEFAULT 1, schema_fingerprint TEXT NOT NULL DEFAULT '', "
    "PRIMARY KEY (uid, version)) WITHOUT ROWID"
)

#: schema 4's state trigger: it wrote every moved row a second time
_MOVED_4 = (
    "CREATE TRIGGER objects_entered_moved AFTER UPDATE OF state ON objects FOR EACH ROW "
    "WHEN OLD.state IS NOT NEW.state BEGIN UPDATE objects SET entered = "
    "round((julianday('now') - 2440587.5) * 86400.0, 6) WHERE rowid = NEW.rowid; END"
)


def _raw(path: Path) -> contextlib.closing[sqlite3.Connection]:
    return contextlib.closing(sqlite3.connect(path, isolation_level=None))


def _journal_sql(path: Path) -> str:
    with _raw(path) as db:
        (sql,) = db.execute("SELECT sql FROM sqlite_master WHERE name = 'journal'").fetchone()
    return str(sql)


def _indexes(path: Path) -> set[str]:
    with _raw(path) as db:
        return {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='index'")}


def _fleet(store: SQLiteStore, n: int) -> list[ObjectRef]:
    refs = [pod_ref(f"p-{i}", uid=f"u-{i}") for i in range(n)]
    runner = Runner(store)
    runner.observe_many([(r, pod.CreateRequested(at=t(0))) for r in refs])
    runner.observe_many(
        [(r, pod.ProvisionSucceeded(at=t(1), reserved=True, instance_id=r.uid)) for r in refs]
    )
    return refs


def test_a_new_store_appends_its_journal_keyed_by_a_unique_index(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = SQLiteStore(path)
    (ref,) = _fleet(store, 1)
    store.close()
    assert "WITHOUT ROWID" not in _journal_sql(path).upper()
    assert "journal_key" in _indexes(path)
    assert "objects_by_machine" not in _indexes(path)  # a prefix of objects_by_state_age
    with _raw(path) as db, pytest.raises(sqlite3.IntegrityError):  # still one entry a version
        db.execute(
            "INSERT INTO journal (uid, version, at, observation, fields, transitions) "
            "VALUES (?, 1, '', 'x', '{}', '[]')",
            (ref.uid,),
        )


def test_a_store_of_schema_4_is_migrated_with_every_entry_kept(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = SQLiteStore(path)
    refs = _fleet(store, 5)
    journals = {r.uid: store.journal(POD, r) for r in refs}
    store.close()
    with _raw(path) as db:  # back to schema 4, as an older release left it
        before = db.execute("SELECT * FROM journal ORDER BY uid, version").fetchall()
        db.execute("BEGIN")
        db.execute("ALTER TABLE journal RENAME TO appended")
        db.execute(_KEYED_JOURNAL)
        db.execute("INSERT INTO journal SELECT * FROM appended ORDER BY version DESC")
        db.execute("DROP TABLE appended")
        db.execute("CREATE INDEX objects_by_machine ON objects (machine, state)")
        db.execute("DROP TRIGGER objects_entered_moved")
        db.execute(_MOVED_4)
        db.execute("UPDATE lifecycle_meta SET value = '4' WHERE key = 'schema_version'")
        db.execute("COMMIT")
    assert "WITHOUT ROWID" in _journal_sql(path).upper()
    store = SQLiteStore(path)
    try:
        assert {r.uid: store.journal(POD, r) for r in refs} == journals
        runner = Runner(store)  # and it takes new entries after them
        runner.observe(refs[0], pod.InstanceRunning(at=t(2), instance_id=refs[0].uid))
        assert len(store.journal(POD, refs[0])) == len(journals[refs[0].uid]) + 1
    finally:
        store.close()
    assert "WITHOUT ROWID" not in _journal_sql(path).upper()
    assert "journal_key" in _indexes(path)
    assert "objects_by_machine" not in _indexes(path)
    with _raw(path) as db:
        (trigger,) = db.execute(
            "SELECT sql FROM sqlite_master WHERE name = 'objects_entered_moved'"
        ).fetchone()
        assert "OLD.entered IS NEW.entered" in trigger  # schema 5's: only for other writers
        rows = db.execute("SELECT * FROM journal ORDER BY uid, version").fetchall()
        (mark,) = db.execute(
            "SELECT value FROM lifecycle_meta WHERE key = 'schema_version'"
        ).fetchone()
    assert set(before) <= set(rows)  # every entry, byte for byte
    assert mark == str(SCHEMA_VERSION) == "5"


def _outbox_uids(path: Path) -> set[str]:
    """The Pods whose events or link intents wait in the outbox (a Pod's NodeClaim's, its)."""
    with _raw(path) as db:
        return {uid.removesuffix("-claim") for (uid,) in db.execute("SELECT uid FROM outbox")}


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> None:
    """Held marks wait for a commit: no marker thread writes them meanwhile."""
    monkeypatch.setattr(sqlite_module, "_MARK_DELAY", 600.0)


@pytest.mark.usefixtures("held")
def test_a_batch_commit_carries_the_held_marks(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = SQLiteStore(path)
    try:
        runner = Runner(store)
        a = pod_ref("a", uid="a")
        runner.observe(a, pod.CreateRequested(at=t(0)))  # delivered: its marks are held
        assert store.undelivered_marks_held() > 0
        assert _outbox_uids(path) == {"a"}
        b, c = pod_ref("b", uid="b"), pod_ref("c", uid="c")
        runner.observe_many([(b, pod.CreateRequested(at=t(1))), (c, pod.CreateRequested(at=t(1)))])
        assert _outbox_uids(path) == {"b", "c"}  # a's delivered rows went with the batch
    finally:
        store.close()


@pytest.mark.usefixtures("held")
def test_a_batch_redone_item_by_item_still_carries_the_held_marks(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = SQLiteStore(path)
    try:
        runner = Runner(store)
        a = pod_ref("a", uid="a")
        runner.observe(a, pod.CreateRequested(at=t(0)))
        with _raw(path) as db:  # a stray journal row refuses b's insert: savepoints then
            db.execute(
                "INSERT INTO journal (uid, version, at, observation, fields, transitions) "
                "VALUES ('b', 1, '', 'x', '{}', '[]')"
            )
        b, c = pod_ref("b", uid="b"), pod_ref("c", uid="c")
        runner.observe_many([(b, pod.CreateRequested(at=t(1))), (c, pod.CreateRequested(at=t(1)))])
        assert store.load(POD, b) is None
        assert store.load(POD, c) is not None
        assert _outbox_uids(path) == {"c"}
    finally:
        store.close()


@pytest.mark.usefixtures("held")
def test_a_refused_batch_keeps_the_held_marks_for_the_next_commit(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = SQLiteStore(path)
    try:
        runner = Runner(store)
        a, b = pod_ref("a", uid="a"), pod_ref("b", uid="b")
        runner.observe_many([(a, pod.CreateRequested(at=t(0))), (b, pod.CreateRequested(at=t(0)))])
        marks = store.undelivered_marks_held()
        assert marks > 0
        record = store.load(POD, a)
        assert record is not None
        impostor = ObjectRef("Pod", "elsewhere", "a", "a")  # a's uid, another object
        obs = pod.ProvisionSucceeded(at=t(1), reserved=True, instance_id="a")
        items = [
            CommitItem(POD, impostor, record.version, record.status, obs, ()),
            CommitItem(POD, b, record.version, record.status, obs, ()),
        ]
        with pytest.raises(IdentityMismatch):
            store.commit_many(items)
        assert store.undelivered_marks_held() == marks  # put back, not lost
        assert _outbox_uids(path) == {"a", "b"}
        store.flush_marks()
        assert _outbox_uids(path) == set()
    finally:
        store.close()


def _entered(path: Path, uid: str) -> float:
    with _raw(path) as db:
        (entered,) = db.execute("SELECT entered FROM objects WHERE uid = ?", (uid,)).fetchone()
    return float(entered)


def test_a_move_writes_its_row_once_and_plain_sql_still_restarts_entered(tmp_path: Path) -> None:
    """The store sets ``entered`` in the statement that moves the state; the trigger is left
    for writers that do not (schema 5, ADR 0169)."""
    path = tmp_path / "s.db"
    store = SQLiteStore(path)
    try:
        (ref,) = _fleet(store, 1)  # Provisioning -> Initializing
        with _raw(path) as db:  # every write of an objects row, counted
            db.execute("CREATE TABLE writes (uid TEXT)")
            db.execute(
                "CREATE TRIGGER counted AFTER UPDATE ON objects "
                "BEGIN INSERT INTO writes VALUES (NEW.uid); END"
            )
        before = _entered(path, ref.uid)
        was = store.load(POD, ref)
        Runner(store).observe(ref, pod.InstanceRunning(at=t(2), instance_id=ref.uid))
        record = store.load(POD, ref)
        assert was is not None
        assert record is not None
        assert record.status.state != was.status.state  # a move
        with _raw(path) as db:
            (writes,) = db.execute("SELECT count(*) FROM writes").fetchone()
        assert writes == 1
        moved = _entered(path, ref.uid)
        assert moved >= before
        with _raw(path) as db:  # a writer that does not set entered: the trigger does
            db.execute("UPDATE objects SET entered = 0 WHERE uid = ?", (ref.uid,))
            db.execute("UPDATE objects SET state = 'Elsewhere' WHERE uid = ?", (ref.uid,))
        assert _entered(path, ref.uid) >= moved
    finally:
        store.close()


#: what a status dumps to: JSON values, and what json takes beyond them (tuples, NaN, big ints)
_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(_VALUES)
def test_a_status_reads_back_as_json_would_write_it(value: object) -> None:
    """orjson writes a status only when its text reads back as the value; json's otherwise
    (a NaN stays NaN, not null): what is read back is what json's text gives (ADR 0169)."""
    assert dumps(loads(dumps_status(value))) == dumps(loads(dumps(value)))


def test_a_nan_in_a_status_is_written_as_json_writes_it() -> None:
    assert dumps_status({"score": float("nan"), "at": (1, 2)}) == '{"score":NaN,"at":[1,2]}'
