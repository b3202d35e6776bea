"""How many conversations a decision needs, from a pilot run: the sample size for a non-inferiority margin at a given
power, the per-stratum spread for Neyman allocation, and what the run would cost.

The pilot gives the variance of the win rate per conversation (cluster-robust: ``se^2 x conversations``), the pairs
per conversation, the share of pairs stage 3 had to judge and what a judged pair and a replayed conversation cost.
For a true win rate ``expected`` (50%: "as good as the baseline") the conversations needed to show non-inferiority
with one-sided level ``(1 - confidence) / 2`` and the given ``power`` are

    n = sigma_c^2 (z_(1 - alpha) + z_power)^2 / (expected - (0.5 - margin))^2

Example:
    >>> rows = [{"outcome": o, "conversation_id": f"c{i}", "stratum": "s"}
    ...         for i in range(40) for o in (("candidate", "tie") if i % 2 else ("baseline", "equivalent"))]
    >>> sample_size(rows, margin=0.05).conversations
    202
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from statistics import NormalDist

from pydantic import BaseModel, ConfigDict

from delta_eval.allocation import allocate
from delta_eval.metrics.frames import Rows, rows_of
from delta_eval.metrics.intervals import clustered_mean
from delta_eval.metrics.winrate import pair_scores

__all__ = ["SamplePlan", "sample_size", "stratum_sd"]


class SamplePlan(BaseModel):
    """What a run needs (see the module docstring) and the pilot figures it rests on."""

    model_config = ConfigDict(frozen=True)

    conversations: int
    pairs: int
    judged_pairs: int
    margin: float
    power: float
    confidence: float
    expected: float
    sd_per_conversation: float
    pairs_per_conversation: float
    judged_fraction: float
    stratum_sd: dict[str, float]
    allocation: dict[str, int] = {}
    judge_cost_usd: float | None = None
    replay_cost_usd: float | None = None
    pilot_conversations: int = 0

    def __str__(self) -> str:
        cost = [
            f"judging ~${self.judge_cost_usd:,.2f}" if self.judge_cost_usd is not None else None,
            f"replays ~${self.replay_cost_usd:,.2f}" if self.replay_cost_usd is not None else None,
        ]
        said = ", ".join(c for c in cost if c) or "cost unknown (unpriced models in the pilot)"
        return (
            f"{self.conversations} conversations (~{self.pairs} pairs, ~{self.judged_pairs} for the stage-3 judge; "
            f"{said}) to show non-inferiority within {self.margin:.0%} with {self.power:.0%} power at "
            f"{self.confidence:.0%} confidence, if the true win rate is {self.expected:.0%}; from a pilot of "
            f"{self.pilot_conversations} conversations (sd per conversation {self.sd_per_conversation:.3f}, "
            f"{self.pairs_per_conversation:.1f} pairs each, {self.judged_fraction:.0%} judged)"
        )


def stratum_sd(verdicts: Rows, *, over: str = "all") -> dict[str, float]:
    """Per stratum, the standard deviation of a conversation's summed residual score (its pairs' scores minus the
    stratum's mean): what Neyman allocation weighs strata by when conversations are the sampling unit."""
    scores, _, clusters, strata, _ = pair_scores(verdicts, over=over)  # type: ignore[arg-type]
    by: dict[str, dict[str, list[float]]] = {}
    for s, c, h in zip(scores, clusters, strata, strict=True):
        by.setdefault(h, {}).setdefault(c, []).append(s)
    out = {}
    for h, convs in sorted(by.items()):
        values = [v for vs in convs.values() for v in vs]
        mean = sum(values) / len(values)
        totals = [sum(v - mean for v in vs) for vs in convs.values()]
        if len(totals) < 2:
            continue
        m = sum(totals) / len(totals)
        out[h] = math.sqrt(sum((t - m) ** 2 for t in totals) / (len(totals) - 1))
    return out


def sample_size(
    verdicts: Rows,
    margin: float = 0.02,
    *,
    power: float = 0.8,
    expected: float = 0.5,
    confidence: float = 0.95,
    population: Mapping[str, int] | None = None,
    judge_cost_per_pair: float | None = None,
    replay_cost_per_conversation: float | None = None,
    min_per_stratum: int = 1,
) -> SamplePlan:
    """The plan for a run like the pilot whose verdicts are given (see the module docstring). ``population``: the
    number of conversations per stratum, for a Neyman allocation of the total."""
    bound = 0.5 - margin
    if expected <= bound:
        raise ValueError(f"an expected win rate of {expected:.1%} is not above the margin's {bound:.1%}: no sample "
                         "size shows non-inferiority")  # fmt: skip
    rows = rows_of(verdicts, ["outcome", "conversation_id", "stratum", "weight", "preference"])
    scores, _, clusters, strata, counts = pair_scores(rows)
    mean = clustered_mean(scores, clusters=clusters, strata=strata)
    if mean.estimate is None or mean.clusters < 2:
        raise ValueError("the pilot needs decided pairs from at least two conversations")
    sd_c = mean.se * math.sqrt(mean.clusters)
    z = NormalDist().inv_cdf(1 - (1 - confidence) / 2) + NormalDist().inv_cdf(power)
    n = max(2, math.ceil((sd_c * z / (expected - bound)) ** 2))
    per_conv = mean.n / mean.clusters
    judged = counts["candidate"] + counts["baseline"] + counts["tie"]
    judged_fraction = judged / max(1, sum(counts.values()) - counts["error"])
    sds = stratum_sd(rows)
    allocation: dict[str, int] = {}
    if population:
        allocation = allocate(dict(population), n, min_per_stratum, sds or None)
    pairs = round(n * per_conv)
    judged_pairs = round(pairs * judged_fraction)
    return SamplePlan(
        conversations=n,
        pairs=pairs,
        judged_pairs=judged_pairs,
        margin=margin,
        power=power,
        confidence=confidence,
        expected=expected,
        sd_per_conversation=sd_c,
        pairs_per_conversation=per_conv,
        judged_fraction=judged_fraction,
        stratum_sd=sds,
        allocation=allocation,
        judge_cost_usd=None if judge_cost_per_pair is None else judge_cost_per_pair * judged_pairs,
        replay_cost_usd=None if replay_cost_per_conversation is None else replay_cost_per_conversation * n,
        pilot_conversations=mean.clusters,
    )
