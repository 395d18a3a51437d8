"""The library's logs go through stdlib logging (ADR 0098): a host that configures nothing sees
nothing on stdout or stderr; a host that configures logging gets records with their fields,
redacted; the host's structlog configuration changes nothing; psycopg_pool's records about the
library's pools follow the same path; the CLI prints them on stderr only."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import structlog

import lifecycle
from lifecycle import LogEmitter, MemoryStore, ObjectRef, Runner, StoreError
from lifecycle import _log as library_log
from lifecycle.cli import main
from lifecycle.machines import pod

ROOT = Path(__file__).resolve().parent.parent
#: A trace whose injected write faults the runner logs as warnings.
FALLBACKS = ROOT / "examples" / "traces" / "certification-fallback-then-transition.jsonl"
POD = ObjectRef("Pod", "ml", "trainer-0", "pod-a")
EPOCH = datetime(2026, 11, 30, 10, 0, 0, tzinfo=UTC)
SECRET = "hunter2-s3cr3t"


def at(seconds: float = 0) -> datetime:
    return EPOCH + timedelta(seconds=seconds)


class FailingStore(MemoryStore):
    """Every write fails with a driver-like message that quotes a password."""

    def commit(self, *args: Any, **kwargs: Any) -> int:
        raise StoreError(f"could not write: connection 'postgresql://u:{SECRET}@db/x' lost")


class FailingEmitter:
    def emit(self, transition: Any) -> None:
        raise RuntimeError(f"sink down (token={SECRET})")


def failed_write() -> None:
    Runner(FailingStore(), []).observe(POD, pod.CreateRequested(at=at()))


def failed_emit() -> None:
    Runner(MemoryStore(), [FailingEmitter(), LogEmitter()]).observe(
        POD, pod.CreateRequested(at=at())
    )


@pytest.fixture
def lifecycle_records(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    with caplog.at_level(logging.DEBUG, logger="lifecycle"):
        yield caplog


# -- a host that configures nothing ------------------------------------------------------------
def run_python(code: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


def test_a_host_that_configures_nothing_sees_nothing() -> None:
    """A fresh interpreter, no logging or structlog configuration: a failed write, a failed
    emitter and LogEmitter transitions print nothing (structlog's default printed to stdout)."""
    done = run_python(
        """
        from tests.test_library_logging import failed_emit, failed_write
        failed_write()
        failed_emit()
        """
    )
    assert done.returncode == 0, done.stderr
    assert (done.stdout, done.stderr) == ("", "")


def test_the_same_calls_reach_a_host_that_configures_logging() -> None:
    """The control for the test above: with ``logging.basicConfig`` the records do print, on
    the host's stream (stderr), one line each, redacted; nothing on stdout."""
    done = run_python(
        """
        import logging
        logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s %(message)s")
        from tests.test_library_logging import failed_emit, failed_write
        failed_write()
        failed_emit()
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert any(ln.startswith("lifecycle.runner WARNING status write failed ") for ln in lines)
    assert any(ln.startswith("lifecycle.runner WARNING emitter failed") for ln in lines)
    assert any(ln.startswith("lifecycle.transitions INFO transition ") for ln in lines)
    assert SECRET not in done.stderr


# -- a host that configures logging ------------------------------------------------------------
def test_records_carry_their_fields_redacted(lifecycle_records: pytest.LogCaptureFixture) -> None:
    failed_write()
    (record,) = [r for r in lifecycle_records.records if r.name == "lifecycle.runner"]
    assert record.levelno == logging.WARNING
    assert record.msg.startswith("status write failed ref=%r uid=%r error=%r")
    fields = record.lifecycle  # type: ignore[attr-defined]
    assert fields["ref"] == "Pod/ml/trainer-0"
    assert fields["uid"] == "pod-a"
    assert "<redacted>" in fields["error"]
    assert SECRET not in repr(fields)
    assert SECRET not in record.getMessage()
    # The record names the library line that logged, not structlog's plumbing.
    source = Path(record.pathname)
    assert source.parent == Path(lifecycle.__file__).parent, source


def test_emitter_failures_and_transitions_are_records(
    lifecycle_records: pytest.LogCaptureFixture,
) -> None:
    failed_emit()
    first: dict[str, logging.LogRecord] = {}
    for r in lifecycle_records.records:
        first.setdefault(r.name, r)
    failure = first["lifecycle.runner"]
    assert failure.getMessage().startswith("emitter failed; event stays in the outbox")
    assert failure.lifecycle["emitter"] == "FailingEmitter"  # type: ignore[attr-defined]
    assert SECRET not in failure.getMessage()
    transition = first["lifecycle.transitions"]
    assert transition.levelno == logging.INFO
    fields = transition.lifecycle  # type: ignore[attr-defined]
    assert (fields["kind"], fields["name"], fields["to"]) == ("Pod", "trainer-0", "Provisioning")


def test_the_host_level_decides(lifecycle_records: pytest.LogCaptureFixture) -> None:
    logging.getLogger("lifecycle").setLevel(logging.ERROR)
    failed_write()
    failed_emit()
    assert lifecycle_records.records == []


def test_the_hosts_structlog_configuration_changes_nothing(
    lifecycle_records: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    """A host that configured structlog to print everything to stdout (or to drop it all)
    does not get the library's logs on stdout: they are stdlib records either way."""
    structlog.configure(
        processors=[structlog.processors.JSONRenderer()],
        logger_factory=structlog.PrintLoggerFactory(sys.stdout),
        cache_logger_on_first_use=False,
    )
    try:
        failed_write()
    finally:
        structlog.reset_defaults()
    assert capsys.readouterr().out == ""
    assert [r.name for r in lifecycle_records.records] == ["lifecycle.runner"]


def test_nobody_listening_costs_no_redaction(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the package's NullHandler on the way up: the call is dropped before the values are
    redacted or a record is made."""
    library = logging.getLogger("lifecycle")
    monkeypatch.setattr(library, "propagate", False)  # pytest's own handlers sit on the root

    def must_not_run(value: Any) -> Any:
        raise AssertionError("redacted although nobody listens")

    monkeypatch.setattr(library_log, "scrub", must_not_run)
    made: list[logging.LogRecord] = []
    monkeypatch.setattr(library, "handle", made.append)
    library_log.get_logger("lifecycle.test").warning("nobody hears this", error="x")
    assert made == []
    assert any(isinstance(h, logging.NullHandler) for h in library.handlers)


def test_odd_fields_format_safely(lifecycle_records: pytest.LogCaptureFixture) -> None:
    log = library_log.get_logger("lifecycle.test")
    log.warning("100% done", facts={"a": 1})
    log.warning("plain")
    try:
        raise ValueError("boom")
    except ValueError:
        log.error("with a traceback", exc_info=True)
    first, second, third = lifecycle_records.records
    assert first.getMessage() == "100% done facts={'a': 1}"
    assert first.lifecycle == {"facts": {"a": 1}}  # type: ignore[attr-defined]
    assert second.getMessage() == "plain"
    assert third.exc_info is not None
    assert third.exc_info[0] is ValueError


def test_library_loggers_live_under_lifecycle() -> None:
    with pytest.raises(ValueError, match="under 'lifecycle'"):
        library_log.get_logger("somewhere.else")


# -- psycopg_pool --------------------------------------------------------------------------------
@pytest.fixture
def pool_logger() -> logging.Logger:
    pytest.importorskip("psycopg_pool")
    import lifecycle.stores._pgsql  # noqa: F401  (installs the router)

    return logging.getLogger("psycopg.pool")


class _Pool:
    name = "lifecycle-127.0.0.1"


class _Connection:
    _pool = _Pool()


def test_pool_records_about_library_pools_are_rerouted(
    pool_logger: logging.Logger, lifecycle_records: pytest.LogCaptureFixture
) -> None:
    lifecycle_records.set_level(logging.DEBUG, logger="psycopg.pool")
    pool_logger.warning("error connecting in %r: %s", "lifecycle-db", f"password={SECRET} no")
    pool_logger.warning("discarding closed connection: %s", _Connection())
    pool_logger.warning("error connecting in %r: %s", "their-pool", "refused")
    names = [(r.name, getattr(r, "lifecycle", None)) for r in lifecycle_records.records]
    assert names == [
        (library_log.POOL_LOGGER, {"pool": "lifecycle-db"}),
        (library_log.POOL_LOGGER, {"pool": "lifecycle-127.0.0.1"}),
        ("psycopg.pool", None),  # another pool's record is left where it was
    ]
    first = lifecycle_records.records[0]
    assert first.getMessage().startswith("error connecting in 'lifecycle-db': password=")
    assert SECRET not in first.getMessage()


def test_pool_records_from_a_library_pool_thread_are_rerouted(
    pool_logger: logging.Logger, lifecycle_records: pytest.LogCaptureFixture
) -> None:
    worker = threading.Thread(
        target=pool_logger.warning,
        args=("discarding broken connection: %s", "<conn>"),
        name="lifecycle-db-worker-3",
    )
    worker.start()
    worker.join()
    (record,) = lifecycle_records.records
    assert record.name == library_log.POOL_LOGGER
    assert getattr(record, "lifecycle", None) == {"pool": "lifecycle-db"}


_STORE_SCRIPT = """
import logging, sys, time
from pathlib import Path
if sys.argv[3] == "configured":
    logging.basicConfig(level=logging.WARNING, format="%(name)s %(levelname)s %(message)s")
from lifecycle import ObjectRef, StoreError, default_registry
from lifecycle.stores.postgres import PostgresStore

machine = default_registry().for_kind("Pod")
ref = ObjectRef("Pod", "ml", "p", "u1")
store = PostgresStore(sys.argv[1], timeout=1.0)
store.load(machine, ref)
Path(sys.argv[2], "ready").touch()
while not Path(sys.argv[2], "stopped").exists():
    time.sleep(0.05)
try:
    store.load(machine, ref)
except StoreError:
    pass
time.sleep(2.5)  # the pool's reconnect attempts fail meanwhile
store.close()
"""


def run_store_through_an_outage(url: str, server: Any, folder: Path, mode: str) -> str:
    """Run a PostgreSQL store in a fresh process, stop the server under it, return its
    stderr (its stdout must be empty)."""
    folder.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen(
        [sys.executable, "-c", _STORE_SCRIPT, url, str(folder), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while not (folder / "ready").exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the store did not open"
            time.sleep(0.05)
        server.stop()
        (folder / "stopped").touch()
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        if not server.running():
            server.start()
    assert proc.returncode == 0, err
    assert out == ""
    return err


@pytest.mark.postgres
def test_a_store_outage_is_silent_unless_the_host_configures_logging(tmp_path: Path) -> None:
    from .stores.pg import server

    with server() as pg:
        silent = run_store_through_an_outage(pg.url(), pg, tmp_path / "silent", "silent")
        heard = run_store_through_an_outage(pg.url(), pg, tmp_path / "heard", "configured")
    assert silent == ""
    # The control: the same outage, logging configured: the pool's records are there, under
    # the library's logger, and none is left on psycopg.pool.
    lines = heard.splitlines()
    assert any(ln.startswith(f"{library_log.POOL_LOGGER} WARNING ") for ln in lines), heard
    assert not any(ln.startswith("psycopg.pool ") for ln in lines), heard


# -- the CLI ---------------------------------------------------------------------------------
def test_cli_logs_on_stderr_only_and_restores_the_logger(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host root handler on stdout does not see the CLI's records; stdout is pure JSON; the
    ``lifecycle`` logger is as it was afterwards."""
    library = logging.getLogger("lifecycle")
    before = (library.level, library.propagate, list(library.handlers))
    root_on_stdout = logging.StreamHandler(sys.stdout)
    logging.getLogger().addHandler(root_on_stdout)
    try:
        code = main(["replay", str(FALLBACKS), "--format", "jsonl"])
    finally:
        logging.getLogger().removeHandler(root_on_stdout)
    out, err = capsys.readouterr()
    assert code == 0
    assert [json.loads(line) for line in out.splitlines()]  # every stdout line is JSON
    assert "lifecycle.runner: WARNING: status write failed" in err
    assert all(line.count("\n") == 0 for line in err.splitlines())
    assert (library.level, library.propagate, list(library.handlers)) == before


def test_cli_debug_shows_debug_records(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``LIFECYCLE_DEBUG=1`` lowers the CLI's threshold to DEBUG; by default it is WARNING."""
    from lifecycle import cli

    def command(args: Any, out: Any) -> int:
        library_log.get_logger("lifecycle.test").debug("a detail", n=1)
        return 0

    parser = cli.build_parser()
    for action in parser._subparsers._group_actions:  # type: ignore[union-attr]
        action.choices["machines"].set_defaults(func=command)  # type: ignore[index]
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    monkeypatch.setenv("LIFECYCLE_DEBUG", "1")
    assert main(["machines"]) == 0
    assert "lifecycle.test: DEBUG: a detail n=1" in capsys.readouterr().err
    monkeypatch.delenv("LIFECYCLE_DEBUG")
    assert main(["machines"]) == 0
    assert capsys.readouterr().err == ""


def test_the_package_adds_only_a_null_handler() -> None:
    # The handler comes before the library's first record (ADR 0139), not at import.
    library_log.get_logger("lifecycle.test").debug("a first record")
    handlers = logging.getLogger("lifecycle").handlers
    assert handlers
    assert all(isinstance(h, logging.NullHandler) for h in handlers)
