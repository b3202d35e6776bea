"""The weights of a composite score over candidates (quality, latency, cost), for teams that rank candidates by
one number; :mod:`delta_eval.analysis.leaderboard` computes it, beside the decision and never instead of it.

Example:
    >>> ScoreWeights(quality=0.6, latency=0.1, cost=0.3).quality
    0.6
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["ScoreWeights"]


class ScoreWeights(BaseModel):
    """The weights of a composite score (they need not sum to 1: they are normalised). A criterion not given weighs
    nothing (``ScoreWeights(quality=1)`` ranks by quality alone); at least one must weigh something."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    quality: float = Field(default=0.0, ge=0)
    latency: float = Field(default=0.0, ge=0)
    cost: float = Field(default=0.0, ge=0)

    @model_validator(mode="after")
    def _something_weighs(self) -> ScoreWeights:
        if self.quality + self.latency + self.cost <= 0:
            raise ValueError("a score needs a weight above 0 for quality, latency or cost")
        return self
