"""The write-then-emit protocol once, without I/O, for many objects at a time.

:func:`protocol` is a generator: it does the pure steps itself (apply, flips, stamping,
fallbacks, emitting to the runner's emitters, deriving linked observations) and *yields* each
store operation as a request (:class:`Load`, :class:`Commit`, :class:`Mark`, :class:`Pause`),
to be resumed with its answer or thrown the :class:`~lifecycle.StoreError` it raised. A driver
runs the requests: :func:`run` against a synchronous store (``Runner.observe_many``), and
``lifecycle.aio`` against an asyncio one (``AsyncRunner``). So the sync and asyncio runners
share one implementation of the protocol, attempt by attempt.

Per attempt, for the objects still pending: read them (one request), apply, compute flips
against what *this* attempt read, then commit them (one request; each object has its own
compare-and-set). Committed objects deliver their events and follow their links; conflicting
ones retry alone, with their machine's budget; a store error or an exhausted budget fails the
object with the fallback Warning of ``Runner.observe``. With ``refuse=True`` (one object, the
``observe`` call) a refused observation raises, exactly as ``Runner.observe`` does, and links
are followed depth-first; for a batch it is that item's failed :class:`Result`, and links are
followed as a batch too.
"""

from __future__ import annotations

import random
from collections.abc import Generator, Sequence
from typing import Any

import attrs

from ._core.bounds import check_ref
from ._core.errors import (
    Conflict,
    IdentityMismatch,
    LifecycleError,
    StoreError,
    UnknownObservation,
    apply_failed,
)
from ._core.machine import Machine
from ._core.observation import Observation
from ._core.refs import ObjectRef
from ._core.serde import validate as check_observation
from ._core.transition import Flip, Transition, stamp, store_epoch
from .runner import Outcome, Result, RetryPolicy, Runner
from .stores.base import CommitItem, Record


@attrs.frozen(slots=True)
class Load:
    """Read these objects: answer ``list[Record | IdentityMismatch | None]``, aligned (the
    :class:`~lifecycle.IdentityMismatch` of an item whose uid is stored for another object)."""

    items: tuple[tuple[Machine[Any], ObjectRef], ...]


@attrs.frozen(slots=True)
class Commit:
    """Commit these writes, each with its own CAS: answer ``list[int | StoreError |
    IdentityMismatch]`` (an impostor item writes nothing)."""

    items: tuple[CommitItem, ...]


@attrs.frozen(slots=True)
class Mark:
    """Mark these outbox ids delivered: answer ``None``."""

    ids: tuple[str, ...]


@attrs.frozen(slots=True)
class Pause:
    """Wait ``seconds`` before the next attempt (``policy.sleep`` or the event loop's)."""

    policy: RetryPolicy
    seconds: float


Request = Load | Commit | Mark | Pause
Protocol = Generator[Request, Any, list[Result]]


@attrs.define(slots=True)
class _Item:
    index: int
    ref: ObjectRef
    observation: Observation
    machine: Machine[Any]
    policy: RetryPolicy
    attempt: int = 0
    version: int = 0
    flips: tuple[Flip, ...] = ()
    actions: tuple[Transition, ...] = ()
    transitions: tuple[Transition, ...] = ()
    before: Any = None
    after: Any = None
    error: Exception | None = None


def delay(policy: RetryPolicy) -> float:
    """The pause ``policy.pause()`` would sleep (backoff with jitter)."""
    if not policy.backoff:
        return 0.0
    return policy.backoff * (1 + random.uniform(-policy.jitter, policy.jitter))


def validate(core: Runner, items: Sequence[tuple[ObjectRef, Observation]]) -> list[_Item]:
    """Every item's machine and policy; refuses (raises) an observation a machine does not
    know, or one outside the input bounds, before anything is read or written."""
    out = []
    for index, (ref, observation) in enumerate(items):
        check_ref(ref)
        machine = core.machine_for(ref)
        if observation.__class__ not in machine.accepted:
            raise UnknownObservation(
                f"{machine.name}: {observation.__class__.__name__} is not one of its "
                f"observations ({', '.join(sorted(machine.vocabulary))})"
            )
        check_observation(observation)
        out.append(_Item(index, ref, observation, machine, core.policy_for(machine)))
    return out


def _waves(items: list[_Item]) -> list[list[_Item]]:
    """Split so that no wave holds an object twice; an object's items keep their order."""
    waves: list[list[_Item]] = []
    seen: dict[str, int] = {}
    for item in items:
        n = seen.get(item.ref.uid, 0)
        seen[item.ref.uid] = n + 1
        if n == len(waves):
            waves.append([])
        waves[n].append(item)
    return waves


def protocol(
    core: Runner, items: Sequence[tuple[ObjectRef, Observation]], *, refuse: bool
) -> Protocol:
    """Observe ``items`` through ``core``'s machines, policies, emitters and links; returns
    one :class:`Result` per item, in order."""
    work = validate(core, items)
    results: list[Result | None] = [None] * len(work)
    for wave in _waves(work):
        pending = wave
        while pending:
            for item in pending:
                item.attempt += 1
            try:
                records: list[Record | IdentityMismatch | None] = yield Load(
                    tuple((i.machine, i.ref) for i in pending)
                )
            except StoreError as e:
                for item in pending:
                    item.error = e
                    results[item.index] = _fail(core, item)
                break
            writes: list[_Item] = []
            for item, record in zip(pending, records, strict=True):
                machine = item.machine
                if isinstance(record, IdentityMismatch):  # bad input: no write, no fallback
                    if refuse:
                        raise record
                    results[item.index] = _refused(core, item, record)
                    continue
                before = machine.initial(item.ref) if record is None else record.status
                version = 0 if record is None else record.version
                try:
                    after = machine.apply(before, item.observation)
                    same = after is before or after == before
                    flips = () if same else machine.flips(before, after)
                except Exception as caught:
                    if refuse and isinstance(caught, LifecycleError):
                        raise
                    refusal = caught if isinstance(caught, LifecycleError) else None
                    if refusal is None:  # a machine's own failure: typed, nothing written
                        refusal = apply_failed(machine.name, item.ref, item.observation, caught)
                        if refuse:
                            raise refusal from caught
                    core._log.warning(
                        "observation refused",
                        ref=str(item.ref),
                        uid=item.ref.uid,
                        error=str(refusal),
                    )
                    results[item.index] = Result(
                        Outcome.FAILED,
                        item.ref,
                        None,
                        version,
                        error=refusal,
                        attempts=item.attempt,
                        actions=item.actions,
                    )
                    continue
                if item.attempt == 1 and machine.has_actions:
                    item.actions = core._actions(
                        machine, item.ref, before, item.observation, version
                    )
                if same:
                    results[item.index] = Result(
                        Outcome.UNCHANGED,
                        item.ref,
                        before,
                        version,
                        attempts=item.attempt,
                        actions=item.actions,
                    )
                    continue
                item.version, item.before, item.after = version, before, after
                item.flips = flips
                item.transitions = (
                    stamp(
                        item.flips,
                        item.ref,
                        machine.name,
                        version + 1,
                        item.observation.at,
                        store_epoch(core.epoch_source),
                    )
                    if item.flips
                    else ()
                )
                writes.append(item)
            if not writes:
                break
            try:
                outcomes: list[int | StoreError | IdentityMismatch] = yield Commit(
                    tuple(
                        CommitItem(
                            i.machine, i.ref, i.version, i.after, i.observation, i.transitions
                        )
                        for i in writes
                    )
                )
            except StoreError as e:
                outcomes = [e] * len(writes)
            retry: list[_Item] = []
            committed: list[tuple[_Item, int]] = []
            for item, outcome in zip(writes, outcomes, strict=True):
                if isinstance(outcome, IdentityMismatch):
                    if refuse:
                        raise outcome
                    results[item.index] = _refused(core, item, outcome)
                elif isinstance(outcome, StoreError):
                    item.error = outcome
                    if isinstance(outcome, Conflict) and item.attempt < item.policy.attempts:
                        retry.append(item)
                    else:
                        results[item.index] = _fail(core, item)
                else:
                    committed.append((item, outcome))
            if committed:
                yield from _deliver(core, [t for i, _ in committed for t in i.transitions])
                cascades = yield from _follow(core, [i for i, _ in committed], refuse=refuse)
                for (item, version), cascade in zip(committed, cascades, strict=True):
                    results[item.index] = Result(
                        Outcome.COMMITTED,
                        item.ref,
                        item.after,
                        version,
                        item.transitions,
                        attempts=item.attempt,
                        cascade=cascade,
                        actions=item.actions,
                    )
            if retry:
                yield Pause(retry[0].policy, delay(retry[0].policy))
            pending = retry
    assert all(r is not None for r in results)
    return [r for r in results if r is not None]


def _refused(core: Runner, item: _Item, error: IdentityMismatch) -> Result:
    """The item names a uid stored for another object: refused, nothing written, no event
    (a fallback Warning would name the impostor)."""
    core._log.warning("observation refused", ref=str(item.ref), uid=item.ref.uid, error=str(error))
    return Result(
        Outcome.FAILED, item.ref, None, 0, error=error, attempts=item.attempt, actions=item.actions
    )


def _fail(core: Runner, item: _Item) -> Result:
    """The write did not land: log, send the fallback Warning (if a Warning flip was lost)."""
    assert item.error is not None
    core._log.warning(
        "status write failed", ref=str(item.ref), uid=item.ref.uid, error=str(item.error)
    )
    fallback = core._fallback(
        item.ref, item.machine, item.flips, item.version, item.observation, item.error, item.before
    )
    core._send(fallback)
    return Result(
        Outcome.FAILED,
        item.ref,
        None,
        item.version,
        fallback=fallback,
        error=item.error,
        attempts=item.attempt,
        actions=item.actions,
    )


def _deliver(core: Runner, transitions: Sequence[Transition]) -> Generator[Request, Any, int]:
    """Send committed events to every emitter; mark those every emitter took."""
    if not transitions:
        return 0
    delivered = tuple(t.id for t in transitions if core._send((t,)))
    if delivered:
        try:
            yield Mark(delivered)
        except StoreError as e:
            core._log.warning("could not mark events delivered; they will repeat", error=str(e))
    return len(delivered)


def _follow(
    core: Runner, committed: list[_Item], *, refuse: bool
) -> Generator[Request, Any, list[tuple[Result, ...]]]:
    """What each committed change tells linked machines, observed in turn: depth-first and
    one by one for ``observe`` (as ``Runner.observe``), as one batch for a batch."""
    derived: list[tuple[int, ObjectRef, ObjectRef, Observation]] = []
    for n, item in enumerate(committed):
        for link in core._links.get(item.machine.name, ()):
            for target, obs in link.derive(item.ref, item.before, item.after, item.observation.at):
                derived.append((n, item.ref, target, obs))
    out: list[list[Result]] = [[] for _ in committed]
    if not derived:
        return [()] * len(committed)
    if refuse:
        for n, source, target, obs in derived:
            try:
                found = yield from protocol(core, [(target, obs)], refuse=True)
                out[n].append(found[0])
            except LifecycleError as e:
                core._log.warning(
                    "linked observation refused",
                    source=str(source),
                    target=str(target),
                    error=str(e),
                )
                out[n].append(Result(Outcome.FAILED, target, None, 0, error=e))
        return [tuple(r) for r in out]
    valid: list[tuple[int, ObjectRef, ObjectRef, Observation]] = []
    for entry in derived:
        n, source, target, obs = entry
        try:
            validate(core, [(target, obs)])
        except LifecycleError as e:
            core._log.warning(
                "linked observation refused", source=str(source), target=str(target), error=str(e)
            )
            out[n].append(Result(Outcome.FAILED, target, None, 0, error=e))
            continue
        valid.append(entry)
    found = yield from protocol(core, [(t, o) for _, _, t, o in valid], refuse=False)
    for (n, _, _, _), result in zip(valid, found, strict=True):
        out[n].append(result)
    return [tuple(r) for r in out]


# -- the synchronous driver -----------------------------------------------------------------
def answer(store: Any, request: Request) -> Any:
    """Run one request against a synchronous :class:`~lifecycle.stores.Store`, using its
    batch methods where it has them."""
    if isinstance(request, Load):
        load_many = getattr(store, "load_many", None)
        if load_many is not None and len(request.items) > 1:
            try:
                return load_many(request.items)
            except IdentityMismatch:
                pass  # the batch was refused: find the impostor(s), one object at a time
        found: list[Record | IdentityMismatch | None] = []
        for m, r in request.items:
            try:
                found.append(store.load(m, r))
            except IdentityMismatch as e:
                found.append(e)
        return found
    if isinstance(request, Commit):
        commit_many = getattr(store, "commit_many", None)
        if commit_many is not None and len(request.items) > 1:
            try:
                return commit_many(request.items)
            except IdentityMismatch:
                pass  # nothing of the batch was written: commit it one object at a time
        out: list[int | StoreError | IdentityMismatch] = []
        for c in request.items:
            try:
                out.append(
                    store.commit(
                        c.machine, c.ref, c.expected, c.status, c.observation, c.transitions
                    )
                )
            except (StoreError, IdentityMismatch) as e:
                out.append(e)
        return out
    if isinstance(request, Mark):
        store.mark_delivered(request.ids)
        return None
    if request.seconds:
        request.policy.sleep(request.seconds)
    return None


def run(gen: Protocol, store: Any) -> list[Result]:
    """Drive :func:`protocol` against a synchronous store."""
    reply: Any = None
    error: StoreError | None = None
    while True:
        try:
            request = gen.send(reply) if error is None else gen.throw(error)
        except StopIteration as stop:
            done: list[Result] = stop.value
            return done
        reply, error = None, None
        try:
            reply = answer(store, request)
        except StoreError as e:
            error = e
