"""``lifecycle db``: the store's schema and its journal. Usage::

    lifecycle db migrate --store URL
    lifecycle db status  --store URL
    lifecycle db compact --store URL [--keep N] [--machine NAME ...]
    lifecycle db check   --store URL [--sample N] [--machines SPEC] [--acknowledge]
    lifecycle db upgrade --store URL [--batch N] [--machines SPEC] [--machine NAME ...]
    lifecycle db find    --store URL [--machine NAME] [--state S] [--older-than 15m]
                         [--limit N] [--format table|json] [--machines SPEC]

``migrate`` creates or upgrades a PostgreSQL store's tables (idempotent; an SQLite file is
created or upgraded on open, so it only opens it). ``status`` only reads -- the schema
version, and what waits in the outbox (how many rows, how old the oldest is) -- and never
creates or changes a store (an SQLite file is opened read-only; a missing one is reported,
exit 1; a file that is not a store is refused, exit 2). ``compact`` drops old journal entries
behind a snapshot, keeping each object's journal folding to its stored status; it refuses a
store that does not exist rather than create an empty one. ``check`` reports the records'
schema versions (ADR 0088: records no upcaster path reads, or written by an undeclared table
change), whether each object's journal folds to its stored status, a PostgreSQL store's
history, and the outbox (a finding past ``--max-undelivered`` rows, 10 000 by default, or an
oldest row older than ``--max-undelivered-age``, 3600 s); exit 1 on any finding. ``upgrade``
rewrites records below their machine's schema version, in batches, compare-and-set (a
concurrent writer wins); interrupted, run it again. ``--machines`` names the machines to
judge by: ``MODULE:NAME`` or ``FILE.py:NAME`` (a registry, a machine, or a list of
machines); the shipped ones by default. ``find`` lists objects, oldest in their state first
(ADR 0159): of ``--machine`` (default: every machine that has ``--state``), only those in
``--state``, only those in it for longer than
``--older-than``; with ``--older-than``, exit 1 when it lists any (a cron job's "something is
stuck").
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

from .._core.errors import LifecycleError, StoreError, preview
from .._core.machine import Machine
from .._core.schema import review
from ..machines import MachineRegistry, default_registry
from ..stores import POSTGRES_SCHEMES, cache_option, open_store, parse_sqlite_url, redact_url
from ..stores.base import OutboxSummary, fold_problem
from ..stores.sqlite import OUTBOX_SUMMARY, SQLiteStore, outbox_summary_of
from ..stores.sqlite import SCHEMA_VERSION as SQLITE_SCHEMA
from . import parsers
from .targets import registry_named

_SQLITE_HEADER = b"SQLite format 3\x00"


def cmd_migrate(args: argparse.Namespace, out: TextIO) -> int:
    if args.store.startswith(POSTGRES_SCHEMES):
        from ..stores import _pgsql
        from ..stores.postgres import migrate, schema_version

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
    store = _open(args.store)  # SQLite creates and upgrades its tables on open
    store.close()
    out.write(f"{redact_url(args.store)} is up to date\n")
    return 0


def cmd_status(args: argparse.Namespace, out: TextIO) -> int:
    if args.store.startswith(POSTGRES_SCHEMES):
        from ..stores import _pgsql
        from ..stores.postgres import schema_version

        version = schema_version(args.store)
        where = _pgsql.parse_url(args.store).where
        shown = "not migrated" if version is None else f"schema version {version}"
        out.write(f"{where}: {shown} (this release: {_pgsql.LATEST})\n")
        if version != _pgsql.LATEST:
            return 1
        from ..stores.postgres import PostgresStore

        store = PostgresStore(args.store, migrate=False)
        try:
            out.write(outbox_line(store.outbox_summary()) + "\n")
        finally:
            store.close()
        return 0
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
    if version != SQLITE_SCHEMA:
        return 1
    out.write(outbox_line(sqlite_outbox(path)) + "\n")
    return 0


#: ``db check`` fails past these (``--max-undelivered``, ``--max-undelivered-age``; defined
#: with the parser, which imports no command).
MAX_UNDELIVERED, MAX_UNDELIVERED_AGE = parsers.MAX_UNDELIVERED, parsers.MAX_UNDELIVERED_AGE


def outbox_line(summary: OutboxSummary, now: datetime | None = None) -> str:
    """``outbox: N undelivered ...``: what waits, and how old the oldest is. A row is owed
    to every emitter of the runner that committed it (ADR 0121)."""
    if not summary.undelivered:
        return "outbox: 0 undelivered"
    age = summary.age(now or datetime.now(UTC))
    oldest = "" if age is None else f", oldest {_duration(age)} old"
    assert summary.oldest is not None or not oldest
    since = "" if summary.oldest is None else f" (since {summary.oldest.isoformat()})"
    return (
        f"outbox: {summary.undelivered} undelivered, owed to every emitter of the runner "
        f"that committed them{oldest}{since}"
    )


def _duration(seconds: float) -> str:
    s = int(seconds)
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    parts = [(days, "d"), (hours, "h"), (minutes, "m"), (s, "s")]
    shown = [f"{n}{unit}" for n, unit in parts if n]
    return " ".join(shown[:2]) or "0s"


def sqlite_outbox(path: str) -> OutboxSummary:
    """What waits in the outbox of the SQLite store at ``path``, read-only."""
    db = _read_only(path)
    try:
        return outbox_summary_of(db.execute(OUTBOX_SUMMARY).fetchone())
    except sqlite3.Error as e:
        raise StoreError(f"{preview(path)}: cannot read its outbox ({e})") from None
    finally:
        db.close()


def _read_only(path: str) -> sqlite3.Connection:
    """A read-only connection to ``path``; while no process has the store open (no -wal
    file), immutable too, so SQLite creates no -wal/-shm files beside it either."""
    file = Path(path)
    live = Path(f"{path}-wal").exists()
    mode = "mode=ro" if live else "mode=ro&immutable=1"
    return sqlite3.connect(f"{file.resolve().as_uri()}?{mode}", uri=True)


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
    try:
        db = _read_only(path)
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
    store: Any = _open(args.store)
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
    """The store's records and history: their schema versions (records no upcaster path
    reads, or that an undeclared table change wrote), whether each object's journal folds
    to its stored status (``--sample N`` objects per machine), and for PostgreSQL its epochs
    (each failover or restore that changed the database's history starts one) and the
    acknowledged writes replicas found lost, for SQLite the epochs started when its file was
    found replaced by an older copy. Exit 1 on any finding."""
    if args.sample is not None and args.sample < 1:
        raise StoreError(f"--sample must be a positive number, got {args.sample}")
    if args.max_undelivered < 0 or not args.max_undelivered_age >= 0:
        raise StoreError("--max-undelivered and --max-undelivered-age must not be negative")
    machines = load_machines(args.machines)
    ok = True
    if args.store.startswith(POSTGRES_SCHEMES):
        from ..stores.postgres import check_history

        report = check_history(args.store, acknowledge=args.acknowledge)
        out.write("\n".join(report.lines()) + "\n")
        ok = report.ok
    store = _open_existing(args.store, "check", migrate=False)
    try:
        if isinstance(store, SQLiteStore):  # epochs started by restored copies (ADR 0037)
            history = store.history(acknowledge=args.acknowledge)
            out.write("\n".join(history.lines()) + "\n")
            ok = history.ok and ok
        ok = _check_records(store, machines, args.sample, out) and ok
        ok = _check_outbox(store, args, out) and ok
    finally:
        store.close()
    return 0 if ok else 1


def _check_outbox(store: Any, args: argparse.Namespace, out: TextIO) -> bool:
    """Print what waits in the outbox; a finding past ``--max-undelivered`` rows or an oldest
    row older than ``--max-undelivered-age`` seconds (stuck delivery)."""
    summarize = getattr(store, "outbox_summary", None)
    if summarize is None:
        return True
    summary: OutboxSummary = summarize()
    out.write(outbox_line(summary) + "\n")
    ok = True
    if summary.undelivered > args.max_undelivered:
        out.write(
            f"FINDING outbox: {summary.undelivered} undelivered, more than "
            f"--max-undelivered {args.max_undelivered}: delivery is stuck or too slow\n"
        )
        ok = False
    age = summary.age(datetime.now(UTC))
    if age is not None and age > args.max_undelivered_age:
        out.write(
            f"FINDING outbox: the oldest undelivered row is {_duration(age)} old, more than "
            f"--max-undelivered-age {args.max_undelivered_age:g} s\n"
        )
        ok = False
    return ok


def _check_records(
    store: Any, machines: Mapping[str, Machine[Any]], sample: int | None, out: TextIO
) -> bool:
    """Print the schema report and the fold check; whether both found nothing."""
    ok = True
    versions = getattr(store, "schema_versions", None)
    if versions is not None:
        found = review(versions(), machines)
        out.write("\n".join(found.lines()) + "\n")
        ok = not found.findings
    chooser = random.Random()
    for machine in machines.values():
        try:
            records = list(store.records(machine))
        except LifecycleError as e:
            out.write(f"NOT READABLE {machine.name}: {e}\n")
            ok = False
            continue
        chosen = (
            records if sample is None or sample >= len(records) else chooser.sample(records, sample)
        )
        bad = 0
        for record in sorted(chosen, key=lambda r: r.ref.uid):
            problem = fold_problem(store, machine, record)
            if problem is not None:
                bad += 1
                out.write(f"NOT FOLDING {machine.name} {record.ref.uid}: {problem}\n")
        if records:
            out.write(
                f"journals: {machine.name}: {len(chosen)} of {len(records)} object(s) checked, "
                f"{bad} not folding to the stored status\n"
            )
        ok = ok and not bad
    return ok


def cmd_upgrade(args: argparse.Namespace, out: TextIO) -> int:
    """Rewrite records below their machine's schema version (ADR 0088). Refuses, writing
    nothing, while the store holds records no upcaster path reads (exit 1)."""
    if args.batch < 1:
        raise StoreError(f"--batch must be a positive number, got {args.batch}")
    machines = load_machines(args.machines)
    chosen = [machines[name] for name in args.machine] if args.machine else list(machines.values())
    store = _open_existing(args.store, "upgrade")
    try:
        if not hasattr(store, "upgrade"):
            raise StoreError(f"{redact_url(args.store)} keeps no record schemas to upgrade")
        found = review(store.schema_versions(), {m.name: m for m in chosen})
        if found.findings:
            out.write("\n".join(f"FINDING {f}" for f in found.findings) + "\n")
            out.write("nothing upgraded: these records have no upcaster path (see db check)\n")
            return 1
        for machine in chosen:
            out.write(f"{store.upgrade(machine, batch=args.batch)}\n")
    finally:
        store.close()
    return 0


def cmd_find(args: argparse.Namespace, out: TextIO) -> int:
    """Objects by machine, state and time in state, oldest first (ADR 0159). Without
    ``--machine``: every machine that has ``--state`` (every machine, without either)."""
    chosen = _machines_to_search(load_machines(args.machines), args.machine, args.state)
    now = datetime.now(UTC)
    before = None if args.older_than is None else now - timedelta(seconds=args.older_than)
    store = _open_existing(args.store, "search", migrate=False)
    try:
        if not hasattr(store, "find"):
            raise StoreError(f"{redact_url(args.store)} cannot answer find (no FindStore)")
        found = [
            hit
            for machine in chosen
            for hit in store.find(
                machine, state=args.state, entered_before=before, limit=args.limit
            )
        ]
    finally:
        store.close()
    found.sort(key=lambda f: (f.entered, f.record.ref.uid))
    del found[args.limit :]
    now = datetime.now(UTC)
    if args.format == "json":
        rows = [
            {
                "machine": f.record.machine,
                "kind": f.record.ref.kind,
                "namespace": f.record.ref.namespace,
                "name": f.record.ref.name,
                "uid": f.record.ref.uid,
                "state": f.record.status.state,
                "version": f.record.version,
                "entered": f.entered.isoformat(),
                "age_seconds": round(f.age(now), 3),
            }
            for f in found
        ]
        out.write(json.dumps(rows, indent=2) + "\n")
    elif found:
        table = [("AGE", "MACHINE", "STATE", "KIND", "NAMESPACE/NAME", "UID", "VERSION")]
        for f in found:
            ref = f.record.ref
            where = f"{ref.namespace}/{ref.name}" if ref.namespace else ref.name
            table.append(
                (_duration(f.age(now)), f.record.machine, f.record.status.state or "(new)",
                 ref.kind, where, ref.uid, str(f.record.version))
            )  # fmt: skip
        widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
        for row in table:
            out.write("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
            out.write("\n")
    else:
        out.write("no objects found\n")
    return 1 if found and args.older_than is not None else 0


def _machines_to_search(
    machines: MachineRegistry, name: str | None, state: str | None
) -> list[Machine[Any]]:
    """``db find``'s machines: the one ``--machine`` names, else those that have ``--state``."""
    if name is not None:
        if name not in machines:
            raise LifecycleError(
                f"no machine {preview(name)}; these are known: {', '.join(machines)}"
            )
        return [machines[name]]
    chosen = [m for m in machines.values() if state is None or state in m.table.states]
    if not chosen:
        raise LifecycleError(
            f"no machine has a state {preview(state)}; these are known: {', '.join(machines)}"
        )
    return chosen


def _open_existing(url: str, what: str, *, migrate: bool = True) -> Any:
    """The store at ``url``; an SQLite file that does not exist is refused, not created."""
    if url[:7].lower() == "sqlite:":
        path = parse_sqlite_url(url).path
        if sqlite_schema_version(path) is None:
            raise StoreError(f"{redact_url(url)}: no store to {what} (no such file)")
    if url.startswith(POSTGRES_SCHEMES) and not migrate:
        from ..stores.postgres import PostgresStore

        return PostgresStore(url, migrate=False, **cache_option(url, 0))
    return _open(url)


def _open(url: str) -> Any:
    """A ``db`` command's store: without a status cache unless the URL asks for one (a
    command reads or maintains once; a cache would open a listener connection and thread
    for nothing)."""
    return open_store(url, **cache_option(url, 0))


def load_machines(spec: str | None) -> MachineRegistry:
    """The machines ``--machines`` names (:mod:`lifecycle.cli.targets`); ``None``: the
    shipped machines."""
    return registry_named(spec, "--machines")
