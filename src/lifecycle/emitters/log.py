"""An emitter that writes one log record per transition (stdlib logger
``lifecycle.transitions``, ADR 0098), with the object ref bound. The message is redacted
(:func:`lifecycle.adapters.recording.redact`) on its way out."""

from __future__ import annotations

from typing import Any

from .._core.redact import redact
from .._core.refs import EventType
from .._core.transition import Transition
from .._log import get_logger


class LogEmitter:
    """Logs ``transition`` events at info (Normal) or warning (Warning) level.

    Args:
        logger: a structlog-style logger (``bind``, ``info``, ``warning``); by default the
            library's ``lifecycle.transitions`` logger, so a host filters transitions apart
            from the library's own records (ADR 0098).
    """

    def __init__(self, logger: Any = None) -> None:
        self._log = get_logger("lifecycle.transitions", logger)

    def emit(self, transition: Transition) -> None:
        """Write one record: the object's ref bound, the message redacted.

        Args:
            transition: the transition logged; a Warning at warning level, else info.
        """
        t = transition
        log = self._log.bind(
            kind=t.ref.kind, namespace=t.ref.namespace, name=t.ref.name, uid=t.ref.uid
        )
        method = log.warning if t.type is EventType.WARNING else log.info
        method(
            "transition",
            machine=t.machine,
            reason=t.reason,
            type=t.type.value,
            **{"from": t.source, "to": t.target},
            condition=t.condition or None,
            message=redact(t.message),
            version=t.version,
            id=t.id,
            at=t.at.isoformat(),
            fallback=t.fallback,
        )
