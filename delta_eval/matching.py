"""Deterministic equivalence of tool calls and texts, shared by tool simulation and the stage-1 judge.

Arguments are compared as canonical JSON with the type tolerance function-calling benchmarks use: ``1``, ``1.0``
and (by default) ``"1"`` are the same number; strings are compared after trimming; an argument set to ``null``
equals an argument left out. Texts are compared after Unicode normalisation, case folding, dropping the punctuation
that only separates words and collapsing whitespace; what can change the meaning stays (see :func:`normalize_text`).
Judges are shown arguments in one canonical layout (:func:`display_arguments`), whatever wire they came back on.

Example:
    >>> from delta_eval.schema import ToolCall
    >>> a = ToolCall(id="1", name="book", arguments='{"n": 1, "cabin": "economy "}')
    >>> b = ToolCall(id="2", name="book", arguments='{"cabin": "economy", "n": "1.0"}')
    >>> calls_equivalent(a, b)
    True
    >>> normalize_text("Sure -- I'll  help!") == normalize_text("sure, i'll help")
    True
    >>> normalize_text("It's -$5, isn't it?")
    "it's -$5 isn't it ?"
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
    "display_arguments",
    "normalize_text",
    "texts_equivalent",
    "word_overlap",
]

_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")
_SPACE = re.compile(r"\s+")


# Punctuation that normalize_text keeps where it carries meaning (signs, decimal points, apostrophes inside words,
# separators inside numbers: see _separators), and units it always keeps (percent-like signs, primes).
_CONTEXTUAL = "'-.,:/"
_UNITS = "%‰‱؉؊٪′‵"
# Hyphens and minus signs: one "-", so that "−3" equals "-3"; other dashes (em dash, ...) only separate.
_MINUSES = "\u2010\u2011\u2012\u2013\u2212\ufe63\uff0d"
# Curly and modifier apostrophes, so that "don’t" equals "don't".
_APOSTROPHES = "\u2018\u2019\u201b\u02bc"


@lru_cache(maxsize=1)
def _text_table() -> dict[int, str]:
    # For str.translate (C speed), built on first use from the basic and supplementary multilingual planes, where
    # all punctuation in use lives: punctuation (category P*) becomes a space, question marks of every script a
    # " ? " token, apostrophes and minus signs their ASCII form; _CONTEXTUAL and _UNITS stay for _separators.
    table: dict[int, str] = {}
    for cp in range(0x20000):
        char = chr(cp)
        if char in _CONTEXTUAL or char in _UNITS or not unicodedata.category(char).startswith("P"):
            continue
        name = unicodedata.name(char, "")
        opening = "INVERTED" in name or "INITIAL" in name  # "¿": the "?" at the end says it
        table[cp] = " ? " if "QUESTION MARK" in name and not opening else " "
    table |= {ord(c): "'" for c in _APOSTROPHES}
    table |= {ord(c): "-" for c in _MINUSES}
    return table


@lru_cache(maxsize=1)
def _separators() -> re.Pattern[str]:
    # The contextual punctuation that only separates, replaced by a space: an apostrophe not inside a word
    # ("can't" stays), a dash that is not a sign directly before a number or a currency amount ("-5", "-$5", "-.5"
    # stay; "gpt-4" and "5-10" do not), a full stop that is not a decimal point ("1.5" and ".5" stay), and a
    # comma, colon or slash that is not between digits ("1,000", "10:30" and "1/2" stay). Built on first use.
    currency = "".join(chr(cp) for cp in range(0x20000) if unicodedata.category(chr(cp)) == "Sc")
    # Each branch starts with its character and looks behind it only then: several times faster than leading
    # lookbehinds, which the regex engine tries at every position.
    return re.compile(
        r"'(?:(?!\w)|(?<!\w'))"
        rf"|-(?:(?![{re.escape(currency)}]?\.?\d)|(?<=[\w-]-))"
        r"|\.(?:(?!\d)|(?<=[^\W\d]\.))"
        r"|[,:/](?:(?!\d)|(?<!\d[,:/]))"
    )


_QUESTIONS = re.compile(r"\?(?: \?)+")


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


class _Number(str):
    """A JSON number as written (``1.50`` stays ``1.50``), so that displaying arguments changes no value."""


class _Object(list[tuple[str, Any]]):
    """A JSON object's members in order, duplicates kept (displayed as they were, only sorted)."""


# Characters that json.dumps(ensure_ascii=False) leaves raw but that break a line (str.splitlines) or cannot be
# encoded (lone surrogates); escaped so that a displayed call stays one line of valid UTF-8.
_LINE_BREAKING = re.compile("[\x85\u2028\u2029\ud800-\udfff]")


def _display_value(value: Any) -> str:
    if isinstance(value, _Number):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, _Object):
        members = sorted(value, key=lambda kv: kv[0])  # stable: duplicate keys keep their order, the last wins
        return "{" + ", ".join(f"{json.dumps(k, ensure_ascii=False)}: {_display_value(v)}" for k, v in members) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_display_value(v) for v in value) + "]"
    return json.dumps(value)  # true, false, null


def display_arguments(call: ToolCall) -> str:
    """A call's arguments as shown to a judge: one canonical layout, so that judges see what a call says and not how
    the provider spaced it.

    Valid JSON is re-serialised on one line with sorted keys, ``", "`` and ``": "`` as separators and non-ASCII
    text unescaped; numbers and strings stay as written (``1.50`` is not ``1.5``, ``"1"`` is not ``1``). Blank
    arguments show as ``{}``; arguments that are not JSON as their raw text, whitespace-collapsed.

    Example:
        >>> display_arguments(ToolCall(id="1", name="f", arguments='{"b":1.50,"a":{"z":"é","y":null}}'))
        '{"a": {"y": null, "z": "é"}, "b": 1.50}'
        >>> display_arguments(ToolCall(id="2", name="f", arguments='{"a": '))
        '{"a":'
    """
    return _display(call.arguments)


@lru_cache(maxsize=65536)
def _display(arguments: str) -> str:
    if not arguments.strip():
        return "{}"  # some providers send "" for a call without arguments, others "{}"
    try:
        parsed = json.loads(
            arguments, parse_int=_Number, parse_float=_Number, parse_constant=_Number, object_pairs_hook=_Object
        )
        text = _display_value(parsed)
    except (ValueError, RecursionError):  # RecursionError: nested too deep, so shown as text
        return _SPACE.sub(" ", arguments.strip())
    return _LINE_BREAKING.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


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
    """Text as compared: NFKC, case-folded, whitespace collapsed, and the punctuation that only separates words
    dropped (commas, quotes, brackets, dashes between words, ellipses, a final ``.`` or ``!``).

    What can change the meaning stays: signs before numbers (``-$5``, ``-3``), decimal points and separators inside
    numbers (``1.5``, ``1,000``), ``%``, ``‰`` and currency symbols, apostrophes inside words (``can't``), and
    question marks, as a ``?`` token (a question and a statement differ). Curly apostrophes and Unicode minus signs
    count as their ASCII forms.

    Example:
        >>> normalize_text("“Refund -$5” – really?!")
        'refund -$5 really ?'
        >>> normalize_text("It costs 1.5%.") == normalize_text("It costs 15%")
        False
    """
    if not text:
        return ""
    text = unicodedata.normalize("NFKC", text).casefold().translate(_text_table())
    text = " ".join(_separators().sub(" ", text).split())  # str.split: the whitespace \s matches, faster
    return _QUESTIONS.sub("?", text) if "? ?" in text else text  # "??" and "?!" say no more than "?"


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
