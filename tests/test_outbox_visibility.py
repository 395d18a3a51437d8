"""Stuck outbox rows are visible after the fact (issue 23 item 5, issue 28): ``db status``
shows how many events wait and how old the oldest is, and ``db check`` fails past a
threshold (``--max-undelivered``, ``--max-undelivered-age``), on SQLite and PostgreSQL."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from lifecycle import ObjectRef, Runner, open_store
from lifecycle.cli import main
from lifecycle.machines.pod import CreateRequested

from .stores.conftest import pg_schema, pg_server, pg_url  # noqa: F401 (fixtures)


class Down:
    """An emitter whose destination is down: every event stays in the outbox."""

    def emit(self, transition: object) -> None:
        raise ConnectionError("down")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'stuck.db'}"
    return str(request.getfixturevalue("pg_url"))


def stick(url: str, pods: int, at: datetime) -> int:
    """Commit ``pods`` Pods whose events no emitter takes; how many outbox rows that left."""
    store = open_store(url)
    try:
        runner = Runner(store, [Down()])
        for i in range(pods):
            ref = ObjectRef("Pod", "ml", f"p-{i}", f"stuck-{i}")
            runner.observe(ref, CreateRequested(at=at, pool="gpu", provider="fake"))
        return int(store.undelivered_count())  # type: ignore[attr-defined]
    finally:
        store.close()


def cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


def test_db_status_shows_what_waits_and_check_fails_past_the_threshold(url: str) -> None:
    stick(url, 0, datetime.now(UTC))  # the store, empty
    code, text = cli("db", "status", "--store", url)
    assert code == 0
    assert "outbox: 0 undelivered" in text
    stuck = stick(url, 30, datetime.now(UTC) - timedelta(hours=2))
    assert stuck >= 30
    code, text = cli("db", "status", "--store", url)
    assert code == 0
    assert f"outbox: {stuck} undelivered" in text
    assert "oldest" in text
    code, text = cli("db", "check", "--store", url)
    if url.startswith("sqlite"):  # the oldest observation is 2 h old: past the 1 h default
        assert code == 1
        assert "FINDING outbox: the oldest undelivered row" in text
    code, text = cli("db", "check", "--store", url, "--max-undelivered", "10")
    assert code == 1
    assert f"FINDING outbox: {stuck} undelivered, more than --max-undelivered 10" in text
    code, text = cli(
        "db", "check", "--store", url, "--max-undelivered", str(stuck),
        "--max-undelivered-age", "1e9",
    )  # fmt: skip
    assert code == 0, text
    assert f"outbox: {stuck} undelivered" in text


def test_negative_thresholds_are_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    stick(url, 1, datetime.now(UTC))
    code, _ = cli("db", "check", "--store", url, "--max-undelivered", "-1")
    assert code == 2
