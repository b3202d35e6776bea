"""Deterministic metrics of each side, from the ``replays`` rows: no judge involved.

Per side (``baseline``, ``candidate``): the replay error rate; invalid tool calls per tool call (arguments that do not
parse, unknown tools, schema violations; see :mod:`delta_eval.replay.checks`); agreement with the recorded action;
text instead of action (over the turns where production called a tool); no decision (turns that neither called a
tool nor wrote any text); latency per turn (p50, p95); cost per conversation. Rates carry the cluster-robust
Wilson intervals of :mod:`delta_eval.metrics.difference` (turns of a conversation move together).

Example:
    >>> rows = [{"side": "candidate", "pair_id": "c#0", "conversation_id": "c", "error": None, "latency_ms": 900.0,
    ...          "cost_usd": 0.01, "n_tool_calls": 1, "invalid_tool_calls": 0, "matches_recorded": True,
    ...          "text_instead_of_action": False}]
    >>> side_metrics(rows)["candidate"].latency_p95_ms
    900.0
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict

from delta_eval.metrics.difference import PairedSums
from delta_eval.metrics.distributions import binom_ppf
from delta_eval.metrics.frames import Rows, rows_of
from delta_eval.metrics.intervals import ClusteredMean, ClusterSums, t_interval
from delta_eval.metrics.key_order import by_key_then

__all__ = [
    "SIDE_COLUMNS",
    "Rate",
    "SideMetrics",
    "cost_ratio",
    "cost_ratio_of",
    "no_decision_of",
    "partitioned_quantile_interval",
    "quantile_interval",
    "rate",
    "recorded_acted_of",
    "side_metrics",
    "sorted_quantile_interval",
]

#: The replay columns the sides' metrics read.
SIDE_COLUMNS = ("side", "pair_id", "conversation_id", "error", "latency_ms", "cost_usd", "n_tool_calls",
            "invalid_tool_calls", "matches_recorded", "text_instead_of_action", "no_decision",
            "final_text", "recorded_acted")  # fmt: skip


def recorded_acted_of(rows: Sequence[Mapping[str, Any]]) -> Callable[[Mapping[str, Any]], bool]:
    """Whether production called a tool at a replayed row's point (the turns where text instead of action can
    happen), for rows of ``rows``: the rows' own ``recorded_acted`` where every replayed turn that did not fail has
    one (a run's replays since the column exists, read without joining each pair's recorded row), else whether any
    recorded row of the pair called a tool (``False`` without one), as the SQL's ``bool_or`` says.

    Example:
        >>> rows = [{"pair_id": "p", "side": "recorded", "n_tool_calls": 2},
        ...         {"pair_id": "p", "side": "baseline", "error": None}]
        >>> recorded_acted_of(rows)(rows[1]), recorded_acted_of([{**rows[1], "recorded_acted": False}])(rows[1])
        (True, False)
    """
    if all(r.get("recorded_acted") is not None for r in rows if r.get("side") != "recorded" and r.get("error") is None):
        return lambda r: bool(r.get("recorded_acted"))
    by_pair: dict[str, bool] = {}
    for r in rows:
        if r.get("side") == "recorded" and r.get("pair_id") is not None:
            key = str(r["pair_id"])
            by_pair[key] = by_pair.get(key, False) or (r.get("n_tool_calls") or 0) > 0
    return lambda r: r.get("pair_id") is not None and by_pair.get(str(r["pair_id"]), False)


def no_decision_of(row: Mapping[str, Any]) -> bool | None:
    """Whether a replay row decided nothing (no tool call, no text); ``None`` for a failed replay, or when the row
    cannot say. Rows written before the ``no_decision`` column existed get it from their tool-call count and final
    text.

    Example:
        >>> no_decision_of({"error": None, "n_tool_calls": 0, "final_text": "  "}), no_decision_of({"error": "boom"})
        (True, None)
    """
    if row.get("error") is not None:
        return None
    stored = row.get("no_decision")
    if stored is not None:
        return bool(stored)
    if "final_text" not in row:  # neither the flag nor the output: unknown, not "silent"
        return None
    return not (row.get("n_tool_calls") or 0) and not str(row.get("final_text") or "").strip()


class Rate(BaseModel):
    """A proportion with its interval: ``value`` of ``n`` (events in ``numerator`` units)."""

    model_config = ConfigDict(frozen=True)

    value: float | None
    ci_low: float
    ci_high: float
    numerator: float
    n: float

    def __str__(self) -> str:
        if self.value is None:
            return "n/a"
        return f"{self.value:.1%} [{self.ci_low:.1%}, {self.ci_high:.1%}]"


def rate(
    events: Sequence[float],
    clusters: Sequence[str],
    totals: Sequence[float] | None = None,
    strata: Sequence[str] | None = None,
    confidence: float = 0.95,
    weights: Sequence[float] | None = None,
) -> Rate:
    """Events over totals (one row per turn; ``totals`` default to 1 each), with a cluster-robust interval: the
    ratio estimator ``sum(events) / sum(totals)`` and the Wilson interval at its design-effect sample size (see
    :mod:`delta_eval.metrics.difference`)."""
    t = [1.0] * len(events) if totals is None else [float(x) for x in totals]
    if not any(x > 0 for x in t):
        return Rate(value=None, ci_low=0.0, ci_high=1.0, numerator=0.0, n=0.0)
    sums = PairedSums.of(events, [0.0] * len(events), ta=t, tb=t, weights=weights, clusters=clusters, strata=strata)
    r = sums.difference(confidence).a
    return Rate(value=r.value, ci_low=r.ci_low, ci_high=r.ci_high, numerator=float(sum(float(e) for e in events)),
                n=float(sum(t)))  # fmt: skip


def quantile_interval(
    values: Sequence[float] | np.ndarray, q: float, confidence: float = 0.95
) -> tuple[float, float, float]:
    """The ``q`` quantile of ``values`` and its distribution-free interval from order statistics (binomial).

    Example:
        >>> quantile_interval(list(range(1, 101)), 0.5)[0]
        50.5
    """
    if len(values) == 0:
        return math.nan, math.nan, math.nan
    return partitioned_quantile_interval(np.array(values, dtype=float), q, confidence)  # (partitions a copy)


def _interval_ranks(n: int, q: float, confidence: float) -> tuple[int, int, bool]:
    """The positions (from 0) of the order statistics that bound the ``q`` quantile's interval among ``n`` values,
    and whether the upper one exists (else the interval is open above)."""
    alpha = 1 - confidence
    lo_rank = binom_ppf(alpha / 2, n, q)
    hi_rank = binom_ppf(1 - alpha / 2, n, q) + 1
    return max(0, lo_rank - 1), min(n - 1, hi_rank - 1), hi_rank <= n


def sorted_quantile_interval(x: np.ndarray, q: float, confidence: float = 0.95) -> tuple[float, float, float]:
    """:func:`quantile_interval` of values already sorted (``x``, a float array): no sort of a million latencies
    again."""
    n = len(x)
    if n == 0:
        return math.nan, math.nan, math.nan
    lo, hi, bounded = _interval_ranks(n, q, confidence)
    return float(np.quantile(x, q)), float(x[lo]), float(x[hi]) if bounded else math.inf


def partitioned_quantile_interval(x: np.ndarray, q: float, confidence: float = 0.95) -> tuple[float, float, float]:
    """:func:`quantile_interval` of values in any order (``x``, a float array), which it partitions in place at the
    two order statistics it reads: the same figures as of the sorted values, in a third of the time of a sort (a
    million latencies: 20 ms, a sort 60). ``x`` holds the same values after, in another order.

    Example:
        >>> x = np.array([5.0, 1.0, 4.0, 2.0, 3.0])
        >>> partitioned_quantile_interval(x, 0.5) == sorted_quantile_interval(np.sort(x), 0.5)
        True
    """
    n = len(x)
    if n == 0:
        return math.nan, math.nan, math.nan
    lo, hi, bounded = _interval_ranks(n, q, confidence)
    x.partition(sorted({lo, hi}))
    # (np.quantile selects its own order statistics: in any order of the values, the sorted values' quantile.)
    return float(np.quantile(x, q)), float(x[lo]), float(x[hi]) if bounded else math.inf


class SideMetrics(BaseModel):
    """One side's deterministic metrics (see the module docstring)."""

    model_config = ConfigDict(frozen=True)

    side: str
    turns: int
    conversations: int
    error_rate: Rate
    invalid_tool_call_rate: Rate
    matches_recorded_rate: Rate
    text_instead_of_action_rate: Rate
    no_decision_rate: Rate
    latency_p50_ms: float | None
    latency_p95_ms: float | None
    latency_p95_ci_ms: tuple[float, float] | None
    cost_per_conversation: float | None
    #: Each successful turn's latency, in increasing order (the same list whatever order the rows were written in).
    latencies_ms: list[float] = []
    costs_by_conversation: dict[str, float | None] = {}

    def summary(self) -> str:
        """One line."""
        p95 = f"{self.latency_p95_ms / 1000:.1f} s" if self.latency_p95_ms is not None else "n/a"
        cost = f"${self.cost_per_conversation:.4f}" if self.cost_per_conversation is not None else "unknown"
        return (
            f"errors {self.error_rate}, invalid tool calls {self.invalid_tool_call_rate}, same action as recorded "
            f"{self.matches_recorded_rate}, text instead of action {self.text_instead_of_action_rate}, no decision "
            f"{self.no_decision_rate}, latency p95 {p95}, cost/conversation {cost}"
        )


def side_metrics(replays: Rows, confidence: float = 0.95) -> dict[str, SideMetrics]:
    """:class:`SideMetrics` of each replayed side in ``replays`` (the ``recorded`` rows serve as the reference)."""
    rows = rows_of(replays, SIDE_COLUMNS)
    recorded_acted = recorded_acted_of(rows)
    out: dict[str, SideMetrics] = {}
    for side in sorted({str(r["side"]) for r in rows} - {"recorded"}):
        own = [r for r in rows if r["side"] == side]
        clusters = [str(r.get("conversation_id")) for r in own]
        ok = [r for r in own if r.get("error") is None]
        ok_clusters = [str(r.get("conversation_id")) for r in ok]
        acted = [r for r in ok if recorded_acted(r)]
        known_decision = [r for r in ok if no_decision_of(r) is not None]
        latencies = sorted(float(r["latency_ms"] or 0.0) for r in ok)
        p50 = float(np.median(latencies)) if latencies else None
        p95, lo95, hi95 = quantile_interval(latencies, 0.95, confidence) if latencies else (None, None, None)
        # Each conversation's cost summed exactly rounded (math.fsum; DuckDB's compensated fsum in decision_sql.py
        # gives the same for costs): the same total whatever order its rows come in, so a run and its baseline
        # against itself agree to the bit.
        each: dict[str, list[float] | None] = {}
        for r in own:
            c = str(r.get("conversation_id"))
            known = each.setdefault(c, [])
            if known is not None and r.get("cost_usd") is not None:
                known.append(float(r["cost_usd"]))
            else:
                each[c] = None  # a call without a price: the conversation's cost is unknown
        costs = {c: None if v is None else math.fsum(v) for c, v in each.items()}
        known = [v for v in costs.values() if v is not None]
        out[side] = SideMetrics(
            side=side,
            turns=len(own),
            conversations=len(set(clusters)),
            error_rate=rate([float(r.get("error") is not None) for r in own], clusters, confidence=confidence),
            invalid_tool_call_rate=rate(
                [float(r.get("invalid_tool_calls") or 0) for r in ok],
                ok_clusters,
                totals=[float(r.get("n_tool_calls") or 0) for r in ok],
                confidence=confidence,
            ),
            matches_recorded_rate=rate(
                [float(bool(r.get("matches_recorded"))) for r in ok], ok_clusters, confidence=confidence
            ),
            text_instead_of_action_rate=rate(
                [float(bool(r.get("text_instead_of_action"))) for r in acted],
                [str(r.get("conversation_id")) for r in acted],
                confidence=confidence,
            ),
            no_decision_rate=rate(
                [float(bool(no_decision_of(r))) for r in known_decision],
                [str(r.get("conversation_id")) for r in known_decision],
                confidence=confidence,
            ),
            latency_p50_ms=p50,
            latency_p95_ms=p95,
            latency_p95_ci_ms=None if lo95 is None or hi95 is None else (lo95, hi95),
            cost_per_conversation=(math.fsum(known) / len(known)) if known and len(known) == len(costs) else None,
            latencies_ms=latencies,
            costs_by_conversation=costs,
        )
    return out


def cost_ratio(candidate: SideMetrics, baseline: SideMetrics, confidence: float = 0.95) -> Rate:
    """The candidate's cost per conversation over the baseline's, on the conversations both priced, with a
    cluster-robust interval (ratio of totals; not a proportion, so its bounds are not held to [0, 1])."""
    for side in (candidate, baseline):
        if side.conversations and not side.costs_by_conversation:
            raise ValueError(
                f"the {side.side} side's metrics list no cost per conversation (figures only: a decision taken "
                "without lists=True), which the cost ratio is computed from; take the decision with "
                "RunResult.decision(lists=True), or read Decision's own cost-ratio gate"
            )
    cand, base = candidate.costs_by_conversation, baseline.costs_by_conversation
    # As Arrow and numpy arrays: a run of a million pairs has a hundred thousand conversations, each looked up in
    # the baseline's by Arrow's hash.
    names = pa.array(list(cand), pa.string())
    y_all = pa.array(list(cand.values()), pa.float64())  # None: null
    x_all = pa.array(list(base.values()), pa.float64()).take(pc.index_in(names, pa.array(list(base), pa.string())))
    return cost_ratio_of(y_all, x_all, confidence)


def cost_ratio_of(y_all: pa.Array, x_all: pa.Array, confidence: float = 0.95) -> Rate:
    """:func:`cost_ratio` of the candidate's conversations' costs ``y_all`` and the baseline's costs of the same
    conversations ``x_all`` (Arrow float arrays in the same order, each conversation once, null where unpriced or
    not replayed). The same conversations in any order give the same figures, to the last bit."""
    both = np.flatnonzero(pc.and_(y_all.is_valid(), x_all.is_valid()).to_numpy(zero_copy_only=False))
    x = x_all.to_numpy(zero_copy_only=False)[both].astype(float)
    y = y_all.to_numpy(zero_copy_only=False)[both].astype(float)
    keep = x > 0
    if len(both) and not x.any() and not y.any():
        return Rate(value=1.0, ci_low=1.0, ci_high=1.0, numerator=0.0, n=0.0)  # both free: the same cost
    # (fsum over Python floats: over a numpy array's elements it takes twice as long)
    numerator, n = math.fsum(y.tolist()), math.fsum(x.tolist())
    if not keep.any():
        return Rate(value=None, ci_low=0.0, ci_high=math.inf, numerator=numerator, n=n)
    mean = _one_per_cluster_mean(y[keep] / x[keep], x[keep])
    assert mean.estimate is not None
    lo, hi = t_interval(mean, confidence, lower=0.0, upper=math.inf)
    return Rate(value=mean.estimate, ci_low=lo, ci_high=hi, numerator=numerator, n=n)


def _one_per_cluster_mean(values: np.ndarray, weights: np.ndarray) -> ClusteredMean:
    """:func:`~delta_eval.metrics.intervals.clustered_mean` of values each in a cluster of its own, one stratum,
    summed in an order of their own (by value, then weight): the same clusters in any order (of their names, of
    their keys, of a run's files) give the same sums to the last bit, with no name read or sorted."""
    order = by_key_then(values, weights)  # (lexsort's order of the values: sorting most once, not twice)
    y, w = values[order], weights[order]
    # + 0.0: the per-cluster sums of clustered_mean start from 0.0 (a -0.0 becomes 0.0 there too).
    return ClusterSums(strata=np.full(len(y), "", dtype=str), wy=w * y + 0.0, w=w + 0.0, w2y2=w * w * y * y + 0.0,
                       w2y=w * w * y + 0.0, w2=w * w + 0.0, n=len(y)).mean()  # fmt: skip
