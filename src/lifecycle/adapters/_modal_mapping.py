"""Modal's vocabulary, mapped: Pod readiness probes to Modal probes, exit codes to Pod
observations, a polled sandbox to its observation, and the per-sandbox readiness latch.

Pure functions and one small piece of loop-bound state; :mod:`lifecycle.adapters.modal` does
the SDK calls. See that module (and ADR 0020) for the rules these implement.
"""

from __future__ import annotations

import asyncio
import itertools
import signal
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

import attrs

from .base import InstanceObservation, InstanceState, classify_exit, state_observation

CLAIM_TAG_KEY = "nebula.inftyai.com/claim"
PROBE_TAG_KEY = "nebula.inftyai.com/readiness-probe"
PROBE_TAG_VALUE = "true"


# -- pure mappings -----------------------------------------------------------------------------
@attrs.frozen(slots=True)
class ProbePlan:
    """The Modal readiness probe a Pod's probe maps to: exec ``argv`` or a TCP ``port``.

    Attributes:
        exec_argv: the command of an exec probe; empty for a TCP probe.
        tcp_port: the port of a TCP probe.
        interval_ms: how often Modal probes, from the Pod's ``periodSeconds``.
    """

    exec_argv: tuple[str, ...] = ()
    tcp_port: int | None = None
    interval_ms: int | None = None

    def build(self, sdk: Any) -> Any:
        """The ``modal.Probe`` for this plan.

        Args:
            sdk: the ``modal`` module, or a fake of it.

        Returns:
            The probe, for ``Sandbox.create``.
        """
        kw = {} if self.interval_ms is None else {"interval_ms": self.interval_ms}
        if self.exec_argv:
            return sdk.Probe.with_exec(*self.exec_argv, **kw)
        return sdk.Probe.with_tcp(self.tcp_port, **kw)


def _numeric_port(handler: object) -> int | None:
    if not isinstance(handler, Mapping):
        return None
    port = handler.get("port")
    # A Kubernetes IntOrString: a string is a named port, which Modal cannot resolve.
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port <= 65535:
        return None
    return port


def probe_plan(readiness_probe: Mapping[str, Any] | None) -> ProbePlan | None:
    """Map a Kubernetes ``readinessProbe`` (API field names) to a Modal probe, or ``None``.

    exec with a non-empty command -> exec probe; ``tcpSocket`` on a numeric port -> TCP;
    ``httpGet`` on a numeric port -> TCP on that port (the path is ignored); a named port or no
    handler -> no probe (and no probe tag). Exec beats the others. ``periodSeconds`` becomes the
    probe interval.

    Args:
        readiness_probe: the container's ``readinessProbe`` as the API returns it, or ``None``.

    Returns:
        The plan, or ``None`` when nothing maps: the pod is then Ready once it runs.
    """
    if not readiness_probe:
        return None
    period = readiness_probe.get("periodSeconds")
    interval = (
        period * 1000
        if isinstance(period, int) and not isinstance(period, bool) and period > 0
        else None
    )
    exec_ = readiness_probe.get("exec")
    command = exec_.get("command") if isinstance(exec_, Mapping) else None
    if (
        isinstance(command, Sequence)
        and not isinstance(command, str)
        and command
        and all(isinstance(a, str) for a in command)
    ):
        return ProbePlan(exec_argv=tuple(command), interval_ms=interval)
    for key in ("tcpSocket", "httpGet"):
        port = _numeric_port(readiness_probe.get(key))
        if port is not None:
            return ProbePlan(tcp_port=port, interval_ms=interval)
    return None


def exit_meaning(code: int) -> str:
    """What an exit code conventionally means (the SDK collapses result statuses into it).

    Args:
        code: the sandbox's exit code.

    Returns:
        A short phrase for the pod's message (``"killed by signal SIGTERM"``).
    """
    known = {
        0: "exited successfully",
        1: "general error",
        2: "misuse of a shell builtin or bad arguments",
        124: "timed out (sandbox timeout reached)",
        126: "command found but not executable",
        127: "command not found",
        137: "killed (SIGKILL: terminated)",
    }
    if code in known:
        return known[code]
    if 128 < code < 128 + 65:
        try:
            return f"killed by signal {signal.Signals(code - 128).name}"
        except ValueError:
            return f"killed by signal {code - 128}"
    if code < 0 or code > 255:
        return "exit code outside 0-255"
    return "exited with an error"


def exit_observation(code: int, *, instance_id: str, at: datetime) -> InstanceObservation:
    """``InstanceTerminated`` for 0, 124 and 137; ``InstanceFailed`` for any other code.
    Both keep the code and its meaning.

    Args:
        code: the sandbox's exit code.
        instance_id: the sandbox's id.
        at: the time stamped on the observation.

    Returns:
        The Pod observation.
    """
    return state_observation(
        classify_exit(code),
        at,
        instance_id=instance_id,
        exit_code=code,
        detail=f"exit {code}: {exit_meaning(code)}",
    )


def sandbox_observation(
    *, instance_id: str, returncode: int | None, probe: bool, latched: bool, at: datetime
) -> InstanceObservation:
    """A polled sandbox (tags read, poll answered) as a Pod observation.

    Exited -> :func:`exit_observation`. Running without a probe tag, or with one whose
    readiness is latched -> Running, ready. Running with an unconfirmed probe -> Running,
    ``readiness_confirmed=False`` (the pod stays Initializing, never Ready).

    Args:
        instance_id: the sandbox's id.
        returncode: its exit code, ``None`` while it runs.
        probe: it carries the probe tag: it was created with a readiness probe.
        latched: its readiness was confirmed once (:class:`ReadinessLatch`); a confirmed
            sandbox stays ready, as the SDK cannot be asked again cheaply.
        at: the time stamped on the observation.

    Returns:
        The Pod observation.
    """
    if returncode is not None:
        return exit_observation(returncode, instance_id=instance_id, at=at)
    return state_observation(
        InstanceState.RUNNING,
        at,
        instance_id=instance_id,
        readiness_confirmed=(not probe) or latched,
    )


# -- the readiness latch -----------------------------------------------------------------------
@attrs.define(slots=True)
class _Entry:
    token: int
    ready: bool = False
    forgotten: bool = False
    waiter: asyncio.Task[None] | None = None


class ReadinessLatch:
    """Per-sandbox readiness memory with at most one detached waiter per sandbox.

    Each entry carries a generation token. A waiter records the token it started under and
    latches only if the entry still has it: :meth:`forget` (exit, terminate) and :meth:`prune`
    (left the list) change or drop the entry, so a late waiter never latches a forgotten
    sandbox. A forgotten entry stays as a tombstone (no waiter, never ready) until pruned.
    """

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}
        self._tokens = itertools.count(1)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, sandbox_id: object) -> bool:
        return sandbox_id in self._entries

    def is_set(self, sandbox_id: str) -> bool:
        """Whether the sandbox's readiness was confirmed (and it was not forgotten since).

        Args:
            sandbox_id: the sandbox's id.

        Returns:
            ``True`` once a waiter confirmed it.
        """
        entry = self._entries.get(sandbox_id)
        return entry is not None and entry.ready and not entry.forgotten

    def waiting(self, sandbox_id: str) -> bool:
        """Whether a waiter runs for the sandbox.

        Args:
            sandbox_id: the sandbox's id.

        Returns:
            ``True`` while one runs.
        """
        entry = self._entries.get(sandbox_id)
        return entry is not None and entry.waiter is not None

    def start(self, sandbox_id: str, wait: Callable[[], Awaitable[bool]]) -> bool:
        """Start the waiter unless one runs, the latch is set, or the sandbox was forgotten.
        Must be called on the event loop that will run the waiter.

        Args:
            sandbox_id: the sandbox's id.
            wait: makes the waiter's coroutine; ``True`` when it ends latches the sandbox.

        Returns:
            Whether it started: at most one waiter per sandbox, so a poll every few seconds
            does not pile up calls to the SDK.
        """
        entry = self._entries.get(sandbox_id)
        if entry is None:
            entry = self._entries[sandbox_id] = _Entry(next(self._tokens))
        if entry.ready or entry.forgotten or entry.waiter is not None:
            return False
        token = entry.token
        task = asyncio.get_running_loop().create_task(
            self._run(sandbox_id, token, wait), name=f"modal-readiness-{sandbox_id}"
        )
        entry.waiter = task
        # A task cancelled before its first step never runs ``_run``'s cleanup: clear the
        # handle when the task ends, however it ends, or ``drain`` would spin on it forever.
        task.add_done_callback(lambda done: self._ended(sandbox_id, done))
        return True

    def _ended(self, sandbox_id: str, task: asyncio.Task[None]) -> None:
        entry = self._entries.get(sandbox_id)
        if entry is not None and entry.waiter is task:
            entry.waiter = None

    async def _run(self, sandbox_id: str, token: int, wait: Callable[[], Awaitable[bool]]) -> None:
        ok = False
        try:
            ok = await wait()
        finally:
            entry = self._entries.get(sandbox_id)
            if entry is not None and entry.token == token:
                entry.waiter = None
                if ok and not entry.forgotten:
                    entry.ready = True

    def forget(self, sandbox_id: str) -> None:
        """The sandbox exited or was terminated: unlatch it and never latch it again.

        Args:
            sandbox_id: the sandbox's id; its waiter, if any, is cancelled.
        """
        entry = self._entries.get(sandbox_id)
        if entry is None:
            entry = self._entries[sandbox_id] = _Entry(next(self._tokens))
        entry.token = next(self._tokens)
        entry.ready, entry.forgotten = False, True
        if entry.waiter is not None:
            entry.waiter.cancel()
            entry.waiter = None

    def prune(self, keep: set[str]) -> int:
        """Drop entries of sandboxes not in ``keep`` (cancelling their waiters).

        Args:
            keep: the ids still listed; the latch's memory stays bounded by them.

        Returns:
            How many entries were dropped.
        """
        gone = [sid for sid in self._entries if sid not in keep]
        for sid in gone:
            entry = self._entries.pop(sid)
            if entry.waiter is not None:
                entry.waiter.cancel()
        return len(gone)

    def waiters(self) -> list[asyncio.Task[None]]:
        """The waiters still running (a finished task is never handed out again).

        Returns:
            Their tasks.
        """
        return [e.waiter for e in self._entries.values() if e.waiter and not e.waiter.done()]

    async def drain(self) -> None:
        """Wait for every running waiter to finish (tests; graceful shutdown)."""
        while tasks := self.waiters():
            await asyncio.gather(*tasks, return_exceptions=True)

    def cancel_all(self) -> None:
        for task in self.waiters():
            task.cancel()
