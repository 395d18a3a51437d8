"""A redelivery's link-intent writes are observations like any other (issue 25): the intents a
restarted runner finds in the outbox are applied by ``redeliver``, and each write they make is
reported in that operation's ``end`` -- so observation and transition counts do not depend on
whether a linked write landed at once or after a restart."""

from __future__ import annotations

import asyncio

from lifecycle import AsyncRunner, MemoryEmitter, MemoryStore, Runner
from lifecycle.aio import as_async
from lifecycle.links import claim_ref
from lifecycle.machines import pod
from lifecycle.testing import RecordingTelemetry
from lifecycle.testing.fakes import FaultyStore

from ..conftest import pod_ref, t


def left_pending(store: MemoryStore) -> None:
    """A pod committed while its NodeClaim's write failed: the claim's intent stays in the
    outbox (the runner that would retry it is gone)."""
    faulty = FaultyStore(store)
    ref = pod_ref()
    faulty.inject(claim_ref(ref).uid, "write-error", times=100)
    runner = Runner(faulty, [MemoryEmitter()])
    result = runner.observe(ref, pod.CreateRequested(at=t(0)))
    assert result.committed
    assert any(r.error is not None for r in result.linked)


def reported_machines(recording: RecordingTelemetry) -> list[tuple[str, str]]:
    opened = {token: op for op, _, token in recording.of("begin")}
    return [
        (opened[token], seen.machine)
        for token, observed, _ in recording.of("end")
        for seen in observed
    ]


def test_a_redelivery_reports_the_writes_its_link_intents_made() -> None:
    store = MemoryStore()
    left_pending(store)
    recording = RecordingTelemetry()
    restarted = Runner(store, [MemoryEmitter()], telemetry=recording)
    restarted.redeliver()
    assert ("redeliver", "nodeclaim") in reported_machines(recording)
    assert not recording.open


def test_an_asyncio_redelivery_reports_them_too() -> None:
    store = MemoryStore()
    left_pending(store)
    recording = RecordingTelemetry()

    async def main() -> None:
        restarted = AsyncRunner(as_async(store), [], telemetry=recording)
        await restarted.redeliver()

    asyncio.run(main())
    assert ("redeliver", "nodeclaim") in reported_machines(recording)
