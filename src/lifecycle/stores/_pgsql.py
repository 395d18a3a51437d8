"""What the synchronous and asyncio PostgreSQL stores share: the URL, the schema and its
migrations, the SQL, row (de)coding and error translation. No I/O happens here."""

from __future__ import annotations

import json
import re
import urllib.parse
import uuid
from collections.abc import Sequence
from typing import Any, Literal

import attrs

from .._core.errors import Conflict, StoreError
from .._core.machine import Machine
from .._core.observation import Observation
from .._core.refs import ObjectRef
from .._core.transition import Transition
from .base import CommitItem, JournalEntry, Record, transition_from_row, transition_to_row

try:
    import psycopg
    from psycopg import errors as pg_errors
    from psycopg.conninfo import conninfo_to_dict
    from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout
except ImportError as e:  # pragma: no cover - depends on the environment
    raise StoreError(
        "the PostgreSQL store needs psycopg 3 and psycopg-pool: pip install 'lifecycle[postgres]'"
    ) from e

__all__ = [
    "AsyncConnectionPool",
    "ConnectionPool",
    "PoolTimeout",
    "Statements",
    "SynchronousCommit",
    "Target",
    "pg_errors",
    "psycopg",
]

SynchronousCommit = Literal["on", "off", "local", "remote_write", "remote_apply"]
DEFAULT_SCHEMA = "lifecycle"
_IDENT = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
#: Query parameters of a store URL that are ours, not libpq's.
_OURS = ("schema",)


@attrs.frozen(slots=True)
class Target:
    """A parsed ``postgresql://`` store URL: what to connect to and how to name it safely."""

    conninfo: str
    schema: str
    host: str
    port: str
    dbname: str
    user: str
    password: str = attrs.field(repr=False)

    @property
    def where(self) -> str:
        """``host:port/dbname`` (user) -- for messages; never the password."""
        who = f" as {self.user}" if self.user else ""
        return f"{self.host}:{self.port}/{self.dbname}{who}"

    def scrub(self, text: str) -> str:
        """``text`` with the password (plain or URL-encoded) blotted out."""
        if self.password:
            for secret in {self.password, urllib.parse.quote(self.password, safe="")}:
                if secret:
                    text = text.replace(secret, "***")
        return text


def parse_url(url: str, schema: str | None = None) -> Target:
    """Split a store URL into libpq's conninfo and our own ``?schema=`` (default
    ``lifecycle``: every table lives in that PostgreSQL schema)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise StoreError(f"not a PostgreSQL URL: {_redact(url)!r} (postgresql://USER@HOST/DB)")
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    ours = {k: v for k, v in query if k in _OURS}
    rest = [(k, v) for k, v in query if k not in _OURS]
    chosen = schema if schema is not None else ours.get("schema", DEFAULT_SCHEMA)
    if not _IDENT.match(chosen):
        raise StoreError(
            f"schema {chosen!r} is not a plain lower-case PostgreSQL identifier ([a-z_][a-z0-9_]*)"
        )
    conninfo = urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(rest)))
    try:
        params = conninfo_to_dict(conninfo)
    except psycopg.Error as e:
        raise StoreError(f"bad PostgreSQL URL {_redact(url)!r}: {_redact_text(str(e), url)}") from e
    host = str(params.get("host") or params.get("hostaddr") or "localhost (default)")
    return Target(
        conninfo=conninfo,
        schema=chosen,
        host=host,
        port=str(params.get("port") or "5432"),
        dbname=str(params.get("dbname") or params.get("user") or "(default)"),
        user=str(params.get("user") or ""),
        password=str(params.get("password") or ""),
    )


def _redact(url: str) -> str:
    """``url`` with any password replaced by ``***``."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    user = netloc[0].split(":", 1)[0]
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[1]}"))


def _redact_text(text: str, url: str) -> str:
    try:
        password = urllib.parse.urlsplit(url).password
    except ValueError:
        return text
    if password:
        for secret in {password, urllib.parse.unquote(password)}:
            text = text.replace(secret, "***")
    return text


def redact_url(url: str) -> str:
    """A store URL fit for logs and messages: the password is ``***``."""
    return _redact(url)


# -- errors ---------------------------------------------------------------------------------
def translate(target: Target, what: str, e: BaseException) -> StoreError:
    """A psycopg (or pool) failure as a :class:`StoreError` naming the server, never the
    password. Connection failures say so; everything else says what was being done."""
    detail = target.scrub(" ".join(str(e).split()) or type(e).__name__)
    if isinstance(e, pg_errors.InvalidPassword | pg_errors.InvalidAuthorizationSpecification):
        return StoreError(f"PostgreSQL at {target.where} refused the credentials: {detail}")
    if isinstance(e, psycopg.OperationalError):
        if what == "connect":
            return StoreError(f"cannot connect to PostgreSQL at {target.where}: {detail}")
        return StoreError(f"PostgreSQL at {target.where}: {what} failed (connection): {detail}")
    return StoreError(f"PostgreSQL at {target.where}: {what} failed: {detail}")


def unique_violation(
    target: Target, e: pg_errors.UniqueViolation, uid: str, expected: int
) -> StoreError:
    """A unique violation on a commit. On the objects key it is a lost race (``Conflict``);
    on the journal or outbox it is a stray row left by something else: the store is
    inconsistent for this object and retrying cannot help (as in SQLite)."""
    constraint = getattr(e.diag, "constraint_name", None) or ""
    if constraint.startswith("objects"):
        return Conflict(uid, expected, None)
    return StoreError(
        f"PostgreSQL at {target.where}: commit of {uid} collides with a stray row "
        f"({constraint or 'unique constraint'}): {target.scrub(str(e).strip())}"
    )


# -- the schema and its migrations ----------------------------------------------------------
#: (version, description, statements); ``{s}`` is the quoted schema. Append only: a released
#: migration is never edited, a change is a new version.
MIGRATIONS: tuple[tuple[int, str, tuple[str, ...]], ...] = (
    (
        1,
        "objects, journal and outbox",
        (
            """CREATE TABLE {s}.objects (
                uid text PRIMARY KEY,
                machine text NOT NULL,
                kind text NOT NULL,
                namespace text NOT NULL,
                name text NOT NULL,
                state text NOT NULL,
                version bigint NOT NULL CHECK (version > 0),
                status json NOT NULL,
                updated_at timestamptz NOT NULL DEFAULT now()
            )""",
            "CREATE INDEX objects_by_machine ON {s}.objects (machine, state)",
            """CREATE TABLE {s}.journal (
                uid text NOT NULL,
                version bigint NOT NULL,
                at text NOT NULL,
                observation text NOT NULL,
                fields json NOT NULL,
                transitions json NOT NULL,
                recorded_at timestamptz NOT NULL DEFAULT now(),
                PRIMARY KEY (uid, version)
            )""",
            """CREATE TABLE {s}.outbox (
                id text PRIMARY KEY,
                uid text NOT NULL,
                version bigint NOT NULL,
                n integer NOT NULL,
                payload json NOT NULL,
                claimed_by text,
                claimed_until timestamptz,
                created_at timestamptz NOT NULL DEFAULT now()
            )""",
            "CREATE INDEX outbox_order ON {s}.outbox (uid, version, n)",
        ),
    ),
    (
        2,
        "journal snapshots for retention",
        (
            """CREATE TABLE {s}.snapshots (
                uid text PRIMARY KEY,
                version bigint NOT NULL,
                status json NOT NULL,
                taken_at timestamptz NOT NULL DEFAULT now()
            )""",
        ),
    ),
)
LATEST = MIGRATIONS[-1][0]


def q(schema: str) -> str:
    return f'"{schema}"'


def migration_lock_sql(schema: str) -> tuple[str, tuple[str]]:
    """One advisory lock per schema: replicas migrating at once take turns."""
    return "SELECT pg_advisory_xact_lock(hashtext(%s))", (f"lifecycle-migrate:{schema}",)


def bookkeeping_sql(schema: str) -> list[str]:
    s = q(schema)
    return [
        f"CREATE SCHEMA IF NOT EXISTS {s}",
        f"CREATE TABLE IF NOT EXISTS {s}.schema_migrations ("
        " version integer PRIMARY KEY, description text NOT NULL,"
        " applied_at timestamptz NOT NULL DEFAULT now())",
    ]


def applied_sql(schema: str) -> str:
    return f"SELECT version FROM {q(schema)}.schema_migrations ORDER BY version"


def pending(applied: Sequence[int], target: Target) -> list[tuple[int, str, list[str]]]:
    """The migrations still to run, in order; refuses a database a newer release migrated."""
    if applied and max(applied) > LATEST:
        raise StoreError(
            f"PostgreSQL at {target.where}: schema {target.schema} is at version "
            f"{max(applied)}, newer than this release knows ({LATEST}); upgrade lifecycle"
        )
    done = set(applied)
    s = q(target.schema)
    return [
        (v, desc, [stmt.replace("{s}", s) for stmt in stmts])
        for v, desc, stmts in MIGRATIONS
        if v not in done
    ]


def record_sql(schema: str) -> str:
    return f"INSERT INTO {q(schema)}.schema_migrations (version, description) VALUES (%s, %s)"


def exists_sql() -> str:
    """Whether a (qualified) table exists: ``to_regclass`` is NULL otherwise."""
    return "SELECT to_regclass(%s) IS NOT NULL"


def version_sql(schema: str) -> str:
    """The schema's migration version (its bookkeeping table exists)."""
    return f"SELECT coalesce(max(version), 0) FROM {q(schema)}.schema_migrations"


def not_migrated(target: Target, found: int | None) -> StoreError:
    return StoreError(
        f"PostgreSQL at {target.where}: schema {target.schema} is at version "
        f"{found or 0}, this release needs {LATEST}; run `lifecycle db migrate --store URL`"
    )


# -- statements -----------------------------------------------------------------------------
class Statements:
    """Every statement the stores run, for one schema."""

    def __init__(self, schema: str, *, journal: bool) -> None:
        s = q(schema)
        self.qualified_migrations = f"{schema}.schema_migrations"
        journal_cte = (
            f""", j AS (
                INSERT INTO {s}.journal (uid, version, at, observation, fields, transitions)
                SELECT uid, %(version)s, %(at)s, %(observation)s, %(fields)s::json,
                       %(events)s::json
                FROM w
            )"""
            if journal
            else ""
        )
        # One statement, so one round trip and (in autocommit) its own transaction: the CAS
        # (an UPDATE of the expected version, or an INSERT of version 1), the journal entry
        # and the outbox rows. No row in ``w``: the CAS failed and nothing was written.
        self.commit = f"""
            WITH u AS (
                UPDATE {s}.objects
                SET state = %(state)s, version = %(version)s, status = %(status)s::json,
                    updated_at = now()
                WHERE uid = %(uid)s AND version = %(expected)s
                RETURNING uid
            ), i AS (
                INSERT INTO {s}.objects (uid, machine, kind, namespace, name, state, version,
                                         status)
                SELECT %(uid)s, %(machine)s, %(kind)s, %(namespace)s, %(name)s, %(state)s,
                       %(version)s, %(status)s::json
                WHERE %(expected)s = 0
                ON CONFLICT (uid) DO NOTHING
                RETURNING uid
            ), w AS (
                SELECT uid FROM u UNION ALL SELECT uid FROM i
            ){journal_cte}, x AS (
                INSERT INTO {s}.outbox (id, uid, version, n, payload, claimed_by, claimed_until)
                SELECT e.id, w.uid, %(version)s, e.n, e.payload::json, %(owner)s,
                       clock_timestamp() + make_interval(secs => %(lease)s)
                FROM w, unnest(%(ids)s::text[], %(ns)s::int[], %(payloads)s::text[])
                     AS e(id, n, payload)
            )
            SELECT count(*) FROM w"""
        self.version_of = f"SELECT version FROM {s}.objects WHERE uid = %s"
        self.load = f"SELECT version, status FROM {s}.objects WHERE uid = %s"
        self.load_many = f"SELECT uid, version, status FROM {s}.objects WHERE uid = ANY(%s)"
        self.versions = f"SELECT uid, version FROM {s}.objects WHERE uid = ANY(%s)"
        self.journal = (
            f"SELECT version, at, observation, fields, transitions FROM {s}.journal "
            "WHERE uid = %s ORDER BY version"
        )
        self.records = (
            f"SELECT kind, namespace, name, uid, version, status FROM {s}.objects "
            "WHERE machine = %s ORDER BY uid"
        )
        claimable = (
            "({t}.claimed_by = %(me)s OR {t}.claimed_by IS NULL "
            "OR {t}.claimed_until < clock_timestamp())"
        )
        # Delivery is per object, in version order, by one replica at a time: a replica may
        # take an object's events only by locking its *first* pending row (SKIP LOCKED: another
        # replica claiming it right now is skipped, not waited for) while that row is free
        # (unclaimed, its own, or its lease expired). It then takes the object's free rows up
        # to the first one another live replica still holds.
        self.claim = f"""
            WITH heads AS (
                SELECT o.uid FROM {s}.outbox o
                WHERE {claimable.format(t="o")}
                  AND NOT EXISTS (
                      SELECT 1 FROM {s}.outbox p
                      WHERE p.uid = o.uid AND (p.version, p.n) < (o.version, o.n))
                ORDER BY o.uid
                LIMIT %(limit)s
                FOR UPDATE OF o SKIP LOCKED
            ), picked AS (
                SELECT b.id FROM {s}.outbox b JOIN heads h ON b.uid = h.uid
                WHERE {claimable.format(t="b")}
                  AND NOT EXISTS (
                      SELECT 1 FROM {s}.outbox c
                      WHERE c.uid = b.uid AND (c.version, c.n) < (b.version, b.n)
                        AND NOT {claimable.format(t="c")})
                ORDER BY b.uid, b.version, b.n
                LIMIT %(limit)s
            )
            UPDATE {s}.outbox SET claimed_by = %(me)s,
                claimed_until = clock_timestamp() + make_interval(secs => %(lease)s)
            WHERE id IN (SELECT id FROM picked)
            RETURNING payload"""
        # A mark need not be durable: lost in a crash, the event is delivered again under its
        # id (at least once). So its commit does not wait for the disk.
        self.mark = (
            "WITH lazy AS (SELECT set_config('synchronous_commit', 'off', true)) "
            f"DELETE FROM {s}.outbox WHERE id = ANY(%s) AND EXISTS (SELECT 1 FROM lazy)"
        )
        self.undelivered = f"SELECT count(*) FROM {s}.outbox"
        self.snapshot = f"SELECT version, status FROM {s}.snapshots WHERE uid = %s"
        self.lock_object = f"SELECT version, status FROM {s}.objects WHERE uid = %s FOR UPDATE"
        self.compactable = (
            f"SELECT o.kind, o.namespace, o.name, o.uid FROM {s}.objects o "
            f"WHERE o.machine = %s AND (SELECT count(*) FROM {s}.journal j "
            "WHERE j.uid = o.uid) > %s ORDER BY o.uid"
        )
        self.put_snapshot = (
            f"INSERT INTO {s}.snapshots (uid, version, status) VALUES (%s, %s, %s::json) "
            "ON CONFLICT (uid) DO UPDATE SET version = excluded.version, "
            "status = excluded.status, taken_at = now()"
        )
        self.drop_journal = f"DELETE FROM {s}.journal WHERE uid = %s AND version <= %s"


# -- rows -----------------------------------------------------------------------------------
_dumps = json.JSONEncoder(separators=(",", ":")).encode  # compact, and built once


def commit_params(
    machine: Machine[Any],
    ref: ObjectRef,
    expected: int,
    status: Any,
    observation: Observation,
    transitions: Sequence[Transition],
    *,
    owner: str,
    lease: float,
) -> dict[str, Any]:
    """The parameters of :attr:`Statements.commit`; refuses what cannot be serialised."""
    try:
        status_json = _dumps(machine.dump_status(status))
        fields_json = _dumps(machine.dump_observation(observation))
        payloads = [_dumps(transition_to_row(t)) for t in transitions]
    except (TypeError, ValueError) as e:
        raise StoreError(f"cannot serialise the status of {ref}: {e}") from e
    return {
        "uid": ref.uid,
        "machine": machine.name,
        "kind": ref.kind,
        "namespace": ref.namespace,
        "name": ref.name,
        "state": status.state,
        "version": expected + 1,
        "expected": expected,
        "status": status_json,
        "at": observation.at.isoformat(),
        "observation": observation.name(),
        "fields": fields_json,
        "events": "[" + ",".join(payloads) + "]",
        "ids": [t.id for t in transitions],
        "ns": [t.n for t in transitions],
        "payloads": payloads,
        "owner": owner,
        "lease": lease,
    }


def status_json(machine: Machine[Any], ref: ObjectRef, status: Any) -> str:
    try:
        return _dumps(machine.dump_status(status))
    except (TypeError, ValueError) as e:
        raise StoreError(f"cannot serialise the status of {ref}: {e}") from e


def load_json(value: Any) -> Any:
    """A ``json`` column: psycopg decodes it; a text one (or a cast) comes back as str."""
    return json.loads(value) if isinstance(value, str | bytes) else value


def item_params(item: CommitItem, *, owner: str, lease: float) -> dict[str, Any]:
    return commit_params(
        item.machine,
        item.ref,
        item.expected,
        item.status,
        item.observation,
        item.transitions,
        owner=owner,
        lease=lease,
    )


def record_from(machine: Machine[Any], ref: ObjectRef, version: int, status: Any) -> Record:
    return Record(ref, machine.name, machine.load_status(load_json(status)), int(version))


def journal_from(machine: Machine[Any], rows: Sequence[Sequence[Any]]) -> list[JournalEntry]:
    return [
        JournalEntry(
            int(version),
            machine.load_observation(name, at, load_json(fields)),
            tuple(transition_from_row(t) for t in load_json(events)),
        )
        for version, at, name, fields, events in rows
    ]


def outbox_from(rows: Sequence[Sequence[Any]]) -> list[Transition]:
    found = [transition_from_row(load_json(p)) for (p,) in rows]
    found.sort(key=lambda t: (t.ref.uid, t.version, t.n))
    return found


def configure_sql(synchronous_commit: SynchronousCommit | None) -> list[str]:
    """Session settings each pooled connection gets."""
    out = []
    if synchronous_commit is not None:
        if synchronous_commit not in ("on", "off", "local", "remote_write", "remote_apply"):
            raise ValueError(f"synchronous_commit {synchronous_commit!r} is not a valid setting")
        out.append(f"SET synchronous_commit = {synchronous_commit}")
    return out


class PgSettings:
    """What the sync and async PostgreSQL stores set up alike, from the same arguments."""

    target: Target
    url: str
    owner: str
    _lease: float
    _timeout: float
    _connect_timeout: float
    _keep_journal: bool
    _sql: Statements

    def _settle(
        self,
        url: str,
        schema: str | None,
        pool_size: int,
        timeout: float,
        connect_timeout: float,
        lease_seconds: float,
        journal: bool,
        synchronous_commit: SynchronousCommit | None,
        owner: str | None,
    ) -> list[str]:
        """Check and keep the settings; returns the statements each new connection runs."""
        if pool_size < 1:
            raise ValueError(f"pool_size must be at least 1, got {pool_size}")
        self.target = parse_url(url, schema)
        self.url = redact_url(url)
        self.owner = owner if owner is not None else uuid.uuid4().hex
        self._lease = float(lease_seconds)
        self._timeout = timeout
        self._connect_timeout = connect_timeout
        self._keep_journal = journal
        self._sql = Statements(self.target.schema, journal=journal)
        return configure_sql(synchronous_commit)

    def _pool_options(self, pool_size: int, name: str) -> dict[str, Any]:
        """The connection-pool arguments both drivers use (``name`` tells them apart)."""
        return {
            "kwargs": {
                "autocommit": True,
                "connect_timeout": max(2, round(self._connect_timeout)),
                "application_name": "lifecycle",
            },
            "min_size": 1,
            "max_size": pool_size,
            "timeout": self._timeout,
            "open": False,
            "reconnect_timeout": max(self._timeout, 5.0),
            "name": f"{name}-{self.target.host}",
        }
