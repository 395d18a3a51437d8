"""What redaction costs per message on the emit path: the library's redactor against the
``detect-secrets`` plugins (ADR 0080), interleaved in one process.

    PYTHONPATH=/path/to/detect-secrets python -m benchmarks.redaction_cost

``detect-secrets`` is not a dependency: install it anywhere (``pip install --target DIR
detect-secrets``) and put DIR on ``PYTHONPATH``; without it only the library's figures print.
Two ways of asking detect-secrets are timed: ``scan_line`` (its documented ad-hoc API, which
rebuilds its filter cache per call) and its plugins' ``analyze_line`` directly (the lower bound
a wrapper could reach). Each figure is the best of several interleaved rounds, in microseconds
per message; it also prints how many corpus secrets each leaves in the text.
"""

from __future__ import annotations

import statistics
import timeit
from collections.abc import Callable
from typing import Any

from lifecycle._core.redact import redact

#: Event messages as the shipped machines and adapters write them: no secret in them.
PLAIN = (
    "external instance is running",
    "InsufficientInstanceCapacity: We currently do not have sufficient p5.48xlarge capacity "
    "in the Availability Zone you requested (us-east-1a).",
    "poll of sandbox sb-5KjsW4mLBlZ0Lp8vvQtXoD failed: Sandbox.poll timed out after 10s",
    "preempted: spot instance reclaimed (state terminated: Server.SpotInstanceTermination)",
    "certification gpu-burn-0 passed 3 of 3 checks on node ip-10-0-1-17.ec2.internal",
)
#: Provider errors with a secret in them.
LEAKY = (
    "ClientError: An error occurred (AuthFailure): AWS was not able to validate "
    "AKIAIOSFODNN7EXAMPLE wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "could not connect to postgresql://admin:Sup3r-S3cret!@db:5432/app",
    'AuthError: {"password": "hunter2x", "token": "ghp_abcdefghijABCDEFGHIJ0123456789abcd"}',
)


_KEEP: list[Any] = []


def _detect_secrets() -> dict[str, Callable[[str], str]]:
    try:
        from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
        from detect_secrets.core.scan import scan_line
        from detect_secrets.settings import default_settings
    except ImportError:
        return {}
    settings = default_settings()
    settings.__enter__()  # the plugins read the global settings: entered for the process,
    _KEEP.append(settings)  # and kept alive (collecting it would restore the old settings)
    plugins = [cls() for cls in get_mapping_from_secret_type_to_class().values()]

    def replace(text: str, found: Any) -> str:
        for secret in found:
            value = getattr(secret, "secret_value", None) or str(secret)
            if value:
                text = text.replace(value, "<redacted>")
        return text

    def via_scan_line(text: str) -> str:
        return replace(text, list(scan_line(text)))

    def via_plugins(text: str) -> str:
        found = []
        for plugin in plugins:
            found.extend(plugin.analyze_line(filename="x", line=text, line_number=0))
        return replace(text, found)

    return {"detect-secrets scan_line": via_scan_line, "detect-secrets plugins": via_plugins}


def per_message(fn: Callable[[str], str], messages: tuple[str, ...], rounds: int) -> float:
    """Best-of-``rounds`` microseconds per message."""
    timer = timeit.Timer(lambda: [fn(m) for m in messages])
    loops = max(1, 2000 // len(messages))
    best = min(timer.repeat(repeat=rounds, number=loops))
    return best / (loops * len(messages)) * 1e6


def main() -> None:
    contenders: dict[str, Callable[[str], str]] = {"lifecycle redact": redact}
    contenders.update(_detect_secrets())
    results: dict[str, dict[str, list[float]]] = {n: {"plain": [], "leaky": []} for n in contenders}
    for _ in range(5):  # interleaved: a noisy neighbour slows every contender alike
        for name, fn in contenders.items():
            results[name]["plain"].append(per_message(fn, PLAIN, 3))
            results[name]["leaky"].append(per_message(fn, LEAKY, 3))
    base = min(results["lifecycle redact"]["plain"])
    print(f"{'contender':28} {'plain µs':>10} {'leaky µs':>10} {'ratio':>8}")
    for name, r in results.items():
        plain, leaky = min(r["plain"]), min(r["leaky"])
        spread = statistics.pstdev(r["plain"]) / plain * 100
        print(f"{name:28} {plain:10.1f} {leaky:10.1f} {plain / base:7.0f}x  (±{spread:.0f} %)")
    from tests.test_redaction_corpus import CORPUS, ORDINARY

    for name, fn in contenders.items():
        left = sum(1 for c in CORPUS if any(s in fn(c.text) for s in c.secrets))
        changed = sum(1 for text in ORDINARY if fn(text) != text)
        print(
            f"{name:28} corpus shapes with a surviving secret: {left} of {len(CORPUS)}; "
            f"ordinary texts changed: {changed} of {len(ORDINARY)}"
        )
    for settings in _KEEP:
        settings.__exit__(None, None, None)


if __name__ == "__main__":
    main()
