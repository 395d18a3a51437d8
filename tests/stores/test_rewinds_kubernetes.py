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
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lifecycle import Conflict, LifecycleError, Observation, Transition
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
    check_each_name_holds_its_event,
    check_the_new_event_is_in_the_api,
    emitter_of,
    first,
    put_status,
    runner_on,
    scraped,
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


def status_now(server: FakeApiServer) -> dict[str, Any]:
    obj = server.object("pods", REF.namespace, REF.name)
    assert obj is not None
    return copy.deepcopy(obj.get("status") or {})


def rewind(server: FakeApiServer, way: str, saved: dict[str, Any]) -> None:
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
    with api_client(server) as api, runner_on(store := store_on(api), server) as runner:
        first(runner)
        saved = status_now(server)
        old = second(runner)
        epoch = store.epoch
        rewind(server, way, saved)
        new = second_again(runner) if way != "record-condition-replaced" else None
        if new is None:  # the record is gone: the object starts again at version 1
            result = first(runner)
            assert result.version == 1
            assert result.transitions[0].epoch == store.epoch
            new = second_again(runner)
        check_the_new_event_is_in_the_api(server, old, new)
        assert store.epoch != epoch
        assert new.transitions[0].epoch == store.epoch
        assert store.rewind_count == 1
        (found,) = store.rewinds
        assert (found.uid, found.acknowledged) == (REF.uid, 2)
        assert found.found == (1 if way == "older-status-written-back" else None)
        assert emitter_of(runner).stats.reused_ids == 0  # no id handed out twice
        assert scraped(store, "lifecycle_store_rewinds_total") == 1
        assert scraped(store, "lifecycle_store_epochs") == 1  # one epoch after a rewind
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
        restarted = store_on(api)
        with runner_on(restarted, server, host="node-b") as runner:
            if way == "record-condition-replaced":
                first(runner)
            new = second_again(runner)
            check_the_new_event_is_in_the_api(server, old, new)
            assert emitter_of(runner).stats.reused_ids == 0
            # the new handle never wrote version 2: nothing for it to count, nothing reused
            assert restarted.rewind_count == 0
            assert scraped(restarted, "lifecycle_store_epochs") == 0


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
            assert record is not None
            assert record.version == 1
            obs = pod.ConfigInvalid(at=AT, error="x")
            status = POD.apply(record.status, obs)
            stale = stamp(POD.flips(record.status, status), REF, POD.name, 2, AT, old_epoch)
            assert stale
            assert store.epoch != old_epoch
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
                assert record is not None
                assert record.version == 1
                assert store.epoch != epoch
                assert store.rewind_count == 1
                assert [r.acknowledged for r in store.rewinds] == [2]
                conditions = [c["type"] for c in status_now(server)["conditions"]]
                assert RECORD_CONDITION in conditions
            finally:
                await store.close()

    asyncio.run(run())


# -- the property ------------------------------------------------------------------------------
Step = tuple[str, int]
STEPS: st.SearchStrategy[Step] = st.one_of(
    st.tuples(st.just("observe"), st.integers(0, 5)),
    st.tuples(st.just("write-back"), st.integers(0, 20)),
    st.tuples(st.just("replace"), st.just(0)),
    st.tuples(st.just("restart"), st.just(0)),
)


def _observation(i: int, n: int) -> Observation:
    at = AT + timedelta(seconds=n)
    if i == 0:
        return pod.CreateRequested(at=at)
    if i == 1:
        return pod.ProvisionSucceeded(at=at, reserved=True, instance_id=f"i-{n}")
    return pod.ConfigInvalid(at=at, error=f"bad pool {i}.{n}")  # content differs each time


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(STEPS, min_size=1, max_size=14))
def test_no_interleaving_of_commits_rewinds_and_restarts_leaves_an_event_of_other_content(
    steps: list[Step],
) -> None:
    """Whatever commits, statuses written back, records replaced and restarts interleave, the
    Event under each committed transition's name holds that transition's content."""
    server = FakeApiServer()
    server.add_object("pods", REF.namespace, REF.name, uid=REF.uid)
    committed: list[Transition] = []
    saved: list[dict[str, Any]] = [status_now(server)]
    try:
        with api_client(server) as api:
            store = store_on(api)
            host = 0
            context = runner_on(store, server)
            runner = context.__enter__()
            try:
                for n, (kind, arg) in enumerate(steps):
                    if kind == "observe":
                        try:
                            result = runner.observe(REF, _observation(arg % 3, n))
                        except LifecycleError:
                            continue  # a refused observation: nothing written
                        assert emitter_of(runner).flush(20)
                        if result.committed:
                            committed.extend(result.transitions)
                            saved.append(status_now(server))
                    elif kind == "write-back":
                        put_status(server, PATH, saved[arg % len(saved)])
                    elif kind == "replace":
                        rewind(server, "record-condition-replaced", {})
                    else:  # a controller restart: a new store handle and emitter
                        context.__exit__(None, None, None)
                        store.close()
                        host += 1
                        store = store_on(api)
                        context = runner_on(store, server, host=f"node-{host}")
                        runner = context.__enter__()
            finally:
                context.__exit__(None, None, None)
                store.close()
        check_each_name_holds_its_event(server, committed)
    finally:
        server.release()
        server.close()


def test_a_lagging_reader_is_no_rewind_once_the_stores_copy_is_forgotten(
    server: FakeApiServer,
) -> None:
    """A host's informer that lags behind what this handle wrote, with the handle's own copy
    of the object evicted, is read past (a fresh GET), not taken for a rewind."""
    snapshot: dict[str, Any] = {}

    def informer(res: Any, ns: str, name: str) -> dict[str, Any] | None:
        return snapshot.get(name) or server.object(res.plural, ns, name)

    with api_client(server) as api:
        store = KubernetesStore(api, resources={"Pod": PODS}, reader=informer)
        with runner_on(store, server) as runner:
            first(runner)
            snapshot[REF.name] = server.object("pods", REF.namespace, REF.name)
            second(runner)
            epoch = store.epoch
            store.core._forget(REF.uid)  # evicted from the handle's bounded copies
            record = store.load(POD, REF)
            assert record is not None
            assert record.version == 2
            assert store.rewind_count == 0
            assert store.epoch == epoch
        store.close()
