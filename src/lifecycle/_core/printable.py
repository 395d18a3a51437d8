"""Text made safe for one line of a terminal: every character that could end a line, move
the cursor, recolour the screen or reorder what follows (C0 and C1 controls, DEL, Unicode
line and paragraph separators, bidirectional overrides and isolates, zero-width joiners)
is written as its escape (``\\n``, ``\\x1b``, ``\\u202e``), so a name or message can never
forge a line of the output it is printed in. :func:`shown` redacts first, then escapes."""

from __future__ import annotations

import re

from .redact import redact

__all__ = ["escape", "shown"]

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
#: Controls, DEL and C1, line/paragraph separators, bidi marks, embeddings, overrides and
#: isolates, zero-width characters, the BOM.
_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ufff9-\ufffb]"
)


def _escaped(m: re.Match[str]) -> str:
    c = m.group()
    named = _NAMED.get(c)
    if named is not None:
        return named
    code = ord(c)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape(text: str) -> str:
    """``text`` with every character that could break or forge a line escaped; ``text``
    itself when it has none."""
    if _UNSAFE.search(text) is None:
        return text
    return _UNSAFE.sub(_escaped, text)


def shown(text: str) -> str:
    """``text`` as it may be printed: redacted, then escaped onto one line."""
    return escape(redact(text))
