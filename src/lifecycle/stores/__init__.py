"""Stores: where statuses, journals and the outbox live. Choose one by URL with
:func:`open_store`: ``memory://``, ``sqlite:///relative/path.db``, ``sqlite:////abs/path.db``,
``postgresql://USER:PASSWORD@HOST:PORT/DB[?schema=NAME]`` (extra ``postgres``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._core.errors import StoreError
from .base import (
    BatchStore,
    CommitItem,
    JournalEntry,
    Record,
    RetentionStore,
    Snapshot,
    Store,
)
from .memory import MemoryStore
from .sqlite import SQLiteStore

if TYPE_CHECKING:
    from .postgres import PostgresStore as PostgresStore

__all__ = [
    "BatchStore",
    "CommitItem",
    "JournalEntry",
    "MemoryStore",
    "Record",
    "RetentionStore",
    "SQLiteStore",
    "Snapshot",
    "Store",
    "open_store",
    "redact_url",
]

POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def __getattr__(name: str) -> Any:
    if name == "PostgresStore":  # imported on first use: psycopg is an optional extra
        from .postgres import PostgresStore

        return PostgresStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def redact_url(url: str) -> str:
    """A store URL fit for output and logs: a password in it becomes ``***``."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    userinfo, at, host = rest.rpartition("@")
    if ":" not in userinfo:
        return url
    return f"{scheme}://{userinfo.split(':', 1)[0]}:***{at}{host}"


def open_store(url: str, **options: Any) -> Store:
    """The store a URL names; ``options`` go to its constructor (e.g. ``synchronous="NORMAL"``
    for SQLite, ``pool_size=8`` for PostgreSQL). Unknown schemes and empty paths are refused
    clearly; a PostgreSQL store connects (and migrates) at once, so a wrong host or password
    is a :class:`StoreError` here, naming the host and never the password."""
    if url == "memory://" or url == "memory":
        return MemoryStore(**options)
    if url.startswith("sqlite:///"):
        path = url[len("sqlite:///") :]
        if not path:
            raise StoreError(f"store URL {url!r} names no file (sqlite:///PATH)")
        return SQLiteStore(path, **options)
    if url.startswith(POSTGRES_SCHEMES):
        from .postgres import PostgresStore

        return PostgresStore(url, **options)
    raise StoreError(
        f"unknown store URL {redact_url(url)!r}; use memory://, sqlite:///PATH (relative), "
        "sqlite:////PATH (absolute) or postgresql://USER@HOST/DB"
    )
