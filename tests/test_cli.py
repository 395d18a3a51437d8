"""The ``lifecycle`` command: replay (formats, stores, final statuses), bad input, machines."""

from __future__ import annotations

import io
import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lifecycle import default_registry
from lifecycle.cli import main

TRACES = Path(__file__).resolve().parent.parent / "examples" / "traces"
DEMO = TRACES / "demo.jsonl"
HAPPY = TRACES / "happy-path.jsonl"
FAULTS = TRACES / "faults.jsonl"
FALLBACKS = TRACES / "certification-fallback-then-transition.jsonl"

EVENT_KEYS = {"at", "machine", "namespace", "name", "uid", "type", "reason", "from", "to"}
EVENT_KEYS |= {"message", "version", "id"}


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


def jsonl(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


# -- replay -----------------------------------------------------------------------------------
def test_replay_table_is_the_default() -> None:
    code, text = run("replay", str(DEMO))
    assert code == 0
    lines = text.splitlines()
    assert lines[0] == f"replaying {DEMO} (10 lines) into memory://"
    assert "Pod/ml/trainer-0" in lines[1]
    assert "∅ → Provisioning" in lines[1]
    assert "Normal" in lines[1]
    assert any("Warning" in ln and "ProvisionFailed" in ln for ln in lines)
    # 14: the first poll adds Ready=False to the booting pod (a flip of its signature)
    assert lines[-1] == "10 observations, 14 events, 0 failed writes"


def test_replay_table_marks_fallbacks_as_not_written() -> None:
    code, text = run("replay", str(FALLBACKS))
    assert code == 0
    fallbacks = [ln for ln in text.splitlines() if "StatusUpdateFailed" in ln]
    assert len(fallbacks) == 3  # upstream's three declared fallback rows
    assert all("∅ → Failed" in ln and ln.endswith("  (not written)") for ln in fallbacks)
    assert text.splitlines()[-1].endswith(", 3 failed writes")
    # a Pod's lost Warning write sends no fallback: the next poll redoes it
    code, text = run("replay", str(FAULTS))
    assert code == 0
    assert "StatusUpdateFailed" not in text
    assert text.splitlines()[-1].endswith(", 2 failed writes")


def test_replay_jsonl_lines_carry_every_field() -> None:
    code, text = run("replay", str(DEMO), "--format", "jsonl")
    assert code == 0
    events = jsonl(text)
    assert len(events) == 14
    for e in events:
        assert set(e) >= EVENT_KEYS
        assert e["id"] == f"{e['uid']}:{e['version']}:0"
    first = events[0]
    assert {k: first[k] for k in EVENT_KEYS} == {
        "at": "2026-11-30T10:00:00+00:00",
        "machine": "pod",
        "namespace": "ml",
        "name": "trainer-0",
        "uid": "pod-a",
        "type": "Normal",
        "reason": "Provisioning",
        "from": "",
        "to": "Provisioning",
        "message": "allocating external instance",
        "version": 1,
        "id": "pod-a:1:0",
    }


def test_replay_final_status() -> None:
    code, text = run("replay", str(DEMO), "--format", "jsonl", "--final-status")
    assert code == 0
    lines = jsonl(text)
    finals = [d for d in lines if d.get("final")]
    assert [d for d in lines if not d.get("final")] == lines[: len(lines) - len(finals)]
    assert [(d["machine"], d["uid"], d["state"], d["version"]) for d in finals] == [
        ("pod", "pod-a", "Terminated", 6),
        ("nodeclaim", "pod-a-claim", "Deleted", 5),
        ("pod", "pod-b", "ProvisionFailed", 2),
        ("nodeclaim", "pod-b-claim", "Terminated", 2),
    ]
    for d in finals:
        assert set(d) == {
            "final",
            "machine",
            "namespace",
            "name",
            "uid",
            "state",
            "version",
            "status",
        }
        assert d["final"] is True
        assert d["status"]["state"] == d["state"]
    assert finals[0]["status"]["phase"] == "Succeeded"
    assert finals[1]["namespace"] == ""
    assert finals[1]["name"] == "ml-trainer-0"


def test_replay_final_status_in_table_format_follows_the_events() -> None:
    code, text = run("replay", str(HAPPY), "--final-status")
    assert code == 0
    lines = text.splitlines()
    finals = [json.loads(ln) for ln in lines if ln.startswith("{")]
    assert [d["state"] for d in finals] == ["Running", "Bound"]
    assert "failed writes" not in text


def test_logs_go_to_stderr_so_jsonl_stays_parseable(capsys: pytest.CaptureFixture[str]) -> None:
    code, text = run("replay", str(FALLBACKS), "--format", "jsonl")
    assert code == 0
    events = jsonl(text)  # every stdout line is JSON
    assert any(e["fallback"] for e in events)
    err = capsys.readouterr().err
    # The three injected write errors are logged once each: the dry run is silent.
    assert err.count("status write failed") == 3


def test_replay_into_sqlite_persists(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    code, _ = run("replay", str(DEMO), "--store", f"sqlite:///{db}")
    assert code == 0
    with sqlite3.connect(db) as conn:
        objects = dict(conn.execute("SELECT uid, state FROM objects").fetchall())
        (journal,) = conn.execute("SELECT count(*) FROM journal").fetchone()
        (outbox,) = conn.execute("SELECT count(*) FROM outbox").fetchone()
    assert objects == {
        "pod-a": "Terminated",
        "pod-a-claim": "Deleted",
        "pod-b": "ProvisionFailed",
        "pod-b-claim": "Terminated",
    }
    assert journal == 6 + 5 + 2 + 2
    assert outbox == 0  # everything was delivered
    # A second replay of the same trace continues from the stored statuses.
    code, text = run("replay", str(DEMO), "--store", f"sqlite:///{db}", "--format", "jsonl")
    assert code == 0
    assert text == ""  # every object is already where the trace leaves it


def test_relative_sqlite_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, _ = run("replay", str(HAPPY), "--store", "sqlite:///rel.db")
    assert code == 0
    assert (tmp_path / "rel.db").exists()


# -- bad input ----------------------------------------------------------------------------------
AT = "2026-11-30T10:00:00Z"
LATER = "2026-11-30T10:00:10Z"
OK = {"namespace": "ml", "name": "ok", "uid": "ok"}


def obs(name: str, fields: dict[str, Any] | None = None, /, **over: Any) -> str:
    data: dict[str, Any] = {"at": LATER, "machine": "pod", "object": OK, "observe": name}
    if fields is not None:
        data["with"] = fields
    data.update(over)
    return json.dumps(data)


def fault(kind: Any, **over: Any) -> str:
    data: dict[str, Any] = {"at": LATER, "machine": "pod", "object": OK, "fault": kind}
    data.update(over)
    return json.dumps(data)


GOOD_1 = json.dumps({"at": AT, "machine": "pod", "object": OK, "observe": "CreateRequested"})
GOOD_2 = json.dumps(
    {
        "at": "2026-11-30T10:00:01Z",
        "machine": "pod",
        "object": OK,
        "observe": "ProvisionSucceeded",
        "with": {"reserved": True, "instance_id": "fake-1"},
    }
)
PROVISION = {"reserved": True, "instance_id": "i-1"}

#: (id, line 3 of a trace whose lines 1-2 are valid, what the error must say)
BAD: list[tuple[str, str, str]] = [
    ("malformed-json", '{"at": "2026-11-30T10:00:10Z", "machine": ', "malformed JSON"),
    ("not-an-object", "[1, 2, 3]", "must be a JSON object"),
    ("unknown-machine", obs("PodAbsent", machine="spaceship"), "unknown machine 'spaceship'"),
    ("machine-not-a-string", obs("PodAbsent", machine=7), '"machine" must be a string'),
    ("unknown-observation", obs("InstanceExploded"), "unknown observation 'InstanceExploded'"),
    ("observe-not-a-string", obs("x", observe=["InstanceRunning"]), '"observe" must be a string'),
    ("wrong-type-bool", obs("InstanceRunning", {"readiness_confirmed": "yes"}), "true or false"),
    ("wrong-type-int", obs("InstanceFailed", {"exit_code": "1"}), "exit_code"),
    ("wrong-type-int-bool", obs("InstanceFailed", {"exit_code": True}), "exit_code"),
    ("wrong-type-str", obs("InstanceUnknown", {"error": 5}), "expected a string"),
    ("unknown-key", obs("InstanceAbsent", colour="blue"), "unknown key(s) colour"),
    ("unknown-field", obs("InstanceAbsent", {"zone": "a"}), "unknown field(s) zone"),
    ("with-not-an-object", obs("InstanceAbsent", with_=None), '"with" must be an object'),
    ("at-inside-with", obs("InstanceAbsent", {"at": LATER}), "'at' is given once"),
    ("missing-at", json.dumps({"machine": "pod", "object": OK, "observe": "X"}), 'missing "at"'),
    ("missing-object", obs("InstanceAbsent", object=None), 'missing "object"'),
    ("missing-observe", json.dumps({"at": LATER, "machine": "pod", "object": OK}), "missing"),
    ("missing-field", obs("InstanceUnknown", {}), "missing required field 'error'"),
    ("bad-time", obs("InstanceAbsent", at="yesterday"), "not an RFC 3339 timestamp"),
    ("naive-time", obs("InstanceAbsent", at="2026-11-30T10:00:10"), "no UTC offset"),
    ("time-not-a-string", obs("InstanceAbsent", at=1764496810), "RFC 3339"),
    ("time-backwards", obs("InstanceAbsent", at="2026-11-30T09:00:00Z"), "time goes backwards"),
    ("uid-with-colon", obs("InstanceAbsent", object={**OK, "uid": "a:b"}), 'must not contain ":"'),
    ("empty-uid", obs("InstanceAbsent", object={**OK, "uid": ""}), "must not be empty"),
    ("object-extra-key", obs("InstanceAbsent", object={**OK, "kind": "Pod"}), "unknown key(s)"),
    ("object-not-a-dict", obs("InstanceAbsent", object="ok"), '"object" must be an object'),
    ("uid-reused", obs("InstanceAbsent", object={**OK, "name": "other"}), "one uid must name"),
    ("bad-fault", fault("explode"), '"fault" must be one of conflict, write-error'),
    ("fault-times-zero", fault("conflict", times=0), '"times" must be a positive integer'),
    ("fault-times-negative", fault("conflict", times=-2), '"times" must be a positive integer'),
    ("fault-times-string", fault("conflict", times="2"), '"times" must be a positive integer'),
    ("fault-times-bool", fault("conflict", times=True), '"times" must be a positive integer'),
    ("fault-with-observe", fault("conflict", observe="InstanceAbsent"), 'has no "observe"'),
    ("times-on-observation", obs("InstanceAbsent", times=2), "fault lines only"),
    (
        "bad-phase",
        obs(
            "x",
            {"phase": "Exploded"},
            machine="nodeclaim",
            observe="ClaimAdopted",
            object={"name": "c", "uid": "c"},
        ),
        "not a NodeClaim phase",
    ),
    (
        "refused-by-the-table",
        obs("ProvisionSucceeded", PROVISION, object={"namespace": "ml", "name": "n", "uid": "n"}),
        "ProvisionSucceeded is not accepted in state",
    ),
]


def _fix(text: str) -> str:
    # "with" is a Python keyword; tests spell it with_ and the line is fixed here.
    data = json.loads(text) if text.startswith("{") and text.endswith("}") else None
    if data is not None and "with_" in data:
        data["with"] = data.pop("with_")
        return json.dumps(data)
    if data is not None and data.get("object", "") is None:
        del data["object"]
        return json.dumps(data)
    return text


def _trace(tmp_path: Path, third: str) -> Path:
    path = tmp_path / "bad.jsonl"
    path.write_text(f"{GOOD_1}\n{GOOD_2}\n{_fix(third)}\n", encoding="utf-8")
    return path


def _store_rows(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    with sqlite3.connect(db) as conn:
        return {
            table: conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2").fetchall()
            for table in ("lifecycle_meta", "objects", "journal", "outbox")
        }


@pytest.fixture
def prior_store(tmp_path: Path) -> Path:
    """An SQLite store that already holds a replayed trace (and undelivered outbox rows)."""
    db = tmp_path / "prior.db"
    assert run("replay", str(DEMO), "--store", f"sqlite:///{db}")[0] == 0
    with sqlite3.connect(db) as conn:  # leave something in the outbox too
        conn.execute("INSERT INTO outbox VALUES ('x:1:0', 'x', 1, 0, '{}', NULL, NULL)")
    return db


@pytest.mark.parametrize(("third", "problem"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_is_refused_with_file_line_and_an_untouched_store(
    third: str,
    problem: str,
    tmp_path: Path,
    prior_store: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = _trace(tmp_path, third)
    before = _store_rows(prior_store)
    out = io.StringIO()
    code = main(["replay", str(path), "--store", f"sqlite:///{prior_store}"], out=out)
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"{path}:3: "), err
    assert problem in err
    assert err.count("\n") == 1  # one clear line, no traceback
    assert out.getvalue() == ""
    assert _store_rows(prior_store) == before


def test_every_bad_input_case_is_valid_but_for_line_3(tmp_path: Path) -> None:
    path = tmp_path / "good.jsonl"
    path.write_text(f"{GOOD_1}\n{GOOD_2}\n", encoding="utf-8")
    assert run("replay", str(path))[0] == 0


def test_a_bad_trace_creates_no_new_store_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    refused = next(b[1] for b in BAD if b[0] == "refused-by-the-table")
    path = _trace(tmp_path, refused)
    db = tmp_path / "new.db"
    assert main(["replay", str(path), "--store", f"sqlite:///{db}"], out=io.StringIO()) == 2
    assert "ProvisionSucceeded is not accepted" in capsys.readouterr().err
    assert not db.exists()


def test_missing_trace_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(tmp_path / "nope.jsonl")], out=io.StringIO()) == 2
    assert capsys.readouterr().err == f"{tmp_path / 'nope.jsonl'}: no such file\n"


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("redis://localhost", "unknown store URL 'redis://localhost'"),
        ("sqlite:///", "names no file"),
        ("postgresql://db/lifecycle", "PostgreSQL"),
        ("sqlite:////no/such/folder/x.db", "cannot open SQLite store"),
    ],
)
def test_unknown_or_unusable_store_url(
    url: str, problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["replay", str(DEMO), "--store", url], out=io.StringIO()) == 2
    err = capsys.readouterr().err
    assert err.startswith("lifecycle: ")
    assert problem in err


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["replay", str(DEMO), "--format", "xml"], out=io.StringIO())
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        main([], out=io.StringIO())
    assert e.value.code == 2


# -- machines -----------------------------------------------------------------------------------
def test_machines_json_lists_every_machine() -> None:
    code, text = run("machines", "--format", "json")
    assert code == 0
    described = {d["name"]: d for d in json.loads(text)}
    registry = default_registry()
    assert set(described) == set(registry)
    for name, machine in registry.items():
        d = described[name]
        assert d["kind"] == machine.kind
        assert d["states"] == list(machine.table.states)
        assert d["initial"] == machine.table.initial
        assert set(d["observations"]) == set(machine.vocabulary)
        assert set(d["required"]) == set(machine.vocabulary)
    pod = described["pod"]
    assert pod["observations"]["ProvisionSucceeded"] == {
        "reserved": "bool",
        "instance_id": "str",
        "endpoint": "str",
    }
    assert pod["required"]["ProvisionSucceeded"] == ["reserved", "instance_id"]
    assert pod["observations"]["InstanceFailed"]["exit_code"] == "int | None"
    assert pod["observations"]["InstanceAbsent"] == {}
    assert pod["reasons"]["Running"] == ["Normal"]
    assert pod["reasons"]["ProvisionFailed"] == ["Warning"]
    assert pod["reasons"]["Terminated"] == ["Normal", "Warning"]  # DeletePod vs poll
    # fallbacks only where a row declares one: upstream's three sites (ADR 0091)
    assert set(described) == set(default_registry())  # every machine, and only those
    assert {
        d["name"]: d["fallback_reasons"] for d in described.values() if d["fallback_reasons"]
    } == {
        "workflow": ["OverrideErrorStatusUpdateFailed", "HeterogeneousPlatformStatusUpdateFailed"],
        "workloadrun": ["BuildFailedStatusUpdateFailed"],
    }
    assert sorted(pod["terminal"]) == ["Failed", "ProvisionFailed", "Terminated"]
    claim = described["nodeclaim"]
    assert claim["states"] == ["", "Provisioning", "Bound", "Terminating", "Terminated", "Deleted"]
    assert claim["observations"]["ClaimAdopted"]["created_at"] == "datetime | None"
    assert "Tick" in claim["observations"]
    assert set(claim["reasons"]) == {
        "Provisioning",
        "Bound",
        "Terminating",
        "Terminated",
        "Deleted",
    }
    assert claim["fallback_reasons"] == []


def test_machines_text() -> None:
    code, text = run("machines")
    assert code == 0
    assert text.startswith("pod (Pod)\n")
    assert "nodeclaim (NodeClaim)" in text
    assert "states:   ∅, Provisioning, ConfigError, Initializing, Running" in text
    assert "ProvisionSucceeded(reserved: bool, instance_id: str, [endpoint: str])" in text
    assert "Terminated (Normal, Warning)" in text
    assert "fallback reasons: " in text


# -- as a program -------------------------------------------------------------------------------
def _program() -> list[str]:
    script = Path(sys.executable).parent / "lifecycle"
    return [str(script)] if script.exists() else [sys.executable, "-m", "lifecycle.cli"]


def test_console_script_replays() -> None:
    done = subprocess.run(
        [*_program(), "replay", str(DEMO), "--format", "jsonl"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert len(jsonl(done.stdout)) == 14


def test_module_entry_point_refuses_bad_input(tmp_path: Path) -> None:
    path = _trace(tmp_path, obs("InstanceExploded"))
    done = subprocess.run(
        [sys.executable, "-m", "lifecycle.cli", "replay", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith(f"{path}:3: ")
    assert "unknown observation 'InstanceExploded'" in done.stderr


def test_replay_leaves_a_hosts_frozen_heap_frozen(tmp_path: Path) -> None:
    """The CLI pauses the cyclic collector for a replay; a host that froze its own heap
    (``gc.freeze``) keeps it frozen, and the collector's state is restored."""
    import gc
    import io as io_

    trace = tmp_path / "t.jsonl"
    trace.write_text(
        '{"at": "2026-11-30T10:00:00Z", "machine": "pod", "object": {"namespace": "ml", '
        '"name": "a", "uid": "a"}, "observe": "CreateRequested"}\n'
    )
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        assert main(["replay", str(trace)], out=io_.StringIO()) == 0
        assert gc.get_freeze_count() > frozen // 2  # not unfrozen (objects may be freed)
        assert gc.isenabled()
    finally:
        gc.unfreeze()


def test_jsonl_output_is_ascii_whatever_the_trace_holds(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    lines = [
        {"at": "2026-11-30T10:00:00Z", "machine": "pod", "observe": "CreateRequested",
         "object": {"namespace": "ml", "name": "p", "uid": "u1"}},
        {"at": "2026-11-30T10:00:01Z", "machine": "pod", "observe": "ProvisionRejected",
         "object": {"namespace": "ml", "name": "p", "uid": "u1"},
         "with": {"error": "quota dépassé — 配额"}},
    ]  # fmt: skip
    trace.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines), "utf-8")
    for store in ("memory://", f"sqlite:///{tmp_path / 'r.db'}"):
        code, text = run("replay", str(trace), "--store", store, "--format", "jsonl",
                         "--final-status")  # fmt: skip
        assert code == 0
        assert text.isascii()
        assert any("quota dépassé — 配额" in json.dumps(x, ensure_ascii=False) for x in jsonl(text))
