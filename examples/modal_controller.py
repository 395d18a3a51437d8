"""A small host controller on Modal: provision, poll, feed the runner, publish events.

    python examples/modal_controller.py --fake                  # the shipped SDK fake, CI
    python examples/modal_controller.py --record saw.jsonl      # live: needs a Modal token
    lifecycle replay saw.jsonl                                  # the same events, again

Live, it places ``--pods`` sandboxes in the app ``--app`` (one with a TCP readiness probe),
polls every ``--interval`` seconds for ``--ticks`` rounds, then deletes them. With ``--fake``
the run is scripted: the probe passes on the second poll, a pod crashes with exit 1 on the
third, and one poll's list fails (which changes nothing).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

from lifecycle import MemoryStore, ObjectRef, Runner, Transition
from lifecycle.adapters import Tracked
from lifecycle.adapters.modal import ModalAdapter, SandboxSpec
from lifecycle.adapters.recording import TraceFileRecorder
from lifecycle.machines.pod import CreateRequested, DeletionRequested, ProvisionErrored
from lifecycle.testing.fakes import FakeModal


class PrintEmitter:
    """Publishes events by printing them (a real host would post Kubernetes Events)."""

    def emit(self, t: Transition) -> None:
        print(f"{t.type.value:<7} {t.ref}: {t.flip}  {t.message}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fake", action="store_true", help="use the shipped modal SDK fake")
    parser.add_argument("--app", default="lifecycle-example")
    parser.add_argument("--image", default="python:3.12-slim")
    parser.add_argument("--pods", type=int, default=3)
    parser.add_argument("--ticks", type=int, default=4)
    parser.add_argument("--interval", type=float, default=None, help="seconds between polls")
    parser.add_argument("--record", help="append every observation to this trace file")
    args = parser.parse_args(argv)
    interval = args.interval if args.interval is not None else (0.0 if args.fake else 15.0)

    fake = FakeModal() if args.fake else None
    recorder = TraceFileRecorder(args.record, comment="modal_controller") if args.record else None
    runner = Runner(MemoryStore(), [PrintEmitter()])
    options: dict[str, Any] = {"sdk": fake, "recorder": recorder}

    def feed(ref: ObjectRef, obs: Any, *, host: bool = False) -> None:
        if host and recorder is not None:
            recorder.record(ref, obs)  # the adapter records its own observations
        runner.observe(ref, obs)

    pods = [ObjectRef("Pod", "demo", f"worker-{i}", f"demo-{i}") for i in range(args.pods)]
    tracked: dict[ObjectRef, Tracked[SandboxSpec]] = {}
    with ModalAdapter(args.app, **options) as adapter:
        for i, ref in enumerate(pods):
            probe = {"tcpSocket": {"port": 8000}} if i == 0 else None
            spec = SandboxSpec(
                image=args.image,
                command=("python", "-m", "http.server", "8000"),
                readiness_probe=probe,
                active_deadline_seconds=3600,
            )
            feed(
                ref,
                CreateRequested(at=adapter.clock(), pool="gpu", provider=adapter.name),
                host=True,
            )
            outcome = adapter.provision(ref, spec)
            feed(ref, outcome)
            if not isinstance(outcome, ProvisionErrored):
                tracked[ref] = Tracked.provisioned(spec, outcome)
        for tick in range(args.ticks):
            if fake is not None:
                ids = [tracked[ref].instance_id if ref in tracked else "" for ref in pods]
                script(fake, tick, ids, adapter)
            for ref, obs in adapter.observe(tracked).items():
                feed(ref, obs)
            time.sleep(interval)
        for ref, pod in tracked.items():
            feed(ref, DeletionRequested(at=adapter.clock()), host=True)
            feed(ref, adapter.terminate(ref, pod))
    if recorder is not None:
        recorder.close()
    return 0


def script(fake: FakeModal, tick: int, ids: list[str], adapter: ModalAdapter) -> None:
    """What happens on Modal in the ``--fake`` run."""
    if tick == 1 and ids and ids[0]:
        fake.set_ready(ids[0])
        adapter.drain()
    if tick == 2 and len(ids) > 1 and ids[1]:
        fake.exit(ids[1], 1)
    if tick == 3:
        fake.fail("Sandbox.list", FakeModal.exception.ServiceError("list: connection reset"))


if __name__ == "__main__":
    sys.exit(main())
