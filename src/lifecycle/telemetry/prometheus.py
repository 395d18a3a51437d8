"""Prometheus metrics for a runner (extra ``prometheus``: ``prometheus_client``).

::

    from prometheus_client import start_http_server
    from lifecycle.telemetry.prometheus import PrometheusTelemetry

    metrics = PrometheusTelemetry()                      # registers on prometheus_client.REGISTRY
    runner = Runner(store, emitters, telemetry=metrics)
    metrics.watch(runner)                                # outbox, link intents, emitters, epochs
    start_http_server(9464, addr="127.0.0.1")

The facts a runner reports are folded into plain counters as they arrive (a few dict updates
under one short lock: facts come from several threads) and turned into metric families only
when Prometheus scrapes; what a store or an emitter knows (the outbox's depth and oldest row, its
epochs and rewinds, an emitter's sends and drops) is read from them at the scrape, so it cannot
drift. Every name carries one prefix (``lifecycle_`` by default) and only labels of bounded
cardinality: machine, from/to state, event type, reason, outcome, store, operation, emitter.
No uid, name or namespace is ever a label. The names are listed in :data:`METRICS` (the
dashboard and alert rules under ``docs/operating/`` use only these).
"""

from __future__ import annotations

import inspect
import os
import threading
import time
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from .._core.errors import Conflict, LifecycleError, MissingExtra, SchemaRefused
from .._core.transition import Transition
from ._instrument import InstrumentedEmitter, InstrumentedStore, innermost, store_name
from ._port import _COMMITTED, _UNCHANGED, Observed, ObserveEnded, Telemetry, outcome_of

try:
    from prometheus_client import REGISTRY, CollectorRegistry
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
        Metric,
    )
    from prometheus_client.registry import Collector
except ImportError as e:  # pragma: no cover - the extra is missing
    raise MissingExtra.of(e, "lifecycle.telemetry.prometheus", "prometheus") from e

__all__ = ["DEFAULT_BUCKETS", "METRICS", "PrometheusTelemetry"]

#: Latency buckets in seconds: 50 µs (a memory store) to 10 s (a hung database).
DEFAULT_BUCKETS = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
    0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip

#: Every metric this adapter exports (without the prefix), with its type and help text.
METRICS: dict[str, tuple[str, str]] = {
    "observations_total": ("counter", "Observations handled, by machine and outcome."),
    "observe_duration_seconds": (
        "histogram",
        "Time one observe (or observe_many, redeliver) took, by operation.",
    ),
    "transitions_total": (
        "counter",
        "Transition events committed, by machine, from and to state and event type.",
    ),
    "write_conflicts_total": (
        "counter",
        "Commits that lost their compare-and-set, by machine.",
    ),
    "write_retries_total": ("counter", "Attempts after the first, by machine."),
    "fallback_warnings_total": (
        "counter",
        "Fallback Warnings sent for a lost write, by machine and reason.",
    ),
    "store_operation_duration_seconds": (
        "histogram",
        "Store call latency, by store and operation (load, commit, ...).",
    ),
    "store_errors_total": ("counter", "Store calls that raised, by store, operation and error."),
    "schema_refusals_total": ("counter", "Stores refused at start-up by the schema check."),
    "redelivered_total": ("counter", "Outbox rows claimed for redelivery."),
    "emitter_sends_total": ("counter", "Events handed to an emitter, by emitter."),
    "emitter_failures_total": ("counter", "Events an emitter refused (raised), by emitter."),
    "emitter_dropped_total": (
        "counter",
        "Events an emitter dropped after taking them, by emitter and reason (its own stats).",
    ),
    "kubernetes_events_total": (
        "counter",
        "Kubernetes Event API answers, by result (created, patched, recreated, "
        "already_delivered: the Event was there with the same content, reused_ids: an id "
        "handed out again, its Event created under a content-derived name).",
    ),
    "outbox_undelivered": ("gauge", "Outbox rows not yet delivered, by store."),
    "outbox_oldest_age_seconds": (
        "gauge",
        "Age of the oldest undelivered outbox row, by store (0 when empty).",
    ),
    "link_intents_pending": ("gauge", "Link intents waiting for their target's write."),
    "objects": (
        "gauge",
        "Objects in a store, by store, machine, state and whether the state is terminal "
        "(true, false; empty when no watched runner has the machine).",
    ),
    "state_oldest_age_seconds": (
        "gauge",
        "How long the oldest object in each state has been in it, by store, machine, state "
        "and terminal (as lifecycle_objects).",
    ),
    "store_epochs": ("gauge", "History epochs a store has started (a lost history), by store."),
    "store_rewinds_total": (
        "counter",
        "Rewinds a store found: acknowledged writes lost, a store or record restored, by store.",
    ),
    "store_events_given_up_total": (
        "counter",
        "Undelivered events a store gave up so that a status could be written (its record "
        "was full while the Events were not delivered; one Warning counts them), by store.",
    ),
    "telemetry_failures_total": ("counter", "Telemetry calls that raised (ignored)."),
}

#: Emitter stats fields that count drops, and the reason label each is exported under.
_DROPS = {
    "dropped_queue_full": "queue_full",
    "invalid": "invalid",
    "rejected": "rejected",
    "gave_up": "gave_up",
    "gone": "gone",
    "dropped_on_close": "closed",
    "dropped": "dropped",
}
_K8S = ("created", "patched", "recreated", "already_delivered", "reused_ids")


class _Histogram:
    """Counts by bucket and a sum (:meth:`PrometheusTelemetry._add_time` adds to one)."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def copy(self) -> _Histogram:
        other = _Histogram(self.bounds)
        other.counts, other.total = list(self.counts), self.total
        return other

    def buckets(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        running = 0
        for bound, n in zip(self.bounds, self.counts, strict=False):
            running += n
            out.append((_bound(bound), running))
        out.append(("+Inf", running + self.counts[-1]))
        return out


def _bound(value: float) -> str:
    return repr(float(value))


class PrometheusTelemetry(Collector, Telemetry, ObserveEnded):
    """A :class:`~lifecycle.telemetry.Telemetry` that exports Prometheus metrics. Its port
    methods are :class:`~lifecycle.telemetry.Telemetry`'s and
    :class:`~lifecycle.telemetry.ObserveEnded`'s.

    Args:
        registry: where to register; by default ``prometheus_client.REGISTRY``. ``None``
            registers nowhere, for a host that calls :meth:`collect` itself (a test, a second
            registry).
        prefix: the metric names' prefix, ``[a-zA-Z_][a-zA-Z0-9_]*``.
        buckets: the latency histograms' upper bounds in seconds, all positive.

    Raises:
        ValueError: a prefix Prometheus would refuse, or no or non-positive buckets: found
            here rather than at the first scrape.
    """

    traces = False

    def __init__(
        self,
        registry: CollectorRegistry | None = REGISTRY,
        *,
        prefix: str = "lifecycle",
        buckets: Sequence[float] = DEFAULT_BUCKETS,
    ) -> None:
        if not prefix or not prefix.replace("_", "a").isalnum() or prefix[0].isdigit():
            raise ValueError(f"a Prometheus prefix is [a-zA-Z_][a-zA-Z0-9_]*, not {prefix!r}")
        bounds = tuple(sorted(float(b) for b in buckets))
        if not bounds or any(b <= 0 for b in bounds):
            raise ValueError("buckets must be positive seconds")
        self.prefix = prefix
        self._bounds = bounds
        self._observations: dict[tuple[str, str], int] = {}
        self._transitions: dict[tuple[str, str, str, str], int] = {}
        self._retries: dict[str, int] = {}
        self._fallbacks: dict[tuple[str, str], int] = {}
        self._conflicts: dict[str, int] = {}
        self._store_errors: dict[tuple[str, str, str], int] = {}
        self._store_latency: dict[tuple[str, str], _Histogram] = {}
        self._durations: dict[str, _Histogram] = {}
        self._sends: dict[str, int] = {}
        self._failures: dict[str, int] = {}
        self._schema_refusals = 0
        self._redelivered = 0
        self._watched: list[Any] = []
        self._lock = threading.Lock()  # taken by watch() and the scrape only
        self._facts = threading.Lock()  # taken for each fact, and by the scrape's copy
        if registry is not None:
            registry.register(self)

    # -- the port -------------------------------------------------------------------------
    def begin(self, operation: str, machine: str) -> object:
        return (operation, machine, time.perf_counter())

    def _retried(self, machine: str, attempts: int, error: object) -> None:
        """A write that took more than one attempt (each retry follows a lost
        compare-and-set), or that failed on a conflict."""
        if attempts > 1:
            self._retries[machine] = self._retries.get(machine, 0) + attempts - 1
        conflicts = attempts - 1 + (1 if isinstance(error, Conflict) else 0)
        if conflicts:
            self._conflicts[machine] = self._conflicts.get(machine, 0) + conflicts

    def _raised(self, operation: str, machine: str, error: BaseException) -> None:
        if isinstance(error, SchemaRefused):
            # counted where the check ran: the operation that started it (a dispatcher's first
            # round builds its runner) ends in the same refusal
            if operation == "check_schema":
                self._schema_refusals += 1
        elif isinstance(error, LifecycleError) and operation == "observe":
            key = (machine, "refused")
            self._observations[key] = self._observations.get(key, 0) + 1

    def _count(self, machine: str, result: Any) -> None:
        """Fold one write: its outcome, retries and conflicts, transitions and fallback
        Warnings (the caller holds :attr:`_facts`)."""
        outcome, attempts = result[0], result[7]
        if outcome is _COMMITTED and attempts == 1:
            label = "committed"
        elif outcome is _UNCHANGED:
            label = "unchanged"
        else:
            label = outcome_of(result)
        counts = self._observations
        key = (machine, label)
        counts[key] = counts.get(key, 0) + 1
        if attempts > 1 or result[6] is not None:
            self._retried(machine, attempts, result[6])
        flips = self._transitions
        for t in result[4]:  # the transitions: the one loop most observations skip
            tk = (machine, t[2], t[3], t[5]._value_)
            flips[tk] = flips.get(tk, 0) + 1
        if result[5]:
            for t in result[5]:
                fk = (machine, t.reason)
                self._fallbacks[fk] = self._fallbacks.get(fk, 0) + 1

    def _add_time(self, histograms: dict[Any, _Histogram], key: object, seconds: float) -> None:
        """``seconds`` into ``histograms[key]`` (the caller holds :attr:`_facts`)."""
        h = histograms.get(key)
        if h is None:
            h = histograms[key] = _Histogram(self._bounds)
        h.counts[bisect_left(h.bounds, seconds)] += 1
        h.total += seconds

    # The facts arrive from several threads (a threaded runner, group commit's callers, an
    # acknowledging emitter's worker): each is folded under one lock, held for a few dict
    # updates; a scrape copies under it and builds the families outside it.
    def end(self, token: object, observed: Sequence[Observed], error: BaseException | None) -> None:
        stop = time.perf_counter()
        lock = self._facts
        lock.acquire()  # not ``with``: measured at half the cost (ADR 0130)
        try:
            for machine, result in observed:
                self._count(machine, result)
            if token.__class__ is tuple:
                operation, begun, start = token
                self._add_time(self._durations, operation, stop - start)
                if error is not None:
                    self._raised(operation, begun, error)
        finally:
            lock.release()

    def observe_ended(
        self, machine: str, result: Any, seconds: float, error: BaseException | None
    ) -> None:
        """The port's optional call for a synchronous observe: what :meth:`end` folds for it,
        without a :meth:`begin` (the runner timed the call).

        Args:
            machine: the machine's name.
            result: what the write did; ``None`` if it raised.
            seconds: how long the observe took.
            error: the exception it raised, else ``None``.
        """
        lock = self._facts
        lock.acquire()
        try:
            if result is not None:
                self._count(machine, result)
            self._add_time(self._durations, "observe", seconds)
            if error is not None:
                self._raised("observe", machine, error)
        finally:
            lock.release()

    def store_call(
        self, store: str, operation: str, machine: str, seconds: float, error: BaseException | None
    ) -> None:
        lock = self._facts
        lock.acquire()
        try:
            self._add_time(self._store_latency, (store, operation), seconds)
            if error is not None and not isinstance(error, Conflict):  # conflicts: by machine
                ek = (store, operation, type(error).__name__)
                self._store_errors[ek] = self._store_errors.get(ek, 0) + 1
        finally:
            lock.release()

    def emitted(
        self, emitter: str, transition: Transition, seconds: float, error: BaseException | None
    ) -> None:
        with self._facts:
            self._sends[emitter] = self._sends.get(emitter, 0) + 1
            if error is not None:
                self._failures[emitter] = self._failures.get(emitter, 0) + 1

    def redelivered(self, transitions: Sequence[Transition]) -> None:
        with self._facts:
            self._redelivered += len(transitions)

    def trace_context(self) -> str:
        return ""

    # -- what is read at the scrape ---------------------------------------------------------
    def watch(self, *sources: Any) -> None:
        """Read these at every scrape: a runner (its pending link intents, its store and its
        emitters), a :class:`~lifecycle.Dispatcher` (its store, its emitters and the runner
        applying its link intents), a store (outbox depth and oldest row where it can tell,
        epochs, rewinds) or an emitter (its ``stats``: drops and Kubernetes API writes).

        Args:
            *sources: runners, dispatchers, stores or emitters, told apart by what they
                have; each is read at the scrape, not copied now, so the gauges are current.
        """
        with self._lock:
            for source in sources:
                self._watched.append(source)

    def _sources(self) -> tuple[list[Any], list[Any], list[Any]]:
        runners: list[Any] = []
        stores: list[Any] = []
        emitters: list[Any] = []
        for source in self._watched:
            if hasattr(source, "dispatch_once"):  # a Dispatcher: its store, emitters, runner
                stores.append(source.store)
                emitters.extend(source.emitters)
                runners.append(source)  # its telemetry's failures (it has no intents of its own)
                if source._runner is not None:
                    runners.append(source._runner)
            elif hasattr(source, "protocol"):
                runners.append(source)
                stores.append(getattr(source, "store", None))
                emitters.extend(getattr(source, "emitters", ()))
            elif hasattr(source, "emit"):
                emitters.append(source)
            else:
                stores.append(source)
        unwrap = [s.wrapped if isinstance(s, InstrumentedStore) else s for s in stores if s]
        flat = [e.wrapped if isinstance(e, InstrumentedEmitter) else e for e in emitters]
        return _unique(runners), _unique(unwrap), _unique(flat)

    def describe(self) -> Iterable[Metric]:
        """Nothing: an unchecked collector, as its families are built at each scrape.

        Returns:
            An empty list.
        """
        return []  # unchecked collector: its families are built at each scrape

    def collect(self) -> Iterator[Metric]:
        """Build every metric family from the facts counted and the sources watched.

        Yields:
            The metric families, for ``prometheus_client``'s exposition.
        """
        p = self.prefix
        with self._lock:
            runners, stores, emitters = self._sources()
        with self._facts:  # a consistent copy; the families are built outside the lock
            observations, transitions = dict(self._observations), dict(self._transitions)
            conflicts, retries = dict(self._conflicts), dict(self._retries)
            fallbacks, store_errors = dict(self._fallbacks), dict(self._store_errors)
            sends, failures = dict(self._sends), dict(self._failures)
            refusals, redelivered = self._schema_refusals, self._redelivered
            durations = {k: h.copy() for k, h in self._durations.items() if k != "check_schema"}
            latency = {k: h.copy() for k, h in self._store_latency.items()}
        yield _counter(p, "observations_total", ("machine", "outcome"), observations)
        yield _histograms(p, "observe_duration_seconds", ("operation",), durations)
        yield _counter(p, "transitions_total", ("machine", "from", "to", "type"), transitions)
        yield _counter(p, "write_conflicts_total", ("machine",), conflicts)
        yield _counter(p, "write_retries_total", ("machine",), retries)
        yield _counter(p, "fallback_warnings_total", ("machine", "reason"), fallbacks)
        yield _histograms(p, "store_operation_duration_seconds", ("store", "operation"), latency)
        yield _counter(p, "store_errors_total", ("store", "operation", "error"), store_errors)
        yield _counter(p, "schema_refusals_total", (), {(): refusals})
        yield _counter(p, "redelivered_total", (), {(): redelivered})
        yield _counter(p, "emitter_sends_total", ("emitter",), sends)
        yield _counter(p, "emitter_failures_total", ("emitter",), failures)
        yield from _emitter_families(p, emitters)
        census = _census(stores, runners, time.time())
        yield _gauge(p, "objects", _CENSUS, {k: n for k, (n, _) in census.items()})
        yield _gauge(p, "state_oldest_age_seconds", _CENSUS, {k: a for k, (_, a) in census.items()})
        yield from _store_families(p, stores)
        pending = sum(len(getattr(r, "pending", ())) for r in runners)
        yield _gauge(p, "link_intents_pending", (), {(): pending})
        broken = sum(
            sum(getattr(getattr(r, "telemetry", None), "failures", {}).values()) for r in runners
        )
        yield _counter(p, "telemetry_failures_total", (), {(): broken})


def _emitter_families(p: str, emitters: list[Any]) -> Iterator[Metric]:
    """What the emitters' own ``stats`` count: drops by reason, Kubernetes event results."""
    drops: dict[tuple[str, str], int] = {}
    k8s: dict[tuple[str], int] = {}
    for emitter in emitters:
        stats = getattr(emitter, "stats", None)
        if stats is None:
            continue
        name = type(emitter).__name__
        for field, reason in _DROPS.items():
            value = getattr(stats, field, None)
            if isinstance(value, int):
                drops[(name, reason)] = drops.get((name, reason), 0) + value
        for field in _K8S:
            value = getattr(stats, field, None)
            if isinstance(value, int):
                k8s[(field,)] = k8s.get((field,), 0) + value
    yield _counter(p, "emitter_dropped_total", ("emitter", "reason"), drops)
    yield _counter(p, "kubernetes_events_total", ("result",), k8s)


def _store_families(p: str, stores: list[Any]) -> Iterator[Metric]:
    """Per store: the outbox's depth and oldest age and the epochs (once per database), its
    rewinds and the events it gave up."""
    depth: dict[tuple[str], float] = {}
    oldest: dict[tuple[str], float] = {}
    epochs: dict[tuple[str], float] = {}
    rewinds: dict[tuple[str], int] = {}
    given_up: dict[tuple[str], int] = {}
    now = time.time()
    databases: set[tuple[object, ...]] = set()
    for store in stores:
        label = (store_name(store),)
        found = getattr(store, "rewind_count", None)  # what this handle found: its own
        if not isinstance(found, int):  # a store keeping only the list of them
            listed = getattr(store, "rewinds", None)
            found = len(listed) if isinstance(listed, list) else None
        if found is not None:
            rewinds[label] = rewinds.get(label, 0) + found
        lost = getattr(store, "events_given_up", None)  # this handle's own count
        if isinstance(lost, int):
            given_up[label] = given_up.get(label, 0) + lost
        where = _database(store)
        if where in databases:  # the outbox and epochs of a database are counted once
            continue
        databases.add(where)
        backlog = _backlog(store)
        if backlog is not None:
            count, first = backlog
            depth[label] = depth.get(label, 0) + count
            age = max(0.0, now - first) if first is not None else 0.0
            oldest[label] = max(oldest.get(label, 0.0), age)
        started = getattr(store, "epochs_started", None)  # a handle's own epochs (ADR 0146)
        epoch = getattr(store, "epoch", None)
        if isinstance(started, int):
            epochs[label] = epochs.get(label, 0) + started
        elif isinstance(epoch, str):
            epochs[label] = epochs.get(label, 0) + (1 if epoch else 0)
    yield _gauge(p, "outbox_undelivered", ("store",), depth)
    yield _gauge(p, "outbox_oldest_age_seconds", ("store",), oldest)
    yield _gauge(p, "store_epochs", ("store",), epochs)
    yield _counter(p, "store_rewinds_total", ("store",), rewinds)
    yield _counter(p, "store_events_given_up_total", ("store",), given_up)


def _unique(items: list[Any]) -> list[Any]:
    seen: set[int] = set()
    out = []
    for item in items:
        if id(item) not in seen:
            seen.add(id(item))
            out.append(item)
    return out


def _database(store: Any) -> tuple[object, ...]:
    """Which database ``store`` is a handle on, so that two handles on one (a runner's store
    and a dispatcher's, each with its own owner) count its outbox once: an SQLite file, a
    PostgreSQL server's database and schema, or -- for any other store -- the handle itself.
    Wrappers are looked through."""
    store = innermost(store)
    path = getattr(store, "path", None)
    if isinstance(path, str) and path and path != ":memory:":
        return ("sqlite", os.path.realpath(path))
    target = getattr(store, "target", None)
    parts = tuple(getattr(target, name, None) for name in ("host", "port", "dbname", "schema"))
    if target is not None and all(isinstance(part, str) for part in parts):
        return ("postgres", *parts)
    return ("handle", id(store))


_CENSUS = ("store", "machine", "state", "terminal")


def _census(
    stores: list[Any], runners: list[Any], now: float
) -> dict[tuple[str, str, str, str], tuple[int, float]]:
    """Per store, machine and state: how many objects, and the age of the oldest in it, from
    each database's ``state_counts`` (one grouped read; ADR 0159) -- a store that has none,
    or only as a coroutine, gives no sample. ``terminal`` is what a watched runner's machine
    says of the state."""
    terminal: dict[str, frozenset[str]] = {}
    for runner in runners:
        for machine in getattr(getattr(runner, "machines", None), "values", lambda: ())():
            terminal[machine.name] = machine.table.terminal
    out: dict[tuple[str, str, str, str], tuple[int, float]] = {}
    seen: set[tuple[object, ...]] = set()
    for store in stores:
        where = _database(store)
        call = getattr(innermost(store), "state_counts", None)
        if where in seen or call is None or inspect.iscoroutinefunction(call):
            continue
        seen.add(where)
        try:
            counts = call()
        except Exception:
            continue
        for c in counts:
            states = terminal.get(c.machine)
            flag = "" if states is None else "true" if c.state in states else "false"
            age = max(0.0, now - c.oldest.timestamp())
            out[(store_name(store), c.machine, c.state, flag)] = (c.count, age)
    return out


def _backlog(store: Any) -> tuple[int, float | None] | None:
    """``(undelivered rows, epoch seconds of the oldest)`` from a store that can tell
    synchronously (``outbox_summary``; its wrappers -- a thread front, a store injecting
    faults -- are looked through: :func:`innermost`). An asyncio store's summary is a coroutine
    a scrape cannot await: no gauge for it."""
    call = getattr(store, "outbox_summary", None) or getattr(
        innermost(store), "outbox_summary", None
    )
    if call is None or inspect.iscoroutinefunction(call):
        return None
    try:
        summary = call()
        oldest = summary.oldest
        return int(summary.undelivered), (oldest.timestamp() if oldest is not None else None)
    except Exception:
        return None


def _labels(key: object) -> list[str]:
    """A dict key as label values: a tuple of them, or one value."""
    return [str(k) for k in key] if isinstance(key, tuple) else [str(key)]


def _help(name: str) -> str:
    return METRICS[name][1]


def _counter(
    prefix: str, name: str, labels: tuple[str, ...], values: dict[Any, int]
) -> CounterMetricFamily:
    family = CounterMetricFamily(
        f"{prefix}_{name.removesuffix('_total')}", _help(name), labels=labels
    )
    for key, value in list(values.items()):
        family.add_metric(_labels(key), value)
    return family


def _gauge(
    prefix: str, name: str, labels: tuple[str, ...], values: dict[Any, float]
) -> GaugeMetricFamily:
    family = GaugeMetricFamily(f"{prefix}_{name}", _help(name), labels=labels)
    for key, value in list(values.items()):
        family.add_metric(_labels(key), value)
    return family


def _histograms(
    prefix: str, name: str, labels: tuple[str, ...], values: dict[Any, _Histogram]
) -> HistogramMetricFamily:
    family = HistogramMetricFamily(f"{prefix}_{name}", _help(name), labels=labels)
    for key, h in list(values.items()):
        family.add_metric(_labels(key), h.buckets(), h.total)
    return family
