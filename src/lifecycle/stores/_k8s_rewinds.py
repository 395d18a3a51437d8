"""Rewinds of the status-subresource store (ADR 0146): an object's record found behind what
this store handle wrote.

A record lives in the object's status, which any writer of the status can put back: a backup
or GitOps tool restoring a saved ``status.conditions`` (the record goes back to an older
version), or a writer replacing the conditions wholesale (the record is gone). The store would
then hand the lost versions out again, and ``<uid>:<version>:<n>`` would name two events. So:

- **Every handle starts its own epoch**: a random tag drawn when the store is made, carried by
  every event it stamps (``<uid>:<version>:<n>@TAG``, as PostgreSQL's and SQLite's epochs).
  Ids a handle hands out never repeat ids an earlier handle (a controller before its restart)
  handed out, whatever the status went through meanwhile. A redelivered event keeps the id it
  was stored with.
- **A rewind seen is a new epoch**: the handle remembers the last version it wrote of each
  object (bounded). A read that finds an object's record older than that, or gone while the
  object is there, is a :class:`Rewind` -- logged at error level, kept in ``rewinds``, counted
  in ``rewind_count`` -- and the handle draws a new epoch, so versions handed out again get
  ids of their own. A commit whose events were stamped with an epoch this handle has left is
  a :class:`~lifecycle.Conflict`: the runner reads and stamps again.
"""

from __future__ import annotations

import secrets
import threading
from collections import OrderedDict
from collections.abc import Sequence

from .._core.refs import ObjectRef
from .._core.transition import Transition
from .._log import get_logger
from ._rewind import Rewind

__all__ = ["RewindWatch"]

_log = get_logger("lifecycle.stores")
#: Objects whose last written version a handle remembers (the oldest forgotten first).
ACKED_LIMIT = 65536
#: Rewinds kept in ``rewinds`` (``rewind_count`` counts them all).
REWINDS_KEPT = 1000
#: Epochs a handle left that a stale stamp is recognised by.
RETIRED_KEPT = 64


def fresh_epoch() -> str:
    """A new epoch tag for the status store: ``k`` and 48 random bits."""
    return "k" + secrets.token_hex(6)


class RewindWatch:
    """The epoch a Kubernetes store handle stamps, and the rewinds it found. Thread-safe."""

    def __init__(self) -> None:
        self.epoch = fresh_epoch()
        self.rewinds: list[Rewind] = []
        self.rewind_count = 0
        self._acked: OrderedDict[str, int] = OrderedDict()
        self._retired: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def acknowledged(self, uid: str, version: int) -> None:
        """This handle wrote ``uid`` at ``version``."""
        with self._lock:
            if self._acked.get(uid, 0) < version:
                self._acked[uid] = version
            self._acked.move_to_end(uid)
            while len(self._acked) > ACKED_LIMIT:
                self._acked.popitem(last=False)

    def behind(self, uid: str, version: int) -> bool:
        """Whether a record at ``version`` (0: none) is behind what this handle wrote of
        ``uid`` -- a host's cache that lags, or a rewind: read the API server to tell."""
        with self._lock:
            acked = self._acked.get(uid)
        return acked is not None and version < acked

    def seen(self, ref: ObjectRef, found: int | None) -> Rewind | None:
        """A read of the API server found ``ref``'s record at ``found`` (``None``: the object
        is there without a record). Behind what this handle wrote: a rewind, and a new epoch."""
        with self._lock:
            acked = self._acked.get(ref.uid)
            if acked is None or (found is not None and found >= acked):
                return None
            del self._acked[ref.uid]
            old, self.epoch = self.epoch, fresh_epoch()
            self._retired[old] = None
            while len(self._retired) > RETIRED_KEPT:
                self._retired.popitem(last=False)
            rewind = Rewind(ref.uid, acked, found, self.epoch)
            self.rewinds.append(rewind)
            del self.rewinds[:-REWINDS_KEPT]
            self.rewind_count += 1
        _log.error(
            "the object's record went back behind what this store wrote (its status was "
            "written back or its conditions replaced by another writer): new store epoch, "
            "event ids now end in @" + rewind.epoch,
            uid=ref.uid,
            object=f"{ref.kind} {ref.namespace}/{ref.name}",
            acknowledged=acked,
            found=found,
            old_epoch=old,
            epoch=rewind.epoch,
        )
        return rewind

    def stale(self, transitions: Sequence[Transition]) -> bool:
        """Whether ``transitions`` were stamped with an epoch this handle has left."""
        if not transitions:
            return False
        with self._lock:
            return transitions[0].epoch in self._retired
