"""A cached SQLite read never lags a commit, whoever made it: a plain connection's, or another
cached handle's in the same thread (ADR 0156; ADR 0171 records a shortcut tried and withdrawn,
which these and ``test_sqlite_history``'s processes sharing one file caught)."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lifecycle import ObjectRef, Runner, SQLiteStore
from lifecycle.machines import POD, pod

AT = datetime(2026, 12, 6, tzinfo=UTC)
REFS = [ObjectRef("Pod", "ml", f"p{i}", f"p{i}") for i in range(3)]


def _pragmas(store: SQLiteStore) -> list[str]:
    asked: list[str] = []
    store._db.set_trace_callback(lambda sql: asked.append(sql) if "data_version" in sql else None)
    return asked


def test_a_commit_by_a_plain_connection_is_seen_by_the_next_read(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    other = sqlite3.connect(tmp_path / "s.db", isolation_level=None)
    try:
        Runner(store).observe(REFS[0], pod.CreateRequested(at=AT))
        first = store.load(POD, REFS[0])
        assert first is not None
        other.execute("UPDATE objects SET version = version + 1 WHERE uid = ?", (REFS[0].uid,))
        again = store.load(POD, REFS[0])
        assert again is not None
        assert again.version == first.version + 1
    finally:
        other.close()
        store.close()


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(["first", "second"]),
            st.sampled_from(["write", "read"]),
            st.integers(0, len(REFS) - 1),
        ),
        min_size=1,
        max_size=25,
    )
)
def test_two_handles_in_one_thread_never_read_behind_each_other(
    tmp_path_factory: Any, steps: list[tuple[str, str, int]]
) -> None:
    """Two cached handles on one file, interleaved in one thread (two runners of one host):
    every read of either returns what the file holds at that moment."""
    path = tmp_path_factory.mktemp("wal") / "s.db"
    stores = {"first": SQLiteStore(path), "second": SQLiteStore(path)}
    plain = sqlite3.connect(path)
    try:
        runners = {name: Runner(store) for name, store in stores.items()}
        ready = dict.fromkeys(range(len(REFS)), True)
        for n, ref in enumerate(REFS):
            runners["first"].observe(ref, pod.CreateRequested(at=AT))
            runners["first"].observe(
                ref, pod.ProvisionSucceeded(at=AT, reserved=True, instance_id=f"i{n}")
            )
        for k, (who, what, n) in enumerate(steps):
            ref = REFS[n]
            if what == "write":
                ready[n] = not ready[n]
                poll = pod.InstanceRunning(
                    at=AT + timedelta(seconds=k + 1),
                    instance_id=f"i{n}",
                    readiness_confirmed=ready[n],
                )
                assert runners[who].observe(ref, poll).error is None
            else:
                record = stores[who].load(POD, ref)
                (stored,) = plain.execute(
                    "SELECT version FROM objects WHERE uid = ?", (ref.uid,)
                ).fetchone()
                assert record is not None
                assert record.version == stored
    finally:
        plain.close()
        for store in stores.values():
            store.close()
