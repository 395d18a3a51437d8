"""Emitters: where committed transitions are delivered.

Each name is imported on first use (``from lifecycle.emitters import LogEmitter``): a runner
imports only the port, :mod:`lifecycle.emitters.base` (ADR 0139)."""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for type checkers; at run time each name is imported on first use
    from .base import Emitter
    from .log import LogEmitter
    from .memory import MemoryEmitter

#: Where each name lives.
_HOME_OF = {"Emitter": ".base", "LogEmitter": ".log", "MemoryEmitter": ".memory"}


def __getattr__(name: str) -> Any:
    module = _HOME_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # the next access is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = ["Emitter", "LogEmitter", "MemoryEmitter"]
