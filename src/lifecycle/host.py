"""A host loop ready to run: Kubernetes objects in by list and watch, due ``Tick``\\ s and
provider polls beside them, all handed to a :class:`~lifecycle.Runner` in cycles (ADR 0158)::

    from lifecycle.host import HostLoop, Watched

    def pod_observations(change, at):      # the mapping the host writes
        if change.type == "DELETED":
            return DeletionRequested(at=at)
        return None                          # nothing to observe for this change

    loop = HostLoop(runner, {"Pod": Watched(PODS, pod_observations)}, api=api_client)
    loop.run()                               # until SIGTERM/SIGINT or loop.stop()

Per watched kind a thread lists the objects, then watches from the list's
``resourceVersion`` with the official ``kubernetes`` client (``allow_watch_bookmarks``,
``timeoutSeconds``): a bookmark moves the version, a dropped watch resumes from the last
version seen, ``410 Gone`` lists again and reconciles (an object gone while the watch was away
is delivered ``DELETED``), and every ``resync`` seconds it lists again the same way. No object
is delivered twice for one ``resourceVersion``.

Each cycle hands :meth:`Runner.observe_many <lifecycle.Runner.observe_many>` the observations
the host's mapping made of the changes gathered (each observed on the object's ref, with the
uid the API server gave it), a :class:`~lifecycle.Tick` for each object whose
``next_tick`` has come (and those :meth:`Runner.due <lifecycle.Runner.due>` names at start and
at each resync), and the outcomes of the provider polls that are due (:class:`Poll`). The
loop sleeps until the next change, the earliest ``next_tick``, the next poll or ``idle``.

A mapping that raises, a poll that raises, an observation the machine refuses: a
:class:`Failure` for that object (logged, kept in :attr:`HostLoop.failures`, passed to
``on_failure``), and the loop goes on.

Needs the ``kubernetes`` extra (:class:`~lifecycle.MissingExtra` names it when a loop is
built without it).
"""

from __future__ import annotations

import collections
import signal
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Generic, Protocol, TypeVar

import attrs

from ._core.errors import LifecycleError
from ._core.observation import Observation, Tick
from ._core.refs import ObjectRef
from ._host_watch import KindWatch
from ._k8s_api.client import configuration as api_configuration
from ._k8s_api.client import kubernetes_client
from ._log import get_logger
from ._protocol import Result
from ._requeue import seconds_until
from .adapters.provider import Provider, Tracked
from .runner import Runner
from .stores.kubernetes import CustomResource, ObjectCache, ObjectChange

__all__ = [
    "Cycle",
    "Failure",
    "HostLoop",
    "Leader",
    "ObjectMapping",
    "Poll",
    "Probe",
    "Watched",
]

_log = get_logger("lifecycle.host")

S = TypeVar("S")

#: What the host writes for a watched kind: called as ``mapping(change, at)`` with the
#: :class:`~lifecycle.stores.kubernetes.ObjectChange` (``type`` ``ADDED``, ``MODIFIED`` or
#: ``DELETED``; ``ref`` with the object's real uid; ``object`` the object as a dict -- for a
#: deletion a relist found, its last state seen) and the cycle's time; it returns the
#: observation(s) to feed the object's machine on ``change.ref``, or ``None`` for none.
ObjectMapping = Callable[[ObjectChange, datetime], Observation | Iterable[Observation] | None]


@attrs.frozen
class Watched:
    """A kind to list and watch: where its objects live (``resource``), the host's
    ``mapping`` of each change to observations, and which objects (``namespace``: one, or
    ``None`` for all; ``label_selector``).

    Attributes:
        resource: where the kind's objects live.
        mapping: the host's function from a change (and the time) to the observations fed.
        namespace: watch in this namespace; ``None``: every namespace.
        label_selector: only objects it selects, so a host sees only what it controls.
    """

    resource: CustomResource
    mapping: ObjectMapping
    namespace: str | None = None
    label_selector: str = ""


@attrs.frozen
class Poll(Generic[S]):
    """A provider to poll every ``every`` seconds (first at the first cycle): each due cycle
    calls ``provider.observe(tracked(), at=now)`` and observes each outcome on its pod. The
    host keeps ``tracked`` (the pods it placed on that provider, as
    :class:`~lifecycle.adapters.Tracked`); a Modal or EC2 adapter, or the fake one.

    Attributes:
        provider: the provider polled.
        tracked: the host's pods on that provider, asked afresh at each poll.
        every: seconds between polls: a bound on the provider's request rate.

    Raises:
        ValueError: ``every`` not positive.
    """

    provider: Provider[S]
    tracked: Callable[[], Mapping[ObjectRef, Tracked[S]]]
    every: float = 30.0

    def __attrs_post_init__(self) -> None:
        if not self.every > 0:
            raise ValueError(f"a poll's every must be positive, got {self.every!r}")


class Leader(Protocol):
    """Who may write (leader election, ADR 0158): the loop asks :meth:`is_leader` right
    before each batch it hands the runner, and writes nothing while the answer is no. An
    implementation must answer no before another replica can take its lease (its renew
    deadline inside the lease duration), and may call :meth:`HostLoop.wake` when it gains
    leadership so the loop does not wait for ``leader_poll``."""

    def is_leader(self) -> bool:
        """Whether this replica may write now.

        Returns:
            ``True`` while it holds leadership.
        """
        ...


class Probe(Protocol):
    """The health probes' side the loop drives (:class:`lifecycle.manifests.Health` is
    one): :meth:`ready` once every kind is listed, :meth:`beat` every turn of the loop."""

    def ready(self) -> None: ...

    def beat(self) -> None: ...


@attrs.frozen
class Failure:
    """Something that went wrong without stopping the loop: ``where`` (``"mapping"``,
    ``"poll"``, ``"observe"``, ``"redeliver"``, ``"watch"``), the object it concerns (``None``
    for a watch, a whole poll or a redelivery) and the error.

    Attributes:
        where: the step that failed.
        ref: the object concerned, or ``None``.
        error: the exception raised.
    """

    where: str
    ref: ObjectRef | None
    error: BaseException


@attrs.frozen
class Cycle:
    """What one turn of the loop did: when (``at``), how many changes it took, how many
    ``Tick``\\ s and poll outcomes it fed, the runner's results, the failures, whether it
    held leadership (else nothing was written), and when it plans to wake next (``None``: at
    the next change or ``idle``).

    Attributes:
        at: the host's time at the cycle.
        changes: how many list or watch changes it took.
        ticks: how many ``Tick``\\ s it fed.
        polled: how many poll outcomes it fed.
        results: the runner's results.
        failures: what went wrong without stopping the loop.
        leading: whether it held leadership (else nothing was written).
        next_tick: when the next timer is due, or ``None``.
    """

    at: datetime
    changes: int
    ticks: int
    polled: int
    results: tuple[Result, ...]
    failures: tuple[Failure, ...]
    leading: bool
    next_tick: datetime | None


def _now() -> datetime:
    return datetime.now(UTC)


class HostLoop:
    """Lists and watches the ``watched`` kinds (kind -> :class:`Watched`; each a kind the
    runner maps) and feeds the runner in cycles until :meth:`stop` (or SIGTERM/SIGINT while
    :meth:`run` holds the signals).

    ``api``: a ``kubernetes.client.ApiClient`` (its configuration is used), or ``None`` for
    the loaded default (``config.load_incluster_config()`` / ``load_kube_config()`` first).
    ``polls``: the providers to poll (:class:`Poll`). ``leader``: a :class:`Leader`, or
    ``None`` to always write. ``cache``: an :class:`~lifecycle.stores.kubernetes.ObjectCache`
    over the same kinds to keep current (``feed``), so the emitter's ``resolve=`` and the
    store's ``reader=`` see what the loop sees. ``health``: a :class:`Probe`.

    Timing: each watch lasts ``watch_timeout`` seconds (at most ``resync``), each list or
    watch request is bounded by ``request_timeout``; every ``resync`` seconds each kind is
    listed again and ``Runner.due`` read; the loop sleeps at most ``idle`` seconds (
    ``leader_poll`` while it is not the leader); one batch holds at most ``batch`` items.
    :meth:`run` ends within the cycle in flight plus ``shutdown_timeout`` seconds, the
    runner's ``close(timeout=grace)`` included (``close_runner=False`` leaves it open).
    ``clock``: the time observations carry (default: now, UTC).

    Args:
        runner: the runner fed.
        watched: kind to :class:`Watched`; each a kind the runner maps.
        api: a ``kubernetes.client.ApiClient``, or ``None`` for the loaded default.
        polls: the providers to poll.
        leader: who may write; ``None`` always writes (one replica).
        cache: an object cache over the same kinds, kept current, so the emitter's
            ``resolve=`` and the store's ``reader=`` see what the loop sees.
        health: the probes driven.
        resync: seconds between full lists of each kind (and reads of ``Runner.due``): what
            a missed watch event costs at most.
        watch_timeout: seconds one watch lasts.
        request_timeout: seconds one list or watch request may wait for its reply.
        idle: the most seconds the loop sleeps without a change.
        leader_poll: seconds between leadership checks while not leading.
        batch: the most items one batch hands the runner, a bound on one cycle's memory.
        grace: seconds the runner's ``close`` may take at the end.
        shutdown_timeout: seconds :meth:`run` may take to end after the cycle in flight.
        close_runner: close the runner when the loop ends.
        clock: the time observations carry; a test passes a fake one.
        on_failure: called with each :class:`Failure`, besides :attr:`failures`.

    Raises:
        ValueError: a timing or ``batch`` not positive, or nothing watched.
        UnknownMachine: a watched kind the runner does not map.
        ApiNotConfigured: no API server configuration.
    """

    def __init__(
        self,
        runner: Runner,
        watched: Mapping[str, Watched],
        *,
        api: Any = None,
        polls: Sequence[Poll[Any]] = (),
        leader: Leader | None = None,
        cache: ObjectCache | None = None,
        health: Probe | None = None,
        resync: float = 300.0,
        watch_timeout: int = 60,
        request_timeout: float = 10.0,
        idle: float = 60.0,
        leader_poll: float = 1.0,
        batch: int = 500,
        grace: float = 5.0,
        shutdown_timeout: float = 10.0,
        close_runner: bool = True,
        clock: Callable[[], datetime] = _now,
        on_failure: Callable[[Failure], None] | None = None,
    ) -> None:
        for name, value in (
            ("resync", resync),
            ("watch_timeout", watch_timeout),
            ("request_timeout", request_timeout),
            ("idle", idle),
            ("leader_poll", leader_poll),
            ("batch", batch),
            ("grace", grace),
            ("shutdown_timeout", shutdown_timeout),
        ):
            if not value > 0:
                raise ValueError(f"{name} must be positive, got {value!r}")
        if not watched:
            raise ValueError("a host loop watches at least one kind")
        for kind in watched:
            runner.machines.for_kind(kind)  # UnknownMachine for a kind the runner maps not
        needs = "lifecycle.host.HostLoop"
        client = kubernetes_client(needs)
        configuration = api_configuration(api, needs)  # ApiNotConfigured: no API server
        self.runner = runner
        self.watched = dict(watched)
        self.api_client = client.ApiClient(configuration)
        self.polls = tuple(polls)
        self.leader = leader
        self.cache = cache
        self.health = health
        self.resync = resync
        self.idle = idle
        self.leader_poll = leader_poll
        self.batch = batch
        self.grace = grace
        self.shutdown_timeout = shutdown_timeout
        self.close_runner = close_runner
        self.clock = clock
        self.on_failure = on_failure
        #: the latest failures (at most 1000), oldest first
        self.failures: collections.deque[Failure] = collections.deque(maxlen=1000)
        #: cycles run so far
        self.cycles = 0
        self._stopping = threading.Event()
        self._wake = threading.Condition()
        self._woken = False
        self._changes: list[ObjectChange] = []
        self._held: dict[tuple[str, str, str, str], ObjectChange] = {}
        self._timers: dict[ObjectRef, datetime] = {}
        self._polled_at: list[float | None] = [None] * len(self.polls)
        self._due_read = 0.0
        self._leading = False
        self._ready = False
        self._watches = [
            KindWatch(
                self.api_client,
                kind,
                spec.resource,
                namespace=spec.namespace,
                label_selector=spec.label_selector,
                timeout_seconds=max(1, min(int(watch_timeout), int(resync))),
                request_timeout=request_timeout,
                resync=resync,
                deliver=self._arrive,
                report=self._report,
                stopping=self._stopping,
            )
            for kind, spec in self.watched.items()
        ]
        self._threads: list[threading.Thread] = []

    # -- running ------------------------------------------------------------------------------
    def run(self, *, signals: bool = True) -> None:
        """Run until :meth:`stop`; with ``signals`` (and on the main thread) SIGTERM and
        SIGINT call :meth:`stop` (the previous handlers are put back on the way out). Stops
        the watches and closes the runner (unless ``close_runner=False``) before returning.

        Args:
            signals: stop on SIGTERM and SIGINT (on the main thread only), so a pod's
                termination ends the loop cleanly.
        """
        previous: dict[signal.Signals, Any] = {}
        if signals and threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGINT):
                previous[signum] = signal.signal(signum, self._signalled)
        try:
            self._start()
            while not self._stopping.is_set():
                done = self.cycle()
                self._sleep(done)
        finally:
            self._shut()
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def stop(self) -> None:
        """Ask the loop to end (safe from a signal handler and any thread): the watches are
        stopped now, the loop after its cycle in flight."""
        self._stopping.set()
        for watch in self._watches:
            watch.stop()
        self.wake()

    def _signalled(self, signum: int, frame: object) -> None:
        """The handler only asks the loop to stop (``examples/shutdown_host.py``): the
        watches are stopped on the way out, by the loop itself."""
        self._stopping.set()
        self.wake()

    def wake(self) -> None:
        """Run the next cycle now (a :class:`Leader` that gained leadership calls it)."""
        with self._wake:
            self._woken = True
            self._wake.notify_all()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    @property
    def listed(self) -> bool:
        """Whether every watched kind has been listed once."""
        return all(w.listed.is_set() for w in self._watches)

    # -- one cycle ----------------------------------------------------------------------------
    def cycle(self) -> Cycle:
        """One turn: take the changes gathered, the due ``Tick``\\ s and polls, and hand
        them to the runner at once (when leading); what it did.

        Returns:
            What the cycle did.
        """
        now = self.clock()
        if self.health is not None:
            self.health.beat()
            if not self._ready and self.listed:
                self._ready = True
                self.health.ready()
        with self._wake:
            changes, self._changes = self._changes, []
            self._woken = False
        leading = self.leader is None or bool(self.leader.is_leader())
        failures: list[Failure] = []
        if not leading:
            self._hold(changes)
            return Cycle(now, len(changes), 0, 0, (), (), False, None)
        if not self._leading:  # leadership gained (or the first cycle): what came due
            self._leading = True
            changes = [*self._held.values(), *changes]
            self._held.clear()
            self._redeliver(failures)  # what a crashed or deposed writer committed, unsent
            self._read_due(now, failures)
        elif time.monotonic() - self._due_read >= self.resync:
            self._redeliver(failures)
            self._read_due(now, failures)
        if len(changes) > self.batch:  # the rest in the next cycle, at once
            with self._wake:
                self._changes[:0] = changes[self.batch :]
                self._woken = True
            changes = changes[: self.batch]
        items = self._mapped(changes, now, failures)
        ticks = self._ticks(now)
        polled = self._polled(now, failures)
        results = self._observe([*items, *ticks, *polled], failures)
        if self.leader is not None and not self.leader.is_leader():
            self._hold(changes)  # lost while writing: what may not have landed waits for it
        for result in results:
            self._schedule(result)
        for failure in failures:
            self._record(failure)
        self.cycles += 1
        upcoming = min(self._timers.values(), default=None)
        return Cycle(
            now, len(changes), len(ticks), len(polled), tuple(results), tuple(failures), True,
            upcoming,
        )  # fmt: skip

    def _mapped(
        self, changes: Sequence[ObjectChange], now: datetime, failures: list[Failure]
    ) -> list[tuple[ObjectRef, Observation]]:
        items: list[tuple[ObjectRef, Observation]] = []
        for change in changes:
            mapping = self.watched[change.ref.kind].mapping
            try:
                made = mapping(change, now)
                seen = () if made is None else (made,) if isinstance(made, Observation) else made
                items += [(change.ref, observation) for observation in seen]
            except Exception as e:  # the host's mapping: reported, the others go on
                failures.append(Failure("mapping", change.ref, e))
            if change.type == "DELETED":
                self._timers.pop(change.ref, None)
        return items

    def _ticks(self, now: datetime) -> list[tuple[ObjectRef, Observation]]:
        due = [ref for ref, when in self._timers.items() if when <= now]
        for ref in due:
            del self._timers[ref]
        return [(ref, Tick(at=now)) for ref in due]

    def _polled(self, now: datetime, failures: list[Failure]) -> list[tuple[ObjectRef, Any]]:
        items: list[tuple[ObjectRef, Any]] = []
        moment = time.monotonic()
        for i, poll in enumerate(self.polls):
            last = self._polled_at[i]
            if last is not None and moment - last < poll.every:
                continue
            self._polled_at[i] = moment
            try:
                items += list(poll.provider.observe(poll.tracked(), at=now).items())
            except Exception as e:  # a provider answers failures as observations; not this
                failures.append(Failure("poll", None, e))
        return items

    def _observe(self, items: list[tuple[ObjectRef, Any]], failures: list[Failure]) -> list[Result]:
        if not items:
            return []
        try:
            results = self.runner.observe_many(items)
        except LifecycleError:  # an observation its machine does not know: one at a time
            results = []
            for ref, observation in items:
                try:
                    results.append(self.runner.observe(ref, observation))
                except LifecycleError as e:
                    failures.append(Failure("observe", ref, e))
        for result in results:
            if result.error is not None and not result.committed:
                failures.append(Failure("observe", result.ref, result.error))
        return results

    def _hold(self, changes: list[ObjectChange]) -> None:
        """Keep the latest state of each of ``changes`` for when this replica leads (again):
        nothing is written meanwhile, and observing a change twice writes it once."""
        for change in changes:
            ref = change.ref
            self._held[(ref.kind, ref.namespace, ref.name, ref.uid)] = change
        self._leading = False

    def _redeliver(self, failures: list[Failure]) -> None:
        """Hand the emitters every committed event not yet marked delivered: at the start, on
        gaining leadership and at each resync, so an Event a crashed (or deposed) replica
        committed but never sent is sent by the one that writes now."""
        try:
            self.runner.redeliver()
        except Exception as e:
            failures.append(Failure("redeliver", None, e))

    def _read_due(self, now: datetime, failures: list[Failure]) -> None:
        self._due_read = time.monotonic()
        try:
            refs = self.runner.due(now)
        except TypeError:  # a store without records: the results' next_tick only
            return
        except Exception as e:
            failures.append(Failure("observe", None, e))
            return
        for ref in refs:
            self._timers[ref] = now

    def _schedule(self, result: Result) -> None:
        if result.status is not None:
            try:
                machine = self.runner.machines.for_kind(result.ref.kind)
                when = machine.next_tick(result.status)
            except LifecycleError as e:  # a timer row without a deadline (lifecycle check)
                self._record(Failure("observe", result.ref, e))
                when = None
            if when is None:
                self._timers.pop(result.ref, None)
            else:
                self._timers[result.ref] = when
        for linked in result.linked:
            self._schedule(linked)

    def _sleep(self, done: Cycle) -> None:
        now = self.clock()
        longest = self.idle if done.leading else min(self.idle, self.leader_poll)
        wait = seconds_until(done.next_tick, now)
        for i, poll in enumerate(self.polls):
            last = self._polled_at[i]
            if last is not None and done.leading:
                left = max(0.0, poll.every - (time.monotonic() - last))
                wait = left if wait is None else min(wait, left)
        wait = longest if wait is None else min(wait, longest)
        with self._wake:
            if not (self._changes or self._woken or self._stopping.is_set()):
                self._wake.wait(wait)

    # -- the watches --------------------------------------------------------------------------
    def _start(self) -> None:
        for watch in self._watches:
            thread = threading.Thread(
                target=watch.run, name=f"lifecycle-watch-{watch.kind}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def _arrive(self, changes: Sequence[ObjectChange]) -> None:
        if self.cache is not None:
            for change in changes:
                try:
                    self.cache.feed(change.ref.kind, change.type, change.object)
                except (KeyError, ValueError) as e:
                    self._report("watch", e, change.ref)
        with self._wake:
            self._changes.extend(changes)
            self._wake.notify_all()

    def _report(self, where: str, error: BaseException, ref: ObjectRef | None) -> None:
        self._record(Failure(where, ref, error))

    def _record(self, failure: Failure) -> None:
        self.failures.append(failure)
        _log.warning(
            "host loop failure",
            where=failure.where,
            ref=str(failure.ref) if failure.ref is not None else "",
            error=f"{type(failure.error).__name__}: {failure.error}",
        )
        if self.on_failure is not None:
            try:
                self.on_failure(failure)
            except Exception as e:  # a host's callback must not end the loop either
                _log.warning("on_failure raised", error=f"{type(e).__name__}: {e}")

    def _shut(self) -> None:
        deadline = time.monotonic() + self.shutdown_timeout
        self.stop()
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic() - self.grace))
        try:
            if self.close_runner:
                self.runner.close(timeout=max(0.0, min(self.grace, deadline - time.monotonic())))
        finally:
            self.api_client.close()
