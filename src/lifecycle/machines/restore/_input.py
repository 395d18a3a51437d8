"""Reading the offline check's two files: bounded YAML, and a strict reading of each field.

A manifest or target file is untrusted input. It is read within fixed bounds (size, nesting,
string length, list length), YAML anchors, aliases and merge keys are refused (an alias can
expand a few hundred bytes into gigabytes), and every field the gates read has one type: a
wrong type is an :class:`InputError` naming the field path, never a coercion. Every message
is one bounded line.
"""

from __future__ import annotations

import functools
import importlib
import math
import re
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from ..._core.errors import LifecycleError, preview

#: A manifest is a few KiB; anything above this is refused before parsing.
MAX_FILE_BYTES = 1024 * 1024
#: Nesting depth of any YAML or JSON document (the manifest schema needs 4).
MAX_DEPTH = 32
#: Characters in one string field (PATH_MAX is 4096).
MAX_TEXT = 4096
#: Items in one list or mapping the gates read.
MAX_ITEMS = 1024
#: Characters of one error message line.
MAX_MESSAGE = 400

T = TypeVar("T")


class InputError(LifecycleError, ValueError):
    """A file the offline check cannot read as a manifest or target facts; one line."""

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))


def one_line(text: str, limit: int = MAX_MESSAGE) -> str:
    """``text`` on one line, at most ``limit`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


# -- loading ------------------------------------------------------------------------------------
def _yaml() -> Any:
    return importlib.import_module("yaml")  # a dependency, but untyped: Any on purpose


@functools.cache
def _loader() -> Any:
    """A ``SafeLoader`` that refuses anchors, aliases, merge keys, duplicate keys and nesting
    deeper than :data:`MAX_DEPTH`, all while composing (before anything is expanded)."""
    yaml = _yaml()

    def compose_node(self: Any, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise yaml.composer.ComposerError(
                None, None, "YAML anchors and aliases are not accepted", event.start_mark
            )
        self.lifecycle_depth = getattr(self, "lifecycle_depth", 0) + 1
        try:
            if self.lifecycle_depth > MAX_DEPTH:
                raise yaml.composer.ComposerError(
                    None, None, f"nested deeper than {MAX_DEPTH} levels", event.start_mark
                )
            return yaml.SafeLoader.compose_node(self, parent, index)
        finally:
            self.lifecycle_depth -= 1

    def construct_mapping(self: Any, node: Any, deep: bool = False) -> dict[Any, Any]:
        if not isinstance(node, yaml.MappingNode):
            raise yaml.constructor.ConstructorError(
                None, None, "expected a mapping", node.start_mark
            )
        mapping: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise yaml.constructor.ConstructorError(
                    None, None, "merge keys (<<) are not accepted", key_node.start_mark
                )
            key = self.construct_object(key_node, deep=deep)
            try:
                seen = key in mapping
            except TypeError:
                raise yaml.constructor.ConstructorError(
                    None, None, "a mapping key must be a scalar", key_node.start_mark
                ) from None
            if seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {preview(key)}", key_node.start_mark
                )
            mapping[key] = self.construct_object(value_node, deep=deep)
        return mapping

    return type(
        "BoundedSafeLoader",
        (yaml.SafeLoader,),
        {"compose_node": compose_node, "construct_mapping": construct_mapping},
    )


def load_document(path: str) -> Any:
    """The YAML (or JSON) document at ``path``, within the bounds; :class:`InputError` else."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror or e}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise InputError(f"larger than {MAX_FILE_BYTES} bytes; refused unread")
    return parse_document(raw)


def parse_document(raw: bytes) -> Any:
    """Parse ``raw`` (UTF-8 YAML; JSON is YAML) with the bounded loader."""
    yaml = _yaml()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise InputError(f"not UTF-8 (byte {e.start})") from None
    try:
        return yaml.load(text, Loader=_loader())
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        at = "" if mark is None else f" at line {mark.line + 1}, column {mark.column + 1}"
        problem = "; ".join(str(p) for p in (e.context, e.problem) if p)
        raise InputError(f"YAML{at}: {problem}") from None
    except yaml.YAMLError as e:
        raise InputError(f"not valid YAML: {e}") from None
    except (ValueError, TypeError, OverflowError) as e:  # a scalar the constructor can't build
        raise InputError(f"not valid YAML: {e}") from None
    except RecursionError:  # pragma: no cover - the depth bound comes first
        raise InputError(f"nested deeper than {MAX_DEPTH} levels") from None


# -- strict fields --------------------------------------------------------------------------------
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BAD_CHARS = re.compile(r"[\x00-\x1f\x7f\ud800-\udfff]")


def field(where: str, key: str | int) -> str:
    """The path of ``key`` under ``where``: ``host.cpuArch``, ``gpus[0]``, ``extMnt['/m']``."""
    if isinstance(key, int):
        return f"{where}[{key}]"
    if _IDENT.fullmatch(key):
        return f"{where}.{key}" if where else key
    return f"{where}[{preview(key, 40)}]"


def _fail(where: str, expected: str, value: object) -> InputError:
    return InputError(f"{where or 'document'}: expected {expected}, got {preview(value)}")


def mapping(value: object, where: str) -> dict[str, Any]:
    """A mapping with string keys, at most :data:`MAX_ITEMS` of them."""
    if not isinstance(value, dict):
        raise _fail(where, "a mapping", value)
    if len(value) > MAX_ITEMS:
        raise InputError(f"{where}: more than {MAX_ITEMS} entries")
    for key in value:
        if not isinstance(key, str):
            raise InputError(f"{where or 'document'}: keys are strings, got {preview(key)}")
    return value


def text(value: object, where: str) -> str:
    """One line of printable characters (no control characters), at most :data:`MAX_TEXT`."""
    if not isinstance(value, str):
        raise _fail(where, "a string", value)
    if len(value) > MAX_TEXT:
        raise InputError(f"{where}: longer than {MAX_TEXT} characters")
    bad = _BAD_CHARS.search(value)
    if bad is not None:
        raise InputError(f"{where}: control character or lone surrogate {preview(bad[0])}")
    return value


def nonempty(value: object, where: str) -> str:
    found = text(value, where)
    if not found.strip():
        raise InputError(f"{where}: must not be empty")
    return found


def integer(value: object, where: str, low: int, high: int) -> int:
    """An integer in ``[low, high]``; ``true``/``false`` are not integers."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(where, "an integer", value)
    if not low <= value <= high:
        raise InputError(f"{where}: {preview(value)} is outside {low}..{high}")
    return value


def boolean(value: object, where: str) -> bool:
    if not isinstance(value, bool):
        raise _fail(where, "a boolean (true or false)", value)
    return value


def quantity(value: object, where: str) -> str:
    """A Kubernetes quantity: a string (``64Gi``), an integer or a finite number."""
    if isinstance(value, str):
        return text(value, where)
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) < 10**30:
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)
    raise _fail(where, "a quantity (a string like 64Gi, or a number)", value)


def items(value: object, where: str, read: Callable[[object, str], T]) -> tuple[T, ...]:
    """A list of at most :data:`MAX_ITEMS`, each read by ``read(item, "where[i]")``."""
    if not isinstance(value, list):
        raise _fail(where, "a list", value)
    if len(value) > MAX_ITEMS:
        raise InputError(f"{where}: more than {MAX_ITEMS} items")
    return tuple(read(item, field(where, i)) for i, item in enumerate(value))


def optional(
    data: Mapping[str, Any], key: str, where: str, read: Callable[[object, str], T]
) -> T | None:
    """``read`` the value of ``key`` if it is present and not null."""
    value = data.get(key)
    return None if value is None else read(value, field(where, key))


def required(data: Mapping[str, Any], key: str, where: str, read: Callable[[object, str], T]) -> T:
    value = data.get(key)
    if value is None:
        raise InputError(f"{field(where, key)}: required")
    return read(value, field(where, key))


def only(data: Mapping[str, Any], allowed: tuple[str, ...], where: str) -> None:
    """Refuse keys outside ``allowed`` (a typo must not read as a missing fact)."""
    for key in data:
        if key not in allowed:
            raise InputError(
                f"{field(where, key)}: unknown field (expected one of {', '.join(allowed)})"
            )
