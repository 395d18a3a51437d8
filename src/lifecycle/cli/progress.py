"""The replay's progress bar on a terminal (ADR 0052), and the collector pause of a long replay."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

PROGRESS_DELAY = 0.5
#: A trace file this large (bytes) gets "reading"/"checking" notes on a terminal at once.
PROGRESS_NOTE_BYTES = 1 << 20


def _isatty(stream: object) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty()) if callable(isatty) else False
    except (OSError, ValueError):  # a closed or detached stream
        return False


class Progress:
    """A one-line progress bar for long work, on a terminal only.

    Nothing is ever written unless ``stream`` is a TTY. The bar appears once the work has
    run ``delay`` seconds, is redrawn at most every ``interval`` seconds, and :meth:`clear`
    erases it (before other output to the same terminal, and at the end).
    """

    def __init__(
        self,
        total: int,
        stream: TextIO,
        *,
        label: str = "replaying",
        delay: float | None = None,
        interval: float = 0.1,
        width: int = 28,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total = total
        self.stream = stream
        self.enabled = _isatty(stream)
        self.label = label
        self.delay = PROGRESS_DELAY if delay is None else delay
        self.interval = interval
        self.width = width
        self.clock = clock
        self.started = clock()
        self._first: tuple[float, int] | None = None  # (when, done) of the first update
        self._drawn_at: float | None = None
        self._shown = 0  # characters on the line now

    def _write(self, text: str) -> None:
        pad = " " * max(self._shown - len(text), 0)
        self.stream.write("\r" + text + pad)
        self.stream.flush()
        self._shown = len(text)

    def note(self, text: str) -> None:
        """Show ``text`` on the bar's line right away (a phase with no count yet)."""
        if self.enabled:
            self._write(text)

    def update(self, done: int) -> None:
        if not self.enabled or self.total <= 0:
            return
        now = self.clock()
        if self._first is None:
            self._first = (now, done)  # the rate counts from here, not from reading the trace
        if now - self.started < self.delay:
            return
        recent = self._drawn_at is not None and now - self._drawn_at < self.interval
        if recent and self._shown and done < self.total:
            return
        self._drawn_at = now
        done = min(max(done, 0), self.total)
        filled = self.width * done // self.total
        bar = "#" * filled + "." * (self.width - filled)
        text = f"{self.label} [{bar}] {done}/{self.total} {100 * done // self.total:3d}%"
        since, first = self._first
        if done < self.total and done > first and now - since >= self.delay:
            left = (now - since) * (self.total - done) / (done - first)
            text += f"  {left:.0f}s left"
        self._write(text)

    def clear(self) -> None:
        """Erase the line (if anything is on it); the next :meth:`update` draws it again."""
        if self.enabled and self._shown:
            self.stream.write("\r" + " " * self._shown + "\r")
            self.stream.flush()
            self._shown = 0


def _trace_size(path: str) -> int:
    try:
        return Path(path).stat().st_size
    except OSError:
        return 0


@contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """A replay allocates millions of small acyclic records that live until it ends; the
    cyclic collector would re-scan them again and again (~30 % of a 1M-line replay). Freeze
    what exists, pause the collector for the replay, and restore both afterwards."""
    was_enabled = gc.isenabled()
    freeze = gc.get_freeze_count() == 0  # a host that froze its own heap keeps it frozen
    if freeze:
        gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        if freeze:
            gc.unfreeze()
        if was_enabled:
            gc.enable()
