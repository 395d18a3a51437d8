"""``lifecycle replay`` against its physical floor: CPU per line, and peak memory by length.

    python -m benchmarks.replay_floor                       # 100k lines, 5 rounds, RSS at 100k/1M
    python -m benchmarks.replay_floor --lines 20000 --rounds 3 --rss 20000,100000   # quick
    python -m benchmarks.replay_floor --rss 100000,1000000,3000000 --json out.json

- **parse floor**: reading the trace file and ``orjson.loads`` of every line, nothing else --
  what any replay of a JSON Lines trace must do before it decides anything.
- **replay**: the whole command, ``lifecycle.cli.main(["replay", TRACE, "--store",
  "memory://", ...])`` run in this process, once with ``--format jsonl`` and once with the
  default table, output to ``/dev/null``.
- Both are timed as CPU (``time.process_time``) in one process, alternating floor, jsonl,
  floor, table, floor, ...; each replay is divided by the mean of the floors measured just
  before and after it, and the median and range of that ratio over rounds reported (the
  machine's load drifts; neighbours in time share it).
- **peak RSS**: the command in a fresh interpreter, its peak resident set (``VmHWM`` of
  ``/proc/self/status`` as it exits; Linux), at each ``--rss`` length, for two traces:
  ``benchmarks.gen_trace`` (a new pod every 20 lines: the store grows with the trace), and
  ``polls`` (the same 1 000 pods polled on and on: a fixed store, so any growth is the
  replay's own).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from . import gen_trace

EPOCH = datetime(2026, 11, 30, 0, 0, tzinfo=UTC)


def poll_lines(observations: int, pods: int = 1000) -> Iterator[str]:
    """A trace of a fixed population: ``pods`` pods start, then are polled until
    ``observations`` lines are written: running, every fourth poll pending (a demotion and,
    next poll, a recovery: events all along), now and then unknown. The store holds
    ``2 * pods`` objects however long the trace is."""
    start = ("CreateRequested", "ProvisionSucceeded", "InstancePending")
    written = step = 0
    while True:
        at = (EPOCH + timedelta(seconds=15 * step)).isoformat().replace("+00:00", "Z")
        for i in range(pods):
            if written >= observations:
                return
            iid = f"i-{i:08x}"
            fields: dict[str, object]
            if step < len(start):
                name = start[step]
                fields = {"instance_id": iid} if step else {"pool": "gpu", "provider": "aws"}
                if step == 1:
                    fields["reserved"] = True
            elif step % 4 == 3:
                name, fields = "InstancePending", {"instance_id": iid}
            elif step % 8 == 6:
                name, fields = "InstanceUnknown", {"error": "List: throttled"}
            else:
                name, fields = "InstanceRunning", {"instance_id": iid, "endpoint": "10.0.0.1"}
            obj = {"namespace": "bench", "name": f"pod-{i}", "uid": f"p{i:08d}"}
            record = {"at": at, "machine": "pod", "object": obj, "observe": name, "with": fields}
            yield json.dumps(record, separators=(",", ":"))
            written += 1
        step += 1


def write_trace(path: Path, lines: int, kind: str) -> None:
    """``kind``: ``gen_trace`` (a growing population) or ``polls`` (a fixed one)."""
    if kind == "gen_trace":
        gen_trace.write(str(path), lines)
        return
    with open(path, "w", encoding="utf-8") as f:
        for line in poll_lines(lines):
            f.write(line + "\n")


def parse_floor(trace: Path) -> Callable[[], None]:
    def run() -> None:
        loads = orjson.loads
        with open(trace, "rb") as f:
            for line in f:
                loads(line)

    return run


def replay_command(trace: Path, fmt: str) -> Callable[[], None]:
    from lifecycle.cli import main

    argv = ["replay", str(trace), "--store", "memory://", "--format", fmt]

    def run() -> None:
        with open(os.devnull, "w", encoding="utf-8") as sink:
            code = main(argv, out=sink)
        if code != 0:
            raise SystemExit(f"replay exited {code}")

    return run


def cpu_rounds(trace: Path, lines: int, rounds: int) -> dict[str, Any]:
    """CPU µs per line of the floor and of both formats, and their ratios. Each round runs
    floor, jsonl, floor, table, floor: a replay is compared with the mean of the floors
    measured just before and just after it (the machine's load drifts over seconds), and
    each floor measurement reads the file three times (it is short)."""
    floor = parse_floor(trace)
    replays = {"jsonl": replay_command(trace, "jsonl"), "table": replay_command(trace, "table")}

    def timed(run: Callable[[], None], times: int = 1) -> float:
        start = time.process_time()
        for _ in range(times):
            run()
        return (time.process_time() - start) / times / lines * 1e6

    for run in (floor, *replays.values()):  # warm-up: imports, caches, compiled builders
        run()
    times: dict[str, list[float]] = {"floor": [], "jsonl": [], "table": []}
    ratios: dict[str, list[float]] = {"jsonl": [], "table": []}
    for _ in range(rounds):
        before = timed(floor, 3)
        times["floor"].append(before)
        for name, run in replays.items():
            spent = timed(run)
            after = timed(floor, 3)
            times[name].append(spent)
            times["floor"].append(after)
            ratios[name].append(spent / ((before + after) / 2))
            before = after
    out: dict[str, Any] = {"us_per_line": times}
    for name, ratio in ratios.items():
        out[f"{name}_vs_floor"] = {
            "median": statistics.median(ratio),
            "min": min(ratio),
            "max": max(ratio),
        }
    return out


#: Runs the CLI, then prints the process's peak resident set (kB) as stderr's last line.
MEASURE = (
    "import sys\n"
    "from lifecycle.cli import main\n"
    "code = main(sys.argv[1:])\n"
    "with open('/proc/self/status') as f:\n"
    "    peak = next(line for line in f if line.startswith('VmHWM:'))\n"
    "print(peak.split()[1], file=sys.stderr)\n"
    "raise SystemExit(code)\n"
)


def peak_rss_mib(trace: Path, fmt: str) -> float:
    """Peak resident set of ``lifecycle replay`` in a fresh interpreter, in MiB, as the
    process sees it at exit (``VmHWM``; the parent's ``wait4`` figure would include the
    parent's own memory, copied into the child before it started Python)."""
    cmd = [sys.executable, "-c", MEASURE, "replay", str(trace), "--format", fmt]
    with open(os.devnull, "wb") as sink:
        proc = subprocess.run(cmd, stdout=sink, stderr=subprocess.PIPE, check=False)
    err = proc.stderr.decode()
    if proc.returncode != 0:
        raise SystemExit(f"replay of {trace} exited {proc.returncode}: {err}")
    return int(err.splitlines()[-1]) / 1024  # kB


def rss_by_length(tmp: Path, lengths: list[int]) -> list[dict[str, Any]]:
    rows = []
    for kind in ("gen_trace", "polls"):
        for n in lengths:
            path = tmp / f"{kind}-{n}.jsonl"
            write_trace(path, n, kind)
            for fmt in ("jsonl", "table"):
                rows.append(
                    {"trace": kind, "lines": n, "format": fmt, "mib": peak_rss_mib(path, fmt)}
                )
            path.unlink()
    return rows


def run(lines: int, rounds: int, lengths: list[int]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="lifecycle-replay-floor-") as name:
        tmp = Path(name)
        trace = tmp / "trace.jsonl"
        gen_trace.write(str(trace), lines)
        cpu = cpu_rounds(trace, lines, rounds)
        trace.unlink()
        rss = rss_by_length(tmp, lengths)
    return {
        "command": " ".join(["python -m benchmarks.replay_floor", *sys.argv[1:]]),
        "lines": lines,
        "rounds": rounds,
        "cpu": cpu,
        "peak_rss": rss,
    }


def report(result: dict[str, Any]) -> str:
    cpu = result["cpu"]
    per = cpu["us_per_line"]
    out = [f"$ {result['command']}", f"CPU per line ({result['lines']} lines, gen_trace):"]
    for name in ("floor", "jsonl", "table"):
        values = per[name]
        out.append(
            f"  {name:<6} median {statistics.median(values):6.2f} µs "
            f"(range {min(values):.2f}-{max(values):.2f})"
        )
    for fmt in ("jsonl", "table"):
        r = cpu[f"{fmt}_vs_floor"]
        out.append(
            f"  replay {fmt} ÷ parse floor: median {r['median']:.1f}x "
            f"(range {r['min']:.1f}-{r['max']:.1f}; target ≤ 6)"
        )
    out.append("peak RSS (MiB; target ≤ 160 at any length):")
    for row in result["peak_rss"]:
        out.append(
            f"  {row['trace']:<9} {row['lines']:>9} lines  {row['format']:<5} {row['mib']:7.1f}"
        )
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=100_000, help="lines of the CPU trace")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--rss", default="100000,1000000", help="comma-separated trace lengths for peak RSS"
    )
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    lengths = [int(n) for n in args.rss.split(",") if n]
    result = run(args.lines, args.rounds, lengths)
    print(report(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
