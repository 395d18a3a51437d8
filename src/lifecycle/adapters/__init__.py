"""Provider adapters: provider SDK calls in, Pod observations out.

Only the fake ships now (:mod:`lifecycle.adapters.fake`); Modal and AWS adapters import their
SDKs lazily (the ``modal`` and ``aws`` extras) and reuse :mod:`lifecycle.adapters.base`.
"""

from .base import (
    GONE_EXIT_CODES,
    InstanceObservation,
    InstanceState,
    ProviderError,
    classify_exit,
    state_observation,
)
from .fake import FakeInstance, FakeNode, FakeProvider

__all__ = [
    "GONE_EXIT_CODES",
    "FakeInstance",
    "FakeNode",
    "FakeProvider",
    "InstanceObservation",
    "InstanceState",
    "ProviderError",
    "classify_exit",
    "state_observation",
]
