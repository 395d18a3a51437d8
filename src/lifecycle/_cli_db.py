"""``lifecycle db``: the store's schema and its journal.

    lifecycle db migrate --store URL
    lifecycle db status  --store URL
    lifecycle db compact --store URL [--keep N] [--machine NAME ...]
    lifecycle db check   --store URL

``migrate`` creates or upgrades a PostgreSQL store's tables (idempotent; an SQLite file is
created or upgraded on open, so it only opens it). ``status`` only reads: it never creates or
changes a store (an SQLite file is opened read-only; a missing one is reported, exit 1; a file
that is not a store is refused, exit 2). ``compact`` drops old journal entries behind a
snapshot, keeping each object's journal folding to its stored status; it refuses a store that
does not exist rather than create an empty one.
"""

from __future__ import annotations

import argparse
import sqlite3
from pathlib import Path
from typing import Any, TextIO

from ._core.errors import StoreError, preview
from .machines import default_registry
from .stores import POSTGRES_SCHEMES, open_store, parse_sqlite_url, redact_url
from .stores.sqlite import SCHEMA_VERSION as SQLITE_SCHEMA

STORE_HELP = (
    "memory://, sqlite:///PATH (relative; sqlite:////PATH absolute) with optional "
    "?synchronous=FULL|NORMAL&owner=NAME&lease_seconds=S&busy_timeout=S, or "
    "postgresql://USER:PASSWORD@HOST:PORT/DB[?schema=NAME]"
)
_SQLITE_HEADER = b"SQLite format 3\x00"


def cmd_migrate(args: argparse.Namespace, out: TextIO) -> int:
    if args.store.startswith(POSTGRES_SCHEMES):
        from .stores import _pgsql
        from .stores.postgres import migrate, schema_version

        applied = migrate(args.store)
        version = schema_version(args.store)
        where = _pgsql.parse_url(args.store).where
        if applied:
            out.write(
                f"migrated {where}: applied {', '.join(map(str, applied))}; now at {version}\n"
            )
        else:
            out.write(f"{where} is up to date (schema version {version})\n")
        return 0
    store = open_store(args.store)  # SQLite creates and upgrades its tables on open
    store.close()
    out.write(f"{redact_url(args.store)} is up to date\n")
    return 0


def cmd_status(args: argparse.Namespace, out: TextIO) -> int:
    if args.store.startswith(POSTGRES_SCHEMES):
        from .stores import _pgsql
        from .stores.postgres import schema_version

        version = schema_version(args.store)
        where = _pgsql.parse_url(args.store).where
        shown = "not migrated" if version is None else f"schema version {version}"
        out.write(f"{where}: {shown} (this release: {_pgsql.LATEST})\n")
        return 0 if version == _pgsql.LATEST else 1
    if args.store in ("memory://", "memory"):
        out.write("memory://: a fresh store in every command, nothing to migrate\n")
        return 0
    path = parse_sqlite_url(args.store).path  # any other URL is refused here, exit 2
    version = sqlite_schema_version(path)
    if version is None:
        out.write(f"{redact_url(args.store)}: no store (no such file; db migrate creates it)\n")
        return 1
    shown = f"schema version {version} (this release: {SQLITE_SCHEMA}"
    if version < SQLITE_SCHEMA:
        shown += "; upgraded on its next open"
    out.write(f"{redact_url(args.store)}: {shown})\n")
    return 0 if version == SQLITE_SCHEMA else 1


def sqlite_schema_version(path: str) -> int | None:
    """The schema version of the SQLite store at ``path``; ``None`` if there is no file.
    Reads only (the file is opened read-only: nothing is created or changed); a file that is
    not a lifecycle store raises :class:`~lifecycle.StoreError`."""
    file = Path(path)
    if not file.exists():
        return None
    not_a_store = f"{preview(path)} is not a lifecycle store"
    try:
        with file.open("rb") as f:
            head = f.read(len(_SQLITE_HEADER))
    except OSError as e:
        raise StoreError(f"{not_a_store}: cannot read it ({e.strerror})") from None
    if head != _SQLITE_HEADER:
        raise StoreError(f"{not_a_store} (not an SQLite database)")
    # Read-only; and while no process has the store open (no -wal file), immutable too, so
    # SQLite creates no -wal/-shm files beside it either.
    live = Path(f"{path}-wal").exists()
    mode = "mode=ro" if live else "mode=ro&immutable=1"
    try:
        db = sqlite3.connect(f"{file.resolve().as_uri()}?{mode}", uri=True)
        try:
            row = db.execute(
                "SELECT value FROM lifecycle_meta WHERE key = 'schema_version'"
            ).fetchone()
        finally:
            db.close()
    except sqlite3.Error as e:
        raise StoreError(f"{not_a_store} ({e})") from None
    if row is None or not str(row[0]).isdigit():
        raise StoreError(f"{not_a_store} (it records no schema version)")
    return int(row[0])


def cmd_compact(args: argparse.Namespace, out: TextIO) -> int:
    if args.keep < 0:
        raise StoreError(f"--keep must not be negative, got {args.keep}")
    machines = default_registry()
    chosen = [machines[name] for name in args.machine] if args.machine else list(machines.values())
    if args.store[:7].lower() == "sqlite:":
        path = parse_sqlite_url(args.store).path
        if sqlite_schema_version(path) is None:  # refused, not created empty
            raise StoreError(f"{redact_url(args.store)}: no store to compact (no such file)")
    store: Any = open_store(args.store)
    try:
        compact = getattr(store, "compact", None)
        if compact is None:
            raise StoreError(f"{redact_url(args.store)} keeps no journal to compact")
        total = 0
        for machine in chosen:
            dropped = int(compact(machine, keep=args.keep))
            total += dropped
            out.write(f"{machine.name}: {dropped} journal entries compacted\n")
        out.write(f"{total} entries compacted, the last {args.keep} kept per object\n")
    finally:
        store.close()
    return 0


def cmd_check(args: argparse.Namespace, out: TextIO) -> int:
    """A PostgreSQL store's history: its epochs (each failover or restore that changed the
    database's history starts one) and the acknowledged writes replicas found lost. Exit 1
    when the history changed or writes were lost."""
    if not args.store.startswith(POSTGRES_SCHEMES):
        out.write(f"{redact_url(args.store)}: no history to check (PostgreSQL stores only)\n")
        return 0
    from .stores.postgres import check_history

    report = check_history(args.store)
    out.write("\n".join(report.lines()) + "\n")
    return 0 if report.ok else 1


def add_db_commands(sub: Any) -> None:
    """Register ``db migrate | status | compact`` on the CLI's subparsers."""
    db = sub.add_parser("db", help="create or upgrade a store's schema; compact journals")
    dbs = db.add_subparsers(dest="db_command", required=True)
    mg = dbs.add_parser("migrate", help="create or upgrade the store's tables (idempotent)")
    mg.add_argument("--store", required=True, help=STORE_HELP)
    mg.set_defaults(func=cmd_migrate)
    st = dbs.add_parser(
        "status",
        help="the schema version, read only (exit 1 if not current or missing, 2 if not a store)",
    )
    st.add_argument("--store", required=True, help=STORE_HELP)
    st.set_defaults(func=cmd_status)
    cp = dbs.add_parser("compact", help="drop old journal entries behind a snapshot")
    cp.add_argument("--store", required=True, help=STORE_HELP)
    cp.add_argument("--keep", type=int, default=100, help="entries kept per object (100)")
    cp.add_argument("--machine", action="append", default=[], help="only this machine (repeatable)")
    cp.set_defaults(func=cmd_compact)
    ck = dbs.add_parser(
        "check",
        help="a PostgreSQL store's history: epochs (failovers) and lost acknowledged writes "
        "(exit 1 if any)",
    )
    ck.add_argument("--store", required=True, help=STORE_HELP)
    ck.set_defaults(func=cmd_check)
