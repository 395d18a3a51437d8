"""A host that stops cleanly on SIGTERM (a rolling update, ``kubectl delete pod``, Ctrl-C).

Run it: ``python examples/shutdown_host.py host.db``, then send it SIGTERM (or press Ctrl-C).
The handler only asks the loop to stop; the loop ends its pass, and ``runner.close`` hands the
acknowledging emitters ``GRACE`` seconds to finish (keep it well inside the pod's
``terminationGracePeriodSeconds``, 30 s by default), writes every delivery mark, and closes the
store. Started again on the same file, the host has nothing to redeliver: it prints
``redelivered: 0``. Without ``close``, the last deliveries' marks die with the process and those
events are sent again on the next start (ADR 0135).
"""

from __future__ import annotations

import signal
import sys
import threading
from datetime import UTC, datetime

from lifecycle import ObjectRef, Runner, SQLiteStore, Transition
from lifecycle.machines.pod import CreateRequested

#: Seconds the emitters get to finish on the way out (then what they hold stays in the outbox).
GRACE = 5.0


class PrintEmitter:
    """Prints each event (in production: LogEmitter(), KubernetesEmitter.for_api())."""

    def emit(self, transition: Transition) -> None:
        print(f"event {transition.ref.kind}/{transition.ref.name}: {transition.flip}", flush=True)


def main(db: str = "host.db", pods: int = 3, interval: float = 0.05) -> None:
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):  # the handler only asks the loop to stop
        signal.signal(signum, lambda *_: stop.set())
    runner = Runner(SQLiteStore(db, owner="host-0"), [PrintEmitter()], owns_store=True)
    try:
        print(f"redelivered: {runner.redeliver()}", flush=True)  # what a crash left
        at = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
        n = 0
        while not stop.is_set():  # your reconcile loop
            if n < pods:  # (here: one new pod per pass; a restart sees them unchanged)
                ref = ObjectRef("Pod", "ml", f"trainer-{n}", uid=f"shutdown-{n}")
                runner.observe(ref, CreateRequested(at=at, pool="gpu"))
                print(f"observed {ref.name}", flush=True)
                n += 1
            stop.wait(interval)
    finally:
        left = runner.close(timeout=GRACE)  # every mark written, the store closed
        print(f"stopped; {left} event(s) left in the outbox", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:2])
