"""A host's own logger passed as ``logger=`` (ADR 0098): a stdlib :class:`logging.Logger` or
:class:`logging.LoggerAdapter` is written to through the library's processors (redacted,
fields on the record), a structlog-style logger is used as it is. Before, a stdlib logger was
called structlog-style (``log.warning("msg", key=value)``) and the first failed emitter or
mark raised :class:`TypeError` out of the runner."""

from __future__ import annotations

import ast
import asyncio
import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import structlog
from hypothesis import given, settings
from hypothesis import strategies as st

from lifecycle import (
    AsyncRunner,
    Dispatcher,
    EventType,
    LogEmitter,
    MemoryStore,
    ObjectRef,
    Runner,
    Transition,
)
from lifecycle._core.redact import scrub
from lifecycle._log import FIELDS, get_logger
from lifecycle.emitters.kubernetes import KubernetesEmitter, ManualClock, MemoryEventSink, Rejected
from lifecycle.machines import pod

SRC = Path(__file__).resolve().parent.parent / "src" / "lifecycle"
POD = ObjectRef("Pod", "ml", "trainer-0", "pod-a")
AT = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
SECRET = "hunter2-s3cr3t"
TOKEN = f"token={SECRET}"


class Recorder(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def host(request: pytest.FixtureRequest) -> Iterator[tuple[logging.Logger, Recorder]]:
    """A host logger outside ``lifecycle``, its own handler, nothing propagated."""
    logger = logging.getLogger(f"host.{request.node.name}")
    handler = Recorder()
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    yield logger, handler
    logger.removeHandler(handler)


class FailingEmitter:
    def emit(self, transition: Any) -> None:
        raise RuntimeError(f"sink down ({TOKEN})")


def _shown(records: list[logging.LogRecord]) -> list[str]:
    return [r.getMessage() for r in records]


def _one_warning(handler: Recorder, words: str) -> logging.LogRecord:
    found = [r for r in handler.records if words in r.getMessage()]
    assert len(found) >= 1, _shown(handler.records)
    record = found[0]
    assert record.levelno == logging.WARNING
    assert SECRET not in record.getMessage()
    assert isinstance(getattr(record, FIELDS), dict)
    assert SECRET not in repr(getattr(record, FIELDS))
    return record


def test_a_runner_logs_a_failed_emitter_to_a_stdlib_logger(
    host: tuple[logging.Logger, Recorder],
) -> None:
    logger, handler = host
    runner = Runner(MemoryStore(), [FailingEmitter()], logger=logger)
    result = runner.observe(POD, pod.CreateRequested(at=AT))
    assert result.transitions  # the write stands; the emitter's failure is logged
    record = _one_warning(handler, "emitter")
    assert getattr(record, FIELDS)["id"] == result.transitions[0].id
    assert record.pathname.endswith("_delivery.py")  # the library's line, not structlog's


def test_an_async_runner_logs_a_failed_emitter_to_a_stdlib_logger(
    host: tuple[logging.Logger, Recorder],
) -> None:
    logger, handler = host

    async def main() -> None:
        runner = AsyncRunner(MemoryStore(), [FailingEmitter()], logger=logger)
        await runner.observe(POD, pod.CreateRequested(at=AT))
        await runner.close()

    asyncio.run(main())
    _one_warning(handler, "emitter")


def test_a_dispatcher_logs_a_failed_emitter_to_a_stdlib_logger(
    host: tuple[logging.Logger, Recorder],
) -> None:
    logger, handler = host
    store = MemoryStore()
    Runner(store, [FailingEmitter()]).observe(POD, pod.CreateRequested(at=AT))  # undelivered
    Dispatcher(store, [FailingEmitter()], logger=logger).dispatch_once()
    _one_warning(handler, "emitter")


def test_a_log_emitter_binds_the_object_on_a_stdlib_logger(
    host: tuple[logging.Logger, Recorder],
) -> None:
    logger, handler = host
    t = Transition(POD, "pod", "", "Running", "Running", EventType.NORMAL, TOKEN, 1, AT)
    LogEmitter(logger).emit(t)
    (record,) = handler.records
    fields = getattr(record, FIELDS)
    assert (fields["name"], fields["uid"], fields["to"]) == ("trainer-0", "pod-a", "Running")
    assert SECRET not in record.getMessage()


def test_a_kubernetes_emitter_logs_a_refusal_to_a_stdlib_logger(
    host: tuple[logging.Logger, Recorder],
) -> None:
    logger, handler = host
    sink = MemoryEventSink()
    sink.fail_next(Rejected("forbidden", 403, "Forbidden"))
    e = KubernetesEmitter(
        sink,
        clock=ManualClock(AT),
        hostname="node-a",
        timers=False,
        jitter=lambda: 0.0,
        sleep=lambda _: None,
        logger=logger,
    )
    t = Transition(POD, "pod", "", "Running", "Running", EventType.NORMAL, "m", 1, AT)
    with e:
        e.deliver(t, lambda *_: None)
        assert e.flush(10)
    assert any("forbids" in m for m in _shown(handler.records)), _shown(handler.records)


def test_a_logger_adapter_keeps_its_extra_and_gets_the_fields(
    host: tuple[logging.Logger, Recorder],
) -> None:
    logger, handler = host
    adapter = logging.LoggerAdapter(logger, {"request": "r-1"})
    runner = Runner(MemoryStore(), [FailingEmitter()], logger=adapter)
    runner.observe(POD, pod.CreateRequested(at=AT))
    record = _one_warning(handler, "emitter")
    assert record.request == "r-1"  # type: ignore[attr-defined]
    assert record.pathname.endswith("_delivery.py")


def test_a_structlog_logger_is_used_as_it_is() -> None:
    seen: list[tuple[str, dict[str, Any]]] = []

    def keep(_: Any, method: str, event_dict: Any) -> Any:
        seen.append((method, dict(event_dict)))
        raise structlog.DropEvent

    logger = structlog.wrap_logger(structlog.ReturnLogger(), processors=[keep])
    Runner(MemoryStore(), [FailingEmitter()], logger=logger).observe(
        POD, pod.CreateRequested(at=AT)
    )
    assert seen
    assert {m for m, _ in seen} == {"warning"}
    assert any("emitter" in str(d["event"]) for _, d in seen)


def test_a_logger_without_a_warning_method_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="structlog-style"):
        Runner(MemoryStore(), [], logger=print)
    with pytest.raises(TypeError, match=r"logging\.Logger"):
        Dispatcher(MemoryStore(), [], logger=42)


_KEYS = st.from_regex(r"[a-z][a-z_]{0,8}", fullmatch=True).filter(
    lambda k: k not in ("event", "exc_info", "stack_info")
)
_VALUES = st.one_of(
    st.text(max_size=20),
    st.integers(),
    st.just(f"postgresql://u:{SECRET}@db/x"),
    st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=2),
)


@settings(max_examples=60, deadline=None)
@given(
    event=st.text(max_size=20),
    fields=st.dictionaries(_KEYS, _VALUES, max_size=4),
    adapted=st.booleans(),
    method=st.sampled_from(["debug", "info", "warning", "error", "critical"]),
)
def test_any_call_on_a_host_stdlib_logger_makes_one_redacted_record(
    event: str, fields: dict[str, Any], adapted: bool, method: str
) -> None:
    """Whatever the event and fields, a structlog-style call on a wrapped stdlib logger (or
    adapter) makes one record: its message formats, its fields are the redacted fields."""
    logger = logging.getLogger("host.property")
    handler = Recorder()
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    try:
        target: Any = logging.LoggerAdapter(logger, {"host": 1}) if adapted else logger
        getattr(get_logger("lifecycle.runner", target), method)(event, **fields)
    finally:
        logger.removeHandler(handler)
    (record,) = handler.records
    message = record.getMessage()
    assert getattr(record, FIELDS) == scrub(dict(fields))
    assert SECRET not in message
    assert all(f" {k}=" in message for k in fields)
    assert record.levelname == method.upper()


def _logger_parameters() -> Iterator[tuple[str, ast.FunctionDef]]:
    for path in sorted(SRC.rglob("*.py")):
        if path.name == "_log.py":  # the helper itself, and its processors' own parameter
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and any(
                a.arg == "logger" for a in node.args.kwonlyargs + node.args.args
            ):
                yield f"{path.relative_to(SRC)}:{node.name}", node


def test_every_logger_parameter_goes_through_get_logger_or_is_handed_on() -> None:
    """The class: a function taking ``logger`` uses it only as the host argument of
    :func:`get_logger` or hands it on (``logger=logger``, or to a class of the package, whose
    own parameter is scanned too); a raw use would call a host's stdlib logger
    structlog-style."""
    raw: list[str] = []
    seen: list[str] = []
    for where, fn in _logger_parameters():
        seen.append(where)
        allowed: set[int] = set()
        for node in ast.walk(fn):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "id", getattr(node.func, "attr", ""))
                if name == "get_logger" and len(node.args) == 2:
                    allowed.add(id(node.args[1]))
                allowed.update(id(k.value) for k in node.keywords if k.arg == "logger")
                if name[:1].isupper() or name.startswith("_"):  # a constructor: scanned too
                    allowed.update(id(a) for a in node.args)
        for node in ast.walk(fn):
            if isinstance(node, ast.Name) and node.id == "logger" and id(node) not in allowed:
                raw.append(f"{where}:{node.lineno}")
    assert "_runner_core.py:__init__" in seen  # the scan finds them (both runners' one core)
    assert "dispatch.py:__init__" in seen
    assert raw == [], raw
