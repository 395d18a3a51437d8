"""The machines this library ships, and a registry that finds them by name or kind.

Each shipped machine is imported when first asked for (ADR 0118): ``import lifecycle`` and a
CLI command that needs one machine do not pay for the other six. ``lifecycle.machines.POD``
(and every name in ``__all__``) imports its module on first access; :func:`default_registry`
knows every shipped machine's name and kind without importing it, and imports a machine when
it is looked up (``registry["pod"]``, ``registry.for_kind("Pod")``, iterating its values).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for type checkers; at run time each is imported on first access
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
    "MachineFacts",
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

#: Every shipped machine, in registry order: (name, kind, module, the machine's constant).
#: ``tests/test_lazy_machines.py`` checks each against the machine the module defines.
SHIPPED: tuple[tuple[str, str, str, str], ...] = (
    ("pod", "Pod", "pod", "POD"),
    ("nodeclaim", "NodeClaim", "nodeclaim", "NODECLAIM"),
    ("job", "Job", "job", "JOB"),
    ("workflow", "Workflow", "workflow", "WORKFLOW"),
    ("certification", "Certification", "certification", "CERTIFICATION"),
    ("workloadrun", "WorkloadRun", "workloadrun", "WORKLOADRUN"),
    ("restore", "RestoreAttempt", "restore", "RESTORE"),
)

#: The module of each lazily exported name.
_HOMES: dict[str, str] = {}
for _name, _kind, _module, _constant in SHIPPED:
    _HOMES[_constant] = _module
for _module, _classes in (
    ("pod", ("PodMachine", "PodStatus")),
    ("nodeclaim", ("NodeClaimMachine", "NodeClaimStatus")),
    ("job", ("JobMachine", "JobStatus")),
    ("workflow", ("WorkflowMachine", "WorkflowStatus")),
    ("certification", ("CertificationMachine", "CertificationStatus")),
    ("workloadrun", ("WorkloadRunMachine", "WorkloadRunStatus")),
    ("restore", ("RestoreMachine", "RestoreStatus")),
):
    for _cls in _classes:
        _HOMES[_cls] = _module


def __getattr__(name: str) -> Any:
    module = _HOMES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # the next access is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


class MachineRegistry(Mapping[str, "Machine[Any]"]):
    """Machines by name (``"pod"``); :meth:`for_kind` finds one by object kind (``"Pod"``).

    Args:
        machines: the machines, in order; names and kinds must be unique.

    Raises:
        ValueError: two machines with one name or one kind.
    """

    def __init__(self, machines: Iterable[Machine[Any]]) -> None:
        self._by_name: dict[str, Machine[Any]] = {}
        self._by_kind: dict[str, Machine[Any]] = {}
        #: Machines known by name and kind but not imported yet: name -> (kind, loader).
        self._pending: dict[str, tuple[str, Callable[[], Machine[Any]]]] = {}
        self._kinds: dict[str, str] = {}  # kind -> name, for every machine loaded or pending
        self._order: list[str] = []  # names, in registration order
        for m in machines:
            self._add(m.name, m.kind)
            self._by_name[m.name] = m
            self._by_kind[m.kind] = m

    @classmethod
    def lazy(
        cls, entries: Iterable[tuple[str, str, Callable[[], Machine[Any]]]]
    ) -> MachineRegistry:
        """A registry of ``(name, kind, loader)`` entries: each loader runs once, when its
        machine is first looked up; a loaded machine whose name or kind differs from its
        entry raises :class:`ValueError`.

        Args:
            entries: ``(name, kind, loader)``; a loader imports its machine's module, so a
                host that uses one machine never imports the others (ADR 0139).

        Returns:
            The registry.
        """
        registry = cls(())
        for name, kind, loader in entries:
            registry._add(name, kind)
            registry._pending[name] = (kind, loader)
        return registry

    def _add(self, name: str, kind: str) -> None:
        if name in self._by_name or name in self._pending or kind in self._kinds:
            raise ValueError(f"machine {name!r} / kind {kind!r} registered twice")
        self._kinds[kind] = name
        self._order.append(name)

    def _load(self, name: str) -> Machine[Any]:
        kind, loader = self._pending.pop(name)
        machine = loader()
        if machine.name != name or machine.kind != kind:
            raise ValueError(
                f"machine {machine.name!r} / kind {machine.kind!r} registered as "
                f"{name!r} / {kind!r}"
            )
        self._by_name[name] = machine
        self._by_kind[kind] = machine
        return machine

    def __getitem__(self, name: str) -> Machine[Any]:
        machine = self._by_name.get(name)
        if machine is not None:
            return machine
        if name in self._pending:
            return self._load(name)
        from .._core.errors import UnknownMachine, preview

        known = ", ".join(sorted(self._order))
        raise UnknownMachine(f"unknown machine {preview(name)}; known: {known}")

    def __iter__(self) -> Iterator[str]:
        return iter(self._order)

    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name or name in self._pending

    def for_kind(self, kind: str) -> Machine[Any]:
        """The machine of an object kind.

        Args:
            kind: the object kind (``"Pod"``).

        Returns:
            The machine, imported now if it was not yet.

        Raises:
            UnknownMachine: no machine handles ``kind`` (the known kinds are listed).
        """
        machine = self._by_kind.get(kind)
        if machine is not None:
            return machine
        name = self._kinds.get(kind)
        if name is not None:
            return self[name]
        from .._core.errors import UnknownMachine, preview

        known = ", ".join(sorted(self._kinds))
        raise UnknownMachine(f"no machine handles kind {preview(kind)}; known: {known}")


class MachineFacts(Mapping[str, str]):
    """One fact of each machine of a registry, read from the machine itself (ADR 0147): by
    machine name (``by="name"``) or object kind (``by="kind"``). A machine is imported when
    its key is first looked up; a machine whose fact is ``""`` is not in the view. The
    Kubernetes emitter's :data:`~lifecycle.emitters.kubernetes.API_VERSIONS` and
    :data:`~lifecycle.emitters.kubernetes.CONTROLLERS` are two such views of the shipped
    machines: nothing beside the machine lists them.

    Args:
        registry: the machines the view reads.
        fact: what to read from a machine (its ``api_version``, its controller's name ...).
        by: ``"name"`` or ``"kind"``: what the view is keyed by.

    Raises:
        ValueError: ``by`` is neither.
    """

    def __init__(
        self, registry: MachineRegistry, fact: Callable[[Machine[Any]], str], *, by: str
    ) -> None:
        if by not in ("name", "kind"):
            raise ValueError(f"MachineFacts: by must be 'name' or 'kind', got {by!r}")
        self._registry = registry
        self._fact = fact
        self._by_kind = by == "kind"

    def __getitem__(self, key: str) -> str:
        from .._core.errors import UnknownMachine

        try:
            machine = self._registry.for_kind(key) if self._by_kind else self._registry[key]
        except (UnknownMachine, TypeError):
            raise KeyError(key) from None
        value = self._fact(machine)
        if not value:
            raise KeyError(key)
        return value

    def __iter__(self) -> Iterator[str]:
        for name in self._registry:
            machine = self._registry[name]
            if self._fact(machine):
                yield machine.kind if self._by_kind else name

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return f"MachineFacts({dict(self)!r})"


def _loader(module: str, constant: str) -> Callable[[], Machine[Any]]:
    def load() -> Machine[Any]:
        machine: Machine[Any] = getattr(importlib.import_module(f"{__name__}.{module}"), constant)
        return machine

    return load


def default_registry() -> MachineRegistry:
    """Every shipped machine, each imported when first looked up.

    Returns:
        A registry of the shipped machines: Pod, NodeClaim, Job, Workflow, Certification,
        WorkloadRun and Restore.
    """
    return MachineRegistry.lazy(
        (name, kind, _loader(module, constant)) for name, kind, module, constant in SHIPPED
    )
