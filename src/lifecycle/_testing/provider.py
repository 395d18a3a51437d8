"""The provider conformance check: what any provider adapter -- shipped or a host's own -- must
do through the port (:class:`~lifecycle.adapters.Provider`), judged by the Pod machine that
consumes what it answers."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, TypeVar

from .._core.errors import LifecycleError, preview
from .._core.observation import Observation
from .._core.refs import ObjectRef
from ..adapters.provider import (
    AsyncProvider,
    PollOutcome,
    Provider,
    ProvisionOutcome,
    TerminateOutcome,
    Tracked,
)
from ..emitters.memory import MemoryEmitter
from ..machines import pod
from ..runner import Result, Runner
from ..stores.memory import MemoryStore

S = TypeVar("S")

#: ``settle(provider, instance_id)``: bring a just-provisioned instance up, running and ready,
#: on the provider's side (e.g. an EC2 fake passing its status checks).
Settle = Callable[[Any, str], None]
#: ``fail_next(provider, call, message)``: make the provider's next ``call`` (``"provision"``,
#: ``"observe"`` or ``"terminate"``) fail with an error whose text holds ``message``.
FailNext = Callable[[Any, str, str], None]

_AT = datetime(2026, 1, 1, tzinfo=UTC)
#: A credential in the shape the redactor knows (an AWS access key id): injected into every
#: scripted failure, it must never come back in an observation.
SECRET = "AKIAZZZZCONFORMANCE7"
_KNOWN = (pod.InstancePending, pod.InstanceRunning, pod.InstanceFailed, pod.InstanceTerminated)
_GONE = (pod.InstanceAbsent, pod.InstanceTerminated)


def _require(ok: object, what: str) -> None:
    """An ``AssertionError`` naming the broken promise (kept under ``python -O``)."""
    if not ok:
        raise AssertionError(f"provider conformance: {what}")


class _Conformance(Generic[S]):
    """One run of the check: a provider, a runner on the memory store that consumes everything
    it answers, and a clock that moves one second per call."""

    def __init__(self, provider: Provider[S], spec: S) -> None:
        self.provider = provider
        self.spec = spec
        self.events = MemoryEmitter()
        self.runner = Runner(MemoryStore(), [self.events])
        self.now = _AT

    def tick(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now

    def ref(self, name: str) -> ObjectRef:
        return ObjectRef("Pod", "conformance", f"pod-{name}", f"conformance-{name}")

    def feed(self, ref: ObjectRef, obs: Observation) -> Result:
        """Hand ``obs`` to the runner: the Pod machine must accept it in the state it is in."""
        before = self.runner.store.load(pod.POD, ref)
        state = "∅" if before is None else before.status.state or "∅"
        try:
            return self.runner.observe(ref, obs)
        except LifecycleError as e:
            raise AssertionError(
                f"provider conformance: the Pod machine refused {preview(obs)} in state "
                f"{state}: {e}"
            ) from e

    def state(self, ref: ObjectRef) -> str:
        record = self.runner.store.load(pod.POD, ref)
        return "" if record is None else str(record.status.state)

    def call(self, what: str, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        """A provider call; anything it raises breaks the promise of typed observations."""
        try:
            return fn(*args, **kw)
        except Exception as e:
            raise AssertionError(
                f"provider conformance: {what} raised {type(e).__name__}: {preview(str(e))} "
                "(a provider answers with a typed observation, never an exception)"
            ) from e

    def create(self, ref: ObjectRef) -> ProvisionOutcome:
        at = self.tick()
        self.feed(ref, pod.CreateRequested(at=at, pool="conformance", provider=self.provider.name))
        out: ProvisionOutcome = self.call(
            f"provision({ref})", self.provider.provision, ref, self.spec, at=at
        )
        _require(out.at == at, f"provision must stamp its answer with the given at: {out!r}")
        return out

    def observe(self, pods: Mapping[ObjectRef, Tracked[S]]) -> dict[ObjectRef, PollOutcome]:
        at = self.tick()
        seen: dict[ObjectRef, PollOutcome] = self.call(
            "observe", self.provider.observe, pods, at=at
        )
        _require(
            set(seen) == set(pods),
            f"observe must answer for exactly the pods asked: {sorted(map(str, seen))}",
        )
        for obs in seen.values():
            _require(obs.at == at, f"observe must stamp its answers with the given at: {obs!r}")
        return seen

    def terminate(self, ref: ObjectRef, tracked: Tracked[S]) -> TerminateOutcome:
        at = self.tick()
        out: TerminateOutcome = self.call(
            f"terminate({ref}, {tracked.instance_id!r})",
            self.provider.terminate,
            ref,
            tracked,
            at=at,
        )
        _require(out.at == at, f"terminate must stamp its answer with the given at: {out!r}")
        return out


def check_provider(
    make_provider: Callable[[], Provider[S]],
    spec: S,
    *,
    settle: Settle | None = None,
    fail_next: FailNext | None = None,
    polls: int = 5,
    unknown_id: str = "i-0000000000000dead",
) -> None:
    """Check a :class:`~lifecycle.adapters.Provider` against the port, feeding everything it
    answers to a :class:`~lifecycle.Runner` on the memory store (the Pod machine must accept
    each answer in the state the pod is in):

    - ``provision`` succeeds with an instance id, is idempotent by claim (the same pod twice:
      the same id; another pod: another id), and stamps the given ``at``;
    - ``observe`` answers for exactly the pods asked, a provisioned pod with a known state of
      its own instance (Pending/Running/Failed/Terminated), reaching Running and Ready within
      ``polls`` polls, and a pod never provisioned with ``InstanceAbsent``;
    - ``terminate`` succeeds by id and by claim (empty id), again, for an unknown pod and for
      ``unknown_id``; afterwards the pod's instance is absent or terminated;
    - the pod's events are one contiguous chain of flips from ``∅`` through ``Running`` to
      ``Terminated``, none twice;
    - with ``fail_next`` (see :data:`FailNext`): a failing provision is ``ProvisionErrored`` or
      ``ProvisionRejected``, a failing observe ``InstanceUnknown`` (never absent: the pod is
      unchanged), a failing terminate ``TerminateFailed`` (the pod is unchanged), none of them
      raised, and none carrying the credential the failure quoted (:data:`SECRET`).

    ``make_provider`` returns a fresh provider with nothing provisioned (closed afterwards when
    it has ``close``); ``spec`` is what every pod asks for; ``settle`` (see :data:`Settle`)
    brings an instance up when the provider needs a nudge. Raises ``AssertionError`` naming
    the broken promise.

    Args:
        make_provider: makes a fresh provider with nothing provisioned.
        spec: what every pod asks for.
        settle: brings a just-provisioned instance up, running and ready, where the provider
            does not on its own (:data:`Settle`); ``None``: it does.
        fail_next: makes the provider's next call fail (:data:`FailNext`), so the failure
            promises are checked; ``None``: they are not.
        polls: how many polls a provisioned pod may take to be Running and Ready.
        unknown_id: an instance id the provider has never seen, for the idempotent terminate.

    Raises:
        AssertionError: the provider broke a promise; the message says which.
    """
    if polls < 1:
        raise ValueError(f"polls must be at least 1, got {polls}")
    provider = make_provider()
    try:
        run = _Conformance(provider, spec)
        name = provider.name
        _require(isinstance(name, str) and name, f"a provider has a name: {name!r}")
        pods = _check_provision(run, settle)
        _check_observe(run, pods, polls)
        _check_terminate(run, pods, unknown_id)
        if fail_next is not None:
            _check_failures(run, fail_next)
    finally:
        close = getattr(provider, "close", None)
        if callable(close):
            close()


def _check_provision(run: _Conformance[S], settle: Settle | None) -> dict[ObjectRef, Tracked[S]]:
    a, b = run.ref("a"), run.ref("b")
    first = run.create(a)
    _require(
        isinstance(first, pod.ProvisionSucceeded) and first.instance_id,
        f"provision of a fresh pod must succeed with an instance id: {first!r}",
    )
    assert isinstance(first, pod.ProvisionSucceeded)
    run.feed(a, first)
    again = run.call("provision (again)", run.provider.provision, a, run.spec, at=run.tick())
    _require(
        isinstance(again, pod.ProvisionSucceeded) and again.instance_id == first.instance_id,
        f"provision is idempotent by claim: {first.instance_id!r} again, not {again!r}",
    )
    run.feed(a, again)
    other = run.create(b)
    _require(
        isinstance(other, pod.ProvisionSucceeded)
        and other.instance_id
        and other.instance_id != first.instance_id,
        f"another pod gets another instance: {other!r}",
    )
    run.feed(b, other)
    pods = {a: Tracked.provisioned(run.spec, first), b: Tracked.provisioned(run.spec, other)}
    if settle is not None:
        for tracked in pods.values():
            settle(run.provider, tracked.instance_id)
    return pods


def _check_observe(run: _Conformance[S], pods: dict[ObjectRef, Tracked[S]], polls: int) -> None:
    for _ in range(polls):
        for ref, obs in run.observe(pods).items():
            _require(
                isinstance(obs, _KNOWN),
                f"a provisioned pod's instance has a known state, not {obs!r}",
            )
            _require(
                getattr(obs, "instance_id", "") == pods[ref].instance_id,
                f"observe must report the pod's own instance {pods[ref].instance_id!r}: {obs!r}",
            )
            run.feed(ref, obs)
        if all(run.state(ref) == pod.RUNNING for ref in pods):
            break
    states = {str(ref): run.state(ref) for ref in pods}
    _require(
        all(s == pod.RUNNING for s in states.values()),
        f"provisioned pods must be Running within {polls} polls: {states}",
    )
    stranger = run.ref("never-provisioned")
    seen = run.observe({stranger: Tracked(run.spec)})[stranger]
    _require(isinstance(seen, pod.InstanceAbsent), f"a pod never provisioned is absent: {seen!r}")
    run.feed(stranger, seen)


def _check_terminate(run: _Conformance[S], pods: dict[ObjectRef, Tracked[S]], unknown: str) -> None:
    a, b = pods
    for ref, tracked in ((a, pods[a]), (b, Tracked(run.spec))):  # by id, then by claim
        run.feed(ref, pod.DeletionRequested(at=run.tick()))
        out = run.terminate(ref, tracked)
        _require(
            isinstance(out, pod.TerminateSucceeded), f"terminate of {ref} must succeed: {out!r}"
        )
        run.feed(ref, out)
        _require(run.state(ref) == pod.TERMINATED, f"{ref} is Terminated: {run.state(ref)}")
        after = run.observe({ref: pods[ref]})[ref]
        _require(
            isinstance(after, _GONE), f"a terminated instance is absent or terminated: {after!r}"
        )
        run.feed(ref, after)
        again = run.terminate(ref, pods[ref])
        _require(isinstance(again, pod.TerminateSucceeded), f"terminate is idempotent: {again!r}")
    stranger = run.ref("never-provisioned")
    for tracked in (Tracked(run.spec), Tracked(run.spec, unknown)):
        out = run.terminate(stranger, tracked)
        _require(
            isinstance(out, pod.TerminateSucceeded),
            f"terminate of an unknown instance ({tracked.instance_id!r}) succeeds: {out!r}",
        )
    for ref in pods:
        chain = [(t.source, t.target) for t in run.events.for_uid(ref.uid)]
        _require(chain and chain[0][0] == "", f"{ref}'s first flip starts at ∅: {chain}")
        _require(
            all(prev[1] == nxt[0] for prev, nxt in itertools.pairwise(chain)),
            f"{ref}'s flips form one chain: {chain}",
        )
        targets = [target for _, target in chain]
        _require(pod.RUNNING in targets, f"{ref} flipped to Running: {chain}")
        _require(targets[-1] == pod.TERMINATED, f"{ref}'s last flip is to Terminated: {chain}")
    run.events.assert_no_duplicates()


def _check_failures(run: _Conformance[S], fail_next: FailNext) -> None:
    d = run.ref("d")
    message = f"conformance: injected failure (key {SECRET})"
    fail_next(run.provider, "provision", message)
    failed = run.create(d)
    _require(
        isinstance(failed, pod.ProvisionErrored | pod.ProvisionRejected),
        f"a failing provision is ProvisionErrored or ProvisionRejected: {failed!r}",
    )
    _require(SECRET not in repr(failed), f"a provision failure is redacted: {failed!r}")
    run.feed(d, failed)
    if isinstance(failed, pod.ProvisionRejected):
        d = run.ref("e")  # rejected is terminal: another pod checks the rest
        run.feed(d, pod.CreateRequested(at=run.tick(), provider=run.provider.name))
    placed = run.call(
        "provision (after a failure)", run.provider.provision, d, run.spec, at=run.tick()
    )
    _require(
        isinstance(placed, pod.ProvisionSucceeded),
        f"provision succeeds once the provider answers again: {placed!r}",
    )
    run.feed(d, placed)
    tracked = {d: Tracked.provisioned(run.spec, placed)}
    state = run.state(d)
    fail_next(run.provider, "observe", message)
    unknown = run.observe(tracked)[d]
    _require(
        isinstance(unknown, pod.InstanceUnknown),
        f"a failing observe is InstanceUnknown (never absent): {unknown!r}",
    )
    _require(SECRET not in repr(unknown), f"an observe failure is redacted: {unknown!r}")
    run.feed(d, unknown)
    _require(run.state(d) == state, f"InstanceUnknown changes nothing: {run.state(d)}")
    fail_next(run.provider, "terminate", message)
    refused = run.terminate(d, tracked[d])
    _require(
        isinstance(refused, pod.TerminateFailed),
        f"a failing terminate is TerminateFailed: {refused!r}",
    )
    _require(SECRET not in repr(refused), f"a terminate failure is redacted: {refused!r}")
    run.feed(d, refused)
    _require(run.state(d) == state, f"TerminateFailed changes nothing: {run.state(d)}")
    done = run.terminate(d, tracked[d])
    _require(isinstance(done, pod.TerminateSucceeded), f"terminate succeeds afterwards: {done!r}")


class _Blocking(Generic[S]):
    """An :class:`~lifecycle.adapters.AsyncProvider` driven from synchronous code on a private
    event loop (which also runs whatever tasks the provider leaves behind, between calls)."""

    def __init__(self, inner: AsyncProvider[S]) -> None:
        self.inner = inner
        self.loop = asyncio.new_event_loop()

    @property
    def name(self) -> str:
        return self.inner.name

    def provision(
        self, ref: ObjectRef, spec: S, *, attempt: int = 0, at: datetime | None = None
    ) -> ProvisionOutcome:
        return self.loop.run_until_complete(self.inner.provision(ref, spec, attempt=attempt, at=at))

    def observe(
        self, pods: Mapping[ObjectRef, Tracked[S]], *, at: datetime | None = None
    ) -> dict[ObjectRef, PollOutcome]:
        return self.loop.run_until_complete(self.inner.observe(pods, at=at))

    def terminate(
        self, ref: ObjectRef, pod: Tracked[S], *, at: datetime | None = None
    ) -> TerminateOutcome:
        return self.loop.run_until_complete(self.inner.terminate(ref, pod, at=at))

    def close(self) -> None:
        aclose = getattr(self.inner, "aclose", None)
        with contextlib.suppress(Exception):
            if callable(aclose):
                self.loop.run_until_complete(aclose())
        self.loop.close()


def check_async_provider(
    make_provider: Callable[[], AsyncProvider[S]],
    spec: S,
    *,
    settle: Settle | None = None,
    fail_next: FailNext | None = None,
    polls: int = 5,
    unknown_id: str = "i-0000000000000dead",
) -> None:
    """:func:`check_provider` for an :class:`~lifecycle.adapters.AsyncProvider`: the same
    promises, each call awaited on a private event loop (closed afterwards, after the
    provider's ``aclose`` if it has one). ``settle`` and ``fail_next`` receive the async
    provider itself.

    Args:
        make_provider: makes a fresh async provider with nothing provisioned.
        spec: as for :func:`check_provider`.
        settle: as for :func:`check_provider`, given the async provider.
        fail_next: as for :func:`check_provider`, given the async provider.
        polls: as for :func:`check_provider`.
        unknown_id: as for :func:`check_provider`.

    Raises:
        AssertionError: the provider broke a promise; the message says which.
    """

    def make() -> Provider[S]:
        return _Blocking(make_provider())

    def unwrap(hook: Callable[..., None] | None) -> Callable[..., None] | None:
        if hook is None:
            return None
        return lambda provider, *args: hook(provider.inner, *args)

    check_provider(
        make,
        spec,
        settle=unwrap(settle),
        fail_next=unwrap(fail_next),
        polls=polls,
        unknown_id=unknown_id,
    )
