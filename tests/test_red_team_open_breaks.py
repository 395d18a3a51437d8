"""Red team: breaks found in files other helpers are restructuring right now. Each test is
marked ``xfail(strict=True)`` with where the fix belongs; when the fix lands the test passes,
strict xfail turns that into a failure, and the mark is to be removed.

Fixed since, and kept here as plain tests: the SQLite store refuses an integer beyond 64
bits with a StoreError (it escaped as ``OverflowError``), and a restored backup of its file
starts a new epoch, so no event id names two events (ADR 0037); ``observe_many`` given items
that are not ``(ref, observation)`` pairs is refused with a LifecycleError naming the item; a
refused ``memory://`` replay says one line on stderr (it holds the library's log records back
with its output, ``lifecycle.cli``).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from lifecycle import (
    LifecycleError,
    MemoryEmitter,
    ObjectRef,
    Runner,
    SQLiteStore,
    StoreError,
)
from lifecycle.machines import POD, pod
from lifecycle.testing import assert_journal_folds

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
REF = ObjectRef("Pod", "ml", "trainer-0", "pod-a")

FAULT_THEN_BAD_LINE = (
    '{"at": "2026-11-30T10:00:00Z", "machine": "pod", "object": {"namespace": "ml", '
    '"name": "p", "uid": "u"}, "fault": "write-error", "times": 1}\n'
    '{"at": "2026-11-30T10:00:00Z", "machine": "pod", "object": {"namespace": "ml", '
    '"name": "p", "uid": "u"}, "observe": "CreateRequested", "with": {}}\n'
    '{"at": "2026-11-30T10:00:01Z", "machine": "pod", "object": {"namespace": "ml", '
    '"name": "p", "uid": "u"}, "observe": "NoSuchObservation", "with": {}}\n'
)


def test_a_refused_memory_replay_says_one_line_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from lifecycle.cli import main

    trace = tmp_path / "t.jsonl"
    trace.write_text(FAULT_THEN_BAD_LINE)
    code = main(["replay", str(trace), "--store", "memory://"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip().splitlines() == [err.strip().splitlines()[-1]], err
    assert ":3:" in err


def test_a_refused_sqlite_replay_says_one_line_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same trace on SQLite: the dry run is silent, one line (the control case)."""
    from lifecycle.cli import main

    trace = tmp_path / "t.jsonl"
    trace.write_text(FAULT_THEN_BAD_LINE)
    code = main(["replay", str(trace), "--store", f"sqlite:///{tmp_path / 's.db'}"])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "s.db").exists()


@pytest.mark.parametrize("call", ["commit", "claim_undelivered"])
def test_sqlite_refuses_an_integer_beyond_64_bits_typed(tmp_path: Path, call: str) -> None:
    store = SQLiteStore(tmp_path / "s.db", synchronous="OFF")
    try:
        obs = pod.CreateRequested(at=T0)
        status = POD.apply(POD.initial(REF), obs)
        calls: dict[str, Callable[[], object]] = {
            "commit": lambda: store.commit(POD, REF, 2**70, status, obs, ()),
            "claim_undelivered": lambda: store.claim_undelivered(10**30),
        }
        with pytest.raises(StoreError):
            calls[call]()
        assert store.load(POD, REF) is None
    finally:
        store.close()


def test_a_restored_sqlite_backup_never_reuses_an_event_id(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    sink = MemoryEmitter()

    def write(obs: Any) -> None:
        store = SQLiteStore(path)
        try:
            Runner(store, [sink]).observe(REF, obs)
        finally:
            store.close()

    write(pod.CreateRequested(at=T0))
    shutil.copy(path, tmp_path / "backup.db")
    write(pod.ProvisionSucceeded(at=T0 + timedelta(seconds=1), reserved=True, instance_id="i-1"))
    shutil.copy(tmp_path / "backup.db", path)  # the operator restores last night's backup
    write(pod.ProvisionRejected(at=T0 + timedelta(seconds=2), error="no capacity"))
    seen: dict[str, tuple[str, str]] = {}
    for e in sink.events:
        assert seen.setdefault(e.id, (e.reason, e.target)) == (e.reason, e.target), e.id
    store = SQLiteStore(path)
    try:
        assert_journal_folds(POD, store, REF)
    finally:
        store.close()


@pytest.mark.parametrize(
    "items",
    [[None], [(REF,)], [REF], [(REF, pod.CreateRequested(at=T0), 1)], None],
    ids=["None item", "1-tuple", "a bare ref", "3-tuple", "None"],
)
def test_observe_many_refuses_malformed_items_typed(items: Any) -> None:
    runner = Runner()
    with pytest.raises(LifecycleError):
        runner.observe_many(items)
