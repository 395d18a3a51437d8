"""What a store URL may say, written once: the query parameters of an SQLite URL (the values
each takes and how it is read) and this library's own parameters of a PostgreSQL URL.

:func:`lifecycle.stores.parse_sqlite_url` and the PostgreSQL store read URLs with these tables,
and every ``--store`` option's help is :func:`store_help`, made from them: a parameter added
to a store is in the help at once. Nothing of the library is imported here (the CLI's parser
reads it and imports no command, ADR 0118).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

__all__ = ["MAX_CACHE", "POSTGRES_PARAMETERS", "SQLITE_PARAMETERS", "Parameter", "store_help"]


class Parameter(NamedTuple):
    """One query parameter of an SQLite store URL."""

    #: the values it takes, as the help shows them (``NAME``, ``S`` seconds, ``0|1``)
    values: str
    #: reads the value (raises ``ValueError`` saying what it must be)
    convert: Callable[[str], Any]


def _synchronous(value: str) -> str:
    if value.upper() not in ("OFF", "NORMAL", "FULL", "EXTRA"):
        raise ValueError("must be OFF, NORMAL, FULL or EXTRA")
    return value.upper()


def _owner(value: str) -> str:
    if not value:
        raise ValueError("must be a non-empty name")
    return value


def _flag(value: str) -> bool:
    if value not in ("0", "1"):
        raise ValueError("must be 0 or 1")
    return value == "1"


def _seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError("must be a finite number of seconds, at least 0")
    return seconds


def _positive_seconds(value: str) -> float:
    seconds = _seconds(value)
    if seconds <= 0:
        raise ValueError("must be more than 0 seconds")
    return seconds


#: The most objects a status cache set by URL may hold (a number in a URL is input: it must
#: not size an allocation without a bound).
MAX_CACHE = 10_000_000


def _cache_size(value: str) -> int:
    if not value.isascii() or not value.isdigit() or len(value) > 8 or int(value) > MAX_CACHE:
        raise ValueError(f"must be a whole number of objects from 0 to {MAX_CACHE}")
    return int(value)


#: The query parameters of an SQLite store URL, each a :class:`~lifecycle.SQLiteStore` option.
SQLITE_PARAMETERS: dict[str, Parameter] = {
    "synchronous": Parameter("FULL|NORMAL|OFF|EXTRA", _synchronous),
    "owner": Parameter("NAME", _owner),
    "lease_seconds": Parameter("S", _positive_seconds),
    "busy_timeout": Parameter("S", _seconds),
    "group_commit": Parameter("0|1", _flag),
    "cache": Parameter("N", _cache_size),
}

#: The query parameters of a PostgreSQL store URL that are this library's (every other one is
#: libpq's, passed through), with the values each takes.
POSTGRES_PARAMETERS: dict[str, str] = {
    "schema": "NAME",
    "call_timeout": "S",
    "resolve_timeout": "S",
}


def _listed(parameters: dict[str, str]) -> str:
    return ", ".join(f"{name}={values}" for name, values in parameters.items())


def store_help() -> str:
    """What a ``--store`` URL may be, every parameter of the tables above included."""
    sqlite = _listed({name: p.values for name, p in SQLITE_PARAMETERS.items()})
    return (
        "memory://; sqlite:///PATH (relative; sqlite:////PATH absolute) taking "
        f"?{sqlite} (joined by &; S: seconds); or postgresql://USER:PASSWORD@HOST:PORT/DB "
        f"taking ?{_listed(POSTGRES_PARAMETERS)}, cache=N (the store's, by open_store and "
        "the CLI) and libpq's own parameters"
    )
