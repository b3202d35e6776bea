"""The judge interfaces: stage 2 (are these two outputs equivalent?) and stage 3 (which is better?).

A judge is any object with a ``name`` and the one async method of its protocol; LLM judges, rule-based judges and
panels all plug in the same way. Judges see outputs as "A" and "B" and never learn which side is the candidate:
the cascade (:mod:`delta_eval.judges.cascade`) decides the order and maps answers back.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from delta_eval.schema import ReplayPoint, TurnOutput, Usage

__all__ = ["EquivalenceJudge", "EquivalenceResult", "PairwiseJudge", "PairwiseResult"]


class EquivalenceResult(BaseModel):
    """A stage-2 answer. ``equivalent`` is ``None`` when the judge could not tell."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    equivalent: bool | None
    confidence: float = Field(ge=0.0, le=1.0)
    reasoning: str = ""
    usage: Usage = Usage()
    cost_usd: float | None = None
    latency_ms: float = 0.0


class PairwiseResult(BaseModel):
    """A stage-3 answer about outputs shown as A and B."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    winner: Literal["A", "B", "tie"]
    confidence: float = Field(ge=0.0, le=1.0)
    reasoning: str = ""
    usage: Usage = Usage()
    cost_usd: float | None = None
    latency_ms: float = 0.0
    raw: dict[str, Any] = Field(default_factory=dict)


@runtime_checkable
class EquivalenceJudge(Protocol):
    """Stage 2: decides whether two outputs mean the same thing."""

    name: str

    async def equivalent(self, point: ReplayPoint, a: TurnOutput, b: TurnOutput) -> EquivalenceResult:
        """Whether ``a`` and ``b`` are equivalent answers to ``point``, and how sure the judge is."""
        ...


@runtime_checkable
class PairwiseJudge(Protocol):
    """Stage 3: compares two outputs and names the better one (or a tie), with a short reasoning trace."""

    name: str

    async def compare(self, point: ReplayPoint, a: TurnOutput, b: TurnOutput) -> PairwiseResult:
        """Which of ``a`` and ``b`` better answers ``point``."""
        ...
