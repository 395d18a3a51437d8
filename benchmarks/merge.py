"""Some suites' rows merged into a full run's ``latest.json`` (``run.py --only ... --merge``).

A partial run replaces the rows its suites produced, keeps every other suite's rows as they
were, and drops the rows its suites wrote before but no longer produce (a renamed or retired
row must not outlive its suite). The file's ``environment`` stays the full run's; the partial
run is recorded beside it under ``environment.partial_runs`` (when, which suites, the load
average, the seconds each took, the rows it dropped, and why, when given).

Each row names its suite (``"suite"``, since the rows were tagged at write time); a row of an
older file without that key is attributed by the name prefixes of :data:`LEGACY`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .fair import Metric

#: the name prefixes of the rows a suite wrote before rows carried ``"suite"`` (the suites of
#: issue 37, whose rows were renamed; a row no prefix claims is never dropped, only replaced)
LEGACY: dict[str, tuple[str, ...]] = {
    "cycle": ("cycle_",),
    "peers": ("peer_",),
    "pg_replicas": ("pg_replicas_", "pg_dispatch_"),
    "pg_commit": (
        "pg_change_wall_",
        "pg_change_client_cpu_",
        "pg_change_server_cpu_",
        "pg_change_round_trips_1s",
        "pg_page_round_trips",
        "pg_claim_",
    ),
    "cached_poll": ("poll_unchanged_",),
}


class MergeError(ValueError):
    """The partial run cannot go into that file (a quick run into a full one, or the reverse)."""


def suite_of(name: str, row: Metric) -> str | None:
    """The suite that wrote ``row``: its ``"suite"``, else the legacy prefix's."""
    suite = row.get("suite")
    if isinstance(suite, str):
        return suite
    for candidate, prefixes in LEGACY.items():
        if name.startswith(prefixes):
            return candidate
    return None


def merge(
    old: dict[str, Any], new: dict[str, Any], suites: Iterable[str], why: str = ""
) -> dict[str, Any]:
    """``old`` (a run's file) with ``new``'s rows for ``suites`` (a run of those suites only).

    Rows ``new`` produced replace the old ones in place (new names go at the end); old rows of
    ``suites`` that ``new`` did not produce are dropped; every other row is kept unchanged.

    Raises:
        MergeError: one run is ``--quick`` and the other is not.
    """
    ran = sorted(set(suites))
    old_env, new_env = old["environment"], new["environment"]
    if bool(old_env.get("quick")) != bool(new_env.get("quick")):
        kinds = {True: "a --quick run", False: "a full run"}
        raise MergeError(
            f"cannot merge {kinds[bool(new_env.get('quick'))]} into the file of "
            f"{kinds[bool(old_env.get('quick'))]}"
        )
    produced: dict[str, Metric] = new["metrics"]
    metrics: dict[str, Metric] = {}
    dropped: list[str] = []
    for name, row in old["metrics"].items():
        if name in produced:
            metrics[name] = produced[name]
        elif suite_of(name, row) in ran:
            dropped.append(name)
        else:
            metrics[name] = row
    for name, row in produced.items():
        metrics.setdefault(name, row)
    partial: dict[str, Any] = {
        "when": new_env["when"],
        "suites": ran,
        "load_average": new_env.get("load_average"),
        "seconds": new_env.get("seconds", {}),
    }
    if dropped:
        partial["dropped"] = dropped
    if why:
        partial["why"] = why
    env = dict(old_env)
    env["partial_runs"] = [*old_env.get("partial_runs", []), partial]
    return {"environment": env, "metrics": metrics}
