"""The host loop (issue 38, ADR 0158) against the shipped fake API server: list and watch with
dropped watches, ``410`` and bookmarks, the host's mapping, due ``Tick``\\ s, provider polls,
the leader hook, and a bounded shutdown on SIGTERM."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from lifecycle import (
    MemoryEmitter,
    MemoryStore,
    MissingExtra,
    ObjectRef,
    Observation,
    Runner,
    SQLiteStore,
    UnknownMachine,
)
from lifecycle.adapters import Tracked
from lifecycle.host import HostLoop, Poll, Watched
from lifecycle.leader import LeaderGate
from lifecycle.machines import MachineRegistry
from lifecycle.machines.pod import POD, CreateRequested, ProvisionSucceeded
from lifecycle.stores.kubernetes import CustomResource, ObjectChange
from lifecycle.testing import FakeApiServer, conditions_crd_schema
from lifecycle.testing.fakes import FailingEmitter, FakeProvider, FakeSpec
from tests.host_machine import MIRROR, MirrorStatus, Saw, Vanished
from tests.test_core_install import run_blocked

client = pytest.importorskip("kubernetes.client")

WIDGETS = CustomResource("test.example.com", "v1", "widgets")
POD_REF = ObjectRef("Pod", "ml", "trainer-0", uid="pod-uid-0")


class Seen:
    """The mapping a test hands the loop: what it was given, in order, and what it makes of
    it (``Saw`` the object's version, ``Vanished`` on deletion); it raises for the names in
    ``refuse``."""

    def __init__(self, refuse: frozenset[str] = frozenset()) -> None:
        self.changes: list[tuple[str, str, str, str]] = []
        self.refuse = refuse
        self.lock = threading.Lock()

    def __call__(self, change: ObjectChange, at: datetime) -> Observation:
        version = str(change.object["metadata"]["resourceVersion"])
        with self.lock:
            self.changes.append((change.type, change.ref.name, change.ref.uid, version))
        if change.ref.name in self.refuse:
            raise ValueError(f"cannot map {change.ref.name}")
        if change.type == "DELETED":
            return Vanished(at=at)
        return Saw(at=at, version=version)


@pytest.fixture
def cluster() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        schema = conditions_crd_schema("Widget")
        server.register_crd("test.example.com", "v1", "widgets", "Widget", schema)
        yield server


def start(
    cluster: FakeApiServer, mapping: Callable[..., Any], store: MemoryStore, **options: Any
) -> tuple[HostLoop, threading.Thread]:
    registry = MachineRegistry([MIRROR, POD])
    runner = Runner(store, machines=registry, links=())
    api = client.ApiClient(cluster.configuration())
    options.setdefault("watch_timeout", 5)
    loop = HostLoop(runner, {"Widget": Watched(WIDGETS, mapping)}, api=api, **options)
    thread = threading.Thread(target=loop.run, kwargs={"signals": False}, daemon=True)
    thread.start()
    assert cluster.wait_watching(1)
    return loop, thread


def stop(loop: HostLoop, thread: threading.Thread) -> None:
    loop.stop()
    thread.join(10)
    assert not thread.is_alive()


def statuses(store: MemoryStore) -> dict[str, MirrorStatus]:
    return {r.ref.uid: r.status for r in store.records(MIRROR)}


def eventually(check: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return check()


def patch(cluster: FakeApiServer, name: str, n: int) -> None:
    api = client.CustomObjectsApi(client.ApiClient(cluster.configuration()))
    api.patch_namespaced_custom_object(
        "test.example.com", "v1", "ml", "widgets", name, {"spec": {"n": n}}
    )


def caught_up(cluster: FakeApiServer, store: MemoryStore, gone: set[str]) -> bool:
    """Every object's last state is the one the runner holds; every deleted one it holds is
    Gone (one created and deleted while the watch was away never reached it: nor would it
    through client-go's informers)."""
    held = statuses(store)
    live = [cluster.object("widgets", "ml", f"w{i}") for i in range(4)]
    for obj in live:
        if obj is None:
            continue
        status = held.get(obj["metadata"]["uid"])
        if status is None or status.version != obj["metadata"]["resourceVersion"]:
            return False
    return all(held[uid].state == "Gone" for uid in gone if uid in held)


def assert_once_per_version(seen: Seen) -> None:
    """No state of an object was observed twice, and no deletion twice."""
    states = [(uid, v) for kind, _, uid, v in seen.changes if kind != "DELETED"]
    assert len(states) == len(set(states)), seen.changes
    deletions = [uid for kind, _, uid, _ in seen.changes if kind == "DELETED"]
    assert len(deletions) == len(set(deletions)), seen.changes


# -- the watch under faults -----------------------------------------------------------------
STEP = st.one_of(
    st.tuples(st.sampled_from(["create", "update", "delete"]), st.integers(0, 3)),
    st.tuples(st.sampled_from(["drop", "expire", "bookmark", "pause"]), st.just(0)),
)


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(steps=st.lists(STEP, min_size=4, max_size=14))
@example(  # each fault once, with objects that stay unchanged across the relist
    steps=[
        *[("create", 1), ("expire", 0), ("update", 0), ("drop", 0), ("delete", 1)],
        *[("bookmark", 0), ("create", 1), ("expire", 0), ("delete", 0), ("create", 0)],
    ]
)
def test_every_last_state_reaches_the_runner_once_under_drops_410_and_bookmarks(
    steps: list[tuple[str, int]],
) -> None:
    """While objects are created, changed and deleted, the server drops watches, expires
    them (``410``: the changes since are compacted away, so the loop must list again) and
    sends bookmarks. At the end the runner holds each live object's last version, each
    deleted object is Gone (deleted while the watch was away too), and no version of an
    object was observed twice."""
    check_steps(steps)


def check_steps(steps: list[tuple[str, int]]) -> None:
    """Run ``steps`` against a fresh fake server and a loop; check what reached the runner."""
    with FakeApiServer() as cluster:
        schema = conditions_crd_schema("Widget")
        cluster.register_crd("test.example.com", "v1", "widgets", "Widget", schema)
        cluster.add_object("widgets", "ml", "w0", spec={"n": 0})
        seen, store = Seen(), MemoryStore()
        loop, thread = start(cluster, seen, store)
        gone: set[str] = set()
        try:
            for i, (what, n) in enumerate(steps):
                name = f"w{n}"
                there = cluster.object("widgets", "ml", name)
                if what == "create" and there is None:
                    cluster.add_object("widgets", "ml", name, spec={"n": i})
                elif what == "update" and there is not None:
                    patch(cluster, name, i)
                elif what == "delete" and there is not None:
                    gone.add(there["metadata"]["uid"])
                    cluster.remove_object("widgets", "ml", name)
                elif what == "drop":
                    cluster.drop_watches()
                elif what == "expire":
                    cluster.compact()
                    cluster.expire_watches()
                elif what == "bookmark":
                    cluster.bookmark()
                elif what == "pause":
                    time.sleep(0.05)
            cluster.bookmark()
            assert eventually(lambda: caught_up(cluster, store, gone)), (steps, seen.changes)
        finally:
            stop(loop, thread)
        assert_once_per_version(seen)
        assert not [f for f in loop.failures if f.where != "watch"], list(loop.failures)


def test_a_deletion_while_the_watch_was_expired_is_seen_as_deleted(
    cluster: FakeApiServer,
) -> None:
    """The relist after ``410`` reconciles: an object gone from the list is ``DELETED``
    (with its last state), one made again under its name is the old one ``DELETED`` and the
    new one ``ADDED``; bookmarks move the version and are never objects."""
    first = cluster.add_object("widgets", "ml", "w0")
    cluster.add_object("widgets", "ml", "w1")
    cluster.add_object("widgets", "ml", "w2")  # unchanged: the relist must not deliver it
    seen, store = Seen(), MemoryStore()
    loop, thread = start(cluster, seen, store)
    try:
        assert eventually(lambda: len(seen.changes) == 3)
        cluster.outage("watch=")  # the next watches fail: the loop is away
        cluster.drop_watches()
        assert eventually(lambda: cluster.watching == 0)
        cluster.remove_object("widgets", "ml", "w1")
        cluster.remove_object("widgets", "ml", "w0")
        again = cluster.add_object("widgets", "ml", "w0")
        cluster.compact()  # the changes while away are gone: 410, then a list
        cluster.restore()
        assert eventually(lambda: len(seen.changes) >= 6)
        cluster.bookmark()
        time.sleep(0.2)
    finally:
        stop(loop, thread)
    assert len(seen.changes) == 6, seen.changes
    kinds = {(k, name, uid) for k, name, uid, _ in seen.changes[3:]}
    uid0 = first["metadata"]["uid"]
    assert ("DELETED", "w0", uid0) in kinds
    assert ("ADDED", "w0", again["metadata"]["uid"]) in kinds
    assert {k for k, name, _ in kinds if name == "w1"} == {"DELETED"}
    assert statuses(store)[uid0].state == "Gone"
    assert_once_per_version(seen)


# -- the cycle --------------------------------------------------------------------------------
def test_a_mapping_that_raises_for_one_object_is_reported_and_the_loop_goes_on(
    cluster: FakeApiServer,
) -> None:
    cluster.add_object("widgets", "ml", "w0")
    cluster.add_object("widgets", "ml", "bad")
    seen, store = Seen(refuse=frozenset({"bad"})), MemoryStore()
    loop, thread = start(cluster, seen, store)
    try:
        later = cluster.add_object("widgets", "ml", "w1")
        assert eventually(lambda: later["metadata"]["uid"] in statuses(store))
    finally:
        stop(loop, thread)
    failed = [f for f in loop.failures if f.where == "mapping"]
    assert [f.ref.name for f in failed if f.ref is not None] == ["bad"]
    assert isinstance(failed[0].error, ValueError)
    assert {s.version != "" for s in statuses(store).values()} == {True}
    assert len(statuses(store)) == 2  # w0 and w1, not bad


def test_an_observation_the_machine_refuses_fails_that_object_only(
    cluster: FakeApiServer,
) -> None:
    """A mapping returning what no machine knows fails that item; the batch falls back to
    one observation at a time and the others are written."""
    cluster.add_object("widgets", "ml", "w0")
    cluster.add_object("widgets", "ml", "odd")

    def mapping(change: ObjectChange, at: datetime) -> Observation:
        if change.ref.name == "odd":
            return CreateRequested(at=at, pool="gpu")  # a Pod observation on a Widget
        return Saw(at=at, version=str(change.object["metadata"]["resourceVersion"]))

    store = MemoryStore()
    loop, thread = start(cluster, mapping, store)
    try:
        assert eventually(lambda: len(statuses(store)) == 1 and bool(loop.failures))
    finally:
        stop(loop, thread)
    assert [f.ref.name for f in loop.failures if f.ref is not None] == ["odd"]
    assert loop.failures[0].where == "observe"


def test_the_loop_wakes_for_the_next_tick_and_not_before(cluster: FakeApiServer) -> None:
    """The mirror's timer runs 0.5 s after an object is first seen: with no change at all
    the loop ticks it then (Expired), and sleeps otherwise (a handful of cycles, not a
    poll every few milliseconds)."""
    obj = cluster.add_object("widgets", "ml", "w0")
    seen, store = Seen(), MemoryStore()
    loop, thread = start(cluster, seen, store, idle=30.0)
    uid = obj["metadata"]["uid"]
    try:
        assert eventually(
            lambda: uid in statuses(store) and statuses(store)[uid].state == "Expired"
        )
        time.sleep(0.3)
    finally:
        stop(loop, thread)
    assert loop.cycles <= 5, loop.cycles


def test_provider_polls_are_fed_to_the_runner(cluster: FakeApiServer) -> None:
    provider = FakeProvider(start_pending=True)
    store = MemoryStore()
    pod = POD_REF
    spec = FakeSpec()
    outcome = provider.provision(pod, spec)
    assert isinstance(outcome, ProvisionSucceeded)
    tracked = {pod: Tracked.provisioned(spec, outcome)}
    registry = MachineRegistry([MIRROR, POD])
    runner = Runner(store, machines=registry, links=())
    at = datetime.now(outcome.at.tzinfo)
    runner.observe(pod, CreateRequested(at=at, pool="gpu"))
    runner.observe(pod, outcome)
    api = client.ApiClient(cluster.configuration())
    poll = Poll(provider, lambda: tracked, every=0.05)
    loop = HostLoop(runner, {"Widget": Watched(WIDGETS, Seen())}, api=api, polls=[poll])
    thread = threading.Thread(target=loop.run, kwargs={"signals": False}, daemon=True)
    thread.start()
    try:
        provider.boot(outcome.instance_id)

        def running() -> bool:
            record = store.load(POD, pod)
            return record is not None and record.status.phase == "Running"

        assert eventually(running), store.load(POD, pod)
    finally:
        stop(loop, thread)
    assert ("list",) in provider.calls


def test_a_follower_writes_nothing_and_catches_up_when_it_leads(
    cluster: FakeApiServer,
) -> None:
    class Flag:
        leading = False

        def is_leader(self) -> bool:
            return self.leading

    flag = Flag()
    first = cluster.add_object("widgets", "ml", "w0")
    seen, store = Seen(), MemoryStore()
    loop, thread = start(cluster, seen, store, leader=flag, leader_poll=0.05)
    try:
        patch(cluster, "w0", 1)
        assert eventually(lambda: len(seen.changes) == 0 and loop.listed)
        time.sleep(0.2)
        assert statuses(store) == {}  # nothing written while not leading
        flag.leading = True
        loop.wake()
        current = cluster.object("widgets", "ml", "w0")
        assert current is not None
        version = current["metadata"]["resourceVersion"]
        uid = first["metadata"]["uid"]
        assert eventually(
            lambda: uid in statuses(store) and statuses(store)[uid].version == version
        )
    finally:
        stop(loop, thread)
    assert [v for _, _, _, v in seen.changes] == [version]  # the latest state only


def test_a_writer_redelivers_what_a_crashed_one_committed_and_never_sent(
    cluster: FakeApiServer,
) -> None:
    """A replica that committed a transition and died before its Event went out: the loop that
    writes next sends it in its first cycle (the runner's redelivery), before anything new."""
    registry = MachineRegistry([MIRROR, POD])
    store = MemoryStore()
    crashed = Runner(store, [FailingEmitter(failures=10)], machines=registry, links=())
    ref = ObjectRef("Widget", "ml", "w-old", "uid-old")
    assert crashed.observe(ref, Saw(at=datetime(2026, 1, 1, tzinfo=UTC), version="1")).committed
    assert store.undelivered_count() == 1
    emitter = MemoryEmitter()
    runner = Runner(store, [emitter], machines=registry, links=())
    api = client.ApiClient(cluster.configuration())
    loop = HostLoop(runner, {"Widget": Watched(WIDGETS, Seen())}, api=api, watch_timeout=5)
    done = loop.cycle()
    assert not done.failures
    # the old Event first; then the cycle's own work (its timer has long expired)
    assert [(e.id, e.target) for e in emitter.events[:1]] == [("uid-old:1:0", "Present")]
    assert store.undelivered_count() == 0
    loop.stop()
    runner.close()


def test_a_change_whose_write_lost_leadership_is_observed_once_it_leads_again(
    cluster: FakeApiServer,
) -> None:
    """Leadership lost between the loop's check and the commit (the store behind a
    ``LeaderGate`` refuses): the change is held, not dropped, and written once the replica
    leads again -- even though the object does not change meanwhile."""

    class Flag:
        leading = True

        def is_leader(self) -> bool:
            return self.leading

    flag = Flag()

    class Deposing(Seen):  # the lease is lost while the first cycle maps its changes
        def __call__(self, change: ObjectChange, at: datetime) -> Observation:
            if not self.changes:
                flag.leading = False
            return super().__call__(change, at)

    obj = cluster.add_object("widgets", "ml", "w0")
    store = MemoryStore()
    registry = MachineRegistry([MIRROR, POD])
    runner = Runner(LeaderGate(store, flag), machines=registry, links=())
    api = client.ApiClient(cluster.configuration())
    loop = HostLoop(
        runner, {"Widget": Watched(WIDGETS, Deposing())}, api=api, watch_timeout=5, leader=flag
    )
    thread = threading.Thread(target=loop.run, kwargs={"signals": False}, daemon=True)
    thread.start()
    try:
        assert cluster.wait_watching(1)
        assert eventually(lambda: any(f.where == "observe" for f in loop.failures))
        assert statuses(store) == {}  # refused: nothing written while not leading
        flag.leading = True
        loop.wake()
        uid = obj["metadata"]["uid"]
        assert eventually(lambda: uid in statuses(store))
    finally:
        flag.leading = True
        stop(loop, thread)


def test_a_follower_closes_cleanly_behind_its_gate(tmp_path: Path) -> None:
    """A runner whose store refuses because this replica does not lead still closes: its
    marks are a repeat later, not a failed shutdown."""

    class Never:
        def is_leader(self) -> bool:
            return False

    store = SQLiteStore(tmp_path / "s.db")  # it holds marks to write at close
    runner = Runner(LeaderGate(store, Never()), machines=MachineRegistry([MIRROR]), links=())
    runner.close()
    store.close()


# -- shutdown ---------------------------------------------------------------------------------
def test_sigterm_ends_the_loop_and_closes_the_runner_within_the_bound(
    cluster: FakeApiServer,
) -> None:
    """SIGTERM while a watch hangs (no answer at all): ``run`` still returns within
    ``shutdown_timeout``, closes the runner, and puts the previous handler back."""
    cluster.add_object("widgets", "ml", "w0")
    closed: list[float] = []

    class Closing(Runner):
        def close(self, timeout: float = 5.0) -> int:
            closed.append(timeout)
            return super().close(timeout)

    runner = Closing(MemoryStore(), machines=MachineRegistry([MIRROR]), links=())
    api = client.ApiClient(cluster.configuration())
    loop = HostLoop(
        runner, {"Widget": Watched(WIDGETS, Seen())}, api=api, shutdown_timeout=2.0, grace=0.5
    )
    cluster.fail_path("watch=", "hang")
    before = signal.getsignal(signal.SIGTERM)
    sent: list[float] = []

    def kill() -> None:
        time.sleep(0.5)
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=kill, daemon=True).start()
    loop.run()  # on the main thread: it holds SIGTERM
    took = time.monotonic() - sent[0]
    assert took < 2.0 + 1.0, took
    assert closed == [pytest.approx(0.5, abs=0.5)]
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_kind_the_runner_does_not_map_is_refused(cluster: FakeApiServer) -> None:
    runner = Runner(MemoryStore(), machines=MachineRegistry([MIRROR]), links=())
    api = client.ApiClient(cluster.configuration())
    with pytest.raises(UnknownMachine):
        HostLoop(runner, {"Gadget": Watched(WIDGETS, Seen())}, api=api)
    with pytest.raises(ValueError, match="idle"):
        HostLoop(runner, {"Widget": Watched(WIDGETS, Seen())}, api=api, idle=0)


def test_the_core_install_names_the_kubernetes_extra(tmp_path: Path) -> None:
    code = tmp_path / "host.py"
    code.write_text(
        "from lifecycle import MissingExtra, Runner\n"
        "from lifecycle.host import HostLoop, Watched\n"
        "from lifecycle.stores.kubernetes import PODS\n"
        "try:\n"
        "    HostLoop(Runner(), {'Pod': Watched(PODS, lambda c, at: None)})\n"
        "except MissingExtra as e:\n"
        "    print(e.extra)\n",
        encoding="utf-8",
    )
    done = run_blocked(str(code))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "kubernetes"
    assert issubclass(MissingExtra, ImportError)


# -- the fake server's watch faults -----------------------------------------------------------
def test_the_fake_sends_bookmarks_only_to_watches_that_ask(cluster: FakeApiServer) -> None:
    from kubernetes import watch  # type: ignore[import-untyped]

    api = client.CustomObjectsApi(client.ApiClient(cluster.configuration()))
    listed = api.list_namespaced_custom_object("test.example.com", "v1", "ml", "widgets")
    version = listed["metadata"]["resourceVersion"]
    got: dict[bool, list[str]] = {True: [], False: []}

    def follow(ask: bool) -> None:
        stream = watch.Watch().stream(
            api.list_namespaced_custom_object, "test.example.com", "v1", "ml", "widgets",
            resource_version=version, timeout_seconds=1, allow_watch_bookmarks=ask,
        )  # fmt: skip
        got[ask] += [event["type"] for event in stream]

    threads = [threading.Thread(target=follow, args=(ask,)) for ask in (True, False)]
    for thread in threads:
        thread.start()
    assert cluster.wait_watching(2)
    cluster.add_object("widgets", "ml", "w0")
    time.sleep(0.1)
    cluster.bookmark()
    for thread in threads:
        thread.join(5)
    assert got == {True: ["ADDED", "BOOKMARK"], False: ["ADDED"]}


def test_a_compaction_leaves_an_open_watch_whole(cluster: FakeApiServer) -> None:
    """``compact`` once emptied the change log an open watch reads by position: the watch
    skipped the changes made after it. Only new watches from older versions are refused."""
    from kubernetes import watch

    api = client.CustomObjectsApi(client.ApiClient(cluster.configuration()))
    listed = api.list_namespaced_custom_object("test.example.com", "v1", "ml", "widgets")
    names: list[str] = []

    def follow() -> None:
        stream = watch.Watch().stream(
            api.list_namespaced_custom_object, "test.example.com", "v1", "ml", "widgets",
            resource_version=listed["metadata"]["resourceVersion"], timeout_seconds=1,
        )  # fmt: skip
        names.extend(event["object"]["metadata"]["name"] for event in stream)

    thread = threading.Thread(target=follow)
    thread.start()
    assert cluster.wait_watching(1)
    cluster.add_object("widgets", "ml", "w0")
    time.sleep(0.1)
    cluster.compact()
    cluster.add_object("widgets", "ml", "w1")
    thread.join(5)
    assert names == ["w0", "w1"]


def test_a_dropped_watch_breaks_and_an_expired_one_is_410(cluster: FakeApiServer) -> None:
    from kubernetes import watch
    from urllib3.exceptions import ProtocolError

    api = client.CustomObjectsApi(client.ApiClient(cluster.configuration()))
    errors: list[BaseException] = []

    def follow() -> None:
        try:
            for _ in watch.Watch().stream(
                api.list_namespaced_custom_object, "test.example.com", "v1", "ml", "widgets",
                timeout_seconds=5,
            ):  # fmt: skip
                pass
        except Exception as e:
            errors.append(e)

    for fault in (cluster.drop_watches, cluster.expire_watches):
        thread = threading.Thread(target=follow)
        thread.start()
        assert cluster.wait_watching(1)
        fault()
        thread.join(5)
        assert eventually(lambda: cluster.watching == 0)
    assert isinstance(errors[0], ProtocolError)
    assert isinstance(errors[1], client.exceptions.ApiException)
    assert errors[1].status == 410


def test_stop_ends_a_watch_that_has_seen_nothing_at_once(cluster: FakeApiServer) -> None:
    """The fake once held a watch's headers until its first event, so a client blocked on
    them could not be stopped before ``timeoutSeconds``; the API server sends them at once."""
    loop, thread = start(cluster, Seen(), MemoryStore(), watch_timeout=30)
    begun = time.monotonic()
    loop.stop()
    thread.join(10)
    assert not thread.is_alive()
    assert time.monotonic() - begun < 5.0


def test_the_probes_are_ready_once_listed_and_live_while_the_loop_turns(
    cluster: FakeApiServer,
) -> None:
    from lifecycle.manifests import Health

    health = Health(stall_after=30.0)
    assert not health.is_ready
    loop, thread = start(cluster, Seen(), MemoryStore(), health=health, idle=0.05)
    try:
        assert eventually(lambda: health.is_ready)
        assert loop.listed
    finally:
        stop(loop, thread)


@pytest.mark.slow
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(STEP, min_size=10, max_size=40))
def test_soak_every_last_state_reaches_the_runner_once(steps: list[tuple[str, int]]) -> None:
    """The property above, longer and more often (``-m slow``)."""
    check_steps(steps)
