"""The compiled fast paths give exactly what the general code gives.

Observations built from plain fields, ``replace``/``evolver`` copies, message rendering, the
event time text, a machine's compiled steps and the validators of observations built in Python
each have a fast path (see ADRs 0015 and 0067); these tests hold each to the general path it
shortcuts, including every way the input can be wrong.
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lifecycle import EventType, InvalidObservation, Machine, ObjectRef, Observation
from lifecycle._core import serde
from lifecycle._core.machine import apply_reference, evolver, replace
from lifecycle._core.transition import Transition
from lifecycle._testing.coverage import row_paths
from lifecycle._testing.strategies import default_ref
from lifecycle.machines import default_registry
from lifecycle.machines.nodeclaim import NodeClaimStatus
from lifecycle.machines.pod import PodStatus

from .machines.test_restore_runner import SAMPLES as RESTORE_SAMPLES

MACHINES = default_registry()
AT = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
REF = ObjectRef("Pod", "ml", "trainer-0", "pod-a")

# Values of every JSON type, and some that JSON never gives (a host may hand any dict).
VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 5),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.text(max_size=3),
    st.lists(st.integers(0, 3), max_size=2),
    st.dictionaries(st.text(max_size=2), st.integers(0, 3), max_size=2),
    st.just(AT),
    st.just("2026-11-30T10:00:00Z"),
)
OBSERVATIONS = [(m, name) for m in MACHINES.values() for name in m.vocabulary]


def _general(machine: Any, name: str, at: datetime, fields: dict[str, Any]) -> Any:
    """The general path alone: strict structuring of every field."""
    cls = machine.observation_type(name)
    if "at" in fields:
        raise InvalidObservation(f"{name}: 'at' is given once, beside the fields")
    return serde.strict_structure(cls, {**fields, "at": at}, name)


def _outcome(build: Any) -> tuple[str, Any]:
    try:
        return "ok", build()
    except InvalidObservation as e:
        return "refused", str(e)


@given(
    which=st.sampled_from(OBSERVATIONS),
    extra=st.dictionaries(st.sampled_from(["bogus", "at"]), VALUES, max_size=1),
    data=st.data(),
)
def test_an_observation_built_fast_equals_the_general_build_or_the_same_refusal(
    which: tuple[Any, str], extra: dict[str, Any], data: st.DataObject
) -> None:
    machine, name = which
    cls = machine.observation_type(name)
    names = [f.name for f in attrs.fields(cls) if f.init and f.name != "at"]
    chosen = data.draw(st.lists(st.sampled_from(names), unique=True) if names else st.just([]))
    fields = {n: data.draw(VALUES) for n in chosen} | extra
    fast = _outcome(lambda: machine.observation(name, AT, fields))
    general = _outcome(lambda: _general(machine, name, AT, fields))
    assert fast == general


def test_plain_pod_observations_take_the_compiled_builder() -> None:
    pod = MACHINES["pod"]
    build = pod._builders["InstanceRunning"]
    fields = {"instance_id": "i-1", "endpoint": "10.0.0.1"}
    built = build(fields, AT)
    assert built == _general(pod, "InstanceRunning", AT, fields)
    assert build({"instance_id": 7}, AT) is None  # a wrong type: the general path says why
    assert build({"nope": "x"}, AT) is None
    with pytest.raises(InvalidObservation, match="instance_id"):
        pod.observation("InstanceRunning", AT, {"instance_id": 7})


def test_a_string_time_is_left_to_the_general_path() -> None:
    pod = MACHINES["pod"]
    obs = pod.observation("InstancePending", "2026-11-30T10:00:00Z", {"instance_id": "i-1"})
    assert obs.at == AT


# -- replace / evolver ---------------------------------------------------------------------------
@attrs.frozen(slots=True)
class Tagged(PodStatus):
    tag: str = ""


def test_replace_and_evolver_equal_attrs_evolve() -> None:
    status = PodStatus(state="Running", instance_id="i-1", pool="gpu")
    expected = attrs.evolve(status, state="Failed", message="gone")
    assert replace(status, state="Failed", message="gone") == expected
    assert evolver(PodStatus)(status, state="Failed", message="gone") == expected
    claim = NodeClaimStatus(pool="gpu")  # kw_only
    assert replace(claim, pool="cpu") == attrs.evolve(claim, pool="cpu")


def test_a_subclass_status_keeps_its_class_and_fields() -> None:
    status = Tagged(state="Running", tag="mine")
    for copy in (replace(status, state="Failed"), evolver(PodStatus)(status, state="Failed")):
        assert type(copy) is Tagged
        assert (copy.state, copy.tag) == ("Failed", "mine")


def test_an_unknown_change_is_a_type_error_as_with_attrs() -> None:
    with pytest.raises(TypeError):
        replace(PodStatus(), colour="red")
    with pytest.raises(TypeError):
        evolver(PodStatus)(PodStatus(), colour="red")


def test_validators_run_on_a_copy() -> None:
    @attrs.frozen(slots=True)
    class Checked:
        n: int = attrs.field(default=0, validator=attrs.validators.ge(0))

    with pytest.raises(ValueError, match="'n' must be >= 0"):
        replace(Checked(), n=-1)


# -- event time text ------------------------------------------------------------------------------
def test_equal_instants_in_other_zones_keep_their_own_offset_in_events() -> None:
    utc = datetime(2026, 1, 1, 10, tzinfo=UTC)
    plus_one = datetime(2026, 1, 1, 11, tzinfo=timezone(timedelta(hours=1)))
    assert utc == plus_one
    texts = [
        Transition(REF, "pod", "A", "B", "R", EventType.NORMAL, "m", 1, at).as_dict()["at"]
        for at in (utc, plus_one, utc)
    ]
    assert texts == [utc.isoformat(), plus_one.isoformat(), utc.isoformat()]


# -- the memory store's packed journal ----------------------------------------------------------
def test_the_memory_journal_gives_back_every_transition_exactly() -> None:
    from lifecycle import MemoryStore
    from lifecycle._core.transition import stamp
    from lifecycle.machines.pod import CreateRequested

    pod = MACHINES["pod"]
    store = MemoryStore()
    obs = CreateRequested(at=AT, pool="gpu", provider="aws")
    after = pod.apply(pod.initial(REF), obs)
    flips = pod.flips(pod.initial(REF), after)
    runner_made = stamp(flips, REF, pod.name, 1, obs.at)  # what the runner commits
    store.commit(pod, REF, 0, after, obs, runner_made)
    # One stamped elsewhere: an equal ref that is another object, another zone, an action.
    other_ref = ObjectRef(REF.kind, REF.namespace, REF.name, REF.uid)
    plus_one = AT.astimezone(timezone(timedelta(hours=1)))
    odd = (
        runner_made[0]._replace(ref=other_ref, at=plus_one, n=1),
        runner_made[0]._replace(n=2, condition="Ready", controller="ctl", fallback=True),
    )
    store.commit(pod, REF, 1, after, obs, odd)
    entries = store.journal(pod, REF)
    assert [e.transitions for e in entries] == [runner_made, odd]
    assert entries[1].transitions[0].at.utcoffset() == timedelta(hours=1)
    assert [t.type for e in entries for t in e.transitions] == [EventType.NORMAL] * 3


# -- found in review ------------------------------------------------------------------------------
def test_fields_named_like_the_generated_code_still_copy() -> None:
    @attrs.frozen(slots=True)
    class Odd:
        s: int = 0
        cls: str = ""
        k: int = 0
        _replace_: int = 0

    odd = Odd(1, "a", 2, 3)
    assert replace(odd, s=5, cls="b") == Odd(5, "b", 2, 3)
    assert evolver(Odd)(odd, k=7) == Odd(1, "a", 7, 3)


def test_replace_takes_a_change_named_status() -> None:
    from lifecycle.tables import Condition

    ready = Condition("Ready", "True", "", "", AT)
    assert replace(ready, status="False").status == "False"


def test_a_transition_with_a_plain_string_type_is_journaled_whole_and_nothing_half_written() -> (
    None
):
    from lifecycle import MemoryStore
    from lifecycle.machines.pod import CreateRequested

    pod = MACHINES["pod"]
    store = MemoryStore()
    obs = CreateRequested(at=AT, pool="gpu", provider="aws")
    odd = Transition(REF, "pod", "", "Provisioning", "R", "Normal", "m", 1, AT)  # type: ignore[arg-type]
    store.commit(pod, REF, 0, pod.initial(REF), obs, (odd,))
    (entry,) = store.journal(pod, REF)
    assert entry.transitions == (odd,)


def test_the_journal_gives_back_the_committed_object_not_the_callers() -> None:
    from lifecycle import MemoryStore
    from lifecycle._core.transition import stamp
    from lifecycle.machines.pod import CreateRequested

    pod = MACHINES["pod"]
    store = MemoryStore()
    obs = CreateRequested(at=AT, pool="gpu", provider="aws")
    after = pod.apply(pod.initial(REF), obs)
    made = stamp(pod.flips(pod.initial(REF), after), REF, pod.name, 1, obs.at)
    store.commit(pod, REF, 0, after, obs, made)
    equal = ObjectRef(REF.kind, REF.namespace, REF.name, REF.uid)  # equal, not the same object
    (entry,) = store.journal(pod, equal)
    assert entry.transitions == made
    assert all(t.ref is REF for t in entry.transitions)  # the committed ref, not the caller's


def test_event_time_text_keeps_each_side_of_a_dst_fold() -> None:
    from zoneinfo import ZoneInfo

    zone = ZoneInfo("America/New_York")
    first = datetime(2026, 11, 1, 1, 30, tzinfo=zone)
    second = first.replace(fold=1)
    texts = [
        Transition(REF, "pod", "A", "B", "R", EventType.NORMAL, "m", 1, at).as_dict()["at"]
        for at in (first, second)
    ]
    assert texts == [first.isoformat(), second.isoformat()]
    assert texts[0] != texts[1]


def test_a_machine_that_chooses_its_observation_classes_is_asked_every_time() -> None:
    from lifecycle.machines.pod import InstancePending, PodMachine

    class Pending2(InstancePending):
        pass

    class Choosy(PodMachine):
        def observation_type(self, name: str) -> Any:
            return Pending2 if name == "InstancePending" else super().observation_type(name)

    built = Choosy().observation("InstancePending", AT, {"instance_id": "i-1"})
    assert type(built) is Pending2


# -- compiled steps and validators -----------------------------------------------------------------
def _applied(apply: Any, status: Any, obs: Observation) -> tuple[str, Any]:
    try:
        return "ok", apply(status, obs)
    except Exception as e:  # a refusal, or an effect's own error: the same either way
        return "raised", (type(e), str(e))


@pytest.mark.parametrize("machine", list(MACHINES.values()), ids=list(MACHINES))
def test_a_compiled_step_does_what_the_plain_reference_does(machine: Machine[Any]) -> None:
    """The kernel's ``apply`` (one compiled function per state and observation type) gives
    what :func:`apply_reference` gives (select the row, then ignore / effect / enter): along a
    path to every row, and for every kind of observation where each path ends (refusals too).
    A machine's own ``apply`` around the kernel's (the condition machines' clock) is its own."""

    def compiled(status: Any, obs: Observation) -> Any:
        return Machine.apply(machine, status, obs)

    def plain(status: Any, obs: Observation) -> Any:
        return apply_reference(machine, status, obs)

    samples = RESTORE_SAMPLES if machine.name == "restore" else None
    found, _ = row_paths(machine, samples=samples)
    assert len(found) > len(machine.table.rows) // 2
    pool = {type(o): o for path in found for o in path.observations}
    for path in found:
        status = machine.initial(default_ref(machine))
        for obs in path.observations:
            assert _applied(compiled, status, obs) == _applied(plain, status, obs)
            status = machine.apply(status, obs)
        for obs in pool.values():
            assert _applied(compiled, status, obs) == _applied(plain, status, obs)


def _validated(check: Any, record: Any) -> tuple[str, str]:
    try:
        check(record, "")
    except InvalidObservation as e:
        return "refused", str(e)
    return "ok", ""


@given(which=st.sampled_from(OBSERVATIONS), data=st.data())
def test_a_compiled_validator_refuses_exactly_what_its_field_by_field_twin_refuses(
    which: tuple[Any, str], data: st.DataObject
) -> None:
    """The generated ``check`` (every field's cheap test in one expression) and ``full`` (one
    field at a time, saying which is wrong) agree on records a host built in Python."""
    machine, name = which
    cls = machine.observation_type(name)
    fields = [f for f in attrs.fields(cls) if f.init and f.name != "at"]
    values = {f.name: data.draw(VALUES) for f in fields}
    try:
        record = cls(at=data.draw(st.sampled_from([AT, "2026"])), **values)
    except Exception:  # the class's own validator or converter refused it first
        return
    check = serde._validator(cls)
    full = check.__globals__["full"]
    assert _validated(check, record) == _validated(full, record)


# -- the hand-built constructions that stay, each behind one helper (ADR 0154) -----------------
def _reached_statuses(machine: Machine[Any]) -> list[Any]:
    """The statuses a machine reaches along a path to every row it can reach."""
    samples = RESTORE_SAMPLES if machine.name == "restore" else None
    found, _ = row_paths(machine, samples=samples)
    out = [machine.initial(default_ref(machine))]
    for path in found:
        status = out[0]
        for obs in path.observations:
            status = machine.apply(status, obs)
            out.append(status)
    return out


@functools.cache
def _attrs_statuses() -> dict[str, list[Any]]:
    """Per shipped machine with an attrs status, the statuses it reaches (searched once)."""
    return {name: _reached_statuses(m) for name, m in MACHINES.items() if attrs.has(m.status_type)}


def _copied(copy: Any, status: Any, changes: dict[str, Any]) -> tuple[str, Any]:
    try:
        return "ok", copy(status, **changes)
    except Exception as e:  # a validator's refusal: the same either way
        return "raised", (type(e), str(e))


@settings(max_examples=60)
@given(data=st.data())
def test_an_evolver_copy_equals_attrs_evolve_on_every_shipped_status(data: Any) -> None:
    """``evolver`` (the one place a status copy is compiled; ``replace`` and the Pod's and
    NodeClaim's effects use it) gives what ``attrs.evolve`` gives: for every shipped machine
    with an attrs status, any status it reaches, any set of its init fields changed to what
    another reached status holds there -- validators' refusals included."""
    found = _attrs_statuses()
    statuses = found[data.draw(st.sampled_from(sorted(found)))]
    status, other = data.draw(st.sampled_from(statuses)), data.draw(st.sampled_from(statuses))
    fields = [f for f in attrs.fields(type(status)) if f.init]
    chosen = data.draw(st.lists(st.sampled_from(fields), unique=True, max_size=len(fields)))
    changes = {f.alias: getattr(other, f.name) for f in chosen}
    plain = _copied(attrs.evolve, status, changes)
    assert _copied(evolver(type(status)), status, changes) == plain
    assert _copied(replace, status, changes) == plain


def test_every_shipped_status_kind_is_covered_by_the_evolver_property() -> None:
    found = _attrs_statuses()
    assert {"pod", "nodeclaim"} <= set(found)
    assert all(len(statuses) > 1 for statuses in found.values())


# -- records built from their fields in order: counted, never by hand (ADR 0154) ---------------
def test_a_result_write_or_transition_missing_a_field_is_refused_not_built() -> None:
    """The runner's, the protocol's, the stamp's and the trace reader's records are built
    from all their fields in order by the named tuple's own ``_make``: one field short (or
    one too many) raises, where ``tuple.__new__`` built a record whose later fields silently
    shifted or vanished."""
    from lifecycle import _protocol, runner, trace
    from lifecycle._core import transition
    from lifecycle.telemetry import _instrument, _port

    makers: list[tuple[Any, Any]] = [
        (runner._result, runner.Result),
        (_protocol._write, _protocol.Write),
        (transition._new, Transition),
        (trace._new_tuple, trace.ObservationLine),
        (_instrument._observed, _port.Observed),
    ]
    for make, cls in makers:
        n = len(cls._fields)
        with pytest.raises(TypeError):
            make(cls, (None,) * (n - 1))
        with pytest.raises(TypeError):
            make(cls, (None,) * (n + 1))
        assert make(cls, tuple(range(n))) == cls(*range(n))
