"""Issue 34.1 on the status-subresource store (ADR 0146): a record put back to an older
version, or replaced wholesale by another writer, while the fake API server still holds the
old Event. Before a controller restart the store sees it (a rewind: logged, counted, a new
epoch); after one, the new handle's own epoch keeps every id fresh. Either way the API holds
the new transition's Event with its content."""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Iterator

import pytest

from lifecycle import Conflict
from lifecycle._core.transition import stamp
from lifecycle.machines import POD, pod
from lifecycle.stores.kubernetes import (
    PODS,
    RECORD_CONDITION,
    AsyncKubernetesStore,
    KubernetesStore,
)
from lifecycle.testing import FakeApiServer

from .rewind_harness import (
    AT,
    REF,
    api_client,
    check_the_new_event_is_in_the_api,
    emitter_of,
    first,
    put_status,
    runner_on,
    second,
    second_again,
)

PATH = f"/api/v1/namespaces/{REF.namespace}/pods/{REF.name}"
WAYS = ["older-status-written-back", "record-condition-replaced"]


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    s = FakeApiServer()
    s.add_object("pods", REF.namespace, REF.name, uid=REF.uid)
    yield s
    s.release()
    s.close()


def status_now(server: FakeApiServer) -> dict:
    obj = server.object("pods", REF.namespace, REF.name)
    assert obj is not None
    return copy.deepcopy(obj.get("status") or {})


def rewind(server: FakeApiServer, way: str, saved: dict) -> None:
    """Another writer: puts the saved (older) status back, or replaces the conditions
    wholesale (the record condition is gone)."""
    if way == "older-status-written-back":
        put_status(server, PATH, saved)
    else:
        status = status_now(server)
        status["conditions"] = [
            {
                "type": "Ready",
                "status": "False",
                "reason": "Replaced",
                "message": "",
                "lastTransitionTime": "2026-11-30T10:00:00Z",
            }
        ]
        put_status(server, PATH, status)


def store_on(api: object) -> KubernetesStore:
    return KubernetesStore(api, resources={"Pod": PODS}, sleep=lambda _: None)


@pytest.mark.parametrize("way", WAYS)
def test_a_rewind_seen_by_the_running_store_is_a_new_epoch_logged_and_counted(
    server: FakeApiServer, way: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="lifecycle.stores")
    with api_client(server) as api, runner_on(store_on(api), server) as runner:
        store = runner.store
        first(runner)
        saved = status_now(server)
        old = second(runner)
        epoch = store.epoch
        rewind(server, way, saved)
        new = second_again(runner) if way != "record-condition-replaced" else None
        if new is None:  # the record is gone: the object starts again at version 1
            result = first(runner)
            assert result.version == 1 and result.transitions[0].epoch == store.epoch
            new = second_again(runner)
        check_the_new_event_is_in_the_api(server, old, new)
        assert store.epoch != epoch and new.transitions[0].epoch == store.epoch
        assert store.rewind_count == 1
        (found,) = store.rewinds
        assert (found.uid, found.acknowledged) == (REF.uid, 2)
        assert found.found == (1 if way == "older-status-written-back" else None)
        assert emitter_of(runner).stats.reused_ids == 0  # no id handed out twice
    reports = [r for r in caplog.records if "went back" in r.getMessage()]
    assert len(reports) == 1


@pytest.mark.parametrize("way", WAYS)
def test_after_a_restart_the_new_handles_epoch_keeps_ids_fresh(
    server: FakeApiServer, way: str
) -> None:
    with api_client(server) as api:
        with runner_on(store_on(api), server) as runner:
            first(runner)
            saved = status_now(server)
            old = second(runner)
            runner.store.close()
        rewind(server, way, saved)
        with runner_on(store_on(api), server, host="node-b") as runner:  # restarted
            if way == "record-condition-replaced":
                first(runner)
            new = second_again(runner)
            check_the_new_event_is_in_the_api(server, old, new)
            assert emitter_of(runner).stats.reused_ids == 0
            # the new handle never wrote version 2: nothing for it to count, nothing reused
            assert runner.store.rewind_count == 0


def test_a_commit_stamped_before_a_rewind_is_a_conflict_and_writes_nothing(
    server: FakeApiServer,
) -> None:
    """A commit whose events carry the epoch the handle left (stamped before another
    thread found the rewind) is refused: the runner reads and stamps again."""
    with api_client(server) as api:
        store = store_on(api)
        with runner_on(store, server) as runner:
            first(runner)
            saved = status_now(server)
            second(runner)
            old_epoch = store.epoch
            put_status(server, PATH, saved)
            record = store.load(POD, REF)  # finds the rewind: a new epoch
            assert record is not None and record.version == 1
            obs = pod.ConfigInvalid(at=AT, error="x")
            status = POD.apply(record.status, obs)
            stale = stamp(POD.flips(record.status, status), REF, POD.name, 2, AT, old_epoch)
            assert stale and store.epoch != old_epoch
            before = status_now(server)
            with pytest.raises(Conflict):
                store.commit(POD, REF, 1, status, obs, stale)
            assert status_now(server) == before


def test_the_asyncio_store_finds_the_same_rewind(server: FakeApiServer) -> None:
    async def run() -> None:
        with api_client(server) as api:
            store = AsyncKubernetesStore(api, resources={"Pod": PODS})
            try:
                obs = pod.CreateRequested(at=AT)
                s1 = POD.apply(POD.initial(REF), obs)
                await store.commit(POD, REF, 0, s1, obs, ())
                saved = status_now(server)
                s2 = POD.apply(s1, pod.ProvisionSucceeded(at=AT, reserved=True, instance_id="i"))
                await store.commit(POD, REF, 1, s2, obs, ())
                epoch = store.epoch
                put_status(server, PATH, saved)
                record = await store.load(POD, REF)
                assert record is not None and record.version == 1
                assert store.epoch != epoch and store.rewind_count == 1
                assert [r.acknowledged for r in store.rewinds] == [2]
                conditions = [c["type"] for c in status_now(server)["conditions"]]
                assert RECORD_CONDITION in conditions
            finally:
                await store.close()

    asyncio.run(run())
