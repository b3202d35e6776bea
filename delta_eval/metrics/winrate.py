"""Win rates with confidence intervals, overall and per stratum, plain or reweighted to the population.

The score of a pair is 1 when the candidate wins, 0 when the baseline wins and 1/2 for a tie; the win rate is the
mean score: ``(candidate wins + ties / 2) / pairs``. Which pairs count and how is the estimand
(:mod:`delta_eval.metrics.estimand`): ``over="all"`` counts equivalent pairs as ties, ``over="judged"`` only the
pairs the stage-3 judge decided; ``soft=True`` scores a judged pair by its ``preference`` (AlpacaEval's
``mean(p)``); ``weighted`` reweights to the population (``"auto"``: whenever the weights vary); ``errors="loss"``
counts a failed replay as a loss of the side that failed.

Intervals (95% by default), all treating the conversation as the cluster its turns are:

- ``cluster`` (the default): the win rate is ``1/2 + (A - B) / 2`` with ``A`` and ``B`` the shares the candidate
  and the baseline win; each share gets a Wilson interval at its design-effect sample size with a ``t`` quantile,
  combined by MOVER (:mod:`delta_eval.metrics.difference`). Calibrated by simulation from 4 conversations up, for
  ties, clustering, weights and win rates near 0 or 1.
- ``bootstrap``: a stratified cluster bootstrap (percentile).
- ``wilson``: per-pair Wilson, as if turns were independent (too narrow when they are correlated; for comparison).
- ``iid``: ``estimate ± z sd / sqrt(n)``, the figure AlpacaEval reports (also ignores clustering).

Example:
    >>> rows = [{"outcome": o, "conversation_id": c} for o, c in [("candidate", "a"), ("tie", "a"), ("baseline", "b")]]
    >>> win_rate(rows).estimate
    0.5
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from delta_eval.metrics.counted import Counted, counted_of, counted_rows
from delta_eval.metrics.estimand import Components, Estimand, contribution
from delta_eval.metrics.frames import Rows
from delta_eval.metrics.intervals import cluster_bootstrap_interval, normal_quantile, wilson_interval

__all__ = ["SCORES", "Method", "WinRate", "score_of", "win_rate", "win_rate_of", "win_rates_by"]

#: A pair's score by outcome.
SCORES = {"candidate": 1.0, "baseline": 0.0, "tie": 0.5}
#: How a win rate's interval is computed (see the module docstring); ``auto`` is ``cluster``.
Method = Literal["auto", "cluster", "bootstrap", "wilson", "iid"]


def score_of(outcome: str, over: Literal["judged", "all"] = "all", preference: float | None = None) -> float | None:
    """A pair's score, or ``None`` when the pair does not count under ``over``; ``preference`` (soft) when given
    for a judged pair.

    Example:
        >>> score_of("tie"), score_of("equivalent", "judged"), score_of("candidate", preference=0.8)
        (0.5, None, 0.8)
    """
    # The estimand's own rule, for one verdict (errors left out: an outcome alone does not say which side failed).
    e = Estimand(over=over, soft=preference is not None, errors="exclude")
    ab = contribution({"outcome": outcome, "preference": preference}, e)
    return None if ab is None else 0.5 + (ab[0] - ab[1]) / 2


class WinRate(BaseModel):
    """A win rate and its interval, with the counts behind it.

    ``se`` is the cluster-robust standard error, ``design_effect`` how much the clustering inflates the variance
    over independent pairs; ``clusters`` the conversations counted; ``df`` the interval's degrees of freedom
    (conversations minus strata). ``estimand`` says in words what was measured (see
    :mod:`delta_eval.metrics.estimand`); ``errors_counted`` how many error pairs counted as a loss of the side that
    failed (``errors`` counts every error pair).
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
    df: float | None = None
    candidate: int
    baseline: int
    ties: int
    equivalent: int
    errors: int
    errors_counted: int = 0
    estimand: str = ""
    stratum: str | None = None

    def __str__(self) -> str:
        if self.estimate is None:
            return f"win rate: no pairs counted ({self.errors} errors)"
        pct = round(self.confidence * 100)
        scope = f" [{self.stratum}]" if self.stratum else ""
        counted = f", errors counted as losses {self.errors_counted}" if self.errors_counted else ""
        return (
            f"win rate{scope} {self.estimate:.3f} ({pct}% CI {self.ci_low:.3f}-{self.ci_high:.3f}, {self.method}; "
            f"{self.pairs} pairs from {self.clusters} conversations over {self.over}: candidate {self.candidate}, "
            f"baseline {self.baseline}, ties {self.ties}, equivalent {self.equivalent}{counted})"
        )


def win_rate(
    verdicts: Rows,
    *,
    over: Literal["judged", "all"] = "all",
    weighted: bool | Literal["auto"] = "auto",
    soft: bool = False,
    errors: Literal["loss", "exclude"] = "loss",
    method: Method = "auto",
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
    stratum: str | None = None,
) -> WinRate:
    """The win rate of the candidate over verdict rows (``outcome``, and where present ``preference``, ``weight``,
    ``conversation_id``, ``stratum``, ``error_side``): an Arrow table, a DuckDB relation, a DataFrame or mappings.
    ``over``, ``weighted``, ``soft`` and ``errors`` are the estimand (:mod:`delta_eval.metrics.estimand`)."""
    e = Estimand(over=over, weighted=weighted, soft=soft, errors=errors)
    c = counted_rows(verdicts, e, per_conversation=method == "bootstrap")[""]
    return win_rate_of(c, e, method=method, confidence=confidence, resamples=resamples, seed=seed, stratum=stratum)


def win_rate_of(
    c: Counted | Components,
    estimand: Estimand,
    *,
    method: Method = "auto",
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
    stratum: str | None = None,
) -> WinRate:
    """:func:`win_rate` from the counted pairs of an estimand (:func:`~delta_eval.metrics.counted.counted`, or
    per pair :func:`~delta_eval.metrics.estimand.components`)."""
    if isinstance(c, Components):
        c = counted_of(c)
    chosen = "cluster" if method == "auto" else method
    d = c.sums.difference(confidence)
    n = c.pairs
    estimate = None if d.estimate is None else 0.5 + d.estimate / 2
    se: float | None = d.se / 2 if n else None
    if estimate is None:
        lo, hi = 0.0, 1.0
    elif chosen == "cluster":
        lo, hi = 0.5 + d.ci_low / 2, 0.5 + d.ci_high / 2
    elif chosen == "wilson":
        lo, hi = wilson_interval(estimate, n, confidence)
        se = d.se_iid / 2
    elif chosen == "iid":
        se = d.se_iid / 2
        half = normal_quantile(confidence) * se
        lo, hi = max(0.0, estimate - half), min(1.0, estimate + half)
    elif chosen == "bootstrap":
        sw, ww = c.bootstrap_sums()  # per conversation: only the bootstrap needs them
        strata = c.sums.strata
        # conversations sorted by name, as the bootstrap of per-pair scores draws them
        order = np.argsort(np.asarray(c.clusters, dtype=str), kind="stable")
        lo, hi = cluster_bootstrap_interval(sw[order], ww[order], strata[order].tolist(),
                                            confidence=confidence, resamples=resamples, seed=seed)  # fmt: skip
    else:
        raise ValueError(f"unknown interval method {method!r}; one of auto, cluster, bootstrap, wilson, iid")
    counts = c.counts
    return WinRate(
        estimate=estimate,
        ci_low=lo,
        ci_high=hi,
        confidence=confidence,
        method=chosen,
        over=estimand.over,
        weighted=c.weighted,
        soft=estimand.soft,
        pairs=n,
        clusters=d.clusters,
        se=se,
        design_effect=d.design_effect,
        df=d.df if n else None,
        candidate=counts.get("candidate", 0),
        baseline=counts.get("baseline", 0),
        ties=counts.get("tie", 0),
        equivalent=counts.get("equivalent", 0) if estimand.over == "all" else 0,
        errors=counts.get("error", 0),
        errors_counted=sum(c.error_losses.values()),
        estimand=estimand.describe(c.weighted),
        stratum=stratum,
    )


def win_rates_by(verdicts: Rows, key: str = "stratum", **options: Any) -> list[WinRate]:
    """:func:`win_rate` for each value of ``key`` (default: the sampling stratum), sorted by that value. With
    ``weighted="auto"`` the choice is made once, on all the rows, so every group answers the same question."""
    e = Estimand(**{k: v for k, v in options.items() if k in ("over", "soft", "errors", "weighted")})
    rest = {k: v for k, v in options.items() if k not in ("over", "soft", "errors", "weighted")}
    groups = counted_rows(verdicts, e, by=key, null="None", per_conversation=rest.get("method") == "bootstrap")
    return [win_rate_of(c, e, stratum=name, **rest) for name, c in sorted(groups.items())]
