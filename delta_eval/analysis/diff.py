"""Differences between the two sides' outputs, as segments a page marks up (never HTML: escaping stays with
the template engine, since both outputs are untrusted model text).

:func:`word_diff` compares texts word by word; :func:`json_diff` compares JSON (tool-call arguments, tool results)
line by line after a canonical layout (sorted keys, indented), so that key order and spacing never show as changes.
Both use :class:`difflib.SequenceMatcher`. The viewer and the static report mark them.

Example:
    >>> a, b = word_diff("the flight is booked", "the flight is not booked")
    >>> [(s.text, s.kind) for s in b]
    [('the flight is ', 'same'), ('not ', 'ins'), ('booked', 'same')]
    >>> a, b = json_diff('{"id": "M05", "n": 1}', '{"n": 1, "id": "M06"}')
    >>> [s.kind for s in a], [s.text for s in b if s.kind == "ins"]
    (['same', 'del', 'same'], ['  "id": "M06",\\n'])
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Literal

__all__ = ["Segment", "json_diff", "pretty_json", "word_diff"]

#: Beyond this many tokens a side, a word diff falls back to lines: SequenceMatcher is quadratic at worst.
MAX_TOKENS = 20_000
_TOKEN = re.compile(r"\s+|\w+|[^\w\s]")


@dataclass(frozen=True)
class Segment:
    """A run of text and whether it is in both sides (``same``), only in the left (``del``) or the right (``ins``)."""

    text: str
    kind: Literal["same", "del", "ins"]


def _merge(segments: list[Segment]) -> list[Segment]:
    out: list[Segment] = []
    for s in segments:
        if out and out[-1].kind == s.kind:
            out[-1] = Segment(out[-1].text + s.text, s.kind)
        elif s.text:
            out.append(s)
    return out


def _diff(left: list[str], right: list[str]) -> tuple[list[Segment], list[Segment]]:
    a: list[Segment] = []
    b: list[Segment] = []
    for op, i1, i2, j1, j2 in SequenceMatcher(None, left, right, autojunk=False).get_opcodes():
        if op == "equal":
            a.append(Segment("".join(left[i1:i2]), "same"))
            b.append(Segment("".join(right[j1:j2]), "same"))
        else:
            a.append(Segment("".join(left[i1:i2]), "del"))
            b.append(Segment("".join(right[j1:j2]), "ins"))
    return _merge(a), _merge(b)


def word_diff(left: str | None, right: str | None) -> tuple[list[Segment], list[Segment]]:
    """The two texts as segments, words only in one side marked (lines instead, for very long texts)."""
    lt, rt = _TOKEN.findall(left or ""), _TOKEN.findall(right or "")
    if max(len(lt), len(rt)) > MAX_TOKENS:
        lt, rt = (left or "").splitlines(keepends=True), (right or "").splitlines(keepends=True)
    return _diff(lt, rt)


def pretty_json(text: str | None) -> str:
    """``text`` laid out canonically when it is JSON (sorted keys, two-space indent), else unchanged."""
    if not text:
        return text or ""
    try:
        return json.dumps(json.loads(text), indent=2, sort_keys=True, ensure_ascii=False)
    except ValueError:
        return text


def json_diff(left: str | None, right: str | None) -> tuple[list[Segment], list[Segment]]:
    """Two JSON documents compared line by line in their canonical layout (any text that is not JSON: as is)."""
    lp, rp = pretty_json(left), pretty_json(right)
    return _diff(lp.splitlines(keepends=True), rp.splitlines(keepends=True))
