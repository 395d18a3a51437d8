"""Fixtures for the store tests: one throwaway PostgreSQL server per session (started only when
a test needs it), a fresh PostgreSQL schema per test, and ``store_kind`` / ``open_kind`` to run
one test on memory, SQLite and PostgreSQL alike."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lifecycle import MemoryStore, SQLiteStore, Store

from .pg import PgServer, PostgresUnavailable

KINDS = ["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
SHARED = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
#: the shared stores with their status cache on (ADR 0134), small enough to evict
CACHED = ["sqlite+cache", pytest.param("postgres+cache", marks=pytest.mark.postgres)]
_schemas = itertools.count()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """The session's PostgreSQL server. Missing binaries fail the test, loudly."""
    try:
        server = PgServer()
        server.start()
    except PostgresUnavailable as e:
        pytest.fail(f"cannot start the test PostgreSQL server: {e}", pytrace=False)
    yield server
    server.destroy()


def drop_schema(server: PgServer, schema: str) -> None:
    import psycopg

    with psycopg.connect(server.url(), autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def pg_schema(pg_server: PgServer) -> Iterator[str]:
    """A schema name no other test uses; dropped afterwards."""
    schema = f"t{os.getpid()}_{next(_schemas)}"
    yield schema
    drop_schema(pg_server, schema)


@pytest.fixture
def pg_url(pg_server: PgServer, pg_schema: str) -> str:
    return pg_server.url(schema=pg_schema)


@pytest.fixture(params=KINDS)
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def open_kind(
    store_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[..., Store]]:
    """Opens a handle on *the* store of this test (a second call: another replica's handle on
    the same data; for memory, the same object). Every handle is closed afterwards."""
    opened: list[Store] = []
    memory: list[MemoryStore] = []
    kind, _, cached = store_kind.partition("+")
    url = request.getfixturevalue("pg_url") if kind == "postgres" else ""

    def open_(**options: Any) -> Store:
        store: Store
        if cached:
            options.setdefault("cache", 64)
        if kind == "memory":
            if not memory:
                memory.append(MemoryStore(**options))
            return memory[0]
        if kind == "sqlite":
            store = SQLiteStore(tmp_path / "conformance.db", synchronous="OFF", **options)
        else:
            from lifecycle.stores.postgres import PostgresStore

            store = PostgresStore(url, **options)
        opened.append(store)
        return store

    yield open_
    for s in opened:
        s.close()


@pytest.fixture
def any_store(open_kind: Callable[..., Store]) -> Store:
    return open_kind()
