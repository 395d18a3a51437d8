"""The Emitter protocol: where committed transitions go."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from .._core.transition import Transition


@runtime_checkable
class Emitter(Protocol):
    """Receives each committed transition (and each fallback Warning).

    ``emit`` may raise: the runner logs it and leaves the event in the outbox, from which
    :meth:`~lifecycle.Runner.redeliver` sends it again under the same ``id``. Delivery is at
    least once, so an emitter that must not repeat itself dedupes on ``transition.id``.
    """

    def emit(self, transition: Transition) -> None: ...
