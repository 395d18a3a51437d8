"""Typed exceptions. Every refusal of bad input is one of these, never a bare ``Exception``."""

from __future__ import annotations

import re
import reprlib
from typing import Any

from .redact import redact

#: How much of one string a preview reads (then redacts, then cuts to its limit).
_READ = 1024
#: Where a string read in part may end: after whitespace or a separator, so the part never
#: ends inside a token (half a key the redactor could not know as one).
_BOUNDARY = re.compile(r"[\s,;&'\"()\[\]{}<>]")


def _head(text: str, size: int = _READ) -> str:
    """The first ``size`` characters of ``text``, ending at a boundary (whole tokens only)."""
    if len(text) <= size:
        return text
    part = text[:size]
    last = max((m.start() for m in _BOUNDARY.finditer(part)), default=-1)
    return part[: last + 1] if last >= 0 else ""


class _Preview(reprlib.Repr):
    """``reprlib`` that never cuts a string in its middle (head and tail, as ``reprlib``
    does): a string is read whole up to :data:`_READ` characters, else up to a boundary."""

    def repr_str(self, x: str, level: int) -> str:
        head = _head(x)
        return repr(head) if head is x else repr(head)[:-1] + "..." + repr(head)[-1]

    def repr_instance(self, x: Any, level: int) -> str:
        try:
            text = repr(x)
        except Exception:  # a hostile __repr__: say what it is, not what it says
            return f"<{type(x).__name__}>"
        head = _head(text)
        return text if head is text else head + "..."


_PREVIEW = _Preview()
_PREVIEW.maxlevel = 3
_PREVIEW.maxlist = _PREVIEW.maxtuple = _PREVIEW.maxdict = _PREVIEW.maxset = 4


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(limit - 3, 0)] + "..."


def preview(value: object, limit: int = 80) -> str:
    """A bounded, redacted ``repr`` of ``value`` for error messages: never longer than
    ``limit`` characters, never recursive without bound (deep or huge values are elided),
    and never holding a secret: the text is redacted whole, then cut (a cut never leaves
    half a secret for the redactor to miss)."""
    try:
        text = _PREVIEW.repr(value)
    except Exception:  # a hostile __repr__: say what it is, not what it says
        text = f"<{type(value).__name__}>"
    return _cut(redact(text), limit)


class LifecycleError(Exception):
    """Base class of every error this library raises on purpose."""


#: Each optional extra of the distribution and the top-level modules it brings that the
#: library imports (``pyproject.toml``'s optional dependencies; a test holds them together).
EXTRAS: dict[str, tuple[str, ...]] = {
    "modal": ("modal",),
    "aws": ("boto3", "botocore"),
    "kubernetes": ("kubernetes", "urllib3"),
    "postgres": ("psycopg", "psycopg_pool"),
    "diagrams": ("transitions", "graphviz"),
    "testing": ("hypothesis",),
    "prometheus": ("prometheus_client",),
    "otel": ("opentelemetry",),
}


class MissingExtra(LifecycleError, ImportError):
    """What was asked needs an optional extra that is not installed (ADR 0136).

    The message is one line: what needs it, the extra by name and the one command that
    installs it (``... needs the 'diagrams' extra (transitions is not installed): pip install
    'lifecycle-machines[diagrams]'``); the CLI prints it and exits 4. An ``ImportError``, so
    ``except ImportError`` catches it too.

    Args:
        extra: the extra's name, as ``pip install 'lifecycle-machines[EXTRA]'`` takes it.
        needs: what needs it, for the message (``"lifecycle diagram"``).
        missing: the module that could not be imported, ``None`` if unknown.
    """

    def __init__(self, extra: str, needs: str, missing: str | None = None) -> None:
        self.extra = extra
        self.needs = needs
        self.missing = missing
        self.install = f"pip install 'lifecycle-machines[{extra}]'"
        why = f" ({missing} is not installed)" if missing else ""
        super().__init__(f"{needs} needs the '{extra}' extra{why}: {self.install}", name=missing)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.extra, self.needs, self.missing))

    @classmethod
    def of(cls, error: ImportError, needs: str, extra: str | None = None) -> MissingExtra:
        """The missing extra behind ``error`` (an import that failed): ``error`` itself when
        it is one already, else one naming ``extra`` (by default, the extra that brings the
        module ``error`` names).

        Args:
            error: the failed import.
            needs: what needs the module, for the message.
            extra: the extra to name; by default the one that brings the missing module.

        Returns:
            The error to raise in its place.
        """
        if isinstance(error, MissingExtra):
            return error
        missing = error.name.split(".")[0] if error.name else None
        chosen = extra or (extra_of(missing) if missing else None)
        if chosen is None:
            raise ValueError(f"no extra brings {missing!r}") from error
        return cls(chosen, needs, missing)


def require(extra: str, needs: str) -> None:
    """Raise :class:`MissingExtra` unless every module ``extra`` brings can be imported
    (looked up, not imported: the import stays where the SDK is first called)."""
    import importlib.util

    for module in EXTRAS[extra]:
        try:
            found = importlib.util.find_spec(module)
        except (ImportError, ValueError):  # a finder that refuses it, a broken install
            found = None
        if found is None:
            raise MissingExtra(extra, needs, module)


def extra_of(module: str) -> str | None:
    """The extra that brings the top-level module ``module`` (``None``: none does)."""
    top = module.split(".")[0]
    return next((extra for extra, tops in EXTRAS.items() if top in tops), None)


class UnknownMachine(LifecycleError):
    """A machine name or object kind that no registered machine answers to."""


class UnknownObservation(LifecycleError):
    """An observation that the machine's vocabulary does not name."""


class InvalidObservation(LifecycleError):
    """An observation with missing, extra or wrongly typed fields, or impossible values."""


class InvalidReference(LifecycleError):
    """An object reference whose kind, namespace, name or uid is not bounded text (see the
    input bounds, ADR 0073): refused before anything is read or written."""


def apply_failed(machine: str, ref: object, observation: object, error: BaseException
                 ) -> InvalidObservation:  # fmt: skip
    """The typed refusal for a machine whose ``apply`` (or ``flips``) raised something other
    than a :class:`LifecycleError`: it names the machine, the object and the observation,
    and the runner raises it before anything is written."""
    return InvalidObservation(
        f"{machine}: {type(observation).__name__} could not be applied to "
        f"{brief(ref, 120)}: {type(error).__name__}: {brief(error)}"
    )


def brief(value: object, limit: int = 200) -> str:
    """``str(value)`` redacted, then cut to ``limit`` characters (``<Type>`` when ``str``
    itself fails): for an error message that quotes another error's text."""
    try:
        text = str(value)
    except Exception:
        return f"<{type(value).__name__}>"
    return _cut(redact(_head(text, max(limit * 16, _READ))), limit)


class InvalidTransition(LifecycleError):
    """A (state, observation) pair that the machine's table refuses: no row, no ignore row.

    Args:
        machine: the machine's name.
        state: the object's state (``""`` for a new object).
        observation: the observation's class name.
    """

    def __init__(self, machine: str, state: str, observation: str) -> None:
        self.machine = machine
        self.state = state
        self.observation = observation
        shown = state or '""'
        super().__init__(
            f"{machine}: observation {observation} is not accepted in state {shown} "
            "(the table has no row for this pair)"
        )


class TableError(LifecycleError):
    """A transition table that is malformed: unknown states, guards or duplicate rows."""


class StoreError(LifecycleError):
    """The store could not do what was asked (I/O, database or serialisation failure)."""


class Conflict(StoreError):
    """Optimistic concurrency: the stored version is not the one the write expected.

    Args:
        uid: the object's uid.
        expected: the version the write expected stored.
        actual: the version stored, ``None`` where the store cannot tell (or holds none).
    """

    def __init__(self, uid: str, expected: int, actual: int | None) -> None:
        self.uid = uid
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"write conflict on {uid}: expected version {expected}, store has {actual}"
        )


class CommitUnknown(StoreError):
    """A commit whose connection was lost while it was in flight, and whose outcome could not
    be resolved in time (by its commit token) after reconnecting: it may have landed. Not a
    failure to report: send no fallback for it; if it landed, its events are in the outbox
    and a dispatcher delivers them when the lease ends.

    Args:
        uids: the objects the commit wrote.
        detail: what was lost, for the message.
    """

    def __init__(self, uids: tuple[str, ...], detail: str) -> None:
        self.uids = uids
        super().__init__(detail)


class IdentityMismatch(LifecycleError):
    """A load or commit whose object identity (kind, namespace, name, uid) disagrees with
    the object a store holds under that uid. Nothing is written: a uid names one object.

    Args:
        uid: the uid.
        stored: ``(kind, namespace, name)`` stored under it.
        given: ``(kind, namespace, name)`` of the call.
        machines: ``(stored machine, given machine)`` when those disagree, else ``None``.
    """

    def __init__(
        self,
        uid: str,
        stored: tuple[str, str, str],
        given: tuple[str, str, str],
        *,
        machines: tuple[str, str] | None = None,
    ) -> None:
        self.uid = uid
        self.stored = stored
        self.given = given
        #: (stored machine, given machine) when the machines disagree, else ``None``
        self.machines = machines
        by = "" if machines is None else f" by machine {preview(machines[0])}"
        asked = "" if machines is None else f" by machine {preview(machines[1])}"
        super().__init__(
            f"uid {preview(uid)} is stored as {'/'.join(map(preview, stored))}{by} "
            f"(kind/namespace/name), not {'/'.join(map(preview, given))}{asked}: "
            "a uid names one object"
        )


class TraceError(LifecycleError):
    """A trace line that cannot be replayed; ``str()`` is ``FILE:LINE: what is wrong``, or
    ``FILE: what is wrong`` for the file as a whole (``line`` 0: it cannot be read).

    Args:
        path: what the trace is called (its path, or ``<trace>``).
        line: the bad line's number, from 1; 0 for the file as a whole.
        problem: what is wrong.
    """

    def __init__(self, path: str, line: int, problem: str) -> None:
        self.path = path
        self.line = line
        self.problem = problem
        super().__init__(f"{path}:{line}: {problem}" if line else f"{path}: {problem}")


class UnknownSchema(StoreError):
    """A stored status or journal entry written under a schema version this machine cannot
    read: a newer version, or an older one with no upcaster path to the current one: reading
    it as the current schema could silently lose fields (ADR 0088). Nothing is written;
    ``lifecycle db check`` lists every such record.

    Args:
        machine: the machine's name.
        version: the record's schema version.
        current: the machine's schema version.
        problem: why it cannot be read, saying what to declare.
    """

    def __init__(self, machine: str, version: int, current: int, problem: str) -> None:
        self.machine = machine
        self.version = version
        self.current = current
        super().__init__(
            f"{machine}: a record at schema v{version} (this table: v{current}): {problem}"
        )


class SchemaRefused(LifecycleError):
    """A runner refused to start: its store holds records its machines cannot read (no
    upcaster path) or that a table change did not declare (a fingerprint differing from what
    that version declared). ``findings`` lists them, one line each (machine, version, count,
    one example uid).

    Args:
        findings: the findings, each printed on a line of its own.
    """

    def __init__(self, findings: tuple[object, ...]) -> None:
        self.findings = findings
        lines = "\n".join(f"  {f}" for f in findings)
        super().__init__(
            f"the store holds records these machines cannot read ({len(findings)} finding(s)):"
            f"\n{lines}\nrun `lifecycle db check --store URL` for the full report"
        )
