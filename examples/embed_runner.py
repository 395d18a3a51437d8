"""A controller author's view: embed the runner in a host loop over a (fake) provider.

Run it: ``python examples/embed_runner.py``. It places one pod on the fake provider, polls it,
deletes it, and prints every committed event; the events are on SQLite in a temp folder.
"""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

from lifecycle import MemoryEmitter, ObjectRef, Runner, SQLiteStore
from lifecycle.machines import pod as p
from lifecycle.machines.nodeclaim import placed


def main() -> list[str]:
    clock = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
    events = MemoryEmitter()
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "controller.db")
        runner = Runner(store, [events])
        runner.redeliver()  # on start-up: whatever a crash left in the outbox
        ref = ObjectRef("Pod", "ml", "trainer-0", uid="7d1e0c52")
        host_loop = [
            p.CreateRequested(at=clock, pool="gpu", provider="fake"),
            p.ProvisionSucceeded(at=clock, reserved=True, instance_id="fake-1"),
            p.InstanceRunning(at=clock + timedelta(seconds=15), instance_id="fake-1"),
            p.InstanceRunning(at=clock + timedelta(seconds=30), instance_id="fake-1"),
            p.InstanceUnknown(at=clock + timedelta(seconds=45), error="List: 503"),
        ]
        for observation in host_loop:
            runner.observe(ref, observation)
        print("placed:", placed(store, "gpu"))
        runner.observe(ref, p.TerminateSucceeded(at=clock + timedelta(minutes=5)))
        store.close()
    lines = [f"{e.ref.kind}/{e.ref.name}: {e.flip} ({e.type})" for e in events.events]
    print("\n".join(lines))
    return lines


if __name__ == "__main__":
    main()
