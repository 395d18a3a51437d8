"""A SQLite store a newer release marked with a schema version this one does not know is
refused at open, as PostgreSQL's is: a typed StoreError, nothing written, replay exit 2
(issue 23 item 5)."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import pytest

from lifecycle import SQLiteStore, StoreError
from lifecycle.cli import main
from lifecycle.stores.sqlite import SCHEMA_VERSION

LINE = {
    "at": "2026-11-30T10:00:00Z",
    "machine": "pod",
    "object": {"namespace": "ml", "name": "trainer-0", "uid": "pod-a"},
    "observe": "CreateRequested",
}


def marked(path: Path, value: str) -> dict[str, str]:
    """A store at ``path`` whose schema marker says ``value``; the digests of its files."""
    SQLiteStore(path).close()
    db = sqlite3.connect(path)
    db.execute("UPDATE lifecycle_meta SET value = ? WHERE key = 'schema_version'", (value,))
    db.commit()
    db.close()
    return files(path)


def files(path: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(path.parent.iterdir())
        if p.name.startswith(path.name)
    }


@pytest.mark.parametrize("value", [str(SCHEMA_VERSION + 1), "999999", "0", "-3", "v4", ""])
def test_a_store_of_a_schema_this_release_does_not_know_is_refused(
    value: str, tmp_path: Path
) -> None:
    path = tmp_path / "s.db"
    before = marked(path, value)
    with pytest.raises(StoreError, match="nothing was written") as refused:
        SQLiteStore(path)
    if value.isdigit() and int(value) > SCHEMA_VERSION:
        assert f"version {value}, newer than this release knows ({SCHEMA_VERSION})" in str(
            refused.value
        )
    assert files(path) == before


def test_the_current_version_opens(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    marked(path, str(SCHEMA_VERSION))
    SQLiteStore(path).close()


def test_replay_into_a_newer_store_exits_2_and_adds_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.db"
    before = marked(path, str(SCHEMA_VERSION + 1))
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps(LINE) + "\n")
    assert main(["replay", str(trace), "--store", f"sqlite:///{path}"]) == 2
    assert "newer than this release knows" in capsys.readouterr().err
    assert files(path) == before
    count = sqlite3.connect(path).execute("SELECT count(*) FROM objects").fetchone()[0]
    assert count == 0
