"""Versioned records and upcasters (ADR 0088): a table changes, its store does not.

A door machine at schema v1 writes statuses and journals; a changed door (v2) then reads them:
a field added with a default, a state renamed with an upcaster (and an observation field
renamed with it), a state removed without an upcaster, and a change nobody declared. Each is
checked on memory, SQLite and PostgreSQL: load, fold, the start-up refusal, ``db upgrade``
(interrupted and resumed, raced by a concurrent writer) and ``db check``.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import itertools
import json
import os
import sqlite3
import tempfile
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lifecycle import (
    LifecycleError,
    Machine,
    MachineRegistry,
    MemoryStore,
    ObjectRef,
    Observation,
    Row,
    Runner,
    SchemaRefused,
    SQLiteStore,
    Store,
    StoreError,
    Table,
    TableError,
    UnknownSchema,
    ignore,
)
from lifecycle._core.schema import fingerprint, review
from lifecycle.cli import main
from lifecycle.stores.base import fold_problem
from lifecycle.tables import Upcaster

from .stores.conftest import drop_schema, pg_server
from .stores.pg import PgServer

__all__ = ["pg_server"]  # the session's PostgreSQL server (a fixture), for the postgres cases

AT = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
N, W = "Normal", "Warning"


# -- the door, version 1 -------------------------------------------------------------------------
@attrs.frozen
class DoorV1:
    state: str = "closed"
    reason: str = ""
    message: str = ""
    opened_by: str = ""


@attrs.frozen(kw_only=True)
class Opened(Observation):
    by: str = ""


@attrs.frozen(kw_only=True)
class Closed(Observation):
    pass


@attrs.frozen(kw_only=True)
class Jammed(Observation):
    pass


def door_table(opened: type[Observation], open_state: str = "open", jams: bool = True) -> Table:
    from lifecycle import EventType

    n, w = EventType.NORMAL, EventType.WARNING
    states = ("closed", open_state, *(("jammed",) if jams else ()))
    rows = [
        Row("closed", opened, to=open_state, reason="Opened", event=n, message="opened"),
        Row(open_state, Closed, to="closed", reason="Closed", event=n, message="closed"),
        ignore(open_state, opened, "already open"),
        ignore("closed", Closed, "already closed"),
    ]
    if jams:
        rows.append(
            Row(
                ("closed", open_state),
                Jammed,
                to="jammed",
                reason="Jammed",
                event=w,
                message="jammed",
            )
        )
    return Table(
        "door",
        states=states,
        initial="closed",
        terminal=("jammed",) if jams else (),
        observations=(opened, Closed, *((Jammed,) if jams else ())),
        rows=rows,
    )


class DoorMachineV1(Machine[Any]):
    name: ClassVar[str] = "door"
    kind: ClassVar[str] = "Door"
    status_type: ClassVar[type[Any]] = DoorV1
    table: ClassVar[Table] = door_table(Opened)

    def initial(self, ref: ObjectRef) -> Any:
        return self.status_type()

    def enter(self, status: Any, obs: Observation, row: Row) -> Any:
        new = super().enter(status, obs, row)
        who = getattr(obs, "by", None) or getattr(obs, "who", None)
        return attrs.evolve(new, opened_by=who) if who else new


V1 = DoorMachineV1()
FP1 = V1.schema.fingerprint
V1_REGISTRY = MachineRegistry([V1])


# -- the changes -------------------------------------------------------------------------------
@attrs.frozen
class DoorAdded:  # v2: a field added with a default
    state: str = "closed"
    reason: str = ""
    message: str = ""
    opened_by: str = ""
    lock: str = "none"


class DoorFieldAdded(DoorMachineV1):
    status_type: ClassVar[type[Any]] = DoorAdded
    schema_version: ClassVar[int] = 2
    upcasters: ClassVar[dict[int, Upcaster]] = {1: Upcaster(fingerprint=FP1)}


@attrs.frozen(kw_only=True)
class OpenedV2(Observation):  # v2 of Opened: ``by`` renamed ``who``
    who: str = ""

    @classmethod
    def name(cls) -> str:
        return "Opened"


def ajar_status(data: dict[str, Any]) -> dict[str, Any]:
    if data["state"] == "open":
        data["state"] = "ajar"
    return data


def who_observation(name: str, fields: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    if name == "Opened":
        fields["who"] = fields.pop("by", "")
    return name, fields


class DoorStateRenamed(DoorMachineV1):  # v2: "open" is now "ajar"; Opened.by is Opened.who
    table: ClassVar[Table] = door_table(OpenedV2, "ajar")
    schema_version: ClassVar[int] = 2
    upcasters: ClassVar[dict[int, Upcaster]] = {
        1: Upcaster(fingerprint=FP1, status=ajar_status, observation=who_observation)
    }


class DoorStateRemoved(DoorMachineV1):  # v2: no more jamming, and no upcaster declared
    table: ClassVar[Table] = door_table(Opened, jams=False)
    schema_version: ClassVar[int] = 2


class DoorUndeclared(DoorMachineV1):  # the field added, but the version not bumped
    status_type: ClassVar[type[Any]] = DoorAdded


def expect_added(s: DoorV1) -> Any:
    return DoorAdded(s.state, s.reason, s.message, s.opened_by)


def expect_renamed(s: DoorV1) -> Any:
    return DoorV1("ajar" if s.state == "open" else s.state, s.reason, s.message, s.opened_by)


#: change -> (v2 machine, what a v1 status reads as, whether v2 can read v1 records)
CHANGES: dict[str, tuple[Machine[Any], Callable[[DoorV1], Any], bool]] = {
    "field added": (DoorFieldAdded(), expect_added, True),
    "state renamed": (DoorStateRenamed(), expect_renamed, True),
    "state removed": (DoorStateRemoved(), lambda s: s, False),
    "undeclared": (DoorUndeclared(), expect_added, False),
}
V2_RENAMED = MachineRegistry([CHANGES["state renamed"][0]])


def ref(i: int) -> ObjectRef:
    return ObjectRef("Door", "hall", f"door-{i}", f"d-{i}")


OPS: dict[str, Callable[[datetime], Observation]] = {
    "open": lambda at: Opened(at=at, by="ana"),
    "close": lambda at: Closed(at=at),
    "jam": lambda at: Jammed(at=at),
}


def write_v1(store: Store, doors: list[list[str]]) -> dict[str, DoorV1]:
    """Drive each door through its ops under v1 (refused ops are skipped); its statuses."""
    runner = Runner(store, machines=V1_REGISTRY, links=())
    at = AT
    for i, ops in enumerate(doors):
        for op in ops:
            at += timedelta(seconds=1)
            with contextlib.suppress(LifecycleError):
                runner.observe(ref(i), OPS[op](at))
    out = {}
    for i in range(len(doors)):
        record = store.load(V1, ref(i))
        if record is not None:
            out[ref(i).uid] = record.status
    return out


# -- stores, one fresh set per example -----------------------------------------------------------
_schemas = itertools.count()


@contextlib.contextmanager
def fresh(kind: str, server: PgServer | None) -> Iterator[Callable[[], Store]]:
    """A fresh store of ``kind``: a function giving handles on it (memory: the same one)."""
    opened: list[Store] = []
    with tempfile.TemporaryDirectory() as tmp:
        schema = f"sv{os.getpid()}_{next(_schemas)}"
        memory = MemoryStore()

        def open_() -> Store:
            if kind == "memory":
                return memory
            if kind == "sqlite":
                store: Store = SQLiteStore(Path(tmp) / "doors.db", synchronous="OFF")
            else:
                from lifecycle.stores.postgres import PostgresStore

                assert server is not None
                store = PostgresStore(server.url(schema=schema))
            opened.append(store)
            return store

        try:
            yield open_
        finally:
            for s in opened:
                s.close()
            if kind == "postgres" and server is not None:
                drop_schema(server, schema)


KINDS = ["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def server(kind: str, request: pytest.FixtureRequest) -> PgServer | None:
    return request.getfixturevalue("pg_server") if kind == "postgres" else None


doors_strategy = st.lists(
    st.lists(st.sampled_from(sorted(OPS)), min_size=1, max_size=6), min_size=1, max_size=4
)


# -- the generated table changes ---------------------------------------------------------------
@settings(
    max_examples=int(os.environ.get("LIFECYCLE_SCHEMA_EXAMPLES", "12")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(doors=doors_strategy, change=st.sampled_from(sorted(CHANGES)))
def test_a_table_change_reads_upcasts_or_refuses(
    kind: str, server: PgServer | None, doors: list[list[str]], change: str
) -> None:
    v2, expect, readable = CHANGES[change]
    registry = MachineRegistry([v2])
    with fresh(kind, server) as open_store:
        store = open_store()
        before = write_v1(store, doors)
        reopened = open_store()  # another handle (another replica) runs the new table
        found = review(reopened.schema_versions(), registry)  # type: ignore[attr-defined]
        if not before:  # every op was refused: nothing stored, nothing to judge
            assert not found.findings
            return
        if not readable:
            assert found.findings
            with pytest.raises(SchemaRefused) as refused:
                Runner(reopened, machines=registry, links=())
            report = str(refused.value)
            assert "door: " in report
            assert f"{len(before)} status record(s) at schema v1" in report
            assert f"e.g. uid {min(before)}" in report
            if change == "state removed":
                assert "no upcaster from v1 to v2" in report
                with pytest.raises(UnknownSchema):
                    reopened.load(v2, ref(int(min(before)[2:])))
            else:  # undeclared: read best effort, refused at start
                assert "without a version bump" in report
                for uid, status in before.items():
                    record = reopened.load(v2, ref(int(uid[2:])))
                    assert record is not None
                    assert record.status == expect(status)
            return
        assert not found.findings
        assert sum(c.count for c in found.pending if c.kind == "status") == len(before)
        Runner(reopened, machines=registry, links=())  # starts: every record has a path
        for uid, status in before.items():
            door = ref(int(uid[2:]))
            record = reopened.load(v2, door)
            assert record is not None
            assert record.status == expect(status)
            assert fold_problem(reopened, v2, record) is None  # old entries upcast on fold
        report = reopened.upgrade(v2, batch=2)  # type: ignore[attr-defined]
        assert report.statuses == len(before)
        assert report.skipped == 0
        again = reopened.upgrade(v2, batch=2)  # type: ignore[attr-defined]
        assert (again.statuses, again.entries, again.snapshots) == (0, 0, 0)
        after = review(reopened.schema_versions(), registry)  # type: ignore[attr-defined]
        assert not after.pending
        assert not after.findings
        for uid, status in before.items():
            door = ref(int(uid[2:]))
            record = reopened.load(v2, door)
            assert record is not None
            assert record.status == expect(status)
            assert fold_problem(reopened, v2, record) is None


# -- the fingerprint and the declarations --------------------------------------------------------
def test_the_fingerprint_covers_fields_observations_and_states_only() -> None:
    assert fingerprint(DoorMachineV1()) == FP1  # stable: computed again, same value
    assert len(FP1) == 12
    for change in CHANGES.values():
        assert change[0].schema.fingerprint != FP1

    class Renamed(DoorMachineV1):  # a rows-only change (another message) is not a schema change
        table: ClassVar[Table] = door_table(Opened)

    assert Renamed().schema.fingerprint == FP1


def test_bad_declarations_are_refused_when_the_machine_is_built() -> None:
    class Zero(DoorMachineV1):
        schema_version: ClassVar[int] = 0

    class Ahead(DoorMachineV1):
        schema_version: ClassVar[int] = 2
        upcasters: ClassVar[dict[int, Upcaster]] = {2: Upcaster()}

    with pytest.raises(TableError, match="schema_version must be an int >= 1"):
        Zero()
    with pytest.raises(TableError, match=r"upcasters\[2\] must be keyed by an older version"):
        Ahead()


def test_a_record_of_a_newer_table_is_refused(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    write_v1(store, [["open"]])
    with sqlite3.connect(store.path) as db:
        db.execute("UPDATE objects SET schema_version = 3")
    store.settle_cache()  # another connection wrote: the next read asks (ADR 0156)
    with pytest.raises(UnknownSchema, match=r"newer table \(v3\)"):
        store.load(V1, ref(0))
    with pytest.raises(SchemaRefused, match="1 status record"):
        Runner(store, machines=V1_REGISTRY, links=())
    store.close()


def test_a_declared_fingerprint_clears_an_undeclared_change(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    write_v1(store, [["open"], ["jam"]])
    with pytest.raises(SchemaRefused, match="without a version bump"):
        Runner(store, machines=MachineRegistry([DoorUndeclared()]), links=())
    # the fix the report names: bump the version, declare what v1 was
    Runner(store, machines=MachineRegistry([DoorFieldAdded()]), links=())
    store.close()


# -- the start-up check -----------------------------------------------------------------------
def test_the_start_up_refusal_names_machine_version_count_and_an_example(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    write_v1(store, [["open"], ["jam"], ["open", "close"]])
    removed = MachineRegistry([CHANGES["state removed"][0]])
    with pytest.raises(SchemaRefused) as refused:
        Runner(store, machines=removed, links=())
    findings = refused.value.findings
    assert {(f.count.kind, f.count.version, f.count.count) for f in findings} == {  # type: ignore[attr-defined]
        ("status", 1, 3),
        ("journal", 1, 4),
    }
    text = str(refused.value)
    assert "door: 3 status record(s) at schema v1" in text
    assert "e.g. uid d-0" in text
    assert "lifecycle db check" in text
    Runner(store, machines=removed, links=(), check_schema=False)  # the host's own decision
    Runner(store, machines=V1_REGISTRY, links=())  # machines of other names are not judged
    store.close()


def test_the_asyncio_runner_refuses_too(tmp_path: Path) -> None:
    from lifecycle import AsyncRunner

    store = SQLiteStore(tmp_path / "s.db")
    write_v1(store, [["jam"]])
    removed = MachineRegistry([CHANGES["state removed"][0]])
    with pytest.raises(SchemaRefused, match="1 status record"):
        AsyncRunner(store, machines=removed, links=())
    AsyncRunner(store, machines=V2_RENAMED, links=())
    store.close()


@pytest.mark.postgres
def test_the_asyncio_postgres_store_reports_and_upgrades(pg_server: PgServer) -> None:
    from lifecycle import AsyncRunner
    from lifecycle.stores.postgres_async import AsyncPostgresStore

    with fresh("postgres", pg_server) as open_store:
        before = write_v1(open_store(), [["open"], ["open", "close"], ["jam"]])
        url = open_store().url  # type: ignore[attr-defined]
        v2 = CHANGES["state renamed"][0]

        async def go() -> None:
            store = await AsyncPostgresStore.open(pg_server.url(schema=url.split("schema=")[1]))
            try:
                refused = AsyncRunner(store, machines=MachineRegistry([DoorStateRemoved()]))
                with pytest.raises(SchemaRefused, match="3 status record"):
                    await refused.observe(ref(0), Closed(at=AT + timedelta(hours=1)))
                counts = await store.schema_versions()
                assert {c.count for c in counts if c.kind == "status"} == {3}
                report = await store.upgrade(v2, batch=1)
                assert (report.statuses, report.skipped) == (3, 0)
                for uid, status in before.items():
                    record = await store.load(v2, ref(int(uid[2:])))
                    assert record is not None
                    assert record.status == expect_renamed(status)
                runner = AsyncRunner(store, machines=V2_RENAMED, links=())
                result = await runner.observe(ref(0), Closed(at=AT + timedelta(hours=1)))
                assert result.status.state == "closed"
            finally:
                await store.close()

        asyncio.run(go())


# -- db upgrade: interrupted and resumed; raced by a writer --------------------------------------
class Flaky:
    """A status upcaster that fails on its ``fail_at``-th call (the process dies mid-way)."""

    def __init__(self, fail_at: int) -> None:
        self.calls = 0
        self.fail_at = fail_at

    def __call__(self, data: dict[str, Any]) -> dict[str, Any]:
        self.calls += 1
        if self.calls == self.fail_at:
            raise RuntimeError("interrupted")
        return ajar_status(data)


def renamed_with(status: Callable[[dict[str, Any]], dict[str, Any]]) -> Machine[Any]:
    class Door(DoorStateRenamed):
        upcasters: ClassVar[dict[int, Upcaster]] = {
            1: Upcaster(fingerprint=FP1, status=status, observation=who_observation)
        }

    return Door()


def test_an_interrupted_upgrade_resumes_where_it_stopped(
    kind: str, server: PgServer | None
) -> None:
    with fresh(kind, server) as open_store:
        store = open_store()
        before = write_v1(store, [["open"] for _ in range(6)])
        flaky = renamed_with(Flaky(fail_at=5))
        with pytest.raises(StoreError, match="interrupted"):
            store.upgrade(flaky, batch=2)  # type: ignore[attr-defined]
        counts = {
            (c.kind, c.version): c.count
            for c in store.schema_versions()  # type: ignore[attr-defined]
        }
        assert counts[("status", 2)] == 4  # two batches written, the third not at all
        assert counts[("status", 1)] == 2
        v2 = CHANGES["state renamed"][0]
        for uid, status in before.items():  # half upgraded, half not: every one reads the same
            record = store.load(v2, ref(int(uid[2:])))
            assert record is not None
            assert record.status == expect_renamed(status)
        resumed = store.upgrade(v2, batch=2)  # type: ignore[attr-defined]
        assert resumed.statuses == 2  # only what was left below v2
        assert resumed.entries == 6
        assert not review(store.schema_versions(), V2_RENAMED).pending  # type: ignore[attr-defined]


def test_a_concurrent_writer_wins_over_the_upgrade(kind: str, server: PgServer | None) -> None:
    with fresh(kind, server) as open_store:
        store = open_store()
        write_v1(store, [["open"], ["open"], ["open"]])
        other = open_store()  # another replica, already on the new table
        writer = Runner(other, machines=V2_RENAMED, links=())
        raced: list[str] = []

        def racing(data: dict[str, Any]) -> dict[str, Any]:
            if not raced:  # while the upgrade holds d-0's old row, the replica commits to it
                raced.append("d-0")
                writer.observe(ref(0), Closed(at=AT + timedelta(hours=1)))
            return ajar_status(data)

        report = store.upgrade(renamed_with(racing), batch=10)  # type: ignore[attr-defined]
        assert raced == ["d-0"]
        assert (report.statuses, report.skipped) == (2, 1)
        v2 = CHANGES["state renamed"][0]
        won = store.load(v2, ref(0))
        assert won is not None
        assert (won.version, won.status.state) == (2, "closed")  # the writer's, untouched
        for i in (1, 2):
            record = store.load(v2, ref(i))
            assert record is not None
            assert record.status.state == "ajar"
        assert not review(store.schema_versions(), V2_RENAMED).pending  # type: ignore[attr-defined]
        assert fold_problem(store, v2, won) is None


def test_snapshots_are_upcast_and_upgraded(tmp_path: Path) -> None:
    for store in (MemoryStore(), SQLiteStore(tmp_path / "s.db")):
        before = write_v1(store, [["open", "close", "open"]])
        assert store.compact(V1, keep=1) == 2
        v2 = CHANGES["state renamed"][0]
        snapshot = store.snapshot(v2, ref(0))
        assert snapshot is not None
        assert snapshot.status.state == "closed"
        record = store.load(v2, ref(0))
        assert record is not None
        assert record.status == expect_renamed(before["d-0"])
        assert fold_problem(store, v2, record) is None
        report = store.upgrade(v2)
        assert (report.statuses, report.entries, report.snapshots) == (1, 1, 1)
        store.close()


def test_an_upcaster_that_fails_leaves_the_store_as_it_was(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    write_v1(store, [["open"], ["jam"]])
    raw = _rows(store.path)
    with pytest.raises(
        StoreError, match=r"upgrade of d-0 v1 failed: RuntimeError\('interrupted'\)"
    ):
        store.upgrade(renamed_with(Flaky(fail_at=1)), batch=10)
    assert _rows(store.path) == raw
    store.close()


def _rows(path: str) -> list[Any]:
    with contextlib.closing(sqlite3.connect(path)) as db:
        return (
            db.execute("SELECT * FROM objects ORDER BY uid").fetchall()
            + db.execute("SELECT * FROM journal ORDER BY uid, version").fetchall()
        )


# -- SQLite: a store of schema 2 is migrated on open ---------------------------------------------
def test_an_sqlite_store_of_schema_2_gets_version_1_records(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.executescript(
            "CREATE TABLE lifecycle_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
            "INSERT INTO lifecycle_meta VALUES ('schema_version', '2');"
            "CREATE TABLE objects (uid TEXT PRIMARY KEY, machine TEXT NOT NULL, kind TEXT NOT "
            "NULL, namespace TEXT NOT NULL, name TEXT NOT NULL, state TEXT NOT NULL, version "
            "INTEGER NOT NULL, status TEXT NOT NULL);"
            "CREATE TABLE journal (uid TEXT NOT NULL, version INTEGER NOT NULL, at TEXT NOT NULL,"
            " observation TEXT NOT NULL, fields TEXT NOT NULL, transitions TEXT NOT NULL, "
            "PRIMARY KEY (uid, version)) WITHOUT ROWID;"
            "CREATE TABLE snapshots (uid TEXT PRIMARY KEY, version INTEGER NOT NULL, status TEXT "
            "NOT NULL) WITHOUT ROWID;"
        )
        status = {"state": "open", "reason": "Opened", "message": "opened", "opened_by": "ana"}
        db.execute(
            "INSERT INTO objects VALUES ('d-0', 'door', 'Door', 'hall', 'door-0', 'open', 1, ?)",
            (json.dumps(status),),
        )
        db.execute(
            "INSERT INTO journal VALUES ('d-0', 1, ?, 'Opened', '{\"by\": \"ana\"}', '[]')",
            (AT.isoformat(),),
        )
        db.commit()
    store = SQLiteStore(path)
    (count, journal) = sorted(store.schema_versions(), key=lambda c: c.kind, reverse=True)
    assert (count.kind, count.version, count.fingerprint, count.count) == ("status", 1, "", 1)
    assert (journal.kind, journal.version) == ("journal", 1)
    found = review(store.schema_versions(), V1_REGISTRY)
    assert not found.findings  # written before versions were kept: version 1, as they were
    assert not found.pending
    record = store.load(V1, ref(0))
    assert record is not None
    assert record.status == DoorV1("open", "Opened", "opened", "ana")
    v2 = CHANGES["state renamed"][0]
    assert store.upgrade(v2).statuses == 1
    again = store.load(v2, ref(0))
    assert again is not None
    assert again.status.state == "ajar"
    store.close()
    out = io.StringIO()
    assert main(["db", "status", "--store", f"sqlite:///{path}"], out=out) == 0
    assert "schema version 5" in out.getvalue()  # 2 -> 5 on open (ADR 0088, 0159, 0169)


# -- lifecycle db check and db upgrade -----------------------------------------------------------
MACHINES_V1 = "tests.test_schema_versions:V1_REGISTRY"
MACHINES_V2 = "tests.test_schema_versions:V2_RENAMED"


def cli(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(args), out=out), out.getvalue()


def test_db_check_of_a_consistent_and_a_tampered_store(tmp_path: Path) -> None:
    path = tmp_path / "doors.db"
    store = SQLiteStore(path)
    write_v1(store, [["open"], ["open", "close"], ["jam"]])
    store.close()
    url = f"sqlite:///{path}"
    code, out = cli("db", "check", "--store", url, "--machines", MACHINES_V1)
    assert code == 0, out
    assert "current door status: 3 at v1" in out
    assert "journals: door: 3 of 3 object(s) checked, 0 not folding" in out
    code, out = cli("db", "check", "--store", url, "--machines", MACHINES_V1, "--sample", "1")
    assert code == 0
    assert "journals: door: 1 of 3 object(s) checked" in out
    code, out = cli("db", "check", "--store", url, "--machines", MACHINES_V2)
    assert code == 0  # readable by the new table: pending, not a finding
    assert "upgradable door status: 3 at v1" in out
    with sqlite3.connect(path) as db:  # the journal no longer says what made the status
        db.execute("UPDATE journal SET observation = 'Jammed', fields = '{}' WHERE uid = 'd-1'")
    before = _rows(str(path))
    code, out = cli("db", "check", "--store", url, "--machines", MACHINES_V1)
    assert code == 1
    assert "NOT FOLDING door d-1: its journal does not fold" in out
    assert _rows(str(path)) == before  # check only reads
    removed = "tests.test_schema_versions:REMOVED"
    code, out = cli("db", "check", "--store", url, "--machines", removed)
    assert code == 1
    assert "FINDING door: 3 status record(s) at schema v1" in out


REMOVED = MachineRegistry([CHANGES["state removed"][0]])


def test_db_upgrade_rewrites_in_batches_and_refuses_without_a_path(tmp_path: Path) -> None:
    path = tmp_path / "doors.db"
    store = SQLiteStore(path)
    before = write_v1(store, [["open"], ["open", "close"], ["jam"], ["open"]])
    store.close()
    url = f"sqlite:///{path}"
    raw = _rows(str(path))
    code, out = cli(
        "db", "upgrade", "--store", url, "--machines", "tests.test_schema_versions:REMOVED"
    )
    assert code == 1
    assert "nothing upgraded" in out
    assert _rows(str(path)) == raw
    code, out = cli("db", "upgrade", "--store", url, "--machines", MACHINES_V2, "--batch", "3")
    assert code == 0, out
    assert "door: 4 status(es), 5 journal entries and 0 snapshot(s) upgraded; 0 skipped" in out
    code, out = cli("db", "upgrade", "--store", url, "--machines", MACHINES_V2)
    assert "door: 0 status(es), 0 journal entries" in out
    code, out = cli("db", "check", "--store", url, "--machines", MACHINES_V2)
    assert code == 0, out
    assert "current door status: 4 at v2" in out
    v2 = CHANGES["state renamed"][0]
    store = SQLiteStore(path)
    for uid, status in before.items():
        record = store.load(v2, ref(int(uid[2:])))
        assert record is not None
        assert record.status == expect_renamed(status)
    store.close()


def test_db_commands_refuse_bad_arguments(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'none.db'}"
    assert cli("db", "upgrade", "--store", url)[0] == 2  # no such store: not created
    assert not (tmp_path / "none.db").exists()
    assert cli("db", "check", "--store", url)[0] == 2
    assert cli("db", "check", "--store", "memory://", "--sample", "0")[0] == 2
    assert cli("db", "upgrade", "--store", "memory://", "--batch", "0")[0] == 2
    for spec in ("nothing", "tests.no_such_module:X", "tests.test_schema_versions:AT"):
        assert cli("db", "check", "--store", "memory://", "--machines", spec)[0] == 2
    assert cli("db", "check", "--store", "memory://")[0] == 0
