"""A rewind: a store found an object behind what one of its handles acknowledged (ADR 0068,
ADR 0146). Shared by the PostgreSQL and Kubernetes stores."""

from __future__ import annotations

import attrs

__all__ = ["Rewind"]


@attrs.frozen(slots=True)
class Rewind:
    """History went backwards: this store handle acknowledged ``uid`` at ``acknowledged``,
    and the store now holds it at ``found`` (``None``: not at all) -- a failover to a standby
    that had not received those commits, a restored database, or (the status store) a status
    written back by another writer. ``epoch`` is the store's epoch now."""

    uid: str
    acknowledged: int
    found: int | None
    epoch: str

    def __str__(self) -> str:
        found = "nothing" if self.found is None else f"v{self.found}"
        return (
            f"{self.uid}: v{self.acknowledged} was acknowledged, the store now holds {found} "
            f"(epoch {self.epoch or '(first)'}): acknowledged writes were lost"
        )
