"""What the synchronous and asyncio PostgreSQL stores share: the URL, the schema and its
migrations, the SQL, row (de)coding and error translation. No I/O happens here."""

from __future__ import annotations

import enum
import hashlib
import itertools
import json
import json.encoder
import os
import re
import secrets
import urllib.parse
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Literal

import attrs

from .._core.errors import CommitUnknown, Conflict, MissingExtra, StoreError
from .._core.machine import Machine
from .._core.observation import Observation
from .._core.refs import ObjectRef
from .._core.schema import (
    load_observation,
    load_status,
    upgraded_observation,
    upgraded_status,
)
from .._core.transition import Transition
from .._log import adopt_pool_logs, get_logger
from .._store_urls import POSTGRES_PARAMETERS
from ._cache import StatusCache
from ._rewind import Rewind
from .base import (
    CommitItem,
    JournalEntry,
    Query,
    Record,
    Snapshot,
    check_identity,
    epoch_time,
    transition_from_row,
    transition_to_row,
)

try:
    import psycopg
    from psycopg import errors as pg_errors
    from psycopg.conninfo import conninfo_to_dict, make_conninfo
    from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout
except ImportError as e:  # pragma: no cover - depends on the environment
    raise MissingExtra.of(e, "the PostgreSQL store", "postgres") from e

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
_OURS = tuple(POSTGRES_PARAMETERS)
#: libpq parameters set when the URL does not name them: every wait on the network is bounded.
#: ``connect_timeout`` applies to each host of a multi-host URL in turn; keepalives find a
#: peer that vanished (host down, cable cut) in about 11 s.
LIBPQ_DEFAULTS = {
    "connect_timeout": "3",
    "keepalives": "1",
    "keepalives_idle": "5",
    "keepalives_interval": "2",
    "keepalives_count": "3",
    "tcp_user_timeout": "10000",
}
#: Server settings sent in ``options`` unless the URL's ``options`` names them (milliseconds).
SERVER_DEFAULTS = {
    "statement_timeout": "20000",
    "idle_in_transaction_session_timeout": "30000",
}
#: Client-side bounds in seconds, unless the URL's ``call_timeout`` / ``resolve_timeout`` say
#: otherwise: the longest a store call waits on the server (a hung server included), and the
#: longest a commit whose connection was lost spends finding out whether it landed.
CALL_TIMEOUT = 30.0
RESOLVE_TIMEOUT = 15.0


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
    call_timeout: float = CALL_TIMEOUT
    resolve_timeout: float = RESOLVE_TIMEOUT

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


def _seconds(name: str, value: str, url: str) -> float:
    try:
        found = float(value)
    except ValueError:
        found = -1.0
    if not 0 < found < 86_400:
        raise StoreError(
            f"bad PostgreSQL URL {_redact(url)!r}: {name} must be a number of seconds "
            f"(0 < {name} < 86400), got {value[:40]!r}"
        )
    return found


def _with_server_defaults(options: str) -> str:
    """libpq's ``options`` with our server settings added where it does not set them."""
    missing = [f"-c {k}={v}" for k, v in SERVER_DEFAULTS.items() if k not in options]
    return " ".join([options, *missing]).strip()


def parse_url(url: str, schema: str | None = None) -> Target:
    """Split a store URL into libpq's conninfo and our own parameters: ``?schema=`` (default
    ``lifecycle``: every table lives in that PostgreSQL schema), ``?call_timeout=`` and
    ``?resolve_timeout=`` (seconds). Every libpq URL form is accepted -- several hosts
    (``postgresql://h1:5432,h2:5433/db`` or ``postgresql:///db?host=h1,h2&port=5432,5433``) and
    Unix sockets (``postgresql:///db?host=/var/run/postgresql``) -- and every libpq query
    parameter passes through; the timeouts and keepalives of :data:`LIBPQ_DEFAULTS` and
    :data:`SERVER_DEFAULTS` are added where the URL does not set them."""
    scheme, sep, rest_of_url = url.partition("://")
    if not sep or scheme not in ("postgresql", "postgres"):
        raise StoreError(f"not a PostgreSQL URL: {_redact(url)!r} (postgresql://USER@HOST/DB)")
    base, _, query_text = rest_of_url.partition("?")
    query_text = query_text.split("#", 1)[0]
    try:
        query = urllib.parse.parse_qsl(query_text, keep_blank_values=True)
    except ValueError as e:
        raise StoreError(f"bad PostgreSQL URL {_redact(url)!r}: {e}") from None
    chosen, call, resolve = _our_options(dict(p for p in query if p[0] in _OURS), schema, url)
    rest = [(k, v) for k, v in query if k not in _OURS]
    conninfo, params = _libpq(f"{scheme}://{base}", rest, url)
    host = str(params.get("host") or params.get("hostaddr") or "localhost (default)")
    return Target(
        conninfo=conninfo,
        schema=chosen,
        host=host,
        port=str(params.get("port") or "5432"),
        dbname=str(params.get("dbname") or params.get("user") or "(default)"),
        user=str(params.get("user") or ""),
        password=str(params.get("password") or ""),
        call_timeout=CALL_TIMEOUT if call is None else call,
        resolve_timeout=RESOLVE_TIMEOUT if resolve is None else resolve,
    )


def _our_options(
    ours: dict[str, str], schema: str | None, url: str
) -> tuple[str, float | None, float | None]:
    """The schema (``schema`` if given, else the URL's), and the URL's call and resolve
    timeouts (``None``: not set)."""
    chosen = schema if schema is not None else ours.get("schema", DEFAULT_SCHEMA)
    if not _IDENT.match(chosen):
        raise StoreError(
            f"schema {chosen!r} is not a plain lower-case PostgreSQL identifier ([a-z_][a-z0-9_]*)"
        )
    call = _seconds("call_timeout", ours["call_timeout"], url) if "call_timeout" in ours else None
    resolve = (
        _seconds("resolve_timeout", ours["resolve_timeout"], url)
        if "resolve_timeout" in ours
        else None
    )
    return chosen, call, resolve


def _libpq(libpq_url: str, rest: list[tuple[str, str]], url: str) -> tuple[str, dict[str, Any]]:
    """libpq's conninfo for ``libpq_url`` with the query parameters ``rest``, and its
    parameters, :data:`LIBPQ_DEFAULTS` and :data:`SERVER_DEFAULTS` added where not set."""
    if rest:
        libpq_url += "?" + urllib.parse.urlencode(rest, quote_via=urllib.parse.quote)
    try:
        params = conninfo_to_dict(libpq_url)
        for key, value in LIBPQ_DEFAULTS.items():
            params.setdefault(key, value)
        params["options"] = _with_server_defaults(str(params.get("options") or ""))
        return make_conninfo("", **params), params
    except psycopg.Error as e:
        raise StoreError(f"bad PostgreSQL URL {_redact(url)!r}: {_redact_text(str(e), url)}") from e


_QUERY_PASSWORD = re.compile(r"([?&]password=)[^&#]*", re.IGNORECASE)


def _redact(url: str) -> str:
    """``url`` with any password replaced by ``***``."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    url = _QUERY_PASSWORD.sub(r"\1***", url)
    if parts.password is None:
        return url
    parts = urllib.parse.urlsplit(url)
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
    (
        3,
        "commit tokens, store epochs and reported rewinds",
        (
            "ALTER TABLE {s}.objects ADD COLUMN commit_token text",
            "ALTER TABLE {s}.journal ADD COLUMN commit_token text",
            """CREATE TABLE {s}.epochs (
                seq bigserial PRIMARY KEY,
                tag text NOT NULL UNIQUE,
                history text NOT NULL,
                started_at timestamptz NOT NULL DEFAULT now(),
                detected_by text NOT NULL DEFAULT ''
            )""",
            "INSERT INTO {s}.epochs (tag, history) VALUES ('', {history})",
            """CREATE TABLE {s}.rewinds (
                uid text NOT NULL,
                acknowledged bigint NOT NULL,
                found bigint,
                epoch text NOT NULL,
                reported_by text NOT NULL,
                seen_at timestamptz NOT NULL DEFAULT now()
            )""",
        ),
    ),
    (
        4,
        "the schema version and fingerprint of every record (ADR 0088)",
        # Rows written before are version 1 with no fingerprint: the tables as they were then
        # are version 1 by definition. The defaults stay, so a replica of an older release
        # still writing labels its records the same way. (A constant default: no rewrite.)
        tuple(
            f"ALTER TABLE {{s}}.{table} ADD COLUMN {column}"
            for table in ("objects", "journal", "snapshots")
            for column in (
                "schema_version integer NOT NULL DEFAULT 1",
                "schema_fingerprint text NOT NULL DEFAULT ''",
            )
        ),
    ),
    (
        5,
        "every write of an object notifies, whoever makes it (ADR 0143)",
        (
            "CREATE FUNCTION {s}.notify_change() RETURNS trigger LANGUAGE plpgsql AS $$"
            + "{notify_body}$$",
            "CREATE TRIGGER lifecycle_notify AFTER INSERT OR UPDATE OR DELETE ON {s}.objects "
            "FOR EACH ROW EXECUTE FUNCTION {s}.notify_change('{channel}')",
            "CREATE TRIGGER lifecycle_notify_truncate AFTER TRUNCATE ON {s}.objects "
            "FOR EACH STATEMENT EXECUTE FUNCTION {s}.notify_change('{channel}')",
            # ALWAYS: a session in ``session_replication_role = replica`` (a logical
            # replication apply, a restore) fires it too
            "ALTER TABLE {s}.objects ENABLE ALWAYS TRIGGER lifecycle_notify",
            "ALTER TABLE {s}.objects ENABLE ALWAYS TRIGGER lifecycle_notify_truncate",
        ),
    ),
    (
        6,
        "the store's own identity in its history (ADR 0146)",
        # The current epoch's history gains the identity of this schema's epochs table
        # (:func:`history_sql`): a schema restored from pg_dump or dropped and migrated again
        # has another, so its first writer starts an epoch instead of reusing ids.
        (
            "UPDATE {s}.epochs SET history = history || '/' || {identity} "
            "WHERE seq = (SELECT max(seq) FROM {s}.epochs) AND history NOT LIKE '%/%/%'",
        ),
    ),
    (
        7,
        "since when each object is in its state, indexed (ADR 0159)",
        # Kept by the database, so every writer keeps it: an insert takes the default, an
        # update that changes the state takes the writing transaction's time. Rows stored
        # before count from the migration (a constant default for them: no table rewrite).
        (
            "ALTER TABLE {s}.objects ADD COLUMN entered_at timestamptz NOT NULL DEFAULT now()",
            "CREATE FUNCTION {s}.enter_state() RETURNS trigger LANGUAGE plpgsql AS "
            "$$BEGIN NEW.entered_at := now(); RETURN NEW; END$$",
            "CREATE TRIGGER lifecycle_entered BEFORE UPDATE OF state ON {s}.objects "
            "FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state) "
            "EXECUTE FUNCTION {s}.enter_state()",
            "ALTER TABLE {s}.objects ENABLE ALWAYS TRIGGER lifecycle_entered",
            "CREATE INDEX objects_by_state_age ON {s}.objects (machine, state, entered_at, uid)",
        ),
    ),
)
LATEST = MIGRATIONS[-1][0]


def find_sql(schema: str, query: Query) -> tuple[str, tuple[Any, ...]]:
    """:meth:`~lifecycle.stores.FindStore.find`'s statement and parameters: one range of
    ``objects_by_state_age`` when the query names a state (ADR 0159)."""
    where = ""
    params: list[Any] = [query.machine]
    if query.state is not None:
        where += " AND state = %s"
        params.append(query.state)
    if query.before is not None:
        where += " AND entered_at < %s"
        params.append(epoch_time(query.before))
    return (
        f"SELECT kind, namespace, name, uid, version, status, {_SV}, entered_at "
        f"FROM {q(schema)}.objects WHERE machine = %s{where} ORDER BY entered_at, uid LIMIT %s",
        (*params, query.limit),
    )


def state_counts_sql(schema: str) -> str:
    """Per machine and state: how many objects and the oldest ``entered_at`` (ADR 0159)."""
    return (
        f"SELECT machine, state, count(*), min(entered_at) FROM {q(schema)}.objects "
        "GROUP BY machine, state ORDER BY machine, state"
    )


#: The body of the trigger function of migration 5 (ADR 0143): every row written to
#: ``objects`` -- by this release, an older one, or plain SQL -- notifies the schema's channel
#: with ``"VERSION UID"`` in the writing transaction (delivered at its commit, in commit
#: order). A write that does not raise the version (a status upgrade, a hand edit, a
#: rewind) and a delete name the old version plus one, so a cache drops whatever it held of
#: the object and keeps no read that was in flight; a ``TRUNCATE`` says ``"drop"``.
NOTIFY_BODY = """
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        PERFORM pg_notify(TG_ARGV[0], 'drop truncate');
    ELSIF TG_OP = 'INSERT' THEN
        PERFORM pg_notify(TG_ARGV[0], NEW.version::text || ' ' || NEW.uid);
    ELSIF TG_OP = 'DELETE' THEN
        PERFORM pg_notify(TG_ARGV[0], (OLD.version + 1)::text || ' ' || OLD.uid);
    ELSIF NEW.uid IS DISTINCT FROM OLD.uid THEN
        PERFORM pg_notify(TG_ARGV[0], (OLD.version + 1)::text || ' ' || OLD.uid);
        PERFORM pg_notify(TG_ARGV[0], NEW.version::text || ' ' || NEW.uid);
    ELSIF NEW.version > OLD.version THEN
        PERFORM pg_notify(TG_ARGV[0], NEW.version::text || ' ' || NEW.uid);
    ELSE
        PERFORM pg_notify(TG_ARGV[0],
                          (greatest(OLD.version, NEW.version) + 1)::text || ' ' || NEW.uid);
    END IF;
    RETURN NULL;
END
"""

#: The server's history: its cluster (system identifier) and timeline. A promoted standby
#: starts a new timeline; a restore into another cluster has another system identifier.
HISTORY = (
    "((SELECT system_identifier::text FROM pg_control_system()) || '/' || "
    "substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))"
)


def identity_sql(s: str) -> str:
    """The identity of the store in schema ``s`` (quoted): the object id of its epochs table,
    which a restore from ``pg_dump`` or a schema dropped and migrated again changes (``''``
    while there is none). Not a setting the store writes: nothing restores it (ADR 0146)."""
    return f"coalesce(to_regclass('{s}.epochs')::oid::text, '')"


def history_sql(s: str) -> str:
    """The history a store in schema ``s`` (quoted) is on: the server's (:data:`HISTORY`) and
    the store's own identity (:func:`identity_sql`), ``SYSID/TIMELINE/IDENTITY``."""
    return f"({HISTORY} || '/' || {identity_sql(s)})"


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
        (
            v,
            desc,
            [
                stmt.replace("{identity}", identity_sql(s))
                .replace("{s}", s)
                .replace("{history}", HISTORY)
                .replace("{channel}", channel_of(target.schema))
                .replace("{notify_body}", NOTIFY_BODY)
                for stmt in stmts
            ],
        )
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
#: The record-schema columns every status, journal and snapshot read ends with (ADR 0088).
_SV = "schema_version, schema_fingerprint"


class Statements:
    """Every statement the stores run, for one schema."""

    def __init__(self, schema: str, *, journal: bool) -> None:
        s = q(schema)
        #: the channel every write of an object notifies with ``"VERSION UID"`` (its trigger,
        #: ADR 0143)
        self.channel = channel_of(schema)
        body = hashlib.md5(NOTIFY_BODY.encode(), usedforsecurity=False).hexdigest()
        #: What a status cache's listener asks every second (ADR 0143): whether both notify
        #: triggers of ``objects`` are there, fire always, call the function of migration 5 on
        #: this schema's channel, and that function's body is intact; and a fingerprint of
        #: those catalogue rows -- any change to them (a trigger disabled and enabled again
        #: between two checks) drops the cache, since a write may have gone unannounced.
        self.notify_guard = f"""
            SELECT count(*) = 2 AND coalesce(bool_and(
                       t.tgenabled = 'A' AND md5(p.prosrc) = '{body}'
                       AND t.tgargs = convert_to('{self.channel}', 'UTF8') || '\\x00'::bytea
                   ), false),
                   coalesce(string_agg(t.oid::text || '/' || t.xmin::text || '/'
                                       || t.tgenabled::text || '/' || p.oid::text || '/'
                                       || p.xmin::text, ',' ORDER BY t.tgname), '')
            FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid
            WHERE t.tgrelid = to_regclass('{s}.objects')
              AND t.tgname IN ('lifecycle_notify', 'lifecycle_notify_truncate')"""
        #: The session setting holding the epoch this session verified, per schema.
        self.epoch_setting = f"lifecycle.epoch_{schema}"
        setting = f"current_setting('{self.epoch_setting}', true)"
        history = history_sql(s)
        # The session setting names the store it verified (its identity) and the epoch:
        # "e:IDENTITY:TAG"; a schema restored or made again under the session is another store.
        verified = f"'e:' || {identity_sql(s)} || ':'"
        # Run once per session (each new pooled connection) and by every epoch refresh: the
        # current epoch, the history it belongs to and the server's, in one snapshot; the
        # session trusts the epoch only when they agree on a server out of recovery. Such a
        # server's history is fixed until it stops, which ends the session (ADR 0068).
        self.epoch_verify = f"""
            SELECT e.tag, e.history, h.now,
                   set_config('{self.epoch_setting}',
                              CASE WHEN e.history = h.now THEN {verified} || e.tag ELSE '' END,
                              false)
            FROM (SELECT CASE WHEN pg_is_in_recovery() THEN '' ELSE {history} END AS now) h,
                 (SELECT tag, history FROM {s}.epochs ORDER BY seq DESC LIMIT 1) e"""
        journal_cte = (
            f""", j AS (
                INSERT INTO {s}.journal (uid, version, at, observation, fields, transitions,
                                         commit_token, schema_version, schema_fingerprint)
                SELECT w.uid, p.expected + 1, p.at, p.observation, p.fields::json,
                       p.events::json, p.token, p.sv, p.sfp
                FROM w, p
            )"""
            if journal
            else ""
        )
        # One statement, so one round trip and (in autocommit) its own transaction, prepared
        # with positional parameters, each given once (``p``, in :data:`COMMIT_ARGS` order;
        # ADR 0157): the held delivered-marks (``m``, a JSON array of outbox ids, ADR 0127),
        # the CAS (an UPDATE of the expected version of *this* object -- same machine, kind,
        # namespace and name -- or an INSERT of version 1), the journal entry and the outbox
        # rows (the events' JSON array, zipped with their ids), all carrying the commit's
        # token. ``ep`` holds the write to the epoch its events were stamped with: the one
        # this session verified is current on its server's history (:attr:`epoch_verify`, ADR
        # 0068). No row in ``w``: nothing was written; the second column says whether the
        # epoch was the cause, and the rest is the stored row's version and identity as this
        # statement's snapshot saw it (no read after a conflict; ADR 0127).
        self.commit = f"""
            WITH p AS (
                SELECT %s::text AS uid, %s::text AS machine, %s::text AS kind,
                       %s::text AS namespace, %s::text AS name, %s::text AS state,
                       %s::bigint AS expected, %s::text AS status, %s::text AS at,
                       %s::text AS observation, %s::text AS fields, %s::text AS events,
                       %s::text AS ids, %s::text AS token, %s::int AS sv, %s::text AS sfp,
                       %s::text AS epoch, %s::text AS owner, %s::float8 AS lease,
                       %s::text AS marks
            ), m AS (
                DELETE FROM {s}.outbox
                WHERE id = ANY(ARRAY(SELECT json_array_elements_text(p.marks::json) FROM p))
            ), ep AS (
                SELECT coalesce(c.s LIKE {verified} || '%%'
                                AND (p.epoch IS NULL OR c.s = {verified} || p.epoch),
                                false) AS ok
                FROM p, (SELECT {setting} AS s) c
            ), u AS (
                UPDATE {s}.objects o
                SET state = p.state, version = p.expected + 1, status = p.status::json,
                    updated_at = now(), commit_token = p.token, schema_version = p.sv,
                    schema_fingerprint = p.sfp
                FROM p, ep
                WHERE o.uid = p.uid AND o.version = p.expected AND o.machine = p.machine
                  AND o.kind = p.kind AND o.namespace = p.namespace AND o.name = p.name
                  AND ep.ok
                RETURNING o.uid
            ), i AS (
                INSERT INTO {s}.objects (uid, machine, kind, namespace, name, state, version,
                                         status, commit_token, schema_version,
                                         schema_fingerprint)
                SELECT p.uid, p.machine, p.kind, p.namespace, p.name, p.state, 1,
                       p.status::json, p.token, p.sv, p.sfp
                FROM p, ep
                WHERE p.expected = 0 AND ep.ok
                ON CONFLICT (uid) DO NOTHING
                RETURNING uid
            ), w AS (
                SELECT uid FROM u UNION ALL SELECT uid FROM i
            ){journal_cte}, x AS (
                INSERT INTO {s}.outbox (id, uid, version, n, payload, claimed_by, claimed_until)
                SELECT e.id, w.uid, p.expected + 1, (e.payload ->> 'n')::int, e.payload,
                       p.owner, clock_timestamp() + make_interval(secs => p.lease)
                FROM w, p, ROWS FROM (json_array_elements(p.events::json),
                                      json_array_elements_text(p.ids::json)) AS e(payload, id)
            )
            SELECT (SELECT count(*) FROM w), (SELECT ok FROM ep), c.version, c.machine,
                   c.kind, c.namespace, c.name
            FROM p LEFT JOIN {s}.objects c ON c.uid = p.uid AND NOT EXISTS (SELECT 1 FROM w)"""
        batch_journal = (
            f""", j AS (
                INSERT INTO {s}.journal (uid, version, at, observation, fields, transitions,
                                         commit_token, schema_version, schema_fingerprint)
                SELECT b.uid, b.version, b.at, b.observation, b.fields::json, b.events::json,
                       b.token, b.sv, b.sfp
                FROM w JOIN b USING (i)
            )"""
            if journal
            else ""
        )
        # ``commit_many`` as one statement over the whole batch (after :attr:`lock_many`, in
        # the same transaction): every column arrives as one JSON array (ADR 0167: psycopg
        # dumps a binary array in Python, item by item), unpacked in step, each
        # item is compared-and-set on its own version, and the journal and outbox rows are
        # selected from what was written. ``bad``: some uid is stored under another identity,
        # and then nothing is written. One row per item, in order: written, epoch accepted,
        # and the stored version (before this statement) for a conflict's report.
        self.commit_batch = f"""
            WITH r AS (
                SELECT * FROM ROWS FROM (
                    json_array_elements_text(%(uid)s::json),
                    json_array_elements_text(%(machine)s::json),
                    json_array_elements_text(%(kind)s::json),
                    json_array_elements_text(%(namespace)s::json),
                    json_array_elements_text(%(name)s::json),
                    json_array_elements_text(%(state)s::json),
                    json_array_elements_text(%(version)s::json),
                    json_array_elements_text(%(status)s::json),
                    json_array_elements_text(%(at)s::json),
                    json_array_elements_text(%(observation)s::json),
                    json_array_elements_text(%(fields)s::json),
                    json_array_elements_text(%(events)s::json),
                    json_array_elements_text(%(token)s::json),
                    json_array_elements_text(%(epoch)s::json),
                    json_array_elements_text(%(sv)s::json),
                    json_array_elements_text(%(sfp)s::json))
                    WITH ORDINALITY AS r(uid, machine, kind, namespace, name, state, version,
                                         status, at, observation, fields, events, token,
                                         epoch, sv, sfp, i)
            ), b AS (
                SELECT r.uid, r.machine, r.kind, r.namespace, r.name, r.state,
                       r.version::bigint AS version, r.status, r.at, r.observation, r.fields,
                       r.events, r.token, r.epoch, r.sv::int AS sv, r.sfp, r.i
                FROM r
            ), ok AS (
                SELECT b.i, coalesce(c.s LIKE {verified} || '%%'
                                     AND (b.epoch IS NULL OR c.s = {verified} || b.epoch),
                                     false) AS ok
                FROM b, (SELECT {setting} AS s) c
            ), bad AS (
                SELECT EXISTS (
                    SELECT 1 FROM b JOIN {s}.objects o ON o.uid = b.uid
                    WHERE (o.machine, o.kind, o.namespace, o.name)
                          IS DISTINCT FROM (b.machine, b.kind, b.namespace, b.name)) AS bad
            ), u AS (
                UPDATE {s}.objects o
                SET state = b.state, version = b.version, status = b.status::json,
                    updated_at = now(), commit_token = b.token, schema_version = b.sv,
                    schema_fingerprint = b.sfp
                FROM b JOIN ok USING (i)
                WHERE o.uid = b.uid AND o.version = b.version - 1 AND b.version > 1 AND ok.ok
                  AND NOT (SELECT bad FROM bad)
                RETURNING b.i
            ), n AS (
                INSERT INTO {s}.objects (uid, machine, kind, namespace, name, state, version,
                                         status, commit_token, schema_version,
                                         schema_fingerprint)
                SELECT b.uid, b.machine, b.kind, b.namespace, b.name, b.state, b.version,
                       b.status::json, b.token, b.sv, b.sfp
                FROM b JOIN ok USING (i)
                WHERE b.version = 1 AND ok.ok AND NOT (SELECT bad FROM bad)
                ORDER BY b.uid
                ON CONFLICT (uid) DO NOTHING
                RETURNING uid
            ), w AS (
                SELECT i FROM u UNION ALL SELECT b.i FROM n JOIN b USING (uid)
            ){batch_journal}, x AS (
                INSERT INTO {s}.outbox (id, uid, version, n, payload, claimed_by, claimed_until)
                SELECT e.id, b.uid, b.version, e.n, e.payload::json, %(owner)s,
                       clock_timestamp() + make_interval(secs => %(lease)s)
                FROM (SELECT e.i::bigint AS i, e.id, e.n::int AS n, e.payload
                      FROM ROWS FROM (json_array_elements_text(%(e_item)s::json),
                                      json_array_elements_text(%(e_id)s::json),
                                      json_array_elements_text(%(e_n)s::json),
                                      json_array_elements_text(%(e_payload)s::json))
                           AS e(i, id, n, payload)) AS e
                JOIN w USING (i) JOIN b USING (i)
            )
            SELECT b.i, w.i IS NOT NULL, ok.ok, (SELECT bad FROM bad), o.version
            FROM b JOIN ok USING (i) LEFT JOIN w USING (i)
                 LEFT JOIN {s}.objects o ON o.uid = b.uid
            ORDER BY b.i"""
        #: lock a batch's stored objects in uid order first: overlapping batches of several
        #: replicas then wait for each other instead of deadlocking
        self.lock_many = (
            f"SELECT 1 FROM {s}.objects WHERE uid = ANY(ARRAY("
            "SELECT json_array_elements_text(%s::json))) ORDER BY uid FOR UPDATE"
        )
        #: a notification sent by hand (a status cache's barrier)
        self.notify = "SELECT pg_notify(%s, %s)"
        #: what a refused commit is told: the stored version and identity
        self.identity_of = (
            f"SELECT version, machine, kind, namespace, name FROM {s}.objects WHERE uid = %s"
        )
        self.load = (
            f"SELECT version, status, machine, kind, namespace, name, {_SV} FROM {s}.objects "
            "WHERE uid = %s"
        )
        self.load_many = (
            f"SELECT uid, version, status, machine, kind, namespace, name, {_SV} "
            f"FROM {s}.objects WHERE uid = ANY(%s)"
        )
        self.versions = (
            f"SELECT uid, version, machine, kind, namespace, name FROM {s}.objects "
            "WHERE uid = ANY(%s)"
        )
        # Whether commits whose connection was lost landed: per (uid, version), the stored
        # version with its token and the token of the journal entry at that version.
        self.tokens = f"""
            SELECT x.uid, x.version, o.version, o.commit_token, j.commit_token
            FROM unnest(%s::text[], %s::bigint[]) AS x(uid, version)
            LEFT JOIN {s}.objects o ON o.uid = x.uid
            LEFT JOIN {s}.journal j ON j.uid = x.uid AND j.version = x.version"""
        self.epoch_now = (
            f"SELECT e.tag, e.history, {history} FROM {s}.epochs e ORDER BY e.seq DESC LIMIT 1"
        )
        self.epoch_lock = "SELECT pg_advisory_xact_lock(hashtext(%s))"
        #: end a backend of ours that still runs a lost write (waits up to %s ms for it)
        self.end_backend = (
            "SELECT pg_terminate_backend(a.pid, %s) FROM pg_stat_activity a "
            "WHERE a.pid = %s AND a.usename = current_user AND a.pid <> pg_backend_pid()"
        )
        self.epoch_add = (
            f"INSERT INTO {s}.epochs (tag, history, detected_by) VALUES (%s, {history}, %s)"
        )
        self.epochs = (
            f"SELECT seq, tag, history, started_at, detected_by FROM {s}.epochs ORDER BY seq"
        )
        self.rewind_add = (
            f"INSERT INTO {s}.rewinds (uid, acknowledged, found, epoch, reported_by) "
            "VALUES (%s, %s, %s, %s, %s)"
        )
        self.rewinds = (
            f"SELECT uid, acknowledged, found, epoch, reported_by, seen_at FROM {s}.rewinds "
            "ORDER BY seen_at, uid"
        )
        self.journal = (
            f"SELECT version, at, observation, fields, transitions, {_SV} FROM {s}.journal "
            "WHERE uid = %s ORDER BY version"
        )
        self.records = (
            f"SELECT kind, namespace, name, uid, version, status, {_SV} FROM {s}.objects "
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
        #
        # Each object's first row is found by a skip scan of the ``(uid, version, n)`` index
        # (``firsts``: one probe per object, in uid order), and everything downstream pulls
        # from it one object at a time (nested loops, no sort): the statement stops at
        # ``limit`` rows, having read and locked only the objects those rows belong to. So a
        # claim costs what it takes, not the whole outbox, and concurrent claims of several
        # replicas lock disjoint objects instead of one of them locking every head (ADR 0157).
        self.claim = f"""
            WITH RECURSIVE firsts AS (
                (SELECT f.uid, f.id FROM {s}.outbox f ORDER BY f.uid, f.version, f.n LIMIT 1)
                UNION ALL
                SELECT g.uid, g.id FROM firsts, LATERAL (
                    SELECT x.uid, x.id FROM {s}.outbox x WHERE x.uid > firsts.uid
                    ORDER BY x.uid, x.version, x.n LIMIT 1) g
            ), heads AS (
                SELECT h.uid FROM firsts, LATERAL (
                    SELECT o.uid FROM {s}.outbox o
                    WHERE o.id = firsts.id AND {claimable.format(t="o")}
                    FOR UPDATE OF o SKIP LOCKED) h
            ), picked AS (
                SELECT r.id FROM heads, LATERAL (
                    SELECT b.id FROM {s}.outbox b
                    WHERE b.uid = heads.uid AND {claimable.format(t="b")}
                      AND NOT EXISTS (
                          SELECT 1 FROM {s}.outbox c
                          WHERE c.uid = b.uid AND (c.version, c.n) < (b.version, b.n)
                            AND NOT {claimable.format(t="c")})
                    ORDER BY b.version, b.n) r
                LIMIT %(limit)s
            )
            UPDATE {s}.outbox SET claimed_by = %(me)s,
                claimed_until = clock_timestamp() + make_interval(secs => %(lease)s)
            WHERE id = ANY(ARRAY(SELECT id FROM picked))
            RETURNING payload"""
        # A mark need not be durable: lost in a crash, the event is delivered again under its
        # id (at least once). So its commit does not wait for the disk.
        self.mark = (
            "WITH lazy AS (SELECT set_config('synchronous_commit', 'off', true)) "
            f"DELETE FROM {s}.outbox WHERE id = ANY(%b::text[]) AND EXISTS (SELECT 1 FROM lazy)"
        )
        #: the mark's DELETE as it rides in front of a commit, in the commit's transaction
        #: (durable with it; the lazy flush above would make the commit lazy too)
        self.mark_riding = f"DELETE FROM {s}.outbox WHERE id = ANY(%b::text[])"
        self.undelivered = f"SELECT count(*) FROM {s}.outbox"
        #: what waits in the outbox: how many rows, the oldest one's commit time (db status)
        self.outbox_summary = f"SELECT count(*), min(created_at) FROM {s}.outbox"
        self.snapshot = f"SELECT version, status, {_SV} FROM {s}.snapshots WHERE uid = %s"
        self.lock_object = (
            f"SELECT version, status, {_SV} FROM {s}.objects WHERE uid = %s FOR UPDATE"
        )
        self.compactable = (
            f"SELECT o.kind, o.namespace, o.name, o.uid FROM {s}.objects o "
            f"WHERE o.machine = %s AND (SELECT count(*) FROM {s}.journal j "
            "WHERE j.uid = o.uid) > %s ORDER BY o.uid"
        )
        self.put_snapshot = (
            f"INSERT INTO {s}.snapshots (uid, version, status, {_SV}) "
            "VALUES (%s, %s, %s::json, %s, %s) "
            "ON CONFLICT (uid) DO UPDATE SET version = excluded.version, "
            "status = excluded.status, taken_at = now(), "
            "schema_version = excluded.schema_version, "
            "schema_fingerprint = excluded.schema_fingerprint"
        )
        self.drop_journal = f"DELETE FROM {s}.journal WHERE uid = %s AND version <= %s"
        # -- record schemas (ADR 0088): one aggregate read, and the upgrade's batches, read
        # after a (uid, version) key and written back compared-and-set on what was read
        self.schema_versions = f"""
            SELECT machine, 'status', schema_version, schema_fingerprint, count(*), min(uid)
            FROM {s}.objects GROUP BY machine, schema_version, schema_fingerprint
            UNION ALL
            SELECT o.machine, 'journal', j.schema_version, j.schema_fingerprint, count(*),
                   min(j.uid)
            FROM {s}.journal j JOIN {s}.objects o ON o.uid = j.uid
            GROUP BY o.machine, j.schema_version, j.schema_fingerprint
            UNION ALL
            SELECT o.machine, 'snapshot', n.schema_version, n.schema_fingerprint, count(*),
                   min(n.uid)
            FROM {s}.snapshots n JOIN {s}.objects o ON o.uid = n.uid
            GROUP BY o.machine, n.schema_version, n.schema_fingerprint"""
        self.old_statuses = (
            f"SELECT uid, version, status, {_SV} FROM {s}.objects "
            "WHERE machine = %s AND schema_version < %s AND (uid, version) > (%s, %s) "
            "ORDER BY uid LIMIT %s"
        )
        self.upgrade_status = (
            f"UPDATE {s}.objects SET state = %s, status = %s::json, schema_version = %s, "
            "schema_fingerprint = %s WHERE uid = %s AND version = %s AND schema_version = %s "
            "AND schema_fingerprint = %s"
        )
        self.old_entries = (
            f"SELECT j.uid, j.version, j.at, j.observation, j.fields, j.schema_version, "
            f"j.schema_fingerprint FROM {s}.journal j JOIN {s}.objects o ON o.uid = j.uid "
            "WHERE o.machine = %s AND j.schema_version < %s AND (j.uid, j.version) > (%s, %s) "
            "ORDER BY j.uid, j.version LIMIT %s"
        )
        self.upgrade_entry = (
            f"UPDATE {s}.journal SET observation = %s, fields = %s::json, schema_version = %s, "
            "schema_fingerprint = %s WHERE uid = %s AND version = %s AND schema_version = %s "
            "AND schema_fingerprint = %s"
        )
        self.old_snapshots = (
            f"SELECT n.uid, n.version, n.status, n.schema_version, n.schema_fingerprint "
            f"FROM {s}.snapshots n JOIN {s}.objects o ON o.uid = n.uid "
            "WHERE o.machine = %s AND n.schema_version < %s AND (n.uid, n.version) > (%s, %s) "
            "ORDER BY n.uid LIMIT %s"
        )
        self.upgrade_snapshot = (
            f"UPDATE {s}.snapshots SET status = %s::json, schema_version = %s, "
            "schema_fingerprint = %s WHERE uid = %s AND version = %s AND schema_version = %s "
            "AND schema_fingerprint = %s"
        )


# -- rows -----------------------------------------------------------------------------------
def _compact_encoder(*, ascii_only: bool = True) -> Callable[[Any], str]:
    """``json``'s compact encoder, its C part built once (ADR 0167): ``JSONEncoder.encode``
    builds it again on every call, about a microsecond a document. The same C function
    writes the text, so the bytes are the same; built without the circular-reference check
    (the values are fresh from cattrs), a value nested too deep or circular is refused as a
    ``ValueError``, as the checked encoder refuses a circular one."""
    plain = json.JSONEncoder(separators=(",", ":"), ensure_ascii=ascii_only)
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # no C accelerator: the plain encoder
        return plain.encode
    strings = json.encoder.encode_basestring_ascii if ascii_only else json.encoder.encode_basestring
    encode = make(None, plain.default, strings, None, ":", ",", False, False, True)
    join = "".join

    def dumps(value: Any) -> str:
        try:
            return join(encode(value, 0))
        except RecursionError:
            raise ValueError("nested too deep for JSON, or circular") from None

    return dumps


#: compact JSON text, as ``json.JSONEncoder(separators=(",", ":")).encode`` writes it
_dumps = _compact_encoder()
#: the same, text left as it is (``ensure_ascii=False``): a batch's columns, unpacked by
#: ``json_array_elements_text`` -- a ``\uXXXX`` above 007F is refused on a database that is
#: not UTF-8, the character itself is not
json_texts = _compact_encoder(ascii_only=False)


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
    ids = [t.id for t in transitions]
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
        "ids": ids,
        "ids_json": _dumps(ids),
        "ns": [t.n for t in transitions],
        "payloads": payloads,
        "owner": owner,
        "lease": lease,
        "token": commit_token(),
        "sv": machine.schema.version,
        "sfp": machine.schema.fingerprint,
        # the epoch the events were stamped with (None: no events, any epoch will do)
        "epoch": transitions[0].epoch if transitions else None,
    }


#: The parameters of :attr:`Statements.commit`, in order (its ``p`` row).
COMMIT_ARGS = (
    "uid", "machine", "kind", "namespace", "name", "state", "expected", "status", "at",
    "observation", "fields", "events", "ids_json", "token", "sv", "sfp", "epoch", "owner",
    "lease",
)  # fmt: skip


def commit_args(params: dict[str, Any], marks: Sequence[str] = ()) -> tuple[Any, ...]:
    """:func:`commit_params` as :attr:`Statements.commit`'s positional parameters, with the
    held delivered-marks it carries (``marks``: outbox ids)."""
    return (*[params[k] for k in COMMIT_ARGS], _dumps(list(marks)) if marks else "[]")


class _Tokens:
    """Commit tokens: a random prefix per process (drawn again in a forked child) and a
    counter -- unique across processes and hosts without a system call per commit
    (ADR 0157)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.prefix = secrets.token_hex(8)
        self.count = itertools.count(1)

    def __call__(self) -> str:
        return f"{self.prefix}{next(self.count):x}"


#: a new commit token (what resolves a commit whose connection was lost)
commit_token = _Tokens()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=commit_token.reset)


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


_BATCH_COLUMNS = (
    "uid", "machine", "kind", "namespace", "name", "state", "version", "status", "at",
    "observation", "fields", "events", "token", "epoch", "sv", "sfp",
)  # fmt: skip


def batch_params(params: Sequence[dict[str, Any]], *, owner: str, lease: float) -> dict[str, Any]:
    """The parameters of :attr:`Statements.commit_batch`: each column of the items'
    :func:`commit_params` as one JSON array, and their outbox rows as four flat ones (item
    position from 1, id, position in the commit, payload)."""
    out: dict[str, Any] = {c: json_texts([p[c] for p in params]) for c in _BATCH_COLUMNS}
    e_item: list[int] = []
    e_id: list[str] = []
    e_n: list[int] = []
    e_payload: list[str] = []
    for i, p in enumerate(params, 1):
        if p["ids"]:
            e_item += [i] * len(p["ids"])
            e_id += p["ids"]
            e_n += p["ns"]
            e_payload += p["payloads"]
    out.update(
        e_item=json_texts(e_item), e_id=json_texts(e_id), e_n=json_texts(e_n),
        e_payload=json_texts(e_payload), owner=owner, lease=lease,
    )  # fmt: skip
    return out


def batch_counts(
    params: Sequence[dict[str, Any]], rows: Sequence[Sequence[Any]]
) -> tuple[list[tuple[int, bool]], dict[str, Sequence[Any]], bool]:
    """A :attr:`Statements.commit_batch` result as :func:`batch_results` takes it: per item
    (written, epoch accepted), the stored versions of the items not written (as
    ``versions`` rows), and whether the batch was refused for an identity mismatch."""
    counts: list[tuple[int, bool]] = []
    stored: dict[str, Sequence[Any]] = {}
    refused = False
    for p, (_, written, ok, bad, version) in zip(params, rows, strict=True):
        counts.append((1 if written else 0, bool(ok)))
        refused = refused or bool(bad)
        if not written and version is not None:
            stored[p["uid"]] = (p["uid"], version)
    return counts, stored, refused


def record_from(
    machine: Machine[Any], ref: ObjectRef, version: int, status: Any, sv: int, fp: str
) -> Record:
    """A stored status written under schema ``(sv, fp)``: upcast if that is not the
    machine's (ADR 0088)."""
    return Record(ref, machine.name, load_status(machine, load_json(status), sv, fp), int(version))


def snapshot_from(machine: Machine[Any], row: Sequence[Any]) -> Snapshot:
    """A :attr:`Statements.snapshot` row as a :class:`Snapshot` (upcast if need be)."""
    return Snapshot(int(row[0]), load_status(machine, load_json(row[1]), row[2], row[3]))


def status_rows(
    machine: Machine[Any], rows: Sequence[Sequence[Any]], *, snapshots: bool = False
) -> list[tuple[Any, ...]]:
    """``lifecycle db upgrade``: :attr:`Statements.upgrade_status` (or ``upgrade_snapshot``)
    parameters for :attr:`Statements.old_statuses` (``old_snapshots``) rows."""
    now = (machine.schema.version, machine.schema.fingerprint)
    out = []
    for uid, version, data, sv, fp in rows:
        state, new = _upgraded(upgraded_status, machine, uid, version, load_json(data), sv, fp)
        head = (_dumps(new),) if snapshots else (state, _dumps(new))
        out.append((*head, *now, uid, version, sv, fp))
    return out


def entry_rows(machine: Machine[Any], rows: Sequence[Sequence[Any]]) -> list[tuple[Any, ...]]:
    """``lifecycle db upgrade``: :attr:`Statements.upgrade_entry` parameters for
    :attr:`Statements.old_entries` rows."""
    now = (machine.schema.version, machine.schema.fingerprint)
    out = []
    for uid, version, at, name, fields, sv, fp in rows:
        name, new = _upgraded(
            upgraded_observation, machine, uid, version, name, at, load_json(fields), sv, fp
        )
        out.append((name, _dumps(new), *now, uid, version, sv, fp))
    return out


def _upgraded(fn: Any, machine: Machine[Any], uid: str, version: int, *args: Any) -> Any:
    """An upgrade step; a failing upcaster (or a record the machine then refuses) stops the
    upgrade there with a :class:`StoreError` naming the record (that batch unwritten)."""
    try:
        return fn(machine, *args)
    except StoreError:
        raise
    except Exception as e:
        raise StoreError(f"upgrade of {uid} v{version} failed: {e!r}") from e


def channel_of(schema: str) -> str:
    """The ``LISTEN``/``NOTIFY`` channel of a (validated) schema's commits (ADR 0134):
    ``lifecycle:SCHEMA``, or for a schema too long for a channel name (63 bytes) its first
    letters and a digest of the whole."""
    channel = f"lifecycle:{schema}"
    if len(channel) <= 63:
        return channel
    digest = hashlib.sha256(schema.encode()).hexdigest()[:16]
    return f"lifecycle:{schema[:36]}:{digest}"


def check_row_identity(machine: Machine[Any], ref: ObjectRef, row: Sequence[Any]) -> None:
    """The identity rule on a stored ``(machine, kind, namespace, name)``."""
    check_identity(str(row[0]), str(row[1]), str(row[2]), str(row[3]), machine.name, ref)


# -- outcomes of commits whose connection was lost -------------------------------------------
class Landed(enum.Enum):
    """What a commit token found: the write is stored, or it is certainly not."""

    YES = "landed"
    NO = "not written"
    UNKNOWN = "unknown"


def landed(row: Sequence[Any], token: str) -> Landed:
    """Decide from a :attr:`Statements.tokens` row whether the commit with ``token`` landed.

    Its token on the object (at its version) or on the journal entry of its version: it did.
    The object missing or behind that version, or that version written under another token:
    it did not. The object past that version with no journal entry to tell (journal off,
    or compacted): unknown."""
    _, version, stored, object_token, journal_token = row
    if journal_token is not None:
        return Landed.YES if journal_token == token else Landed.NO
    if stored is None or int(stored) < int(version):
        return Landed.NO
    if int(stored) == int(version):
        return Landed.YES if object_token == token else Landed.NO
    return Landed.UNKNOWN


def resolved(
    rows: Sequence[Sequence[Any]], writes: Sequence[dict[str, Any]]
) -> list[tuple[Landed, int | None]]:
    """``(outcome, stored version)`` per write of a lost commit, from its
    :attr:`Statements.tokens` rows (sync and async stores alike); logged once."""
    found = {(str(r[0]), int(r[1])): r for r in rows}
    out = []
    for w in writes:
        row = found[(w["uid"], w["version"])]
        out.append((landed(row, w["token"]), None if row[2] is None else int(row[2])))
    _log.warning(
        "commit outcome resolved after a lost connection",
        uids=[w["uid"] for w in writes][:10],
        outcomes=[o.value for o, _ in out][:10],
    )
    return out


def unresolved(uids: Sequence[str], why: Exception, timeout: float) -> CommitUnknown:
    """The error of a lost commit whose outcome ``resolve_timeout`` could not settle."""
    return CommitUnknown(
        tuple(uids),
        f"{why}; whether the commit landed is unknown: not resolved within "
        f"{timeout:g}s (resolve_timeout)",
    )


def batch_results(
    params: Sequence[dict[str, Any]],
    counts: Sequence[tuple[int, bool]],
    stored: dict[str, Sequence[Any]],
) -> list[int | StoreError]:
    """Per item of a committed batch: its version, or its :class:`Conflict` (``stored``: the
    ``versions`` rows of the items that wrote nothing). An item refused for its epoch is a
    conflict at its own expected version: stamp it again."""
    out: list[int | StoreError] = []
    for p, (n, ok) in zip(params, counts, strict=True):
        if n:
            out.append(int(p["version"]))
            continue
        row = stored.get(p["uid"])
        actual = None if row is None else int(row[1])
        out.append(Conflict(p["uid"], p["expected"], p["expected"] if not ok else actual))
    return out


def batch_outcomes(
    target: Target,
    params: Sequence[dict[str, Any]],
    resolved: Sequence[tuple[Landed, int | None]],
    error: BaseException,
) -> list[int | StoreError]:
    """Per item of a batch whose connection was lost, from its resolved commit tokens: the
    batch is one transaction, so one landed item means it committed (the items that did not
    land lost their compare-and-set). Raises :class:`StoreError` when nothing landed and
    :class:`CommitUnknown` when that cannot be told."""
    what = f"commit of {len(params)} objects"
    if not any(outcome is Landed.YES for outcome, _ in resolved):
        if any(outcome is Landed.UNKNOWN for outcome, _ in resolved):
            raise CommitUnknown(
                tuple(p["uid"] for p in params),
                f"{translate(target, what, error)}; whether the batch landed is unknown: "
                "the journal cannot tell",
            )
        raise StoreError(
            f"{translate(target, what, error)} -- nothing of the batch was written "
            "(resolved by its commit tokens)"
        )
    out: list[int | StoreError] = []
    for p, (outcome, stored) in zip(params, resolved, strict=True):
        if outcome is Landed.YES:
            out.append(int(p["version"]))
        elif outcome is Landed.NO:
            out.append(Conflict(p["uid"], p["expected"], stored))
        else:
            out.append(CommitUnknown((p["uid"],), f"commit of {p['uid']} v{p['version']}: unknown"))
    return out


# -- epochs and rewinds ---------------------------------------------------------------------
def new_epoch_tag(history: str) -> str:
    """A fresh epoch tag: the timeline it starts on, and random bits (unique even if this
    epoch's own start is lost in another failover)."""
    parts = history.split("/")
    timeline = parts[1] if len(parts) > 1 else ""
    try:
        number = int(timeline, 16)
    except ValueError:
        number = 0
    return f"t{number}-{secrets.token_hex(3)}"


def verified_epoch(target: Target, row: Sequence[Any] | None) -> tuple[str, str, str]:
    """An :attr:`Statements.epoch_verify` row as ``(tag, its history, the server's)``;
    refuses a store without an epoch and a server in recovery (a standby takes no writes)."""
    if row is None:
        raise StoreError(f"PostgreSQL at {target.where}: the store has no epoch")
    tag, history, current = (str(v) for v in row[:3])
    if not current:
        raise StoreError(
            f"PostgreSQL at {target.where}: the server is a standby (in recovery); "
            "it takes no writes"
        )
    return tag, history, current


def journal_from(machine: Machine[Any], rows: Sequence[Sequence[Any]]) -> list[JournalEntry]:
    return [
        JournalEntry(
            int(version),
            load_observation(machine, name, at, load_json(fields), sv, fp),
            tuple(transition_from_row(t) for t in load_json(events)),
        )
        for version, at, name, fields, events, sv, fp in rows
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
    #: the epoch this store stamps events with ("" on a database whose history never
    #: changed); event ids carry it as ``@TAG``
    epoch: str
    #: acknowledged writes this handle found lost (history went backwards), oldest first
    #: (the latest :data:`_REWINDS_KEPT`)
    rewinds: list[Rewind]
    #: every rewind this handle found (``lifecycle_store_rewinds_total``)
    rewind_count: int
    #: the history (server and store identity) this handle last verified its epoch on
    _history_seen: str
    _lease: float
    _timeout: float
    _call_timeout: float
    _resolve_timeout: float
    _keep_journal: bool
    _sql: Statements
    _acked: dict[str, tuple[int, str]]
    #: the coherent status cache (``cache=N``, ADR 0134), or ``None``
    cache: StatusCache | None

    def _settle(
        self,
        url: str,
        schema: str | None,
        pool_size: int,
        timeout: float,
        connect_timeout: float | None,
        lease_seconds: float,
        journal: bool,
        synchronous_commit: SynchronousCommit | None,
        owner: str | None,
    ) -> list[str]:
        """Check and keep the settings; returns the statements each new connection runs."""
        if pool_size < 1:
            raise ValueError(f"pool_size must be at least 1, got {pool_size}")
        target = parse_url(url, schema)
        if connect_timeout is not None and "connect_timeout=" not in url:
            target = attrs.evolve(
                target,
                conninfo=make_conninfo(
                    target.conninfo, connect_timeout=str(max(2, round(connect_timeout)))
                ),
            )
        self.target = target
        self.url = redact_url(url)
        self.owner = owner if owner is not None else uuid.uuid4().hex
        self.epoch = ""
        self.rewinds = []
        self.rewind_count = 0
        self.cache = None
        self._acked = {}
        self._history_seen = ""
        self._lease = float(lease_seconds)
        self._timeout = timeout
        self._call_timeout = target.call_timeout
        self._resolve_timeout = target.resolve_timeout
        self._keep_journal = journal
        self._sql = Statements(self.target.schema, journal=journal)
        return configure_sql(synchronous_commit)

    def record_limit(self, kind: str) -> int | None:
        """No bound a machine's declared limits reach (ADR 0144): a status is one ``json``
        value, which PostgreSQL holds up to 1 GB.

        Args:
            kind: the object kind asked about.

        Returns:
            ``None``: no bound.
        """
        return None

    def _pool_options(self, pool_size: int, name: str) -> dict[str, Any]:
        """The connection-pool arguments both drivers use (``name`` tells them apart)."""
        return {
            "kwargs": {"autocommit": True, "application_name": "lifecycle"},
            "min_size": 1,
            "max_size": pool_size,
            "timeout": self._timeout,
            "open": False,
            "reconnect_timeout": max(self._timeout, 5.0),
            "name": f"{name}-{self.target.host}",
        }

    # -- what both stores remember of their own commits ----------------------------------
    def _acknowledge(self, uid: str, version: int, token: str) -> None:
        """Remember the highest version this handle committed of ``uid``, with its commit
        token (bounded: the oldest half is forgotten past :data:`_ACKED_LIMIT` objects)."""
        acked = self._acked
        if len(acked) >= _ACKED_LIMIT:
            for old in list(itertools.islice(acked, _ACKED_LIMIT // 2)):
                del acked[old]
        acked[uid] = (version, token)

    def _rewound(self, uid: str, found: int | None, *, replaced: bool = False) -> Rewind | None:
        """A :class:`Rewind` when the store holds ``uid`` behind what this handle committed
        -- or, ``replaced``, holds another write at that version -- logged at error level and
        kept in :attr:`rewinds`; reported once."""
        acked = self._acked.get(uid)
        if acked is None or (not replaced and found is not None and found >= acked[0]):
            return None
        acknowledged = acked[0]
        rewind = Rewind(uid, acknowledged, found, self.epoch)
        if self.cache is not None:  # it may hold what the store lost, of this or others
            self.cache.drop("a rewind")
        self._acked.pop(uid, None)
        self.rewinds.append(rewind)
        self.rewind_count += 1
        del self.rewinds[:-_REWINDS_KEPT]
        _log.error(
            "acknowledged writes lost: the store's history went backwards",
            uid=uid,
            acknowledged=acknowledged,
            found=found,
            epoch=self.epoch,
            store=self.target.where,
        )
        return rewind

    def _acks_to_verify(self) -> list[list[tuple[str, int, str]]]:
        """What this handle acknowledged, in chunks: checked by commit token when the epoch
        changes, so a lost write is reported even where a later one took its version."""
        acked = [(uid, v, token) for uid, (v, token) in self._acked.items()]
        return [acked[i : i + 5000] for i in range(0, len(acked), 5000)]

    def _verified(
        self, chunk: list[tuple[str, int, str]], rows: Sequence[Sequence[Any]]
    ) -> list[Rewind]:
        """The rewinds among ``chunk`` (``rows``: its :attr:`Statements.tokens` rows)."""
        found = {(str(r[0]), int(r[1])): r for r in rows}
        out = []
        for uid, version, token in chunk:
            row = found.get((uid, version))
            if row is None or landed(row, token) is not Landed.NO:
                continue
            stored = None if row[2] is None else int(row[2])
            rewind = self._rewound(uid, stored, replaced=True)
            if rewind is not None:
                out.append(rewind)
        return out

    def _recreated(self, tag: str, current: str) -> bool:
        """Whether the store under this handle was made again (its schema dropped and
        migrated again: the same epoch tag on another store identity) -- a new epoch is due
        though the epochs table agrees with the server (ADR 0146)."""
        seen = self._history_seen
        if not seen or tag != self.epoch or seen == current:
            return False
        return seen.split("/")[:2] == current.split("/")[:2]

    def _restored(self, history: str, current: str) -> None:
        """Before this handle starts an epoch: when the epochs table names another store
        identity than the one the server holds (a schema restored from ``pg_dump``, or
        dropped and migrated again), writes after the copy are lost -- a rewind of the whole
        store, logged at error level and counted (ADR 0146)."""
        was, now = history.split("/"), current.split("/")
        seen = self._history_seen.split("/")
        restored = len(was) == 3 and len(now) == 3 and was[2] != now[2]
        if not restored and not (len(seen) == 3 and len(now) == 3 and seen[2] != now[2]):
            return
        self.rewind_count += 1
        _log.error(
            "the store was restored or made again (its schema is another than the one its "
            "history names): writes made after the copy are lost; new store epoch",
            store=self.target.where,
            history=history,
            now=current,
        )

    def _new_epoch(self, old: str, new: str, history: str) -> None:
        if new != old:
            if self.cache is not None:  # a failover may have lost what it holds
                self.cache.drop("the database's history changed")
            _log.warning(
                "the database's history changed (failover or restore): new store epoch; "
                "event ids now end in @" + new,
                old_epoch=old,
                epoch=new,
                history=history,
                store=self.target.where,
            )
        self.epoch = new


_ACKED_LIMIT = 200_000
_REWINDS_KEPT = 1000
_log = get_logger("lifecycle.stores")
adopt_pool_logs()  # psycopg_pool's records about the library's pools (ADR 0098)


def epoch_unavailable(target: Target) -> StoreError:
    return StoreError(
        f"PostgreSQL at {target.where}: the store's epoch kept changing; commit not done"
    )
