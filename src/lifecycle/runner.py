"""The runner: feeds observations to machines, persists their statuses, emits their events.

:class:`Runner` is the synchronous driver of the write-then-emit protocol. Its decisions (read,
apply, compare, flips, commit with compare-and-set and retries, fallback), the delivery of
events and the durable links between machines are written once, inside the library, and shared
by every runner and the outbox dispatcher (ADR 0064, ADR 0092). :meth:`Runner.observe` moves
the data between those decisions and the store inline (the hot path);
:meth:`Runner.observe_many` and :meth:`Runner.redeliver` run the same decisions through the
sans-I/O driver that :class:`~lifecycle.AsyncRunner` awaits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from . import _link_intents
from ._core.errors import LifecycleError, StoreError
from ._core.machine import Machine
from ._core.observation import Observation
from ._core.refs import ObjectRef
from ._core.schema import check_store
from ._core.transition import Transition
from ._delivery import Delivery, Mark, Redelivery, marker, settle
from ._link_intents import PendingIntents
from ._protocol import Outcome, Result, RetryPolicy, Write
from ._runner_core import RunnerCore
from ._store_bounds import check_bounds
from .emitters.base import Emitter
from .stores.base import CommitStore, Store
from .stores.memory import MemoryStore
from .telemetry._instrument import (
    checked,
    reporting_emitters,
    reporting_store,
    unreported,
)

if TYPE_CHECKING:
    from . import _batch
else:

    class _Batch:
        """:mod:`lifecycle._batch`, imported at its first use (``observe_many``,
        ``redeliver``, finishing interrupted work): a host that only calls ``observe`` does
        not pay for the sans-I/O driver at import (ADR 0139)."""

        def __getattr__(self, name: str) -> Any:
            from . import _batch

            return getattr(_batch, name)

    _batch = _Batch()

__all__ = ["Outcome", "Redelivery", "Result", "RetryPolicy", "Runner"]


#: Builds a :class:`Result` from all its fields in order: the named tuple's own ``_make``,
#: which refuses a missing or an extra field (``tuple.__new__`` paid under 2 %; ADR 0154).
_result: Callable[[type[Result], tuple[Any, ...]], Result] = Result._make.__func__  # type: ignore[attr-defined]


class Runner(RunnerCore[CommitStore]):
    """Feeds observations to machines, persists their statuses, and emits their events.

    One runner serves every object of every registered machine. Its only state is the link
    intents whose target write failed (ADR 0090), and what a call interrupted after its
    commit left undelivered, unmarked or unapplied (ADR 0105): its next call finishes them
    first; they also stay in the store's outbox for :meth:`redeliver` and the ``Dispatcher``.

    ``store`` needs only ``load`` and a compare-and-set ``commit`` (:class:`CommitStore`, ADR
    0092). Without an outbox (no ``mark_delivered``/``claim_undelivered``) events are
    delivered inline only: an event an emitter refused is not sent again, and
    :meth:`redeliver` finds nothing.

    ``owns_store``: whether :meth:`close` (and the ``with`` block) closes the store. By
    default a runner owns only a store it built itself (no ``store`` given); a store passed
    in stays open, its delivery marks written (ADR 0135). Either way, nothing delivered is
    left to redeliver once :meth:`close` returns.

    Args:
        store: where statuses are read and committed; default a new
            :class:`~lifecycle.stores.MemoryStore`, for a test or a trial.
        emitters: where committed events go, each in turn, after the commit.
        machines: the machines served; default every machine the library ships.
        links: the links between machines whose intents the runner applies; default those
            between the shipped machines (:func:`~lifecycle.links.default_links`).
        policy: how a conflicting or failing commit is retried; default
            :class:`RetryPolicy`'s.
        logger: a structlog-style or standard logger for failed writes and emitters.
        policies: a policy per machine name, in place of ``policy``.
        check_schema: refuse at start a store holding records these machines cannot read,
            so a rollback fails at once rather than at the first old record (ADR 0088).
        telemetry: metrics and spans of every call (``lifecycle.telemetry``); ``None``
            leaves the hot path unwrapped.
        owns_store: whether :meth:`close` closes the store; default only a store the runner
            made itself.

    Raises:
        SchemaRefused: the store holds records the machines cannot read.
        StoreTooSmall: the store cannot hold what the machines accept (ADR 0144).
    """

    def _choose(self, store: CommitStore | None) -> CommitStore:
        return store if store is not None else MemoryStore()

    def _attach(self, given: CommitStore | None, chosen: CommitStore, check_schema: bool) -> None:
        if check_schema:  # refuse a store holding records these machines cannot read (ADR 0088)
            checked(self.telemetry, check_store, chosen, self.machines)
        check_bounds(chosen, self.machines)  # what the machines accept, the store holds (0144)
        self.store = chosen
        self._applying_links = False

    @property
    def store(self) -> Store:
        """Where statuses are read and committed (events are stamped with its epoch).

        Annotated as a complete :class:`~lifecycle.stores.Store`, which every shipped store
        is; a host's own :class:`CommitStore` has only what it defines (the runner itself
        looks its optional capabilities up by name)."""
        return cast(Store, self._store)

    @store.setter
    def store(self, store: CommitStore) -> None:
        # events are stamped with the epoch of the store itself, not looked up through the
        # telemetry's wrapper on every commit
        plain = unreported(store)
        if self.telemetry is not None:
            store = reporting_store(store, self.telemetry)
        self._store = store
        self._mark: Mark | None = marker(store)
        #: The memory store's ``commit_delivered``, which journals events that nobody waits
        #: for without queueing them (ADR 0170); ``None`` for any other store, a subclass
        #: that overrides ``commit``, or a wrapper.
        commit = getattr(store, "commit", None)
        self._commit_delivered: Callable[..., int] | None = (
            store.commit_delivered
            if isinstance(store, MemoryStore)
            and getattr(commit, "__func__", None) is MemoryStore.commit
            and getattr(commit, "__self__", None) is store
            else None
        )
        self.protocol.epoch_source = plain
        # acknowledgements that arrive while this runner is idle are marked all the same
        self.protocol.delivery.mark_when_idle(self._mark)

    @property
    def emitters(self) -> tuple[Emitter, ...]:
        return self.protocol.delivery.emitters

    @emitters.setter
    def emitters(self, emitters: Sequence[Emitter]) -> None:
        if self.telemetry is not None:
            emitters = reporting_emitters(emitters, self.telemetry)
        self.protocol.delivery.emitters = tuple(emitters)

    @property
    def policies(self) -> dict[str, RetryPolicy]:
        """Per machine name; else a machine's ``write_attempts`` caps ``policy``'s attempts."""
        return self.protocol.policies

    @property
    def pending(self) -> PendingIntents:
        """Link intents whose target write failed, retried at the start of the next call."""
        return self.protocol.pending

    def machine_for(self, ref: ObjectRef) -> Machine[Any]:
        """The machine that serves ``ref``'s kind.

        Args:
            ref: the object.

        Returns:
            Its machine.

        Raises:
            UnknownMachine: no machine serves the kind.
        """
        return self.protocol.machine_for(ref)

    def write_policy(self, machine: Machine[Any], observation: Observation) -> RetryPolicy:
        """The retry policy for writing ``observation`` on ``machine``: the runner's
        ``policies[machine.name]`` if given, else its ``policy`` with the machine's declared
        ``write_attempts``; one attempt for an observation a link writes directly (a conflict
        is not retried there: the link intent stays pending and the next pass writes it).

        Args:
            machine: the machine written.
            observation: what is written; a link's observation gets one attempt.

        Returns:
            The policy that commit retries under.
        """
        return self.protocol.write_policy(machine, observation)

    # -- the protocol, driven inline ------------------------------------------------------------
    def observe(self, ref: ObjectRef, observation: Observation) -> Result:
        """Apply ``observation`` to ``ref``'s status, commit it, then emit its flips.

        Raises a :class:`~lifecycle.LifecycleError` for input the machine refuses (unknown
        observation, no row in the table, a value outside the input bounds); the store is
        then untouched.

        Args:
            ref: the object observed; its kind picks the machine.
            observation: what was seen of it.

        Returns:
            What happened: committed, unchanged or failed, with the status, version, events and
            the link intents' results.

        Raises:
            LifecycleError: input the machine refuses; nothing was read or written.
        """
        protocol = self.protocol
        machine = protocol.admit(ref, observation)
        caught: tuple[Result, ...] = ()
        if protocol.pending and not self._applying_links:
            caught = self.catch_up()
        store = self._store
        # no emitter to hand events to, and a store that can say so: committed as delivered
        quiet = self._commit_delivered if protocol.delivery.silent else None
        write: Write | None = None
        actions: tuple[Transition, ...] = ()
        before: Any = None
        version = 0
        attempt = 0
        reading = False
        while True:
            attempt += 1
            try:
                record = store.load(machine, ref)
            except StoreError as e:
                error, reading = e, True
                break
            if record is None:
                before = machine.initial(ref)
                version = 0
            else:
                before = record.status
                version = record.version
            write = protocol.decide(machine, ref, observation, before, version)
            if attempt == 1 and machine.has_actions:
                actions = protocol.actions(machine, ref, before, observation, version)
            if write is None:
                return _result(Result, (
                    Outcome.UNCHANGED, ref, before, version, (), (), None, attempt, (), actions,
                    caught,
                ))  # fmt: skip
            after, _, transitions, intents, written = write
            try:
                if quiet is None:
                    committed = store.commit(machine, ref, version, after, observation, written)
                else:
                    committed = quiet(machine, ref, version, after, observation, written,
                                      len(transitions))  # fmt: skip
            except StoreError as e:
                error = e
                again = protocol.again(machine, observation, e, attempt)
                if again is None:
                    break
                again.pause()
                continue
            if transitions and quiet is None:
                try:
                    protocol.delivery.deliver(transitions, self._mark)
                except BaseException:  # interrupted after the commit (ADR 0105)
                    protocol.unfinished(transitions, intents)
                    raise
            return _result(Result, (
                Outcome.COMMITTED, ref, after, committed, transitions, (), None, attempt,
                self.apply_intents(intents) if intents else (), actions, caught,
            ))  # fmt: skip
        return protocol.lost(
            machine, ref, observation, before, version, write, error, attempt, actions, caught,
            reading=reading,
        )  # fmt: skip

    def observe_many(self, items: Iterable[tuple[ObjectRef, Observation]]) -> list[Result]:
        """Observe many objects at once: one :class:`Result` per item, in order.

        The protocol of :meth:`observe`, per object, with the reads and the writes of all
        objects grouped: on a store with ``load_many``/``commit_many`` (SQLite, PostgreSQL)
        each attempt reads them in one query and commits them in one transaction, every object
        with its own compare-and-set. A conflict retries that object alone (its machine's
        budget); a store error or an exhausted budget fails it with :meth:`observe`'s fallback.
        Committed events are delivered after the commit, then links are followed (as one batch
        again). Several items for one object are applied in order, in successive rounds; every
        object gets the results, events and status one :meth:`observe` per item, in order,
        would give it, linked objects included (ADR 0148).

        An observation a machine does not know raises before anything is read or written; an
        observation its table refuses in the object's state is that item's failed result
        (``error`` holds the :class:`~lifecycle.LifecycleError`), and the others proceed.
        Other stores commit one object at a time, with the same results.

        Args:
            items: ``(ref, observation)`` pairs; several of one object are applied in order.

        Returns:
            One result per item, in order.

        Raises:
            LifecycleError: an observation a machine does not know; nothing was read or written.
        """
        done: list[Result] = _batch.run(
            _batch.observe(self.protocol, self.protocol.pairs(items), refuse=False),
            self._store,
            self.protocol,
        )
        return done

    def redeliver(self, limit: int = 1000) -> Redelivery:
        """Send events that were committed but not delivered (a crash, a failing emitter).

        Returns how many were handed over to the emitters: a :class:`Redelivery`, an ``int``
        whose ``acknowledged`` says how many of them every emitter had confirmed when it
        returned (an acknowledging emitter, such as the Kubernetes one, answers later;
        :meth:`flush` waits for it). Each keeps the id it was committed under. Events
        another writer committed are leased to it for the store's lease (30 s by default): a
        store opened with the same ``owner`` takes its own back at once, any other finds them
        once the lease has run out — so call this periodically, not only at start-up. Link
        intents found in the outbox are applied too (ADR 0090). A store without an outbox has
        nothing to redeliver.

        Args:
            limit: the most outbox rows claimed in this call, a bound on what it holds in memory.

        Returns:
            How many events were handed over, and how many acknowledged.
        """
        return self._redeliver(limit)[0]

    def _redeliver(self, limit: int) -> tuple[Redelivery, list[Result]]:
        """:meth:`redeliver`, with the results of the link intents it applied (what
        telemetry reports of it)."""
        claim = getattr(self._store, "claim_undelivered", None)
        return self.redeliver_claimed([] if claim is None else claim(limit))

    def redeliver_claimed(
        self, claimed: Sequence[Transition], delivery: Delivery | None = None
    ) -> tuple[Redelivery, list[Result]]:
        """Deliver claimed outbox rows (to ``delivery``'s emitters, default this runner's) and
        apply their link intents: the events handed over and the intents' results. What an
        interrupted call left (ADR 0105) is finished first.

        Args:
            claimed: outbox rows claimed from the store.
            delivery: the emitters to send to (the dispatcher's); default this runner's.

        Returns:
            The events handed over, and the results of the link intents applied.
        """
        if not claimed and not self.protocol.backlog:
            return Redelivery(0), []
        done: tuple[Redelivery, list[Result]] = _batch.run(
            _batch.redeliver(self.protocol, claimed, delivery), self._store, self.protocol
        )
        return done

    def flush(self, timeout: float | None = 5.0) -> int:
        """Wait up to ``timeout`` seconds for the events an acknowledging emitter (the
        Kubernetes one) still holds, and mark every acknowledgement received so far (they are
        otherwise marked in batches by later deliveries); how many were marked (ADR 0121).

        Args:
            timeout: the most seconds waited; ``None`` waits until every event is answered.

        Returns:
            How many events were marked delivered.
        """
        return self.protocol.delivery.flush(self._mark, timeout)

    def close(self, timeout: float = 5.0) -> int:
        """Close the acknowledging emitters within ``timeout`` seconds in all, mark what they
        acknowledged, and log how many events stay undelivered in the outbox (the next
        :meth:`redeliver` sends them); returns that count.

        Every mark is written before it returns (ADR 0135): a store the runner owns
        (``owns_store``) is closed, any other has the marks it holds back written
        (``flush_marks``) and stays open. A process that exits right after has nothing it
        delivered to send again.

        Args:
            timeout: the most seconds spent closing the emitters, in all.

        Returns:
            How many events were marked delivered while closing.
        """
        left = self.protocol.delivery.close(self._mark, timeout)
        if not self._closed_store:
            self._closed_store = self.owns_store
            settle(self._store, close=self.owns_store, log=self._log)
        return left

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def catch_up(self) -> tuple[Result, ...]:
        """Finish what an interrupted call left (its events, marks, ADR 0105), then retry the
        link intents whose target write failed (this runner's pending ones); :meth:`observe`
        calls it first whenever there are any. Returns the intents' results.

        Returns:
            The results of the link intents retried.
        """
        protocol = self.protocol
        pending = protocol.pending
        if not pending.retrying.acquire(blocking=False):
            return ()  # another thread is at it
        try:
            if protocol.backlog:
                _batch.run(_batch.finish(protocol), self._store, protocol)
            return self.apply_intents(pending.take()) if len(pending) else ()
        finally:
            pending.retrying.release()

    def apply_intents(self, intents: Sequence[Transition]) -> tuple[Result, ...]:
        """Apply link intents in order, depth-first (each through :meth:`observe`); mark
        those their target confirmed, keep the others pending. An intent whose lane (source,
        target) has an earlier pending one waits, so a lane's intents apply in commit order.

        Args:
            intents: link intents, in commit order.

        Returns:
            One result per intent applied.
        """
        outer, self._applying_links = self._applying_links, True
        protocol = self.protocol
        try:
            rounds = _link_intents.Rounds(protocol.pending, intents, batch=False)
            results: list[Result] = []
            try:
                while chosen := rounds.next():
                    for i in chosen:
                        result = self._apply(intents[i])
                        results.append(result)
                        rounds.settle(i, result.error)
                if rounds.done and self._mark is not None:
                    try:
                        self._mark(rounds.done)
                    except StoreError as e:
                        protocol.delivery.unmarked(e, "link intents done")
            except BaseException:  # interrupted (ADR 0105): what is not settled stays pending
                rounds.interrupted(protocol.backlog)
                raise
            return tuple(results)
        finally:
            self._applying_links = outer

    def due(self, now: datetime) -> list[ObjectRef]:
        """The objects in the store whose next :class:`~lifecycle.Tick` is due at ``now``
        (each machine's :meth:`~lifecycle.Machine.next_tick` at or before ``now``), machine
        by machine: feed each a ``Tick(at=now)``.

        Read from the store's records (``records``, a :class:`~lifecycle.stores.JournalStore`
        capability; a store without it is a ``TypeError``), so the answer survives a restart
        and the hot path keeps no per-object state. It reads every record of every machine
        with a timer row: a host with many objects requeues each from its
        ``Result.next_tick`` and calls this once at start-up
        (ADR 0149).

        Args:
            now: the host's time now.

        Returns:
            The refs due, by machine.

        Raises:
            TypeError: the store has no ``records``.
        """
        from . import _requeue

        records = getattr(self._store, "records", None)
        if records is None:
            raise TypeError(
                f"{type(self._store).__name__} has no records(machine): Runner.due reads them; "
                "requeue each object from its Result.next_tick instead"
            )
        return _requeue.due(self.machines.values(), records, now)

    def resync(self, ref: ObjectRef, at: datetime) -> tuple[Result, ...]:
        """Feed ``ref``'s committed status to the machines linked to it again, as of ``at``.

        Not needed to recover a linked write: every link observation is an intent in its source's
        commit, applied until its target confirms it (ADR 0090). This re-derives them from the
        committed status as if the object were new (a host that edited a target behind the
        library's back uses it). Link observations carry the whole committed source status, so
        feeding them again is safe: a target that is already in step changes nothing.

        Args:
            ref: the source object.
            at: the time the link observations carry.

        Returns:
            The results of the link observations applied; empty when ``ref`` was never committed.
        """
        machine = self.machines.for_kind(ref.kind)
        record = self._store.load(machine, ref)
        if record is None:
            return ()
        intents = _link_intents.derive(
            self.protocol.links.get(machine.name, ()),
            ref,
            machine.name,
            machine.initial(ref),
            record.status,
            at,
            record.version,
            0,
        )
        return tuple(self._apply(t) for t in intents)

    # -- internals --------------------------------------------------------------------------
    def _apply(self, t: Transition) -> Result:
        """Observe one intent on its target (a refusal is that target's failed result)."""
        assert t.intent is not None
        target = t.intent.target
        try:
            machine = self.protocol.machine_for(target)
            return self.observe(target, _link_intents.observation_of(machine, t))
        except LifecycleError as e:
            return self.protocol.refused_link(t, e)
