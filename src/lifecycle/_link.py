"""The :class:`Link` itself: a committed status of one machine -> an observation of another.

It names its source and target machines by name and imports none of them, so a host (and
``import lifecycle``) gets the type without loading the shipped machines; the shipped links
are in :mod:`lifecycle.links`, which imports their machines (ADR 0118).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import attrs

from ._core.observation import Observation
from ._core.refs import ObjectRef

__all__ = ["Derive", "Link"]

Derive = Callable[[ObjectRef, Any, Any, datetime], Sequence[tuple[ObjectRef, Observation]]]


def _nothing(ref: ObjectRef, before: Any, after: Any, at: datetime) -> None:
    return None


def _no_ref(ref: ObjectRef, after: Any) -> ObjectRef:
    raise AssertionError("a fan-out link names its targets itself")


@attrs.frozen(slots=True)
class Link:
    """From machine ``source`` to machine ``target``.

    ``observe(ref, before, after, at)`` turns a committed source status into an observation
    for the target (or ``None``: nothing to tell it); ``target_ref(ref, after)`` names it.
    A link to *several* objects (a Workflow's Jobs) sets ``fan_out`` instead (see
    :meth:`fanning`): ``(ref, before, after, at) -> [(target ref, observation), ...]``.

    Attributes:
        source: the name of the machine whose commits the link reads.
        target: the name of the machine it writes to.
        observe: the committed change -> an observation for the target, or ``None``; pure,
            as it is decided before the source's commit and written in it (ADR 0090).
        target_ref: names the target from the source's ref and committed status.
        fan_out: for a link to several objects, instead of ``observe`` and ``target_ref``.
        direct: observations written as the source controller's direct write (see below).
        by_ref: ``target_ref`` reads the source's ref only (see below).
    """

    source: str
    target: str
    observe: Callable[[ObjectRef, Any, Any, datetime], Observation | None]
    target_ref: Callable[[ObjectRef, Any], ObjectRef]
    fan_out: Derive | None = None
    #: Observations this link carries that are the source controller's *direct* write on the
    #: target: one attempt, a conflict not retried (the intent stays pending and the next pass
    #: writes it again), as upstream's Workflow writing a Job's timeout (ADR 0090).
    direct: frozenset[type[Observation]] = frozenset()
    #: ``target_ref`` reads the source's ref only (never its status): the target is named as
    #: soon as the source is, so a source whose target could not be named (a derived uid
    #: past the input bounds) is refused when it is observed, before anything is written
    #: (ADR 0102), not accepted with a target that can never exist.
    by_ref: bool = False

    @classmethod
    def fanning(
        cls,
        source: str,
        target: str,
        fan_out: Derive,
        direct: frozenset[type[Observation]] = frozenset(),
    ) -> Link:
        """A link to several objects (a Workflow's Jobs).

        Args:
            source: the name of the source machine.
            target: the name of the target machine.
            fan_out: ``(ref, before, after, at) -> [(target ref, observation), ...]``.
            direct: observations written as direct writes (one attempt each).

        Returns:
            The link.
        """
        return cls(source, target, _nothing, _no_ref, fan_out, direct)

    def derive(
        self, ref: ObjectRef, before: Any, after: Any, at: datetime
    ) -> Sequence[tuple[ObjectRef, Observation]]:
        """What the committed change ``before -> after`` of ``ref`` tells the targets.

        Args:
            ref: the source object.
            before: its status before the commit.
            after: its committed status.
            at: the observation's time, stamped on what the targets are told.

        Returns:
            ``(target ref, observation)`` pairs; empty when there is nothing to tell.
        """
        if self.fan_out is not None:
            return self.fan_out(ref, before, after, at)
        derived = self.observe(ref, before, after, at)
        if derived is None:
            return ()
        return ((self.target_ref(ref, after), derived),)
