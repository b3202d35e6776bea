"""The judging funnel: stage 1 (deterministic), stage 2 (cheap equivalence judge), stage 3 (pairwise judge).

Each pair leaves with exactly one :class:`~delta_eval.schema.Verdict` saying which stage decided it. A pair whose
replays failed gets an ``error`` verdict; a stage-2 failure is recorded and the pair goes on to stage 3; a stage-3
failure (provider error or unusable answer) gives an ``error`` verdict with the reason. Nothing is dropped.

Position bias: the judge sees the outputs as A and B. With ``order="random"`` the candidate is A or B by a coin
seeded by (seed, pair id), so the same run always shows the same order and half the pairs go each way; with
``order="both"`` the pair is judged in both orders and a disagreement becomes a tie (recorded in ``details``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Literal

from delta_eval.exceptions import JudgeError, ProviderError
from delta_eval.judges.base import EquivalenceJudge, EquivalenceResult, PairwiseJudge, PairwiseResult
from delta_eval.judges.deterministic import deterministic_equivalence
from delta_eval.matching import DEFAULT_MATCH, MatchOptions
from delta_eval.schema import ErrorRecord, Outcome, Replay, ReplayPoint, Usage, Verdict

__all__ = ["JudgeCascade", "candidate_is_a"]


def candidate_is_a(seed: int, pair_id: str) -> bool:
    """The seeded coin: whether the candidate is shown as A for this pair."""
    return hashlib.sha256(f"{seed}:{pair_id}".encode()).digest()[0] & 1 == 1


@dataclass
class _Spent:
    """What judging a pair has cost so far, and the notes it left."""

    usage: Usage = field(default_factory=Usage)
    cost: float | None = None
    latency_ms: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)

    def add(self, result: EquivalenceResult | PairwiseResult) -> None:
        self.usage = self.usage + result.usage
        if result.cost_usd is not None:
            self.cost = (self.cost or 0.0) + result.cost_usd
        self.latency_ms += result.latency_ms

    def fields(self) -> dict[str, Any]:
        return {
            "judge_usage": self.usage,
            "judge_cost_usd": self.cost,
            "judge_latency_ms": self.latency_ms,
            "details": self.details,
        }


@dataclass
class JudgeCascade:
    """Runs the three stages on a pair.

    Example::

        cascade = JudgeCascade(SimulatedEquivalenceJudge(), SimulatedPairwiseJudge(), seed=7)
        verdict, errors = await cascade.decide(point, baseline_replay, candidate_replay)
    """

    equivalence: EquivalenceJudge | None
    judge: PairwiseJudge
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
        stratum: str = "",
        weight: float = 1.0,
    ) -> tuple[Verdict, list[ErrorRecord]]:
        """The verdict on one pair, and any error rows produced on the way."""
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
            return Verdict(**base, stage="error", outcome="error", error=reason), []

        det = deterministic_equivalence(baseline.output, candidate.output, self.match)
        if det.equivalent:
            return Verdict(
                **base,
                stage="deterministic",
                outcome="equivalent",
                confidence=1.0,
                reasoning=det.reason,
                judge="deterministic",
            ), []

        errors: list[ErrorRecord] = []
        spent = _Spent(details={"stage1": det.reason})
        cand_a = candidate_is_a(self.seed, point.pair_id)
        a, b = (candidate, baseline) if cand_a else (baseline, candidate)

        if self.equivalence is not None:
            try:
                eq = await self.equivalence.equivalent(point, a.output, b.output)
            except (ProviderError, JudgeError) as exc:
                errors.append(self._error(point, f"equivalence judge failed, pair sent to the judge: {exc}", exc))
            else:
                spent.add(eq)
                spent.details["stage2"] = {
                    "equivalent": eq.equivalent,
                    "confidence": eq.confidence,
                    "reasoning": eq.reasoning,
                    "judge": self.equivalence.name,
                }
                if eq.equivalent and eq.confidence >= self.min_confidence:
                    fields = {"confidence": eq.confidence, "reasoning": eq.reasoning, "judge": self.equivalence.name}
                    return Verdict(
                        **base, **spent.fields(), stage="equivalence", outcome="equivalent", **fields
                    ), errors

        try:
            first = await self.judge.compare(point, a.output, b.output)
            second = await self.judge.compare(point, b.output, a.output) if self.order == "both" else None
        except (ProviderError, JudgeError) as exc:
            errors.append(self._error(point, f"judge failed: {exc}", exc))
            said: dict[str, Any] = {"error": f"judge failed: {exc}", "judge": self.judge.name}
            return Verdict(**base, **spent.fields(), stage="error", outcome="error", **said), errors

        outcome = self._map(first, cand_a)
        confidence = first.confidence
        reasoning = first.reasoning
        results = [first] if second is None else [first, second]
        for r in results:
            spent.add(r)
        spent.details["judge_raw"] = [r.raw for r in results]
        position: Literal["A", "B", "both"] = "A" if cand_a else "B"
        if second is not None:
            position = "both"
            swapped = self._map(second, not cand_a)
            spent.details["order_outcomes"] = [outcome, swapped]
            confidence = min(first.confidence, second.confidence)
            if swapped != outcome:
                spent.details["position_inconsistent"] = True
                reasoning = (
                    f"the two orders disagree ({outcome} vs {swapped}): tie. "
                    f"First: {first.reasoning} Second: {second.reasoning}"
                )
                outcome = "tie"
        said = {"confidence": confidence, "reasoning": reasoning, "judge": self.judge.name}
        return Verdict(
            **base, **spent.fields(), stage="judge", outcome=outcome, candidate_position=position, **said
        ), errors

    @staticmethod
    def _map(result: PairwiseResult, cand_a: bool) -> Outcome:
        if result.winner == "tie":
            return "tie"
        return "candidate" if (result.winner == "A") == cand_a else "baseline"

    @staticmethod
    def _error(point: ReplayPoint, message: str, exc: Exception) -> ErrorRecord:
        return ErrorRecord.from_exception(
            exc,
            "judge",
            message=message,
            record=point.pair_id,
            conversation_id=point.conversation_id,
            pair_id=point.pair_id,
        )
