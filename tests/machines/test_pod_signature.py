"""The Pod's flip signature (ADR 0017): an event fires iff (phase, reason, Ready, pod IP) changed.

Upstream's handler logs a flip when its signature ``phase|reason|ready|podIP`` changes. So a
Ready change alone (absent -> False when a reserved pod's instance is first seen pending) and a
new pod IP are events; a message, instance id, endpoint or timestamp change alone is not. The
signature here is recomputed from the status fields by the test itself (an oracle independent
of ``PodMachine.signature``), over generated observation sequences, and through a Runner.
"""

from __future__ import annotations

import hypothesis
from hypothesis import given
from hypothesis import strategies as st

from lifecycle import EventType, MemoryEmitter, MemoryStore, Observation, Runner
from lifecycle.machines import pod
from lifecycle.machines.pod import (
    INITIALIZING,
    MSG_INITIALIZING,
    MSG_RUNNING,
    POD,
    RUNNING,
    TERMINATED,
    PodStatus,
)
from tests.conftest import pod_ref, t

SETTINGS = hypothesis.settings(max_examples=150, deadline=None, database=None)

#: Endpoints a poll may report: IPv4 and IPv6 addresses (a pod IP), names (none), nothing.
ENDPOINTS = ["", "10.0.0.7", "10.0.0.8", "2001:db8::7", "ec2-1-2-3-4.compute-1.amazonaws.com"]


def oracle(status: PodStatus) -> tuple[str, str, str, str]:
    """Upstream's signature, read off the status fields."""
    ready = "" if status.ready is None else status.ready.status
    return (status.phase, status.reason, ready, status.pod_ip)


def _observation(kind: str, at_seconds: int, data: st.DataObject) -> Observation:
    at = t(at_seconds)
    endpoint = data.draw(st.sampled_from(ENDPOINTS))
    iid = data.draw(st.sampled_from(["", "i-1", "i-2"]))
    if kind == "create":
        return pod.CreateRequested(at=at, pool="gpu", provider="aws")
    if kind == "provisioned":
        reserved = data.draw(st.booleans())
        return pod.ProvisionSucceeded(
            at=at, reserved=reserved, instance_id=iid or "i-1", endpoint=endpoint
        )
    if kind == "errored":
        return pod.ProvisionErrored(at=at, error=data.draw(st.sampled_from(["503", "timeout"])))
    if kind == "pending":
        return pod.InstancePending(at=at, instance_id=iid, endpoint=endpoint)
    if kind == "running":
        confirmed = data.draw(st.booleans())
        return pod.InstanceRunning(
            at=at, instance_id=iid, endpoint=endpoint, readiness_confirmed=confirmed
        )
    if kind == "failed":
        return pod.InstanceFailed(at=at, instance_id=iid, exit_code=1)
    if kind == "terminated":
        return pod.InstanceTerminated(at=at, instance_id=iid, exit_code=0)
    if kind == "absent":
        return pod.InstanceAbsent(at=at)
    if kind == "unknown":
        return pod.InstanceUnknown(at=at, error="List failed")
    if kind == "deleting":
        return pod.DeletionRequested(at=at)
    return pod.TerminateSucceeded(at=at)


# Live-pod observations are drawn far more often than the terminal ones, so sequences spend
# their time in Initializing and Running, where Ready-only and IP-only flips happen.
KINDS = ["pending"] * 4 + ["running"] * 6 + ["create", "provisioned", "provisioned", "errored"]
KINDS += ["unknown", "deleting", "failed", "terminated", "absent", "deleted", "deleted"]

_CREATE = pod.CreateRequested(at=t(0), pool="gpu", provider="aws")
#: The upstream scenarios, always tried first (random draws find them only most of the time).
READY_ONLY = [
    _CREATE,
    pod.ProvisionSucceeded(at=t(1), reserved=True, instance_id="i-1"),
    pod.InstancePending(at=t(15), instance_id="i-1"),
]
IP_ONLY = [
    _CREATE,
    pod.InstanceRunning(at=t(5), instance_id="i-1", endpoint="10.0.0.7"),
    pod.InstanceRunning(at=t(10), instance_id="i-1", endpoint="10.0.0.8"),
]
DELETED_WHILE_READY = [
    _CREATE,
    pod.InstanceRunning(at=t(5), instance_id="i-1"),
    pod.TerminateSucceeded(at=t(10)),
]


@st.composite
def pod_histories(draw: st.DrawFn) -> list[Observation]:
    """A CreatePod, then a valid-for-any-state run of observations at rising times."""
    data = draw(st.data())
    out: list[Observation] = [_CREATE]
    for i in range(draw(st.integers(1, 14))):
        out.append(_observation(draw(st.sampled_from(KINDS)), 5 * (i + 1), data))
    return out


def _legal(status: PodStatus, obs: Observation) -> bool:
    return POD.table.accepts(status.state, type(obs))


@SETTINGS
@given(pod_histories())
@hypothesis.example(READY_ONLY)
@hypothesis.example(IP_ONLY)
@hypothesis.example(DELETED_WHILE_READY)
def test_an_event_fires_iff_the_signature_changed(history: list[Observation]) -> None:
    status = POD.initial(pod_ref())
    for obs in history:
        if not _legal(status, obs):
            continue  # a Provision result before any Provision started: refused elsewhere
        after = POD.apply(status, obs)
        flips = POD.flips(status, after)
        if oracle(status) == oracle(after):
            assert flips == ()
        else:
            (flip,) = flips
            warning = after.phase == "Failed" or after.state == pod.CONFIG_ERROR
            assert (flip.source, flip.target, flip.reason, flip.message, flip.condition) == (
                status.state,
                after.state,
                after.reason,
                after.message,
                "",
            )
            assert flip.type is (EventType.WARNING if warning else EventType.NORMAL)
        assert POD.signature(after) == oracle(after)
        status = after


@SETTINGS
@given(pod_histories())
@hypothesis.example(DELETED_WHILE_READY)
def test_ready_true_only_while_running_and_never_once_terminal(
    history: list[Observation],
) -> None:
    status = POD.initial(pod_ref())
    for obs in history:
        if _legal(status, obs):
            status = POD.apply(status, obs)
        if status.ready is not None and status.ready.status == "True":
            assert (status.state, status.phase) == (RUNNING, "Running")
        if POD.is_terminal(status):
            assert status.ready is None or status.ready.status == "False"


@hypothesis.settings(max_examples=40, deadline=None, database=None)
@given(pod_histories())
@hypothesis.example(READY_ONLY)
@hypothesis.example(IP_ONLY)
def test_through_a_runner_the_events_are_the_signature_changes(
    history: list[Observation],
) -> None:
    """Every committed status whose signature differs from the one before sends exactly one
    event, in order, under the version that committed it; nothing else sends one."""
    store, emitter = MemoryStore(), MemoryEmitter()
    runner = Runner(store, [emitter], links=())  # the Pod alone
    ref = pod_ref()
    expected: list[tuple[int, str, str]] = []
    previous = oracle(POD.initial(ref))
    for obs in history:
        record = store.load(POD, ref)
        before = POD.initial(ref) if record is None else record.status
        if not _legal(before, obs):
            continue
        result = runner.observe(ref, obs)
        now = oracle(result.status)
        if result.committed and now != previous:
            expected.append((result.version, before.state, result.status.state))
        previous = now
    assert [(e.version, e.source, e.target) for e in emitter.for_uid(ref.uid)] == expected


# -- the upstream scenarios, spelled out -------------------------------------------------------
def test_ready_absent_to_false_on_the_first_poll_is_an_event() -> None:
    """A reserved Provision leaves Ready absent (markStatus); the first poll of a pending
    instance adds Ready=False: upstream's signature flips, and so does ours."""
    store, emitter = MemoryStore(), MemoryEmitter()
    runner = Runner(store, [emitter])
    ref = pod_ref("booting", "pod-boot")
    runner.observe(ref, pod.CreateRequested(at=t(0), pool="gpu", provider="aws"))
    runner.observe(ref, pod.ProvisionSucceeded(at=t(1), reserved=True, instance_id="i-1"))
    r = runner.observe(ref, pod.InstancePending(at=t(15), instance_id="i-1"))
    assert r.status.ready is not None
    assert (r.status.state, r.status.ready.status) == (INITIALIZING, "False")
    (event,) = r.transitions
    assert (event.type, event.reason, event.source, event.target, event.message) == (
        EventType.NORMAL,
        INITIALIZING,
        INITIALIZING,
        INITIALIZING,
        MSG_INITIALIZING,
    )
    assert (event.id, event.condition) == ("pod-boot:3:0", "")
    again = runner.observe(ref, pod.InstancePending(at=t(30), instance_id="i-1"))
    assert again.transitions == ()  # Ready stays False: no flip
    assert [e.target for e in emitter.for_uid(ref.uid)] == [
        "Provisioning",
        INITIALIZING,
        INITIALIZING,
    ]


def test_a_new_pod_ip_alone_is_an_event_and_a_name_is_not() -> None:
    status = POD.initial(pod_ref())
    for obs in (
        pod.CreateRequested(at=t(0)),
        pod.ProvisionSucceeded(at=t(1), reserved=True, instance_id="i-1", endpoint="10.0.0.7"),
        pod.InstanceRunning(at=t(15), instance_id="i-1", endpoint="10.0.0.7"),
    ):
        status = POD.apply(status, obs)
    assert (status.state, status.pod_ip) == (RUNNING, "10.0.0.7")
    moved = POD.apply(status, pod.InstanceRunning(at=t(30), endpoint="10.0.0.9"))
    (flip,) = POD.flips(status, moved)
    assert (flip.source, flip.target, flip.reason, flip.type, flip.message) == (
        RUNNING,
        RUNNING,
        RUNNING,
        EventType.NORMAL,
        MSG_RUNNING,
    )
    assert moved.pod_ip == "10.0.0.9"
    renamed = POD.apply(moved, pod.InstanceRunning(at=t(45), endpoint="host.example.com"))
    assert (renamed.endpoint, renamed.pod_ip) == ("host.example.com", "10.0.0.9")
    assert POD.flips(moved, renamed) == ()  # the endpoint is no part of the signature


def test_message_instance_and_timestamps_alone_are_no_event() -> None:
    status = POD.initial(pod_ref())
    status = POD.apply(status, pod.CreateRequested(at=t(0)))
    retrying = POD.apply(status, pod.ProvisionErrored(at=t(1), error="503"))
    assert retrying.message != status.message
    assert POD.flips(status, retrying) == ()
    held = POD.apply(retrying, pod.ProvisionSucceeded(at=t(2), reserved=False, instance_id="s"))
    assert held.instance_id == "s"
    assert POD.flips(retrying, held) == ()
    deleting = POD.apply(held, pod.DeletionRequested(at=t(3)))
    assert deleting.deletion_timestamp == t(3)
    assert POD.flips(held, deleting) == ()


def test_deletepod_of_a_ready_pod_leaves_it_not_ready() -> None:
    status = POD.initial(pod_ref())
    for obs in (
        pod.CreateRequested(at=t(0)),
        pod.ProvisionSucceeded(at=t(1), reserved=True, instance_id="i-1"),
        pod.InstanceRunning(at=t(15), instance_id="i-1"),
    ):
        status = POD.apply(status, obs)
    assert status.ready is not None
    assert status.ready.status == "True"
    done = POD.apply(status, pod.TerminateSucceeded(at=t(40)))
    assert (done.state, done.phase) == (TERMINATED, "Succeeded")
    assert done.ready is not None
    assert (done.ready.status, done.ready.last_transition_time) == ("False", t(40))
    (flip,) = POD.flips(status, done)  # one event for the whole change
    assert (flip.target, flip.type) == (TERMINATED, EventType.NORMAL)


def test_other_machines_keep_the_state_only_signature() -> None:
    """The wider signature is the Pod's declaration alone: every other shipped machine still
    flips on its state (and memoises its flips)."""
    from lifecycle.machines import NODECLAIM

    status = NODECLAIM.initial(pod_ref())
    assert NODECLAIM.signature(status) == status.state
    assert NODECLAIM._memoise_flips
    assert not POD._memoise_flips
