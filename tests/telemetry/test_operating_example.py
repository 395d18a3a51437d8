"""examples/operating_metrics.py, which the README's "Operating it" section points to, runs and
shows what it says: the transitions it made and an empty outbox, scraped over HTTP."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

pytest.importorskip("prometheus_client")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "operating_metrics.py"


def test_the_operating_example_scrapes_its_own_metrics(tmp_path: Path) -> None:
    main = runpy.run_path(str(EXAMPLE))["main"]
    lines = main(str(tmp_path / "o.db"))
    assert (
        'lifecycle_transitions_total{from="",machine="pod",to="Provisioning",type="Normal"} 3.0'
        in lines
    )
    assert 'lifecycle_outbox_undelivered{store="sqlite"} 0.0' in lines
