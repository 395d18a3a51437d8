"""``lifecycle db find`` (issue 38, ADR 0159): a machine's objects by state and time in state,
oldest first, as a table or JSON, on SQLite and PostgreSQL; bad input is exit 2 with the
store unchanged."""

from __future__ import annotations

import io
import json
import sqlite3
from pathlib import Path

import pytest

from lifecycle import MemoryEmitter, ObjectRef, Runner, open_store
from lifecycle.cli import main
from lifecycle.cli.parsers import age_seconds
from lifecycle.machines import pod

from .stores.conftest import pg_schema, pg_server, pg_url  # noqa: F401 (fixtures)
from .stores.helpers import t


def cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/s.db"
    return str(request.getfixturevalue("pg_url"))


def fill(url: str) -> None:
    store = open_store(url)
    try:
        runner = Runner(store, [MemoryEmitter()])
        for i in range(3):
            runner.observe(ObjectRef("Pod", "ml", f"p-{i}", f"u{i}"), pod.CreateRequested(at=t(0)))
        runner.observe(
            ObjectRef("Pod", "ml", "p-2", "u2"), pod.ProvisionRejected(at=t(1), error="x")
        )
    finally:
        store.close()


def age(url: str, uid: str, seconds: int) -> None:
    """Move ``uid``'s entry into its state ``seconds`` back, behind the store's back."""
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
            db.execute("UPDATE objects SET entered = entered - ? WHERE uid = ?", (seconds, uid))
        return
    import psycopg

    from lifecycle.stores import _pgsql

    target = _pgsql.parse_url(url)
    with psycopg.connect(target.conninfo, autocommit=True) as conn:
        conn.execute(
            f'UPDATE "{target.schema}".objects SET entered_at = entered_at - '
            "make_interval(secs => %s) WHERE uid = %s",
            (seconds, uid),
        )


def test_db_find_lists_the_stuck_oldest_first(url: str) -> None:
    fill(url)
    age(url, "u1", 3600)
    age(url, "u0", 1200)
    code, text = cli("db", "find", "--store", url, "--machine", "pod", "--state", "Provisioning")
    assert code == 0  # a listing, not a finding
    lines = text.splitlines()
    assert lines[0].split() == [
        "AGE", "MACHINE", "STATE", "KIND", "NAMESPACE/NAME", "UID", "VERSION"
    ]  # fmt: skip
    assert [line.split()[-2] for line in lines[1:]] == ["u1", "u0"]
    assert lines[1].startswith("1h ")
    code, text = cli(
        "db", "find", "--store", url, "--machine", "pod", "--state", "Provisioning",
        "--older-than", "30m", "--format", "json",
    )  # fmt: skip
    assert code == 1  # something is stuck
    (row,) = json.loads(text)
    assert (row["uid"], row["state"], row["version"]) == ("u1", "Provisioning", 1)
    assert 3600 <= row["age_seconds"] < 3700
    code, text = cli("db", "find", "--store", url, "--machine", "pod", "--older-than", "2h")
    assert (code, text) == (0, "no objects found\n")
    code, text = cli("db", "find", "--store", url, "--machine", "pod", "--limit", "1")
    assert [line.split()[-2] for line in text.splitlines()[1:]] == ["u1"]


def test_db_find_without_a_machine_asks_every_machine_that_has_the_state(url: str) -> None:
    fill(url)  # the pods' linked NodeClaims are in the store too
    age(url, "u1", 600)
    code, text = cli("db", "find", "--store", url, "--state", "Provisioning", "--format", "json")
    assert code == 0
    rows = json.loads(text)
    assert {r["machine"] for r in rows} == {"pod", "nodeclaim"}
    assert rows[0]["uid"] == "u1"  # the oldest first, across machines
    ages = [r["age_seconds"] for r in rows]
    assert ages == sorted(ages, reverse=True)
    code, text = cli("db", "find", "--store", url, "--state", "Provisioning", "--limit", "2")
    assert len(text.splitlines()) == 3


def test_db_find_refuses_bad_input(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    fill(url)
    base = ("db", "find", "--store", url, "--machine", "pod")
    for extra, said in (
        (("--state", "Provisionng"), "no state 'Provisionng'"),
        (("--limit", "0"), "limit must be a positive int"),
    ):
        code, _ = cli(*base, *extra)
        assert code == 2
        assert said in capsys.readouterr().err
    code, _ = cli("db", "find", "--store", url, "--machine", "nope")
    assert code == 2
    assert "no machine 'nope'" in capsys.readouterr().err
    code, _ = cli("db", "find", "--store", url, "--state", "Nowhere")
    assert code == 2
    assert "no machine has a state 'Nowhere'" in capsys.readouterr().err
    for bad in ("-5m", "15x", "m", ""):
        with pytest.raises(SystemExit) as e:
            cli(*base, f"--older-than={bad}")
        assert e.value.code == 2
        assert "is not an age" in capsys.readouterr().err
    code, text = cli(*base, "--state", "Provisioning")
    assert code == 0
    assert len(text.splitlines()) == 3  # unchanged: the two still there


def test_ages_are_read_as_durations() -> None:
    assert age_seconds("90") == 90
    assert age_seconds("90s") == 90
    assert age_seconds("15m") == 900
    assert age_seconds("1h30m") == 5400
    assert age_seconds("1d") == 86400
    assert age_seconds("0.5h") == 1800
