"""The trace format: parsing and validation, the dry run, replay, and writing traces back."""

from __future__ import annotations

import io
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from lifecycle import (
    MemoryEmitter,
    MemoryStore,
    ObjectRef,
    SQLiteStore,
    Store,
    TraceError,
    default_registry,
)
from lifecycle.machines.nodeclaim import ClaimAdopted, PodAbsent
from lifecycle.machines.pod import (
    CreateRequested,
    InstanceFailed,
    InstanceRunning,
    ProvisionSucceeded,
)
from lifecycle.trace import (
    FaultLine,
    ObservationLine,
    TraceRecorder,
    check,
    fault_line,
    format_time,
    observation_line,
    parse_line,
    parse_lines,
    read_trace,
    replay,
    stream_trace,
)

from .conftest import t

MACHINES = default_registry()
POD = {"namespace": "ml", "name": "trainer-0", "uid": "pod-a"}


def line(
    observe: str = "CreateRequested",
    fields: dict[str, Any] | None = None,
    /,
    *,
    at: str = "2026-11-30T10:00:00Z",
    **extra: Any,
) -> str:
    data: dict[str, Any] = {"at": at, "machine": "pod", "object": POD, "observe": observe}
    if fields is not None:
        data["with"] = fields
    data.update(extra)
    return json.dumps(data)


def claim_line(name: str, uid: str) -> str:
    return json.dumps(
        {
            "at": "2026-11-30T10:00:00Z",
            "machine": "nodeclaim",
            "object": {"name": name, "uid": uid},
            "observe": "PodAbsent",
        }
    )


def parse(*lines: str) -> list[Any]:
    return parse_lines(lines, "t.jsonl", MACHINES)


# -- single lines -----------------------------------------------------------------------------
def test_blank_lines_and_comments_are_skipped() -> None:
    assert parse_line("", MACHINES) is None
    assert parse_line("   ", MACHINES) is None
    assert parse_line("# a comment", MACHINES) is None
    assert parse_line("  # indented comment", MACHINES) is None


def test_an_observation_line() -> None:
    record = parse_line(
        line("ProvisionSucceeded", {"reserved": True, "instance_id": "i-1"}),
        MACHINES,
    )
    assert isinstance(record, ObservationLine)
    assert record.ref == ObjectRef("Pod", "ml", "trainer-0", "pod-a")
    assert record.machine.name == "pod"
    assert record.observation == ProvisionSucceeded(at=t(0), reserved=True, instance_id="i-1")


def test_a_fault_line_defaults_to_one_time() -> None:
    text = json.dumps(
        {"at": "2026-11-30T10:00:00Z", "machine": "pod", "object": POD, "fault": "write-error"}
    )
    record = parse_line(text, MACHINES)
    assert isinstance(record, FaultLine)
    assert (record.fault, record.times, record.at) == ("write-error", 1, t(0))


def test_namespace_may_be_omitted_for_cluster_scoped_objects() -> None:
    text = claim_line("ml-x", "x-claim")
    record = parse_line(text, MACHINES)
    assert isinstance(record, ObservationLine)
    assert record.ref == ObjectRef("NodeClaim", "", "ml-x", "x-claim")
    assert record.observation == PodAbsent(at=t(0))


def test_offsets_other_than_utc_are_accepted() -> None:
    record = parse_line(line(at="2026-11-30T11:00:00+01:00"), MACHINES)
    assert isinstance(record, ObservationLine)
    assert record.observation.at == t(0)


# -- line numbers and whole-trace checks -------------------------------------------------------
def test_errors_name_the_file_and_line() -> None:
    with pytest.raises(TraceError) as e:
        parse("# header", line(), "", "{not json")
    assert e.value.line == 4
    assert e.value.path == "t.jsonl"
    assert str(e.value).startswith("t.jsonl:4: malformed JSON")


def test_records_carry_their_line_numbers() -> None:
    records = parse("# header", line(), "", line("DeletionRequested", at="2026-11-30T10:00:05Z"))
    assert [r.line for r in records] == [2, 4]


def test_time_may_not_go_backwards_for_an_object() -> None:
    with pytest.raises(TraceError, match=r"t\.jsonl:2: time goes backwards for Pod/ml/trainer-0"):
        parse(line(at="2026-11-30T10:00:05Z"), line("DeletionRequested"))


def test_time_may_differ_between_objects() -> None:
    other = {"namespace": "ml", "name": "trainer-1", "uid": "pod-b"}
    records = parse(line(at="2026-11-30T10:00:05Z"), line(object=other))
    assert len(records) == 2


def test_equal_times_are_fine() -> None:
    assert len(parse(line(), line("DeletionRequested"))) == 2


def test_one_uid_names_one_object() -> None:
    renamed = {"namespace": "ml", "name": "other", "uid": "pod-a"}
    with pytest.raises(TraceError, match=r"t\.jsonl:2: uid 'pod-a' names Pod/ml/other"):
        parse(line(), line("DeletionRequested", object=renamed))


def test_a_uid_may_not_name_objects_of_two_kinds() -> None:
    claim = claim_line("x", "pod-a")
    with pytest.raises(TraceError, match=r"t\.jsonl:2: uid 'pod-a' names NodeClaim/x"):
        parse(line(), claim)


def test_a_claim_line_must_name_the_claim_the_pod_link_derives() -> None:
    wrong = claim_line("wrong", "pod-a-claim")
    with pytest.raises(TraceError, match=r"t\.jsonl:2: uid 'pod-a-claim' names NodeClaim/wrong"):
        parse(line(), wrong)
    # ... in either order
    with pytest.raises(TraceError, match=r"t\.jsonl:2: uid 'pod-a-claim' is the nodeclaim of"):
        parse(wrong, line())
    right = wrong.replace('"wrong"', '"ml-trainer-0"')
    assert len(parse(line(), right)) == 2


def test_read_trace_of_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot read trace"):
        read_trace(tmp_path / "nope.jsonl")


def test_read_trace_of_a_non_utf8_file(tmp_path: Path) -> None:
    path = tmp_path / "bin.jsonl"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(TraceError, match=r"bin.jsonl:1: not UTF-8"):
        read_trace(path)
    path.write_bytes(b"# a comment\r\n\n\xff\xfe\n")  # the line is named, as the reader counts
    with pytest.raises(TraceError, match=r"bin.jsonl:3: not UTF-8: invalid start byte"):
        read_trace(path)


# -- the dry run and replay --------------------------------------------------------------------
def _write(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _snapshot(store: Store) -> Any:
    machines = default_registry()
    return {
        m.name: [(r.ref, r.version, r.status, store.journal(m, r.ref)) for r in store.records(m)]
        for m in machines.values()
    }


@pytest.fixture(params=["memory", "sqlite"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    s: Store = MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "x.db")
    yield s
    s.close()


def test_a_refused_observation_is_reported_before_anything_is_written(
    any_store: Store, tmp_path: Path
) -> None:
    fresh = {"namespace": "ml", "name": "fresh", "uid": "fresh"}
    path = _write(
        tmp_path,
        line(),
        line("ProvisionSucceeded", {"reserved": True, "instance_id": "i-1"}),
        line("ProvisionSucceeded", {"reserved": True, "instance_id": "x"}, object=fresh),
    )
    trace = read_trace(path)  # each line is fine on its own
    emitter = MemoryEmitter()
    with pytest.raises(TraceError) as e:
        replay(trace, any_store, [emitter], name="trace.jsonl")
    assert e.value.line == 3
    assert "ProvisionSucceeded is not accepted in state" in str(e.value)
    assert all(records == [] for records in _snapshot(any_store).values())
    assert emitter.events == []
    assert any_store.claim_undelivered() == []


def test_the_dry_run_reads_the_store(any_store: Store) -> None:
    # A ProvisionSucceeded is only acceptable once the store holds the pod at Provisioning.
    provision = line(
        "ProvisionSucceeded",
        {"reserved": True, "instance_id": "i-1"},
        at="2026-11-30T10:00:01Z",
    )
    with pytest.raises(TraceError):
        check(parse(provision), any_store)
    replay(parse(line()), any_store)
    before = _snapshot(any_store)
    check(parse(provision), any_store)
    assert _snapshot(any_store) == before  # the dry run wrote nothing
    results = replay(parse(provision), any_store)
    assert results[0].status.state == "Initializing"


def test_replay_delivers_after_commit_and_returns_results(any_store: Store) -> None:
    emitter = MemoryEmitter()
    seen: list[tuple[int, Any]] = []
    results = replay(
        parse(line(), line("ConfigInvalid", {"error": "no pool"})),
        any_store,
        [emitter],
        on_result=lambda record, result: seen.append((record.line, result)),
    )
    assert [r.version for r in results] == [1, 2]
    assert [line for line, _ in seen] == [1, 2]
    assert emitter.reasons("pod-a") == ["Provisioning", "ConfigError"]
    assert any_store.claim_undelivered() == []


def test_fault_lines_make_the_next_writes_fail(any_store: Store) -> None:
    fault = json.dumps(
        {
            "at": "2026-11-30T10:00:00Z",
            "machine": "pod",
            "object": POD,
            "fault": "conflict",
            "times": 5,
        }
    )
    emitter = MemoryEmitter()
    seen: list[Any] = []
    results = replay(
        parse(fault, line(), line("ConfigInvalid", {"error": "no pool"})),
        any_store,
        [emitter],
        on_result=lambda record, result: seen.append(result),
    )
    assert seen[0] is None  # the fault line itself
    first, second = results
    assert not first.committed
    assert first.attempts == 5  # the whole retry budget
    assert first.fallback == ()  # a Normal flip: nothing is said
    assert second.committed
    assert second.status.state == "ConfigError"
    # CreateRequested was never written, so ConfigInvalid applies to a new pod.
    assert emitter.reasons("pod-a") == ["ConfigError"]


# -- writing traces ----------------------------------------------------------------------------
def test_format_time() -> None:
    assert format_time(t(1.5)) == "2026-11-30T10:00:01.500000Z"
    assert format_time(datetime(2026, 1, 1, 1, tzinfo=timezone(timedelta(hours=1)))) == (
        "2026-01-01T01:00:00+01:00"
    )
    with pytest.raises(ValueError, match="no timezone"):
        format_time(datetime(2026, 1, 1))


def test_observation_line_leaves_defaults_out() -> None:
    ref = ObjectRef("Pod", "ml", "trainer-0", "pod-a")
    pod = MACHINES["pod"]
    assert observation_line(pod, ref, CreateRequested(at=t(0))) == {
        "at": "2026-11-30T10:00:00Z",
        "machine": "pod",
        "object": {"namespace": "ml", "name": "trainer-0", "uid": "pod-a"},
        "observe": "CreateRequested",
    }
    running = observation_line(pod, ref, InstanceRunning(at=t(1), readiness_confirmed=False))
    assert running["with"] == {"readiness_confirmed": False}
    failed = observation_line(pod, ref, InstanceFailed(at=t(2), exit_code=1))
    assert failed["with"] == {"exit_code": 1}


def test_observation_line_of_a_cluster_scoped_object() -> None:
    ref = ObjectRef("NodeClaim", "", "ml-x", "x-claim")
    obs = ClaimAdopted(at=t(0), phase="Initializing", created_at=t(-3600))
    data = observation_line(MACHINES["nodeclaim"], ref, obs)
    assert data["object"] == {"name": "ml-x", "uid": "x-claim"}
    assert data["with"] == {"phase": "Initializing", "created_at": "2026-11-30T09:00:00+00:00"}


def test_fault_line_is_validated() -> None:
    ref = ObjectRef("Pod", "ml", "trainer-0", "pod-a")
    assert fault_line(MACHINES["pod"], ref, t(0), "conflict", 2)["times"] == 2
    with pytest.raises(ValueError, match="fault must be one of"):
        fault_line(MACHINES["pod"], ref, t(0), "explode")
    with pytest.raises(ValueError, match="times must be at least 1"):
        fault_line(MACHINES["pod"], ref, t(0), "conflict", 0)


def test_a_recorded_trace_parses_back_to_the_same_observations(tmp_path: Path) -> None:
    pod = ObjectRef("Pod", "ml", "trainer-0", "pod-a")
    claim = ObjectRef("NodeClaim", "", "ml-trainer-0", "pod-a-claim")
    observations = [
        (pod, CreateRequested(at=t(0), pool="gpu", provider="modal")),
        (pod, ProvisionSucceeded(at=t(1), reserved=False, instance_id="sb-1")),
        (pod, InstanceRunning(at=t(15), instance_id="sb-1", readiness_confirmed=False)),
        (pod, InstanceFailed(at=t(30), instance_id="sb-1", exit_code=None, detail="poll error")),
        (claim, PodAbsent(at=t(45))),
    ]
    recorder = TraceRecorder()
    for ref, obs in observations:
        recorder.record(ref, obs)
    recorder.fault(pod, t(46), "write-error")
    path = tmp_path / "saved.jsonl"
    recorder.write(path, comment="saved by a test\nsecond line")
    text = path.read_text(encoding="utf-8")
    assert text.startswith("# saved by a test\n# second line\n")
    records = read_trace(path)
    got = [(r.ref, r.observation) for r in records if isinstance(r, ObservationLine)]
    assert got == observations
    assert isinstance(records[-1], FaultLine)
    assert records[-1].fault == "write-error"
    stream = io.StringIO()
    recorder.write(stream)
    assert stream.getvalue() == recorder.text()
    assert len(stream.getvalue().splitlines()) == 6


def test_the_kernel_recorder_redacts_secrets_even_nested_ones() -> None:
    """Recorded traces never contain credentials or tokens (issue 4), whichever recorder."""
    from lifecycle.machines import pod
    from lifecycle.trace import TraceRecorder

    recorder = TraceRecorder()
    ref = ObjectRef("Pod", "ml", "trainer-0", "pod-a")
    leaked = "403 from https://bucket/x?X-Amz-Signature=abc123 key AKIAABCDEFGHIJKLMNOP"
    recorder.record(ref, pod.ProvisionErrored(at=t(0), error=leaked))
    text = recorder.text()
    assert "AKIAABCDEFGHIJKLMNOP" not in text
    assert "abc123" not in text
    assert "<redacted>" in text


def test_redaction_reaches_into_nested_values() -> None:
    import attrs as attrs_

    from lifecycle import Observation
    from lifecycle._core.redact import redact_observation

    @attrs_.frozen(slots=True, kw_only=True)
    class Seen(Observation):
        notes: tuple[str, ...] = ()
        facts: dict[str, str] = attrs_.field(factory=dict)
        code: int = 0

    obs = Seen(
        at=t(0),
        notes=("Bearer abcdefghijkl", "fine"),
        facts={"auth": "token=zzzzzzzz", "arch": "amd64"},
        code=7,
    )
    cleaned = redact_observation(obs)
    assert cleaned.notes == ("Bearer <redacted>", "fine")
    assert cleaned.facts == {"auth": "<redacted>", "arch": "amd64"}  # a secret key: all of it
    assert cleaned.code == 7
    clean = Seen(at=t(0), notes=("fine",))
    assert redact_observation(clean) is clean  # nothing to scrub: the same object


def test_redaction_keeps_container_types_and_private_fields() -> None:
    import collections
    import types
    from typing import NamedTuple

    import attrs as attrs_

    from lifecycle import Observation
    from lifecycle._core.redact import _scrub, redact_observation

    class Pair(NamedTuple):
        key: str
        value: str

    @attrs_.frozen(slots=True, kw_only=True)
    class Private(Observation):
        _detail: str = ""

    assert _scrub(Pair("k", "token=zzzzzzzz")) == Pair("k", "token=<redacted>")
    assert type(_scrub(Pair("k", "token=zzzzzzzz"))) is Pair
    assert _scrub(frozenset({"token=zzzzzzzz"})) == frozenset({"token=<redacted>"})
    ordered = _scrub(collections.OrderedDict(a="token=zzzzzzzz"))
    assert (type(ordered), ordered) == (collections.OrderedDict, {"a": "token=<redacted>"})
    assert _scrub(types.MappingProxyType({"a": "token=zzzzzzzz"})) == {"a": "token=<redacted>"}
    private = redact_observation(Private(at=t(0), detail="token=zzzzzzzz"))
    assert private._detail == "token=<redacted>"


def test_a_line_separator_inside_a_json_string_does_not_split_the_line(tmp_path: Path) -> None:
    """Only ``\\n`` (and ``\\r``) end a line: U+2028 is legal inside a JSON string."""
    path = tmp_path / "t.jsonl"
    rejected = json.dumps(
        json.loads(line("ProvisionRejected", {"error": "quota\u2028exceeded"})),
        ensure_ascii=False,
    )
    assert "\u2028" in rejected  # the raw character, not an escape
    path.write_text(line() + "\n" + rejected + "\n", encoding="utf-8")
    records = read_trace(path)
    assert [r.line for r in records] == [1, 2]
    second = records[1]
    assert isinstance(second, ObservationLine)
    assert getattr(second.observation, "error", None) == "quota\u2028exceeded"


def test_stream_trace_yields_the_lines_before_a_bad_one_then_says_where(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(line() + "\n# note\n{oops\n", encoding="utf-8")
    stream = stream_trace(path)
    first = next(stream)
    assert isinstance(first, ObservationLine)
    assert first.line == 1
    with pytest.raises(TraceError, match=r"t\.jsonl:3: malformed JSON"):
        next(stream)


def test_replay_of_a_stream_dry_runs_then_replays_every_line(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(
        line() + "\n" + line("ProvisionSucceeded", {"reserved": True, "instance_id": "i-1"}) + "\n",
        encoding="utf-8",
    )
    assert (
        len(replay(stream_trace(path), MemoryStore()))
        == len(replay(read_trace(path), MemoryStore()))
        == 2
    )


def test_other_whitespace_around_a_line_is_still_allowed() -> None:
    record = parse_line("\x0c" + line() + "\xa0\x0b", MACHINES)
    assert isinstance(record, ObservationLine)
