"""How the SQLite store's values become column values: compact JSON text, and integers a signed
64-bit column holds (ADR 0073). Every part of the store (ADR 0153) encodes and decodes here."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from .._core.bounds import INT_MAX, INT_MIN
from .._core.errors import StoreError, preview

__all__ = ["dumps", "dumps_bounded", "dumps_status", "int64", "loads"]


@functools.cache
def _encoder() -> Callable[[Any], str]:
    """``json``'s compact encoder, built once, at the first write: ``json`` and ``orjson``
    (which imports ``json``, ``dataclasses`` and ``uuid``) are imported when a store first
    writes or reads, not with the store's class (ADR 0139)."""
    import json

    return json.JSONEncoder(separators=(",", ":")).encode


def dumps(value: Any) -> str:
    """Compact JSON text (``json``): a status, which a machine computes."""
    return _encoder()(value)


def dumps_bounded(value: Any) -> str:
    """Compact JSON text of a value within the input bounds (ADR 0073: finite numbers,
    64-bit integers) -- an observation's fields, a transition: ``orjson``, a third of the
    cost of ``json``; ``json`` for anything it refuses. (A status, which a machine computes,
    goes through ``json``: orjson would write a NaN as ``null``.)"""
    import orjson

    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError:
        return dumps(value)


def dumps_status(value: Any) -> str:
    """Compact JSON text of a status: ``orjson``'s when it reads back as ``value`` (a third of
    the cost of ``json``'s, with the check: ADR 0169), else ``json``'s -- for a NaN or an
    infinity (orjson writes ``null``), a tuple (read back as a list), an integer beyond 64
    bits or a key that is not a string. What is read back is the same value either way."""
    import orjson

    try:
        text = orjson.dumps(value)
    except orjson.JSONEncodeError:
        return dumps(value)
    if orjson.loads(text) != value:
        return dumps(value)
    return text.decode()


def loads(text: str) -> Any:
    """Parse stored JSON text: ``orjson``, or ``json`` for what it refuses (``NaN``, which
    an older writer may have stored)."""
    import orjson

    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        import json

        return json.loads(text)


def int64(what: str, value: int, uid: str | None = None, *, room: int = 0) -> None:
    """Refuse an integer SQLite cannot store (a signed 64-bit column; ``room``: how much is
    added to it before it is stored) with a :class:`StoreError`, before anything is written
    -- sqlite3 would raise a bare ``OverflowError``."""
    if type(value) is not int:
        if isinstance(value, int):  # bool, an int subclass
            return
        raise StoreError(f"{what} must be an int, got {preview(value)}")
    if not INT_MIN <= value <= INT_MAX - room:
        where = f" of {uid}" if uid is not None else ""
        raise StoreError(f"{what}{where} is beyond a 64-bit integer: {preview(value)}")
