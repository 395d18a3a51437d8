"""MemoryEmitter queries and assertions; LogEmitter output with the object ref bound."""

from __future__ import annotations

import pytest
import structlog
from structlog.testing import capture_logs

from lifecycle import EventType, LogEmitter, MemoryEmitter, ObjectRef, Transition

from .conftest import t

POD = ObjectRef("Pod", "ml", "trainer-0", "pod-a")
CLAIM = ObjectRef("NodeClaim", "", "ml-trainer-0", "pod-a-claim")


def event(
    ref: ObjectRef = POD,
    reason: str = "Running",
    type_: EventType = EventType.NORMAL,
    version: int = 1,
    n: int = 0,
    fallback: bool = False,
) -> Transition:
    return Transition(
        ref,
        ref.kind.lower(),
        "Initializing",
        reason,
        reason,
        type_,
        "msg",
        version,
        t(),
        n,
        fallback=fallback,
    )


def test_memory_emitter_queries() -> None:
    em = MemoryEmitter()
    em.emit(event(version=1, reason="Provisioning"))
    em.emit(event(CLAIM, version=1, reason="Provisioning"))
    em.emit(event(version=2, reason="Running"))
    assert em.reasons() == ["Provisioning", "Provisioning", "Running"]
    assert em.reasons("pod-a") == ["Provisioning", "Running"]
    assert [e.ref.uid for e in em.for_kind("NodeClaim")] == ["pod-a-claim"]
    assert em.ids() == ["pod-a:1:0", "pod-a-claim:1:0", "pod-a:2:0"]
    em.assert_reasons("pod-a", ["Provisioning", "Running"])
    assert em.assert_emitted("Running", uid="pod-a").version == 2
    em.assert_no_duplicates()
    em.clear()
    em.assert_none()


def test_memory_emitter_assertions_fail_loudly() -> None:
    em = MemoryEmitter()
    em.emit(event())
    em.emit(event())  # redelivered under the same id
    with pytest.raises(AssertionError, match="delivered more than once"):
        em.assert_no_duplicates()
    assert len(em.unique()) == 1
    with pytest.raises(AssertionError, match="expected one 'Running' event, found 2"):
        em.assert_emitted("Running")
    with pytest.raises(AssertionError, match="expected \\['Failed'\\]"):
        em.assert_reasons("pod-a", ["Failed"])
    with pytest.raises(AssertionError, match="expected no events"):
        em.assert_none("pod-a")


def test_fallback_ids_are_distinct_from_committed_ids() -> None:
    committed = event(version=3, n=0)
    fallback = event(version=3, n=0, fallback=True)
    assert committed.id == "pod-a:3:0"
    assert fallback.id == "pod-a:3:f0-Running"


def test_log_emitter_binds_the_object_and_picks_the_level() -> None:
    em = LogEmitter(structlog.get_logger("test"))
    with capture_logs() as logs:
        em.emit(event(reason="Running"))
        em.emit(event(reason="Failed", type_=EventType.WARNING, version=2))
    assert [entry["log_level"] for entry in logs] == ["info", "warning"]
    first = logs[0]
    assert first["event"] == "transition"
    assert (first["kind"], first["namespace"], first["name"], first["uid"]) == (
        "Pod",
        "ml",
        "trainer-0",
        "pod-a",
    )
    assert first["from"] == "Initializing"
    assert first["to"] == "Running"
    assert first["id"] == "pod-a:1:0"
    assert logs[1]["type"] == "Warning"
    assert logs[1]["version"] == 2
