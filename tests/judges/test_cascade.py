from __future__ import annotations

from collections import Counter

import anyio
import pytest

import delta_eval as de
from delta_eval.calls import ModelRequest
from delta_eval.exceptions import JudgeError
from delta_eval.judges.base import EquivalenceResult, PairView, PairwiseResult, SideView
from delta_eval.judges.cascade import Decision, JudgeCascade, candidate_is_a
from delta_eval.judges.deterministic import deterministic_equivalence
from delta_eval.judges.rules import RuleEquivalenceJudge, RulePairwiseJudge
from delta_eval.replay.points import replay_points
from delta_eval.schema import Step, ToolCall, TurnOutput, Usage
from tests.conftest import tool_turn_conversation

POINT = next(iter(replay_points(tool_turn_conversation())))


def replay(side: str, output: TurnOutput, error: str | None = None) -> de.Replay:
    return de.Replay(
        pair_id=POINT.pair_id,
        conversation_id="c1",
        turn_index=0,
        side=side,
        variant=side,  # type: ignore[arg-type]
        model="scripted:m",
        output=output,
        finish_reason="error" if error else "stop",
        error=error,
    )


def text(t: str) -> TurnOutput:
    return TurnOutput(final_text=t)


class FixedEquivalence:
    name = "fixed-eq"

    def __init__(self, result: EquivalenceResult | Exception) -> None:
        self.result = result

    async def equivalent(self, pair: PairView) -> EquivalenceResult:
        if isinstance(self.result, Exception):
            raise self.result
        return self.result


class PrefersText:
    """Picks whichever side says `best`; records what it saw."""

    name = "prefers-best"

    def __init__(self, usage: Usage | None = None, cost_usd: float | None = None) -> None:
        self.seen: list[PairView] = []
        self.usage = usage or Usage()
        self.cost_usd = cost_usd

    async def compare(self, pair: PairView) -> PairwiseResult:
        self.seen.append(pair)
        a, b = pair.a.output.final_text, pair.b.output.final_text
        winner = "A" if a == "best" else "B" if b == "best" else "tie"
        return PairwiseResult(
            winner=winner,  # type: ignore[arg-type]
            confidence=0.9,
            reasoning=f"{winner} says best",
            usage=self.usage,
            cost_usd=self.cost_usd,
            raw={"winner": winner},
        )


def decide(cascade: JudgeCascade, base: de.Replay, cand: de.Replay, **requests: ModelRequest) -> Decision:
    return anyio.run(lambda: cascade.decide(POINT, base, cand, stratum="s", weight=2.0, **requests))


def pair_of(a: TurnOutput, b: TurnOutput) -> PairView:
    return PairView(point=POINT, a=SideView(output=a), b=SideView(output=b))


def test_stage1_decides_deterministic_equivalents() -> None:
    judge = PrefersText()
    decision = decide(JudgeCascade(None, judge), replay("baseline", text("Done!")), replay("candidate", text("done")))
    verdict = decision.verdict
    assert (verdict.stage, verdict.outcome, verdict.judge, verdict.weight) == (
        "deterministic",
        "equivalent",
        "deterministic",
        2.0,
    )
    assert judge.seen == []
    assert (decision.judgements, decision.errors) == ([], [])


def test_stage2_counts_only_confident_equivalents() -> None:
    base, cand = replay("baseline", text("hello there")), replay("candidate", text("hi there"))
    confident = JudgeCascade(FixedEquivalence(EquivalenceResult(equivalent=True, confidence=0.95)), PrefersText())
    decision = decide(confident, base, cand)
    assert decision.verdict.stage == "equivalence"
    [row] = decision.judgements
    assert (row.stage, row.judge, row.answer, row.outcome, row.confidence) == (
        "equivalence",
        "fixed-eq",
        "equivalent",
        "equivalent",
        0.95,
    )
    unsure = JudgeCascade(FixedEquivalence(EquivalenceResult(equivalent=True, confidence=0.5)), PrefersText())
    decision = decide(unsure, base, cand)
    assert decision.verdict.stage == "judge"
    assert decision.verdict.details["stage2"]["confidence"] == 0.5
    # one row per call: the unsure stage-2 answer (which resolved nothing) and the judge's
    assert [(j.stage, j.outcome) for j in decision.judgements] == [("equivalence", None), ("judge", "tie")]


def test_stage2_failure_is_recorded_and_the_pair_goes_on() -> None:
    cascade = JudgeCascade(FixedEquivalence(JudgeError("malformed JSON")), PrefersText(cost_usd=0.01))
    decision = decide(cascade, replay("baseline", text("a")), replay("candidate", text("best")))
    assert (decision.verdict.stage, decision.verdict.outcome) == ("judge", "candidate")
    [error] = decision.errors
    assert error.stage == "judge"
    assert "malformed JSON" in error.message
    assert [(j.stage, j.answer) for j in decision.judgements] == [
        ("equivalence", "error"),
        ("judge", "A" if decision.verdict.candidate_position == "A" else "B"),
    ]
    assert decision.judgements[0].error == "JudgeError: malformed JSON"
    # the failed call's cost is unknown, so the pair's judging cost is unknown, not the judge's 0.01 alone
    assert decision.verdict.judge_cost_usd is None


def test_judge_usage_and_cost_sum_over_calls() -> None:
    judge = PrefersText(usage=Usage(input_tokens=100, output_tokens=10), cost_usd=0.002)
    decision = decide(
        JudgeCascade(None, judge, order="both"), replay("baseline", text("x")), replay("candidate", text("best"))
    )
    assert decision.verdict.judge_usage == Usage(input_tokens=200, output_tokens=20)
    assert decision.verdict.judge_cost_usd == pytest.approx(0.004)
    assert [j.usage.input_tokens for j in decision.judgements] == [100, 100]
    assert [j.raw for j in decision.judgements] == [{"winner": j.answer} for j in decision.judgements]


def test_judges_see_each_side_with_the_request_it_was_sent() -> None:
    judge = PrefersText()
    requests = {
        side: ModelRequest(model="scripted:m", messages=(de.Message(role="system", content=f"{side} prompt"),))
        for side in ("baseline", "candidate")
    }
    decision = decide(
        JudgeCascade(None, judge),
        replay("baseline", text("meh")),
        replay("candidate", text("best")),
        baseline_request=requests["baseline"],
        candidate_request=requests["candidate"],
    )
    shown = judge.seen[0]
    candidate, baseline = (shown.a, shown.b) if decision.verdict.candidate_position == "A" else (shown.b, shown.a)
    assert (candidate.output.final_text, candidate.request) == ("best", requests["candidate"])
    assert (baseline.output.final_text, baseline.request) == ("meh", requests["baseline"])
    assert shown.point == POINT
    assert not {"side", "variant", "model"} & set(SideView.model_fields)


def test_positions_are_seeded_and_mapped_back() -> None:
    coins = Counter(candidate_is_a(7, f"p{i}") for i in range(400))
    assert 150 < coins[True] < 250
    assert candidate_is_a(7, "p1") == candidate_is_a(7, "p1")
    positions = set()
    for seed in range(6):
        judge = PrefersText()
        decision = decide(
            JudgeCascade(None, judge, seed=seed), replay("baseline", text("meh")), replay("candidate", text("best"))
        )
        verdict = decision.verdict
        assert verdict.outcome == "candidate"
        assert verdict.candidate_position == ("A" if candidate_is_a(seed, POINT.pair_id) else "B")
        shown = judge.seen[0]
        assert (shown.a if verdict.candidate_position == "A" else shown.b).output.final_text == "best"
        assert decision.judgements[0].candidate_position == verdict.candidate_position
        positions.add(verdict.candidate_position)
    assert positions == {"A", "B"}


def test_both_orders_disagreeing_is_a_tie_and_both_answers_are_kept() -> None:
    class AlwaysA:
        name = "position-biased"

        async def compare(self, pair: PairView) -> PairwiseResult:
            return PairwiseResult(winner="A", confidence=0.8)

    decision = decide(
        JudgeCascade(None, AlwaysA(), order="both"), replay("baseline", text("x")), replay("candidate", text("y"))
    )
    verdict = decision.verdict
    assert (verdict.outcome, verdict.candidate_position) == ("tie", "both")
    assert verdict.details["position_inconsistent"] is True
    assert [(j.candidate_position, j.answer) for j in decision.judgements] in (
        [("A", "A"), ("B", "A")],
        [("B", "A"), ("A", "A")],
    )
    assert sorted(j.outcome or "" for j in decision.judgements) == ["baseline", "candidate"]
    consistent = decide(
        JudgeCascade(None, PrefersText(), order="both"),
        replay("baseline", text("x")),
        replay("candidate", text("best")),
    )
    assert consistent.verdict.outcome == "candidate"
    assert [j.outcome for j in consistent.judgements] == ["candidate", "candidate"]


def test_a_pair_answered_in_one_order_only_says_so() -> None:
    # order="both", but the judge fails whenever the candidate is shown as B: the verdict rests on one order.
    class FailsWithCandidateAsB:
        name = "half-broken"

        async def compare(self, pair: PairView) -> PairwiseResult:
            if pair.b.output.final_text == "best":
                raise JudgeError("answer is not JSON")
            return PairwiseResult(winner="A", confidence=0.8, severity="minor")

    decision = decide(
        JudgeCascade(None, FailsWithCandidateAsB(), order="both"),
        replay("baseline", text("x")),
        replay("candidate", text("best")),
    )
    v = decision.verdict
    assert (v.outcome, v.candidate_position, v.orders_agree) == ("candidate", "A", None)
    assert v.details["one_order"] is True
    assert sorted(j.answer for j in decision.judgements) == ["A", "error"]
    assert len(decision.errors) == 1


def test_failed_replay_and_failed_judge_are_error_verdicts() -> None:
    decision = decide(
        JudgeCascade(None, PrefersText()),
        replay("baseline", text("x"), error="429 after 6 attempts"),
        replay("candidate", text("y")),
    )
    assert (decision.verdict.stage, decision.verdict.outcome) == ("error", "error")
    assert "baseline replay failed: 429 after 6 attempts" in (decision.verdict.error or "")
    assert decision.verdict.error_side == "baseline"  # the win rate counts it as the baseline's loss
    both = decide(JudgeCascade(None, PrefersText()), replay("baseline", text("x"), error="e"),
                  replay("candidate", text("y"), error="e"))  # fmt: skip
    assert both.verdict.error_side == "both"

    class Broken:
        name = "broken"

        def __init__(self, exc: Exception) -> None:
            self.exc = exc

        async def compare(self, pair: PairView) -> PairwiseResult:
            raise self.exc

    for exc in (JudgeError("answer is not JSON"), KeyError("a bug in a user's judge")):
        decision = decide(
            JudgeCascade(None, Broken(exc)), replay("baseline", text("x")), replay("candidate", text("y"))
        )
        assert (decision.verdict.outcome, decision.verdict.error_side) == ("error", "judge")
        assert str(exc) in (decision.verdict.error or "")
        [error] = decision.errors
        assert (error.pair_id, error.error_type) == (POINT.pair_id, type(exc).__name__)
        [row] = decision.judgements
        assert (row.answer, row.cost_usd) == ("error", None)


def test_deterministic_reasons_say_what_differs() -> None:
    a = TurnOutput(steps=(Step(tool_calls=(ToolCall(id="1", name="f", arguments='{"x": 1}'),)),), final_text="ok")
    b = TurnOutput(steps=(Step(tool_calls=(ToolCall(id="2", name="f", arguments='{"x": 2}'),)),), final_text="ok")
    c = TurnOutput(steps=(Step(tool_calls=(ToolCall(id="3", name="g"),)),), final_text="ok")
    assert deterministic_equivalence(a, b).reason == "tool call 1 (f) has different arguments"
    assert deterministic_equivalence(a, c).reason == "tool call 1 differs: f vs g"
    assert deterministic_equivalence(a, text("ok")).reason == "1 vs 0 tool calls"


@pytest.mark.parametrize(
    ("a", "b", "equivalent"),
    [
        ("Your flight is booked.", "your flight is booked", True),
        ("Your flight is booked.", "I could not book it.", False),
    ],
)
def test_rule_equivalence(a: str, b: str, equivalent: bool) -> None:
    result = anyio.run(RuleEquivalenceJudge().equivalent, pair_of(text(a), text(b)))
    assert result.equivalent is equivalent
    assert result.reasoning.startswith("rule:")


def test_rule_judge_prefers_following_the_recording() -> None:
    recorded = POINT.recorded
    wrong = TurnOutput(
        steps=(Step(tool_calls=(ToolCall(id="z", name="get_reservation", arguments='{"id": "X"}'),)),),
        final_text="Done",
    )
    judge = RulePairwiseJudge()
    assert judge.name.startswith("rule:")
    result = anyio.run(judge.compare, pair_of(wrong, recorded))
    assert result.winner == "B"
    assert "1/1 recorded calls followed" in result.reasoning
    assert result.severity == "critical"  # A made a call production did not make
    silent = anyio.run(judge.compare, pair_of(TurnOutput(final_text="Could you confirm?"), recorded))
    assert (silent.winner, silent.severity) == ("B", "minor")  # A only left the call out
    assert anyio.run(judge.compare, pair_of(recorded, recorded)).severity == "none"


def test_both_orders_averaged_keep_the_severity_of_the_answer_that_blamed_the_loser() -> None:
    # disagreement="mean": one order says the baseline lost (minor, surely), the other that the candidate lost
    # (critical, barely). The mean blames the baseline; the candidate's "critical" must not be pinned on it.
    class Mixed:
        name = "mixed"

        async def compare(self, pair: PairView) -> PairwiseResult:
            if pair.a.output.final_text == "best":
                return PairwiseResult(winner="A", confidence=0.9, severity="minor")
            return PairwiseResult(winner="A", confidence=0.2, severity="critical")

    decision = decide(
        JudgeCascade(None, Mixed(), order="both", disagreement="mean"),
        replay("baseline", text("x")),
        replay("candidate", text("best")),
    )
    assert (decision.verdict.outcome, decision.verdict.severity) == ("candidate", "minor")
