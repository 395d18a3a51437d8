"""Some suites' rows merged into a full run's ``latest.json`` (``benchmarks.run --merge``), and
a row's reason (``benchmarks.fair.explain``). No benchmark runs here: the runs are made up."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from benchmarks import run as bench_run
from benchmarks.fair import explain, metric
from benchmarks.merge import MergeError, merge, suite_of


def _row(ratio: float, suite: str | None = None, target: str = "info") -> dict[str, Any]:
    row: dict[str, Any] = {"ratio": ratio, "range": [ratio, ratio], "target": target}
    if suite is not None:
        row["suite"] = suite
    return row


def _run(when: str, metrics: dict[str, Any], quick: bool = False, **env: Any) -> dict[str, Any]:
    return {
        "environment": {"when": when, "quick": quick, "load_average": [1.0, 2.0, 3.0], **env},
        "metrics": metrics,
    }


OLD = _run(
    "2026-12-01T00:00:00+00:00",
    {
        "apply_vs_handwritten": _row(1.1, "apply"),
        "cycle_sqlite_many_vs_floor_sqlite_full_wall": _row(7.0, "cycle"),
        "cycle_postgres_round_trips": _row(1.0, "cycle"),
        "pg_change_wall_vs_insert_floor": _row(4.0, "pg_commit"),
        "telemetry_off_vs_plain": _row(0.98, "telemetry"),
    },
    seconds={"apply": 1.0, "cycle": 2.0},
    partial_runs=[{"when": "2026-12-01T01:00:00+00:00", "suites": ["peers"]}],
)


def test_a_partial_run_replaces_its_suites_rows_and_keeps_every_other() -> None:
    new = _run(
        "2026-12-06T00:00:00+00:00",
        {
            "cycle_sqlite_many_vs_floor_sqlite_full_wall": _row(2.5, "cycle"),
            "cycle_postgres_round_trips_per_page": _row(0.05, "cycle"),
        },
        seconds={"cycle": 12.5},
        load_average=[4.0, 5.0, 6.0],
    )
    merged = merge(OLD, new, ["cycle"], why="the cycle rows")
    assert list(merged["metrics"]) == [
        "apply_vs_handwritten",
        "cycle_sqlite_many_vs_floor_sqlite_full_wall",  # replaced where it was
        "pg_change_wall_vs_insert_floor",
        "telemetry_off_vs_plain",
        "cycle_postgres_round_trips_per_page",  # new: at the end
    ]
    assert merged["metrics"]["cycle_sqlite_many_vs_floor_sqlite_full_wall"]["ratio"] == 2.5
    for kept in ("apply_vs_handwritten", "pg_change_wall_vs_insert_floor"):
        assert merged["metrics"][kept] == OLD["metrics"][kept]
    env = merged["environment"]
    assert env["when"] == OLD["environment"]["when"]  # still the full run's environment
    assert env["seconds"] == {"apply": 1.0, "cycle": 2.0}
    assert env["partial_runs"][:-1] == OLD["environment"]["partial_runs"]
    assert env["partial_runs"][-1] == {
        "when": "2026-12-06T00:00:00+00:00",
        "suites": ["cycle"],
        "load_average": [4.0, 5.0, 6.0],
        "seconds": {"cycle": 12.5},
        "dropped": ["cycle_postgres_round_trips"],  # the suite no longer produces it
        "why": "the cycle rows",
    }
    assert "cycle_postgres_round_trips" in OLD["metrics"]  # the old file is not changed


def test_rows_of_an_older_file_without_their_suite_are_attributed_by_prefix() -> None:
    old = _run(
        "2026-12-01T00:00:00+00:00",
        {
            "cycle_growth_memory_loop": _row(0.7),
            "peer_transitions_vs_observe": _row(1.2),
            "pg_change_wall_vs_insert_floor": _row(4.0),
            "pg_change_cpu_notify_on_vs_off": _row(1.05),  # pg_notify's, not pg_commit's
            "pg_dispatch_4_vs_1": _row(1.0),
            "hot_scaling_100k_vs_1k": _row(1.2),
        },
    )
    assert suite_of("cycle_growth_memory_loop", old["metrics"]["cycle_growth_memory_loop"]) == (
        "cycle"
    )
    assert suite_of("pg_change_cpu_notify_on_vs_off", _row(1.0)) is None
    assert suite_of("pg_change_cpu_notify_on_vs_off", _row(1.0, "pg_notify")) == "pg_notify"
    new = _run(
        "2026-12-06T00:00:00+00:00",
        {
            "cycle_growth_memory_many": _row(1.1, "cycle"),
            "pg_change_client_cpu_vs_insert_floor": _row(5.0, "pg_commit"),
        },
    )
    merged = merge(old, new, ["cycle", "pg_commit"])
    assert set(merged["metrics"]) == {
        "peer_transitions_vs_observe",
        "pg_change_cpu_notify_on_vs_off",
        "pg_dispatch_4_vs_1",
        "hot_scaling_100k_vs_1k",
        "cycle_growth_memory_many",
        "pg_change_client_cpu_vs_insert_floor",
    }
    assert merged["environment"]["partial_runs"] == [
        {
            "when": "2026-12-06T00:00:00+00:00",
            "suites": ["cycle", "pg_commit"],
            "load_average": [1.0, 2.0, 3.0],
            "seconds": {},
            "dropped": ["cycle_growth_memory_loop", "pg_change_wall_vs_insert_floor"],
        }
    ]


@pytest.mark.parametrize("old_quick", [True, False])
def test_a_quick_run_and_a_full_run_do_not_merge(old_quick: bool) -> None:
    old = _run("2026-12-01T00:00:00+00:00", {"x": _row(1.0, "cycle")}, quick=old_quick)
    new = _run("2026-12-06T00:00:00+00:00", {"x": _row(2.0, "cycle")}, quick=not old_quick)
    with pytest.raises(MergeError, match="cannot merge"):
        merge(old, new, ["cycle"])


def test_the_command_merges_into_the_file_and_tags_each_row_with_its_suite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "latest.json"
    out.write_text(json.dumps(OLD), encoding="utf-8")
    monkeypatch.setattr(
        bench_run,
        "SUITES",
        {
            "apply": lambda quick: pytest.fail("a suite not asked for ran"),
            "cycle": lambda quick: {"cycle_new": metric([3.5, 4.5], "<= 3", what="made up")},
        },
    )
    assert bench_run.main(["--only", "cycle", "--merge", "--why", "test", "--out", str(out)]) == 0
    assert "unmet, without a reason: cycle_new" in capsys.readouterr().err
    written = json.loads(out.read_text(encoding="utf-8"))
    assert written["metrics"]["cycle_new"]["suite"] == "cycle"
    assert written["metrics"]["cycle_new"]["met"] is False
    assert "cycle_sqlite_many_vs_floor_sqlite_full_wall" not in written["metrics"]
    assert written["metrics"]["apply_vs_handwritten"] == OLD["metrics"]["apply_vs_handwritten"]
    last = written["environment"]["partial_runs"][-1]
    assert last["suites"] == ["cycle"]
    assert last["why"] == "test"
    assert set(last["seconds"]) == {"cycle"}
    assert last["dropped"] == [
        "cycle_sqlite_many_vs_floor_sqlite_full_wall",
        "cycle_postgres_round_trips",
    ]


def test_the_command_refuses_a_merge_without_suites_or_of_a_quick_run_into_a_full_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "latest.json"
    out.write_text(json.dumps(OLD), encoding="utf-8")
    monkeypatch.setattr(
        bench_run, "SUITES", {"cycle": lambda quick: pytest.fail("the suite ran before refusing")}
    )
    with pytest.raises(SystemExit):
        bench_run.main(["--merge", "--out", str(out)])
    assert "--merge needs --only" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench_run.main(["--quick", "--only", "cycle", "--merge", "--out", str(out)])
    assert "not a --quick run's file" in capsys.readouterr().err
    assert json.loads(out.read_text(encoding="utf-8")) == OLD


def test_a_row_that_misses_its_target_carries_its_reason_and_says_whether_it_was_measured() -> None:
    unmet = explain(metric([4.0, 5.0, 6.0], "<= 3"), "building the observations is 4x")
    assert unmet["reason"] == "building the observations is 4x"
    assert unmet["reason_measured"] is True
    static = explain(metric([4.0], "<= 3"), "the server's lock", measured=False)
    assert static["reason"].startswith("(static, not measured in this run) ")
    assert static["reason_measured"] is False
    met = explain(metric([2.0], "<= 3"), "not needed")
    info = explain(metric([9.0], "info"), "not needed")
    assert "reason" not in met
    assert "reason" not in info
    assert bench_run.unexplained({"a": unmet, "b": metric([4.0], "<= 3"), "c": met, "d": info}) == [
        "b"
    ]
