"""What every rewind test does (issue 34.1, ADR 0146): a Pod committed through a runner whose
Kubernetes emitter writes Events into the fake API server; its store rewound, wiped or
restored behind the runner's back; then a new transition at a version handed out before.
The API must hold the new transition's Event with its own content, under a fresh id."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes import client as kubernetes_client  # type: ignore[import-untyped]

from lifecycle import ObjectRef, Runner, Transition
from lifecycle._protocol import Result as RunResult
from lifecycle.emitters._k8s.event import event_name, id_suffix
from lifecycle.emitters.kubernetes import ApiEventSink, KubernetesEmitter, ManualClock
from lifecycle.machines import POD, MachineRegistry, pod
from lifecycle.testing import FakeApiServer

AT = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
REF = ObjectRef("Pod", "ml", "trainer-0", "pod-a")


@contextmanager
def api_client(server: FakeApiServer) -> Iterator[Any]:
    config = kubernetes_client.Configuration()
    config.host = server.url
    c = kubernetes_client.ApiClient(config)
    try:
        yield c
    finally:
        c.close()


@contextmanager
def runner_on(store: Any, server: FakeApiServer, host: str = "node-a") -> Iterator[Runner]:
    """A runner committing to ``store``, its Events written into ``server``'s API."""
    with api_client(server) as api:
        emitter = KubernetesEmitter(
            ApiEventSink(api),
            clock=ManualClock(AT),
            hostname=host,
            timers=False,
            retry_interval=0.01,
            jitter=lambda: 0.0,
        )
        runner = Runner(store, [emitter], machines=MachineRegistry([POD]), links=())
        try:
            yield runner
        finally:
            emitter.close()


def emitter_of(runner: Runner) -> KubernetesEmitter:
    (e,) = runner.emitters
    assert isinstance(e, KubernetesEmitter)
    return e


def observe(runner: Runner, obs: Any) -> RunResult:
    result = runner.observe(REF, obs)
    assert emitter_of(runner).flush(20)
    return result


def first(runner: Runner) -> RunResult:
    """Version 1: the Pod is provisioning (a Normal Event)."""
    return observe(runner, pod.CreateRequested(at=AT))


def second(runner: Runner) -> RunResult:
    """Version 2 the first time: provisioned (Normal)."""
    return observe(
        runner,
        pod.ProvisionSucceeded(at=AT + timedelta(seconds=1), reserved=True, instance_id="i-1"),
    )


def second_again(runner: Runner) -> RunResult:
    """Version 2 handed out again after the rewind, for other content: a Warning."""
    result = observe(runner, pod.ConfigInvalid(at=AT + timedelta(seconds=2), error="bad pool"))
    assert result.committed, result
    assert result.version == 2, result
    return result


def events_in_api(server: FakeApiServer) -> list[tuple[str, str, str]]:
    return sorted((e["reason"], e["type"], e["note"]) for e in server.events.values())


def check_the_new_event_is_in_the_api(
    server: FakeApiServer, old: RunResult, new: RunResult
) -> None:
    """The API holds the new transition's Event with its content, the old one's too, and
    the two transitions have different ids (the store gave the new one a fresh epoch)."""
    (o,), (n,) = old.transitions, new.transitions
    assert o.version == n.version == 2
    assert o.id != n.id, "the store handed out an id that names another event"
    assert (n.reason, n.type.value, n.message) in events_in_api(server)
    assert (o.reason, o.type.value, o.message) in events_in_api(server)


def check_each_name_holds_its_event(server: FakeApiServer, committed: list[Transition]) -> None:
    """No id names two contents among ``committed``, and the Event under each id's name in
    the API holds that transition's content (reason, type, note)."""
    contents: dict[str, tuple[str, str, str]] = {}
    for t in committed:
        content = (t.reason, t.type.value, t.message)
        assert contents.setdefault(t.id, content) == content, f"{t.id} names two events"
        event = server.events.get((REF.namespace, event_name(REF.name, id_suffix(t.id))))
        assert event is not None, f"{t.id}: no Event under its name"
        assert (event["reason"], event["type"], event["note"]) == content


def put_status(server: FakeApiServer, path: str, status: dict[str, Any]) -> None:
    """Another writer of the status (a backup or GitOps tool) puts ``status`` back."""
    with urllib.request.urlopen(server.url + path) as r:
        obj = json.loads(r.read())
    obj["status"] = status
    req = urllib.request.Request(
        server.url + path + "/status",
        data=json.dumps(obj).encode(),
        method="PUT",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req) as r:
        assert r.status == 200


def scraped(store: Any, name: str) -> float:
    """The value of metric ``name`` (summed over labels) with a Prometheus telemetry
    watching ``store``."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.exposition import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from lifecycle.telemetry.prometheus import PrometheusTelemetry

    registry = CollectorRegistry()
    PrometheusTelemetry(registry).watch(store)
    text = generate_latest(registry).decode()
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    )
