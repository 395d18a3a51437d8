"""The errors of a request to the Kubernetes API server and of the client that makes it, raised
by the store's and the emitter's sides alike (both are re-exported where the public API has
them: :mod:`lifecycle.emitters.kubernetes`)."""

from __future__ import annotations

from .._core.errors import LifecycleError

__all__ = ["ApiNotConfigured", "RequestDeadline", "SinkError"]


class ApiNotConfigured(LifecycleError, ValueError):
    """The Kubernetes client has no API server to send to (no kubeconfig or in-cluster
    configuration was loaded): refused when the sink is built, not at every send."""


class SinkError(LifecycleError):
    """Base of the errors a sink raises to say what the API server answered."""


class RequestDeadline(SinkError):
    """No complete answer within the request's total deadline (or the sink was closed while
    it waited): the connection was cut. Retried, each wait longer than the one before."""

    #: the correlator lengthens the wait before each further try (ADR 0142)
    backoff = True
