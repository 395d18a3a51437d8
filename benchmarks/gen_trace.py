"""Generate a large Pod trace for the replay benchmark (nothing large is committed).

    python -m benchmarks.gen_trace OUT.jsonl --observations 1000000

Each pod walks: CreateRequested, ProvisionSucceeded, InstancePending, then InstanceRunning polls
(repeats emit nothing), an occasional InstanceUnknown, and finally TerminateSucceeded; pods
are interleaved so the store holds many live objects at once.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

EPOCH = datetime(2026, 11, 30, 0, 0, tzinfo=UTC)
PER_POD = 20
LIVE = 1000  # pods in flight at once


def _walk(i: int, per_pod: int = PER_POD) -> list[tuple[str, dict[str, object]]]:
    iid = f"i-{i:08x}"
    steps: list[tuple[str, dict[str, object]]] = [
        ("CreateRequested", {"pool": "gpu", "provider": "aws"}),
        ("ProvisionSucceeded", {"reserved": True, "instance_id": iid, "endpoint": "10.0.0.1"}),
        ("InstancePending", {"instance_id": iid}),
    ]
    for k in range(per_pod - 4):
        if k % 7 == 6:
            steps.append(("InstanceUnknown", {"error": "List: throttled"}))
        else:
            steps.append(("InstanceRunning", {"instance_id": iid, "endpoint": "10.0.0.1"}))
    steps.append(("TerminateSucceeded", {}))
    return steps


def lines(observations: int, *, per_pod: int = PER_POD, live: int = LIVE) -> Iterator[str]:
    """The trace's lines. ``per_pod=5``: a trace with events all along (create, provision,
    pending, running, terminated: every line a flip); ``live``: pods in flight at once."""
    pods = max(1, observations // per_pod)
    written = 0
    for start in range(0, pods, live):
        batch = range(start, min(pods, start + live))
        walks = {i: _walk(i, per_pod) for i in batch}
        for step in range(per_pod):
            for i in batch:
                if written >= observations:
                    return
                name, fields = walks[i][step]
                at = EPOCH + timedelta(seconds=start // live * per_pod * 15 + step * 15)
                obj = {"namespace": "bench", "name": f"pod-{i}", "uid": f"u{i:08d}"}
                record = {"at": at.isoformat().replace("+00:00", "Z"), "machine": "pod",
                          "object": obj, "observe": name, "with": fields}  # fmt: skip
                yield json.dumps(record, separators=(",", ":"))
                written += 1


def write(path: str, observations: int, *, per_pod: int = PER_POD, live: int = LIVE) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for line in lines(observations, per_pod=per_pod, live=live):
            f.write(line + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out")
    parser.add_argument("--observations", type=int, default=1_000_000)
    args = parser.parse_args()
    write(args.out, args.observations)


if __name__ == "__main__":
    main()
