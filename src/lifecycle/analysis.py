"""``lifecycle check``: static analysis of transition tables, alone and linked (ADR 0085).

    from lifecycle.analysis import check_machine
    report = check_machine(MyMachine())
    assert report.ok, report.text()

A table is checked for states it cannot reach, rows it never takes, states it cannot leave for
a terminal one (or only on a ``Tick``), timer rows that declare no ``deadline`` (ADR 0149),
(state, observation) pairs that raise at run time, and terminal states left by a row not
declared a recovery row. Linked machines are checked
together: a combination in which one object waits forever for another is reported.

A finding that is deliberate carries an allowance: ``Machine.analysis_allowances`` maps the
finding's key to the reason (build it with :func:`allow`), or an allowances file given to the
CLI does. An allowance that matches no finding is itself a finding, so none goes stale.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

from ._analysis_product import MAX_STATES, LinkedGroup, LinkModel, Product
from ._core.analysis import (
    KINDS,
    Assumption,
    Finding,
    TableLike,
    TableSpec,
    allow,
    allow_refused,
    analyse_table,
    order,
)
from ._core.errors import LifecycleError, preview
from ._core.machine import Machine
from ._core.table import Effect

__all__ = [
    "KINDS",
    "AllowanceError",
    "Allowed",
    "Assumption",
    "Finding",
    "LinkModel",
    "LinkedGroup",
    "Report",
    "TableLike",
    "TableSpec",
    "allow",
    "allow_refused",
    "analyse_table",
    "check_group",
    "check_machine",
    "check_table",
    "load_allowances",
    "shipped_groups",
]


class AllowanceError(LifecycleError):
    """An allowances file that cannot be read, or an allowance without a reason."""


@attrs.frozen
class Allowed:
    """A finding its machine (or an allowances file) declares deliberate, and why.

    Attributes:
        finding: the finding allowed.
        reason: why it is deliberate.
    """

    finding: Finding
    reason: str

    def as_dict(self) -> dict[str, Any]:
        """The finding as JSON data, with its reason.

        Returns:
            :meth:`Finding.as_dict` plus ``reason``.
        """
        return {**self.finding.as_dict(), "reason": self.reason}


@attrs.frozen
class Report:
    """What ``lifecycle check`` found for one machine or one linked group.

    Attributes:
        subject: the machine's or the group's name.
        what: ``"machine"`` or ``"linked"``.
        summary: what was explored (states and rows, or combinations).
        findings: what is left once allowances are applied; empty means :attr:`ok`.
        allowed: the findings allowed, each with its reason.
        complete: ``False`` when a linked product hit its bound, so a clean report does not
            claim more than was explored.
    """

    subject: str
    what: str  # "machine" or "linked"
    summary: str
    findings: tuple[Finding, ...]
    allowed: tuple[Allowed, ...] = ()
    complete: bool = True

    @property
    def ok(self) -> bool:
        """No finding is left."""
        return not self.findings

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON data (``lifecycle check --format json``).

        Returns:
            Its fields, ``ok``, and each finding and allowance as a dict.
        """
        return {
            "subject": self.subject,
            "what": self.what,
            "summary": self.summary,
            "ok": self.ok,
            "complete": self.complete,
            "findings": [f.as_dict() for f in self.findings],
            "allowed": [a.as_dict() for a in self.allowed],
        }

    def text(self) -> str:
        """The report for people: one line per finding, its path and assumptions beneath.

        Returns:
            The text ``lifecycle check`` prints.
        """
        verdict = "ok" if self.ok else f"{len(self.findings)} finding(s)"
        extra = f", {len(self.allowed)} allowed" if self.allowed else ""
        lines = [f"{self.subject}: {verdict}{extra} ({self.summary})"]
        if not self.complete:
            lines.append("  note: the bound was reached; combinations beyond it were not explored")
        for f in self.findings:
            lines.append(f"  {f.kind}: {f.message}")
            lines += _details(f)
        by_reason: dict[str, list[str]] = {}
        for a in self.allowed:
            by_reason.setdefault(a.reason, []).append(a.finding.key)
        for reason, keys in by_reason.items():
            lines.append(f"  allowed ({len(keys)}): {reason}")
            lines.append(f"      {'; '.join(keys)}")
        return "\n".join(lines)


def _details(f: Finding) -> list[str]:
    out: list[str] = []
    if f.path:
        out.append(f"      path: {', '.join(f.path)}")
    if f.assumes:
        out.append("      assumes: " + "; ".join(map(str, f.assumes)))
    elif f.kind != "unused-allowance":
        out.append("      holds whatever the guards decide")
    return out


def _settle(
    subject: str,
    what: str,
    summary: str,
    findings: Iterable[Finding],
    allowances: Mapping[str, str],
    complete: bool = True,
) -> Report:
    kept: list[Finding] = []
    allowed: list[Allowed] = []
    used: set[str] = set()
    for f in order(findings):
        reason = allowances.get(f.key)
        if reason is None:
            kept.append(f)
        else:
            allowed.append(Allowed(f, reason))
            used.add(f.key)
    for key, reason in allowances.items():
        if not isinstance(reason, str) or not reason.strip():
            raise AllowanceError(f"{subject}: the allowance {preview(key)} gives no reason")
        if key not in used:
            kept.append(
                Finding(
                    "unused-allowance",
                    f"unused-allowance: {key}",
                    f"the allowance {key!r} matches no finding (remove it)",
                )
            )
    return Report(subject, what, summary, tuple(kept), tuple(allowed), complete)


def check_table(
    table: TableLike,
    allowances: Mapping[str, str] | None = None,
    effect_targets: Mapping[Effect, Iterable[str]] | None = None,
) -> Report:
    """The report of one table (compiled or only declared).

    Args:
        table: a compiled :class:`~lifecycle.Table` or a :class:`TableSpec`.
        allowances: finding key -> why it is deliberate; one that matches no finding is a
            finding itself, so none goes stale.
        effect_targets: for each effect, the states it may lead to.

    Returns:
        The report.

    Raises:
        AllowanceError: an allowance without a reason.
    """
    targets = {k: tuple(v) for k, v in (effect_targets or {}).items()}
    summary = f"{len(table.states)} states, {len(table.rows)} rows"
    return _settle(
        table.machine, "machine", summary, analyse_table(table, targets), allowances or {}
    )


def check_machine(machine: Machine[Any], extra: Mapping[str, str] | None = None) -> Report:
    """The report of one machine, with its declared allowances (and ``extra`` ones).

    Args:
        machine: the machine checked.
        extra: more allowances, e.g. from an allowances file; they win over the machine's.

    Returns:
        The report, under the machine's name.

    Raises:
        AllowanceError: an allowance without a reason.
    """
    allowances = {**machine.analysis_allowances, **(extra or {})}
    report = check_table(machine.table, allowances, machine.effect_targets)
    return attrs.evolve(report, subject=machine.name)


def check_group(
    group: LinkedGroup, extra: Mapping[str, str] | None = None, max_states: int = MAX_STATES
) -> Report:
    """The report of a linked group: combinations in which one object waits for ever.

    Args:
        group: the machines and links analysed as one product.
        extra: more allowances; they win over the group's.
        max_states: the most combinations explored: the product grows as the product of
            the machines' states, so the bound keeps a check fast (the report then says it
            is incomplete).

    Returns:
        The report, under the group's name.

    Raises:
        AllowanceError: an allowance without a reason.
    """
    product = Product(group, max_states)
    summary = f"{len(product.via)} combinations of {', '.join(product.names)}"
    return _settle(
        group.name,
        "linked",
        summary,
        product.waits(),
        {**group.allowances, **(extra or {})},
        product.complete,
    )


def shipped_groups() -> tuple[LinkedGroup, ...]:
    """The shipped machines that links chain (see :mod:`lifecycle.links`), as groups.

    Returns:
        Pod+NodeClaim, Job+Workflow+Certification and Job+Workflow+WorkloadRun.
    """
    from .machines import (
        CERTIFICATION,
        JOB,
        NODECLAIM,
        POD,
        WORKFLOW,
        WORKLOADRUN,
        certification,
        job,
        nodeclaim,
        workflow,
        workloadrun,
    )

    to_workflow = LinkModel("job", "workflow", (workflow.JobObserved,))
    # The Workflow launches and times out its Jobs on changes of its groups, not of its state.
    to_jobs = LinkModel("workflow", "job", (job.Submitted, job.TimedOut), on_state_change=False)
    return (
        LinkedGroup(
            "pod+nodeclaim",
            (POD, NODECLAIM),
            (LinkModel("pod", "nodeclaim", (nodeclaim.PodObserved,)),),
        ),
        LinkedGroup(
            "job+workflow+certification",
            (JOB, WORKFLOW, CERTIFICATION),
            (
                to_workflow,
                to_jobs,
                LinkModel("workflow", "certification", (certification.WorkflowObserved,)),
            ),
        ),
        LinkedGroup(
            "job+workflow+workloadrun",
            (JOB, WORKFLOW, WORKLOADRUN),
            (
                to_workflow,
                to_jobs,
                LinkModel("workflow", "workloadrun", (workloadrun.WorkflowObserved,)),
            ),
        ),
    )


def load_allowances(path: str | Path) -> dict[str, dict[str, str]]:
    """An allowances file: a JSON object from machine or group name to an object from
    finding key to reason, e.g. ``{"door": {"implicit-error: jammed x Opened": "why"}}``.

    Args:
        path: the file.

    Returns:
        ``{machine or group name: {finding key: reason}}``.

    Raises:
        AllowanceError: the file cannot be read, is not that shape, or an entry gives no
            reason.
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise AllowanceError(f"{path}: cannot read the allowances: {type(e).__name__}") from None
    if not isinstance(data, dict):
        raise AllowanceError(f"{path}: expected an object of machine -> {{key: reason}}")
    out: dict[str, dict[str, str]] = {}
    for subject, entries in data.items():
        if not isinstance(entries, dict):
            raise AllowanceError(f"{path}: {preview(subject)}: expected an object of key -> reason")
        for key, reason in entries.items():
            if not isinstance(reason, str) or not reason.strip():
                raise AllowanceError(f"{path}: {preview(subject)}: {preview(key)} gives no reason")
        out[subject] = dict(entries)
    return out
