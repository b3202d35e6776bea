"""Whether each side reached the user's goal, over the sessions of a session run where it was checked.

A session run whose export records the actions that reach the user's goal (``session.expected``) scores each side's
``goal_reached`` (1 or 0) in its verdict's ``candidate_scores`` / ``baseline_scores`` (see
:mod:`delta_eval.judges.session`). Over the sessions where both sides were checked, this gives each side's share of
goals reached (:func:`goal_rates`: the headline of "does the candidate get the customer to the end?") and the gate
metric ``goal_missed_rate`` (the candidate's share of goals missed minus the baseline's), both from one paired sum
per conversation, computed from rows here or by DuckDB (:data:`GOAL_SQL`) with the same numbers.

Example:
    >>> rows = [{"conversation_id": f"c{i}", "candidate_scores": '{"goal_reached": 0.0}' if i < 3 else
    ...          '{"goal_reached": 1.0}', "baseline_scores": {"goal_reached": 1.0}} for i in range(10)]
    >>> rates = goal_rates(goal_sums(rows))
    >>> rates["candidate"].value, rates["baseline"].value
    (0.7, 1.0)
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from delta_eval.metrics.difference import PairedSums
from delta_eval.metrics.rule import GOAL_METRIC
from delta_eval.metrics.sides import Rate
from delta_eval.metrics.sql_sums import Metric

__all__ = ["GOAL_METRIC", "GOAL_SQL", "NO_GOALS", "goal_of", "goal_rates", "goal_sums"]

#: Why a goal gate is not evaluated.
NO_GOALS = "no session whose goal was checked for both sides (a session run with session.expected)"


def goal_of(scores: Any) -> bool | None:
    """Whether a side's scores (a mapping, or its JSON text as stored) say it reached the goal (``None``: not
    checked).

    Example:
        >>> goal_of('{"goal_reached": 1.0, "tone": 3}'), goal_of({"tone": 3}), goal_of(None)
        (True, None, None)
    """
    if isinstance(scores, str):
        try:
            scores = json.loads(scores) if scores else None
        except ValueError:
            return None
    if not isinstance(scores, Mapping):
        return None
    value = scores.get("goal_reached")
    return None if value is None else bool(float(value))


def goal_sums(
    verdicts: Sequence[Mapping[str, Any]], weight: Callable[[Mapping[str, Any]], float] = lambda v: 1.0
) -> PairedSums | None:
    """Per conversation, the goals missed by the candidate (first) and the baseline, over the verdicts where both
    were checked (``None``: no such verdict)."""
    a: list[float] = []
    b: list[float] = []
    clusters: list[str] = []
    weights: list[float] = []
    for v in verdicts:
        cand, base = goal_of(v.get("candidate_scores")), goal_of(v.get("baseline_scores"))
        if cand is None or base is None:
            continue
        a.append(float(not cand))
        b.append(float(not base))
        clusters.append(str(v.get("conversation_id")))
        weights.append(weight(v))
    if not a:
        return None
    return PairedSums.of(a, b, ta=[1.0] * len(a), tb=[1.0] * len(b), weights=weights, clusters=clusters)


def _sql_goal(column: str) -> str:
    # Scores are JSON text; a malformed one counts as not checked, as goal_of reads it.
    return (
        f"TRY_CAST(json_extract_string(CASE WHEN json_valid({column}) THEN {column} END, '$.goal_reached') AS DOUBLE)"
    )


#: :func:`goal_sums` in SQL over a verdicts view with ``candidate_scores`` and ``baseline_scores`` (JSON text).
GOAL_SQL = Metric(
    a=f"{_sql_goal('candidate_scores')} = 0",
    b=f"{_sql_goal('baseline_scores')} = 0",
    where=f"{_sql_goal('candidate_scores')} IS NOT NULL AND {_sql_goal('baseline_scores')} IS NOT NULL",
    binary=True,
)


def goal_rates(sums: PairedSums | None, confidence: float = 0.95) -> dict[str, Rate]:
    """Each side's share of goals reached with its cluster-robust interval, from :func:`goal_sums` (empty when no
    session was checked)."""
    if sums is None or sums.pairs == 0:
        return {}
    d = sums.difference(confidence)
    out: dict[str, Rate] = {}
    for side, missed, events in (("baseline", d.b, sums.b), ("candidate", d.a, sums.a)):
        if missed.value is None:
            continue
        n = float(sums.ta.sum())
        out[side] = Rate(value=1.0 - missed.value, ci_low=1.0 - missed.ci_high, ci_high=1.0 - missed.ci_low,
                         numerator=n - float(events.sum()), n=n)  # fmt: skip
    return out
