"""The numbers a decision rests on: win rates and their intervals (clustered by conversation), the paired question
(net preference, sign test, non-inferiority), gates and the decision matrix, planning, and sequential stopping.

Every function takes verdict (or replay) rows as an Arrow table, a DuckDB relation, a DataFrame or mappings.
"""

from delta_eval.metrics.intervals import (
    ClusteredMean,
    bootstrap_interval,
    clopper_pearson,
    clustered_mean,
    design_wilson_interval,
    t_interval,
    wilson_interval,
)
from delta_eval.metrics.winrate import SCORES, WinRate, pair_scores, score_of, win_rate, win_rates_by

__all__ = [
    "SCORES",
    "ClusteredMean",
    "WinRate",
    "bootstrap_interval",
    "clopper_pearson",
    "clustered_mean",
    "design_wilson_interval",
    "pair_scores",
    "score_of",
    "t_interval",
    "wilson_interval",
    "win_rate",
    "win_rates_by",
]
