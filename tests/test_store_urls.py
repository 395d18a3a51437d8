"""Store URLs are parsed as URLs and what they cannot mean is refused (nothing opened, no file
created); ``lifecycle db status`` reads a store without creating or changing anything."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import lifecycle.stores.postgres as postgres
from lifecycle.aio import open_async_store
from lifecycle.cli import main
from lifecycle.stores import (
    DEFAULT_CACHE,
    InvalidStoreURL,
    MemoryStore,
    SQLiteStore,
    open_store,
    parse_sqlite_url,
    redact_url,
)
from lifecycle.stores.sqlite import SCHEMA_VERSION

TRACES = Path(__file__).resolve().parent.parent / "examples" / "traces"


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # relative sqlite:/// paths land here


def files(where: Path) -> set[str]:
    return {p.name for p in where.iterdir()}


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("sqlite:///q.db?mode=ro", "unknown query parameter 'mode'"),
        ("sqlite:///q.db?cache=shared&synchronous=FULL", "cache='shared' must be a whole number"),
        ("sqlite:///q.db?cache=-1", "must be a whole number of objects"),
        ("sqlite:///q.db?cache=1e6", "must be a whole number of objects"),
        ("sqlite:///q.db?cache=10000001", "from 0 to 10000000"),
        ("sqlite:///q.db?cache=99999999999999999999", "from 0 to 10000000"),
        ("sqlite:///q.db?cache=%D9%A1%D9%A2", "must be a whole number of objects"),
        ("sqlite:///q.db?owner=a&owner=b", "'owner' given twice"),
        ("sqlite:///q.db?synchronous=sometimes", "must be OFF, NORMAL, FULL or EXTRA"),
        ("sqlite:///q.db?lease_seconds=0", "more than 0 seconds"),
        ("sqlite:///q.db?lease_seconds=nan", "finite number of seconds"),
        ("sqlite:///q.db?busy_timeout=-1", "finite number of seconds"),
        ("sqlite:///q.db?busy_timeout=soon", "finite number of seconds"),
        ("sqlite:///q.db?owner=", "non-empty name"),
        ("sqlite:///q.db?novalue", "bad query"),
        ("sqlite://q.db", "names a host ('q.db')"),
        ("sqlite://admin:pw@host/q.db", "names a host ('host')"),
        ("sqlite:/q.db", "not an SQLite store URL"),
        ("sqlite:///q.db#frag", "fragment"),
        ("sqlite:///", "names no file"),
        ("sqlite:///?synchronous=FULL", "names no file"),
        ("sqlite:///q%00.db", "NUL"),
        ("sqlite://[::1/q.db", "cannot be parsed"),
        ("memory://somewhere", "memory:// takes no host"),
        ("memory://?x=1", "memory:// takes no host"),
        ("redis://localhost", "unknown store URL 'redis://localhost'"),
        ("q.db", "unknown store URL"),
        ("", "unknown store URL"),
    ],
)
def test_what_a_store_url_cannot_mean_is_refused_and_nothing_is_created(
    tmp_path: Path, url: str, problem: str
) -> None:
    with pytest.raises(InvalidStoreURL, match=problem.replace("(", r"\(").replace(")", r"\)")):
        open_store(url)
    assert files(tmp_path) == set()


def test_a_refused_url_never_shows_its_password() -> None:
    for url in ("sqlite:///q.db?password=hunter2", "sqlite://admin:hunter2@h/q.db"):
        with pytest.raises(InvalidStoreURL) as caught:
            open_store(url)
        assert "hunter2" not in str(caught.value)


def test_the_sqlite_parameters_reach_the_store(tmp_path: Path) -> None:
    url = "sqlite:///q.db?synchronous=normal&owner=pod-7&lease_seconds=2.5&busy_timeout=0"
    assert parse_sqlite_url(url).options == {
        "synchronous": "NORMAL",
        "owner": "pod-7",
        "lease_seconds": 2.5,
        "busy_timeout": 0.0,
    }
    store = open_store(url)
    assert isinstance(store, SQLiteStore)
    try:
        assert store.cache is not None  # on by default (ADR 0155)
        assert store.cache.size == DEFAULT_CACHE
        assert (store.path, store.owner) == ("q.db", "pod-7")
        assert store._db.execute("PRAGMA synchronous").fetchone() == (1,)  # NORMAL
    finally:
        store.close()
    assert files(tmp_path) >= {"q.db"}


def test_a_status_cache_by_url(tmp_path: Path) -> None:
    store = open_store("sqlite:///c.db?cache=500")
    try:
        assert isinstance(store, SQLiteStore)
        assert store.cache is not None
        assert store.cache.size == 500
    finally:
        store.close()
    plain = open_store("sqlite:///d.db?cache=0")
    try:
        assert isinstance(plain, SQLiteStore)
        assert plain.cache is None
    finally:
        plain.close()


def test_a_parameter_given_by_url_and_caller_is_refused() -> None:
    with pytest.raises(InvalidStoreURL, match="both set owner"):
        open_store("sqlite:///q.db?owner=a", owner="b")


def test_percent_escapes_in_the_path_are_decoded(tmp_path: Path) -> None:
    open_store("sqlite:///a%3Fb%23c%25.db").close()
    assert "a?b#c%.db" in files(tmp_path)
    assert parse_sqlite_url(f"sqlite:///{tmp_path}/x.db").path == f"{tmp_path}/x.db"


def test_memory_urls() -> None:
    assert isinstance(open_store("memory://"), MemoryStore)
    assert isinstance(open_store("memory"), MemoryStore)


def test_postgresql_urls_pass_through_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []

    def fake(url: str, **options: Any) -> MemoryStore:
        seen.append(url)
        return MemoryStore()

    monkeypatch.setattr(postgres, "PostgresStore", fake)
    urls = [
        "postgresql:///db?host=h1,h2&port=5432,5433",
        "postgresql:///db?host=%2Fvar%2Frun%2Fpostgresql",
        "postgres://u:p@h1:5432,h2:5433/db?schema=s&target_session_attrs=read-write",
    ]
    for url in urls:
        open_store(url)
    assert seen == urls


def test_the_async_opener_refuses_the_same_urls(tmp_path: Path) -> None:
    with pytest.raises(InvalidStoreURL, match="'mode'"):
        asyncio.run(open_async_store("sqlite:///q.db?mode=ro"))
    assert files(tmp_path) == set()


def test_redact_url() -> None:
    shown = redact_url("postgresql://admin:hunter2@db:5432/x?password=hunter2&schema=s")
    assert "hunter2" not in shown
    assert shown.startswith("postgresql://admin:")
    assert "@db:5432/x" in shown
    assert redact_url("sqlite:///q.db?synchronous=FULL") == "sqlite:///q.db?synchronous=FULL"


# -- the CLI --------------------------------------------------------------------------------
def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(list(argv), out=out)
    return code, out.getvalue(), err.getvalue()


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_replay_refuses_a_bad_sqlite_url_before_creating_anything(tmp_path: Path) -> None:
    code, out, err = cli(
        "replay", str(TRACES / "happy-path.jsonl"), "--store", "sqlite:///q.db?mode=ro"
    )
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1
    assert "unknown query parameter 'mode'" in err
    assert files(tmp_path) == set()


def test_db_status_of_a_missing_file_creates_nothing(tmp_path: Path) -> None:
    code, out, _ = cli("db", "status", "--store", "sqlite:///none.db")
    assert code == 1
    assert "no store" in out
    assert files(tmp_path) == set()


@pytest.mark.parametrize("content", [b"hello, not a database\n", b"", b"SQLite format 3\x00junk"])
def test_db_status_of_a_file_that_is_not_a_store_exits_2_and_leaves_it(
    tmp_path: Path, content: bytes
) -> None:
    path = tmp_path / "x.db"
    path.write_bytes(content)
    code, _, err = cli("db", "status", "--store", "sqlite:///x.db")
    assert code == 2
    assert err.count("\n") == 1
    assert "is not a lifecycle store" in err
    assert path.read_bytes() == content
    assert files(tmp_path) == {"x.db"}


def test_db_status_of_another_programs_sqlite_file_exits_2_and_leaves_it(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("CREATE TABLE t (x)")
        db.commit()
    before = digest(path)
    code, _, err = cli("db", "status", "--store", "sqlite:///other.db")
    assert code == 2
    assert "is not a lifecycle store" in err
    assert digest(path) == before
    assert files(tmp_path) == {"other.db"}
    code, _, _ = cli("db", "compact", "--store", "sqlite:///other.db")
    assert code == 2


def test_db_status_of_a_store_reads_only(tmp_path: Path) -> None:
    assert cli("replay", str(TRACES / "happy-path.jsonl"), "--store", "sqlite:///s.db")[0] == 0
    before, names = digest(tmp_path / "s.db"), files(tmp_path)
    code, out, _ = cli("db", "status", "--store", "sqlite:///s.db")
    assert code == 0
    assert f"schema version {SCHEMA_VERSION} (this release: {SCHEMA_VERSION})" in out
    assert digest(tmp_path / "s.db") == before
    assert files(tmp_path) == names
    with contextlib.closing(sqlite3.connect(tmp_path / "s.db")) as db:
        db.execute("UPDATE lifecycle_meta SET value = '1' WHERE key = 'schema_version'")
        db.commit()
    code, out, _ = cli("db", "status", "--store", "sqlite:///s.db")
    assert code == 1
    assert "schema version 1" in out
    assert "upgraded on its next open" in out


def test_db_status_refuses_a_bad_url_and_memory_needs_nothing() -> None:
    assert cli("db", "status", "--store", "sqlite:///q.db?mode=ro")[0] == 2
    assert cli("db", "status", "--store", "redis://x")[0] == 2
    assert cli("db", "status", "--store", "memory://")[0] == 0


def test_db_compact_refuses_a_missing_store_rather_than_create_one(tmp_path: Path) -> None:
    code, _, err = cli("db", "compact", "--store", "sqlite:///none.db")
    assert code == 2
    assert "no store to compact" in err
    assert files(tmp_path) == set()
