"""The library's stdlib loggers, quiet until the host says otherwise (ADR 0098).

A library never decides where its host's logs go: the ``lifecycle`` logger gets a
:class:`logging.NullHandler` before the first library record is made, so nothing prints
unless the host configures logging. :mod:`logging` itself is imported then, not when a module
makes its logger (ADR 0139). The kernel logs through :func:`library_logger` directly; the rest
of the package through the structlog face built on it (``lifecycle._log``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import logging

__all__ = ["ROOT", "checked_name", "library_logger"]

#: The library's root logger name.
ROOT = "lifecycle"


def checked_name(name: str) -> str:
    """``name`` if it is ``lifecycle`` or under it; :class:`ValueError` otherwise."""
    if name != ROOT and not name.startswith(ROOT + "."):
        raise ValueError(f"library loggers live under {ROOT!r}, not {name!r}")
    return name


def library_logger(name: str) -> logging.Logger:
    """The stdlib logger ``name`` (``lifecycle`` or under it), the package's NullHandler in
    place; :class:`ValueError` for a name outside the package."""
    import logging

    checked_name(name)
    root = logging.getLogger(ROOT)
    if not any(type(h) is logging.NullHandler for h in root.handlers):
        root.addHandler(logging.NullHandler())
    return logging.getLogger(name)
