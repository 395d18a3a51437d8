"""The Kubernetes API wing (issue 36, ADR 0152): the status store's transport, the object
cache and the Event sink build their client in one place, so each takes the same ``api`` (an
``ApiClient``, an API object over one, or ``None`` for the loaded default) and refuses a
configuration without an API server with the same error, the one the public API exports."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client as kubernetes_client  # type: ignore[import-untyped]

from lifecycle._k8s_api import errors
from lifecycle.emitters.kubernetes import ApiEventSink, ApiNotConfigured, RequestDeadline, SinkError
from lifecycle.stores.kubernetes import PODS, ApiTransport, ObjectCache
from lifecycle.testing import FakeApiServer

#: Each builder and where its client's configuration is.
BUILDERS: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {
    "store transport": (ApiTransport, lambda made: made.api_client.configuration),
    "object cache": (
        lambda api: ObjectCache(api, resources={"Pod": PODS}),
        lambda made: made.api_client.configuration,
    ),
    "event sink": (ApiEventSink, lambda made: made.api.api_client.configuration),
}


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    s = FakeApiServer()
    yield s
    s.close()


@pytest.mark.parametrize("builder", BUILDERS.values(), ids=list(BUILDERS))
def test_every_client_is_built_from_an_api_client_or_an_api_over_one(
    builder: tuple[Callable[[Any], Any], Callable[[Any], Any]], server: FakeApiServer
) -> None:
    build, configuration_of = builder
    api = kubernetes_client.ApiClient(server.configuration())
    for given in (api, kubernetes_client.CoreV1Api(api), kubernetes_client.EventsV1Api(api)):
        made = build(given)
        try:
            assert configuration_of(made).host == server.url
        finally:
            made.close()


@pytest.mark.parametrize("builder", BUILDERS.values(), ids=list(BUILDERS))
def test_a_configuration_without_an_api_server_is_refused_alike(
    builder: tuple[Callable[[Any], Any], Callable[[Any], Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    build, _ = builder
    monkeypatch.setattr(kubernetes_client.Configuration, "_default", None)
    for given in (None, kubernetes_client.ApiClient(kubernetes_client.Configuration())):
        with pytest.raises(ApiNotConfigured, match="no API server: load a configuration first"):
            build(given)


def test_the_public_errors_are_the_wings_own() -> None:
    """Re-exported, not copied: a host catching the emitter module's names catches what the
    store's side raises too."""
    assert (ApiNotConfigured, SinkError, RequestDeadline) == (
        errors.ApiNotConfigured,
        errors.SinkError,
        errors.RequestDeadline,
    )
    assert issubclass(RequestDeadline, SinkError)
    assert issubclass(ApiNotConfigured, ValueError)
