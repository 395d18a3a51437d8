"""One uid names one object across a trace, including objects a link derives (a Pod's
NodeClaim ``<uid>-claim``), checked as the trace is read with one lookup a line (issue 19:
the reader keeps one entry per object and derives a linked object's ref again only when a
line names its uid)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lifecycle import TraceError
from lifecycle.machines import default_registry
from lifecycle.trace import ObservationLine, parse_lines

MACHINES = default_registry()
POD = {"namespace": "ml", "name": "trainer-0", "uid": "u1"}
CLAIM = {"namespace": "", "name": "ml-trainer-0", "uid": "u1-claim"}


def line(at: str, machine: str, obj: dict[str, str], observe: str, **fields: Any) -> str:
    return json.dumps(
        {"at": f"2026-11-30T10:00:{at}Z", "machine": machine, "object": obj,
         "observe": observe, "with": fields}
    )  # fmt: skip


def parse(*lines: str) -> list[ObservationLine]:
    records = parse_lines(lines, "t.jsonl", MACHINES)
    assert all(isinstance(r, ObservationLine) for r in records)
    return records  # type: ignore[return-value]


def test_a_line_may_name_the_claim_a_pod_derives_as_that_claim() -> None:
    records = parse(
        line("00", "pod", POD, "CreateRequested"),
        line(
            "01",
            "nodeclaim",
            CLAIM,
            "PodObserved",
            pod_uid="u1",
            phase="Pending",
            reason="Provisioning",
        ),
    )
    assert records[1].ref.uid == "u1-claim"


def test_a_line_naming_a_derived_uid_for_another_object_is_refused() -> None:
    other = {**CLAIM, "name": "someone-else"}
    with pytest.raises(TraceError) as e:
        parse(
            line("00", "pod", POD, "CreateRequested"),
            line(
                "01",
                "nodeclaim",
                other,
                "PodObserved",
                pod_uid="u1",
                phase="Pending",
                reason="Provisioning",
            ),
        )
    assert e.value.line == 2
    assert "as the nodeclaim of line 1 it names NodeClaim/ml-trainer-0" in str(e.value)


def test_a_pod_whose_claim_uid_a_line_named_for_another_object_is_refused() -> None:
    other = {**CLAIM, "name": "someone-else"}
    with pytest.raises(TraceError) as e:
        parse(
            line(
                "00",
                "nodeclaim",
                other,
                "PodObserved",
                pod_uid="u1",
                phase="Pending",
                reason="Provisioning",
            ),
            line("01", "pod", POD, "CreateRequested"),
        )
    assert e.value.line == 2
    assert "but on line 1 it names NodeClaim/someone-else" in str(e.value)


def test_a_uid_reused_for_another_object_says_where_it_was_first_named() -> None:
    with pytest.raises(TraceError) as e:
        parse(
            line("00", "pod", POD, "CreateRequested"),
            line("01", "pod", POD, "InstancePending"),
            line("02", "pod", {**POD, "name": "other"}, "InstancePending"),
        )
    assert e.value.line == 3
    assert "but on line 1 it names Pod/ml/trainer-0" in str(e.value)


def test_time_going_backwards_is_refused_after_repeated_times() -> None:
    with pytest.raises(TraceError) as e:
        parse(
            line("05", "pod", POD, "CreateRequested"),
            line("05", "pod", POD, "InstancePending"),
            line("04", "pod", POD, "InstancePending"),
        )
    assert e.value.line == 3
    assert "time goes backwards for Pod/ml/trainer-0" in str(e.value)


def test_every_line_of_an_object_gets_one_ref_instance() -> None:
    records = parse(*(line(f"{i:02d}", "pod", POD, "InstancePending") for i in range(5)))
    assert len({id(r.ref) for r in records}) == 1
