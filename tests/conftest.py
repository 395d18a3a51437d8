"""Shared fixtures: a fixed epoch, refs, and runner wiring on each store kind; the Hypothesis
profile and the memory cap every test process runs under (ADR 0101).

- Hypothesis: ``make test`` and CI run the ``ci`` profile: derandomized (the same examples on
  every run of one commit), no example database, no timing-based deadline or health check,
  and a failing example printed with its reproduction blob (``@reproduce_failure``), to be
  pinned with ``@example``. ``LIFECYCLE_SOAK=1`` runs the ``soak`` profile: random
  exploration, a new seed each run.
- Memory: before any test runs, the process's address space is capped (``RLIMIT_AS``, soft
  limit) at ``LIFECYCLE_TEST_MEMORY_CAP`` (MiB, default :data:`MEMORY_CAP_MIB`; ``0`` leaves
  it off). An allocation blow-up is then a ``MemoryError`` in the test that made it, with its
  example, never a host killed. Processes a test starts (the CLI, PostgreSQL servers) inherit
  the cap.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import hypothesis
import pytest
from hypothesis import HealthCheck

from lifecycle import MemoryEmitter, MemoryStore, ObjectRef, Runner, SQLiteStore, Store

SOAK = os.environ.get("LIFECYCLE_SOAK") == "1"

hypothesis.settings.register_profile(
    "ci",
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
hypothesis.settings.register_profile(
    "soak", derandomize=False, database=None, deadline=None, print_blob=True
)
# Loaded here, before any test module is imported: a module's own ``settings(...)`` inherits
# from the profile in force when it is built.
PROFILE = "soak" if SOAK else "ci"
hypothesis.settings.load_profile(PROFILE)

#: The default address-space cap of a test process, in MiB. The suite's largest legitimate
#: peak (VmPeak, measured over a whole run) is well under it; see ADR 0101.
MEMORY_CAP_MIB = 6144


def memory_cap() -> int | None:
    """The cap in bytes this run applies, or ``None`` (``LIFECYCLE_TEST_MEMORY_CAP=0``)."""
    raw = os.environ.get("LIFECYCLE_TEST_MEMORY_CAP", str(MEMORY_CAP_MIB))
    try:
        mib = int(raw)
    except ValueError:
        message = f"LIFECYCLE_TEST_MEMORY_CAP must be MiB (an integer), not {raw!r}"
        raise pytest.UsageError(message) from None
    return mib * 2**20 if mib > 0 else None


def pytest_configure(config: pytest.Config) -> None:
    cap = memory_cap()
    if cap is None:
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    if soft == resource.RLIM_INFINITY or soft > cap:
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))


def pytest_report_header(config: pytest.Config) -> str:
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    shown = "none" if soft == resource.RLIM_INFINITY else f"{soft // 2**20} MiB"
    return f"lifecycle: hypothesis profile {PROFILE}, address-space cap {shown}"


EPOCH = datetime(2026, 11, 30, 10, 0, 0, tzinfo=UTC)


def t(seconds: float = 0) -> datetime:
    """A timestamp ``seconds`` after the fixed test epoch."""
    return EPOCH + timedelta(seconds=seconds)


def pod_ref(name: str = "trainer-0", uid: str = "pod-a", namespace: str = "ml") -> ObjectRef:
    return ObjectRef("Pod", namespace, name, uid)


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    s: Store = MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "s.db")
    yield s
    s.close()


@pytest.fixture
def emitter() -> MemoryEmitter:
    return MemoryEmitter()


@pytest.fixture
def runner(store: Store, emitter: MemoryEmitter) -> Runner:
    return Runner(store, [emitter])
