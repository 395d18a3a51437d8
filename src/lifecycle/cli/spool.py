"""What a ``memory://`` replay holds back until every line was accepted (ADR 0009), in
bounded memory: its output, and the library's log records.

A ``memory://`` replay is run once, as the trace is read, and shows nothing if a later line
is refused. Its output is held in a :class:`Spool`: in memory up to a limit, beyond it in an
anonymous temporary file, so a replay of any length holds at most the limit of it in memory
(the file goes when it is closed, or when the process ends, whatever ends it).
"""

from __future__ import annotations

import codecs
import sys
import tempfile
from typing import IO, TextIO

#: Bytes of held output kept in memory before they go to the temporary file.
SPOOL_MEMORY = 1 << 20
#: Bytes copied per write when the held output is finally shown.
COPY_CHUNK = 1 << 20


class Spool:
    """Bytes held back: :attr:`memory` up to ``limit``, then an anonymous temporary file.

    The hot path appends to :attr:`memory` itself and calls :meth:`spill` once it is longer
    than :attr:`limit` (one ``bytearray.extend`` a line, no call). Without a usable
    temporary directory everything stays in memory, as before this spool existed."""

    def __init__(self, limit: int | None = None) -> None:
        self.memory = bytearray()
        self.limit = SPOOL_MEMORY if limit is None else limit
        self._file: IO[bytes] | None = None

    def write(self, data: bytes) -> None:
        """Hold ``data`` after what is held."""
        self.memory += data
        if len(self.memory) > self.limit:
            self.spill()

    def spill(self) -> None:
        """Move what is in memory to the temporary file (opened on first use)."""
        if self._file is None:
            try:
                self._file = tempfile.TemporaryFile(prefix="lifecycle-replay-")  # noqa: SIM115
            except OSError:  # no writable temporary directory: hold it in memory
                self.limit = sys.maxsize
                return
        self._file.write(self.memory)
        self.memory.clear()

    @property
    def spilled(self) -> bool:
        """Whether part of the held bytes is in the temporary file."""
        return self._file is not None

    def copy_to(self, out: TextIO) -> None:
        """Write everything held to ``out``, in order, as text (UTF-8, decoded a chunk at a
        time: a character cut by a chunk's end is completed by the next)."""
        decode = codecs.getincrementaldecoder("utf-8")().decode
        if self._file is not None:
            self._file.flush()
            self._file.seek(0)
            while chunk := self._file.read(COPY_CHUNK):
                out.write(decode(chunk))
        for start in range(0, len(self.memory), COPY_CHUNK):
            out.write(decode(bytes(self.memory[start : start + COPY_CHUNK])))
        out.write(decode(b"", final=True))

    def close(self) -> None:
        """Drop what is held (the temporary file is deleted)."""
        self.memory.clear()
        if self._file is not None:
            self._file.close()
            self._file = None


class LogStream:
    """Where the CLI's handler writes the library's log records: ``sys.stderr`` as it is when
    written (a test's capture included), or a :class:`Spool` while :attr:`held` is set — a
    ``memory://`` replay holds its log records back with its output, so a refused trace says
    one line (the refusal) and nothing about writes to a store that is thrown away."""

    def __init__(self) -> None:
        self.held: Spool | None = None

    def write(self, text: str) -> int:
        held = self.held
        if held is not None:
            held.write(text.encode("utf-8", "backslashreplace"))
        else:
            sys.stderr.write(text)
        return len(text)

    def flush(self) -> None:
        if self.held is None:
            sys.stderr.flush()


#: The stream of the library's log records while a command runs (stderr; held back by a
#: ``memory://`` replay).
LOGS = LogStream()
