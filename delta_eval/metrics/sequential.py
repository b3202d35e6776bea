"""Stopping a run as soon as the non-inferiority question is settled, without spoiling the error rate.

Looking at a confidence interval after every conversation and stopping the first time it clears the margin would
declare a difference far more often than 5% of the time. :class:`SequentialTest` instead runs two anytime-valid
tests by betting (Waudby-Smith & Ramdas, 2023): each conversation, taken in random order, contributes
``Y = (S - b T) / T_max``, where ``S`` is the sum of its pairs' scores, ``T`` its number of pairs, ``b = 50% -
margin`` and ``T_max`` the most pairs any sampled conversation has (so ``Y`` is in [-1, 1]). If the win rate were at
most ``b``, ``Y`` would have a mean of at most 0, and a gambler's wealth ``prod(1 + lambda_t Y_t)`` betting on it
being positive is a nonnegative supermartingale: by Ville's inequality it reaches ``2 / alpha`` with probability at
most ``alpha / 2``, however often it is looked at. Reaching it says *not worse*; the mirror bet says *worse*. Bets
``lambda_t`` are predictable (aGRAPA: from the conversations before, clipped so a bet never loses more than half
the wealth).

Example:
    >>> test = SequentialTest(margin=0.05, max_pairs=4)
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
    """One side of the bet: wealth, and running moments of the outcomes it has seen (with a weak prior)."""

    sign: float
    floor: float = 1.0  # the most the outcome can lose: bets stay below 1 / (2 floor), so wealth never halves
    wealth: float = 1.0
    n: int = 0
    mean: float = 0.0
    second: float = 0.25  # prior: the second moment of a fair coin in [-1/2, 1/2] terms

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
    """The two anytime-valid tests (see the module docstring). ``min_conversations``: never stop before this many."""

    margin: float
    max_pairs: int
    alpha: float = 0.05
    min_conversations: int = 20
    conversations: int = 0
    settled_at: int | None = None
    _verdict: Literal["not worse", "worse"] | None = None
    _up: _Bettor = field(init=False)
    _down: _Bettor = field(init=False)

    def __post_init__(self) -> None:
        # Y is at least -b (every pair lost, in the longest conversation) and at most 1 - b: each bettor's worst case.
        b = 0.5 - self.margin
        self._up = _Bettor(1.0, floor=b)
        self._down = _Bettor(-1.0, floor=1.0 - b)

    def add(self, score_sum: float, pairs: int) -> None:
        """One more finished conversation: the sum of its pairs' scores (tie = 1/2) and its number of pairs."""
        if self._verdict is not None or pairs <= 0:
            return
        y = (score_sum - (0.5 - self.margin) * pairs) / max(self.max_pairs, pairs)
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
