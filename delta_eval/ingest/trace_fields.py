"""What the readers of tracing tools' exports (OpenInference, Langfuse, LangSmith) share: attributes flattened to
dotted keys made nested again, timestamps of any spelling made comparable, and JSON text read where a store keeps
an object as text.

Example:
    >>> unflatten({"llm.input_messages.0.message.role": "user", "llm.model_name": "m"})
    {'llm': {'input_messages': [{'message': {'role': 'user'}}], 'model_name': 'm'}}
    >>> instant("2026-12-03T21:54:03.904223Z") == instant(1796334843904223000)
    True
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, TypeGuard

__all__ = ["GAP", "as_json", "instant", "is_list", "unflatten"]


class _Gap:
    """The item of a list whose index no key named (the attribute was dropped): a reader reports it by index."""

    def __repr__(self) -> str:
        return "GAP"


#: Stands where a flattened list skips an index (``...messages.0...`` and ``...messages.2...`` but no ``.1.``).
GAP: Any = _Gap()


def _nested(value: Any) -> Any:
    if isinstance(value, Mapping):
        return unflatten(value)
    if isinstance(value, list | tuple):
        return [_nested(v) for v in value]
    return value


def _listed(node: Any) -> Any:
    """``node`` with every mapping whose keys are all indices turned into a list (a skipped index is :data:`GAP`)."""
    if not isinstance(node, dict):
        return node
    out = {k: _listed(v) for k, v in node.items()}
    if out and all(isinstance(k, str) and k.isdigit() for k in out):
        indexed = {int(k): v for k, v in out.items()}
        return [indexed.get(i, GAP) for i in range(max(indexed) + 1)]
    return out


def unflatten(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """Dotted attribute keys as nested objects, index parts as lists (OpenInference's flattening undone).

    Keys may already be partly nested (Phoenix keeps lists of objects whose own keys are dotted: ``{"llm.
    input_messages": [{"message.role": "user"}]}``); both spellings give the same tree. A value ``None`` is no value
    (a Parquet column of a key other rows have). Where a key is both a value and the start of longer keys, the
    longer keys win: they hold the structure.
    """
    tree: dict[str, Any] = {}
    for key, value in attributes.items():
        if value is None:
            continue
        parts = str(key).split(".")
        node = tree
        for part in parts[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        value = _nested(value)
        existing = node.get(parts[-1])
        if isinstance(existing, dict) and isinstance(value, dict):
            _merge(existing, value)
        elif not isinstance(existing, dict):
            node[parts[-1]] = value
    listed: dict[str, Any] = _listed(tree)
    return listed


def _merge(into: dict[str, Any], other: Mapping[str, Any]) -> None:
    for k, v in other.items():
        if isinstance(into.get(k), dict) and isinstance(v, dict):
            _merge(into[k], v)
        elif not isinstance(into.get(k), dict):
            into[k] = v


_FRACTION = re.compile(r"(\.\d{6})\d+")


def instant(value: Any) -> float | None:
    """Seconds since the epoch of a timestamp as exports spell it (ISO 8601 text with any precision, a
    ``datetime``, epoch nanoseconds, milliseconds or seconds); ``None`` for anything else."""
    if isinstance(value, datetime.datetime):
        moment = value if value.tzinfo is not None else value.replace(tzinfo=datetime.UTC)
        return moment.timestamp()
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        # Epoch seconds, milliseconds or nanoseconds, told apart by size (any of them from 1973 to 2286).
        magnitude = abs(value)
        return value / 1e9 if magnitude > 1e17 else value / 1e3 if magnitude > 1e11 else float(value)
    if isinstance(value, str) and value:
        text = _FRACTION.sub(r"\1", value.strip().replace(" ", "T", 1))
        try:
            return instant(datetime.datetime.fromisoformat(text))
        except ValueError:
            return None
    return None


def as_json(value: Any) -> Any:
    """``value`` parsed when it is JSON text of an object or a list (a store that keeps objects as text), else as
    it is."""
    if isinstance(value, str) and value.lstrip()[:1] in ("{", "["):
        try:
            return json.loads(value)
        except (ValueError, RecursionError):
            return value
    return value


def is_list(value: Any) -> TypeGuard[Sequence[Any]]:
    """Whether ``value`` is a list of items (not text)."""
    return isinstance(value, Sequence) and not isinstance(value, str | bytes)
