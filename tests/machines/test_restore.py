"""The Restore gate machine: a test per table row (and a meta-test that every row has one),
then the behaviours of docs/upstream/restore-gate.md: attempt key, bypass before suppression,
strict annotation, manifest versions, Unknown and on_unknown=warn, one code on every surface,
Recording with capped backoff, cleanup, privacy."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest

from lifecycle import EventType, InvalidObservation, InvalidTransition, Tick
from lifecycle.machines import RESTORE
from lifecycle.machines.restore import (
    ROWS,
    TABLE,
    AttemptOpened,
    CleanupStepDone,
    CudaFacts,
    GateAFacts,
    GateBFacts,
    Gpu,
    Manifest,
    ManifestUnreadable,
    PlaceholderResolved,
    PodObserved,
    PriorVerdict,
    RestoreCompleted,
    RestoreErrored,
    RestorePolicy,
    RestoreStatus,
    StatusWriteFailed,
    StatusWritten,
    TargetFactsUnavailable,
    Volume,
    attempt_ref,
    log_fields,
    skip_annotation,
)

EPOCH = datetime(2026, 11, 30, 10, 0, 0, tzinfo=UTC)
DIGEST = "sha256:" + "ab12" * 16
PVC = Volume("/models", "PersistentVolumeClaim", "models")
#: What a legacy manifest cannot compare, in check order (both gates, listed once).
LEGACY_SKIPPED = (
    "host.cpuArch",
    "host.kernelVersion",
    "k8s.memoryLimit",
    "k8s.cpuLimit",
    "k8s.imageId",
    "cudaRestore.sourceGpus",
    "cudaRestore.sourceDriverVersion",
)
M = Manifest(
    schema_version=1,
    cpu_arch="x86_64",
    kernel_version="6.8.0-1015-aws",
    image_id=f"docker-pullable://registry.example/trainer@{DIGEST}",
    memory_limit="64Gi",
    cpu_limit="16",
    ext_mounts=("/", "/dev/shm", "/models"),
    volumes=(PVC,),
    cuda=CudaFacts(
        pids=(7,), gpus=(Gpu("GPU-1", "L4"), Gpu("GPU-2", "T4")), driver_version="580.65.06"
    ),
)
V0 = Manifest(ext_mounts=("/models",), cuda=CudaFacts(pids=(7,), gpu_uuids=("GPU-1", "GPU-2")))
WARN = RestorePolicy(on_unknown="warn")


def t(seconds: float = 0) -> datetime:
    return EPOCH + timedelta(seconds=seconds)


def opened(policy: RestorePolicy | None = None, at: float = 0, **kw: Any) -> AttemptOpened:
    fields = {"pod_uid": "pod-a", "content_uid": "content-1", "container": "main", **kw}
    return AttemptOpened(at=t(at), policy=policy or RestorePolicy(), **fields)


def pod(at: float = 1, **kw: Any) -> PodObserved:
    return PodObserved(at=t(at), **kw)


def facts_a(at: float = 2, manifest: Manifest = M, **kw: Any) -> GateAFacts:
    fields = {"cpu_arch": "amd64", "kernel_version": "6.8.0-1015-aws", "memory_limit": "65536Mi",
              "cpu_limit": "16000m", **kw}  # fmt: skip
    return GateAFacts(at=t(at), manifest=manifest, **fields)


def facts_b(at: float = 4, manifest: Manifest = M, **kw: Any) -> GateBFacts:
    fields = {"image_id": f"containerd://x@{DIGEST}", "paths": ("/models",), "volumes": (PVC,),
              "gpus": (Gpu("GPU-9", "T4"), Gpu("GPU-8", "L4")), "driver_version": "580.65.06",
              **kw}  # fmt: skip
    return GateBFacts(at=t(at), manifest=manifest, **fields)


def prior(**kw: Any) -> PriorVerdict:
    uid = attempt_ref("ml", "trainer-0", "pod-a", "content-1", "main").uid
    return PriorVerdict(**{"attempt": uid, "reason": "GpuModelMismatch", "gate": "B", **kw})


REF = attempt_ref("ml", "trainer-0", "pod-a", "content-1", "main")


def fresh() -> RestoreStatus:
    return RESTORE.initial(REF)


def drive(*observations: Any, status: RestoreStatus | None = None) -> RestoreStatus:
    s = status if status is not None else fresh()
    for o in observations:
        s = RESTORE.apply(s, o)
    return s


# -- states reached through the table itself -------------------------------------------------
def pending(policy: RestorePolicy | None = None) -> RestoreStatus:
    return drive(opened(policy))


def gate_a(policy: RestorePolicy | None = None) -> RestoreStatus:
    return drive(pod(), status=pending(policy))


def skipped() -> RestoreStatus:
    return drive(pod(annotation="true"), status=pending())


def claimed(policy: RestorePolicy | None = None) -> RestoreStatus:
    return drive(facts_a(), status=gate_a(policy))


def gate_b(policy: RestorePolicy | None = None) -> RestoreStatus:
    return drive(PlaceholderResolved(at=t(3)), status=claimed(policy))


def retrying() -> RestoreStatus:
    return drive(TargetFactsUnavailable(at=t(5), error="nvidia-smi: exit 9"), status=gate_b())


def restoring() -> RestoreStatus:
    return drive(facts_b(), status=gate_b())


def recording(verdict: str) -> RestoreStatus:
    if verdict == "Rejected":
        return drive(facts_a(cpu_arch="arm64"), status=gate_a())
    if verdict == "Unknown":
        return drive(ManifestUnreadable(at=t(2), error="EOF"), status=gate_a())
    if verdict == "Restored":
        return drive(RestoreCompleted(at=t(6)), status=restoring())
    return drive(RestoreErrored(at=t(6), error="criu: restore failed"), status=restoring())


def settled(verdict: str) -> RestoreStatus:
    return drive(StatusWritten(at=t(7)), status=recording(verdict))


def the_row(obs: type, *, source: str, guard: str | None = None, ignore: bool = False) -> Any:
    found = [
        r
        for r in ROWS
        if r.observation is obs
        and (source in r.sources or "*" in r.sources)
        and (r.guard_name or None) == guard
        and r.ignore == ignore
    ]
    assert len(found) == 1, (obs, source, guard, found)
    return found[0]


Case = tuple[str, Any, Callable[[], RestoreStatus], Callable[[], Any]]
P, GA, SK, CL, GB, RS, RC = (
    "Pending",
    "GateA",
    "Skipped",
    "Claimed",
    "GateB",
    "Restoring",
    "Recording",
)
U_BLOCK = Manifest(schema_version=2)
UNNAMED = attrs.evolve(M, cuda=CudaFacts(pids=(7,), gpus=(Gpu("GPU-1", " "), Gpu("GPU-2", "T4")),
                                         driver_version="580.65.06"))  # fmt: skip
NO_IMAGE: dict[str, Any] = {"image_id": ""}
TFU = TargetFactsUnavailable

CASES: list[Case] = [
    ("open", the_row(AttemptOpened, source=""), fresh, lambda: opened()),
    ("open again", the_row(AttemptOpened, source=P), pending, lambda: opened(at=1)),
    (
        "T1 bypass",
        the_row(PodObserved, source=P, guard="bypass"),
        pending,
        lambda: pod(annotation="true"),
    ),
    (
        "T2",
        the_row(PodObserved, source=P, guard="refused_earlier"),
        pending,
        lambda: pod(priors=(prior(),)),
    ),
    (
        "wait",
        the_row(PodObserved, source=P, guard="not_ready"),
        pending,
        lambda: pod(content_ready=False),
    ),
    (
        "T3 invalid",
        the_row(PodObserved, source=P, guard="invalid_new"),
        pending,
        lambda: pod(annotation="on"),
    ),
    ("T3", the_row(PodObserved, source=P), pending, pod),
    (
        "T1 at gate A",
        the_row(PodObserved, source=GA, guard="bypass"),
        gate_a,
        lambda: pod(2, node_skip=True),
    ),
    ("pod past pending", the_row(PodObserved, source=GA, ignore=True), gate_a, lambda: pod(2)),
    (
        "T15 recording",
        the_row(PodObserved, source=RC, guard="bypass_reopens"),
        lambda: recording("Rejected"),
        lambda: pod(3, annotation="TRUE"),
    ),
    (
        "pod recording",
        the_row(PodObserved, source=RC, ignore=True),
        lambda: recording("Rejected"),
        lambda: pod(3),
    ),
    (
        "T15",
        the_row(PodObserved, source="Rejected", guard="bypass"),
        lambda: settled("Rejected"),
        lambda: pod(8, annotation="true"),
    ),
    (
        "invalid on refusal",
        the_row(PodObserved, source="Rejected", guard="invalid_new"),
        lambda: settled("Rejected"),
        lambda: pod(8, annotation="ture"),
    ),
    (
        "pod terminal",
        the_row(PodObserved, source="Restored", ignore=True),
        lambda: settled("Restored"),
        lambda: pod(8),
    ),
    (
        "T4",
        the_row(GateAFacts, source=GA, guard="gate_fails"),
        gate_a,
        lambda: facts_a(cpu_arch="arm64"),
    ),
    (
        "T5",
        the_row(GateAFacts, source=GA, guard="gate_blocks"),
        gate_a,
        lambda: facts_a(manifest=U_BLOCK),
    ),
    (
        "T5 warn",
        the_row(GateAFacts, source=GA, guard="gate_warns"),
        lambda: gate_a(WARN),
        lambda: facts_a(manifest=attrs.evolve(M, complete=False)),
    ),
    (
        "T6 legacy",
        the_row(GateAFacts, source=GA, guard="gate_legacy"),
        gate_a,
        lambda: facts_a(manifest=V0),
    ),
    ("T6", the_row(GateAFacts, source=GA), gate_a, facts_a),
    (
        "T5 unreadable warn",
        the_row(ManifestUnreadable, source=GA, guard="on_unknown_warn"),
        lambda: gate_a(WARN),
        lambda: ManifestUnreadable(at=t(2), error="yaml: line 3"),
    ),
    (
        "T5 unreadable",
        the_row(ManifestUnreadable, source=GA),
        gate_a,
        lambda: ManifestUnreadable(at=t(2), error="yaml: line 3"),
    ),
    ("T7", the_row(GateAFacts, source=SK), skipped, facts_a),
    (
        "T7 unreadable",
        the_row(ManifestUnreadable, source=SK),
        skipped,
        lambda: ManifestUnreadable(at=t(2), error="EOF"),
    ),
    (
        "facts after gate A",
        the_row(GateAFacts, source=CL, ignore=True),
        claimed,
        lambda: facts_a(3, cpu_arch="arm64"),
    ),
    (
        "unreadable after gate A",
        the_row(ManifestUnreadable, source=CL, ignore=True),
        claimed,
        lambda: ManifestUnreadable(at=t(3), error="EOF"),
    ),
    (
        "T8'",
        the_row(PlaceholderResolved, source=CL, guard="bypassed"),
        lambda: drive(facts_a(), status=skipped()),
        lambda: PlaceholderResolved(at=t(3)),
    ),
    ("T8", the_row(PlaceholderResolved, source=CL), claimed, lambda: PlaceholderResolved(at=t(3))),
    (
        "resolved again",
        the_row(PlaceholderResolved, source=GB, ignore=True),
        gate_b,
        lambda: PlaceholderResolved(at=t(4)),
    ),
    (
        "T9",
        the_row(GateBFacts, source=GB, guard="gate_fails"),
        gate_b,
        lambda: facts_b(driver_version="560.35.03"),
    ),
    (
        "T10 deadline",
        the_row(GateBFacts, source=GB, guard="target_expired"),
        retrying,
        lambda: facts_b(306, **NO_IMAGE),
    ),
    (
        "T10 first",
        the_row(GateBFacts, source=GB, guard="target_first"),
        gate_b,
        lambda: facts_b(**NO_IMAGE),
    ),
    (
        "T10 again",
        the_row(GateBFacts, source=GB, guard="target_unavailable"),
        retrying,
        lambda: facts_b(20, **NO_IMAGE),
    ),
    (
        "T5 gate B",
        the_row(GateBFacts, source=GB, guard="gate_blocks"),
        gate_b,
        lambda: facts_b(manifest=UNNAMED),
    ),
    (
        "T5 gate B warn",
        the_row(GateBFacts, source=GB, guard="gate_warns"),
        lambda: gate_b(WARN),
        lambda: facts_b(manifest=UNNAMED),
    ),
    ("T11", the_row(GateBFacts, source=GB), gate_b, facts_b),
    (
        "facts after gate B",
        the_row(GateBFacts, source=RS, ignore=True),
        restoring,
        lambda: facts_b(5),
    ),
    (
        "T10 tfu deadline",
        the_row(TFU, source=GB, guard="target_expired"),
        retrying,
        lambda: TFU(at=t(305), error="rootfs: EIO"),
    ),
    (
        "T10 tfu first",
        the_row(TFU, source=GB, guard="target_first"),
        gate_b,
        lambda: TFU(at=t(5), error="x"),
    ),
    ("T10 tfu again", the_row(TFU, source=GB), retrying, lambda: TFU(at=t(9), error="x")),
    (
        "tfu after gate B",
        the_row(TFU, source=RS, ignore=True),
        restoring,
        lambda: TFU(at=t(9), error="x"),
    ),
    (
        "T10 tick",
        the_row(Tick, source=GB, guard="retry_expired"),
        retrying,
        lambda: Tick(at=t(400)),
    ),
    ("tick", the_row(Tick, source=P, ignore=True), pending, lambda: Tick(at=t(400))),
    ("T12", the_row(RestoreCompleted, source=RS), restoring, lambda: RestoreCompleted(at=t(6))),
    (
        "T13",
        the_row(RestoreErrored, source=RS),
        restoring,
        lambda: RestoreErrored(at=t(6), error="cuda: 700"),
    ),
    (
        "completed late",
        the_row(RestoreCompleted, source=RC, ignore=True),
        lambda: recording("Failed"),
        lambda: RestoreCompleted(at=t(7)),
    ),
    (
        "errored late",
        the_row(RestoreErrored, source=RC, ignore=True),
        lambda: recording("Restored"),
        lambda: RestoreErrored(at=t(7), error="late"),
    ),
    (
        "written rejected",
        the_row(StatusWritten, source=RC, guard="records_rejected"),
        lambda: recording("Rejected"),
        lambda: StatusWritten(at=t(7)),
    ),
    (
        "written unknown",
        the_row(StatusWritten, source=RC, guard="records_unknown"),
        lambda: recording("Unknown"),
        lambda: StatusWritten(at=t(7)),
    ),
    (
        "written restored",
        the_row(StatusWritten, source=RC, guard="records_restored"),
        lambda: recording("Restored"),
        lambda: StatusWritten(at=t(7)),
    ),
    (
        "written failed",
        the_row(StatusWritten, source=RC),
        lambda: recording("Failed"),
        lambda: StatusWritten(at=t(7)),
    ),
    (
        "write failed, notice",
        the_row(StatusWriteFailed, source=RC, guard="notice_due"),
        lambda: recording("Rejected"),
        lambda: StatusWriteFailed(at=t(7), error="etcd timeout"),
    ),
    (
        "write failed, quiet",
        the_row(StatusWriteFailed, source=RC),
        lambda: drive(StatusWriteFailed(at=t(7), error="e"), status=recording("Rejected")),
        lambda: StatusWriteFailed(at=t(8), error="etcd timeout"),
    ),
    (
        "written, untracked",
        the_row(StatusWritten, source=P, ignore=True),
        pending,
        lambda: StatusWritten(at=t(1)),
    ),
    (
        "write failed, untracked",
        the_row(StatusWriteFailed, source=P, ignore=True),
        pending,
        lambda: StatusWriteFailed(at=t(1), error="e"),
    ),
    (
        "cleanup",
        the_row(CleanupStepDone, source="Rejected"),
        lambda: settled("Rejected"),
        lambda: CleanupStepDone(at=t(8), step="remove-finalizer"),
    ),
    (
        "cleanup early",
        the_row(CleanupStepDone, source=CL, ignore=True),
        claimed,
        lambda: CleanupStepDone(at=t(3), step="undo-mounts"),
    ),
]


@pytest.mark.parametrize(("label", "row", "start", "make"), CASES, ids=[c[0] for c in CASES])
def test_row(
    label: str, row: Any, start: Callable[[], RestoreStatus], make: Callable[[], Any]
) -> None:
    before, obs = start(), make()
    assert RESTORE.select(before, obs) is row
    after = RESTORE.apply(before, obs)
    expected = before.state if row.target == "=" else row.target
    assert after.state == expected
    if row.ignore:
        assert after == before
    flips = RESTORE.flips(before, after)
    if before.state != after.state:
        assert [(f.source, f.target, f.reason, f.type) for f in flips] == [
            (before.state, after.state, row.reason, row.event)
        ]
    else:
        assert flips == ()
    actions = RESTORE.actions(before, obs)
    if row.action is None:
        assert actions == ()
    else:
        (a,) = actions
        assert (a.reason, a.type) == (row.action.reason, row.action.type)
        assert a.message.startswith("code=")


def test_every_row_has_a_test() -> None:
    covered = {id(c[1]) for c in CASES}
    missing = [
        (r.sources, r.observation.__name__, r.guard_name, r.note)
        for r in ROWS
        if id(r) not in covered
    ]
    assert not missing, f"rows without a test: {missing}"
    assert len(CASES) == len(ROWS) == len(TABLE.rows)


def test_each_reason_has_one_event_type() -> None:
    seen: dict[str, EventType] = {}
    for row in ROWS:
        if row.event is not None and row.reason:
            assert seen.setdefault(row.reason, row.event) is row.event, row.reason
    assert seen["RestoreIncompatible"] is EventType.WARNING
    assert seen["RestoreRequested"] is EventType.NORMAL


# -- the attempt key -------------------------------------------------------------------------
def test_the_attempt_key_never_names_a_container_id() -> None:
    ref = attempt_ref("ml", "trainer-0", "pod-a", "content-1", "main")
    again = attempt_ref("ml", "trainer-0", "pod-a", "content-1", "main")
    assert ref == again
    assert ref.kind == "RestoreAttempt"
    assert ref.uid.startswith("pod-a-")
    assert ":" not in ref.uid
    assert pending().key.uid == ref.uid
    other_policy = attempt_ref("ml", "trainer-0", "pod-a", "content-1", "main", WARN)
    assert other_policy.uid != ref.uid
    assert attempt_ref("ml", "trainer-0", "pod-a", "content-1", "sidecar").uid != ref.uid
    # publish_pass and backoff do not change a verdict, so they do not change the key
    assert (
        attempt_ref("ml", "x", "pod-a", "content-1", "main", RestorePolicy(publish_pass=True)).uid
        == ref.uid
    )


def test_reopening_with_another_key_is_refused() -> None:
    s = gate_a()
    assert RESTORE.apply(s, opened(at=3)) == s
    with pytest.raises(InvalidObservation, match="different attempt"):
        RESTORE.apply(s, opened(at=3, content_uid="content-2"))


def test_a_kubelet_restart_does_not_reopen_a_refusal() -> None:
    """Facts read again (new container, edited facts) change nothing once refused."""
    s = settled("Rejected")
    for obs in (
        pod(9),
        facts_a(9),
        facts_b(9),
        PlaceholderResolved(at=t(9)),
        facts_a(9, cpu_arch="amd64"),
    ):
        assert RESTORE.apply(s, obs) == s


# -- bypass and the annotation ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "kind"),
    [
        (None, "absent"),
        ("true", "true"),
        ("True", "true"),
        ("TRUE", "true"),
        ("false", "false"),
        ("False", "false"),
        ("1", "invalid"),
        ("yes", "invalid"),
        ("on", "invalid"),
        (" true", "invalid"),
        ("", "invalid"),
        ("tRuE", "invalid"),
    ],
)
def test_the_annotation_is_parsed_strictly(value: str | None, kind: str) -> None:
    assert skip_annotation(value) == kind
    s = drive(pod(annotation=value), status=pending())
    assert s.state == ("Skipped" if kind == "true" else "GateA")
    actions = RESTORE.actions(pending(), pod(annotation=value))
    assert [a.reason for a in actions] == (["InvalidSkipAnnotation"] if kind == "invalid" else [])


def test_bypass_is_evaluated_before_suppression() -> None:
    s = drive(pod(annotation="true", priors=(prior(),)), status=pending())
    assert s.state == "Skipped"
    assert s.bypass == "pod"
    assert drive(pod(node_skip=True, priors=(prior(),)), status=pending()).bypass == "node"


def test_suppression_needs_the_same_artifact_and_policy() -> None:
    assert drive(pod(priors=(prior(attempt="pod-a-0000"),)), status=pending()).state == "GateA"
    restored_false = prior(condition="Restored", reason="RestoreIncompatible")
    assert drive(pod(priors=(restored_false,)), status=pending()).state == "Recording"
    failed = prior(condition="Restored", reason="RestoreFailed")
    assert drive(pod(priors=(failed,)), status=pending()).state == "GateA"


def test_suppression_compares_nothing_and_emits_restore_already_failed_once() -> None:
    before = pending()
    s = drive(pod(priors=(prior(),)), status=before)
    (flip,) = RESTORE.flips(before, s)
    assert (flip.reason, flip.type) == ("RestoreAlreadyFailed", EventType.WARNING)
    assert flip.message.startswith("code=GpuModelMismatch gate=B:")
    assert s.checks == ()
    assert s.cleanup_pending == ("remove-finalizer",)
    done = drive(StatusWritten(at=t(2)), pod(3, priors=(prior(),)), status=s)
    assert done.state == "Rejected"
    assert RESTORE.apply(done, pod(4, priors=(prior(),))) == done


def test_an_invalid_annotation_is_reported_once_per_value() -> None:
    waiting = drive(pod(annotation="yes", artifact_ready=False), status=pending())
    assert RESTORE.actions(pending(), pod(annotation="yes", artifact_ready=False)) == ()
    (action,) = RESTORE.actions(waiting, pod(2, annotation="yes"))  # reported once admitted
    assert action.reason == "InvalidSkipAnnotation"
    refused = drive(pod(8, annotation="yes"), status=settled("Rejected"))
    assert refused.invalid_annotation == "yes"
    assert RESTORE.actions(refused, pod(9, annotation="yes")) == ()
    assert RESTORE.apply(refused, pod(9, annotation="yes")) == refused
    (again,) = RESTORE.actions(refused, pod(9, annotation="y"))
    assert again.reason == "InvalidSkipAnnotation"


def test_the_bypass_reopens_a_refusal_and_skips_gate_b() -> None:
    s = drive(pod(8, annotation="true"), status=settled("Rejected"))
    assert s.state == "Skipped"
    assert s.compatible is not None
    assert (s.compatible.status, s.compatible.reason) == ("Unknown", "CompatCheckSkipped")
    s = drive(facts_a(9, cpu_arch="arm64"), PlaceholderResolved(at=t(10)), status=s)
    assert s.state == "Restoring"
    assert s.message == "restoring: gate B bypassed (source=pod)"


def test_artifact_not_ready_holds_pending_with_a_restored_reason() -> None:
    s = drive(pod(artifact_ready=False), status=pending())
    assert (s.state, s.restored.reason if s.restored else None) == ("Pending", "ArtifactPending")
    s = drive(pod(2, content_ready=False), status=s)
    assert s.restored is not None
    assert s.restored.reason == "SnapshotPending"
    assert RESTORE.flips(pending(), s) == ()


# -- verdicts and the one code ---------------------------------------------------------------
def test_a_refusal_shows_one_code_on_every_surface() -> None:
    before = gate_a()
    s = drive(facts_a(cpu_arch="arm64", memory_limit="1Gi"), status=before)
    assert (s.state, s.recording, s.code, s.gate) == (
        "Recording",
        "Rejected",
        "CpuArchMismatch",
        "A",
    )
    assert s.compatible is not None
    assert s.restored is not None
    assert (s.compatible.status, s.compatible.reason) == ("False", "CpuArchMismatch")
    assert (s.restored.status, s.restored.reason) == ("False", "RestoreIncompatible")
    (flip,) = RESTORE.flips(before, s)
    assert (flip.reason, flip.type) == ("RestoreIncompatible", EventType.WARNING)
    assert flip.message.startswith("code=CpuArchMismatch gate=A: CpuArchMismatch (C5")
    assert "MemoryLimitInsufficient (C9" in flip.message
    fields = log_fields(s)
    assert (fields["code"], fields["gate"]) == ("CpuArchMismatch", "A")
    assert [c["code"] for c in fields["checks"] if c["outcome"] == "fail"] == [
        "CpuArchMismatch",
        "MemoryLimitInsufficient",
    ]
    assert s.cleanup_pending == ("remove-finalizer",)


def test_a_gate_b_refusal_never_kills_the_placeholder() -> None:
    s = drive(facts_b(gpus=(Gpu("GPU-9", "T4"), Gpu("GPU-8", "T4"))), status=gate_b())
    assert (s.recording, s.code, s.gate) == ("Rejected", "GpuModelMismatch", "B")
    assert "kill-placeholder" not in s.cleanup_pending
    assert "undo-mounts" in s.cleanup_pending
    failed = recording("Failed")
    assert failed.cleanup_pending[0] == "kill-placeholder"
    assert failed.compatible == restoring().compatible  # C unchanged by a restore failure
    assert failed.restored is not None
    assert failed.restored.reason == "RestoreFailed"


def test_gate_b_pass_returns_the_pairing_and_publishes_only_if_asked() -> None:
    s = restoring()
    assert [(p.model, p.source, p.target) for p in s.pairing] == [
        ("L4", "GPU-1", "GPU-8"),
        ("T4", "GPU-2", "GPU-9"),
    ]
    assert s.compatible is None
    published = drive(facts_b(), status=gate_b(RestorePolicy(publish_pass=True)))
    assert published.compatible is not None
    assert (published.compatible.status, published.compatible.reason) == ("True", "Compatible")


def test_restored_sets_restored_true() -> None:
    s = settled("Restored")
    assert s.restored is not None
    assert (s.state, s.restored.status, s.restored.reason) == (
        "Restored",
        "True",
        "RestoreSucceeded",
    )


# -- manifest versions and Unknown -----------------------------------------------------------
def test_a_legacy_manifest_passes_with_a_partial_notice() -> None:
    s = gate_a()
    (action,) = RESTORE.actions(s, facts_a(manifest=V0))
    assert (action.reason, action.type) == ("RestoreCompatPartial", EventType.NORMAL)
    assert action.message.startswith("code=LegacyManifest gate=A: legacy manifest")
    for fact in LEGACY_SKIPPED:
        assert fact in action.message
    after = drive(facts_a(manifest=V0), status=s)
    assert after.state == "Claimed"
    assert after.skipped_facts == LEGACY_SKIPPED


@pytest.mark.parametrize(
    ("manifest", "code"),
    [
        (Manifest(schema_version=2), "ManifestSchemaUnsupported"),
        (attrs.evolve(M, complete=False), "FactsIncomplete"),
        (attrs.evolve(M, facts={"k8s.cpuLimit": "unavailable:ParseError"}), "FactsIncomplete"),
        (attrs.evolve(M, cpu_arch=None), "FactsIncomplete"),
    ],
)
def test_unknown_blocks_by_default(manifest: Manifest, code: str) -> None:
    before = gate_a()
    s = drive(facts_a(manifest=manifest), status=before)
    assert (s.state, s.recording, s.code) == ("Recording", "Unknown", code)
    assert s.compatible is not None
    assert (s.compatible.status, s.compatible.reason) == ("Unknown", code)
    (flip,) = RESTORE.flips(before, s)
    assert (flip.reason, flip.type) == ("RestoreCompatUnknown", EventType.WARNING)
    assert flip.message.startswith(f"code={code} gate=A")
    assert drive(StatusWritten(at=t(3)), status=s).state == "Unknown"


def test_on_unknown_warn_allows_and_warns() -> None:
    s = gate_a(WARN)
    obs = facts_a(manifest=Manifest(schema_version=2))
    (action,) = RESTORE.actions(s, obs)
    assert (action.reason, action.type) == ("RestoreCompatUnchecked", EventType.WARNING)
    assert "on_unknown=warn" in action.message
    after = drive(obs, status=s)
    assert after.state == "Claimed"
    assert after.compatible is not None
    assert (after.compatible.status, after.compatible.reason) == (
        "Unknown",
        "ManifestSchemaUnsupported",
    )
    unreadable = drive(ManifestUnreadable(at=t(2), error="EOF"), status=gate_a(WARN))
    assert (unreadable.state, unreadable.code) == ("Claimed", "ManifestUnreadable")


def test_a_mismatch_blocks_even_under_warn() -> None:
    s = drive(
        facts_a(cpu_arch="arm64", manifest=attrs.evolve(M, complete=False)), status=gate_a(WARN)
    )
    assert (s.recording, s.code) == ("Rejected", "CpuArchMismatch")


def test_unknown_source_reopens_only_by_bypass() -> None:
    s = settled("Unknown")
    assert RESTORE.apply(s, facts_a(9)) == s
    assert drive(pod(9, node_skip=True), status=s).state == "Skipped"


# -- target facts unavailable (T10) ----------------------------------------------------------
def test_target_facts_unavailable_retries_with_backoff_then_fails() -> None:
    s = retrying()
    assert (s.state, s.code, s.target_failures, s.retry_at) == (
        "GateB",
        "TargetFactsUnavailable",
        1,
        t(10),
    )
    assert s.compatible is not None
    assert (s.compatible.status, s.compatible.reason) == ("Unknown", "TargetFactsUnavailable")
    s = drive(TFU(at=t(10), error="x"), status=s)
    assert s.retry_at == t(20)
    assert drive(Tick(at=t(304)), status=s) == s
    failed = drive(Tick(at=t(305)), status=s)
    assert (failed.state, failed.recording, failed.code) == (
        "Recording",
        "Failed",
        "TargetFactsUnavailable",
    )
    assert "kill-placeholder" not in failed.cleanup_pending
    recovered = drive(facts_b(30), status=s)
    assert (recovered.state, recovered.unavailable_since, recovered.target_failures) == (
        "Restoring",
        None,
        0,
    )


# -- Recording: the write alone is retried ---------------------------------------------------
def test_write_failures_back_off_capped_and_warn_once_per_window() -> None:
    s = recording("Rejected")
    warned, retry = [], []
    at = 7.0
    for _ in range(9):
        obs = StatusWriteFailed(at=t(at), error="etcd timeout")
        warned.append(bool(RESTORE.actions(s, obs)))
        s = RESTORE.apply(s, obs)
        assert s.state == "Recording"
        assert s.retry_at is not None
        retry.append((s.retry_at - t(at)).total_seconds())
        at = (s.retry_at - EPOCH).total_seconds()  # the host retries exactly when told
    assert retry == [5, 10, 20, 40, 80, 160, 300, 300, 300]
    assert warned == [True] * 9  # each retry falls at the end of its window
    s2 = recording("Rejected")
    pattern = []
    for second in (7, 8, 9, 12, 13):
        obs = StatusWriteFailed(at=t(second), error="e")
        pattern.append(bool(RESTORE.actions(s2, obs)))
        s2 = RESTORE.apply(s2, obs)
    assert pattern == [True, False, False, True, False]
    (note,) = RESTORE.actions(
        recording("Rejected"), StatusWriteFailed(at=t(7), error="etcd timeout")
    )
    assert note.reason == "RestoreStatusUpdateFailed"
    assert note.message.startswith("code=CpuArchMismatch gate=A: the Rejected verdict is held")
    assert "was written" not in note.message
    assert "persisted" not in note.message


def test_nothing_re_enters_a_gate_while_the_memo_holds() -> None:
    s = drive(StatusWriteFailed(at=t(7), error="e"), status=recording("Rejected"))
    for obs in (
        pod(8),
        facts_a(8),
        facts_b(8),
        PlaceholderResolved(at=t(8)),
        RestoreCompleted(at=t(8)),
        TFU(at=t(8), error="x"),
        Tick(at=t(9999)),
    ):
        assert RESTORE.apply(s, obs) == s
    done = drive(StatusWritten(at=t(9)), status=s)
    assert (done.state, done.reason) == ("Rejected", "RestoreVerdictRecorded")
    assert done.message == "code=CpuArchMismatch gate=A: verdict recorded on the pod"


def test_cleanup_is_idempotent_and_recorded() -> None:
    s = settled("Failed")
    step = CleanupStepDone(at=t(8), step="kill-placeholder")
    once = RESTORE.apply(s, step)
    assert once.cleanup_done == ("kill-placeholder",)
    assert RESTORE.apply(once, step) == once
    assert RESTORE.apply(once, CleanupStepDone(at=t(9), step="not-a-step")) == once


# -- privacy ---------------------------------------------------------------------------------
def test_messages_redact_private_values() -> None:
    other = Volume("/models", "PersistentVolumeClaim", "secret-claim")
    s = drive(facts_b(image_id="sha256:" + "cd34" * 16, volumes=(other,)), status=gate_b())
    assert s.compatible is not None
    text = s.message + s.compatible.message
    for private in ("secret-claim", "registry.example", "GPU-1", "GPU-8", "cd34" * 16):
        assert private not in text
    assert "sha256:cd34…" in text
    assert "pvc#" in text


def test_nothing_but_attempt_opened_is_accepted_before_the_attempt_is_opened() -> None:
    for obs in (pod(), facts_a(), StatusWritten(at=t(1)), RestoreCompleted(at=t(1))):
        if RESTORE.table.accepts("", type(obs)):
            assert RESTORE.apply(fresh(), obs) == fresh()  # an explicit ignore row
        else:
            with pytest.raises(InvalidTransition, match="not accepted in state"):
                RESTORE.apply(fresh(), obs)
    s = pending()
    assert (s.state, s.reason, s.key.uid) == ("Pending", "RestoreAttemptOpened", REF.uid)


# -- gate A finds every fact it cannot know (before anything is claimed) ----------------------
CUDA = M.cuda
assert CUDA is not None


@pytest.mark.parametrize(
    ("manifest", "gap"),
    [
        (attrs.evolve(M, facts={"k8s.imageId": "unavailable:EIO"}), "k8s.imageId unavailable"),
        (attrs.evolve(M, image_id=""), "k8s.imageId not recorded"),
        (attrs.evolve(M, image_id="registry.example/trainer:2.4"), "k8s.imageId has no digest"),
        (
            attrs.evolve(M, facts={"cudaRestore.sourceDriverVersion": "unavailable:NvmlError"}),
            "cudaRestore.sourceDriverVersion unavailable (NvmlError)",
        ),
        (
            attrs.evolve(M, cuda=attrs.evolve(CUDA, driver_version="")),
            "cudaRestore.sourceDriverVersion not recorded",
        ),
        (
            attrs.evolve(M, facts={"cudaRestore.sourceGpus": "unavailable:NvmlError"}),
            "cudaRestore.sourceGpus unavailable",
        ),
        (
            attrs.evolve(M, cuda=attrs.evolve(CUDA, gpus=())),
            "cudaRestore.sourceGpus empty",
        ),
        (
            attrs.evolve(M, cuda=None, facts={"cudaRestore.pids": "unavailable:EIO"}),
            "CUDA state unknown",
        ),
        (attrs.evolve(M, facts={"criuDump.extMnt": "unavailable:EACCES"}), "criuDump.extMnt"),
        (attrs.evolve(M, ext_mounts=()), "criuDump.extMnt not recorded"),
        (
            attrs.evolve(M, volumes=(Volume("/models", "PersistentVolumeClaim"),)),
            "/models recorded without its identity",
        ),
    ],
)
def test_gate_a_ends_an_attempt_whose_gate_b_facts_cannot_be_known(
    manifest: Manifest, gap: str
) -> None:
    """Upstream ends such an attempt at gate A (Unknown) before claiming; it used to pass
    gate A, claim, and only then block at gate B."""
    before = gate_a()
    s = drive(facts_a(manifest=manifest), status=before)
    assert (s.state, s.recording, s.code, s.gate) == (
        "Recording",
        "Unknown",
        "FactsIncomplete",
        "A",
    )
    assert s.cleanup_pending == ("remove-finalizer",)  # nothing was claimed
    assert s.restored is None  # no RestoreInProgress: no RestoreRequested
    (flip,) = RESTORE.flips(before, s)
    assert (flip.reason, flip.type) == ("RestoreCompatUnknown", EventType.WARNING)
    assert flip.message.startswith("code=FactsIncomplete gate=A")
    assert gap in flip.message
    assert "gate B facts unknown" in flip.message
    warned = drive(facts_a(manifest=manifest), status=gate_a(WARN))
    assert warned.state == "Claimed"  # on_unknown=warn allows it, with RestoreCompatUnchecked
    (action,) = RESTORE.actions(gate_a(WARN), facts_a(manifest=manifest))
    assert action.reason == "RestoreCompatUnchecked"


def test_a_complete_manifest_still_passes_gate_a() -> None:
    assert drive(facts_a(), status=gate_a()).state == "Claimed"
    no_cuda = attrs.evolve(M, cuda=None)  # a CPU-only snapshot: the GPU checks are n/a
    assert drive(facts_a(manifest=no_cuda), status=gate_a()).state == "Claimed"


def test_an_error_class_that_is_free_text_is_not_shown() -> None:
    leaky = "unavailable:open /var/lib/kubelet/pods/4b1c/volumes/pvc-0f3a: EIO"
    s = drive(facts_a(manifest=attrs.evolve(M, facts={"k8s.imageId": leaky})), status=gate_a())
    assert s.compatible is not None
    for text in (s.message, s.compatible.message):
        assert "k8s.imageId unavailable (unclassified)" in text
        assert "/var/lib/kubelet" not in text
        assert "pvc-0f3a" not in text


# -- the identity volume policy: a path without its identity proves nothing --------------------
@pytest.mark.parametrize(
    "target",
    [
        {"paths": ("/models",), "volumes": ()},
        {"paths": ("/models",), "volumes": (Volume("/models"),)},
        {"paths": (), "volumes": (Volume("/models", "PersistentVolumeClaim"),)},
    ],
)
def test_under_identity_a_target_without_the_volumes_identity_does_not_pass(
    target: dict[str, Any],
) -> None:
    before = gate_b()
    s = drive(facts_b(**target), status=before)
    assert (s.state, s.code) == ("GateB", "TargetFactsUnavailable")  # T10: retried, not passed
    assert s.compatible is not None
    assert "/models identity not reported by the target" in s.compatible.message
    presence = drive(facts_b(**target), status=gate_b(RestorePolicy(volumes="presence")))
    assert presence.state == "Restoring"


# -- free-text errors leave only redacted -----------------------------------------------------
KUBELET_PATH = "/var/lib/kubelet/pods/4b1c9d/volumes/kubernetes.io~csi/pvc-0f3a77/mount"
LEAKY = f'open {KUBELET_PATH}: permission denied; persistentvolumeclaims "models-claim"'
PRIVATE = ("/var/lib/kubelet", "4b1c9d", "pvc-0f3a77", "models-claim")


def _shown(status: RestoreStatus, *extra: str) -> str:
    conditions = [c.message for c in (status.compatible, status.restored) if c is not None]
    return "\n".join([status.message, status.write_error, *conditions, *extra])


def _assert_private(text: str) -> None:
    for private in PRIVATE:
        assert private not in text, (private, text)
    assert "permission denied" in text  # the plain words still tell what went wrong


def test_an_unreadable_manifest_error_is_redacted_in_conditions_and_events() -> None:
    before = gate_a()
    s = drive(ManifestUnreadable(at=t(2), error=LEAKY), status=before)
    (flip,) = RESTORE.flips(before, s)
    _assert_private(_shown(s, flip.message))
    (action,) = RESTORE.actions(gate_a(WARN), ManifestUnreadable(at=t(2), error=LEAKY))
    warned = drive(ManifestUnreadable(at=t(2), error=LEAKY), status=gate_a(WARN))
    _assert_private(_shown(warned, action.message))


def test_a_target_discovery_error_is_redacted() -> None:
    before = gate_b()
    obs = TFU(at=t(5), error=LEAKY)
    (action,) = RESTORE.actions(before, obs)
    s = drive(obs, status=before)
    _assert_private(_shown(s, action.message))
    failed = drive(TFU(at=t(400), error=LEAKY), status=s)
    (flip,) = RESTORE.flips(s, failed)
    _assert_private(_shown(failed, flip.message))


def test_a_restore_error_is_redacted() -> None:
    before = restoring()
    s = drive(RestoreErrored(at=t(6), error=LEAKY), status=before)
    (flip,) = RESTORE.flips(before, s)
    _assert_private(_shown(s, flip.message))


def test_a_status_write_error_is_redacted() -> None:
    before = recording("Rejected")
    obs = StatusWriteFailed(at=t(7), error=LEAKY)
    (action,) = RESTORE.actions(before, obs)
    _assert_private(_shown(drive(obs, status=before), action.message))


def test_a_redacted_error_is_one_bounded_line_without_secrets() -> None:
    from lifecycle.machines.restore._checks import ERROR_MAX, redact_error

    text = redact_error("token=s3cr3t-value\n" + "word " * 200 + 'claim "a b"')
    assert "\n" not in text
    assert len(text) <= ERROR_MAX
    assert "s3cr3t" not in text
    assert redact_error('claim "models"') == redact_error('claim "models"')  # stable
    assert redact_error("CRIU restore failed: exit status 1") == (
        "CRIU restore failed: exit status 1"
    )
