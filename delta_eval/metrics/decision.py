"""The decision: ship (APPROVED), ship with reservations (PARTIAL), or not (REJECTED), and what decided it.

In order, each step able only to lower the outcome:

1. Gates (:mod:`delta_eval.metrics.gates`), before and apart from any average: a failed gate gives its ``on_fail``.
2. Non-inferiority of the win rate against ``margin`` (:mod:`delta_eval.metrics.paired`): ``worse`` is REJECTED,
   ``undecided`` gives ``undecided`` (PARTIAL by default), ``better`` and ``not worse`` pass.
3. Strata (:mod:`delta_eval.metrics.strata`): a stratum shown ``worse`` after the multiplicity adjustment gives
   ``stratum_worse`` (PARTIAL by default).

With several epochs the decision is also taken on each epoch alone (``epochs``: the outcome per epoch), and each
side's consistency across epochs is reported (:mod:`delta_eval.metrics.consistency`), so one pooled verdict never
stands alone.

``decided_by`` names the first step that set the final outcome ("gate critical_rate <= 0", "non-inferiority:
worse", "stratum task_type=refund: worse", or "every gate passed; not worse").

Example:
    >>> rows = [{"outcome": o, "conversation_id": f"c{i}"}
    ...         for i in range(300) for o in ("tie", "candidate" if i % 2 else "equivalent")]
    >>> d = decide(rows, rule=DecisionRule(gates=()))
    >>> d.outcome, d.decided_by
    ('APPROVED', 'every gate passed; better')
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from delta_eval.metrics.consistency import Consistency, consistency
from delta_eval.metrics.frames import Rows, rows_of
from delta_eval.metrics.gates import DEFAULT_GATES, Gate, GateResult, evaluate_gates
from delta_eval.metrics.paired import (
    NetPreference,
    NonInferiority,
    SignTest,
    net_preference,
    non_inferiority,
    sign_test,
)
from delta_eval.metrics.sides import SideMetrics, side_metrics
from delta_eval.metrics.strata import StratumDecision, by_stratum

__all__ = ["Decision", "DecisionRule", "Outcome", "decide"]

Outcome = Literal["APPROVED", "PARTIAL", "REJECTED"]
_RANK: dict[Outcome, int] = {"APPROVED": 2, "PARTIAL": 1, "REJECTED": 0}


class DecisionRule(BaseModel):
    """How the numbers become a decision (the decision matrix). In TOML, the ``[decision]`` table.

    - ``margin``: non-inferiority margin on the win-rate scale (0.02: at most 2 points below 50%);
    - ``gates``: the eliminatory gates (default :data:`~delta_eval.metrics.gates.DEFAULT_GATES`);
    - ``undecided`` / ``stratum_worse``: the outcome of an undecided comparison, and of a stratum shown worse;
    - ``over``, ``soft``, ``weighted``: which win rate (see :func:`~delta_eval.metrics.win_rate`);
    - ``adjustment``, ``min_conversations``: multiplicity adjustment across strata, and the size below which a
      stratum is flagged small;
    - ``confidence``: of every interval.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    margin: float = Field(default=0.02, ge=0.0, lt=0.5)
    gates: tuple[Gate, ...] = DEFAULT_GATES
    undecided: Outcome = "PARTIAL"
    stratum_worse: Outcome = "PARTIAL"
    over: Literal["judged", "all"] = "all"
    soft: bool = False
    weighted: bool = False
    adjustment: Literal["holm", "bh", "none"] = "holm"
    min_conversations: int = Field(default=10, ge=1)
    confidence: float = Field(default=0.95, gt=0.5, lt=1.0)


class Decision(BaseModel):
    """The outcome, what decided it, and every number behind it."""

    model_config = ConfigDict(frozen=True)

    outcome: Outcome
    decided_by: str
    rule: DecisionRule
    non_inferiority: NonInferiority
    net_preference: NetPreference
    sign_test: SignTest
    gates: list[GateResult]
    strata: list[StratumDecision]
    sides: dict[str, SideMetrics]
    epochs: dict[int, Outcome] = {}
    consistency: dict[str, Consistency] = {}

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def lines(self) -> list[str]:
        """The decision as text lines, for the report."""
        ni, net, st = self.non_inferiority, self.net_preference, self.sign_test
        out = [f"DECISION: {self.outcome} - decided by {self.decided_by}"]
        out.append(f"  non-inferiority (margin {self.rule.margin:.0%}): {ni}")
        if net.estimate is not None:
            out.append(
                f"  net preference {net.estimate:+.1%} [{net.ci_low:+.1%}, {net.ci_high:+.1%}]  (P(candidate better)"
                f" - P(baseline better))"
            )
        out.append(
            f"  sign test over conversations: {st.favour_candidate} favour the candidate, {st.favour_baseline} the "
            f"baseline, {st.balanced} in balance; p = {st.p_value:.3g}"
        )
        if self.gates:
            out.append("  gates (checked before any average):")
            out += [f"    {g}" for g in self.gates]
        flagged = [s for s in self.strata if s.worse or s.small]
        if len(self.strata) > 1:
            worse = [s.stratum for s in self.strata if s.worse]
            small = [s.stratum for s in self.strata if s.small]
            out.append(
                f"  strata: {len(self.strata)} tested ({self.rule.adjustment} adjustment); worse: "
                f"{', '.join(worse) or 'none'}"
                + (f"; small (< {self.rule.min_conversations} conversations, rough): {len(small)}" if small else "")
            )
            out += [f"    {s.stratum}: {s.verdict}, win rate {s.win_rate.estimate:.1%}, p(worse) adjusted "
                    f"{s.p_worse_adjusted:.3g}" for s in flagged if s.worse]  # fmt: skip
        if self.epochs:
            approved = sum(o == "APPROVED" for o in self.epochs.values())
            each = ", ".join(f"{e}: {o}" for e, o in sorted(self.epochs.items()))
            out.append(f"  epochs: APPROVED in {approved} of {len(self.epochs)} ({each})")
        for side, c in self.consistency.items():
            out.append(
                f"  {side} consistency: the same answer in all {c.epochs} epochs at {c.consistent} of {c.points} "
                f"points ({c.distinct_answers:.2f} distinct answers per point)"
            )
        for side, m in self.sides.items():
            out.append(f"  {side}: {m.summary()}")
        return out


def decide(verdicts: Rows, replays: Rows | None = None, rule: DecisionRule | None = None) -> Decision:
    """The decision on verdict rows (and replay rows, for the sides' metrics and their gates)."""
    r = rule or DecisionRule()
    rows = rows_of(verdicts)
    options: dict[str, Any] = {"over": r.over, "soft": r.soft, "weighted": r.weighted, "confidence": r.confidence}
    sides = side_metrics(replays, r.confidence) if replays is not None else {}
    gates = evaluate_gates(r.gates, rows, sides)
    ni = non_inferiority(rows, r.margin, **options)
    strata = by_stratum(rows, r.margin, adjustment=r.adjustment, min_conversations=r.min_conversations,
                        alpha=1 - r.confidence, **options)  # fmt: skip
    steps: list[tuple[Outcome, str]] = []
    steps += [(g.gate.on_fail, f"gate {g.gate.label}") for g in gates if g.passed is False]
    if ni.verdict == "worse":
        steps.append(("REJECTED", "non-inferiority: worse"))
    elif ni.verdict == "undecided":
        steps.append((r.undecided, "non-inferiority: undecided"))
    if len(strata) > 1:
        steps += [(r.stratum_worse, f"stratum {s.stratum}: worse") for s in strata if s.worse]
    outcome: Outcome = "APPROVED"
    decided_by = f"every gate passed; {ni.verdict}"
    for level, why in steps:
        if _RANK[level] < _RANK[outcome]:
            outcome, decided_by = level, why
    epochs: dict[int, Outcome] = {}
    seen = sorted({int(v.get("epoch") or 1) for v in rows})
    if len(seen) > 1:
        replay_rows = rows_of(replays) if replays is not None else None
        for e in seen:
            mine = [v for v in rows if int(v.get("epoch") or 1) == e]
            theirs = None if replay_rows is None else [x for x in replay_rows if int(x.get("epoch") or 1) == e]
            epochs[e] = decide(mine, theirs, r).outcome
    return Decision(
        outcome=outcome,
        decided_by=decided_by,
        rule=r,
        non_inferiority=ni,
        net_preference=net_preference(rows, **options),
        sign_test=sign_test(rows, soft=r.soft),
        gates=gates,
        strata=strata,
        sides=sides,
        epochs=epochs,
        consistency=consistency(replays) if replays is not None and len(seen) > 1 else {},
    )
