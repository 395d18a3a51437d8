"""Remembered unchanged polls: a status that an observation left as it was is left as it was
by the next observation equal to it in every field the answer can depend on (ADR 0166).

A polling host reports every object it owns every cycle, and almost every report changes
nothing: the machine's step runs, finds every field as it was, and returns the status. A
step is pure (ADR 0003), so its answer depends only on the status and the observation's
fields; this module remembers, per status *object*, the observation class and field values
that left it unchanged, and answers the next such observation without running the step.

Which fields count: every field but ``at`` always (their values and their exact types, so a
``1`` never stands for a ``1.0`` or a ``True``); ``at`` only when the step *uses* it. Whether it
does is found once, when the memory is made: the step runs again on the same observation with
an ``at`` that raises on any use (:class:`Probed`, a ``BaseException`` so no ``except
Exception`` in a step swallows it). A step that answers without touching ``at`` -- a poll whose
effect reads ``at`` only to stamp a change it does not make -- gives the same answer at any
time; one that compares ``at`` with a deadline, formats it or stores it is remembered with
``at`` among its fields (it then matches only a repeat of the very same report).

The memory holds each status weakly (a status a store no longer holds is forgotten with it,
so a replay of a long trace keeps only its live statuses' entries; a status that cannot be
referenced weakly, such as a named tuple, is not remembered), matches it by identity (never
by a reused ``id``), is bounded (:data:`LIMIT` entries per machine, forgotten at once when
full), and is only ever a shortcut: a status it does not know, or an observation that differs
in a counted field, runs the step as before.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, NoReturn

import attrs

from .codegen import compile_function

#: Entries per machine before the memory is forgotten at once (a fleet larger than this
#: still runs every poll's step when it does not fit: slower, never wrong).
LIMIT = 1 << 18


class Held(weakref.ref[Any]):
    """A remembered status's entry: a weak reference to the status (the entry is removed when
    the status dies) carrying the observation class that left it unchanged, its key function,
    the key, the ``at`` it was left unchanged at (or :data:`FREE`) and whether ``at`` was
    probed. One object per status: the cyclic collector walks one, not two."""

    __slots__ = ("at", "cls", "id", "key", "key_of", "memory", "probed")
    at: Any
    cls: type[Any]
    id: int
    key: tuple[Any, ...]
    key_of: Callable[[Any], tuple[Any, ...]]
    memory: dict[int, Held]
    probed: bool

    def __new__(cls, status: Any, memory: dict[int, Held]) -> Held:
        held = super().__new__(cls, status, _forget)
        held.id, held.memory = id(status), memory
        return held

    def __init__(self, status: Any, memory: dict[int, Held]) -> None:
        super().__init__(status, _forget)  # type: ignore[call-arg]


#: A status's entry in a machine's memory.
Entry = Held


def _forget(held: Held) -> None:
    """The status ``held`` referred to is gone: its entry too (unless a newer one took the
    key, when an ``id`` was reused before this ran)."""
    if held.memory.get(held.id) is held:
        held.memory.pop(held.id, None)


#: An entry's ``at`` when the step does not use it: any time matches.
FREE: Any = object()


class Probed(BaseException):
    """The probing ``at`` was used: the step's answer may depend on the observation's time."""


def _refuse(*_: Any, **__: Any) -> NoReturn:
    raise Probed


class _Poison(datetime):
    """A time that raises :class:`Probed` on any use: compared, hashed, formatted, added to,
    tested for truth or asked for an attribute. Only its identity and its class are free."""

    __slots__ = ()

    def __getattribute__(self, name: str) -> Any:
        raise Probed

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _refuse
    __hash__ = __bool__ = __format__ = __str__ = __repr__ = _refuse
    __add__ = __radd__ = __sub__ = __rsub__ = _refuse
    __reduce__ = __reduce_ex__ = __copy__ = __deepcopy__ = _refuse


#: The probing time (its value is never read: every use raises first).
POISON = _Poison(1, 1, 1, tzinfo=UTC)

#: Per observation class: its key function (the values and exact types of every field but
#: ``at``), or ``None`` for a class this module does not remember (not an attrs class, or no
#: ``at`` field).
_KEYS: dict[type[Any], Callable[[Any], tuple[Any, ...]] | None] = {}


def keys(cls: type[Any]) -> Callable[[Any], tuple[Any, ...]] | None:
    """``cls``'s key function, compiled once per class: the values and exact types (a ``1``
    never stands for a ``1.0`` or a ``True``) of every field but ``at``."""
    found = _KEYS.get(cls, False)
    if found is not False:
        return found  # type: ignore[return-value]
    made = None
    if attrs.has(cls):
        names = [f.name for f in attrs.fields(cls)]
        if "at" in names:
            made = _key(cls, [n for n in names if n != "at"])
    _KEYS[cls] = made
    return made


def _key(cls: type[Any], names: list[str]) -> Callable[[Any], tuple[Any, ...]]:
    reads = "".join(f"    v{i} = o.{n}\n" for i, n in enumerate(names))
    values = [f"v{i}" for i in range(len(names))] + [f"v{i}.__class__" for i in range(len(names))]
    source = f"def key(o):\n{reads}    return ({', '.join(values)}{',' if values else ''})\n"
    owner = f"unchanged.key[{cls.__module__}.{cls.__qualname__}]"
    key: Callable[[Any], tuple[Any, ...]] = compile_function("key", source, {}, owner=owner)
    return key


def at_free(step: Callable[[Any, Any], Any], status: Any, obs: Any) -> bool:
    """Whether ``step`` leaves ``status`` unchanged on ``obs`` without using its ``at`` (so at
    any time): ``step`` runs once more on ``obs`` with :data:`POISON` for ``at``."""
    try:
        probe = attrs.evolve(obs, at=POISON)
        after = step(status, probe)
        return after is status or bool(after == status)
    except Probed:
        return False
    except Exception:  # the probe itself failed: counted as using ``at``
        return False


def remember(
    memory: dict[int, Entry], step: Callable[[Any, Any], Any], status: Any, obs: Any
) -> None:
    """Remember that ``step`` left ``status`` unchanged on ``obs``: at first with its ``at``
    (an observation seen once is never probed); when an observation equal but for ``at``
    leaves it unchanged again (a poll), whether ``at`` counts at all is probed, once."""
    cls = obs.__class__
    key_of = keys(cls)
    if key_of is None:
        return
    key = key_of(obs)
    at = obs.at
    old = memory.get(id(status))
    if old is not None and old() is status and old.cls is cls and old.key == key:
        if not old.probed:  # a poll: whether ``at`` counts at all, found once
            old.probed = True
            old.at = FREE if at_free(step, status, obs) else at
        elif old.at is not FREE:
            old.at = at
        return
    try:
        held = Held(status, memory)
    except TypeError:  # not weakly referable: not remembered
        return
    held.cls, held.key_of, held.key, held.at, held.probed = cls, key_of, key, at, False
    if len(memory) >= LIMIT:
        memory.clear()
    memory[id(status)] = held
