"""How many conversations a decision needs, from a pilot run: the sample size for a non-inferiority margin at a given
power, the per-stratum spread for Neyman allocation, and what the run would cost.

The plan answers the decision rule's own question (its estimand: all or judged pairs, weighted or not, hard or
soft, errors as losses; :mod:`delta_eval.metrics.estimand`) with the decision's own interval
(:mod:`delta_eval.metrics.difference`): it finds the fewest conversations ``n`` at which, were the true win rate
``expected``, the interval's lower bound would clear ``50% - margin`` with probability ``power``:

    expected - z_power se(n) - (lower half-width at n) > 50% - margin

where ``se(n)`` and the half-width come from the pilot's per-conversation spread, pairs per conversation, the
shares of pairs each side wins and the design effect, scaled to ``n`` conversations. The pilot's spread is itself
an estimate from few conversations: the plan uses its 80% upper confidence bound (so the promised power holds for
most pilots, not half of them). A pilot where no pair was won by either side (a change that changes nothing) still
gets a finite plan: the conversations needed for the interval's bound on differences the sample may have missed
to clear the margin.

Example:
    >>> rows = [{"outcome": o, "conversation_id": f"c{i}", "stratum": "s"}
    ...         for i in range(40) for o in (("candidate", "tie") if i % 2 else ("baseline", "equivalent"))]
    >>> sample_size(rows, margin=0.05).conversations
    251
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from statistics import NormalDist

from pydantic import BaseModel, ConfigDict

from delta_eval.allocation import allocate
from delta_eval.metrics.difference import PairedSums
from delta_eval.metrics.distributions import chi2_ppf
from delta_eval.metrics.estimand import Components, Estimand, components
from delta_eval.metrics.frames import Rows, rows_of

__all__ = ["SamplePlan", "sample_size", "stratum_sd"]

#: The one-sided confidence of the upper bound on the pilot's spread that the plan uses.
SPREAD_ASSURANCE = 0.8


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
    estimand: str = ""

    def __str__(self) -> str:
        cost = [
            f"judging ~${self.judge_cost_usd:,.2f}" if self.judge_cost_usd is not None else None,
            f"replays ~${self.replay_cost_usd:,.2f}" if self.replay_cost_usd is not None else None,
        ]
        said = ", ".join(c for c in cost if c) or "cost unknown (unpriced models in the pilot)"
        return (
            f"{self.conversations} conversations (~{self.pairs} pairs, ~{self.judged_pairs} for the stage-3 judge; "
            f"{said}) to show non-inferiority within {self.margin * 100:g} points of the "
            f"{self.estimand or 'win rate'} with {self.power:.0%} power at {self.confidence:.0%} confidence, if the "
            f"true win rate is {self.expected:.0%}; from a pilot of {self.pilot_conversations} conversations (sd per "
            f"conversation {self.sd_per_conversation:.3f}, {self.pairs_per_conversation:.1f} pairs each, "
            f"{self.judged_fraction:.0%} judged)"
        )


def stratum_sd(verdicts: Rows, *, over: str = "all", estimand: Estimand | None = None) -> dict[str, float]:
    """Per stratum, the standard deviation of a conversation's summed residual score (its pairs' scores minus the
    stratum's mean): what Neyman allocation weighs strata by when conversations are the sampling unit."""
    e = estimand or Estimand.model_validate({"over": over})
    return _stratum_sd(components(verdicts, e))


def _stratum_sd(c: Components) -> dict[str, float]:
    by: dict[str, dict[str, list[float]]] = {}
    for s, cl, h in zip(c.scores, c.clusters, c.strata, strict=True):
        by.setdefault(h, {}).setdefault(cl, []).append(s)
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


def _spread_factor(df: float) -> float:
    """How much to inflate the pilot's variance for its :data:`SPREAD_ASSURANCE` upper confidence bound."""
    if df <= 0:
        return 1.0
    return float(df / chi2_ppf(1 - SPREAD_ASSURANCE, df))


def _conversations_needed(
    sums: PairedSums, g: int, expected: float, bound: float, power: float, confidence: float, inflate: float
) -> int:
    """The fewest conversations at which the expected lower bound clears ``bound`` with ``power``, from the
    pilot's sums over its ``g`` conversations."""
    z_power = NormalDist().inv_cdf(power)

    def enough(n: float) -> bool:
        # The pilot's spread, inflated to its upper bound, at n conversations.
        d = sums.difference(confidence, scale=n / g, spread=inflate)
        assert d.estimate is not None
        lower_half = (d.estimate - d.ci_low) / 2
        se = d.se / 2
        return expected - z_power * se - lower_half > bound

    hi = 2.0
    while not enough(hi):
        hi *= 2
        if hi > 1e8:
            raise ValueError("no sample size reaches the power asked for (the pilot's spread is too large)")
    lo = 1.0
    while hi - lo > 1:
        mid = math.floor((lo + hi) / 2)
        lo, hi = (lo, mid) if enough(mid) else (mid, hi)
    return max(2, math.ceil(hi))


def sample_size(
    verdicts: Rows,
    margin: float = 0.02,
    *,
    power: float = 0.8,
    expected: float = 0.5,
    confidence: float = 0.95,
    estimand: Estimand | None = None,
    population: Mapping[str, int] | None = None,
    judge_cost_per_pair: float | None = None,
    replay_cost_per_conversation: float | None = None,
    min_per_stratum: int = 1,
) -> SamplePlan:
    """The plan for a run like the pilot whose verdicts are given (see the module docstring). ``estimand``: the
    decision rule's (default: all pairs, weighted when the weights vary, errors as losses). ``population``: the
    number of conversations per stratum, for a Neyman allocation of the total."""
    bound = 0.5 - margin
    if expected <= bound:
        raise ValueError(f"an expected win rate of {expected:.1%} is not above the margin's {bound:.1%}: no sample "
                         "size shows non-inferiority")  # fmt: skip
    e = estimand or Estimand()
    rows = rows_of(verdicts)
    c = components(rows, e)
    sums = c.sums()
    d = sums.difference(confidence)
    if d.estimate is None or d.clusters < 2:
        raise ValueError("the pilot needs decided pairs from at least two conversations")
    inflate = _spread_factor(d.df)
    n = _conversations_needed(sums, d.clusters, expected, bound, power, confidence, inflate)
    per_conv = d.pairs / d.clusters
    counts = c.counts
    judged = counts["candidate"] + counts["baseline"] + counts["tie"]
    judged_fraction = judged / max(1, sum(counts.values()) - counts["error"])
    sds = _stratum_sd(c)
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
        sd_per_conversation=d.se / 2 * math.sqrt(d.clusters),
        pairs_per_conversation=per_conv,
        judged_fraction=judged_fraction,
        stratum_sd=sds,
        allocation=allocation,
        judge_cost_usd=None if judge_cost_per_pair is None else judge_cost_per_pair * judged_pairs,
        replay_cost_usd=None if replay_cost_per_conversation is None else replay_cost_per_conversation * n,
        pilot_conversations=d.clusters,
        estimand=e.describe(c.weighted).split(",")[0],
    )
