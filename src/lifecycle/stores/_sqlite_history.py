"""A SQLite store's history: epochs across a restored copy of its file (ADR 0037).

A SQLite file restored from a backup (or replaced by any older copy) has lost the commits made
after the copy; the store would hand out those versions again, for different events, under
the same event ids. To notice, the database and a small file next to it (the *history file*,
``<db>.lifecycle-history``) hold the same random *history tag*. A store handle draws a new tag
before its first write, and again when it closes after writing, and writes it to both -- the
history file first (flushed), then the database, in a transaction holding SQLite's write lock,
so processes sharing the file agree. A handle that writes nothing leaves the file as it was.

At open, a database whose tag is not its history file's is an older copy: the store starts a
new **epoch** (a random tag recorded in the database), later commits' event ids carry it
(``uid:v:n@TAG``, as PostgreSQL's epochs, ADR 0068), and the change is reported. A database
that never had a tag, without a history file, is new (or older than history tags): its epoch
stays ``""`` and its ids are unchanged. Commits pay nothing: the tag changes once per handle
before its first write and once at its close.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import attrs

from .._log import get_logger

if TYPE_CHECKING:
    from pathlib import Path

SUFFIX = ".lifecycle-history"
_MAGIC = "lifecycle-history 1"
_log = get_logger("lifecycle.stores")

EPOCHS_TABLE = """
CREATE TABLE IF NOT EXISTS lifecycle_epochs (
    seq INTEGER PRIMARY KEY,
    tag TEXT NOT NULL,
    started TEXT NOT NULL,
    started_by TEXT NOT NULL,
    why TEXT NOT NULL
);
"""


@attrs.frozen(slots=True)
class HistoryRewind:
    """The SQLite file went back in time: the database holds history tag ``found`` where its
    history file expected ``expected`` (``""``: none) -- it was replaced by an older copy, and
    the commits made after that copy are lost. ``epoch`` is the store's new epoch."""

    path: str
    expected: str
    found: str
    epoch: str

    def __str__(self) -> str:
        return (
            f"{self.path}: the database is an older copy of the store (history tag "
            f"{self.found or '(none)'}, expected {self.expected or '(no history file)'}); "
            f"commits made after that copy are lost; new epoch {self.epoch}"
        )


@attrs.frozen(slots=True)
class SQLiteHistory:
    """What ``lifecycle db check`` reports of a SQLite store's history: the epochs started
    after a restored copy was found (none: the file's history never went back)."""

    where: str
    epochs: list[tuple[int, str, str, str, str]]
    #: the last epoch an operator recorded as reviewed (``lifecycle db check --acknowledge``,
    #: ADR 0163): the epochs up to it are listed, marked reviewed, and are no finding
    reviewed: int = 0

    @property
    def ok(self) -> bool:
        return all(seq <= self.reviewed for seq, *_ in self.epochs)

    def lines(self) -> list[str]:
        out = [f"{self.where}: {len(self.epochs) + 1} epoch(s)"]
        for seq, tag, started, by, why in self.epochs:
            seen = " (reviewed)" if seq <= self.reviewed else ""
            out.append(f"epoch {seq} {tag}: since {started} by {by}: {why}{seen}")
        if not self.ok:
            out.append(
                "the file was replaced by an older copy (a restored backup): commits made "
                "after each copy are lost; event ids of later commits carry @EPOCH, so none "
                "names two events; once reviewed, `lifecycle db check --acknowledge` records "
                "it and later checks pass until the history changes again"
            )
        return out


def sidecar_for(path: str) -> Path | None:
    """The history file of the database at ``path``; ``None`` for an in-memory database."""
    if not path or path == ":memory:" or path.startswith("file:"):
        return None
    from pathlib import Path  # here: pathlib is imported when a store opens a file (ADR 0139)

    return Path(path + SUFFIX)


def _read(sidecar: Path) -> str | None:
    """The tag the history file holds; ``None`` when there is none, ``""`` when unreadable."""
    try:
        text = sidecar.read_text(encoding="ascii")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError):
        return ""
    lines = text.splitlines()
    if len(lines) != 2 or lines[0] != _MAGIC:
        return ""
    return lines[1]


def _write(sidecar: Path, tag: str, durable: bool) -> None:
    """Replace the history file's tag atomically (a temporary file renamed over it), flushed
    to disk -- file and folder -- when ``durable``."""
    tmp = sidecar.with_name(sidecar.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, f"{_MAGIC}\n{tag}\n".encode("ascii"))
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, sidecar)
    if durable:
        with contextlib.suppress(OSError):  # a folder cannot be opened on some systems
            dfd = os.open(sidecar.parent, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)


def _meta(db: sqlite3.Connection, key: str) -> str | None:
    row = db.execute("SELECT value FROM lifecycle_meta WHERE key = ?", (key,)).fetchone()
    return None if row is None else str(row[0])


def _set_meta(db: sqlite3.Connection, key: str, value: str) -> None:
    db.execute(
        "INSERT INTO lifecycle_meta VALUES (?, ?) ON CONFLICT (key) DO UPDATE "
        "SET value = excluded.value",
        (key, value),
    )


def begin_session(
    db: sqlite3.Connection, path: str, *, durable: bool, owner: str
) -> tuple[str, HistoryRewind | None]:
    """At open, inside a write transaction: compare the database's history tag with its
    history file's; if they differ, start a new epoch and write a new tag to both (so the
    next open does not find the same difference again). Returns the store's epoch and the
    rewind found (``None``: none)."""
    sidecar = sidecar_for(path)
    epoch = _meta(db, "epoch") or ""
    if sidecar is None:
        return epoch, None
    found = _meta(db, "history")
    expected = _read(sidecar)
    rewind = None
    if not (found is None and expected is None) and found != expected:
        seq = int(
            db.execute("SELECT coalesce(max(seq), 0) + 1 FROM lifecycle_epochs").fetchone()[0]
        )
        import secrets

        epoch = f"s{seq}-{secrets.token_hex(3)}"
        why = (
            "no history file next to the database"
            if expected is None
            else f"database history tag {found or '(none)'}, history file {expected or '(none)'}"
        )
        db.execute(
            "INSERT INTO lifecycle_epochs VALUES (?, ?, ?, ?, ?)",
            (seq, epoch, datetime.now(UTC).isoformat(timespec="seconds"), owner, why),
        )
        _set_meta(db, "epoch", epoch)
        rewind = HistoryRewind(path, expected or "", found or "", epoch)
        # a database without its history file may be a copy moved elsewhere, or restored to
        # a new host: a new epoch either way, said less loudly
        report = _log.warning if expected is None else _log.error
        report(
            "the SQLite file's history went back (restored from an older copy?): commits made "
            "after the copy are lost; new store epoch, event ids now end in @" + epoch,
            store=path,
            found=found,
            expected=expected,
            epoch=epoch,
        )
        advance(db, sidecar, durable=durable)
    return epoch, rewind


def advance(db: sqlite3.Connection, sidecar: Path, *, durable: bool) -> None:
    """Inside the write transaction: a new history tag, in the history file first, then in
    the database (committed by the caller). A crash between the two makes the next open
    start an epoch it did not need: ids change, none is reused. Raises ``OSError`` when the
    history file cannot be written (the caller rolls back)."""
    import secrets  # here: it imports hashlib, which a host's import does not need

    tag = secrets.token_hex(8)
    _write(sidecar, tag, durable)
    _set_meta(db, "history", tag)


#: The ``lifecycle_meta`` key holding the last epoch an operator reviewed (ADR 0163).
REVIEWED_KEY = "history_reviewed"


def reviewed(db: sqlite3.Connection) -> int:
    """The last epoch recorded as reviewed (``0``: none)."""
    value = _meta(db, REVIEWED_KEY)
    return int(value) if value is not None and value.isdigit() else 0


def review(db: sqlite3.Connection, epoch: int) -> None:
    """Record every epoch through ``epoch`` as reviewed (inside the caller's transaction)."""
    _set_meta(db, REVIEWED_KEY, str(int(epoch)))


def epochs(db: sqlite3.Connection) -> list[tuple[int, str, str, str, str]]:
    """The epochs started in this database, oldest first."""
    rows = db.execute(
        "SELECT seq, tag, started, started_by, why FROM lifecycle_epochs ORDER BY seq"
    ).fetchall()
    return [(int(a), str(b), str(c), str(d), str(e)) for a, b, c, d, e in rows]
