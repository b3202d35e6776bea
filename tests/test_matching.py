from __future__ import annotations

import json
import random
from typing import Any

from hypothesis import assume, given
from hypothesis import strategies as st

from delta_eval.matching import (
    MatchOptions,
    call_sequences_equivalent,
    calls_equivalent,
    canonical_arguments,
    display_arguments,
    normalize_text,
    texts_equivalent,
    word_overlap,
)
from delta_eval.schema import ToolCall

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**9), 10**9),
    st.text(max_size=12),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=12,
)
objects = st.dictionaries(st.text(max_size=8), json_values, max_size=6)


def call(args: Any, name: str = "f", raw: str | None = None) -> ToolCall:
    return ToolCall(id=str(random.random()), name=name, arguments=raw if raw is not None else json.dumps(args))


def shuffle_keys(value: Any, rng: random.Random) -> Any:
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {k: shuffle_keys(v, rng) for k, v in items}
    if isinstance(value, list):
        return [shuffle_keys(v, rng) for v in value]
    return value


@given(objects, st.integers(0, 1000))
def test_key_order_and_formatting_do_not_matter(args: dict[str, Any], seed: int) -> None:
    shuffled = shuffle_keys(args, random.Random(seed))
    pretty = json.dumps(shuffled, indent=2)
    assert calls_equivalent(call(args), call(None, raw=pretty))


@given(objects)
def test_equivalence_is_reflexive_and_symmetric(args: dict[str, Any]) -> None:
    a, b = call(args), call(args)
    assert calls_equivalent(a, b)
    assert calls_equivalent(b, a)
    assert not calls_equivalent(a, call(args, name="g"))


@given(st.integers(-(10**6), 10**6))
def test_numbers_are_type_tolerant(n: int) -> None:
    as_int, as_float, as_str = call({"n": n}), call({"n": float(n)}), call({"n": str(n)})
    assert calls_equivalent(as_int, as_float)
    assert calls_equivalent(as_int, as_str)
    strict = MatchOptions(numeric_strings=False)
    assert calls_equivalent(as_int, as_float, strict)
    assert not calls_equivalent(as_int, as_str, strict)


@given(objects, st.text(min_size=1, max_size=8))
def test_null_equals_missing_only_when_asked(args: dict[str, Any], key: str) -> None:
    without = {k: v for k, v in args.items() if k != key}
    with_null = {**without, key: None}
    assert calls_equivalent(call(without), call(with_null))
    assert not calls_equivalent(call(without), call(with_null), MatchOptions(null_is_missing=False))


def test_strings_differ_by_content_and_optionally_case() -> None:
    assert calls_equivalent(call({"c": " economy "}), call({"c": "economy"}))
    assert not calls_equivalent(call({"c": "economy"}), call({"c": "business"}))
    assert not calls_equivalent(call({"c": "Economy"}), call({"c": "economy"}))
    assert calls_equivalent(call({"c": "Economy"}), call({"c": "economy"}), MatchOptions(case_sensitive=False))
    assert not calls_equivalent(call({"l": [1, 2]}), call({"l": [2, 1]}))


def test_invalid_json_compares_as_raw_text() -> None:
    a, b = call(None, raw='{"a": '), call(None, raw='{"a":  ')
    assert canonical_arguments(a).startswith("raw:")
    assert calls_equivalent(a, b)
    assert not calls_equivalent(a, call({"a": 1}))


def test_call_sequences_need_same_order_and_length() -> None:
    x, y = call({"a": 1}, name="x"), call({"b": 2}, name="y")
    assert call_sequences_equivalent([x, y], [x, y])
    assert not call_sequences_equivalent([x, y], [y, x])
    assert not call_sequences_equivalent([x], [x, y])


@given(st.text())
def test_normalize_text_is_idempotent(text: str) -> None:
    once = normalize_text(text)
    assert normalize_text(once) == once


# ASCII: some Unicode letters do not survive upper() then casefold() (Turkish dotless i), nor should they.
@given(st.text(alphabet=st.sampled_from("abcXYZ019 .,;:!?'\"-+$%€()’−…"), max_size=60))
def test_case_whitespace_and_a_final_exclamation_are_ignored(text: str) -> None:
    noisy = "  " + text.upper().replace(" ", "  \n") + "!!"
    assert texts_equivalent([text], [noisy])


# Sentences of plain words, and numbers as an assistant writes them: signed or not, with decimals, with a
# thousands separator.
words = st.lists(st.from_regex(r"[a-z]{1,8}", fullmatch=True), min_size=1, max_size=8)
numbers = st.from_regex(r"[-+]?(\d{1,6}|\d{1,3},\d{3}|\d{0,4}\.\d{1,3})", fullmatch=True)
# What may stand right before and after a number in a sentence.
before_number = st.sampled_from([" ", ", ", ": ", " (", ' "', " -- "])
after_number = st.sampled_from([" ", ". ", ", ", "! ", "? ", ") ", '" ', "; "])


def sentence(before: list[str], thing: str, after: list[str], left: str = " ", right: str = " ") -> str:
    return " ".join(before) + left + thing + right + " ".join(after)


@given(words, numbers, numbers, words, before_number, after_number)
def test_texts_differing_only_in_a_number_differ(
    before: list[str], a: str, b: str, after: list[str], left: str, right: str
) -> None:
    assume(a != b)
    assert normalize_text(sentence(before, a, after, left, right)) != normalize_text(
        sentence(before, b, after, left, right)
    )


@given(words, st.from_regex(r"[$€£]?(\d{1,5}|\d{0,3}\.\d{1,2})", fullmatch=True), words, before_number, after_number)
def test_a_sign_before_a_number_or_amount_counts(
    before: list[str], number: str, after: list[str], left: str, right: str
) -> None:
    plain = normalize_text(sentence(before, number, after, left, right))
    minus = normalize_text(sentence(before, "-" + number, after, left, right))
    plus = normalize_text(sentence(before, "+" + number, after, left, right))
    assert len({plain, minus, plus}) == 3
    # The Unicode minus sign and the en dash used as one are the same sign as the hyphen-minus.
    assert normalize_text(sentence(before, "−" + number, after, left, right)) == minus
    assert normalize_text(sentence(before, "–" + number, after, left, right)) == minus


@given(words, st.from_regex(r"\d{1,5}(\.\d{1,2})?", fullmatch=True), words)
def test_percent_and_currency_signs_count(before: list[str], number: str, after: list[str]) -> None:
    forms = [number, number + "%", number + "‰", "$" + number, "€" + number, "£" + number, number + "$"]
    normal = [normalize_text(sentence(before, form, after)) for form in forms]
    assert len(set(normal)) == len(forms)


@given(words)
def test_a_question_is_not_a_statement(text: list[str]) -> None:
    said = " ".join(text)
    assert normalize_text(said + "?") != normalize_text(said + ".")
    assert normalize_text(said + "?") == normalize_text(said + "??") == normalize_text(said + "?!")
    # A full stop, an exclamation mark or nothing end a statement alike.
    assert normalize_text(said + ".") == normalize_text(said + "!") == normalize_text(said)


@given(words, st.integers(0, 8), st.sampled_from(["not", "no", "never"]))
def test_a_negation_counts(text: list[str], at: int, negation: str) -> None:
    negated = [*text[:at], negation, *text[at:]]
    assert normalize_text(" ".join(text)) != normalize_text(" ".join(negated))


@given(words, st.integers(0, 7), st.sampled_from(["'", "’"]))
def test_an_apostrophe_inside_a_word_counts(text: list[str], at: int, apostrophe: str) -> None:
    at = min(at, len(text) - 1)
    contracted = [*text[:at], text[at] + f"n{apostrophe}t", *text[at + 1 :]]
    assert normalize_text(" ".join(text)) != normalize_text(" ".join(contracted))
    # "can't" is not "can t"; the curly apostrophe is the straight one.
    assert normalize_text(" ".join(contracted)) != normalize_text(" ".join(contracted).replace(apostrophe, " "))
    assert normalize_text(" ".join(contracted)) == normalize_text(" ".join(contracted).replace("’", "'"))


# Punctuation that only separates words: commas, dashes, colons, brackets, quotes, ellipses, sentence ends.
separators = st.sampled_from([" ", ", ", " -- ", " — ", "—", "-", "; ", ": ", " (", ") ", "... ", "… ", ". ", "! "])
separators |= st.sampled_from([' "', '" ', " ‘", "’ ", "' ", " '", " «", "» "])


@given(st.lists(st.tuples(st.from_regex(r"[a-z]{1,8}", fullmatch=True), separators), min_size=1, max_size=8))
def test_separators_between_words_fold_away(pieces: list[tuple[str, str]]) -> None:
    text = "".join(word + sep for word, sep in pieces)
    assert normalize_text(text) == " ".join(word for word, _ in pieces)


def test_symbols_and_words_still_count() -> None:
    assert not texts_equivalent(["It costs $30"], ["It costs €30"])
    assert not texts_equivalent(["Your flight is booked"], ["Your flight is not booked"])
    assert texts_equivalent(["Part one.", "Part two"], ["part one part two"])
    assert texts_equivalent(["Sure -- I'll  help!"], ["sure, i'll help"])
    for a, b in [("-$5", "$5"), ("10%", "10"), ("it.", "it?"), ("1.5", "15"), ("can't", "can"), (".5", "5")]:
        assert not texts_equivalent([f"That is {a}"], [f"That is {b}"]), (a, b)


def test_word_overlap_counts_the_kept_tokens() -> None:
    assert word_overlap("Your flight is booked.", "your flight is booked!") == 1.0
    assert word_overlap("It is $5.", "It is -$5.") == 0.5
    assert word_overlap("Booked?", "Booked.") == 0.5
    assert word_overlap("", "") == 1.0


@given(
    objects,
    st.integers(0, 1000),
    st.sampled_from([None, 2]),
    st.booleans(),
    st.sampled_from([(",", ":"), (" , ", " : ")]),
)
def test_displayed_arguments_ignore_key_order_and_spacing(
    args: dict[str, Any], seed: int, indent: int | None, ascii_only: bool, separators: tuple[str, str]
) -> None:
    shuffled = shuffle_keys(args, random.Random(seed))
    raw = json.dumps(shuffled, indent=indent, ensure_ascii=ascii_only, separators=separators)
    shown = display_arguments(call(args))
    assert display_arguments(call(None, raw=raw)) == shown
    # One line of JSON that says what the call said, and displaying it again changes nothing.
    assert len(shown.splitlines()) == 1
    assert json.loads(shown) == args
    assert display_arguments(call(None, raw=shown)) == shown


def test_displayed_arguments_keep_values_as_written() -> None:
    raw = '{"n":1.50, "big": 12345678901234567890, "e": 1E+2, "id": "1", "z": -0, "s": "é\\u00e9"}'
    shown = display_arguments(call(None, raw=raw))
    assert shown == '{"big": 12345678901234567890, "e": 1E+2, "id": "1", "n": 1.50, "s": "éé", "z": -0}'
    assert display_arguments(call(None, raw="")) == display_arguments(call(None, raw=" {} ")) == "{}"
    assert display_arguments(call(None, raw='{"a":\n  oops')) == '{"a": oops'
    # A line separator inside a string stays escaped, so a displayed call is one line.
    assert display_arguments(call(None, raw='{"a": "x\\u2028y"}')) == '{"a": "x\\u2028y"}'
