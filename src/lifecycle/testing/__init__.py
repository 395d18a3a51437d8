"""Test your own machines the way this library tests its own.

Hypothesis strategies that generate observation sequences from a machine's table, one call
that runs the whole property suite on any machine, and the test doubles for every port::

    from lifecycle.testing import check_machine, sqlite_factory

    def test_my_machine_keeps_its_promises(tmp_path):
        check_machine(MY_MACHINE)                                     # MemoryStore
        check_machine(MY_MACHINE, store_factory=sqlite_factory(tmp_path), max_examples=20)

The suite (:class:`Checker`) drives a :class:`~lifecycle.Runner` over a
:class:`~lifecycle.testing.fakes.FaultyStore` (injected conflicts and write errors) with a
:class:`~lifecycle.testing.fakes.FailingEmitter` beside a recording :class:`MemoryEmitter`,
and checks after every step that

- **refusals are clean**: an observation ``apply`` refuses raises a
  :class:`~lifecycle.LifecycleError` from the runner and leaves the store untouched;
- **the table rules**: the status lands in the selected row's target, an ignore row changes
  nothing, and a state event has the row's declared event type;
- **flip-only**: an event fires only for a change of the exclusive state or a declared
  verdict flip; message-only changes and repeats emit nothing;
- **post-write**: each event carries the version it was committed at and is the journal entry's
  own; a write that did not land emits nothing but at most one fallback Warning
  (``fallback=True``, reason ``<Reason>StatusUpdateFailed``), only for a Warning flip and
  only where the row taken declares ``fallback=True``;
- **the retry budget**: conflicts are retried exactly until the budget runs out;
- **terminal states are absorbing** (except rows declared ``recovery=True``), redelivery
  resends outbox events under their ids, and a row's action events (no id) are sent as
  declared whatever the write did;

and at the end that the journal is contiguous and folds to the stored status, that every
committed event was delivered exactly under its ``<uid>:<version>:<n>`` id (nothing lost,
nothing extra), and that replaying the same scenario on a fresh store gives the same statuses
and the same events (determinism).

:func:`check_machine` first runs :func:`check_rows`: a breadth-first search of the pure
machine (:func:`row_paths`) finds a shortest path to every row of the table, and each path
is checked plain, with its last write failing (write error; conflicts on every attempt),
committing on the last attempt, and with its last delivery failing then redelivered. A row no
path reaches fails the check (pass ``samples=`` with the values its guards need, or
``require_all_rows=False``). Then it checks generated :func:`scenarios`: observations biased
toward what the current state accepts, interleaved with faults. :func:`stateful_test` is the
same suite as a Hypothesis rule-based state machine.

Field values come from the field types, the table's own strings (states, reasons, and the
constants its guards compare against: :func:`table_strings`) and per-field ``samples``
(``{"Class.field": [...], "field": [...]}``, values or a strategy): a machine's own
(:attr:`~lifecycle.Machine.samples`), then :data:`SAMPLES` (a host's, by machine name), then
the call's. Every name here needs Hypothesis (the ``testing`` extra): without it, using one
raises :class:`~lifecycle.MissingExtra` naming the extra.

The test doubles -- the fake provider, the fake Modal SDK and EC2 client, the failing store
and emitter -- are :mod:`lifecycle.testing.fakes`, one name each, and need no extra.

A host that implements its own :class:`~lifecycle.stores.Store` checks it with
:func:`check_store` (``check_store(lambda: MyStore(...))``): compare-and-set, the journal, the
outbox and redelivery, and the optional batch and retention methods -- the conformance suite
the shipped memory, SQLite and PostgreSQL stores pass.

A provider adapter (:class:`~lifecycle.adapters.Provider`) is checked the same way with
:func:`check_emitter` (``check_emitter(lambda: MyEmitter(...), holds=...)``): an emitter's
crash-safety contract (ADR 0121) -- nothing lost or repeated across a crash and a redelivery,
each event it took acknowledged once, ``close`` within its bound.

:func:`check_provider` (``check_provider(lambda: MyProvider(...), spec)``; an asyncio one with
:func:`check_async_provider`): provision idempotent by claim, observe answering for exactly the
pods asked, terminate idempotent, failures as typed and redacted observations, and every answer
accepted by the Pod machine a runner drives -- the check the fake, Modal and AWS adapters pass.

A machine's timers are checked with :func:`check_next_tick` (a status against its
``next_tick``, to the microsecond) and :func:`check_requeue` (a host ticking only when due sees
every change a host ticking every second sees, at the same times; ADR 0149).

A Kubernetes controller is tested against :class:`FakeApiServer`: a validating fake API server
on loopback for the real ``kubernetes`` client (Events, Pods and CRDs with their status
subresource, Leases, ``resourceVersion`` conflicts, schema checks, watches, scripted faults),
the one the library's own Kubernetes tests and guide run on (ADR 0138).
"""

from __future__ import annotations

from .._core.errors import MissingExtra

try:
    import hypothesis as _hypothesis  # noqa: F401
except ImportError as _missing:  # pragma: no cover - depends on the environment
    # lifecycle.testing.fakes needs no extra; every name here needs Hypothesis, and says so
    # when it is used (ADR 0151)
    _SDK = _missing.name

    def __getattr__(name: str) -> object:
        if name in __all__:
            error = ModuleNotFoundError(f"No module named {_SDK!r}", name=_SDK)
            raise MissingExtra.of(error, f"lifecycle.testing.{name}", "testing")
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

else:
    from .._testing.checks import (
        Checker,
        assert_flip_only,
        assert_journal_folds,
        check_machine,
        check_rows,
        check_scenario,
    )
    from .._testing.coverage import RowPath, row_paths
    from .._testing.doubles import InjectFault, Redeliver, Step, sqlite_factory
    from .._testing.emitter import check_emitter
    from .._testing.fake_api.schema import conditions_crd_schema, nodeclaim_crd_schema
    from .._testing.fake_api.server import FakeApiServer
    from .._testing.hostile import (
        EXTREME_INTS,
        extreme_ints,
        hostile_built,
        hostile_counts,
        hostile_fields,
        hostile_observations,
        hostile_refs,
        hostile_times,
        hostile_values,
    )
    from .._testing.provider import check_async_provider, check_provider
    from .._testing.requeue import Change, check_next_tick, check_requeue
    from .._testing.stateful import stateful_test
    from .._testing.store import check_store
    from .._testing.strategies import (
        EPOCH,
        NODECLAIM_SAMPLES,
        POD_SAMPLES,
        SAMPLES,
        Samples,
        default_ref,
        observation_sequences,
        observations,
        scenarios,
        table_strings,
    )
    from .._testing.telemetry import RecordingTelemetry, check_telemetry
    from ..emitters.memory import MemoryEmitter
    from ..stores.memory import MemoryStore

__all__ = [
    "EPOCH",
    "EXTREME_INTS",
    "NODECLAIM_SAMPLES",
    "POD_SAMPLES",
    "SAMPLES",
    "Change",
    "Checker",
    "FakeApiServer",
    "InjectFault",
    "MemoryEmitter",
    "MemoryStore",
    "RecordingTelemetry",
    "Redeliver",
    "RowPath",
    "Samples",
    "Step",
    "assert_flip_only",
    "assert_journal_folds",
    "check_async_provider",
    "check_emitter",
    "check_machine",
    "check_next_tick",
    "check_provider",
    "check_requeue",
    "check_rows",
    "check_scenario",
    "check_store",
    "check_telemetry",
    "conditions_crd_schema",
    "default_ref",
    "extreme_ints",
    "hostile_built",
    "hostile_counts",
    "hostile_fields",
    "hostile_observations",
    "hostile_refs",
    "hostile_times",
    "hostile_values",
    "nodeclaim_crd_schema",
    "observation_sequences",
    "observations",
    "row_paths",
    "scenarios",
    "sqlite_factory",
    "stateful_test",
    "table_strings",
]
