"""Several runs side by side (the same source, other candidates or other days) for the viewer's ``/compare`` page:
the pairs whose outcome differs between them, a page at a time.

The pairs are matched by id by :class:`~delta_eval.analysis.comparison.PairOutcomes`, the same matching as
``de.analyze([run, run])`` and ``delta-eval compare``; this module only reads each run's outcomes from its pair
index and pages the result.

Example::

    comparison = Comparison([RunView("runs/monday"), RunView("runs/tuesday")])
    page = comparison.differences(page=1)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from delta_eval.analysis.comparison import PairOutcomes, point_outcomes
from delta_eval.metrics.frames import to_arrow
from delta_eval.viewer.queries import PAGE_SIZE, RunView

__all__ = ["Comparison", "Differences"]


@dataclass(frozen=True)
class Differences:
    """A page of the pairs whose outcome differs between runs: ``rows`` hold ``pair_id`` and one outcome per run
    (``o0``, ``o1``, ...; ``None`` where a run has no such pair); ``pairs`` counts every pair of any run."""

    rows: list[dict[str, Any]]
    total: int
    pairs: int
    page: int
    pages: int


class Comparison:
    """The pairs of several runs, matched by pair id."""

    def __init__(self, runs: Sequence[RunView]) -> None:
        self.runs = list(runs)
        tables = []
        for run in self.runs:
            with run.cursor() as cur:
                rows = to_arrow(cur.sql("SELECT pair_id, outcome FROM pair_index"))
            tables.append(point_outcomes(rows, run.result.candidate))  # candidates of one run meet on their turns
        self.outcomes = PairOutcomes(tables)

    def differences(self, page: int = 1, size: int = PAGE_SIZE) -> Differences:
        """The page ``page`` of the pairs whose outcome differs, by pair id."""
        total, pairs = self.outcomes.counts()
        pages = max(1, -(-total // size))
        page = min(max(page, 1), pages)
        rows = self.outcomes.differing(size, (page - 1) * size)
        return Differences(rows=rows, total=total, pairs=pairs, page=page, pages=pages)
