"""Fixtures the Kubernetes emitter tests share: the shipped fake API server, and a client of
the official ``kubernetes`` package pointed at it (a module may define its own of either)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from lifecycle.testing import FakeApiServer


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    s = FakeApiServer()
    yield s
    s.release()
    s.close()


@pytest.fixture
def api_client(server: FakeApiServer) -> Iterator[Any]:
    from kubernetes import client as kubernetes_client  # type: ignore[import-untyped]

    config = kubernetes_client.Configuration()
    config.host = server.url
    c = kubernetes_client.ApiClient(config)
    yield c
    c.close()
