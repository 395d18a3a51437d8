"""Stores: where statuses, journals and the outbox live. Choose one by URL with
:func:`open_store`: ``memory://``, ``sqlite:///relative/path.db``, ``sqlite:////abs/path.db``."""

from __future__ import annotations

from .._core.errors import StoreError
from .base import JournalEntry, Record, Store
from .memory import MemoryStore
from .sqlite import SQLiteStore

__all__ = ["JournalEntry", "MemoryStore", "Record", "SQLiteStore", "Store", "open_store"]


def open_store(url: str) -> Store:
    """The store a URL names. Unknown schemes and empty paths are refused clearly."""
    if url == "memory://" or url == "memory":
        return MemoryStore()
    if url.startswith("sqlite:///"):
        path = url[len("sqlite:///") :]
        if not path:
            raise StoreError(f"store URL {url!r} names no file (sqlite:///PATH)")
        return SQLiteStore(path)
    if url.startswith(("postgresql://", "postgres://")):
        raise StoreError("the PostgreSQL store is not part of this release yet")
    raise StoreError(
        f"unknown store URL {url!r}; use memory://, sqlite:///PATH (relative) "
        "or sqlite:////PATH (absolute)"
    )
