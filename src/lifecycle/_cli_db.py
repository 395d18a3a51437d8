"""``lifecycle db``: the store's schema and its journal.

    lifecycle db migrate --store URL
    lifecycle db status  --store URL
    lifecycle db compact --store URL [--keep N] [--machine NAME ...]

``migrate`` creates or upgrades a PostgreSQL store's tables (idempotent; an SQLite file is
created or upgraded on open, so it only opens it). ``compact`` drops old journal entries
behind a snapshot, keeping each object's journal folding to its stored status.
"""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from ._core.errors import StoreError
from .machines import default_registry
from .stores import POSTGRES_SCHEMES, open_store, redact_url

STORE_HELP = (
    "memory://, sqlite:///PATH (relative; sqlite:////PATH absolute) or "
    "postgresql://USER:PASSWORD@HOST:PORT/DB[?schema=NAME]"
)


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
    out.write(f"{redact_url(args.store)}: created and upgraded on open\n")
    return 0


def cmd_compact(args: argparse.Namespace, out: TextIO) -> int:
    if args.keep < 0:
        raise StoreError(f"--keep must not be negative, got {args.keep}")
    machines = default_registry()
    chosen = [machines[name] for name in args.machine] if args.machine else list(machines.values())
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


def add_db_commands(sub: Any) -> None:
    """Register ``db migrate | status | compact`` on the CLI's subparsers."""
    db = sub.add_parser("db", help="create or upgrade a store's schema; compact journals")
    dbs = db.add_subparsers(dest="db_command", required=True)
    mg = dbs.add_parser("migrate", help="create or upgrade the store's tables (idempotent)")
    mg.add_argument("--store", required=True, help=STORE_HELP)
    mg.set_defaults(func=cmd_migrate)
    st = dbs.add_parser("status", help="the schema version (exit 1 if not current)")
    st.add_argument("--store", required=True, help=STORE_HELP)
    st.set_defaults(func=cmd_status)
    cp = dbs.add_parser("compact", help="drop old journal entries behind a snapshot")
    cp.add_argument("--store", required=True, help=STORE_HELP)
    cp.add_argument("--keep", type=int, default=100, help="entries kept per object (100)")
    cp.add_argument("--machine", action="append", default=[], help="only this machine (repeatable)")
    cp.set_defaults(func=cmd_compact)
