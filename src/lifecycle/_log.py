"""The library's loggers: structlog's API, routed through the standard :mod:`logging` module.

A library must not decide where its host's logs go. Every module logs with
``_log = get_logger(__name__-ish)`` and calls ``_log.warning("what happened", key=value)``;
the call becomes a :class:`logging.LogRecord` on the stdlib logger of that name (all under
``lifecycle``), so the host's logging configuration decides what is shown and where. The
package adds a :class:`logging.NullHandler` to ``lifecycle``: a host that configures nothing
sees nothing (ADR 0098).

The processor chain is the library's own, independent of the host's global structlog
configuration (:func:`structlog.configure` changes nothing here):

1. a call no handler would hear (below the effective level, or only the package's
   ``NullHandler`` on the way up) is dropped before any other work;
2. every value is redacted (:func:`lifecycle._core.redact.scrub`);
3. the record's message is ``event key=value ...`` (values by ``%r``, formatted lazily, only
   if a handler formats it), its ``args`` the values, and the key/value pairs themselves are
   the record's ``lifecycle`` attribute (a dict), for handlers that want structured fields.

psycopg_pool logs its reconnect attempts through ``psycopg.pool``, which has no handler unless
the host adds one: Python's last-resort handler then prints its warnings to stderr.
:func:`adopt_pool_logs` re-routes the records about the library's own pools (named
``lifecycle-...``) to ``lifecycle.stores.postgres.pool``, redacted; other pools are untouched.
"""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TextIO, cast

from ._core.logs import ROOT, checked_name, library_logger
from ._core.redact import redact, scrub

if TYPE_CHECKING:
    import logging

    from structlog.stdlib import BoundLogger

__all__ = ["FIELDS", "POOL_LOGGER", "ROOT", "adopt_pool_logs", "get_logger", "logs_to"]

#: The :class:`logging.LogRecord` attribute that holds an event's key/value pairs.
FIELDS = "lifecycle"
#: Where the records of the library's psycopg pools go.
POOL_LOGGER = "lifecycle.stores.postgres.pool"
#: Frames between the library's call site and :meth:`logging.Logger.warning` (the bound
#: logger's method, stdlib ``_proxy_to_logger``, base ``_proxy_to_logger``): the record names
#: the library line that logged, not structlog.
_STACKLEVEL = 4
#: The level of each method of :class:`structlog.stdlib.BoundLogger` (``logging.DEBUG`` ...
#: ``logging.CRITICAL``: this module imports :mod:`logging` when a logger is first called).
_LEVELS = {
    "debug": 10,
    "info": 20,
    "warning": 30,
    "warn": 30,
    "error": 40,
    "exception": 40,
    "critical": 50,
    "fatal": 50,
}


def _heard(logger: logging.Logger, method: str, event_dict: MutableMapping[str, Any]) -> Any:
    """Drop the call unless a record would reach a handler that does something: below the
    effective level, or only :class:`logging.NullHandler` on the way up (the package default),
    nothing else is done. A logger filter on the way, or no handler at all (the last-resort
    handler's case), keeps the record, so stdlib logging decides as it always does."""
    import logging  # loaded already, as is structlog: this runs inside structlog

    from structlog import DropEvent

    level = _LEVELS[method]
    if not logger.isEnabledFor(level):
        raise DropEvent
    if isinstance(logger, _Adapted):
        logger = logger.logger  # the host's adapter: its logger's handlers decide
    found = False
    current: logging.Logger | None = logger
    while current is not None:
        if current.filters:
            return event_dict
        for handler in current.handlers:
            if level >= handler.level and not isinstance(handler, logging.NullHandler):
                return event_dict
            found = True
        if not current.propagate:
            break
        current = current.parent
    if not found:
        return event_dict
    raise DropEvent


def _redacted(_: Any, __: str, event_dict: MutableMapping[str, Any]) -> Any:
    """Every value (and key) redacted; the same dict back when there was nothing to redact."""
    return scrub(event_dict)


def _to_record(
    _: Any, __: str, event_dict: MutableMapping[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``(args, kwargs)`` for :meth:`logging.Logger.log`-style methods: a ``%``-template of the
    event and its fields, the field values as arguments, the fields as ``extra``."""
    fields = dict(event_dict)
    event = str(fields.pop("event", ""))
    kwargs: dict[str, Any] = {"stacklevel": _STACKLEVEL}
    for key in ("exc_info", "stack_info"):
        if key in fields:
            kwargs[key] = fields.pop(key)
    template = event.replace("%", "%%") + "".join(
        f" {str(k).replace('%', '%%')}=%r" for k in fields
    )
    kwargs["extra"] = {FIELDS: fields}
    values = tuple(fields.values())
    if len(values) == 1 and isinstance(values[0], Mapping):
        values = (_Shown(values[0]),)  # one mapping argument would be read as named arguments
    return (template, *values), kwargs


class _Shown:
    """A value formatted by its repr, never taken for ``%(name)s`` arguments."""

    __slots__ = ("value",)

    def __init__(self, value: object) -> None:
        self.value = value

    def __repr__(self) -> str:
        return repr(self.value)


_PROCESSORS = (_heard, _redacted, _to_record)


class _Adapted:
    """A host's :class:`logging.LoggerAdapter` as the target of the library's processors: the
    adapter's ``process`` runs as it would for a call of its own (its ``extra``, its message
    changes), then the library's fields are added to what it returns and the record goes to
    the adapter's logger. ``logger`` is the stdlib logger at the bottom of the adapters."""

    __slots__ = ("adapter", "logger")

    def __init__(self, adapter: logging.LoggerAdapter[Any]) -> None:
        import logging

        self.adapter = adapter
        inner: Any = adapter
        while isinstance(inner, logging.LoggerAdapter):
            inner = inner.logger
        self.logger: logging.Logger = inner

    @property
    def name(self) -> str:
        return self.logger.name

    def isEnabledFor(self, level: int) -> bool:
        return self.adapter.isEnabledFor(level)

    def _emit(self, level: int, msg: str, *args: Any, **kwargs: Any) -> None:
        fields = kwargs.pop("extra", {})
        kwargs["stacklevel"] = kwargs.get("stacklevel", 1) + 1  # this frame
        msg, processed = self.adapter.process(msg, kwargs)
        processed = {**processed, "extra": {**(processed.get("extra") or {}), **fields}}
        self.adapter.logger.log(level, msg, *args, **processed)

    debug = functools.partialmethod(_emit, _LEVELS["debug"])
    info = functools.partialmethod(_emit, _LEVELS["info"])
    warning = warn = functools.partialmethod(_emit, _LEVELS["warning"])
    error = functools.partialmethod(_emit, _LEVELS["error"])
    critical = fatal = functools.partialmethod(_emit, _LEVELS["critical"])

    def exception(self, msg: str, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("exc_info", True)
        kwargs["stacklevel"] = kwargs.get("stacklevel", 1) + 1  # this frame
        self._emit(_LEVELS["error"], msg, *args, **kwargs)


class _Deferred:
    """A library logger that imports structlog on its first call: every module makes its
    logger at import time, and structlog (with what it imports) would cost each host's start
    more than the rest of the package (ADR 0118). :mod:`logging` and the package's
    NullHandler come then too (ADR 0139). Any attribute is the bound logger's. ``target``: a
    host's stdlib logger or adapter to write to instead of the library's logger ``name``."""

    __slots__ = ("_bound", "_name", "_target")

    def __init__(self, name: str, target: Any = None) -> None:
        self._name = name
        self._target = target
        self._bound: BoundLogger | None = None

    def __getattr__(self, attribute: str) -> Any:
        bound = self._bound
        if bound is None:
            import logging

            from structlog.stdlib import BoundLogger

            target = self._target
            if target is None:
                target = library_logger(self._name)  # the package's NullHandler in place
            elif isinstance(target, logging.LoggerAdapter):
                target = _Adapted(target)
            bound = self._bound = BoundLogger(target, list(_PROCESSORS), {})
        return getattr(bound, attribute)


#: The library's loggers by name (one each: a runner made per request shares its module's).
_LIBRARY: dict[str, _Deferred] = {}


def get_logger(name: str, host: object = None) -> BoundLogger:
    """A structlog logger writing to the stdlib logger ``name`` (under ``lifecycle``) through
    the library's own processors: level check first, values redacted, fields on the record.
    structlog and :mod:`logging` are imported, and the package's NullHandler added, when the
    logger is first called.

    ``host`` is what a host passed as ``logger=`` to a constructor (every constructor that
    takes one calls this): ``None`` for the library's logger ``name``; a stdlib
    :class:`logging.Logger` or :class:`logging.LoggerAdapter`, written to through the same
    processors (redacted, fields on the record, the adapter's ``process`` applied); any other
    object with the structlog call style (``log.warning("event", key=value)``, ``bind``) is
    used as it is. An object without a ``warning`` method is a :class:`TypeError`."""
    if host is None:
        found = _LIBRARY.get(name)
        if found is None:
            found = _LIBRARY[name] = _Deferred(checked_name(name))
        return cast("BoundLogger", found)
    stdlib = sys.modules.get("logging")  # not loaded: the host's logger cannot be a stdlib one
    if stdlib is not None and isinstance(host, stdlib.Logger | stdlib.LoggerAdapter):
        return cast("BoundLogger", _Deferred(name, host))
    if not callable(getattr(host, "warning", None)):
        raise TypeError(
            "logger must be a logging.Logger, a logging.LoggerAdapter or a structlog-style "
            f"logger (log.warning('event', key=value)), not {type(host).__name__}"
        )
    return cast("BoundLogger", host)


# -- psycopg_pool -----------------------------------------------------------------------------
#: How the library names its pools (``lifecycle-HOST``, ``lifecycle-async-HOST``); a pool's
#: threads are named after it (``lifecycle-HOST-worker-0``).
_POOL_PREFIX = "lifecycle-"
_THREAD_SUFFIX = re.compile(r"-(?:worker-[0-9]+|scheduler)$")


def _pool_name(value: object) -> str | None:
    """The library pool ``value`` names or belongs to: a pool or thread name, or a connection
    that a library pool handed out (psycopg_pool sets ``conn._pool``)."""
    if isinstance(value, str):
        return _THREAD_SUFFIX.sub("", value) if value.startswith(_POOL_PREFIX) else None
    pool = getattr(value, "_pool", None)
    name = getattr(pool, "name", None)
    if isinstance(name, str) and name.startswith(_POOL_PREFIX):
        return name
    return None


def _route(record: logging.LogRecord) -> bool:
    """On ``psycopg.pool`` (a filter): a record about a library pool is handed to
    :data:`POOL_LOGGER` instead (message redacted, the pool named in its ``lifecycle`` fields)
    and dropped here; every other record passes unchanged."""
    import logging

    args = record.args if isinstance(record.args, tuple) else ()
    found = (_pool_name(a) for a in (*args, record.threadName or ""))
    pool = next((name for name in found if name is not None), None)
    if pool is None:
        return True
    target = logging.getLogger(POOL_LOGGER)
    if target.isEnabledFor(record.levelno):
        moved = logging.makeLogRecord(record.__dict__)
        moved.name = POOL_LOGGER
        moved.msg = redact(record.getMessage())
        moved.args = ()
        setattr(moved, FIELDS, {"pool": pool})
        target.handle(moved)
    return False


def adopt_pool_logs() -> None:
    """Route the records ``psycopg.pool`` logs about the library's pools through
    :data:`POOL_LOGGER` (idempotent; called when the PostgreSQL stores are imported)."""
    import logging

    library_logger(POOL_LOGGER)  # the package's NullHandler in place before a record moves
    logger = logging.getLogger("psycopg.pool")
    if _route not in logger.filters:
        logger.addFilter(_route)


# -- the CLI ---------------------------------------------------------------------------------
@functools.cache
def _one_line() -> type[logging.Formatter]:
    """The CLI's formatter class (made on first use: :mod:`logging` is not imported with the
    package)."""
    import logging

    class OneLine(logging.Formatter):
        """``NAME: LEVEL: message``, the message on one line (a traceback, if any, follows)."""

        def __init__(self) -> None:
            super().__init__("%(name)s: %(levelname)s: %(message)s")

        def formatMessage(self, record: logging.LogRecord) -> str:
            record.message = " ".join(record.message.split())
            return super().formatMessage(record)

    return OneLine


@contextmanager
def logs_to(stream: TextIO, *, debug: bool = False) -> Iterator[None]:
    """While the block runs, the library's records go to ``stream`` (the CLI passes stderr),
    one line each, from WARNING (from DEBUG with ``debug``), and nowhere else: a host's own
    handlers (one on stdout, say) do not see them. The logger is restored afterwards."""
    import logging

    logger = logging.getLogger(ROOT)
    handler = logging.StreamHandler(stream)
    handler.setFormatter(_one_line()())
    level, propagate = logger.level, logger.propagate
    logger.setLevel(logging.DEBUG if debug else logging.WARNING)
    logger.propagate = False
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate
