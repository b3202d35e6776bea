"""Early stopping: a run that stops paying once the non-inferiority question is settled (``RunConfig.stop_early``).

Conversations are replayed in a seeded random order, and fed to the anytime-valid
:class:`~delta_eval.metrics.sequential.SequentialTest` in that order once finished (every one of their pairs
decided): a conversation that finishes early waits for those before it, because short conversations finish first
and feeding them first would tilt the test towards whatever short conversations say. The test uses the decision
rule's margin, confidence and estimand (the pairs it counts, hard or soft scores, weights, errors): it settles the
same question the decision asks.
When it settles, the run stops: pairs in flight are dropped, finished ones are kept, and the manifest says why it
stopped. A resumed run first feeds the conversations its folder already finished, so an early-stopped run stays
stopped.

Example:
    >>> from delta_eval.metrics.estimand import Estimand
    >>> watch = EarlyStop(margin=0.05, alpha=0.05, planned={f"c{c}": (2, 1.0) for c in range(60)},
    ...                   estimand=Estimand(), min_conversations=5)
    >>> for c in range(60):
    ...     _ = watch.add(f"c{c}", {"outcome": "candidate"}), watch.add(f"c{c}", {"outcome": "tie"})
    >>> print(watch.reason)
    the candidate is not worse (anytime-valid test at 95% confidence, margin 5 points of the win rate over all
    pairs (equivalent pairs as ties)) after 14 conversations
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from delta_eval.metrics.estimand import Estimand, contribution, weights_vary
from delta_eval.metrics.sequential import SequentialTest
from delta_eval.schema import Conversation

__all__ = ["EarlyStop", "random_order"]

T = TypeVar("T")


def random_order(items: Iterable[tuple[T, Conversation]], seed: int) -> list[tuple[T, Conversation]]:
    """``(key, conversation)`` pairs in a seeded random order of their conversation ids (stable across machines)."""
    return sorted(items, key=lambda kc: hashlib.md5(f"{seed}:order:{kc[1].id}".encode()).hexdigest())


class EarlyStop:
    """Tracks finished conversations and the sequential test (see the module docstring). ``planned``: per
    conversation, in the order they are replayed, its number of pairs and its sampling weight (the weight is used
    when the estimand is weighted; ``"auto"`` weighs when the planned weights vary)."""

    def __init__(
        self,
        margin: float,
        alpha: float,
        planned: Mapping[str, tuple[int, float]],
        estimand: Estimand,
        min_conversations: int = 20,
    ) -> None:
        weights = [w for _, w in planned.values()]
        if estimand.weighted == "auto":
            estimand = estimand.model_copy(update={"weighted": weights_vary(weights)})
        self.estimand = estimand
        # Weights normalised to a mean of 1, so the test's scale is in pairs.
        mean_w = sum(weights) / len(weights) if weights and estimand.weighted else 1.0
        self._planned = {c: (n, (w / mean_w) if estimand.weighted else 1.0) for c, (n, w) in planned.items()}
        scale = max((n * w for n, w in self._planned.values()), default=1.0) or 1.0
        # The prior second moment of Y: independent fair-coin pairs in conversations of the sample's sizes.
        second = [0.25 * n * w * w for n, w in self._planned.values()]
        prior = (sum(second) / len(second) / scale**2) if second and sum(second) > 0 else 0.25 / scale
        self.test = SequentialTest(margin=margin, scale=scale, alpha=alpha, min_conversations=min_conversations,
                                   prior_second=prior)  # fmt: skip
        self._seen: dict[str, tuple[float, int, int]] = {}
        self._order = list(self._planned)
        self._next = 0  # the first conversation in the order not yet fed to the test

    def add(self, conversation_id: str, verdict: Mapping[str, Any]) -> bool:
        """One decided pair (its verdict row, or a mapping with at least ``outcome``); ``True`` when this settles
        the test. Pairs the estimand does not count complete a conversation without counting in it."""
        total, counted, seen = self._seen.get(conversation_id, (0.0, 0, 0))
        ab = contribution(verdict, self.estimand)
        if ab is not None:
            total, counted = total + 0.5 + (ab[0] - ab[1]) / 2, counted + 1
        seen += 1
        self._seen[conversation_id] = (total, counted, seen)
        planned, _ = self._planned.get(conversation_id, (-1, 1.0))
        if seen != planned:
            return False
        before = self.test.verdict
        # Feed every finished conversation whose turn has come, in the planned order.
        while self._next < len(self._order) and self.test.verdict is None:
            head = self._order[self._next]
            done, weight = self._planned[head]
            fed = self._seen.get(head, (0.0, 0, 0))
            if fed[2] != done:
                break
            self.test.add(fed[0], fed[1], weight)
            self._next += 1
        return before is None and self.test.verdict is not None

    @property
    def settled(self) -> bool:
        """Whether the question is settled."""
        return self.test.verdict is not None

    @property
    def reason(self) -> str | None:
        """Why the run stopped, in a sentence (``None`` while unsettled)."""
        if self.test.verdict is None:
            return None
        scope = self.estimand.describe().split(",")[0]
        return (
            f"the candidate is {self.test.verdict} (anytime-valid test at {1 - self.test.alpha:.0%} confidence, "
            f"margin {self.test.margin * 100:g} points of the {scope}) after {self.test.settled_at} conversations"
        )
