"""Modal sandboxes -> Pod observations (extra ``modal``; the SDK is imported lazily).

Behaviour follows ``docs/upstream/pod-nodeclaim.md`` ("Providers", Modal), with the upstream bugs
corrected (ADR 0020):

- a tag read failure makes the observation :class:`InstanceUnknown` (changes nothing): never
  "no probe, so Ready", never "absent";
- a readiness probe is confirmed by ONE detached waiter per sandbox (``wait_until_ready`` with a
  30 s budget), which the caller's cancellation and deadline cannot reach; its latch is set only
  on confirmed readiness (or "no probe configured") and only if the sandbox's generation token
  is unchanged, so a sandbox forgotten on exit or terminate is never latched again; entries of
  sandboxes that left the list are pruned;
- every SDK call in an observation pass has its own short deadline;
- a tracked sandbox missing from ``Sandbox.list`` (which hides finished sandboxes) is polled by
  id before it is called absent, and its exit code is classified: 0, 124 (timeout) and 137
  (terminated) are ``InstanceTerminated``, anything else ``InstanceFailed``, code and meaning
  kept;
- a sandbox is created under a name derived from its claim (:func:`sandbox_name`; Modal keeps
  names unique among an app's running sandboxes), so a create repeated while the list still
  lags the first one fails with ``AlreadyExistsError`` and the adapter adopts the sandbox by
  name instead of starting a second one; terminating a claim finds that sandbox by name too;
- SDK errors are told apart by their public ``modal.exception`` types only.

:class:`AsyncModalAdapter` is the asyncio core (the SDK's ``.aio`` interface), an
:class:`~lifecycle.adapters.provider.AsyncProvider` of :class:`SandboxSpec`;
:class:`ModalAdapter` runs it on a private event-loop thread for synchronous hosts, such as a
loop around :class:`lifecycle.Runner`: a :class:`~lifecycle.adapters.provider.Provider`.
Tests and ``--fake`` runs pass ``sdk=lifecycle.testing.fakes.FakeModal()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib
import re
import threading
from collections.abc import Awaitable, Coroutine, Mapping
from concurrent.futures import Future
from datetime import datetime
from typing import Any, TypeVar

import attrs

from .._core.errors import LifecycleError, require
from .._core.refs import ObjectRef
from .._log import get_logger
from ..machines._claims import claim_name
from ..machines.pod import (
    InstanceAbsent,
    InstanceRunning,
    InstanceUnknown,
    ProvisionErrored,
    ProvisionRejected,
    ProvisionSucceeded,
    TerminateFailed,
    TerminateSucceeded,
)
from ._modal_mapping import (
    CLAIM_TAG_KEY,
    PROBE_TAG_KEY,
    PROBE_TAG_VALUE,
    ProbePlan,
    ReadinessLatch,
    exit_meaning,
    exit_observation,
    probe_plan,
    sandbox_observation,
)
from .base import Clock, RecordingMixin, at_or_now, check_attempt, utc_now
from .provider import PollOutcome, Provider, ProvisionOutcome, TerminateOutcome, Tracked
from .recording import ObservationRecorder, redact

__all__ = [
    "CLAIM_TAG_KEY",
    "PROBE_TAG_KEY",
    "PROBE_TAG_VALUE",
    "AsyncModalAdapter",
    "ModalAdapter",
    "ProbePlan",
    "ReadinessLatch",
    "SandboxSpec",
    "exit_meaning",
    "exit_observation",
    "probe_plan",
    "sandbox_name",
    "sandbox_observation",
]

READINESS_BUDGET_SECONDS = 30
DEFAULT_LIFETIME_SECONDS = 24 * 3600
DEFAULT_CALL_TIMEOUT = 10.0
DEFAULT_PROVISION_TIMEOUT = 90.0

T = TypeVar("T")
_log = get_logger("lifecycle.adapters.modal")


def _text(e: BaseException) -> str:
    message = str(e) or repr(e)
    return redact(f"{type(e).__name__}: {message}")


_NAME_CHARS = re.compile(r"[A-Za-z0-9._-]{1,64}")
_APP_ID = re.compile(r"ap-[A-Za-z0-9]{22}")


def sandbox_name(claim: str) -> str:
    """The name a claim's sandbox is created under: the claim itself when Modal accepts it as
    a name (at most 64 of ``A-Za-z0-9._-``, not shaped like an app id), else its first 53
    characters (others replaced by ``-``), ``-`` and 10 hex of its sha256. Deterministic, so
    every retry of one pod's create asks for the same name.

    Args:
        claim: the pod's claim, ``<namespace>-<name>``.

    Returns:
        The sandbox name; a name Modal holds once makes a repeated create find the first.
    """
    if _NAME_CHARS.fullmatch(claim) and not _APP_ID.fullmatch(claim):
        return claim
    digest = hashlib.sha256(claim.encode()).hexdigest()[:10]
    return f"{re.sub(r'[^A-Za-z0-9._-]', '-', claim[:53])}-{digest}"


# -- the adapter ------------------------------------------------------------------------------
@attrs.frozen(slots=True)
class SandboxSpec:
    """What a pod asks of its sandbox. ``readiness_probe`` is the container's Kubernetes
    ``readinessProbe`` as the API returns it (``exec``/``tcpSocket``/``httpGet``,
    ``periodSeconds``); ``active_deadline_seconds`` bounds the lifetime (else 24 h).

    Attributes:
        image: the container image reference.
        command: the command run; empty for the image's own.
        env: environment variables.
        gpu: Modal's GPU request (``"A100"``, ``"H100:8"``), or ``None``.
        cpu: CPU cores requested, or ``None`` for Modal's default.
        memory_mib: memory requested in MiB, or ``None``.
        active_deadline_seconds: the sandbox's lifetime; by default 24 h, so a forgotten
            sandbox does not run (and bill) for ever.
        readiness_probe: the Pod's ``readinessProbe`` (see :func:`probe_plan`).
    """

    image: str
    command: tuple[str, ...] = ()
    env: Mapping[str, str] = attrs.field(factory=dict, hash=False)
    gpu: str | None = None
    cpu: float | None = None
    memory_mib: int | None = None
    active_deadline_seconds: int | None = None
    readiness_probe: Mapping[str, Any] | None = attrs.field(default=None, hash=False)


class DeadlineExceeded(LifecycleError, TimeoutError):
    """An SDK call did not answer within its deadline."""


class AsyncModalAdapter(RecordingMixin):
    """Provision, observe and terminate Modal sandboxes, returning Pod observations.

    ``sdk`` is the ``modal`` module (imported on first use when not given) or a fake of it.
    Sandboxes live in the app ``app_name`` (looked up, created if missing). Every observation
    returned is also handed to ``recorder``.

    Args:
        app_name: the Modal app the sandboxes live in.
        sdk: the ``modal`` module or a fake of it; by default imported on first use (needs
            the ``modal`` extra).
        recorder: also given every observation returned, to save a trace.
        clock: stamps observations when the host gives no ``at``.
        call_timeout: seconds one SDK call may take: a hung call becomes an unknown or
            errored observation instead of holding the host's loop.
        provision_timeout: seconds ``Sandbox.create`` may take, longer than other calls as
            it can pull or build the image.
        readiness_budget: seconds a detached waiter waits for a sandbox's readiness probe.
        max_concurrency: SDK calls in flight at once during one observation pass.

    Raises:
        ValueError: a timeout or the budget is not positive.
        MissingExtra: no ``sdk`` and ``modal`` is not installed.
    """

    name = "modal"

    def __init__(
        self,
        app_name: str = "lifecycle",
        *,
        sdk: Any = None,
        recorder: ObservationRecorder | None = None,
        clock: Clock = utc_now,
        call_timeout: float = DEFAULT_CALL_TIMEOUT,
        provision_timeout: float = DEFAULT_PROVISION_TIMEOUT,
        readiness_budget: int = READINESS_BUDGET_SECONDS,
        max_concurrency: int = 16,
    ) -> None:
        if call_timeout <= 0 or provision_timeout <= 0 or readiness_budget <= 0:
            raise ValueError("timeouts and the readiness budget must be positive")
        if sdk is None:  # the modal SDK, imported on first use: say now if it is not there
            require("modal", "the Modal adapter (without an sdk)")
        self.app_name = app_name
        self._sdk = sdk
        self.recorder = recorder
        self.clock = clock
        self.call_timeout = call_timeout
        self.provision_timeout = provision_timeout
        self.readiness_budget = readiness_budget
        self.max_concurrency = max_concurrency
        self.latch = ReadinessLatch()
        self._app: Any = None
        self._images: dict[str, Any] = {}

    @property
    def sdk(self) -> Any:
        """The ``modal`` module (or the fake given), imported on first use."""
        if self._sdk is None:
            self._sdk = importlib.import_module("modal")
        return self._sdk

    # -- helpers ------------------------------------------------------------------------------
    async def _call(self, aw: Awaitable[T], what: str, timeout: float | None = None) -> T:
        limit = self.call_timeout if timeout is None else timeout
        # asyncio.timeout, not wait_for: on 3.11 wait_for swallows a cancellation that arrives
        # as the call completes, and a cancelled waiter would then wait out its whole budget.
        try:
            async with asyncio.timeout(limit):
                return await aw
        except TimeoutError:
            raise DeadlineExceeded(f"{what} timed out after {limit:g}s") from None

    async def _app_handle(self) -> Any:
        if self._app is None:
            self._app = await self._call(
                self.sdk.App.lookup.aio(self.app_name, create_if_missing=True), "App.lookup"
            )
        return self._app

    async def _list(self, tags: dict[str, str] | None = None) -> list[Any]:
        app = await self._app_handle()

        async def collect() -> list[Any]:
            return [sb async for sb in self.sdk.Sandbox.list.aio(app_id=app.app_id, tags=tags)]

        return await self._call(collect(), "Sandbox.list")

    def _is(self, e: BaseException, name: str) -> bool:
        cls = getattr(self.sdk.exception, name, None)
        return isinstance(cls, type) and isinstance(e, cls)

    def _start_waiter(self, sandbox_id: str) -> None:
        self.latch.start(sandbox_id, lambda: self._wait_ready(sandbox_id))

    async def _wait_ready(self, sandbox_id: str) -> bool:
        """The detached waiter: a fresh handle by id, then ``wait_until_ready``. True latches.

        ``ConflictError`` is how the SDK reports "no readiness probe configured" (gRPC
        FAILED_PRECONDITION), but also a sandbox that has finished and an aborted call; its
        public type tells them no further apart. So a conflict is believed to mean "nothing to
        wait for" only when the sandbox still runs and a second wait conflicts again."""
        for attempt in range(2):
            try:
                sandbox = await self._call(
                    self.sdk.Sandbox.from_id.aio(sandbox_id), "Sandbox.from_id"
                )
                await self._call(
                    sandbox.wait_until_ready.aio(timeout=self.readiness_budget),
                    "Sandbox.wait_until_ready",
                    timeout=self.readiness_budget + self.call_timeout,
                )
                return True
            except Exception as e:
                if not self._is(e, "ConflictError") or not await self._runs(sandbox_id):
                    _log.info("readiness not confirmed", sandbox=sandbox_id, error=_text(e))
                    return False
                if attempt == 1:
                    return True  # conflicts twice while running: no probe, nothing to wait for
        return False  # pragma: no cover - the loop returns

    async def _runs(self, sandbox_id: str) -> bool:
        """Whether the sandbox is still running (``False`` also when that cannot be read)."""
        try:
            sandbox = await self._call(self.sdk.Sandbox.from_id.aio(sandbox_id), "Sandbox.from_id")
            code = await self._call(sandbox.poll.aio(), "Sandbox.poll")
        except Exception:
            return False
        return code is None

    async def _poll(self, sandbox: Any, tags: Mapping[str, str], at: datetime) -> PollOutcome:
        """Poll one sandbox whose tags were read. An exit forgets its latch; a running sandbox
        with an unconfirmed probe gets its (single) waiter."""
        sid = sandbox.object_id
        try:
            code = await self._call(sandbox.poll.aio(), "Sandbox.poll")
        except Exception as e:
            return InstanceUnknown(at=at, error=f"poll of sandbox {sid} failed: {_text(e)}")
        if code is not None:
            self.latch.forget(sid)
            return exit_observation(code, instance_id=sid, at=at)
        probe = PROBE_TAG_KEY in tags  # the key, whatever its value: never assume readiness
        latched = self.latch.is_set(sid)
        if probe and not latched:
            self._start_waiter(sid)
        return sandbox_observation(
            instance_id=sid, returncode=None, probe=probe, latched=latched, at=at
        )

    # -- provision ----------------------------------------------------------------------------
    async def provision(
        self, ref: ObjectRef, spec: SandboxSpec, *, attempt: int = 0, at: datetime | None = None
    ) -> ProvisionOutcome:
        """Find the claim's sandbox (adopt it) or create one. ``ProvisionSucceeded`` (a fresh
        sandbox is unreserved; an adopted one is reserved when it is running and ready),
        ``ProvisionRejected`` (auth, quota, capacity, unsupported) or ``ProvisionErrored``
        (among others: the lookup failed, or the found sandbox's tags were unreadable).
        ``attempt`` changes nothing: the sandbox's name is its claim's, free again once the
        earlier sandbox has finished.

        Args:
            ref: the Pod.
            spec: the sandbox to create.
            attempt: the host's deliberate re-creates; checked, not used (see above).
            at: the time stamped on the observation; by default the clock.

        Returns:
            As :meth:`Provider.provision <lifecycle.adapters.provider.Provider.provision>`.

        Raises:
            ValueError: a bad ``attempt``.
        """
        check_attempt(attempt)
        at = at_or_now(at, self.clock)
        claim = claim_name(ref.namespace, ref.name)
        try:
            existing = await self._list({CLAIM_TAG_KEY: claim})
        except Exception as e:
            return self._emit(
                ref, ProvisionErrored(at=at, error=f"finding sandbox by claim: {_text(e)}")
            )
        if existing:
            return self._emit(ref, await self._adopt(existing[0], at))
        try:
            sandbox = await self._create(claim, spec)
        except Exception as e:
            if self._is(e, "AlreadyExistsError"):  # created before, not listed yet
                return self._emit(ref, await self._adopt_by_name(claim, at))
            return self._emit(ref, self._provision_failure(e, at))
        return self._emit(
            ref, ProvisionSucceeded(at=at, reserved=False, instance_id=sandbox.object_id)
        )

    async def _adopt(self, sandbox: Any, at: datetime) -> ProvisionSucceeded | ProvisionErrored:
        """Adopt the claim's sandbox. Unreadable tags fail Provision (domain §4): without them
        the probe tag is unknown, so nothing about readiness may be built on them; the error is
        unattributable, the pod keeps provisioning and the next attempt repeats the lookup."""
        sid = sandbox.object_id
        try:
            tags = await self._call(sandbox.get_tags.aio(), "Sandbox.get_tags")
        except Exception as e:
            return ProvisionErrored(
                at=at, error=f"adopting sandbox {sid}: tags unreadable: {_text(e)}"
            )
        obs = await self._poll(sandbox, tags, at)
        running = isinstance(obs, InstanceRunning) and obs.readiness_confirmed
        return ProvisionSucceeded(at=at, reserved=running, instance_id=sid)

    async def _adopt_by_name(
        self, claim: str, at: datetime
    ) -> ProvisionSucceeded | ProvisionErrored:
        """The claim's sandbox exists (its name is taken) though the list did not show it:
        adopt it by name. Not found by name (it finished meanwhile) is unattributable: the
        next attempt creates again."""
        name = sandbox_name(claim)
        try:
            sandbox = await self._call(
                self.sdk.Sandbox.from_name.aio(self.app_name, name), "Sandbox.from_name"
            )
        except Exception as e:
            return ProvisionErrored(
                at=at, error=f"sandbox {name} exists but was not found by name: {_text(e)}"
            )
        return await self._adopt(sandbox, at)

    async def _named(self, claim: str) -> list[Any]:
        """The claim's running sandbox found by name (none when there is none)."""
        try:
            return [
                await self._call(
                    self.sdk.Sandbox.from_name.aio(self.app_name, sandbox_name(claim)),
                    "Sandbox.from_name",
                )
            ]
        except Exception as e:
            if self._is(e, "NotFoundError"):
                return []
            raise

    async def _create(self, claim: str, spec: SandboxSpec) -> Any:
        app = await self._app_handle()
        tags = {CLAIM_TAG_KEY: claim}
        kwargs: dict[str, Any] = {
            "app": app,
            "name": sandbox_name(claim),
            "tags": tags,
            "timeout": spec.active_deadline_seconds or DEFAULT_LIFETIME_SECONDS,
        }
        image = self._images.get(spec.image)
        if image is None:
            image = self._images[spec.image] = self.sdk.Image.from_registry(spec.image)
        kwargs["image"] = image
        plan = probe_plan(spec.readiness_probe)
        if plan is not None:
            kwargs["readiness_probe"] = plan.build(self.sdk)
            tags[PROBE_TAG_KEY] = PROBE_TAG_VALUE
        if spec.env:
            kwargs["env"] = dict(spec.env)
        if spec.gpu is not None:
            kwargs["gpu"] = spec.gpu
        if spec.cpu is not None:
            kwargs["cpu"] = spec.cpu
        if spec.memory_mib is not None:
            kwargs["memory"] = spec.memory_mib
        return await self._call(
            self.sdk.Sandbox.create.aio(*spec.command, **kwargs),
            "Sandbox.create",
            timeout=self.provision_timeout,
        )

    def _provision_failure(
        self, e: BaseException, at: datetime
    ) -> ProvisionRejected | ProvisionErrored:
        """Auth, permission, quota/capacity and invalid (unsupported) requests are rejections;
        conflicts, not-found, transport errors, timeouts and anything else are not."""
        rejection = not self._is(e, "ConflictError") and any(
            self._is(e, name)
            for name in (
                "AuthError",
                "PermissionDeniedError",
                "ResourceExhaustedError",
                "InvalidError",
            )
        )
        if rejection:
            return ProvisionRejected(at=at, error=_text(e))
        return ProvisionErrored(at=at, error=_text(e))

    # -- observe ------------------------------------------------------------------------------
    async def observe(
        self, pods: Mapping[ObjectRef, Tracked[SandboxSpec]], *, at: datetime | None = None
    ) -> dict[ObjectRef, PollOutcome]:
        """One observation pass over ``pods`` (each with its known sandbox id, or ``""``).

        A failed list makes every pod :class:`InstanceUnknown`; each sandbox's tags, poll and
        by-id lookup then have their own deadline, and each failure is unknown for that pod.

        Args:
            pods: the pods tracked.
            at: the time stamped on the observations; by default the clock.

        Returns:
            As :meth:`Provider.observe <lifecycle.adapters.provider.Provider.observe>`.
        """
        at = at_or_now(at, self.clock)
        out: dict[ObjectRef, PollOutcome] = {}
        try:
            listed = await self._list()
        except Exception as e:
            for ref in pods:
                out[ref] = InstanceUnknown(at=at, error=f"Sandbox.list failed: {_text(e)}")
            return self._emit_all(out)

        limit = asyncio.Semaphore(self.max_concurrency)

        async def tags_of(sandbox: Any) -> Mapping[str, str] | BaseException:
            async with limit:
                try:
                    tags: Mapping[str, str] = await self._call(
                        sandbox.get_tags.aio(), "Sandbox.get_tags"
                    )
                    return tags
                except Exception as e:
                    return e

        tag_results = await asyncio.gather(*(tags_of(sb) for sb in listed))
        by_claim: dict[str, list[tuple[Any, Mapping[str, str]]]] = {}
        unreadable: dict[str, BaseException] = {}
        for sandbox, tags in zip(listed, tag_results, strict=True):
            if isinstance(tags, BaseException):
                unreadable[sandbox.object_id] = tags
                continue
            claim = tags.get(CLAIM_TAG_KEY)
            if claim:
                by_claim.setdefault(claim, []).append((sandbox, tags))
        keep = {sb.object_id for sb in listed}

        async def one(ref: ObjectRef, known: str) -> tuple[ObjectRef, PollOutcome]:
            async with limit:
                return ref, await self._observe_pod(ref, known, by_claim, unreadable, keep, at)

        results = await asyncio.gather(*(one(ref, pod.instance_id) for ref, pod in pods.items()))
        out.update(results)
        self.latch.prune(keep)
        return self._emit_all(out)

    async def _observe_pod(
        self,
        ref: ObjectRef,
        known: str,
        by_claim: Mapping[str, list[tuple[Any, Mapping[str, str]]]],
        unreadable: Mapping[str, BaseException],
        keep: set[str],
        at: datetime,
    ) -> PollOutcome:
        claim = claim_name(ref.namespace, ref.name)
        found = by_claim.get(claim, [])
        if known in unreadable:
            return InstanceUnknown(
                at=at, error=f"tags of sandbox {known} unreadable: {_text(unreadable[known])}"
            )
        if found:
            sandbox, tags = next(((s, t) for s, t in found if s.object_id == known), found[0])
            return await self._poll(sandbox, tags, at)
        if known:
            return await self._observe_by_id(known, keep, at)
        if unreadable:
            first = next(iter(unreadable.values()))
            return InstanceUnknown(
                at=at,
                error=f"claim {claim} not found, but the tags of {len(unreadable)} sandbox(es) "
                f"were unreadable ({_text(first)})",
            )
        return InstanceAbsent(at=at)

    async def _observe_by_id(self, sandbox_id: str, keep: set[str], at: datetime) -> PollOutcome:
        """A tracked sandbox the list did not show: finished sandboxes are not listed, so look
        it up by id before concluding it is absent."""
        try:
            sandbox = await self._call(self.sdk.Sandbox.from_id.aio(sandbox_id), "Sandbox.from_id")
        except Exception as e:
            if self._is(e, "NotFoundError"):
                self.latch.forget(sandbox_id)
                return InstanceAbsent(at=at)
            return InstanceUnknown(at=at, error=f"lookup of sandbox {sandbox_id}: {_text(e)}")
        code = sandbox.returncode
        if code is None:
            try:
                code = await self._call(sandbox.poll.aio(), "Sandbox.poll")
            except Exception as e:
                return InstanceUnknown(at=at, error=f"poll of sandbox {sandbox_id}: {_text(e)}")
        if code is not None:
            self.latch.forget(sandbox_id)
            return exit_observation(code, instance_id=sandbox_id, at=at)
        # Still running though not listed yet (the list lags a create): observe it fully.
        keep.add(sandbox_id)
        try:
            tags = await self._call(sandbox.get_tags.aio(), "Sandbox.get_tags")
        except Exception as e:
            return InstanceUnknown(
                at=at, error=f"tags of sandbox {sandbox_id} unreadable: {_text(e)}"
            )
        return await self._poll(sandbox, tags, at)

    # -- terminate ----------------------------------------------------------------------------
    async def terminate(
        self, ref: ObjectRef, pod: Tracked[SandboxSpec], *, at: datetime | None = None
    ) -> TerminateOutcome:
        """Terminate the pod's sandbox (by id, else every sandbox tagged with its claim, and the
        one holding its claim's name, which a lagging list may not show yet). Idempotent: an
        unknown id or a finished sandbox is success. A sandbox confirmed gone is forgotten by
        the latch; a failed call leaves the latch (and its waiter) alone: the sandbox keeps
        running, and upstream leaves the pod unchanged.

        Args:
            ref: the Pod, whose claim finds sandboxes when no id is known.
            pod: the tracked pod.
            at: the time stamped on the observation; by default the clock.

        Returns:
            As :meth:`Provider.terminate <lifecycle.adapters.provider.Provider.terminate>`.
        """
        at = at_or_now(at, self.clock)
        ids = [pod.instance_id] if pod.instance_id else []
        if not ids:
            claim = claim_name(ref.namespace, ref.name)
            try:
                found = await self._list({CLAIM_TAG_KEY: claim}) + await self._named(claim)
            except Exception as e:
                return self._emit(ref, TerminateFailed(at=at, error=f"finding sandbox: {_text(e)}"))
            ids = list(dict.fromkeys(sb.object_id for sb in found))
        for sid in ids:
            try:
                sandbox = await self._call(self.sdk.Sandbox.from_id.aio(sid), "Sandbox.from_id")
                await self._call(sandbox.terminate.aio(), "Sandbox.terminate")
            except Exception as e:
                if not self._is(e, "NotFoundError"):
                    return self._emit(ref, TerminateFailed(at=at, error=_text(e)))
            self.latch.forget(sid)
        return self._emit(ref, TerminateSucceeded(at=at))

    async def aclose(self) -> None:
        """Cancel the readiness waiters and wait for them to end."""
        self.latch.cancel_all()
        with contextlib.suppress(Exception):
            await self.latch.drain()


class ModalAdapter(Provider[SandboxSpec]):
    """:class:`AsyncModalAdapter` for synchronous hosts: every call runs on a private event
    loop thread (where the detached readiness waiters live too). Close it (or use ``with``).
    Its ``provision``, ``observe`` and ``terminate`` are
    :class:`~lifecycle.adapters.provider.Provider`'s.

    Args:
        app_name: as :class:`AsyncModalAdapter`.
        **options: :class:`AsyncModalAdapter`'s keyword arguments.
    """

    name = "modal"

    def __init__(self, app_name: str = "lifecycle", **options: Any) -> None:
        self.core = AsyncModalAdapter(app_name, **options)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="lifecycle-modal", daemon=True
        )
        self._thread.start()
        self._closed = False

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._closed:
            coro.close()
            raise RuntimeError("ModalAdapter is closed")
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result()

    @property
    def latch(self) -> ReadinessLatch:
        """The core adapter's readiness latch."""
        return self.core.latch

    @property
    def clock(self) -> Clock:
        """The core adapter's clock."""
        return self.core.clock

    def provision(
        self, ref: ObjectRef, spec: SandboxSpec, *, attempt: int = 0, at: datetime | None = None
    ) -> ProvisionOutcome:
        return self._run(self.core.provision(ref, spec, attempt=attempt, at=at))

    def observe(
        self, pods: Mapping[ObjectRef, Tracked[SandboxSpec]], *, at: datetime | None = None
    ) -> dict[ObjectRef, PollOutcome]:
        return self._run(self.core.observe(pods, at=at))

    def terminate(
        self, ref: ObjectRef, pod: Tracked[SandboxSpec], *, at: datetime | None = None
    ) -> TerminateOutcome:
        return self._run(self.core.terminate(ref, pod, at=at))

    def drain(self) -> None:
        """Block until every readiness waiter has finished."""
        self._run(self.core.latch.drain())

    def close(self) -> None:
        """Cancel the readiness waiters and stop the event loop thread; a second call does
        nothing."""
        if self._closed:
            return
        self._run(self.core.aclose())
        self._closed = True
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def __enter__(self) -> ModalAdapter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
