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

from . import _cascade
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
    intents: tuple[Transition, ...] = ()
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
        out.append(_Item(index, ref, observation, machine, core.write_policy(machine, observation)))
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
    core: Runner,
    items: Sequence[tuple[ObjectRef, Observation]],
    *,
    refuse: bool,
    catch_up: bool = True,
) -> Protocol:
    """Observe ``items`` through ``core``'s machines, policies, emitters and links; returns
    one :class:`Result` per item, in order. With ``catch_up`` (a caller's own call, not a
    cascade) the runner's pending cascade intents are retried first (ADR 0090); their results
    go in the first result's ``caught_up``."""
    work = validate(core, items)
    results: list[Result | None] = [None] * len(work)
    retried: tuple[Result, ...] = ()
    if catch_up and core.pending and core.pending.retrying.acquire(blocking=False):
        try:
            found = yield from apply_intents(core, core.pending.take(), batch=not refuse)
            retried = tuple(r for r in found if r is not None)
        finally:
            core.pending.retrying.release()
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
                links = core._links.get(machine.name)
                if links is not None:
                    item.intents = _cascade.derive(
                        links,
                        item.ref,
                        machine.name,
                        before,
                        after,
                        item.observation.at,
                        version + 1,
                        len(item.transitions),
                        store_epoch(core.epoch_source),
                    )
                writes.append(item)
            if not writes:
                break
            try:
                outcomes: list[int | StoreError | IdentityMismatch] = yield Commit(
                    tuple(
                        CommitItem(
                            i.machine,
                            i.ref,
                            i.version,
                            i.after,
                            i.observation,
                            i.transitions + i.intents if i.intents else i.transitions,
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
                cascades = yield from _follow(core, [i for i, _ in committed], batch=not refuse)
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
    done = [r for r in results if r is not None]
    if retried and done:
        done[0] = done[0]._replace(caught_up=retried)
    return done


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
    core: Runner, committed: list[_Item], *, batch: bool
) -> Generator[Request, Any, list[tuple[Result, ...]]]:
    """Apply the cascade intents each committed item recorded; one tuple of results per item."""
    flat = [t for item in committed for t in item.intents]
    if not flat:
        return [()] * len(committed)
    found = yield from apply_intents(core, flat, batch=batch)
    out: list[tuple[Result, ...]] = []
    at = 0
    for item in committed:
        mine = found[at : at + len(item.intents)]
        at += len(item.intents)
        out.append(tuple(r for r in mine if r is not None))
    return out


def apply_intents(
    core: Runner, intents: Sequence[Transition], *, batch: bool = False
) -> Generator[Request, Any, list[Result | None]]:
    """Apply cascade intents to their targets (ADR 0090); one result per intent (``None``:
    held behind an earlier pending intent of its lane). An intent its target confirms is
    marked done; one whose target write failed is held pending and blocks its lane. One by one,
    depth-first (``observe``), or in rounds of one intent per lane (``batch``)."""
    results: list[Result | None] = [None] * len(intents)
    blocked = core.pending.lanes() if core.pending else set()
    done: list[str] = []
    todo = list(range(len(intents)))
    while todo:
        chosen: list[int] = []
        later: list[int] = []
        lanes: set[_cascade.Lane] = set()
        for i in todo:
            key = _cascade.lane(intents[i])
            if key in blocked:
                core.pending.hold(intents[i])
            elif key in lanes or (chosen and not batch):
                later.append(i)
            else:
                lanes.add(key)
                chosen.append(i)
        pairs: list[tuple[int, ObjectRef, Observation]] = []
        for i in chosen:
            t = intents[i]
            assert t.intent is not None
            try:
                machine = core.machine_for(t.intent.target)
                obs = _cascade.observation_of(machine, t)
                if batch:
                    validate(core, [(t.intent.target, obs)])
            except LifecycleError as e:
                results[i] = _refused_link(core, t, e)
                continue
            pairs.append((i, t.intent.target, obs))
        if batch and pairs:
            found = yield from protocol(
                core, [(r, o) for _, r, o in pairs], refuse=False, catch_up=False
            )
            for (i, _, _), result in zip(pairs, found, strict=True):
                results[i] = result
        for i, target, obs in pairs if not batch else ():
            try:
                (results[i],) = yield from protocol(
                    core, [(target, obs)], refuse=True, catch_up=False
                )
            except LifecycleError as e:
                results[i] = _refused_link(core, intents[i], e)
        for i in chosen:
            settled = results[i]
            assert settled is not None
            if _cascade.confirmed(settled.error):
                done.append(intents[i].id)
            else:
                blocked.add(_cascade.lane(intents[i]))
                core.pending.hold(intents[i])
        todo = later
    if done:
        try:
            yield Mark(tuple(done))
        except StoreError as e:
            core._log.warning("could not mark cascade intents done; they will repeat", error=str(e))
    return results


def _refused_link(core: Runner, t: Transition, error: LifecycleError) -> Result:
    assert t.intent is not None
    core._log.warning(
        "linked observation refused",
        source=str(t.ref),
        target=str(t.intent.target),
        error=str(error),
    )
    return Result(Outcome.FAILED, t.intent.target, None, 0, error=error)


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
