"""A SQLite store's history (ADR 0037): a file replaced by an older copy of itself (a restored
backup) starts a new epoch, so no event id names two events; a file never restored keeps its
ids as they were; integers SQLite cannot store are refused typed, the store unchanged."""

from __future__ import annotations

import contextlib
import io
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from lifecycle import MemoryEmitter, ObjectRef, Runner, SQLiteStore, StoreError
from lifecycle.cli import main
from lifecycle.machines import POD, pod
from lifecycle.stores import CommitItem
from lifecycle.stores._sqlite_history import SUFFIX

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
REF = ObjectRef("Pod", "ml", "trainer-0", "pod-a")
STEPS: list[Any] = [
    pod.CreateRequested(at=T0),
    pod.ProvisionSucceeded(at=T0 + timedelta(seconds=1), reserved=True, instance_id="i-1"),
    pod.ProvisionRejected(at=T0 + timedelta(seconds=2), error="no capacity"),
]


def observe(path: Path, obs: Any, sink: MemoryEmitter | None = None) -> SQLiteStore:
    """One session: open, observe, close; the (closed) store for its epoch and rewinds."""
    store = SQLiteStore(path, synchronous="NORMAL")
    try:
        Runner(store, [sink or MemoryEmitter()]).observe(REF, obs)
    finally:
        store.close()
    return store


def rows(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    with contextlib.closing(sqlite3.connect(path)) as db:
        return {
            t: db.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall()
            for t in ("lifecycle_meta", "objects", "journal", "outbox", "lifecycle_epochs")
        }


def pod_ids(sink: MemoryEmitter) -> list[str]:
    """The ids of the Pod's own events (not those of the NodeClaim it links to)."""
    return [e.id for e in sink.events if e.id.startswith("pod-a:")]


def assert_ids_unique(sink: MemoryEmitter) -> None:
    seen: dict[str, tuple[str, str]] = {}
    for e in sink.events:
        assert seen.setdefault(e.id, (e.reason, e.target)) == (e.reason, e.target), e.id


def test_a_store_never_restored_keeps_its_ids_and_an_empty_epoch(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    sink = MemoryEmitter()
    for obs in STEPS[:2]:
        store = observe(path, obs, sink)
        assert store.epoch == ""
        assert store.rewinds == []
    assert pod_ids(sink) == ["pod-a:1:0", "pod-a:2:0"]
    assert Path(str(path) + SUFFIX).exists()
    assert rows(path)["lifecycle_epochs"] == []


def test_a_restored_backup_starts_an_epoch_reported_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path, backup = tmp_path / "s.db", tmp_path / "backup.db"
    sink = MemoryEmitter()
    observe(path, STEPS[0], sink)
    shutil.copy(path, backup)
    observe(path, STEPS[1], sink)
    shutil.copy(backup, path)  # the commit of v2 is lost
    store = observe(path, STEPS[2], sink)
    assert store.epoch.startswith("s1-")
    [rewind] = store.rewinds
    assert rewind.epoch == store.epoch
    assert "older copy" in str(rewind)
    assert "history went back" in caplog.text
    assert pod_ids(sink)[-1] == f"pod-a:2:0@{store.epoch}"
    assert_ids_unique(sink)
    again = SQLiteStore(path)  # the epoch is the database's now: no second report
    try:
        assert again.epoch == store.epoch
        assert again.rewinds == []
        assert [seq for seq, *_ in again.history().epochs] == [1]
    finally:
        again.close()


def test_a_copy_taken_while_the_store_was_open_is_recognised_once_it_closed(
    tmp_path: Path,
) -> None:
    path, backup = tmp_path / "s.db", tmp_path / "backup.db"
    sink = MemoryEmitter()
    store = SQLiteStore(path, synchronous="NORMAL")
    runner = Runner(store, [sink])
    runner.observe(REF, STEPS[0])
    src, dst = sqlite3.connect(path), sqlite3.connect(backup)
    src.backup(dst)  # an online backup, taken while the store is open
    src.close()
    dst.close()
    runner.observe(REF, STEPS[1])
    store.close()
    shutil.copy(backup, path)
    after = observe(path, STEPS[2], sink)
    assert after.epoch
    assert len(after.rewinds) == 1
    assert_ids_unique(sink)


def test_a_restored_copy_from_before_history_tags_is_recognised(tmp_path: Path) -> None:
    path, backup = tmp_path / "s.db", tmp_path / "backup.db"
    observe(path, STEPS[0])
    shutil.copy(path, backup)
    with contextlib.closing(sqlite3.connect(backup)) as db:  # as before history tags
        db.execute("DELETE FROM lifecycle_meta WHERE key = 'history'")
        db.commit()
    observe(path, STEPS[1])
    shutil.copy(backup, path)
    assert observe(path, STEPS[2]).epoch


def test_a_store_from_before_history_tags_keeps_its_ids(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    observe(path, STEPS[0])
    Path(str(path) + SUFFIX).unlink()
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("DELETE FROM lifecycle_meta WHERE key = 'history'")
        db.commit()
    sink = MemoryEmitter()
    store = observe(path, STEPS[1], sink)
    assert store.epoch == ""
    assert pod_ids(sink) == ["pod-a:2:0"]
    assert Path(str(path) + SUFFIX).exists()  # from now on it is tracked


def test_a_database_moved_without_its_history_file_starts_an_epoch(tmp_path: Path) -> None:
    observe(tmp_path / "s.db", STEPS[0])
    shutil.copy(tmp_path / "s.db", tmp_path / "moved.db")
    store = observe(tmp_path / "moved.db", STEPS[1])
    assert store.epoch
    assert "no history file" in str(rows(tmp_path / "moved.db"))


def test_handles_sharing_one_file_agree_and_never_start_an_epoch(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    sink = MemoryEmitter()
    a = SQLiteStore(path, synchronous="NORMAL")
    b = SQLiteStore(path, synchronous="NORMAL")
    Runner(a, [sink]).observe(REF, STEPS[0])
    Runner(b, [sink]).observe(REF, STEPS[1])
    a.close()
    c = SQLiteStore(path, synchronous="NORMAL")
    Runner(c, [sink]).observe(REF, STEPS[2])
    b.close()
    c.close()
    d = SQLiteStore(path)
    try:
        assert (a.epoch, b.epoch, c.epoch, d.epoch) == ("", "", "", "")
        assert d.history().ok
        assert not d.rewinds
    finally:
        d.close()
    assert all("@" not in e.id for e in sink.events)


def test_a_handle_that_writes_nothing_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    observe(path, STEPS[0])
    sidecar = Path(str(path) + SUFFIX)
    before, tag = rows(path), sidecar.read_bytes()
    store = SQLiteStore(path)
    assert store.load(POD, REF) is not None
    store.close()
    assert rows(path) == before
    assert sidecar.read_bytes() == tag


def test_db_check_reports_a_restored_copy(tmp_path: Path) -> None:
    path, backup = tmp_path / "s.db", tmp_path / "backup.db"
    observe(path, STEPS[0])
    shutil.copy(path, backup)
    out = io.StringIO()
    assert main(["db", "check", "--store", f"sqlite:///{path}"], out=out) == 0
    assert "1 epoch(s)" in out.getvalue()
    observe(path, STEPS[1])
    shutil.copy(backup, path)
    out = io.StringIO()
    assert main(["db", "check", "--store", f"sqlite:///{path}"], out=out) == 1
    assert "2 epoch(s)" in out.getvalue()
    assert "older copy" in out.getvalue()


def test_an_acknowledged_restore_passes_db_check_until_the_next_one(tmp_path: Path) -> None:
    """A restored copy is reported until an operator acknowledges it, once (ADR 0163): not
    on every later check, and a later restore is a finding again."""
    path, backup = tmp_path / "s.db", tmp_path / "backup.db"
    url = f"sqlite:///{path}"

    def check(*flags: str) -> tuple[int, str]:
        out = io.StringIO()
        return main(["db", "check", "--store", url, *flags], out=out), out.getvalue()

    observe(path, STEPS[0])
    shutil.copy(path, backup)
    observe(path, STEPS[1])
    shutil.copy(backup, path)  # restored: the commit of v2 is lost
    code, text = check()
    assert code == 1
    assert "--acknowledge" in text
    assert check()[0] == 1  # reported again: nobody reviewed it
    code, text = check("--acknowledge")
    assert code == 0
    assert "(reviewed)" in text
    code, text = check()
    assert (code, "(reviewed)" in text) == (0, True)
    observe(path, STEPS[1])  # the store goes on; then a second restore
    shutil.copy(path, backup)
    observe(path, pod.DeletionRequested(at=T0 + timedelta(seconds=3)))  # a write
    shutil.copy(backup, path)
    code, text = check()
    assert code == 1
    assert "3 epoch(s)" in text


# -- integers SQLite cannot store ------------------------------------------------------------
@pytest.mark.parametrize("value", [2**63, -(2**63) - 1, 2**70, 10**30])
@pytest.mark.parametrize("call", ["commit", "commit_many", "claim", "compact", "upgrade"])
def test_every_integer_argument_beyond_64_bits_is_refused_typed(
    tmp_path: Path, call: str, value: int
) -> None:
    path = tmp_path / "s.db"
    observe(path, STEPS[0])
    before = rows(path)
    store = SQLiteStore(path, synchronous="OFF")
    status = POD.apply(POD.initial(REF), STEPS[0])
    try:
        if call == "commit_many":
            [outcome] = store.commit_many([CommitItem(POD, REF, value, status, STEPS[0], ())])
            assert isinstance(outcome, StoreError)
            assert "64-bit" in str(outcome)
        else:
            # a negative batch stays the ValueError check_batch gives every store
            refused = ValueError if call == "upgrade" and value < 0 else StoreError
            calls: dict[str, Callable[[], object]] = {
                "commit": lambda: store.commit(POD, REF, value, status, STEPS[0], ()),
                "claim": lambda: store.claim_undelivered(value),
                "compact": lambda: store.compact(POD, keep=value),
                "upgrade": lambda: store.upgrade(POD, batch=value),
            }
            with pytest.raises(refused):
                calls[call]()
    finally:
        store.close()
    assert rows(path) == before


def test_the_largest_64_bit_integer_is_taken_where_it_fits(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    observe(path, STEPS[0])
    store = SQLiteStore(path, synchronous="OFF")
    status = POD.apply(POD.initial(REF), STEPS[0])
    top = 2**63 - 1
    try:
        assert store.claim_undelivered(top) == []  # the runner delivered them all
        assert store.compact(POD, keep=top) == 0
        assert store.upgrade(POD, batch=top).statuses == 0
        with pytest.raises(StoreError, match="64-bit"):  # its next version would not fit
            store.commit(POD, REF, top, status, STEPS[0], ())
    finally:
        store.close()


_WRITER = """
import sys
from datetime import UTC, datetime
from lifecycle import MemoryEmitter, ObjectRef, Runner, SQLiteStore
from lifecycle.machines import pod
path, name = sys.argv[1], sys.argv[2]
for session in range(3):
    store = SQLiteStore(path, synchronous="NORMAL", owner=name)
    sink = MemoryEmitter()
    for i in range(5):
        ref = ObjectRef("Pod", "ml", f"{name}-{session}-{i}", f"{name}-{session}-{i}")
        Runner(store, [sink]).observe(ref, pod.CreateRequested(at=datetime(2026, 1, 1, tzinfo=UTC)))
    store.close()
    assert store.epoch == "" and not store.rewinds, (store.epoch, store.rewinds)
    assert all("@" not in e.id for e in sink.events)
"""


def test_processes_sharing_one_file_never_start_an_epoch(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    SQLiteStore(path).close()
    writers = [
        subprocess.Popen([sys.executable, "-c", _WRITER, str(path), f"w{n}"]) for n in range(3)
    ]
    assert [w.wait(timeout=120) for w in writers] == [0, 0, 0]
    store = SQLiteStore(path)
    try:
        assert store.epoch == ""
        assert store.history().ok
        assert sum(row[2] == "Pod" for row in rows(path)["objects"]) == 45
    finally:
        store.close()
