"""``simulate_events``: the Event table a run would leave, on the run's own clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from lifecycle import EventType, MemoryStore, ObjectRef, Transition
from lifecycle.emitters.kubernetes import (
    EventTableRow,
    format_event_table,
    id_suffix,
    simulate_events,
    truncate_note,
)
from lifecycle.trace import read_trace, replay

EPOCH = datetime(2026, 11, 30, 10, 0, 0, tzinfo=UTC)
POD = ObjectRef("Pod", "ml", "trainer-0", "pod-a")
TRACES = sorted((Path(__file__).parents[2] / "examples" / "traces").glob("*.jsonl"))


def probe(minute: float, reason: str = "OverrideNoOp") -> Transition:
    """An action event (no id, may repeat) at ``minute`` past EPOCH."""
    return Transition(
        POD,
        "pod",
        "",
        reason,
        reason,
        EventType.WARNING,
        f"{reason} at minute {minute}",
        3,
        EPOCH + timedelta(minutes=minute),
        action=True,
    )


def flip(minute: float, reason: str, version: int) -> Transition:
    return Transition(
        POD,
        "pod",
        "",
        reason,
        reason,
        EventType.NORMAL,
        reason,
        version,
        EPOCH + timedelta(minutes=minute),
    )


def test_each_transition_is_a_row_named_by_its_own_id() -> None:
    first, second = flip(0, "Initializing", 1), flip(2, "Running", 2)
    rows = simulate_events([first, second])
    assert rows == [
        EventTableRow(
            "ml",
            f"trainer-0.{id_suffix(first.id):x}",
            "Normal",
            "Initializing",
            "Pod",
            "trainer-0",
            "Initializing",
            1,
            EPOCH,
            EPOCH,
        ),
        EventTableRow(
            "ml",
            f"trainer-0.{id_suffix(second.id):x}",
            "Normal",
            "Running",
            "Pod",
            "trainer-0",
            "Running",
            1,
            EPOCH + timedelta(minutes=2),
            EPOCH + timedelta(minutes=2),
        ),
    ]


def test_a_repeated_event_is_one_row_whose_count_the_final_patch_settles() -> None:
    probes = [probe(m) for m in range(5)]  # every minute, 5 times
    [settled] = simulate_events(probes)
    assert (settled.count, settled.note) == (5, "OverrideNoOp at minute 0")
    assert settled.first_time == EPOCH
    assert settled.last_time == EPOCH + timedelta(minutes=4)
    # as of the last Event, the API still shows the coarse count of the series patch
    [open_series] = simulate_events(probes, settle=False)
    assert open_series.count == 2
    assert open_series.last_time == EPOCH + timedelta(minutes=1)


def test_the_30_minute_refresh_shows_the_count_so_far() -> None:
    """A probe every 5 minutes never lets the series idle for 6: only the refresh at 30
    minutes moves the API's count before the run ends."""
    probes = [probe(m) for m in range(0, 45, 5)]  # minutes 0..40: 9 probes
    [row] = simulate_events(probes, settle=False)
    assert row.count == 6  # minutes 0..25 were counted when the refresh ran at 30
    assert row.last_time == EPOCH + timedelta(minutes=25)
    [settled] = simulate_events(probes)
    assert settled.count == 9


def test_a_series_idle_for_6_minutes_is_closed_and_a_repeat_is_a_new_row() -> None:
    rows = simulate_events([probe(0), probe(1), probe(20)])
    assert [(r.count, r.first_time) for r in rows] == [
        (2, EPOCH),
        (1, EPOCH + timedelta(minutes=20)),
    ]


def test_a_redelivered_transition_is_counted_once() -> None:
    once = flip(0, "Running", 2)
    assert [r.count for r in simulate_events([once, once, once])] == [1]


def test_no_transitions_no_rows() -> None:
    assert simulate_events([]) == []
    assert format_event_table([]).split() == [
        "FIRST",
        "SEEN",
        "LAST",
        "SEEN",
        "TYPE",
        "REASON",
        "OBJECT",
        "COUNT",
        "MESSAGE",
    ]


def test_the_table_reads_like_kubectl_get_events() -> None:
    text = format_event_table(simulate_events([probe(0), probe(1), flip(3, "Running", 4)]))
    header, first, second = text.splitlines()
    assert header.split()[:4] == ["FIRST", "SEEN", "LAST", "SEEN"]
    assert first.split() == [
        "2026-11-30T10:00:00Z",
        "2026-11-30T10:01:00Z",
        "Warning",
        "OverrideNoOp",
        "pod/trainer-0",
        "2",
        "OverrideNoOp",
        "at",
        "minute",
        "0",
    ]
    assert second.split()[2:6] == ["Normal", "Running", "pod/trainer-0", "1"]


@pytest.mark.parametrize("path", TRACES, ids=[p.stem for p in TRACES])
def test_a_replayed_trace_gives_one_row_per_transition(path: Path) -> None:
    results = replay(read_trace(path), MemoryStore(), [], name=str(path))
    emitted = [t for r in results for t in r.all_transitions()]
    rows = simulate_events(emitted)
    transitions = [t for t in emitted if not t.action]
    shown = {(r.type, r.reason, r.kind, r.object, r.note) for r in rows}
    for t in transitions:
        row = (t.type.value, t.reason, t.ref.kind, t.ref.name, truncate_note(t.message))
        assert row in shown, t
    assert sum(r.count for r in rows) == len(emitted)
    assert [r.first_time for r in rows] == sorted(r.first_time for r in rows)
