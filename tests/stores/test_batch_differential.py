"""The batch differential (ADR 0065, ADR 0131), field by field: ``observe_many`` -- and a
checked replay in chunks -- gives every object exactly what one ``observe`` per item, in
order, gives it: the same results, the same events (every field, times included) and the same
stored statuses, on memory, SQLite and PostgreSQL. Generated: a Certification -> Workflow ->
two Jobs family (Job -> Workflow, Workflow -> Certification and Workflow -> Job links) and Pods
with their NodeClaims (Pod -> NodeClaim), interleaved, with injected conflicts and write errors.

A chunked replay once stamped a Workflow's failure with the time of another Job line of its
chunk (issue 37): the items' n-th lines went together, so the Workflow heard one Job's later
report before the other's earlier one. The tests that compared event ids missed it."""

from __future__ import annotations

import itertools
import json
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lifecycle import (
    LifecycleError,
    MemoryEmitter,
    MemoryStore,
    Result,
    RetryPolicy,
    Runner,
    SQLiteStore,
    Store,
    default_registry,
)
from lifecycle.trace import ObservationLine, TraceLine, iter_trace, replay

from .conftest import drop_schema
from .test_observe_many import Batches, shape

FAST = RetryPolicy(backoff=0.0)
_schemas = itertools.count()

JOBS = ("j0", "j1")
PODS = ("p0", "p1")
#: what each Job can report, in a Job's own order (a prefix of it, then its ending)
_JOB_RUN = ("WorkloadCreated", "WorkloadRunning")
_JOB_ENDS = ("WorkloadSucceeded", "WorkloadFailed", "HardwareFault", "TimedOut")
_POD_RUN = ("CreateRequested", "ProvisionSucceeded", "InstanceRunning")
_POD_ENDS = ("InstanceFailed", "InstanceUnknown", "InstanceRunning")
#: most Jobs run, and most of those end: what a Workflow's verdict waits for
_MOSTLY_ALL = st.sampled_from([0, 1, 2, 2, 2, 2])
_MOSTLY = st.sampled_from([True, True, True, False])


def _line(seconds: int, machine: str, name: str, observe: str, **with_: Any) -> dict[str, Any]:
    line: dict[str, Any] = {
        "at": f"2026-11-30T10:{seconds // 60:02d}:{seconds % 60:02d}Z",
        "machine": machine,
        "object": {"namespace": "fleet", "name": name, "uid": name},
        "observe": observe,
    }
    if with_:
        line["with"] = with_
    return line


@st.composite
def families(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Trace lines: the family's set-up, then the Jobs' and Pods' lines interleaved (each
    object's own in its order, its times rising from a random start)."""
    submitted: dict[str, Any] = {
        "owner_kind": "Certification",
        "owner": "cert",
        "owner_uid": "cert",
        "category": "nccl/v1",
        "drain_grace_s": draw(st.sampled_from([0, 30])),
    }
    if draw(st.booleans()):
        submitted["thresholds"] = [{"key": "goodput", "expr": ">= 0.9"}]
    if draw(st.booleans()):
        submitted["timeout_per_job_s"] = draw(st.sampled_from([5, 60]))
    setup = [
        _line(0, "certification", "cert", "Submitted", categories=["nccl/v1"], selector="a=b"),
        _line(
            5,
            "certification",
            "cert",
            "WorkflowCreated",
            category="nccl/v1",
            workflow="wf",
            uid="wf",
        ),
        _line(5, "workflow", "wf", "Submitted", **submitted),
        _line(6, "workflow", "wf", "Partitioned", nodes=4, groups=2, nodes_per_job=2),
    ]
    lanes: list[list[dict[str, Any]]] = []
    launched_first = draw(st.booleans())  # else a Job's launch is among the Jobs' lines
    for g, job in enumerate(JOBS):
        at = 7
        launch = _line(at, "workflow", "wf", "JobLaunched", group=g, job=job, uid=job)
        own = [] if launched_first else [launch]
        if launched_first:
            setup.append(launch)
        for observe in _JOB_RUN[: draw(_MOSTLY_ALL)]:
            at += draw(st.integers(0, 3))
            own.append(_line(at, "job", job, observe))
        if own and own[-1]["observe"] == _JOB_RUN[-1]:
            for step in range(draw(st.integers(0, 2))):  # lines that change nothing upstream
                at += draw(st.integers(0, 3))
                own.append(_line(at, "job", job, "TrainingStepObserved", step=step + 1))
        if own and own[-1]["observe"] in (_JOB_RUN[-1], "TrainingStepObserved") and draw(_MOSTLY):
            at += draw(st.integers(0, 3))
            end = draw(st.sampled_from(_JOB_ENDS))
            own.append(
                _line(at, "job", job, end, **({"node": "n1"} if end == "HardwareFault" else {}))
            )
            for _ in range(draw(st.integers(0, 2))):
                at += draw(st.integers(0, 2))
                value = draw(st.sampled_from([0.5, 0.95]))
                own.append(
                    _line(
                        at,
                        "job",
                        job,
                        "MeasurementsReported",
                        values=[{"key": "goodput", "value": value}],
                    )
                )
        lanes.append(own)
    for p, pod in enumerate(PODS):
        at = draw(st.integers(0, 10))
        own = []
        for observe in _POD_RUN[: draw(st.integers(1, len(_POD_RUN)))]:
            at += draw(st.integers(0, 3))
            extra: dict[str, Any] = {}
            if observe == "ProvisionSucceeded":
                extra = {"reserved": draw(st.booleans()), "instance_id": f"i-{p}"}
            own.append(_line(at, "pod", pod, observe, **extra))
        if len(own) == len(_POD_RUN) and draw(st.booleans()):
            end = draw(st.sampled_from(_POD_ENDS))
            extra = {"exit_code": 1} if end == "InstanceFailed" else {}
            if end == "InstanceUnknown":
                extra = {"error": "timeout"}
            own.append(_line(at + draw(st.integers(0, 3)), "pod", pod, end, **extra))
        lanes.append(own)
    out = list(setup)
    while any(lanes):
        lane = draw(st.sampled_from([x for x in lanes if x]))
        out.append(lane.pop(0))
    return out


def _parse(lines: list[dict[str, Any]]) -> list[TraceLine]:
    text = [json.dumps(x) for x in lines]
    return list(iter_trace(text, "<generated>", default_registry()))


def _items(lines: list[dict[str, Any]]) -> list[tuple[Any, Any]]:
    return [(r.ref, r.observation) for r in _parse(lines) if isinstance(r, ObservationLine)]


@contextmanager
def fresh(kind: str, request: pytest.FixtureRequest) -> Iterator[Store]:
    """A store of ``kind`` no other example saw."""
    if kind == "memory":
        yield MemoryStore()
        return
    if kind == "sqlite":
        with tempfile.TemporaryDirectory() as d:
            sqlite = SQLiteStore(Path(d) / "s.db", synchronous="OFF")
            try:
                yield sqlite
            finally:
                sqlite.close()
        return
    from lifecycle.stores.postgres import PostgresStore

    server = request.getfixturevalue("pg_server")
    schema = f"d{next(_schemas)}"
    store = PostgresStore(server.url(schema=schema))
    try:
        yield store
    finally:
        store.close()
        drop_schema(server, schema)


def _said(result: Result | LifecycleError) -> tuple[Any, ...]:
    """A result, every field; a refusal (raised by ``observe``, a failed result of
    ``observe_many``) as its error's type."""
    if isinstance(result, LifecycleError):
        return ("refused", type(result).__name__)
    if result.status is None and result.error is not None and not result.fallback:
        return ("refused", type(result.error).__name__)
    return shape(result)


def _events(emitter: MemoryEmitter) -> dict[str, list[Any]]:
    """Each object's events, in its order, every field (``Transition`` equality)."""
    out: dict[str, list[Any]] = {}
    for t in emitter.events:
        out.setdefault(t.ref.uid, []).append(tuple(t))
    return out


def _statuses(store: Store) -> dict[str, tuple[int, Any]]:
    found: dict[str, tuple[int, Any]] = {}
    for machine in default_registry().values():
        for record in store.records(machine):
            found[record.ref.uid] = (record.version, record.status)
    return found


def _faults(store: Store, conflicts: dict[str, int], errors: dict[str, int]) -> Batches:
    wrapped = Batches(store)
    wrapped.conflict = Counter(conflicts)
    wrapped.error = Counter(errors)
    return wrapped


KIND = pytest.mark.parametrize(
    "kind", ["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
#: Conflicts on any object a batch writes but a Job (a Job's ``TimedOut`` is the Workflow's
#: direct write: one attempt, a lost one stays pending for the next call -- which one observe
#: per item makes at once); write errors on Pods only (no link writes to them, for the same
#: reason: a lost link write waits for the next call).
_CONFLICTED = ("p0", "p1", "p0-claim", "p1-claim", "wf", "cert")


@KIND
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    lines=families(),
    size=st.integers(1, 40),
    conflicts=st.dictionaries(st.sampled_from(_CONFLICTED), st.integers(0, 2), max_size=3),
    errors=st.dictionaries(st.sampled_from(PODS), st.integers(0, 1), max_size=2),
)
def test_observe_many_gives_each_object_what_one_observe_per_item_gives(
    kind: str,
    request: pytest.FixtureRequest,
    lines: list[dict[str, Any]],
    size: int,
    conflicts: dict[str, int],
    errors: dict[str, int],
) -> None:
    items = _items(lines)
    with fresh(kind, request) as batch_store, fresh(kind, request) as one_store:
        batched, one = MemoryEmitter(), MemoryEmitter()
        runner = Runner(_faults(batch_store, conflicts, errors), [batched], policy=FAST)
        got: list[Result | LifecycleError] = []
        for start in range(0, len(items), size):
            got.extend(runner.observe_many(items[start : start + size]))
        reference = Runner(_faults(one_store, conflicts, errors), [one], policy=FAST)
        want: list[Result | LifecycleError] = []
        for ref, observation in items:
            try:
                want.append(reference.observe(ref, observation))
            except LifecycleError as e:
                want.append(e)
        assert [_said(r) for r in got] == [_said(r) for r in want]
        assert _events(batched) == _events(one)
        assert _statuses(batch_store) == _statuses(one_store)


def _replayed(
    trace: list[TraceLine], store: Store, batch: int
) -> tuple[list[Any], dict[str, list[Any]], dict[str, tuple[int, Any]]]:
    events = MemoryEmitter()
    lines: list[Any] = []

    def each(record: TraceLine, result: Any) -> None:
        if isinstance(result, Result):
            lines.append((record.line, [tuple(t) for t in result.all_transitions()]))

    replay(trace, store, [events], on_result=each, batch=batch, keep_results=False)
    return lines, _events(events), _statuses(store)


@KIND
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(lines=families(), batch=st.integers(2, 40))
def test_a_chunked_replay_gives_each_line_and_object_what_a_line_by_line_one_gives(
    kind: str, request: pytest.FixtureRequest, lines: list[dict[str, Any]], batch: int
) -> None:
    trace = _parse(lines)
    with fresh(kind, request) as store:
        assert _replayed(trace, store, batch) == _replayed(trace, MemoryStore(), 1)


# -- a second writer on its own handle (issue 37: the stores cache by default) ---------------
#: what the second writer reports of a Pod (refused in some states: that is its result)
_INTRUSIONS = ("ConfigInvalid", "DeletionRequested", "InstanceUnknown")


def _intrusion(name: str) -> Any:
    from datetime import UTC, datetime

    from lifecycle.machines import pod

    at = datetime(2026, 11, 30, 10, 30, tzinfo=UTC)
    if name == "ConfigInvalid":
        return pod.ConfigInvalid(at=at, error="the other writer")
    if name == "InstanceUnknown":
        return pod.InstanceUnknown(at=at, error="the other writer")
    return pod.DeletionRequested(at=at)


@contextmanager
def other_handle(kind: str, store: Store, request: pytest.FixtureRequest) -> Iterator[Store]:
    """A second handle on ``store``'s database (each with its own cache, at the defaults);
    the memory store is its own second handle."""
    if kind == "memory":
        yield store
        return
    if kind == "sqlite":
        assert isinstance(store, SQLiteStore)
        other: Any = SQLiteStore(store.path, synchronous="OFF")
    else:
        from lifecycle.stores.postgres import PostgresStore

        assert isinstance(store, PostgresStore)
        server = request.getfixturevalue("pg_server")
        other = PostgresStore(server.url(schema=store.target.schema))
    try:
        yield other
    finally:
        other.close()


class SecondWriter:
    """A runner on another handle. Armed for a Pod, it writes it just before the first
    commit of ours that includes the Pod -- between our read and our compare-and-set, a real
    lost race -- whether that commit is one item's or a batch's."""

    def __init__(self, store: Store) -> None:
        self.runner = Runner(store, [MemoryEmitter()], links=(), policy=FAST)
        self.armed: dict[str, tuple[Any, str]] = {}
        self.said: list[Any] = []

    def write(self, ref: Any, name: str) -> None:
        try:
            self.said.append(shape(self.runner.observe(ref, _intrusion(name))))
        except LifecycleError as e:
            self.said.append(("refused", type(e).__name__))

    def before(self, refs: list[Any]) -> None:
        for ref in refs:
            if ref.uid in self.armed:
                self.write(*self.armed.pop(ref.uid))


class Raced:
    """``inner`` with the second writer let in before each commit (see :class:`SecondWriter`)."""

    def __init__(self, inner: Any, writer: SecondWriter) -> None:
        self.inner, self.writer = inner, writer

    def __getattr__(self, name: str) -> Any:
        found = getattr(self.inner, name)
        if name != "commit_many":
            return found

        def commit_many(items: Any) -> Any:  # (only where the store has it)
            self.writer.before([i.ref for i in items])
            return found(items)

        return commit_many

    def commit(self, machine: Any, ref: Any, *rest: Any) -> int:
        self.writer.before([ref])
        done: int = self.inner.commit(machine, ref, *rest)
        return done


def _settled(store: Any) -> None:
    """The handle's barrier (ADR 0143, 0156): every commit made before it is seen."""
    settle = getattr(store, "settle_cache", None)
    if settle is not None:
        assert settle()


@KIND
@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    lines=families(),
    size=st.integers(1, 40),
    between=st.lists(
        st.tuples(st.integers(0, 60), st.sampled_from(PODS), st.sampled_from(_INTRUSIONS)),
        max_size=3,
    ),
    raced=st.lists(
        st.tuples(st.integers(0, 60), st.sampled_from(PODS), st.sampled_from(_INTRUSIONS)),
        max_size=3,
    ),
    conflicts=st.dictionaries(st.sampled_from(_CONFLICTED), st.integers(0, 1), max_size=2),
    errors=st.dictionaries(st.sampled_from(PODS), st.integers(0, 1), max_size=1),
)
def test_the_cycle_beside_a_second_writer_gives_what_one_observe_per_item_gives(
    kind: str,
    request: pytest.FixtureRequest,
    lines: list[dict[str, Any]],
    size: int,
    between: list[tuple[int, str, str]],
    raced: list[tuple[int, str, str]],
    conflicts: dict[str, int],
    errors: dict[str, int],
) -> None:
    """The cycle API (``observe_many`` by pages, ADR 0155) on cached stores at their
    defaults, beside a second writer on another handle that writes Pods between pages
    (then the barrier) and inside them (between our read and our commit), with injected
    conflicts and write errors: every result (every field), event (times included), status,
    and the second writer's own results, equal those of one ``observe`` per item with the
    same writer at the same places."""
    items = _items(lines)
    refs = {r.uid: r for r, _ in items}
    pages = [(start, items[start : start + size]) for start in range(0, len(items), size)]

    def run(store: Store, batched: bool) -> tuple[list[Any], dict[str, list[Any]], list[Any]]:
        emitter = MemoryEmitter()
        with other_handle(kind, store, request) as second:
            writer = SecondWriter(second)
            runner = Runner(
                _faults(Raced(store, writer), conflicts, errors),
                [emitter],
                policy=FAST,
            )
            got: list[Any] = []
            for start, page in pages:
                for at, uid, name in between:
                    if at == start and uid in refs:
                        writer.write(refs[uid], name)
                        _settled(store)
                for at, uid, name in raced:
                    if at == start and uid in refs:
                        writer.armed.setdefault(uid, (refs[uid], name))
                if batched:
                    got.extend(_said(r) for r in runner.observe_many(page))
                    continue
                for ref, observation in page:
                    try:
                        got.append(_said(runner.observe(ref, observation)))
                    except LifecycleError as e:
                        got.append(_said(e))
            return got, _events(emitter), writer.said

    with fresh(kind, request) as batch_store, fresh(kind, request) as one_store:
        assert run(batch_store, True) == run(one_store, False)
        assert _statuses(batch_store) == _statuses(one_store)
