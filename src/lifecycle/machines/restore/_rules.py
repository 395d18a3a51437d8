"""Effects and action notes of the Restore table (the package ``__init__`` declares the rows).

Every function is pure: it reads the status and the observation, never a clock. A free-text
error (a provider's, CRIU's, the API server's) reaches the status, its conditions and its
Events only as :func:`redact_error` gives it; the full text stays in the observation.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from ..._core.errors import InvalidObservation, preview
from ..._core.machine import replace
from ..._core.observation import Observation
from ..._core.refs import Condition, set_condition
from ..._core.table import SAME, Row
from ._checks import FAIL, PASS, UNKNOWN, GateReport, redact_error
from ._facts import (
    COMPAT_CHECK_SKIPPED,
    COMPATIBLE,
    LEGACY_MANIFEST,
    MANIFEST_UNREADABLE,
    TARGET_FACTS_UNAVAILABLE,
)
from ._guards import (
    _target_unavailable,
    backoff,
    notice_due,
    report,
    skip_annotation,
)
from ._records import (
    ARTIFACT_PENDING,
    COMPATIBLE_CONDITION,
    FAILED,
    KILL_PLACEHOLDER,
    RECORDING,
    REJECTED,
    RELEASE_CLAIM,
    REMOVE_FINALIZER,
    RESTORE_FAILED,
    RESTORE_IN_PROGRESS,
    RESTORE_INCOMPATIBLE,
    RESTORE_SUCCEEDED,
    RESTORED,
    RESTORED_CONDITION,
    SKIP_ANNOTATION,
    SNAPSHOT_PENDING,
    UNDO_MOUNTS,
    AttemptOpened,
    GateAFacts,
    GateBFacts,
    ManifestUnreadable,
    PodObserved,
    RestoreStatus,
    StatusWriteFailed,
    TargetFactsUnavailable,
)
from ._records import (
    UNKNOWN as UNKNOWN_STATE,
)

RESTORE_ERROR = "RestoreError"


# -- effects ------------------------------------------------------------------------------------
def _enter(s: RestoreStatus, row: Row, message: str, **changes: Any) -> RestoreStatus:
    state = s.state if row.target == SAME else row.target
    return replace(s, state=state, reason=row.reason or s.reason, message=message, **changes)


def _c(s: RestoreStatus, status: str, reason: str, message: str, at: datetime) -> Condition:
    return set_condition(s.compatible, COMPATIBLE_CONDITION, status, reason, message, at)


def _r(s: RestoreStatus, status: str, reason: str, message: str, at: datetime) -> Condition:
    return set_condition(s.restored, RESTORED_CONDITION, status, reason, message, at)


def _noted(s: RestoreStatus, o: PodObserved) -> str | None:
    kind = skip_annotation(o.annotation)
    return (
        o.annotation if kind == "invalid" else (None if kind == "absent" else s.invalid_annotation)
    )


def opened(s: RestoreStatus, o: AttemptOpened, row: Row) -> RestoreStatus:
    key = o.key
    if not s.opened:
        message = f"restore attempt opened: container {key.container}, policy {key.policy_hash}"
        return _enter(
            s,
            row,
            message,
            pod_uid=key.pod_uid,
            content_uid=key.content_uid,
            container=key.container,
            policy=o.policy,
            policy_hash=key.policy_hash,
        )
    if key != s.key:
        raise InvalidObservation(
            f"AttemptOpened: this attempt is {s.key.uid}; {key.uid} (another artifact or "
            "policy) is a different attempt with its own ref"
        )
    return s


def skip(s: RestoreStatus, o: PodObserved, row: Row) -> RestoreStatus:
    """T1, T14, T15: bypass. It travels with the attempt; gate B never reads it again."""
    source = "pod" if skip_annotation(o.annotation) == "true" else "node"
    how = f"annotation {SKIP_ANNOTATION}" if source == "pod" else "the node-wide switch"
    note = (
        f"code={COMPAT_CHECK_SKIPPED} gate=A source={source}: compatibility check bypassed by {how}"
    )
    return _enter(
        s,
        row,
        note,
        bypass=source,
        code=COMPAT_CHECK_SKIPPED,
        gate="A",
        compatible=_c(s, "Unknown", COMPAT_CHECK_SKIPPED, note, o.at),
        recording="",
        checks=(),
        pairing=(),
        write_failures=0,
        write_error="",
        retry_at=None,
        quiet_until=None,
        cleanup_pending=(),
        cleanup_done=(),
        invalid_annotation=_noted(s, o),
    )


def suppress(s: RestoreStatus, o: PodObserved, row: Row) -> RestoreStatus:
    """T2: the pod already carries a refusal for this artifact and policy: compare nothing."""
    prior = next(p for p in o.priors if p.attempt == s.key.uid and p.status == "False")
    code = prior.reason if prior.condition == COMPATIBLE_CONDITION else RESTORE_INCOMPATIBLE
    gate = prior.gate or "?"
    note = (
        f"code={code} gate={gate}: refused earlier for this artifact and policy; not compared "
        f"again (set {SKIP_ANNOTATION}=true to retry)"
    )
    return _enter(
        s,
        row,
        note,
        code=code,
        gate=prior.gate,
        recording=REJECTED,
        cleanup_pending=(REMOVE_FINALIZER,),
    )


def wait(s: RestoreStatus, o: PodObserved, row: Row) -> RestoreStatus:
    reason = ARTIFACT_PENDING if not o.artifact_ready else SNAPSHOT_PENDING
    text = (
        "snapshot artifact is not Ready"
        if not o.artifact_ready
        else "snapshot content is not Ready"
    )
    return _enter(
        s,
        row,
        s.message,
        restored=_r(s, "False", reason, text, o.at),
    )


def admit(s: RestoreStatus, o: PodObserved, row: Row) -> RestoreStatus:
    note = "gate A: comparing the snapshot's recorded facts with the node"
    return _enter(s, row, note, invalid_annotation=_noted(s, o))


def note_invalid(s: RestoreStatus, o: PodObserved, row: Row) -> RestoreStatus:
    return replace(s, invalid_annotation=_noted(s, o))


_CLEANUP_A = (REMOVE_FINALIZER,)
_CLEANUP_B = (UNDO_MOUNTS, RELEASE_CLAIM, REMOVE_FINALIZER)  # never kills the placeholder


def _verdict(s: RestoreStatus, o: Observation, row: Row, r: GateReport) -> RestoreStatus:
    """Enter ``Recording`` (refusal or Unknown) or pass on, from a gate's report."""
    note = r.summary()
    common: dict[str, Any] = {
        "code": r.code,
        "gate": r.gate,
        "checks": r.results,
        "skipped_facts": r.skipped_facts or s.skipped_facts,
    }
    if row.target == RECORDING:
        refused = r.verdict == FAIL
        status = "False" if refused else "Unknown"
        changes: dict[str, Any] = {
            "recording": REJECTED if refused else UNKNOWN_STATE,
            "compatible": _c(s, status, r.code, note, o.at),
            "cleanup_pending": _CLEANUP_A if r.gate == "A" else _CLEANUP_B,
        }
        if refused:
            changes["restored"] = _r(s, "False", RESTORE_INCOMPATIBLE, note, o.at)
        return _enter(s, row, note, **common, **changes)
    compatible = s.compatible
    if r.verdict == UNKNOWN:  # allowed by on_unknown=warn: surface it, never claim a pass
        compatible = _c(s, "Unknown", r.code, note, o.at)
    elif r.gate == "B" and s.policy.publish_pass:
        compatible = _c(s, "True", COMPATIBLE, note, o.at)
    if r.gate == "A":
        message = f"restore requested: {note}"
        restored = _r(s, "False", RESTORE_IN_PROGRESS, message, o.at)
        return _enter(s, row, message, **common, compatible=compatible, restored=restored)
    return _enter(
        s,
        row,
        f"restoring: {note}",
        **common,
        compatible=compatible,
        pairing=r.pairing,
        unavailable_since=None,
        target_failures=0,
        retry_at=None,
    )


def gate(s: RestoreStatus, o: GateAFacts | GateBFacts, row: Row) -> RestoreStatus:
    return _verdict(s, o, row, report(s, o))


def unreadable(s: RestoreStatus, o: ManifestUnreadable, row: Row) -> RestoreStatus:
    r = GateReport("A", (), header_code=MANIFEST_UNREADABLE, header_detail=redact_error(o.error))
    return _verdict(s, o, row, r)


def claim_bypassed(s: RestoreStatus, o: Observation, row: Row) -> RestoreStatus:
    message = f"restore requested: compatibility check bypassed (source={s.bypass})"
    return _enter(s, row, message, restored=_r(s, "False", RESTORE_IN_PROGRESS, message, o.at))


def to_gate_b(s: RestoreStatus, o: Observation, row: Row) -> RestoreStatus:
    return _enter(s, row, "gate B: comparing the snapshot with the placeholder and its GPUs")


def to_restoring(s: RestoreStatus, o: Observation, row: Row) -> RestoreStatus:
    return _enter(s, row, f"restoring: gate B bypassed (source={s.bypass})")


def unavailable(s: RestoreStatus, o: Observation, row: Row) -> RestoreStatus:
    """T10: target discovery failed; stay in gate B and retry with backoff until the deadline."""
    if isinstance(o, TargetFactsUnavailable):
        error = redact_error(o.error)
    elif isinstance(o, GateBFacts):
        found = report(s, o).results
        error = "; ".join(f"{x.id} {x.detail}" for x in found if x.code == TARGET_FACTS_UNAVAILABLE)
    else:
        error = "target facts still unavailable"
    since = s.unavailable_since or o.at
    failures = s.target_failures + 1
    deadline = since + timedelta(seconds=s.policy.target_facts_deadline_seconds)
    note = f"code={TARGET_FACTS_UNAVAILABLE} gate=B: {error}; retrying until {deadline.isoformat()}"
    if row.target == RECORDING:
        note = f"code={TARGET_FACTS_UNAVAILABLE} gate=B: {error}; deadline passed"
        return _enter(
            s,
            row,
            note,
            code=TARGET_FACTS_UNAVAILABLE,
            gate="B",
            recording=FAILED,
            restored=_r(s, "False", RESTORE_FAILED, note, o.at),
            cleanup_pending=_CLEANUP_B,
        )
    return _enter(
        s,
        row,
        s.message,
        code=TARGET_FACTS_UNAVAILABLE,
        gate="B",
        compatible=_c(s, "Unknown", TARGET_FACTS_UNAVAILABLE, note, o.at),
        unavailable_since=since,
        target_failures=failures,
        retry_at=o.at + timedelta(seconds=backoff(s.policy, failures)),
    )


def restored(s: RestoreStatus, o: Observation, row: Row) -> RestoreStatus:
    note = "CRIU, CUDA and the sentinel succeeded"
    return _enter(
        s,
        row,
        note,
        recording=RESTORED,
        restored=_r(s, "True", RESTORE_SUCCEEDED, note, o.at),
        cleanup_pending=(RELEASE_CLAIM, REMOVE_FINALIZER),
    )


def restore_failed(s: RestoreStatus, o: Any, row: Row) -> RestoreStatus:
    note = f"code={RESTORE_ERROR} gate=-: {redact_error(o.error)}"
    return _enter(
        s,
        row,
        note,
        code=RESTORE_ERROR,
        recording=FAILED,
        restored=_r(s, "False", RESTORE_FAILED, note, o.at),
        cleanup_pending=(KILL_PLACEHOLDER, *_CLEANUP_B),
    )


def recorded(s: RestoreStatus, o: Observation, row: Row) -> RestoreStatus:
    head = s.message.split(":", 1)[0] if s.message.startswith("code=") else row.target
    return _enter(s, row, f"{head}: verdict recorded on the pod", retry_at=None)


def write_failed(s: RestoreStatus, o: StatusWriteFailed, row: Row) -> RestoreStatus:
    failures = s.write_failures + 1
    wait_s = backoff(s.policy, failures)
    quiet = o.at + timedelta(seconds=wait_s) if notice_due(s, o) else s.quiet_until
    return replace(
        s,
        write_failures=failures,
        write_error=redact_error(o.error),
        retry_at=o.at + timedelta(seconds=wait_s),
        quiet_until=quiet,
    )


def cleanup(s: RestoreStatus, o: Any, row: Row) -> RestoreStatus:
    if o.step not in s.cleanup_pending or o.step in s.cleanup_done:
        return s
    return replace(s, cleanup_done=(*s.cleanup_done, o.step))


# -- action notes (the ``{note}`` of each row's Action) ------------------------------------------
def action_note(s: RestoreStatus, o: Observation) -> str:
    """The message of the action event ``o`` triggers from ``s`` (privacy-safe)."""
    if isinstance(o, PodObserved):
        return (
            f"code=InvalidSkipAnnotation gate=A: annotation "
            f"{SKIP_ANNOTATION}={preview(o.annotation)} "
            "is not a recognised boolean (true or false); the compatibility gates stay on"
        )
    if isinstance(o, ManifestUnreadable):
        error = redact_error(o.error)
        return f"code={MANIFEST_UNREADABLE} gate=A: {error}; allowed unchecked (on_unknown=warn)"
    if isinstance(o, StatusWriteFailed):
        failures = s.write_failures + 1
        return (
            f"code={s.code} gate={s.gate or '-'}: the {s.recording} verdict is held in memory; "
            f"writing it to the pod failed ({failures}x): {redact_error(o.error)}; retrying in "
            f"{backoff(s.policy, failures):g}s"
        )
    if isinstance(o, TargetFactsUnavailable):
        error = redact_error(o.error)
        return f"code={TARGET_FACTS_UNAVAILABLE} gate=B: {error}; retrying with backoff"
    if isinstance(o, GateAFacts | GateBFacts):
        r = report(s, o)
        if _target_unavailable(r):
            return f"{r.summary()}; retrying with backoff"
        if r.verdict == UNKNOWN:
            return f"{r.summary()}; allowed unchecked (on_unknown=warn)"
        if r.verdict == PASS and r.skipped_facts:
            return (
                f"code={LEGACY_MANIFEST} gate={r.gate}: legacy manifest (no compat header); "
                f"not compared: {', '.join(r.skipped_facts)}"
            )
    return ""
