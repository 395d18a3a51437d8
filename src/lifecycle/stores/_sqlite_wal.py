"""Whether any connection may have committed to a SQLite file, without asking SQLite: its
WAL-index header, read from the shared-memory file every connection in WAL mode maps
(ADR 0171).

Every commit in WAL mode rewrites the first header of the WAL index (the ``-shm`` file beside
the database: the frame count, the change counter, the checksums) before the committing call
returns, and every connection reads it from that file's shared mapping. So if the header's 48
bytes are what they were when ``PRAGMA data_version`` was last asked, no connection has
committed since, and the status cache may answer without asking again: a compare of 48 bytes
instead of a statement. Any difference -- a commit, a checkpoint that restarted the WAL, a
header read while a writer was writing it -- only sends the caller back to ``PRAGMA
data_version``, which decides. Where the file cannot be mapped (no ``-shm`` file: another VFS,
exclusive locking mode), :meth:`WalHeader.read` answers ``None`` and every read asks SQLite.
"""

from __future__ import annotations

import contextlib
import mmap
import os

#: The first copy of the WAL-index header: its size in bytes.
HEADER = 48


class WalHeader:
    """The WAL-index header of the database at ``path``, mapped read-only at first use."""

    def __init__(self, path: str) -> None:
        self._path = path + "-shm"
        self._map: mmap.mmap | None = None
        self._tried = False
        #: the header as it was when ``PRAGMA data_version`` last answered (``None``: never)
        self.seen: bytes | None = None

    def read(self) -> bytes | None:
        """The header's bytes now, or ``None`` when the file cannot be mapped."""
        mapped = self._map
        if mapped is None:
            if self._tried:
                return None
            mapped = self._open()
            if mapped is None:
                return None
        return mapped[:HEADER]

    def _open(self) -> mmap.mmap | None:
        self._tried = True
        try:
            fd = os.open(self._path, os.O_RDONLY)
        except OSError:
            return None
        try:
            if os.fstat(fd).st_size < HEADER:
                return None
            self._map = mmap.mmap(fd, HEADER, access=mmap.ACCESS_READ)
        except (OSError, ValueError):
            return None
        finally:
            os.close(fd)
        return self._map

    def close(self) -> None:
        """Unmap the header; later reads answer ``None``."""
        self._tried = True
        self.seen = None
        if self._map is not None:
            with contextlib.suppress(BufferError, OSError):
                self._map.close()
            self._map = None
