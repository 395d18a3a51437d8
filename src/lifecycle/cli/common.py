"""What every command shares: the exit codes and the one way to say something on stderr."""

from __future__ import annotations

import sys

from .._core.printable import escape
from .._core.redact import redact

#: The exit codes of the CLI (the module's notes say what each means).
EXIT_OK, EXIT_NO, EXIT_REFUSED, EXIT_WRITE_FAILED, EXIT_MISSING_EXTRA = 0, 1, 2, 3, 4


def say(message: str) -> None:
    """One line on stderr, redacted: whatever a message quotes, no secret is printed."""
    text = escape(" ".join(redact(message).split()))  # never more than one line
    print(text if len(text) <= 2000 else text[:1997] + "...", file=sys.stderr)
