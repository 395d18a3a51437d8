"""Issue 34.1 on PostgreSQL (ADR 0146): a schema restored from ``pg_dump`` into the same
cluster, or dropped and migrated again, while the fake API server still holds the old
Event. The store's history names its own identity (the object id of its epochs table), so a
restored schema starts a new epoch at its first writer -- before a controller restart and
after one -- logged and counted; a schema made again under a running store is seen by that
store. The API holds the new transition's Event with its own content each time."""

from __future__ import annotations

import asyncio
import logging
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from lifecycle.machines import POD, pod
from lifecycle.stores.postgres import PostgresStore, migrate
from lifecycle.stores.postgres_async import AsyncPostgresStore
from lifecycle.testing import FakeApiServer

from .conftest import drop_schema
from .pg import PgServer
from .rewind_harness import (
    AT,
    REF,
    check_the_new_event_is_in_the_api,
    emitter_of,
    events_in_api,
    first,
    runner_on,
    scraped,
    second,
    second_again,
)

pytestmark = pytest.mark.postgres


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    s = FakeApiServer()
    yield s
    s.release()
    s.close()


def dump(pg: PgServer, schema: str, to: Path) -> None:
    subprocess.run(
        [str(pg.bin / "pg_dump"), "-d", pg.url(), "-n", schema, "-f", str(to)],
        check=True,
        capture_output=True,
    )


def restore(pg: PgServer, schema: str, dumped: Path) -> None:
    """pg_dump's copy put back into the same cluster: the schema dropped, the dump replayed."""
    drop_schema(pg, schema)
    subprocess.run(
        [str(pg.bin / "psql"), "-d", pg.url(), "-v", "ON_ERROR_STOP=1", "-q", "-f", str(dumped)],
        check=True,
        capture_output=True,
    )


def remigrate(pg: PgServer, schema: str, url: str) -> None:
    drop_schema(pg, schema)
    migrate(url)


def restored_reports(caplog: pytest.LogCaptureFixture) -> int:
    return sum("restored or made again" in r.getMessage() for r in caplog.records)


def test_a_pg_dump_restore_under_a_running_store_starts_an_epoch_logged_and_counted(
    pg_server: PgServer,
    pg_schema: str,
    pg_url: str,
    server: FakeApiServer,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger="lifecycle.stores")
    # uncached: the commit finds the rewind (a cache may answer until its guard sees it)
    store = PostgresStore(pg_url, pool_size=1, cache=0)
    with runner_on(store, server) as runner:
        first(runner)
        dump(pg_server, pg_schema, tmp_path / "dump.sql")
        old = second(runner)
        restore(pg_server, pg_schema, tmp_path / "dump.sql")
        new = second_again(runner)
        check_the_new_event_is_in_the_api(server, old, new)
        assert store.epoch
        assert new.transitions[0].epoch == store.epoch
        assert emitter_of(runner).stats.reused_ids == 0
    # the object found behind what this handle wrote, and the store restored under it
    assert [(r.uid, r.acknowledged, r.found) for r in store.rewinds] == [(REF.uid, 2, 1)]
    assert store.rewind_count == 2
    assert restored_reports(caplog) == 1
    store.close()


def test_a_pg_dump_restore_is_recognised_after_a_restart(
    pg_server: PgServer,
    pg_schema: str,
    pg_url: str,
    server: FakeApiServer,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger="lifecycle.stores")
    store = PostgresStore(pg_url)
    with runner_on(store, server) as runner:
        first(runner)
        dump(pg_server, pg_schema, tmp_path / "dump.sql")
        old = second(runner)
    store.close()
    restore(pg_server, pg_schema, tmp_path / "dump.sql")
    store = PostgresStore(pg_url)  # the controller restarted
    assert store.epoch.startswith("t")
    assert store.rewind_count == 1
    assert scraped(store, "lifecycle_store_rewinds_total") == 1
    assert restored_reports(caplog) == 1
    with runner_on(store, server, host="node-b") as runner:
        new = second_again(runner)
        check_the_new_event_is_in_the_api(server, old, new)
        assert emitter_of(runner).stats.reused_ids == 0
    store.close()


def test_a_schema_made_again_under_a_running_store_starts_an_epoch_and_reports_the_loss(
    pg_server: PgServer,
    pg_schema: str,
    pg_url: str,
    server: FakeApiServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger="lifecycle.stores")
    # uncached: the commit finds the rewind (a cache may answer until its guard sees it)
    store = PostgresStore(pg_url, pool_size=1, cache=0)
    with runner_on(store, server) as runner:
        first(runner)
        old = second(runner)
        remigrate(pg_server, pg_schema, pg_url)
        again = first(runner)  # the object is gone: version 1 again
        assert again.version == 1
        new = second_again(runner)
        check_the_new_event_is_in_the_api(server, old, new)
        assert emitter_of(runner).stats.reused_ids == 0
    assert [(r.uid, r.acknowledged, r.found) for r in store.rewinds] == [(REF.uid, 2, None)]
    assert store.rewind_count == 2
    assert restored_reports(caplog) == 1
    store.close()


def test_a_schema_made_again_before_a_restart_is_a_new_store_the_emitter_keeps_right(
    pg_server: PgServer, pg_schema: str, pg_url: str, server: FakeApiServer
) -> None:
    """What the store cannot see (ADR 0146): a schema dropped and migrated again while no
    handle was open is a new store; its ids start again. The Kubernetes emitter's read-back
    (ADR 0141) puts the new content in the API and counts the reused id."""
    store = PostgresStore(pg_url)
    with runner_on(store, server) as runner:
        first(runner)
        old = second(runner)
    store.close()
    remigrate(pg_server, pg_schema, pg_url)
    store = PostgresStore(pg_url)
    with runner_on(store, server, host="node-b") as runner:
        first(runner)
        new = second_again(runner)
        (o,), (n,) = old.transitions, new.transitions
        assert (n.reason, n.type.value, n.message) in events_in_api(server)
        assert o.id == n.id
        assert emitter_of(runner).stats.reused_ids == 1
    assert store.rewind_count == 0
    store.close()


def test_the_asyncio_store_recognises_a_restore_too(
    pg_server: PgServer, pg_schema: str, pg_url: str, tmp_path: Path
) -> None:
    async def run() -> None:
        store = await AsyncPostgresStore.open(pg_url, pool_size=1, cache=0)  # as above
        try:
            obs = pod.CreateRequested(at=AT)
            s1 = POD.apply(POD.initial(REF), obs)
            await store.commit(POD, REF, 0, s1, obs, ())
            dump(pg_server, pg_schema, tmp_path / "dump.sql")
            s2 = POD.apply(s1, pod.ProvisionSucceeded(at=AT, reserved=True, instance_id="i"))
            await store.commit(POD, REF, 1, s2, obs, ())
            restore(pg_server, pg_schema, tmp_path / "dump.sql")
            record = await store.load(POD, REF)
            assert record is not None
            assert record.version == 1
            assert await store.commit(POD, REF, 1, s2, obs, ()) == 2  # no events: any epoch
            assert store.epoch.startswith("t")
            assert store.rewind_count == 2
        finally:
            await store.close()

    asyncio.run(run())
