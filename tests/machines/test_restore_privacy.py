"""Restore messages by privacy class, end to end: through a Runner, every Event the emitter
receives and every stored condition show a free-text error only redacted, while the journal
keeps the observation (and its full text) for debug logs."""

from __future__ import annotations

import attrs

from lifecycle import MemoryEmitter, MemoryStore, Runner
from lifecycle.machines import RESTORE
from lifecycle.machines.restore import (
    ManifestUnreadable,
    PlaceholderResolved,
    RestoreErrored,
    RestoreStatus,
    StatusWriteFailed,
    TargetFactsUnavailable,
    attempt_ref,
)

from .test_restore import LEAKY, PRIVATE, WARN, M, facts_a, facts_b, opened, pod, t

REF = attempt_ref("ml", "trainer-0", "pod-a", "content-1", "main")


def _surfaces(runner: Runner, sink: MemoryEmitter) -> str:
    record = runner.store.load(RESTORE, REF)
    assert record is not None
    status: RestoreStatus = record.status
    conditions = [c.message for c in (status.compatible, status.restored) if c is not None]
    events = [e.message for e in sink.events]
    return "\n".join([status.message, status.write_error, *conditions, *events])


def _clean(text: str) -> None:
    for private in PRIVATE:
        assert private not in text, (private, text)


def test_every_free_text_error_reaches_events_and_conditions_redacted() -> None:
    store, sink = MemoryStore(), MemoryEmitter()
    runner = Runner(store, [sink])
    runner.observe(REF, opened(WARN))
    runner.observe(REF, pod())
    runner.observe(REF, ManifestUnreadable(at=t(2), error=LEAKY))  # allowed under warn
    runner.observe(REF, PlaceholderResolved(at=t(3)))
    runner.observe(REF, TargetFactsUnavailable(at=t(4), error=LEAKY))
    runner.observe(REF, facts_b(5))
    runner.observe(REF, RestoreErrored(at=t(6), error=LEAKY))
    runner.observe(REF, StatusWriteFailed(at=t(7), error=LEAKY))
    reasons = set(sink.reasons())
    assert {"RestoreCompatUnchecked", "RestoreCompatUnknown", "RestoreFailed"} <= reasons
    assert "RestoreStatusUpdateFailed" in reasons
    _clean(_surfaces(runner, sink))
    journal = list(store.journal(RESTORE, REF))
    assert any(LEAKY in repr(entry) for entry in journal)  # the full text, for debug logs


def test_a_refused_attempt_with_unknown_gate_b_facts_never_claims_through_the_runner() -> None:
    store, sink = MemoryStore(), MemoryEmitter()
    runner = Runner(store, [sink])
    runner.observe(REF, opened())
    runner.observe(REF, pod())
    gaps = attrs.evolve(M, facts={"k8s.imageId": "unavailable:EIO"})
    runner.observe(REF, facts_a(3, manifest=gaps))
    assert "RestoreRequested" not in sink.reasons()
    assert sink.reasons()[-1] == "RestoreCompatUnknown"
