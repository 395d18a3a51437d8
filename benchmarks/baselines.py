"""The baselines, each on the workload of :mod:`benchmarks.workload`."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .workload import EDGES, STATES


def transitions_machine(objects: int) -> tuple[Any, list[Any]]:
    """One ``transitions.Machine`` with ``add_model`` for every object (its recommended way)."""
    from transitions import Machine

    class Model:
        pass

    models = [Model() for _ in range(objects)]
    machine = Machine(
        model=models,
        states=list(STATES),
        transitions=[{"trigger": e, "source": s, "dest": d} for s, e, d, _ in EDGES],
        initial="New",
        auto_transitions=False,
    )
    return machine, models


def statemachine_objects(objects: int) -> list[Any]:
    """One ``python-statemachine`` instance per object (its model)."""
    from statemachine import State, StateMachine

    states = {s.lower(): State(s, initial=(s == "New")) for s in STATES}
    events: dict[str, Any] = {}
    for src, ev, dst, _ in EDGES:
        t = states[src.lower()].to(states[dst.lower()])
        events[ev] = t if ev not in events else events[ev] | t
    namespace: dict[str, Any] = {**states, **events}
    cls = type("BenchStateMachine", (StateMachine,), namespace)
    return [cls() for _ in range(objects)]


def eventsourcing_recorder(path: Path, synchronous: str = "FULL") -> Callable[[str, int], None]:
    """eventsourcing's SQLite application recorder (WAL; SQLite's default synchronous=FULL,
    or ``synchronous`` set on each connection its pool opens).
    Returns ``save(originator, version)``: one durable insert of one stored event."""
    from eventsourcing.persistence import StoredEvent
    from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteDatastore

    datastore = SQLiteDatastore(str(path))
    if synchronous != "FULL":
        # The library has no setting for it: each connection its pool opens gets the pragma.
        pool: Any = datastore.pool
        create = pool._create_connection

        def create_with(mode: str = synchronous) -> Any:
            connection = create()
            connection._sqlite_conn.execute(f"PRAGMA synchronous={mode}")
            return connection

        pool._create_connection = create_with
    recorder = SQLiteApplicationRecorder(datastore)
    recorder.create_table()
    state = b'{"state":"Running","reason":"Running","message":"Initializing -> Running"}'

    def save(originator: str, version: int) -> None:
        recorder.insert_events(
            [StoredEvent(uuid.uuid5(uuid.NAMESPACE_URL, originator), version, "bench#Obs", state)]
        )

    if synchronous != "FULL":  # check that the pragma took
        with datastore.transaction(commit=False) as cursor:
            cursor.execute("PRAGMA synchronous")
            level = cursor.fetchone()[0]
        assert level == {"OFF": 0, "NORMAL": 1, "FULL": 2, "EXTRA": 3}[synchronous], level
    return save
