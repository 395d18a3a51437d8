"""The synchronous PostgreSQL store's commit through libpq itself (ADR 0167): the same rows,
byte for byte, and the same refusals as psycopg's cursor; what it cannot carry exactly (a NUL
in a text, a connection that is not UTF-8) goes through the cursor; a statement deallocated
behind the store's back is prepared again. A batch sent as JSON arrays stores the same rows
as its items committed one by one."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lifecycle import ObjectRef, StoreError
from lifecycle._core.transition import stamp
from lifecycle.machines import POD, pod
from lifecycle.stores import _pgsql
from lifecycle.stores._pgdirect import positional, text_params
from lifecycle.stores.base import CommitItem
from lifecycle.stores.postgres import PostgresStore

from .helpers import raw, step, t
from .pg import PgServer

pytestmark = pytest.mark.postgres
_uids = itertools.count()


def test_positional_form() -> None:
    assert positional("SELECT %s, %s WHERE x LIKE 'a%%'") == "SELECT $1, $2 WHERE x LIKE 'a%'"
    with pytest.raises(ValueError, match="%b"):
        positional("SELECT %b")


def test_text_params_refuse_what_libpq_text_cannot_carry() -> None:
    assert text_params(["é", 7, 0.5, None, -3]) == ["é".encode(), b"7", b"0.5", None, b"-3"]
    assert text_params(["a\x00b"]) is None  # libpq would cut it at the NUL
    assert text_params([True]) is None  # psycopg's dumper knows a bool
    assert text_params([b"bytes"]) is None


_PLAIN = json.JSONEncoder(separators=(",", ":")).encode
_KEYS = st.one_of(st.text(), st.integers(), st.floats(), st.booleans(), st.none())
_JSONISH = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(), st.integers(min_value=2**64), st.floats(),
        st.text(st.one_of(st.sampled_from("\x00\x7f\x1fé☃\"\\/"), st.characters())),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.tuples(inner, inner),
        st.dictionaries(_KEYS, inner, max_size=4),
    ),
    max_leaves=12,
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(value=_JSONISH)
def test_the_encoder_writes_the_standard_encoders_bytes(value: object) -> None:
    assert _pgsql._dumps(value) == _PLAIN(value)


def test_the_encoder_refuses_what_the_standard_one_refuses() -> None:
    circular: list[object] = []
    circular.append(circular)
    for bad, error in ((object(), TypeError), ({(1, 2): 3}, TypeError), (circular, ValueError)):
        with pytest.raises(error):
            _PLAIN(bad)
        with pytest.raises(error):
            _pgsql._dumps(bad)


def _rows(store: PostgresStore) -> list[list[tuple[Any, ...]]]:
    """Every stored row's text as the server keeps it (the JSON columns as text)."""
    return [
        raw(store, "SELECT uid, machine, kind, namespace, name, state, version, status::text "
                   "FROM {s}objects ORDER BY uid"),
        raw(store, "SELECT uid, version, at, observation, fields::text, transitions::text "
                   "FROM {s}journal ORDER BY uid, version"),
        raw(store, "SELECT id, uid, version, n, payload::text FROM {s}outbox ORDER BY id"),
    ]  # fmt: skip


@pytest.fixture
def pair(pg_server: PgServer) -> Iterator[tuple[PostgresStore, PostgresStore]]:
    """A store on libpq's path and one on psycopg's cursor, each on a schema of its own."""
    n = next(_uids)
    direct = PostgresStore(pg_server.url(schema=f"direct_{n}"), cache=0, pool_size=1)
    cursor = PostgresStore(pg_server.url(schema=f"cursor_{n}"), cache=0, pool_size=1)
    statement = cursor._commit_statement
    statement.first_row = statement._cursor  # type: ignore[method-assign]
    yield direct, cursor
    direct.close()
    cursor.close()


#: any text, the characters where encodings part ways drawn often: a NUL, non-ASCII, escapes
_TEXT = st.text(
    st.one_of(st.sampled_from('\x00é\n"\\\x7f☃'), st.characters(blacklist_categories=["Cs"])),
    max_size=12,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(namespace=_TEXT, name=_TEXT, pool=_TEXT, provider=_TEXT)
def test_the_same_rows_and_refusals_as_the_cursor(
    pair: tuple[PostgresStore, PostgresStore], namespace: str, name: str, pool: str, provider: str
) -> None:
    direct, cursor = pair
    ref = ObjectRef("Pod", namespace, name, f"u{next(_uids)}")
    obs = pod.CreateRequested(at=t(1), pool=pool, provider=provider)
    outcomes: list[object] = []
    for store in (direct, cursor):
        try:
            outcomes.append(step(store, obs, ref)[0])
        except StoreError as e:
            outcomes.append((type(e), str(e)))
    assert outcomes[0] == outcomes[1]
    assert _rows(direct) == _rows(cursor)


def test_the_commit_is_prepared_under_its_own_name(pg_url: str) -> None:
    store = PostgresStore(pg_url, cache=0, pool_size=1)
    try:
        step(
            store,
            pod.CreateRequested(at=t(1), pool="p", provider="q"),
            ObjectRef("Pod", "n", "a", "a"),
        )
        with store._pool.connection() as conn:
            names = [r[0] for r in conn.execute("SELECT name FROM pg_prepared_statements")]
        assert store._commit_statement._name.decode() in names
    finally:
        store.close()


def test_a_statement_deallocated_behind_the_store_is_prepared_again(pg_url: str) -> None:
    store = PostgresStore(pg_url, cache=0, pool_size=1)
    ref = ObjectRef("Pod", "n", "a", "a")
    try:
        step(store, pod.CreateRequested(at=t(1), pool="p", provider="q"), ref)
        with store._pool.connection() as conn:  # a pooler's reset, psycopg none the wiser
            conn.pgconn.exec_(b"DEALLOCATE ALL")
        provisioned = pod.ProvisionSucceeded(at=t(2), reserved=False, instance_id="i", endpoint="e")
        version, _, _ = step(store, provisioned, ref)
        assert version == 2
    finally:
        store.close()


def test_a_connection_not_in_utf8_goes_through_the_cursor(
    pg_server: PgServer, pg_schema: str
) -> None:
    url = pg_server.url(schema=pg_schema)
    store = PostgresStore(url + "&client_encoding=LATIN1", cache=0, pool_size=1)
    ref = ObjectRef("Pod", "né", "café", "c1")
    try:
        step(store, pod.CreateRequested(at=t(1), pool="été", provider="q"), ref)
        assert list(store._commit_statement._ready.values()) == [False]
        record = store.load(POD, ref)
        assert record is not None
        assert record.status.pool == "été"
        assert raw(store, "SELECT namespace, name FROM {s}objects") == [("né", "café")]
    finally:
        store.close()


def test_a_statement_already_prepared_on_the_session_is_used(pg_url: str) -> None:
    """A server session that outlives its client connection (a session pooler without a
    reset query) still holds the statement: preparing it again is no error."""
    store = PostgresStore(pg_url, cache=0, pool_size=1)
    ref = ObjectRef("Pod", "n", "a", "a")
    try:
        step(store, pod.CreateRequested(at=t(1), pool="p", provider="q"), ref)
        store._commit_statement._ready.clear()  # a new client, the same server session
        provisioned = pod.ProvisionSucceeded(at=t(2), reserved=False, instance_id="i", endpoint="e")
        assert step(store, provisioned, ref)[0] == 2
    finally:
        store.close()


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(texts=st.lists(st.tuples(_TEXT, _TEXT, _TEXT), min_size=1, max_size=4))
def test_a_batch_stores_what_its_items_store_one_by_one(
    pair: tuple[PostgresStore, PostgresStore], texts: list[tuple[str, str, str]]
) -> None:
    batch, single = pair
    items = []
    for name, pool, provider in texts:
        ref = ObjectRef("Pod", "ns", name, f"u{next(_uids)}")
        obs = pod.CreateRequested(at=t(1), pool=pool, provider=provider)
        before = POD.initial(ref)
        after = POD.apply(before, obs)
        flips = stamp(POD.flips(before, after), ref, POD.name, 1, obs.at)
        items.append(CommitItem(POD, ref, 0, after, obs, flips))
    got = batch.commit_many(items)
    one_by_one: list[object] = []
    for item in items:
        try:
            one_by_one.append(single.commit(*(getattr(item, f) for f in _ITEM)))
        except StoreError as e:
            one_by_one.append(e)
    assert [type(r) for r in got] == [type(r) for r in one_by_one]
    assert _rows(batch) == _rows(single)


_ITEM = ("machine", "ref", "expected", "status", "observation", "transitions")
