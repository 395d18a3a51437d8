"""Scrubbing credentials and tokens out of recorded text (provider error messages can quote
signed URLs, session tokens or key ids). Every trace recorder applies it, so a recorded trace
never holds a secret."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, TypeVar

import attrs

from .observation import Observation

REDACTED = "<redacted>"

_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # AWS access key ids (long-term AKIA, temporary ASIA, and the other documented prefixes).
    (re.compile(r"\b(?:AKIA|ASIA|AIDA|AROA|AGPA|ANPA|ANVA|AIPA)[A-Z0-9]{12,}\b"), REDACTED),
    # Modal token ids and secrets (ak-..., as-...), and connect/bearer tokens.
    (re.compile(r"\b(?:ak|as)-[A-Za-z0-9]{8,}\b"), REDACTED),
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}"), rf"\1 {REDACTED}"),
    # key=value / key: value pairs whose key names a secret (headers, query strings, JSON).
    (
        re.compile(
            r"(?i)((?:x-amz-)?(?:security[-_]?token|session[-_]?token|secret(?:[-_]?access)?"
            r"(?:[-_]?key)?|access[-_]?token|token[-_]?secret|token|password|passwd|signature"
            r"|credential|authorization|api[-_]?key)[\"']?\s*[:=]\s*[\"']?)([^\s&\"',;}]+)"
        ),
        rf"\1{REDACTED}",
    ),
    # Any remaining query-string values of URLs (presigned URLs, connect links).
    (re.compile(r"([?&][A-Za-z0-9._~-]+=)[^&\s\"']+"), rf"\1{REDACTED}"),
)


def redact(text: str) -> str:
    """``text`` with credentials and tokens replaced by ``<redacted>``."""
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def _scrub(value: Any) -> Any:
    """``value`` with every string inside it redacted: strings; tuples (NamedTuples too),
    lists, sets and frozensets; mapping keys and values; nested attrs records. What has
    nothing to redact comes back as the same object."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, tuple | list | set | frozenset):
        cleaned = [_scrub(v) for v in value]
        if all(a is b for a, b in zip(cleaned, value, strict=True)):
            return value
        kind: Any = type(value)
        if hasattr(value, "_fields"):  # a NamedTuple
            return kind._make(cleaned)
        return kind(cleaned)
    if isinstance(value, Mapping):
        pairs = [(_scrub(k), _scrub(v)) for k, v in value.items()]
        if all(a is k and b is v for (a, b), (k, v) in zip(pairs, value.items(), strict=True)):
            return value
        mapping: Any = type(value)
        try:
            return mapping(pairs)
        except TypeError:  # a mapping type that cannot be built from pairs (a proxy)
            return dict(pairs)
    if attrs.has(type(value)):
        changes = {}
        for field in attrs.fields(type(value)):
            if not field.init:
                continue
            old = getattr(value, field.name)
            new = _scrub(old)
            if new is not old:
                changes[field.alias] = new
        return attrs.evolve(value, **changes) if changes else value
    return value


ObsT = TypeVar("ObsT", bound=Observation)


def redact_observation(observation: ObsT) -> ObsT:
    """The same observation with every string in it (nested ones too) redacted."""
    cleaned: ObsT = _scrub(observation)
    return cleaned
