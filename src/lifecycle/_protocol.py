"""The write-then-emit protocol's decisions, once, for every driver (ADR 0092).

    for attempt in 1..policy.attempts:
        record = store.load(ref) or (machine.initial(ref), version 0)
        write  = decide(record, observation)      # apply, compare, flips, stamps, intents
        send the row's action events              # first attempt only
        if write is None: return UNCHANGED
        try:   version = store.commit(ref, expected=record.version, write)
        except StoreError as e:
            if again(e, attempt): pause; continue  # a Conflict within the budget
            return lost(e)                         # log, fallback Warning where a row declares it
        deliver(write.transitions)                 # after the commit (lifecycle._delivery)
        apply(write.intents)                       # durable links (lifecycle._link_intents)
        return COMMITTED
    return lost(last conflict)

Events are computed against the status read in the attempt that wins, so a concurrent writer
that already made the flip suppresses ours. Nothing is emitted for a write that did not land,
except a fallback Warning (``<Reason>StatusUpdateFailed``) where the row taken declares one.

:class:`WriteProtocol` holds a runner's configuration (machines, links, retry policies,
delivery, pending link intents) and makes every decision above; it does no store I/O. The
drivers only move data between it and a store: ``Runner.observe`` inline (the hot path: no
generator, no per-item record), and the sans-I/O generator of ``lifecycle._batch`` for
``Runner.observe_many`` and ``AsyncRunner`` (grouped reads and writes, awaited or not).
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple

import attrs

from . import _link_intents
from ._backlog import Backlog
from ._core.bounds import check_ref
from ._core.errors import (
    CommitUnknown,
    Conflict,
    InvalidObservation,
    InvalidReference,
    LifecycleError,
    StoreError,
    UnknownObservation,
    apply_failed,
    preview,
)
from ._core.machine import Machine
from ._core.observation import Observation
from ._core.redact import redact
from ._core.refs import EventType, ObjectRef
from ._core.serde import built, validator
from ._core.transition import Flip, Transition, stamp, store_epoch
from ._delivery import Delivery
from ._link import Link
from ._link_intents import PendingIntents
from .emitters.base import Emitter
from .machines import MachineRegistry, default_registry


class Outcome(enum.Enum):
    """What one observation did to the store: ``COMMITTED`` (a new version was written),
    ``UNCHANGED`` (the status stayed as it was: nothing written, no transition) or ``FAILED`` (the
    write did not land: ``Result.error`` says why; a declared fallback Warning may have gone
    out instead)."""

    COMMITTED = "committed"
    UNCHANGED = "unchanged"
    FAILED = "failed"


@attrs.frozen(slots=True)
class RetryPolicy:
    """How often a conflicting write is retried, and how long to wait between attempts.

    The default mirrors client-go's ``retry.DefaultRetry`` in count (5 attempts) and waits
    10 ms (with 10 % jitter) between them.

    Attributes:
        attempts: writes tried in all, at least 1; a conflict past them fails the observation.
        backoff: seconds between attempts; 0 retries at once (replay, tests).
        jitter: the fraction the wait varies by, so writers that collided do not collide
            again in step.
        sleep: how to wait; a test gives its own.

    Raises:
        ValueError: ``attempts`` below 1, or a negative backoff or jitter.
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

    def delay(self) -> float:
        """Seconds to wait before the next attempt: the backoff with its jitter.

        Returns:
            The wait, 0.0 without a backoff.
        """
        if not self.backoff:
            return 0.0
        import random  # here: imported at the first retry, not with the runner (ADR 0139)

        return self.backoff * (1 + random.uniform(-self.jitter, self.jitter))

    def pause(self) -> None:
        """Wait :meth:`delay` seconds (nothing without a backoff)."""
        if self.backoff:
            self.sleep(self.delay())


class Result(NamedTuple):
    """What one observation did. ``transitions`` were committed (and handed to emitters);
    ``fallback`` holds the Warning sent instead when the write failed; ``linked`` holds the
    results of linked machines (a Pod's NodeClaim) that this commit fed.

    An immutable named tuple, because one is made per observation and it is the cheapest
    record Python has (ADR 0067): read it by field name.

    Attributes:
        outcome: committed, unchanged, or failed.
        ref: the object.
        status: its status after the observation; ``None`` when the write failed.
        version: its stored version after it.
        transitions: the events committed.
        fallback: the Warning sent instead when the write failed.
        error: why it failed, else ``None``.
        attempts: the writes tried: more than 1 after compare-and-set conflicts.
        linked: the results of the linked writes this commit fed.
        actions: action events sent before the write.
        caught_up: earlier failed linked writes applied before this observation.
    """

    outcome: Outcome
    ref: ObjectRef
    status: Any
    version: int
    transitions: tuple[Transition, ...] = ()
    fallback: tuple[Transition, ...] = ()
    error: Exception | None = None
    attempts: int = 1
    linked: tuple[Result, ...] = ()
    #: Action events (not transitions, no id) sent for this observation before its write.
    actions: tuple[Transition, ...] = ()
    #: Results of earlier linked writes that had failed, applied before this observation
    #: (the runner's pending intents, ADR 0090).
    caught_up: tuple[Result, ...] = ()

    @property
    def committed(self) -> bool:
        """Whether the observation's write committed."""
        return self.outcome is Outcome.COMMITTED

    @property
    def next_tick(self) -> datetime | None:
        """When this object next needs a :class:`~lifecycle.Tick`, from its machine's timer
        rows (a timeout, a grace window, a stall threshold), or ``None``: no timer runs (or
        the write failed, ``status`` is ``None``: retry by your own backoff). Computed when
        read, never on the hot path (ADR 0149)."""
        from ._requeue import next_tick

        return next_tick(self.status)

    def requeue_after(self, now: datetime) -> float | None:
        """Seconds from ``now`` until :attr:`next_tick` (0.0: due already), or ``None``: no
        ``Tick`` is needed -- what a controller returns as its requeue delay (ADR 0149).

        Args:
            now: the host's clock (aware).

        Returns:
            Seconds, never negative, or ``None``.
        """
        from ._requeue import seconds_until

        return seconds_until(self.next_tick, now)

    @property
    def cascade(self) -> tuple[Result, ...]:
        """The old name of :attr:`linked` (ADR 0035), kept until 1.0."""
        return self.linked

    def all_transitions(self) -> list[Transition]:
        """This result's events and those of its linked writes, in the order they were emitted.

        Returns:
            Caught-up writes' events, then this write's actions, events and fallback,
            then the linked writes'.
        """
        out: list[Transition] = []
        for r in self.caught_up:
            out.extend(r.all_transitions())
        out += [*self.actions, *self.transitions, *self.fallback]
        for r in self.linked:
            out.extend(r.all_transitions())
        return out


class Write(NamedTuple):
    """What one attempt commits: the new status, its flips stamped as events, the link
    intents its links derive (ADR 0090), and ``written`` -- events then intents, the outbox
    rows of the commit."""

    after: Any
    flips: tuple[Flip, ...]
    transitions: tuple[Transition, ...]
    intents: tuple[Transition, ...]
    written: tuple[Transition, ...]


#: Builds a :class:`Write` from its fields in order: the named tuple's own ``_make``, which
#: refuses a missing or an extra field (``tuple.__new__`` paid nothing measurable; ADR 0154):
#: ``_write(Write, (after, flips, ...))``.
_write: Callable[[type[Write], tuple[Any, ...]], Write] = Write._make.__func__  # type: ignore[attr-defined]

#: The most refs a protocol remembers as admitted before it starts again (ADR 0156): a cycle
#: over more objects than this checks each ref again, as every call did before.
ADMITTED = 1 << 17

#: The compiled check of one observation class (``lifecycle._core.serde.validator``).
Check = Callable[[Any, str], None]
#: One machine's observation classes met so far, each with its check.
Checks = dict[type, Check]


class WriteProtocol:
    """One runner's configuration and every decision of the protocol; no store I/O."""

    def __init__(
        self,
        machines: MachineRegistry,
        emitters: Sequence[Emitter],
        *,
        links: Iterable[Link],
        policy: RetryPolicy,
        policies: Mapping[str, RetryPolicy] | None,
        log: Any,
        epoch_source: object,
    ) -> None:
        self.machines = machines
        self.policy = policy
        #: Per machine name; else a machine's ``write_attempts`` caps ``policy``'s attempts.
        self.policies: dict[str, RetryPolicy] = dict(policies or {})
        #: structlog-style logger for failed writes, refusals and emitters
        self.log = log
        self.delivery = Delivery(emitters, log)
        #: Links by source machine name.
        self.links: dict[str, list[Link]] = {}
        direct: set[type[Observation]] = set()
        #: Per source machine name, the links that name their target from the source's ref
        #: alone (``Link.by_ref``): that target is checked when the source is admitted.
        self.named_by_ref: dict[str, tuple[Link, ...]] = {}
        links_seen = list(links)
        for link in links_seen:
            self.links.setdefault(link.source, []).append(link)
            direct |= link.direct
            if link.by_ref and link.fan_out is None:
                found = self.named_by_ref.get(link.source, ())
                self.named_by_ref[link.source] = (*found, link)
        #: Per source machine name, the machines its links reach, directly or not: what a
        #: batch's cascade may write (``lifecycle._batch``: an object it reaches waits).
        self.reach = _link_intents.reach(links_seen)
        #: Refs admitted (checked, their by-ref targets checked), by uid, with their machine:
        #: what does not change between two observations of one object is checked once (ADR
        #: 0156). One entry per object, so a host that builds a new ref per poll (a replay)
        #: holds no more than one that keeps its refs.
        self._admitted: dict[str, tuple[ObjectRef, Machine[Any], Checks]] = {}
        #: Per machine name, the compiled check of each of its observation classes met so
        #: far: which classes it accepts and how each is checked are looked up once per
        #: machine and class; each value is still checked on every call (ADR 0165).
        self._checks: dict[str, Checks] = {}
        #: Observations that are another controller's direct write: one attempt (ADR 0090).
        self.direct = frozenset(direct)
        #: What the next call finishes first: link intents whose target write failed, and
        #: (its backlog) what an interrupted call left (ADR 0105).
        self.pending = PendingIntents()
        #: Events and marks an interrupted call left, finished first by the next (ADR 0105).
        self.backlog: Backlog = self.pending.backlog
        self.epoch_source = epoch_source

    @property
    def epoch_source(self) -> object:
        """What events are stamped with the epoch of (``store_epoch``): the runner's store."""
        return self._epoch_source

    @epoch_source.setter
    def epoch_source(self, store: object) -> None:
        self._epoch_source = store
        #: A store (or the store a wrapper holds) with no ``epoch`` at all stamps ``""``:
        #: known once, not looked up per commit.
        self._epochless = not hasattr(store, "epoch") and not hasattr(
            getattr(store, "store", None), "epoch"
        )

    def epoch(self) -> str:
        """The epoch to stamp events with now (ADR 0068)."""
        return "" if self._epochless else store_epoch(self._epoch_source)

    @classmethod
    def configured(
        cls,
        emitters: Sequence[Emitter],
        *,
        machines: MachineRegistry | None,
        links: Iterable[Link] | None,
        policy: RetryPolicy | None,
        policies: Mapping[str, RetryPolicy] | None,
        log: Any,
        epoch_source: object,
    ) -> WriteProtocol:
        """A runner's arguments, with its defaults: every shipped machine and link, and the
        default :class:`RetryPolicy`. The shipped links load the machines they join, so they
        are imported only for a runner that takes them (ADR 0118)."""
        if links is None:
            from .links import default_links

            links = default_links()
        return cls(
            machines if machines is not None else default_registry(),
            emitters,
            links=links,
            policy=policy if policy is not None else RetryPolicy(),
            policies=policies,
            log=log,
            epoch_source=epoch_source,
        )

    # -- before anything is read ------------------------------------------------------------
    def machine_for(self, ref: ObjectRef) -> Machine[Any]:
        return self.machines.for_kind(ref.kind)

    @staticmethod
    def pairs(
        items: Iterable[tuple[ObjectRef, Observation]],
    ) -> list[tuple[ObjectRef, Observation]]:
        """``items`` as a list of ``(ref, observation)`` pairs, or :class:`InvalidObservation`
        naming the first item that is not one (before anything is read or written)."""
        try:
            listed = list(items)
        except TypeError:
            raise InvalidObservation(
                f"observe_many takes (ref, observation) pairs, not {preview(items)}"
            ) from None
        for index, item in enumerate(listed):
            if not isinstance(item, tuple) or len(item) != 2:
                raise InvalidObservation(
                    f"observe_many item {index}: expected a (ref, observation) pair, "
                    f"got {preview(item)}"
                )
        return listed

    def admit(self, ref: ObjectRef, observation: Observation) -> Machine[Any]:
        """``ref``'s machine; refuses (raises) a bad reference, an observation the machine
        does not know, or one outside the input bounds, before anything is read. What
        depends on the ref alone (its bounds, its machine, its by-ref link targets) is
        checked once per ref (ADR 0156); the observation, every call."""
        try:
            known = self._admitted.get(ref.uid) if type(ref) is ObjectRef else None
        except TypeError:  # an unhashable uid: refused by the full check
            known = None
        if known is not None and (known[0] is ref or known[0] == ref):
            _, machine, checks = known
        else:
            machine, checks = self._admit_ref(ref)
        check = checks.get(observation.__class__)
        if check is None:
            check = self._check_for(machine, checks, observation)
        if observation is not built[0]:  # (one Machine.observation built: already checked)
            check(observation, "")
        return machine

    def _check_for(self, machine: Machine[Any], checks: Checks, observation: Any) -> Check:
        """The compiled check of ``observation``'s class on ``machine``, remembered in
        ``checks``; :class:`UnknownObservation` for a class the machine does not accept."""
        cls = observation.__class__
        if cls not in machine.accepted:
            raise UnknownObservation(
                f"{machine.name}: {cls.__name__} is not one of its "
                f"observations ({', '.join(sorted(machine.vocabulary))})"
            )
        check = checks[cls] = validator(cls)
        return check

    def _admit_ref(self, ref: ObjectRef) -> tuple[Machine[Any], Checks]:
        check_ref(ref)
        machine = self.machines.for_kind(ref.kind)
        named = self.named_by_ref.get(machine.name)
        if named is not None:
            self._check_targets(machine, ref, named)
        checks = self._checks.setdefault(machine.name, {})
        if type(ref) is ObjectRef:  # immutable: remembered (a subclass may not be)
            if len(self._admitted) >= ADMITTED:
                self._admitted.clear()
            self._admitted[ref.uid] = (ref, machine, checks)
        return machine, checks

    def _check_targets(self, machine: Machine[Any], ref: ObjectRef, links: Sequence[Link]) -> None:
        """Refuse ``ref`` (:class:`InvalidReference`) when a target its links name from the
        ref alone is not a valid reference (ADR 0102): a Pod whose NodeClaim uid would pass
        the bounds is refused as the Pod, not committed with a claim that never exists."""
        for link in links:
            target = link.target_ref(ref, None)
            try:
                check_ref(target)
            except InvalidReference as e:
                raise InvalidReference(
                    f"{machine.name} {preview(ref.uid)}: its {link.target} cannot be named: {e}"
                ) from None

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

    def write_policy(self, machine: Machine[Any], observation: Observation) -> RetryPolicy:
        """The retry policy for writing ``observation`` on ``machine``: one attempt for an
        observation a link declares a direct write (a conflict is not retried: the link
        intent stays pending and the next pass writes it again), else :meth:`policy_for`."""
        policy = self.policy_for(machine)
        if observation.__class__ in self.direct and policy.attempts != 1:
            return attrs.evolve(policy, attempts=1)
        return policy

    # -- per attempt --------------------------------------------------------------------------
    def leaves(self, machine: Machine[Any], before: Any, observation: Observation) -> bool:
        """Whether ``observation`` leaves ``before`` as it was: nothing to write (a poll's
        common case, answered without :meth:`decide`'s bookkeeping). ``False`` also when the
        machine refuses or fails: :meth:`decide` then says how."""
        try:
            after = machine.apply(before, observation)
        except Exception:
            return False
        return after is before or (not machine.unchanged_is_identity and bool(after == before))

    def decide(
        self,
        machine: Machine[Any],
        ref: ObjectRef,
        observation: Observation,
        before: Any,
        version: int,
    ) -> Write | None:
        """What to commit on top of ``before`` (read at ``version``); ``None``: nothing
        changes. A machine's own failure is a typed :class:`~lifecycle.LifecycleError`."""
        try:
            after = machine.apply(before, observation)
            if after is before or (not machine.unchanged_is_identity and after == before):
                return None
            flips = machine.flips(before, after)
        except LifecycleError:
            raise
        except Exception as e:  # a machine's own failure: typed, nothing written
            raise apply_failed(machine.name, ref, observation, e) from e
        links = self.links.get(machine.name)
        if links is None:
            if not flips:
                return _write(Write, (after, flips, (), (), ()))
            epoch = "" if self._epochless else store_epoch(self._epoch_source)
            transitions = stamp(flips, ref, machine.name, version + 1, observation.at, epoch)
            return _write(Write, (after, flips, transitions, (), transitions))
        epoch = "" if self._epochless else store_epoch(self._epoch_source)
        at = observation.at
        transitions = stamp(flips, ref, machine.name, version + 1, at, epoch) if flips else ()
        intents = _link_intents.derive(
            links, ref, machine.name, before, after, at, version + 1, len(transitions), epoch
        )
        return _write(Write, (after, flips, transitions, intents, transitions + intents))

    def actions(
        self,
        machine: Machine[Any],
        ref: ObjectRef,
        status: Any,
        observation: Observation,
        version: int,
    ) -> tuple[Transition, ...]:
        """Send the row's action events now (first attempt): they touch no status and do not
        wait for (or depend on) the write. Best effort: not queued, no id, may repeat."""
        flips = machine.actions(status, observation)
        if not flips:
            return ()
        sent = tuple(
            t._replace(action=True)
            for t in stamp(flips, ref, machine.name, version, observation.at)
        )
        self.delivery.announce(sent)
        return sent

    def again(
        self, machine: Machine[Any], observation: Observation, error: StoreError, attempt: int
    ) -> RetryPolicy | None:
        """The policy to pause with before another attempt after ``error``, or ``None``:
        the write failed (not a conflict, or the budget is spent)."""
        if isinstance(error, Conflict):
            policy = self.write_policy(machine, observation)
            if attempt < policy.attempts:
                return policy
        return None

    def unfinished(self, events: Sequence[Transition], intents: Iterable[Transition]) -> None:
        """A call was interrupted after its commit landed (ADR 0105): its ``events`` wait in
        the backlog, its ``intents`` pending, for the next call to finish first."""
        if events:
            self.backlog.hold_events(events)
        for t in intents:
            self.pending.hold(t)

    # -- how an observation ends without a commit -----------------------------------------------
    def lost(
        self,
        machine: Machine[Any],
        ref: ObjectRef,
        observation: Observation,
        before: Any,
        version: int,
        write: Write | None,
        error: StoreError,
        attempts: int,
        actions: tuple[Transition, ...],
        caught_up: tuple[Result, ...] = (),
        *,
        reading: bool = False,
    ) -> Result:
        """The write did not land: log it (``reading``: the status could not even be read),
        send the fallback Warning (see :func:`fallback`)."""
        failed = "status read failed" if reading else "status write failed"
        self.log.warning(failed, ref=str(ref), uid=ref.uid, error=str(error))
        flips = write.flips if write is not None else ()
        sent = fallback(ref, machine, flips, version, observation, error, before)
        if sent:
            self.delivery.announce(sent)
        return Result(
            Outcome.FAILED,
            ref,
            None,
            version,
            fallback=sent,
            error=error,
            attempts=attempts,
            actions=actions,
            caught_up=caught_up,
        )

    def refused(
        self,
        ref: ObjectRef,
        version: int,
        error: LifecycleError,
        attempts: int,
        actions: tuple[Transition, ...],
    ) -> Result:
        """A batch item its machine or store refused (bad input): nothing written, no event
        (a fallback Warning would name what was refused)."""
        self.log.warning("observation refused", ref=str(ref), uid=ref.uid, error=str(error))
        return Result(
            Outcome.FAILED, ref, None, version, error=error, attempts=attempts, actions=actions
        )

    def refused_link(self, t: Transition, error: LifecycleError) -> Result:
        """A link intent its target refused: logged, and settled (it would refuse again)."""
        assert t.intent is not None
        target = t.intent.target
        self.log.warning(
            "linked observation refused", source=str(t.ref), target=str(target), error=str(error)
        )
        return Result(Outcome.FAILED, target, None, 0, error=error)


def fallback(
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
    # A machine's own wording may quote the store's error: redacted like every message.
    message = redact(machine.fallback_message(ref, warning, error))
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
