"""The outbox dispatcher: delivers committed events that their runner did not (it crashed
between commit and delivery, or an emitter failed), from any number of replicas at once.

Each round claims a batch of undelivered events (on PostgreSQL with ``FOR UPDATE SKIP
LOCKED``, an object's events going to one replica at a time) and hands them to the delivery
every runner uses (one implementation, ADR 0092): each object's events in version order,
an object stopped at its first failed delivery (so a later event never overtakes an earlier
one; the rest stay leased to this replica and are retried next round), then marked. Delivery
is at least once, under each event's stable id.

Link intents in the outbox (ADR 0090) are applied to their targets through a
:class:`~lifecycle.Runner` on the same store (``Runner.redeliver_claimed``), each (source,
target) lane in commit order, and marked done once the target confirms them; a failed target
write stops its lane for the round.

Given a :class:`~lifecycle.telemetry.Telemetry`, a dispatcher reports what a runner's
``redeliver`` reports: each round that claimed something as a ``"redeliver"`` operation whose
``end`` holds the writes its link intents made (an idle poll is only its claim), its claims as
store calls (the rows claimed as ``redelivered``), and each hand-off to an emitter. The marks
and the intents' writes go through the runner that applies the intents: the default one reports
them to the same telemetry; a runner passed in reports them to its own, if it has one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from . import _link_intents
from ._core.errors import StoreError
from ._delivery import Delivery, marker, settle
from ._log import get_logger
from .emitters.base import Emitter
from .stores.base import Store
from .telemetry._instrument import (
    instrument_round,
    reporting_emitters,
    reporting_store,
    unreported,
)
from .telemetry._port import Guarded, Telemetry

if TYPE_CHECKING:
    from ._core.transition import Transition
    from ._protocol import Result
    from .runner import Runner


class Dispatcher:
    """Delivers ``store``'s outbox to ``emitters``; run one per replica.

    Give it its own store (its own ``owner``): the runner's store already delivers the
    events it commits, and a dispatcher sharing that owner could send them at the same time.
    ``runner`` applies link intents (default: a :class:`~lifecycle.Runner` on ``store``
    with ``emitters``, the default machines and links; give one on this same store); the
    events of the writes it makes are delivered by that runner.

    Args:
        store: the store whose outbox is delivered; its own instance (own ``owner``), so it
            never claims what a runner on the same database is delivering right now.
        emitters: where each event goes, in order, per object in commit order.
        batch: how many outbox rows one round claims (at least 1): a bound on what one
            round holds in memory and on what a crash mid-round hands back.
        logger: a structlog-style logger; by default the library's ``lifecycle.dispatch``.
        runner: applies the link intents found in the outbox; give one on this same store
            to share its machines and links, else one is made with the shipped ones.
        telemetry: the host's metrics and traces port; ``None`` wraps nothing.

    Raises:
        ValueError: ``batch`` below 1.
    """

    def __init__(
        self,
        store: Store,
        emitters: Sequence[Emitter],
        *,
        batch: int = 500,
        logger: Any = None,
        runner: Runner | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        if batch < 1:
            raise ValueError(f"batch must be at least 1, got {batch}")
        #: The host's telemetry behind its guard, or ``None`` (then nothing is wrapped).
        self.telemetry = Guarded(telemetry) if telemetry is not None else None
        self._plain_store = unreported(store)
        if self.telemetry is not None:
            store = reporting_store(store, self.telemetry)
            emitters = reporting_emitters(emitters, self.telemetry)
        self.store = store
        self.batch = batch
        self._log = get_logger("lifecycle.dispatch", logger)
        #: How this dispatcher hands events to ``emitters`` (the one order of every runner).
        self.delivery = Delivery(emitters, self._log)
        self._runner = runner
        if self.telemetry is not None:
            instrument_round(self, self.telemetry)

    @property
    def emitters(self) -> tuple[Emitter, ...]:
        """The emitters events are delivered to, in order."""
        return self.delivery.emitters

    @property
    def runner(self) -> Runner:
        """The runner that applies link intents (made on first use)."""
        if self._runner is None:
            from .runner import Runner

            self._runner = Runner(
                self._plain_store,
                self.emitters,
                logger=self._log,
                telemetry=self.telemetry.inner if self.telemetry is not None else None,
            )
        return self._runner

    def dispatch_once(self) -> int:
        """One round: claim, deliver per object in order, mark; apply link intents. Returns
        the events handed over (an acknowledging emitter confirms them later: :meth:`flush`)
        plus the intents confirmed.

        Returns:
            Events handed over plus link intents confirmed; 0 means nothing was waiting.

        Raises:
            StoreError: the store cannot be reached (nothing was claimed or marked).
        """
        delivered, results = self._round()
        return delivered + sum(1 for r in results if _link_intents.confirmed(r.error))

    def _round(self) -> tuple[int, list[Result]]:
        """:meth:`dispatch_once`: the events delivered and the results of the link intents it
        applied."""
        claimed = self.store.claim_undelivered(self.batch)
        if not claimed:
            return 0, []
        return self._dispatch(claimed)

    def _dispatch(self, claimed: Sequence[Transition]) -> tuple[int, list[Result]]:
        """Deliver and apply what a round claimed (what telemetry reports of a round)."""
        runner = self.runner
        intents = [t.id for t in claimed if t.intent is not None]
        delivered, results = runner.redeliver_claimed(claimed, self.delivery)
        if intents:  # what failed stays in the outbox for the next round, not in the runner
            runner.pending.drop(intents)
        return delivered, results

    def flush(self, timeout: float | None = 5.0) -> int:
        """Wait up to ``timeout`` seconds for what acknowledging emitters hold and mark every
        acknowledgement received (as :meth:`Runner.flush <lifecycle.Runner.flush>`).

        Args:
            timeout: seconds to wait at most; ``None`` waits until every answer is in.

        Returns:
            The events acknowledged and marked.
        """
        return self.delivery.flush(marker(self.store), timeout)

    def close(self, timeout: float = 5.0) -> int:
        """Close the acknowledging emitters within ``timeout``, mark what they acknowledged,
        and log how many events stay undelivered (see :meth:`Runner.close
        <lifecycle.Runner.close>`); returns that count. The store stays open (it is the
        host's), with every mark written: the ones the intents' runner holds too, and those
        the store holds back (``flush_marks``, ADR 0135).

        Args:
            timeout: seconds the close may take, emitters and the intents' runner together,
                so a host's shutdown stays within its own grace period.

        Returns:
            The events still undelivered: they stay in the outbox for the next dispatcher.
        """
        deadline = time.monotonic() + timeout
        left = self.delivery.close(marker(self.store), timeout)
        if self._runner is not None:
            self._runner.flush(max(deadline - time.monotonic(), 0.0))
        settle(self.store, close=False, log=self._log)
        return left

    def drain(self, rounds: int = 1000) -> int:
        """Rounds until a round delivers nothing (or ``rounds`` ran); returns the total. A
        round whose events an acknowledging emitter still holds waits for their answers
        (:meth:`flush`, bounded) before it counts as idle.

        Args:
            rounds: the most rounds run, so a store that keeps filling cannot hold the caller
                forever.

        Returns:
            The events delivered and intents confirmed, all rounds together.

        Raises:
            StoreError: the store cannot be reached.
        """
        total = 0
        for _ in range(rounds):
            n = self.dispatch_once()
            if n == 0 and self.delivery.in_flight():
                # an acknowledging emitter still holds what this round handed it: its answers
                # are the progress (marked in batches), so wait for them before calling it idle
                n = self.flush()
            total += n
            if n == 0:
                break
        return total

    def run(self, stop: threading.Event, *, interval: float = 1.0) -> None:
        """Dispatch until ``stop`` is set: back to back while there is work, every
        ``interval`` seconds when idle or when the store is unreachable (logged).

        Args:
            stop: set it (from another thread or a signal handler) to return after the
                current round.
            interval: seconds to wait between rounds when idle or after a store error: an
                unreachable store is retried, never fatal, so a database restart is ridden out.
        """
        while not stop.is_set():
            try:
                busy = self.dispatch_once() > 0
            except StoreError as e:
                self._log.warning("outbox dispatch failed; will retry", error=str(e))
                busy = False
            if not busy:
                stop.wait(interval)
