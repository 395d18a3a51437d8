"""Kubernetes-native state: an object's status subresource as the store (ADR 0133).

:class:`KubernetesStore` keeps each object's status where every Kubernetes controller keeps
it -- in the object's ``status``, written through the status subresource with the
``resourceVersion`` it read as the compare-and-set -- and its outbox of undelivered events
inside the same status, in the library's record condition (:data:`RECORD_CONDITION`). The
status write and the events it must cause are one atomic write: a crash between the write
and the Event leaves the events in the object, and the next start (``Runner.redeliver``, a
``Dispatcher``) sends them; the Kubernetes emitter names each Event from its event id, so a
redelivered one the API server already has is answered ``AlreadyExists``: delivered, once.

- ``load`` reads the object (``GET``, or ``reader``: a host's informer cache); an object not
  there, or without a record yet, loads as ``None``.
- ``commit`` writes the status with the ``resourceVersion`` of the object it last read or
  wrote (one request when no one else wrote since). A ``409`` from a writer of other fields
  (a kubelet, kopf) re-reads and retries while the record's version is still the expected
  one; a different version is a :class:`~lifecycle.Conflict`. ``404`` is
  :class:`ObjectGone`, ``400``/``422`` (the resource's schema) :class:`StatusRefused`, a
  record over ``max_record_bytes`` or an object over the API server's limit
  :class:`RecordTooLarge` -- each raised with nothing written. A write whose answer was lost
  is resolved by re-reading (its token is in the record), else
  :class:`~lifecycle.CommitUnknown`.
- ``mark_delivered`` notes ids; they leave the outbox with the object's next write, or in a
  write of their own (``pending_marks`` objects waiting, ``claim_undelivered``, ``close``).
- No journal: ``journal`` returns ``[]`` (the object holds the current status only), so
  ``lifecycle db check``/``upgrade`` and checked replays do not apply; records written under
  an older schema are upcast when loaded, as in every store.

The status body is :func:`~lifecycle.kubernetes_status` of the machine (the resource's own
field names) merged into what the object has: fields and conditions of other writers are
kept, fields this store wrote before and no longer renders are removed.

:class:`AsyncKubernetesStore` is the same store for asyncio (the same steps, written once,
driven by awaiting a transport). The two handles share one base that builds them and runs
the steps; each adds only how it waits before a retry and how it sends (ADR 0152).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import json
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Generic, Protocol, TypeVar

from .._core.machine import Machine
from .._core.observation import Observation
from .._core.refs import ObjectRef
from .._core.transition import Transition
from .._k8s_api.client import configuration, kubernetes_client, own_client
from .._k8s_api.deadlines import Deadlines
from ._k8s_cache import ObjectCache, ObjectChange
from ._k8s_record import (
    MAX_RECORD_BYTES,
    PODS,
    RECORD_CONDITION,
    Call,
    CustomResource,
    ObjectGone,
    Pause,
    RecordTooLarge,
    Reply,
    StatusCore,
    StatusRefused,
    Steps,
)
from ._rewind import Rewind
from .base import (
    FindStore,
    Found,
    JournalEntry,
    OutboxSummary,
    Record,
    StateCount,
    Store,
    check_query,
)

__all__ = [
    "MAX_RECORD_BYTES",
    "PODS",
    "RECORD_CONDITION",
    "ApiTransport",
    "AsyncKubernetesStore",
    "AsyncTransport",
    "Call",
    "CustomResource",
    "KubernetesStore",
    "ObjectCache",
    "ObjectChange",
    "ObjectGone",
    "Reader",
    "RecordTooLarge",
    "Reply",
    "StatusRefused",
    "Transport",
]

#: A host's read of an object from its own cache (``reader=``), in place of a load's first
#: ``GET``: called as ``reader(resource, namespace, name)`` -- the :class:`CustomResource`
#: the ref's kind maps to, the ref's namespace (``""`` for a cluster-scoped resource) and
#: name -- it returns the whole object as the API server sent it (a dict: ``metadata`` with
#: ``uid`` and ``resourceVersion``, and ``status``), or ``None`` when it does not hold it (the
#: store then reads the API server). The store checks the uid against the ref's and reads
#: again when the object is older than what it wrote itself, so a lagging cache costs a read,
#: never a wrong write; it copies what it is given. :meth:`ObjectCache.get` is one, fed by
#: the ``kubernetes`` client's list and watch.
Reader = Callable[[CustomResource, str, str], Mapping[str, Any] | None]


class Transport(Protocol):
    """What :class:`KubernetesStore` sends its requests through (:class:`ApiTransport` by
    default): ``send`` answers every :class:`Call` with a :class:`Reply`, code 0 when no
    answer came -- it never raises for an HTTP status or a lost connection."""

    def send(self, call: Call) -> Reply:
        """Send one request and read its reply.

        Args:
            call: the request.

        Returns:
            The reply; code 0 with ``error`` set when no answer came.
        """
        ...


class AsyncTransport(Protocol):
    """:class:`Transport` for :class:`AsyncKubernetesStore`: ``send`` is awaited (a host's
    asyncio HTTP client)."""

    def send(self, call: Call) -> Awaitable[Reply]:
        """Send one request; awaited for its reply.

        Args:
            call: the request.

        Returns:
            An awaitable of the reply; code 0 with ``error`` set when no answer came.
        """
        ...


class ApiTransport:
    """Sends :class:`Call` s with the ``kubernetes`` client: through an ``ApiClient`` of
    its own built from ``api``'s configuration (the client's retries off: the store retries),
    each request within ``deadline`` seconds in all and its reply within ``max_reply_bytes``.
    ``api``: an ``ApiClient`` (or an API object over one), or ``None`` for the default
    configuration.

    Args:
        api: an ``ApiClient`` (or an API object over one), or ``None`` for the loaded default
            configuration.
        request_timeout: seconds the client waits for one reply to start.
        deadline: seconds one request may take in all, so a trickling reply cannot hold a
            store call for ever.
        max_reply_bytes: the largest reply read, so a runaway list cannot exhaust memory.
    """

    def __init__(
        self,
        api: Any = None,
        *,
        request_timeout: float = 10.0,
        deadline: float = 30.0,
        max_reply_bytes: int = 16 * 1024 * 1024,
    ) -> None:
        needs = "the Kubernetes status store's API transport"
        self.api_client = own_client(configuration(api, needs))
        self.request_timeout = request_timeout
        self.deadline = deadline
        self.max_reply_bytes = max_reply_bytes
        self._deadlines = Deadlines()
        self._exception = kubernetes_client(needs).exceptions.ApiException

    def send(self, call: Call) -> Reply:
        """Send one request and read its reply.

        Args:
            call: the request.

        Returns:
            The reply; code 0 with ``error`` set when no answer came (never raised).
        """
        with self._deadlines.guard(self.deadline, self.max_reply_bytes) as guard:
            try:
                response = self.api_client.call_api(
                    call.path,
                    call.method,
                    query_params=list(call.query),
                    header_params={"Accept": "application/json", "Content-Type": call.content_type},
                    body=call.body,
                    auth_settings=["BearerToken"],
                    _return_http_data_only=True,
                    _preload_content=False,
                    _request_timeout=self.request_timeout,
                )
            except self._exception as e:
                if not e.status:
                    return Reply(0, error=str(e))
                return Reply(int(e.status), _decode(e.body), dict(e.headers or {}))
            except Exception as e:  # no answer: reset, refused, cut at the deadline
                return Reply(0, error="deadline" if guard.expired else f"{type(e).__name__}: {e}")
            try:
                return Reply(int(response.status), _decode(response.data), dict(response.headers))
            finally:
                release = getattr(response, "release_conn", None)
                if callable(release):
                    release()

    def close(self) -> None:
        self.api_client.close()


def _decode(data: Any) -> Any:
    if not data:
        return None
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return {"message": data[:300].decode("utf-8", "replace") if isinstance(data, bytes) else ""}


class _Reading:
    """A host reader in front of the API's ``GET`` (an informer cache)."""

    def __init__(self, reader: Reader | None) -> None:
        self.reader = reader

    def cached(self, call: Call) -> Reply | None:
        if self.reader is None or call.method != "GET":
            return None
        found = self.reader(*call.target) if call.target is not None else None
        return None if found is None else Reply(200, copy.deepcopy(dict(found)))


class _Run:
    """One program of steps (:class:`StatusCore`'s) in progress: it answers the reads a host's
    reader holds itself, and leaves the driver ``need`` -- a :class:`Pause` to wait or a
    :class:`Call` to send, ``None`` once the program returned ``value``."""

    __slots__ = ("_reading", "_steps", "need", "value")

    def __init__(self, steps: Steps, reading: _Reading) -> None:
        self._steps = steps
        self._reading = reading
        self.need: Call | Pause | None = None
        self.value: Any = None
        self.resume(None)

    def resume(self, answer: Reply | None) -> None:
        """Go on with ``answer`` (the :class:`Reply` to the last call; ``None`` after a
        pause, or to start) up to the next step the driver must take."""
        try:
            step = self._steps.send(answer)
            while isinstance(step, Call) and (cached := self._reading.cached(step)) is not None:
                step = self._steps.send(cached)
        except StopIteration as done:
            self.need, self.value = None, done.value
        else:
            self.need = step


_TransportT = TypeVar("_TransportT")
_SleepT = TypeVar("_SleepT")


class _Handle(Generic[_TransportT, _SleepT]):
    """What a Kubernetes store handle (sync or asyncio) is built of and tells of itself: the
    steps (:class:`StatusCore`), the transport it sends them through and how it waits between
    tries (``_TransportT``, ``_SleepT``: the handle's own kind), and its record bound (ADR
    0144), the events it gave up (0145), its epoch and the rewinds it found (0146). A subclass
    adds only the driving: how a step is waited for or sent."""

    #: Its calls are requests: telemetry times them.
    does_io = True

    def __init__(
        self,
        api: Any = None,
        *,
        resources: Mapping[str, CustomResource] | None = None,
        namespace: str | None = None,
        reader: Reader | None = None,
        max_record_bytes: int = MAX_RECORD_BYTES,
        max_tries: int = 4,
        max_retry_after: float = 10.0,
        pending_marks: int = 256,
        transport: _TransportT | None = None,
        sleep: _SleepT | None = None,
    ) -> None:
        self.core = StatusCore(
            resources or {},
            namespace=namespace,
            max_record_bytes=max_record_bytes,
            max_tries=max_tries,
            max_retry_after=max_retry_after,
            pending_marks=pending_marks,
        )
        self._own = transport is None
        self.transport: _TransportT = self._api_transport(api) if transport is None else transport
        self._sleep: _SleepT = self._default_sleep() if sleep is None else sleep
        self._reading = _Reading(reader)

    def _api_transport(self, api: Any) -> _TransportT:
        """The transport the handle makes (and closes) when none is given."""
        raise NotImplementedError

    def _default_sleep(self) -> _SleepT:
        raise NotImplementedError

    def record_limit(self, kind: str) -> int | None:
        """The most bytes one record of ``kind`` takes here (``max_record_bytes``, or 1 MiB
        in a resource's ``record_field``; ``None`` for a kind ``resources`` does not map):
        the runners check the machines' declared limits against it at start-up (ADR 0144).

        Args:
            kind: the object kind asked about.

        Returns:
            The bound in bytes, or ``None``.
        """
        return self.core.bound(kind) if kind in self.core.resources else None

    def record_size(self, machine: Machine[Any], status: Any) -> int:
        """The bytes the record of ``status`` takes here with nothing undelivered.

        Args:
            machine: the machine whose record it is.
            status: the status measured.

        Returns:
            The record's size in bytes, as this store would write it.
        """
        return self.core.record_size(machine, status)

    @property
    def events_given_up(self) -> int:
        """Undelivered events this store gave up so that a status could be written (the
        outbox would not fit the record otherwise: the Events are down); each object's
        record keeps one Warning that counts its own (ADR 0145)."""
        return self.core.events_given_up

    @property
    def epoch(self) -> str:
        """The epoch this handle stamps events with (ADR 0146): drawn at random when the store
        is made and again whenever it finds a record behind what it wrote."""
        return self.core.watch.epoch

    @property
    def rewinds(self) -> list[Rewind]:
        """The latest records this handle found behind what it wrote (bounded)."""
        return list(self.core.watch.rewinds)

    @property
    def rewind_count(self) -> int:
        """Every rewind this handle found (``lifecycle_store_rewinds_total``)."""
        return self.core.watch.rewind_count

    @property
    def epochs_started(self) -> int:
        """Epochs started after a rewind (the handle's first is its own, not a lost history:
        ``lifecycle_store_epochs``)."""
        return self.core.watch.rewind_count


class KubernetesStore(_Handle[Transport, Callable[[float], None]], Store, FindStore):
    """The store on the status subresource (see the module); ``resources`` maps each ref
    kind to its :class:`CustomResource` (``{"Pod": PODS, "Certification":
    CustomResource("gpu.example.com", "v1", "certifications")}``); a kind it does not map
    has the resource its machine declares (:attr:`~lifecycle.Machine.api_version`,
    ``plural``, ``namespaced``), learnt when the store is first handed the machine. ``api``: an
    ``ApiClient``, or ``None`` for the client's loaded default configuration. ``namespace``:
    where the outbox is listed (``None``: every namespace). ``reader``: a :data:`Reader` that
    answers a load's first read from the host's cache (:meth:`ObjectCache.get`); the refs
    observed must carry the objects' real uids (:meth:`ObjectCache.ref`). ``transport``:
    anything with ``send(Call) -> Reply`` (default: :class:`ApiTransport` on ``api``).
    ``sleep``: how it waits before a retry (default :func:`time.sleep`).

    Its methods are the protocols' it names as bases, where they add nothing to say.

    Args:
        api: an ``ApiClient``, or ``None`` for the client's loaded default configuration.
        resources: ref kind to the resource its objects live in.
        namespace: where the outbox is listed; ``None``: every namespace.
        reader: answers a load's first read from the host's own cache, so an unchanged
            observation costs no request.
        max_record_bytes: the most bytes one record takes: a bigger one is refused before
            it is sent, :class:`RecordTooLarge`, never cut by the API server (ADR 0144).
        max_tries: tries of one request answered 429, a 5xx or (a read) nothing, so a
            passing overload does not fail a call.
        max_retry_after: the longest ``Retry-After`` honoured, in seconds, so a throttling
            server cannot stall a call for long.
        pending_marks: how many objects may wait with delivered ids before they are written
            in writes of their own; until then they leave with each object's next write.
        transport: anything with ``send(Call) -> Reply``; default :class:`ApiTransport`.
        sleep: how it waits before a retry; default :func:`time.sleep` (a test passes a fake).
    """

    def _api_transport(self, api: Any) -> Transport:
        return ApiTransport(api)

    def _default_sleep(self) -> Callable[[float], None]:
        return time.sleep

    def _run(self, steps: Steps) -> Any:
        run = _Run(steps, self._reading)
        while (need := run.need) is not None:
            if isinstance(need, Pause):
                self._sleep(need.seconds)
                run.resume(None)
            else:
                run.resume(self.transport.send(need))
        return run.value

    def load(self, machine: Machine[Any], ref: ObjectRef) -> Record | None:
        found: Record | None = self._run(self.core.load(machine, ref))
        return found

    def commit(
        self,
        machine: Machine[Any],
        ref: ObjectRef,
        expected: int,
        status: Any,
        observation: Observation,
        transitions: Sequence[Transition],
    ) -> int:
        version: int = self._run(
            self.core.commit(machine, ref, expected, status, observation, transitions)
        )
        return version

    def journal(self, machine: Machine[Any], ref: ObjectRef) -> list[JournalEntry]:
        """No journal is kept (the object holds its current status): always ``[]`` once the
        identity rule holds.

        Args:
            machine: the machine that writes the object.
            ref: the object; it is loaded, so the identity rule still holds.

        Returns:
            ``[]``.

        Raises:
            IdentityMismatch: the uid is stored for another object.
        """
        self.load(machine, ref)
        return []

    def records(self, machine: Machine[Any]) -> Iterator[Record]:
        found: list[Record] = self._run(self.core.records(machine))
        return iter(found)

    def find(
        self,
        machine: Machine[Any],
        *,
        state: str | None = None,
        entered_before: datetime | None = None,
        older_than: timedelta | float | None = None,
        limit: int = 100,
    ) -> list[Found]:
        # FindStore.find: the resource listed and filtered here (ADR 0159)
        query = check_query(machine, state, entered_before, older_than, limit)
        found: list[Found] = self._run(self.core.find(machine, query))
        return found

    def state_counts(self) -> list[StateCount]:
        """Per machine and state: how many objects, and since when the oldest (one list).

        Returns:
            One count per machine and state.
        """
        counts: list[StateCount] = self._run(self.core.counts())
        return counts

    def claim_undelivered(self, limit: int = 1000) -> list[Transition]:
        """The undelivered events of every listed object, in uid, version, n order (marks
        waiting are written first). Not leased: run one active controller per object (leader
        election); a second one's redelivery is answered ``AlreadyExists``.

        Args:
            limit: the most rows returned, a bound on what one round holds in memory.

        Returns:
            The rows, each object's in commit order.

        Raises:
            StoreError: the API server cannot be read.
        """
        rows: list[Transition] = self._run(self.core.claim(limit))
        return rows

    def mark_delivered(self, ids: Iterable[str]) -> None:
        self._run(self.core.mark(list(ids)))

    def flush_marks(self) -> None:
        """Write the delivered ids still waiting out of their outboxes now."""
        self._run(self.core.flush_marks())

    def undelivered_count(self) -> int:
        """Events and link intents committed and not yet delivered, over every listed object.

        Returns:
            How many wait.
        """
        return self.outbox_summary().undelivered

    def outbox_summary(self) -> OutboxSummary:
        """How many events wait, and when the oldest was observed (``db status``): one list.

        Returns:
            The count and the oldest event's observation time.
        """
        summary: OutboxSummary = self._run(self.core.summary())
        return summary

    def close(self) -> None:
        """Write the marks still waiting (best effort: what is left is redelivered, and
        answered AlreadyExists) and close the transport this store made."""
        try:
            self.flush_marks()
        finally:
            close = getattr(self.transport, "close", None)
            if self._own and callable(close):
                close()


class _ThreadTransport:
    """A blocking transport behind ``await``: each call on one worker thread."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self._pool = concurrent.futures.ThreadPoolExecutor(1, "lifecycle-k8s-store")

    async def send(self, call: Call) -> Reply:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self.transport.send, call)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        close = getattr(self.transport, "close", None)
        if callable(close):
            close()


class AsyncKubernetesStore(_Handle[AsyncTransport, Callable[[float], Awaitable[None]]]):
    """:class:`KubernetesStore` for asyncio: the same steps, awaited. ``transport``: anything
    with ``async send(Call) -> Reply`` (an asyncio HTTP client of the host's); default, the
    ``kubernetes`` client on one worker thread (:class:`ApiTransport`). ``sleep``: how it
    waits before a retry (default :func:`asyncio.sleep`).

    Args:
        api: as :class:`KubernetesStore`'s.
        resources: as :class:`KubernetesStore`'s: ref kind to resource.
        namespace: as :class:`KubernetesStore`'s: where the outbox is listed.
        reader: as :class:`KubernetesStore`'s: a host's cache read in place of a ``GET``.
        max_record_bytes: as :class:`KubernetesStore`'s: the bound on one record.
        max_tries: as :class:`KubernetesStore`'s: tries of one request.
        max_retry_after: as :class:`KubernetesStore`'s: the longest ``Retry-After`` honoured.
        pending_marks: as :class:`KubernetesStore`'s: objects waiting with delivered ids.
        transport: anything with ``async send(Call) -> Reply``.
        sleep: an awaitable wait before a retry; default :func:`asyncio.sleep`.
    """

    def _api_transport(self, api: Any) -> AsyncTransport:
        return _ThreadTransport(ApiTransport(api))

    def _default_sleep(self) -> Callable[[float], Awaitable[None]]:
        return asyncio.sleep

    async def _run(self, steps: Steps) -> Any:
        run = _Run(steps, self._reading)
        while (need := run.need) is not None:
            if isinstance(need, Pause):
                await self._sleep(need.seconds)
                run.resume(None)
            else:
                run.resume(await self.transport.send(need))
        return run.value

    async def load(self, machine: Machine[Any], ref: ObjectRef) -> Record | None:
        """An object's stored record, read from its status.

        Args:
            machine: the machine that writes the object; an older record comes back upcast.
            ref: the object; its uid must be the object's.

        Returns:
            The record, or ``None`` for an object not there or without a record yet.

        Raises:
            IdentityMismatch: the record names another object.
            StoreError: the API server cannot be read.
        """
        found: Record | None = await self._run(self.core.load(machine, ref))
        return found

    async def commit(
        self,
        machine: Machine[Any],
        ref: ObjectRef,
        expected: int,
        status: Any,
        observation: Observation,
        transitions: Sequence[Transition],
    ) -> int:
        """Write the status and its outbox in one status write, if the record's version is
        ``expected``.

        Args:
            machine: the machine that writes the object.
            ref: the object.
            expected: the version the caller loaded (0 for a new object).
            status: the new status.
            observation: what produced it (not journalled: the object holds the current status).
            transitions: events, then link intents, kept in the object's record until
                delivered, so the status and the events it causes are one write.

        Returns:
            The new version, ``expected + 1``.

        Raises:
            Conflict: the record's version is not ``expected``; nothing was written.
            ObjectGone: the object is not there.
            StatusRefused: the API server refused the status.
            RecordTooLarge: the record is over the bound; nothing was sent.
            CommitUnknown: the answer was lost and a re-read could not tell.
        """
        version: int = await self._run(
            self.core.commit(machine, ref, expected, status, observation, transitions)
        )
        return version

    async def journal(self, machine: Machine[Any], ref: ObjectRef) -> list[JournalEntry]:
        """No journal is kept: always ``[]`` once the identity rule holds.

        Args:
            machine: the machine that writes the object.
            ref: the object; it is loaded, so the identity rule still holds.

        Returns:
            ``[]``.
        """
        await self.load(machine, ref)
        return []

    async def records(self, machine: Machine[Any]) -> list[Record]:
        """Every record of one machine: its resource listed.

        Args:
            machine: the machine whose objects are listed.

        Returns:
            The records.
        """
        found: list[Record] = await self._run(self.core.records(machine))
        return found

    async def find(
        self,
        machine: Machine[Any],
        *,
        state: str | None = None,
        entered_before: datetime | None = None,
        older_than: timedelta | float | None = None,
        limit: int = 100,
    ) -> list[Found]:
        """``machine``'s objects (in ``state``, in it since before a time), oldest first: the
        resource listed and filtered here (ADR 0159).

        Args:
            machine: the machine whose objects are listed.
            state: only objects in this state.
            entered_before: only objects in their state since before this time.
            older_than: only objects in their state for longer than this.
            limit: the most objects returned, a bound on one answer's memory.

        Returns:
            The objects found, oldest first.

        Raises:
            InvalidQuery: an unknown state or a contradictory bound.
        """
        query = check_query(machine, state, entered_before, older_than, limit)
        found: list[Found] = await self._run(self.core.find(machine, query))
        return found

    async def state_counts(self) -> list[StateCount]:
        """Per machine and state: how many objects, and since when the oldest (one list).

        Returns:
            One count per machine and state.
        """
        counts: list[StateCount] = await self._run(self.core.counts())
        return counts

    async def claim_undelivered(self, limit: int = 1000) -> list[Transition]:
        """The undelivered events of every listed object (marks waiting written first); not
        leased: run one active controller per object.

        Args:
            limit: the most rows returned, a bound on what one round holds in memory.

        Returns:
            The rows, in uid, version, n order.
        """
        rows: list[Transition] = await self._run(self.core.claim(limit))
        return rows

    async def mark_delivered(self, ids: Iterable[str]) -> None:
        """Note ids delivered: they leave the outbox with the object's next write, or in a write
        of their own once ``pending_marks`` objects wait.

        Args:
            ids: the transitions' ids; an unknown one is ignored.
        """
        await self._run(self.core.mark(list(ids)))

    async def flush_marks(self) -> None:
        await self._run(self.core.flush_marks())

    async def outbox_summary(self) -> OutboxSummary:
        """How many events wait, and when the oldest was observed: one list.

        Returns:
            The count and the oldest event's observation time.
        """
        summary: OutboxSummary = await self._run(self.core.summary())
        return summary

    async def close(self) -> None:
        try:
            await self.flush_marks()
        finally:
            close = getattr(self.transport, "close", None)
            if self._own and callable(close):
                await asyncio.to_thread(close)  # joins the worker: not on the loop
