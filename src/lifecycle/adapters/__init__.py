"""Provider adapters: provider SDK calls in, Pod observations out.

Every adapter implements one port, :class:`Provider` (``provision`` / ``observe`` /
``terminate``, generic over its spec type; :class:`AsyncProvider` for asyncio hosts), and passes
:func:`lifecycle.testing.check_provider`. The Modal (:mod:`lifecycle.adapters.modal`) and AWS
EC2 (:mod:`lifecycle.adapters.aws`) adapters import their SDKs lazily (the ``modal`` and
``aws`` extras), so import them by module. The fakes (a fake provider, a fake Modal SDK, a
fake EC2 client) are test doubles: :mod:`lifecycle.testing.fakes`.
"""

from .base import (
    GONE_EXIT_CODES,
    InstanceObservation,
    InstanceState,
    ProviderError,
    classify_exit,
    state_observation,
)
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
