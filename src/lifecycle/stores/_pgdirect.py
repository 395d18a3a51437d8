"""One statement of the synchronous PostgreSQL store run through libpq itself (ADR 0167).

psycopg's cursor spends more of the client's time on a statement than the wire does: a cursor
per call, the query's conversion, a dumper per parameter, the prepared-statement cache, a
loader per column. The commit is one statement with fixed text and plain parameters (text,
integers, a float), so :class:`Direct` prepares it once per connection under its own name and
runs it with ``PQexecPrepared`` (the GIL released while it waits), its parameters sent as UTF-8
text and its one row read from the result. Whatever this path cannot carry exactly -- a
parameter of another type, a text holding a NUL (libpq would cut it there), a connection whose
client encoding is not UTF-8 -- goes through psycopg's cursor, as before; so do the errors,
which are psycopg's own (``error_from_result``).
"""

from __future__ import annotations

import hashlib
import re
import weakref
from collections.abc import Callable, Sequence
from typing import Any, cast

from ._pgsql import psycopg

__all__ = ["COMMIT_ROW", "Direct", "as_bool", "as_int", "as_text", "positional", "text_params"]

Conn = psycopg.Connection[Any]

#: SQLSTATE 26000: the prepared statement is gone (a pooler's ``DISCARD ALL``, a
#: ``DEALLOCATE`` by hand): prepare it again and run it once more.
_NO_STATEMENT = b"26000"
#: SQLSTATE 42P05: a statement of that name is prepared already
_PREPARED = b"42P05"


def as_int(value: bytes) -> int:
    return int(value)


def as_bool(value: bytes) -> bool:
    return value == b"t"


def as_text(value: bytes) -> str:
    return value.decode()


#: How the commit statement's row is read: rows written, the epoch check, then the stored
#: object's version and identity (machine, kind, namespace, name) when nothing was written.
COMMIT_ROW = (as_int, as_bool, as_int, as_text, as_text, as_text, as_text)


_PLACEHOLDER = re.compile(r"%(.)", re.DOTALL)


def positional(text: str) -> str:
    """psycopg's query text (``%s`` placeholders, ``%%`` for a percent sign) in PostgreSQL's
    own form (``$1``, ``$2``, ...); any other placeholder is refused (``ValueError``)."""
    count = 0

    def one(found: re.Match[str]) -> str:
        nonlocal count
        if found[1] == "%":
            return "%"
        if found[1] != "s":
            raise ValueError(f"only %s placeholders can be run directly, found %{found[1]}")
        count += 1
        return f"${count}"

    return _PLACEHOLDER.sub(one, text)


def text_params(args: Sequence[Any]) -> list[bytes | None] | None:
    """``args`` as libpq text parameters (UTF-8), or ``None`` when one of them is not a plain
    ``str``, ``int``, ``float`` or ``None`` -- or is a text holding a NUL, which libpq would
    cut short: psycopg's dumpers then take the call (and refuse the NUL)."""
    out: list[bytes | None] = []
    add = out.append
    for arg in args:
        kind = type(arg)
        if kind is str:
            if "\x00" in arg:
                return None
            add(arg.encode())
        elif arg is None:
            add(None)
        elif kind is int or kind is float:
            add(repr(arg).encode())
        else:
            return None
    return out


class Direct:
    """``text``, prepared once per connection and run through libpq; its first row comes back
    read by ``columns`` (one reader per column, a NULL staying ``None``)."""

    def __init__(self, text: str, columns: Sequence[Callable[[bytes], Any]]) -> None:
        self.text = text
        self._query = positional(text).encode()
        self._name = b"lifecycle_" + hashlib.sha256(self._query).hexdigest()[:24].encode()
        self._columns = tuple(enumerate(columns))
        #: per connection: whether the statement is prepared on it (``False``: the connection
        #: is not UTF-8, psycopg's cursor takes every call)
        self._ready: weakref.WeakKeyDictionary[Conn, bool] = weakref.WeakKeyDictionary()

    def first_row(self, conn: Conn, args: Sequence[Any]) -> tuple[Any, ...] | None:
        """Run the statement with ``args`` on ``conn`` (autocommit, held by the caller alone);
        its first row, or ``None``. Raises psycopg's error for a failed statement."""
        ready = self._ready.get(conn)
        values = text_params(args) if ready is not False else None
        if values is None:
            return self._cursor(conn, args)
        pgconn = conn.pgconn
        if ready is None:
            if conn.info.encoding != "utf-8":
                self._ready[conn] = False
                return self._cursor(conn, args)
            self._prepare(pgconn)
            self._ready[conn] = True
        # (a None is a NULL: both of psycopg's libpq wrappers take it, their stub does not)
        params = cast("Sequence[bytes]", values)
        result = pgconn.exec_prepared(self._name, params)
        if result.status == psycopg.pq.ExecStatus.FATAL_ERROR and (
            result.error_field(psycopg.pq.DiagnosticField.SQLSTATE) == _NO_STATEMENT
        ):  # nothing ran: prepared again, run once more
            self._prepare(pgconn)
            result = pgconn.exec_prepared(self._name, params)
        if result.status != psycopg.pq.ExecStatus.TUPLES_OK:
            raise psycopg.errors.error_from_result(result)
        if not result.ntuples:
            return None
        value = result.get_value
        return tuple(
            None if (raw := value(0, n)) is None else read(raw) for n, read in self._columns
        )

    def _prepare(self, pgconn: psycopg.pq.abc.PGconn) -> None:
        result = pgconn.prepare(self._name, self._query)
        if result.status != psycopg.pq.ExecStatus.COMMAND_OK and (
            result.error_field(psycopg.pq.DiagnosticField.SQLSTATE) != _PREPARED
        ):  # (already there: the name is the text's hash, so it is this statement)
            raise psycopg.errors.error_from_result(result)

    def _cursor(self, conn: Conn, args: Sequence[Any]) -> tuple[Any, ...] | None:
        return conn.execute(self.text, args, prepare=True).fetchone()
