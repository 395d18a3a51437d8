"""How the API server decodes and validates an object's body, for the fake API server
(:mod:`.objects`): a custom resource against its CRD's structural OpenAPI v3 schema
(pruning, defaulting, the schema's value validations), a Pod against the ``kubernetes``
client's own models (the fields and JSON types the API's Go structs decode), and the two
JSON patch formats the API accepts on a custom resource (RFC 7386 merge patch, RFC 6902 JSON
patch).
"""

from __future__ import annotations

import copy
import functools
import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any

import attrs
import yaml  # type: ignore[import-untyped]

CRDS = Path(__file__).parent / "crds"

_DATE_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})")
_DROP = object()


@attrs.define
class Cause:
    """One ``metav1.StatusCause``: a field path, the API's reason and its message."""

    field: str
    reason: str
    message: str

    def text(self) -> str:
        return f"{self.field}: {self.message}"

    def as_json(self) -> dict[str, str]:
        return {"reason": self.reason, "message": self.message, "field": self.field}


@attrs.define
class Decoded:
    """A body as the API server decoded it: pruned (unknown fields dropped, nulls of
    non-nullable fields dropped), defaulted; the unknown fields' paths; the type errors."""

    value: Any
    unknown: list[str] = attrs.Factory(list)
    errors: list[Cause] = attrs.Factory(list)


@functools.cache
def _load_crd(name: str) -> dict[str, Any]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    loaded = yaml.load((CRDS / name).read_text(), Loader=loader)  # a safe loader
    assert isinstance(loaded, dict)
    return loaded


def nodeclaim_crd() -> dict[str, Any]:
    """Karpenter's published NodeClaim CRD (shipped in ``crds``), a fresh copy."""
    return copy.deepcopy(_load_crd("karpenter.sh_nodeclaims.yaml"))


def nodeclaim_crd_schema() -> dict[str, Any]:
    """The NodeClaim's ``openAPIV3Schema`` (upstream the resource is cluster-scoped).

    Returns:
        A fresh copy of the schema.
    """
    version = nodeclaim_crd()["spec"]["versions"][0]
    schema = version["schema"]["openAPIV3Schema"]
    assert isinstance(schema, dict)
    return schema


def conditions_crd_schema(kind: str) -> dict[str, Any]:
    """A CRD schema for ``kind`` whose status holds the published ``metav1.Condition`` list
    (Karpenter's ``status.conditions``) and keeps any other status field.

    Args:
        kind: the resource's kind, named in the schema's description.

    Returns:
        The schema, for :meth:`FakeApiServer.register_crd`.
    """
    conditions = nodeclaim_crd_schema()["properties"]["status"]["properties"]["conditions"]
    return {
        "description": f"{kind} with a conditions status",
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            "status": {
                "type": "object",
                "properties": {"conditions": copy.deepcopy(conditions)},
                "x-kubernetes-preserve-unknown-fields": True,
            },
        },
    }


def date_time(value: object) -> bool:
    if not isinstance(value, str) or not _DATE_TIME.fullmatch(value):
        return False
    try:
        datetime.fromisoformat(value.replace("z", "Z").replace("Z", "+00:00").replace(" ", "T"))
    except ValueError:
        return False
    return True


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _has_type(value: object, kind: str) -> bool:
    got = _json_type(value)
    if kind == "number":
        return got in ("integer", "number")
    if kind == "integer":
        return got == "integer" or (got == "number" and float(value).is_integer())  # type: ignore[arg-type]
    return got == kind


def _quote(value: object) -> str:
    return json.dumps(value)


# -- custom resources: structural schema --------------------------------------------------------
def decode_custom(body: dict[str, Any], schema: dict[str, Any]) -> Decoded:
    """Prune and default ``body`` (all but ``metadata``) as the API server does when it
    decodes a custom resource; ``unknown`` lists what was pruned."""
    out = Decoded(None)
    value = {}
    for key, item in body.items():
        if key in ("apiVersion", "kind", "metadata"):  # never pruned
            value[key] = copy.deepcopy(item)
            continue
        sub = (schema.get("properties") or {}).get(key)
        if sub is None:
            out.unknown.append(key)
            continue
        pruned = _prune(item, sub, key, out)
        if pruned is not _DROP:
            value[key] = pruned
    out.value = value
    return out


def _prune(value: Any, schema: dict[str, Any], path: str, out: Decoded) -> Any:
    if value is None:
        return None if schema.get("nullable") else _DROP
    if schema.get("x-kubernetes-preserve-unknown-fields") and not schema.get("properties"):
        return copy.deepcopy(value)
    if isinstance(value, dict) and schema.get("type", "object") == "object":
        return _prune_object(value, schema, path, out)
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        items = [_prune(v, schema["items"], f"{path}[{i}]", out) for i, v in enumerate(value)]
        return [v for v in items if v is not _DROP]
    return copy.deepcopy(value)


def _prune_object(
    value: dict[str, Any], schema: dict[str, Any], path: str, out: Decoded
) -> dict[str, Any]:
    """An object's known fields pruned (unknown ones dropped and noted, unless the schema
    keeps them), then the defaults of the fields it lacks."""
    props = schema.get("properties") or {}
    extra = schema.get("additionalProperties")
    kept: dict[str, Any] = {}
    for key, item in value.items():
        sub = props.get(key)
        if sub is None and isinstance(extra, dict):
            sub = extra
        if sub is None:
            if extra is True or schema.get("x-kubernetes-preserve-unknown-fields"):
                kept[key] = copy.deepcopy(item)
            else:
                out.unknown.append(f"{path}.{key}")
            continue
        pruned = _prune(item, sub, f"{path}.{key}", out)
        if pruned is not _DROP:
            kept[key] = pruned
    for key, sub in props.items():
        if key not in kept and "default" in sub:
            kept[key] = copy.deepcopy(sub["default"])
    return kept


def validate_custom(value: Any, schema: dict[str, Any], path: str) -> list[Cause]:
    """The schema's value validations of ``value`` at ``path`` (types, required, enum,
    pattern, lengths, bounds, item counts, date-time, list-map keys)."""
    errors: list[Cause] = []
    _validate(value, schema, path, errors)
    return errors


def _validate(value: Any, schema: dict[str, Any], path: str, errors: list[Cause]) -> None:
    if value is None:
        if not schema.get("nullable"):
            errors.append(Cause(path, "FieldValueRequired", "Required value"))
        return
    wrong = _wrong_type(value, schema)
    if wrong:
        got = _json_type(value)
        message = (
            f"Invalid value: {_quote(got)}: {path} in body must be of type {wrong}: {_quote(got)}"
        )
        errors.append(Cause(path, "FieldValueTypeInvalid", message))
        return
    if "enum" in schema and value not in schema["enum"]:
        supported = ", ".join(_quote(v) for v in schema["enum"])
        message = f"Unsupported value: {_quote(value)}: supported values: {supported}"
        errors.append(Cause(path, "FieldValueNotSupported", message))
    if isinstance(value, str):
        _validate_string(value, schema, path, errors)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        _validate_number(value, schema, path, errors)
    elif isinstance(value, list):
        _validate_list(value, schema, path, errors)
    elif isinstance(value, dict):
        _validate_object(value, schema, path, errors)


def _wrong_type(value: Any, schema: dict[str, Any]) -> str:
    """The type ``schema`` wants that ``value`` is not of (``int-or-string`` for such a
    field), or ``""``."""
    if schema.get("x-kubernetes-int-or-string"):
        return "" if _json_type(value) in ("integer", "string") else "int-or-string"
    if "type" in schema and not _has_type(value, schema["type"]):
        return str(schema["type"])
    return ""


def _validate_object(
    value: dict[str, Any], schema: dict[str, Any], path: str, errors: list[Cause]
) -> None:
    props = schema.get("properties") or {}
    for key in schema.get("required") or []:
        if key not in value:
            errors.append(Cause(f"{path}.{key}", "FieldValueRequired", "Required value"))
    extra = schema.get("additionalProperties")
    for key, item in value.items():
        sub = props.get(key, extra if isinstance(extra, dict) else None)
        if sub is not None:
            _validate(item, sub, f"{path}.{key}", errors)
    if "maxProperties" in schema and len(value) > schema["maxProperties"]:
        message = f"Too many: {len(value)}: must have at most {schema['maxProperties']} items"
        errors.append(Cause(path, "FieldValueTooMany", message))


def _validate_string(value: str, schema: dict[str, Any], path: str, errors: list[Cause]) -> None:
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        message = f"Too long: may not be more than {schema['maxLength']} bytes"
        errors.append(Cause(path, "FieldValueTooLong", message))
    if "minLength" in schema and len(value) < schema["minLength"]:
        message = (
            f"Invalid value: {_quote(value)}: {path} in body should be at least "
            f"{schema['minLength']} chars long"
        )
        errors.append(Cause(path, "FieldValueInvalid", message))
    if "pattern" in schema and re.search(schema["pattern"], value) is None:
        message = (
            f"Invalid value: {_quote(value)}: {path} in body should match '{schema['pattern']}'"
        )
        errors.append(Cause(path, "FieldValueInvalid", message))
    if schema.get("format") == "date-time" and not date_time(value):
        message = (
            f"Invalid value: {_quote(value)}: {path} in body must be of type "
            f"date-time: {_quote(value)}"
        )
        errors.append(Cause(path, "FieldValueInvalid", message))


def _validate_number(value: float, schema: dict[str, Any], path: str, errors: list[Cause]) -> None:
    if "minimum" in schema and value < schema["minimum"]:
        message = (
            f"Invalid value: {value}: {path} in body should be greater than or "
            f"equal to {schema['minimum']}"
        )
        errors.append(Cause(path, "FieldValueInvalid", message))
    if "maximum" in schema and value > schema["maximum"]:
        message = (
            f"Invalid value: {value}: {path} in body should be less than or equal "
            f"to {schema['maximum']}"
        )
        errors.append(Cause(path, "FieldValueInvalid", message))
    if schema.get("format") == "int64" and not -(2**63) <= value < 2**63:
        errors.append(Cause(path, "FieldValueInvalid", f"Invalid value: {value}: out of range"))


def _validate_list(
    value: list[Any], schema: dict[str, Any], path: str, errors: list[Cause]
) -> None:
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        message = f"Too many: {len(value)}: must have at most {schema['maxItems']} items"
        errors.append(Cause(path, "FieldValueTooMany", message))
    if "minItems" in schema and len(value) < schema["minItems"]:
        message = (
            f"Invalid value: {len(value)}: {path} in body should have at least "
            f"{schema['minItems']} items"
        )
        errors.append(Cause(path, "FieldValueInvalid", message))
    items = schema.get("items")
    if isinstance(items, dict):
        for i, item in enumerate(value):
            _validate(item, items, f"{path}[{i}]", errors)
    list_type = schema.get("x-kubernetes-list-type")
    keys = schema.get("x-kubernetes-list-map-keys") or []
    seen: set[str] = set()
    for i, item in enumerate(value):
        if list_type == "map" and isinstance(item, dict):
            mark = json.dumps([item.get(k) for k in keys])
            shown = {k: item.get(k) for k in keys}
        elif list_type == "set":
            mark = json.dumps(item, sort_keys=True)
            shown = item
        else:
            continue
        if mark in seen:
            message = f"Duplicate value: {_quote(shown)}"
            errors.append(Cause(f"{path}[{i}]", "FieldValueDuplicate", message))
        seen.add(mark)


# -- built-in types: the kubernetes client's models ----------------------------------------------
class DecodeError(Exception):  # internal: never reaches a caller (tests/test_exception_tree.py)
    """A JSON value the API's Go struct cannot decode (the API answers 400 BadRequest)."""


_GO_TYPES = {"str": "string", "int": "int64", "float": "float64", "bool": "bool"}


def decode_model(value: Any, model: str, path: str, unknown: list[str]) -> None:
    """Check ``value`` decodes as the ``kubernetes`` client's model ``model`` (e.g.
    ``V1Pod``), appending unknown fields' paths to ``unknown``; raise :class:`DecodeError`
    for a JSON type the field's Go type refuses."""
    from kubernetes import client  # type: ignore[import-untyped]

    _decode(value, model, path, unknown, client, model)


def _decode(value: Any, kind: str, path: str, unknown: list[str], client: Any, owner: str) -> None:
    if value is None or kind == "object":
        return
    if kind.startswith("list["):
        if not isinstance(value, list):
            raise _type_error(value, owner, path, "[]" + kind[5:-1])
        for i, item in enumerate(value):
            _decode(item, kind[5:-1], f"{path}[{i}]", unknown, client, owner)
        return
    if kind.startswith(("dict(", "dict[")):
        inner = kind[5:-1].split(",", 1)[1].strip()
        if not isinstance(value, dict):
            raise _type_error(value, owner, path, f"map[string]{inner}")
        for key, item in value.items():
            _decode(item, inner, f"{path}[{key}]", unknown, client, owner)
        return
    if kind in _SCALARS:
        _decode_scalar(value, kind, path, owner)
        return
    model = getattr(client, kind)
    if not isinstance(value, dict):
        raise _type_error(value, owner, path, kind.removeprefix("V1"))
    fields = {json_key: attr for attr, json_key in model.attribute_map.items()}
    for key, item in value.items():
        attr = fields.get(key)
        if attr is None:
            unknown.append(f"{path}.{key}" if path else key)
            continue
        child = f"{path}.{key}" if path else key
        _decode(item, model.openapi_types[attr], child, unknown, client, kind.removeprefix("V1"))


#: The client's scalar types.
_SCALARS = frozenset({"str", "date", "datetime", "int", "float", "bool"})


def _decode_scalar(value: Any, kind: str, path: str, owner: str) -> None:
    """Refuse a value the scalar field's Go type does not decode."""
    if kind in ("str", "date", "datetime"):
        if not isinstance(value, str):
            raise _type_error(value, owner, path, "string")
        if kind == "datetime" and not date_time(value):
            raise DecodeError(
                f'parsing time "{value}" as "2006-01-02T15:04:05Z07:00": cannot parse'
            )
    elif kind in ("int", "float"):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not ok or (kind == "int" and isinstance(value, float) and not value.is_integer()):
            raise _type_error(value, owner, path, _GO_TYPES[kind])
    elif not isinstance(value, bool):
        raise _type_error(value, owner, path, "bool")


def _type_error(value: Any, owner: str, path: str, go_type: str) -> DecodeError:
    got = {"integer": "number", "null": "null"}.get(_json_type(value), _json_type(value))
    return DecodeError(
        f"json: cannot unmarshal {got} into Go struct field {owner}.{path} of type {go_type}"
    )


# -- patches ---------------------------------------------------------------------------------
def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge key by key, ``null`` deletes, anything else (lists too)
    replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    merged = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


class PatchError(Exception):  # internal: never reaches a caller (tests/test_exception_tree.py)
    """A JSON patch that does not apply (the API answers 422)."""


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, parts: list[str], path: str) -> tuple[Any, str]:
    node = doc
    for part in parts[:-1]:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise PatchError(f"doc is missing path: {path!r}")
    if not parts:
        raise PatchError("the root cannot be patched")
    return node, parts[-1]


def _get(doc: Any, path: str) -> Any:
    node = doc
    for part in _pointer(path):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise PatchError(f"doc is missing path: {path!r}")
    return node


def _remove(doc: Any, path: str) -> Any:
    node, last = _parent(doc, _pointer(path), path)
    if isinstance(node, dict) and last in node:
        return node.pop(last)
    if isinstance(node, list) and last.isdigit() and int(last) < len(node):
        return node.pop(int(last))
    raise PatchError(f"doc is missing path: {path!r}")


def _add(doc: Any, path: str, value: Any) -> None:
    node, last = _parent(doc, _pointer(path), path)
    if isinstance(node, dict):
        node[last] = copy.deepcopy(value)
    elif isinstance(node, list) and last == "-":
        node.append(copy.deepcopy(value))
    elif isinstance(node, list) and last.isdigit() and int(last) <= len(node):
        node.insert(int(last), copy.deepcopy(value))
    else:
        raise PatchError(f"doc is missing path: {path!r}")


def json_patch(target: Any, ops: list[Any]) -> Any:
    """RFC 6902: ``add``, ``remove``, ``replace``, ``move``, ``copy`` and ``test``, applied
    in order to a copy; any failed operation fails the whole patch (:class:`PatchError`)."""
    doc = copy.deepcopy(target)
    for op in ops:
        if not isinstance(op, dict) or not isinstance(op.get("path"), str):
            raise PatchError(f"invalid operation {op!r}")
        name, path = op.get("op"), op["path"]
        if name == "add":
            _add(doc, path, op.get("value"))
        elif name == "remove":
            _remove(doc, path)
        elif name == "replace":
            _remove(doc, path)
            _add(doc, path, op.get("value"))
        elif name == "move":
            _add(doc, path, _remove(doc, str(op.get("from"))))
        elif name == "copy":
            _add(doc, path, _get(doc, str(op.get("from"))))
        elif name == "test":
            if _get(doc, path) != op.get("value"):
                raise PatchError(f"testing value {path} failed: test failed")
        else:
            raise PatchError(f"Unexpected kind: {name}")
    return doc
