"""The library's stdlib loggers, quiet until the host says otherwise (ADR 0098).

A library never decides where its host's logs go: the ``lifecycle`` logger gets a
:class:`logging.NullHandler` when the first library logger is made, so nothing prints unless
the host configures logging. The kernel logs through :func:`library_logger` directly; the rest
of the package through the structlog face built on it (``lifecycle._log``).
"""

from __future__ import annotations

import logging

__all__ = ["ROOT", "library_logger"]

#: The library's root logger name.
ROOT = "lifecycle"


def library_logger(name: str) -> logging.Logger:
    """The stdlib logger ``name`` (``lifecycle`` or under it), the package's NullHandler in
    place; :class:`ValueError` for a name outside the package."""
    if name != ROOT and not name.startswith(ROOT + "."):
        raise ValueError(f"library loggers live under {ROOT!r}, not {name!r}")
    root = logging.getLogger(ROOT)
    if not any(type(h) is logging.NullHandler for h in root.handlers):
        root.addHandler(logging.NullHandler())
    return logging.getLogger(name)
