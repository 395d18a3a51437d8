"""Leader election on a Lease (ADR 0160): the Lease in the fake API server, the Lease lock,
the elector's fence and the store gate."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lifecycle import LifecycleError, MemoryEmitter, MemoryStore, ObjectRef, Runner
from lifecycle.leader import LeaderElector, LeaderGate, LeaseLock, NotLeader
from lifecycle.machines import POD, pod
from lifecycle.testing import FakeApiServer

ROOT = Path(__file__).resolve().parents[1]
AT = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
LEASES = "/apis/coordination.k8s.io/v1/namespaces/ops/leases"


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as fake:
        yield fake


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def send(
    server: FakeApiServer,
    method: str,
    path: str,
    body: Any = None,
    content_type: str = "application/json",
) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(server.url + path, data=data, method=method)
    request.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            text = answer.read().decode()
            if "watch=" in path:
                return answer.status, [json.loads(line) for line in text.splitlines()]
            return answer.status, json.loads(text)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def lease(name: str = "ctl", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name},
        "spec": spec,
    }


def spec_of(server: FakeApiServer) -> dict[str, Any]:
    found = server.object("leases", "ops", "ctl")
    assert found is not None
    return dict(found["spec"])


def elector(server: FakeApiServer, identity: str, clock: Clock, **kw: Any) -> LeaderElector:
    lock = LeaseLock("ctl", "ops", identity, api=server.configuration())
    timings = {"lease_duration": 15, "renew_deadline": 10, "retry_period": 2} | kw
    return LeaderElector(lock, clock=clock, **timings)


# -- the Lease in the fake API server -------------------------------------------------------------
def test_a_lease_is_created_read_and_replaced_with_compare_and_set(server: FakeApiServer) -> None:
    micro = "2026-01-02T03:04:05.123456Z"
    code, made = send(server, "POST", LEASES, lease(holderIdentity="a", renewTime=micro))
    assert code == 201
    assert made["metadata"]["namespace"] == "ops"
    assert made["metadata"]["uid"]
    assert send(server, "POST", LEASES, lease(holderIdentity="b"))[0] == 409
    version = made["metadata"]["resourceVersion"]
    body = lease(holderIdentity="b", leaseDurationSeconds=15)
    body["metadata"]["resourceVersion"] = version
    code, replaced = send(server, "PUT", LEASES + "/ctl", body)
    assert code == 200
    assert replaced["spec"]["holderIdentity"] == "b"
    assert "generation" not in replaced["metadata"]
    stale = lease(holderIdentity="c")
    stale["metadata"]["resourceVersion"] = version  # the first version: stale now
    code, refused = send(server, "PUT", LEASES + "/ctl", stale)
    assert code == 409
    assert refused["reason"] == "Conflict"
    assert spec_of(server)["holderIdentity"] == "b"
    code, listed = send(server, "GET", LEASES)
    assert code == 200
    assert [i["metadata"]["name"] for i in listed["items"]] == ["ctl"]
    patch = {"spec": {"leaseDurationSeconds": 30}}
    code, patched = send(server, "PATCH", LEASES + "/ctl", patch, "application/merge-patch+json")
    assert code == 200
    assert patched["spec"] == {"holderIdentity": "b", "leaseDurationSeconds": 30}
    code, seen = send(server, "GET", LEASES + "?watch=true&resourceVersion=0&timeoutSeconds=1")
    assert [(e["type"], e["object"]["spec"]["leaseDurationSeconds"]) for e in seen] == [
        ("ADDED", 30)
    ]


@pytest.mark.parametrize(
    ("spec", "code", "field"),
    [
        ({"renewTime": "2026-01-02T03:04:05Z"}, 400, "parsing time"),  # no fraction
        ({"acquireTime": "2026-01-02T03:04:05.123Z"}, 400, "parsing time"),  # three digits
        ({"renewTime": "2026-01-02 03:04:05.123456"}, 400, "parsing time"),  # str(datetime)
        ({"leaseDurationSeconds": 0}, 422, "spec.leaseDurationSeconds"),
        ({"leaseTransitions": -1}, 422, "spec.leaseTransitions"),
        ({"preferredHolder": "a"}, 422, "spec.preferredHolder"),
        ({"leaseDurationSeconds": "15"}, 400, "int64"),
    ],
)
def test_the_fake_refuses_a_lease_the_api_server_refuses(
    server: FakeApiServer, spec: dict[str, Any], code: int, field: str
) -> None:
    got, answer = send(server, "POST", LEASES, lease(**spec))
    assert (got, field in answer["message"]) == (code, True), answer
    assert server.object("leases", "ops", "ctl") is None
    assert send(server, "POST", LEASES, lease(name="Bad_Name"))[0] == 422


# -- the lock and the elector ---------------------------------------------------------------------
def test_the_first_candidate_acquires_and_renews_the_other_waits(server: FakeApiServer) -> None:
    clock = Clock()
    a, b = elector(server, "a", clock), elector(server, "b", clock)
    assert a.attempt()
    assert a.is_leader()
    assert not b.attempt()
    assert not b.is_leader()
    assert b.holder == "a"
    first = spec_of(server)
    clock.now += 2
    assert a.attempt()
    spec = spec_of(server)
    assert spec["holderIdentity"] == "a"
    assert spec["leaseDurationSeconds"] == 15
    assert spec["acquireTime"] == first["acquireTime"]
    assert spec["renewTime"] > first["renewTime"]
    assert spec["leaseTransitions"] == 0
    clock.now += 14  # b saw a change at 1000 and again now: a's lease is not expired for b
    assert not b.attempt()


def test_a_lost_race_is_a_409_and_only_one_candidate_leads(server: FakeApiServer) -> None:
    clock = Clock()
    a, b = elector(server, "a", clock), elector(server, "b", clock)
    assert a.attempt()
    clock.now += 30  # a never renewed: expired for both
    # both read the same Lease; b writes first, a's write is then stale
    assert b.lock.get("ctl", "ops")[0]
    assert a.lock.get("ctl", "ops")[0]
    from lifecycle.leader import _Record  # the record both would write

    rec = _Record("b", "15", "2026-01-02T03:04:05.000001+00:00", "2026-01-02T03:04:05+00:00")
    assert b.lock.update("ctl", "ops", rec)
    rec.holder_identity = "a"
    assert not a.lock.update("ctl", "ops", rec)
    conflicts = [r for r in server.requests if r.method == "PUT"]
    assert len(conflicts) == 2
    assert spec_of(server)["holderIdentity"] == "b"
    assert spec_of(server)["leaseTransitions"] == 1


def test_an_expired_lease_is_taken_over_after_the_old_leader_stopped(
    server: FakeApiServer,
) -> None:
    clock = Clock()
    a, b = elector(server, "a", clock), elector(server, "b", clock)
    assert a.attempt()
    assert not b.attempt()
    server.fail_when(
        lambda r: r.method == "PUT" and "/leases/" in r.path, 500, 500, 500, 500, 500, 500
    )
    for _ in range(5):  # a's renewals fail from now on
        clock.now += 2
        assert not a.attempt()
        assert not b.attempt()
    assert not a.is_leader()  # 10 s after its last renewal began
    clock.now += 5  # 15 s after b saw the last change
    server.fail_when(lambda r: False)
    server._script.clear()
    assert b.attempt()
    assert b.is_leader()
    assert not a.is_leader()
    assert spec_of(server)["leaseTransitions"] == 1


def test_stop_releases_the_lease_and_another_takes_it_at_once(server: FakeApiServer) -> None:
    clock = Clock()
    stopped: list[str] = []
    a = elector(server, "a", clock, on_stopped_leading=lambda: stopped.append("a"))
    b = elector(server, "b", clock)
    assert a.attempt()
    assert not b.attempt()
    a.stop()
    assert not a.is_leader()
    assert stopped == ["a"]
    assert "holderIdentity" not in spec_of(server)
    assert b.attempt()
    assert b.is_leader()


def test_a_hanging_renewal_does_not_extend_leadership(server: FakeApiServer) -> None:
    clock = Clock()
    a = LeaderElector(
        LeaseLock("ctl", "ops", "a", api=server.configuration(), request_timeout=0.3),
        lease_duration=15,
        renew_deadline=10,
        retry_period=2,
        clock=clock,
    )
    assert a.attempt()
    server.fail_when(lambda r: r.method == "PUT", "hang")
    clock.now += 9
    assert not a.attempt()  # timed out after 0.3 s: no answer is no renewal
    clock.now += 1
    assert not a.is_leader()


def test_the_thread_starts_leads_and_stops_within_a_retry_period(server: FakeApiServer) -> None:
    import time

    lock = LeaseLock("ctl", "ops", "a", api=server.configuration())
    started: list[bool] = []
    a = LeaderElector(
        lock,
        lease_duration=3,
        renew_deadline=2,
        retry_period=0.5,
        on_started_leading=lambda: started.append(True),
    )
    with a:
        deadline = time.monotonic() + 20
        while not a.is_leader() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert a.is_leader()
        assert started == [True]
        began = time.monotonic()
    assert time.monotonic() - began < 5  # a wait of 0.5 s cut short, one release
    assert not a.is_leader()
    assert "holderIdentity" not in spec_of(server)


def test_the_lock_serves_the_official_leader_election(server: FakeApiServer) -> None:
    from kubernetes.leaderelection.leaderelection import (  # type: ignore[import-untyped]
        LeaderElection,
    )

    lock = LeaseLock("ctl", "ops", "official", api=server.configuration())
    election = LeaderElection.__new__(LeaderElection)
    election.observed_record, election.observed_time_milliseconds = None, 0

    class Config:
        lease_duration, renew_deadline, retry_period = 15, 10, 2

    Config.lock = lock  # type: ignore[attr-defined]
    election.election_config = Config
    assert election.try_acquire_or_renew()  # creates the Lease
    assert election.try_acquire_or_renew()  # renews it (str(datetime) times made MicroTime)
    spec = spec_of(server)
    assert spec["holderIdentity"] == "official"
    assert spec["renewTime"].endswith("Z")


@pytest.mark.parametrize(
    "timings",
    [
        {"lease_duration": 10, "renew_deadline": 10, "retry_period": 2},
        {"lease_duration": 15, "renew_deadline": 2, "retry_period": 2},
        {"lease_duration": 15.5, "renew_deadline": 10, "retry_period": 2},
        {"lease_duration": 15, "renew_deadline": 10, "retry_period": 0},
    ],
)
def test_timings_client_go_refuses_are_refused(server: FakeApiServer, timings: Any) -> None:
    with pytest.raises(ValueError, match=r"must be|whole seconds"):
        LeaderElector(LeaseLock("ctl", "ops", "a", api=server.configuration()), **timings)


# -- the fence, as a property ---------------------------------------------------------------------
class Drifting:
    """A candidate's monotonic clock: the shared virtual time at its own rate."""

    def __init__(self, shared: Clock, rate: float) -> None:
        self.shared, self.rate = shared, rate

    def __call__(self) -> float:
        return self.shared.now * self.rate


def test_a_slow_leader_clock_still_stops_before_a_fast_follower_takes_over(
    server: FakeApiServer,
) -> None:
    """The fence under clock-rate drift: the leader's clock 15 % slow, the follower's 15 %
    fast (client-go's defaults tolerate up to 20 %). The leader renews once and then goes
    silent; the follower, which saw that renewal at once, tries every real second: the
    leader's lead ends (10 s of its clock, 11.8 s real) before the follower's begins (15 s of
    its clock, 13.04 s real)."""
    shared = Clock()
    a = LeaderElector(
        LeaseLock("ctl", "ops", "a", api=server.configuration()), clock=Drifting(shared, 0.85)
    )
    b = LeaderElector(
        LeaseLock("ctl", "ops", "b", api=server.configuration()), clock=Drifting(shared, 1.15)
    )
    assert a.attempt()
    began = shared.now
    took_over = None
    for _ in range(20):
        assert not b.attempt() or not a.is_leader()
        if b.is_leader() and took_over is None:
            took_over = shared.now - began
        assert not (a.is_leader() and b.is_leader())
        shared.now += 1
    assert took_over is not None
    assert 13 <= took_over <= 15


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(st.floats(0.9, 1.1), min_size=3, max_size=3),
    st.lists(
        st.tuples(
            st.integers(0, 2), st.sampled_from([0.0, 0.5, 1.0, 2.0, 4.0, 9.0]), st.booleans()
        ),
        min_size=1,
        max_size=40,
    ),
)
def test_never_two_leaders_at_one_instant(
    rates: list[float], steps: list[tuple[int, float, bool]]
) -> None:
    """Three candidates whose clocks run up to 10 % fast or slow try in any order at any
    times, their writes failing at random: at no instant do two of them say they lead."""
    with FakeApiServer() as server:
        shared = Clock()
        candidates = [
            LeaderElector(
                LeaseLock("ctl", "ops", name, api=server.configuration()),
                clock=Drifting(shared, rate),
            )
            for name, rate in zip("abc", rates, strict=True)
        ]
        for who, wait, fails in steps:
            shared.now += wait
            if fails:
                server.fail_when(lambda r: r.method in ("PUT", "POST"), 500)
            candidates[who].attempt()
            server._script.clear()
            leaders = [c.identity for c in candidates if c.is_leader()]
            assert len(leaders) <= 1, (shared.now, leaders)


# -- the gate -------------------------------------------------------------------------------------
class Flag:
    def __init__(self) -> None:
        self.leading = False

    def is_leader(self) -> bool:
        return self.leading


def test_the_gate_refuses_every_write_unless_leading() -> None:
    store, emitter, flag = MemoryStore(), MemoryEmitter(), Flag()
    runner = Runner(LeaderGate(store, flag), [emitter])
    ref = ObjectRef("Pod", "ops", "web-0", "uid-web-0")
    with pytest.raises(NotLeader) as refused:
        runner.observe(ref, pod.CreateRequested(at=AT, pool="gpu", provider="fake"))
    assert isinstance(refused.value, LifecycleError)
    assert store.load(POD, ref) is None
    assert emitter.events == []
    gate = LeaderGate(store, flag)
    with pytest.raises(NotLeader):
        gate.mark_delivered([])
    with pytest.raises(NotLeader):
        gate.claim_undelivered()
    assert gate.load(POD, ref) is None  # reads pass
    flag.leading = True
    result = runner.observe(ref, pod.CreateRequested(at=AT, pool="gpu", provider="fake"))
    assert result.committed
    assert store.load(POD, ref) is not None
    assert [t.id for t in emitter.events] == [t.id for t in result.all_transitions()]


def test_the_gate_checks_an_async_store_before_awaiting() -> None:
    import asyncio

    class Async:
        calls = 0

        async def commit(self, *args: Any) -> int:
            Async.calls += 1
            return 1

    flag = Flag()
    gate = LeaderGate(Async(), flag)
    with pytest.raises(NotLeader):
        asyncio.run(gate.commit())
    flag.leading = True
    assert asyncio.run(gate.commit()) == 1
    assert Async.calls == 1


def test_the_lease_lock_names_the_kubernetes_extra_and_the_gate_needs_none(
    tmp_path: Path,
) -> None:
    """On the core install (the SDKs unimportable, as ``scripts/core_check.py`` blocks
    them): ``lifecycle.leader`` imports, the gate works, the Lease lock raises
    ``MissingExtra`` naming the ``kubernetes`` extra."""
    code = tmp_path / "leader.py"
    code.write_text(
        """
import sys
from lifecycle import MemoryStore, MissingExtra
from lifecycle.leader import LeaderGate, LeaseLock, NotLeader

class Never:
    def is_leader(self):
        return False

try:
    LeaderGate(MemoryStore(), Never()).mark_delivered([])
except NotLeader:
    pass
try:
    LeaseLock("ctl", "ops", "a")
except MissingExtra as e:
    assert e.extra == "kubernetes", e
    print("ok")
assert not [m for m in sys.modules if m.split(".")[0] in ("kubernetes", "urllib3")]
""",
        encoding="utf-8",
    )
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "core_check.py"), "--run", "--block", str(code)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
