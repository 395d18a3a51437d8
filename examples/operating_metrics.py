"""Operating it: a runner exporting Prometheus metrics on a loopback port, scraped once.

    python examples/operating_metrics.py

A controller does the same with its real store and emitters, and points Prometheus at the
port (docs/operating/ has a Grafana dashboard and alert rules for these metrics).
"""

from __future__ import annotations

import tempfile
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

from prometheus_client import CollectorRegistry, start_http_server

from lifecycle import MemoryEmitter, ObjectRef, Runner, SQLiteStore
from lifecycle.machines.pod import CreateRequested
from lifecycle.telemetry.prometheus import PrometheusTelemetry


def main(db: str | None = None) -> list[str]:
    db = db or str(Path(tempfile.mkdtemp()) / "operating.db")  # a fresh store each run
    registry = CollectorRegistry()  # a host usually keeps prometheus_client's default REGISTRY
    metrics = PrometheusTelemetry(registry)
    runner = Runner(SQLiteStore(db, owner="controller-0"), [MemoryEmitter()], telemetry=metrics)
    metrics.watch(runner)  # outbox depth and age, pending link intents, emitter stats
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        at = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
        for i in range(3):
            runner.observe(
                ObjectRef("Pod", "ml", f"trainer-{i}", uid=f"uid-{i}"), CreateRequested(at=at)
            )
        port = server.server_address[1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
            text = reply.read().decode()
    finally:
        server.shutdown()
        thread.join(timeout=5)
        runner.store.close()
    wanted = ("lifecycle_transitions_total", "lifecycle_outbox_undelivered")
    lines = [line for line in text.splitlines() if line.startswith(wanted)]
    print("\n".join(lines))
    return lines


if __name__ == "__main__":
    main()
