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

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from delta_eval.calls import CallStats
from delta_eval.pricing import total_cost
from delta_eval.schema import Stage, Usage

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

    What the session spent so far: ``input_tokens`` / ``output_tokens`` and ``cost_usd`` over every replay and judge
    call (``cost_usd`` is ``None`` once a call of unknown price or usage is counted: never a partial sum), and the
    model calls, retries and rate-limited answers through :meth:`calls` (read live from the run's model pool).
    ``replay_started`` is when replaying began (``time.monotonic``), for :meth:`eta_seconds`.
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
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = 0.0
    replay_started: float | None = None
    #: The run's call counters by model (set by the runner: the model pool's live counters).
    call_stats: Callable[[], Mapping[str, CallStats]] | None = field(default=None, repr=False)

    def count_verdict(self, stage: Stage) -> None:
        """Count one verdict of ``stage``."""
        setattr(self, stage, getattr(self, stage) + 1)

    def add_spend(self, usage: Usage | None, cost_usd: float | None) -> None:
        """Count what one replay or judge call used (``usage=None``: the provider reported none)."""
        if usage is not None:
            self.input_tokens += usage.input_tokens
            self.output_tokens += usage.output_tokens
        self.cost_usd = total_cost((self.cost_usd, cost_usd))

    def calls(self) -> CallStats:
        """The session's model calls so far, over every model (all zero before the models are built)."""
        total = CallStats()
        for stats in (self.call_stats() if self.call_stats is not None else {}).values():
            total = total + stats
        return total

    @property
    def pairs_to_do(self) -> int:
        """Pairs this session has to decide: those the sample plans less those an earlier session wrote."""
        return max(0, self.pairs_total - self.pairs_resumed)

    def eta_seconds(self, now: float | None = None) -> float | None:
        """Seconds until every pair is decided, at the pace so far (``None`` before the first verdict).

        Example:
            >>> p = RunProgress(pairs_total=10, judge=4, replay_started=0.0)
            >>> p.eta_seconds(now=20.0)
            30.0
        """
        if self.replay_started is None or self.decided == 0:
            return None
        elapsed = (time.monotonic() if now is None else now) - self.replay_started
        return max(0.0, elapsed / self.decided * (self.pairs_to_do - self.decided))

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
