"""Rule-based judges for stages 2 and 3, for the demo and for tests. Their verdicts follow from stated rules, their
names start with ``rule:``, and no model is called.

Stage 2 rule (:class:`RuleEquivalenceJudge`): outputs whose tool calls differ are not equivalent (confidence
0.9). Otherwise the word sets of their normalised texts are compared: a Jaccard overlap of at least ``threshold``
is "equivalent" with the overlap as confidence; below it, "not equivalent" with confidence ``1 - overlap``.

Stage 3 rule (:class:`RulePairwiseJudge`), using the recorded production turn as the reference: each output
scores the number of leading tool calls that match the recorded calls, minus one for each further call, minus two
for hitting the tool cap. The higher score wins. On equal scores, the output whose text overlaps the recorded text
more (Jaccard of word sets) wins if it leads by more than ``margin``; otherwise it is a tie. Severity of the
loser's failure, by rule: ``critical`` when it made a call the recording did not (an action production did not
take), ``minor`` when it lost by leaving calls out or on text, ``none`` for a tie; so the severity gates have
evidence on rule-judged runs too.
"""

from __future__ import annotations

from typing import Literal

from delta_eval.judges.base import EquivalenceResult, PairView, PairwiseResult
from delta_eval.matching import (
    DEFAULT_MATCH,
    MatchOptions,
    call_sequences_equivalent,
    calls_equivalent,
    word_overlap,
)
from delta_eval.schema import ReplayPoint, TurnOutput

__all__ = ["RuleEquivalenceJudge", "RulePairwiseJudge"]


class RuleEquivalenceJudge:
    """Stage 2 by rule (see the module docstring)."""

    def __init__(self, threshold: float = 0.75, match: MatchOptions = DEFAULT_MATCH) -> None:
        self.threshold = threshold
        self.match = match
        self.name = f"rule:equivalence(overlap>={threshold})"

    async def equivalent(self, pair: PairView) -> EquivalenceResult:
        """Equivalent when the calls match and the texts' word overlap reaches the threshold."""
        a, b = pair.a.output, pair.b.output
        if not call_sequences_equivalent(a.tool_calls, b.tool_calls, self.match):
            return EquivalenceResult(equivalent=False, confidence=0.9, reasoning="rule: tool calls differ")
        overlap = word_overlap(" ".join(a.texts), " ".join(b.texts))
        same = overlap >= self.threshold
        return EquivalenceResult(
            equivalent=same,
            confidence=round(overlap if same else 1.0 - overlap, 4),
            reasoning=f"rule: same tool calls, text word overlap {overlap:.2f} "
            f"({'>=' if same else '<'} {self.threshold})",
        )


class RulePairwiseJudge:
    """Stage 3 by rule, against the recorded turn (see the module docstring)."""

    def __init__(self, margin: float = 0.05, match: MatchOptions = DEFAULT_MATCH) -> None:
        self.margin = margin
        self.match = match
        self.name = "rule:judge(recorded-reference)"

    def _score(self, out: TurnOutput, point: ReplayPoint) -> tuple[int, int, str]:
        recorded = point.recorded.tool_calls
        calls = out.tool_calls
        follow = 0
        for mine, ref in zip(calls, recorded, strict=False):
            if not calls_equivalent(mine, ref, self.match):
                break
            follow += 1
        extra = len(calls) - follow
        capped = bool(out.steps) and not out.steps[-1].tool_results and bool(out.steps[-1].tool_calls)
        score = follow - extra - (2 if capped else 0)
        note = (
            f"{follow}/{len(recorded)} recorded calls followed, {extra} other calls{', hit tool cap' if capped else ''}"
        )
        return score, extra, note

    async def compare(self, pair: PairView) -> PairwiseResult:
        """The better of A and B by the stated rule."""
        point, a, b = pair.point, pair.a.output, pair.b.output
        score_a, extra_a, note_a = self._score(a, point)
        score_b, extra_b, note_b = self._score(b, point)
        reference = point.recorded.final_text or ""
        winner: Literal["A", "B", "tie"]
        if score_a != score_b:
            winner = "A" if score_a > score_b else "B"
            why = f"tool calls: A {note_a}; B {note_b}"
            confidence = min(1.0, 0.6 + 0.2 * abs(score_a - score_b))
        else:
            text_a = word_overlap(" ".join(a.texts), reference)
            text_b = word_overlap(" ".join(b.texts), reference)
            diff = text_a - text_b
            winner = "tie" if abs(diff) <= self.margin else ("A" if diff > 0 else "B")
            why = f"tool calls equal ({note_a}); text overlap with the recorded reply A {text_a:.2f}, B {text_b:.2f}"
            confidence = round(min(1.0, 0.5 + abs(diff)), 4)
        loser_extra = {"A": extra_b, "B": extra_a}.get(winner)
        severity: Literal["none", "minor", "critical"] = (
            "none" if loser_extra is None else "critical" if loser_extra > 0 else "minor"
        )
        return PairwiseResult(
            winner=winner,
            confidence=confidence,
            severity=severity,
            reasoning=f"rule: {why} -> {winner}",
            raw={"score_a": score_a, "score_b": score_b},
        )
