"""The two Kubernetes store handles drive one program (issue 36, ADR 0152): whatever the API
server answers, :class:`KubernetesStore` and :class:`AsyncKubernetesStore` make the same
requests, wait the same pauses (each through its own ``sleep=``) and end alike -- the same
value or the same error type. A difference between the twins (a step one of them answers
from the reader and the other sends, a pause one of them skips) is what this property finds.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from kubernetes import client as kubernetes_client  # type: ignore[import-untyped]

from lifecycle import ObjectRef
from lifecycle._core.transition import Transition, stamp
from lifecycle.machines import POD, pod
from lifecycle.stores.kubernetes import (
    PODS,
    ApiTransport,
    AsyncKubernetesStore,
    Call,
    CustomResource,
    KubernetesStore,
    Reply,
)
from lifecycle.testing import FakeApiServer

AT = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
RESOURCES = {"Pod": PODS}
#: What the server may answer a request in place of its own answer.
ANSWERS = st.sampled_from(
    [
        500,
        409,
        404,
        422,
        (429, {"Retry-After": "1"}),
        (429, {"Retry-After": "nan"}),
        "reset",
        "drop",
        ("landed", 504),
        ("landed", "drop"),
    ]
)
#: Each example's two objects, one namespace each (the handles list theirs).
NAME, UID = "trainer-0", "uid-trainer-0"
_examples = itertools.count()


@pytest.fixture(scope="module")
def server() -> Iterator[FakeApiServer]:
    s = FakeApiServer()
    yield s
    s.release()
    s.close()


class Recorded:
    """What a handle did, in order: its requests (``(method, path)``, its own namespace
    blanked), its pauses and how each of its calls ended."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.log: list[tuple[str, Any]] = []

    def call(self, call: Call) -> None:
        self.log.append((call.method, call.path.replace(f"/{self.namespace}/", "/<ns>/")))

    def pause(self, seconds: float) -> None:
        self.log.append(("pause", str(seconds)))


class SyncTransport:
    def __init__(self, real: ApiTransport, seen: Recorded) -> None:
        self.real, self.seen = real, seen

    def send(self, call: Call) -> Reply:
        self.seen.call(call)
        return self.real.send(call)


class AsyncTransport(SyncTransport):
    async def send(self, call: Call) -> Reply:  # type: ignore[override]
        return super().send(call)


def reader_of(server: FakeApiServer) -> Callable[[CustomResource, str, str], Any]:
    return lambda resource, ns, name: server.object(resource.plural, ns, name)


Step = Callable[[Any, dict[str, Any]], Any]


def steps(namespace: str) -> list[tuple[str, Step]]:
    """The calls each handle makes, in order: every method of the store, on the one object of
    its namespace, with an event to deliver (the ids claimed are the ids marked)."""
    ref = ObjectRef("Pod", namespace, NAME, UID)
    obs = pod.CreateRequested(at=AT, pool="gpu")
    before = POD.initial(ref)
    status = POD.apply(before, obs)
    transitions = stamp(POD.flips(before, status), ref, POD.name, 1, AT)
    return [
        ("load", lambda s, _: s.load(POD, ref)),
        ("commit", lambda s, _: s.commit(POD, ref, 0, status, obs, transitions)),
        ("records", lambda s, _: s.records(POD)),
        ("claim", lambda s, _: s.claim_undelivered(10)),
        ("mark", lambda s, memo: s.mark_delivered(memo.get("claimed", []))),
        ("flush", lambda s, _: s.flush_marks()),
        ("summary", lambda s, _: s.outbox_summary()),
        ("journal", lambda s, _: s.journal(POD, ref)),
    ]


def outcome(value: Any) -> Any:
    """What a call ended with, comparable across handles: an error by its type, a record by
    version and status, an event by reason and id without the handle's own epoch."""
    if isinstance(value, Exception):
        return ("raised", type(value).__name__)
    if isinstance(value, list | Iterator):
        return [outcome(v) for v in value]
    if isinstance(value, Transition):
        return (value.reason, value.id.split("@", 1)[0])
    version = getattr(value, "version", None)
    return value if version is None else (version, getattr(value, "status", None))


def ended(what: str, value: Any, memo: dict[str, Any]) -> tuple[str, Any]:
    if what == "claim":
        memo["claimed"] = [t.id for t in value]
    return what, outcome(value)


def run_sync(server: FakeApiServer, namespace: str, reader: bool) -> list[Any]:
    seen = Recorded(namespace)
    real = ApiTransport(api_of(server))
    store = KubernetesStore(
        resources=RESOURCES,
        namespace=namespace,
        reader=reader_of(server) if reader else None,
        transport=SyncTransport(real, seen),
        sleep=seen.pause,
    )
    memo: dict[str, Any] = {}
    for what, call in steps(namespace):
        try:
            seen.log.append(ended(what, call(store, memo), memo))
        except Exception as e:
            seen.log.append((what, outcome(e)))
    store.close()
    real.close()
    return seen.log


def run_async(server: FakeApiServer, namespace: str, reader: bool) -> list[Any]:
    seen = Recorded(namespace)
    real = ApiTransport(api_of(server))

    async def pause(seconds: float) -> None:
        seen.pause(seconds)

    async def main() -> None:
        store = AsyncKubernetesStore(
            resources=RESOURCES,
            namespace=namespace,
            reader=reader_of(server) if reader else None,
            transport=AsyncTransport(real, seen),
            sleep=pause,
        )
        memo: dict[str, Any] = {}
        for what, call in steps(namespace):
            try:
                seen.log.append(ended(what, await call(store, memo), memo))
            except Exception as e:
                seen.log.append((what, outcome(e)))
        await store.close()

    asyncio.run(main())
    real.close()
    return seen.log


def on(path: str) -> Callable[[Any], bool]:
    """The requests whose path holds ``path`` (one object's)."""
    return lambda request: path in request.path


def api_of(server: FakeApiServer) -> Any:
    return kubernetes_client.ApiClient(server.configuration())


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=st.lists(ANSWERS, max_size=6), reader=st.booleans())
@example(script=[(429, {"Retry-After": "1"}), 500, 409], reader=True)
def test_the_sync_and_asyncio_handles_make_the_same_requests_and_pauses(
    server: FakeApiServer, script: list[Any], reader: bool
) -> None:
    n = next(_examples)
    made = []
    for run, side in ((run_sync, "s"), (run_async, "a")):
        namespace = f"{side}{n:05d}"
        server.add_object("pods", namespace, NAME, uid=UID)
        path = f"/namespaces/{namespace}/pods/{NAME}"
        server.fail_when(on(path), *script)
        made.append(run(server, namespace, reader))
    sync, asyncio_ = made
    assert sync == asyncio_
    if script[:1] == [(429, {"Retry-After": "1"})]:  # the first request is told to wait
        assert ("pause", "1.0") in sync
