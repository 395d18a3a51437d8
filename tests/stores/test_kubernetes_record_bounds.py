"""The Kubernetes record keeps every promise the machines make (issue 34, ADR 0144 and 0145):
a status the machine accepted is stored -- a provider error of 60 000 characters, deflated
and cut with a marker -- and the status never waits on the Events: with the Events API down,
the oldest undelivered events are given up, counted, logged and summarised in one Warning
once the API is back."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import random
import string
from collections.abc import Iterator
from datetime import timedelta
from typing import Any, ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes import client as kubernetes_client  # type: ignore[import-untyped]
from prometheus_client import CollectorRegistry, generate_latest

from lifecycle import AsyncRunner, MachineRegistry, ObjectRef, Runner
from lifecycle.emitters.kubernetes import KubernetesEmitter
from lifecycle.machines import POD, pod
from lifecycle.stores._k8s_encoding import cut_row, unpack
from lifecycle.stores._k8s_record import StatusCore
from lifecycle.stores.kubernetes import (
    PODS,
    RECORD_CONDITION,
    AsyncKubernetesStore,
    CustomResource,
    KubernetesStore,
)
from lifecycle.tables import Upcaster
from lifecycle.telemetry.prometheus import PrometheusTelemetry
from lifecycle.testing import FakeApiServer, conditions_crd_schema
from lifecycle.testing.fakes import FailingEmitter

from .test_kubernetes_store import AT, GROUP, POD_A, add, api, serve, stored


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    s = serve()
    yield s
    s.release()
    s.close()


def record(server: FakeApiServer, ref: ObjectRef) -> dict[str, Any]:
    for c in stored(server, ref)["status"].get("conditions") or ():
        if c["type"] == RECORD_CONDITION:
            data: dict[str, Any] = unpack(c["message"])
            return data
    raise AssertionError("no record")


def message_of(server: FakeApiServer, ref: ObjectRef) -> str:
    for c in stored(server, ref)["status"]["conditions"]:
        if c["type"] == RECORD_CONDITION:
            return str(c["message"])
    raise AssertionError("no record")


def provider_error(n: int = 60_000) -> str:
    """A provider's error of ``n`` characters that compresses poorly (a stack trace of
    random frames: short random words, as no redaction rule takes for a credential)."""
    rng = random.Random(34)
    words = [
        "".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 7))) for _ in range(n // 4)
    ]
    return " ".join(words)[:n]


def emitter(server: FakeApiServer) -> KubernetesEmitter:
    config = kubernetes_client.Configuration()
    config.host = server.url
    return KubernetesEmitter.for_api(
        kubernetes_client.ApiClient(config), hostname="host-0", timers=False, retry_interval=0.01
    )


# -- a status the machine accepted is stored ------------------------------------------------
def test_a_60000_character_provider_error_commits_and_its_event_note_is_cut(
    server: FakeApiServer,
) -> None:
    add(server, POD_A)
    store = KubernetesStore(api(server), resources={"Pod": PODS}, sleep=lambda _: None)
    events = emitter(server)
    runner = Runner(store, [events], links=())
    error = provider_error()
    runner.observe(POD_A, pod.CreateRequested(at=AT, pool="gpu", provider="fake"))
    result = runner.observe(POD_A, pod.ProvisionRejected(at=AT, error=error))
    assert result.error is None, result.error
    assert result.status.state == "ProvisionFailed"
    runner.flush(10.0)
    data = record(server, POD_A)
    assert data["version"] == 2
    assert len(message_of(server, POD_A).encode()) <= store.core.max_record_bytes
    # the status keeps the start of the message, cut with a marker saying how long it was
    kept = json.dumps(data["status"])
    assert error[:1000] in kept
    assert "[truncated 60000 characters]" in kept
    # the outbox row holds no more than an Event's note (the status has the message)
    for row in data["outbox"]:
        assert len(row["message"]) <= 1024
    # what the store loads is what the API holds: the same state, the error cut
    loaded = KubernetesStore(api(server), resources={"Pod": PODS}).load(POD, POD_A)
    assert loaded is not None
    assert loaded.version == 2
    assert loaded.status.state == "ProvisionFailed"
    notes = [
        e["note"] for e in server.events_regarding(POD_A.name) if e["reason"] == "ProvisionFailed"
    ]
    assert len(notes) == 1
    assert notes[0].endswith("[truncated]")
    assert len(notes[0].encode()) <= 1024
    runner.close(5.0)
    store.close()


def test_the_asyncio_store_commits_a_60000_character_provider_error(
    server: FakeApiServer,
) -> None:
    add(server, POD_A)

    async def go() -> Any:
        store = AsyncKubernetesStore(api(server), resources={"Pod": PODS})
        runner = AsyncRunner(store, links=())
        await runner.observe(POD_A, pod.CreateRequested(at=AT, pool="gpu", provider="fake"))
        result = await runner.observe(POD_A, pod.ProvisionRejected(at=AT, error=provider_error()))
        await store.close()
        return result

    result = asyncio.run(go())
    assert result.error is None, result.error
    assert record(server, POD_A)["version"] == 2
    assert stored(server, POD_A)["status"]["phase"] == "Failed"


def test_a_large_record_that_compresses_is_deflated_and_read_back(
    server: FakeApiServer,
) -> None:
    """A record over the bound as JSON but not deflated is written deflated (format 2) and
    nothing is cut: the status loads whole."""
    add(server, POD_A)
    store = KubernetesStore(api(server), resources={"Pod": PODS})
    runner = Runner(store, links=())
    error = "AccessDenied: " + "not authorized to perform ec2:RunInstances; " * 1200
    runner.observe(POD_A, pod.CreateRequested(at=AT, pool="gpu", provider="fake"))
    result = runner.observe(POD_A, pod.ProvisionRejected(at=AT, error=error))
    assert result.error is None
    assert json.loads(message_of(server, POD_A))["format"] == 2
    assert error in json.dumps(record(server, POD_A)["status"])
    fresh = KubernetesStore(api(server), resources={"Pod": PODS})
    loaded = fresh.load(POD, POD_A)
    assert loaded is not None
    assert loaded.status == result.status
    store.close()
    fresh.close()


# -- the status never waits on the Events ---------------------------------------------------
def flip(i: int) -> pod.InstancePending | pod.InstanceRunning:
    at = AT + timedelta(seconds=i + 1)
    return pod.InstanceRunning(at=at) if i % 2 else pod.InstancePending(at=at)


#: Flips with the Events API down, and the record bound they overflow: the issue's 1 000 at
#: 8 KiB in a soak run; ``make test`` runs the short form (the same overflow, sooner).
FLIPS, RECORD_BYTES = (1000, 8192) if os.environ.get("LIFECYCLE_SOAK") == "1" else (300, 2048)


def test_a_thousand_flips_with_the_events_api_down_keep_the_status_current(
    server: FakeApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    add(server, POD_A)
    store = KubernetesStore(
        api(server),
        resources={"Pod": PODS},
        sleep=lambda _: None,
        reader=lambda r, namespace, name: server.object(r.plural, namespace, name),  # informer
        max_record_bytes=RECORD_BYTES,  # 32 KiB holds ~3 800 such flips deflated: lost sooner
    )
    events = emitter(server)
    runner = Runner(store, [events], links=())
    runner.observe(POD_A, pod.CreateRequested(at=AT, pool="gpu", provider="fake"))
    runner.observe(POD_A, pod.ProvisionSucceeded(at=AT, reserved=True, instance_id="i-1"))
    runner.flush(10.0)
    server.outage("/events")
    with caplog.at_level(logging.WARNING, logger="lifecycle.stores"):
        for i in range(FLIPS):
            result = runner.observe(POD_A, flip(i))
            assert result.error is None, (i, result.error)
    given_up = [r for r in caplog.records if "given up" in r.getMessage()]
    assert len(given_up) == 1  # logged once for the outage
    # the status in the API is the last one committed
    data = record(server, POD_A)
    assert data["version"] == FLIPS + 2
    assert stored(server, POD_A)["status"]["phase"] == "Running"
    assert len(message_of(server, POD_A).encode()) <= store.core.max_record_bytes
    lost = store.events_given_up
    assert lost > 0
    summaries = [r for r in data["outbox"] if r["reason"] == "EventsNotDelivered"]
    assert len(summaries) == 1
    assert summaries[0]["lost"]["count"] == lost
    # the Events API is back: what is left is delivered, the loss in one Warning
    server.restore()
    for _ in range(50):
        runner.redeliver()
        runner.flush(10.0)
        store.flush_marks()
        if not store.undelivered_count():
            break
    assert store.undelivered_count() == 0
    warnings = [
        e for e in server.events_regarding(POD_A.name) if e["reason"] == "EventsNotDelivered"
    ]
    assert len(warnings) == 1, warnings
    note = warnings[0]["note"]
    assert note.startswith(f"{lost} transitions were not delivered while the Events API")
    first, last = summaries[0]["lost"]["first"], summaries[0]["lost"]["last"]
    assert f"first {first['from']} → {first['to']} ({first['reason']}" in note
    assert f"last {last['from']} → {last['to']} ({last['reason']}" in note
    assert first["version"] < last["version"] <= 1002
    assert warnings[0]["type"] == "Warning"
    # every flip either reached the API as an Event or is counted in the Warning
    sent = [e for e in server.events_regarding(POD_A.name) if e not in warnings]
    assert lost + sum(int((e.get("series") or {}).get("count") or 1) for e in sent) >= FLIPS
    runner.close(5.0)
    store.close()


def test_the_warning_standing_for_given_up_events_keeps_one_id_however_often_rewritten(
    server: FakeApiServer,
) -> None:
    add(server, POD_A)
    store = KubernetesStore(api(server), resources={"Pod": PODS}, max_record_bytes=1500)
    runner = Runner(store, [FailingEmitter(10**6)], links=())
    runner.observe(POD_A, pod.CreateRequested(at=AT, pool="gpu", provider="fake"))
    ids: set[str] = set()
    for i in range(100):
        assert runner.observe(POD_A, flip(i)).error is None
        ids |= {t.id for t in store.claim_undelivered() if t.reason == "EventsNotDelivered"}
    assert len(ids) == 1
    (tid,) = ids
    assert tid.endswith("@undelivered")
    assert record(server, POD_A)["version"] == 101
    # the loss is counted where operators look: the Prometheus telemetry
    registry = CollectorRegistry()
    PrometheusTelemetry(registry).watch(store)
    exposed = generate_latest(registry).decode()
    assert store.events_given_up > 0
    assert (
        f'lifecycle_store_events_given_up_total{{store="kubernetes"}} '
        f"{float(store.events_given_up)}"
    ) in exposed
    # delivered, it leaves the outbox; the next loss starts another Warning
    store.mark_delivered([tid])
    for i in range(100, 200):
        assert runner.observe(POD_A, flip(i)).error is None
    later = {t.id for t in store.claim_undelivered() if t.reason == "EventsNotDelivered"}
    assert len(later) == 1
    assert later != ids
    store.close()


# -- the record's encoding, as a property ----------------------------------------------------
def _row(i: int, message: str) -> dict[str, Any]:
    return {
        "ref": ["Pod", "ml", "trainer-0", "uid-a"],
        "machine": "pod",
        "from": "Pending" if i % 2 else "Running",
        "to": "Running" if i % 2 else "Pending",
        "reason": "Running" if i % 2 else "Pending",
        "type": "Normal",
        "message": message,
        "version": i + 1,
        "at": (AT + timedelta(seconds=i)).isoformat(),
        "n": 0,
        "condition": "",
        "controller": "",
    }


@functools.cache
def noise() -> str:
    return provider_error(66_000)


texts = st.text(alphabet=string.ascii_letters + " é€", max_size=3000) | st.builds(
    lambda n, start: noise()[start : start + n], st.integers(0, 65_536), st.integers(0, 400)
)


@settings(max_examples=60, deadline=None)
@given(
    error=texts,
    messages=st.lists(texts, max_size=300),
    bound=st.integers(1_500, 32_768),
)
def test_a_record_is_packed_within_its_bound_and_reads_back(
    error: str, messages: list[str], bound: int
) -> None:
    """Whatever the status's text and however many undelivered events: the message fits the
    bound and reads back; the status is whole unless it could not fit, every event is either
    kept (its message cut to a note's 1 KiB) or counted in the one Warning, oldest first."""
    core = StatusCore({"Pod": PODS}, max_record_bytes=bound)
    status = {"state": "ProvisionFailed", "error": error}
    outbox = [cut_row(_row(i, m)) for i, m in enumerate(messages)]
    record = {"format": 1, "machine": "pod", "version": 9, "status": status, "outbox": outbox}
    message, given_up = core._pack(POD_A, record)
    assert len(message.encode()) <= bound
    data = unpack(message)
    assert data["status"] == status or "characters]" in json.dumps(data["status"])
    rows = data["outbox"]
    summaries = [r for r in rows if r["reason"] == "EventsNotDelivered"]
    kept = [r for r in rows if r["reason"] != "EventsNotDelivered"]
    assert all(len(r["message"]) <= 1024 for r in kept)
    assert kept == outbox[given_up:]  # the oldest were given up, the rest kept in order
    if given_up:
        assert len(summaries) == 1
        assert summaries[0]["lost"]["count"] == given_up
        assert summaries[0]["lost"]["first"]["version"] == 1
        assert summaries[0]["lost"]["last"]["version"] == given_up
    else:
        assert summaries == []


def test_an_upcaster_that_changes_what_it_is_given_reads_each_record_once(
    server: FakeApiServer,
) -> None:
    """Records read are kept for the next read (one object's record is read several times a
    commit): a host's upcaster that changes the data it is given must not change them."""
    from tests.test_schema_versions import DoorMachineV1, Opened

    class Door(DoorMachineV1):
        def kubernetes_status(self, status: Any) -> dict[str, Any]:
            return {}  # only the record is written

    v1 = Door()

    def exclaim(data: dict[str, Any]) -> dict[str, Any]:
        data["message"] += "!"  # not idempotent: a second pass would show
        return data

    class Exclaimed(Door):
        schema_version: ClassVar[int] = 2
        upcasters: ClassVar[dict[int, Upcaster]] = {
            1: Upcaster(fingerprint=v1.schema.fingerprint, status=exclaim)
        }

    server.register_crd(GROUP, "v1", "doors", "Door", conditions_crd_schema("Door"))
    door = ObjectRef("Door", "default", "front", "door-1")
    server.add_object("doors", door.namespace, door.name, uid=door.uid)
    resources = {"Door": CustomResource(GROUP, "v1", "doors")}
    old = KubernetesStore(api(server), resources=resources)
    result = Runner(old, machines=MachineRegistry([v1]), links=()).observe(
        door, Opened(at=AT, by="me")
    )
    assert result.error is None, result
    new = KubernetesStore(api(server), resources=resources)
    v2 = Exclaimed()
    first, second = new.load(v2, door), new.load(v2, door)
    assert first is not None
    assert second is not None
    assert first.status.message.count("!") == 1
    assert second.status == first.status
    old.close()
    new.close()
