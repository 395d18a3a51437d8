"""The PostgreSQL store's round trips (issue 19, issue 26): a commit is one, ``Runner.observe``
two (load, and the commit carrying the previous call's delivered-marks), a conflict one (the
failed CAS returns the stored row), and ``commit_many`` one for the whole batch. Sessions verify the
store's epoch once; an unverified session refreshes it and commits without a conflict."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import attrs
import pytest
from benchmarks.postgres_floor import traced

from lifecycle import Conflict, IdentityMismatch, MemoryEmitter, ObjectRef, Runner
from lifecycle._core.transition import stamp
from lifecycle.machines import POD, pod
from lifecycle.stores._pgio import MARK_DELAY
from lifecycle.stores._pgsql import _dumps
from lifecycle.stores.base import CommitItem, transition_to_row
from lifecycle.stores.postgres import PostgresStore

from .helpers import pod_ref, raw, t

pytestmark = pytest.mark.postgres


@contextmanager
def round_trips(store: PostgresStore) -> Iterator[Callable[[], int]]:
    """Count the round trips on the store's only pooled connection: each turn from messages
    the client sent to messages the server sent, in libpq's protocol trace (statements
    pipelined together count once) -- the benchmark's own counter."""
    with store._pool.connection() as conn:
        pass  # pool_size=1: every call below uses this connection
    with traced(conn) as count:
        yield count


def provision(runner: Runner, ref: ObjectRef) -> None:
    """A change of ``ref`` (created before) that commits and delivers an event."""
    result = runner.observe(ref, pod.ProvisionSucceeded(at=t(1), reserved=True, instance_id="i"))
    assert result.committed
    assert result.transitions


def test_observe_is_a_load_and_a_commit_carrying_the_marks(pg_url: str) -> None:
    store = PostgresStore(pg_url, pool_size=1, cache=0)  # the uncached path: a load first
    emitter = MemoryEmitter()
    runner = Runner(store, [emitter], links=())
    for i in range(6):  # warm: the pool's connection is open, statements are prepared
        assert runner.observe(pod_ref(f"warm{i}"), pod.CreateRequested(at=t(0))).committed
    refs = [pod_ref(f"warm{i}") for i in range(3)]
    with round_trips(store) as count:
        for ref in refs:
            provision(runner, ref)
        trips = count()
    assert trips == 2 * len(refs)  # load, commit (one statement, the marks inside it)
    assert len(emitter.events) == 6 + len(refs)
    assert len(raw(store, "SELECT id FROM {s}outbox")) == 1  # the last one's mark is held
    assert store.undelivered_count() == 0  # a count sends the held marks first
    store.close()


def outbox(store: PostgresStore) -> set[str]:
    return {str(r[0]) for r in raw(store, "SELECT id FROM {s}outbox")}


def test_held_marks_ride_with_the_next_commit_and_are_sent_when_none_comes(pg_url: str) -> None:
    store = PostgresStore(pg_url, pool_size=1)
    runner = Runner(store, [MemoryEmitter()], links=())
    a, b = pod_ref("ride-a"), pod_ref("ride-b")
    first = runner.observe(a, pod.CreateRequested(at=t(0)))
    ids = {e.id for e in first.transitions}
    assert ids
    assert ids <= outbox(store)  # delivered, the mark held back
    with round_trips(store) as count:
        assert store.load(POD, b) is None
        second = runner.observe(b, pod.CreateRequested(at=t(0)))
        trips = count()
    assert trips == 1 + 2  # the load alone, then observe's load and its commit
    assert not ids & outbox(store)  # gone with b's commit
    assert {e.id for e in second.transitions} <= outbox(store)
    clock = Clock(store)
    clock.offset = MARK_DELAY / 2
    store._marks.send_due()
    assert {e.id for e in second.transitions} <= outbox(store)  # not due yet: still held
    clock.offset = MARK_DELAY
    deadline = time.monotonic() + 10
    while outbox(store) and time.monotonic() < deadline:  # no commit comes: sent on its own
        time.sleep(0.05)  # (by the mark thread, on the moved clock)
    assert outbox(store) == set()
    store.close()


class Clock:
    """The store's delivered-marks clock, moved on by ``offset`` seconds instead of waiting."""

    def __init__(self, store: PostgresStore) -> None:
        self.offset = 0.0
        store._marks.clock = lambda: time.monotonic() + self.offset


def test_changes_a_second_apart_are_one_round_trip_each_their_marks_riding(
    pg_url: str,
) -> None:
    """Changes 1 s apart (the marks' clock moved on, not waited for): each is one round trip,
    the commit carrying the previous change's mark -- no mark goes out on its own between
    them (before: 2 each, the mark sent alone 0.2 s after its change)."""
    store = PostgresStore(pg_url, pool_size=1, cache=64)
    assert store.settle_cache()
    runner = Runner(store, [MemoryEmitter()], links=())
    refs = [pod_ref(f"gap{i}") for i in range(4)]
    for ref in refs:
        assert runner.observe(ref, pod.CreateRequested(at=t(0))).committed
    clock = Clock(store)
    with round_trips(store) as count:
        for ref in refs:
            provision(runner, ref)
            clock.offset += 1.0
            store._marks.send_due()  # what the mark thread does once a second has passed
        trips = count()
    assert trips == len(refs)
    assert len(outbox(store)) == 1  # the last change's mark, held for the next commit
    store.close()
    assert outbox(store) == set()  # close sends it


def test_a_commit_that_fails_keeps_the_marks_it_carried(pg_url: str) -> None:
    store = PostgresStore(pg_url, pool_size=1)
    runner = Runner(store, [MemoryEmitter()], links=())
    ref, other = pod_ref("keep"), pod_ref("stray")
    assert runner.observe(other, pod.CreateRequested(at=t(0))).committed
    held = outbox(store)
    assert held
    # a stray journal row at the version the next commit takes: that commit is refused whole
    raw(store, "INSERT INTO {s}journal (uid, version, at, observation, fields, transitions, "
        "commit_token, schema_version, schema_fingerprint) SELECT 'keep', 1, at, observation, "
        "fields, transitions, 'stray', schema_version, schema_fingerprint FROM {s}journal "
        "WHERE uid = 'stray'")  # fmt: skip
    result = runner.observe(ref, pod.CreateRequested(at=t(0)))
    assert not result.committed
    assert held <= outbox(store)  # rolled back with the commit: the marks are held again
    store.close()  # and close sends them
    assert not held & outbox(store)


def test_a_claim_never_hands_out_events_whose_marks_a_commit_is_carrying(pg_url: str) -> None:
    """A commit takes the held marks, then sends them in front of its own statement: a claim
    on the same handle in between (another thread, another task) finds the rows still there,
    leased to this store. It must not hand them out again; if the commit then fails, the marks
    are held again and the next claim sends them first."""
    store = PostgresStore(pg_url, pool_size=1)
    runner = Runner(store, [MemoryEmitter()], links=())
    first = runner.observe(pod_ref("fly"), pod.CreateRequested(at=t(0)))
    ids = {e.id for e in first.transitions}
    assert ids
    assert ids <= outbox(store)  # delivered, the mark held back
    riding = store._marks.riding()  # what a commit does first
    assert set(riding) == ids
    assert not ids & {e.id for e in store.claim_undelivered()}, "a delivered event leased again"
    assert ids <= outbox(store)  # the rows are there: only the claim's answer leaves them out
    store._marks.restore(riding)  # the commit failed: held again, no longer in flight
    assert store._marks.in_flight() == frozenset()
    assert not ids & {e.id for e in store.claim_undelivered()}  # sent before the claim
    assert not ids & outbox(store)
    store.close()


def test_a_conflict_is_one_round_trip_and_names_the_stored_version(pg_url: str) -> None:
    store = PostgresStore(pg_url, pool_size=1)
    runner = Runner(store, [], links=())
    ref = pod_ref("stale")
    obs = pod.CreateRequested(at=t(0))
    assert runner.observe(ref, obs).committed
    assert runner.observe(ref, pod.ProvisionSucceeded(at=t(1), reserved=True,
                                                      instance_id="i")).committed  # fmt: skip
    before = POD.initial(ref)
    after = POD.apply(before, obs)
    with round_trips(store) as count:
        with pytest.raises(Conflict) as caught:
            store.commit(POD, ref, 1, after, obs, [])
        trips = count()
    assert trips == 1  # before: 2 (the CAS, then a read of the stored version)
    assert (caught.value.expected, caught.value.actual) == (1, 2)
    with pytest.raises(IdentityMismatch):  # the identity rule holds on the statement's row
        store.commit(POD, attrs.evolve(ref, name="impostor"), 1, after, obs, [])
    store.close()


def test_commit_many_is_one_round_trip(pg_url: str) -> None:
    store = PostgresStore(pg_url, pool_size=1)
    obs = pod.CreateRequested(at=t(0))

    def items(prefix: str) -> list[CommitItem]:
        out = []
        for i in range(5):
            ref = pod_ref(f"{prefix}{i}")
            before = POD.initial(ref)
            after = POD.apply(before, obs)
            flips = stamp(POD.flips(before, after), ref, POD.name, 1, obs.at)
            out.append(CommitItem(POD, ref, 0, after, obs, flips))
        return out

    assert store.commit_many(items("warm")) == [1] * 5
    batch = items("b")
    with round_trips(store) as count:
        assert store.commit_many(batch) == [1] * 5
        trips = count()
    assert trips == 1  # before: 5 (BEGIN, the pipelined statements, their results, COMMIT)
    again = store.commit_many(batch)  # every item conflicts: reported from the same statement
    assert [type(r).__name__ for r in again] == ["Conflict"] * 5
    assert all(getattr(r, "actual", None) == 1 for r in again)
    store.close()


def test_a_batch_holding_one_object_twice_writes_both_in_order(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    ref = pod_ref("twice")
    first = pod.CreateRequested(at=t(0))
    second = pod.ProvisionSucceeded(at=t(1), reserved=True, instance_id="i")
    s0 = POD.initial(ref)
    s1 = POD.apply(s0, first)
    s2 = POD.apply(s1, second)
    batch = [
        CommitItem(POD, ref, 0, s1, first, stamp(POD.flips(s0, s1), ref, POD.name, 1, t(0))),
        CommitItem(POD, ref, 1, s2, second, stamp(POD.flips(s1, s2), ref, POD.name, 2, t(1))),
    ]
    assert store.commit_many(batch) == [1, 2]
    assert [e.version for e in store.journal(POD, ref)] == [1, 2]
    store.close()


def test_an_unverified_session_refreshes_its_epoch_and_commits_without_a_conflict(
    pg_url: str,
) -> None:
    store = PostgresStore(pg_url, pool_size=1)
    runner = Runner(store, [], links=())
    ref = pod_ref("unverified")
    assert runner.observe(ref, pod.CreateRequested(at=t(0))).committed
    setting = store._sql.epoch_setting
    with store._pool.connection() as conn:
        row = conn.execute(f"SELECT current_setting('{setting}')").fetchone()
        assert row is not None
        (verified,) = row
        assert re.fullmatch(r"e:\d+:", verified)  # "e:IDENTITY:TAG" (ADR 0146), tag ""
        conn.execute(f"RESET {setting}")  # as if the session had never verified the epoch
    result = runner.observe(ref, pod.ProvisionSucceeded(at=t(1), reserved=True, instance_id="i"))
    assert result.committed
    assert result.attempts == 1
    assert result.transitions[0].id == "unverified:2:0"  # same epoch, same id form
    assert len(raw(store, "SELECT tag FROM {s}epochs")) == 1  # no new epoch
    with store._pool.connection() as conn:
        row = conn.execute(f"SELECT current_setting('{setting}')").fetchone()
        assert row is not None
        (verified,) = row
        assert re.fullmatch(r"e:\d+:", verified)  # "e:IDENTITY:TAG" (ADR 0146), tag ""
    store.close()


def test_the_commit_reads_no_server_history() -> None:
    from lifecycle.stores._pgsql import Statements

    statements = Statements("lifecycle", journal=True)
    for text in (statements.commit, statements.commit_batch):
        assert "pg_control_system" not in text
        assert "pg_current_wal_lsn" not in text
    assert "pg_control_system" in statements.epoch_verify
    assert "pg_is_in_recovery" in statements.epoch_verify


def test_the_outbox_rows_are_the_events_json_byte_for_byte(pg_url: str) -> None:
    """The commit statement derives the outbox rows from the events' JSON array (no binary
    arrays, ADR 0157): each row's payload is its event's encoding as it was, its position
    and id its own, and the journal holds the same array."""
    store = PostgresStore(pg_url, pool_size=1)
    ref = pod_ref("exact")
    obs = pod.CreateRequested(at=t(0))
    before = POD.initial(ref)
    after = POD.apply(before, obs)
    flips = stamp(POD.flips(before, after), ref, POD.name, 1, obs.at, store.epoch)
    flips += tuple(  # more events, one with text JSON escapes, so the zip is tested too
        flips[0]._replace(n=n, message=f'é "{n}" \\ \u2028') for n in (1, 2)
    )
    assert store.commit(POD, ref, 0, after, obs, flips) == 1
    rows = raw(store, "SELECT id, n, payload::text FROM {s}outbox WHERE uid = ? ORDER BY n",
               (ref.uid,))  # fmt: skip
    encoded = [_dumps(transition_to_row(f)) for f in flips]
    assert rows == [(f.id, f.n, e) for f, e in zip(flips, encoded, strict=True)]
    (journal,) = raw(store, "SELECT transitions::text FROM {s}journal WHERE uid = ?", (ref.uid,))
    assert journal == ("[" + ",".join(encoded) + "]",)
    store.close()


def test_the_marks_riding_in_a_commit_are_deleted_by_key_not_by_a_scan(pg_url: str) -> None:
    """The marks' ``DELETE`` inside the commit statement finds the rows by the outbox's key,
    whatever the outbox holds: a first version (``id IN (SELECT …)``) planned a sequential
    scan of the whole outbox per commit."""
    import psycopg

    from lifecycle.stores._pgsql import commit_args, commit_params

    store = PostgresStore(pg_url, pool_size=1)
    raw(store, "INSERT INTO {s}outbox (id, uid, version, n, payload) SELECT 'x' || g, 'x' || g, "
        "1, 0, '{}' FROM generate_series(1, 5000) g")  # fmt: skip
    raw(store, "ANALYZE {s}outbox")
    ref = pod_ref("plan")
    obs = pod.CreateRequested(at=t(0))
    after = POD.apply(POD.initial(ref), obs)
    params = commit_params(POD, ref, 0, after, obs, (), owner="o", lease=30.0)
    params["epoch"] = store.epoch
    with psycopg.connect(store.target.conninfo, autocommit=True) as conn:
        cur = psycopg.ClientCursor(conn)  # the arguments bound as literals, for EXPLAIN
        cur.execute("EXPLAIN " + store._sql.commit, commit_args(params, ["x1", "x2"]))
        plan = "\n".join(str(r[0]) for r in cur.fetchall())
    assert "outbox_pkey" in plan
    assert "Seq Scan on outbox" not in plan, plan
    store.close()
