"""Start-up cost: ``import lifecycle`` (and what a host and the CLI import) as a ratio to
``python -c pass`` (issue 24; goal <= 5x for ``import lifecycle``; issue 35: <= 4x for a host's
first real import, ``from lifecycle import ObjectRef, Runner, SQLiteStore``, ADR 0139).

    python -m benchmarks.import_time [--rounds N] [--src DIR] [--against DIR]

Each contender is a fresh interpreter, timed on the wall clock from spawn to exit. Runs are
interleaved: every round runs the floor and each contender once, in a balanced order that
changes from round to round (``benchmarks.fair.order``), and each ratio is taken within its
round (contender / that round's floor), so a machine that slows down slows both sides. A row is
the ratio's median over the rounds, with its range. Each row's ``cpu`` gives the same ratio on
the children's CPU time (user + system, from ``getrusage``): on a loaded machine the wall clock
also counts the time a fresh interpreter waits for a core, the CPU time does not. ``--src``
measures another checkout's ``src`` (the figures before a change: ``--src ../main/src``); by
default this checkout's. ``--against DIR`` runs a host's first import from another checkout's
``src`` in the same rounds and adds the row ``startup_import_host_vs_against``: this checkout's
import ÷ that one's, round by round (a change's effect, measured side by side).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from .fair import Metric, order

ROOT = Path(__file__).resolve().parent.parent

#: name -> (the interpreter's arguments, what the row measures, its target ratio or None)
CONTENDERS: dict[str, tuple[tuple[str, ...], str, float | None]] = {
    "import_lifecycle": (("-c", "import lifecycle"), "import lifecycle", 5.0),
    "import_host": (
        ("-c", "from lifecycle import ObjectRef, Runner, SQLiteStore"),
        "from lifecycle import ObjectRef, Runner, SQLiteStore (what a host starts with)",
        4.0,
    ),
    # what the host's import cannot go below while its records are attrs classes (ADR 0139)
    "import_attrs": (("-c", "import attrs"), "import attrs (a dependency, for reference)", None),
    "cli_help": (("-m", "lifecycle.cli", "--help"), "lifecycle --help", None),
    "cli_table": (
        ("-m", "lifecycle.cli", "table", "pod"),
        "lifecycle table pod (one machine)",
        None,
    ),
}
FLOOR = ("-c", "pass")


def _env(src: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "LIFECYCLE"))}
    env["PYTHONPATH"] = str(src)  # this checkout wins over an editable install elsewhere
    return env


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _once(args: tuple[str, ...], env: dict[str, str]) -> tuple[float, float]:
    """The wall time and the CPU time of one fresh interpreter running ``args``."""
    cpu, start = _children_cpu(), time.perf_counter()
    subprocess.run(
        [sys.executable, *args], env=env, stdout=subprocess.DEVNULL, check=True, cwd=ROOT
    )
    return time.perf_counter() - start, _children_cpu() - cpu


def measure(
    rounds: int, src: Path = ROOT / "src", against: Path | None = None
) -> dict[str, Metric]:
    env = _env(src)
    names = list(CONTENDERS)
    runs = {"floor": (FLOOR, env), **{name: (CONTENDERS[name][0], env) for name in names}}
    if against is not None:
        runs["against"] = (CONTENDERS["import_host"][0], _env(against))
    for args, run_env in runs.values():  # warm the file cache and the bytecode, untimed
        _once(args, run_env)
    ratios: dict[str, list[float]] = {name: [] for name in runs}
    cpu_ratios: dict[str, list[float]] = {name: [] for name in runs}
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    for n in range(rounds):
        took = {name: _once(*runs[name]) for name in order(list(runs), n)}  # balanced order
        for name in runs:
            ratios[name].append(took[name][0] / took["floor"][0])
            cpu_ratios[name].append(took[name][1] / took["floor"][1])
        if against is not None:
            ratios["vs"] = [*ratios.get("vs", []), took["import_host"][0] / took["against"][0]]
            cpu_ratios["vs"] = [
                *cpu_ratios.get("vs", []),
                took["import_host"][1] / took["against"][1],
            ]
        for name, (wall, _) in took.items():
            seconds[name].append(wall)
    floor_ms = statistics.median(seconds["floor"]) * 1000
    out: dict[str, Metric] = {}
    for name in names:
        _, what, target = CONTENDERS[name]
        values = ratios[name]
        median = statistics.median(values)
        cpu = cpu_ratios[name]
        out[f"startup_{name}"] = {
            "ratio": median,
            "range": [min(values), max(values)],
            "target": f"<= {target:g}x" if target is not None else "-",
            "met": (median <= target) if target is not None else None,
            "what": f"{what} ÷ python -c pass; wall time of a fresh interpreter, "
            f"{rounds} interleaved rounds",
            "ours": statistics.median(seconds[name]) * 1000,
            "baseline": floor_ms,
            "unit": "ms",
            "note": f"cpu {statistics.median(cpu):.2f} [{min(cpu):.2f}, {max(cpu):.2f}]: the "
            "same ratio on the children's CPU time (user + system)",
        }
    if against is not None:
        values, cpu = ratios["vs"], cpu_ratios["vs"]
        out["startup_import_host_vs_against"] = {
            "ratio": statistics.median(values),
            "range": [min(values), max(values)],
            "target": "-",
            "met": None,
            "what": f"a host's first import from {src} ÷ the same from {against}; wall time, "
            f"{rounds} interleaved rounds",
            "ours": statistics.median(seconds["import_host"]) * 1000,
            "baseline": statistics.median(seconds["against"]) * 1000,
            "unit": "ms",
            "note": f"cpu {statistics.median(cpu):.2f} [{min(cpu):.2f}, {max(cpu):.2f}]; "
            f"{against} ÷ python -c pass: wall {statistics.median(ratios['against']):.2f}, "
            f"cpu {statistics.median(cpu_ratios['against']):.2f}",
        }
    return out


def suite(quick: bool) -> dict[str, Metric]:
    return measure(8 if quick else 40)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=40, help="interleaved rounds (40)")
    parser.add_argument(
        "--src", type=Path, default=ROOT / "src", help="the src folder to measure (this one's)"
    )
    parser.add_argument(
        "--against", type=Path, help="another src folder: its host import, in the same rounds"
    )
    args = parser.parse_args(argv)
    against = args.against.resolve() if args.against else None
    for name, m in measure(args.rounds, args.src.resolve(), against).items():
        lo, hi = m["range"]
        print(
            f"{name:<26} {m['ratio']:6.2f}x  [{lo:.2f}, {hi:.2f}]  {m['ours']:7.1f} ms "
            f"({'against' if name.endswith('_vs_against') else 'python -c pass'} "
            f"{m['baseline']:.1f} ms)  target {m['target']}  {m['note']}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
