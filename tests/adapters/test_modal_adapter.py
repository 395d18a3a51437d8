"""The Modal adapter on the SDK fake: provision, every observation row of the domain table
(``docs/upstream/pod-nodeclaim.md``, Modal), each upstream-bug correction as its own test,
and terminate."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lifecycle import ObjectRef
from lifecycle.adapters.modal import (
    CLAIM_TAG_KEY,
    PROBE_TAG_KEY,
    AsyncModalAdapter,
    ModalAdapter,
    SandboxSpec,
    sandbox_name,
)
from lifecycle.machines.nodeclaim import claim_name
from lifecycle.machines.pod import (
    InstanceAbsent,
    InstanceFailed,
    InstanceRunning,
    InstanceTerminated,
    InstanceUnknown,
    ProvisionErrored,
    ProvisionRejected,
    ProvisionSucceeded,
    TerminateFailed,
    TerminateSucceeded,
)
from lifecycle.testing.fakes import FakeModal, FakeProbe

from .conftest import pod, sandbox, t, ticking_clock, tracked

#: the fake's ``modal.exception``
exception = FakeModal.exception

PROBE = {"tcpSocket": {"port": 8080}}
A = pod("a")
B = pod("b")


def claim(ref: ObjectRef) -> str:
    return claim_name(ref.namespace, ref.name)


def seed(fake: FakeModal, ref: ObjectRef, **kw: Any) -> str:
    return fake.add(claim(ref), **kw)


# -- provision -------------------------------------------------------------------------------
def test_fresh_sandbox_is_unreserved_and_tagged_with_its_claim(
    fake_modal: FakeModal, modal_adapter: ModalAdapter
) -> None:
    spec = SandboxSpec(
        image="python:3.12",
        command=("sleep", "infinity"),
        env={"K": "v"},
        gpu="H100",
        cpu=4.0,
        memory_mib=8192,
    )
    obs = modal_adapter.provision(A, spec)
    assert isinstance(obs, ProvisionSucceeded)
    assert (obs.reserved, obs.endpoint) == (False, "")
    state = fake_modal.state(obs.instance_id)
    assert state.tags == {CLAIM_TAG_KEY: claim(A)}  # no probe: no probe tag
    assert state.probe is None
    assert state.command == ("sleep", "infinity")
    assert state.options["image"].tag == "python:3.12"
    assert state.options["timeout"] == 24 * 3600  # no activeDeadlineSeconds: 24 h
    assert (state.options["gpu"], state.options["cpu"], state.options["memory"]) == (
        "H100",
        4.0,
        8192,
    )
    assert state.options["env"] == {"K": "v"}


@pytest.mark.parametrize(
    ("probe", "expected"),
    [
        (
            {"exec": {"command": ["cat", "/ok"]}, "periodSeconds": 2},
            FakeProbe.with_exec("cat", "/ok", interval_ms=2000),
        ),
        ({"tcpSocket": {"port": 8080}}, FakeProbe.with_tcp(8080)),
        ({"httpGet": {"port": 8000, "path": "/healthz"}}, FakeProbe.with_tcp(8000)),
        ({"httpGet": {"port": "http"}}, None),
        ({"initialDelaySeconds": 3}, None),
    ],
)
def test_probe_and_probe_tag_are_stamped_only_for_a_usable_probe(
    fake_modal: FakeModal,
    modal_adapter: ModalAdapter,
    probe: dict[str, Any],
    expected: FakeProbe | None,
) -> None:
    obs = modal_adapter.provision(A, SandboxSpec(image="x", readiness_probe=probe))
    state = fake_modal.state(obs.instance_id)  # type: ignore[union-attr]
    assert state.probe == expected
    assert (PROBE_TAG_KEY in state.tags) == (expected is not None)
    if expected is not None:
        assert state.tags[PROBE_TAG_KEY] == "true"


def test_active_deadline_bounds_the_sandbox_lifetime(
    fake_modal: FakeModal, modal_adapter: ModalAdapter
) -> None:
    obs = modal_adapter.provision(A, SandboxSpec(image="x", active_deadline_seconds=900))
    assert fake_modal.state(obs.instance_id).options["timeout"] == 900  # type: ignore[union-attr]


def test_provision_adopts_a_running_sandbox_as_reserved(
    fake_modal: FakeModal, modal_adapter: ModalAdapter
) -> None:
    sid = seed(fake_modal, A)
    obs = modal_adapter.provision(A, SandboxSpec(image="x"))
    assert obs == ProvisionSucceeded(at=obs.at, reserved=True, instance_id=sid)
    assert fake_modal.count("Sandbox.create") == 0


def test_provision_adopts_an_unconfirmed_probe_sandbox_unreserved(
    fake_modal: FakeModal, modal_adapter: ModalAdapter
) -> None:
    sid = seed(fake_modal, A, probe=True)
    obs = modal_adapter.provision(A, SandboxSpec(image="x"))
    assert obs == ProvisionSucceeded(at=obs.at, reserved=False, instance_id=sid)
    assert fake_modal.count("Sandbox.create") == 0


def test_provision_is_idempotent(fake_modal: FakeModal, modal_adapter: ModalAdapter) -> None:
    first = modal_adapter.provision(A, SandboxSpec(image="x"))
    again = modal_adapter.provision(A, SandboxSpec(image="x"))
    assert again.instance_id == first.instance_id  # type: ignore[union-attr]
    assert fake_modal.count("Sandbox.create") == 1


def test_a_create_repeated_while_the_list_lags_adopts_the_first_sandbox() -> None:
    """The list lags a create, so a repeated provision (the first answer was lost, or the
    host crashed before recording it) does not see the first sandbox. The sandbox's name is
    the claim's, which Modal keeps unique: the second create fails with AlreadyExistsError and
    the adapter adopts the first sandbox by name: one sandbox, not two."""
    fake = FakeModal(list_lags=True)
    with ModalAdapter(sdk=fake, clock=ticking_clock(), call_timeout=0.5) as adapter:
        first = adapter.provision(A, SandboxSpec(image="x"))
        again = adapter.provision(A, SandboxSpec(image="x"))
    assert isinstance(first, ProvisionSucceeded)
    assert again == ProvisionSucceeded(at=again.at, reserved=True, instance_id=first.instance_id)
    assert [s.id for s in fake.sandboxes.values()] == [first.instance_id]
    assert fake.state(first.instance_id).name == sandbox_name(claim(A)) == "ml-a"
    assert fake.count("Sandbox.from_name") == 1


def test_a_name_taken_but_not_found_is_unattributable() -> None:
    fake = FakeModal(list_lags=True)
    fake.fail("Sandbox.from_name", exception.NotFoundError("finished meanwhile"))
    with ModalAdapter(sdk=fake, clock=ticking_clock(), call_timeout=0.5) as adapter:
        adapter.provision(A, SandboxSpec(image="x"))
        obs = adapter.provision(A, SandboxSpec(image="x"))
    assert isinstance(obs, ProvisionErrored)
    assert "exists but was not found by name" in obs.error
    assert len(fake.sandboxes) == 1


@pytest.mark.parametrize(
    ("claim_", "expected"),
    [
        ("ml-trainer-0", "ml-trainer-0"),
        ("ns.with.dots-x", "ns.with.dots-x"),
        ("a" * 64, "a" * 64),
        ("ap-" + "a" * 22, None),  # shaped like an app id
        ("a" * 65, None),
        ("ml-" + "b" * 250, None),
    ],
)
def test_the_sandbox_name_is_the_claim_when_modal_accepts_it(
    claim_: str, expected: str | None
) -> None:
    name = sandbox_name(claim_)
    assert name == sandbox_name(claim_)  # deterministic
    assert len(name) <= 64
    assert all(c.isalnum() or c in "-_." for c in name)
    if expected is not None:
        assert name == expected
    else:
        assert name != claim_
        assert name.startswith(claim_[:20])
        assert sandbox_name(claim_ + "x") != name


@pytest.mark.parametrize("operation", ["Sandbox.list", "App.lookup"])
def test_provision_that_cannot_look_for_the_claim_errs_and_creates_nothing(
    fake_modal: FakeModal, modal_adapter: ModalAdapter, operation: str
) -> None:
    fake_modal.fail(operation, exception.ServiceError("unavailable"))
    obs = modal_adapter.provision(A, SandboxSpec(image="x"))
    assert isinstance(obs, ProvisionErrored)
    assert "unavailable" in obs.error
    assert fake_modal.count("Sandbox.create") == 0


@pytest.mark.parametrize("probe", [False, True])
def test_provision_that_cannot_read_the_adopted_sandbox_tags_errs(
    fake_modal: FakeModal, modal_adapter: ModalAdapter, probe: bool
) -> None:
    # Domain §4: tag errors fail Provision. Never a ProvisionSucceeded built on unread tags
    # (upstream bug: "no probe tag, so ready"); unattributable, so the next attempt re-adopts.
    sid = seed(fake_modal, A, probe=probe)
    fake_modal.fail("Sandbox.get_tags", exception.ServiceError("tags down"), sandbox_id=sid)
    obs = modal_adapter.provision(A, SandboxSpec(image="x"))
    assert isinstance(obs, ProvisionErrored)
    assert "tags down" in obs.error
    assert sid in obs.error
    assert fake_modal.count("Sandbox.create") == 0  # never risk a duplicate
    assert fake_modal.count("Sandbox.poll", sid) == 0  # nothing observed on unread tags
    again = modal_adapter.provision(A, SandboxSpec(image="x"))  # the retry re-runs the lookup
    assert again == ProvisionSucceeded(at=again.at, reserved=not probe, instance_id=sid)
    assert fake_modal.count("Sandbox.create") == 0


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (exception.AuthError("token rejected"), ProvisionRejected),
        (exception.PermissionDeniedError("workspace forbids GPUs"), ProvisionRejected),
        (exception.ResourceExhaustedError("GPU quota exceeded"), ProvisionRejected),
        (exception.InvalidError("unsupported gpu type 'Z100'"), ProvisionRejected),
        (exception.ConflictError("aborted"), ProvisionErrored),
        (exception.ServiceError("503"), ProvisionErrored),
        (exception.InternalError("boom"), ProvisionErrored),
        (exception.NotFoundError("app vanished"), ProvisionErrored),
        (exception.TimeoutError("slow"), ProvisionErrored),
        (ConnectionResetError("reset by peer"), ProvisionErrored),
    ],
)
def test_create_errors_are_rejections_or_unattributable(
    fake_modal: FakeModal, modal_adapter: ModalAdapter, error: Exception, kind: type
) -> None:
    fake_modal.fail("Sandbox.create", error)
    obs = modal_adapter.provision(A, SandboxSpec(image="x"))
    assert type(obs) is kind
    assert type(error).__name__ in obs.error  # type: ignore[union-attr]


def test_a_create_that_hangs_is_unattributable_after_the_provision_timeout(
    fake_modal: FakeModal,
) -> None:
    fake_modal.hang("Sandbox.create")
    with ModalAdapter(sdk=fake_modal, provision_timeout=0.05) as adapter:
        obs = adapter.provision(A, SandboxSpec(image="x"))
    assert isinstance(obs, ProvisionErrored)
    assert "Sandbox.create timed out after 0.05s" in obs.error


# -- observe: the domain table, row by row ---------------------------------------------------
def test_row_tags_error_is_unknown(fake_modal: FakeModal, modal_adapter: ModalAdapter) -> None:
    sid = seed(fake_modal, A)
    fake_modal.fail("Sandbox.get_tags", exception.ServiceError("tags down"), sandbox_id=sid)
    obs = modal_adapter.observe(tracked({A: sid}))[A]
    assert isinstance(obs, InstanceUnknown)
    assert "tags down" in obs.error


def test_row_poll_error_is_unknown_not_pending(
    fake_modal: FakeModal, modal_adapter: ModalAdapter
) -> None:
    """Upstream maps a Poll error to Pending (demoting a Running pod); ADR 0006 says no."""
    sid = seed(fake_modal, A)
    fake_modal.fail("Sandbox.poll", exception.ServiceError("poll down"), sandbox_id=sid)
    obs = modal_adapter.observe(tracked({A: sid}))[A]
    assert isinstance(obs, InstanceUnknown)
    assert "poll down" in obs.error


@pytest.mark.parametrize(
    ("code", "kind"),
    [(0, InstanceTerminated), (124, InstanceTerminated), (137, InstanceTerminated)]
    + [(c, InstanceFailed) for c in (1, 2, 127, 139)],
)
def test_row_exit_caught_by_poll_while_listed(
    fake_modal: FakeModal, modal_adapter: ModalAdapter, code: int, kind: type
) -> None:
    sid = seed(fake_modal, A)
    fake_modal.when("Sandbox.poll", lambda: fake_modal.exit(sid, code), sandbox_id=sid)
    obs = modal_adapter.observe(tracked({A: sid}))[A]
    assert type(obs) is kind
    assert (obs.exit_code, obs.instance_id) == (code, sid)  # type: ignore[union-attr]
    assert obs.detail.startswith(f"exit {code}: ")  # type: ignore[union-attr]
    assert fake_modal.count("Sandbox.from_id") == 0  # it was listed: no lookup needed


def test_row_running_without_probe_tag_is_ready(
    fake_modal: FakeModal, modal_adapter: ModalAdapter
) -> None:
    sid = seed(fake_modal, A)
    obs = modal_adapter.observe(tracked({A: sid}))[A]
    assert obs == InstanceRunning(at=obs.at, instance_id=sid, readiness_confirmed=True)
    assert fake_modal.count("Sandbox.wait_until_ready") == 0


def test_row_running_with_probe_tag_and_latch_set_is_ready(
    fake_modal: FakeModal, modal_adapter: ModalAdapter
) -> None:
    sid = seed(fake_modal, A, probe=True, ready=True)
    first = modal_adapter.observe(tracked({A: sid}))[A]
    assert isinstance(first, InstanceRunning)
    assert not first.readiness_confirmed
    modal_adapter.drain()
    second = modal_adapter.observe(tracked({A: sid}))[A]
    assert second == InstanceRunning(at=second.at, instance_id=sid, readiness_confirmed=True)


def test_row_running_with_probe_tag_and_latch_unset_is_not_ready(
    fake_modal: FakeModal, modal_adapter: ModalAdapter
) -> None:
    sid = seed(fake_modal, A, probe=True)
    for _ in range(3):
        obs = modal_adapter.observe(tracked({A: sid}))[A]
        assert obs == InstanceRunning(at=obs.at, instance_id=sid, readiness_confirmed=False)
    fake_modal.set_ready(sid)
    modal_adapter.drain()
    obs = modal_adapter.observe(tracked({A: sid}))[A]
    assert isinstance(obs, InstanceRunning)
    assert obs.readiness_confirmed


def test_a_probe_tag_on_a_sandbox_without_a_probe_latches_on_conflicts_while_running(
    fake_modal: FakeModal, modal_adapter: ModalAdapter
) -> None:
    """'No probe configured' latches, as upstream. The SDK raises ConflictError for it (gRPC
    FAILED_PRECONDITION, which the adapter does not read from a private attribute): two
    conflicts in a row while the sandbox runs mean there is no probe to wait for."""
    sid = fake_modal.add(claim(A), tags={PROBE_TAG_KEY: "true"})  # tag, but no probe
    modal_adapter.observe(tracked({A: sid}))
    modal_adapter.drain()
    assert fake_modal.count("Sandbox.wait_until_ready", sid) == 2
    obs = modal_adapter.observe(tracked({A: sid}))[A]
    assert isinstance(obs, InstanceRunning)
    assert obs.readiness_confirmed


def test_one_conflict_on_a_running_sandbox_is_asked_again(
    fake_modal: FakeModal, modal_adapter: ModalAdapter
) -> None:
    """An aborted wait (also a ConflictError) does not latch by itself: the same waiter asks
    again, and latches on the real answer."""
    sid = seed(fake_modal, A, probe=True)
    fake_modal.fail("Sandbox.wait_until_ready", exception.ConflictError("aborted"), sandbox_id=sid)
    fake_modal.when("Sandbox.poll", lambda: fake_modal.set_ready(sid), sandbox_id=sid)
    modal_adapter.observe(tracked({A: sid}))
    modal_adapter.drain()
    assert fake_modal.count("Sandbox.wait_until_ready", sid) == 2
    assert modal_adapter.latch.is_set(sid)


def test_a_conflict_from_a_finished_sandbox_latches_nothing(
    fake_modal: FakeModal, modal_adapter: ModalAdapter
) -> None:
    sid = seed(fake_modal, A, probe=True)

    def finish() -> None:
        fake_modal.exit(sid, 0)

    fake_modal.when("Sandbox.wait_until_ready", finish, sandbox_id=sid)
    modal_adapter.observe(tracked({A: sid}))
    modal_adapter.drain()
    assert fake_modal.count("Sandbox.wait_until_ready", sid) == 1
    assert not modal_adapter.latch.is_set(sid)


@pytest.mark.parametrize(
    "error",
    [exception.TimeoutError("not ready in 30s"), exception.ServiceError("503")],
)
def test_other_waiter_errors_latch_nothing_and_are_retried(
    fake_modal: FakeModal, modal_adapter: ModalAdapter, error: Exception
) -> None:
    sid = seed(fake_modal, A, probe=True, ready=True)
    fake_modal.fail("Sandbox.wait_until_ready", error, sandbox_id=sid)
    modal_adapter.observe(tracked({A: sid}))
    modal_adapter.drain()
    assert not modal_adapter.latch.is_set(sid)
    obs = modal_adapter.observe(tracked({A: sid}))[A]
    assert isinstance(obs, InstanceRunning)
    assert not obs.readiness_confirmed
    modal_adapter.drain()  # the second waiter succeeds
    assert fake_modal.count("Sandbox.wait_until_ready", sid) == 2
    obs = modal_adapter.observe(tracked({A: sid}))[A]
    assert isinstance(obs, InstanceRunning)
    assert obs.readiness_confirmed


def test_the_waiter_uses_a_fresh_handle_and_the_30s_budget(
    fake_modal: FakeModal, modal_adapter: ModalAdapter
) -> None:
    sid = seed(fake_modal, A, probe=True, ready=True)
    modal_adapter.observe(tracked({A: sid}))
    modal_adapter.drain()
    waits = [c for c in fake_modal.calls if c.name == "Sandbox.wait_until_ready"]
    assert [c.kwargs for c in waits] == [{"timeout": 30}]
    assert fake_modal.count("Sandbox.from_id", sid) == 1


def test_row_absent_from_list_with_no_known_id_is_absent(
    fake_modal: FakeModal, modal_adapter: ModalAdapter
) -> None:
    seed(fake_modal, B)
    assert modal_adapter.observe(tracked({A: None}))[A] == InstanceAbsent(at=t(0))


def test_row_list_error_is_unknown_for_every_pod(
    fake_modal: FakeModal, modal_adapter: ModalAdapter
) -> None:
    ids = {A: seed(fake_modal, A), B: seed(fake_modal, B)}
    fake_modal.fail("Sandbox.list", exception.ServiceError("list down"))
    out = modal_adapter.observe(tracked(ids))
    assert all(isinstance(o, InstanceUnknown) and "list down" in o.error for o in out.values())


# -- correction: poll missing sandboxes by id before concluding absent -------------------------
@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (0, InstanceTerminated),
        (137, InstanceTerminated),
        (124, InstanceTerminated),
        (3, InstanceFailed),
    ],
)
def test_a_finished_sandbox_that_left_the_list_is_classified_not_absent(
    fake_modal: FakeModal, modal_adapter: ModalAdapter, code: int, kind: type
) -> None:
    sid = seed(fake_modal, A)
    fake_modal.exit(sid, code)  # finished: Sandbox.list no longer shows it
    obs = modal_adapter.observe(tracked({A: sid}))[A]
    assert type(obs) is kind
    assert obs.exit_code == code  # type: ignore[union-attr]
    assert fake_modal.count("Sandbox.from_id", sid) == 1


def test_a_sandbox_unknown_by_id_is_absent(
    fake_modal: FakeModal, modal_adapter: ModalAdapter
) -> None:
    sid = seed(fake_modal, A)
    fake_modal.purge(sid)
    assert isinstance(modal_adapter.observe(tracked({A: sid}))[A], InstanceAbsent)


def test_a_running_sandbox_the_list_does_not_show_yet_is_observed_by_id(
    fake_modal: FakeModal, modal_adapter: ModalAdapter
) -> None:
    sid = seed(fake_modal, A, probe=True)
    fake_modal.hide(sid)
    obs = modal_adapter.observe(tracked({A: sid}))[A]
    assert obs == InstanceRunning(at=obs.at, instance_id=sid, readiness_confirmed=False)
    assert modal_adapter.latch.waiting(sid)  # kept, not pruned
    fake_modal.set_ready(sid)
    modal_adapter.drain()
    assert modal_adapter.latch.is_set(sid)


def test_a_lookup_by_id_that_fails_is_unknown(
    fake_modal: FakeModal, modal_adapter: ModalAdapter
) -> None:
    sid = seed(fake_modal, A)
    fake_modal.exit(sid, 0)
    fake_modal.fail("Sandbox.from_id", exception.ServiceError("lookup down"))
    obs = modal_adapter.observe(tracked({A: sid}))[A]
    assert isinstance(obs, InstanceUnknown)
    assert "lookup down" in obs.error


# -- correction: a tag read failure is unknown, never ready, never absent ------------------------
def test_unreadable_tags_are_never_read_as_no_probe_so_ready(
    fake_modal: FakeModal, modal_adapter: ModalAdapter
) -> None:
    sid = seed(fake_modal, A, probe=True)
    fake_modal.fail("Sandbox.get_tags", exception.ServiceError("tags down"), sandbox_id=sid)
    obs = modal_adapter.observe(tracked({A: sid}))[A]
    assert isinstance(obs, InstanceUnknown)
    assert fake_modal.count("Sandbox.poll") == 0


def test_unreadable_tags_elsewhere_make_a_missing_claim_unknown_not_absent(
    fake_modal: FakeModal, modal_adapter: ModalAdapter
) -> None:
    """The claim's sandbox may be the one whose tags could not be read."""
    other = seed(fake_modal, B)
    fake_modal.fail("Sandbox.get_tags", exception.ServiceError("tags down"), sandbox_id=other)
    obs = modal_adapter.observe(tracked({A: None}))[A]
    assert isinstance(obs, InstanceUnknown)
    assert "unreadable" in obs.error


# -- correction: each SDK call has its own short deadline -----------------------------------------
@pytest.mark.parametrize("operation", ["Sandbox.get_tags", "Sandbox.poll"])
def test_a_hanging_call_makes_only_its_pod_unknown(fake_modal: FakeModal, operation: str) -> None:
    ids = {A: seed(fake_modal, A), B: seed(fake_modal, B)}
    fake_modal.hang(operation, sandbox_id=ids[A])
    with ModalAdapter(sdk=fake_modal, call_timeout=0.05) as adapter:
        start = time.monotonic()
        out = adapter.observe(tracked(ids))
        elapsed = time.monotonic() - start
    assert isinstance(out[A], InstanceUnknown)
    assert f"{operation} timed out after 0.05s" in out[A].error  # type: ignore[union-attr]
    assert isinstance(out[B], InstanceRunning)
    assert elapsed < 1.0


@pytest.mark.parametrize("operation", ["Sandbox.list", "App.lookup"])
def test_a_hanging_list_makes_every_pod_unknown(fake_modal: FakeModal, operation: str) -> None:
    ids = {A: seed(fake_modal, A)}
    fake_modal.hang(operation)
    with ModalAdapter(sdk=fake_modal, call_timeout=0.05) as adapter:
        obs = adapter.observe(tracked(ids))[A]
    assert isinstance(obs, InstanceUnknown)
    assert "timed out" in obs.error


def test_a_hanging_lookup_by_id_is_unknown(fake_modal: FakeModal) -> None:
    sid = seed(fake_modal, A)
    fake_modal.exit(sid, 0)
    fake_modal.hang("Sandbox.from_id", sandbox_id=sid)
    with ModalAdapter(sdk=fake_modal, call_timeout=0.05) as adapter:
        obs = adapter.observe(tracked({A: sid}))[A]
    assert isinstance(obs, InstanceUnknown)
    assert "Sandbox.from_id timed out" in obs.error


# -- correction: a detached waiter the caller's cancellation and deadline cannot reach ------------
def _slow_pass(fake: FakeModal) -> tuple[str, str]:
    """A (probe, not ready) polls first and starts its waiter; B's poll then hangs."""
    a, b = seed(fake, A, probe=True), seed(fake, B)
    fake.hang("Sandbox.poll", sandbox_id=b)
    return a, b


async def _until(predicate: Any, limit: float = 2.0) -> None:
    deadline = time.monotonic() + limit
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.001)


def test_a_cancelled_caller_does_not_cancel_the_waiter(fake_modal: FakeModal) -> None:
    async def scenario() -> None:
        a, b = _slow_pass(fake_modal)
        adapter = AsyncModalAdapter(sdk=fake_modal, call_timeout=5.0)
        caller = asyncio.create_task(adapter.observe(tracked({A: a, B: b})))
        await _until(lambda: fake_modal.waiting(a) == 1)
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        assert adapter.latch.waiting(a)
        fake_modal.set_ready(a)
        await adapter.latch.drain()
        assert adapter.latch.is_set(a)
        await adapter.aclose()

    asyncio.run(scenario())


def test_a_caller_deadline_does_not_cancel_the_waiter(fake_modal: FakeModal) -> None:
    async def scenario() -> None:
        a, b = _slow_pass(fake_modal)
        adapter = AsyncModalAdapter(sdk=fake_modal, call_timeout=5.0)
        caller = asyncio.create_task(asyncio.wait_for(adapter.observe(tracked({A: a, B: b})), 0.2))
        await _until(caller.done)
        with pytest.raises(TimeoutError):
            caller.result()
        assert adapter.latch.waiting(a)  # the waiter outlived the caller's deadline
        fake_modal.set_ready(a)
        await adapter.latch.drain()
        assert adapter.latch.is_set(a)
        await adapter.aclose()

    asyncio.run(scenario())


def test_at_most_one_waiter_per_sandbox(fake_modal: FakeModal, modal_adapter: ModalAdapter) -> None:
    sid = seed(fake_modal, A, probe=True)
    for _ in range(5):
        modal_adapter.observe(tracked({A: sid}))
    modal_adapter.provision(A, SandboxSpec(image="x"))  # adoption polls it too
    assert fake_modal.count("Sandbox.wait_until_ready", sid) == 1
    assert fake_modal.max_concurrent_waits == 1
    fake_modal.set_ready(sid)
    modal_adapter.drain()
    modal_adapter.observe(tracked({A: sid}))
    assert fake_modal.count("Sandbox.wait_until_ready", sid) == 1


# -- correction: forget on exit / terminate, never latch again; prune ------------------------------
def test_terminate_forgets_the_latch_and_it_is_never_set_again(
    fake_modal: FakeModal, modal_adapter: ModalAdapter
) -> None:
    sid = seed(fake_modal, A, probe=True)
    modal_adapter.observe(tracked({A: sid}))
    assert modal_adapter.latch.waiting(sid)
    obs = modal_adapter.terminate(A, sandbox(sid))
    assert isinstance(obs, TerminateSucceeded)
    fake_modal.state(sid).returncode = None  # still shutting down: listed, running
    fake_modal.set_ready(sid)
    modal_adapter.drain()
    assert not modal_adapter.latch.is_set(sid)
    again = modal_adapter.observe(tracked({A: sid}))[A]
    assert again == InstanceRunning(at=again.at, instance_id=sid, readiness_confirmed=False)
    assert fake_modal.count("Sandbox.wait_until_ready", sid) == 1  # no new waiter


def test_an_observed_exit_forgets_the_latch(
    fake_modal: FakeModal, modal_adapter: ModalAdapter
) -> None:
    sid = seed(fake_modal, A, probe=True, ready=True)
    modal_adapter.observe(tracked({A: sid}))
    modal_adapter.drain()
    assert modal_adapter.latch.is_set(sid)
    fake_modal.when("Sandbox.poll", lambda: fake_modal.exit(sid, 0), sandbox_id=sid)
    assert isinstance(modal_adapter.observe(tracked({A: sid}))[A], InstanceTerminated)
    assert not modal_adapter.latch.is_set(sid)


def test_latch_entries_of_sandboxes_that_left_the_list_are_pruned(
    fake_modal: FakeModal, modal_adapter: ModalAdapter
) -> None:
    pods = {pod(f"p{i}"): seed(fake_modal, pod(f"p{i}"), probe=True, ready=True) for i in range(40)}
    modal_adapter.observe(tracked(pods))
    modal_adapter.drain()
    assert len(modal_adapter.latch) == 40
    for sid in list(pods.values())[:30]:
        fake_modal.exit(sid, 0)
    modal_adapter.observe(tracked(pods))
    assert len(modal_adapter.latch) == 10
    for sid in list(pods.values())[30:]:
        fake_modal.purge(sid)
    modal_adapter.observe(tracked({}))  # nobody tracked any more: the list is all that counts
    assert len(modal_adapter.latch) == 0


def test_a_failed_list_prunes_nothing(fake_modal: FakeModal, modal_adapter: ModalAdapter) -> None:
    sid = seed(fake_modal, A, probe=True, ready=True)
    modal_adapter.observe(tracked({A: sid}))
    modal_adapter.drain()
    fake_modal.fail("Sandbox.list", exception.ServiceError("down"))
    modal_adapter.observe(tracked({A: sid}))
    assert modal_adapter.latch.is_set(sid)


# -- terminate ---------------------------------------------------------------------------------
def test_terminate_by_id(fake_modal: FakeModal, modal_adapter: ModalAdapter) -> None:
    sid = seed(fake_modal, A)
    assert isinstance(modal_adapter.terminate(A, sandbox(sid)), TerminateSucceeded)
    assert fake_modal.state(sid).returncode == 137


def test_terminate_is_idempotent(fake_modal: FakeModal, modal_adapter: ModalAdapter) -> None:
    sid = seed(fake_modal, A)
    fake_modal.exit(sid, 0)
    assert isinstance(
        modal_adapter.terminate(A, sandbox(sid)), TerminateSucceeded
    )  # already finished
    fake_modal.purge(sid)
    assert isinstance(modal_adapter.terminate(A, sandbox(sid)), TerminateSucceeded)  # unknown id
    fake_modal.fail("Sandbox.terminate", exception.NotFoundError("gone"))
    other = seed(fake_modal, B)
    assert isinstance(modal_adapter.terminate(B, sandbox(other)), TerminateSucceeded)


def test_terminate_without_an_id_finds_the_claim_sandboxes(
    fake_modal: FakeModal, modal_adapter: ModalAdapter
) -> None:
    mine, other = seed(fake_modal, A), seed(fake_modal, B)
    assert isinstance(modal_adapter.terminate(A, sandbox("")), TerminateSucceeded)
    assert fake_modal.state(mine).returncode == 137
    assert fake_modal.state(other).returncode is None
    assert isinstance(modal_adapter.terminate(pod("nobody"), sandbox(None)), TerminateSucceeded)


def test_terminate_without_an_id_finds_a_sandbox_the_list_does_not_show_yet() -> None:
    """A create whose answer was lost leaves the host without an id, and the list lags: the
    claim's name still finds the sandbox, so it is not leaked."""
    fake = FakeModal(list_lags=True)
    with ModalAdapter(sdk=fake, clock=ticking_clock(), call_timeout=0.5) as adapter:
        created = adapter.provision(A, SandboxSpec(image="x"))
        assert isinstance(created, ProvisionSucceeded)
        assert isinstance(adapter.terminate(A, sandbox("")), TerminateSucceeded)
        assert fake.state(created.instance_id).returncode == 137
        # Found both ways (the list caught up): terminated once.
        fake.add(claim(B), name=sandbox_name(claim(B)))
        assert isinstance(adapter.terminate(B, sandbox(None)), TerminateSucceeded)
    assert fake.count("Sandbox.terminate") == 2


def test_terminate_errors_fail(fake_modal: FakeModal, modal_adapter: ModalAdapter) -> None:
    sid = seed(fake_modal, A)
    fake_modal.fail("Sandbox.terminate", exception.ServiceError("503"))
    obs = modal_adapter.terminate(A, sandbox(sid))
    assert isinstance(obs, TerminateFailed)
    assert "503" in obs.error
    fake_modal.fail("Sandbox.list", exception.ServiceError("list down"))
    obs = modal_adapter.terminate(A, sandbox(""))
    assert isinstance(obs, TerminateFailed)
    assert "list down" in obs.error


# -- lifecycle of the sync facade --------------------------------------------------------
def test_close_cancels_waiters_and_stops_the_loop_thread(fake_modal: FakeModal) -> None:
    sid = seed(fake_modal, A, probe=True)
    adapter = ModalAdapter(sdk=fake_modal)
    adapter.observe(tracked({A: sid}))
    deadline = time.monotonic() + 2
    while fake_modal.waiting(sid) != 1:
        assert time.monotonic() < deadline
        time.sleep(0.001)
    adapter.close()
    assert fake_modal.waiting(sid) == 0  # the waiter was cancelled, not left running
    assert not adapter._thread.is_alive()
    adapter.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        adapter.observe(tracked({A: sid}))


def test_close_right_after_a_pass_stops_the_waiter_at_once(fake_modal: FakeModal) -> None:
    """Regression: with asyncio.wait_for (3.11) a cancel landing as the waiter's from_id call
    completed was swallowed, and the waiter then sat out its whole readiness budget."""

    async def scenario() -> None:
        sid = seed(fake_modal, A, probe=True)
        adapter = AsyncModalAdapter(sdk=fake_modal, readiness_budget=3)
        await adapter.observe(tracked({A: sid}))  # starts the waiter; close before it ran a step
        start = time.monotonic()
        await adapter.aclose()
        assert time.monotonic() - start < 1.0
        assert fake_modal.waiting(sid) == 0
        assert not adapter.latch.waiters()

    for _ in range(20):  # the race had several interleavings
        asyncio.run(scenario())


def test_aclose_right_after_provision_adopted_a_probe_sandbox_ends(fake_modal: FakeModal) -> None:
    """Regression: ``provision`` adopted an initializing probe-gated sandbox and started its
    waiter without yielding, so ``aclose`` cancelled the waiter before its first step; such a
    task never ran its cleanup, kept ``entry.waiter`` set, and ``drain`` spun at 100 % CPU
    forever. The whole scenario runs under ``asyncio.wait_for`` (one task: no extra hop lets
    the waiter take a step first) so a regression fails here instead of hanging the suite."""

    async def scenario(fake: FakeModal) -> None:
        sid = seed(fake, A, probe=True)
        adapter = AsyncModalAdapter(sdk=fake, readiness_budget=3)
        obs = await adapter.provision(A, SandboxSpec(image="x"))
        assert obs == ProvisionSucceeded(at=obs.at, reserved=False, instance_id=sid)
        assert adapter.latch.waiting(sid)  # started, not yet run a step
        await adapter.aclose()
        assert not adapter.latch.waiters()
        assert not adapter.latch.waiting(sid)
        assert fake.waiting(sid) == 0

    asyncio.run(asyncio.wait_for(scenario(fake_modal), 2.0))
    for _ in range(4):  # fresh fakes: the same interleaving each time
        asyncio.run(asyncio.wait_for(scenario(FakeModal()), 2.0))


def test_a_waiter_cancelled_before_its_first_step_can_be_started_again(
    fake_modal: FakeModal,
) -> None:
    """A waiter cancelled before it ran (a prune, a forget racing its start) leaves no stale
    handle: the next miss starts a new waiter, which latches."""

    async def scenario() -> None:
        sid = seed(fake_modal, A, probe=True)
        adapter = AsyncModalAdapter(sdk=fake_modal)
        await adapter.provision(A, SandboxSpec(image="x"))
        (waiter,) = adapter.latch.waiters()
        waiter.cancel()  # before its first step
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert waiter.cancelled()
        assert not adapter.latch.waiting(sid)
        fake_modal.set_ready(sid)
        await adapter.observe(tracked({A: sid}))  # a miss: a new waiter
        await adapter.latch.drain()
        assert adapter.latch.is_set(sid)
        await adapter.aclose()

    asyncio.run(asyncio.wait_for(scenario(), 2.0))


def test_a_failed_terminate_leaves_the_latch_and_the_sandbox_stays_ready(
    fake_modal: FakeModal, modal_adapter: ModalAdapter
) -> None:
    """Upstream leaves the pod unchanged when Terminate fails: the sandbox keeps running, and
    its confirmed readiness must survive (it was forgotten before the call, for good)."""
    sid = seed(fake_modal, A, probe=True, ready=True)
    modal_adapter.observe(tracked({A: sid}))
    modal_adapter.drain()
    assert modal_adapter.latch.is_set(sid)
    for operation in ("Sandbox.terminate", "Sandbox.from_id"):
        fake_modal.fail(operation, exception.ServiceError("503"))
        assert isinstance(modal_adapter.terminate(A, sandbox(sid)), TerminateFailed)
        assert modal_adapter.latch.is_set(sid)
        obs = modal_adapter.observe(tracked({A: sid}))[A]
        assert obs == InstanceRunning(at=obs.at, instance_id=sid, readiness_confirmed=True)
    # ... and a terminate that succeeds still forgets it for good
    assert isinstance(modal_adapter.terminate(A, sandbox(sid)), TerminateSucceeded)
    assert not modal_adapter.latch.is_set(sid)


def test_a_failed_terminate_leaves_a_pending_waiter_running(
    fake_modal: FakeModal, modal_adapter: ModalAdapter
) -> None:
    sid = seed(fake_modal, A, probe=True)
    modal_adapter.observe(tracked({A: sid}))
    assert modal_adapter.latch.waiting(sid)
    fake_modal.fail("Sandbox.terminate", exception.ServiceError("503"))
    assert isinstance(modal_adapter.terminate(A, sandbox(sid)), TerminateFailed)
    assert modal_adapter.latch.waiting(sid)
    fake_modal.set_ready(sid)
    modal_adapter.drain()
    obs = modal_adapter.observe(tracked({A: sid}))[A]
    assert obs == InstanceRunning(at=obs.at, instance_id=sid, readiness_confirmed=True)


def test_options_are_validated() -> None:
    with pytest.raises(ValueError, match="positive"):
        AsyncModalAdapter(call_timeout=0)


def test_observations_carry_the_clock_time(fake_modal: FakeModal) -> None:
    sid = seed(fake_modal, A)
    with ModalAdapter(sdk=fake_modal, clock=lambda: t(42)) as adapter:
        assert adapter.observe(tracked({A: sid}))[A].at == t(42)


def test_clock_fixture_ticks() -> None:
    clock = ticking_clock(2)
    assert (clock(), clock()) == (t(0), t(2))


# -- every provider state maps to exactly one observation ------------------------------------------
POLL_OUTCOMES = st.one_of(
    st.just("error"), st.just("hang"), st.none(), st.integers(min_value=-5, max_value=300)
)


@settings(max_examples=60, deadline=None)
@given(
    tags_ok=st.booleans(),
    poll=POLL_OUTCOMES,
    probe=st.booleans(),
    latched=st.booleans(),
    listed=st.booleans(),
)
def test_every_sandbox_state_maps_to_exactly_one_observation(
    tags_ok: bool, poll: Any, probe: bool, latched: bool, listed: bool
) -> None:
    async def scenario() -> Any:
        fake = FakeModal()
        sid = seed(fake, A, probe=probe, ready=latched)
        adapter = AsyncModalAdapter(sdk=fake, call_timeout=0.02, clock=lambda: t(1))
        if latched:
            await adapter.observe(tracked({A: sid}))
            await adapter.latch.drain()
        if not listed:
            fake.hide(sid)
        if not tags_ok:
            fake.fail("Sandbox.get_tags", exception.ServiceError("tags"), sandbox_id=sid)
        if poll == "error":
            fake.fail("Sandbox.poll", exception.ServiceError("poll"), sandbox_id=sid)
        elif poll == "hang":
            fake.hang("Sandbox.poll", sandbox_id=sid)
        elif poll is not None:
            fake.when("Sandbox.poll", lambda: fake.exit(sid, poll), sandbox_id=sid)
        out = await adapter.observe(tracked({A: sid}))
        await adapter.aclose()
        return out

    out = asyncio.run(scenario())
    assert list(out) == [A]
    obs = out[A]
    # A listed sandbox needs its tags to be matched to its claim; one the list does not show
    # is polled by id first, and needs its tags only if it still runs (for the probe tag).
    tags_needed = listed or poll is None
    if (tags_needed and not tags_ok) or poll in ("error", "hang"):
        assert type(obs) is InstanceUnknown
    elif poll is None:
        assert obs == InstanceRunning(
            at=t(1), instance_id=obs.instance_id, readiness_confirmed=(not probe) or latched
        )
    elif poll in (0, 124, 137):
        assert type(obs) is InstanceTerminated
        assert obs.exit_code == poll
    else:
        assert type(obs) is InstanceFailed
        assert obs.exit_code == poll
