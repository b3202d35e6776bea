"""The LLM judges: a cheap model that marks pairs equivalent (stage 2) and a strong one that picks the better
output against the user's rubric (stage 3).

:class:`EquivalenceJudge` and :class:`PairwiseJudge` are settings (pydantic models, so they read from TOML too);
the run builds each into a judge with its :class:`~delta_eval.judges.context.JudgeContext`, so judge calls go through
the run's model clients: the response cache (a resumed run never pays for a judge call twice), the model's limiter,
the retry policy, and the run's prices for cost.

A call sends the instructions (:mod:`delta_eval.judges.prompts`) as the system message and the pair as the user
message, asking for the answer's JSON schema (:mod:`delta_eval.judges.answers`) as structured output unless
``structured_output=False``. An answer that does not parse or validate gets one repair attempt: the judge is shown
its answer and what is wrong with it, and asked again. A second unusable answer, or a refusal, raises
:class:`~delta_eval.exceptions.JudgeError` with what the judge said and what the calls cost, which the cascade turns
into an error row (and, when no stage-3 judge answered, an error verdict): never a silent tie.

The reasoning trace kept with a stage-3 answer is the provider's reasoning summary where the model gives one
(reasoning models with summaries on), else the judge's own ``rationale``; both are kept in ``raw``.

Example::

    judges = de.Judges(
        equivalence=de.EquivalenceJudge(model="openai:gpt-4.1-nano"),
        judge=de.PairwiseJudge(model="anthropic:claude-sonnet-4-5", rubric="rubric.md",
                               params=de.GenerateParams(reasoning_effort="medium")),
        order="both",
    )
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from delta_eval.adapters.client import ModelClient
from delta_eval.adapters.limits import ModelLimits
from delta_eval.calls import GenerateParams, ModelRequest, ResponseFormat
from delta_eval.exceptions import ConfigError, JudgeError
from delta_eval.judges.answers import (
    AnswerError,
    EquivalenceAnswer,
    PairwiseAnswer,
    equivalence_schema,
    pairwise_schema,
    parse_equivalence,
    parse_pairwise,
)
from delta_eval.judges.base import EquivalenceResult, PairView, PairwiseResult
from delta_eval.judges.context import JudgeContext
from delta_eval.judges.prompts import (
    Instructions,
    Rubric,
    equivalence_instructions,
    pairwise_instructions,
    render_equivalence_pair,
    render_pairwise_pair,
)
from delta_eval.pricing import Spend
from delta_eval.schema import Message

__all__ = ["EquivalenceJudge", "LLMEquivalenceJudge", "LLMPairwiseJudge", "PairwiseJudge"]

_REPAIR = (
    "Your reply could not be used: {problem}. Reply again with only the JSON object, with every key the "
    "instructions ask for and values of the right kind."
)

T = TypeVar("T")


class _JudgeSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    provider_options: dict[str, Any] = Field(default_factory=dict)
    params: GenerateParams = GenerateParams()
    structured_output: bool = True
    limits: ModelLimits | None = None
    name: str | None = None

    @property
    def label(self) -> str:
        """The judge's name in verdicts and judgements: ``name`` if given, else the model id."""
        return self.name or self.model

    def _client(self, context: JudgeContext) -> ModelClient:
        return context.client(self.model, self.provider_options, self.limits)


class EquivalenceJudge(_JudgeSettings):
    """Stage 2: a fast, cheap model asked whether the two outputs are equivalent, answering ``{equivalent,
    confidence, reason}``; only a confident "equivalent" (see ``Judges.min_confidence``) resolves a pair.

    - ``model``: the model id (``"openai:gpt-4.1-nano"``); ``provider_options`` and ``limits`` as for a variant;
    - ``params``: sampling (default temperature 0, at most 1,024 output tokens);
    - ``structured_output``: ask the provider for the answer's JSON schema (off: the prompt and strict parsing only);
    - ``name``: how verdicts name the judge (default: the model id); panel members need distinct names.

    Example:
        >>> EquivalenceJudge(model="openai:gpt-4.1-nano").label
        'openai:gpt-4.1-nano'
    """

    params: GenerateParams = GenerateParams(temperature=0.0, max_tokens=1024)

    def __call__(self, context: JudgeContext) -> LLMEquivalenceJudge:
        """The judge, calling its model through the run's client."""
        return LLMEquivalenceJudge(self, self._client(context), context)


class PairwiseJudge(_JudgeSettings):
    """Stage 3: a strong (ideally reasoning) model that sees the whole context and says which output is better,
    how bad the worse one's failure is, and scores both on the rubric's dimensions.

    - ``rubric``: a Markdown file of product and business intent; its ``## Dimensions`` bullets are what is scored
      (default: the package's rubric: task success, policy, accuracy, communication);
    - ``reference``: show the recorded production answer as evidence (default ``True``);
    - ``params``: sampling and reasoning (default: at most 16,000 output tokens, reasoning included; set
      ``reasoning_effort`` or ``reasoning_budget`` for a reasoning model);
    - the other fields as for :class:`EquivalenceJudge`.

    Example:
        >>> PairwiseJudge(model="anthropic:claude-sonnet-4-5", name="sonnet").label
        'sonnet'
    """

    params: GenerateParams = GenerateParams(max_tokens=16_000)
    rubric: Path | None = None
    reference: bool = True

    @field_validator("rubric")
    @classmethod
    def _rubric_exists(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_file():
            raise ValueError(f"rubric file not found: {value}")
        return value

    def __call__(self, context: JudgeContext) -> LLMPairwiseJudge:
        """The judge, calling its model through the run's client."""
        return LLMPairwiseJudge(self, self._client(context), context)


@dataclass
class _Asked(Generic[T]):
    """One judge answer that parsed, with what it took to get it."""

    answer: T
    text: str
    spend: Spend
    reasoning_summary: str | None
    raw: dict[str, Any] = field(default_factory=dict)


class _Asker:
    """Asks one judge model one question, with one repair attempt, through the run's client."""

    def __init__(self, settings: _JudgeSettings, client: ModelClient, context: JudgeContext, schema: dict[str, Any]):
        self.name = settings.label
        self.client = client
        self.context = context
        fmt = ResponseFormat(name="judgement", json_schema=schema) if settings.structured_output else None
        self.params = settings.params.model_copy(update={"response_format": fmt})

    async def ask(self, instructions: Instructions, user: str, pair_id: str, parse: Callable[[str], T]) -> _Asked[T]:
        messages = [Message(role="system", content=instructions.text), Message(role="user", content=user)]
        spend, texts = Spend(), []
        for attempt in range(2):
            request = ModelRequest(model=self.client.model, messages=tuple(messages), params=self.params)
            # Keyed by judge and pair: each pair's call is its own draw, and stays cached for a resumed run.
            result = await self.client.generate(request, namespace=f"judge:{self.name}:{pair_id}")
            r = result.response
            dollars = self.context.cost_of(self.client.model, r.usage, info=self.client.adapter.info, batch=r.batch)
            spend.add(r.usage, cost_usd=dollars, latency_ms=r.latency_ms, cached=result.cached)
            text = r.message.content or ""
            texts.append(text)
            raw: dict[str, Any] = {"text": texts[0]} if attempt == 0 else {"text": texts[0], "repair_text": text}
            if r.finish_reason == "content_filter":
                raise self._error(f"the judge model refused to answer ({r.provider_finish_reason or 'refusal'})",
                                  raw, spend)  # fmt: skip
            try:
                answer = parse(text)
            except AnswerError as exc:
                if attempt == 1:
                    raise self._error(f"unusable answer after one repair attempt: {exc}", raw, spend) from None
                cut = " (it was cut off at the output token limit)" if r.finish_reason == "length" else ""
                # The judge's own message goes back as it came (reasoning state included), then the repair request.
                messages += [
                    r.message.model_copy(update={"content": text or "(empty reply)", "tool_calls": ()}),
                    Message(role="user", content=_REPAIR.format(problem=f"{exc}{cut}")),
                ]
                continue
            summary = r.message.reasoning.summary if r.message.reasoning is not None else None
            kept: dict[str, Any] = {"served_model": r.served_model or None, "request_id": r.request_id}
            if attempt == 1:
                kept["repaired_from"] = texts[0]
            if summary:
                kept["reasoning_summary"] = summary
            return _Asked(answer, text, spend, summary, {k: v for k, v in kept.items() if v is not None})
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    def _error(message: str, raw: dict[str, Any], spend: Spend) -> JudgeError:
        return JudgeError(message, raw, usage=spend.usage, cost_usd=spend.cost_usd, latency_ms=spend.latency_ms)


class LLMEquivalenceJudge:
    """The stage-2 judge an :class:`EquivalenceJudge` builds (see the module docstring)."""

    def __init__(self, settings: EquivalenceJudge, client: ModelClient, context: JudgeContext) -> None:
        self.name = settings.label
        self.instructions = equivalence_instructions()
        self._asker = _Asker(settings, client, context, equivalence_schema())

    async def equivalent(self, pair: PairView) -> EquivalenceResult:
        """Ask the model whether ``pair``'s outputs are equivalent."""
        asked: _Asked[EquivalenceAnswer] = await self._asker.ask(
            self.instructions, render_equivalence_pair(pair), pair.pair_id, parse_equivalence
        )
        a = asked.answer
        return EquivalenceResult(
            equivalent=a.equivalent,
            confidence=a.confidence,
            reasoning=asked.reasoning_summary or a.reason,
            usage=asked.spend.usage,
            cost_usd=asked.spend.cost_usd,
            latency_ms=asked.spend.latency_ms,
            prompt_hash=self.instructions.hash,
            raw={"answer": a.model_dump(), **asked.raw},
        )


class LLMPairwiseJudge:
    """The stage-3 judge a :class:`PairwiseJudge` builds (see the module docstring)."""

    def __init__(self, settings: PairwiseJudge, client: ModelClient, context: JudgeContext) -> None:
        self.name = settings.label
        try:
            self.rubric = Rubric.load(settings.rubric, default=context.rubric)
        except OSError as exc:
            raise ConfigError(f"cannot read the rubric of judge {self.name}: {exc}") from None
        self.reference = settings.reference
        self.instructions = pairwise_instructions(self.rubric, reference=settings.reference)
        self._asker = _Asker(settings, client, context, pairwise_schema(self.rubric.dimensions))

    async def compare(self, pair: PairView) -> PairwiseResult:
        """Ask the model which of ``pair``'s outputs is better."""
        dims = self.rubric.dimensions
        asked: _Asked[PairwiseAnswer] = await self._asker.ask(
            self.instructions,
            render_pairwise_pair(pair, reference=self.reference),
            pair.pair_id,
            lambda text: parse_pairwise(text, dims),
        )
        a = asked.answer
        return PairwiseResult(
            winner=a.winner,
            confidence=a.confidence,
            reasoning=asked.reasoning_summary or a.rationale,
            severity=a.severity,
            scores={side: {d: float(v) for d, v in s.items()} for side, s in a.scores.items()},
            summary=a.summary,
            usage=asked.spend.usage,
            cost_usd=asked.spend.cost_usd,
            latency_ms=asked.spend.latency_ms,
            prompt_hash=self.instructions.hash,
            raw={"answer": a.model_dump(), **asked.raw},
        )
