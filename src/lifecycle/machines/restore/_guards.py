"""Guards of the Restore table, and the pure helpers they share with the effects.

Every function is pure: it reads the status and the observation, never a clock.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from ..._core.observation import Observation
from ..._core.table import Guard
from .._timers import expiry, ticked
from ._checks import FAIL, UNKNOWN, GateReport, evaluate
from ._facts import (
    TARGET_FACTS_UNAVAILABLE,
)
from ._records import (
    COMPATIBLE_CONDITION,
    REJECTED,
    RESTORE_INCOMPATIBLE,
    RESTORED,
    RESTORED_CONDITION,
    GateAFacts,
    GateBFacts,
    PodObserved,
    RestoreStatus,
    TargetFactsUnavailable,
)
from ._records import (
    UNKNOWN as UNKNOWN_STATE,
)

#: The annotation's recognised values (YAML 1.2 core booleans); anything else is invalid.
TRUE_VALUES = frozenset({"true", "True", "TRUE"})
FALSE_VALUES = frozenset({"false", "False", "FALSE"})


def skip_annotation(value: str | None) -> str:
    """``"true"``, ``"false"``, ``"absent"`` or ``"invalid"``: parsed strictly.

    Args:
        value: the Pod's skip annotation; ``None`` when it is absent.

    Returns:
        What it says; a value other than a YAML boolean is ``"invalid"``, never a skip.
    """
    if value is None:
        return "absent"
    if value in TRUE_VALUES:
        return "true"
    return "false" if value in FALSE_VALUES else "invalid"


def backoff(policy: Any, failures: int) -> float:
    """Exponential backoff from ``write_backoff_seconds``, capped (``failures`` >= 1)."""
    base: float = policy.write_backoff_seconds
    cap: float = policy.write_backoff_cap_seconds
    return float(min(base * 2 ** min(failures - 1, 32), cap))


def report(status: RestoreStatus, obs: GateAFacts | GateBFacts) -> GateReport:
    gate = "A" if isinstance(obs, GateAFacts) else "B"
    return evaluate(gate, obs.manifest, obs.target, status.policy)


def _target_unavailable(r: GateReport) -> bool:
    return r.verdict == UNKNOWN and any(
        x.outcome == UNKNOWN and x.code == TARGET_FACTS_UNAVAILABLE for x in r.results
    )


# -- guards -------------------------------------------------------------------------------------
def bypass(s: RestoreStatus, o: PodObserved) -> bool:
    return skip_annotation(o.annotation) == "true" or o.node_skip


def bypass_reopens(s: RestoreStatus, o: PodObserved) -> bool:
    return bypass(s, o) and s.recording in (REJECTED, UNKNOWN_STATE)


def invalid_new(s: RestoreStatus, o: PodObserved) -> bool:
    return skip_annotation(o.annotation) == "invalid" and o.annotation != s.invalid_annotation


def refused_earlier(s: RestoreStatus, o: PodObserved) -> bool:
    for p in o.priors:
        if p.attempt != s.key.uid or p.status != "False":
            continue
        if p.condition == COMPATIBLE_CONDITION or (
            p.condition == RESTORED_CONDITION and p.reason == RESTORE_INCOMPATIBLE
        ):
            return True
    return False


def not_ready(s: RestoreStatus, o: PodObserved) -> bool:
    return not (o.artifact_ready and o.content_ready)


def gate_fails(s: RestoreStatus, o: Any) -> bool:
    return report(s, o).verdict == FAIL


def gate_blocks(s: RestoreStatus, o: Any) -> bool:
    r = report(s, o)
    return r.verdict == UNKNOWN and s.policy.on_unknown == "block"


def gate_warns(s: RestoreStatus, o: Any) -> bool:
    return report(s, o).verdict == UNKNOWN


def gate_legacy(s: RestoreStatus, o: Any) -> bool:
    return bool(report(s, o).skipped_facts)


def on_unknown_warn(s: RestoreStatus, o: Observation) -> bool:
    return s.policy.on_unknown == "warn"


def bypassed(s: RestoreStatus, o: Observation) -> bool:
    return bool(s.bypass)


def _deadline(s: RestoreStatus, at: datetime) -> bool:
    since = s.unavailable_since or at
    return at - since >= timedelta(seconds=s.policy.target_facts_deadline_seconds)


def retry_expired(s: RestoreStatus, o: Observation) -> bool:
    return s.unavailable_since is not None and _deadline(s, o.at)


def retry_deadline(s: RestoreStatus) -> datetime | None:
    """When gate B's retry for the target's facts runs out (ADR 0149); ``None``: not retrying."""
    if s.unavailable_since is None:
        return None
    limit = s.policy.target_facts_deadline_seconds
    return expiry(s.unavailable_since, limit, ticked(retry_expired, s))


def target_unavailable(s: RestoreStatus, o: Observation) -> bool:
    if isinstance(o, GateBFacts):
        return _target_unavailable(report(s, o))
    return isinstance(o, TargetFactsUnavailable)


def target_expired(s: RestoreStatus, o: Observation) -> bool:
    return target_unavailable(s, o) and _deadline(s, o.at)


def target_first(s: RestoreStatus, o: Observation) -> bool:
    return target_unavailable(s, o) and s.unavailable_since is None


def notice_due(s: RestoreStatus, o: Observation) -> bool:
    return s.quiet_until is None or o.at >= s.quiet_until


def _recording(state: str) -> Guard:
    def guard(s: RestoreStatus, o: Observation) -> bool:
        return s.recording == state

    guard.__name__ = guard.__qualname__ = f"records_{state.lower()}"
    return guard


records_rejected = _recording(REJECTED)
records_unknown = _recording(UNKNOWN_STATE)
records_restored = _recording(RESTORED)
