"""Live counters of a run, updated by the pipeline's stages; a progress bar or a notebook polls them.

The verdict counters are named after the stages that decide pairs (``deterministic``, ``equivalence``, ``judge``,
``error``), the names verdicts carry in their ``stage`` column.

Example:
    >>> p = RunProgress()
    >>> p.count_verdict("judge"); p.count_verdict("deterministic")
    >>> p.decided, p.judge
    (2, 1)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from delta_eval.schema import Stage

__all__ = ["RunProgress"]


@dataclass
class RunProgress:
    """Counters of one session of a run.

    ``read`` / ``read_errors``: records read and how many were bad; ``population`` / ``excluded`` / ``sampled``:
    conversations in the population, left out by ``where``, drawn; ``pairs_total`` / ``pairs_resumed``: pairs the
    sample plans and those an earlier session already wrote; ``greetings_skipped``: greeting turns of the sample
    left out (see :func:`~delta_eval.replay.points.replay_points`); ``strata_without_pairs``: the strata drawn from
    whose conversations have no turn to replay, with why; ``replayed``: pairs whose two sides are replayed;
    ``deterministic`` ... ``error``: verdicts by stage; ``written``: pairs committed to disk; ``error_rows``: rows
    written to the errors table.
    """

    phase: str = "starting"
    read: int = 0
    read_errors: int = 0
    population: int = 0
    excluded: int = 0
    sampled: int = 0
    pairs_total: int = 0
    greetings_skipped: int = 0
    strata_without_pairs: dict[str, str] = field(default_factory=dict)
    pairs_resumed: int = 0
    replayed: int = 0
    deterministic: int = 0
    equivalence: int = 0
    judge: int = 0
    error: int = 0
    written: int = 0
    error_rows: int = 0

    def count_verdict(self, stage: Stage) -> None:
        """Count one verdict of ``stage``."""
        setattr(self, stage, getattr(self, stage) + 1)

    def sampling_counts(self) -> dict[str, Any]:
        """What reading and sampling found, under the names the run's manifest counts use."""
        return {
            "read": self.read,
            "read_errors": self.read_errors,
            "population": self.population,
            "excluded_by_where": self.excluded,
            "sampled": self.sampled,
            "pairs_planned": self.pairs_total,
            "greetings_skipped": self.greetings_skipped,
            "strata_without_pairs": dict(self.strata_without_pairs),
        }

    @property
    def decided(self) -> int:
        """Pairs with a verdict in this session."""
        return self.deterministic + self.equivalence + self.judge + self.error
