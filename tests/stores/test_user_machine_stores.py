"""A user's machine on every store (issue 36, ADR 0147): the Volume machine of
``tests/user_machine.py``, loaded from a file of its own and registered nowhere, is observed
on the memory, SQLite and PostgreSQL stores and on the Kubernetes store (the fake API
server), which finds the Volume resource from the machine's own apiVersion."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from kubernetes import client as kubernetes_client  # type: ignore[import-untyped]

from lifecycle import MachineRegistry, ObjectRef, Runner, Store
from lifecycle.stores.kubernetes import RECORD_CONDITION, KubernetesStore
from lifecycle.testing import (
    FakeApiServer,
    MemoryEmitter,
    RecordingTelemetry,
    conditions_crd_schema,
)

from ..conftest import EPOCH
from ..user_machine import load_volume

REF = ObjectRef("Volume", "data", "vol-a", "vol-a-uid")


def observe(runner: Runner, volume: Any) -> list[str]:
    """Attach, detach, attach again and fail; the reasons the runner emitted."""
    import sys

    o = sys.modules[type(volume).__module__]
    reasons: list[str] = []
    for seconds, obs in enumerate(
        (
            o.AttachRequested(at=EPOCH, node="node-1"),
            o.Attached(at=EPOCH),
            o.DetachRequested(at=EPOCH),
            o.Detached(at=EPOCH),
            o.AttachRequested(at=EPOCH, node="node-2"),
            o.AttachFailed(at=EPOCH, error="node-2 has no free slot"),
        )
    ):
        obs = type(obs)(**{**_fields(obs), "at": EPOCH + timedelta(seconds=seconds)})
        result = runner.observe(REF, obs)
        reasons += [t.reason for t in result.transitions]
    return reasons


def _fields(obs: Any) -> dict[str, Any]:
    import attrs

    return {f.name: getattr(obs, f.name) for f in attrs.fields(type(obs))}


REASONS = ["Attaching", "Attached", "Detaching", "Detached", "Attaching", "AttachFailed"]


def test_a_users_machine_on_the_memory_sqlite_and_postgresql_stores(
    open_kind: Callable[..., Store], tmp_path: Path
) -> None:
    volume = load_volume(tmp_path)
    store = open_kind()
    emitter = MemoryEmitter()
    telemetry = RecordingTelemetry()
    runner = Runner(store, [emitter], machines=MachineRegistry([volume]), telemetry=telemetry)
    assert observe(runner, volume) == REASONS
    assert [t.reason for t in emitter.events] == REASONS
    record = store.load(volume, REF)
    assert record is not None
    assert record.machine == "volume"
    assert (record.status.state, record.status.node) == ("Failed", "node-2")
    # the journal folds to the stored status, as for a shipped machine
    assert volume.fold(REF, [e.observation for e in store.journal(volume, REF)]) == record.status
    # telemetry names the machine as it names a shipped one
    named = {f.args[1] for f in telemetry.facts if f.method == "begin"} - {""}
    assert named == {"volume"}


def test_a_users_machine_on_the_kubernetes_store(tmp_path: Path) -> None:
    volume = load_volume(tmp_path)
    server = FakeApiServer()
    try:
        server.register_crd(
            "storage.example.com", "v1", "volumes", "Volume", conditions_crd_schema("Volume")
        )
        server.add_object("volumes", "data", "vol-a", uid="vol-a-uid")
        config = kubernetes_client.Configuration()
        config.host = server.url
        # no resources= at all: the store takes the Volume resource from the machine
        store = KubernetesStore(kubernetes_client.ApiClient(config), sleep=lambda _: None)
        try:
            runner = Runner(store, [MemoryEmitter()], machines=MachineRegistry([volume]))
            assert observe(runner, volume) == REASONS
            obj = server.object("volumes", "data", "vol-a")
            assert obj is not None
            status = obj["status"]
            # the machine's own status shape, beside the library's record
            assert (status["phase"], status["message"]) == ("Failed", "node-2 has no free slot")
            (record,) = [c for c in status["conditions"] if c["type"] == RECORD_CONDITION]
            assert json.loads(record["message"])
            loaded = store.load(volume, REF)
            assert loaded is not None
            assert loaded.status.node == "node-2"
        finally:
            store.close()
    finally:
        server.release()
        server.close()
