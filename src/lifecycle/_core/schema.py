"""Versioned records: every stored status and journal entry carries the schema version of the
machine that wrote it, and a machine's upcasters read older versions (ADR 0088).

A machine declares ``schema_version`` (an int, 1 until its records change) and, per older
version N, an :class:`Upcaster` from N's plain-data records to N+1's. Its :class:`Schema` --
the version and a *fingerprint* of the status fields, the observations and their fields, and
the table's states -- is computed once per machine; a store writes it beside each record and
compares it on read: equal (the hot path) loads as before, different upcasts first.

A fingerprint that differs from what its version declared is a table change nobody declared:
the records load best effort (and a warning is logged once), and the start-up check
(:func:`check_store`) refuses to run on them, naming the fix.
"""

from __future__ import annotations

import functools
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from .errors import SchemaRefused, TableError, UnknownSchema
from .logs import library_logger
from .redact import scrub
from .table import Table

if TYPE_CHECKING:
    import logging

__all__ = [
    "Schema",
    "SchemaCount",
    "SchemaFinding",
    "Upcaster",
    "check_store",
    "fingerprint",
    "review",
]


@functools.cache
def _logger() -> logging.Logger:
    """The kernel logs through the standard library only (the structlog face,
    ``lifecycle._log``, sits above the kernel); its record has the shape every library record
    has (ADR 0098): ``event key=%r ...`` with the values as arguments, the redacted fields as
    ``lifecycle``. Made on first use: :mod:`logging` is not imported until a record may be
    made (ADR 0139)."""
    return library_logger("lifecycle.schema")


class Versioned(Protocol):
    """What this module reads of a machine (:class:`~lifecycle.Machine` is one); named here so
    that the kernel's schema module does not import the machine module that imports it."""

    @property
    def name(self) -> str: ...
    @property
    def table(self) -> Table: ...
    @property
    def status_type(self) -> type[Any]: ...
    @property
    def schema_version(self) -> int: ...
    @property
    def upcasters(self) -> Mapping[int, Upcaster]: ...
    @property
    def schema(self) -> Schema: ...
    def load_status(self, data: Any) -> Any: ...
    def dump_status(self, status: Any) -> dict[str, Any]: ...
    def load_observation(self, name: str, at: str, fields: Any) -> Any: ...
    def dump_observation(self, observation: Any) -> dict[str, Any]: ...


StatusUpcast = Callable[[dict[str, Any]], dict[str, Any]]
ObservationUpcast = Callable[[str, dict[str, Any]], tuple[str, dict[str, Any]]]


@attrs.frozen(slots=True)
class Upcaster:
    """How a machine's records of version N become version N+1's (declared in the machine's
    ``upcasters`` under N).

    ``status`` takes N's status as plain data (the dict a store holds, before structuring)
    and returns N+1's: rename a field, rename or split a state, derive a new required field.
    ``observation`` takes a journal entry's observation name and fields (without ``at``) and
    returns N+1's. Either may be left out when it would change nothing. Both may change the
    dict they are given. ``fingerprint`` is version N's fingerprint (as ``lifecycle db
    check`` or :attr:`Schema.fingerprint` showed it before the change): records of version N
    with another fingerprint were written by an undeclared change, and are reported.

    Attributes:
        fingerprint: version N's fingerprint, to tell its records from an undeclared change's.
        status: N's status data -> N+1's; ``None`` when statuses did not change.
        observation: ``(name, fields)`` of N -> N+1's; ``None`` when observations did not.
    """

    fingerprint: str = ""
    status: StatusUpcast | None = None
    observation: ObservationUpcast | None = None


# -- fingerprints ---------------------------------------------------------------------------
def _type_name(tp: Any) -> str:
    """A stable spelling of an annotation: the same for ``"tuple[Condition, ...]"`` (a
    postponed annotation) and the type itself; module paths left out."""
    if isinstance(tp, str):
        return " ".join(tp.replace("typing.", "").split())
    if tp is None or tp is type(None):
        return "None"
    if tp is Ellipsis:
        return "..."
    if isinstance(tp, types.UnionType):
        return " | ".join(_type_name(a) for a in typing.get_args(tp))
    origin = typing.get_origin(tp)
    if origin is not None:
        args = typing.get_args(tp)
        name = getattr(origin, "__qualname__", None) or str(origin).replace("typing.", "")
        if origin is typing.Union:
            return " | ".join(_type_name(a) for a in args)
        return f"{name}[{', '.join(_type_name(a) for a in args)}]" if args else name
    if isinstance(tp, type):
        return tp.__qualname__
    return repr(tp).replace("typing.", "")


def _fields(cls: type[Any]) -> list[list[str]]:
    """``[name, type]`` of each field of a record class (attrs, NamedTuple, or annotated)."""
    if attrs.has(cls):
        return [[f.name, _type_name(f.type)] for f in attrs.fields(cls)]
    hints = getattr(cls, "__annotations__", {})
    names = list(getattr(cls, "_fields", ())) or sorted(hints)
    return [[n, _type_name(hints.get(n))] for n in names]


def describe(machine: Versioned) -> dict[str, Any]:
    """What a machine's fingerprint covers: the status fields and their types, each
    observation's name and fields, and the table's states."""
    observations = sorted(
        (
            [obs.name(), [f for f in _fields(obs) if f[0] != "at"]]
            for obs in machine.table.observations
        ),
        key=lambda o: str(o[0]),
    )
    return {
        "status": _fields(machine.status_type),
        "observations": observations,
        "states": sorted(machine.table.states),
    }


def fingerprint(machine: Versioned) -> str:
    """A short stable hash of :func:`describe`: 12 hex digits."""
    import hashlib  # here: a host that reads no schema does not import it (ADR 0139)
    import json

    text = json.dumps(describe(machine), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


# -- a machine's schema ---------------------------------------------------------------------
@attrs.frozen(slots=True, eq=False)
class Schema:
    """A machine's record schema: ``version`` and ``fingerprint`` (constants, computed once
    per machine) and the upcasters that bring older records to them.

    Attributes:
        machine: the machine's name.
        version: the machine's ``schema_version``.
        fingerprint: a hash of the status fields, observations and states, so a table
            changed without a version bump is found (ADR 0088).
        upcasters: N -> the :class:`Upcaster` from N to N+1.
    """

    machine: str
    version: int
    fingerprint: str
    upcasters: Mapping[int, Upcaster] = attrs.field(factory=dict)
    _warned: set[tuple[int, str]] = attrs.field(factory=set, init=False)

    @classmethod
    def of(cls, machine: Versioned) -> Schema:
        """The schema ``machine`` declares.

        Args:
            machine: the machine.

        Returns:
            Its schema, fingerprint computed.

        Raises:
            TableError: a version that is not a positive int, or an upcaster that does not
                lead below it.
        """
        version = machine.schema_version
        if type(version) is not int or version < 1:
            raise TableError(f"{machine.name}: schema_version must be an int >= 1, got {version!r}")
        ups = dict(machine.upcasters)
        for n, up in ups.items():
            if type(n) is not int or not 1 <= n < version:
                raise TableError(
                    f"{machine.name}: upcasters[{n!r}] must be keyed by an older version "
                    f"(1..{version - 1}): it leads from N to N+1"
                )
            if not isinstance(up, Upcaster):
                raise TableError(f"{machine.name}: upcasters[{n}] must be an Upcaster")
        return cls(machine.name, version, fingerprint(machine), ups)

    def same(self, version: int, fingerprint: str) -> bool:
        """Whether records at ``(version, fingerprint)`` are this schema's own.

        Args:
            version: the records' schema version.
            fingerprint: their fingerprint.

        Returns:
            ``True`` when both match: nothing to upcast.
        """
        return version == self.version and fingerprint == self.fingerprint

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Schema):
            return NotImplemented
        return (self.machine, self.version, self.fingerprint) == (
            other.machine,
            other.version,
            other.fingerprint,
        )

    def __hash__(self) -> int:
        return hash((self.machine, self.version, self.fingerprint))

    def problem(self, version: int, fingerprint: str) -> str | None:
        """Why records at ``(version, fingerprint)`` cannot be trusted by this table, or
        ``None`` (current, or with a declared upcaster path). An empty fingerprint is a
        record written before versions were kept: version 1 by definition (ADR 0088).

        Args:
            version: the records' schema version.
            fingerprint: their fingerprint (``""`` when not kept).

        Returns:
            The problem, saying what to declare; ``None`` when they can be read.
        """
        if type(version) is not int or version < 1:
            return f"{version!r} is not a schema version"
        if version > self.version:
            return (
                f"written by a newer table (v{version}) than this one (v{self.version}): "
                "run the newer release"
            )
        missing = [n for n in range(version, self.version) if n not in self.upcasters]
        if missing:
            return (
                f"no upcaster from v{missing[0]} to v{missing[0] + 1}: declare "
                f"upcasters[{missing[0]}] to read these records"
            )
        declared = (
            self.fingerprint if version == self.version else self.upcasters[version].fingerprint
        )
        if fingerprint and declared and fingerprint != declared:
            if version == self.version:
                return (
                    f"fingerprint {fingerprint} differs from this table's v{version} "
                    f"({declared}): the status, observations or states changed without a "
                    f"version bump -- set schema_version = {version + 1} and declare "
                    f"upcasters[{version}] = Upcaster(fingerprint={fingerprint!r}, ...)"
                )
            return (
                f"fingerprint {fingerprint} differs from what v{version} declared "
                f"({declared}): an undeclared change"
            )
        return None

    def _path(self, version: int, fingerprint: str) -> list[Upcaster]:
        """The upcasters from ``version`` to this one; raises :class:`UnknownSchema`."""
        problem = self.problem(version, fingerprint)
        if problem is not None:
            if "differs" not in problem:
                raise UnknownSchema(self.machine, version, self.version, problem)
            key = (version, fingerprint)
            if key not in self._warned:  # an undeclared change: read best effort, say so once
                self._warned.add(key)
                _undeclared(self.machine, version, fingerprint, problem)
        return [self.upcasters[n] for n in range(version, self.version)]

    def upcast_status(self, data: dict[str, Any], version: int, fingerprint: str) -> dict[str, Any]:
        """A status of ``version`` as plain data, brought to this version.

        Args:
            data: the stored status data; an upcaster may change it in place.
            version: its schema version.
            fingerprint: its fingerprint.

        Returns:
            The data at this version, ready to structure.

        Raises:
            UnknownSchema: no declared path from ``version`` (a newer table wrote it, or an
                upcaster is missing).
        """
        for up in self._path(version, fingerprint):
            if up.status is not None:
                data = up.status(data)
        return data

    def upcast_observation(
        self, name: str, fields: dict[str, Any], version: int, fingerprint: str
    ) -> tuple[str, dict[str, Any]]:
        """A journal entry's observation of ``version`` (name and fields), brought to this
        version.

        Args:
            name: the observation's name.
            fields: its fields, without ``at``.
            version: the entry's schema version.
            fingerprint: its fingerprint.

        Returns:
            ``(name, fields)`` at this version.

        Raises:
            UnknownSchema: no declared path from ``version``.
        """
        for up in self._path(version, fingerprint):
            if up.observation is not None:
                name, fields = up.observation(name, fields)
        return name, fields


def _undeclared(machine: str, version: int, fingerprint: str, problem: str) -> None:
    """The warning of a record an undeclared table change wrote (read best effort)."""
    log = _logger()
    if not log.isEnabledFor(30):  # logging.WARNING
        return
    fields = scrub({"machine": machine, "version": version, "fingerprint": fingerprint,
                    "problem": problem})  # fmt: skip
    template = "record of an undeclared table change" + "".join(f" {k}=%r" for k in fields)
    log.warning(template, *fields.values(), extra={"lifecycle": fields})


# -- reading stored records (what stores call) ----------------------------------------------
def load_status(machine: Versioned, data: Any, version: int, fingerprint: str) -> Any:
    """A stored status (plain data) written under ``(version, fingerprint)``: structured at
    once when that is the machine's schema, upcast first otherwise."""
    schema = machine.schema
    if version == schema.version and fingerprint == schema.fingerprint:
        return machine.load_status(data)
    return machine.load_status(schema.upcast_status(data, version, fingerprint))


def load_observation(
    machine: Versioned, name: str, at: str, fields: Any, version: int, fingerprint: str
) -> Any:
    """A journal entry's observation written under ``(version, fingerprint)``."""
    schema = machine.schema
    if version == schema.version and fingerprint == schema.fingerprint:
        return machine.load_observation(name, at, fields)
    name, fields = schema.upcast_observation(name, fields, version, fingerprint)
    return machine.load_observation(name, at, fields)


def upgraded_status(
    machine: Versioned, data: Any, version: int, fingerprint: str
) -> tuple[str, dict[str, Any]]:
    """For ``lifecycle db upgrade``: a stored status brought to the machine's schema, checked
    by structuring it, as ``(state, plain data)`` to write back."""
    status = load_status(machine, data, version, fingerprint)
    return status.state, machine.dump_status(status)


def upgraded_observation(
    machine: Versioned, name: str, at: str, fields: Any, version: int, fingerprint: str
) -> tuple[str, dict[str, Any]]:
    """For ``lifecycle db upgrade``: a journal entry's observation at the machine's schema,
    checked by structuring it, as ``(name, fields)`` to write back."""
    obs = load_observation(machine, name, at, fields, version, fingerprint)
    return obs.name(), machine.dump_observation(obs)


# -- reports --------------------------------------------------------------------------------
@attrs.frozen(slots=True)
class SchemaCount:
    """One row of a store's ``schema_versions()``: how many records of ``machine`` of one
    ``kind`` (``status``, ``journal`` or ``snapshot``) are stored at ``(version,
    fingerprint)``, and one example uid."""

    machine: str
    kind: str
    version: int
    fingerprint: str
    count: int
    example: str

    def __str__(self) -> str:
        fp = self.fingerprint or "(none recorded)"
        return (
            f"{self.machine} {self.kind}: {self.count} at v{self.version} {fp} "
            f"(e.g. {self.example})"
        )


@attrs.frozen(slots=True)
class SchemaFinding:
    """Records a machine cannot trust: ``count`` says which, ``problem`` why."""

    count: SchemaCount
    problem: str

    def __str__(self) -> str:
        c = self.count
        fp = f" ({c.fingerprint})" if c.fingerprint else ""
        return (
            f"{c.machine}: {c.count} {c.kind} record(s) at schema v{c.version}{fp}, "
            f"e.g. uid {c.example}: {self.problem}"
        )


@attrs.frozen(slots=True)
class SchemaReview:
    """A store's records judged against machines: ``findings`` (unreadable or undeclared),
    ``pending`` (readable, below the current version: ``lifecycle db upgrade`` rewrites
    them) and ``current``."""

    findings: tuple[SchemaFinding, ...]
    pending: tuple[SchemaCount, ...]
    current: tuple[SchemaCount, ...]

    def lines(self) -> list[str]:
        out = [f"FINDING {f}" for f in self.findings]
        out += [f"upgradable {c} (lifecycle db upgrade rewrites them)" for c in self.pending]
        out += [f"current {c}" for c in self.current]
        n = len(self.findings)
        out.append(
            f"schema: {n} finding(s), {sum(c.count for c in self.pending)} record(s) to upgrade"
        )
        return out


def review(counts: Iterable[SchemaCount], machines: Mapping[str, Versioned]) -> SchemaReview:
    """Judge a store's ``schema_versions()`` against ``machines`` (by name); rows of
    machines not among them are another controller's and left out."""
    findings: list[SchemaFinding] = []
    pending: list[SchemaCount] = []
    current: list[SchemaCount] = []
    order = {"status": 0, "journal": 1, "snapshot": 2}
    for c in sorted(
        counts, key=lambda c: (c.machine, order.get(c.kind, 3), c.version, c.fingerprint)
    ):
        machine = machines.get(c.machine)
        if machine is None:
            continue
        schema: Schema = machine.schema
        problem = schema.problem(c.version, c.fingerprint)
        if problem is not None:
            findings.append(SchemaFinding(c, problem))
        elif c.version < schema.version:
            pending.append(c)
        else:
            current.append(c)
    return SchemaReview(tuple(findings), tuple(pending), tuple(current))


def merge_counts(rows: Iterable[tuple[str, str, int, str, int, str]]) -> list[SchemaCount]:
    """``SchemaCount`` rows from ``(machine, kind, version, fingerprint, count, example)``
    tuples (a store's aggregate query)."""
    return [
        SchemaCount(str(m), str(k), int(v), str(f or ""), int(n), str(e))
        for m, k, v, f, n, e in rows
    ]


def check_store(store: object, machines: Mapping[str, Versioned]) -> SchemaReview | None:
    """The start-up check: :class:`SchemaRefused` when ``store`` holds records ``machines``
    cannot read or did not declare. A store without ``schema_versions`` is not checked
    (``None``)."""
    versions = getattr(store, "schema_versions", None)
    if versions is None:
        return None
    found = review(versions(), machines)
    if found.findings:
        raise SchemaRefused(found.findings)
    return found
