"""The status cache by default, and the lean unchanged poll (issue 37; ADR 0155, ADR 0156).

- The SQLite and PostgreSQL stores cache statuses unless told ``cache=0`` (constructor or
  URL), bounded by :data:`~lifecycle.stores.DEFAULT_CACHE`.
- A read through the cache takes no lock.
- SQLite's coherence check (``PRAGMA data_version``) runs before every batch read (once per
  ``observe_many`` page) and before every single read: a read never lags a commit another
  handle made before it (a window of even a millisecond let a sequential program read behind
  its own other handle and refuse an observation as if the commit had not happened). Another
  process's write is seen by the next cycle.
- A ref is admitted once: its bounds and its machine are not checked again per call.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from lifecycle import ObjectRef, Outcome, Runner, SQLiteStore
from lifecycle.machines import POD, pod
from lifecycle.stores import DEFAULT_CACHE, InvalidStoreURL, open_store

from .helpers import t as at
from .pg import PgServer

REF = ObjectRef("Pod", "ml", "trainer-a", "pod-a")


def _running(runner: Runner, ref: ObjectRef = REF) -> None:
    runner.observe(ref, pod.CreateRequested(at=at(0)))
    runner.observe(ref, pod.ProvisionSucceeded(at=at(1), reserved=True, instance_id="i-1"))
    runner.observe(ref, pod.InstanceRunning(at=at(2), instance_id="i-1"))


def _poll(ready: bool, seconds: float = 3) -> pod.InstanceRunning:
    return pod.InstanceRunning(at=at(seconds), instance_id="i-1", readiness_confirmed=ready)


def test_sqlite_caches_by_default_and_cache_0_turns_it_off(tmp_path: Path) -> None:
    stores = [
        SQLiteStore(tmp_path / "a.db"),
        SQLiteStore(tmp_path / "b.db", cache=0),
        open_store(f"sqlite:///{tmp_path}/c.db"),
        open_store(f"sqlite:///{tmp_path}/d.db?cache=0"),
        open_store(f"sqlite:///{tmp_path}/e.db?cache=7"),
    ]
    try:
        sizes = [None if s.cache is None else s.cache.size for s in stores]  # type: ignore[attr-defined]
        assert sizes == [DEFAULT_CACHE, None, DEFAULT_CACHE, None, 7]
    finally:
        for s in stores:
            s.close()


def test_the_cache_grows_with_the_objects_it_serves(tmp_path: Path) -> None:
    """Nothing is allocated ahead: it holds what was read or committed, up to its bound."""
    store = SQLiteStore(tmp_path / "s.db")
    try:
        assert store.cache is not None
        assert len(store.cache) == 0
        runner = Runner(store)
        runner.observe_many(
            [(ObjectRef("Pod", "ml", f"p{i}", f"p{i}"), pod.CreateRequested(at=at(0)))
             for i in range(40)]
        )  # fmt: skip
        assert 40 <= len(store.cache) <= 80  # the Pods (and any NodeClaim a link wrote)
    finally:
        store.close()


def test_a_read_through_the_cache_takes_no_lock(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    try:
        runner = Runner(store)
        _running(runner)
        cache = store.cache
        assert cache is not None
        assert cache.get(POD, REF) is not None
        got: list[Any] = []
        with cache._lock:  # a writer holds it
            reader = threading.Thread(target=lambda: got.append(cache.get(POD, REF)))
            reader.start()
            reader.join(5)
            assert not reader.is_alive(), "the read waited for the writer's lock"
        assert got
        assert got[0] is not None
        assert got[0].version == 3
    finally:
        store.close()


def _counting(store: SQLiteStore) -> list[int]:
    calls = [0]
    check = store._cache_coherent

    def counted(cache: Any) -> bool:
        calls[0] += 1
        return check(cache)

    store._cache_coherent = counted  # type: ignore[method-assign]
    return calls


def test_every_single_read_asks_sqlite(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    try:
        runner = Runner(store)
        _running(runner)
        calls = _counting(store)
        for _ in range(10):
            assert runner.observe(REF, _poll(True)).outcome is Outcome.UNCHANGED
        assert calls[0] == 10
    finally:
        store.close()


def test_a_read_never_lags_a_commit_another_handle_made_before_it(tmp_path: Path) -> None:
    """Two handles on one file in one thread (two runners of one host): what one committed,
    the other's next read holds, however soon after its last read it comes."""
    first, second = SQLiteStore(tmp_path / "s.db"), SQLiteStore(tmp_path / "s.db")
    try:
        Runner(first).observe(REF, pod.CreateRequested(at=at(0)))
        before = second.load(POD, REF)
        assert before is not None  # cached by the second handle now
        result = Runner(first).observe(
            REF, pod.ProvisionSucceeded(at=at(1), reserved=True, instance_id="i-1")
        )
        assert result.committed
        after = second.load(POD, REF)
        assert after is not None
        assert after.version == before.version + 1
    finally:
        first.close()
        second.close()


def test_every_batch_read_asks_sqlite(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    try:
        runner = Runner(store)
        refs = [ObjectRef("Pod", "ml", f"p{i}", f"p{i}") for i in range(3)]
        runner.observe_many([(r, pod.CreateRequested(at=at(0))) for r in refs])
        calls = _counting(store)
        for _ in range(5):
            results = runner.observe_many([(r, pod.CreateRequested(at=at(0))) for r in refs])
            assert {r.outcome for r in results} == {Outcome.UNCHANGED}
        assert calls[0] == 5  # once per page
    finally:
        store.close()


_OTHER_PROCESS = """
import sys
from datetime import UTC, datetime, timedelta
from lifecycle import ObjectRef, Runner, SQLiteStore
from lifecycle.machines import pod
at = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=5)
with Runner(SQLiteStore(sys.argv[1])) as runner:
    result = runner.observe(
        ObjectRef("Pod", "ml", "trainer-a", "pod-a"),
        pod.InstanceRunning(at=at, instance_id="i-1", readiness_confirmed=False),
    )
    assert result.outcome.value == "committed", result
"""


def test_another_process_s_write_is_seen_by_the_next_cycle(tmp_path: Path) -> None:
    """Another process makes the Pod not ready behind a cached handle's back; the next page
    this handle polls (ready again) decides from what that process wrote: a change, not an
    unchanged poll of the cached, stale status. The same holds for a single poll after the
    barrier."""
    path = tmp_path / "s.db"
    store = SQLiteStore(path)
    try:
        runner = Runner(store)
        _running(runner)
        assert runner.observe(REF, _poll(True)).version == 3  # cached
        other = [sys.executable, "-c", textwrap.dedent(_OTHER_PROCESS), str(path)]
        subprocess.run(other, check=True, timeout=120)
        (result,) = runner.observe_many([(REF, _poll(True, 6))])
        assert (result.outcome, result.version, result.attempts) == (Outcome.COMMITTED, 5, 1)
        subprocess.run(other, check=True, timeout=120)
        assert store.settle_cache()
        single = runner.observe(REF, _poll(True, 7))
        assert (single.outcome, single.version, single.attempts) == (Outcome.COMMITTED, 7, 1)
    finally:
        store.close()


def test_a_ref_is_admitted_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its bounds are checked on its first observation only; a bad ref is still refused
    every time (nothing of it is remembered), and a new ref is checked."""
    from lifecycle import InvalidReference, _protocol

    runner = Runner()
    _running(runner)
    checked: list[object] = []
    real = _protocol.check_ref  # type: ignore[attr-defined]

    def counted(ref: object) -> None:
        checked.append(ref)
        real(ref)

    monkeypatch.setattr("lifecycle._protocol.check_ref", counted)
    for _ in range(10):
        runner.observe(REF, _poll(True))
    assert checked == []  # admitted by the boot above
    fresh = ObjectRef("Pod", "ml", "trainer-b", "pod-b")
    runner.observe(fresh, pod.CreateRequested(at=at(0)))
    runner.observe(fresh, pod.CreateRequested(at=at(0)))
    pods = [r for r in checked if getattr(r, "kind", "") == "Pod"]  # (and its NodeClaim's)
    assert pods == [fresh]
    bad = ObjectRef("Pod", "ml", "x" * 10_000, "pod-c")
    for _ in range(2):
        with pytest.raises(InvalidReference):
            runner.observe(bad, pod.CreateRequested(at=at(0)))
    assert checked[-2:] == [bad, bad]


# -- PostgreSQL ---------------------------------------------------------------------------
@pytest.mark.postgres
def test_postgres_caches_by_default_and_cache_0_turns_it_off(pg_server: PgServer) -> None:
    from lifecycle.stores.postgres import PostgresStore

    url = pg_server.url(schema="cachedefaults")
    stores = [
        PostgresStore(url),
        PostgresStore(url, cache=0),
        open_store(url),
        open_store(url + "&cache=0"),
        open_store(url + "&cache=9&connect_timeout=5"),
    ]
    try:
        sizes = [None if s.cache is None else s.cache.size for s in stores]  # type: ignore[attr-defined]
        assert sizes == [DEFAULT_CACHE, None, DEFAULT_CACHE, None, 9]
        with pytest.raises(InvalidStoreURL, match="cache"):
            open_store(url + "&cache=lots")
        with pytest.raises(InvalidStoreURL, match="twice"):
            open_store(url + "&cache=1", cache=2)
    finally:
        for s in stores:
            s.close()
