"""Where the facts come from: thin wrappers a runner installs around its store, its emitters
and its own entry points when (and only when) a host gives it a :class:`Telemetry`.

Nothing here is on the path of a runner without telemetry: the runner's methods, its store and
its emitters are then the unwrapped ones (ADR 0130).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Sequence
from time import perf_counter
from typing import Any

from .._core.errors import LifecycleError
from .._core.transition import Transition
from ._port import Guarded, Observed, flattened, observe_ended_of

__all__ = [
    "InstrumentedEmitter",
    "InstrumentedStore",
    "checked",
    "innermost",
    "instrument",
    "instrument_round",
    "reporting_emitters",
    "reporting_store",
    "store_name",
    "unreported",
]

#: The store calls that are timed; any other attribute is the wrapped store's own.
_TIMED = ("load", "commit", "load_many", "commit_many", "claim_undelivered", "mark_delivered")


def innermost(store: Any) -> Any:
    """The store under its wrappers: a ``ThreadedStore``'s, a telemetry's, or anything holding
    the real one as ``inner`` (a store injecting faults)."""
    for _ in range(8):
        if isinstance(store, InstrumentedStore):
            inner = store.wrapped
        else:
            inner = getattr(store, "inner", None)
            if inner is None and type(store).__name__ == "ThreadedStore":
                inner = getattr(store, "store", None)
        if inner is None or not hasattr(inner, "commit"):
            break
        store = inner
    return store


def store_name(store: object) -> str:
    """The ``store`` label of a store: ``memory``, ``sqlite``, ``postgres`` or a host's class
    name, lower case (its wrappers are looked through: :func:`innermost`)."""
    name = type(innermost(store)).__name__.lower()
    for suffix in ("asyncstore", "store"):
        if name.endswith(suffix) and len(name) > len(suffix):
            name = name[: -len(suffix)]
            break
    return name.removeprefix("async")


def _traced(transitions: Sequence[Transition], context: str) -> tuple[Transition, ...]:
    return tuple(t._replace(trace=context) for t in transitions)


class InstrumentedStore:
    """A store whose calls are timed and reported; everything else is the store's own.

    Only the calls the wrapped store has are defined here (a runner looks optional
    capabilities up by name), synchronous or awaited as the store's are. On a tracing
    telemetry, the events a commit writes carry the committing span's context.
    """

    def __init__(self, store: Any, telemetry: Guarded) -> None:
        self._inner = store
        self._telemetry = telemetry
        self._name = store_name(store)
        # A store without I/O (the memory store: a dict lookup is cheaper than timing it)
        # is timed only where it hands out rows for redelivery.
        timed = _TIMED if getattr(store, "does_io", True) else ("claim_undelivered",)
        for operation in _TIMED:
            call = getattr(store, operation, None)
            if call is not None:  # an untimed call is the store's own method, looked up once
                setattr(
                    self, operation, self._timed(operation, call) if operation in timed else call
                )

    @property
    def wrapped(self) -> Any:
        """The store underneath."""
        return self._inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __str__(self) -> str:
        return str(self._inner)

    def _prepare(self, operation: str, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """A commit's events with the trace context (tracing telemetry only)."""
        if operation == "commit" and len(args) >= 6 and args[5]:
            context = self._telemetry.trace_context()
            if context:
                args = (*args[:5], _traced(args[5], context), *args[6:])
        elif operation == "commit_many" and args:
            context = self._telemetry.trace_context()
            if context:
                args = (
                    [
                        i.__class__(
                            i.machine,
                            i.ref,
                            i.expected,
                            i.status,
                            i.observation,
                            _traced(i.transitions, context),
                        )
                        for i in args[0]
                    ],
                    *args[1:],
                )
        return args

    def _timed(self, operation: str, call: Callable[..., Any]) -> Callable[..., Any]:
        guarded, name = self._telemetry, self._name
        # the host's method, looked up once (a telemetry without one is counted failing)
        tell = getattr(guarded.inner, "store_call", None) or guarded.store_call
        failed = guarded._failed
        claims = operation == "claim_undelivered"
        by_machine = operation in ("load", "commit")  # their first argument is the machine
        traced = guarded.traces and operation in ("commit", "commit_many")
        prepare = self._prepare

        def report(args: tuple[Any, ...], seconds: float, error: Any, found: Any) -> None:
            """The call's fact (and, for a claim, the rows it handed out for redelivery),
            guarded as :class:`Guarded` guards every call."""
            machine = str(getattr(args[0], "name", "")) if by_machine and args else ""
            try:
                tell(name, operation, machine, seconds, error)
            except Exception as e:
                failed("store_call", e)
            if claims and found:
                guarded.redelivered(found)

        if inspect.iscoroutinefunction(call):
            acall: Callable[..., Awaitable[Any]] = call

            @functools.wraps(call)
            async def timed_async(*args: Any, **kwargs: Any) -> Any:
                if traced:
                    args = prepare(operation, args)
                start = perf_counter()
                try:
                    found = await acall(*args, **kwargs)
                except BaseException as e:
                    report(args, perf_counter() - start, e, None)
                    raise
                report(args, perf_counter() - start, None, found)
                return found

            return timed_async

        @functools.wraps(call)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if traced:
                args = prepare(operation, args)
            start = perf_counter()
            try:
                found = call(*args, **kwargs)
            except BaseException as e:
                report(args, perf_counter() - start, e, None)
                raise
            if claims:
                report(args, perf_counter() - start, None, found)
                return found
            # the hot path (a load, a commit, a mark): report's work, without its call
            seconds = perf_counter() - start
            machine = str(getattr(args[0], "name", "")) if by_machine and args else ""
            try:
                tell(name, operation, machine, seconds, None)
            except Exception as e:
                failed("store_call", e)
            return found

        return timed


def reporting_store(store: Any, telemetry: Guarded) -> Any:
    """``store`` reporting to ``telemetry`` (a store that already reports is kept as it is)."""
    return store if isinstance(store, InstrumentedStore) else InstrumentedStore(store, telemetry)


def unreported(store: Any) -> Any:
    """``store`` without the telemetry's wrapper (any other wrapper is kept)."""
    return store.wrapped if isinstance(store, InstrumentedStore) else store


def reporting_emitters(emitters: Sequence[Any], telemetry: Guarded) -> list[Any]:
    """``emitters``, each reporting to ``telemetry`` (one that already reports is kept)."""
    return [
        e if isinstance(e, InstrumentedEmitter) else InstrumentedEmitter(e, telemetry)
        for e in emitters
    ]


class NotDelivered(LifecycleError):
    """What telemetry is told when an acknowledging emitter answers ``refused`` or
    ``failed`` for an event."""


class InstrumentedEmitter:
    """An emitter whose every ``emit`` is reported (and whose failures still propagate, so
    delivery keeps the event in the outbox); everything else is the emitter's own."""

    def __init__(self, emitter: Any, telemetry: Guarded) -> None:
        self._inner = emitter
        self._telemetry = telemetry
        self._name = type(emitter).__name__
        deliver = getattr(emitter, "deliver", None)
        if deliver is not None:  # an acknowledging emitter: reported when it acknowledges
            self.deliver = self._acknowledged(deliver)

    def _acknowledged(self, deliver: Callable[..., Any]) -> Callable[..., None]:
        """``deliver`` reported once its destination answered (``emitted`` with the time
        from hand-off to acknowledgement; a refusal or failure as the error), or at once if
        the hand-off raised (a full queue)."""
        telemetry, name = self._telemetry, self._name

        def delivered(transition: Transition, ack: Callable[[Transition, Any], None]) -> None:
            start = perf_counter()

            def acknowledged(t: Transition, outcome: Any) -> None:
                error = None if outcome.name == "DELIVERED" else NotDelivered(outcome.value)
                telemetry.emitted(name, t, perf_counter() - start, error)
                ack(t, outcome)

            try:
                deliver(transition, acknowledged)
            except BaseException as e:
                telemetry.emitted(name, transition, perf_counter() - start, e)
                raise

        return delivered

    @property
    def wrapped(self) -> Any:
        """The emitter underneath."""
        return self._inner

    @property
    def name(self) -> str:
        """The wrapped emitter's name (logs and delivery stats name it, not the wrapper)."""
        from ..emitters.base import emitter_name

        return emitter_name(self._inner)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def emit(self, transition: Transition) -> None:
        start = perf_counter()
        try:
            self._inner.emit(transition)
        except BaseException as e:
            self._telemetry.emitted(self._name, transition, perf_counter() - start, e)
            raise
        self._telemetry.emitted(self._name, transition, perf_counter() - start, None)


#: Builds an :class:`Observed` from its fields in order with the named tuple's own ``_make``
#: (``tuple.__new__`` paid under 2 % of a reported observe; ADR 0154).
_observed: Callable[[type[Observed], tuple[Any, ...]], Observed] = Observed._make.__func__  # type: ignore[attr-defined]


def _reported(
    telemetry: Guarded,
    operation: str,
    call: Callable[..., Any],
    machine_of: Callable[[str], str],
    *,
    nested: bool,
) -> Callable[..., Any]:
    """``call`` between a ``begin`` and an ``end``; ``nested``: its result's linked writes
    report themselves (the synchronous ``observe``), else they are flattened into ``end``."""

    def observed(found: Any) -> list[Observed]:
        results: list[Any]
        if operation == "redeliver":  # (delivered, the results of the link intents it applied)
            found = found[1]
        if isinstance(found, list):
            results = flattened(found)
        elif hasattr(found, "outcome"):  # one Result
            results = [found] if nested else flattened([found])
        else:
            return []
        return [Observed(machine_of(r.ref.kind), r) for r in results]

    def machine(args: tuple[Any, ...]) -> str:
        if operation == "observe" and args:
            return machine_of(str(getattr(args[0], "kind", "")))
        return ""

    if inspect.iscoroutinefunction(call):

        @functools.wraps(call)
        async def reported_async(*args: Any, **kwargs: Any) -> Any:
            token = telemetry.begin(operation, machine(args))
            try:
                found = await call(*args, **kwargs)
            except BaseException as e:
                telemetry.end(token, (), e)
                raise
            telemetry.end(token, observed(found), None)
            return found

        return reported_async

    if nested:  # the synchronous observe: the hot path of a runner with telemetry
        inner = telemetry.inner
        failed = telemetry._failed
        ended = observe_ended_of(inner)
        if ended is not None:
            return functools.update_wrapper(_timed_observe(call, machine_of, ended, failed), call)
        begin, end = inner.begin, inner.end

        def observe(ref: Any, observation: Any) -> Any:
            name = machine_of(ref.kind)
            try:
                token = begin("observe", name)
            except Exception as e:
                failed("begin", e)
                token = None
            try:
                found = call(ref, observation)
            except BaseException as e:
                try:
                    end(token, (), e)
                except Exception as e2:
                    failed("end", e2)
                raise
            try:
                end(token, (_observed(Observed, (name, found)),), None)
            except Exception as e:
                failed("end", e)
            return found

        return functools.update_wrapper(observe, call)

    @functools.wraps(call)
    def reported(*args: Any, **kwargs: Any) -> Any:
        token = telemetry.begin(operation, machine(args))
        try:
            found = call(*args, **kwargs)
        except BaseException as e:
            telemetry.end(token, (), e)
            raise
        telemetry.end(token, observed(found), None)
        return found

    return reported


def _timed_observe(
    call: Callable[[Any, Any], Any],
    machine_of: Callable[[str], str],
    ended: Callable[[str, Any, float, BaseException | None], None],
    failed: Callable[[str, Exception], None],
) -> Callable[[Any, Any], Any]:
    """The synchronous observe for a telemetry with ``observe_ended``: timed here, reported
    in one call after it returned or raised (the port's one optional method)."""

    def observe(ref: Any, observation: Any) -> Any:
        name = machine_of(ref.kind)
        start = perf_counter()
        try:
            found = call(ref, observation)
        except BaseException as e:
            try:
                ended(name, None, perf_counter() - start, e)
            except Exception as e2:
                failed("observe_ended", e2)
            raise
        seconds = perf_counter() - start
        try:
            ended(name, found, seconds, None)
        except Exception as e:
            failed("observe_ended", e)
        return found

    return observe


class _MachineNames(dict[str, str]):
    """``kind -> machine name`` through a runner's registry, remembered ("" if unknown; at
    most 1024 kinds kept). Called as its ``__getitem__``: a hit is one C-level lookup."""

    def __init__(self, machines: Any) -> None:
        super().__init__()
        self._machines = machines

    def __missing__(self, kind: str) -> str:
        try:
            name = str(self._machines.for_kind(kind).name)
        except Exception:
            name = ""
        if len(self) < 1024:
            self[kind] = name
        return name


def _machine_names(machines: Any) -> Callable[[str], str]:
    return _MachineNames(machines).__getitem__


def checked(telemetry: Guarded | None, check: Callable[..., Any], *args: Any) -> None:
    """Run the start-up schema ``check``; a refusal is reported as a ``"check_schema"``
    operation that ended in that error (``lifecycle_schema_refusals_total``)."""
    if telemetry is None:
        check(*args)
        return
    token = telemetry.begin("check_schema", "")
    try:
        check(*args)
    except BaseException as e:
        telemetry.end(token, (), e)
        raise
    telemetry.end(token, (), None)


def instrument(runner: Any, telemetry: Guarded, *, nested: bool) -> None:
    """Install the reporting wrappers on ``runner`` (a ``Runner`` or an ``AsyncRunner``):
    its entry points, as instance attributes over the class's methods."""
    machine_of = _machine_names(runner.machines)
    # ``redeliver`` is reported around ``_redeliver``, which also returns what its link
    # intents did: their writes are observations like any other
    for operation, name in (
        ("observe", "observe"),
        ("observe_many", "observe_many"),
        ("redeliver", "_redeliver"),
    ):
        call = getattr(runner, name)
        runner.__dict__[name] = _reported(
            telemetry, operation, call, machine_of, nested=nested and operation == "observe"
        )


def instrument_round(dispatcher: Any, telemetry: Guarded) -> None:
    """Report each round of a :class:`~lifecycle.Dispatcher` that claimed something as a
    ``"redeliver"``: its ``_dispatch`` returns what a runner's ``_redeliver`` does. The machine
    names come from the runner that applies its link intents, looked up when a round first
    reports."""
    names: list[Callable[[str], str]] = []

    def machine_of(kind: str) -> str:
        if not names:
            names.append(_machine_names(dispatcher.runner.machines))
        return names[0](kind)

    dispatcher.__dict__["_dispatch"] = _reported(
        telemetry, "redeliver", dispatcher._dispatch, machine_of, nested=False
    )
