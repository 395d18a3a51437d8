"""What :class:`~lifecycle.Runner` and :class:`~lifecycle.AsyncRunner` are built from: one
constructor (the arguments both take, the protocol they configure, telemetry) and the
read-only views of that protocol. Each runner says only how it holds its store
(:meth:`RunnerCore._choose`, :meth:`RunnerCore._attach`): the synchronous one calls it
inline, the asyncio one awaits it (ADR 0154)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar, Generic, TypeVar

from ._core.machine import Machine
from ._link import Link
from ._log import get_logger
from ._protocol import RetryPolicy, WriteProtocol
from .emitters.base import Emitter
from .machines import MachineRegistry
from .telemetry._instrument import instrument, reporting_emitters
from .telemetry._port import Guarded, Telemetry

__all__ = ["RunnerCore"]

#: The store a runner is given (a ``CommitStore``; for the asyncio runner an awaited one too).
StoreT = TypeVar("StoreT")


class RunnerCore(Generic[StoreT]):
    """The constructor and protocol views both runners share."""

    #: Whether a runner owns (closes) a store passed in when ``owns_store`` is not given; a
    #: store it built itself it always owns.
    owns_given_store: ClassVar[bool] = False
    #: Whether telemetry's spans nest (the synchronous runner's calls run inside each other).
    nested_spans: ClassVar[bool] = True

    def __init__(
        self,
        store: StoreT | None = None,
        emitters: Sequence[Emitter] = (),
        *,
        machines: MachineRegistry | None = None,
        links: Iterable[Link] | None = None,
        policy: RetryPolicy | None = None,
        logger: Any = None,
        policies: Mapping[str, RetryPolicy] | None = None,
        check_schema: bool = True,
        telemetry: Telemetry | None = None,
        owns_store: bool | None = None,
    ) -> None:
        #: The host's telemetry behind its guard (``lifecycle.telemetry``), or ``None``: then
        #: nothing is wrapped and the hot path is the plain one.
        self.telemetry = Guarded(telemetry) if telemetry is not None else None
        if owns_store is None:
            owns_store = store is None or self.owns_given_store
        #: Whether :meth:`close` closes the store (else it writes the marks the store holds).
        self.owns_store = owns_store
        self._closed_store = False
        #: structlog-style logger for failed writes and emitters (a dry run passes a silent one)
        self._log = get_logger("lifecycle.runner", logger)  # a stdlib logger is wrapped
        chosen = self._choose(store)
        #: Every decision of the protocol, with this runner's configuration.
        self.protocol = WriteProtocol.configured(
            emitters,
            machines=machines,
            links=links,
            policy=policy,
            policies=policies,
            log=self._log,
            epoch_source=chosen,
        )
        self._attach(store, chosen, check_schema)
        if self.telemetry is not None:
            delivery = self.protocol.delivery
            delivery.emitters = tuple(reporting_emitters(delivery.emitters, self.telemetry))
            instrument(self, self.telemetry, nested=self.nested_spans)

    def _choose(self, store: StoreT | None) -> Any:
        """The store this runner calls, for ``store`` as given (``None``: its own)."""
        raise NotImplementedError

    def _attach(self, given: StoreT | None, chosen: Any, check_schema: bool) -> None:
        """Hold ``chosen`` (``given`` as passed in), after the start-up checks (ADR 0088,
        ADR 0144) and behind telemetry's wrapper if there is one."""
        raise NotImplementedError

    @property
    def emitters(self) -> tuple[Emitter, ...]:
        return self.protocol.delivery.emitters

    @property
    def machines(self) -> MachineRegistry:
        return self.protocol.machines

    @property
    def policy(self) -> RetryPolicy:
        return self.protocol.policy

    def policy_for(self, machine: Machine[Any]) -> RetryPolicy:
        """The retry policy for ``machine``'s writes: ``policies[name]`` if given, else the
        runner's policy with the machine's declared ``write_attempts`` (if any).

        Args:
            machine: the machine written.

        Returns:
            The policy its commits retry under.
        """
        return self.protocol.policy_for(machine)
