"""Declared limits on numbers that size work (ADR 0100).

The input bounds (:mod:`lifecycle._core.bounds`, ADR 0073) are per type: an integer fits 64
bits. A number that decides how much a machine allocates or loops -- a Workflow's group and
node counts, its iterations and retries, a trace fault's ``times`` -- is also bounded by what
it means: each such field declares a limit in the record that holds it, with a default a host
can raise (or lower) for its process::

    from lifecycle.machines.workflow import Partitioned

    Partitioned.limits["groups"]            # 10000, the default
    Partitioned.limits.set("groups", 50_000)  # a host with larger fleets

A value over its limit is refused where the record is built (:meth:`Machine.observation`:
:class:`~lifecycle.InvalidObservation`; a trace: ``FILE:LINE:``, exit 2), so nothing is
written, and nothing accepted can make the machine build more than the limit allows.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import attrs

from .bounds import INT_MAX

__all__ = ["Limit", "Limits", "within_limit"]


@attrs.frozen(slots=True)
class Limit:
    """One declared limit: its field, its default, the value in force, and why it exists."""

    field: str
    default: int
    value: int
    reason: str


class Limits(Mapping[str, int]):
    """The limits of one record's count fields (``field -> limit in force``).

    ``owner`` is where a host finds it (``"workflow.Partitioned.limits"``). Declared with
    ``field=(default, reason)``; :meth:`set` changes one for the process (a
    host whose fleet is larger raises it), :meth:`reset` restores the defaults.

    Args:
        owner: where a host finds it, named in every refusal so the fix is one search away.
        **declared: ``field=(default, reason)`` per count field; the reason says what the
            bound protects (memory, a journal row's size).

    Raises:
        ValueError: a default that is not an int in 1..2**63-1.
    """

    def __init__(self, owner: str, **declared: tuple[int, str]) -> None:
        self.owner = owner
        self._declared = {name: _positive(owner, name, d) for name, (d, _) in declared.items()}
        self._reasons = {name: reason for name, (_, reason) in declared.items()}
        self._values = dict(self._declared)

    def __getitem__(self, field: str) -> int:
        return self._values[field]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v}" for k, v in self._values.items())
        return f"Limits({self.owner}: {shown})"

    def default(self, field: str) -> int:
        """The documented default of ``field``'s limit.

        Args:
            field: the count field.

        Returns:
            Its default, whatever is in force now.
        """
        return self._declared[field]

    def describe(self) -> list[Limit]:
        """Every limit: field, default, value in force, reason.

        Returns:
            One :class:`Limit` per field, in declared order.
        """
        return [
            Limit(name, self._declared[name], self._values[name], self._reasons[name])
            for name in self._values
        ]

    def set(self, field: str, value: int) -> int:
        """Make ``value`` the limit of ``field`` for this process; returns the previous one.
        ``value`` is a positive int (at most the 64-bit bound).

        Args:
            field: the count field.
            value: the new limit.

        Returns:
            The previous limit, to restore it later (a test).

        Raises:
            KeyError: an unknown field (the known ones are listed).
            ValueError: ``value`` out of range.
        """
        if field not in self._values:
            known = ", ".join(self._values)
            raise KeyError(f"{self.owner} declares no limit on {field!r} (known: {known})")
        previous = self._values[field]
        self._values[field] = _positive(self.owner, field, value)
        return previous

    def reset(self) -> None:
        """Every limit back to its default."""
        self._values = dict(self._declared)

    def problem(self, field: str, value: int) -> str | None:
        """Why ``value`` is over ``field``'s limit, or ``None``.

        Args:
            field: the count field.
            value: the count given.

        Returns:
            The refusal's text, naming the limit and where to raise it; ``None`` within it.
        """
        limit = self._values[field]
        if value <= limit:
            return None
        return (
            f"{field} is {value}, more than its limit {limit} "
            f"({self.owner}[{field!r}]; a host may raise it)"
        )


def _positive(owner: str, field: str, value: int) -> int:
    if type(value) is not int or not 1 <= value <= INT_MAX:
        raise ValueError(f"{owner}[{field!r}] must be an int in 1..{INT_MAX}, not {value!r}")
    return value


def within_limit(instance: Any, attribute: attrs.Attribute[Any], value: int | None) -> None:
    """An attrs validator: ``value`` is at most the limit its record class declares in
    ``limits`` for this field (a ``ValueError`` otherwise, which
    :meth:`~lifecycle.Machine.observation` reports as :class:`~lifecycle.InvalidObservation`).

    Args:
        instance: the record being built; its class's ``limits`` hold the bound.
        attribute: the field validated.
        value: the count given; a non-int is left to the field's type check.

    Raises:
        ValueError: ``value`` is over the limit.
    """
    if type(value) is not int:
        return  # not a count: the field's type check says what is wrong
    limits: Limits = type(instance).limits
    problem = limits.problem(attribute.name, value)
    if problem is not None:
        raise ValueError(problem)
