"""Bad input is refused, clearly (DESIGN.md property 6).

Every refusal is a typed ``lifecycle`` exception whose message says what is wrong, and the
store (memory and SQLite, via the ``store`` fixture) is exactly as it was before.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest

import lifecycle
from lifecycle import (
    InvalidObservation,
    InvalidTransition,
    LifecycleError,
    Machine,
    MemoryEmitter,
    ObjectRef,
    Runner,
    Store,
    Tick,
    UnknownMachine,
    UnknownObservation,
)
from lifecycle.machines import nodeclaim, pod
from lifecycle.machines.nodeclaim import NODECLAIM
from lifecycle.machines.pod import POD
from tests.conftest import pod_ref, t

AT = t(60)
CLAIM = ObjectRef("NodeClaim", "", "ml-trainer-0", "pod-a-claim")


def snapshot(store: Store) -> tuple[Any, ...]:
    """Everything the store holds about the test pod, its claim, and the outbox."""
    ref = pod_ref()
    return (
        store.load(POD, ref),
        store.journal(POD, ref),
        list(store.records(POD)),
        store.load(NODECLAIM, CLAIM),
        store.journal(NODECLAIM, CLAIM),
        list(store.records(NODECLAIM)),
        store.claim_undelivered(),
    )


@pytest.fixture
def seeded(runner: Runner, store: Store, emitter: MemoryEmitter) -> Runner:
    """A pod that is Initializing on an instance, with its claim Bound."""
    ref = pod_ref()
    runner.observe(ref, pod.CreateRequested(at=t(0), pool="gpu", provider="modal"))
    runner.observe(ref, pod.ProvisionSucceeded(at=t(2), reserved=True, instance_id="sb-1"))
    record = store.load(POD, ref)
    assert record is not None
    assert (record.status.state, record.version) == (pod.INITIALIZING, 2)
    claim = store.load(NODECLAIM, CLAIM)
    assert claim is not None
    assert claim.status.state == nodeclaim.BOUND
    emitter.clear()
    return runner


def test_well_formed_dict_input_is_accepted() -> None:
    """The control for everything below: the refusals are about the bad parts only."""
    obs = POD.observation(
        "ProvisionSucceeded", "2026-11-30T10:00:02Z", {"reserved": True, "instance_id": "i-1"}
    )
    assert obs == pod.ProvisionSucceeded(at=t(2), reserved=True, instance_id="i-1")
    obs = NODECLAIM.observation("ClaimCreated", t(0), {"grace_seconds": 30})
    assert obs == nodeclaim.ClaimCreated(at=t(0), grace_seconds=30.0)
    assert POD.observation("InstanceFailed", t(1), {"exit_code": None}) == pod.InstanceFailed(
        at=t(1)
    )


# -- unknown names ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("machine", "name"),
    [
        (POD, "InstanceExploded"),
        (POD, "instancerunning"),  # names are exact
        (POD, ""),
        (NODECLAIM, "PodVanished"),
    ],
)
def test_unknown_observation_name(machine: Machine[Any], name: str) -> None:
    with pytest.raises(UnknownObservation) as info:
        machine.observation(name, AT, {})
    message = str(info.value)
    assert message.startswith(f"{machine.name}: unknown observation {name!r}")
    assert "known: " in message
    assert next(iter(machine.vocabulary)) in message  # it lists what would have worked


@pytest.mark.parametrize(
    ("machine", "name"),
    [
        (POD, "PodObserved"),
        (POD, "ClaimCreated"),
        (POD, "Tick"),
        (NODECLAIM, "InstanceRunning"),
        (NODECLAIM, "ProvisionSucceeded"),
    ],
)
def test_observation_of_another_machine_by_name(machine: Machine[Any], name: str) -> None:
    with pytest.raises(UnknownObservation, match=f"{machine.name}: unknown observation"):
        machine.observation(name, AT, {})


@pytest.mark.parametrize(
    ("machine", "status", "foreign"),
    [
        (POD, pod.PodStatus(), nodeclaim.PodAbsent(at=AT)),
        (POD, pod.PodStatus(state=pod.RUNNING), Tick(at=AT)),
        (NODECLAIM, nodeclaim.NodeClaimStatus(), pod.InstanceRunning(at=AT)),
    ],
)
def test_observation_object_of_another_machine(
    machine: Machine[Any], status: Any, foreign: lifecycle.Observation
) -> None:
    name = type(foreign).__name__
    with pytest.raises(UnknownObservation, match=f"{name} is not one of its observations"):
        machine.apply(status, foreign)
    with pytest.raises(UnknownObservation, match=name):
        machine.select(status, foreign)


# -- wrong fields -----------------------------------------------------------------------------
BAD_FIELDS: list[tuple[Machine[Any], str, dict[str, Any], str]] = [
    # strings for bools, numbers for bools
    (POD, "ProvisionSucceeded", {"reserved": "true", "instance_id": "i-1"}, "reserved"),
    (POD, "ProvisionSucceeded", {"reserved": 1, "instance_id": "i-1"}, "reserved"),
    (POD, "InstanceRunning", {"readiness_confirmed": "false"}, "readiness_confirmed"),
    (NODECLAIM, "PodObserved", {"pod_uid": "u", "phase": "Running", "reason": "Running",
                                "deleting": "yes"}, "deleting"),
    # bools (and strings, floats) for ints and numbers
    (POD, "InstanceFailed", {"exit_code": True}, "exit_code"),
    (POD, "InstanceTerminated", {"exit_code": "137"}, "exit_code"),
    (POD, "InstanceFailed", {"exit_code": 1.5}, "exit_code"),
    (NODECLAIM, "ClaimCreated", {"grace_seconds": True}, "grace_seconds"),
    (NODECLAIM, "ClaimCreated", {"grace_seconds": "15"}, "grace_seconds"),
    # other wrong types
    (POD, "ProvisionSucceeded", {"reserved": True, "instance_id": 7}, "instance_id"),
    (POD, "ConfigInvalid", {"error": None}, "error"),
    (POD, "CreateRequested", {"pool": ["gpu"]}, "pool"),
    (NODECLAIM, "PodObserved", {"pod_uid": "u", "phase": 3, "reason": ""}, "phase"),
    # unknown fields
    (POD, "ProvisionSucceeded", {"reserved": True, "instance_id": "i", "zone": "a"}, "zone"),
    (POD, "InstanceAbsent", {"instance_id": "i-1"}, "unknown field(s) instance_id"),
    (NODECLAIM, "Tick", {"seconds": 15}, "unknown field(s) seconds"),
    # missing required fields
    (POD, "ProvisionSucceeded", {"reserved": True}, "missing required field 'instance_id'"),
    (POD, "ProvisionSucceeded", {"instance_id": "i-1"}, "missing required field 'reserved'"),
    (POD, "ProvisionRejected", {}, "missing required field 'error'"),
    (NODECLAIM, "PodObserved", {"phase": "Running", "reason": "Running"}, "'pod_uid'"),
    (NODECLAIM, "ClaimAdopted", {}, "missing required field 'phase'"),
    # impossible values
    (NODECLAIM, "ClaimAdopted", {"phase": "Running"}, "is not a NodeClaim phase"),
    (NODECLAIM, "ClaimCreated", {"grace_seconds": -1}, "must not be negative"),
    # naive timestamps inside fields
    (NODECLAIM, "ClaimAdopted", {"phase": "Bound", "created_at": "2026-11-30T10:00:00"},
     "no UTC offset"),
    (NODECLAIM, "ClaimAdopted", {"phase": "Bound", "created_at": datetime(2026, 11, 30)},
     "no timezone"),
    (NODECLAIM, "ClaimAdopted", {"phase": "Bound", "created_at": "last tuesday"},
     "not an RFC 3339 timestamp"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("machine", "name", "fields", "says"),
    BAD_FIELDS,
    ids=[f"{m.name}-{n}-{s}" for m, n, _, s in BAD_FIELDS],
)
def test_wrong_fields_are_refused(
    machine: Machine[Any], name: str, fields: dict[str, Any], says: str
) -> None:
    with pytest.raises(InvalidObservation) as info:
        machine.observation(name, AT, fields)
    message = str(info.value)
    assert message.startswith(name)  # names the observation ...
    assert says in message  # ... and what is wrong with it


@pytest.mark.parametrize(
    ("at", "says"),
    [
        (datetime(2026, 11, 30, 10, 0, 0), "no timezone"),
        ("2026-11-30T10:00:00", "no UTC offset"),
        ("2026-11-30 at ten", "not an RFC 3339 timestamp"),
        (1764496800, "expected"),
        (None, "expected"),
    ],
    ids=["naive-datetime", "naive-string", "not-a-time", "epoch-int", "null"],
)
def test_bad_observation_time_is_refused(at: object, says: str) -> None:
    with pytest.raises(InvalidObservation, match=r"InstanceAbsent\.at") as info:
        POD.observation("InstanceAbsent", at, {})
    assert says in str(info.value)


def test_time_given_twice_is_refused() -> None:
    with pytest.raises(InvalidObservation, match="'at' is given once"):
        POD.observation("InstanceAbsent", AT, {"at": "2026-11-30T10:00:00Z"})


# -- refusals leave the store untouched -------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "fields", "error"),
    [
        ("InstanceExploded", {}, UnknownObservation),
        ("PodObserved", {"pod_uid": "u", "phase": "Running", "reason": "Running"},
         UnknownObservation),
        ("InstanceRunning", {"readiness_confirmed": "yes"}, InvalidObservation),
        ("InstanceFailed", {"exit_code": False}, InvalidObservation),
        ("InstanceRunning", {"cpu": 3}, InvalidObservation),
        ("TerminateFailed", {}, InvalidObservation),
    ],
)  # fmt: skip
def test_dict_input_refused_before_the_store_is_touched(
    seeded: Runner, store: Store, emitter: MemoryEmitter, name: str, fields: dict[str, Any],
    error: type[LifecycleError],
) -> None:  # fmt: skip
    before = snapshot(store)
    with pytest.raises(error):
        seeded.observe(pod_ref(), POD.observation(name, AT, fields))
    assert snapshot(store) == before
    assert emitter.events == []


def test_foreign_observation_through_the_runner(
    seeded: Runner, store: Store, emitter: MemoryEmitter
) -> None:
    before = snapshot(store)
    with pytest.raises(UnknownObservation, match="pod: PodAbsent is not one of its observations"):
        seeded.observe(pod_ref(), nodeclaim.PodAbsent(at=AT))
    with pytest.raises(UnknownObservation, match="nodeclaim: InstanceAbsent is not one of its"):
        seeded.observe(CLAIM, pod.InstanceAbsent(at=AT))
    assert snapshot(store) == before
    assert emitter.events == []


def test_no_row_on_a_brand_new_pod(runner: Runner, store: Store, emitter: MemoryEmitter) -> None:
    """ProvisionSucceeded before CreatePod: the table has no row, nothing is written."""
    ref = pod_ref()
    with pytest.raises(InvalidTransition) as info:
        runner.observe(ref, pod.ProvisionSucceeded(at=AT, reserved=True, instance_id="i-1"))
    error = info.value
    assert (error.machine, error.state, error.observation) == ("pod", "", "ProvisionSucceeded")
    assert str(error) == (
        'pod: observation ProvisionSucceeded is not accepted in state "" '
        "(the table has no row for this pair)"
    )
    assert store.load(POD, ref) is None
    assert store.journal(POD, ref) == []
    assert store.load(NODECLAIM, CLAIM) is None
    assert list(store.records(POD)) == []
    assert store.claim_undelivered() == []
    assert emitter.events == []


@pytest.mark.parametrize(
    "obs",
    [
        pod.ProvisionSucceeded(at=AT, reserved=False, instance_id="i-2"),
        pod.ProvisionRejected(at=AT, error="quota"),
        pod.ProvisionErrored(at=AT, error="timeout"),
    ],
    ids=lambda o: type(o).__name__,
)
def test_no_row_on_a_config_error_pod(
    runner: Runner, store: Store, emitter: MemoryEmitter, obs: lifecycle.Observation
) -> None:
    ref = pod_ref()
    runner.observe(ref, pod.ConfigInvalid(at=t(0), error="pool gpu: not found"))
    emitter.clear()
    before = snapshot(store)
    assert before[0].version == 1
    with pytest.raises(InvalidTransition, match="not accepted in state ConfigError"):
        runner.observe(ref, obs)
    assert snapshot(store) == before
    assert emitter.events == []


# -- unknown machines -------------------------------------------------------------------------
def test_unknown_machine_by_name() -> None:
    registry = lifecycle.default_registry()
    with pytest.raises(UnknownMachine, match=r"unknown machine 'widget'; known: .*nodeclaim, pod"):
        registry["widget"]
    with pytest.raises(UnknownMachine, match="no machine handles kind 'pod'"):
        registry.for_kind("pod")  # kinds are spelled as Kubernetes spells them: "Pod"
    assert registry.for_kind("Pod") is POD


def test_unknown_kind_through_the_runner(
    seeded: Runner, store: Store, emitter: MemoryEmitter
) -> None:
    before = snapshot(store)
    with pytest.raises(UnknownMachine, match="no machine handles kind 'Widget'"):
        seeded.observe(ObjectRef("Widget", "ml", "w", "pod-a"), pod.InstanceAbsent(at=AT))
    assert snapshot(store) == before
    assert emitter.events == []


def test_every_refusal_is_a_lifecycle_error() -> None:
    """Hosts can catch one base class; no bare ValueError or TypeError leaks out."""
    attempts: list[Callable[[], object]] = [
        lambda: POD.observation("Nope", AT, {}),
        lambda: POD.observation("InstanceFailed", AT, {"exit_code": True}),
        lambda: NODECLAIM.observation("ClaimCreated", AT, {"grace_seconds": -5}),
        lambda: NODECLAIM.observation("ClaimAdopted", AT, {"phase": 42}),
        lambda: POD.observation("InstanceAbsent", "noon", {}),
        lambda: POD.apply(pod.PodStatus(), pod.ProvisionErrored(at=AT, error="x")),
        lambda: lifecycle.default_registry()["widget"],
    ]
    for attempt in attempts:
        with pytest.raises(LifecycleError):
            attempt()
