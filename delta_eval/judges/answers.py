"""What an LLM judge must answer, as JSON schemas for structured output, and the strict parsing of its answers.

The schemas keep to what every provider's structured output accepts (OpenAI's strict mode: every property
required, no additional properties; no numeric bounds, which Anthropic and strict OpenAI reject or ignore), so
ranges are checked here instead: a confidence outside [0, 1], a score outside 1-4 or a missing dimension is an
:class:`AnswerError` like unparseable JSON, and the judge gets one chance to repair it.

Parsing is strict about content and lenient about wrapping: the JSON object may come in a Markdown code fence or
after a sentence of preamble, and ``winner`` / ``severity`` are read case-insensitively.

Example:
    >>> parse_equivalence('```json\\n{"equivalent": true, "confidence": 0.9, "reason": "same"}\\n```').confidence
    0.9
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from delta_eval.schema import Severity

__all__ = [
    "AnswerError",
    "EquivalenceAnswer",
    "PairwiseAnswer",
    "equivalence_schema",
    "pairwise_schema",
    "parse_equivalence",
    "parse_pairwise",
]


class AnswerError(ValueError):
    """A judge's answer that cannot be used: the message says what is wrong, in words the judge can act on."""


class EquivalenceAnswer(BaseModel):
    """A stage-2 answer."""

    model_config = ConfigDict(extra="ignore")

    equivalent: bool
    confidence: float = Field(ge=0.0, le=1.0)
    reason: str = ""


class PairwiseAnswer(BaseModel):
    """A stage-3 answer; ``scores`` maps ``"A"`` and ``"B"`` to a 1-4 score per rubric dimension."""

    model_config = ConfigDict(extra="ignore")

    rationale: str = ""
    winner: Literal["A", "B", "tie"]
    confidence: float = Field(ge=0.0, le=1.0)
    severity: Severity
    scores: dict[Literal["A", "B"], dict[str, int]]
    summary: str = ""

    @field_validator("winner", mode="before")
    @classmethod
    def _winner(cls, value: Any) -> Any:
        if isinstance(value, str):
            v = value.strip()
            return v.upper() if v.lower() in ("a", "b") else v.lower()
        return value

    @field_validator("severity", mode="before")
    @classmethod
    def _severity(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value


def equivalence_schema() -> dict[str, Any]:
    """The JSON schema of a stage-2 answer."""
    return _object(
        {
            "equivalent": {"type": "boolean"},
            "confidence": {"type": "number", "description": "between 0 and 1"},
            "reason": {"type": "string"},
        }
    )


def pairwise_schema(dimensions: tuple[str, ...]) -> dict[str, Any]:
    """The JSON schema of a stage-3 answer scoring ``dimensions``."""
    side = _object({d: {"type": "integer", "description": "1 (poor) to 4 (excellent)"} for d in dimensions})
    return _object(
        {
            "rationale": {"type": "string"},
            "winner": {"type": "string", "enum": ["A", "B", "tie"]},
            "confidence": {"type": "number", "description": "between 0 and 1"},
            "severity": {"type": "string", "enum": ["none", "minor", "critical"]},
            "scores": _object({"A": side, "B": side}),
            "summary": {"type": "string"},
        }
    )


def _object(properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


_FENCE = re.compile(r"^```[a-zA-Z]*\s*\n(.*?)\n?```\s*$", re.DOTALL)


def _json_object(text: str) -> dict[str, Any]:
    stripped = text.strip()
    if not stripped:
        raise AnswerError("the reply is empty; expected a JSON object")
    fenced = _FENCE.match(stripped)
    if fenced:
        stripped = fenced.group(1).strip()
    try:
        value = json.loads(stripped)
    except json.JSONDecodeError as exc:
        # A sentence before or after the object: take the outermost braces.
        start, end = stripped.find("{"), stripped.rfind("}")
        if start < 0 or end <= start:
            raise AnswerError(f"the reply is not JSON ({exc.msg} at character {exc.pos})") from None
        try:
            value = json.loads(stripped[start : end + 1])
        except json.JSONDecodeError as inner:
            raise AnswerError(f"the reply is not valid JSON ({inner.msg} at character {start + inner.pos})") from None
    if not isinstance(value, dict):
        raise AnswerError(f"the reply is JSON but not an object (it is a {type(value).__name__})")
    return value


def _problems(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'answer'}: {e['msg']}" for e in exc.errors())


def parse_equivalence(text: str) -> EquivalenceAnswer:
    """A stage-2 answer from the judge's reply; :class:`AnswerError` says what is wrong with an unusable one."""
    try:
        return EquivalenceAnswer.model_validate(_json_object(text))
    except ValidationError as exc:
        raise AnswerError(_problems(exc)) from None


def parse_pairwise(text: str, dimensions: tuple[str, ...]) -> PairwiseAnswer:
    """A stage-3 answer from the judge's reply, with a 1-4 score for each of ``dimensions`` for A and B."""
    try:
        answer = PairwiseAnswer.model_validate(_json_object(text))
    except ValidationError as exc:
        raise AnswerError(_problems(exc)) from None
    problems = []
    for side in ("A", "B"):
        got = answer.scores.get(side)
        if got is None:
            problems.append(f"scores.{side}: missing")
            continue
        missing = [d for d in dimensions if d not in got]
        if missing:
            problems.append(f"scores.{side}: missing {', '.join(missing)}")
        problems += [f"scores.{side}.{d}: {v} is not between 1 and 4" for d, v in got.items() if not 1 <= v <= 4]
    if problems:
        raise AnswerError("; ".join(problems))
    # Only the rubric's dimensions are kept: an extra one the judge invented is not a score anyone asked for.
    kept = {side: {d: answer.scores[side][d] for d in dimensions} for side in answer.scores}
    return answer.model_copy(update={"scores": kept})
