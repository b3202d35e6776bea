"""The source's conversations read once for sampling and kept for the rest of the run, while they fit a budget.

A run reads its source to sample it, then reads the drawn conversations again to estimate their cost and again to
replay them: every drawn conversation parsed and validated three times before its first model call. Where the whole
source fits a budget (the run passes what its loader's window holds at once anyway, see
:mod:`delta_eval.pipeline`), the first reading keeps its conversations and the later ones take the drawn ones from
memory; a larger source is read again, as before, so that a run's memory does not grow with its source.

Example:
    >>> from delta_eval.demo import demo_conversations
    >>> reading = KeptReading(demo_conversations(), size=lambda conv: 1, budget=500)
    >>> read = sum(1 for _ in reading)
    >>> [(position, conv.id) for position, conv in reading.selected([3, 1])]
    [(1, '1/0'), (3, '3/0')]
    >>> small = KeptReading(demo_conversations(), size=lambda conv: 1, budget=10)
    >>> read = sum(1 for _ in small)
    >>> small.selected([3, 1]) is None
    True
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from delta_eval.exceptions import RecordError
from delta_eval.schema import Conversation

__all__ = ["KeptReading"]


class KeptReading:
    """One reading of ``source`` (iterate it as the source), keeping its conversations by position while their
    ``size`` adds up to at most ``budget``; past it, it keeps none."""

    def __init__(
        self,
        source: Iterable[Conversation | RecordError],
        size: Callable[[Conversation], int],
        budget: int,
    ) -> None:
        self.source = source
        self.size = size
        self.budget = budget
        self._kept: dict[int, Conversation] | None = None

    def __iter__(self) -> Iterator[Conversation | RecordError]:
        self._kept = None  # a reading stopped before its end keeps nothing: it did not see every conversation
        kept: dict[int, Conversation] | None = {}
        used = 0
        for position, item in enumerate(self.source):
            if kept is not None and isinstance(item, Conversation):
                used += max(1, self.size(item))  # a conversation of no pairs is kept too: it counts
                if used > self.budget:
                    kept = None  # dropped at once: what it held is freed while the reading goes on
                else:
                    kept[position] = item
            yield item
        self._kept = kept

    def selected(self, positions: Iterable[int]) -> list[tuple[int, Conversation]] | None:
        """The conversations at ``positions`` in position order, as
        :func:`~delta_eval.sampling.population.iter_selected` reads them again from the source; ``None`` when this
        reading did not keep them (the source was over the budget, or not read to its end)."""
        kept = self._kept
        if kept is None:
            return None
        return [(position, kept[position]) for position in sorted(set(positions)) if position in kept]
