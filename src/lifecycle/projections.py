"""Read-side projections computed from stored statuses."""

from __future__ import annotations

from collections import Counter

from .machines import NODECLAIM
from .machines.nodeclaim import BOUND
from .stores.base import Store


def placed(store: Store, pool: str | None = None) -> dict[str, int]:
    """NodePool ``status.placed``: Bound claims per provider (booting pods included, since a
    booting pod binds its claim), for one pool or all. Recomputed from scratch on each call;
    empty when nothing is placed (upstream writes a nil map)."""
    counts: Counter[str] = Counter()
    for record in store.records(NODECLAIM):
        status = record.status
        if status.state == BOUND and (pool is None or status.pool == pool):
            counts[status.provider] += 1
    return dict(counts)
