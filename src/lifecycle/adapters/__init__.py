"""Provider adapters: provider SDK calls in, Pod observations out.

The fake (:mod:`lifecycle.adapters.fake`) is exported here; the Modal
(:mod:`lifecycle.adapters.modal`) and AWS EC2 (:mod:`lifecycle.adapters.aws`) adapters import
their SDKs lazily (the ``modal`` and ``aws`` extras), so import them by module.
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
