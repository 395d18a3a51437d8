"""The telemetry test double and conformance check (``lifecycle.testing``): a
:class:`RecordingTelemetry` that keeps every fact it is told, and :func:`check_telemetry`,
which holds a host's own :class:`~lifecycle.telemetry.Telemetry` to what the library needs of
one -- it changes no outcome, it takes every fact a faulty run reports without raising, and its
tokens come back to it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from .._core.errors import LifecycleError
from .._core.refs import ObjectRef
from .._core.transition import Transition
from ..adapters.provider import Tracked
from ..emitters.memory import MemoryEmitter
from ..machines import pod
from ..machines.job import WorkloadCreated
from ..runner import Runner
from ..stores.memory import MemoryStore
from ..telemetry import Observed, Telemetry, outcome_of
from ..telemetry._port import observe_ended_of
from .doubles import FailingEmitter, FaultyStore
from .fake_provider import FakeProvider, FakeSpec

__all__ = ["Fact", "RecordingTelemetry", "check_telemetry"]


class Fact(NamedTuple):
    """One call a :class:`RecordingTelemetry` was told: the method's name and its arguments."""

    method: str
    args: tuple[Any, ...]


class RecordingTelemetry:
    """Keeps every fact, in order (:attr:`facts`); ``traces=True`` makes it a tracing
    telemetry whose :meth:`trace_context` is ``context``.

    Args:
        traces: act as a tracing telemetry (the runner then asks it for a trace context).
        context: the trace context it hands out.
    """

    def __init__(self, *, traces: bool = False, context: str = "") -> None:
        self.traces = traces
        self.context = context
        self.facts: list[Fact] = []
        self._tokens = 0
        #: tokens handed out by ``begin`` and not yet ended
        self.open: set[int] = set()

    def begin(self, operation: str, machine: str) -> object:
        """Record a ``begin`` fact and hand out a fresh token.

        Args:
            operation: the runner's operation (``observe``, ``redeliver`` ...).
            machine: the machine's name.

        Returns:
            The token, a counter, kept in :attr:`open` until its ``end``.
        """
        self._tokens += 1
        self.open.add(self._tokens)
        self.facts.append(Fact("begin", (operation, machine, self._tokens)))
        return self._tokens

    def end(self, token: object, observed: Sequence[Observed], error: BaseException | None) -> None:
        """Record an ``end`` fact and close the token.

        Args:
            token: what :meth:`begin` handed out.
            observed: what the operation observed and its results.
            error: what it raised, or ``None``.
        """
        if isinstance(token, int):
            self.open.discard(token)
        self.facts.append(Fact("end", (token, tuple(observed), error)))

    def store_call(
        self, store: str, operation: str, machine: str, seconds: float, error: BaseException | None
    ) -> None:
        """Record a ``store_call`` fact.

        Args:
            store: the store's name.
            operation: the store method called.
            machine: the machine's name.
            seconds: how long it took.
            error: what it raised, or ``None``.
        """
        self.facts.append(Fact("store_call", (store, operation, machine, seconds, error)))

    def emitted(
        self, emitter: str, transition: Transition, seconds: float, error: BaseException | None
    ) -> None:
        """Record an ``emitted`` fact.

        Args:
            emitter: the emitter's name.
            transition: the transition delivered.
            seconds: how long it took.
            error: what it raised, or ``None``.
        """
        self.facts.append(Fact("emitted", (emitter, transition, seconds, error)))

    def redelivered(self, transitions: Sequence[Transition]) -> None:
        """Record a ``redelivered`` fact.

        Args:
            transitions: the transitions redelivered.
        """
        self.facts.append(Fact("redelivered", (tuple(transitions),)))

    def trace_context(self) -> str:
        """The trace context given at construction.

        Returns:
            ``context``.
        """
        return self.context

    # -- reading what was recorded -------------------------------------------------------------
    def of(self, method: str) -> list[tuple[Any, ...]]:
        """The arguments of every call of ``method``, in order.

        Args:
            method: the telemetry method's name (``begin``, ``end`` ...).

        Returns:
            One argument tuple per call.
        """
        return [f.args for f in self.facts if f.method == method]

    def outcomes(self) -> list[tuple[str, str]]:
        """``(machine, outcome)`` of every write reported, in order.

        Returns:
            The pairs, one per write.
        """
        return [(o.machine, outcome_of(o.result)) for args in self.of("end") for o in args[1]]

    def operations(self) -> list[str]:
        """The operation of every ``begin``, in order.

        Returns:
            The operations' names.
        """
        return [args[0] for args in self.of("begin")]


class _Run(NamedTuple):
    statuses: dict[str, Any]
    events: list[str]
    outcomes: list[str]


_AT = datetime(2026, 1, 1, tzinfo=UTC)


def _scenario(telemetry: Telemetry | None) -> tuple[_Run, Runner]:
    """Two Pods through create, provision, running and deletion on a faulty memory store, a
    conflict and a write error injected, an emitter failing once, a refused observation, and a
    redelivery at the end."""
    store = FaultyStore(MemoryStore())
    events, failing = MemoryEmitter(), FailingEmitter(failures=1)
    runner = Runner(store, [events, failing], telemetry=telemetry)
    provider = FakeProvider(boot_ticks=1)
    spec = FakeSpec()
    pods = [ObjectRef("Pod", "ns", f"p{i}", uid=f"uid-p{i}") for i in range(2)]
    outcomes: list[str] = []
    now = _AT
    store.inject(pods[0].uid, "conflict")
    tracked: dict[ObjectRef, Tracked[FakeSpec]] = {}
    for ref in pods:
        outcomes.append(runner.observe(ref, pod.CreateRequested(at=now, pool="gpu")).outcome.value)
        created = provider.provision(ref, spec, at=now)
        outcomes.append(runner.observe(ref, created).outcome.value)
        tracked[ref] = Tracked.provisioned(spec, created)
    try:
        runner.observe(pods[0], WorkloadCreated(at=now))  # not a Pod observation: refused
    except LifecycleError as e:
        outcomes.append(type(e).__name__)
    for _ in range(3):
        now += timedelta(seconds=15)
        results = runner.observe_many(list(provider.observe(tracked, at=now).items()))
        outcomes.extend(r.outcome.value for r in results)
    store.inject(pods[1].uid, "write-error")
    for ref in [*pods, pods[1]]:  # the second Pod's first deletion write fails; it is redone
        outcomes.append(runner.observe(ref, pod.DeletionRequested(at=now)).outcome.value)
    outcomes.append(str(runner.redeliver()))
    statuses = {}
    for ref in pods:
        record = runner.store.load(runner.machine_for(ref), ref)
        statuses[ref.uid] = None if record is None else (record.version, record.status)
    return _Run(statuses, [t.id for t in events.events], outcomes), runner


def check_telemetry(make_telemetry: Callable[[], Telemetry]) -> None:
    """Hold a host's telemetry to the port's contract, on a faulty scripted run: with it the
    run ends exactly as without it (statuses, events, outcomes); none of its methods raises on
    what the run reports; every token its ``begin`` hands out comes back to it in an ``end``.
    A telemetry with the port's optional ``observe_ended`` runs the scenario a second time,
    alone, so that the runner calls it (and its ``begin`` and ``end`` only around batches,
    redeliveries and the schema check). Raises ``AssertionError`` naming what broke.

    Args:
        make_telemetry: makes a fresh telemetry of the kind under test.

    Raises:
        AssertionError: the telemetry broke the contract; the message says how.
    """
    plain, _ = _scenario(None)
    recording = RecordingTelemetry()
    host = make_telemetry()
    if not isinstance(host, Telemetry):
        raise AssertionError(f"{type(host).__name__} does not implement the Telemetry port")
    watched, runner = _scenario(_Pair(recording, host))
    if watched != plain:
        raise AssertionError(f"the run changed with the telemetry on: {watched} != {plain}")
    assert runner.telemetry is not None
    if runner.telemetry.failures:
        raise AssertionError(f"the telemetry raised: {runner.telemetry.failures}")
    if recording.open:
        raise AssertionError(f"operations begun and never ended: {sorted(recording.open)}")
    if "refused" not in [o for _, o in recording.outcomes()] and not any(
        args[2] is not None for args in recording.of("end")
    ):
        raise AssertionError("the refused observation was not reported")
    if observe_ended_of(host) is not None:
        watched, runner = _scenario(make_telemetry())
        if watched != plain:
            raise AssertionError(f"the run changed with observe_ended: {watched} != {plain}")
        assert runner.telemetry is not None
        if runner.telemetry.failures:
            raise AssertionError(f"the telemetry raised: {runner.telemetry.failures}")


class _Pair:
    """The recording double first, then the host's telemetry (whose failures propagate, so
    the guard counts them)."""

    def __init__(self, recording: RecordingTelemetry, host: Telemetry) -> None:
        self.recording, self.host = recording, host
        self.traces = bool(getattr(host, "traces", False))

    def begin(self, operation: str, machine: str) -> object:
        return (self.recording.begin(operation, machine), self.host.begin(operation, machine))

    def end(self, token: object, observed: Sequence[Observed], error: BaseException | None) -> None:
        mine, theirs = token if isinstance(token, tuple) else (None, None)
        self.recording.end(mine, observed, error)
        self.host.end(theirs, observed, error)

    def store_call(
        self, store: str, operation: str, machine: str, seconds: float, error: BaseException | None
    ) -> None:
        self.recording.store_call(store, operation, machine, seconds, error)
        self.host.store_call(store, operation, machine, seconds, error)

    def emitted(
        self, emitter: str, transition: Transition, seconds: float, error: BaseException | None
    ) -> None:
        self.recording.emitted(emitter, transition, seconds, error)
        self.host.emitted(emitter, transition, seconds, error)

    def redelivered(self, transitions: Sequence[Transition]) -> None:
        self.recording.redelivered(transitions)
        self.host.redelivered(transitions)

    def trace_context(self) -> str:
        return self.host.trace_context()
