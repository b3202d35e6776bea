"""Early stopping: a run that stops paying once the non-inferiority question is settled (``RunConfig.stop_early``).

Conversations are replayed in a seeded random order (so those finished at any moment are a random subset of the
sample), and each finished conversation (every one of its pairs decided) is fed to the anytime-valid
:class:`~delta_eval.metrics.sequential.SequentialTest` with the decision rule's margin and confidence. When it
settles, the run stops: pairs in flight are dropped, finished ones are kept, and the manifest says why it stopped.
A resumed run first feeds the conversations its folder already finished, so an early-stopped run stays stopped.

Example:
    >>> watch = EarlyStop(margin=0.05, alpha=0.05, max_pairs=2, min_conversations=5)
    >>> for c in range(60):
    ...     watch.expect(f"c{c}", 2)
    ...     _ = watch.add(f"c{c}", "candidate"), watch.add(f"c{c}", "tie")
    >>> watch.reason
    'the candidate is not worse (anytime-valid test at 95% confidence, margin 5%) after 15 conversations'
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import TypeVar

from delta_eval.metrics.sequential import SequentialTest
from delta_eval.metrics.winrate import score_of
from delta_eval.schema import Conversation

__all__ = ["EarlyStop", "random_order"]

T = TypeVar("T")


def random_order(items: Iterable[tuple[T, Conversation]], seed: int) -> list[tuple[T, Conversation]]:
    """``(key, conversation)`` pairs in a seeded random order of their conversation ids (stable across machines)."""
    return sorted(items, key=lambda kc: hashlib.md5(f"{seed}:order:{kc[1].id}".encode()).hexdigest())


class EarlyStop:
    """Tracks finished conversations and the sequential test (see the module docstring)."""

    def __init__(self, margin: float, alpha: float, max_pairs: int, min_conversations: int = 20) -> None:
        self.test = SequentialTest(margin=margin, max_pairs=max_pairs, alpha=alpha,
                                   min_conversations=min_conversations)  # fmt: skip
        self._expected: dict[str, int] = {}
        self._seen: dict[str, tuple[float, int, int]] = {}

    def expect(self, conversation_id: str, pairs: int) -> None:
        """The number of pairs a conversation will have."""
        self._expected[conversation_id] = pairs

    def add(self, conversation_id: str, outcome: str) -> bool:
        """One decided pair; ``True`` when this settles the test. Error verdicts complete a conversation without
        counting in it (as in the win rate)."""
        total, scored, seen = self._seen.get(conversation_id, (0.0, 0, 0))
        score = score_of(outcome, "all")
        if score is not None:
            total, scored = total + score, scored + 1
        seen += 1
        self._seen[conversation_id] = (total, scored, seen)
        if seen != self._expected.get(conversation_id, -1):
            return False
        before = self.test.verdict
        self.test.add(total, scored)
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
        return (
            f"the candidate is {self.test.verdict} (anytime-valid test at {1 - self.test.alpha:.0%} confidence, "
            f"margin {self.test.margin:.0%}) after {self.test.settled_at} conversations"
        )
