"""A small host controller on AWS EC2: provision, poll, feed the runner, publish events.

    python examples/aws_controller.py --fake                     # the shipped EC2 fake, CI
    python examples/aws_controller.py --region us-east-1 \\
        --launch-template gpu-node --instance-type g5.xlarge --subnet subnet-0abc \\
        --record saw.jsonl                                       # live: needs AWS credentials
    lifecycle replay saw.jsonl                                   # the same events, again

Live, it launches ``--pods`` instances with an instant fleet, polls every ``--interval``
seconds for ``--ticks`` rounds, then terminates them. With ``--fake`` the run is scripted:
instances boot, pass their status checks, one status read is throttled (which changes
nothing), and a spot instance is reclaimed.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

from lifecycle import MemoryStore, ObjectRef, Runner, Transition
from lifecycle.adapters import Tracked
from lifecycle.adapters.aws import AwsAdapter, FleetSpec
from lifecycle.adapters.recording import TraceFileRecorder
from lifecycle.machines.pod import CreateRequested, DeletionRequested, ProvisionErrored
from lifecycle.testing.fakes import FakeEC2


class PrintEmitter:
    """Publishes events by printing them (a real host would post Kubernetes Events)."""

    def emit(self, t: Transition) -> None:
        print(f"{t.type.value:<7} {t.ref}: {t.flip}  {t.message}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fake", action="store_true", help="use the shipped EC2 fake")
    parser.add_argument("--region", default="us-east-1")
    parser.add_argument("--launch-template", default="gpu-node")
    parser.add_argument("--instance-type", action="append", default=[])
    parser.add_argument("--subnet", action="append", default=[])
    parser.add_argument("--spot", action="store_true")
    parser.add_argument("--pods", type=int, default=2)
    parser.add_argument("--ticks", type=int, default=5)
    parser.add_argument("--interval", type=float, default=None, help="seconds between polls")
    parser.add_argument("--record", help="append every observation to this trace file")
    args = parser.parse_args(argv)
    interval = args.interval if args.interval is not None else (0.0 if args.fake else 10.0)
    if not args.fake and not (args.instance_type and args.subnet):
        parser.error("live runs need --instance-type and --subnet (or use --fake)")

    ec2 = FakeEC2(args.region) if args.fake else None
    recorder = TraceFileRecorder(args.record, comment="aws_controller") if args.record else None
    runner = Runner(MemoryStore(), [PrintEmitter()])
    factory = (lambda region: ec2) if ec2 is not None else None
    adapter = AwsAdapter(client_factory=factory, recorder=recorder)
    spec = FleetSpec(
        region=args.region,
        instance_types=tuple(args.instance_type or ["g5.xlarge", "g6.xlarge"]),
        subnet_ids=tuple(args.subnet or ["subnet-a", "subnet-b"]),
        launch_template_name=args.launch_template,
        capacity_type="spot" if args.spot or args.fake else "on-demand",
    )

    def feed(ref: ObjectRef, obs: Any, *, host: bool = False) -> None:
        if host and recorder is not None:
            recorder.record(ref, obs)  # the adapter records its own observations
        runner.observe(ref, obs)

    pods = [ObjectRef("Pod", "demo", f"trainer-{i}", f"ec2-{i}") for i in range(args.pods)]
    tracked: dict[ObjectRef, Tracked[FleetSpec]] = {}
    for ref in pods:
        feed(ref, CreateRequested(at=adapter.clock(), pool="gpu", provider=adapter.name), host=True)
        outcome = adapter.provision(ref, spec)
        feed(ref, outcome)
        if not isinstance(outcome, ProvisionErrored):
            tracked[ref] = Tracked.provisioned(spec, outcome)
    for tick in range(args.ticks):
        if ec2 is not None:
            script(ec2, tick, [p.instance_id for p in tracked.values()])
        for ref, obs in adapter.observe(tracked).items():
            feed(ref, obs)
        time.sleep(interval)
    for ref, pod in tracked.items():
        feed(ref, DeletionRequested(at=adapter.clock()), host=True)
        feed(ref, adapter.terminate(ref, pod))
    if recorder is not None:
        recorder.close()
    return 0


def script(ec2: FakeEC2, tick: int, ids: list[str]) -> None:
    """What happens on EC2 in the ``--fake`` run."""
    live = [i for i in ids if i]
    if tick == 1:
        for iid in live:
            ec2.set_state(iid, "running")  # status checks still initializing
    if tick == 2:
        for iid in live:
            ec2.boot(iid)
    if tick == 3:
        ec2.fail("describe_instance_status", "RequestLimitExceeded", "Request limit exceeded.")
    if tick == 4 and live:
        ec2.reclaim(live[-1])


if __name__ == "__main__":
    sys.exit(main())
