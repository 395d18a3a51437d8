"""A Pod whose NodeClaim cannot be named is refused as the Pod (issue 23 item 5, ADR 0102).

The Pod -> NodeClaim link names the claim from the Pod's ref alone (``<uid>-claim``), so a
Pod uid of 507..512 characters passed the bounds while its claim's did not: the Pod was
committed and its claim never existed (replay exit 3). Now every driver refuses it at
admission (``InvalidReference``, nothing written), and the trace reader at its line (exit 2).
The property: any Pod ref a runner accepts has a claim that gets committed.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lifecycle import AsyncRunner, InvalidReference, MemoryStore, ObjectRef, Runner, TraceError
from lifecycle.cli import main
from lifecycle.links import POD_TO_NODECLAIM, claim_ref, default_links
from lifecycle.machines import NODECLAIM, POD, pod
from lifecycle.trace import parse_lines
from tests.conftest import EPOCH


def pod_with_uid(length: int) -> ObjectRef:
    return ObjectRef("Pod", "ml", "trainer-0", "u" * length)


def test_the_claim_link_names_its_target_from_the_ref_alone() -> None:
    assert POD_TO_NODECLAIM.by_ref
    assert [link for link in default_links() if link.by_ref] == [POD_TO_NODECLAIM]


@pytest.mark.parametrize("length", [507, 510, 512])
def test_a_pod_whose_claim_uid_passes_the_bounds_is_refused_nothing_written(length: int) -> None:
    ref = pod_with_uid(length)
    runner = Runner(MemoryStore())
    with pytest.raises(InvalidReference, match="its nodeclaim cannot be named: object uid"):
        runner.observe(ref, pod.CreateRequested(at=EPOCH))
    with pytest.raises(InvalidReference, match="its nodeclaim cannot be named"):
        runner.observe_many([(ref, pod.CreateRequested(at=EPOCH))])
    assert runner.store.load(POD, ref) is None
    assert list(runner.store.records(POD)) == []


def test_the_async_runner_refuses_it_alike() -> None:
    ref = pod_with_uid(510)

    async def go() -> None:
        runner = AsyncRunner(MemoryStore())
        with pytest.raises(InvalidReference, match="its nodeclaim cannot be named"):
            await runner.observe(ref, pod.CreateRequested(at=EPOCH))

    asyncio.run(go())


@given(st.integers(1, 512), st.sampled_from(("", "ml", "n" * 253)), st.integers(1, 253))
def test_every_pod_a_runner_accepts_gets_its_claim(length: int, ns: str, name_len: int) -> None:
    ref = ObjectRef("Pod", ns, "p" * name_len, "u" * length)
    runner = Runner(MemoryStore())
    try:
        result = runner.observe(ref, pod.CreateRequested(at=EPOCH))
    except InvalidReference:
        assert len(claim_ref(ref).uid) > 512
        assert runner.store.load(POD, ref) is None
        return
    assert result.committed
    assert all(r.committed for r in result.linked), result.linked
    assert runner.store.load(NODECLAIM, claim_ref(ref)) is not None


def _line(uid: str) -> str:
    obj = {"namespace": "ml", "name": "trainer-0", "uid": uid}
    return json.dumps({"at": "2026-11-30T10:00:00Z", "machine": "pod", "object": obj,
                       "observe": "CreateRequested"})  # fmt: skip


def test_the_trace_reader_refuses_the_line() -> None:
    from lifecycle import default_registry

    with pytest.raises(TraceError, match=r"^t.jsonl:2: .*its nodeclaim cannot be named"):
        parse_lines([_line("ok"), _line("u" * 510)], "t.jsonl", default_registry())
    assert len(parse_lines([_line("u" * 506)], "t.jsonl", default_registry())) == 1


def test_replay_exits_2_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                          ) -> None:  # fmt: skip
    trace = tmp_path / "t.jsonl"
    trace.write_text(_line("u" * 510) + "\n")
    db = tmp_path / "s.db"
    assert main(["replay", str(trace), "--store", f"sqlite:///{db}"]) == 2
    assert "t.jsonl:1:" in capsys.readouterr().err
    assert not db.exists()
