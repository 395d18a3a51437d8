"""One protocol, one delivery, a minimal store (ADR 0092).

- The protocol's decisions live once (``_protocol``); the drivers import no cycle and use no
  other module's private names.
- One ordering rule for every delivery: an object's events in commit order, stopped at its
  first refused event, in ``Runner.redeliver``, ``AsyncRunner.redeliver`` and the
  ``Dispatcher`` alike (before, the runners sent a later event past a refused one).
- A host store with only ``load`` and a compare-and-set ``commit`` runs every runner.
"""

from __future__ import annotations

import ast
import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from lifecycle import (
    Conflict,
    Dispatcher,
    MemoryEmitter,
    MemoryStore,
    ObjectRef,
    Observation,
    Outcome,
    Runner,
    Transition,
)
from lifecycle._core.machine import Machine
from lifecycle.aio import AsyncRunner
from lifecycle.links import claim_ref
from lifecycle.machines import pod
from lifecycle.stores.base import CommitStore, Record, Store

from .conftest import pod_ref, t

SRC = Path(__file__).resolve().parent.parent / "src" / "lifecycle"
DRIVERS = ("runner", "_batch", "aio", "dispatch", "_protocol", "_delivery", "_link_intents")
#: the named-tuple API, public despite its underscore
NAMED_TUPLE_API = {"_replace", "_make", "_fields", "_asdict"}
REF = pod_ref()


def _tree(module: str) -> ast.Module:
    return ast.parse((SRC / f"{module}.py").read_text(encoding="utf-8"))


def _imports(module: str) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(_tree(module)):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module.split(".")[0])
            else:
                found.update(a.name for a in node.names)
    return found


# -- the house -------------------------------------------------------------------------------
@pytest.mark.parametrize("module", ["_protocol", "_batch", "_delivery", "_link_intents"])
def test_the_protocol_modules_do_not_import_the_runners(module: str) -> None:
    assert not _imports(module) & {"runner", "aio", "dispatch"}


@pytest.mark.parametrize("module", DRIVERS)
def test_no_driver_uses_another_objects_private_names(module: str) -> None:
    reached: list[str] = []
    for node in ast.walk(_tree(module)):
        if (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and node.attr not in NAMED_TUPLE_API
            and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
        ):
            reached.append(f"{ast.unparse(node)} (line {node.lineno})")
        if isinstance(node, ast.ImportFrom):
            reached += [
                f"import {a.name}" for a in node.names if a.name.startswith("_") and node.module
            ]
    assert reached == []


@pytest.mark.parametrize(
    "decision",
    ["machine.apply(", "machine.flips(", "fallback_message(", "stamp(", "UnknownObservation("],
)
def test_each_protocol_decision_is_written_once(decision: str) -> None:
    where = [m for m in DRIVERS if decision in (SRC / f"{m}.py").read_text(encoding="utf-8")]
    assert where == ["_protocol"]


# -- one ordering rule for every redelivery ---------------------------------------------------
class Refusing:
    """An emitter that refuses the events whose ids are in ``refused``."""

    def __init__(self, refused: set[str]) -> None:
        self.refused = refused
        self.events: list[Transition] = []

    def emit(self, transition: Transition) -> None:
        if transition.id in self.refused:
            raise RuntimeError(f"sink down for {transition.id}")
        self.events.append(transition)


def _two_undelivered_events(store: MemoryStore) -> None:
    down = Refusing({f"{REF.uid}:1:0", f"{REF.uid}:2:0"})
    runner = Runner(store, [down], links=())
    runner.observe(REF, pod.CreateRequested(at=t(0)))
    runner.observe(REF, pod.ProvisionSucceeded(at=t(1), reserved=True, instance_id="i"))
    assert [e.id for e in store.claim_undelivered()] == [f"{REF.uid}:1:0", f"{REF.uid}:2:0"]


def _runner(store: MemoryStore, emitter: Refusing) -> int:
    return Runner(store, [emitter], links=()).redeliver()


def _async_runner(store: MemoryStore, emitter: Refusing) -> int:
    return asyncio.run(AsyncRunner(store, [emitter], links=()).redeliver())


def _dispatcher(store: MemoryStore, emitter: Refusing) -> int:
    return Dispatcher(store, [emitter], runner=Runner(store, [emitter], links=())).dispatch_once()


@pytest.mark.parametrize("redeliver", [_runner, _async_runner, _dispatcher])
def test_a_refused_event_holds_back_its_objects_later_events(
    redeliver: Callable[[MemoryStore, Refusing], int],
) -> None:
    store = MemoryStore()
    _two_undelivered_events(store)
    first = f"{REF.uid}:1:0"
    flaky = Refusing({first})
    assert redeliver(store, flaky) == 0
    assert flaky.events == []  # v2's event did not overtake v1's
    assert [e.id for e in store.claim_undelivered()] == [first, f"{REF.uid}:2:0"]
    flaky.refused.clear()
    assert redeliver(store, flaky) == 2
    assert [e.id for e in flaky.events] == [first, f"{REF.uid}:2:0"]
    assert store.claim_undelivered() == []


def test_another_objects_events_are_not_held_back() -> None:
    store = MemoryStore()
    _two_undelivered_events(store)
    other = pod_ref("other-pod", uid="pod-b")
    runner = Runner(store, [Refusing({f"{other.uid}:1:0"})], links=())
    runner.observe(other, pod.CreateRequested(at=t(0)))
    flaky = Refusing({f"{REF.uid}:1:0"})
    assert Runner(store, [flaky], links=()).redeliver() == 1
    assert [e.ref.uid for e in flaky.events] == [other.uid]


# -- a host store with only load and commit ---------------------------------------------------
class LoadAndCommit:
    """A host's own store: a dict of records, compare-and-set on the version; nothing else."""

    def __init__(self) -> None:
        self.records: dict[str, Record] = {}

    def load(self, machine: Machine[Any], ref: ObjectRef) -> Record | None:
        return self.records.get(ref.uid)

    def commit(
        self,
        machine: Machine[Any],
        ref: ObjectRef,
        expected: int,
        status: Any,
        observation: Observation,
        transitions: Sequence[Transition],
    ) -> int:
        found = self.records.get(ref.uid)
        actual = 0 if found is None else found.version
        if actual != expected:
            raise Conflict(ref.uid, expected, actual)
        self.records[ref.uid] = Record(ref, machine.name, status, expected + 1)
        return expected + 1


def test_a_load_and_commit_store_is_a_commit_store_not_a_store() -> None:
    store = LoadAndCommit()
    assert isinstance(store, CommitStore)
    assert not isinstance(store, Store)


def test_the_runner_runs_on_a_store_with_only_load_and_commit() -> None:
    store, emitter = LoadAndCommit(), MemoryEmitter()
    runner = Runner(store, [emitter])
    assert runner.observe(REF, pod.CreateRequested(at=t(0))).committed
    result = runner.observe(REF, pod.ProvisionSucceeded(at=t(1), reserved=True, instance_id="i"))
    assert result.committed
    assert [r.outcome for r in result.linked] == [Outcome.COMMITTED]  # the NodeClaim's write
    assert store.records[claim_ref(REF).uid].version == 2  # created, then bound
    assert emitter.reasons(REF.uid) == ["Provisioning", "Initializing"]
    assert runner.redeliver() == 0  # no outbox: nothing to redeliver
    (many,) = runner.observe_many([(REF, pod.InstanceRunning(at=t(2)))])
    assert many.outcome is not Outcome.FAILED, many.error
    assert not runner.pending


def test_without_an_outbox_a_refused_event_is_logged_not_redelivered() -> None:
    store = LoadAndCommit()
    down = Refusing({f"{REF.uid}:1:0"})
    runner = Runner(store, [down], links=())
    assert runner.observe(REF, pod.CreateRequested(at=t(0))).committed
    assert store.records[REF.uid].version == 1
    assert runner.redeliver() == 0
    assert down.events == []


def test_the_async_runner_runs_on_a_store_with_only_load_and_commit() -> None:
    store, emitter = LoadAndCommit(), MemoryEmitter()

    async def go() -> None:
        runner = AsyncRunner(store, [emitter])
        assert (await runner.observe(REF, pod.CreateRequested(at=t(0)))).committed
        assert await runner.redeliver() == 0
        await runner.close()

    asyncio.run(go())
    assert emitter.reasons(REF.uid) == ["Provisioning"]


# -- the epoch is read per commit, for a store that has one -----------------------------------
class Epochs(MemoryStore):
    epoch = "e1"


class Wrapping:
    """A wrapper with a ``store`` (as ``ThreadedStore`` and the fault wrappers have)."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


@pytest.mark.parametrize("wrap", [lambda s: s, Wrapping])
def test_events_carry_the_stores_epoch_at_each_commit(wrap: Callable[[Any], Any]) -> None:
    inner = Epochs()
    runner = Runner(wrap(inner), [], links=())
    first = runner.observe(REF, pod.CreateRequested(at=t(0)))
    inner.epoch = "e2"
    second = runner.observe(REF, pod.ProvisionSucceeded(at=t(1), reserved=True, instance_id="i"))
    assert [e.id for e in first.transitions] == [f"{REF.uid}:1:0@e1"]
    assert [e.id for e in second.transitions] == [f"{REF.uid}:2:0@e2"]
