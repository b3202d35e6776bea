"""Stopping a run as soon as the non-inferiority question is settled, without spoiling the error rate.

Looking at a confidence interval after every conversation and stopping the first time it clears the margin would
declare a difference far more often than 5% of the time. :class:`SequentialTest` instead runs two anytime-valid
tests by betting (Waudby-Smith & Ramdas, 2023): each conversation, taken in random order, contributes
``Y = w (S - b T) / scale``, where ``S`` is the sum of its counted pairs' scores, ``T`` their number, ``w`` its
sampling weight (1 unless the rule is weighted), ``b = 50% - margin`` and ``scale`` the largest ``w T`` any sampled
conversation can have (known before the first is replayed: the planned pairs of the sample), so ``Y`` is in
[-1, 1]. The mean of ``Y`` has the sign of (the rule's win rate - ``b``), pairs counted as the rule counts them: the
test answers the decision's own question. If that win rate were at most ``b``, a gambler's wealth
``prod(1 + lambda_t Y_t)`` betting on ``Y`` being positive is a nonnegative supermartingale: by Ville's inequality
it reaches ``2 / alpha`` with probability at most ``alpha / 2``, however often it is looked at. Reaching it says
*not worse*; the mirror bet says *worse*.

Bets ``lambda_t`` are predictable (aGRAPA: the running mean over the running second moment of the outcomes seen,
clipped so a bet never loses more than half the wealth). The running moments start from a prior on the scale of
the sample (``prior_second``: what independent coin-flip pairs in conversations of the sample's sizes would give),
not from a fixed constant: a prior on the wrong scale holds the bets near zero for hundreds of conversations.

Example:
    >>> test = SequentialTest(margin=0.05, scale=4)
    >>> for _ in range(40):
    ...     test.add(score_sum=3.0, pairs=4)    # the candidate wins 3 pairs of 4 in every conversation
    >>> test.verdict, test.conversations
    ('not worse', 20)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

__all__ = ["SequentialTest"]


@dataclass
class _Bettor:
    """One side of the bet: wealth, and running moments of the outcomes it has seen (with a prior counted as one
    observation)."""

    sign: float
    floor: float = 1.0  # the most the outcome can lose: bets stay below 1 / (2 floor), so wealth never halves
    second: float = 0.25  # prior second moment of the outcomes
    wealth: float = 1.0
    n: int = 0
    mean: float = 0.0

    def bet(self) -> float:
        m, v = self.mean, max(self.second - self.mean**2, 1e-6)
        return min(max(m / (v + m * m), 0.0), 0.5 / self.floor)

    def update(self, y: float) -> None:
        y = self.sign * y
        self.wealth *= 1.0 + self.bet() * y
        self.n += 1
        # Running moments, the prior counted as one observation.
        self.mean += (y - self.mean) / (self.n + 1)
        self.second += (y * y - self.second) / (self.n + 1)


@dataclass
class SequentialTest:
    """The two anytime-valid tests (see the module docstring). ``scale``: the largest ``weight x pairs`` a
    conversation of the sample can have; ``prior_second``: the prior second moment of ``Y`` (default: a fair coin per
    pair, independent pairs, in conversations of ``scale`` pairs); ``min_conversations``: never stop before this
    many."""

    margin: float
    scale: float
    alpha: float = 0.05
    min_conversations: int = 20
    prior_second: float | None = None
    conversations: int = 0
    settled_at: int | None = None
    _verdict: Literal["not worse", "worse"] | None = None
    _up: _Bettor = field(init=False)
    _down: _Bettor = field(init=False)

    def __post_init__(self) -> None:
        # Y is at least -b (every pair lost, in the longest conversation) and at most 1 - b: each bettor's worst case.
        if self.scale <= 0:
            raise ValueError(f"scale must be positive, not {self.scale}")
        b = 0.5 - self.margin
        prior = self.prior_second if self.prior_second is not None else 0.25 / self.scale
        self._up = _Bettor(1.0, floor=b, second=prior)
        self._down = _Bettor(-1.0, floor=1.0 - b, second=prior)

    def add(self, score_sum: float, pairs: float, weight: float = 1.0) -> None:
        """One more finished conversation: the sum of its counted pairs' scores (tie = 1/2), their number, and its
        sampling weight when the rule is weighted. A conversation with no counted pair still counts (``Y = 0``): it
        was drawn, and leaving it out would bias the order the test sees."""
        if self._verdict is not None:
            return
        if weight * pairs > self.scale * (1 + 1e-9):
            raise ValueError(f"a conversation of weight x pairs {weight * pairs:g} exceeds the scale {self.scale:g}")
        y = weight * (score_sum - (0.5 - self.margin) * pairs) / self.scale
        self._up.update(y)
        self._down.update(y)
        self.conversations += 1
        if self.conversations >= self.min_conversations:
            threshold = 2.0 / self.alpha
            if self._up.wealth >= threshold:
                self._verdict, self.settled_at = "not worse", self.conversations
            elif self._down.wealth >= threshold:
                self._verdict, self.settled_at = "worse", self.conversations

    @property
    def verdict(self) -> Literal["not worse", "worse"] | None:
        """``not worse`` or ``worse`` once settled, else ``None``."""
        return self._verdict

    @property
    def wealth(self) -> tuple[float, float]:
        """The two bettors' wealth (not worse, worse); the test settles when one reaches ``2 / alpha``."""
        return self._up.wealth, self._down.wealth
