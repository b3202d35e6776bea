"""The judging funnel: stage 1 (deterministic), stage 2 (cheap equivalence judge), stage 3 (pairwise judge).

Each pair leaves with exactly one :class:`~delta_eval.schema.Verdict` saying which stage decided it, one
:class:`~delta_eval.schema.Judgement` per judge call, and any error rows. A pair whose replays failed gets an
``error`` verdict; a stage-2 failure is recorded and the pair goes on to stage 3; a stage-3 failure (provider error,
unusable answer, or a judge's own bug) gives an ``error`` verdict with the reason. Nothing is dropped.

Position bias: the judge sees the outputs as A and B. With ``order="random"`` the candidate is A or B by a coin
seeded by (seed, pair id), so the same run always shows the same order and half the pairs go each way; with
``order="both"`` the pair is judged in both orders and a disagreement becomes a tie (recorded in ``details``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Literal

from delta_eval.calls import ModelRequest
from delta_eval.judges.base import (
    EquivalenceResult,
    PairView,
    PairwiseResult,
    SideView,
    SupportsComparison,
    SupportsEquivalence,
)
from delta_eval.judges.deterministic import deterministic_equivalence
from delta_eval.matching import DEFAULT_MATCH, MatchOptions
from delta_eval.pricing import Spend
from delta_eval.schema import ErrorRecord, Judgement, Outcome, Replay, ReplayPoint, Verdict

__all__ = ["Decision", "JudgeCascade", "candidate_is_a"]


def candidate_is_a(seed: int, pair_id: str) -> bool:
    """The seeded coin: whether the candidate is shown as A for this pair."""
    return hashlib.sha256(f"{seed}:{pair_id}".encode()).digest()[0] & 1 == 1


@dataclass
class Decision:
    """What judging one pair produced: its verdict, one judgement per judge call, and error rows."""

    verdict: Verdict
    judgements: list[Judgement] = field(default_factory=list)
    errors: list[ErrorRecord] = field(default_factory=list)


def _map(winner: Literal["A", "B", "tie"], cand_a: bool) -> Outcome:
    if winner == "tie":
        return "tie"
    return "candidate" if (winner == "A") == cand_a else "baseline"


def _equivalence_answer(result: EquivalenceResult) -> str:
    return {True: "equivalent", False: "different", None: "unsure"}[result.equivalent]


@dataclass
class _Judging:
    """One pair on its way through stages 2 and 3: the calls made, what they cost, the notes they left."""

    point: ReplayPoint
    shown: PairView
    cand_a: bool
    spend: Spend = field(default_factory=Spend)
    judgements: list[Judgement] = field(default_factory=list)
    errors: list[ErrorRecord] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)

    def view(self, cand_a: bool) -> PairView:
        return self.shown if cand_a == self.cand_a else self.shown.swapped()

    def _add(self, stage: Literal["equivalence", "judge"], judge: str, cand_a: bool, **fields: Any) -> None:
        p = self.point
        row = Judgement(
            pair_id=p.pair_id,
            conversation_id=p.conversation_id,
            turn_index=p.turn_index,
            stage=stage,
            judge=judge,
            candidate_position="A" if cand_a else "B",
            **fields,
        )
        # What judging the pair cost is the sum of its calls, counted here and only here.
        self.spend.add(row.usage, cost_usd=row.cost_usd, latency_ms=row.latency_ms)
        self.judgements.append(row)

    def record(
        self,
        stage: Literal["equivalence", "judge"],
        judge: str,
        cand_a: bool,
        result: EquivalenceResult | PairwiseResult,
        **fields: Any,
    ) -> None:
        said = result.model_dump(include={"confidence", "reasoning", "raw", "usage", "cost_usd", "latency_ms"})
        self._add(stage, judge, cand_a, **said, **fields)

    def failed(
        self, stage: Literal["equivalence", "judge"], judge: str, cand_a: bool, exc: Exception, message: str
    ) -> None:
        # A failed call is still a call: its row says so, and its unknown cost makes the pair's cost unknown.
        self._add(stage, judge, cand_a, answer="error", cost_usd=None, error=f"{type(exc).__name__}: {exc}")
        p = self.point
        self.errors.append(
            ErrorRecord.from_exception(
                exc, "judge", message=message, record=p.pair_id, conversation_id=p.conversation_id, pair_id=p.pair_id
            )
        )

    def verdict_fields(self) -> dict[str, Any]:
        return {
            "judge_usage": self.spend.usage,
            "judge_cost_usd": self.spend.cost_usd,
            "judge_latency_ms": self.spend.latency_ms,
            "details": self.details,
        }


@dataclass
class JudgeCascade:
    """Runs the three stages on a pair.

    Example::

        cascade = JudgeCascade(RuleEquivalenceJudge(), RulePairwiseJudge(), seed=7)
        decision = await cascade.decide(point, baseline_replay, candidate_replay)
    """

    equivalence: SupportsEquivalence | None
    judge: SupportsComparison
    min_confidence: float = 0.8
    order: Literal["random", "both"] = "random"
    seed: int = 0
    match: MatchOptions = DEFAULT_MATCH

    async def decide(
        self,
        point: ReplayPoint,
        baseline: Replay,
        candidate: Replay,
        *,
        baseline_request: ModelRequest | None = None,
        candidate_request: ModelRequest | None = None,
        stratum: str = "",
        weight: float = 1.0,
    ) -> Decision:
        """The decision on one pair. ``*_request`` is the request each side was sent (judges see it)."""
        base: dict[str, Any] = {
            "pair_id": point.pair_id,
            "conversation_id": point.conversation_id,
            "turn_index": point.turn_index,
            "stratum": stratum,
            "weight": weight,
        }
        failed = [r for r in (baseline, candidate) if r.error is not None]
        if failed:
            reason = "; ".join(f"{r.side} replay failed: {r.error}" for r in failed)
            return Decision(Verdict(**base, stage="error", outcome="error", error=reason))

        det = deterministic_equivalence(baseline.output, candidate.output, self.match)
        if det.equivalent:
            said = {"confidence": 1.0, "reasoning": det.reason, "judge": "deterministic"}
            return Decision(Verdict(**base, stage="deterministic", outcome="equivalent", **said))

        sides = (_side(baseline, baseline_request), _side(candidate, candidate_request))
        cand_a = candidate_is_a(self.seed, point.pair_id)
        a, b = (sides[1], sides[0]) if cand_a else sides
        run = _Judging(point, PairView(point=point, a=a, b=b), cand_a, details={"stage1": det.reason})

        if self.equivalence is not None:
            resolved = await self._stage2(run, self.equivalence)
            if resolved is not None:
                verdict = Verdict(**base, **run.verdict_fields(), stage="equivalence", outcome="equivalent", **resolved)
                return Decision(verdict, run.judgements, run.errors)

        orders = [cand_a, not cand_a] if self.order == "both" else [cand_a]
        results: list[tuple[bool, PairwiseResult]] = []
        for order in orders:
            try:
                results.append((order, await self.judge.compare(run.view(order))))
            except Exception as exc:  # a judge is pluggable code: any failure is this pair's error, not the run's
                run.failed("judge", self.judge.name, order, exc, f"judge failed: {type(exc).__name__}: {exc}")
                said = {"error": f"judge failed: {type(exc).__name__}: {exc}", "judge": self.judge.name}
                return Decision(
                    Verdict(**base, **run.verdict_fields(), stage="error", outcome="error", **said),
                    run.judgements,
                    run.errors,
                )
            order_, result = results[-1]
            run.record(
                "judge", self.judge.name, order_, result, answer=result.winner, outcome=_map(result.winner, order_)
            )
        verdict = Verdict(
            **base, **run.verdict_fields(), stage="judge", judge=self.judge.name, **_combine(run, results)
        )
        return Decision(verdict, run.judgements, run.errors)

    async def _stage2(self, run: _Judging, judge: SupportsEquivalence) -> dict[str, Any] | None:
        """Ask the equivalence judge; the verdict fields when it confidently says equivalent, else ``None``."""
        try:
            eq = await judge.equivalent(run.shown)
        except Exception as exc:  # recorded; the pair goes on to stage 3
            run.failed(
                "equivalence", judge.name, run.cand_a, exc, f"equivalence judge failed, pair sent to the judge: {exc}"
            )
            return None
        resolved = bool(eq.equivalent) and eq.confidence >= self.min_confidence
        answer = _equivalence_answer(eq)
        run.record("equivalence", judge.name, run.cand_a, eq, answer=answer, outcome="equivalent" if resolved else None)
        run.details["stage2"] = {"answer": answer, "confidence": eq.confidence, "judge": judge.name}
        if not resolved:
            return None
        return {"confidence": eq.confidence, "reasoning": eq.reasoning, "judge": judge.name}


def _side(replay: Replay, request: ModelRequest | None) -> SideView:
    return SideView(
        output=replay.output, request=request, finish_reason=replay.finish_reason, hit_tool_cap=replay.hit_tool_cap
    )


def _combine(run: _Judging, results: list[tuple[bool, PairwiseResult]]) -> dict[str, Any]:
    """The verdict fields from one judgement, or from two in opposite orders (a disagreement is a tie)."""
    (first_a, first), *rest = results
    outcome = _map(first.winner, first_a)
    fields: dict[str, Any] = {
        "outcome": outcome,
        "confidence": first.confidence,
        "reasoning": first.reasoning,
        "candidate_position": "A" if first_a else "B",
    }
    if rest:
        second_a, second = rest[0]
        swapped = _map(second.winner, second_a)
        run.details["order_outcomes"] = [outcome, swapped]
        fields.update(candidate_position="both", confidence=min(first.confidence, second.confidence))
        if swapped != outcome:
            run.details["position_inconsistent"] = True
            fields["outcome"] = "tie"
            fields["reasoning"] = (
                f"the two orders disagree ({outcome} vs {swapped}): tie. "
                f"First: {first.reasoning} Second: {second.reasoning}"
            )
    return fields
