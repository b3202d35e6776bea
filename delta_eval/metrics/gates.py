"""Eliminatory gates: limits the candidate must keep whatever its win rate, checked before and apart from any
average (a better average never buys back a critical failure).

A gate names a metric of the candidate and its ``max``. ``test="point"`` passes when the observed value is within
the limit; ``test="upper"`` only when the upper bound of its interval is (the value is shown within the limit with
confidence; stricter, and needs enough data). A gate whose metric cannot be computed (no priced calls for a cost
gate) is reported as not evaluated and decides nothing.

Metrics (all of the candidate unless said):

- ``critical_rate``: pairs the baseline won where the judge called the candidate's failure critical (a
  hallucinated fact, a wrong irreversible action), over decided pairs;
- ``severity_rate``: the same with ``minor`` or ``critical`` severity;
- ``error_rate``: replays that ended in error; ``undecided_rate``: pairs with an error verdict;
- ``invalid_tool_call_rate``: invalid tool calls per tool call; ``text_instead_of_action_rate``: text where
  production acted;
- ``latency_p95_s``: the 95th percentile of a turn's latency, in seconds;
- ``cost_ratio``: cost per conversation over the baseline's.

Example:
    >>> Gate(metric="critical_rate", max=0.0).label
    'critical_rate <= 0'
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from delta_eval.metrics.frames import Rows, rows_of
from delta_eval.metrics.sides import Rate, SideMetrics, cost_ratio, rate

__all__ = ["DEFAULT_GATES", "Gate", "GateMetric", "GateResult", "evaluate_gates"]

GateMetric = Literal[
    "critical_rate",
    "severity_rate",
    "error_rate",
    "undecided_rate",
    "invalid_tool_call_rate",
    "text_instead_of_action_rate",
    "latency_p95_s",
    "cost_ratio",
]


class Gate(BaseModel):
    """One limit (see the module docstring). ``on_fail``: what failing it makes the decision."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    metric: GateMetric
    max: float = Field(ge=0)
    test: Literal["point", "upper"] = "point"
    on_fail: Literal["REJECTED", "PARTIAL"] = "REJECTED"

    @property
    def label(self) -> str:
        """``metric <= max``."""
        return f"{self.metric} <= {self.max:g}" + (" (upper bound)" if self.test == "upper" else "")


#: The gates a decision checks unless told otherwise.
DEFAULT_GATES: tuple[Gate, ...] = (
    Gate(metric="critical_rate", max=0.0),
    Gate(metric="severity_rate", max=0.02),
    Gate(metric="error_rate", max=0.02),
    Gate(metric="latency_p95_s", max=30.0),
    Gate(metric="cost_ratio", max=2.0, on_fail="PARTIAL"),
)


class GateResult(BaseModel):
    """A gate, the value found with its interval, and whether it passed (``None``: not evaluated)."""

    model_config = ConfigDict(frozen=True)

    gate: Gate
    value: float | None
    ci_low: float | None
    ci_high: float | None
    passed: bool | None
    detail: str = ""

    def __str__(self) -> str:
        if self.passed is None:
            return f"{self.gate.label}: not evaluated ({self.detail})"
        unit = "s" if self.gate.metric == "latency_p95_s" else "x" if self.gate.metric == "cost_ratio" else "%"
        scale = 100.0 if unit == "%" else 1.0

        def fmt(v: float | None) -> str:
            return "inf" if v is None or math.isinf(v) else f"{v * scale:.2f}{unit}"

        return (
            f"{self.gate.label}: {'pass' if self.passed else 'FAIL'} - {fmt(self.value)} "
            f"[{fmt(self.ci_low)}, {fmt(self.ci_high)}]" + (f" {self.detail}" if self.detail else "")
        )


def _verdict_rate(verdicts: list[dict[str, object]], severities: tuple[str, ...]) -> Rate:
    decided = [v for v in verdicts if v.get("outcome") != "error"]
    events = [float(v.get("outcome") == "baseline" and v.get("severity") in severities) for v in decided]
    return rate(events, [str(v.get("conversation_id")) for v in decided])


def _metric(
    metric: GateMetric, verdicts: list[dict[str, object]], sides: Mapping[str, SideMetrics]
) -> tuple[Rate | None, str]:
    cand, base = sides.get("candidate"), sides.get("baseline")
    if metric == "critical_rate":
        return _verdict_rate(verdicts, ("critical",)), ""
    if metric == "severity_rate":
        return _verdict_rate(verdicts, ("minor", "critical")), ""
    if metric == "undecided_rate":
        return rate([float(v.get("outcome") == "error") for v in verdicts],
                    [str(v.get("conversation_id")) for v in verdicts]), ""  # fmt: skip
    if cand is None:
        return None, "no candidate replays"
    if metric == "error_rate":
        return cand.error_rate, ""
    if metric == "invalid_tool_call_rate":
        return cand.invalid_tool_call_rate, ""
    if metric == "text_instead_of_action_rate":
        return cand.text_instead_of_action_rate, ""
    if metric == "latency_p95_s":
        if cand.latency_p95_ms is None:
            return None, "no successful replays"
        lo, hi = cand.latency_p95_ci_ms or (cand.latency_p95_ms, cand.latency_p95_ms)
        return Rate(value=cand.latency_p95_ms / 1000, ci_low=lo / 1000, ci_high=hi / 1000, numerator=0,
                    n=len(cand.latencies_ms)), ""  # fmt: skip
    if base is None:
        return None, "no baseline replays"
    ratio = cost_ratio(cand, base)
    if ratio.value is None:
        return None, "no conversation priced on both sides"
    return ratio, ""


def evaluate_gates(
    gates: tuple[Gate, ...] | list[Gate], verdicts: Rows, sides: Mapping[str, SideMetrics]
) -> list[GateResult]:
    """Each gate's result on the verdict rows and the sides' metrics (from
    :func:`~delta_eval.metrics.sides.side_metrics`)."""
    rows = rows_of(verdicts, ["outcome", "severity", "conversation_id"])
    out = []
    for gate in gates:
        found, why = _metric(gate.metric, rows, sides)
        if found is None or found.value is None:
            out.append(GateResult(gate=gate, value=None, ci_low=None, ci_high=None, passed=None,
                                  detail=why or "no data"))  # fmt: skip
            continue
        checked = found.value if gate.test == "point" else found.ci_high
        out.append(
            GateResult(
                gate=gate,
                value=found.value,
                ci_low=found.ci_low,
                ci_high=found.ci_high,
                passed=checked <= gate.max + 1e-12,
            )
        )
    return out
