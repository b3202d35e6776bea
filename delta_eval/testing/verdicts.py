"""Verdict tables with a known truth, for checking what a decision rule does before trusting it (our simulation
tests and ``benchmarks/decision_calibration.py`` use them; so can you, with your own rule).

:func:`simulate_verdicts` draws the verdicts of a run whose conversations come from strata of a population. Each
conversation has 1 to 12 turns (``turns``); each turn is found equivalent with probability ``equivalent``, else
judged: a tie with probability ``ties``, else won by the candidate with the conversation's own propensity ``q``,
drawn from a Beta distribution whose mean makes the stratum's win rate what was asked and whose spread gives the
intra-conversation correlation ``rho`` (the turns of one conversation move together). ``errors`` is the share of
pairs whose candidate replay failed; ``error_bias`` the share of those that fall on pairs the candidate would have
lost (the rest fall on the other pairs), so errors can depend on the candidate as they do in production.

The truth (:class:`Truth`) is the population's win rate over the estimand's pairs, overall and per stratum
(turns are drawn independently of ``q``, so it is the mean pair propensity), with failed replays counted as losses
(the default estimand).

Example:
    >>> rows, truth = simulate_verdicts(50, win_rate=0.3, rho=0.5, seed=1)
    >>> truth.all, len({r["conversation_id"] for r in rows})
    (0.3, 50)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

__all__ = ["Truth", "simulate_verdicts"]


@dataclass(frozen=True)
class Truth:
    """The population's win rates: over all pairs (``all``), over judged pairs (``judged``), and per stratum."""

    all: float
    judged: float
    by_stratum: dict[str, float] = field(default_factory=dict)
    judged_by_stratum: dict[str, float] = field(default_factory=dict)


def _propensities(rng: np.random.Generator, n: int, mean: float, rho: float) -> np.ndarray:
    if rho <= 0 or mean <= 0 or mean >= 1:
        return np.full(n, mean)
    a, b = mean * (1 - rho) / rho, (1 - mean) * (1 - rho) / rho
    return rng.beta(a, b, size=n)


def simulate_verdicts(
    conversations: int | Mapping[str, int],
    *,
    win_rate: float | Mapping[str, float],
    rho: float = 0.3,
    over: Literal["all", "judged"] = "all",
    equivalent: float = 0.5,
    ties: float = 0.1,
    turns: tuple[int, int] = (1, 12),
    weights: Mapping[str, float] | None = None,
    errors: float = 0.0,
    error_bias: float = 0.0,
    critical: float = 0.0,
    seed: int = 0,
) -> tuple[list[dict[str, Any]], Truth]:
    """Verdict rows of a simulated run and the truth they estimate (see the module docstring).

    ``conversations``: how many, or how many per stratum; ``win_rate``: the true win rate (over ``over``'s pairs),
    or per stratum; ``weights``: each stratum's sampling weight (``N_h / n_h``; default 1); ``critical``: the
    share of judged losses (either side's) the judge calls critical, the rest minor (ties: none).
    """
    rng = np.random.default_rng(seed)
    sizes = dict(conversations) if isinstance(conversations, Mapping) else {"": int(conversations)}
    rates = dict(win_rate) if isinstance(win_rate, Mapping) else dict.fromkeys(sizes, float(win_rate))
    rows: list[dict[str, Any]] = []
    truth_all: dict[str, float] = {}
    truth_judged: dict[str, float] = {}
    lo, hi = turns
    for h, n in sizes.items():
        target = rates[h]
        judged_rate = (target - equivalent / 2) / (1 - equivalent) if over == "all" else target
        mu = (judged_rate - ties / 2) / (1 - ties)
        if not 0 <= mu <= 1:
            raise ValueError(f"a win rate of {target} over {over} pairs is out of reach with {equivalent:.0%} "
                             f"equivalent and {ties:.0%} ties")  # fmt: skip
        p_win, p_loss = (1 - equivalent) * (1 - ties) * mu, (1 - equivalent) * (1 - ties) * (1 - mu)
        p_tie = (1 - equivalent) * ties
        # Failure rates on would-be losses and on every other pair: a share error_bias of the failures on losses.
        f_loss = min(1.0, errors * error_bias / p_loss) if p_loss > 0 else 0.0
        f_other = errors * (1 - error_bias) / (1 - p_loss) if p_loss < 1 else 0.0
        # The truth counts a failed candidate replay as a loss, as the estimand does.
        truth_all[h] = (p_win + 0.5 * (p_tie + equivalent)) * (1 - f_other)
        judged_units = (p_win + p_tie) * (1 - f_other) + p_loss * (1 - f_loss) + errors
        truth_judged[h] = (p_win + 0.5 * p_tie) * (1 - f_other) / judged_units if judged_units else 0.5
        q = _propensities(rng, n, mu, rho)
        m = rng.integers(lo, hi + 1, size=n)
        w = float((weights or {}).get(h, 1.0))
        # Every pair at once: its conversation, then equivalent / tie / won by the candidate / lost.
        conv = np.repeat(np.arange(n), m)
        turn = np.arange(len(conv)) - np.repeat(np.cumsum(m) - m, m)
        u = rng.random((5, len(conv)))
        outcome = np.where(u[0] < equivalent, "equivalent",
                           np.where(u[1] < ties, "tie", np.where(u[2] < q[conv], "candidate", "baseline")))  # fmt: skip
        failed = u[3] < np.where(outcome == "baseline", f_loss, f_other) if errors else np.zeros(len(conv), bool)
        prefix = f"{h}/c" if h else "c"
        grave = (u[4] < critical).tolist()
        for c, t, o, bad, g in zip(conv.tolist(), turn.tolist(), outcome.tolist(), failed.tolist(), grave,
                                   strict=True):  # fmt: skip
            cid = f"{prefix}{c}"
            row: dict[str, Any] = {"pair_id": f"{cid}#{t}", "conversation_id": cid, "stratum": h, "weight": w,
                                   "outcome": o, "stage": "equivalence" if o == "equivalent" else "judge"}  # fmt: skip
            if o != "equivalent":
                row["severity"] = "none" if o == "tie" else "critical" if g else "minor"
            if bad:
                row.update(outcome="error", stage="error", error_side="candidate",
                           error="candidate replay failed: simulated")  # fmt: skip
            rows.append(row)
    total = sum(sizes.values())
    overall = sum(truth_all[h] * sizes[h] * float((weights or {}).get(h, 1.0)) for h in sizes)
    norm = sum(sizes[h] * float((weights or {}).get(h, 1.0)) for h in sizes)
    judged_overall = sum(truth_judged[h] * sizes[h] * float((weights or {}).get(h, 1.0)) for h in sizes)
    return rows, Truth(
        all=round(overall / norm, 12) if total else 0.5,
        judged=round(judged_overall / norm, 12) if total else 0.5,
        by_stratum={h: round(v, 12) for h, v in truth_all.items()},
        judged_by_stratum={h: round(v, 12) for h, v in truth_judged.items()},
    )
