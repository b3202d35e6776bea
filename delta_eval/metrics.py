"""Win rates with confidence intervals, overall and per stratum, plain or reweighted to the population.

The score of a pair is 1 when the candidate wins, 0 when the baseline wins and 1/2 for a tie; the win rate is the
mean score: ``(candidate wins + ties / 2) / pairs``. ``over="judged"`` counts the pairs the stage-3 judge decided;
``over="all"`` also counts pairs found equivalent in stages 1 and 2, as ties. Pairs that ended in error are left
out of both and reported in ``errors``.

Intervals (95% by default):

- ``wilson``: the Wilson score interval of the plain proportion, treating the score as a Bernoulli mean (a tie
  contributes less variance than that, so the interval is slightly conservative).
- ``bootstrap``: a paired, cluster bootstrap: conversations are resampled with replacement within their strata and
  all of a conversation's pairs move together (turns of one conversation are not independent). Used for weighted
  estimates, where Wilson does not apply.

Example:
    >>> wilson_interval(0.5, 100)
    (0.4038..., 0.5961...)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import numpy as np
import pyarrow as pa
from pydantic import BaseModel, ConfigDict

__all__ = ["WinRate", "bootstrap_interval", "score_of", "wilson_interval", "win_rate", "win_rates_by"]

_SCORES = {"candidate": 1.0, "baseline": 0.0, "tie": 0.5}


def score_of(outcome: str, over: Literal["judged", "all"] = "all") -> float | None:
    """A pair's score, or ``None`` when the pair does not count under ``over``."""
    if outcome in _SCORES:
        return _SCORES[outcome]
    if outcome == "equivalent" and over == "all":
        return 0.5
    return None


def _z(confidence: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(0.5 + confidence / 2)


def wilson_interval(p: float, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval of a proportion ``p`` observed on ``n`` trials (``(0, 1)`` when ``n`` is 0)."""
    if n <= 0:
        return 0.0, 1.0
    z = _z(confidence)
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # At p = 0 or 1 the bound is exactly 0 or 1; floating point would leave a hair off it.
    lo = 0.0 if p <= 0 else max(0.0, centre - half)
    hi = 1.0 if p >= 1 else min(1.0, centre + half)
    return lo, hi


def bootstrap_interval(
    scores: Sequence[float],
    weights: Sequence[float],
    clusters: Sequence[str],
    strata: Sequence[str],
    *,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile interval of the weighted mean score under a stratified cluster bootstrap."""
    if not scores:
        return 0.0, 1.0
    s = np.asarray(scores, dtype=float)
    w = np.asarray(weights, dtype=float)
    keys = sorted(set(clusters))
    index = {k: i for i, k in enumerate(keys)}
    cid = np.fromiter((index[c] for c in clusters), dtype=np.int64, count=len(clusters))
    sw = np.bincount(cid, weights=s * w, minlength=len(keys))
    ww = np.bincount(cid, weights=w, minlength=len(keys))
    stratum_of: dict[str, str] = {}
    for c, h in zip(clusters, strata, strict=True):
        stratum_of.setdefault(c, h)
    rng = np.random.default_rng(seed)
    counts = np.zeros((resamples, len(keys)))
    by_stratum: dict[str, list[int]] = {}
    for k in keys:
        by_stratum.setdefault(stratum_of[k], []).append(index[k])
    for members in by_stratum.values():
        draws = rng.multinomial(len(members), [1.0 / len(members)] * len(members), size=resamples)
        counts[:, members] = draws
    num = counts @ sw
    den = counts @ ww
    est = np.divide(num, den, out=np.full(resamples, np.nan), where=den > 0)
    est = est[~np.isnan(est)]
    alpha = (1 - confidence) / 2
    lo, hi = np.quantile(est, [alpha, 1 - alpha])
    return float(lo), float(hi)


class WinRate(BaseModel):
    """A win rate and its interval, with the counts behind it."""

    model_config = ConfigDict(frozen=True)

    estimate: float | None
    ci_low: float
    ci_high: float
    confidence: float
    method: str
    over: str
    weighted: bool
    pairs: int
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
            f"{self.pairs} pairs over {self.over}: candidate {self.candidate}, baseline {self.baseline}, "
            f"ties {self.ties}, equivalent {self.equivalent})"
        )


def _rows(verdicts: pa.Table | Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    if isinstance(verdicts, pa.Table):
        cols = [c for c in ("outcome", "weight", "conversation_id", "stratum") if c in verdicts.column_names]
        selected: list[Mapping[str, Any]] = verdicts.select(cols).to_pylist()
        return selected
    return list(verdicts)


def win_rate(
    verdicts: pa.Table | Iterable[Mapping[str, Any]],
    *,
    over: Literal["judged", "all"] = "all",
    weighted: bool = False,
    method: Literal["auto", "wilson", "bootstrap"] = "auto",
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
    stratum: str | None = None,
) -> WinRate:
    """The win rate of the candidate over the given verdict rows (``outcome``, ``weight``, ``conversation_id``,
    ``stratum``). ``method="auto"`` is Wilson unweighted and the bootstrap when ``weighted``."""
    rows = _rows(verdicts)
    counts = {"candidate": 0, "baseline": 0, "tie": 0, "equivalent": 0, "error": 0}
    scores: list[float] = []
    weights: list[float] = []
    clusters: list[str] = []
    strata: list[str] = []
    for r in rows:
        outcome = str(r["outcome"])
        counts[outcome] = counts.get(outcome, 0) + 1
        s = score_of(outcome, over)
        if s is None:
            continue
        scores.append(s)
        weights.append(float(r.get("weight") or 1.0) if weighted else 1.0)
        clusters.append(str(r.get("conversation_id", len(clusters))))
        strata.append(str(r.get("stratum") or ""))
    chosen = ("bootstrap" if weighted else "wilson") if method == "auto" else method
    n = len(scores)
    if n == 0:
        estimate = None
        lo, hi = 0.0, 1.0
    else:
        estimate = float(np.dot(scores, weights) / sum(weights))
        if chosen == "wilson":
            lo, hi = wilson_interval(estimate, n, confidence)
        else:
            lo, hi = bootstrap_interval(
                scores, weights, clusters, strata, confidence=confidence, resamples=resamples, seed=seed
            )
    return WinRate(
        estimate=estimate,
        ci_low=lo,
        ci_high=hi,
        confidence=confidence,
        method=chosen,
        over=over,
        weighted=weighted,
        pairs=n,
        candidate=counts["candidate"],
        baseline=counts["baseline"],
        ties=counts["tie"],
        equivalent=counts["equivalent"] if over == "all" else 0,
        errors=counts["error"],
        stratum=stratum,
    )


def win_rates_by(
    verdicts: pa.Table | Iterable[Mapping[str, Any]], key: str = "stratum", **options: Any
) -> list[WinRate]:
    """:func:`win_rate` for each value of ``key`` (default: the sampling stratum), sorted by that value."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    rows = verdicts.to_pylist() if isinstance(verdicts, pa.Table) else list(verdicts)
    for r in rows:
        groups.setdefault(str(r.get(key)), []).append(r)
    return [win_rate(rows, stratum=name, **options) for name, rows in sorted(groups.items())]
