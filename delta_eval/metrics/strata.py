"""The decision per stratum: each stratum's win rate and non-inferiority verdict, with the multiplicity of testing many
strata accounted for and small strata flagged.

A stratum is called ``worse`` only when the one-sided test that its win rate is below ``50% - margin`` stays
significant after adjusting over all strata (Holm by default, or Benjamini-Hochberg); a stratum with fewer than
``min_conversations`` conversations is marked ``small`` (its interval is wide, and a normal approximation rough).

Example:
    >>> rows = [{"outcome": "candidate", "conversation_id": f"c{i}", "stratum": "a"} for i in range(20)]
    >>> [(s.stratum, s.verdict, s.small) for s in by_stratum(rows)]
    [('a', 'better', False)]
"""

from __future__ import annotations

from statistics import NormalDist
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from delta_eval.metrics.frames import Rows, rows_of
from delta_eval.metrics.multiplicity import adjust
from delta_eval.metrics.paired import Verdict, decide_margin
from delta_eval.metrics.winrate import WinRate, win_rate

__all__ = ["StratumDecision", "by_stratum"]


class StratumDecision(BaseModel):
    """One stratum: its win rate, verdict, the p-value of "worse than the margin" (raw and adjusted)."""

    model_config = ConfigDict(frozen=True)

    stratum: str
    win_rate: WinRate
    verdict: Verdict
    p_worse: float
    p_worse_adjusted: float
    worse: bool
    small: bool


def _p_worse(w: WinRate, bound: float) -> float:
    """One-sided p-value of H0 "win rate >= bound" against "below it"."""
    if w.estimate is None or w.clusters < 2:
        return 1.0  # one conversation says nothing about a stratum's spread
    if w.soft:
        return NormalDist().cdf((w.estimate - bound) / w.se) if w.se else float(w.estimate >= bound)
    # The score test that matches the design-effect Wilson interval: the null variance at the effective size.
    p = w.estimate
    n_eff = min(float(w.pairs), p * (1 - p) / w.se**2) if w.se else float(w.clusters)
    return NormalDist().cdf((p - bound) / (bound * (1 - bound) / max(n_eff, 1.0)) ** 0.5)


def by_stratum(
    verdicts: Rows,
    margin: float = 0.02,
    *,
    key: str = "stratum",
    adjustment: Literal["holm", "bh", "none"] = "holm",
    alpha: float = 0.05,
    min_conversations: int = 10,
    **options: Any,
) -> list[StratumDecision]:
    """:class:`StratumDecision` per value of ``key``; ``options`` go to :func:`~delta_eval.metrics.win_rate`."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows_of(verdicts):
        groups.setdefault(str(r.get(key) or ""), []).append(r)
    names = sorted(groups)
    rates = [win_rate(groups[name], stratum=name, **options) for name in names]
    raw = [_p_worse(w, 0.5 - margin) for w in rates]
    adjusted = adjust(raw, adjustment)
    out = []
    for name, w, p, q in zip(names, rates, raw, adjusted, strict=True):
        verdict, _ = decide_margin(w, margin)
        out.append(
            StratumDecision(
                stratum=name,
                win_rate=w,
                verdict=verdict,
                p_worse=p,
                p_worse_adjusted=q,
                worse=q < alpha,
                small=w.clusters < min_conversations,
            )
        )
    return out
