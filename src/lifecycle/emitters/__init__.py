"""Emitters: where committed transitions are delivered."""

from .base import Emitter
from .log import LogEmitter
from .memory import MemoryEmitter

__all__ = ["Emitter", "LogEmitter", "MemoryEmitter"]
