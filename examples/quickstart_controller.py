"""Quick-start, controller author: the runner inside your host loop (here on the fake provider)."""

from datetime import UTC, datetime, timedelta

from lifecycle import MemoryEmitter, ObjectRef, Runner, SQLiteStore
from lifecycle.adapters import Tracked
from lifecycle.machines.pod import CreateRequested, DeletionRequested
from lifecycle.testing.fakes import FakeProvider, FakeSpec


def main(db: str = "controller.db") -> list[str]:
    provider = FakeProvider(boot_ticks=1)  # Modal and EC2 adapters have the same three calls
    events = MemoryEmitter()  # in production: LogEmitter(), KubernetesEmitter.for_api()
    store = SQLiteStore(db, owner="controller-0")  # a stable replica name
    with Runner(store, [events], owns_store=True) as runner:  # its close writes every mark
        runner.redeliver()  # on start-up, and now and again: what a crash left in the outbox
        pod, spec = ObjectRef("Pod", "ml", "trainer-0", uid="7d1e0c52"), FakeSpec()
        now = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
        runner.observe(pod, CreateRequested(at=now, pool="gpu", provider=provider.name))
        created = provider.provision(pod, spec, at=now)  # ProvisionSucceeded(reserved=True, ...)
        runner.observe(pod, created)
        tracked = {pod: Tracked.provisioned(spec, created)}  # keep it, or rebuild it from the pod
        for _ in range(3):  # your poll cycle: poll the provider, observe it all, repeat
            now += timedelta(seconds=15)
            runner.observe_many(provider.observe(tracked, at=now).items())  # one transaction
        runner.observe(pod, DeletionRequested(at=now))
        runner.observe(pod, provider.terminate(pod, tracked.pop(pod), at=now))
    lines = [f"{t.ref.kind}/{t.ref.name}: {t.flip}" for t in events.events]
    if lines:
        print("\n".join(lines))  # one event per flip; the repeated poll added none
    else:  # run again on the same file: every status is already there, nothing flips
        print(f"no flips: {db} already holds these statuses (delete it to start over)")
    return lines


if __name__ == "__main__":
    main()
