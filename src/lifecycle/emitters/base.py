"""The emitter port: where committed transitions go, and when an outbox row may be marked.

Two kinds of emitter, one contract (ADR 0121):

- A **synchronous** emitter (:class:`Emitter`: ``emit`` only, as :class:`LogEmitter` and
  :class:`MemoryEmitter`) has the event when ``emit`` returns: returning *is* its
  acknowledgement, and the outbox row is marked delivered at once. Raising means "not
  delivered": the row stays in the outbox and is sent again (``Runner.redeliver``, the
  ``Dispatcher``) under the same ``id``.
- An **acknowledging** emitter (:class:`AcknowledgingEmitter`, as ``KubernetesEmitter``)
  hands the event to a destination that answers later. Its ``deliver(transition, ack)``
  must return without waiting on the destination, and call ``ack(transition, outcome)``
  exactly once, later, from any thread (or before it returns): :attr:`Ack.DELIVERED` when
  the destination has the event, :attr:`Ack.REFUSED` when the destination refused it for
  good (the emitter logs and counts it; the row is marked so it is not retried forever),
  :attr:`Ack.FAILED` when it could not deliver it (gave up, closed first): the row stays.
  Raising from ``deliver`` is "not taken", as for ``emit``.

What every emitter must do to be crash-safe: acknowledge only what its destination holds;
be idempotent on ``transition.id`` with its content, :func:`delivery_key` (delivery is at least
once: after a crash, whatever was not acknowledged *and marked* comes again under the same id
-- a Kubernetes Event is named from it, so a repeat is an ``AlreadyExists`` whose stored
content is checked; an id handed out again for other content is a new event, ADR 0141);
never drop an event silently (log and count each refusal or drop); and finish or give back
what it holds when closed within the host's bound.
:func:`lifecycle.testing.check_emitter` checks this contract on any emitter.

Best-effort events that are not in the outbox (a row's action events, a fallback Warning)
go through ``emit`` only, acknowledging emitters included: nothing is marked or repeated.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from .._core.transition import Transition

__all__ = [
    "Ack",
    "Acknowledge",
    "AcknowledgingEmitter",
    "DeliveryKey",
    "Emitter",
    "delivery_key",
    "emitter_name",
]


class Ack(enum.Enum):
    """What an acknowledging emitter reports for one event it took."""

    #: the destination has the event (a Kubernetes Event created, patched into its series,
    #: or already there under its name): the outbox row is marked delivered
    DELIVERED = "delivered"
    #: the destination refused it for good (invalid): logged and counted by the emitter,
    #: and marked, so that it is not retried forever
    REFUSED = "refused"
    #: not delivered (retries exhausted, closed before it was sent): the row stays in the
    #: outbox and is sent again by the next redelivery
    FAILED = "failed"


#: The callback an acknowledging emitter calls once per event it took.
Acknowledge = Callable[[Transition, Ack], None]


@runtime_checkable
class Emitter(Protocol):
    """Receives each committed transition (and each best-effort one: actions, a fallback
    Warning). Synchronous: returning from ``emit`` acknowledges the event (see the module).

    ``emit`` may raise: the runner logs it and leaves the event in the outbox, from which
    :meth:`~lifecycle.Runner.redeliver` sends it again under the same ``id``. Delivery is at
    least once, so an emitter that must not repeat itself dedupes on ``transition.id`` with
    its content (:func:`delivery_key`).
    """

    def emit(self, transition: Transition) -> None:
        """Take one transition; returning is the acknowledgement.

        Args:
            transition: the committed (or best-effort) transition, immutable; its ``id`` is
                what a repeat after a crash carries again, so dedupe on it with its content.

        Raises:
            Exception: anything, meaning "not delivered": the event stays in the outbox and
                is sent again under the same ``id``.
        """
        ...


@runtime_checkable
class AcknowledgingEmitter(Emitter, Protocol):
    """An emitter whose destination answers later: outbox events go through ``deliver``,
    which returns at once and calls ``ack`` exactly once when the outcome is known (see the
    module). ``emit`` still takes the best-effort events."""

    def deliver(self, transition: Transition, ack: Acknowledge) -> None:
        """Hand one outbox event to the destination and return without waiting on it.

        Args:
            transition: the outbox event; repeated after a crash under the same ``id``.
            ack: called exactly once per event taken, later and from any thread (or before
                this returns), with the :class:`Ack` outcome; the outbox row is marked only
                then, so an event the destination never got is sent again.

        Raises:
            Exception: anything, meaning "not taken": ``ack`` must then not be called.
        """
        ...


#: What an emitter dedupes on: see :func:`delivery_key`.
DeliveryKey = tuple[str, str, str, str, str, str, str, str]


def delivery_key(transition: Transition) -> DeliveryKey:
    """What makes two deliveries the same event: the transition's ``id`` *and* what it
    records (object, type, reason, message). A store that lost writes can hand an id out
    again for another transition (ADR 0141): the same id with other content is a new event,
    not a repeat, so an emitter that remembers what it delivered keys on this, never on the
    id alone.

    Args:
        transition: the event delivered.

    Returns:
        ``(id, kind, namespace, name, uid, type, reason, message)``: equal keys are one event.
    """
    t = transition
    r = t.ref
    return (t.id, r.kind, r.namespace, r.name, r.uid, t.type.value, t.reason, t.message)


def emitter_name(emitter: object) -> str:
    """The name logs and stats give ``emitter``.

    Args:
        emitter: any emitter; one with a non-empty ``name`` attribute is called by it, so two
            instances of one class can be told apart in the logs.

    Returns:
        Its ``name`` attribute, else its class's name.
    """
    name = getattr(emitter, "name", None)
    return name if isinstance(name, str) and name else type(emitter).__name__
