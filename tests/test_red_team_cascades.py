"""Red team, cascades: the durability property of ``test_cascade_durability`` under faults it
does not inject (ADR 0090, README guarantee 5).

- **Faults on the catch-up writes themselves**: the linked write fails, and so does its first
  redo (``Runner.catch_up``), possibly several times, before faults stop.
- **A crash during catch-up**: the redo of a pending intent commits and the process dies
  before it is marked done or its events are delivered; a new runner and a ``Dispatcher``
  take over from the outbox.
- **Two runners on one SQLite file** (two store handles, two owners), lines alternating
  between them, each with its own pending intents.
- **The same on SQLite** as on memory, with faults through ``observe_many`` too.

Each faulty run is compared with the fault-free run of the same configuration: every object
must end in the same status, with the same non-fallback events (same ids, in order).

Bounded for ``make test``; ``LIFECYCLE_SOAK=1`` runs many more examples.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import hypothesis
import pytest
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from lifecycle import (
    Dispatcher,
    MemoryEmitter,
    MemoryStore,
    Outcome,
    Result,
    RetryPolicy,
    Runner,
    SQLiteStore,
    StoreError,
    Transition,
    default_registry,
)
from lifecycle._core.observation import Tick
from lifecycle.stores.base import Store

from .test_cascade_durability import LINES, NAMES, Crash, CrashingStore, Line

SOAK = bool(os.environ.get("LIFECYCLE_SOAK"))
FAST = RetryPolicy(backoff=0.0)
REGISTRY = default_registry()

#: (line, uid, kind, times): injected before the line (its own write and its cascade), or,
#: for catch-up faults, after the line's own pass (they hit the redo of a failed cascade).
Fault = tuple[int, str, str, int]
_DIRS = itertools.count()


class Host:
    """One or two runners over one store (two SQLite handles on one file for two), sharing
    one fault queue and one event sink; ``restart`` replaces a crashed runner."""

    def __init__(self, kind: str, runners: int, tmp: Path | None) -> None:
        self.sink = MemoryEmitter()
        self.inners: list[Store] = []
        if kind == "memory":
            self.inners.append(MemoryStore())
        else:
            assert tmp is not None
            path = tmp / f"c{next(_DIRS)}.db"
            for i in range(runners):
                self.inners.append(SQLiteStore(path, synchronous="OFF", owner=f"host-{i}"))
        self.stores = [CrashingStore(s) for s in self.inners]
        for s in self.stores[1:]:
            s._faults = self.stores[0]._faults  # one queue: a fault hits whoever writes
        while len(self.stores) < runners:  # memory: two runners on one store object
            self.stores.append(self.stores[0])
        self.runners = [Runner(s, [self.sink], policy=FAST) for s in self.stores]

    @property
    def faults(self) -> CrashingStore:
        return self.stores[0]

    def restart(self, i: int) -> None:
        """Runner ``i``'s process died: a new runner on the same store (same owner), and a
        dispatcher drains the outbox (events and cascade intents) through it."""
        self.faults.clear()
        self.runners[i] = Runner(self.stores[i], [self.sink], policy=FAST)
        Dispatcher(self.stores[i], [self.sink], runner=self.runners[i]).drain()

    def catch_up(self) -> None:
        for runner in self.runners:
            runner.catch_up()

    def pending(self) -> int:
        return sum(len(r.pending) for r in self.runners)

    def close(self) -> None:
        for s in self.inners:
            s.close()


def _observe(runner: Runner, line: Line, many: bool) -> Result:
    ref, obs = line
    if many:
        (result,) = runner.observe_many([(ref, obs)])
        return result
    return runner.observe(ref, obs)


def _landed(store: Store, line: Line) -> int:
    ref, obs = line
    machine = REGISTRY.for_kind(ref.kind)
    return sum(1 for e in store.journal(machine, ref) if e.observation == obs)


def _pending_targets(host: Host) -> set[str]:
    return {
        t.intent.target.uid
        for r in host.runners
        for t in list(r.pending._items)
        if t.intent is not None
    }


def run(
    name: str,
    faults: Sequence[Fault] = (),
    redo_failures: int = 0,
    redo_fault: str = "write-error",
    crash_on_redo: int | None = None,
    *,
    kind: str = "memory",
    runners: int = 1,
    many: bool = False,
    tmp: Path | None = None,
) -> tuple[dict[str, Any], dict[str, list[tuple[str, str, str]]]]:
    """Replay ``name`` with ``faults``; each time cascade writes are left pending, their
    redo fails ``redo_failures`` more passes (``redo_fault`` on every pending target), and
    on the ``crash_on_redo``-th such occasion the redo commits and the process dies. Then
    passes continue until every timer expired. Returns (statuses, non-fallback events)."""
    lines = LINES[name]
    host = Host(kind, runners, tmp)
    occasions = 0
    try:
        last = lines[0][1].at
        for i, line in enumerate(lines):
            last = max(last, line[1].at)
            for f in faults:
                if f[0] == i:
                    host.faults.inject(f[1], f[2], f[3])  # type: ignore[arg-type]
            who = i % runners
            result = _observe(host.runners[who], line, many)
            host.faults.clear()  # the line's faults stop
            # The next pass redoes the failed cascade writes first: they fail again
            # (``redo_failures`` passes), or the redo commits and the process dies.
            if host.pending():
                crash = crash_on_redo == occasions
                occasions += 1
                for n in range(redo_failures + 1):
                    if n < redo_failures:
                        for uid in _pending_targets(host):
                            host.faults.inject(uid, redo_fault, 6)  # type: ignore[arg-type]
                    else:
                        host.stores[who].crash_next = crash
                    try:
                        host.catch_up()
                    except Crash:
                        host.restart(who)
                    host.stores[who].crash_next = False
                    host.faults.clear()
                for _ in range(5):
                    if not host.pending():
                        break
                    host.catch_up()
            while result.outcome is Outcome.FAILED and isinstance(result.error, StoreError):
                result = _observe(host.runners[who], line, many)  # observed again
            host.catch_up()
        host.catch_up()
        for hours in (1, 24, 24 * 8, 24 * 40):
            at = last + timedelta(hours=hours)
            for machine in REGISTRY.values():
                if Tick not in machine.accepted:
                    continue
                for record in list(host.inners[0].records(machine)):
                    host.runners[0].observe(record.ref, Tick(at=at))
        assert not host.pending(), "a cascade intent is still pending after faults stopped"
        for inner in host.inners:
            assert not [x for x in inner.claim_undelivered() if x.intent is not None]
        statuses = {}
        for machine in REGISTRY.values():
            for record in host.inners[0].records(machine):
                statuses[record.ref.uid] = record.status
        events: dict[str, list[Transition]] = {}
        for e in host.sink.events:
            if not e.fallback and not e.action:
                events.setdefault(e.ref.uid, []).append(e)
        return statuses, {
            uid: [(e.id, e.reason, e.target) for e in es] for uid, es in events.items()
        }
    finally:
        host.close()


REFERENCE = {name: run(name) for name in NAMES}


def _uids(name: str) -> list[str]:
    return sorted(REFERENCE[name][0])


def _cascade_targets(name: str) -> list[list[str]]:
    """For each line of the trace, the uids its cascade writes (in a fault-free run)."""
    runner = Runner(MemoryStore(), [], policy=FAST)
    out: list[list[str]] = []
    for ref, obs in LINES[name]:
        result = runner.observe(ref, obs)
        out.append(sorted({c.ref.uid for c in result.linked}))
    return out


LINE_TARGETS = {name: _cascade_targets(name) for name in NAMES}
TARGETS = {name: sorted({u for us in LINE_TARGETS[name] for u in us}) for name in NAMES}


def _fault(name: str) -> st.SearchStrategy[Fault]:
    """A fault on any object, most often on a line's cascade target, failing every attempt."""
    linked = [(i, uid) for i, uids in enumerate(LINE_TARGETS[name]) for uid in uids]
    anywhere = st.tuples(st.integers(0, len(LINES[name]) - 1), st.sampled_from(_uids(name)))
    return st.builds(
        lambda where, kind, times: (*where, kind, times),
        st.sampled_from(linked) | st.sampled_from(linked) | anywhere,
        st.sampled_from(("conflict", "write-error")),
        st.sampled_from((6, 6, 1, 2)),
    )


Plan = tuple[str, list[Fault], int, str, "int | None"]


@st.composite
def plans(draw: st.DrawFn) -> Plan:
    name = draw(st.sampled_from(NAMES))
    faults = draw(st.lists(_fault(name), min_size=1, max_size=3))
    redo_failures = draw(st.integers(0, 3))
    redo_fault = draw(st.sampled_from(("conflict", "write-error")))
    crash = draw(st.none() | st.integers(0, 2))
    return name, faults, redo_failures, redo_fault, crash


SETTINGS = hypothesis.settings(
    max_examples=3000 if SOAK else 150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    derandomize=not SOAK,
    database=None,
)


@SETTINGS
@given(plans())
def test_faults_on_the_catch_up_writes_and_a_crash_during_catch_up(plan: Plan) -> None:
    name, faults, redo_failures, redo_fault, crash = plan
    assert run(name, faults, redo_failures, redo_fault, crash) == REFERENCE[name]


@pytest.mark.parametrize("name", NAMES)
def test_every_linked_write_failing_twice_in_a_row_is_still_redone(name: str) -> None:
    """Every linked object's write fails on every line's pass and on the two redos after."""
    for uid in TARGETS[name]:
        plan = [(i, uid, "write-error", 6) for i in range(len(LINES[name]))]
        assert run(name, plan, 2) == REFERENCE[name], uid


SQLITE_NAMES = ("certification-timeout.jsonl", "happy-path.jsonl", "teardown.jsonl")


@pytest.fixture(scope="module")
def sqlite_reference(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, int], Any]:
    tmp = tmp_path_factory.mktemp("ref")
    return {
        (name, runners): run(name, kind="sqlite", runners=runners, tmp=tmp)
        for name in SQLITE_NAMES
        for runners in (1, 2)
    }


def _without_epoch(events: dict[str, list[tuple[str, str, str]]]) -> Any:
    return {uid: [(r, t) for _, r, t in es] for uid, es in events.items()}


def test_sqlite_outcomes_match_memory(sqlite_reference: dict[tuple[str, int], Any]) -> None:
    """One store or another, one runner or two: the same statuses and the same events."""
    for (name, _), (statuses, events) in sqlite_reference.items():
        assert statuses == REFERENCE[name][0], name
        assert _without_epoch(events) == _without_epoch(REFERENCE[name][1]), name


@hypothesis.settings(SETTINGS, max_examples=1000 if SOAK else 40)
@given(data=st.data())
def test_two_runners_on_one_sqlite_file_with_faults(
    data: st.DataObject, tmp_path: Path, sqlite_reference: dict[tuple[str, int], Any]
) -> None:
    name = data.draw(st.sampled_from(SQLITE_NAMES))
    runners = data.draw(st.sampled_from((1, 2)))
    many = data.draw(st.booleans())
    fault = _fault(name)
    faults = data.draw(st.lists(fault, min_size=1, max_size=3))
    redo_failures = data.draw(st.integers(0, 2))
    crash = data.draw(st.none() | st.integers(0, 1)) if runners == 1 else None
    got = run(
        name,
        faults,
        redo_failures,
        "write-error",
        crash,
        kind="sqlite",
        runners=runners,
        many=many,
        tmp=tmp_path,
    )
    assert got == sqlite_reference[(name, runners)]
