"""lifecycle: explicit, event-sourced lifecycle state machines for cloud and Kubernetes
controllers, emitting deduplicated, flip-only transition events after each successful write.

The public face is curated here (ADR 0035): the runners, the stores, the emitters, the
errors, and the vocabulary a host reads and writes (references, observations, transitions,
machines and their tables). What only a table author needs is in :mod:`lifecycle.tables`;
each shipped machine's vocabulary in ``lifecycle.machines.<name>``; test doubles and the
property suite in :mod:`lifecycle.testing`. Everything else is private to the package.
"""

import logging
from typing import TYPE_CHECKING, Any

from ._core.errors import (
    CommitUnknown,
    Conflict,
    IdentityMismatch,
    InvalidObservation,
    InvalidReference,
    InvalidTransition,
    LifecycleError,
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
from ._version import __version__ as __version__
from .dispatch import Dispatcher
from .emitters import Emitter, LogEmitter, MemoryEmitter
from .machines import MachineRegistry, default_registry
from .runner import Outcome, Result, RetryPolicy, Runner
from .stores import JournalEntry, MemoryStore, Record, SQLiteStore, Store, open_store

if TYPE_CHECKING:
    from .aio import AsyncRunner, AsyncStore, ThreadedStore, open_async_store

#: A library never decides where its host's logs go: nothing prints unless the host configures
#: logging (ADR 0098).
logging.getLogger("lifecycle").addHandler(logging.NullHandler())

#: Imported on first use: asyncio costs a synchronous host (and the CLI) startup time.
_ASYNC = ("AsyncRunner", "AsyncStore", "ThreadedStore", "open_async_store")


def __getattr__(name: str) -> Any:
    if name in _ASYNC:
        from . import aio

        return getattr(aio, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
