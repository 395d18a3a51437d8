"""Writing a machine: what a table author needs beyond the top level (ADR 0035).

The top level (:mod:`lifecycle`) holds what a host needs to run machines -- :class:`Machine`,
:class:`Table`, :class:`Row` and :func:`ignore` among them, enough for the quick-starts. Here
is the rest of a table's vocabulary::

    from lifecycle.tables import ANY, SAME, Action, Condition, Verdict

- :data:`ANY` (a row matching every source state) and :data:`SAME` (a target keeping the
  state), :class:`Action` (an action event a row sends before the write, ADR 0012);
- the ``Guard`` and ``Effect`` signatures a row's ``guard=`` and ``effect=`` functions have,
  and ``Deadline``, a timer row's ``deadline=`` (when a ``Tick`` next changes the status), with
  :func:`no_timer` for a ``Tick`` row that only restates the status (ADR 0149);
- :class:`Verdict` (a declared verdict a machine flips besides its exclusive state, ADR 0001)
  and :class:`Flip` (one flip of a status, what a ``flips`` function returns);
- :class:`Condition` (a Kubernetes-style condition in a status, ADR 0010) and
  :class:`EventType`;
- :class:`Schema` and :class:`Upcaster` (a machine's record version and how older records are
  read, ADR 0088);
- :class:`Limits` and :func:`within_limit` (a record's declared limits on the numbers that
  size work, and the validator that holds them, ADR 0100);
- :func:`enter` (what a row's effect returns to take the row and set more fields, evolved
  from the status so the fields it does not name survive);
- :func:`allow` and :func:`allow_refused` (a machine's ``analysis_allowances``: findings of
  ``lifecycle check`` that are deliberate, each with its reason, ADR 0085).
"""

from __future__ import annotations

from ._core.analysis import allow, allow_refused
from ._core.limits import Limits, within_limit
from ._core.machine import Machine, Verdict, enter
from ._core.refs import Condition, EventType
from ._core.schema import Schema, Upcaster
from ._core.table import ANY, SAME, Action, Deadline, Effect, Guard, Row, Table, ignore, no_timer
from ._core.transition import Flip

__all__ = [
    "ANY",
    "SAME",
    "Action",
    "Condition",
    "Deadline",
    "Effect",
    "EventType",
    "Flip",
    "Guard",
    "Limits",
    "Machine",
    "Row",
    "Schema",
    "Table",
    "Upcaster",
    "Verdict",
    "allow",
    "allow_refused",
    "enter",
    "ignore",
    "no_timer",
    "within_limit",
]
