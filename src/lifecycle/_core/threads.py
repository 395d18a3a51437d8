"""Starting the library's background threads when the process may be out of threads or memory
(ADR 0140).

``threading.Thread.start`` raises ``RuntimeError("can't start new thread")`` when the system
refuses a thread (an address-space cap, a thread limit) and ``MemoryError`` when Python cannot
allocate one. Every background thread the library starts is a helper -- a mark writer, a
watchdog, a listener, a worker -- whose work has a slower path that needs no thread. So a
refused start is never an exception out of a store, runner or emitter call: :func:`start`
logs a warning naming the thread and what is degraded until one starts, and says ``False``;
the caller takes its fallback (write inline, rely on the next commit or close) and may try
again later. The thread object of a refused start is never kept: it cannot be joined.
"""

from __future__ import annotations

import threading

from .logs import library_logger

__all__ = ["start"]


def start(thread: threading.Thread, degraded: str, *, log: bool = True) -> bool:
    """Start ``thread``; ``False`` (and, with ``log``, a warning saying ``degraded``: what
    works otherwise until a thread starts) if the process cannot start one now. A caller
    that tries again on every use logs only its first refusal."""
    try:
        thread.start()
    except (RuntimeError, MemoryError) as e:
        if isinstance(e, RuntimeError) and "new thread" not in str(e):
            raise  # not a refused start (started twice, say): the caller's bug, shown
        if log:  # the logger (and ``logging``) only once a start was refused (ADR 0139)
            library_logger("lifecycle.threads").warning(
                "could not start thread %s (%s); degraded: %s",
                thread.name,
                str(e) or type(e).__name__,
                degraded,
            )
        return False
    return True
