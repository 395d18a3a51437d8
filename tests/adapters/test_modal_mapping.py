"""Modal's pure mappings: Pod probe -> Modal probe, exit codes, a polled sandbox, the latch."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lifecycle.adapters.modal import (
    ProbePlan,
    ReadinessLatch,
    exit_meaning,
    exit_observation,
    probe_plan,
    sandbox_observation,
)
from lifecycle.machines.pod import InstanceFailed, InstanceRunning, InstanceTerminated

from .conftest import t


# -- probe mapping (domain §4: "Probe tag stamped at create only if ...") -----------------------
@pytest.mark.parametrize(
    ("probe", "plan"),
    [
        ({"exec": {"command": ["cat", "/ready"]}}, ProbePlan(exec_argv=("cat", "/ready"))),
        ({"tcpSocket": {"port": 8080}}, ProbePlan(tcp_port=8080)),
        ({"httpGet": {"port": 9000, "path": "/healthz"}}, ProbePlan(tcp_port=9000)),
        ({"tcpSocket": {"port": "http"}}, None),  # named port
        ({"httpGet": {"port": "web", "path": "/"}}, None),  # named port
        ({"periodSeconds": 5}, None),  # no handler
        ({}, None),
        (None, None),
        ({"exec": {"command": []}}, None),  # empty exec command
        ({"exec": {"command": []}, "tcpSocket": {"port": 22}}, ProbePlan(tcp_port=22)),
        ({"tcpSocket": {"port": 0}}, None),
        ({"tcpSocket": {"port": 70000}}, None),
        ({"tcpSocket": {"port": True}}, None),
        (
            {"exec": {"command": ["true"]}, "httpGet": {"port": 80}},
            ProbePlan(exec_argv=("true",)),
        ),  # exec beats httpGet
        (
            {"tcpSocket": {"port": 8080}, "periodSeconds": 3},
            ProbePlan(tcp_port=8080, interval_ms=3000),
        ),
        ({"exec": {"command": ["x"]}, "periodSeconds": 0}, ProbePlan(exec_argv=("x",))),
    ],
)
def test_probe_mapping(probe: dict[str, Any] | None, plan: ProbePlan | None) -> None:
    assert probe_plan(probe) == plan


# -- exit classification ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("code", "kind", "meaning"),
    [
        (0, InstanceTerminated, "exited successfully"),
        (124, InstanceTerminated, "timed out"),
        (137, InstanceTerminated, "killed (SIGKILL"),
        (1, InstanceFailed, "general error"),
        (2, InstanceFailed, "bad arguments"),
        (126, InstanceFailed, "not executable"),
        (127, InstanceFailed, "command not found"),
        (139, InstanceFailed, "SIGSEGV"),
        (143, InstanceFailed, "SIGTERM"),
        (255, InstanceFailed, "exited with an error"),
        (-1, InstanceFailed, "outside 0-255"),
        (300, InstanceFailed, "outside 0-255"),
    ],
)
def test_exit_classification_keeps_code_and_meaning(code: int, kind: type, meaning: str) -> None:
    obs = exit_observation(code, instance_id="sb-1", at=t())
    assert isinstance(obs, kind)
    assert obs.exit_code == code  # type: ignore[union-attr]
    assert obs.instance_id == "sb-1"
    assert obs.detail.startswith(f"exit {code}: ")  # type: ignore[union-attr]
    assert meaning in obs.detail  # type: ignore[union-attr]


# -- a polled sandbox (domain §4 rows "Poll nil ...") --------------------------------------------
@pytest.mark.parametrize(
    ("probe", "latched", "confirmed"),
    [(False, False, True), (False, True, True), (True, True, True), (True, False, False)],
)
def test_running_sandbox_readiness_rows(probe: bool, latched: bool, confirmed: bool) -> None:
    obs = sandbox_observation(
        instance_id="sb-1", returncode=None, probe=probe, latched=latched, at=t()
    )
    assert obs == InstanceRunning(at=t(), instance_id="sb-1", readiness_confirmed=confirmed)


@given(
    returncode=st.none() | st.integers(min_value=-(2**31), max_value=2**31),
    probe=st.booleans(),
    latched=st.booleans(),
)
def test_every_provider_state_maps_to_exactly_one_observation(
    returncode: int | None, probe: bool, latched: bool
) -> None:
    obs = sandbox_observation(
        instance_id="sb-9", returncode=returncode, probe=probe, latched=latched, at=t()
    )
    if returncode is None:
        assert isinstance(obs, InstanceRunning)
        assert obs.readiness_confirmed == ((not probe) or latched)
    elif returncode in (0, 124, 137):
        assert type(obs) is InstanceTerminated
        assert obs.exit_code == returncode
    else:
        assert type(obs) is InstanceFailed
        assert obs.exit_code == returncode
        assert exit_meaning(returncode) in obs.detail


# -- the latch ---------------------------------------------------------------------------------
def test_latch_sets_only_on_success_and_dedups_waiters() -> None:
    async def scenario() -> None:
        latch = ReadinessLatch()
        gate = asyncio.Event()
        calls = 0

        async def wait() -> bool:
            nonlocal calls
            calls += 1
            await gate.wait()
            return True

        assert latch.start("sb-1", wait)
        assert not latch.start("sb-1", wait)  # one waiter per sandbox
        await asyncio.sleep(0)
        assert latch.waiting("sb-1")
        assert not latch.is_set("sb-1")
        gate.set()
        await latch.drain()
        assert latch.is_set("sb-1")
        assert calls == 1
        assert not latch.start("sb-1", wait)  # latched: nothing to wait for

        async def fail() -> bool:
            return False

        assert latch.start("sb-2", fail)
        await latch.drain()
        assert not latch.is_set("sb-2")
        assert latch.start("sb-2", fail)  # a failed waiter is retried on the next miss
        await latch.drain()

    asyncio.run(scenario())


def test_latch_never_sets_after_forget_even_if_the_waiter_ignores_cancellation() -> None:
    """The generation token, not cancellation, is what keeps a forgotten sandbox unlatched."""

    async def scenario() -> None:
        latch = ReadinessLatch()
        gate = asyncio.Event()

        async def stubborn() -> bool:
            while True:
                try:
                    await gate.wait()
                    return True
                except asyncio.CancelledError:
                    continue  # a waiter that swallows cancellation and succeeds anyway

        latch.start("sb-1", stubborn)
        await asyncio.sleep(0)
        task = latch.waiters()[0]
        latch.forget("sb-1")
        gate.set()
        await task
        assert not latch.is_set("sb-1")
        assert not latch.start("sb-1", stubborn)  # a forgotten sandbox gets no new waiter
        assert latch.prune(set()) == 1
        assert len(latch) == 0

    asyncio.run(scenario())


def test_latch_prune_drops_entries_and_their_waiters() -> None:
    async def scenario() -> None:
        latch = ReadinessLatch()

        async def forever() -> bool:
            await asyncio.Event().wait()
            return True

        for i in range(100):
            latch.start(f"sb-{i}", forever)
        await asyncio.sleep(0)
        tasks = latch.waiters()
        assert latch.prune({"sb-0", "sb-1"}) == 98
        assert len(latch) == 2
        await asyncio.gather(*tasks[2:], return_exceptions=True)
        assert all(task.cancelled() for task in tasks[2:])
        latch.cancel_all()
        await latch.drain()

    asyncio.run(scenario())
