"""One test per row of the Pod table (domain doc §2), plus the Pod's domain behaviours.

Every case names a status in the row's source state, the observation, and the *whole* status
expected afterwards (state = reason, phase, message, Ready, PodIP, instance id ...), plus the
flip the change produces. ``test_every_row_is_exercised`` fails if a row of ``pod.TABLE`` is
reached by no case, so a row added to the table without a test is caught.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import attrs
import pytest

from lifecycle import EventType, InvalidTransition, Observation
from lifecycle.machines import pod
from lifecycle.machines.pod import (
    CONFIG_ERROR,
    FAILED,
    INITIALIZING,
    MSG_ALLOCATING,
    MSG_AWAITING_READINESS,
    MSG_FAILED,
    MSG_GONE,
    MSG_INITIALIZING,
    MSG_RUNNING,
    MSG_TERMINATED,
    NEW,
    POD,
    PROVISION_FAILED,
    PROVISIONING,
    RUNNING,
    TERMINATED,
    ConfigInvalid,
    CreateRequested,
    DeletionRequested,
    InstanceAbsent,
    InstanceFailed,
    InstancePending,
    InstanceRunning,
    InstanceTerminated,
    InstanceUnknown,
    PodStatus,
    ProvisionErrored,
    ProvisionRejected,
    ProvisionSucceeded,
    TerminateFailed,
    TerminateSucceeded,
)
from lifecycle.tables import Condition, Flip
from tests.conftest import t

N, W = EventType.NORMAL, EventType.WARNING
AT = t(60)  # when every observation of a row case is made


def ready(status: str, since: datetime) -> Condition:
    return Condition("Ready", status, "", "", since)


F_AT = ready("False", AT)
T_AT = ready("True", AT)

# -- statuses, one (or more) per source state ----------------------------------------------
FRESH = PodStatus()
PROV = PodStatus(
    state=PROVISIONING, phase="Pending", message=MSG_ALLOCATING, pool="gpu", provider="modal"
)
RETRYING = attrs.evolve(PROV, message="retrying: connection reset by peer")
#: Unreserved Provision: tracked, held at Provisioning.
HELD = attrs.evolve(PROV, instance_id="sb-1", endpoint="https://sb-1.modal.run")
CFG = PodStatus(state=CONFIG_ERROR, phase="Pending", message='pool "gpu": not found')
#: Reserved Provision (markStatus): Initializing, Ready absent.
INIT = PodStatus(
    state=INITIALIZING,
    phase="Pending",
    message=MSG_INITIALIZING,
    instance_id="i-1",
    endpoint="10.0.0.7",
    pool="gpu",
    provider="aws",
)
#: Initializing after a first poll: Ready=False since t(15), StartTime stamped.
INIT_POLLED = attrs.evolve(INIT, ready=ready("False", t(15)), start_time=t(15))
RUN = attrs.evolve(
    INIT_POLLED,
    state=RUNNING,
    phase="Running",
    message=MSG_RUNNING,
    ready=ready("True", t(30)),
    pod_ip="10.0.0.7",
)
PFAIL = PodStatus(
    state=PROVISION_FAILED,
    phase="Failed",
    message="UnauthorizedOperation: not allowed",
    instance_id="",
    pool="gpu",
    provider="aws",
)
FAILED_ = attrs.evolve(
    RUN,
    state=FAILED,
    phase="Failed",
    message=MSG_FAILED,
    ready=ready("False", t(45)),
    exit_code=1,
)
GONE = attrs.evolve(
    RUN, state=TERMINATED, phase="Failed", message=MSG_GONE, ready=ready("False", t(45))
)
DELETED = attrs.evolve(
    RUN, state=TERMINATED, phase="Succeeded", message=MSG_TERMINATED, deletion_timestamp=t(40)
)

LIVE_STATUSES = {
    "new": FRESH,
    "provisioning": PROV,
    "held": HELD,
    "config-error": CFG,
    "initializing": INIT,
    "running": RUN,
}
TERMINAL_STATUSES = {
    "provision-failed": PFAIL,
    "failed": FAILED_,
    "gone": GONE,
    "deleted": DELETED,
}

#: One instance of every Pod observation (the terminal rows are checked against each).
SAMPLES: dict[type[Observation], Observation] = {
    CreateRequested: CreateRequested(at=AT, pool="gpu", provider="modal"),
    ConfigInvalid: ConfigInvalid(at=AT, error="env ref HF_TOKEN unresolved"),
    ProvisionSucceeded: ProvisionSucceeded(at=AT, reserved=True, instance_id="i-9"),
    ProvisionRejected: ProvisionRejected(at=AT, error="quota exceeded"),
    ProvisionErrored: ProvisionErrored(at=AT, error="timeout"),
    InstancePending: InstancePending(at=AT, instance_id="i-9"),
    InstanceRunning: InstanceRunning(at=AT, instance_id="i-9", endpoint="10.9.9.9"),
    InstanceFailed: InstanceFailed(at=AT, exit_code=1),
    InstanceTerminated: InstanceTerminated(at=AT, exit_code=0),
    InstanceAbsent: InstanceAbsent(at=AT),
    InstanceUnknown: InstanceUnknown(at=AT, error="ListSandboxes: deadline exceeded"),
    DeletionRequested: DeletionRequested(at=AT),
    TerminateSucceeded: TerminateSucceeded(at=AT),
    TerminateFailed: TerminateFailed(at=AT, error="throttled"),
}


@dataclass(frozen=True)
class Case:
    """``after is None``: an ignore row, the very same status comes back.
    ``flip``: the type of the single exclusive-state flip expected, or ``None`` for none."""

    id: str
    before: PodStatus
    obs: Observation
    after: PodStatus | None
    flip: EventType | None = None


CASES: list[Case] = []


def case(
    id: str,
    before: PodStatus,
    obs: Observation,
    after: PodStatus | None,
    flip: EventType | None = None,
) -> None:
    CASES.append(Case(id, before, obs, after, flip))


def unchanged(id: str, before: PodStatus, obs: Observation) -> None:
    case(id, before, obs, None)


# -- CreatePod --------------------------------------------------------------------------------
create = CreateRequested(at=AT, pool="gpu", provider="modal")
case(
    "create/new",
    FRESH,
    create,
    PodStatus(
        state=PROVISIONING, phase="Pending", message=MSG_ALLOCATING, pool="gpu", provider="modal"
    ),
    N,
)
case(
    "create/config-error-recovers",
    CFG,
    create,
    attrs.evolve(CFG, state=PROVISIONING, message=MSG_ALLOCATING, pool="gpu", provider="modal"),
    N,
)
case("create/retry-after-error", RETRYING, create, PROV)
case("create/held-keeps-instance", HELD, create, HELD)
unchanged("create/initializing", INIT, create)
unchanged("create/running", RUN, create)

bad_config = ConfigInvalid(at=AT, error='pool "gpu": not found')
unchanged("config-invalid/held", HELD, bad_config)
case(
    "config-invalid/new",
    FRESH,
    bad_config,
    PodStatus(state=CONFIG_ERROR, phase="Pending", message='pool "gpu": not found'),
    W,
)
case(
    "config-invalid/provisioning",
    PROV,
    bad_config,
    attrs.evolve(PROV, state=CONFIG_ERROR, message='pool "gpu": not found'),
    W,
)
case(
    "config-invalid/config-error-message-only",
    CFG,
    ConfigInvalid(at=AT, error="env ref HF_TOKEN unresolved"),
    attrs.evolve(CFG, message="env ref HF_TOKEN unresolved"),
)
unchanged("config-invalid/initializing", INIT, bad_config)
unchanged("config-invalid/running", RUN, bad_config)

# -- Provision results ------------------------------------------------------------------------
case(
    "provision/reserved",
    PROV,
    ProvisionSucceeded(at=AT, reserved=True, instance_id="i-1", endpoint="10.0.0.7"),
    attrs.evolve(
        PROV, state=INITIALIZING, message=MSG_INITIALIZING, instance_id="i-1", endpoint="10.0.0.7"
    ),
    N,
)
case(
    "provision/unreserved-held",
    RETRYING,
    ProvisionSucceeded(at=AT, reserved=False, instance_id="sb-1", endpoint="https://sb-1"),
    attrs.evolve(PROV, instance_id="sb-1", endpoint="https://sb-1"),
)
unchanged("provision/late-initializing", INIT, SAMPLES[ProvisionSucceeded])
unchanged("provision/late-running", RUN, SAMPLES[ProvisionSucceeded])
case(
    "rejected",
    PROV,
    ProvisionRejected(at=AT, error="InsufficientInstanceCapacity: no capacity in us-east-1a"),
    attrs.evolve(
        PROV,
        state=PROVISION_FAILED,
        phase="Failed",
        message="InsufficientInstanceCapacity: no capacity in us-east-1a",
        instance_id="",
    ),
    W,
)
case(
    "rejected/held-keeps-instance",
    HELD,
    ProvisionRejected(at=AT, error="quota exceeded"),
    attrs.evolve(HELD, state=PROVISION_FAILED, phase="Failed", message="quota exceeded"),
    W,
)
unchanged("rejected/late-initializing", INIT, SAMPLES[ProvisionRejected])
unchanged("rejected/late-running", RUN, SAMPLES[ProvisionRejected])
case(
    "errored",
    PROV,
    ProvisionErrored(at=AT, error="connection reset by peer"),
    attrs.evolve(PROV, message="retrying: connection reset by peer"),
)
unchanged("errored/late-initializing", INIT, SAMPLES[ProvisionErrored])
unchanged("errored/late-running", RUN, SAMPLES[ProvisionErrored])


# -- polls ------------------------------------------------------------------------------------
def adopted(
    before: PodStatus, state: str, phase: str, message: str, cond: Condition, **changes: Any
) -> PodStatus:
    """An untracked pod (new, provisioning, config error) whose instance a poll found."""
    return attrs.evolve(
        before,
        state=state,
        phase=phase,
        message=message,
        ready=cond,
        instance_id="i-1",
        endpoint="10.0.0.7",
        start_time=AT,
        **changes,
    )


UNTRACKED = {"new": FRESH, "provisioning": PROV, "config-error": CFG}

pending = InstancePending(at=AT, instance_id="i-1", endpoint="10.0.0.7")
for name, before in UNTRACKED.items():
    case(
        f"pending/{name}-adopts",
        before,
        pending,
        adopted(before, INITIALIZING, "Pending", MSG_INITIALIZING, F_AT),
        N,
    )
case(
    "pending/held",
    HELD,
    InstancePending(at=AT, instance_id="sb-1"),
    attrs.evolve(HELD, state=INITIALIZING, message=MSG_INITIALIZING, ready=F_AT, start_time=AT),
    N,
)
case(
    "pending/initializing-first-tick-adds-ready-false",
    INIT,
    pending,
    attrs.evolve(INIT, ready=F_AT, start_time=AT),
    N,  # Ready absent -> False changes the flip signature: an event, as upstream's
)
case("pending/initializing-repeat", INIT_POLLED, pending, INIT_POLLED)
case(
    "pending/running-demoted",
    RUN,
    pending,
    attrs.evolve(RUN, state=INITIALIZING, phase="Pending", message=MSG_INITIALIZING, ready=F_AT),
    N,
)

running = InstanceRunning(at=AT, instance_id="i-1", endpoint="10.0.0.7")
for name, before in UNTRACKED.items():
    case(
        f"running/{name}-adopts",
        before,
        running,
        adopted(before, RUNNING, "Running", MSG_RUNNING, T_AT, pod_ip="10.0.0.7"),
        N,
    )
case(
    "running/held-no-ip-endpoint",
    HELD,
    InstanceRunning(at=AT, instance_id="sb-1"),
    attrs.evolve(
        HELD, state=RUNNING, phase="Running", message=MSG_RUNNING, ready=T_AT, start_time=AT
    ),
    N,
)
case(
    "running/initializing",
    INIT,
    running,
    attrs.evolve(
        INIT,
        state=RUNNING,
        phase="Running",
        message=MSG_RUNNING,
        ready=T_AT,
        pod_ip="10.0.0.7",
        start_time=AT,
    ),
    N,
)
case(
    "running/initializing-polled",
    INIT_POLLED,
    running,
    attrs.evolve(
        INIT_POLLED,
        state=RUNNING,
        phase="Running",
        message=MSG_RUNNING,
        ready=T_AT,
        pod_ip="10.0.0.7",
    ),
    N,
)
case("running/running-repeat", RUN, running, RUN)
case(
    "running/new-pod-ip",
    RUN,
    InstanceRunning(at=AT, instance_id="i-1", endpoint="10.0.0.8"),
    attrs.evolve(RUN, endpoint="10.0.0.8", pod_ip="10.0.0.8"),
    N,  # the pod IP alone changes the flip signature
)
case(
    "running/dns-endpoint-keeps-pod-ip",
    RUN,
    InstanceRunning(at=AT, instance_id="i-1", endpoint="ec2-1-2-3-4.compute-1.amazonaws.com"),
    attrs.evolve(RUN, endpoint="ec2-1-2-3-4.compute-1.amazonaws.com"),
)

probing = InstanceRunning(at=AT, instance_id="i-1", endpoint="10.0.0.7", readiness_confirmed=False)
for name, before in UNTRACKED.items():
    case(
        f"probing/{name}-adopts",
        before,
        probing,
        adopted(before, INITIALIZING, "Pending", MSG_AWAITING_READINESS, F_AT),
        N,
    )
case(
    "probing/held",
    HELD,
    InstanceRunning(at=AT, instance_id="sb-1", readiness_confirmed=False),
    attrs.evolve(
        HELD, state=INITIALIZING, message=MSG_AWAITING_READINESS, ready=F_AT, start_time=AT
    ),
    N,
)
case(
    "probing/initializing",
    INIT,
    probing,
    attrs.evolve(INIT, message=MSG_AWAITING_READINESS, ready=F_AT, start_time=AT),
    N,  # Ready absent -> False
)
case(
    "probing/initializing-polled-message-only",
    INIT_POLLED,
    probing,
    attrs.evolve(INIT_POLLED, message=MSG_AWAITING_READINESS),
)
case(
    "probing/running-demoted",
    RUN,
    probing,
    attrs.evolve(
        RUN, state=INITIALIZING, phase="Pending", message=MSG_AWAITING_READINESS, ready=F_AT
    ),
    N,
)

for obs_name, obs, state, message, code in (
    ("failed", InstanceFailed(at=AT, instance_id="i-1", exit_code=139), FAILED, MSG_FAILED, 139),
    (
        "terminated",
        InstanceTerminated(at=AT, instance_id="i-1", exit_code=137),
        TERMINATED,
        MSG_TERMINATED,
        137,
    ),
    (
        "preempted",
        InstanceTerminated(at=AT, instance_id="i-1", exit_code=None, preempted=True),
        TERMINATED,
        pod.MSG_PREEMPTED,
        None,
    ),
):
    for name, before in UNTRACKED.items():
        case(
            f"{obs_name}/{name}",
            before,
            obs,
            attrs.evolve(
                before,
                state=state,
                phase="Failed",
                message=message,
                ready=F_AT,
                instance_id="i-1",
                start_time=AT,
                exit_code=code,
            ),
            W,
        )
    case(
        f"{obs_name}/held",
        HELD,
        attrs.evolve(obs, instance_id=""),
        attrs.evolve(
            HELD,
            state=state,
            phase="Failed",
            message=message,
            ready=F_AT,
            start_time=AT,
            exit_code=code,
        ),
        W,
    )
    case(
        f"{obs_name}/initializing-polled",
        INIT_POLLED,
        obs,
        attrs.evolve(INIT_POLLED, state=state, phase="Failed", message=message, exit_code=code),
        W,
    )
    case(
        f"{obs_name}/running",
        RUN,
        obs,
        attrs.evolve(RUN, state=state, phase="Failed", message=message, ready=F_AT, exit_code=code),
        W,
    )

absent = InstanceAbsent(at=AT)
case(
    "absent/held",
    HELD,
    absent,
    attrs.evolve(
        HELD, state=TERMINATED, phase="Failed", message=MSG_GONE, ready=F_AT, start_time=AT
    ),
    W,
)
case(
    "absent/initializing",
    INIT,
    absent,
    attrs.evolve(
        INIT, state=TERMINATED, phase="Failed", message=MSG_GONE, ready=F_AT, start_time=AT
    ),
    W,
)
case(
    "absent/running",
    RUN,
    absent,
    attrs.evolve(RUN, state=TERMINATED, phase="Failed", message=MSG_GONE, ready=F_AT),
    W,
)
for name, before in UNTRACKED.items():
    unchanged(f"absent/untracked-{name}", before, absent)
unchanged("absent/untracked-retrying", RETRYING, absent)

for name, before in {**LIVE_STATUSES, **TERMINAL_STATUSES}.items():
    unchanged(f"unknown/{name}", before, SAMPLES[InstanceUnknown])
    unchanged(f"terminate-failed/{name}", before, SAMPLES[TerminateFailed])

# -- DeletePod --------------------------------------------------------------------------------
for name, before in LIVE_STATUSES.items():
    case(
        f"deletion-requested/{name}",
        before,
        DeletionRequested(at=AT),
        attrs.evolve(before, deletion_timestamp=AT),
    )
    case(
        f"terminate-succeeded/{name}",
        before,
        TerminateSucceeded(at=AT),
        attrs.evolve(
            before,
            state=TERMINATED,
            phase="Succeeded",
            message=MSG_TERMINATED,
            # a present Ready turns False (never Ready once Terminated); absent stays absent
            ready=None if before.ready is None else F_AT,
            deletion_timestamp=AT,
        ),
        N,
    )

# -- terminal: the first terminal status wins -------------------------------------------------
for name, before in TERMINAL_STATUSES.items():
    for obs_type, sample in SAMPLES.items():
        unchanged(f"terminal/{name}/{obs_type.__name__}", before, sample)


# -- the row tests ----------------------------------------------------------------------------
@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_row(c: Case) -> None:
    after = POD.apply(c.before, c.obs)
    flips = POD.flips(c.before, after)
    if c.after is None:
        assert POD.select(c.before, c.obs).ignore
        assert after is c.before
        assert flips == ()
        return
    assert after == c.after
    # spelled out, so a failure names the field that is wrong
    assert (after.state, after.reason, after.phase, after.message) == (
        c.after.state,
        c.after.state,
        c.after.phase,
        c.after.message,
    )
    assert after.ready == c.after.ready
    assert (after.instance_id, after.pod_ip) == (c.after.instance_id, c.after.pod_ip)
    if c.flip is None:
        assert flips == ()
    else:
        assert [(f.source, f.target, f.reason, f.type, f.message, f.condition) for f in flips] == [
            (c.before.state, after.state, after.state, c.flip, after.message, "")
        ]


def test_every_row_is_exercised() -> None:
    """Fails when a row of the Pod table is reached by no case above."""
    rows = pod.TABLE.rows
    hit = {id(POD.select(c.before, c.obs)) for c in CASES}
    missing = [
        f"{r.sources} x {r.observation.__name__} (guard={r.guard_name}, ignore={r.ignore})"
        for r in rows
        if id(r) not in hit
    ]
    assert not missing, f"Pod rows with no test: {missing}"
    assert len(rows) == len({id(r) for r in rows})


def test_every_state_and_observation_is_exercised() -> None:
    assert {c.before.state for c in CASES} == set(pod.TABLE.states)
    assert {type(c.obs) for c in CASES} == set(pod.OBSERVATIONS)


def test_pairs_without_a_row_are_refused() -> None:
    """The table names every pair except Provision results before a Provision started."""
    refused: dict[tuple[str, type[Observation]], InvalidTransition] = {}
    for state in pod.TABLE.states:
        for obs_type, sample in SAMPLES.items():
            try:
                POD.apply(PodStatus(state=state), sample)
            except InvalidTransition as e:
                refused[(state, obs_type)] = e
    for (state, obs_type), error in refused.items():
        assert (error.machine, error.state, error.observation) == ("pod", state, obs_type.__name__)
    assert set(refused) == {
        (s, o)
        for s in (NEW, CONFIG_ERROR)
        for o in (ProvisionSucceeded, ProvisionRejected, ProvisionErrored)
    }


# -- domain behaviours ------------------------------------------------------------------------
def fold(*observations: Observation, start: PodStatus = FRESH) -> PodStatus:
    status = start
    for obs in observations:
        status = POD.apply(status, obs)
    return status


def flips_of(*observations: Observation) -> list[Flip]:
    status: PodStatus = FRESH
    out: list[Flip] = []
    for obs in observations:
        after = POD.apply(status, obs)
        out.extend(POD.flips(status, after))
        status = after
    return out


CREATE = CreateRequested(at=t(0), pool="gpu", provider="aws")


def test_reserved_provision_initializes_with_ready_absent_until_first_poll() -> None:
    s = fold(CREATE, ProvisionSucceeded(at=t(2), reserved=True, instance_id="i-1"))
    assert (s.state, s.phase, s.message) == (INITIALIZING, "Pending", MSG_INITIALIZING)
    assert s.ready is None
    assert s.tracked
    assert s.instance_id == "i-1"
    s = POD.apply(s, InstancePending(at=t(15), instance_id="i-1"))
    assert s.ready == ready("False", t(15))
    assert s.start_time == t(15)


def test_unreserved_provision_is_held_at_provisioning_but_tracked() -> None:
    s = fold(CREATE, ProvisionSucceeded(at=t(2), reserved=False, instance_id="sb-1"))
    assert (s.state, s.phase, s.message) == (PROVISIONING, "Pending", MSG_ALLOCATING)
    assert s.tracked
    assert s.instance_id == "sb-1"
    assert s.ready is None
    # tracked: its instance vanishing terminates it ...
    gone = POD.apply(s, InstanceAbsent(at=t(15)))
    assert (gone.state, gone.phase, gone.message) == (TERMINATED, "Failed", MSG_GONE)
    # ... and being seen running later makes it Running and Ready
    up = POD.apply(s, InstanceRunning(at=t(15), instance_id="sb-1"))
    assert (up.state, up.ready) == (RUNNING, ready("True", t(15)))
    assert [
        f.target
        for f in flips_of(CREATE, ProvisionSucceeded(at=t(2), reserved=False, instance_id="sb-1"))
    ] == [PROVISIONING]


def test_rejection_fails_the_pod_with_the_raw_error() -> None:
    s = fold(CREATE, ProvisionRejected(at=t(2), error="AuthFailure: bad credentials"))
    assert (s.state, s.phase, s.message) == (
        PROVISION_FAILED,
        "Failed",
        "AuthFailure: bad credentials",
    )
    assert s.instance_id == ""  # tracked with id "": teardown finds nothing to stop
    assert s.ready is None
    assert POD.is_terminal(s)
    last = flips_of(CREATE, ProvisionRejected(at=t(2), error="AuthFailure: bad credentials"))[-1]
    assert (last.source, last.target, last.reason, last.type) == (
        PROVISIONING,
        PROVISION_FAILED,
        PROVISION_FAILED,
        W,
    )


def test_unattributable_error_retries_silently_and_untracked() -> None:
    before = fold(CREATE)
    after = POD.apply(before, ProvisionErrored(at=t(2), error="503 Service Unavailable"))
    assert (after.state, after.phase) == (PROVISIONING, "Pending")
    assert after.message == "retrying: 503 Service Unavailable"
    assert not after.tracked
    assert POD.flips(before, after) == ()
    again = POD.apply(after, ProvisionErrored(at=t(4), error="read timeout"))
    assert again.message == "retrying: read timeout"
    assert POD.flips(after, again) == ()
    # the kubelet retries CreatePod; the pod goes on to provision normally
    s = fold(
        CreateRequested(at=t(6)),
        ProvisionSucceeded(at=t(7), reserved=True, instance_id="i"),
        start=again,
    )
    assert s.state == INITIALIZING


def test_config_error_is_a_warning_and_not_terminal() -> None:
    s = fold(ConfigInvalid(at=t(0), error="secret ml/hf-token: not found"))
    assert (s.state, s.phase, s.message) == (
        CONFIG_ERROR,
        "Pending",
        "secret ml/hf-token: not found",
    )
    assert not s.tracked
    assert not POD.is_terminal(s)
    (flip,) = POD.flips(FRESH, s)
    assert (flip.source, flip.target, flip.reason, flip.type) == ("", CONFIG_ERROR, CONFIG_ERROR, W)
    fixed = POD.apply(s, CreateRequested(at=t(5), pool="gpu", provider="aws"))
    assert fixed.state == PROVISIONING
    (flip,) = POD.flips(s, fixed)
    assert (flip.target, flip.type) == (PROVISIONING, N)


@pytest.mark.parametrize(
    "later",
    [
        InstanceTerminated(at=t(20), exit_code=0),
        InstanceFailed(at=t(20), exit_code=1),
        InstanceAbsent(at=t(20)),
        InstanceRunning(at=t(20), instance_id="i-1"),
        InstancePending(at=t(20)),
        TerminateSucceeded(at=t(20)),
        DeletionRequested(at=t(20)),
        CreateRequested(at=t(20)),
    ],
    ids=lambda o: type(o).__name__,
)
def test_first_terminal_status_wins(later: Observation) -> None:
    failed = fold(CREATE, ProvisionRejected(at=t(2), error="quota exceeded"))
    assert POD.apply(failed, later) is failed
    gone = fold(
        CREATE,
        ProvisionSucceeded(at=t(2), reserved=True, instance_id="i-1"),
        InstanceAbsent(at=t(15)),
    )
    assert POD.apply(gone, later) is gone


def test_failed_then_deleted_stays_failed() -> None:
    s = fold(
        CREATE,
        ProvisionSucceeded(at=t(2), reserved=True, instance_id="i-1"),
        InstanceFailed(at=t(15), exit_code=2),
        TerminateSucceeded(at=t(30)),
    )
    assert (s.state, s.phase, s.message, s.exit_code) == (FAILED, "Failed", MSG_FAILED, 2)
    assert s.deletion_timestamp is None


@pytest.mark.parametrize("start", [FRESH, PROV, CFG], ids=["new", "provisioning", "config-error"])
def test_readoption_after_restart(start: PodStatus) -> None:
    """A controller that lost its tracking map finds the instance in a poll and adopts it."""
    assert not start.tracked
    s = POD.apply(start, InstanceRunning(at=t(100), instance_id="i-7", endpoint="10.1.2.3"))
    assert s.tracked
    assert (s.state, s.phase, s.instance_id, s.pod_ip) == (RUNNING, "Running", "i-7", "10.1.2.3")
    assert s.ready == ready("True", t(100))
    # tracked now: the instance vanishing is noticed
    assert POD.apply(s, InstanceAbsent(at=t(115))).state == TERMINATED


def test_ready_is_never_true_before_readiness_is_confirmed() -> None:
    s = fold(CREATE, ProvisionSucceeded(at=t(2), reserved=True, instance_id="i-1"))
    for k in range(1, 5):
        s = POD.apply(
            s, InstanceRunning(at=t(15 * k), instance_id="i-1", readiness_confirmed=False)
        )
        assert (s.state, s.phase) == (INITIALIZING, "Pending")
        assert s.ready == ready("False", t(15))  # set once, unmoved by the repeats
        assert s.pod_ip == ""
    s = POD.apply(s, InstanceRunning(at=t(75), instance_id="i-1", endpoint="10.0.0.7"))
    assert (s.state, s.ready, s.pod_ip) == (RUNNING, ready("True", t(75)), "10.0.0.7")


def test_ready_transition_time_moves_only_when_ready_flips() -> None:
    s = fold(CREATE, ProvisionSucceeded(at=t(2), reserved=True, instance_id="i-1"))
    s = POD.apply(s, InstanceRunning(at=t(15)))
    s = POD.apply(s, InstanceRunning(at=t(30)))
    assert s.ready == ready("True", t(15))
    s = POD.apply(s, InstancePending(at=t(45)))
    assert s.ready == ready("False", t(45))
    s = POD.apply(s, InstanceRunning(at=t(60), readiness_confirmed=False))
    assert s.ready == ready("False", t(45))
    s = POD.apply(s, InstanceRunning(at=t(75)))
    assert s.ready == ready("True", t(75))


@pytest.mark.parametrize(
    ("endpoint", "pod_ip"),
    [
        ("10.0.0.7", "10.0.0.7"),
        ("2001:db8::7", "2001:db8::7"),
        ("ec2-3-4-5-6.compute-1.amazonaws.com", ""),
        ("https://abc.modal.run", ""),
        ("", ""),
    ],
)
def test_pod_ip_only_from_an_ip_endpoint_when_running(endpoint: str, pod_ip: str) -> None:
    s = fold(CREATE, ProvisionSucceeded(at=t(2), reserved=True, instance_id="i-1"))
    booting = POD.apply(s, InstancePending(at=t(15), endpoint=endpoint))
    assert booting.pod_ip == ""
    up = POD.apply(booting, InstanceRunning(at=t(30), endpoint=endpoint))
    assert up.pod_ip == pod_ip


def test_instance_unknown_never_demotes_running_nor_terminates() -> None:
    s = fold(
        CREATE,
        ProvisionSucceeded(at=t(2), reserved=True, instance_id="i-1"),
        InstanceRunning(at=t(15), instance_id="i-1", endpoint="10.0.0.7"),
    )
    for k, error in enumerate(
        ["ListSandboxes: unavailable", "GetTags: denied", "poll error", "region us-west-2 failed"]
    ):
        after = POD.apply(s, InstanceUnknown(at=t(30 + k), error=error))
        assert after is s
        assert POD.flips(s, after) == ()
    assert (s.state, s.ready) == (RUNNING, ready("True", t(15)))


def test_instance_absent_of_an_untracked_pod_changes_nothing() -> None:
    for s in (FRESH, fold(CREATE), fold(CREATE, ProvisionErrored(at=t(1), error="x")), CFG):
        assert not s.tracked
        assert POD.apply(s, InstanceAbsent(at=t(15))) is s


def test_repeated_observations_emit_nothing() -> None:
    obs = [
        CREATE,
        ProvisionSucceeded(at=t(2), reserved=True, instance_id="i-1"),
        InstancePending(at=t(15)),
        InstancePending(at=t(30)),
        InstanceRunning(at=t(45), endpoint="10.0.0.7"),
        InstanceRunning(at=t(60), endpoint="10.0.0.7"),
        InstanceRunning(at=t(75), endpoint="10.0.0.7"),
        InstanceAbsent(at=t(90)),
        InstanceAbsent(at=t(105)),
    ]
    assert [(f.source, f.target, f.type) for f in flips_of(*obs)] == [
        ("", PROVISIONING, N),
        (PROVISIONING, INITIALIZING, N),
        (INITIALIZING, INITIALIZING, N),  # the first poll adds Ready=False: a flip
        (INITIALIZING, RUNNING, N),
        (RUNNING, TERMINATED, W),
    ]


def test_start_time_and_deletion_timestamp_are_stamped_once() -> None:
    s = fold(
        CREATE,
        ProvisionSucceeded(at=t(2), reserved=True, instance_id="i-1"),
        InstancePending(at=t(15)),
        InstanceRunning(at=t(30)),
        DeletionRequested(at=t(40)),
        DeletionRequested(at=t(50)),
    )
    assert s.start_time == t(15)
    assert s.deletion_timestamp == t(40)
    done = POD.apply(s, TerminateSucceeded(at=t(55)))
    assert (done.state, done.phase, done.message) == (TERMINATED, "Succeeded", MSG_TERMINATED)
    assert done.deletion_timestamp == t(40)
    assert done.ready == ready("False", t(55))  # a Terminated pod is never Ready
    (flip,) = POD.flips(s, done)
    assert (flip.source, flip.target, flip.reason, flip.type) == (
        RUNNING,
        TERMINATED,
        TERMINATED,
        N,
    )


def test_a_repeated_create_never_forgets_a_known_instance() -> None:
    """The instance-id annotation is never cleared: a held pod keeps its instance."""
    held = fold(CREATE, ProvisionSucceeded(at=t(2), reserved=False, instance_id="sb-1"))
    again = POD.apply(held, CreateRequested(at=t(5), pool="gpu", provider="aws"))
    assert again.instance_id == "sb-1"
    assert POD.apply(again, InstanceAbsent(at=t(15))).state == TERMINATED


def test_reason_and_message_strings_are_upstreams() -> None:
    assert (NEW, PROVISIONING, CONFIG_ERROR, INITIALIZING, RUNNING) == (
        "",
        "Provisioning",
        "ConfigError",
        "Initializing",
        "Running",
    )
    assert (PROVISION_FAILED, FAILED, TERMINATED) == ("ProvisionFailed", "Failed", "Terminated")
    assert (MSG_ALLOCATING, MSG_INITIALIZING, MSG_RUNNING) == (
        "allocating external instance",
        "external instance is initializing",
        "external instance is running",
    )
    assert (MSG_FAILED, MSG_GONE, MSG_TERMINATED) == (
        "external instance entered a failed state",
        "external instance is gone",
        "external instance terminated",
    )
