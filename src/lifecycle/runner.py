"""The write-then-emit protocol: read, apply, commit with CAS (retrying conflicts), then emit.

    for attempt in 1..policy.attempts:
        record = store.load(ref) or (machine.initial(ref), version 0)
        status = machine.apply(record.status, observation)
        if status == record.status: return UNCHANGED
        flips  = machine.flips(record.status, status)       # inside the attempt
        try:   version = store.commit(ref, expected=record.version, ...)
        except Conflict: continue
        except StoreError: fallback(flips); return FAILED
        deliver(flips stamped with version)                 # after commit
        return COMMITTED
    fallback(flips); return FAILED

Events are computed against the status read in the attempt that wins, so a concurrent writer
that already made the flip suppresses ours. Nothing is emitted for a write that did not land,
except one fallback Warning (``<Reason>StatusUpdateFailed``) when the lost write carried a
Warning flip: people must still hear that something failed, without being told it was recorded.
"""

from __future__ import annotations

import enum
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple

import attrs

from . import _cascade
from ._cascade import PendingIntents
from ._core.bounds import check_ref
from ._core.errors import (
    CommitUnknown,
    Conflict,
    LifecycleError,
    StoreError,
    UnknownObservation,
    apply_failed,
)
from ._core.machine import Machine
from ._core.observation import Observation, Tick
from ._core.refs import EventType, ObjectRef
from ._core.schema import check_store
from ._core.serde import validate as check_observation
from ._core.transition import Flip, Transition, stamp, store_epoch
from ._log import get_logger
from .emitters.base import Emitter
from .links import Link, default_links
from .machines import MachineRegistry, default_registry
from .stores.base import Store
from .stores.memory import MemoryStore

_log = get_logger("lifecycle.runner")


class Outcome(enum.Enum):
    COMMITTED = "committed"
    UNCHANGED = "unchanged"
    FAILED = "failed"


@attrs.frozen(slots=True)
class RetryPolicy:
    """How often a conflicting write is retried, and how long to wait between attempts.

    The default mirrors client-go's ``retry.DefaultRetry`` in count (5 attempts) and waits
    10 ms (with 10 % jitter) between them.
    """

    attempts: int = 5
    backoff: float = 0.01
    jitter: float = 0.1
    sleep: Callable[[float], None] = time.sleep

    def __attrs_post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts must be at least 1, got {self.attempts}")
        if self.backoff < 0 or self.jitter < 0:
            raise ValueError("backoff and jitter must not be negative")

    def pause(self) -> None:
        if self.backoff:
            self.sleep(self.backoff * (1 + random.uniform(-self.jitter, self.jitter)))


class Result(NamedTuple):
    """What one observation did. ``transitions`` were committed (and handed to emitters);
    ``fallback`` holds the Warning sent instead when the write failed; ``cascade`` holds the
    results of linked machines (a Pod's NodeClaim) that this commit fed.

    An immutable named tuple (one is made per observation, so it is the cheapest record
    Python has; see ADR 0067): read it by field name."""

    outcome: Outcome
    ref: ObjectRef
    status: Any
    version: int
    transitions: tuple[Transition, ...] = ()
    fallback: tuple[Transition, ...] = ()
    error: Exception | None = None
    attempts: int = 1
    cascade: tuple[Result, ...] = ()
    #: Action events (not transitions, no id) sent for this observation before its write.
    actions: tuple[Transition, ...] = ()
    #: Results of earlier cascade writes that had failed, applied before this observation
    #: (the runner's pending intents, ADR 0090).
    caught_up: tuple[Result, ...] = ()

    @property
    def committed(self) -> bool:
        return self.outcome is Outcome.COMMITTED

    def all_transitions(self) -> list[Transition]:
        """This result's events and those of its cascade, in the order they were emitted."""
        out: list[Transition] = []
        for r in self.caught_up:
            out.extend(r.all_transitions())
        out += [*self.actions, *self.transitions, *self.fallback]
        for r in self.cascade:
            out.extend(r.all_transitions())
        return out


class Runner:
    """Feeds observations to machines, persists their statuses, and emits their events.

    One runner serves every object of every registered machine. Its only state is the cascade
    intents whose target write failed (ADR 0090): they are retried at the start of its next
    call, and stay in the store's outbox for :meth:`redeliver` and the ``Dispatcher``.
    """

    def __init__(
        self,
        store: Store | None = None,
        emitters: Sequence[Emitter] = (),
        *,
        machines: MachineRegistry | None = None,
        links: Iterable[Link] | None = None,
        policy: RetryPolicy | None = None,
        logger: Any = None,
        policies: Mapping[str, RetryPolicy] | None = None,
        check_schema: bool = True,
    ) -> None:
        self.store: Store = store if store is not None else MemoryStore()
        #: what events are stamped with the epoch of (``store_epoch``); AsyncRunner's store
        self.epoch_source: object = self.store
        self.emitters = tuple(emitters)
        self.machines = machines if machines is not None else default_registry()
        self.policy = policy if policy is not None else RetryPolicy()
        #: Per machine name; else a machine's ``write_attempts`` caps ``policy``'s attempts.
        self.policies: dict[str, RetryPolicy] = dict(policies or {})
        #: structlog-style logger for failed writes and emitters (a dry run passes a silent one)
        self._log = logger if logger is not None else _log
        self._links: dict[str, list[Link]] = {}
        direct: set[type[Observation]] = set()
        for link in default_links() if links is None else links:
            self._links.setdefault(link.source, []).append(link)
            direct |= link.direct
        #: Observations that are another controller's direct write: one attempt (ADR 0090).
        self._direct = frozenset(direct)
        #: Cascade intents whose target write failed, retried at the start of the next call.
        self.pending = PendingIntents()
        self._in_cascade = False
        if check_schema:  # refuse a store holding records these machines cannot read (ADR 0088)
            check_store(self.store, self.machines)

    def machine_for(self, ref: ObjectRef) -> Machine[Any]:
        return self.machines.for_kind(ref.kind)

    def write_policy(self, machine: Machine[Any], observation: Observation) -> RetryPolicy:
        """The retry policy for writing ``observation`` on ``machine``: one attempt for an
        observation a link declares a direct write (a conflict is not retried: the cascade
        intent stays pending and the next pass writes it again), else :meth:`policy_for`."""
        policy = self.policy_for(machine)
        if observation.__class__ in self._direct and policy.attempts != 1:
            return attrs.evolve(policy, attempts=1)
        return policy

    def policy_for(self, machine: Machine[Any]) -> RetryPolicy:
        """The retry policy for ``machine``'s writes: ``policies[name]`` if given, else the
        runner's policy with the machine's declared ``write_attempts`` (if any)."""
        chosen = self.policies.get(machine.name)
        if chosen is not None:
            return chosen
        if machine.write_attempts is not None and machine.write_attempts != self.policy.attempts:
            chosen = attrs.evolve(self.policy, attempts=machine.write_attempts)
            self.policies[machine.name] = chosen
            return chosen
        return self.policy

    # -- the protocol -----------------------------------------------------------------------
    def observe(self, ref: ObjectRef, observation: Observation) -> Result:
        """Apply ``observation`` to ``ref``'s status, commit it, then emit its flips.

        Raises a :class:`~lifecycle.LifecycleError` for input the machine refuses (unknown
        observation, no row in the table, a value outside the input bounds); the store is
        then untouched.
        """
        check_ref(ref)
        machine = self.machine_for(ref)
        if observation.__class__ not in machine.accepted:
            raise UnknownObservation(
                f"{machine.name}: {observation.__class__.__name__} is not one of its "
                f"observations ({', '.join(sorted(machine.vocabulary))})"
            )
        check_observation(observation)
        caught: tuple[Result, ...] = ()
        if self.pending and not self._in_cascade:
            caught = self.catch_up()
        flips: tuple[Flip, ...] = ()
        actions: tuple[Transition, ...] = ()
        before: Any = None
        version = 0
        error: StoreError | None = None
        policy: RetryPolicy | None = None  # looked up on the first conflict only
        store = self.store
        links = self._links.get(machine.name)
        intents: tuple[Transition, ...] = ()
        attempt = 0
        while True:
            attempt += 1
            try:
                record = store.load(machine, ref)
            except StoreError as e:
                error = e
                break
            if record is None:
                before = machine.initial(ref)
                version = 0
            else:
                before = record.status
                version = record.version
            try:
                after = machine.apply(before, observation)
            except LifecycleError:
                raise
            except Exception as e:  # a machine's own failure: typed, nothing written
                raise apply_failed(machine.name, ref, observation, e) from e
            if attempt == 1 and machine.has_actions:
                actions = self._actions(machine, ref, before, observation, version)
            if after is before or after == before:
                return Result(
                    Outcome.UNCHANGED,
                    ref,
                    before,
                    version,
                    (),
                    (),
                    None,
                    attempt,
                    (),
                    actions,
                    caught,
                )
            try:
                flips = machine.flips(before, after)
            except LifecycleError:
                raise
            except Exception as e:
                raise apply_failed(machine.name, ref, observation, e) from e
            transitions = (
                stamp(flips, ref, machine.name, version + 1, observation.at, store_epoch(store))
                if flips
                else ()
            )
            written = transitions
            if links is not None:
                intents = _cascade.derive(
                    links,
                    ref,
                    machine.name,
                    before,
                    after,
                    observation.at,
                    version + 1,
                    len(transitions),
                    store_epoch(store),
                )
                if intents:
                    written = transitions + intents
            try:
                committed = store.commit(machine, ref, version, after, observation, written)
            except Conflict as e:
                error = e
                if policy is None:
                    policy = self.write_policy(machine, observation)
                if attempt >= policy.attempts:
                    break
                policy.pause()
                continue
            except StoreError as e:
                error = e
                break
            if transitions:
                self._deliver(transitions)
            cascade = self._cascade(intents) if intents else ()
            return Result(
                Outcome.COMMITTED,
                ref,
                after,
                committed,
                transitions,
                (),
                None,
                attempt,
                cascade,
                actions,
                caught,
            )
        assert error is not None
        self._log.warning("status write failed", ref=str(ref), uid=ref.uid, error=str(error))
        fallback = self._fallback(ref, machine, flips, version, observation, error, before)
        self._send(fallback)
        return Result(
            Outcome.FAILED,
            ref,
            None,
            version,
            fallback=fallback,
            error=error,
            attempts=attempt,
            actions=actions,
            caught_up=caught,
        )

    def observe_many(self, items: Iterable[tuple[ObjectRef, Observation]]) -> list[Result]:
        """Observe many objects at once: one :class:`Result` per item, in order.

        The protocol of :meth:`observe`, per object, with the reads and the writes of all
        objects grouped: on a store with ``load_many``/``commit_many`` (SQLite, PostgreSQL)
        each attempt reads them in one query and commits them in one transaction, every object
        with its own compare-and-set. A conflict retries that object alone (its machine's
        budget); a store error or an exhausted budget fails it with :meth:`observe`'s fallback.
        Committed events are delivered after the commit, then links are followed (as one batch
        again). Several items for one object are applied in order, in successive rounds.

        An observation a machine does not know raises before anything is read or written; an
        observation its table refuses in the object's state is that item's failed result
        (``error`` holds the :class:`~lifecycle.LifecycleError`), and the others proceed.
        Other stores commit one object at a time, with the same results.
        """
        from ._batch import protocol, run

        return run(protocol(self, list(items), refuse=False), self.store)

    def redeliver(self, limit: int = 1000) -> int:
        """Send events that were committed but not delivered (a crash, a failing emitter).

        Returns how many were delivered. Each keeps the id it was committed under. Events
        another writer committed are leased to it for the store's lease (30 s by default): a
        store opened with the same ``owner`` takes its own back at once, any other finds them
        once the lease has run out — so call this periodically, not only at start-up.
        """
        pending = self.store.claim_undelivered(limit)
        if not pending:
            return 0
        events, intents = _cascade.split(pending)
        delivered = self._deliver(events)
        if intents:  # cascade writes not confirmed yet (ADR 0090): apply them, in order
            self.pending.drop(t.id for t in intents)
            self._cascade(intents)
        return delivered

    def catch_up(self) -> tuple[Result, ...]:
        """Retry the cascade intents whose target write failed (this runner's pending ones);
        :meth:`observe` calls it first whenever there are any. Returns their results."""
        if not self.pending.retrying.acquire(blocking=False):
            return ()  # another thread is at it
        try:
            return self._cascade(self.pending.take())
        finally:
            self.pending.retrying.release()

    def resync(self, ref: ObjectRef, at: datetime) -> tuple[Result, ...]:
        """Feed ``ref``'s committed status to the machines linked to it again, as of ``at``.

        Not needed to recover a cascade: every link observation is an intent in its source's
        commit, applied until its target confirms it (ADR 0090). This re-derives them from the
        committed status as if the object were new (a host that edited a target behind the
        library's back uses it). Link observations carry the whole committed source status, so
        feeding them again is safe: a target that is already in step changes nothing.
        """
        machine = self.machines.for_kind(ref.kind)
        record = self.store.load(machine, ref)
        if record is None:
            return ()
        return self._follow(machine, ref, machine.initial(ref), record.status, Tick(at=at))

    # -- internals --------------------------------------------------------------------------
    def _send(self, transitions: Sequence[Transition]) -> bool:
        """Hand each event to every emitter; whether every emitter took every event."""
        return not self._failed(transitions)

    def _failed(self, transitions: Sequence[Transition]) -> set[str]:
        """Hand each event to every emitter; the ids of events some emitter refused."""
        failed: set[str] = set()
        for t in transitions:
            for emitter in self.emitters:
                try:
                    emitter.emit(t)
                except Exception as e:  # an emitter must never undo a commit
                    failed.add(t.id)
                    self._log.warning(
                        "emitter failed; event stays in the outbox",
                        id=t.id,
                        emitter=type(emitter).__name__,
                        error=repr(e),
                    )
        return failed

    def _cascade(self, intents: Sequence[Transition]) -> tuple[Result, ...]:
        """Apply cascade intents in order; mark those their target confirmed, keep the others
        pending. An intent whose lane (source, target) has an earlier pending one waits."""
        outer, self._in_cascade = self._in_cascade, True
        try:
            blocked = self.pending.lanes() if self.pending else set()
            results: list[Result] = []
            done: list[str] = []
            for t in intents:
                key = _cascade.lane(t)
                if key in blocked:
                    self.pending.hold(t)
                    continue
                result = self._apply(t)
                results.append(result)
                if _cascade.confirmed(result.error):
                    done.append(t.id)
                else:
                    blocked.add(key)
                    self.pending.hold(t)
            if done:
                self._mark(done)
            return tuple(results)
        finally:
            self._in_cascade = outer

    def _apply(self, t: Transition) -> Result:
        """Observe one intent on its target (a refusal is that target's failed result)."""
        assert t.intent is not None
        target = t.intent.target
        try:
            machine = self.machine_for(target)
            return self.observe(target, _cascade.observation_of(machine, t))
        except LifecycleError as e:
            self._log.warning(
                "linked observation refused", source=str(t.ref), target=str(target), error=str(e)
            )
            return Result(Outcome.FAILED, target, None, 0, error=e)

    def _mark(self, ids: Sequence[str]) -> None:
        try:
            self.store.mark_delivered(ids)
        except StoreError as e:
            self._log.warning("could not mark cascade intents done; they will repeat", error=str(e))

    def _deliver(self, transitions: Sequence[Transition]) -> int:
        if not transitions:
            return 0
        failed = self._failed(transitions)
        delivered = [t.id for t in transitions]
        if failed:
            delivered = [i for i in delivered if i not in failed]
        if delivered:
            try:
                self.store.mark_delivered(delivered)
            except StoreError as e:
                self._log.warning("could not mark events delivered; they will repeat", error=str(e))
        return len(delivered)

    def _actions(
        self,
        machine: Machine[Any],
        ref: ObjectRef,
        status: Any,
        observation: Observation,
        version: int,
    ) -> tuple[Transition, ...]:
        """Send the row's action events now: they touch no status and do not wait for (or
        depend on) the write. Best effort: not queued, no id, may repeat."""
        flips = machine.actions(status, observation)
        if not flips:
            return ()
        sent = tuple(
            t._replace(action=True)
            for t in stamp(flips, ref, machine.name, version, observation.at)
        )
        self._send(sent)
        return sent

    @staticmethod
    def _fallback(
        ref: ObjectRef,
        machine: Machine[Any],
        flips: tuple[Flip, ...],
        version: int,
        observation: Observation,
        error: Exception,
        before: Any,
    ) -> tuple[Transition, ...]:
        """The fallback Warning for a lost write from ``before``: sent only where the row taken
        declares ``fallback=True`` (a write no later pass redoes) and a Warning flip was lost.
        None for a :class:`~lifecycle.CommitUnknown`: that write may have landed."""
        if isinstance(error, CommitUnknown):
            return ()
        warning = next((f for f in flips if f.type is EventType.WARNING), None)
        if warning is None or not machine.select(before, observation).fallback:
            return ()  # the next pass redoes this write and sends the real Warning
        message = machine.fallback_message(ref, warning, error)
        return (
            Transition(
                ref,
                machine.name,
                warning.source,
                warning.target,
                f"{warning.reason}StatusUpdateFailed",
                EventType.WARNING,
                message,
                version,
                observation.at,
                0,
                warning.condition,
                fallback=True,
                controller=warning.controller,
            ),
        )

    def _follow(
        self,
        machine: Machine[Any],
        ref: ObjectRef,
        before: Any,
        after: Any,
        observation: Observation,
    ) -> tuple[Result, ...]:
        links = self._links.get(machine.name)
        if not links:
            return ()
        results = []
        for link in links:
            for target, derived in link.derive(ref, before, after, observation.at):
                try:
                    results.append(self.observe(target, derived))
                except LifecycleError as e:
                    self._log.warning(
                        "linked observation refused",
                        source=str(ref),
                        target=str(target),
                        error=str(e),
                    )
                    results.append(Result(Outcome.FAILED, target, None, 0, error=e))
        return tuple(results)
