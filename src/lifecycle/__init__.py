"""lifecycle: explicit, event-sourced lifecycle state machines for cloud and Kubernetes
controllers, emitting deduplicated, flip-only transition events after each successful write.

The public face is curated here; everything else is private to the package.
"""

from ._core.errors import (
    Conflict,
    InvalidObservation,
    InvalidTransition,
    LifecycleError,
    StoreError,
    TableError,
    TraceError,
    UnknownMachine,
    UnknownObservation,
)
from ._core.machine import Machine, Verdict
from ._core.observation import Observation, Tick
from ._core.refs import Condition, EventType, ObjectRef
from ._core.table import ANY, SAME, Action, Row, Table, ignore
from ._core.transition import Flip, Transition
from .emitters import Emitter, LogEmitter, MemoryEmitter
from .links import Link
from .machines import MachineRegistry, default_registry
from .projections import placed
from .runner import Outcome, Result, RetryPolicy, Runner
from .stores import MemoryStore, SQLiteStore, Store, open_store

__all__ = [
    "ANY",
    "SAME",
    "Action",
    "Condition",
    "Conflict",
    "Emitter",
    "EventType",
    "Flip",
    "InvalidObservation",
    "InvalidTransition",
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
    "Result",
    "RetryPolicy",
    "Row",
    "Runner",
    "SQLiteStore",
    "Store",
    "StoreError",
    "Table",
    "TableError",
    "Tick",
    "TraceError",
    "Transition",
    "UnknownMachine",
    "UnknownObservation",
    "Verdict",
    "default_registry",
    "ignore",
    "open_store",
    "placed",
]
__version__ = "0.1.0"
