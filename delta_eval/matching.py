"""Deterministic equivalence of tool calls and texts, shared by tool simulation and the stage-1 judge.

Arguments are compared as canonical JSON with the type tolerance function-calling benchmarks use: ``1``, ``1.0``
and (by default) ``"1"`` are the same number; strings are compared after trimming; an argument set to ``null``
equals an argument left out. Texts are compared after Unicode normalisation, case folding, dropping punctuation
and collapsing whitespace.

Example:
    >>> from delta_eval.schema import ToolCall
    >>> a = ToolCall(id="1", name="book", arguments='{"n": 1, "cabin": "economy "}')
    >>> b = ToolCall(id="2", name="book", arguments='{"cabin": "economy", "n": "1.0"}')
    >>> calls_equivalent(a, b)
    True
    >>> normalize_text("Sure -- I'll  help!") == normalize_text("sure, i'll help")
    True
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, ConfigDict

from delta_eval.schema import ToolCall

__all__ = [
    "MatchOptions",
    "arguments_equivalent",
    "call_sequences_equivalent",
    "calls_equivalent",
    "canonical_arguments",
    "normalize_text",
    "texts_equivalent",
    "word_overlap",
]

_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")
_SPACE = re.compile(r"\s+")


@lru_cache(maxsize=1)
def _punctuation_to_space() -> dict[int, str]:
    # Every punctuation character (category P*) of the basic and supplementary multilingual planes, where all
    # punctuation in use lives, mapped to a space for str.translate (C speed). Built on first use.
    return {cp: " " for cp in range(0x20000) if unicodedata.category(chr(cp)).startswith("P")}


class MatchOptions(BaseModel):
    """Tolerances of deterministic matching.

    - ``numeric_strings``: ``"1"`` equals ``1`` (``1`` and ``1.0`` are always equal).
    - ``strip_strings``: compare strings without leading and trailing whitespace.
    - ``case_sensitive``: compare argument strings with case; texts are always compared case-folded.
    - ``null_is_missing``: an argument set to ``null`` equals one that is left out.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    numeric_strings: bool = True
    strip_strings: bool = True
    case_sensitive: bool = True
    null_is_missing: bool = True


DEFAULT_MATCH = MatchOptions()


def _canon(value: Any, opts: MatchOptions) -> Any:
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        f = float(value)
        if math.isfinite(f) and f == int(f) and abs(f) < 2**53:
            return ("num", int(f))
        return ("num", f)
    if isinstance(value, str):
        s = value.strip() if opts.strip_strings else value
        if opts.numeric_strings and _NUMBER.match(s):
            return _canon(float(s), opts)
        return s if opts.case_sensitive else s.casefold()
    if isinstance(value, dict):
        return {
            "obj": sorted(
                ((str(k), _canon(v, opts)) for k, v in value.items() if not (opts.null_is_missing and v is None)),
                key=lambda kv: kv[0],
            )
        }
    if isinstance(value, list | tuple):
        return ["list", *(_canon(v, opts) for v in value)]
    return repr(value)


def canonical_arguments(call: ToolCall, opts: MatchOptions = DEFAULT_MATCH) -> str:
    """A string that is equal for two calls exactly when their arguments are equivalent under ``opts``.

    Arguments that are not valid JSON are compared as their raw text, whitespace-collapsed.
    """
    return _canonical(call.arguments, opts)


@lru_cache(maxsize=65536)
def _canonical(arguments: str, opts: MatchOptions) -> str:
    # Cached by the raw text: replays fingerprint the same recorded calls many times.
    try:
        parsed = json.loads(arguments) if arguments.strip() else {}
    except (ValueError, RecursionError):  # RecursionError: nested too deep to parse, so compared as text
        return "raw:" + _SPACE.sub(" ", arguments.strip())
    return json.dumps(_canon(parsed, opts), ensure_ascii=False, separators=(",", ":"))


def arguments_equivalent(a: ToolCall, b: ToolCall, opts: MatchOptions = DEFAULT_MATCH) -> bool:
    """Whether two calls' arguments are equivalent (see :class:`MatchOptions`)."""
    return canonical_arguments(a, opts) == canonical_arguments(b, opts)


def calls_equivalent(a: ToolCall, b: ToolCall, opts: MatchOptions = DEFAULT_MATCH) -> bool:
    """Same tool and equivalent arguments. Call ids are ignored: they are random per response."""
    return a.name == b.name and arguments_equivalent(a, b, opts)


def call_sequences_equivalent(a: Sequence[ToolCall], b: Sequence[ToolCall], opts: MatchOptions = DEFAULT_MATCH) -> bool:
    """The same calls in the same order."""
    return len(a) == len(b) and all(calls_equivalent(x, y, opts) for x, y in zip(a, b, strict=True))


def normalize_text(text: str | None) -> str:
    """Text as compared: NFKC, case-folded, punctuation removed, whitespace collapsed.

    Symbols stay: ``$30`` and ``€30`` differ.
    """
    if not text:
        return ""
    text = unicodedata.normalize("NFKC", text).casefold().translate(_punctuation_to_space())
    return _SPACE.sub(" ", text).strip()


def word_overlap(a: str, b: str) -> float:
    """Jaccard overlap of the normalised word sets of two texts (1.0 for two empty texts).

    Example:
        >>> word_overlap("Your flight is booked.", "your flight is booked!")
        1.0
    """
    wa, wb = set(normalize_text(a).split()), set(normalize_text(b).split())
    if not wa and not wb:
        return 1.0
    return len(wa & wb) / len(wa | wb)


def texts_equivalent(a: Sequence[str], b: Sequence[str]) -> bool:
    """Whether two sequences of texts say the same words once normalised (how they split into messages aside)."""
    return normalize_text(" ".join(a)) == normalize_text(" ".join(b))
