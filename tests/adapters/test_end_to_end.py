"""Adapters -> Runner -> Pod and NodeClaim events, recorded as a trace that ``lifecycle replay``
turns back into the same events; and no credential ever reaches a recording."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from lifecycle import MemoryEmitter, MemoryStore, ObjectRef, Runner
from lifecycle.adapters.aws import AwsAdapter, FleetSpec
from lifecycle.adapters.modal import ModalAdapter, SandboxSpec
from lifecycle.adapters.recording import (
    REDACTED,
    RedactingRecorder,
    TraceFileRecorder,
    redact,
    redact_observation,
)
from lifecycle.cli import main
from lifecycle.machines.pod import (
    CreateRequested,
    DeletionRequested,
    InstanceUnknown,
    ProvisionErrored,
)
from lifecycle.testing.fakes import FakeEC2, FakeModal
from lifecycle.trace import TraceRecorder, read_trace, replay

from .conftest import pod, sandbox, t, ticking_clock, tracked, tracked_in

#: the fake's ``modal.exception``
exception = FakeModal.exception

Flip = tuple[str, str, str, str]  # (uid, type, from, to)


def flips(emitter: MemoryEmitter) -> list[Flip]:
    return [(e.ref.uid, e.type.value, e.source, e.target) for e in emitter.events]


class Host:
    """A tiny host controller: feeds the runner and records every observation."""

    def __init__(self, recorder: Any) -> None:
        self.emitter = MemoryEmitter()
        self.runner = Runner(MemoryStore(), [self.emitter])
        self.recorder = recorder

    def feed(self, ref: ObjectRef, obs: Any) -> None:
        self.runner.observe(ref, obs)

    def host(self, ref: ObjectRef, obs: Any) -> None:
        """An observation the host makes itself (CreatePod, deletionTimestamp)."""
        self.recorder.record(ref, obs)
        self.feed(ref, obs)


def modal_life(path: Path) -> Host:
    fake = FakeModal()
    clock = ticking_clock(5)
    with TraceFileRecorder(path, comment="modal, recorded by a test") as recorder:
        host = Host(recorder)
        with ModalAdapter(sdk=fake, clock=clock, recorder=recorder) as adapter:
            gated, crashy, gone = (
                pod("llm-0", "m-gated"),
                pod("crashy", "m-crashy"),
                pod("gone", "m-gone"),
            )
            ids: dict[ObjectRef, str] = {}
            for ref, probe in (
                (gated, {"tcpSocket": {"port": 8000}}),
                (crashy, None),
                (gone, None),
            ):
                host.host(ref, CreateRequested(at=clock(), pool="gpu", provider="modal"))
                obs = adapter.provision(ref, SandboxSpec(image="vllm", readiness_probe=probe))
                host.feed(ref, obs)
                ids[ref] = obs.instance_id  # type: ignore[union-attr]

            def tick() -> None:
                for ref, obs in adapter.observe(tracked(ids)).items():
                    host.feed(ref, obs)

            tick()  # gated: running, probe unconfirmed; the others: running, ready
            fake.fail("Sandbox.list", exception.ServiceError("list: connection reset"))
            tick()  # unknown: nothing changes
            fake.set_ready(ids[gated])
            adapter.drain()
            fake.exit(ids[crashy], 1)
            fake.purge(ids[gone])
            tick()  # gated: ready; crashy: failed (polled by id); gone: absent
            host.host(gated, DeletionRequested(at=clock()))
            host.feed(gated, adapter.terminate(gated, sandbox(ids[gated])))
    return host


MODAL_FLIPS: list[Flip] = [
    ("m-gated", "Normal", "", "Provisioning"),
    ("m-gated-claim", "Normal", "", "Provisioning"),
    ("m-crashy", "Normal", "", "Provisioning"),
    ("m-crashy-claim", "Normal", "", "Provisioning"),
    ("m-gone", "Normal", "", "Provisioning"),
    ("m-gone-claim", "Normal", "", "Provisioning"),
    ("m-gated", "Normal", "Provisioning", "Initializing"),  # running, probe not yet passed
    ("m-gated-claim", "Normal", "Provisioning", "Bound"),
    ("m-crashy", "Normal", "Provisioning", "Running"),
    ("m-crashy-claim", "Normal", "Provisioning", "Bound"),
    ("m-gone", "Normal", "Provisioning", "Running"),
    ("m-gone-claim", "Normal", "Provisioning", "Bound"),
    ("m-gated", "Normal", "Initializing", "Running"),
    ("m-crashy", "Warning", "Running", "Failed"),
    ("m-crashy-claim", "Normal", "Bound", "Terminated"),
    ("m-gone", "Warning", "Running", "Terminated"),
    ("m-gone-claim", "Normal", "Bound", "Terminated"),
    ("m-gated-claim", "Normal", "Bound", "Terminating"),
    ("m-gated", "Normal", "Running", "Terminated"),
    ("m-gated-claim", "Normal", "Terminating", "Terminated"),
]


def test_modal_observations_drive_pod_and_nodeclaim_events(tmp_path: Path) -> None:
    host = modal_life(tmp_path / "modal.jsonl")
    assert flips(host.emitter) == MODAL_FLIPS
    host.emitter.assert_no_duplicates()


def test_a_recorded_modal_trace_replays_to_the_same_events(tmp_path: Path) -> None:
    path = tmp_path / "modal.jsonl"
    live = modal_life(path)
    text = path.read_text()
    assert text.startswith("# modal, recorded by a test\n")
    assert '"observe": "InstanceUnknown"' in text  # the failed list is on record too
    replayed = MemoryEmitter()
    replay(read_trace(path), MemoryStore(), [replayed])
    assert flips(replayed) == flips(live.emitter)
    out = io.StringIO()
    assert main(["replay", str(path)], out=out) == 0
    assert out.getvalue().count("Pod/ml/") == sum(1 for f in MODAL_FLIPS if "claim" not in f[0])


def test_aws_observations_drive_events_and_replay(tmp_path: Path) -> None:
    ec2 = FakeEC2()
    clock = ticking_clock(10)
    spec = FleetSpec(
        region="us-east-1",
        instance_types=("p5.48xlarge",),
        subnet_ids=("subnet-1",),
        launch_template_name="gpu",
        capacity_type="spot",
    )
    path = tmp_path / "aws.jsonl"
    recorder = TraceRecorder()
    host = Host(recorder)
    adapter = AwsAdapter(client_factory=lambda region: ec2, clock=clock, recorder=recorder)
    a, b = pod("train-0", "a-0"), pod("train-1", "a-1")
    host.host(a, CreateRequested(at=clock(), pool="gpu", provider="aws"))
    placed = adapter.provision(a, spec)
    host.feed(a, placed)
    host.host(b, CreateRequested(at=clock(), pool="gpu", provider="aws"))
    ec2.script_fleet([{"ErrorCode": "InsufficientInstanceCapacity", "ErrorMessage": "none"}])
    host.feed(b, adapter.provision(b, spec))
    where = {a: tracked_in("us-east-1", placed.instance_id)}  # type: ignore[union-attr]
    for step in ("pending", "running", "ok", "status-fails", "reclaim"):
        if step == "running":
            ec2.set_state(where[a].instance_id, "running")
        elif step == "ok":
            ec2.boot(where[a].instance_id)
        elif step == "status-fails":
            ec2.fail("describe_instance_status", "RequestLimitExceeded")
        elif step == "reclaim":
            ec2.reclaim(where[a].instance_id)
        for ref, obs in adapter.observe(where).items():
            host.feed(ref, obs)
    assert flips(host.emitter) == [
        ("a-0", "Normal", "", "Provisioning"),
        ("a-0-claim", "Normal", "", "Provisioning"),
        ("a-0", "Normal", "Provisioning", "Initializing"),
        ("a-0-claim", "Normal", "Provisioning", "Bound"),
        ("a-1", "Normal", "", "Provisioning"),
        ("a-1-claim", "Normal", "", "Provisioning"),
        ("a-1", "Warning", "Provisioning", "ProvisionFailed"),
        ("a-1-claim", "Normal", "Provisioning", "Terminated"),
        ("a-0", "Normal", "Initializing", "Initializing"),  # first poll: Ready absent -> False
        ("a-0", "Normal", "Initializing", "Running"),  # both checks ok; the failed read: nothing
        ("a-0", "Warning", "Running", "Terminated"),  # spot reclaim
        ("a-0-claim", "Normal", "Bound", "Terminated"),
    ]
    recorder.write(path)
    replayed = MemoryEmitter()
    replay(read_trace(path), MemoryStore(), [replayed])
    assert flips(replayed) == flips(host.emitter)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    preempted = [ln for ln in lines if ln["observe"] == "InstanceTerminated"]
    assert preempted[0]["with"]["detail"].startswith("preempted: spot instance reclaimed")


# -- no credential reaches a recording ----------------------------------------------------------
SECRETS = [
    ("AWS was not able to validate AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
    ("temporary key ASIAY34FZKBOKMUTVV7A expired", "ASIAY34FZKBOKMUTVV7A"),
    ("X-Amz-Security-Token: FwoGZXIvYXdzEJr//////////wEaDO", "FwoGZXIvYXdzEJr"),
    ("aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMI"),
    ("token rejected: ak-1234567890abcdefXYZ / as-abcdefghijklmnop1234", "ak-1234567890"),
    ("token rejected: ak-1234567890abcdefXYZ / as-abcdefghijklmnop1234", "as-abcdefghij"),
    ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.sig", "eyJhbGciOiJIUzI1NiJ9"),
    (
        "GET https://s3.amazonaws.com/b/k?X-Amz-Signature=abc123def&X-Amz-Credential=AK%2F",
        "abc123def",
    ),
    ('{"password": "hunter2"}', "hunter2"),
    ("connect to https://sb.modal.run/?token=tok_live_42 failed", "tok_live_42"),
]


@pytest.mark.parametrize(("text", "secret"), SECRETS)
def test_redact_removes_secrets(text: str, secret: str) -> None:
    clean = redact(text)
    assert secret not in clean
    assert REDACTED in clean


def test_redact_keeps_ordinary_errors() -> None:
    for text in (
        "InsufficientInstanceCapacity: We currently do not have sufficient p5.48xlarge capacity",
        "Sandbox.get_tags timed out after 10s",
        "region eu-west-1 could not be listed: EndpointConnectionError",
    ):
        assert redact(text) == text


def test_adapters_scrub_errors_at_the_source() -> None:
    fake = FakeModal()
    fake.fail("Sandbox.list", exception.AuthError("token ak-1234567890abcdefXYZ is invalid"))
    with ModalAdapter(sdk=fake) as adapter:
        obs = adapter.provision(pod("a"), SandboxSpec(image="x"))
    assert isinstance(obs, ProvisionErrored)
    assert "ak-1234567890abcdefXYZ" not in obs.error
    assert REDACTED in obs.error


def test_recorders_write_no_secret(tmp_path: Path) -> None:
    leaky = InstanceUnknown(at=t(1), error=f"list failed: {SECRETS[0][0]} {SECRETS[2][0]}")
    path = tmp_path / "trace.jsonl"
    with TraceFileRecorder(path) as recorder:
        recorder.record(pod("a"), leaky)
    inner = TraceRecorder()
    RedactingRecorder(inner).record(pod("a"), leaky)
    for text in (path.read_text(), inner.text()):
        for _, secret in SECRETS[:3]:
            assert secret not in text
    assert redact_observation(leaky) != leaky


def test_file_recorder_streams_appends_and_keeps_time_monotonic(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    with TraceFileRecorder(path, comment="first") as recorder:
        recorder.record(pod("a"), CreateRequested(at=t(10), provider="modal"))
        assert len(path.read_text().splitlines()) == 2  # flushed at once (comment + line)
        recorder.record(pod("a"), InstanceUnknown(at=t(5), error="clock stepped back"))
        assert (recorder.written, recorder.clamped) == (2, 1)
    with TraceFileRecorder(path, comment="second") as recorder:  # appends, no new comment
        recorder.record(pod("b"), CreateRequested(at=t(0), provider="modal"))
    lines = path.read_text().splitlines()
    assert lines[0] == "# first"
    assert len(lines) == 4
    parsed = read_trace(path)
    assert [r.observation.at for r in parsed] == [t(10), t(10), t(0)]  # type: ignore[union-attr]
