"""Adversarial input: only LifecycleError escapes, a refusal leaves the store as it was, and
nothing accepted can get an object stuck (DESIGN property 6; the input bounds, ADR 0073).

Every shipped machine (from the registry) is driven through ``Machine.observation`` (data
from outside) and ``Runner.observe`` / ``observe_many`` (observations a host builds in Python),
on the memory store and SQLite, with the hostile values of ``lifecycle.testing.hostile_*``.
After anything accepted, more normal observations and far-future Ticks must apply or be
refused with a LifecycleError: never an OverflowError or any other untyped exception.

Bounded in ``make test``; ``LIFECYCLE_SOAK=1`` runs many more examples
(``LIFECYCLE_SOAK_EXAMPLES``: how many; ``tests/test_soak_short.py`` runs a short soak of this
file under a tight memory cap in ``make test``). Every store an example opens is closed when
the example ends, and each property checks that the library's threads did not pile up: a
soak of thousands of examples under ``LIFECYCLE_TEST_MEMORY_CAP`` once ran out of address
space with a marker thread per store opened (issue 35).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import hypothesis
import pytest
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

import lifecycle
from lifecycle import (
    InvalidObservation,
    InvalidReference,
    LifecycleError,
    Machine,
    MemoryStore,
    ObjectRef,
    Observation,
    Runner,
    SQLiteStore,
    Store,
    Tick,
)
from lifecycle._testing.hostile import SAMPLES
from lifecycle.machines import POD, RESTORE, pod
from lifecycle.machines.restore import AttemptOpened, RestorePolicy
from lifecycle.testing import (
    EPOCH,
    hostile_built,
    hostile_observations,
    hostile_refs,
    observation_sequences,
)

SOAK = os.environ.get("LIFECYCLE_SOAK") == "1"
SETTINGS = hypothesis.settings(
    max_examples=int(os.environ.get("LIFECYCLE_SOAK_EXAMPLES", "2000")) if SOAK else 25,
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
    ],
)
REGISTRY = lifecycle.default_registry()
MACHINES = sorted(REGISTRY)
LATEST = datetime(9000, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)


@pytest.fixture(params=["memory", "sqlite"])
def store_kind(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    return kind


class Stores:
    """Opens fresh stores of one kind (call it); :meth:`example` closes (and deletes) those
    opened inside it when it ends, so a property keeps no store, file or thread per example."""

    def __init__(self, kind: str, folder: Path) -> None:
        self.kind = kind
        self.folder = folder
        self.opened: list[Store] = []
        self._counter = iter(range(10**9))

    def __call__(self) -> Store:
        store: Store
        if self.kind == "memory":
            store = MemoryStore()
        else:
            store = SQLiteStore(self.folder / f"s{next(self._counter)}.db", synchronous="OFF")
        self.opened.append(store)
        return store

    def close(self) -> None:
        opened, self.opened = self.opened, []
        for store in opened:
            store.close()
            if isinstance(store, SQLiteStore):
                for suffix in ("", "-wal", "-shm", ".lifecycle-history"):
                    Path(store.path + suffix).unlink(missing_ok=True)

    @contextlib.contextmanager
    def example(self) -> Iterator[None]:
        try:
            yield
        finally:
            self.close()


@pytest.fixture
def make_store(store_kind: str, tmp_path: Path) -> Iterator[Stores]:
    stores = Stores(store_kind, tmp_path)
    yield stores
    stores.close()


def library_threads() -> int:
    """The library's background threads alive now (all are named ``lifecycle-...``)."""
    return sum(t.name.startswith("lifecycle-") for t in threading.enumerate())


def run_bounded(run: Callable[[], None]) -> None:
    """Run a property; no example may leave a library thread behind (issue 35: a soak under
    a memory cap ran out of address space with one marker thread per store opened)."""
    before = library_threads()
    run()
    assert library_threads() <= before, "examples left library threads running"


def ref_of(machine: Machine[Any]) -> ObjectRef:
    return ObjectRef(machine.kind, "default", f"{machine.name}-0", f"{machine.name}-uid-0")


def snapshot(store: Store) -> tuple[Any, ...]:
    """What the store holds for every shipped machine: records and journals."""
    out: list[Any] = []
    for name in MACHINES:
        machine = REGISTRY[name]
        records = sorted(store.records(machine), key=lambda r: r.ref.uid)
        out.append(records)
        out.extend(store.journal(machine, r.ref) for r in records)
    return tuple(out)


def observe_typed(runner: Runner, ref: ObjectRef, obs: Observation, many: bool = False) -> bool:
    """Observe; True if it went through, False if refused with a LifecycleError. Anything
    else propagates (and fails the test), as does a refusal that changed the store."""
    before = snapshot(runner.store)
    try:
        if many:
            runner.observe_many([(ref, obs)])
        else:
            runner.observe(ref, obs)
    except LifecycleError:
        assert snapshot(runner.store) == before, "a refusal changed the store"
        return False
    return True


def keep_going(runner: Runner, machine: Machine[Any], ref: ObjectRef, later: list[Observation]
               ) -> None:  # fmt: skip
    """After an accepted observation: normal ones, then Ticks up to the last instant the
    bounds allow. Each applies or is refused with a LifecycleError."""
    for obs in later:
        observe_typed(runner, ref, obs)
    if Tick in machine.accepted or any(c.__name__ == "Tick" for c in machine.accepted):
        tick = next(c for c in machine.accepted if c.__name__ == "Tick")
        for at in (LATEST - timedelta(days=365), LATEST):
            observe_typed(runner, ref, tick(at=at))


def seeded(machine: Machine[Any], runner: Runner, ref: ObjectRef, steps: list[Observation]
           ) -> None:  # fmt: skip
    for obs in steps:
        observe_typed(runner, ref, obs)


# -- Machine.observation: data from outside ----------------------------------------------------
@pytest.mark.parametrize("name", MACHINES)
def test_machine_observation_refuses_only_with_a_lifecycle_error(name: str) -> None:
    machine = REGISTRY[name]

    @SETTINGS
    @given(hostile_observations(machine))
    def run(args: tuple[Any, Any, Any]) -> None:
        try:
            obs = machine.observation(*args)
        except LifecycleError as e:
            message = str(e)
        else:  # whatever the builder accepts, the runner's own check accepts too
            lifecycle._core.serde.validate(obs)
            return
        assert len(message) < 2000, "an error message must stay short"

    run()


# -- Runner.observe: accepted input never gets an object stuck -----------------------------------
#: Examples that once failed here (issue 23: a drawn ``groups`` of 2**63 - 1 made the Workflow
#: build that many groups; the kernel killed ``make test`` at 23.7 GB).
PINNED: dict[str, list[tuple[str, Any, Any]]] = {
    "workflow": [
        ("Partitioned", EPOCH, {"nodes": 4, "groups": 2**63 - 1, "nodes_per_job": 2}),
        ("Partitioned", EPOCH, {"nodes": 2**63 - 1, "groups": 2**63 - 1, "nodes_per_job": 1}),
    ],
}


@pytest.mark.parametrize("name", MACHINES)
def test_hostile_observations_through_the_runner(name: str, make_store: Stores) -> None:
    machine = REGISTRY[name]
    ref = ref_of(machine)

    @SETTINGS
    @given(
        observation_sequences(machine, samples=SAMPLES, max_size=4),
        hostile_observations(machine),
        observation_sequences(
            machine, samples=SAMPLES, max_size=4, start=EPOCH + timedelta(days=1)
        ),
        st.booleans(),
    )
    def run(
        before: list[Observation], args: tuple[Any, Any, Any], after: list[Observation], many: bool
    ) -> None:
        with make_store.example():
            runner = Runner(make_store())
            seeded(machine, runner, ref, before)
            try:
                obs = machine.observation(*args)
            except LifecycleError:
                return
            if observe_typed(runner, ref, obs, many):
                keep_going(runner, machine, ref, after)

    for args in PINNED.get(name, ()):
        run = hypothesis.example(before=[], args=args, after=[], many=False)(run)
    run_bounded(run)


@pytest.mark.parametrize("name", MACHINES)
def test_observations_built_in_python_are_checked_at_the_runner(
    name: str, make_store: Stores
) -> None:
    machine = REGISTRY[name]
    ref = ref_of(machine)

    @SETTINGS
    @given(
        observation_sequences(machine, samples=SAMPLES, max_size=3),
        hostile_built(machine),
        observation_sequences(
            machine, samples=SAMPLES, max_size=4, start=EPOCH + timedelta(days=1)
        ),
        st.booleans(),
    )
    def run(
        before: list[Observation], obs: Observation, after: list[Observation], many: bool
    ) -> None:
        with make_store.example():
            runner = Runner(make_store())
            seeded(machine, runner, ref, before)
            if observe_typed(runner, ref, obs, many):
                keep_going(runner, machine, ref, after)

    run_bounded(run)


@pytest.mark.parametrize("name", MACHINES)
def test_hostile_refs_are_refused_with_a_typed_error(name: str, make_store: Stores) -> None:
    machine = REGISTRY[name]

    @SETTINGS
    @given(
        hostile_refs(machine),
        observation_sequences(machine, samples=SAMPLES, min_size=1, max_size=2),
    )
    def run(ref: ObjectRef, steps: list[Observation]) -> None:
        with make_store.example():
            runner = Runner(make_store())
            for obs in steps:
                observe_typed(runner, ref, obs)
                observe_typed(runner, ref, obs, many=True)

    run_bounded(run)


# -- the findings of issue 13, each pinned -----------------------------------------------------
RESTORE_AT = "2026-01-01T00:00:00Z"
OPEN = {"pod_uid": "pod-1", "content_uid": "content-1", "container": "main"}


def test_a_huge_restore_deadline_is_refused_not_committed(make_store: Stores) -> None:
    runner = Runner(make_store())
    with pytest.raises(InvalidObservation, match="target_facts_deadline_seconds: 1e\\+300"):
        RESTORE.observation(
            "AttemptOpened",
            RESTORE_AT,
            {**OPEN, "policy": {"target_facts_deadline_seconds": 1e300}},
        )
    ref = ObjectRef("RestoreAttempt", "ml", "trainer.main", "attempt-1")
    built = AttemptOpened(
        at=EPOCH,
        pod_uid="pod-1",
        content_uid="content-1",
        container="main",
        policy=RestorePolicy(target_facts_deadline_seconds=1e300),
    )
    with pytest.raises(InvalidObservation, match="longer than 1000000000 seconds"):
        runner.observe(ref, built)
    assert runner.store.load(RESTORE, ref) is None


def test_the_longest_deadline_at_the_latest_time_keeps_the_object_working(
    make_store: Stores,
) -> None:
    runner = Runner(make_store())
    ref = ObjectRef("RestoreAttempt", "ml", "trainer.main", "attempt-1")
    policy = {"target_facts_deadline_seconds": 1e9, "write_backoff_cap_seconds": 1e9}
    opened = RESTORE.observation("AttemptOpened", LATEST, {**OPEN, "policy": policy})
    assert runner.observe(ref, opened).committed
    for name in ("PodObserved", "Tick", "Tick"):
        with contextlib.suppress(LifecycleError):  # refused or not: never an OverflowError
            runner.observe(ref, RESTORE.observation(name, LATEST, {}))
    stored = runner.store.load(RESTORE, ref)
    assert stored is not None
    assert RESTORE.fold(ref, [e.observation for e in runner.store.journal(RESTORE, ref)]) == (
        stored.status
    )


@pytest.mark.parametrize(
    "at",
    ["9999-12-31T00:00:00Z", "9001-01-01T00:00:00Z", "1969-12-31T23:59:59Z", "2026-01-01T00:00"],
)
def test_an_observation_dated_outside_the_window_is_refused(at: str, make_store: Stores) -> None:
    runner = Runner(make_store())
    ref = ObjectRef("Pod", "ml", "trainer-0", "pod-a")
    with pytest.raises(InvalidObservation, match=r"InstanceAbsent\.at"):
        POD.observation("InstanceAbsent", at, {})
    naive_or_far = datetime.fromisoformat(at.replace("Z", "+00:00"))
    with pytest.raises(InvalidObservation, match="at"):
        runner.observe(ref, pod.CreateRequested(at=naive_or_far))
    assert runner.store.load(POD, ref) is None


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("a\x00b", "NUL"),
        ("\ud800", "lone surrogate"),
        ("x" * 65_537, "more than 65536"),
    ],
)
def test_text_no_store_holds_alike_is_refused(value: str, problem: str, make_store: Stores) -> None:
    runner = Runner(make_store())
    ref = ObjectRef("Pod", "ml", "trainer-0", "pod-a")
    with pytest.raises(InvalidObservation, match=problem):
        POD.observation("ConfigInvalid", EPOCH, {"error": value})
    with pytest.raises(InvalidObservation, match=f"ConfigInvalid.error: .*{problem}"):
        runner.observe(ref, pod.ConfigInvalid(at=EPOCH, error=value))
    assert runner.store.load(POD, ref) is None


@pytest.mark.parametrize(
    ("ref", "field"),
    [
        (ObjectRef("Pod", "ml", "trainer-0", "pod\x00a"), "uid"),
        (ObjectRef("Pod", "ml\ud800", "trainer-0", "pod-a"), "namespace"),
        (ObjectRef("Pod", "ml", "n" * 513, "pod-a"), "name"),
        (ObjectRef("Pod", "ml", "trainer-0", ""), "uid"),
        (ObjectRef("Pod", "ml", "trainer-0", 7), "uid"),  # type: ignore[arg-type]
        (ObjectRef(["Pod"], "ml", "trainer-0", "pod-a"), "kind"),  # type: ignore[arg-type]
    ],
)
def test_a_bad_reference_is_refused_with_invalid_reference(
    ref: ObjectRef, field: str, make_store: Stores
) -> None:
    runner = Runner(make_store())
    obs = pod.CreateRequested(at=EPOCH)
    with pytest.raises(InvalidReference, match=f"object {field}"):
        runner.observe(ref, obs)
    with pytest.raises(InvalidReference, match=f"object {field}"):
        runner.observe_many([(ref, obs)])
    assert snapshot(runner.store) == snapshot(make_store())


def test_a_1000_deep_list_gives_a_short_message_not_a_recursion_error() -> None:
    deep: list[Any] = []
    for _ in range(1000):
        deep = [deep]
    with pytest.raises(InvalidObservation) as refused:
        POD.observation("ConfigInvalid", EPOCH, {"error": deep})
    assert "[[[[...]]]]" in str(refused.value)
    with pytest.raises(InvalidObservation, match="expected a string"):
        Runner().observe(
            ObjectRef("Pod", "ml", "trainer-0", "pod-a"),
            pod.ConfigInvalid(at=EPOCH, error=deep),  # type: ignore[arg-type]
        )


def test_numbers_out_of_bounds_are_refused() -> None:
    job = REGISTRY["job"]
    cases: list[tuple[dict[str, Any], str]] = [
        ({"generation": 2**63}, "64-bit"),
        ({"measurement_timeout_s": float("nan")}, "finite"),
        ({"measurement_timeout_s": float("inf")}, "finite"),
        ({"startup_timeout_s": 1e10}, "longer than"),
        ({"max_restarts": 10**400}, "64-bit"),
    ]
    for fields, problem in cases:
        with pytest.raises(InvalidObservation, match=problem):
            job.observation("Submitted", EPOCH, fields)


def test_a_machine_failure_is_a_typed_refusal_and_writes_nothing(make_store: Stores) -> None:
    class Broken(type(POD)):  # type: ignore[misc]
        def apply(self, status: Any, obs: Observation) -> Any:
            raise OverflowError("date value out of range")

    registry = lifecycle.MachineRegistry([Broken()])
    runner = Runner(make_store(), machines=registry, links=())
    ref = ObjectRef("Pod", "ml", "trainer-0", "pod-a")
    said = "pod: CreateRequested could not be applied to Pod/ml/trainer-0: OverflowError: date"
    with pytest.raises(InvalidObservation, match=said):
        runner.observe(ref, pod.CreateRequested(at=EPOCH))
    (result,) = runner.observe_many([(ref, pod.CreateRequested(at=EPOCH))])
    assert isinstance(result.error, InvalidObservation)  # that item's failed result
    assert said in str(result.error)
    assert runner.store.load(registry["pod"], ref) is None


def test_every_number_added_to_a_time_is_a_declared_duration() -> None:
    """The duration bound applies by name (``*_s``, ``*_seconds``); every other float field
    of a shipped observation (nested records included) is listed here, so a new time-like
    field without the naming rule fails this test instead of overflowing a deadline."""
    import typing

    import attrs

    from lifecycle._core.bounds import is_duration

    seen: set[type[Any]] = set()
    plain: set[str] = set()

    def walk(cls: type[Any]) -> None:
        if cls in seen:
            return
        seen.add(cls)
        attrs.resolve_types(cls)
        for f in attrs.fields(cls):
            found = [f.type, *typing.get_args(f.type)]
            found += [u for t in found for u in typing.get_args(t)]
            for tp in found:
                if isinstance(tp, type) and attrs.has(tp):
                    walk(tp)
            if float in found and not is_duration(f.name):
                plain.add(f"{cls.__name__}.{f.name}")

    for name in MACHINES:
        for cls in REGISTRY[name].vocabulary.values():
            walk(cls)
    assert plain == {"Measurement.value"}
