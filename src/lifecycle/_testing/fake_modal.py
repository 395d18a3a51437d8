"""An in-memory fake of the part of the ``modal`` SDK that the Modal adapter uses.

Pass it where the adapter would import ``modal``::

    fake = FakeModal()
    adapter = ModalAdapter(sdk=fake)

It mirrors the SDK's shapes: ``Sandbox.create/list/from_id/from_name`` and the sandbox methods
``get_tags/poll/wait_until_ready/terminate`` each expose ``.aio``, with the installed SDK's
parameter names, kinds and defaults (a contract test in ``tests/adapters`` compares them with
``inspect.signature`` and binds every call the fake received against the real signatures);
``App.lookup``, ``Image.from_registry``, ``Probe`` and the ``exception`` classes likewise (the
test also checks them against a record of the lowest SDK version the package allows). Like the
SDK, a sandbox name is unique among an app's running sandboxes (``AlreadyExistsError``), and
errors carry no more than their public type and message.

It is scriptable: seed sandboxes (:meth:`FakeModal.add`), exit, purge or hide them from the
list, confirm readiness, and make the next call of any operation fail or hang.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import itertools
import threading
from collections import deque
from collections.abc import AsyncGenerator, Callable, Mapping
from typing import Any

import attrs

__all__ = ["MODAL_OPERATIONS", "FakeModal", "FakeProbe", "FakeSandbox", "SandboxState", "exception"]

#: The SDK operations the fake implements, by the names :meth:`FakeModal.fail` takes.
MODAL_OPERATIONS = (
    "App.lookup",
    "Sandbox.create",
    "Sandbox.list",
    "Sandbox.from_id",
    "Sandbox.from_name",
    "Sandbox.get_tags",
    "Sandbox.poll",
    "Sandbox.wait_until_ready",
    "Sandbox.terminate",
)


class exception:
    """The ``modal.exception`` classes the adapter tells apart, with the SDK's hierarchy
    (outside the :class:`~lifecycle.LifecycleError` tree, as the SDK's own are)."""

    class Error(Exception):
        pass

    class InvalidError(Error):
        pass

    class ConflictError(InvalidError):
        pass

    class NotFoundError(Error):
        pass

    class AlreadyExistsError(Error):
        pass

    class AuthError(Error):
        pass

    class PermissionDeniedError(Error):
        pass

    class ResourceExhaustedError(Error):
        pass

    class ServiceError(Error):
        pass

    class InternalError(Error):
        pass

    class TimeoutError(Error):
        pass

    class SandboxTimeoutError(TimeoutError):
        pass


@dataclasses.dataclass(frozen=True)
class FakeProbe:
    """``modal.Probe``: exec argv or a TCP port, and an interval.

    Attributes:
        tcp_port: the port a TCP probe connects to.
        exec_argv: the command an exec probe runs.
        interval_ms: how often the probe runs.
    """

    tcp_port: int | None = None
    exec_argv: tuple[str, ...] | None = None
    interval_ms: int = 100

    @classmethod
    def with_tcp(cls, port: int, *, interval_ms: int = 100) -> FakeProbe:
        """A TCP probe, as ``modal.Probe.with_tcp``.

        Args:
            port: the port, 1 to 65535.
            interval_ms: how often it runs.

        Returns:
            The probe.

        Raises:
            InvalidError: the port is out of range (the SDK's error, from the fake's ``exception``).
        """
        if not 0 < port <= 65535:
            raise exception.InvalidError(
                f"Probe.with_tcp() expects `port` in [1, 65535], got {port}"
            )
        return cls(tcp_port=port, interval_ms=interval_ms)

    @classmethod
    def with_exec(cls, *argv: str, interval_ms: int = 100) -> FakeProbe:
        """An exec probe, as ``modal.Probe.with_exec``.

        Args:
            *argv: the command, at least one word.
            interval_ms: how often it runs.

        Returns:
            The probe.

        Raises:
            InvalidError: no command was given.
        """
        if not argv:
            raise exception.InvalidError("Probe.with_exec() requires at least one argument")
        return cls(exec_argv=tuple(argv), interval_ms=interval_ms)


class _Aio:
    """A callable surface exposing ``.aio``, as synchronicity-wrapped SDK functions do."""

    def __init__(self, aio: Callable[..., Any]) -> None:
        self.aio = aio


class _method:
    """Instance method of :class:`FakeSandbox` with ``.aio``; ``.fn`` is the unbound function
    (its signature, with ``self``, is what the contract test compares)."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.__doc__ = fn.__doc__

    def __get__(self, obj: object, owner: type | None = None) -> Any:
        if obj is None:
            return self
        return _Aio(functools.partial(self.fn, obj))


@attrs.define
class SandboxState:
    """The fake's record of one sandbox.

    Attributes:
        id: the sandbox's id.
        app_id: the id of the app it runs in.
        tags: its tags (the claim name among them).
        command: the command it runs.
        options: the other options it was created with.
        probe: its readiness probe, when it has one.
        returncode: its exit code once it finished; ``None`` while it runs.
        ready: its readiness probe passed.
        listed: the SDK's list shows it (a list can lag a create).
        exists: ``from_id`` finds it.
        name: its name, when it was given one.
    """

    id: str
    app_id: str
    tags: dict[str, str]
    command: tuple[str, ...] = ()
    options: dict[str, Any] = attrs.field(factory=dict)
    probe: FakeProbe | None = None
    returncode: int | None = None
    ready: bool = False
    listed: bool = True
    exists: bool = True
    name: str | None = None


@attrs.define
class _App:
    app_id: str
    name: str


class FakeSandbox:
    """A handle, like ``modal.Sandbox``: ``returncode`` is what the handle last learnt (from
    ``list``/``from_id`` or its own ``poll``).

    Args:
        world: the fake SDK the sandbox lives in.
        state: the fake's record of it, which the handle reads.
    """

    def __init__(self, world: FakeModal, state: SandboxState) -> None:
        self._world = world
        self._state = state
        self._returncode = state.returncode

    @property
    def object_id(self) -> str:
        return self._state.id

    @property
    def returncode(self) -> int | None:
        return self._returncode

    @_method
    async def get_tags(self) -> dict[str, str]:
        await self._world._enter("Sandbox.get_tags", (), {}, self._state.id)
        self._check_exists()
        return dict(self._state.tags)

    @_method
    async def poll(self) -> int | None:
        await self._world._enter("Sandbox.poll", (), {}, self._state.id)
        self._check_exists()
        self._returncode = self._state.returncode
        return self._returncode

    @_method
    async def wait_until_ready(self, *, timeout: int = 300) -> None:
        world, state = self._world, self._state
        await world._enter("Sandbox.wait_until_ready", (), {"timeout": timeout}, state.id)
        self._check_exists()
        if state.probe is None:  # the SDK: ConflictError (gRPC FAILED_PRECONDITION)
            raise exception.ConflictError("Sandbox has no readiness probe configured")
        with world._waiting(state.id):
            deadline = asyncio.get_running_loop().time() + timeout
            while not state.ready:
                if state.returncode is not None:
                    raise exception.ConflictError("Sandbox has already finished")
                if asyncio.get_running_loop().time() >= deadline:
                    raise exception.TimeoutError("Sandbox did not become ready in time")
                await asyncio.sleep(0.001)

    @_method
    async def terminate(self, *, wait: bool = False) -> int | None:
        await self._world._enter("Sandbox.terminate", (), {"wait": wait}, self._state.id)
        self._check_exists()
        if self._state.returncode is None:
            self._state.returncode = 137
        if wait:
            self._returncode = self._state.returncode
            return self._returncode
        return None

    def _check_exists(self) -> None:
        if not self._state.exists:
            raise exception.NotFoundError(f"Sandbox {self._state.id} not found")


class _SandboxAPI:
    """``modal.Sandbox``'s static surface: ``create``, ``list``, ``from_id``, ``from_name``."""

    def __init__(self, world: FakeModal) -> None:
        self._world = world
        self.create = _Aio(self._create)
        self.list = _Aio(self._list)
        self.from_id = _Aio(self._from_id)
        self.from_name = _Aio(self._from_name)

    async def _create(
        self,
        *args: str,
        app: Any = None,
        name: str | None = None,
        tags: dict[str, str] | None = None,
        image: Any = None,
        env: dict[str, str | None] | None = None,
        timeout: int | None = 300,
        gpu: str | None = None,
        cpu: float | tuple[float, float] | None = None,
        memory: int | tuple[int, int] | None = None,
        readiness_probe: Any = None,
    ) -> FakeSandbox:
        w = self._world
        options = {"image": image, "env": env, "timeout": timeout, "gpu": gpu}
        options |= {"cpu": cpu, "memory": memory, "readiness_probe": readiness_probe}
        kwargs = {"app": app, "name": name, "tags": tags, **options}
        await w._enter("Sandbox.create", args, kwargs, None)
        if app is None:
            raise exception.InvalidError("Sandboxes require an App when created outside of one")
        if name is not None and w._running_named(app.app_id, name) is not None:
            raise exception.AlreadyExistsError(f"Sandbox with name {name!r} already exists")
        state = w._new(app.app_id, dict(tags or {}), args, options, readiness_probe)
        state.name = name
        state.listed = not w.list_lags
        return FakeSandbox(w, state)

    async def _list(
        self, *, app_id: str | None = None, tags: dict[str, str] | None = None, client: Any = None
    ) -> AsyncGenerator[FakeSandbox, None]:
        w = self._world
        await w._enter("Sandbox.list", (), {"app_id": app_id, "tags": tags, "client": client}, None)
        for state in list(w.sandboxes.values()):
            if not (state.exists and state.listed and state.returncode is None):
                continue  # like the SDK: finished sandboxes are not listed
            if app_id is not None and state.app_id != app_id:
                continue
            if tags and any(state.tags.get(k) != v for k, v in tags.items()):
                continue
            yield FakeSandbox(w, state)

    async def _from_id(self, sandbox_id: str, client: Any = None) -> FakeSandbox:
        w = self._world
        await w._enter("Sandbox.from_id", (sandbox_id,), {"client": client}, sandbox_id)
        state = w.sandboxes.get(sandbox_id)
        if state is None or not state.exists:
            raise exception.NotFoundError(f"Sandbox {sandbox_id} not found")
        return FakeSandbox(w, state)

    async def _from_name(
        self,
        app_name: str,
        name: str,
        *,
        environment_name: str | None = None,
        client: Any = None,
    ) -> FakeSandbox:
        """A running sandbox by name (names are not subject to the list's lag)."""
        w = self._world
        kwargs = {"environment_name": environment_name, "client": client}
        await w._enter("Sandbox.from_name", (app_name, name), kwargs, None)
        app = w.apps.get(app_name)
        state = w._running_named(app.app_id, name) if app is not None else None
        if state is None:
            raise exception.NotFoundError(f"Sandbox {name!r} not found in app {app_name!r}")
        return FakeSandbox(w, state)


class _AppAPI:
    def __init__(self, world: FakeModal) -> None:
        self._world = world
        self.lookup = _Aio(self._lookup)

    async def _lookup(
        self,
        name: str,
        *,
        client: Any = None,
        environment_name: str | None = None,
        create_if_missing: bool = False,
    ) -> _App:
        w = self._world
        kwargs = {"create_if_missing": create_if_missing}
        await w._enter("App.lookup", (name,), kwargs, None)
        if name not in w.apps:
            if not create_if_missing:
                raise exception.NotFoundError(f"App {name!r} not found")
            w.apps[name] = _App(f"ap-{len(w.apps) + 1:06d}", name)
        return w.apps[name]


@attrs.frozen
class FakeImage:
    tag: str


class _ImageAPI:
    def __init__(self, world: FakeModal) -> None:
        self._world = world

    def from_registry(self, tag: str, secret: Any = None) -> FakeImage:
        self._world._log("Image.from_registry", (tag,), {"secret": secret})
        return FakeImage(tag)


@attrs.frozen
class Call:
    """One SDK call the fake received (for assertions and the signature contract test)."""

    name: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    sandbox_id: str | None = None


_HANG = object()


class FakeModal:
    """The fake ``modal`` module. ``list_lags=True`` keeps new sandboxes out of the list until
    :meth:`show` (the SDK's list can lag a create).

    Args:
        list_lags: new sandboxes stay out of the list until :meth:`show`, as the real list can
            lag a create.
    """

    Probe = FakeProbe
    exception = exception

    def __init__(self, *, list_lags: bool = False) -> None:
        self.list_lags = list_lags
        self.sandboxes: dict[str, SandboxState] = {}
        self.apps: dict[str, _App] = {}
        self.calls: list[Call] = []
        self.Sandbox = _SandboxAPI(self)
        self.App = _AppAPI(self)
        self.Image = _ImageAPI(self)
        self._ids = itertools.count(1)
        self._faults: dict[tuple[str, str | None], deque[object]] = {}
        self._hooks: dict[tuple[str, str | None], deque[Callable[[], object]]] = {}
        self._lock = threading.Lock()
        self._in_wait: dict[str, int] = {}
        #: The most concurrent ``wait_until_ready`` calls ever seen for one sandbox.
        self.max_concurrent_waits = 0

    # -- seeding and scripting ------------------------------------------------------------------
    def add(
        self,
        claim: str | None = None,
        *,
        app: str = "lifecycle",
        probe: bool = False,
        ready: bool = False,
        returncode: int | None = None,
        tags: Mapping[str, str] | None = None,
        name: str | None = None,
    ) -> str:
        """Seed a sandbox (as if created earlier, e.g. by a previous controller); its id.

        Args:
            claim: the claim name it is tagged with; ``None``: untagged.
            app: the app it runs in (created when new).
            probe: it has a readiness probe (a TCP one).
            ready: its probe passed already.
            returncode: its exit code, when it has finished.
            tags: further tags.
            name: its name.

        Returns:
            The sandbox's id.
        """
        if app not in self.apps:
            self.apps[app] = _App(f"ap-{len(self.apps) + 1:06d}", app)
        all_tags = dict(tags or {})
        if claim is not None:
            all_tags.setdefault("nebula.inftyai.com/claim", claim)
        if probe:
            all_tags.setdefault("nebula.inftyai.com/readiness-probe", "true")
        state = self._new(
            self.apps[app].app_id, all_tags, (), {}, FakeProbe.with_tcp(8080) if probe else None
        )
        state.ready, state.returncode, state.name = ready, returncode, name
        return state.id

    def state(self, sandbox_id: str) -> SandboxState:
        """The fake's record of one sandbox (changes to it show in every handle).

        Args:
            sandbox_id: the sandbox's id (``sb-...``).

        Returns:
            Its record.

        Raises:
            KeyError: no sandbox has that id.
        """
        return self.sandboxes[sandbox_id]

    def exit(self, sandbox_id: str, code: int) -> None:
        """The sandbox finished with ``code`` (it drops out of the list).

        Args:
            sandbox_id: the sandbox's id (``sb-...``).
            code: its exit code.

        Raises:
            KeyError: no sandbox has that id.
        """
        self.sandboxes[sandbox_id].returncode = code

    def set_ready(self, sandbox_id: str, ready: bool = True) -> None:
        """The sandbox's readiness probe passed.

        Args:
            sandbox_id: the sandbox's id (``sb-...``).
            ready: whether the probe passed.

        Raises:
            KeyError: no sandbox has that id.
        """
        self.sandboxes[sandbox_id].ready = ready

    def purge(self, sandbox_id: str) -> None:
        """The sandbox is gone entirely: ``from_id`` raises NotFoundError.

        Args:
            sandbox_id: the sandbox's id (``sb-...``).

        Raises:
            KeyError: no sandbox has that id.
        """
        self.sandboxes[sandbox_id].exists = False

    def hide(self, sandbox_id: str) -> None:
        """The list does not show the (running) sandbox.

        Args:
            sandbox_id: the sandbox's id (``sb-...``).

        Raises:
            KeyError: no sandbox has that id.
        """
        self.sandboxes[sandbox_id].listed = False

    def show(self, sandbox_id: str) -> None:
        """The list shows the sandbox again.

        Args:
            sandbox_id: the sandbox's id (``sb-...``).

        Raises:
            KeyError: no sandbox has that id.
        """
        self.sandboxes[sandbox_id].listed = True

    def fail(
        self,
        operation: str,
        error: BaseException,
        *,
        sandbox_id: str | None = None,
        times: int = 1,
    ) -> None:
        """The next ``times`` calls of ``operation`` (for ``sandbox_id``, or any) raise.

        Args:
            operation: the SDK call (one of ``MODAL_OPERATIONS``).
            error: what they raise.
            sandbox_id: only calls for this sandbox; ``None``: any.
            times: how many calls raise.

        Raises:
            ValueError: ``operation`` is not one the fake answers, or ``times`` is less than 1.
        """
        self._script(operation, sandbox_id, [error] * times)

    def hang(self, operation: str, *, sandbox_id: str | None = None, times: int = 1) -> None:
        """The next ``times`` calls of ``operation`` never answer (until cancelled).

        Args:
            operation: the SDK call (one of ``MODAL_OPERATIONS``).
            sandbox_id: only calls for this sandbox; ``None``: any.
            times: how many calls hang.

        Raises:
            ValueError: ``operation`` is not one the fake answers, or ``times`` is less than 1.
        """
        self._script(operation, sandbox_id, [_HANG] * times)

    def when(
        self, operation: str, action: Callable[[], object], *, sandbox_id: str | None = None
    ) -> None:
        """Run ``action`` once, as the next call of ``operation`` (for ``sandbox_id``, or any)
        arrives, before it answers: e.g. a sandbox exits between the list and its poll.

        Args:
            operation: the SDK call (one of ``MODAL_OPERATIONS``).
            action: what runs, with no arguments.
            sandbox_id: only a call for this sandbox; ``None``: any.

        Raises:
            ValueError: ``operation`` is not one the fake answers.
        """
        if operation not in MODAL_OPERATIONS:
            raise ValueError(
                f"unknown operation {operation!r}; one of {', '.join(MODAL_OPERATIONS)}"
            )
        with self._lock:
            self._hooks.setdefault((operation, sandbox_id), deque()).append(action)

    def count(self, operation: str, sandbox_id: str | None = None) -> int:
        """How many calls of ``operation`` were made.

        Args:
            operation: the SDK call (one of ``MODAL_OPERATIONS``).
            sandbox_id: count only calls for this sandbox; ``None``: all.

        Returns:
            The count.
        """
        return sum(
            1
            for c in self.calls
            if c.name == operation and (sandbox_id is None or c.sandbox_id == sandbox_id)
        )

    def waiting(self, sandbox_id: str) -> int:
        """How many ``wait_until_ready`` calls are in flight for the sandbox now.

        Args:
            sandbox_id: the sandbox's id (``sb-...``).

        Returns:
            The count, 0 when none waits.
        """
        return self._in_wait.get(sandbox_id, 0)

    # -- internals --------------------------------------------------------------------------------
    def _script(self, operation: str, sandbox_id: str | None, items: list[object]) -> None:
        if operation not in MODAL_OPERATIONS:
            raise ValueError(
                f"unknown operation {operation!r}; one of {', '.join(MODAL_OPERATIONS)}"
            )
        if not items:
            raise ValueError("times must be at least 1")
        with self._lock:
            self._faults.setdefault((operation, sandbox_id), deque()).extend(items)

    def _new(
        self,
        app_id: str,
        tags: dict[str, str],
        command: tuple[str, ...],
        options: dict[str, Any],
        probe: Any,
    ) -> SandboxState:
        sid = f"sb-{next(self._ids):06d}"
        state = SandboxState(sid, app_id, tags, tuple(command), options, probe)
        self.sandboxes[sid] = state
        return state

    def _running_named(self, app_id: str, name: str) -> SandboxState | None:
        for state in self.sandboxes.values():
            running = state.exists and state.returncode is None
            if running and state.app_id == app_id and state.name == name:
                return state
        return None

    def _log(
        self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], sid: str | None = None
    ) -> None:
        with self._lock:
            self.calls.append(Call(name, tuple(args), dict(kwargs), sid))

    async def _enter(
        self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], sid: str | None
    ) -> None:
        self._log(name, args, kwargs, sid)
        with self._lock:
            hooks = [
                self._hooks[key].popleft()
                for key in ((name, sid), (name, None))
                if self._hooks.get(key)
            ]
        for action in hooks:
            action()
        with self._lock:
            item: object = None
            for key in ((name, sid), (name, None)):
                queue = self._faults.get(key)
                if queue:
                    item = queue.popleft()
                    break
        if item is _HANG:
            await asyncio.Event().wait()
        if isinstance(item, BaseException):
            raise item

    class _Waiting:
        def __init__(self, world: FakeModal, sid: str) -> None:
            self.world, self.sid = world, sid

        def __enter__(self) -> None:
            w = self.world
            with w._lock:
                w._in_wait[self.sid] = w._in_wait.get(self.sid, 0) + 1
                w.max_concurrent_waits = max(w.max_concurrent_waits, w._in_wait[self.sid])

        def __exit__(self, *exc: object) -> None:
            with self.world._lock:
                self.world._in_wait[self.sid] -= 1

    def _waiting(self, sid: str) -> FakeModal._Waiting:
        return FakeModal._Waiting(self, sid)
