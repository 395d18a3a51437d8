"""Delivery: hand committed events to every emitter, then mark them delivered -- once, for the
``Runner``, the ``AsyncRunner`` and the outbox ``Dispatcher`` (ADR 0092, 0121).

One ordering guarantee everywhere: within one delivery, each object's events go out in the
order they were committed (version, then position), and an object stops at its first event
that some emitter refused to take -- its later events stay in the outbox behind it, so none
overtakes it (they follow with it on redelivery). Every emitter gets every event it is handed;
one emitter failing never keeps an event from the others. Only events every emitter has are
marked delivered; a mark that fails is logged (the events repeat, under their ids: delivery
is at least once). A store without an outbox (no ``mark_delivered``) delivers inline only.

A synchronous emitter has an event when ``emit`` returns. An acknowledging one
(:class:`~lifecycle.emitters.base.AcknowledgingEmitter`) answers later, on its own thread:
the event is *in flight* until every such emitter acknowledged it, and is marked only then
(refused for good counts as done; failed leaves it in the outbox). Acknowledgements are
collected here and marked in batches, by the next delivery on the runner's own thread (at
least ``mark_batch`` of them, or the oldest ``mark_interval`` seconds old), by
:meth:`Delivery.flush` and at :meth:`Delivery.close`. An id still in flight is not handed out
again by a redelivery. A crash loses only acknowledgements not yet marked: those events are
sent again, under their ids (a Kubernetes Event's name comes from its id: ``AlreadyExists``).

Best-effort events that are not in the outbox (a row's action events, a fallback Warning) are
:meth:`Delivery.announce`-d: handed to every emitter's ``emit``, a failure logged, nothing
queued.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from ._core import threads
from ._core.errors import LifecycleError, StoreError
from ._core.transition import Transition
from .emitters.base import Ack, Acknowledge, Emitter, delivery_key, emitter_name

#: Marks outbox ids delivered (a store's ``mark_delivered``).
Mark = Callable[[Sequence[str]], None]


class Redelivery(int):
    """What a redelivery did: the ``int`` itself is how many events it handed over (every
    emitter took each: a synchronous one returned from ``emit``, an acknowledging one
    accepted it for delivery), ``acknowledged`` how many of those every emitter already
    confirmed when it returned (all of them, without an acknowledging emitter). The rest are
    ``in_flight``: marked delivered once acknowledged (``flush``, ``close``), or left in the
    outbox for the next redelivery if an emitter fails them (ADR 0135).

    Args:
        handed: how many events were handed over.
        acknowledged: how many of them every emitter confirmed; default all of them.

    Raises:
        ValueError: ``acknowledged`` outside ``0..handed``.
    """

    acknowledged: int

    def __new__(cls, handed: int = 0, acknowledged: int | None = None) -> Redelivery:
        if acknowledged is not None and not 0 <= acknowledged <= handed:
            raise ValueError(f"acknowledged must be within 0..{handed}, got {acknowledged}")
        made = super().__new__(cls, handed)
        made.acknowledged = handed if acknowledged is None else acknowledged
        return made

    @property
    def handed(self) -> int:
        """How many events were handed over (the value itself)."""
        return int(self)

    @property
    def in_flight(self) -> int:
        """Handed over, and not yet acknowledged by every emitter when it returned."""
        return int(self) - self.acknowledged

    def __repr__(self) -> str:
        return f"Redelivery(handed={int(self)}, acknowledged={self.acknowledged})"

    def __str__(self) -> str:  # printed and formatted as the count it is
        return int.__repr__(self)

    def __reduce__(self) -> tuple[Any, ...]:
        return (Redelivery, (int(self), self.acknowledged))

    def joined(self, other: Redelivery) -> Redelivery:
        """Both redeliveries' counts together.

        Args:
            other: the other redelivery.

        Returns:
            The sums of both counts.
        """
        return Redelivery(int(self) + int(other), self.acknowledged + other.acknowledged)


#: Acknowledged ids marked together (at least this many, unless the oldest waited long).
MARK_BATCH = 256
#: Seconds the oldest acknowledgement waits for a batch before the next delivery marks it.
MARK_INTERVAL = 0.5


class _Flight:
    """One event handed to the acknowledging emitters, until each answered."""

    __slots__ = ("failed", "transition", "waiting")

    def __init__(self, waiting: int, transition: Transition) -> None:
        self.waiting = waiting
        self.failed = False
        #: the event in flight: an id handed out again for other content is not it
        self.transition = transition


def _same(a: Transition, b: Transition) -> bool:
    """Whether ``a`` and ``b`` are one event (its id with its content, ADR 0141)."""
    return a is b or delivery_key(a) == delivery_key(b)


class Delivery:
    """Hands events to ``emitters`` in the one order and says which to mark delivered."""

    __slots__ = (
        "_acked",
        "_acked_since",
        "_acking",
        "_callbacks",
        "_cond",
        "_emitters",
        "_flight",
        "_idle_mark",
        "_sync",
        "_timer",
        "acks",
        "log",
        "mark_batch",
        "mark_interval",
        "silent",
        "timer_refusals",
    )

    def __init__(
        self,
        emitters: Sequence[Emitter],
        log: Any,
        *,
        mark_batch: int = MARK_BATCH,
        mark_interval: float = MARK_INTERVAL,
    ) -> None:
        #: structlog-style logger for emitter and mark failures
        self.log = log
        self.mark_batch = mark_batch
        self.mark_interval = mark_interval
        self._cond = threading.Condition(threading.Lock())
        self._flight: dict[str, _Flight] = {}
        #: acknowledged ids not yet marked, with the event each was (a dict: ordered, and
        #: looked up by redeliveries)
        self._acked: dict[str, Transition] = {}
        self._acked_since = 0.0
        #: where acknowledgements are marked when no delivery comes to take them (see
        #: :meth:`mark_when_idle`), and the timer that will
        self._idle_mark: Mark | None = None
        self._timer: threading.Timer | None = None
        #: times the timer could not be started (ADR 0140): acknowledgements were then
        #: marked by the thread that received them
        self.timer_refusals = 0
        #: acknowledgements received, per (emitter name, outcome)
        self.acks: collections.Counter[tuple[str, Ack]] = collections.Counter()
        self.emitters = tuple(emitters)

    @property
    def emitters(self) -> tuple[Emitter, ...]:
        return self._emitters

    @emitters.setter
    def emitters(self, emitters: Sequence[Emitter]) -> None:
        self._emitters = tuple(emitters)
        #: No emitter: a committed event is delivered to nobody, so nothing waits for it
        #: (an attribute: the runner's hot path reads it, ADR 0170).
        self.silent = not self._emitters
        acking = [e for e in self._emitters if callable(getattr(e, "deliver", None))]
        self._acking = tuple(acking)
        self._sync = tuple(e for e in self._emitters if e not in acking)
        self._callbacks: dict[int, Acknowledge] = {
            id(e): self._acknowledger(emitter_name(e)) for e in acking
        }

    def mark_when_idle(self, mark: Mark | None) -> None:
        """Mark acknowledgements with ``mark`` ``mark_interval`` seconds after the first of a
        batch arrived, even when no later delivery comes to take them (an idle runner): a
        timer thread calls it (the stores' marks are thread-safe). ``None`` stops that."""
        with self._cond:
            self._idle_mark = mark
            timer, self._timer = self._timer, None
        if timer is not None and mark is None:
            timer.cancel()

    def _on_timer(self) -> None:
        with self._cond:
            self._timer = None
            mark = self._idle_mark
        if mark is not None:
            self.mark(self.take_acked(force=True), mark)

    def send(self, events: Sequence[Transition]) -> list[str]:
        """Hand ``events`` (committed, in commit order per object) to every emitter; the ids
        to mark delivered now: those every emitter took at once, and acknowledgements that
        arrived since (in batches). An object stops at its first event an emitter refused."""
        if not self._emitters:
            return [t.id for t in events]
        if not self._acking:
            delivered: list[str] = []
            stopped: set[str] = set()
            for t in events:
                if stopped and t.ref.uid in stopped:
                    continue
                if self._hand(t, self._sync):
                    delivered.append(t.id)
                else:
                    stopped.add(t.ref.uid)
            return delivered
        return self._send_acked(events)[0]

    def send_counted(self, events: Sequence[Transition]) -> tuple[list[str], Redelivery]:
        """:meth:`send`, with how many events every emitter took and how many of those
        every emitter has acknowledged by now (a redelivery's counts)."""
        if self._acking:
            return self._send_acked(events, counted=True)
        marks = self.send(events)
        return marks, Redelivery(len(marks))

    def _send_acked(
        self, events: Sequence[Transition], *, counted: bool = False
    ) -> tuple[list[str], Redelivery]:
        stopped: set[str] = set()
        flight = self._flight
        taken: list[_Flight] = []  # handed over: every emitter took it (counted only)
        for t in events:
            if stopped and t.ref.uid in stopped:
                continue
            with self._cond:
                # handed out already: answered, unless it is other content (ADR 0141)
                if (t.id in flight or t.id in self._acked) and self._repeat(t):
                    continue
            took = self._hand(t, self._sync)
            if not took:  # the others still get it; it stays in the outbox for this one
                stopped.add(t.ref.uid)
            with self._cond:
                f = flight[t.id] = _Flight(len(self._acking), t)
                f.failed = not took
            for emitter in self._acking:
                try:
                    emitter.deliver(t, self._callbacks[id(emitter)])  # type: ignore[attr-defined]
                except Exception as e:  # not taken: as a synchronous emitter raising
                    self._failed_hand(t, emitter, e)
                    stopped.add(t.ref.uid)
                    self._answer(t, Ack.FAILED, None)
                    took = False
                except BaseException:  # interrupted (ADR 0105): not in flight, so the row
                    with self._cond:  # stays undelivered and the next pass sends it
                        self._flight.pop(t.id, None)
                        self._cond.notify_all()
                    raise
            if took and counted:
                taken.append(f)
        if not counted:
            return self.take_acked(), _NONE_COUNTED
        with self._cond:  # (an answer for an id is final: its flight is not reused)
            acked = sum(1 for f in taken if f.waiting <= 0 and not f.failed)
        return self.take_acked(), Redelivery(len(taken), acked)

    def _repeat(self, t: Transition) -> bool:
        """Whether ``t``, whose id is in flight or acknowledged, is that same event (call with
        the lock held). An id handed out again for other content (a store that lost writes)
        is a new event: what the old one left is forgotten -- its answer no longer marks the
        id -- and the new one is sent (ADR 0141)."""
        f = self._flight.get(t.id)
        before = f.transition if f is not None else self._acked[t.id]
        if _same(before, t):
            return True
        self._acked.pop(t.id, None)
        self._flight.pop(t.id, None)
        self.log.warning(
            "event id handed out again for other content; delivered as a new event",
            id=t.id,
            reason=t.reason,
            was=before.reason,
        )
        return False

    def take_acked(self, *, force: bool = False) -> list[str]:
        """The acknowledged ids to mark now (and forget): all of them with ``force``, else
        only a full batch or one whose oldest waited ``mark_interval``."""
        with self._cond:
            acked = self._acked
            if not acked:
                return []
            if (
                not force
                and len(acked) < self.mark_batch
                and time.monotonic() - self._acked_since < self.mark_interval
            ):
                return []
            self._acked = {}
            return list(acked)

    def in_flight(self) -> int:
        """Events handed to the acknowledging emitters and not yet answered by all of them."""
        with self._cond:
            return len(self._flight)

    def wait(self, timeout: float | None) -> bool:
        """Wait until nothing is in flight; False if ``timeout`` ran out first."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._flight, timeout)

    def announce(self, events: Sequence[Transition]) -> None:
        """Hand best-effort events (actions, a fallback Warning) to every emitter: not in
        the outbox, so nothing is marked or repeated."""
        if self._emitters:
            for t in events:
                self._hand(t, self._emitters)

    def deliver(self, events: Sequence[Transition], mark: Mark | None) -> int:
        """:meth:`send`, then ``mark`` what every emitter has; how many that was."""
        if not events:
            return 0
        if self._emitters:
            delivered = self.send(events)
        elif len(events) == 1:  # nobody to hand it to: it is delivered (the hot path)
            delivered = [events[0].id]
        else:
            delivered = [t.id for t in events]
        if delivered and mark is not None:
            self.mark(delivered, mark)
        return len(delivered)

    def mark(self, ids: Sequence[str], mark: Mark | None) -> None:
        """``mark`` ``ids`` delivered; a failure is logged (they repeat, under their ids)."""
        if ids and mark is not None:
            try:
                mark(ids)
            except StoreError as e:
                self.unmarked(e)

    def flush(self, mark: Mark | None, timeout: float | None = 0.0) -> int:
        """Wait up to ``timeout`` seconds for the events in flight, then mark every
        acknowledgement received; how many were marked."""
        if timeout is None or timeout > 0:
            self.wait(timeout)
        acked = self.take_acked(force=True)
        self.mark(acked, mark)
        return len(acked)

    def close(self, mark: Mark | None, timeout: float = 5.0) -> int:
        """Close the acknowledging emitters (each flushes within what is left of
        ``timeout``), mark every acknowledgement, and log how many events stay undelivered
        in the outbox (the next start sends them). Returns that count."""
        deadline = time.monotonic() + timeout
        before = self.failures()
        self.close_emitters(deadline)
        self.wait(max(deadline - time.monotonic(), 0.0))
        self.mark_when_idle(None)  # what is left is marked here, now
        self.flush(mark)
        return self.closed(before)

    def close_emitters(self, deadline: float) -> None:
        """Close each acknowledging emitter within what is left until ``deadline``
        (``time.monotonic``); they answer what they took (failed: it stays in the outbox)."""
        for emitter in self._acking:
            close = getattr(emitter, "close", None)
            if callable(close):
                close(timeout=max(deadline - time.monotonic(), 0.0))

    def closed(self, failures_before: int) -> int:
        """After a close: log how many events stay undelivered in the outbox (in flight, or
        failed since ``failures_before``), and return that count."""
        with self._cond:
            left = len(self._flight)
        failed = self.failures() - failures_before
        if left or failed:
            self.log.warning(
                "delivery closed; events stay undelivered in the outbox",
                in_flight=left,
                failed=failed,
            )
        return left + failed

    def unmarked(self, error: StoreError, what: str = "events delivered") -> None:
        """Log a mark that failed: the events (or intents) will repeat, under their ids."""
        self.log.warning(f"could not mark {what}; they will repeat", error=str(error))

    # -- internals ----------------------------------------------------------------------------
    def failures(self) -> int:
        """How many acknowledgements said FAILED so far."""
        with self._cond:
            return sum(n for (_, outcome), n in self.acks.items() if outcome is Ack.FAILED)

    def _acknowledger(self, name: str) -> Acknowledge:
        def ack(transition: Transition, outcome: Ack) -> None:
            self._answer(transition, outcome, name)

        return ack

    def _answer(self, t: Transition, outcome: Ack, name: str | None) -> None:
        with self._cond:
            if name is not None:
                self.acks[(name, outcome)] += 1
            f = self._flight.get(t.id)
            if f is None or not _same(f.transition, t):
                return  # answered twice (the first answer counts), or for a replaced event
            f.waiting -= 1
            if outcome is Ack.FAILED:
                f.failed = True
            if f.waiting > 0:
                return
            del self._flight[t.id]
            inline: Mark | None = None
            if not f.failed:
                if not self._acked:
                    self._acked_since = time.monotonic()
                    if self._idle_mark is not None and self._timer is None:
                        inline = self._start_timer()
                self._acked[t.id] = t
            self._cond.notify_all()
        if inline is not None:  # no timer thread: the acknowledging thread marks them itself
            self.mark(self.take_acked(force=True), inline)

    def _start_timer(self) -> Mark | None:
        """Start the idle-mark timer (under ``_cond``); if no thread can be started (ADR
        0140), the mark to write the acknowledgements with now, in the caller's thread."""
        timer = threading.Timer(self.mark_interval, self._on_timer)
        timer.daemon = True
        timer.name = "lifecycle-marks"
        if threads.start(timer, _NO_TIMER, log=not self.timer_refusals):
            self._timer = timer
            return None
        self.timer_refusals += 1
        return self._idle_mark

    def _failed_hand(self, t: Transition, emitter: object, e: Exception) -> None:
        self.log.warning(
            "emitter failed; event stays in the outbox",
            id=t.id,
            emitter=emitter_name(emitter),
            error=repr(e),
        )

    def _hand(self, t: Transition, emitters: Sequence[Emitter]) -> bool:
        """``t`` to each of ``emitters``' ``emit``; whether every one took it."""
        ok = True
        for emitter in emitters:
            try:
                emitter.emit(t)
            except Exception as e:  # an emitter must never undo a commit
                ok = False
                self._failed_hand(t, emitter, e)
        return ok


_NONE_COUNTED = Redelivery(0)
#: What delivery does without its idle-mark timer (the log line of ADR 0140).
_NO_TIMER = "acknowledged deliveries are marked by the thread that receives each acknowledgement"


def in_order(rows: Sequence[Transition]) -> list[Transition]:
    """Claimed outbox rows in delivery order: objects as they first appear, each object's
    rows by version and position."""
    first: dict[str, int] = {}
    for t in rows:
        first.setdefault(t.ref.uid, len(first))
    return sorted(rows, key=lambda t: (first[t.ref.uid], t.version, t.n))


def settle(store: object, *, close: bool, log: Any) -> None:
    """After a runner's last delivery: close ``store`` (``close``: the runner owns it) or
    write the delivery marks it still holds (its optional ``flush_marks``), so a process that
    exits right after finds nothing delivered waiting in the outbox (ADR 0135). A failure is
    logged: those events repeat, under their ids. (A store refusing because this replica
    does not lead -- ``lifecycle.leader.NotLeader`` -- is such a failure: a follower's close
    must not fail its host's shutdown.)"""
    call = getattr(store, "close" if close else "flush_marks", None)
    if callable(call):
        try:
            call()
        except LifecycleError as e:
            log.warning("could not write delivery marks at close; they will repeat", error=str(e))


def marker(store: object) -> Mark | None:
    """``store``'s ``mark_delivered``, or ``None`` for a store without an outbox."""
    mark: Mark | None = getattr(store, "mark_delivered", None)
    return mark
