"""The official ``kubernetes`` client, as the store's and the emitter's sides build it: the
module (imported on first use: the ``kubernetes`` extra), the host's configuration (refused
when it names no API server) and an ``ApiClient`` of the library's own on a copy of it."""

from __future__ import annotations

import copy
from typing import Any

from .._core.errors import MissingExtra
from .errors import ApiNotConfigured

__all__ = ["configuration", "kubernetes_client", "own_client"]


def kubernetes_client(needs: str) -> Any:
    """The ``kubernetes.client`` module; :class:`~lifecycle.MissingExtra` naming the
    ``kubernetes`` extra (and ``needs``, what wanted it) when it is not installed."""
    try:
        import kubernetes.client  # type: ignore[import-untyped]
    except ImportError as e:
        raise MissingExtra.of(e, needs, "kubernetes") from e
    return kubernetes.client


def configuration(api: Any, needs: str) -> Any:
    """The client configuration of ``api`` -- an ``ApiClient``, an API object over one
    (``EventsV1Api``, ``CoreV1Api``), or ``None`` for the loaded default (a copy) -- refused
    with :class:`ApiNotConfigured` when it names no API server."""
    client = kubernetes_client(needs)
    if api is None:
        found = client.Configuration.get_default_copy()
    else:  # an API object holds its ApiClient as ``api_client``
        found = getattr(api, "api_client", api).configuration
    if not getattr(found, "host", ""):
        raise ApiNotConfigured(
            "the Kubernetes client has no API server: load a configuration first "
            "(kubernetes.config.load_incluster_config() or load_kube_config()), or pass "
            "an ApiClient"
        )
    return found


def own_client(configuration: Any) -> Any:
    """An ``ApiClient`` of the library's own on a copy of ``configuration``: the client's
    retries off (the caller's tries are the one retry policy) and its pools the ones that
    bound each request (:mod:`lifecycle._k8s_api.pools`, where urllib3 is first imported),
    so nothing of the host's own calls changes."""
    client = kubernetes_client("an API client")  # imported already, with its configuration
    from .pools import bound  # urllib3: it came with the client

    own = copy.deepcopy(configuration)
    own.retries = False
    api_client = client.ApiClient(own)
    bound(api_client.rest_client.pool_manager)
    return api_client
