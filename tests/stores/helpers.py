"""Helpers for the store tests: hand-made commits, raw rows behind a store's back, and the
end-of-run invariants every store must keep."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from lifecycle import ObjectRef, Observation, SQLiteStore, Store, Transition
from lifecycle._core.transition import stamp
from lifecycle.machines import NODECLAIM, POD
from lifecycle.stores.base import fold_from, journal_start

EPOCH = datetime(2026, 11, 30, 10, 0, 0, tzinfo=UTC)


def t(seconds: float = 0) -> datetime:
    return EPOCH + timedelta(seconds=seconds)


def pod_ref(uid: str = "pod-a", name: str | None = None) -> ObjectRef:
    return ObjectRef("Pod", "ml", name or f"trainer-{uid}", uid)


def step(
    store: Store, obs: Observation, ref: ObjectRef, *, expected: int | None = None
) -> tuple[int, Any, tuple[Transition, ...]]:
    """Apply ``obs`` to the stored pod status and commit it (the runner's job, by hand)."""
    record = store.load(POD, ref)
    before = POD.initial(ref) if record is None else record.status
    version = 0 if record is None else record.version
    after = POD.apply(before, obs)
    transitions = stamp(POD.flips(before, after), ref, POD.name, version + 1, obs.at)
    cas = version if expected is None else expected
    return store.commit(POD, ref, cas, after, obs, transitions), after, transitions


def state_of(store: Store, ref: ObjectRef) -> tuple[Any, int, list[Any]]:
    record = store.load(POD, ref)
    return (
        None if record is None else record.status,
        0 if record is None else record.version,
        store.journal(POD, ref),
    )


def raw(store: Store, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Run SQL on the store's database behind its back. ``{s}`` is the table prefix
    (``"schema".`` on PostgreSQL, nothing on SQLite); ``?`` placeholders."""
    if isinstance(store, SQLiteStore):
        with sqlite3.connect(store.path) as db:
            return db.execute(statement.replace("{s}", ""), params).fetchall()
    import psycopg

    from lifecycle.stores.postgres import PostgresStore

    assert isinstance(store, PostgresStore)
    text = statement.replace("{s}", f'"{store.target.schema}".').replace("?", "%s")
    with psycopg.connect(store.target.conninfo, autocommit=True) as conn:
        cur = conn.execute(text, params)
        return list(cur.fetchall()) if cur.description else []


def machine_of(ref: ObjectRef) -> Any:
    return POD if ref.kind == "Pod" else NODECLAIM


def check_invariants(store: Store, refs: Iterable[ObjectRef]) -> dict[str, Transition]:
    """Every object's journal is contiguous after its snapshot and folds to its status;
    returns the journal's events by id (each id once)."""
    events: dict[str, Transition] = {}
    for ref in refs:
        machine = machine_of(ref)
        record = store.load(machine, ref)
        entries = store.journal(machine, ref)
        start, base = journal_start(store, machine, ref)
        version = 0 if record is None else record.version
        assert [e.version for e in entries] == list(range(base + 1, version + 1)), ref
        folded = fold_from(machine, start, [e.observation for e in entries])
        stored = machine.initial(ref) if record is None else record.status
        assert folded == stored, ref
        for entry in entries:
            for e in entry.transitions:
                assert e.id not in events, e.id
                assert e.version == entry.version
                events[e.id] = e
    return events
