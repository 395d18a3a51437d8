"""A status that could not be read is logged as a failed read, not a failed write (issue 35),
and an error quoting the API client's is quoted once: by the log line, not again by the store.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client as kubernetes_client  # type: ignore[import-untyped]

from lifecycle import AsyncRunner, MemoryEmitter, MemoryStore, ObjectRef, Outcome, Runner
from lifecycle._core.errors import StoreError
from lifecycle.machines import pod
from lifecycle.stores.kubernetes import PODS, KubernetesStore

POD_A = ObjectRef("Pod", "ml", "trainer-0", "uid-a")
AT = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


@pytest.fixture
def records(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    with caplog.at_level(logging.WARNING, logger="lifecycle"):
        yield caplog


def runner_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "lifecycle.runner"]


def dead_api_server() -> str:
    """The address of a port nothing listens on (connections are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_a_dead_api_server_is_a_failed_read_with_its_error_quoted_once(
    records: pytest.LogCaptureFixture,
) -> None:
    config = kubernetes_client.Configuration()
    config.host = dead_api_server()
    store = KubernetesStore(
        kubernetes_client.ApiClient(config), resources={"Pod": PODS}, sleep=lambda _: None
    )
    try:
        result = Runner(store, [MemoryEmitter()], links=()).observe(
            POD_A, pod.CreateRequested(at=AT, pool="gpu")
        )
    finally:
        store.close()
    assert result.outcome is Outcome.FAILED
    [line] = runner_lines(records)
    assert line.startswith("status read failed ref='Pod/ml/trainer-0' uid='uid-a' error="), line
    assert "write" not in line
    error = str(result.error)
    assert error.startswith("read Pod ml/trainer-0: no answer "), error
    assert "refused" in error.lower()
    # the client's text as it is: no quotes or escapes added around it, so the log's own
    # quoting is the only one
    assert "\\" not in error
    assert "\\" not in line
    assert not error.removeprefix("read Pod ml/trainer-0: no answer ").startswith(("'", '"'))


class Unreadable(MemoryStore):
    """A store whose reads fail (its writes never happen)."""

    def load(self, machine: Any, ref: ObjectRef) -> Any:
        raise StoreError("database unreachable")

    def load_many(self, items: Any) -> Any:
        raise StoreError("database unreachable")


def test_every_runner_logs_a_failed_read_as_one(records: pytest.LogCaptureFixture) -> None:
    observation = pod.CreateRequested(at=AT, pool="gpu")
    Runner(Unreadable(), [], links=()).observe(POD_A, observation)
    Runner(Unreadable(), [], links=()).observe_many([(POD_A, observation)])
    asyncio.run(AsyncRunner(Unreadable(), [], links=()).observe(POD_A, observation))
    lines = runner_lines(records)
    assert len(lines) == 3
    assert all(line.startswith("status read failed ") for line in lines), lines


class Unwritable(MemoryStore):
    """A store whose writes fail."""

    def commit(self, *args: Any, **kwargs: Any) -> int:
        raise StoreError("disk full")

    def commit_many(self, items: Any) -> Any:
        raise StoreError("disk full")


def test_a_failed_write_is_still_a_failed_write(records: pytest.LogCaptureFixture) -> None:
    observation = pod.CreateRequested(at=AT, pool="gpu")
    Runner(Unwritable(), [], links=()).observe(POD_A, observation)
    Runner(Unwritable(), [], links=()).observe_many([(POD_A, observation)])
    lines = runner_lines(records)
    assert len(lines) == 2
    assert all(line.startswith("status write failed ") for line in lines), lines
