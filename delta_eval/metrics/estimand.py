"""The estimand: which pairs a win rate counts, and how each counts. One definition serves the decision, the
report, planning (``de.plan``) and early stopping, so all of them answer the same question.

- ``over="all"`` (the default) counts every decided pair, equivalent ones (stages 1 and 2) as ties: the effect of
  the change on the traffic as a whole. A change that touches 10% of turns and loses 60% of those is 1 point below
  50% on this scale. ``over="judged"`` counts only the pairs whose outputs differ: the same change is 10 points
  below 50% there. The margin of a decision lives on the scale of its estimand.
- ``soft=True`` scores a judged pair by the judge's preference (the probability that the candidate is better)
  instead of win / tie / loss.
- ``weighted``: reweight pairs to the population by their sampling weights (``N_h / n_h``, times the share of a
  conversation's turns a turn cap left out). ``"auto"`` (the default) does so whenever the weights vary, which is
  when the sample is not self-weighting (Neyman allocation, a minimum per stratum, turn caps).
- ``errors="loss"`` (the default): a pair where one side's replay failed counts as a loss for the side that failed
  (its error is its failure, and a candidate whose errors fall on the pairs it would have lost must not look
  better for them); both failed is a tie (left out over judged pairs). A pair the judges could not decide is left
  out (and gated by ``undecided_rate``). ``errors="exclude"`` leaves out every error pair.

Each counted pair contributes ``a`` (how much the candidate won it) and ``b`` (how much the baseline won it), both
in [0, 1]; the win rate is ``1/2 + (A - B) / 2`` over the counted pairs (see :mod:`delta_eval.metrics.difference`).

Example:
    >>> e = Estimand(over="judged", weighted=False)
    >>> e.describe()
    'win rate over judged pairs (equivalent pairs left out), replay errors count against the side that failed'
    >>> components([{"outcome": "candidate", "conversation_id": "c"}], e).a
    [1.0]
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from delta_eval.metrics.difference import PairedSums
from delta_eval.metrics.frames import Rows, rows_of

__all__ = [
    "VERDICT_COLUMNS",
    "Components",
    "Estimand",
    "components",
    "contribution",
    "error_side",
    "sql_contribution",
    "sql_error_side",
    "weights_vary",
]

#: The verdict columns an estimand reads.
VERDICT_COLUMNS = ("outcome", "preference", "weight", "conversation_id", "stratum", "error_side", "error", "stage",
                   "pair_id")  # fmt: skip

_FAILED = re.compile(r"\b(baseline|candidate) replay failed\b")


class Estimand(BaseModel):
    """What a win rate measures (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    over: Literal["all", "judged"] = "all"
    soft: bool = False
    weighted: bool | Literal["auto"] = "auto"
    errors: Literal["loss", "exclude"] = "loss"

    def describe(self, weighted: bool | None = None) -> str:
        """The estimand in words, for every line that states a verdict; ``weighted``: whether weights were used
        (for ``"auto"``, once known)."""
        scope = (
            "win rate over all pairs (equivalent pairs as ties)"
            if self.over == "all"
            else "win rate over judged pairs (equivalent pairs left out)"
        )
        if self.soft:
            scope = scope.replace("win rate", "soft win rate (judge preferences)", 1)
        used = self.weighted if weighted is None else weighted
        if used is True:
            scope += ", weighted to the population"
        elif used == "auto":
            scope += ", weighted where the sample's weights vary"
        if self.errors == "loss":
            scope += ", replay errors count against the side that failed"
        else:
            scope += ", error pairs left out"
        return scope


@dataclass
class Components:
    """The counted pairs of an estimand: per pair ``a`` and ``b`` (see the module docstring), weight, conversation
    and stratum; the count of every outcome; and whether weights were applied."""

    a: list[float] = field(default_factory=list)
    b: list[float] = field(default_factory=list)
    weights: list[float] = field(default_factory=list)
    clusters: list[str] = field(default_factory=list)
    strata: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    weighted: bool = False
    error_losses: dict[str, int] = field(default_factory=dict)

    @property
    def scores(self) -> list[float]:
        """Each counted pair's score: 1 won, 0 lost, 1/2 tie (or the preference)."""
        return [0.5 + (x - y) / 2 for x, y in zip(self.a, self.b, strict=True)]

    def sums(self) -> PairedSums:
        """The per-conversation sums of :mod:`delta_eval.metrics.difference`."""
        return PairedSums.of(self.a, self.b, weights=self.weights, clusters=self.clusters, strata=self.strata)


def error_side(row: Mapping[str, Any]) -> str | None:
    """Which side an error verdict failed on: ``baseline``, ``candidate``, ``both``, or ``judge`` (``None`` for a
    decided pair). Reads ``error_side``, or for verdicts written before it existed, the error's text."""
    if row.get("outcome") != "error":
        return None
    side = row.get("error_side")
    if side:
        return str(side)
    failed = set(_FAILED.findall(str(row.get("error") or "")))
    if failed == {"baseline", "candidate"}:
        return "both"
    return failed.pop() if failed else "judge"


def weights_vary(weights: Iterable[float]) -> bool:
    """Whether sampling weights differ (beyond rounding), so that an unweighted mean would be biased."""
    ws = [float(w) for w in weights]
    return bool(ws) and max(ws) - min(ws) > 1e-9 * max(abs(max(ws)), 1.0)


def components(verdicts: Rows, estimand: Estimand | None = None) -> Components:
    """The counted pairs of ``verdicts`` under ``estimand`` (default: :class:`Estimand`'s defaults)."""
    e = estimand or Estimand()
    rows = rows_of(verdicts, VERDICT_COLUMNS)
    out = Components(counts={"candidate": 0, "baseline": 0, "tie": 0, "equivalent": 0, "error": 0},
                     error_losses={"candidate": 0, "baseline": 0, "both": 0})  # fmt: skip
    raw_weights: list[float] = []
    for k, r in enumerate(rows):
        outcome = str(r.get("outcome"))
        out.counts[outcome] = out.counts.get(outcome, 0) + 1
        ab = contribution(r, e)
        if ab is None:
            continue
        if outcome == "error":
            out.error_losses[str(error_side(r))] += 1
        out.a.append(ab[0])
        out.b.append(ab[1])
        raw_weights.append(float(r.get("weight") or 1.0))
        # Rows without a conversation are their own cluster.
        out.clusters.append(str(r.get("conversation_id") or f"#{k}"))
        out.strata.append(str(r.get("stratum") or ""))
    out.weighted = weights_vary(raw_weights) if e.weighted == "auto" else bool(e.weighted)
    out.weights = raw_weights if out.weighted else [1.0] * len(raw_weights)
    return out


def contribution(row: Mapping[str, Any], estimand: Estimand) -> tuple[float, float] | None:
    """What one verdict row contributes under ``estimand``: ``(a, b)`` (how much the candidate and the baseline won
    the pair), or ``None`` when the pair does not count.

    Example:
        >>> contribution({"outcome": "tie"}, Estimand())
        (0.0, 0.0)
        >>> contribution({"outcome": "equivalent"}, Estimand(over="judged")) is None
        True
    """
    outcome = str(row.get("outcome"))
    e = estimand
    if outcome in ("candidate", "baseline", "tie"):
        pref = row.get("preference")
        if e.soft and pref is not None:
            p = float(pref)
            return max(0.0, 2 * p - 1), max(0.0, 1 - 2 * p)
        return float(outcome == "candidate"), float(outcome == "baseline")
    if outcome == "equivalent":
        return (0.0, 0.0) if e.over == "all" else None
    if outcome == "error" and e.errors == "loss":
        side = error_side(row)
        if side in ("baseline", "candidate") or (side == "both" and e.over == "all"):
            # The side that failed loses; both failing is a tie.
            return float(side == "baseline"), float(side == "candidate")
    return None


def sql_error_side(*, has_error_side: bool = True) -> str:
    """:func:`error_side` as an SQL expression over a ``verdicts`` table (``has_error_side``: see
    :func:`sql_contribution`)."""
    from_text = (
        "CASE WHEN error LIKE '%baseline replay failed%' AND error LIKE '%candidate replay failed%' THEN 'both' "
        "WHEN error LIKE '%baseline replay failed%' THEN 'baseline' "
        "WHEN error LIKE '%candidate replay failed%' THEN 'candidate' ELSE 'judge' END"
    )
    return f"coalesce(nullif(error_side, ''), {from_text})" if has_error_side else from_text


def sql_contribution(estimand: Estimand, *, has_error_side: bool = True) -> tuple[str, str, str]:
    """:func:`contribution` as SQL expressions over a ``verdicts`` table: ``(a, b, counted)``, so a query engine
    computes the estimand's sums without loading the pairs (a test holds the two to the same numbers).
    ``has_error_side``: whether the table has the ``error_side`` column (folders written before it read the error's
    text instead)."""
    side = sql_error_side(has_error_side=has_error_side)
    if estimand.soft:
        a_judged = ("CASE WHEN preference IS NULL THEN (outcome = 'candidate')::DOUBLE "
                    "ELSE greatest(0.0, 2 * preference - 1) END")  # fmt: skip
        b_judged = ("CASE WHEN preference IS NULL THEN (outcome = 'baseline')::DOUBLE "
                    "ELSE greatest(0.0, 1 - 2 * preference) END")  # fmt: skip
    else:
        a_judged, b_judged = "(outcome = 'candidate')::DOUBLE", "(outcome = 'baseline')::DOUBLE"
    error_counts = "false"
    if estimand.errors == "loss":
        sides = "('baseline', 'candidate', 'both')" if estimand.over == "all" else "('baseline', 'candidate')"
        error_counts = f"(outcome = 'error' AND {side} IN {sides})"
    equivalent = "outcome = 'equivalent'" if estimand.over == "all" else "false"
    counted = f"(outcome IN ('candidate', 'baseline', 'tie') OR {equivalent} OR {error_counts})"
    a = (f"CASE WHEN outcome IN ('candidate', 'baseline', 'tie') THEN {a_judged} "
         f"WHEN outcome = 'error' THEN ({side} = 'baseline')::DOUBLE ELSE 0.0 END")  # fmt: skip
    b = (f"CASE WHEN outcome IN ('candidate', 'baseline', 'tie') THEN {b_judged} "
         f"WHEN outcome = 'error' THEN ({side} = 'candidate')::DOUBLE ELSE 0.0 END")  # fmt: skip
    return a, b, counted
