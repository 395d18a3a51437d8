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
    """Logs ``transition`` events at info (Normal) or warning (Warning) level."""

    def __init__(self, logger: Any = None) -> None:
        self._log = get_logger("lifecycle.transitions", logger)

    def emit(self, transition: Transition) -> None:
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
