"""Tool schemas for Gemini: the subset of JSON Schema its function declarations take (``parametersJsonSchema``).

Gemini takes ``type format title description enum items prefixItems minItems maxItems minimum maximum anyOf oneOf
properties additionalProperties required propertyOrdering`` and the ``$id $defs $ref $anchor`` references. Anything
else would be refused or ignored, so it is taken out, without changing what the tool means:

- ``const: v`` becomes ``enum: [v]`` (the same constraint);
- a constraint Gemini cannot check (``pattern``, ``minLength``, ``default``, ``exclusiveMinimum``, ...) moves into
  the ``description`` in words, where the model still reads it;
- annotations with no bearing on calls (``$schema``, ``$comment``, ``examples``, ``readOnly``, ...) are dropped.

Every change is reported, so the run says once per tool what the model was shown instead.

Example:
    >>> code = {"type": "string", "pattern": "^[A-Z]{6}$"}
    >>> schema, changes = sanitize({"type": "object", "properties": {"code": code}})
    >>> schema["properties"]["code"]
    {'type': 'string', 'description': 'pattern: ^[A-Z]{6}$'}
    >>> changes
    ['properties.code.pattern moved into the description']
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["sanitize"]

ALLOWED = frozenset(
    [
        "type",
        "format",
        "title",
        "description",
        "enum",
        "items",
        "prefixItems",
        "minItems",
        "maxItems",
        "minimum",
        "maximum",
        "anyOf",
        "oneOf",
        "properties",
        "additionalProperties",
        "required",
        "propertyOrdering",
        "$id",
        "$defs",
        "$ref",
        "$anchor",
    ]
)
#: Annotations that change nothing about a call.
_SILENT = frozenset({"$schema", "$comment", "examples", "readOnly", "writeOnly", "deprecated", "nullable", "strict"})


def sanitize(schema: Any, path: str = "") -> tuple[Any, list[str]]:
    """``schema`` reduced to what Gemini takes, and a description of each change (empty when none was needed)."""
    changes: list[str] = []
    return _clean(schema, path, changes), changes


def _at(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _clean(schema: Any, path: str, changes: list[str]) -> Any:
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    words: list[str] = []
    for key, value in schema.items():
        where = _at(path, key)
        if key == "const":
            out["enum"] = [value]
            changes.append(f"{where} became an enum of one value")
        elif key in ("properties", "$defs") and isinstance(value, dict):
            # The names under properties are the tool's own, never keywords.
            out[key] = {name: _clean(sub, _at(where, name), changes) for name, sub in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = _clean(value, where, changes)
        elif key in ("anyOf", "oneOf", "prefixItems") and isinstance(value, list):
            out[key] = [_clean(sub, f"{where}[{k}]", changes) for k, sub in enumerate(value)]
        elif key in ALLOWED:
            out[key] = value
        elif key in _SILENT:
            changes.append(f"{where} dropped (an annotation)")
        else:
            words.append(f"{key}: {value if isinstance(value, str) else json.dumps(value)}")
            changes.append(f"{where} moved into the description")
    if words:
        said = "; ".join(words)
        out["description"] = f"{out['description']} ({said})" if out.get("description") else said
    return out
