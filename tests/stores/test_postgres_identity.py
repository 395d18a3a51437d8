"""The identity rule on the PostgreSQL stores, beyond the shared cases of
``test_identity.py``: the asyncio store (load, commit, journal, batches and ``AsyncRunner``),
any differing identity (Hypothesis) against the one-statement compare-and-set, and the
stray-row fallback of ``commit_many`` refusing an impostor before it writes anything."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lifecycle import AsyncRunner, IdentityMismatch, ObjectRef
from lifecycle._core.machine import Machine
from lifecycle.machines import JOB, NODECLAIM, POD, pod
from lifecycle.stores.postgres import PostgresStore
from lifecycle.stores.postgres_async import AsyncPostgresStore

from .helpers import pod_ref, t
from .test_identity import (
    BY_KIND,
    FAST,
    IMPOSTORS,
    STORED,
    boot,
    commit,
    first,
    seen,
    unchanged,
    write_of,
)

pytestmark = pytest.mark.postgres


@pytest.mark.parametrize("impostor", list(IMPOSTORS))
def test_the_async_store_refuses_an_impostor_and_writes_nothing(pg_url: str, impostor: str) -> None:
    sync = PostgresStore(pg_url)
    boot(sync)
    before = seen(sync)
    machine, ref = IMPOSTORS[impostor]
    innocent = pod_ref("pod-b")

    async def main() -> None:
        store = await AsyncPostgresStore.open(pg_url)
        try:
            with pytest.raises(IdentityMismatch):
                await store.load(machine, ref)
            with pytest.raises(IdentityMismatch):
                await store.journal(machine, ref)
            with pytest.raises(IdentityMismatch):
                await store.snapshot(machine, ref)
            for expected in (2, 0):
                item = write_of(machine, ref, expected)
                with pytest.raises(IdentityMismatch):
                    await store.commit(
                        item.machine, ref, expected, item.status, item.observation,
                        item.transitions,
                    )  # fmt: skip
            with pytest.raises(IdentityMismatch):
                await store.load_many([(POD, innocent), (machine, ref)])
            with pytest.raises(IdentityMismatch):
                await store.commit_many([write_of(POD, innocent, 0), write_of(machine, ref, 2)])
            assert await store.load(POD, innocent) is None  # the refused batch wrote nothing
        finally:
            await store.close()

    asyncio.run(main())
    unchanged(sync, before)
    sync.close()


@pytest.mark.parametrize("impostor", BY_KIND)
def test_the_async_runner_on_postgres_refuses_an_impostor(pg_url: str, impostor: str) -> None:
    sync = PostgresStore(pg_url)
    boot(sync)
    before = seen(sync)
    machine, ref = IMPOSTORS[impostor]

    async def main() -> None:
        store = await AsyncPostgresStore.open(pg_url)
        runner = AsyncRunner(store, policy=FAST, links=())
        try:
            with pytest.raises(IdentityMismatch):
                await runner.observe(ref, first(machine))
            results = await runner.observe_many(
                [(pod_ref("pod-b"), pod.CreateRequested(at=t(10))), (ref, first(machine))]
            )
            assert results[0].committed
            assert isinstance(results[1].error, IdentityMismatch)
        finally:
            await store.close()

    asyncio.run(main())
    assert seen(sync)[:3] == before[:3]  # the Pod untouched (pod-b was committed)
    sync.close()


_TEXT = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"), max_size=8)
_MACHINES: list[Machine[Any]] = [POD, JOB, NODECLAIM]


def test_any_differing_identity_is_refused_by_the_compare_and_set(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    boot(store)
    before = seen(store)

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        st.sampled_from(_MACHINES),
        st.one_of(st.just(STORED.kind), st.sampled_from(["Job", "pod", "Pod "]), _TEXT),
        st.one_of(st.just(STORED.namespace), _TEXT),
        st.one_of(st.just(STORED.name), _TEXT),
        st.sampled_from([0, 2]),
    )
    def check(machine: Machine[Any], kind: str, ns: str, name: str, expected: int) -> None:
        ref = ObjectRef(kind, ns, name, STORED.uid)
        if machine is POD and ref == STORED:
            return
        with pytest.raises(IdentityMismatch):
            store.load(machine, ref)
        with pytest.raises(IdentityMismatch):
            commit(store, write_of(machine, ref, expected))

    check()
    unchanged(store, before)
    store.close()


def test_the_stray_row_fallback_refuses_an_impostor_before_writing(pg_url: str) -> None:
    """A stray journal row makes the batch fall back to one commit at a time; an impostor in
    that batch is still refused before any item is written."""
    store = PostgresStore(pg_url)
    boot(store)
    before = seen(store)
    innocent = pod_ref("pod-b")
    with psycopg.connect(store.target.conninfo, autocommit=True) as conn:  # the stray row
        conn.execute(
            f'INSERT INTO "{store.target.schema}".journal (uid, version, at, observation, '
            "fields, transitions) VALUES ('pod-c', 1, 'x', 'x', '{}', '[]')"
        )
    machine, ref = IMPOSTORS["another name"]
    items = [
        write_of(POD, innocent, 0),
        write_of(POD, pod_ref("pod-c"), 0),
        write_of(machine, ref, 2),
    ]
    with pytest.raises(IdentityMismatch):
        store.commit_many(items)
    assert store.load(POD, innocent) is None
    unchanged(store, before)
    store.close()
