"""The SQLite store's parts (ADR 0153) hold nothing of the store: the coordinator hands itself
to a part when the part needs its connection, and the marker thread reaches it only weakly.
So a store nobody closes is freed by its last reference, with the collector off, and its
marker thread then ends by itself."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import pytest

from lifecycle import SQLiteStore
from lifecycle.machines import pod

from .helpers import pod_ref, step, t


@pytest.mark.parametrize("group_commit", [False, True], ids=["plain", "group"])
def test_a_store_nobody_closes_is_freed_by_its_last_reference(
    tmp_path: Path, group_commit: bool
) -> None:
    store = SQLiteStore(tmp_path / "s.db", group_commit=group_commit, cache=8)
    ref = pod_ref()
    step(store, pod.CreateRequested(at=t(0)), ref)
    delivered = [e.id for e in store.claim_undelivered()]
    assert delivered
    store.mark_delivered(delivered)  # without group commit: held, and the marker started
    marker = store._marker
    assert (marker is None) == group_commit
    gone = weakref.ref(store)
    gc.disable()
    try:
        del store
        assert gone() is None, "a part (or its thread) holds the store"
    finally:
        gc.enable()
    if marker is not None:
        marker.join(timeout=10)
        assert not marker.is_alive()  # its store is gone: the thread ends
