"""The paired question: is the candidate better, not worse, or worse than the baseline on the same conversations?

- :func:`net_preference`: P(candidate better) - P(baseline better), which is ``2 x win rate - 1``, with the win
  rate's cluster-robust interval mapped the same way.
- :func:`sign_test`: an exact two-sided sign test at the level of conversations (a conversation counts for the
  side its pairs favour on balance; conversations in balance are left out), so correlated turns are not counted as
  independent evidence.
- :func:`non_inferiority`: the verdict against a margin on the win-rate scale (``margin=0.02``: the candidate may
  be at most 2 points below 50%), read off the two-sided interval: ``better`` when its lower bound is above 50%,
  ``not worse`` when above ``50% - margin``, ``worse`` when its upper bound is below ``50% - margin``, else
  ``undecided``, with about how many more conversations would settle it at the variance seen so far.

Example:
    >>> rows = [{"outcome": "candidate", "conversation_id": f"c{i}"} for i in range(30)]
    >>> non_inferiority(rows, margin=0.02).verdict
    'better'
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict

from delta_eval.metrics.frames import Rows
from delta_eval.metrics.winrate import Method, WinRate, pair_scores, win_rate

__all__ = ["NetPreference", "NonInferiority", "SignTest", "net_preference", "non_inferiority", "sign_test"]

Verdict = Literal["better", "not worse", "worse", "undecided"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class NetPreference(_Frozen):
    """P(candidate better) - P(baseline better), in [-1, 1], with its interval."""

    estimate: float | None
    ci_low: float
    ci_high: float
    win_rate: WinRate


class SignTest(_Frozen):
    """The conversation-level sign test: conversations favouring each side, those in balance, the p-value."""

    favour_candidate: int
    favour_baseline: int
    balanced: int
    p_value: float


class NonInferiority(_Frozen):
    """The verdict against ``margin``; ``more_conversations`` is the rough number that would settle an undecided
    verdict (``None`` when decided, or when the estimate sits on the boundary)."""

    verdict: Verdict
    margin: float
    win_rate: WinRate
    more_conversations: int | None = None

    def __str__(self) -> str:
        w = self.win_rate
        if w.estimate is None:
            return "undecided: no pairs"
        said = f"{self.verdict}"
        if self.verdict == "undecided":
            said += (
                f": need about {self.more_conversations} more conversations"
                if self.more_conversations is not None
                else ": the estimate sits on the margin"
            )
        return (
            f"{said} (win rate {w.estimate:.1%} [{w.ci_low:.1%}, {w.ci_high:.1%}], non-inferior above "
            f"{0.5 - self.margin:.1%})"
        )


def net_preference(
    verdicts: Rows,
    *,
    over: Literal["judged", "all"] = "all",
    soft: bool = False,
    weighted: bool = False,
    method: Method = "auto",
    confidence: float = 0.95,
) -> NetPreference:
    """The net preference for the candidate over the verdict rows, with its interval."""
    w = win_rate(verdicts, over=over, soft=soft, weighted=weighted, method=method, confidence=confidence)
    est = None if w.estimate is None else 2 * w.estimate - 1
    return NetPreference(estimate=est, ci_low=2 * w.ci_low - 1, ci_high=2 * w.ci_high - 1, win_rate=w)


def sign_test(verdicts: Rows, *, over: Literal["judged", "all"] = "judged", soft: bool = False) -> SignTest:
    """The exact two-sided sign test over conversations (see the module docstring).

    Example:
        >>> rows = [{"outcome": "candidate", "conversation_id": f"c{i}"} for i in range(10)]
        >>> round(sign_test(rows).p_value, 4)
        0.002
    """
    scores, _, clusters, _, _ = pair_scores(verdicts, over=over, soft=soft)
    balance: dict[str, float] = {}
    for s, c in zip(scores, clusters, strict=True):
        balance[c] = balance.get(c, 0.0) + (s - 0.5)
    plus = sum(1 for b in balance.values() if b > 1e-12)
    minus = sum(1 for b in balance.values() if b < -1e-12)
    p = 1.0
    if plus + minus:
        from scipy.stats import binomtest

        p = float(binomtest(plus, plus + minus, 0.5).pvalue)
    return SignTest(favour_candidate=plus, favour_baseline=minus, balanced=len(balance) - plus - minus, p_value=p)


def decide_margin(w: WinRate, margin: float) -> tuple[Verdict, int | None]:
    """The non-inferiority verdict a win rate's interval gives against ``margin``, and for an undecided one, about
    how many more conversations would settle it."""
    bound = 0.5 - margin
    if w.estimate is None:
        return "undecided", None
    if w.ci_low > 0.5:
        return "better", None
    if w.ci_low > bound:
        return "not worse", None
    if w.ci_high < bound:
        return "worse", None
    # The half-width shrinks as 1 / sqrt(conversations): solve for the width that clears the nearer boundary.
    half = (w.ci_high - w.ci_low) / 2
    distance = abs(w.estimate - bound)
    if distance <= 1e-9 or half <= 0 or w.clusters == 0:
        return "undecided", None
    needed = w.clusters * (half / distance) ** 2
    return "undecided", max(1, math.ceil(needed - w.clusters))


def non_inferiority(
    verdicts: Rows,
    margin: float = 0.02,
    *,
    over: Literal["judged", "all"] = "all",
    soft: bool = False,
    weighted: bool = False,
    method: Method = "auto",
    confidence: float = 0.95,
) -> NonInferiority:
    """Whether the candidate is ``better``, ``not worse`` (within ``margin``), ``worse``, or ``undecided``."""
    if not 0 <= margin < 0.5:
        raise ValueError(f"margin is on the win-rate scale, between 0 and 0.5, not {margin}")
    w = win_rate(verdicts, over=over, soft=soft, weighted=weighted, method=method, confidence=confidence)
    verdict, more = decide_margin(w, margin)
    return NonInferiority(verdict=verdict, margin=margin, win_rate=w, more_conversations=more)
