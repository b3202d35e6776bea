from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from delta_eval.judges.answers import (
    AnswerError,
    equivalence_schema,
    pairwise_schema,
    parse_equivalence,
    parse_pairwise,
)
from delta_eval.testing.servers.provider import WireError, check_strict_schema

DIMS = ("task_success", "accuracy")
texts = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)
unit = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
score = st.integers(min_value=1, max_value=4)
pairwise_answers = st.fixed_dictionaries(
    {
        "rationale": texts,
        "winner": st.sampled_from(["A", "B", "tie"]),
        "confidence": unit,
        "severity": st.sampled_from(["none", "minor", "critical"]),
        "scores": st.fixed_dictionaries({s: st.fixed_dictionaries({d: score for d in DIMS}) for s in ("A", "B")}),
        "summary": texts,
    }
)
# How models wrap JSON when they are not held to a schema.
wrappings = st.sampled_from(["{}", "```json\n{}\n```", "```\n{}\n```", "Here is my answer:\n{}", "{}\n\nThanks!"])


@given(pairwise_answers, wrappings)
def test_a_valid_pairwise_answer_parses_however_it_is_wrapped(answer: dict[str, Any], wrapping: str) -> None:
    parsed = parse_pairwise(wrapping.replace("{}", json.dumps(answer)), DIMS)
    assert parsed.model_dump() == answer


@given(st.booleans(), unit, texts, wrappings)
def test_a_valid_equivalence_answer_parses(equivalent: bool, confidence: float, reason: str, wrapping: str) -> None:
    answer = {"equivalent": equivalent, "confidence": confidence, "reason": reason}
    assert parse_equivalence(wrapping.replace("{}", json.dumps(answer))).model_dump() == answer


@given(pairwise_answers, st.sampled_from(["confidence", "score", "dimension", "winner", "severity", "scores"]))
def test_an_answer_out_of_its_ranges_says_what_is_wrong(answer: dict[str, Any], break_it: str) -> None:
    bad = json.loads(json.dumps(answer))
    if break_it == "confidence":
        bad["confidence"], expected = 85, "confidence"
    elif break_it == "score":
        bad["scores"]["B"]["accuracy"], expected = 5, "scores.B.accuracy: 5 is not between 1 and 4"
    elif break_it == "dimension":
        del bad["scores"]["A"]["task_success"]
        expected = "scores.A: missing task_success"
    elif break_it == "winner":
        bad["winner"], expected = "C", "winner"
    elif break_it == "severity":
        bad["severity"], expected = "fatal", "severity"
    else:
        del bad["scores"]
        expected = "scores"
    with pytest.raises(AnswerError, match=expected):
        parse_pairwise(json.dumps(bad), DIMS)


@given(st.text(max_size=60).filter(lambda t: "{" not in t))
def test_text_without_an_object_is_an_answer_error(text: str) -> None:
    with pytest.raises(AnswerError):
        parse_equivalence(text)


def test_lenient_about_case_strict_about_content() -> None:
    answer = {
        "winner": " b ",
        "confidence": 0.7,
        "severity": "Minor",
        "scores": {"A": {"accuracy": 2, "task_success": 3, "invented": 4}, "B": {"accuracy": 3, "task_success": 3}},
    }
    parsed = parse_pairwise(json.dumps(answer), DIMS)
    assert (parsed.winner, parsed.severity) == ("B", "minor")
    assert parsed.scores["A"] == {"task_success": 3, "accuracy": 2}  # a dimension nobody asked for is dropped
    with pytest.raises(AnswerError, match="not an object"):
        parse_equivalence("[1, 2]")
    with pytest.raises(AnswerError, match="empty"):
        parse_equivalence("  ")


def test_the_schemas_pass_openai_strict_mode() -> None:
    check_strict_schema(equivalence_schema(), "judgement")
    check_strict_schema(pairwise_schema(DIMS), "judgement")
    assert pairwise_schema(DIMS)["properties"]["scores"]["properties"]["A"]["required"] == list(DIMS)
    loose = {"type": "object", "properties": {"a": {"type": "string"}}, "required": []}
    with pytest.raises(WireError, match="additionalProperties"):
        check_strict_schema(loose, "x")
    with pytest.raises(WireError, match="Missing 'a'"):
        check_strict_schema({**loose, "additionalProperties": False}, "x")
