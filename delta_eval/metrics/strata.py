"""The decision per stratum: each stratum's win rate and non-inferiority verdict, with the multiplicity of testing many
strata accounted for and small strata flagged.

A stratum is called ``worse`` only when the one-sided test that its win rate is below ``50% - margin`` stays
significant at ``alpha`` (by default half of ``1 - confidence``, the level of the overall test: 2.5%) after
adjusting over all strata (Holm by default, or Benjamini-Hochberg). The p-value is read off the same interval as
the overall verdict (the smallest one-sided level at which its upper bound falls below the boundary), so it holds
for clustered outcomes and small strata alike; a stratum with fewer than ``min_conversations`` conversations is
marked ``small`` (its interval is wide).

Example:
    >>> rows = [{"outcome": "candidate", "conversation_id": f"c{i}", "stratum": "a"} for i in range(20)]
    >>> [(s.stratum, s.verdict, s.small) for s in by_stratum(rows)]
    [('a', 'better', False)]
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from delta_eval.metrics.counted import Counted, counted_rows
from delta_eval.metrics.difference import PairedSums, StratumSums
from delta_eval.metrics.estimand import Estimand
from delta_eval.metrics.frames import Rows
from delta_eval.metrics.multiplicity import adjust
from delta_eval.metrics.paired import Verdict, decide_margin
from delta_eval.metrics.winrate import WinRate, win_rate_of

__all__ = ["StratumDecision", "by_stratum", "p_worse"]


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


def p_worse(sums: PairedSums | StratumSums, bound: float) -> float:
    """One-sided p-value of H0 "win rate >= bound" against "below it": the smallest one-sided level at which the
    interval's upper bound is below ``bound`` (1 when the estimate is not below it).

    Example:
        >>> s = PairedSums.of([0] * 40, [1] * 30 + [0] * 10, clusters=[str(i) for i in range(40)])
        >>> p_worse(s, 0.48) < 0.001
        True
    """

    def upper(one_sided: float) -> float:
        return 0.5 + sums.difference(1 - 2 * one_sided).ci_high / 2

    d = sums.difference(0.5)
    if d.estimate is None or 0.5 + d.estimate / 2 >= bound:
        return 1.0
    lo, hi = 1e-12, 0.5
    if upper(lo) < bound:
        return lo
    for _ in range(60):
        # Bisection on the log scale: p-values span many orders of magnitude.
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if upper(mid) < bound else (mid, hi)
        if hi / lo < 1.01:
            break
    return hi


def by_stratum(
    verdicts: Rows,
    margin: float = 0.02,
    *,
    key: str = "stratum",
    adjustment: Literal["holm", "bh", "none"] = "holm",
    alpha: float | None = None,
    min_conversations: int = 10,
    confidence: float = 0.95,
    con: Any = None,
    counted: Mapping[str, Counted] | None = None,
    **estimand: Any,
) -> list[StratumDecision]:
    """:class:`StratumDecision` per value of ``key``; ``estimand``: ``over``, ``soft``, ``weighted``, ``errors``
    (see :mod:`delta_eval.metrics.estimand`; with ``weighted="auto"`` the choice is made once, on all rows).
    ``alpha`` defaults to ``(1 - confidence) / 2``. ``verdicts`` may name a table or view of the DuckDB connection
    ``con``; ``counted``: its pairs already counted by ``key`` under the same estimand (not counted again)."""
    e = Estimand(**estimand)
    groups = counted if counted is not None else counted_rows(verdicts, e, by=key, con=con, per_conversation=False)
    names = sorted(groups)
    parts = [groups[name] for name in names]
    level = (1 - confidence) / 2 if alpha is None else alpha
    rates, raw = [], []
    for name, c in zip(names, parts, strict=True):
        rates.append(win_rate_of(c, e, confidence=confidence, stratum=name))
        raw.append(p_worse(c.sums, 0.5 - margin))
    adjusted = adjust(raw, adjustment)
    out = []
    for name, w, c, p, q in zip(names, rates, parts, raw, adjusted, strict=True):
        verdict, _ = decide_margin(w, margin, None, no_difference=c.none_won)
        out.append(
            StratumDecision(
                stratum=name,
                win_rate=w,
                verdict=verdict,
                p_worse=p,
                p_worse_adjusted=q,
                worse=q < level,
                small=w.clusters < min_conversations,
            )
        )
    return out
