"""Fallback Warnings only where a table row declares one (ADR 0091).

Upstream sends ``<Reason>StatusUpdateFailed`` at exactly three sites, where no later pass redoes
the failed write. Everywhere else the next pass redoes it and sends the real Warning, so a
fallback first would tell people the same thing twice.
"""

from __future__ import annotations

import pytest

from lifecycle import (
    EventType,
    MemoryEmitter,
    MemoryStore,
    ObjectRef,
    Outcome,
    RetryPolicy,
    Runner,
    default_registry,
)
from lifecycle._core.errors import TableError
from lifecycle._core.observation import Observation
from lifecycle._core.table import SAME, Row, Table
from lifecycle.machines import certification, job
from lifecycle.testing.fakes import FaultyStore

from .conftest import t

UPSTREAM = {
    "workflow": {"OverrideErrorStatusUpdateFailed", "HeterogeneousPlatformStatusUpdateFailed"},
    "workloadrun": {"BuildFailedStatusUpdateFailed"},
}


def test_the_shipped_tables_declare_exactly_upstreams_three_fallback_sites() -> None:
    declared = {
        name: set(m.table.fallback_reasons)
        for name, m in default_registry().items()
        if m.table.fallback_reasons
    }
    assert declared == UPSTREAM


class _Seen(Observation):
    pass


def _table(*rows: Row) -> Table:
    return Table(
        "toy",
        states=("", "Bad", "Good"),
        initial="",
        terminal=("Bad", "Good"),
        observations=(_Seen,),
        rows=rows,
    )


@pytest.mark.parametrize(
    "row",
    [
        Row(
            "", _Seen, to="Good", reason="Fine", event=EventType.NORMAL, fallback=True
        ),  # not a Warning
        Row("", _Seen, to=SAME, ignore=True, note="x", fallback=True),  # an ignore row
        Row(
            "", _Seen, to="Bad", reason="", event=EventType.WARNING, fallback=True
        ),  # no reason to name
    ],
)
def test_a_fallback_row_must_enter_a_warning_state_with_a_reason(row: Row) -> None:
    with pytest.raises(TableError, match="a fallback row must enter a state with a Warning"):
        _table(row)


def test_a_declared_fallback_row_lists_its_reason() -> None:
    table = _table(
        Row("", _Seen, to="Bad", reason="Broken", event=EventType.WARNING, fallback=True)
    )
    assert table.fallback_reasons == ("BrokenStatusUpdateFailed",)


def _lost(ref: ObjectRef, setup: list[Observation], lost: Observation) -> list[str]:
    """Reasons emitted for ``ref`` when the write of ``lost`` fails once and is redone."""
    store, emitter = FaultyStore(MemoryStore()), MemoryEmitter()
    runner = Runner(store, [emitter], links=(), policy=RetryPolicy(backoff=0.0))
    for obs in setup:
        assert runner.observe(ref, obs).committed
    emitted = len(emitter.events)
    store.inject(ref.uid, "write-error")
    failed = runner.observe(ref, lost)
    assert (failed.outcome, failed.fallback) == (Outcome.FAILED, ())
    assert runner.observe(ref, lost).committed  # the next pass redoes it
    return [e.reason for e in emitter.events[emitted:]]


def test_a_lost_hardware_failed_write_sends_no_fallback_and_the_next_pass_warns_once() -> None:
    ref = ObjectRef("Job", "ml", "j", "j-1")
    setup: list[Observation] = [job.WorkloadCreated(at=t(1)), job.WorkloadRunning(at=t(2))]
    reasons = _lost(ref, setup, job.HardwareFault(at=t(30), node="n1", reason="XID79"))
    assert reasons == ["HardwareFailureDetected"]  # never HardwareFailureDetectedStatusUpdateFailed


def test_a_lost_category_not_found_write_sends_one_warning_not_two() -> None:
    ref = ObjectRef("Certification", "ml", "c", "c-1")
    setup: list[Observation] = [certification.Submitted(at=t(0), categories=("x/v1",))]
    reasons = _lost(ref, setup, certification.CategoryNotFound(at=t(1), category="x/v1"))
    assert reasons == ["CategoryNotFound"]
