"""The judge interfaces: stage 2 (are these two outputs equivalent?) and stage 3 (which is better?).

A judge is any object with a ``name`` and the one async method of its protocol; LLM judges, rule-based judges and
panels all plug in the same way. A judge sees a :class:`PairView`: the replay point (context, tools, the recorded
turn) and the two outputs shown as "A" and "B", each with the request that side was actually sent. It never learns
which side is the candidate: the cascade (:mod:`delta_eval.judges.cascade`) decides the order and maps answers back.

A run builds its judges from factories that receive a :class:`~delta_eval.judges.context.JudgeContext`, so an LLM
judge calls its model through the run's response cache, limiter and retries.

Example (a whole stage-3 judge)::

    class PrefersShorter:
        name = "shorter"

        async def compare(self, pair: PairView) -> PairwiseResult:
            a, b = (len(" ".join(side.output.texts)) for side in (pair.a, pair.b))
            return PairwiseResult(winner="tie" if a == b else "A" if a < b else "B", confidence=0.6)
"""

from __future__ import annotations

from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from delta_eval.calls import ModelRequest
from delta_eval.schema import ReplayPoint, Severity, TurnOutput, Usage

__all__ = ["EquivalenceResult", "PairView", "PairwiseResult", "SideView", "SupportsComparison", "SupportsEquivalence"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SideView(_Frozen):
    """One output as a judge sees it: what the side did in the turn and the request it started from.

    ``request`` holds the system prompt, history, tools and parameters this side was sent (``None`` when the
    variant could not be applied). Nothing here says which side it is.
    """

    output: TurnOutput
    request: ModelRequest | None = None
    finish_reason: str = "stop"
    hit_tool_cap: bool = False


class PairView(_Frozen):
    """A pair as a judge sees it: the replay point and the two outputs in the order shown, ``a`` then ``b``."""

    point: ReplayPoint
    a: SideView
    b: SideView

    @property
    def pair_id(self) -> str:
        """The pair's id."""
        return self.point.pair_id

    def swapped(self) -> PairView:
        """The same pair shown the other way round."""
        return PairView(point=self.point, a=self.b, b=self.a)


class EquivalenceResult(_Frozen):
    """A stage-2 answer. ``equivalent`` is ``None`` when the judge could not tell.

    ``usage``, ``cost_usd`` and ``latency_ms`` say what the call used (``usage`` ``None``: not reported); ``raw``
    is the judge's own record of its answer (e.g. the parsed JSON), kept in the ``judgements`` table;
    ``prompt_hash`` names its prompt's version.
    """

    equivalent: bool | None
    confidence: float = Field(ge=0.0, le=1.0)
    reasoning: str = ""
    usage: Usage | None = Usage()
    cost_usd: float | None = None
    latency_ms: float = 0.0
    prompt_hash: str = ""
    raw: dict[str, Any] = Field(default_factory=dict)


class PairwiseResult(_Frozen):
    """A stage-3 answer about outputs shown as A and B (see :class:`EquivalenceResult` for the shared fields).

    ``severity`` is how bad the worse output's failure is; ``scores`` are each output's scores (``"A"``, ``"B"``)
    on the rubric's dimensions, 1 (poor) to 4 (excellent); ``summary`` is the judge's account in a few sentences;
    ``reasoning`` its trace.
    """

    winner: Literal["A", "B", "tie"]
    confidence: float = Field(ge=0.0, le=1.0)
    reasoning: str = ""
    severity: Severity | None = None
    scores: dict[str, dict[str, float]] = Field(default_factory=dict)
    summary: str = ""
    usage: Usage | None = Usage()
    cost_usd: float | None = None
    latency_ms: float = 0.0
    prompt_hash: str = ""
    raw: dict[str, Any] = Field(default_factory=dict)


@runtime_checkable
class SupportsEquivalence(Protocol):
    """Stage 2: decides whether two outputs mean the same thing."""

    name: str

    async def equivalent(self, pair: PairView) -> EquivalenceResult:
        """Whether outputs ``a`` and ``b`` are equivalent answers to the point, and how sure the judge is."""
        ...


@runtime_checkable
class SupportsComparison(Protocol):
    """Stage 3: compares two outputs and names the better one (or a tie), with a short reasoning trace."""

    name: str

    async def compare(self, pair: PairView) -> PairwiseResult:
        """Which of outputs ``a`` and ``b`` better answers the point."""
        ...
