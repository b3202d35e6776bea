"""Win rates with confidence intervals, overall and per stratum, plain or reweighted to the population.

The score of a pair is 1 when the candidate wins, 0 when the baseline wins and 1/2 for a tie; the win rate is the
mean score: ``(candidate wins + ties / 2) / pairs``. ``over="judged"`` counts the pairs the stage-3 judge decided;
``over="all"`` also counts pairs found equivalent in stages 1 and 2, as ties. Pairs that ended in error are left
out of both and reported in ``errors``. With ``soft=True`` a judged pair scores its ``preference`` (the
probability that the candidate is better, from the judge's confidence, both orders and a panel) instead: the
continuous win rate (AlpacaEval's ``mean(p)``).

Intervals (95% by default), all treating the conversation as the cluster its turns are
(:mod:`delta_eval.metrics.intervals`):

- ``cluster`` (the default): the design-effect Wilson interval for hard outcomes, ``estimate ± t se`` for soft
  ones, with the linearised stratified-cluster standard error; weighted or not.
- ``bootstrap``: a stratified cluster bootstrap.
- ``wilson``: per-pair Wilson, as if turns were independent (too narrow when they are correlated; for comparison).
- ``iid``: ``estimate ± z sd / sqrt(n)``, the figure AlpacaEval reports (also ignores clustering).

Example:
    >>> rows = [{"outcome": o, "conversation_id": c} for o, c in [("candidate", "a"), ("tie", "a"), ("baseline", "b")]]
    >>> win_rate(rows).estimate
    0.5
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from delta_eval.metrics.frames import Rows, rows_of
from delta_eval.metrics.intervals import (
    bootstrap_interval,
    clustered_mean,
    design_wilson_interval,
    normal_quantile,
    t_interval,
    wilson_interval,
)

__all__ = ["SCORES", "Method", "WinRate", "pair_scores", "score_of", "win_rate", "win_rates_by"]

#: A pair's score by outcome.
SCORES = {"candidate": 1.0, "baseline": 0.0, "tie": 0.5}
#: How a win rate's interval is computed (see the module docstring); ``auto`` is ``cluster``.
Method = Literal["auto", "cluster", "bootstrap", "wilson", "iid"]
VERDICT_COLUMNS = ("outcome", "preference", "weight", "conversation_id", "stratum")


def score_of(outcome: str, over: Literal["judged", "all"] = "all", preference: float | None = None) -> float | None:
    """A pair's score, or ``None`` when the pair does not count under ``over``; ``preference`` (soft) when given
    for a judged pair.

    Example:
        >>> score_of("tie"), score_of("equivalent", "judged"), score_of("candidate", preference=0.8)
        (0.5, None, 0.8)
    """
    if outcome in SCORES:
        return float(preference) if preference is not None else SCORES[outcome]
    if outcome == "equivalent" and over == "all":
        return 0.5
    return None


def pair_scores(
    verdicts: Rows, *, over: Literal["judged", "all"] = "all", soft: bool = False, weighted: bool = False
) -> tuple[list[float], list[float], list[str], list[str], dict[str, int]]:
    """The counted pairs' scores, weights, conversations and strata, and the count of every outcome."""
    counts = {"candidate": 0, "baseline": 0, "tie": 0, "equivalent": 0, "error": 0}
    scores: list[float] = []
    weights: list[float] = []
    clusters: list[str] = []
    strata: list[str] = []
    for k, r in enumerate(rows_of(verdicts, VERDICT_COLUMNS)):
        outcome = str(r["outcome"])
        counts[outcome] = counts.get(outcome, 0) + 1
        s = score_of(outcome, over, r.get("preference") if soft else None)
        if s is None:
            continue
        scores.append(s)
        weights.append(float(r.get("weight") or 1.0) if weighted else 1.0)
        # Rows without a conversation are their own cluster.
        clusters.append(str(r.get("conversation_id") or f"#{k}"))
        strata.append(str(r.get("stratum") or ""))
    return scores, weights, clusters, strata, counts


class WinRate(BaseModel):
    """A win rate and its interval, with the counts behind it.

    ``se`` is the cluster-robust standard error, ``design_effect`` how much the clustering inflates the variance
    over independent pairs; ``clusters`` the conversations counted.
    """

    model_config = ConfigDict(frozen=True)

    estimate: float | None
    ci_low: float
    ci_high: float
    confidence: float
    method: str
    over: str
    weighted: bool
    soft: bool = False
    pairs: int
    clusters: int = 0
    se: float | None = None
    design_effect: float | None = None
    candidate: int
    baseline: int
    ties: int
    equivalent: int
    errors: int
    stratum: str | None = None

    def __str__(self) -> str:
        if self.estimate is None:
            return f"win rate: no pairs counted ({self.errors} errors)"
        pct = round(self.confidence * 100)
        scope = f" [{self.stratum}]" if self.stratum else ""
        return (
            f"win rate{scope} {self.estimate:.3f} ({pct}% CI {self.ci_low:.3f}-{self.ci_high:.3f}, {self.method}; "
            f"{self.pairs} pairs from {self.clusters} conversations over {self.over}: candidate {self.candidate}, "
            f"baseline {self.baseline}, ties {self.ties}, equivalent {self.equivalent})"
        )


def win_rate(
    verdicts: Rows,
    *,
    over: Literal["judged", "all"] = "all",
    weighted: bool = False,
    soft: bool = False,
    method: Method = "auto",
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
    stratum: str | None = None,
) -> WinRate:
    """The win rate of the candidate over verdict rows (``outcome``, and where present ``preference``, ``weight``,
    ``conversation_id``, ``stratum``): an Arrow table, a DuckDB relation, a DataFrame or mappings."""
    scores, weights, clusters, strata, counts = pair_scores(verdicts, over=over, soft=soft, weighted=weighted)
    chosen = "cluster" if method == "auto" else method
    mean = clustered_mean(scores, weights=weights, clusters=clusters, strata=strata)
    if mean.estimate is None:
        lo, hi = 0.0, 1.0
    elif chosen == "cluster":
        lo, hi = t_interval(mean, confidence) if soft else design_wilson_interval(mean, confidence)
    elif chosen == "wilson":
        lo, hi = wilson_interval(mean.estimate, mean.n, confidence)
    elif chosen == "iid":
        half = normal_quantile(confidence) * mean.se_iid
        lo, hi = max(0.0, mean.estimate - half), min(1.0, mean.estimate + half)
    elif chosen == "bootstrap":
        lo, hi = bootstrap_interval(
            scores, weights, clusters, strata, confidence=confidence, resamples=resamples, seed=seed
        )
    else:
        raise ValueError(f"unknown interval method {method!r}; one of auto, cluster, bootstrap, wilson, iid")
    return WinRate(
        estimate=mean.estimate,
        ci_low=lo,
        ci_high=hi,
        confidence=confidence,
        method=chosen,
        over=over,
        weighted=weighted,
        soft=soft,
        pairs=mean.n,
        clusters=mean.clusters,
        se=(mean.se_iid if chosen in ("wilson", "iid") else mean.se) if mean.n else None,
        design_effect=mean.design_effect,
        candidate=counts["candidate"],
        baseline=counts["baseline"],
        ties=counts["tie"],
        equivalent=counts["equivalent"] if over == "all" else 0,
        errors=counts["error"],
        stratum=stratum,
    )


def win_rates_by(verdicts: Rows, key: str = "stratum", **options: Any) -> list[WinRate]:
    """:func:`win_rate` for each value of ``key`` (default: the sampling stratum), sorted by that value."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows_of(verdicts):
        groups.setdefault(str(r.get(key)), []).append(r)
    return [win_rate(rows, stratum=name, **options) for name, rows in sorted(groups.items())]
