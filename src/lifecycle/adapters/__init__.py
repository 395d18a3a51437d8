"""Provider adapters: provider SDK calls in, Pod observations out.

Every adapter implements one port, :class:`Provider` (``provision`` / ``observe`` /
``terminate``, generic over its spec type; :class:`AsyncProvider` for asyncio hosts), and passes
:func:`lifecycle.testing.check_provider`. The fake (:mod:`lifecycle.adapters.fake`) is exported
here; the Modal (:mod:`lifecycle.adapters.modal`) and AWS EC2 (:mod:`lifecycle.adapters.aws`)
adapters import their SDKs lazily (the ``modal`` and ``aws`` extras), so import them by module.
"""

from .base import (
    GONE_EXIT_CODES,
    InstanceObservation,
    InstanceState,
    ProviderError,
    classify_exit,
    state_observation,
)
from .fake import FakeInstance, FakeNode, FakeProvider, FakeSpec
from .provider import (
    AsyncProvider,
    PollOutcome,
    Provider,
    ProvisionOutcome,
    TerminateOutcome,
    Tracked,
)

__all__ = [
    "GONE_EXIT_CODES",
    "AsyncProvider",
    "FakeInstance",
    "FakeNode",
    "FakeProvider",
    "FakeSpec",
    "InstanceObservation",
    "InstanceState",
    "PollOutcome",
    "Provider",
    "ProviderError",
    "ProvisionOutcome",
    "TerminateOutcome",
    "Tracked",
    "classify_exit",
    "state_observation",
]
