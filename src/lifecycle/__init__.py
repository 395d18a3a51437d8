"""lifecycle: explicit, event-sourced lifecycle state machines for cloud and Kubernetes
controllers, emitting deduplicated, flip-only transition events after each successful write.

The public face is curated here (ADR 0035): the runners, the stores, the emitters, the
errors, and the vocabulary a host reads and writes (references, observations, transitions,
machines and their tables). What only a table author needs is in :mod:`lifecycle.tables`;
each shipped machine's vocabulary in ``lifecycle.machines.<name>``; test doubles and the
property suite in :mod:`lifecycle.testing`. Everything else is private to the package.
"""

from typing import TYPE_CHECKING, Any

from ._version import __version__ as __version__

if TYPE_CHECKING:  # for type checkers; at run time each name is imported on first use
    from ._core.errors import (
        CommitUnknown,
        Conflict,
        IdentityMismatch,
        InvalidObservation,
        InvalidReference,
        InvalidTransition,
        LifecycleError,
        MissingExtra,
        SchemaRefused,
        StoreError,
        TableError,
        TraceError,
        UnknownMachine,
        UnknownObservation,
        UnknownSchema,
    )
    from ._core.machine import Machine
    from ._core.observation import Observation, Tick
    from ._core.refs import EventType, ObjectRef
    from ._core.table import Row, Table, ignore
    from ._core.transition import Transition
    from ._k8s_status import kubernetes_status
    from ._link import Link
    from ._store_bounds import StoreTooSmall
    from .aio import AsyncRunner, AsyncStore, ThreadedStore, open_async_store
    from .dispatch import Dispatcher
    from .emitters import Emitter, LogEmitter, MemoryEmitter
    from .machines import MachineRegistry, default_registry
    from .runner import Outcome, Result, RetryPolicy, Runner
    from .stores import JournalEntry, MemoryStore, Record, SQLiteStore, Store, open_store

#: Where each name of the face lives. ``import lifecycle`` imports none of them: a name is
#: imported when first used (``lifecycle.Runner``, ``from lifecycle import Runner``), so a
#: host, and every CLI command, pays only for what it uses (ADR 0118). The library's loggers
#: get the package's NullHandler when the first one is made (``lifecycle._core.logs``): a
#: host that configures no logging sees nothing (ADR 0098).
_HOMES: dict[str, tuple[str, ...]] = {
    "._core.errors": (
        "CommitUnknown",
        "Conflict",
        "IdentityMismatch",
        "InvalidObservation",
        "InvalidReference",
        "InvalidTransition",
        "LifecycleError",
        "MissingExtra",
        "SchemaRefused",
        "StoreError",
        "TableError",
        "TraceError",
        "UnknownMachine",
        "UnknownObservation",
        "UnknownSchema",
    ),
    "._core.machine": ("Machine",),
    "._core.observation": (
        "Observation",
        "Tick",
    ),
    "._core.refs": (
        "EventType",
        "ObjectRef",
    ),
    "._core.table": (
        "Row",
        "Table",
        "ignore",
    ),
    "._core.transition": ("Transition",),
    "._k8s_status": ("kubernetes_status",),
    "._link": ("Link",),
    "._store_bounds": ("StoreTooSmall",),
    ".aio": (
        "AsyncRunner",
        "AsyncStore",
        "ThreadedStore",
        "open_async_store",
    ),
    ".dispatch": ("Dispatcher",),
    ".emitters": (
        "Emitter",
        "LogEmitter",
        "MemoryEmitter",
    ),
    ".machines": (
        "MachineRegistry",
        "default_registry",
    ),
    ".runner": (
        "Outcome",
        "Result",
        "RetryPolicy",
        "Runner",
    ),
    ".stores": (
        "JournalEntry",
        "MemoryStore",
        "Record",
        "SQLiteStore",
        "Store",
        "open_store",
    ),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _HOME_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # the next access is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "AsyncRunner",
    "AsyncStore",
    "CommitUnknown",
    "Conflict",
    "Dispatcher",
    "Emitter",
    "EventType",
    "IdentityMismatch",
    "InvalidObservation",
    "InvalidReference",
    "InvalidTransition",
    "JournalEntry",
    "LifecycleError",
    "Link",
    "LogEmitter",
    "Machine",
    "MachineRegistry",
    "MemoryEmitter",
    "MemoryStore",
    "MissingExtra",
    "ObjectRef",
    "Observation",
    "Outcome",
    "Record",
    "Result",
    "RetryPolicy",
    "Row",
    "Runner",
    "SQLiteStore",
    "SchemaRefused",
    "Store",
    "StoreError",
    "StoreTooSmall",
    "Table",
    "TableError",
    "ThreadedStore",
    "Tick",
    "TraceError",
    "Transition",
    "UnknownMachine",
    "UnknownObservation",
    "UnknownSchema",
    "default_registry",
    "ignore",
    "kubernetes_status",
    "open_async_store",
    "open_store",
]
