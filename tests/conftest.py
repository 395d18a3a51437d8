"""Shared fixtures: a fixed epoch, refs, and runner wiring on each store kind."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from lifecycle import MemoryEmitter, MemoryStore, ObjectRef, Runner, SQLiteStore, Store

EPOCH = datetime(2026, 11, 30, 10, 0, 0, tzinfo=UTC)


def t(seconds: float = 0) -> datetime:
    """A timestamp ``seconds`` after the fixed test epoch."""
    return EPOCH + timedelta(seconds=seconds)


def pod_ref(name: str = "trainer-0", uid: str = "pod-a", namespace: str = "ml") -> ObjectRef:
    return ObjectRef("Pod", namespace, name, uid)


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    s: Store = MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "s.db")
    yield s
    s.close()


@pytest.fixture
def emitter() -> MemoryEmitter:
    return MemoryEmitter()


@pytest.fixture
def runner(store: Store, emitter: MemoryEmitter) -> Runner:
    return Runner(store, [emitter])
