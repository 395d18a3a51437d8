"""The Restore compatibility gate: one restore attempt of a GPU pod from a checkpoint.

Behaviour follows ``docs/upstream/restore-gate.md`` (states T1-T15, and the reviewed
recommendations on versions, volume identity, privacy and the verdict memo). Before any
restore work, gate A compares the manifest's recorded facts with the node, and finds every
fact gate B could not know (an unavailable or empty image id, mounts, GPUs or driver), so such
an attempt ends Unknown before anything is claimed; gate B compares with the placeholder and
its GPUs. Every check runs, the first failure is the primary code, and one CamelCase code is
on every surface (condition reason, log field ``code``, Event note prefix ``code=… gate=…``).
Compared values are shown by privacy class, and a free-text error (a provider's, CRIU's, the
API server's) only redacted; the full text stays in the observation, for debug logs. A verdict
that ends the attempt is memoised in ``Recording`` before the host writes the Pod conditions,
so a failing write is retried alone (capped backoff) and never re-enters a gate. The attempt
is keyed by (pod UID, content UID + source container, policy hash), never by container ID;
the bypass (strict annotation or node switch) is evaluated before suppression, and adding it
is the one way to reopen a refused attempt.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from ..._core.analysis import allow_refused
from ..._core.kubernetes_shape import kubernetes_conditions
from ..._core.machine import Machine
from ..._core.observation import Observation, Tick
from ..._core.refs import EventType, ObjectRef
from ..._core.table import ANY, SAME, Action, Row, Table, ignore
from .._quantity import QuantityError, parse_limit, parse_quantity
from ._checks import CHECKS, RESERVED_IDS, CheckResult, GateReport, evaluate, pair_gpus
from ._facts import (
    IMPL_NAMES,
    STATUS_CODES,
    AttemptKey,
    CudaFacts,
    Gpu,
    GpuPair,
    Manifest,
    PriorVerdict,
    RestorePolicy,
    TargetFacts,
    Volume,
    attempt_ref,
)
from ._guards import (
    bypass,
    bypass_reopens,
    bypassed,
    gate_blocks,
    gate_fails,
    gate_legacy,
    gate_warns,
    invalid_new,
    not_ready,
    notice_due,
    on_unknown_warn,
    records_rejected,
    records_restored,
    records_unknown,
    refused_earlier,
    retry_deadline,
    retry_expired,
    skip_annotation,
    target_expired,
    target_first,
    target_unavailable,
)
from ._records import (
    CLAIMED,
    COMPAT_CHECK_SKIPPED,
    COMPAT_CHECK_STARTED,
    FAILED,
    GATE_A,
    GATE_B,
    INVALID_SKIP_ANNOTATION,
    NEW,
    OBSERVATIONS,
    PENDING,
    RECORDING,
    REJECTED,
    RESTORE_ALREADY_FAILED,
    RESTORE_ATTEMPT_OPENED,
    RESTORE_COMPAT_PARTIAL,
    RESTORE_COMPAT_UNCHECKED,
    RESTORE_COMPAT_UNKNOWN,
    RESTORE_FAILED,
    RESTORE_INCOMPATIBLE,
    RESTORE_REQUESTED,
    RESTORE_STARTED,
    RESTORE_STATUS_UPDATE_FAILED,
    RESTORE_SUCCEEDED,
    RESTORE_VERDICT_RECORDED,
    RESTORED,
    RESTORING,
    SKIPPED,
    STATES,
    TERMINAL,
    UNKNOWN,
    AttemptOpened,
    CleanupStepDone,
    GateAFacts,
    GateBFacts,
    ManifestUnreadable,
    PlaceholderResolved,
    PodObserved,
    RestoreCompleted,
    RestoreErrored,
    RestoreStatus,
    StatusWriteFailed,
    StatusWritten,
    TargetFactsUnavailable,
)
from ._rules import (
    action_note,
    admit,
    claim_bypassed,
    cleanup,
    gate,
    note_invalid,
    opened,
    recorded,
    restore_failed,
    restored,
    skip,
    suppress,
    to_gate_b,
    to_restoring,
    unavailable,
    unreadable,
    wait,
    write_failed,
)

__all__ = [
    "CHECKS",
    "IMPL_NAMES",
    "RESERVED_IDS",
    "RESTORE",
    "STATUS_CODES",
    "AttemptKey",
    "AttemptOpened",
    "CheckResult",
    "CleanupStepDone",
    "CudaFacts",
    "GateAFacts",
    "GateBFacts",
    "GateReport",
    "Gpu",
    "GpuPair",
    "Manifest",
    "ManifestUnreadable",
    "PlaceholderResolved",
    "PodObserved",
    "PriorVerdict",
    "QuantityError",
    "RestoreCompleted",
    "RestoreErrored",
    "RestoreMachine",
    "RestorePolicy",
    "RestoreStatus",
    "StatusWriteFailed",
    "StatusWritten",
    "TargetFacts",
    "TargetFactsUnavailable",
    "Volume",
    "attempt_ref",
    "evaluate",
    "log_fields",
    "pair_gpus",
    "parse_limit",
    "parse_quantity",
    "skip_annotation",
]

N, W = EventType.NORMAL, EventType.WARNING
#: The event type of every state-event reason (a row's declared event must agree).
REASON_TYPES: dict[str, EventType] = {
    COMPAT_CHECK_SKIPPED: W,
    COMPAT_CHECK_STARTED: N,
    RESTORE_REQUESTED: N,
    RESTORE_STARTED: N,
    RESTORE_INCOMPATIBLE: W,
    RESTORE_COMPAT_UNKNOWN: W,
    RESTORE_ALREADY_FAILED: W,
    RESTORE_ATTEMPT_OPENED: N,
    RESTORE_SUCCEEDED: N,
    RESTORE_FAILED: W,
    RESTORE_VERDICT_RECORDED: N,
}
NOTE = "{note}"
INVALID = Action(INVALID_SKIP_ANNOTATION, W, NOTE)
PARTIAL = Action(RESTORE_COMPAT_PARTIAL, N, NOTE)
UNCHECKED = Action(RESTORE_COMPAT_UNCHECKED, W, NOTE)
WRITE_FAILED = Action(RESTORE_STATUS_UPDATE_FAILED, W, NOTE)
TARGET_UNKNOWN = Action(RESTORE_COMPAT_UNKNOWN, W, NOTE)

PAST_GATE_A = (CLAIMED, GATE_B, RESTORING, RECORDING, *TERMINAL)
DECIDED = (RESTORING, RECORDING, *TERMINAL)
SETTLED = (RECORDING, *TERMINAL)

ROWS: tuple[Row, ...] = (
    Row(NEW, AttemptOpened, to=PENDING, reason=RESTORE_ATTEMPT_OPENED, event=N, effect=opened,
        note="keys the attempt; nothing else is accepted before"),
    Row(STATES[1:], AttemptOpened, to=SAME, effect=opened,
        note="the same key again; another is refused"),
    # -- Pending: bypass first (T1), then suppression (T2), then readiness (T3) ---------------
    Row(PENDING, PodObserved, to=SKIPPED, reason=COMPAT_CHECK_SKIPPED, event=W, guard=bypass,
        effect=skip,
        note="T1: strict annotation true, or the node switch; checked before suppression"),
    Row(PENDING, PodObserved, to=RECORDING, reason=RESTORE_ALREADY_FAILED, event=W,
        guard=refused_earlier, effect=suppress,
        note="T2: refused earlier for this artifact and policy: no compare"),
    Row(PENDING, PodObserved, to=SAME, guard=not_ready, effect=wait,
        note="artifact or content not Ready: Restored reason ArtifactPending/SnapshotPending"),
    Row(PENDING, PodObserved, to=GATE_A, reason=COMPAT_CHECK_STARTED, event=N, guard=invalid_new,
        effect=admit, action=INVALID, note="T3 with an unparseable annotation"),
    Row(PENDING, PodObserved, to=GATE_A, reason=COMPAT_CHECK_STARTED, event=N, effect=admit,
        note="T3"),
    Row(GATE_A, PodObserved, to=SKIPPED, reason=COMPAT_CHECK_SKIPPED, event=W, guard=bypass,
        effect=skip, note="T1: a bypass seen before gate A ran"),
    ignore((GATE_A, SKIPPED, CLAIMED, GATE_B, RESTORING), PodObserved,
           "past Pending: the bypass decision travels with the attempt"),
    Row(RECORDING, PodObserved, to=SKIPPED, reason=COMPAT_CHECK_SKIPPED, event=W,
        guard=bypass_reopens, effect=skip,
        note="T15 before the refusal is written: the bypass reopens it"),
    ignore(RECORDING, PodObserved, "the memoised verdict holds; nothing re-enters a gate"),
    Row((REJECTED, UNKNOWN), PodObserved, to=SKIPPED, reason=COMPAT_CHECK_SKIPPED, event=W,
        guard=bypass, effect=skip, recovery=True,
        note="T14/T15: adding the bypass is the one way to reopen a refusal"),
    Row((REJECTED, UNKNOWN), PodObserved, to=SAME, guard=invalid_new, effect=note_invalid,
        action=INVALID, note="a new unparseable annotation is reported; the refusal holds"),
    ignore(TERMINAL, PodObserved, "settled: editing facts does not reopen an attempt"),
    # -- gate A ------------------------------------------------------------------------------------
    Row(GATE_A, GateAFacts, to=RECORDING, reason=RESTORE_INCOMPATIBLE, event=W, guard=gate_fails,
        effect=gate, note="T4: >=1 mismatch; nothing claimed"),
    Row(GATE_A, GateAFacts, to=RECORDING, reason=RESTORE_COMPAT_UNKNOWN, event=W, guard=gate_blocks,
        effect=gate, note="T5: partial, unavailable or newer-schema facts block"),
    Row(GATE_A, GateAFacts, to=CLAIMED, reason=RESTORE_REQUESTED, event=N, guard=gate_warns,
        effect=gate, action=UNCHECKED, note="T5 under on_unknown=warn: allowed, with a Warning"),
    Row(GATE_A, GateAFacts, to=CLAIMED, reason=RESTORE_REQUESTED, event=N, guard=gate_legacy,
        effect=gate, action=PARTIAL, note="T6 on a legacy manifest: skipped facts listed"),
    Row(GATE_A, GateAFacts, to=CLAIMED, reason=RESTORE_REQUESTED, event=N, effect=gate,
        note="T6: pass"),
    Row(GATE_A, ManifestUnreadable, to=CLAIMED, reason=RESTORE_REQUESTED, event=N,
        guard=on_unknown_warn, effect=unreadable, action=UNCHECKED,
        note="T5 under on_unknown=warn"),
    Row(GATE_A, ManifestUnreadable, to=RECORDING, reason=RESTORE_COMPAT_UNKNOWN, event=W,
        effect=unreadable, note="T5: an unreadable manifest is Unknown, which blocks"),
    Row(SKIPPED, GateAFacts, to=CLAIMED, reason=RESTORE_REQUESTED, event=N, effect=claim_bypassed,
        note="T7: nothing compared"),
    Row(SKIPPED, ManifestUnreadable, to=CLAIMED, reason=RESTORE_REQUESTED, event=N,
        effect=claim_bypassed, note="T7: nothing compared"),
    ignore(PAST_GATE_A, GateAFacts, "gate A has decided; facts read again change nothing"),
    ignore(PAST_GATE_A, ManifestUnreadable, "gate A has decided"),
    # -- gate B ------------------------------------------------------------------------------------
    Row(CLAIMED, PlaceholderResolved, to=RESTORING, reason=RESTORE_STARTED, event=N, guard=bypassed,
        effect=to_restoring, note="T8': a bypassed attempt skips gate B"),
    Row(CLAIMED, PlaceholderResolved, to=GATE_B, reason=COMPAT_CHECK_STARTED, event=N,
        effect=to_gate_b, note="T8"),
    ignore((GATE_B, *DECIDED), PlaceholderResolved, "already resolved"),
    Row(GATE_B, GateBFacts, to=RECORDING, reason=RESTORE_INCOMPATIBLE, event=W, guard=gate_fails,
        effect=gate, note="T9: no CRIU; the placeholder is not killed; mounts undone"),
    Row(GATE_B, GateBFacts, to=RECORDING, reason=RESTORE_FAILED, event=W, guard=target_expired,
        effect=unavailable, note="T10 past the deadline: Failed, same code"),
    Row(GATE_B, GateBFacts, to=SAME, guard=target_first, effect=unavailable, action=TARGET_UNKNOWN,
        note="T10: TargetFactsUnavailable, retry with backoff"),
    Row(GATE_B, GateBFacts, to=SAME, guard=target_unavailable, effect=unavailable,
        note="T10: still unavailable"),
    Row(GATE_B, GateBFacts, to=RECORDING, reason=RESTORE_COMPAT_UNKNOWN, event=W, guard=gate_blocks,
        effect=gate, note="T5 at gate B: source facts unknown"),
    Row(GATE_B, GateBFacts, to=RESTORING, reason=RESTORE_STARTED, event=N, guard=gate_warns,
        effect=gate, action=UNCHECKED, note="unknown under on_unknown=warn"),
    Row(GATE_B, GateBFacts, to=RESTORING, reason=RESTORE_STARTED, event=N, effect=gate,
        note="T11: pass; the GPU pairing is returned"),
    ignore(DECIDED, GateBFacts, "gate B has decided"),
    Row(GATE_B, TargetFactsUnavailable, to=RECORDING, reason=RESTORE_FAILED, event=W,
        guard=target_expired, effect=unavailable, note="T10 past the deadline"),
    Row(GATE_B, TargetFactsUnavailable, to=SAME, guard=target_first, effect=unavailable,
        action=TARGET_UNKNOWN, note="T10"),
    Row(GATE_B, TargetFactsUnavailable, to=SAME, effect=unavailable, note="T10: retrying"),
    ignore(DECIDED, TargetFactsUnavailable, "gate B has decided"),
    Row(GATE_B, Tick, to=RECORDING, reason=RESTORE_FAILED, event=W, guard=retry_expired,
        effect=unavailable, deadline=retry_deadline,
        note="T10: the deadline passed while retrying"),
    ignore(ANY, Tick, "only gate B's retry has a deadline"),
    # -- restore -----------------------------------------------------------------------------------
    Row(RESTORING, RestoreCompleted, to=RECORDING, reason=RESTORE_SUCCEEDED, event=N,
        effect=restored, note="T12"),
    Row(RESTORING, RestoreErrored, to=RECORDING, reason=RESTORE_FAILED, event=W,
        effect=restore_failed, note="T13: the placeholder is killed, as today; C unchanged"),
    ignore(SETTLED, RestoreCompleted, "the verdict is memoised"),
    ignore(SETTLED, RestoreErrored, "the verdict is memoised"),
    # -- Recording: the verdict is memoised before the Pod write; only the write is retried ---
    Row(RECORDING, StatusWritten, to=REJECTED, reason=RESTORE_VERDICT_RECORDED, event=N,
        guard=records_rejected, effect=recorded),
    Row(RECORDING, StatusWritten, to=UNKNOWN, reason=RESTORE_VERDICT_RECORDED, event=N,
        guard=records_unknown, effect=recorded),
    Row(RECORDING, StatusWritten, to=RESTORED, reason=RESTORE_VERDICT_RECORDED, event=N,
        guard=records_restored, effect=recorded),
    Row(RECORDING, StatusWritten, to=FAILED, reason=RESTORE_VERDICT_RECORDED, event=N,
        effect=recorded),
    Row(RECORDING, StatusWriteFailed, to=SAME, guard=notice_due, effect=write_failed,
        action=WRITE_FAILED, note="at most one Warning per backoff window"),
    Row(RECORDING, StatusWriteFailed, to=SAME, effect=write_failed,
        note="inside the window: backoff grows (capped), no Warning"),
    ignore(ANY, StatusWritten, "only a verdict's write is tracked"),
    ignore(ANY, StatusWriteFailed, "only a verdict's write is tracked"),
    Row(SETTLED, CleanupStepDone, to=SAME, effect=cleanup, note="idempotent, each step recorded"),
    ignore(ANY, CleanupStepDone, "no verdict yet: nothing to clean up"),
)  # fmt: skip

TABLE = Table(
    "restore",
    states=STATES,
    initial=NEW,
    terminal=TERMINAL,
    observations=OBSERVATIONS,
    rows=ROWS,
    context=("note",),
)

#: Observations of the steps after gate A claims the attempt, in order.
_AFTER_CLAIM = (
    PlaceholderResolved,
    GateBFacts,
    TargetFactsUnavailable,
    RestoreCompleted,
    RestoreErrored,
)


class RestoreMachine(Machine[RestoreStatus]):
    """The Restore compatibility gate (:data:`~lifecycle.machines.RESTORE`): whether a pod may be
    restored from a checkpoint.

    Its table, observations and reasons: ``lifecycle table restore`` and the machine page.
    """

    name: ClassVar[str] = "restore"
    kind: ClassVar[str] = "RestoreAttempt"
    writes_pod_conditions: ClassVar[bool] = True  # the host merges them into the Pod
    status_type: ClassVar[type[Any]] = RestoreStatus
    table: ClassVar[Table] = TABLE
    #: An attempt's steps come in order; a step's result before the step is a host bug.
    analysis_allowances: ClassVar[Mapping[str, str]] = {
        **allow_refused(
            "nothing but AttemptOpened is accepted before the attempt is keyed",
            (NEW,),
            (PodObserved, GateAFacts, ManifestUnreadable, *_AFTER_CLAIM),
        ),
        **allow_refused(
            "gate A's facts and later results come after the pod is admitted to gate A",
            (PENDING,),
            (GateAFacts, ManifestUnreadable, *_AFTER_CLAIM),
        ),
        **allow_refused(
            "the placeholder is resolved, and gate B runs, only after the attempt is claimed",
            (GATE_A, SKIPPED),
            _AFTER_CLAIM,
        ),
        **allow_refused(
            "gate B's facts and the restore's result come after the placeholder is resolved",
            (CLAIMED,),
            _AFTER_CLAIM[1:],
        ),
        **allow_refused(
            "the restore runs only after gate B lets it",
            (GATE_B,),
            (RestoreCompleted, RestoreErrored),
        ),
    }

    def kubernetes_status(self, status: RestoreStatus) -> dict[str, Any]:
        """The Pod conditions the host writes (``SnapshotRestoreCompatible``, ``Restored``),
        as a ``conditions`` list to merge into the Pod's status by type.

        Args:
            status: the attempt's status.

        Returns:
            ``{"conditions": [...]}``, the conditions set so far.
        """
        return {"conditions": kubernetes_conditions([status.compatible, status.restored], pod=True)}

    def initial(self, ref: ObjectRef) -> RestoreStatus:
        return RestoreStatus()

    def event_type(self, status: RestoreStatus) -> EventType:
        return REASON_TYPES.get(status.reason, EventType.NORMAL)

    def context(self, status: RestoreStatus, obs: Observation) -> Mapping[str, Any]:
        return {"note": action_note(status, obs)}


RESTORE = RestoreMachine()


def log_fields(status: RestoreStatus) -> dict[str, Any]:
    """Structured log fields for the attempt: ``code``, ``gate``, ``checks`` (privacy-safe).
    Full compared values are in :attr:`GateReport.debug`, and a free-text error in full in its
    observation's ``error``: both for debug-level logs only.

    Args:
        status: the attempt's status.

    Returns:
        The fields, ready for a structured logger.
    """
    return {
        "attempt": status.key.uid if status.opened else "",
        "state": status.state,
        "code": status.code,
        "gate": status.gate,
        "bypass": status.bypass or None,
        "checks": [
            {"id": c.id, "name": c.name, "outcome": c.outcome, "code": c.code, "detail": c.detail}
            for c in status.checks
        ],
    }
