"""The machines this library ships, and a registry that finds them by name or kind."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from .._core.errors import UnknownMachine, preview
from .._core.machine import Machine
from .certification import CERTIFICATION, CertificationMachine, CertificationStatus
from .job import JOB, JobMachine, JobStatus
from .nodeclaim import NODECLAIM, NodeClaimMachine, NodeClaimStatus
from .pod import POD, PodMachine, PodStatus
from .restore import RESTORE, RestoreMachine, RestoreStatus
from .workflow import WORKFLOW, WorkflowMachine, WorkflowStatus
from .workloadrun import WORKLOADRUN, WorkloadRunMachine, WorkloadRunStatus

__all__ = [
    "CERTIFICATION",
    "JOB",
    "NODECLAIM",
    "POD",
    "RESTORE",
    "WORKFLOW",
    "WORKLOADRUN",
    "CertificationMachine",
    "CertificationStatus",
    "JobMachine",
    "JobStatus",
    "MachineRegistry",
    "NodeClaimMachine",
    "NodeClaimStatus",
    "PodMachine",
    "PodStatus",
    "RestoreMachine",
    "RestoreStatus",
    "WorkflowMachine",
    "WorkflowStatus",
    "WorkloadRunMachine",
    "WorkloadRunStatus",
    "default_registry",
]


class MachineRegistry(Mapping[str, Machine[Any]]):
    """Machines by name (``"pod"``); :meth:`for_kind` finds one by object kind (``"Pod"``)."""

    def __init__(self, machines: Iterable[Machine[Any]]) -> None:
        self._by_name: dict[str, Machine[Any]] = {}
        self._by_kind: dict[str, Machine[Any]] = {}
        for m in machines:
            if m.name in self._by_name or m.kind in self._by_kind:
                raise ValueError(f"machine {m.name!r} / kind {m.kind!r} registered twice")
            self._by_name[m.name] = m
            self._by_kind[m.kind] = m

    def __getitem__(self, name: str) -> Machine[Any]:
        try:
            return self._by_name[name]
        except KeyError:
            known = ", ".join(sorted(self._by_name))
            raise UnknownMachine(f"unknown machine {preview(name)}; known: {known}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_name)

    def __len__(self) -> int:
        return len(self._by_name)

    def for_kind(self, kind: str) -> Machine[Any]:
        try:
            return self._by_kind[kind]
        except KeyError:
            known = ", ".join(sorted(self._by_kind))
            raise UnknownMachine(
                f"no machine handles kind {preview(kind)}; known: {known}"
            ) from None


def default_registry() -> MachineRegistry:
    """The seven shipped machines, by name: what a :class:`~lifecycle.Runner` runs when it is
    given no ``machines``."""

    return MachineRegistry([POD, NODECLAIM, JOB, WORKFLOW, CERTIFICATION, WORKLOADRUN, RESTORE])
