"""Eliminatory gates: limits the candidate must keep whatever its win rate, checked before and apart from any
average (a better average never buys back a critical failure).

A gate names a metric and its ``max``. Most metrics are failure rates each side has, and by default a gate compares
the candidate with the baseline on the same pairs (``compare="baseline"``): its value is the candidate's rate
minus the baseline's, so a failure both sides share (a hard conversation, a judge that is strict with everyone)
is not held against the change. ``compare="absolute"`` checks the candidate's own rate, named as such.

``test`` says what "over the limit" means:

- ``"shown"`` (the default): the gate fails only when the data show the limit is exceeded, i.e. the lower bound of
  the value's interval is above ``max``. Noise alone fails it at most ``(1 - confidence) / 2`` of the time.
- ``"point"``: it fails when the observed value is above ``max``.
- ``"upper"``: it passes only when the upper bound is within ``max`` (shown within the limit: the strictest, and it
  needs enough data).

A gate whose metric cannot be computed (no severity on any judged loss: rule judges, or a verdicts table without
severities; no replays; no priced calls) is *not evaluated*: it neither passes nor fails, and unless
``required=False`` it keeps the decision from APPROVED (an approval never rests on a gate nobody could check).

Metrics:

- ``critical_rate``: pairs a side lost with a ``critical`` failure (a hallucinated fact, a wrong irreversible
  action), over decided pairs; ``severity_rate``: the same with ``minor`` or ``critical``. Severity belongs to the
  side that lost the pair.
- ``error_rate``: replays that ended in error; ``undecided_rate`` (absolute): pairs the judges could not decide.
- ``invalid_tool_call_rate``: invalid tool calls per tool call; ``text_instead_of_action_rate``: text where
  production acted; ``no_decision_rate``: turns that neither called a tool nor wrote any text (over replays that did
  not fail).
- ``check:<name>``: the share of replays failing one of the rule's own checks (:mod:`delta_eval.metrics.checks`).
- ``goal_missed_rate``: sessions where a side did not reach the user's goal, over the sessions of a session run
  where it was checked for both sides (:mod:`delta_eval.metrics.goals`).
- ``latency_p95_s`` (absolute): the 95th percentile of the candidate's turn latency, in seconds.
- ``cost_ratio`` (absolute, it is already relative): cost per conversation over the baseline's.

Example:
    >>> Gate(metric="critical_rate", max=0.0).label
    'critical_rate: candidate - baseline <= 0'
    >>> Gate(metric="critical_rate", max=0.0, compare="absolute").label
    'critical_rate (absolute) <= 0'
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from delta_eval.metrics.difference import PairedSums
from delta_eval.metrics.estimand import error_side
from delta_eval.metrics.goals import GOAL_METRIC, NO_GOALS, goal_sums
from delta_eval.metrics.sides import Rate, SideMetrics, cost_ratio, no_decision_of, recorded_acted_of

__all__ = [
    "ABSOLUTE_METRICS",
    "DEFAULT_GATES",
    "METRICS",
    "Gate",
    "GateResult",
    "evaluate_gates",
    "gate_result",
    "side_gate",
]

from delta_eval.metrics.rule import ABSOLUTE_METRICS, DEFAULT_GATES, METRICS, Gate


class GateResult(BaseModel):
    """A gate, the value found with its interval, and whether it passed (``None``: not evaluated, ``detail`` says
    why). For a gate against the baseline, ``candidate`` and ``baseline`` are the two sides' own rates."""

    model_config = ConfigDict(frozen=True)

    gate: Gate
    value: float | None
    ci_low: float | None
    ci_high: float | None
    passed: bool | None
    detail: str = ""
    candidate: float | None = None
    baseline: float | None = None

    def __str__(self) -> str:
        if self.passed is None:
            return f"{self.gate.label}: not evaluated ({self.detail})"
        metric = self.gate.metric
        unit = "s" if metric == "latency_p95_s" else "x" if metric == "cost_ratio" else "%"
        scale = 100.0 if unit == "%" else 1.0
        relative = self.gate.compare == "baseline"

        def fmt(v: float | None, points: bool = False) -> str:
            if v is None or math.isinf(v):
                return "inf"
            return f"{v * scale:+.2f}" if points else f"{v * scale:.2f}{unit}"

        if relative:
            value = f"{fmt(self.value, True)} points [{fmt(self.ci_low, True)}, {fmt(self.ci_high, True)}]"
            if self.candidate is not None and self.baseline is not None:
                value += f" (candidate {fmt(self.candidate)}, baseline {fmt(self.baseline)})"
        else:
            value = f"{fmt(self.value)} [{fmt(self.ci_low)}, {fmt(self.ci_high)}]"
        said = "pass" if self.passed else "FAIL"
        return f"{self.gate.label}: {said} - {value}" + (f"; {self.detail}" if self.detail else "")


_SEVERITIES = {"critical_rate": ("critical",), "severity_rate": ("minor", "critical")}


class _Paired:
    """Per pair, each side's events and units, and the pair's conversation and weight: what a gate against the
    baseline (or an absolute rate) is computed on."""

    def __init__(self) -> None:
        self.a: list[float] = []
        self.ta: list[float] = []
        self.b: list[float] = []
        self.tb: list[float] = []
        self.clusters: list[str] = []
        self.weights: list[float] = []

    def add(self, a: float, ta: float, b: float, tb: float, cluster: str, weight: float) -> None:
        self.a.append(a)
        self.ta.append(ta)
        self.b.append(b)
        self.tb.append(tb)
        self.clusters.append(cluster)
        self.weights.append(weight)

    def sums(self) -> PairedSums:
        return PairedSums.of(self.a, self.b, ta=self.ta, tb=self.tb, weights=self.weights, clusters=self.clusters)


def _verdict_pairs(metric: str, verdicts: Sequence[Mapping[str, Any]], weight: Callable[[Mapping[str, Any]], float]
                   ) -> tuple[_Paired | None, str]:  # fmt: skip
    out = _Paired()
    if metric == "undecided_rate":
        for v in verdicts:
            out.add(float(error_side(v) == "judge"), 1.0, 0.0, 1.0, str(v.get("conversation_id")), weight(v))
        return (out, "") if out.a else (None, "no verdicts")
    severities = _SEVERITIES[metric]
    losses = [v for v in verdicts if v.get("outcome") in ("candidate", "baseline")]
    unknown = sum(1 for v in losses if v.get("severity") is None)
    if losses and unknown == len(losses):
        return None, f"no severity on any of the {len(losses)} judged losses"
    for v in verdicts:
        outcome = v.get("outcome")
        if outcome == "error":
            continue
        bad = v.get("severity") in severities
        # Severity belongs to the side that lost the pair.
        out.add(float(outcome == "baseline" and bad), 1.0, float(outcome == "candidate" and bad), 1.0,
                str(v.get("conversation_id")), weight(v))  # fmt: skip
    if not out.a:
        return None, "no decided pairs"
    return out, (f"{unknown} of {len(losses)} judged losses without a severity" if unknown else "")


def _replay_pairs(
    metric: str,
    replays: Sequence[Mapping[str, Any]],
    weights: Mapping[str, float],
    checks: Mapping[tuple[str, str], bool | None],
) -> tuple[_Paired | None, str]:
    acted = recorded_acted_of(replays)
    by_pair: dict[str, dict[str, Mapping[str, Any]]] = {}
    for r in replays:
        by_pair.setdefault(str(r.get("pair_id")), {})[str(r.get("side"))] = r
    out = _Paired()
    for pair_id, sides in by_pair.items():
        base, cand = sides.get("baseline"), sides.get("candidate")
        if base is None or cand is None:
            continue
        units = [_events(metric, side, acted(side), checks.get((pair_id, name))) for side, name in
                 ((cand, "candidate"), (base, "baseline"))]  # fmt: skip
        (a, ta), (b, tb) = units
        if ta <= 0 and tb <= 0:
            continue
        out.add(a, ta, b, tb, str(cand.get("conversation_id")), weights.get(pair_id, 1.0))
    if not out.a:
        return None, "no pair where the metric applies"
    return out, ""


def _events(metric: str, r: Mapping[str, Any], acted: bool, check: bool | None) -> tuple[float, float]:
    """One side of one pair: (events, units) of ``metric`` (``acted``: whether production called a tool there)."""
    failed = r.get("error") is not None
    if metric == "error_rate":
        return float(failed), 1.0
    if failed:
        return 0.0, 0.0  # no output to judge by the other metrics; its error counts in error_rate
    if metric == "invalid_tool_call_rate":
        return float(r.get("invalid_tool_calls") or 0), float(r.get("n_tool_calls") or 0)
    if metric == "text_instead_of_action_rate":
        return (float(bool(r.get("text_instead_of_action"))), 1.0) if acted else (0.0, 0.0)
    if metric == "no_decision_rate":
        silent = no_decision_of(r)
        return (0.0, 0.0) if silent is None else (float(silent), 1.0)
    if metric.startswith("check:"):
        return (0.0, 0.0) if check is None else (float(not check), 1.0)
    raise ValueError(f"not a replay metric: {metric}")


def evaluate_gates(
    gates: Sequence[Gate],
    verdicts: Sequence[Mapping[str, Any]],
    sides: Mapping[str, SideMetrics],
    *,
    replays: Sequence[Mapping[str, Any]] | None = None,
    checks: Mapping[str, Mapping[tuple[str, str], bool | None]] | None = None,
    weighted: bool = False,
    confidence: float = 0.95,
) -> list[GateResult]:
    """Each gate's result on the verdict rows, the replay rows (for the per-side metrics, paired by ``pair_id``),
    the sides' summary metrics (:func:`~delta_eval.metrics.sides.side_metrics`, for latency and cost) and the
    results of the rule's own checks (``checks[name][(pair_id, side)]``: passed, failed, or ``None`` where it does
    not apply). ``weighted``: weigh pairs by their verdict's sampling weight."""
    pair_weight = {str(v.get("pair_id")): float(v.get("weight") or 1.0) for v in verdicts} if weighted else {}

    def weight(v: Mapping[str, Any]) -> float:
        return float(v.get("weight") or 1.0) if weighted else 1.0

    out = []
    for gate in gates:
        out.append(_evaluate(gate, verdicts, sides, replays, checks or {}, weight, pair_weight, confidence))
    return out


def _evaluate(
    gate: Gate,
    verdicts: Sequence[Mapping[str, Any]],
    sides: Mapping[str, SideMetrics],
    replays: Sequence[Mapping[str, Any]] | None,
    checks: Mapping[str, Mapping[tuple[str, str], bool | None]],
    weight: Callable[[Mapping[str, Any]], float],
    pair_weight: Mapping[str, float],
    confidence: float,
) -> GateResult:
    metric = gate.metric

    def missing(why: str) -> GateResult:
        return GateResult(gate=gate, value=None, ci_low=None, ci_high=None, passed=None, detail=why)

    if metric in ("latency_p95_s", "cost_ratio"):
        return side_gate(gate, sides)
    if metric == GOAL_METRIC:
        sums = goal_sums(verdicts, weight)
        return gate_result(gate, sums, "" if sums is not None else NO_GOALS, confidence)
    if metric in ("critical_rate", "severity_rate", "undecided_rate"):
        pairs, note = _verdict_pairs(metric, verdicts, weight)
    else:
        if replays is None:
            return missing("no replays")
        if metric.startswith("check:"):
            name = metric.removeprefix("check:")
            if name not in checks:
                return missing(f"no check named {name!r} in the rule's checks")
            pairs, note = _replay_pairs(metric, replays, pair_weight, checks[name])
        else:
            pairs, note = _replay_pairs(metric, replays, pair_weight, {})
    return gate_result(gate, None if pairs is None else pairs.sums(), note, confidence)


def gate_result(gate: Gate, sums: PairedSums | None, note: str, confidence: float = 0.95) -> GateResult:
    """A gate's result from its metric's paired sums (candidate first), or not evaluated (``sums`` is ``None``,
    ``note`` says why); ``note`` is kept as the result's detail otherwise."""
    if sums is None:
        return GateResult(gate=gate, value=None, ci_low=None, ci_high=None, passed=None, detail=note)
    d = sums.difference(confidence, same_kind=True)
    if d.estimate is None or d.a.value is None:
        return GateResult(gate=gate, value=None, ci_low=None, ci_high=None, passed=None,
                          detail="no pair where the metric applies")  # fmt: skip
    if gate.compare == "baseline":
        value, lo, hi = d.estimate, d.ci_low, d.ci_high
    else:
        value, lo, hi = d.a.value, d.a.ci_low, d.a.ci_high
    return GateResult(gate=gate, value=value, ci_low=lo, ci_high=hi, passed=_passes(gate, value, lo, hi),
                      detail=note, candidate=d.a.value, baseline=d.b.value)  # fmt: skip


def _passes(gate: Gate, value: float, lo: float, hi: float) -> bool:
    tolerance = gate.max + 1e-12
    if gate.test == "shown":
        return lo <= tolerance
    if gate.test == "point":
        return value <= tolerance
    return hi <= tolerance


def side_gate(gate: Gate, sides: Mapping[str, SideMetrics], ratio: Rate | None = None) -> GateResult:
    """A gate on the sides' summary metrics: the candidate's latency p95, or its cost over the baseline's (``ratio``
    when computed already, else :func:`~delta_eval.metrics.sides.cost_ratio` of the sides)."""
    cand, base = sides.get("candidate"), sides.get("baseline")

    def missing(why: str) -> GateResult:
        return GateResult(gate=gate, value=None, ci_low=None, ci_high=None, passed=None, detail=why)

    if cand is None:
        return missing("no candidate replays")
    if gate.metric == "latency_p95_s":
        if cand.latency_p95_ms is None:
            return missing("no successful replays")
        value = cand.latency_p95_ms / 1000
        lo, hi = cand.latency_p95_ci_ms or (cand.latency_p95_ms, cand.latency_p95_ms)
        return GateResult(gate=gate, value=value, ci_low=lo / 1000, ci_high=hi / 1000,
                          passed=_passes(gate, value, lo / 1000, hi / 1000))  # fmt: skip
    if base is None:
        return missing("no baseline replays")
    ratio = ratio if ratio is not None else cost_ratio(cand, base)
    if ratio.value is None:
        return missing("no conversation priced on both sides")
    return GateResult(gate=gate, value=ratio.value, ci_low=ratio.ci_low, ci_high=ratio.ci_high,
                      passed=_passes(gate, ratio.value, ratio.ci_low, ratio.ci_high))  # fmt: skip
