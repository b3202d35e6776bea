"""The paired question: is the candidate better, not worse, or worse than the baseline on the same conversations?

- :func:`net_preference`: P(candidate better) - P(baseline better), which is ``2 x win rate - 1``, with the win
  rate's interval mapped the same way.
- :func:`sign_test`: an exact two-sided sign test at the level of conversations (a conversation counts for the
  side its pairs favour on balance; conversations in balance are left out), so correlated turns are not counted as
  independent evidence.
- :func:`non_inferiority`: the verdict against a margin on the scale of the estimand (``margin=0.02``: the
  candidate may be at most 2 points below 50% of the win rate the estimand defines, see
  :mod:`delta_eval.metrics.estimand`), read off the two-sided interval: ``better`` when its lower bound is above
  50%, ``not worse`` when above ``50% - margin``, ``no difference`` when no counted pair was won by either side and
  the interval (which bounds the differences the sample may have missed) is above ``50% - margin``, ``worse`` when
  its upper bound is below ``50% - margin``, else ``undecided``, with about how many more conversations like these
  would settle it.

Example:
    >>> rows = [{"outcome": "candidate", "conversation_id": f"c{i}"} for i in range(30)]
    >>> non_inferiority(rows, margin=0.02).verdict
    'better'
    >>> same = [{"outcome": "equivalent", "conversation_id": f"c{i}"} for i in range(100)]
    >>> non_inferiority(same, margin=0.02).verdict
    'no difference'
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict

from delta_eval.metrics.counted import Counted, counted_of, counted_rows
from delta_eval.metrics.difference import PairedSums, StratumSums
from delta_eval.metrics.distributions import binom_two_sided_p
from delta_eval.metrics.estimand import Components, Estimand
from delta_eval.metrics.frames import Rows
from delta_eval.metrics.winrate import Method, WinRate, win_rate_of

__all__ = [
    "NetPreference",
    "NonInferiority",
    "SignTest",
    "Verdict",
    "decide_margin",
    "net_preference",
    "non_inferiority",
    "non_inferiority_of",
    "sign_test",
]

Verdict = Literal["better", "not worse", "no difference", "worse", "undecided"]


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
    """The verdict against ``margin`` (on the scale of the win rate's estimand); ``more_conversations`` is about how
    many more conversations like these would settle an undecided verdict (``None`` when decided, or when the
    estimate sits on the boundary)."""

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
        elif self.verdict == "no difference":
            said += f": no pair won by either side in {w.clusters} conversations"
        return (
            f"{said} ({w.estimand or 'win rate'}: {w.estimate:.1%} [{w.ci_low:.1%}, {w.ci_high:.1%}]; non-inferior "
            f"above {0.5 - self.margin:.1%}, a margin of {self.margin * 100:g} points on this scale)"
        )


def _estimand(over: str, soft: bool, weighted: bool | str, errors: str) -> Estimand:
    return Estimand.model_validate({"over": over, "soft": soft, "weighted": weighted, "errors": errors})


def net_preference(
    verdicts: Rows,
    *,
    over: Literal["judged", "all"] = "all",
    soft: bool = False,
    weighted: bool | Literal["auto"] = "auto",
    errors: Literal["loss", "exclude"] = "loss",
    method: Method = "auto",
    confidence: float = 0.95,
) -> NetPreference:
    """The net preference for the candidate over the verdict rows, with its interval."""
    e = _estimand(over, soft, weighted, errors)
    c = counted_rows(verdicts, e, per_conversation=method == "bootstrap")[""]
    return net_preference_of(win_rate_of(c, e, method=method, confidence=confidence))


def net_preference_of(w: WinRate) -> NetPreference:
    """The net preference a win rate implies."""
    est = None if w.estimate is None else 2 * w.estimate - 1
    return NetPreference(estimate=est, ci_low=2 * w.ci_low - 1, ci_high=2 * w.ci_high - 1, win_rate=w)


def sign_test(
    verdicts: Rows,
    *,
    over: Literal["judged", "all"] = "judged",
    soft: bool = False,
    errors: Literal["loss", "exclude"] = "loss",
) -> SignTest:
    """The exact two-sided sign test over conversations (see the module docstring).

    Example:
        >>> rows = [{"outcome": "candidate", "conversation_id": f"c{i}"} for i in range(10)]
        >>> round(sign_test(rows).p_value, 4)
        0.002
    """
    return sign_test_of(counted_rows(verdicts, _estimand(over, soft, False, errors), per_conversation=False)[""])


def sign_test_of(c: Counted | Components) -> SignTest:
    """The sign test on the counted pairs of an estimand."""
    plus, minus, balanced = (counted_of(c) if isinstance(c, Components) else c).sign_counts()
    p = 1.0
    if plus + minus:
        p = binom_two_sided_p(plus, plus + minus)
    return SignTest(favour_candidate=plus, favour_baseline=minus, balanced=balanced, p_value=p)


def decide_margin(
    w: WinRate, margin: float, sums: PairedSums | StratumSums | None = None, *, no_difference: bool = False
) -> tuple[Verdict, int | None]:
    """The non-inferiority verdict a win rate's interval gives against ``margin``, and for an undecided one, about
    how many more conversations like these would settle it (found with ``sums``, the same interval at a larger
    sample; without them, by the square-root law). ``no_difference``: no counted pair was won by either side."""
    bound = 0.5 - margin
    if w.estimate is None:
        return "undecided", None
    if w.ci_low > 0.5:
        return "better", None
    if w.ci_low > bound:
        return ("no difference" if no_difference else "not worse"), None
    if w.ci_high < bound:
        return "worse", None
    if abs(w.estimate - bound) <= 1e-9 or w.clusters == 0:
        return "undecided", None
    if sums is not None:
        return "undecided", _more_conversations(sums, w, bound)
    half = (w.ci_high - w.ci_low) / 2
    if half <= 0:
        return "undecided", None
    needed = w.clusters * (half / abs(w.estimate - bound)) ** 2
    return "undecided", max(1, math.ceil(needed - w.clusters))


def _more_conversations(sums: PairedSums | StratumSums, w: WinRate, bound: float) -> int | None:
    """The fewest more conversations at which the same interval, around the same estimate, clears the boundary."""

    def settled(scale: float) -> bool:
        d = sums.difference(w.confidence, scale=scale)
        return 0.5 + d.ci_low / 2 > bound or 0.5 + d.ci_high / 2 < bound

    hi = 2.0
    while not settled(hi):
        hi *= 2
        if hi > 1e5:
            return None
    lo = 1.0
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if settled(mid) else (mid, hi)
        if (hi - lo) * w.clusters < 0.5:
            break
    return max(1, math.ceil(w.clusters * hi - w.clusters))


def non_inferiority(
    verdicts: Rows,
    margin: float = 0.02,
    *,
    over: Literal["judged", "all"] = "all",
    soft: bool = False,
    weighted: bool | Literal["auto"] = "auto",
    errors: Literal["loss", "exclude"] = "loss",
    method: Method = "auto",
    confidence: float = 0.95,
) -> NonInferiority:
    """Whether the candidate is ``better``, ``not worse`` (within ``margin``), shows ``no difference``, is
    ``worse``, or ``undecided``. ``over``, ``soft``, ``weighted`` and ``errors`` are the estimand."""
    e = _estimand(over, soft, weighted, errors)
    c = counted_rows(verdicts, e, per_conversation=method == "bootstrap")[""]
    return non_inferiority_of(c, e, margin, method=method, confidence=confidence)


def non_inferiority_of(
    c: Counted | Components, estimand: Estimand, margin: float, *, method: Method = "auto", confidence: float = 0.95
) -> NonInferiority:
    """:func:`non_inferiority` on the counted pairs of an estimand."""
    if not 0 <= margin < 0.5:
        raise ValueError(f"margin is on the win-rate scale, between 0 and 0.5, not {margin}")
    if isinstance(c, Components):
        c = counted_of(c)
    w = win_rate_of(c, estimand, method=method, confidence=confidence)
    sums = c.sums if method in ("auto", "cluster") else None
    verdict, more = decide_margin(w, margin, sums, no_difference=c.none_won)
    return NonInferiority(verdict=verdict, margin=margin, win_rate=w, more_conversations=more)
