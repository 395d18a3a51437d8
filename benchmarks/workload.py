"""The shared benchmark workload: one lifecycle of 8 states and 15 transitions, written once
for ``lifecycle`` and once for each baseline, and a seeded observation stream over many objects.

Every implementation is fed the same (object, event) stream, so their costs are comparable.
"""

from __future__ import annotations

import random
from typing import Any, ClassVar, NamedTuple

import attrs

from lifecycle import EventType, Machine, ObjectRef, Observation, Row, Table

N, W = EventType.NORMAL, EventType.WARNING

#: (source, event, target, event type). 8 states, 15 transitions, 10 event names.
EDGES: tuple[tuple[str, str, str, EventType], ...] = (
    ("New", "create", "Provisioning", N),
    ("Provisioning", "provisioned", "Initializing", N),
    ("Provisioning", "fail", "Failed", W),
    ("Initializing", "ready", "Running", N),
    ("Initializing", "fail", "Failed", W),
    ("Running", "degrade", "Degraded", W),
    ("Running", "drain", "Draining", N),
    ("Running", "stop", "Stopped", N),
    ("Degraded", "recover", "Running", N),
    ("Degraded", "drain", "Draining", N),
    ("Draining", "stop", "Stopped", N),
    ("Draining", "abort", "Running", N),
    ("Stopped", "restart", "Provisioning", N),
    ("Stopped", "reset", "New", N),
    ("Failed", "reset", "New", N),
)
STATES = ("New", "Provisioning", "Initializing", "Running", "Degraded", "Draining", "Stopped",
          "Failed")  # fmt: skip
EVENTS = tuple(sorted({e for _, e, _, _ in EDGES}))


# -- lifecycle -------------------------------------------------------------------------------
class BenchStatus(NamedTuple):
    """The fast status record (a NamedTuple: see ADR 0015)."""

    state: str = "New"
    reason: str = ""
    message: str = ""


@attrs.frozen(slots=True)
class BenchAttrsStatus:
    """The same status as a frozen attrs class (the shipped machines' record style)."""

    state: str = "New"
    reason: str = ""
    message: str = ""


def _observation(name: str) -> type[Observation]:
    cls = attrs.make_class(
        name.capitalize(), {}, bases=(Observation,), slots=True, frozen=True, kw_only=True
    )
    return cls


OBSERVATIONS: dict[str, type[Observation]] = {e: _observation(e) for e in EVENTS}

TABLE = Table(
    "bench",
    states=STATES,
    initial="New",
    terminal=(),
    observations=tuple(OBSERVATIONS.values()),
    rows=[
        Row(src, OBSERVATIONS[ev], to=dst, reason=dst, event=kind, message=f"{src} -> {dst}")
        for src, ev, dst, kind in EDGES
    ],
)


class BenchMachine(Machine[BenchStatus]):
    name: ClassVar[str] = "bench"
    kind: ClassVar[str] = "Bench"
    status_type: ClassVar[type[Any]] = BenchStatus
    table: ClassVar[Table] = TABLE
    warning_states: ClassVar[frozenset[str]] = frozenset({"Failed", "Degraded"})

    def initial(self, ref: ObjectRef) -> BenchStatus:
        return BenchStatus()


class BenchAttrsMachine(BenchMachine):
    status_type: ClassVar[type[Any]] = BenchAttrsStatus

    def initial(self, ref: ObjectRef) -> BenchStatus:
        return BenchAttrsStatus()  # type: ignore[return-value]


BENCH = BenchMachine()
BENCH_ATTRS = BenchAttrsMachine()

# -- the dict limit --------------------------------------------------------------------------
DICT_TABLE: dict[tuple[str, str], str] = {(s, e): d for s, e, d, _ in EDGES}


class SlotObject:
    __slots__ = ("flips", "state")

    def __init__(self) -> None:
        self.state = "New"
        self.flips = 0


def dict_step(obj: SlotObject, event: str) -> None:
    old = obj.state
    new = DICT_TABLE[(old, event)]
    if new != old:
        obj.state = new
        obj.flips += 1


# -- the stream --------------------------------------------------------------------------------
def stream(objects: int, per_object: int, seed: int = 7) -> list[tuple[int, str]]:
    """A seeded random walk per object, interleaved round-robin: (object index, event)."""
    rng = random.Random(seed)
    out_edges: dict[str, list[tuple[str, str]]] = {}
    for src, ev, dst, _ in EDGES:
        out_edges.setdefault(src, []).append((ev, dst))
    walks = []
    for _ in range(objects):
        state, walk = "New", []
        for _ in range(per_object):
            ev, state = rng.choice(out_edges[state])
            walk.append(ev)
        walks.append(walk)
    return [(i, walks[i][k]) for k in range(per_object) for i in range(objects)]
