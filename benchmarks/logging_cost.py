"""What a library warning costs (ADR 0098), in microseconds per call, best of 5 rounds:

- *before*: ``structlog.get_logger`` under structlog's default configuration (it printed to
  stdout; here stdout is /dev/null);
- *silent*: the library's logger with nothing configured (only the package's NullHandler);
- *level*: the host raised ``lifecycle`` above WARNING;
- *handler*: the host's StreamHandler (to /dev/null) hears it: redaction and formatting included.

    python -m benchmarks.logging_cost
"""

from __future__ import annotations

import contextlib
import logging
import os
import timeit
from collections.abc import Callable

import structlog

import lifecycle  # noqa: F401  (the package's NullHandler)
from lifecycle._log import get_logger

FIELDS = {"ref": "Pod/ml/trainer-0", "uid": "pod-a", "error": "could not write: database is locked"}
N = 20_000


def per_call(fn: Callable[[], object]) -> float:
    return min(timeit.repeat(fn, number=N, repeat=5)) / N * 1e6


def main() -> None:
    before = structlog.get_logger("lifecycle.runner")
    after = get_logger("lifecycle.runner")
    library = logging.getLogger("lifecycle")
    with open(os.devnull, "w") as devnull:
        with contextlib.redirect_stdout(devnull):
            old = per_call(lambda: before.warning("status write failed", **FIELDS))
        silent = per_call(lambda: after.warning("status write failed", **FIELDS))
        library.setLevel(logging.ERROR)
        level = per_call(lambda: after.warning("status write failed", **FIELDS))
        library.setLevel(logging.NOTSET)
        handler = logging.StreamHandler(devnull)
        library.addHandler(handler)
        heard = per_call(lambda: after.warning("status write failed", **FIELDS))
        library.removeHandler(handler)
    print(f"before (structlog defaults, stdout): {old:7.2f} us/warning")
    print(f"silent (nothing configured):         {silent:7.2f} us/warning")
    print(f"level (lifecycle at ERROR):          {level:7.2f} us/warning")
    print(f"handler (a StreamHandler hears it):  {heard:7.2f} us/warning")


if __name__ == "__main__":
    main()
