"""What a source's first records hold, said in a sentence: the end of the message that explains why a source gave
nothing to replay (what the mapping looked for, what it found, and which format the records look like), and the
names nearest a metadata path that no record has.

Example:
    >>> from delta_eval.mapping import FieldMapping
    >>> record = {"id": "g1", "type": "GENERATION", "input": [{"role": "user", "content": "hi"}],
    ...           "output": {"role": "assistant", "content": "hello"}}
    >>> print(describe_records([record], FieldMapping(messages="input")))
    the first record holds 1 message at 'input' (roles: user; no assistant message); its fields: id, input, output, type
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from delta_eval.mapping import FieldMapping, maybe_json
from delta_eval.paths import MISSING, get_path

__all__ = ["describe_records", "field_paths", "nearest_paths"]

_MAX_FIELDS = 15


def field_paths(record: Any, depth: int = 3, prefix: str = "") -> list[str]:
    """The dotted paths of a record's fields, to ``depth`` levels (lists are not entered).

    Example:
        >>> field_paths({"user": {"tier": "gold", "name": "Mia"}, "id": 1})
        ['user', 'user.tier', 'user.name', 'id']
    """
    if not isinstance(record, Mapping) or depth == 0:
        return []
    out: list[str] = []
    for key, value in record.items():
        path = f"{prefix}{key}"
        out.append(path)
        out += field_paths(value, depth - 1, f"{path}.")
    return out


def nearest_paths(path: str, records: Iterable[Any]) -> list[str]:
    """The field paths of ``records`` closest to ``path`` (a misspelt or misplaced metadata path), best first."""
    known = sorted({p for r in records for p in field_paths(r)})
    close = difflib.get_close_matches(path, known, n=3, cutoff=0.5)
    leaf = path.rsplit(".", 1)[-1]
    same_leaf = [p for p in known if p.rsplit(".", 1)[-1] == leaf and p not in close]  # the field, nested elsewhere
    return [*same_leaf, *close][:3]


def _roles(messages: Sequence[Any]) -> list[str]:
    return [str(m.get("role")) for m in messages if isinstance(m, Mapping) and "role" in m]


def describe_records(records: Sequence[Any], mapping: FieldMapping, hint: str | None = None) -> str:
    """A sentence on the first of ``records``: what is at the mapping's ``messages`` path (how many messages, their
    roles) and the record's fields; ``hint`` (the format the record looks like) is appended."""
    if not records:
        return "the source holds no records"
    first = records[0]
    if not isinstance(first, Mapping):
        return f"the first record is a {type(first).__name__}, not an object"
    found = maybe_json(get_path(first, mapping.messages))
    at = f"at {mapping.messages!r}"
    if found is MISSING:
        said = f"the first record has no field {at}"
    elif isinstance(found, list):
        roles = _roles(found)
        shown = ", ".join(dict.fromkeys(roles)) or "none"
        lacking = "" if "assistant" in roles or "model" in roles else "; no assistant message"
        plural = "s" if len(found) != 1 else ""
        said = f"the first record holds {len(found)} message{plural} {at} (roles: {shown}{lacking})"
    else:
        said = f"the first record holds a {type(found).__name__} {at}, not a message list"
    fields = sorted(map(str, first))
    more = f" and {len(fields) - _MAX_FIELDS} more" if len(fields) > _MAX_FIELDS else ""
    said += f"; its fields: {', '.join(fields[:_MAX_FIELDS])}{more}"
    return f"{said}; {hint}" if hint else said
