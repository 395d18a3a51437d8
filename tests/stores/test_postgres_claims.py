"""The outbox claim on PostgreSQL (ADR 0157): it reads and locks only the objects whose events
it takes, so replicas claiming at the same time each find work, and its cost follows what it
takes rather than the whole outbox."""

from __future__ import annotations

import psycopg
import pytest

from lifecycle._core.transition import stamp
from lifecycle.machines import POD, pod
from lifecycle.stores.base import CommitItem
from lifecycle.stores.postgres import PostgresStore

from .helpers import pod_ref, t

pytestmark = pytest.mark.postgres


def fill_outbox(url: str, objects: int, versions: int) -> None:
    """``versions`` flips of each of ``objects`` Pods committed and never delivered, leased
    for a millisecond by a replica that went away: any replica may claim them."""
    store = PostgresStore(url, lease_seconds=0.001, owner="gone")
    refs = [pod_ref(f"claim{i:03d}") for i in range(objects)]
    statuses = {r.uid: POD.initial(r) for r in refs}
    flip = (pod.InstanceRunning(at=t(1)), pod.InstancePending(at=t(2)))
    for v in range(versions):
        items = []
        for r in refs:
            obs = pod.CreateRequested(at=t(0)) if v == 0 else flip[v % 2]
            before = statuses[r.uid]
            after = statuses[r.uid] = POD.apply(before, obs)
            flips = stamp(POD.flips(before, after), r, POD.name, v + 1, obs.at)
            assert flips, "each commit leaves one event"
            items.append(CommitItem(POD, r, v, after, obs, flips))
        assert store.commit_many(items) == [v + 1] * objects
    store.close()


def test_a_claim_in_flight_leaves_other_objects_to_another_replica(pg_url: str) -> None:
    """While one replica's claim of 20 events is in flight (its transaction open, its locks
    held), another replica's claim takes the next objects' events. Before, a claim locked the
    first pending row of up to ``limit`` *objects* -- here every object -- and the other
    replica found nothing: claims took turns, so dispatch did not scale."""
    fill_outbox(pg_url, 10, 5)  # 10 objects, 5 events each, leases already expired
    a = PostgresStore(pg_url, owner="replica-a")
    b = PostgresStore(pg_url, owner="replica-b")
    with psycopg.connect(a.target.conninfo) as conn:  # a transaction: the locks stay held
        rows = conn.execute(a._sql.claim, {"me": "replica-a", "lease": 30.0, "limit": 10})
        held = {str(p["ref"][3]) for (p,) in rows.fetchall()}
        assert len(held) == 2  # 10 events: the first two objects' five each, nothing more
        taken = b.claim_undelivered(10)
        assert len(taken) == 10
        assert not {e.ref.uid for e in taken} & held
        conn.rollback()
    again = a.claim_undelivered(1000)  # a's claim was rolled back: the rest is a's to take
    assert len(again) == 40
    assert not {e.id for e in again} & {e.id for e in taken}
    a.close()
    b.close()


def test_a_claim_takes_each_objects_events_in_order_up_to_the_limit(pg_url: str) -> None:
    fill_outbox(pg_url, 6, 4)
    store = PostgresStore(pg_url, owner="replica")
    first = store.claim_undelivered(10)
    assert len(first) == 10
    by_object: dict[str, list[int]] = {}
    for event in first:
        by_object.setdefault(event.ref.uid, []).append(event.version)
    assert all(v == list(range(1, len(v) + 1)) for v in by_object.values())  # from the first
    rest = store.claim_undelivered(100)  # its own leases are its to take again, and the rest
    assert {e.id for e in first} <= {e.id for e in rest}
    assert len(rest) == 24
    store.close()
