"""Anything a machine accepts, every store holds (issue 34, ADR 0144): each store declares its
record bound (``record_limit``), the runners check the machines' declared limits against it
when they are built, and observations at each declared limit commit on every store -- or the
runner refused to start, naming the limit -- never refused on every retry."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from lifecycle import (
    AsyncRunner,
    LifecycleError,
    Machine,
    MemoryStore,
    ObjectRef,
    Runner,
    SQLiteStore,
    StoreError,
    StoreTooSmall,
)
from lifecycle.machines import default_registry, workflow
from lifecycle.stores.kubernetes import (
    PODS,
    RECORD_CONDITION,
    AsyncKubernetesStore,
    CustomResource,
    KubernetesStore,
    Reply,
)
from lifecycle.testing import EPOCH, FakeApiServer, hostile_counts

from .test_kubernetes_store import CLAIM_SPEC, GROUP, RESOURCES, api, serve

REGISTRY = default_registry()
MACHINES = sorted(REGISTRY)


class NoCalls:
    """A transport for a store that must not be called (the check is made at construction)."""

    def send(self, call: Any) -> Reply:
        raise AssertionError(f"the start-up check sent {call}")


class NoAsyncCalls:
    async def send(self, call: Any) -> Reply:
        raise AssertionError(f"the start-up check sent {call}")


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    s = serve()
    yield s
    s.release()
    s.close()


@pytest.fixture(autouse=True)
def default_limits() -> Iterator[None]:
    yield
    workflow.Partitioned.limits.reset()


# -- the check at construction ------------------------------------------------------------------
def test_a_workflow_at_its_default_group_limit_refuses_the_runners_on_a_32_kib_record() -> None:
    store = KubernetesStore(resources=RESOURCES, transport=NoCalls())
    with pytest.raises(StoreTooSmall) as refused:
        Runner(store)
    text = str(refused.value)
    assert "workflow.Partitioned.limits['groups'] = 10000" in text
    assert "KubernetesStore holds at most 32768 bytes per Workflow record" in text
    assert f"Partitioned.limits.set('groups', {refused.value.fits}) fits" in text
    assert "max_record_bytes" in text
    assert refused.value.limits is workflow.Partitioned.limits
    assert refused.value.field == "groups"
    assert 100 < refused.value.fits < 10_000

    async def start() -> None:
        AsyncRunner(store)

    with pytest.raises(StoreTooSmall, match=r"limits\['groups'\] = 10000"):
        asyncio.run(start())

    async def start_async_store() -> None:
        AsyncRunner(AsyncKubernetesStore(resources=RESOURCES, transport=NoAsyncCalls()))

    with pytest.raises(StoreTooSmall, match=r"limits\['groups'\] = 10000"):
        asyncio.run(start_async_store())


def test_stores_without_a_bound_and_kinds_not_mapped_start(tmp_path: Path) -> None:
    Runner(MemoryStore())
    sqlite = SQLiteStore(tmp_path / "s.db")
    Runner(sqlite)
    sqlite.close()
    assert MemoryStore().record_limit("Workflow") is None
    pods = KubernetesStore(resources={"Pod": PODS}, transport=NoCalls())
    assert pods.record_limit("Workflow") is None
    assert pods.record_limit("Pod") == 32768
    Runner(pods)  # no Workflow is stored here: nothing to refuse


def test_at_the_count_the_refusal_names_the_largest_workflow_commits(
    server: FakeApiServer,
) -> None:
    """The count the refusal proposes is measured, not guessed: a Workflow of that many
    groups, each with the longest Job name and a uid, fits and commits; the runner starts."""
    store = KubernetesStore(api(server), resources=RESOURCES, sleep=lambda _: None)
    with pytest.raises(StoreTooSmall) as refused:
        Runner(store)
    fits = refused.value.fits
    refused.value.limits.set(refused.value.field, fits)
    runner = Runner(store)  # now it starts
    machine = REGISTRY["workflow"]
    assert machine.growth is not None
    largest = machine.growth.build(machine, fits)
    assert store.record_size(machine, largest) <= 32768
    ref = ObjectRef("Workflow", "default", "wf-largest", "wf-largest-uid")
    server.add_object("workflows", ref.namespace, ref.name, uid=ref.uid)
    at = workflow.Partitioned(at=EPOCH, nodes=fits, groups=fits, nodes_per_job=1)
    assert runner.observe(ref, workflow.Submitted(at=EPOCH)).error is None
    assert runner.observe(ref, at).error is None
    before = store.load(machine, ref)
    assert before is not None
    assert store.commit(machine, ref, before.version, largest, at, []) == before.version + 1
    fresh = KubernetesStore(api(server), resources=RESOURCES)
    loaded = fresh.load(machine, ref)
    assert loaded is not None
    assert loaded.status == largest
    fresh.close()
    store.close()


# -- the property: at every declared limit, a commit or a refusal at construction ---------------
SUBMITTED: tuple[str, Any, dict[str, Any]] = ("Submitted", EPOCH, {})


def _at_limits() -> tuple[str, Any, dict[str, int]]:
    groups = workflow.Partitioned.limits["groups"]
    return ("Partitioned", EPOCH, {"nodes": groups, "groups": groups, "nodes_per_job": 1})


_uids = itertools.count()


def _ref(machine: Machine[Any]) -> ObjectRef:
    n = next(_uids)
    namespace = "" if machine.kind == "NodeClaim" else "default"
    return ObjectRef(machine.kind, namespace, f"{machine.name}-{n}", f"{machine.name}-uid-{n}")


def _stores(server: FakeApiServer, tmp: Path) -> dict[str, Any]:
    return {
        "memory": MemoryStore(),
        "sqlite": SQLiteStore(tmp / "bounds.db"),
        "kubernetes": KubernetesStore(api(server), resources=RESOURCES, sleep=lambda _: None),
    }


def _runner(store: Any) -> Runner:
    """A runner on ``store``: refused at construction when a limit in force does not fit,
    then started at the count the refusal names (as a host would lower it)."""
    try:
        return Runner(store, links=())
    except StoreTooSmall as e:
        refused = e
    if refused.fits < 1:
        raise AssertionError(f"no count fits: {refused}")
    refused.limits.set(refused.field, refused.fits)
    return Runner(store, links=())


@pytest.mark.parametrize("name", MACHINES)
def test_observations_at_each_declared_limit_commit_on_every_store(
    name: str, server: FakeApiServer, tmp_path: Path
) -> None:
    machine = REGISTRY[name]
    stores = _stores(server, tmp_path)
    runners = {kind: _runner(store) for kind, store in stores.items()}

    def run(counts: list[tuple[str, Any, Any]]) -> None:
        for kind, runner in runners.items():
            ref = _ref(machine)
            if kind == "kubernetes":
                spec = CLAIM_SPEC if ref.kind == "NodeClaim" else None
                server.add_object(
                    RESOURCES[ref.kind].plural, ref.namespace, ref.name, uid=ref.uid, spec=spec
                )
            for args in counts:
                try:
                    obs = machine.observation(*args)
                except LifecycleError:
                    continue  # refused where it entered: nothing to store
                try:
                    result = runner.observe(ref, obs)
                except StoreError:
                    raise
                except LifecycleError:
                    continue  # the machine refused it (typed): nothing to store
                assert result.error is None, (kind, args[0], result.error)

    test = settings(
        max_examples=12,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )(given(counts=st.lists(hostile_counts(machine), min_size=1, max_size=3))(run))
    if name == "workflow":
        test = example(counts=[SUBMITTED, _at_limits()])(test)
    try:
        test()
    finally:
        for store in stores.values():
            store.close()


def test_a_record_field_the_crd_declares_holds_a_workflow_at_its_default_limit(
    server: FakeApiServer,
) -> None:
    """Where the Workflow CRD declares a status field for the record (``record_field``), the
    record may take 1 MiB: the runner starts at the default 10 000 groups, and a Workflow of
    10 000 groups commits and reads back, its condition pointing at the field."""
    resources = {
        **RESOURCES,
        "Workflow": CustomResource(GROUP, "v1", "workflows", record_field="lifecycleRecord"),
    }
    store = KubernetesStore(api(server), resources=resources, sleep=lambda _: None)
    assert store.record_limit("Workflow") == 1024 * 1024
    assert workflow.Partitioned.limits["groups"] == 10_000
    runner = Runner(store)  # the default limits fit
    ref = ObjectRef("Workflow", "default", "wf-fleet", "wf-fleet-uid")
    server.add_object("workflows", ref.namespace, ref.name, uid=ref.uid)
    partition = workflow.Partitioned(at=EPOCH, nodes=10_000, groups=10_000, nodes_per_job=1)
    result = runner.observe(ref, partition)
    assert result.error is None, result.error
    status = server.status("workflows", ref.namespace, ref.name)
    assert status is not None
    (condition,) = [c for c in status["conditions"] if c["type"] == RECORD_CONDITION]
    assert json.loads(condition["message"]) == {"field": "lifecycleRecord", "format": 3}
    assert len(status["lifecycleRecord"]) <= 1024 * 1024
    fresh = KubernetesStore(api(server), resources=resources)
    loaded = fresh.load(REGISTRY["workflow"], ref)
    assert loaded is not None
    assert loaded.status == result.status
    assert len(loaded.status.groups) == 10_000
    fresh.close()
    store.close()


def test_a_record_field_that_is_not_a_field_name_is_refused() -> None:
    for bad in ("status.record", "conditions", "récord", "a b"):
        with pytest.raises(ValueError, match="record_field"):
            CustomResource(GROUP, "v1", "workflows", record_field=bad)
