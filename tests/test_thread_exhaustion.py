"""A process that cannot start another thread (ADR 0140, issue 35).

Every background thread the library starts is a helper with a slower path that needs none. When
``threading.Thread.start`` raises (``RuntimeError: can't start new thread`` under an
address-space cap or a thread limit, ``MemoryError``), the call that wanted the thread still
works, one warning says what is degraded, nothing is lost, ``close()`` closes cleanly, and the
next use tries again. Here ``Thread.start`` is made to raise, and each thread is checked: the
SQLite marker, the delivery's idle-mark timer, PostgreSQL's watchdog, mark sender and status
cache listener, and the Kubernetes emitter's workers and request deadlines.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest

from lifecycle import EventType, MemoryStore, ObjectRef, Runner, SQLiteStore, Transition
from lifecycle._delivery import Delivery
from lifecycle.emitters.base import Ack, Acknowledge
from lifecycle.emitters.kubernetes import KubernetesEmitter, ManualClock, MemoryEventSink
from lifecycle.machines.pod import CreateRequested

EPOCH = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
REFUSALS = [RuntimeError("can't start new thread"), MemoryError()]


class NoThreads:
    """Makes ``threading.Thread.start`` raise ``error`` until :meth:`lift`."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, error: BaseException) -> None:
        self.monkeypatch = monkeypatch
        self.refused: list[str] = []

        def start(thread: threading.Thread) -> None:
            self.refused.append(thread.name)
            raise error

        monkeypatch.setattr(threading.Thread, "start", start)

    def lift(self) -> None:
        self.monkeypatch.undo()


@pytest.fixture(params=REFUSALS, ids=["RuntimeError", "MemoryError"])
def no_threads(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> NoThreads:
    return NoThreads(monkeypatch, request.param)


@pytest.fixture
def warnings(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.WARNING, logger="lifecycle")
    return caplog


def degraded(caplog: pytest.LogCaptureFixture, thread: str) -> list[str]:
    """The warnings that said ``thread`` could not start."""
    said = [r.getMessage() for r in caplog.records if r.name == "lifecycle.threads"]
    return [m for m in said if f"could not start thread {thread} " in m and "degraded:" in m]


def pod(i: int) -> ObjectRef:
    return ObjectRef("Pod", "ml", f"p-{i}", f"u-{i}")


def created() -> CreateRequested:
    return CreateRequested(at=EPOCH, pool="gpu", provider="fake")


# -- SQLite: the marker thread --------------------------------------------------------------------
def test_a_sqlite_store_without_its_marker_thread_marks_inline_and_closes(
    tmp_path: Path, no_threads: NoThreads, warnings: pytest.LogCaptureFixture
) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    runner = Runner(store)
    for i in range(3):
        assert runner.observe(pod(i), created()).committed
        assert store.undelivered_marks_held() == 0  # no thread to write them later: now
    assert store.marker_refusals >= 3  # each first held mark tried again
    assert "lifecycle-sqlite-marks" in no_threads.refused
    assert len(degraded(warnings, "lifecycle-sqlite-marks")) == 1  # said once per store
    other = SQLiteStore(tmp_path / "s.db")  # another handle reads the file itself
    assert other.undelivered_count() == 0
    other.close()
    store.close()  # issue 35: "cannot join thread before it is started"


def test_a_sqlite_store_starts_its_marker_once_threads_are_back(
    tmp_path: Path, no_threads: NoThreads
) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    runner = Runner(store)
    runner.observe(pod(0), created())
    no_threads.lift()
    runner.observe(pod(1), created())
    marker = store._marker  # started with the next held mark
    assert marker is not None
    assert marker.is_alive()
    store.close()
    assert not marker.is_alive()
    reopened = SQLiteStore(tmp_path / "s.db")
    assert reopened.undelivered_count() == 0  # the close wrote the held mark
    reopened.close()


def test_an_idle_marker_thread_ends_and_the_next_mark_starts_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store kept open but idle holds no thread (issue 35: one per store opened)."""
    from lifecycle.stores import sqlite

    monkeypatch.setattr(sqlite, "_MARKER_IDLE", 0.05)
    store = SQLiteStore(tmp_path / "s.db")
    runner = Runner(store)
    runner.observe(pod(0), created())
    first = store._marker
    assert first is not None
    first.join(timeout=10)
    assert not first.is_alive()  # idle: ended by itself
    assert store._marker is None
    assert store.undelivered_marks_held() == 0  # what it held, it wrote first
    runner.observe(pod(1), created())
    second = store._marker
    assert second is not None
    assert second is not first  # started again with the next held mark
    store.close()
    assert not second.is_alive()


def test_a_failed_commit_without_a_marker_keeps_its_marks_for_the_close(
    tmp_path: Path, no_threads: NoThreads
) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    store._hold(["no-such-row"])  # a commit that did not land puts its marks back
    assert store.undelivered_marks_held() == 1  # kept: the next commit or close takes them
    store.close()


# -- the delivery's idle-mark timer ---------------------------------------------------------------
class Later:
    """An acknowledging emitter that answers when the test says so."""

    def __init__(self) -> None:
        self.taken: list[tuple[Transition, Acknowledge]] = []

    def emit(self, transition: Transition) -> None:
        pass

    def deliver(self, transition: Transition, ack: Acknowledge) -> None:
        self.taken.append((transition, ack))

    def answer(self) -> None:
        taken, self.taken = self.taken, []
        for t, ack in taken:
            ack(t, Ack.DELIVERED)


def transition(version: int) -> Transition:
    return Transition(
        pod(0), "pod", "", "Running", "Running", EventType.NORMAL, "m", version, EPOCH
    )


def test_acknowledgements_are_marked_by_their_thread_when_no_timer_starts(
    no_threads: NoThreads, warnings: pytest.LogCaptureFixture
) -> None:
    marked: list[list[str]] = []

    def mark(ids: Sequence[str]) -> None:
        marked.append(list(ids))

    emitter = Later()
    delivery = Delivery([emitter], logging.getLogger("lifecycle.test"))
    delivery.mark_when_idle(mark)
    events = [transition(1), transition(2)]
    assert delivery.send(events) == []  # in flight: nothing to mark yet
    emitter.answer()
    assert marked == [[events[0].id], [events[1].id]]  # no timer: each marked as it came
    assert delivery.timer_refusals == 2
    assert len(degraded(warnings, "lifecycle-marks")) == 1
    assert delivery.close(mark) == 0


def test_a_runner_without_threads_delivers_marks_and_closes(
    tmp_path: Path, no_threads: NoThreads
) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    emitter = Later()
    runner = Runner(store, [emitter])
    for i in range(4):
        runner.observe(pod(i), created())
    emitter.answer()
    assert store.undelivered_marks_held() == 0
    with store._lock:  # the rows themselves, without the count's own write of held marks
        (left,) = store._db.execute("SELECT count(*) FROM outbox").fetchone()
    assert left == 0
    assert runner.close(2.0) == 0
    store.close()


# -- PostgreSQL: watchdog, mark sender, status cache listener ----------------------------------
def test_postgres_helpers_work_without_their_threads(
    no_threads: NoThreads, warnings: pytest.LogCaptureFixture
) -> None:
    pytest.importorskip("psycopg")
    from lifecycle.stores._cache import StatusCache
    from lifecycle.stores._pgio import HeldMarks, Watchdog
    from lifecycle.stores._pglisten import Listener

    watchdog = Watchdog(5.0)
    key = watchdog.arm(object())  # type: ignore[arg-type]
    assert watchdog.disarm(key) is False
    watchdog.arm(object())  # type: ignore[arg-type]
    assert watchdog.refusals == 2
    watchdog.close()

    sent: list[list[str]] = []
    marks = HeldMarks(0.2, sent.append)
    marks.add(["b", "a"])
    assert sent == [["a", "b"]]  # no thread to send them within the delay: sent now
    assert len(marks) == 0
    marks.close()

    cache = StatusCache(8)
    listener = Listener(
        "dbname=none host=/nonexistent", "ch", cache, name="lifecycle-listen", guard="SELECT 1"
    )
    assert not cache._usable  # no signal: the cache keeps nothing, reads go to the database
    listener.check()  # a read through the cache tries again
    assert listener.refusals == 2
    listener.close()
    for name in ("lifecycle-pg-watchdog", "lifecycle-pg-marks", "lifecycle-listen"):
        assert len(degraded(warnings, name)) == 1


def test_the_status_cache_listener_starts_on_a_later_read(no_threads: NoThreads) -> None:
    pytest.importorskip("psycopg")
    from lifecycle.stores._cache import StatusCache
    from lifecycle.stores._pglisten import Listener

    listener = Listener(
        "dbname=none host=/nonexistent connect_timeout=1",
        "ch",
        StatusCache(8),
        name="lifecycle-listen",
        guard="SELECT 1",
    )
    no_threads.lift()
    listener.check()
    assert listener._thread is not None
    assert listener._thread.is_alive()
    listener.close()


# -- Kubernetes emitter: workers and request deadlines --------------------------------------------
def test_the_kubernetes_emitter_without_workers_keeps_events_then_sends_them(
    no_threads: NoThreads, warnings: pytest.LogCaptureFixture
) -> None:
    sink = MemoryEventSink()
    emitter = KubernetesEmitter(
        sink, clock=ManualClock(EPOCH), hostname="node-a", timers=False, jitter=lambda: 0.0
    )
    store = MemoryStore()
    runner = Runner(store, [emitter])
    runner.observe(pod(0), created())
    assert emitter.dispatcher.threads == []
    assert sink.events() == []  # waiting, in the emitter's queue and in the outbox
    assert store.undelivered_count() == 2
    assert len(degraded(warnings, "lifecycle-k8s-events-0")) == 1
    no_threads.lift()
    runner.observe(pod(1), created())  # the next send starts the workers
    assert emitter.dispatcher.threads
    assert runner.close(5.0) == 0
    assert store.undelivered_count() == 0
    assert len(sink.events()) == 4  # both Pods' and their NodeClaims'


def test_the_kubernetes_emitter_closes_with_what_it_could_not_send_in_the_outbox(
    no_threads: NoThreads,
) -> None:
    sink = MemoryEventSink()
    emitter = KubernetesEmitter(
        sink, clock=ManualClock(EPOCH), hostname="node-a", timers=False, jitter=lambda: 0.0
    )
    store = MemoryStore()
    runner = Runner(store, [emitter])
    runner.observe(pod(0), created())
    assert runner.close(1.0) == 2  # said, and kept for the next start
    assert store.undelivered_count() == 2


def test_kubernetes_requests_run_without_the_deadline_thread(no_threads: NoThreads) -> None:
    from lifecycle._k8s_api.deadlines import Deadlines

    deadlines = Deadlines()
    for _ in range(2):
        with deadlines.guard(5.0, 1000) as guard:
            assert guard is not None
    assert deadlines.refusals == 2


def test_a_thread_started_twice_is_still_the_callers_error() -> None:
    from lifecycle._core import threads

    thread = threading.Thread(target=lambda: None)
    assert threads.start(thread, "nothing")
    thread.join()
    with pytest.raises(RuntimeError, match="once"):
        threads.start(thread, "nothing")
