"""How the status-subresource store writes its record into a condition's message (ADR 0144).

The record is JSON (format 1, readable with ``kubectl``) while it fits the bound; past it, the
same JSON deflated and base64-encoded inside ``{"format": 2, "zlib": ...}`` (a reader of
format 1 only refuses it by name, never misreads it). Long text is kept once and cut with a
marker: an outbox row's message at :data:`NOTE_CHARS` (what a Kubernetes Event's note holds;
the status keeps it), the status's own strings at :data:`TEXT_CHARS` when nothing else fits.
"""

from __future__ import annotations

import base64
import binascii
import json
import threading
import zlib
from collections import OrderedDict
from typing import Any

from .._core.redact import redact

#: The record's plain JSON (``kubectl`` reads it as it is).
PLAIN = 1
#: The record's JSON deflated (zlib) and base64-encoded: ``{"format": 2, "zlib": "..."}``.
DEFLATED = 2
#: The condition's message when the record is in a status field of its own:
#: ``{"field": "<name>", "format": 3}``.
IN_FIELD = 3
#: An outbox row's message is cut past this many characters (an Event's note holds 1 KiB).
NOTE_CHARS = 1024
#: A string of the stored status is cut past this many characters, when the record does not
#: fit the bound otherwise.
TEXT_CHARS = 4096
#: The cuts tried in turn on the status's strings until the record fits.
TEXT_CUTS = (TEXT_CHARS, 1024, 256)
#: The most a deflated record may inflate to (a hostile record is refused, not inflated).
MAX_INFLATED = 16 * 1024 * 1024


def cut(text: str, limit: int) -> str:
    """``text`` itself, or its first characters and a marker saying how many were cut, in
    ``limit`` characters in all."""
    if len(text) <= limit:
        return text
    marker = f"... [truncated {len(text)} characters]"
    return text[: max(limit - len(marker), 0)] + marker


def cut_row(row: dict[str, Any]) -> dict[str, Any]:
    """An outbox row whose message holds at most :data:`NOTE_CHARS` characters (a secret is
    redacted before the cut, so half of one is never kept)."""
    message = row.get("message")
    if isinstance(message, str) and len(message) > NOTE_CHARS:
        return {**row, "message": cut(redact(message), NOTE_CHARS)}
    return row


def cut_strings(value: Any, limit: int = TEXT_CHARS) -> Any:
    """``value`` (plain data) with every string longer than ``limit`` cut."""
    if isinstance(value, str):
        return cut(value, limit)
    if isinstance(value, list):
        return [cut_strings(v, limit) for v in value]
    if isinstance(value, dict):
        return {k: cut_strings(v, limit) for k, v in value.items()}
    return value


def dumps(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def size(message: str) -> int:
    return len(message.encode("utf-8"))


def pack(record: dict[str, Any], bound: int) -> str | None:
    """The condition message for ``record`` (format 1 inside): plain JSON when it fits
    ``bound`` bytes, else deflated when that fits, else ``None``."""
    plain = dumps(record)
    if size(plain) <= bound:
        return plain
    deflated = deflate(plain)
    return deflated if size(deflated) <= bound else None


def deflate(plain: str) -> str:
    data = base64.b64encode(zlib.compress(plain.encode("utf-8"), 6)).decode("ascii")
    return dumps({"format": DEFLATED, "zlib": data})


_READ: OrderedDict[str, Any] = OrderedDict()
_READ_LOCK = threading.Lock()


def pointer(field: str) -> str:
    """The condition message that points at the record in ``status.<field>``."""
    return dumps({"field": field, "format": IN_FIELD})


def pointed(message: str) -> str | None:
    """The status field a condition message points at, or ``None`` (it is the record)."""
    if len(message) > 200 or not message.startswith('{"field":'):
        return None
    try:
        data = json.loads(message)
    except ValueError:
        return None
    field = data.get("field") if isinstance(data, dict) else None
    ok = isinstance(field, str) and data.get("format") == IN_FIELD and field.isidentifier()
    return field if ok else None


def unpack(message: str) -> Any:
    """The record a condition message holds (a format 2 one inflated); ``ValueError`` when it
    is not JSON, or not a deflated record that inflates within :data:`MAX_INFLATED`. The
    last few records read are kept (one object's record is read several times per commit):
    what is returned is shared, never to be changed."""
    with _READ_LOCK:
        found = _READ.get(message)
        if found is not None:
            _READ.move_to_end(message)
            return found
    data = _unpack(message)
    if 256 < len(message) <= 64 * 1024:  # worth keeping, and a condition's size at most
        with _READ_LOCK:
            _READ[message] = data
            while len(_READ) > 16:
                _READ.popitem(last=False)
    return data


def _unpack(message: str) -> Any:
    data = json.loads(message)
    if not isinstance(data, dict) or data.get("format") != DEFLATED:
        return data
    try:
        raw = base64.b64decode(str(data["zlib"]), validate=True)
        inflater = zlib.decompressobj()
        plain = inflater.decompress(raw, MAX_INFLATED)
        if inflater.unconsumed_tail:
            raise ValueError(f"the deflated record inflates past {MAX_INFLATED} bytes")
        return json.loads(plain.decode("utf-8"))
    except (KeyError, binascii.Error, zlib.error, UnicodeDecodeError) as e:
        raise ValueError(f"a deflated record that does not inflate: {e}") from e
