"""A clean shutdown leaves nothing to redeliver, on every store (issue 35, ADR 0135).

A store may hold delivery marks back for its next write (SQLite ADR 0132, PostgreSQL ADR 0127,
the status subresource ADR 0133); a process that exits right after ``Runner.close()`` used to
take them with it, so each start sent its last events again. Here every mark delay is made
long (a minute), so a mark only ``close`` writes is the only one written: then a fresh handle
on the same data, opened right after the close, must find nothing to redeliver -- whatever the
observations, whether the runner owns the store or not, behind whichever wrapper.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lifecycle import (
    AsyncRunner,
    Dispatcher,
    LifecycleError,
    MemoryEmitter,
    MemoryStore,
    ObjectRef,
    Runner,
    SQLiteStore,
    ThreadedStore,
)
from lifecycle.machines import POD, pod
from lifecycle.stores.kubernetes import AsyncKubernetesStore, KubernetesStore
from lifecycle.testing import observation_sequences
from lifecycle.testing.fakes import FailingEmitter, FaultyStore

from .test_kubernetes_store import AT, RESOURCES, add, api, serve
from .test_kubernetes_store import groups_that_fit as groups_that_fit  # autouse: ADR 0144

#: A minute: no mark is written by a timer while a test runs (only by a write or a close).
LONG = 60.0
KINDS = [
    "memory",
    "sqlite",
    "sqlite+cache",
    "sqlite+group",
    pytest.param("postgres", marks=pytest.mark.postgres),
    "kubernetes",
]
WRAPS = ["plain", "faulty", "telemetry"]
_uids = itertools.count()


@pytest.fixture(autouse=True)
def long_mark_delays(monkeypatch: pytest.MonkeyPatch) -> None:
    import lifecycle.stores.postgres as pg_sync
    import lifecycle.stores.postgres_async as pg_async
    import lifecycle.stores.sqlite as sqlite

    monkeypatch.setattr(sqlite, "_MARK_DELAY", LONG)
    monkeypatch.setattr(pg_sync, "MARK_DELAY", LONG)
    monkeypatch.setattr(pg_async, "MARK_DELAY", LONG)


class Handles:
    """Opens handles on one store's data (each a replica of the same ``owner``: it takes its
    own outbox rows back at once); closes them all at the end."""

    def __init__(self, kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
        self.kind, _, self.option = kind.partition("+")
        self.path = tmp_path / "shutdown.db"
        self.opened: list[Any] = []
        self.memory = MemoryStore()
        self.server = serve() if self.kind == "kubernetes" else None
        self.url = request.getfixturevalue("pg_url") if self.kind == "postgres" else ""

    def open(self) -> Any:
        store: Any
        if self.kind == "memory":
            return self.memory
        if self.kind == "sqlite":
            options: dict[str, Any] = {"cache": 64} if self.option == "cache" else {}
            if self.option == "group":
                options["group_commit"] = True
            store = SQLiteStore(self.path, owner="host-0", synchronous="OFF", **options)
        elif self.kind == "postgres":
            from lifecycle.stores.postgres import PostgresStore

            store = PostgresStore(self.url, owner="host-0")
        else:
            assert self.server is not None
            store = KubernetesStore(api(self.server), resources=RESOURCES, sleep=lambda _: None)
        self.opened.append(store)
        return store

    async def open_async(self) -> Any:
        """An asyncio handle: the asyncio twin where there is one, else a synchronous handle
        (the runner puts it behind a worker thread)."""
        if self.kind == "postgres":
            from lifecycle.stores.postgres_async import AsyncPostgresStore

            return await AsyncPostgresStore.open(self.url, owner="host-0")
        if self.kind == "kubernetes":
            assert self.server is not None
            return AsyncKubernetesStore(api(self.server), resources=RESOURCES)
        return ThreadedStore(self.open())

    def ref(self) -> ObjectRef:
        n = next(_uids)
        ref = ObjectRef("Pod", "ml", f"trainer-{n}", uid=f"shutdown-{n}")
        if self.server is not None:
            add(self.server, ref)
        return ref

    @property
    def links(self) -> tuple[()] | None:
        return () if self.kind == "kubernetes" else None  # (no NodeClaim objects there)

    def close_handles(self) -> None:
        opened, self.opened = self.opened, []
        for s in opened:
            s.close()

    def close(self) -> None:
        self.close_handles()
        if self.server is not None:
            self.server.release()
            self.server.close()


@pytest.fixture(params=KINDS)
def handles(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Handles]:
    h = Handles(str(request.param), tmp_path, request)
    yield h
    h.close()


def nothing_to_redeliver(handles: Handles) -> None:
    """A fresh handle (a restarted process) redelivers nothing, and hands nothing over."""
    events = MemoryEmitter()
    fresh = Runner(handles.open(), [events], links=handles.links)
    assert fresh.redeliver() == 0
    assert events.events == []


def telemetry() -> Any:
    from lifecycle.telemetry.prometheus import PrometheusTelemetry

    return PrometheusTelemetry(None)


@given(
    seq=observation_sequences(POD, max_size=8),
    own=st.booleans(),
    wrap=st.sampled_from(WRAPS),
)
@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_after_a_close_a_fresh_runner_redelivers_nothing(
    handles: Handles, seq: list[Any], own: bool, wrap: str
) -> None:
    try:
        close_and_restart(handles, seq, own, wrap)
    finally:
        handles.close_handles()  # (each example's handles: a shrink runs many)


def close_and_restart(handles: Handles, seq: list[Any], own: bool, wrap: str) -> None:
    store = handles.open()
    ref = handles.ref()
    runner = Runner(
        FaultyStore(store) if wrap == "faulty" else store,
        [MemoryEmitter()],
        links=handles.links,
        owns_store=own,
        telemetry=telemetry() if wrap == "telemetry" else None,
    )
    for observation in seq:
        with contextlib.suppress(LifecycleError):  # refused: nothing written
            runner.observe(ref, observation)
    runner.close()
    nothing_to_redeliver(handles)
    if not own:  # a store passed in stays open: the host's to use and to close
        runner.store.load(POD, ref)


@given(
    seq=observation_sequences(POD, max_size=6),
    own=st.booleans(),
    telemetered=st.booleans(),
)
@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_after_an_async_close_a_fresh_runner_redelivers_nothing(
    handles: Handles, seq: list[Any], own: bool, telemetered: bool
) -> None:
    """The same of :class:`AsyncRunner`: on the asyncio twins of the PostgreSQL and Kubernetes
    stores, on the others through the :class:`ThreadedStore` it puts them behind."""

    async def main() -> None:
        store = await handles.open_async()
        try:
            runner = AsyncRunner(
                store,
                [MemoryEmitter()],
                links=handles.links,
                owns_store=own,
                telemetry=telemetry() if telemetered else None,
            )
            ref = handles.ref()
            for observation in seq:
                with contextlib.suppress(LifecycleError):
                    await runner.observe(ref, observation)
            await runner.close()
            nothing_to_redeliver(handles)
        finally:
            if not own:
                await store.close()

    try:
        asyncio.run(main())
    finally:
        handles.close_handles()


# -- ownership ------------------------------------------------------------------------------
CREATE = pod.CreateRequested(at=AT, pool="gpu", provider="fake")


def test_a_runner_closes_a_store_it_built_and_not_one_passed_in(tmp_path: Path) -> None:
    built = Runner()
    assert built.owns_store
    store = SQLiteStore(tmp_path / "kept.db", owner="host-0")
    with Runner(store, [MemoryEmitter()]) as runner:
        runner.observe(ObjectRef("Pod", "ml", "a", uid="a"), CREATE)
    assert not runner.owns_store
    assert store.load(POD, ObjectRef("Pod", "ml", "a", uid="a")) is not None  # still open
    with Runner(store, [MemoryEmitter()], owns_store=True):
        pass
    with pytest.raises(Exception, match="closed"):
        store.load(POD, ObjectRef("Pod", "ml", "a", uid="a"))


def test_an_owning_runner_closes_its_store_once(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "once.db", owner="host-0")
    closes: list[int] = []
    close = store.close

    def counted() -> None:
        closes.append(1)
        close()

    store.close = counted  # type: ignore[method-assign]
    runner = Runner(store, owns_store=True)
    runner.close()
    runner.close()
    assert closes == [1]


# -- the asyncio runner and the dispatcher ---------------------------------------------------
@pytest.mark.parametrize("own", [True, False])
def test_an_async_runner_on_a_threaded_store_leaves_nothing(tmp_path: Path, own: bool) -> None:
    store = SQLiteStore(tmp_path / "async.db", owner="host-0")
    ref = ObjectRef("Pod", "ml", "a", uid="a")

    async def main() -> None:
        runner = AsyncRunner(ThreadedStore(store), [MemoryEmitter()], owns_store=own)
        await runner.observe(ref, CREATE)
        await runner.close()

    asyncio.run(main())
    events = MemoryEmitter()
    assert Runner(SQLiteStore(tmp_path / "async.db", owner="host-0"), [events]).redeliver() == 0
    assert events.events == []
    if own:  # the default, as it always was: the runner closes what it was given
        with pytest.raises(Exception, match="closed"):
            store.load(POD, ref)
    else:
        assert store.load(POD, ref) is not None


def test_an_async_runner_not_owning_a_store_closed_before_it_closes_quietly(
    tmp_path: Path,
) -> None:
    async def main() -> int:
        store = ThreadedStore(SQLiteStore(tmp_path / "early.db", owner="host-0"))
        runner = AsyncRunner(store, [MemoryEmitter()], owns_store=False)
        await runner.observe(ObjectRef("Pod", "ml", "a", uid="a"), CREATE)
        await store.close()  # the host closed its store first: every mark is written
        return await runner.close()

    assert asyncio.run(main()) == 0


@pytest.mark.postgres
def test_an_async_runner_on_postgres_not_owning_it_leaves_nothing(pg_url: str) -> None:
    from lifecycle.stores.postgres import PostgresStore
    from lifecycle.stores.postgres_async import AsyncPostgresStore

    ref = ObjectRef("Pod", "ml", "a", uid="a")

    async def main() -> None:
        store = await AsyncPostgresStore.open(pg_url, owner="host-0")
        try:
            runner = AsyncRunner(store, [MemoryEmitter()], owns_store=False)
            await runner.observe(ref, CREATE)
            await runner.close()
            fresh = PostgresStore(pg_url, owner="host-0")
            try:
                events = MemoryEmitter()
                assert Runner(fresh, [events]).redeliver() == 0
                assert events.events == []
            finally:
                fresh.close()
            assert await store.load(POD, ref) is not None  # still open
        finally:
            await store.close()

    asyncio.run(main())


def test_an_async_runner_on_the_status_subresource_leaves_nothing() -> None:
    server = serve()
    ref = ObjectRef("Pod", "ml", "a", uid="a")
    add(server, ref)
    try:

        async def main() -> None:
            store = AsyncKubernetesStore(api(server), resources=RESOURCES)
            runner = AsyncRunner(store, [MemoryEmitter()], links=(), owns_store=False)
            await runner.observe(ref, CREATE)
            await runner.close()
            fresh = KubernetesStore(api(server), resources=RESOURCES, sleep=lambda _: None)
            events = MemoryEmitter()
            assert Runner(fresh, [events], links=()).redeliver() == 0
            assert events.events == []
            fresh.close()
            await store.close()

        asyncio.run(main())
    finally:
        server.release()
        server.close()


def test_a_dispatcher_close_writes_every_mark(tmp_path: Path) -> None:
    path = tmp_path / "dispatch.db"
    store = SQLiteStore(path, owner="host-0")
    ref = ObjectRef("Pod", "ml", "a", uid="a")
    Runner(store, [FailingEmitter()]).observe(ref, CREATE)  # committed, not delivered
    delivered = MemoryEmitter()
    dispatcher = Dispatcher(store, [delivered])
    assert dispatcher.dispatch_once() > 0
    dispatcher.close()
    assert delivered.events
    events = MemoryEmitter()
    assert Runner(SQLiteStore(path, owner="host-0"), [events]).redeliver() == 0
    assert events.events == []
