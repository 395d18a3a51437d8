"""The synchronous and the asyncio runner answer the protocol's requests the same way: one
core (``lifecycle._batch.answering``) that both drive, the one sending each store call's
value back, the other awaiting it (ADR 0154). For any store shape (batch methods or not, a
batch refused for an impostor, an item's commit failing) and any request, both make the same
store calls in the same order and give the same answer."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from lifecycle import _batch, aio
from lifecycle._batch import Commit, Load, Mark, Pause
from lifecycle._core.errors import IdentityMismatch, StoreError
from lifecycle._protocol import RetryPolicy
from lifecycle.stores.base import CommitItem


class _Store:
    """Records each call; ``fail`` names the uids whose own commit or load fails (an
    impostor, or a store error), ``refuse_batch`` makes the batch methods refuse."""

    def __init__(self, *, refuse_batch: bool, fail: dict[str, str]) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.refuse_batch = refuse_batch
        self.fail = fail

    def _outcome(self, uid: str, value: Any) -> Any:
        kind = self.fail.get(uid)
        if kind == "impostor":
            raise IdentityMismatch(uid, ("Pod", "a", "b"), ("Pod", "a", "c"))
        if kind == "error":
            raise StoreError(f"{uid}: no")
        return value

    def load(self, machine: Any, ref: str) -> Any:
        self.calls.append(("load", ref))
        return self._outcome(ref, f"record {ref}")

    def commit(self, machine: Any, ref: str, expected: int, *rest: Any) -> Any:
        self.calls.append(("commit", ref))
        return self._outcome(ref, expected + 1)

    def mark_delivered(self, ids: Any) -> None:
        self.calls.append(("mark", tuple(ids)))


class _BatchStore(_Store):
    """A store with the batch methods (SQLite's, PostgreSQL's)."""

    def load_many(self, items: Any) -> Any:
        self.calls.append(("load_many", tuple(r for _, r in items)))
        if self.refuse_batch:
            raise IdentityMismatch("x", ("Pod", "a", "b"), ("Pod", "a", "c"))
        return [f"record {r}" for _, r in items]

    def commit_many(self, items: Any) -> Any:
        self.calls.append(("commit_many", tuple(c.ref for c in items)))
        if self.refuse_batch:
            raise IdentityMismatch("x", ("Pod", "a", "b"), ("Pod", "a", "c"))
        return [c.expected + 1 for c in items]


class _Awaited:
    """The same store behind coroutines, as an asyncio store is."""

    def __init__(self, store: _Store) -> None:
        self.store = store

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.store, name)

        async def call(*args: Any) -> Any:
            return method(*args)

        return call


def _shown(answer: Any) -> list[Any]:
    """An answer with its errors as (type, text): an exception equals only itself."""
    return [(type(a), str(a)) if isinstance(a, Exception) else a for a in answer or ()]


def _outcome(run: Any) -> tuple[str, Any]:
    try:
        answer = run()
    except (StoreError, IdentityMismatch) as e:
        return "raised", (type(e), str(e))
    return "ok", _shown(answer)


UIDS = ["u1", "u2", "u3"]


@settings(max_examples=80, deadline=None)
@given(
    batch=st.booleans(),
    refuse_batch=st.booleans(),
    fail=st.dictionaries(st.sampled_from(UIDS), st.sampled_from(["impostor", "error"])),
    kind=st.sampled_from(["load", "commit", "mark", "pause"]),
    size=st.integers(1, 3),
)
def test_both_drivers_make_the_same_calls_and_answers(
    batch: bool, refuse_batch: bool, fail: dict[str, str], kind: str, size: int
) -> None:
    uids = UIDS[:size]
    slept: dict[str, list[float]] = {"sync": [], "async": []}
    request: Any
    if kind == "load":
        request = Load(tuple((None, u) for u in uids))  # type: ignore[misc]
    elif kind == "commit":
        request = Commit(tuple(CommitItem(None, u, 1, None, None, ()) for u in uids))  # type: ignore[arg-type]
    elif kind == "mark":
        request = Mark(tuple(uids))
    else:
        request = None
    kind_of_store = _BatchStore if batch else _Store
    sync_store = kind_of_store(refuse_batch=refuse_batch, fail=fail)
    async_store = kind_of_store(refuse_batch=refuse_batch, fail=fail)
    landed_sync: list[Any] = []
    landed_async: list[Any] = []

    def sync_request() -> Any:
        return request or Pause(RetryPolicy(sleep=slept["sync"].append), 0.5)

    def async_request() -> Any:
        return request or Pause(RetryPolicy(sleep=slept["async"].append), 0.5)

    sync = _outcome(lambda: _batch.answer(sync_store, sync_request(), landed_sync))
    awaited = _outcome(
        lambda: asyncio.run(aio.answer(_Awaited(async_store), async_request(), landed_async))
    )
    assert awaited == sync
    assert async_store.calls == sync_store.calls
    assert _shown(landed_async) == _shown(landed_sync)
    assert slept["async"] == slept["sync"]
