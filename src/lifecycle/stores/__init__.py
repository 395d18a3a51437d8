"""Stores: where statuses, journals and the outbox live. Choose one by URL with
:func:`open_store`: ``memory://``, ``sqlite:///relative/path.db``, ``sqlite:////abs/path.db``
(with optional query parameters ``synchronous``, ``owner``, ``lease_seconds``,
``busy_timeout``, ``group_commit`` and ``cache``: ``lifecycle replay --help`` says each), or
``postgresql://USER:PASSWORD@HOST:PORT/DB[?schema=NAME]`` (extra ``postgres``).

A store URL is parsed as a URL (:mod:`urllib.parse`), and what it cannot mean is refused with
:class:`InvalidStoreURL`: an unknown scheme, a host where none belongs, an unknown or repeated
query parameter, a fragment. In an SQLite path, ``%XX`` escapes are decoded (write ``%3F``
for a ``?`` in a file name, ``%23`` for ``#``, ``%25`` for ``%``). PostgreSQL URLs are handed
to the PostgreSQL store unchanged: they follow libpq's own URL rules."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from .._core.errors import StoreError, preview
from .._core.redact import redact
from .._store_urls import MAX_CACHE as MAX_CACHE
from .._store_urls import SQLITE_PARAMETERS
from ._cache import DEFAULT_CACHE, CacheStats, StatusCache
from .base import (
    BatchStore,
    CommitItem,
    CommitStore,
    FindStore,
    Found,
    InvalidQuery,
    JournalEntry,
    JournalStore,
    OutboxStore,
    Record,
    RetentionStore,
    SchemaStore,
    Snapshot,
    StateCount,
    Store,
    UpgradeReport,
)
from .memory import MemoryStore
from .sqlite import SQLiteStore

if TYPE_CHECKING:
    from urllib.parse import SplitResult

    from .postgres import PostgresStore as PostgresStore

__all__ = [
    "DEFAULT_CACHE",
    "BatchStore",
    "CacheStats",
    "CommitItem",
    "CommitStore",
    "FindStore",
    "Found",
    "InvalidQuery",
    "InvalidStoreURL",
    "JournalEntry",
    "JournalStore",
    "MemoryStore",
    "OutboxStore",
    "Record",
    "RetentionStore",
    "SQLiteStore",
    "SQLiteURL",
    "SchemaStore",
    "Snapshot",
    "StateCount",
    "StatusCache",
    "Store",
    "UpgradeReport",
    "open_store",
    "parse_sqlite_url",
    "redact_url",
]

POSTGRES_SCHEMES = ("postgresql://", "postgres://")
_USAGE = (
    "use memory://, sqlite:///PATH (relative), sqlite:////PATH (absolute) or "
    "postgresql://USER@HOST/DB"
)


class InvalidStoreURL(StoreError):
    """A store URL that names no store this library can open (nothing was opened)."""


def __getattr__(name: str) -> Any:
    if name == "PostgresStore":  # imported on first use: psycopg is an optional extra
        from .postgres import PostgresStore

        return PostgresStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def redact_url(url: str) -> str:
    """A store URL fit for output and logs: the password of its user becomes ``***`` and
    every secret the library's redactor finds (``?password=``, tokens) ``<redacted>``.

    Args:
        url: a store URL.

    Returns:
        The URL with its secrets replaced.
    """
    head, sep, rest = url.partition("://")
    netloc = rest.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    userinfo, at, host = netloc.rpartition("@")
    if sep and at and ":" in userinfo:
        url = f"{head}://{userinfo.split(':', 1)[0]}:***@{host}{rest[len(netloc) :]}"
    return redact(url)


def _shown(url: str) -> str:
    return preview(redact_url(url), 120)


class SQLiteURL(NamedTuple):
    """What an ``sqlite:///PATH?...`` URL names: a file and :class:`SQLiteStore` options.

    Attributes:
        path: the database file, its ``%XX`` escapes decoded.
        options: :class:`SQLiteStore` keyword arguments from the URL's query parameters.
    """

    path: str
    options: dict[str, Any]


def _split(url: str) -> SplitResult:
    from urllib.parse import urlsplit  # here: a host that opens no URL does not import it

    try:
        return urlsplit(url)
    except ValueError as e:  # e.g. an unclosed [IPv6] host
        raise InvalidStoreURL(f"store URL {_shown(url)} cannot be parsed: {e}") from None


def parse_sqlite_url(url: str) -> SQLiteURL:
    """The file and options an ``sqlite:///PATH[?name=value&...]`` URL names.

    ``sqlite:///rel/x.db`` is relative to the working directory, ``sqlite:////abs/x.db``
    absolute; ``%XX`` escapes in the path are decoded. The query parameters are
    :data:`SQLITE_PARAMETERS`; anything else (a host, an unknown or repeated parameter such as
    ``?mode=ro``, a fragment) raises :class:`InvalidStoreURL`.

    Args:
        url: an ``sqlite:`` URL.

    Returns:
        The file and the options.

    Raises:
        InvalidStoreURL: a host, an unknown or repeated parameter, a bad value or a fragment.
    """
    parts = _split(url)
    shown = _shown(url)
    if parts.scheme != "sqlite" or not url[len("sqlite:") :].startswith("//"):
        raise InvalidStoreURL(f"{shown} is not an SQLite store URL (sqlite:///PATH)")
    if parts.netloc:
        raise InvalidStoreURL(
            f"store URL {shown} names a host ({preview(parts.netloc.rpartition('@')[2])}); "
            "an SQLite URL "
            "has none: sqlite:///relative/path.db or sqlite:////absolute/path.db"
        )
    if "#" in url:
        raise InvalidStoreURL(
            f"store URL {shown} has a fragment ('#'); write %23 for a '#' in a file name"
        )
    from urllib.parse import unquote

    try:
        path = unquote(parts.path[1:], errors="strict") if parts.path.startswith("/") else ""
    except UnicodeDecodeError:
        raise InvalidStoreURL(
            f"store URL {shown}: its %XX escapes do not decode to UTF-8 text"
        ) from None
    if not path:
        raise InvalidStoreURL(f"store URL {shown} names no file (sqlite:///PATH)")
    if "\x00" in path:
        raise InvalidStoreURL(f"store URL {shown}: a file name has no NUL character")
    if not path.isascii() and any("\ud800" <= c <= "\udfff" for c in path):
        raise InvalidStoreURL(f"store URL {shown}: a file name has no lone surrogate")
    return SQLiteURL(path, _sqlite_options(parts.query, shown))


def _sqlite_options(query: str, shown: str) -> dict[str, Any]:
    from urllib.parse import parse_qsl

    supported = ", ".join(SQLITE_PARAMETERS)
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError as e:
        raise InvalidStoreURL(f"store URL {shown}: bad query ({e})") from None
    options: dict[str, Any] = {}
    for name, value in pairs:
        parameter = SQLITE_PARAMETERS.get(name)
        if parameter is None:
            raise InvalidStoreURL(
                f"store URL {shown}: unknown query parameter {preview(name)} "
                f"(an SQLite store URL takes {supported})"
            )
        if name in options:
            raise InvalidStoreURL(f"store URL {shown}: query parameter {name!r} given twice")
        try:
            options[name] = parameter.convert(value)
        except ValueError as e:
            raise InvalidStoreURL(
                f"store URL {shown}: {name}={preview(redact(value))} {e}"
            ) from None
    return options


def open_store(url: str, **options: Any) -> Store:
    """The store a URL names; ``options`` go to its constructor (e.g. ``synchronous="NORMAL"``
    for SQLite, ``pool_size=8`` for PostgreSQL). A URL that names no store we can open is
    refused with :class:`InvalidStoreURL` (see the module's notes) before anything is opened
    or created; a PostgreSQL store connects (and migrates) at once, so a wrong host or
    password is a :class:`StoreError` here, naming the host and never the password.

    Args:
        url: ``memory``, ``sqlite:///PATH?...`` or a libpq ``postgresql://`` URL.
        **options: the store's constructor's keyword arguments.

    Returns:
        The open store.

    Raises:
        InvalidStoreURL: a URL that names no store the library opens; nothing was opened.
        StoreError: the store cannot be opened (a wrong host or password, a missing folder).
    """
    if url.startswith(POSTGRES_SCHEMES):  # libpq's URL rules: its store parses them
        from .postgres import PostgresStore

        url, options = _postgres_cache(url, options)
        return PostgresStore(url, **options)
    if url == "memory":
        return MemoryStore(**options)
    parts = _split(url)
    if parts.scheme == "memory":
        if url.lower() != "memory://":
            raise InvalidStoreURL(
                f"store URL {_shown(url)}: memory:// takes no host, path or parameters"
            )
        return MemoryStore(**options)
    if parts.scheme == "sqlite":
        target = parse_sqlite_url(url)
        twice = sorted(set(target.options) & set(options))
        if twice:
            raise InvalidStoreURL(
                f"store URL {_shown(url)} and the caller both set {', '.join(twice)}"
            )
        return SQLiteStore(target.path, **target.options, **options)
    if parts.scheme in ("postgresql", "postgres"):
        from .postgres import PostgresStore

        url, options = _postgres_cache(url, options)
        return PostgresStore(url, **options)
    raise InvalidStoreURL(f"unknown store URL {_shown(url)}; {_USAGE}")


def cache_option(url: str, size: int) -> dict[str, Any]:
    """``{"cache": size}`` for an SQLite or PostgreSQL URL that does not set ``?cache=`` itself,
    else ``{}``: what a caller passes to :func:`open_store` to choose its own bound (the CLI's
    ``db`` commands: ``0``; a replay: a bounded one) while the URL's own choice still wins."""
    scheme = url.partition(":")[0].lower()
    if scheme not in ("sqlite", "postgresql", "postgres"):
        return {}
    query = url.partition("?")[2].partition("#")[0]
    named = {part.partition("=")[0].lower() for part in query.split("&")}
    return {} if "cache" in named else {"cache": size}


def _postgres_cache(url: str, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A PostgreSQL URL's ``?cache=N`` (the status cache's bound, ``0``: off; ADR 0155) taken
    out of the URL and into the store's options; the rest of the URL is libpq's."""
    base, sep, query = url.partition("?")
    if not sep:
        return url, options
    query, hash_, fragment = query.partition("#")
    pairs = query.split("&")
    found = [p for p in pairs if p.partition("=")[0] == "cache"]
    if not found:
        return url, options
    if len(found) > 1 or "cache" in options:
        raise InvalidStoreURL(f"store URL {_shown(url)}: cache is set twice")
    try:
        size = SQLITE_PARAMETERS["cache"].convert(found[0].partition("=")[2])
    except ValueError as e:
        raise InvalidStoreURL(f"store URL {_shown(url)}: cache {e}") from None
    rest = "&".join(p for p in pairs if p.partition("=")[0] != "cache")
    return base + ("?" + rest if rest else "") + hash_ + fragment, {**options, "cache": size}
