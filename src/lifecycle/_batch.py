"""The protocol's sans-I/O driver: many objects at a time, for ``observe_many`` and asyncio.

Every decision is :class:`~lifecycle._protocol.WriteProtocol`'s; this module only groups the
store operations. :func:`observe` is a generator that *yields* each store operation as a
request (:class:`Load`, :class:`Commit`, :class:`Mark`, :class:`Pause`), to be resumed with its
answer or thrown the :class:`~lifecycle.StoreError` it raised. A driver runs the requests:
:func:`run` against a synchronous store (``Runner.observe_many``, ``Runner.redeliver``), and
``lifecycle.aio`` against an asyncio one (``AsyncRunner``).

Per attempt, for the objects still pending: read them (one request), decide each, then commit
them (one request; each object has its own compare-and-set). Committed objects deliver their
events and apply their link intents; conflicting ones retry alone, with their machine's
budget; a store error or an exhausted budget loses the write (the fallback of
``Runner.observe``). With ``refuse=True`` (one object: ``AsyncRunner.observe``, an intent
applied depth-first) a refused observation raises, as ``Runner.observe`` does; for a batch it
is that item's failed :class:`Result`, and link intents are applied as a batch too.

A driver interrupted while it answers a request (a cancellation, ``KeyboardInterrupt``)
throws the interruption into the generator there (:func:`interrupt`): each post-commit step
keeps what it leaves -- events and marks in the protocol's backlog, intents pending -- and
:func:`finish` sends and marks the backlog first on the next call (ADR 0105).
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Sequence
from typing import Any, NoReturn

import attrs

from . import _link_intents
from ._backlog import Backlog
from ._core.errors import IdentityMismatch, LifecycleError, StoreError
from ._core.machine import Machine
from ._core.observation import Observation
from ._core.refs import ObjectRef
from ._core.transition import Transition
from ._delivery import Delivery, Redelivery, in_order
from ._protocol import Outcome, Result, RetryPolicy, Write, WriteProtocol
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
    """Mark these outbox ids delivered: answer ``None`` (a store without an outbox: no-op)."""

    ids: tuple[str, ...]


@attrs.frozen(slots=True)
class Pause:
    """Wait ``seconds`` before the next attempt (``policy.sleep`` or the event loop's)."""

    policy: RetryPolicy
    seconds: float


Request = Load | Commit | Mark | Pause
Driven = Generator[Request, Any, list[Result]]

#: Builds a :class:`Result` from all its fields in order: the named tuple's own ``_make``
#: (it refuses a missing or an extra field; ``tuple.__new__`` paid under 2 %: ADR 0154, 0156).
_result = Result._make


class _Item:
    """One observation of one object, between its attempts (a plain class: a page builds
    one per object, so its construction is a cost of every poll)."""

    __slots__ = ("actions", "attempt", "before", "index", "machine", "observation", "ref",
                 "version", "write")  # fmt: skip

    def __init__(
        self, index: int, ref: ObjectRef, observation: Observation, machine: Machine[Any]
    ) -> None:
        self.index = index
        self.ref = ref
        self.observation = observation
        self.machine = machine
        self.attempt = 0
        self.version = 0
        self.before: Any = None
        self.write: Write | None = None
        self.actions: tuple[Transition, ...] = ()

    def __repr__(self) -> str:
        return f"_Item({self.index}, {self.ref!r}, {self.observation!r}, attempt={self.attempt})"


def _wave(queue: list[_Item]) -> int:
    """How many of ``queue``'s first items form the next wave: up to the first object seen
    twice. Waves are runs of the items in their order, so that whatever an item's write
    leads to (its link intents) lands before anything a later item's does."""
    seen: set[str] = set()
    for n, item in enumerate(queue):
        if item.ref.uid in seen:
            return n
        seen.add(item.ref.uid)
    return len(queue)


@attrs.define(slots=True)
class _Run:
    """One :func:`observe` call between its waves: the results so far, the items still to
    read, and the committed items whose links wait behind an earlier item's retry."""

    protocol: WriteProtocol
    refuse: bool
    results: list[Result | None]
    queue: list[_Item]
    deferred: list[tuple[_Item, int]] = attrs.Factory(list)

    def refused(self, item: _Item, error: IdentityMismatch) -> None:
        """``item``'s uid is stored for another object: bad input, no write, no fallback."""
        if self.refuse:
            raise error
        self.results[item.index] = self.protocol.refused(
            item.ref, 0, error, item.attempt, item.actions
        )


def observe(
    protocol: WriteProtocol,
    items: Sequence[tuple[ObjectRef, Observation]],
    *,
    refuse: bool,
    catch_up: bool = True,
) -> Driven:
    """Observe ``items``; one :class:`Result` per item, in order. With ``catch_up`` (a
    caller's own call, not a link's) the pending link intents are retried first (ADR
    0090); their results go in the first result's ``caught_up``."""
    admit = protocol.admit
    work = [_Item(index, ref, obs, admit(ref, obs)) for index, (ref, obs) in enumerate(items)]
    run = _Run(protocol, refuse, [None] * len(work), work)
    retried = (yield from _catch_up(protocol, refuse)) if catch_up else ()
    try:
        while run.queue:
            size = _wave(run.queue)
            todo, run.queue = run.queue[:size], run.queue[size:]
            yield from _attempts(run, todo)
            now, run.deferred = run.deferred, []  # the retry that held them ended without a write
            yield from _settle(protocol, now, run.results, refuse)
    except BaseException:  # interrupted (ADR 0105): committed writes' intents stay pending
        protocol.unfinished((), [t for i, _ in run.deferred for t in _written(i).intents])
        raise
    done = [r for r in run.results if r is not None]
    assert len(done) == len(run.results)
    if retried and done:
        done[0] = done[0]._replace(caught_up=retried)
    return done


def _catch_up(protocol: WriteProtocol, refuse: bool) -> Generator[Request, Any, tuple[Result, ...]]:
    """Finish the backlog and retry the pending link intents first (unless another thread
    is at it); their results."""
    pending = protocol.pending
    if not (pending and pending.retrying.acquire(blocking=False)):
        return ()
    try:
        yield from finish(protocol)
        if not len(pending):
            return ()
        found = yield from apply_intents(protocol, pending.take(), batch=not refuse)
        return tuple(r for r in found if r is not None)
    finally:
        pending.retrying.release()


def _attempts(run: _Run, todo: list[_Item]) -> Generator[Request, Any, None]:
    """The attempts of one wave: read, decide, commit, then again for those that conflict."""
    first = True
    while todo:
        for item in todo:
            item.attempt += 1
        try:
            records: list[Record | IdentityMismatch | None] = yield Load(
                tuple([(i.machine, i.ref) for i in todo])
            )
        except StoreError as e:
            for item in todo:
                run.results[item.index] = _lost(run.protocol, item, e, reading=True)
            return
        writes = _decide_wave(run, todo, records, first)
        first = False
        if not writes:
            return
        todo = yield from _commit_wave(run, writes)


def _decide_wave(
    run: _Run, todo: list[_Item], records: list[Record | IdentityMismatch | None], first: bool
) -> list[_Item]:
    """Decide each item on what was read: the items to commit (the others have results)."""
    protocol = run.protocol
    results = run.results
    writes: list[_Item] = []
    reached: frozenset[str] = frozenset()  # machines this wave's links may write
    for n, (item, record) in enumerate(zip(todo, records, strict=True)):
        machine = item.machine
        if reached and first and machine.name in reached:
            # an earlier item's links may write this object: it waits for them, as it would
            # behind that item's own observe (read again next wave)
            for later in todo[n:]:
                later.attempt -= 1
            run.queue = todo[n:] + run.queue
            break
        if record.__class__ is Record and item.attempt == 1 and not machine.has_actions:
            # the cycle's common case first: a stored status the observation leaves as it
            # was (a remembered poll costs the step nothing, ADR 0166); anything else --
            # a change, a refusal, the machine's own failure -- is decided below
            before = record.status
            if protocol.leaves(machine, before, item.observation):
                results[item.index] = _result((
                    Outcome.UNCHANGED, item.ref, before, record.version, (), (), None, 1, (),
                    (), (),
                ))  # fmt: skip
                continue
        if isinstance(record, IdentityMismatch):
            run.refused(item, record)
            continue
        result = _decide(protocol, item, record, run.refuse)
        if result is not None:
            results[item.index] = result
            continue
        writes.append(item)
        if _written(item).intents:
            reached |= protocol.reach.get(item.machine.name, frozenset())
    return writes


def _commit_wave(run: _Run, writes: list[_Item]) -> Generator[Request, Any, list[_Item]]:
    """Commit ``writes``, deliver what committed and follow its links (in the items'
    order); the items to retry, after their pause."""
    protocol = run.protocol
    try:
        outcomes: list[int | StoreError | IdentityMismatch] = yield Commit(
            tuple(
                CommitItem(i.machine, i.ref, i.version, w.after, i.observation, w.written)
                for i in writes
                if (w := i.write) is not None
            )
        )
    except StoreError as e:
        outcomes = [e] * len(writes)
    retry, pause, committed = _sort_outcomes(run, writes, outcomes)
    # Links are followed in the items' order: those of an item behind one that retries wait
    # for it (its own links land first, as one observe each would).
    run.deferred = sorted([*run.deferred, *committed], key=lambda c: c[0].index)
    if committed:
        yield from deliver(
            protocol.delivery,
            [t for i, _ in committed for t in _written(i).transitions],
            protocol.backlog,
        )
    cut = min((i.index for i in retry), default=len(run.results))
    now = [c for c in run.deferred if c[0].index < cut]
    run.deferred = run.deferred[len(now) :]
    yield from _settle(protocol, now, run.results, run.refuse)
    if pause is not None:
        yield Pause(pause, pause.delay())
    return retry


def _sort_outcomes(
    run: _Run, writes: list[_Item], outcomes: list[int | StoreError | IdentityMismatch]
) -> tuple[list[_Item], RetryPolicy | None, list[tuple[_Item, int]]]:
    """Each write's outcome: refused, lost, to retry (with the first retry's policy), or
    committed at its new version."""
    retry: list[_Item] = []
    pause: RetryPolicy | None = None
    committed: list[tuple[_Item, int]] = []
    for item, outcome in zip(writes, outcomes, strict=True):
        if isinstance(outcome, IdentityMismatch):
            run.refused(item, outcome)
        elif isinstance(outcome, StoreError):
            policy = run.protocol.again(item.machine, item.observation, outcome, item.attempt)
            if policy is None:
                run.results[item.index] = _lost(run.protocol, item, outcome)
            else:
                pause = pause or policy
                retry.append(item)
        else:
            committed.append((item, outcome))
    return retry, pause, committed


def _settle(
    protocol: WriteProtocol,
    committed: list[tuple[_Item, int]],
    results: list[Result | None],
    refuse: bool,
) -> Generator[Request, Any, None]:
    """Follow the links of ``committed`` (in their order) and put each one's result."""
    if not committed:
        return
    linked = yield from _follow(protocol, [i for i, _ in committed], batch=not refuse)
    for (item, version), fed in zip(committed, linked, strict=True):
        write = _written(item)
        results[item.index] = Result(
            Outcome.COMMITTED,
            item.ref,
            write.after,
            version,
            write.transitions,
            attempts=item.attempt,
            linked=fed,
            actions=item.actions,
        )


def _decide(
    protocol: WriteProtocol, item: _Item, record: Record | None, refuse: bool
) -> Result | None:
    """Decide ``item`` on what this attempt read: its result, or ``None`` to commit it."""
    machine = item.machine
    before = machine.initial(item.ref) if record is None else record.status
    version = 0 if record is None else record.version
    try:
        write = protocol.decide(machine, item.ref, item.observation, before, version)
    except LifecycleError as refusal:
        if refuse:
            raise
        return protocol.refused(item.ref, version, refusal, item.attempt, item.actions)
    if item.attempt == 1 and machine.has_actions:
        item.actions = protocol.actions(machine, item.ref, before, item.observation, version)
    item.version, item.before, item.write = version, before, write
    if write is None:  # every field in order, no keyword handling (the cycle's common case)
        return _result((
            Outcome.UNCHANGED, item.ref, before, version, (), (), None, item.attempt, (),
            item.actions, (),
        ))  # fmt: skip
    return None


def _written(item: _Item) -> Write:
    assert item.write is not None
    return item.write


def _lost(protocol: WriteProtocol, item: _Item, error: StoreError, *, reading: bool = False
          ) -> Result:  # fmt: skip
    return protocol.lost(
        item.machine,
        item.ref,
        item.observation,
        item.before,
        item.version,
        item.write,
        error,
        item.attempt,
        item.actions,
        reading=reading,
    )


#: Nothing handed over.
_NOTHING = Redelivery(0)


def deliver(
    delivery: Delivery, events: Sequence[Transition], backlog: Backlog | None = None
) -> Generator[Request, Any, Redelivery]:
    """:meth:`Delivery.deliver` as requests: send, then mark what every emitter took; how
    many were handed over (and acknowledged). An interruption keeps what is left to do in
    ``backlog`` (ADR 0105): the events, if it came while they were being sent, else the ids
    to mark."""
    if not events:
        return _NOTHING
    try:
        delivered, counts = delivery.send_counted(events)
    except BaseException:
        if backlog is not None:
            backlog.hold_events(events)
        raise
    if delivered:
        try:
            yield Mark(tuple(delivered))
        except StoreError as e:
            delivery.unmarked(e)
        except BaseException:
            if backlog is not None:
                backlog.hold_marks(delivered)
            raise
    return counts


def finish(protocol: WriteProtocol) -> Generator[Request, Any, tuple[Redelivery, set[str]]]:
    """Finish what interrupted calls left in the protocol's backlog (ADR 0105): send its
    events (each object's in commit order), then mark them and the ids waiting to be marked.
    Returns how many were handed over and the ids of the events it sent (so a redelivery
    does not send them twice). Interrupted again, it keeps what it did not finish."""
    backlog = protocol.backlog
    if not backlog:
        return _NOTHING, set()
    events, marks = backlog.take()
    try:
        delivered, counts = (
            protocol.delivery.send_counted(in_order(events)) if events else ([], _NOTHING)
        )
    except BaseException:
        backlog.hold_events(events)
        backlog.hold_marks(marks)
        raise
    ids = (*marks, *delivered)
    if ids:
        try:
            yield Mark(ids)
        except StoreError as e:
            protocol.delivery.unmarked(e)
        except BaseException:
            backlog.hold_marks(ids)
            raise
    return counts, {t.id for t in events}


def landed(protocol: WriteProtocol, request: Commit, outcomes: Sequence[Any]) -> None:
    """The answer of a commit that finished after its call was interrupted (a cancellation
    waits for a commit's outcome, ADR 0105): the writes that landed are unfinished -- their
    events wait in the backlog, their intents pending."""
    for item, outcome in zip(request.items, outcomes, strict=False):
        if isinstance(outcome, int):
            protocol.unfinished(*_link_intents.split(item.transitions))


def interrupt(gen: Generator[Request, Any, Any], error: BaseException) -> NoReturn:
    """``error`` interrupted the answer to ``gen``'s request (a cancellation, a
    ``KeyboardInterrupt``): throw it into ``gen`` there, so that it keeps what it leaves
    unfinished (ADR 0105), then raise it."""
    with contextlib.suppress(StopIteration):
        gen.throw(error)
    gen.close()  # (it went on instead of stopping: it does not get to)
    raise error


def redeliver(
    protocol: WriteProtocol, claimed: Sequence[Transition], delivery: Delivery | None = None
) -> Generator[Request, Any, tuple[Redelivery, list[Result]]]:
    """Claimed outbox rows, delivered again (ADR 0062): their events in the one order of
    :mod:`lifecycle._delivery` (to ``delivery``'s emitters, default the protocol's), then
    their link intents applied in commit order (ADR 0090). Returns how many events were
    handed over (and acknowledged) and the intents' results."""
    own = delivery is None or delivery is protocol.delivery
    finished, sent = yield from finish(protocol)  # what an interrupted call left, first
    events, intents = _link_intents.split(claimed)
    delivered = finished.joined(
        (
            yield from deliver(
                delivery or protocol.delivery,
                in_order([t for t in events if t.id not in sent]),
                protocol.backlog if own else None,  # another's delivery: the outbox keeps them
            )
        )
    )
    if not intents:
        return delivered, []
    intents = in_order(intents)
    protocol.pending.claim(intents)  # the outbox has them: apply them now, lane by lane
    found = yield from apply_intents(protocol, intents)
    return delivered, [r for r in found if r is not None]


def _follow(
    protocol: WriteProtocol, committed: list[_Item], *, batch: bool
) -> Generator[Request, Any, list[tuple[Result, ...]]]:
    """Apply the link intents each committed item recorded; one tuple of results per item."""
    flat = [t for item in committed for t in _written(item).intents]
    if not flat:
        return [()] * len(committed)
    found = yield from apply_intents(protocol, flat, batch=batch)
    out: list[tuple[Result, ...]] = []
    at = 0
    for item in committed:
        n = len(_written(item).intents)
        out.append(tuple(r for r in found[at : at + n] if r is not None))
        at += n
    return out


def apply_intents(
    protocol: WriteProtocol, intents: Sequence[Transition], *, batch: bool = False
) -> Generator[Request, Any, list[Result | None]]:
    """Apply link intents to their targets in the order of :class:`_link_intents.Rounds`; one
    result per intent (``None``: held behind an earlier pending intent of its lane). One by
    one, depth-first, or in rounds of one intent per lane (``batch``). Confirmed intents are
    marked done."""
    results: list[Result | None] = [None] * len(intents)
    rounds = _link_intents.Rounds(protocol.pending, intents, batch=batch)
    try:
        yield from _rounds(protocol, rounds, intents, results, batch)
    except BaseException:  # interrupted (ADR 0105): what is not settled stays pending
        rounds.interrupted(protocol.backlog)
        raise
    return results


def _rounds(
    protocol: WriteProtocol,
    rounds: _link_intents.Rounds,
    intents: Sequence[Transition],
    results: list[Result | None],
    batch: bool,
) -> Generator[Request, Any, None]:
    while chosen := rounds.next():
        pairs: list[tuple[int, ObjectRef, Observation]] = []
        for i in chosen:
            t = intents[i]
            assert t.intent is not None
            try:
                obs = _link_intents.observation_of(protocol.machine_for(t.intent.target), t)
                if batch:
                    protocol.admit(t.intent.target, obs)
            except LifecycleError as e:
                results[i] = protocol.refused_link(t, e)
                continue
            pairs.append((i, t.intent.target, obs))
        if batch and pairs:
            found = yield from observe(
                protocol, [(r, o) for _, r, o in pairs], refuse=False, catch_up=False
            )
            for (i, _, _), result in zip(pairs, found, strict=True):
                results[i] = result
        for i, target, obs in pairs if not batch else ():
            try:
                (results[i],) = yield from observe(
                    protocol, [(target, obs)], refuse=True, catch_up=False
                )
            except LifecycleError as e:
                results[i] = protocol.refused_link(intents[i], e)
        for i in chosen:
            settled = results[i]
            assert settled is not None
            rounds.settle(i, settled.error)
    if rounds.done:
        try:
            yield Mark(tuple(rounds.done))
        except StoreError as e:
            protocol.delivery.unmarked(e, "link intents done")


# -- answering a request ---------------------------------------------------------------------
#: A store operation's result as its driver gets it: the value itself (a synchronous store's
#: call) or an awaitable of it (an asyncio store's coroutine, awaited by ``lifecycle.aio``).
Step = Generator[Any, Any, Any]


def answering(store: Any, request: Request, pause: Any, landed: list[Any] | None = None) -> Step:
    """How one request is answered, written once for both drivers: each store call is
    *yielded* and resumed with its result (or thrown what it raised); the generator returns
    the answer. The synchronous driver sends each call's value straight back (a call that
    raises, raises in here); :mod:`lifecycle.aio` awaits each one first. Batch methods are
    used where the store has them; a commit made one object at a time puts each outcome in
    ``landed`` as it comes (what an interruption between two of them leaves known).
    ``pause(request)`` waits out a :class:`Pause`."""
    if isinstance(request, Load):
        load_many = getattr(store, "load_many", None)
        if load_many is not None and len(request.items) > 1:
            try:
                return (yield load_many(request.items))
            except IdentityMismatch:
                pass  # the batch was refused: find the impostor(s), one object at a time
        found: list[Record | IdentityMismatch | None] = []
        for m, r in request.items:
            try:
                found.append((yield store.load(m, r)))
            except IdentityMismatch as e:
                found.append(e)
        return found
    if isinstance(request, Commit):
        commit_many = getattr(store, "commit_many", None)
        if commit_many is not None and len(request.items) > 1:
            try:
                return (yield commit_many(request.items))
            except IdentityMismatch:
                pass  # nothing of the batch was written: commit it one object at a time
        out: list[int | StoreError | IdentityMismatch] = [] if landed is None else landed
        for c in request.items:
            try:
                out.append(
                    (
                        yield store.commit(
                            c.machine, c.ref, c.expected, c.status, c.observation, c.transitions
                        )
                    )
                )
            except (StoreError, IdentityMismatch) as e:
                out.append(e)
        return out
    if isinstance(request, Mark):
        mark = getattr(store, "mark_delivered", None)
        if mark is not None:
            yield mark(request.ids)
        return None
    if request.seconds:
        yield pause(request)
    return None


def _sleep(request: Pause) -> None:
    request.policy.sleep(request.seconds)


# -- the synchronous driver -----------------------------------------------------------------
def answer(store: Any, request: Request, landed: list[Any] | None = None) -> Any:
    """Run one request against a synchronous :class:`~lifecycle.stores.Store` (see
    :func:`answering`: each call's value is sent straight back)."""
    steps = answering(store, request, _sleep, landed)
    reply: Any = None
    try:
        while True:
            reply = steps.send(reply)
    except StopIteration as stop:
        return stop.value


class Drive:
    """One run of a generator of this module, as both drivers (:func:`run`,
    ``AsyncRunner``) step it: :meth:`next` is the request to answer (``None`` once the
    generator returned, its value then in :attr:`value`), resumed with :attr:`reply` or
    thrown :attr:`error` (the store error the answer raised)."""

    __slots__ = ("error", "gen", "protocol", "reply", "value")

    def __init__(self, gen: Generator[Request, Any, Any], protocol: WriteProtocol) -> None:
        self.gen = gen
        self.protocol = protocol
        self.reply: Any = None
        self.error: StoreError | None = None
        self.value: Any = None

    def next(self) -> Request | None:
        reply, error = self.reply, self.error
        self.reply, self.error = None, None
        try:
            return self.gen.send(reply) if error is None else self.gen.throw(error)
        except StopIteration as stop:
            self.value = stop.value
            return None

    def interrupted(
        self, request: Request, done: list[Any] | None, error: BaseException
    ) -> NoReturn:
        """``error`` (a cancellation, ``KeyboardInterrupt``) interrupted the answer to
        ``request``: the commits in ``done`` landed before it, between two objects' commits,
        and are unfinished work; the generator keeps what it leaves (ADR 0105)."""
        if done and isinstance(request, Commit):
            landed(self.protocol, request, done)
        interrupt(self.gen, error)


def run(gen: Generator[Request, Any, Any], store: Any, protocol: WriteProtocol) -> Any:
    """Drive a generator of this module (of ``protocol``) against a synchronous store; its
    return value."""
    drive = Drive(gen, protocol)
    while (request := drive.next()) is not None:
        done: list[Any] | None = [] if isinstance(request, Commit) else None
        try:
            drive.reply = answer(store, request, done)
        except StoreError as e:
            drive.error = e
        except BaseException as e:  # interrupted: the generator keeps what it leaves
            drive.interrupted(request, done, e)
    return drive.value
