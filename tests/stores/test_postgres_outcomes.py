"""PostgreSQL: honest outcomes, bounded calls, every libpq URL form, store epochs.

- A commit whose connection is lost in flight is resolved by its commit token: one that had
  landed (committed locally, waiting for a synchronous standby that never answers) is
  reported COMMITTED with its events delivered at once; one that had not is a plain failure;
  one that cannot be resolved (the server gone) is :class:`CommitUnknown` and no fallback is
  sent. The same for ``commit_many``, whose old contract ("a lost connection wrote nothing")
  was wrong.
- A hung server (SIGSTOP) gives a typed :class:`StoreError` within ``call_timeout``.
- ``postgresql:///db?host=h1,h2&port=p1,p2`` and the Unix-socket form connect; the URL's own
  libpq parameters are kept and sane defaults added.
- A changed history (the epoch's cluster/timeline) starts a new epoch: ids carry it, stay
  stable on redelivery, and a rewind (an object behind an acknowledged version) is reported
  by the store and by ``lifecycle db check``.
"""

from __future__ import annotations

import asyncio
import io
import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from lifecycle import (
    AsyncRunner,
    CommitUnknown,
    Conflict,
    MemoryEmitter,
    ObjectRef,
    Outcome,
    RetryPolicy,
    Runner,
    StoreError,
)
from lifecycle._core.transition import stamp
from lifecycle.cli import main
from lifecycle.machines import POD, pod
from lifecycle.stores import _pgsql
from lifecycle.stores.base import CommitItem
from lifecycle.stores.postgres import PostgresStore, check_history
from lifecycle.stores.postgres_async import AsyncPostgresStore

from .helpers import pod_ref, step, t
from .pg import PASSWORD, USER, PgServer, free_port

pytestmark = pytest.mark.postgres


@pytest.fixture
def own_server() -> Iterator[PgServer]:
    server = PgServer()
    server.start()
    yield server
    server.destroy()


def admin(server: PgServer, sql: str, *args: Any) -> list[Any]:
    with psycopg.connect(server.url(), autocommit=True) as conn:
        cur = conn.execute(sql, args or None)
        return cur.fetchall() if cur.description else []


def hold_commits(server: PgServer) -> None:
    """Commits wait for a synchronous standby that never comes: each is committed locally,
    then waits -- a commit 'in flight' whose outcome the client cannot see."""
    admin(server, "ALTER SYSTEM SET synchronous_standby_names = 'phantom'")
    admin(server, "SELECT pg_reload_conf()")
    time.sleep(1.0)  # the checkpointer publishes the setting after the reload, not at once


def waiting_backends(server: PgServer, box: list[Any], timeout: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = admin(
            server,
            "SELECT pid FROM pg_stat_activity WHERE wait_event = 'SyncRep' "
            "AND application_name = 'lifecycle'",
        )
        if rows:
            return [int(r[0]) for r in rows]
        time.sleep(0.05)
    raise AssertionError(f"no commit ever waited for the standby: {box}")


def in_thread(fn: Any) -> tuple[threading.Thread, list[Any]]:
    box: list[Any] = []

    def go() -> None:
        try:
            box.append(fn())
        except BaseException as e:  # handed to the test
            box.append(e)

    thread = threading.Thread(target=go)
    thread.start()
    return thread, box


# -- unknown outcomes -------------------------------------------------------------------------
def test_a_commit_that_landed_before_its_connection_dropped_is_committed(
    own_server: PgServer,
) -> None:
    store = PostgresStore(own_server.url(), synchronous_commit="on")
    emitter = MemoryEmitter()
    runner = Runner(store, [emitter], links=(), policy=RetryPolicy(backoff=0))
    ref = pod_ref("held")
    runner.observe(ref, pod.CreateRequested(at=t(0)))
    hold_commits(own_server)
    thread, box = in_thread(lambda: runner.observe(ref, pod.InstanceFailed(at=t(1), exit_code=1)))
    (pid,) = waiting_backends(own_server, box)
    admin(own_server, "SELECT pg_terminate_backend(%s)", pid)  # the connection drops
    thread.join(30)
    (result,) = box
    assert result.outcome is Outcome.COMMITTED, result.error
    assert result.version == 2
    assert result.fallback == ()
    # its events went out at once, under their ids, not after a lease
    assert [e.id for e in emitter.events][-1] == "held:2:0"
    assert "StatusUpdateFailed" not in " ".join(e.reason for e in emitter.events)
    assert store.undelivered_count() == 0
    store.close()


def test_a_commit_that_never_ran_is_not_written_and_says_so(own_server: PgServer) -> None:
    store = PostgresStore(own_server.url())
    ref = pod_ref("locked")
    step(store, pod.CreateRequested(at=t(0)), ref)
    schema = store.target.schema
    with psycopg.connect(own_server.url()) as locker:  # holds the row: the commit waits
        locker.execute(f'SELECT 1 FROM "{schema}".objects WHERE uid = %s FOR UPDATE', (ref.uid,))
        thread, box = in_thread(lambda: step(store, pod.InstanceRunning(at=t(1)), ref))
        deadline = time.monotonic() + 10
        while True:
            rows = admin(
                own_server,
                "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND application_name = 'lifecycle'",
            )
            if rows or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        admin(own_server, "SELECT pg_terminate_backend(%s)", rows[0][0])
        thread.join(30)
        locker.rollback()
    (error,) = box
    assert isinstance(error, StoreError)
    assert not isinstance(error, CommitUnknown)
    assert "not written" in str(error)
    record = store.load(POD, ref)
    assert record is not None
    assert record.version == 1
    store.close()


def test_an_unresolvable_commit_is_commit_unknown_and_sends_no_fallback(
    own_server: PgServer,
) -> None:
    url = own_server.url() + "?resolve_timeout=2"
    store = PostgresStore(url, synchronous_commit="on", timeout=1.0)
    emitter = MemoryEmitter()
    runner = Runner(store, [emitter], links=(), policy=RetryPolicy(backoff=0))
    ref = pod_ref("gone")
    runner.observe(ref, pod.CreateRequested(at=t(0)))
    runner.observe(ref, pod.ProvisionSucceeded(at=t(1), reserved=True, instance_id="i-1"))
    sent = len(emitter.events)
    hold_commits(own_server)
    started = time.monotonic()
    thread, box = in_thread(lambda: runner.observe(ref, pod.InstanceFailed(at=t(2), exit_code=1)))
    waiting_backends(own_server, box)
    own_server.stop("immediate")  # the server goes away with the commit in flight
    thread.join(60)
    (result,) = box
    assert result.outcome is Outcome.FAILED
    assert isinstance(result.error, CommitUnknown)
    assert result.error.uids == ("gone",)
    assert "unknown" in str(result.error)
    assert PASSWORD not in str(result.error)
    assert result.fallback == ()  # it may have landed: no "StatusUpdateFailed" Warning
    assert len(emitter.events) == sent
    assert time.monotonic() - started < 2 + 2 + 10  # resolve_timeout + pool + margin
    own_server.start()
    admin(own_server, "ALTER SYSTEM RESET synchronous_standby_names")
    admin(own_server, "SELECT pg_reload_conf()")
    # it had landed: its events wait in the outbox for the dispatcher
    check = PostgresStore(own_server.url(), owner=store.owner)  # its lease: claim it now
    record = check.load(POD, ref)
    assert record is not None
    assert record.version == 3
    assert "gone:3:0" in {e.id for e in check.claim_undelivered()}
    check.close()
    store.close()


def _writer(
    kind: str, url: str, created: threading.Event, held: threading.Event
) -> tuple[threading.Thread, list[Any]]:
    """A thread that creates an object (then sets ``created``), waits for ``held``, then
    commits a change of it, on a store whose pool gives up reconnecting after 0.5 s
    (psycopg_pool's own attribute); ``box`` gets the commit's result (or what it raised).
    ``kind``: ``sync`` or ``async``."""
    ref = pod_ref("back")

    def sync() -> Any:
        store = PostgresStore(url, synchronous_commit="on", timeout=1.0)
        store._pool.reconnect_timeout = 0.5
        runner = Runner(store, [MemoryEmitter()], links=(), policy=RetryPolicy(backoff=0))
        runner.observe(ref, pod.CreateRequested(at=t(0)))
        created.set()
        held.wait(30)
        try:
            return runner.observe(ref, pod.InstanceFailed(at=t(1), exit_code=1))
        finally:
            store.close()

    async def run_async() -> Any:
        store = await AsyncPostgresStore.open(url, synchronous_commit="on", timeout=1.0)
        store._pool.reconnect_timeout = 0.5
        runner = AsyncRunner(store, [MemoryEmitter()], links=(), policy=RetryPolicy(backoff=0))
        await runner.observe(ref, pod.CreateRequested(at=t(0)))
        created.set()
        await asyncio.to_thread(held.wait, 30)
        try:
            return await runner.observe(ref, pod.InstanceFailed(at=t(1), exit_code=1))
        finally:
            await store.close()

    return in_thread(sync if kind == "sync" else lambda: asyncio.run(run_async()))


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_lost_commit_is_resolved_when_the_server_returns_after_the_pool_gave_up(
    own_server: PgServer, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    """The server is down longer than the pool's reconnect attempt lasts. psycopg_pool then
    gives up and tries again only when a caller asks anew; a resolution waiting for the pool
    through its whole window would sit in the queue after the server came back, and end
    CommitUnknown (seen twice in the failover test on a loaded machine)."""
    created, held = threading.Event(), threading.Event()
    thread, box = _writer(kind, own_server.url() + "?resolve_timeout=20", created, held)
    assert created.wait(30), box
    hold_commits(own_server)
    held.set()
    waiting_backends(own_server, box)
    with caplog.at_level("WARNING"):
        own_server.stop("immediate")  # the commit had landed locally: recovery keeps it
        deadline = time.monotonic() + 15
        while "failed after" not in caplog.text:  # the pool's "reconnection attempt failed"
            assert time.monotonic() < deadline, "the pool never gave up reconnecting"
            time.sleep(0.05)
    own_server.start()
    thread.join(30)
    (result,) = box
    assert result.outcome is Outcome.COMMITTED, result.error
    assert result.version == 2
    admin(own_server, "ALTER SYSTEM RESET synchronous_standby_names")
    admin(own_server, "SELECT pg_reload_conf()")


def test_a_batch_whose_connection_dropped_after_it_landed_is_committed(
    own_server: PgServer,
) -> None:
    """``commit_many``'s contract: a lost connection does not mean nothing was written."""
    store = PostgresStore(own_server.url(), synchronous_commit="on")
    emitter = MemoryEmitter()
    runner = Runner(store, [emitter], links=(), policy=RetryPolicy(backoff=0))
    refs = [pod_ref(f"b{i}") for i in range(3)]
    for r in refs:
        runner.observe(r, pod.CreateRequested(at=t(0)))
    hold_commits(own_server)
    batch = [(r, pod.InstanceFailed(at=t(1), exit_code=1)) for r in refs]
    thread, box = in_thread(lambda: runner.observe_many(batch))
    (pid,) = waiting_backends(own_server, box)
    admin(own_server, "SELECT pg_terminate_backend(%s)", pid)
    thread.join(30)
    (results,) = box
    assert [r.outcome for r in results] == [Outcome.COMMITTED] * 3, [r.error for r in results]
    assert all(r.fallback == () for r in results)
    assert {f"b{i}:2:0" for i in range(3)} <= {e.id for e in emitter.events}
    store.close()


def test_a_batch_that_never_ran_raises_and_wrote_nothing(own_server: PgServer) -> None:
    store = PostgresStore(own_server.url())
    refs = [pod_ref(f"n{i}") for i in range(2)]
    for r in refs:
        step(store, pod.CreateRequested(at=t(0)), r)
    schema = store.target.schema
    items = []
    for r in refs:
        record = store.load(POD, r)
        assert record is not None
        obs = pod.InstanceRunning(at=t(1))
        items.append(CommitItem(POD, r, 1, POD.apply(record.status, obs), obs, ()))
    with psycopg.connect(own_server.url()) as locker:
        locker.execute(f'SELECT 1 FROM "{schema}".objects WHERE uid = %s FOR UPDATE', ("n1",))
        thread, box = in_thread(lambda: store.commit_many(items))
        deadline = time.monotonic() + 10
        while True:
            rows = admin(
                own_server,
                "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND application_name = 'lifecycle'",
            )
            if rows or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        admin(own_server, "SELECT pg_terminate_backend(%s)", rows[0][0])
        thread.join(30)
        locker.rollback()
    (error,) = box
    assert isinstance(error, StoreError)
    assert not isinstance(error, CommitUnknown)
    assert "nothing of the batch was written" in str(error)
    assert [store.load(POD, r).version for r in refs] == [1, 1]  # type: ignore[union-attr]
    store.close()


# -- no call hangs ----------------------------------------------------------------------------
def backend_pids(server: PgServer) -> list[int]:
    postmaster = int((server.data / "postmaster.pid").read_text().split()[0])
    children = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == postmaster:
                children.append(int(entry))
    return [postmaster, *children]


def test_a_hung_server_is_a_typed_error_within_the_call_timeout(own_server: PgServer) -> None:
    store = PostgresStore(  # uncached: the load goes to the hung server
        own_server.url() + "?call_timeout=1.5&resolve_timeout=1", timeout=1.0, cache=0
    )
    ref = pod_ref("frozen")
    step(store, pod.CreateRequested(at=t(0)), ref)
    frozen = backend_pids(own_server)
    for pid in frozen:
        os.kill(pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        with pytest.raises(StoreError) as loaded:
            store.load(POD, ref)
        took = time.monotonic() - started
        assert took < 1.5 + 4, took  # call_timeout + the watchdog's tick and a direct probe
        assert "no answer within 1.5s" in str(loaded.value) or "connect" in str(loaded.value)
        started = time.monotonic()
        with pytest.raises(StoreError) as committed:
            step(store, pod.InstanceRunning(at=t(1)), ref)
        took = time.monotonic() - started
        assert took < 1.5 + 1 + 8, took  # call + resolve + connect timeouts
        assert PASSWORD not in str(committed.value)
    finally:
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)
    deadline = time.monotonic() + 15
    while True:  # and it recovers by itself
        try:
            assert step(store, pod.InstanceRunning(at=t(2)), ref)[0] >= 2
            break
        except StoreError:
            assert time.monotonic() < deadline
            time.sleep(0.2)
    store.close()


def test_a_commit_waiting_in_libpq_on_a_hung_server_is_cut_by_the_watchdog(
    own_server: PgServer,
) -> None:
    """The synchronous commit waits inside ``PQexecPrepared`` (ADR 0167), not in psycopg's
    loop: the watchdog's severed socket still ends it within ``call_timeout``."""
    store = PostgresStore(
        own_server.url() + "?call_timeout=1.5&resolve_timeout=1", timeout=1.0, cache=0
    )
    ref = pod_ref("frozen")
    step(store, pod.CreateRequested(at=t(0)), ref)
    record = store.load(POD, ref)  # read before the freeze: only the commit meets it
    assert record is not None
    obs = pod.ProvisionSucceeded(at=t(1), reserved=False, instance_id="i", endpoint="e")
    after = POD.apply(record.status, obs)
    flips = stamp(POD.flips(record.status, after), ref, POD.name, 2, obs.at)
    frozen = backend_pids(own_server)
    for pid in frozen:
        os.kill(pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        with pytest.raises(StoreError):  # CommitUnknown, or a write that certainly failed
            store.commit(POD, ref, 1, after, obs, flips)
        assert time.monotonic() - started < 1.5 + 1 + 8  # call + resolve + connect timeouts
    finally:
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)
    store.close()


# -- every libpq URL form -----------------------------------------------------------------------
def test_every_libpq_url_form_is_accepted(pg_server: PgServer, pg_schema: str) -> None:
    dead = free_port()
    live = pg_server.port
    forms = [
        f"postgresql:///postgres?host=127.0.0.1,127.0.0.1&port={dead},{live}"
        f"&user={USER}&password={PASSWORD}&schema={pg_schema}",
        f"postgresql://{USER}:{PASSWORD}@127.0.0.1:{dead},127.0.0.1:{live}/postgres"
        f"?schema={pg_schema}&target_session_attrs=read-write",
        f"postgresql:///postgres?host={pg_server.root}&port={live}&user={USER}"
        f"&schema={pg_schema}",  # a Unix socket
    ]
    for url in forms:
        store = PostgresStore(url)
        assert step(store, pod.InstanceRunning(at=t(len(url))), pod_ref("forms"))[0] >= 1
        store.close()


def test_the_urls_own_libpq_parameters_are_kept_and_defaults_added() -> None:
    plain = _pgsql.parse_url("postgresql://u@h/db")
    params = psycopg.conninfo.conninfo_to_dict(plain.conninfo)
    assert params["connect_timeout"] == "3"
    assert params["keepalives"] == "1"
    assert "statement_timeout=20000" in str(params["options"])
    assert (plain.call_timeout, plain.resolve_timeout) == (30.0, 15.0)
    own = _pgsql.parse_url(
        "postgresql://u@h/db?connect_timeout=7&keepalives_idle=60"
        "&options=-c%20statement_timeout%3D900&call_timeout=4&resolve_timeout=9"
    )
    params = psycopg.conninfo.conninfo_to_dict(own.conninfo)
    assert (params["connect_timeout"], params["keepalives_idle"]) == ("7", "60")
    assert "statement_timeout=900" in str(params["options"])
    assert "statement_timeout=20000" not in str(params["options"])
    assert (own.call_timeout, own.resolve_timeout) == (4.0, 9.0)
    socket_form = _pgsql.parse_url("postgresql:///db?host=/var/run/postgresql")
    assert socket_form.host == "/var/run/postgresql"
    multi = _pgsql.parse_url("postgresql:///db?host=h1,h2&port=5432,5433")
    assert (multi.host, multi.port) == ("h1,h2", "5432,5433")


@pytest.mark.parametrize("bad", ["call_timeout=0", "call_timeout=x", "resolve_timeout=-1"])
def test_a_bad_timeout_in_the_url_is_refused(bad: str) -> None:
    with pytest.raises(StoreError, match=bad.split("=")[0]):
        _pgsql.parse_url(f"postgresql://u:{PASSWORD}@h/db?{bad}")


# -- epochs and rewinds ---------------------------------------------------------------------------
def change_history(store: PostgresStore) -> None:
    """What a failover does to the store's view: the server's history (cluster/timeline) is no
    longer the current epoch's, and every session the store had is gone (a session's server
    keeps its history while the session lives: sessions check the epoch once, ADR 0068)."""
    with psycopg.connect(store.target.conninfo, autocommit=True) as conn:
        conn.execute(
            f'UPDATE "{store.target.schema}".epochs SET history = %s '
            f'WHERE seq = (SELECT max(seq) FROM "{store.target.schema}".epochs)',
            ("0/00000000",),
        )
        conn.execute(
            "SELECT pg_terminate_backend(pid, 2000) FROM pg_stat_activity "
            "WHERE application_name = 'lifecycle' AND pid <> pg_backend_pid()"
        )


def test_a_changed_history_starts_an_epoch_and_ids_carry_it(pg_url: str) -> None:
    store = PostgresStore(pg_url, lease_seconds=0.05)
    assert store.epoch == ""
    emitter = MemoryEmitter()
    runner = Runner(store, [emitter], links=(), policy=RetryPolicy(backoff=0))
    ref = pod_ref("ep")
    assert runner.observe(ref, pod.CreateRequested(at=t(0))).committed
    assert [e.id for e in emitter.events] == ["ep:1:0"]  # unchanged on a first epoch
    # its delivery mark is written now: a mark still pending when change_history ends every
    # session would fail, and the event would (rightly) be redelivered below
    store.flush_marks()
    change_history(store)
    result = runner.observe(ref, pod.ProvisionSucceeded(at=t(1), reserved=True, instance_id="i"))
    assert result.committed, result.error
    assert store.epoch.startswith("t1-")
    assert emitter.events[-1].id == f"ep:2:0@{store.epoch}"
    assert store.journal(POD, ref)[-1].transitions[0].id == f"ep:2:0@{store.epoch}"
    # a commit stamped with the old epoch is refused (a conflict: stamp again), nothing written
    record = store.load(POD, ref)
    assert record is not None
    obs = pod.InstanceFailed(at=t(2), exit_code=1)
    after = POD.apply(record.status, obs)
    flips = POD.flips(record.status, after)
    assert flips
    with pytest.raises(Conflict):
        store.commit(POD, ref, 2, after, obs, stamp(flips, ref, "pod", 3, obs.at, epoch=""))
    assert store.load(POD, ref).version == 2  # type: ignore[union-attr]
    # stamped with the store's epoch it lands; the id is stored with the event, so another
    # replica redelivering it (the lease ended) gives the same id
    fresh = stamp(flips, ref, "pod", 3, obs.at, epoch=store.epoch)
    assert store.commit(POD, ref, 2, after, obs, fresh) == 3
    other = PostgresStore(pg_url)
    assert other.epoch == store.epoch
    time.sleep(0.1)
    assert [e.id for e in other.claim_undelivered()] == [e.id for e in fresh]
    assert fresh[0].id == f"ep:3:0@{store.epoch}"
    other.close()
    store.close()


def acknowledge_two_then_lose_the_second(store: PostgresStore, ref: ObjectRef) -> None:
    """Versions 1 and 2 committed through ``store``; then v2 is gone, as an asynchronous
    standby that never received it would have it."""
    step(store, pod.CreateRequested(at=t(0)), ref)
    step(store, pod.ProvisionSucceeded(at=t(1), reserved=True, instance_id="i"), ref)
    schema = store.target.schema
    with psycopg.connect(store.target.conninfo, autocommit=True) as conn:
        conn.execute(f'DELETE FROM "{schema}".journal WHERE uid = %s AND version = 2', (ref.uid,))
        conn.execute(f'UPDATE "{schema}".objects SET version = 1 WHERE uid = %s', (ref.uid,))


def test_a_rewind_is_reported_by_the_store_and_by_db_check(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    ref = pod_ref("rw")
    acknowledge_two_then_lose_the_second(store, ref)
    change_history(store)
    record = store.load(POD, ref)
    assert record is not None
    assert record.version == 1
    (rewind,) = store.rewinds
    assert (rewind.uid, rewind.acknowledged, rewind.found) == ("rw", 2, 1)
    assert "acknowledged writes were lost" in str(rewind)
    report = check_history(pg_url)
    assert not report.ok
    assert len(report.epochs) == 2  # db check started the new epoch itself
    text = "\n".join(report.lines())
    assert "LOST rw: v2 was acknowledged, the store held v1" in text
    out = io.StringIO()
    assert main(["db", "check", "--store", pg_url], out=out) == 1
    assert "LOST rw" in out.getvalue()
    assert PASSWORD not in out.getvalue()
    store.close()


def test_a_commit_without_events_on_another_epochs_session_still_reports_the_rewind(
    pg_url: str,
) -> None:
    """Issue 26: a commit with no events carries no epoch of its own. Accepted on a session
    verified for a newer epoch than the handle's, it acknowledged a new version over a lost
    one, and the handle's later epoch refresh found nothing to report. It is written only on
    a session of the handle's own epoch: refused, the handle refreshes, reports, retries."""
    mine = PostgresStore(pg_url)
    ref = pod_ref("quiet")
    acknowledge_two_then_lose_the_second(mine, ref)
    change_history(mine)
    other = PostgresStore(pg_url)  # starts the new epoch, and takes v2 itself
    assert other.epoch
    step(other, pod.ProvisionSucceeded(at=t(2), reserved=True, instance_id="j"), ref)
    record = mine.load(POD, ref)  # a new session: it trusts the newest epoch, not mine.epoch
    assert record is not None
    assert record.version == 2
    assert mine.rewinds == []  # v2 is there: the load alone cannot tell it is not mine
    assert mine.commit(POD, ref, 2, record.status, pod.InstanceRunning(at=t(3)), []) == 3
    assert mine.epoch == other.epoch
    assert [(r.uid, r.acknowledged) for r in mine.rewinds] == [("quiet", 2)]
    other.close()
    mine.close()


def test_db_check_of_a_store_that_never_failed_over_is_clean(pg_url: str) -> None:
    PostgresStore(pg_url).close()
    out = io.StringIO()
    assert main(["db", "check", "--store", pg_url], out=out) == 0
    assert "1 epoch(s), 0 rewind(s)" in out.getvalue()
    assert main(["db", "check", "--store", "memory://"], out=io.StringIO()) == 0
