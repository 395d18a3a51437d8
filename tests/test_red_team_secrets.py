"""Red team, secrets: a store error that quotes a credential must not leave the process in a
fallback Warning (README guarantee 7: "fallback Warning messages (they quote the store
error)"), whichever machine sends it -- upstream's three fallback sites above all, which
spell their own messages (Workflow HeterogeneousPlatform and OverrideError, WorkloadRun
BuildFailed), and a host machine that overrides ``fallback_message`` too.

The fallback reaches the host three ways: ``Result.fallback``, every emitter (a
``MemoryEmitter`` keeps what was delivered), and the log (``LogEmitter``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from lifecycle import (
    LogEmitter,
    MachineRegistry,
    MemoryEmitter,
    MemoryStore,
    ObjectRef,
    Observation,
    Runner,
    StoreError,
)
from lifecycle.machines import workflow, workloadrun

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)

#: Credentials a database or provider error may quote, one of each shape the redactor knows.
SECRETS = (
    "hunter2-db-password",
    "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
)
STORE_ERROR = (
    f"connection to postgresql://admin:{SECRETS[0]}@db.internal/ctl failed; "
    f"token={SECRETS[1]} aws_secret_access_key={SECRETS[2]} Authorization: Bearer {SECRETS[3]}"
)


class FailingStore(MemoryStore):
    """Commits succeed until ``fail`` is set; then every commit raises a StoreError quoting
    credentials."""

    fail = False

    def commit(self, *args: Any, **kwargs: Any) -> int:
        if self.fail:
            raise StoreError(STORE_ERROR)
        return super().commit(*args, **kwargs)


Site = tuple[ObjectRef, list[Observation], Observation, str]
SITES: dict[str, Callable[[], Site]] = {
    "Workflow HeterogeneousPlatform": lambda: (
        ObjectRef("Workflow", "fleet", "mixed", "wf-mixed"),
        [workflow.Submitted(at=T0)],
        workflow.PlatformsMixed(at=T0, error="nodes mix GKE and EKS platforms"),
        "HeterogeneousPlatformStatusUpdateFailed",
    ),
    "Workflow OverrideError": lambda: (
        ObjectRef("Workflow", "fleet", "override", "wf-override"),
        [workflow.Submitted(at=T0)],
        workflow.OverridesFailed(at=T0, error="path spec.nodes[3] does not exist"),
        "OverrideErrorStatusUpdateFailed",
    ),
    "WorkloadRun BuildFailed": lambda: (
        ObjectRef("WorkloadRun", "fleet", "broken", "run-broken"),
        [],
        workloadrun.ExecFrameworkMissing(at=T0),
        "BuildFailedStatusUpdateFailed",
    ),
}


@pytest.mark.parametrize("site", sorted(SITES))
def test_a_fallback_warning_never_quotes_a_credential(
    site: str, caplog: pytest.LogCaptureFixture
) -> None:
    ref, setup, failing, reason = SITES[site]()
    store = FailingStore()
    kept = MemoryEmitter()
    runner = Runner(store, [kept, LogEmitter()])
    for obs in setup:
        runner.observe(ref, obs)
    store.fail = True
    with caplog.at_level(logging.DEBUG, logger="lifecycle"):
        result = runner.observe(ref, failing)
    (fallback,) = result.fallback
    assert fallback.reason == reason
    assert "also failed" in fallback.message  # it still names the error ...
    assert "db.internal" in fallback.message  # ... with what is not secret in it
    sent = [e for e in kept.events if e.fallback]
    assert [e.reason for e in sent] == [reason]
    logged = "\n".join(r.getMessage() + repr(getattr(r, "lifecycle", "")) for r in caplog.records)
    for secret in SECRETS:
        assert secret not in fallback.message, secret
        assert secret not in sent[0].message, secret
        assert secret not in logged, secret


class HostWorkloadRun(workloadrun.WorkloadRunMachine):
    """A host's machine that spells its own fallback message, quoting the error as is."""

    def fallback_message(self, ref: ObjectRef, flip: Any, error: Exception) -> str:
        return f"{flip.reason}: could not record it: {error}"


def test_a_host_machines_own_fallback_message_is_redacted_too() -> None:
    machine = HostWorkloadRun()
    store = FailingStore()
    kept = MemoryEmitter()
    runner = Runner(store, [kept], machines=MachineRegistry([machine]), links=())
    store.fail = True
    ref = ObjectRef("WorkloadRun", "fleet", "broken", "run-broken")
    result = runner.observe(ref, workloadrun.ExecFrameworkMissing(at=T0))
    (fallback,) = result.fallback
    assert "could not record it" in fallback.message
    for secret in SECRETS:
        assert secret not in fallback.message, secret
