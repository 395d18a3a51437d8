"""The fake cluster as a process of its own: :class:`~lifecycle.testing.FakeApiServer` on
loopback, serving the CustomResourceDefinitions of the machines named, until SIGTERM or
SIGINT::

    python -m lifecycle.testing.fake_cluster --kubeconfig fake-kubeconfig job workflow

It writes a kubeconfig whose current context is the server (point ``kubectl``, a controller or
a test's client at it with ``KUBECONFIG=fake-kubeconfig``) and, once it serves, prints one
line: ``fake cluster at http://127.0.0.1:PORT; kubeconfig PATH``. A test in another process,
or a controller started by hand, then talks to it as to a cluster: create, update and delete
objects, read their status and Events, take a Lease. A machine is a shipped machine's name or
a reference (``MODULE:NAME``, ``FILE.py:NAME``), as every ``lifecycle`` command takes; its CRD
is the one ``lifecycle manifests`` writes. Pods, Events and Leases are always served.

In a test of the same process, start :class:`~lifecycle.testing.FakeApiServer` directly and
register what it serves with :func:`serve_crds`.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Iterable, Sequence
from typing import Any

from .._core.errors import LifecycleError
from .._core.machine import Machine

__all__ = ["main", "serve_crds"]


def serve_crds(cluster: Any, machines: Iterable[Machine[Any]]) -> list[str]:
    """Serve on ``cluster`` the CRD ``lifecycle manifests`` writes for each of ``machines``, as
    ``kubectl apply`` of the generated CRDs does on a cluster.

    Args:
        cluster: a running :class:`~lifecycle.testing.FakeApiServer`.
        machines: machines whose kinds the library defines (a Pod or NodeClaim machine is
            refused: their resources are Kubernetes' and Karpenter's own).

    Returns:
        The CRDs' names (``plural.group``), in the order served.

    Raises:
        ManifestError: a machine whose kind the library does not define, or whose status has
            no Kubernetes shape.
    """
    from ..manifests import crd

    served = []
    for machine in machines:
        spec = crd(machine)["spec"]
        version = spec["versions"][0]
        names = spec["names"]
        schema = version["schema"]["openAPIV3Schema"]
        cluster.register_crd(
            spec["group"],
            version["name"],
            names["plural"],
            names["kind"],
            schema,
            namespaced=spec["scope"] == "Namespaced",
        )
        served.append(f"{names['plural']}.{spec['group']}")
    return served


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m lifecycle.testing.fake_cluster",
        description="Serve a validating fake Kubernetes API server on loopback until "
        "SIGTERM or SIGINT, with the CRDs of the machines named.",
    )
    parser.add_argument("machines", nargs="*", metavar="MACHINE", help="whose CRD to serve")
    parser.add_argument(
        "--kubeconfig", required=True, metavar="PATH", help="where to write the kubeconfig"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the fake cluster until SIGTERM or SIGINT (the module's command line).

    Args:
        argv: the arguments after the program name (``None``: the process's own).

    Returns:
        The exit code: 0 after a signal ended it, 2 for a machine that cannot be served.
    """
    from ..cli.targets import machine_named
    from . import FakeApiServer

    args = _parser().parse_args(argv)
    stop = threading.Event()
    try:
        machines = [m for spec in args.machines for m in machine_named(spec, "MACHINE")]
    except LifecycleError as e:  # an unknown name or reference
        print(f"fake_cluster: {e}", file=sys.stderr)
        return 2
    with FakeApiServer() as cluster:
        try:
            served = serve_crds(cluster, machines)
        except LifecycleError as e:
            print(f"fake_cluster: {e}", file=sys.stderr)
            return 2
        cluster.kubeconfig(args.kubeconfig)
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
        crds = f"; CRDs {', '.join(served)}" if served else ""
        print(f"fake cluster at {cluster.url}; kubeconfig {args.kubeconfig}{crds}", flush=True)
        stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
