"""Dotted paths into nested records (``info.task.actions.0.name``), shared by field mapping and prompt templates.

Example:
    >>> get_path({"info": {"task": {"actions": [{"name": "book"}]}}}, "info.task.actions.0.name")
    'book'
    >>> get_path({"a": 1}, "b") is MISSING
    True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["MISSING", "get_path"]


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


#: What :func:`get_path` returns where a path leads nowhere (``None`` may be a real value).
MISSING: Any = _Missing()


def get_path(record: Any, path: str) -> Any:
    """Follow a dotted path into nested mappings and lists (items by number); :data:`MISSING` where it leads nowhere."""
    cur = record
    for part in path.split("."):
        if isinstance(cur, Mapping):
            if part not in cur:
                return MISSING
            cur = cur[part]
        elif isinstance(cur, Sequence) and not isinstance(cur, str | bytes) and part.lstrip("-").isdigit():
            idx = int(part)
            if not -len(cur) <= idx < len(cur):
                return MISSING
            cur = cur[idx]
        else:
            return MISSING
    return cur
