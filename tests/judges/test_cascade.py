from __future__ import annotations

from collections import Counter

import anyio
import pytest

import delta_eval as de
from delta_eval.exceptions import JudgeError
from delta_eval.judges.base import EquivalenceResult, PairwiseResult
from delta_eval.judges.cascade import JudgeCascade, candidate_is_a
from delta_eval.judges.deterministic import deterministic_equivalence
from delta_eval.judges.simulated import SimulatedEquivalenceJudge, SimulatedPairwiseJudge
from delta_eval.replay.points import replay_points
from delta_eval.schema import Step, ToolCall, TurnOutput
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

    async def equivalent(self, point: de.ReplayPoint, a: TurnOutput, b: TurnOutput) -> EquivalenceResult:
        if isinstance(self.result, Exception):
            raise self.result
        return self.result


class PrefersText:
    """Picks whichever side says `best`; records what it saw."""

    name = "prefers-best"

    def __init__(self) -> None:
        self.seen: list[tuple[str | None, str | None]] = []

    async def compare(self, point: de.ReplayPoint, a: TurnOutput, b: TurnOutput) -> PairwiseResult:
        self.seen.append((a.final_text, b.final_text))
        winner = "A" if a.final_text == "best" else "B" if b.final_text == "best" else "tie"
        return PairwiseResult(winner=winner, confidence=0.9, reasoning=f"{winner} says best")  # type: ignore[arg-type]


def decide(cascade: JudgeCascade, base: de.Replay, cand: de.Replay) -> tuple[de.Verdict, list[de.ErrorRecord]]:
    return anyio.run(lambda: cascade.decide(POINT, base, cand, stratum="s", weight=2.0))


def test_stage1_decides_deterministic_equivalents() -> None:
    judge = PrefersText()
    verdict, errors = decide(
        JudgeCascade(None, judge), replay("baseline", text("Done!")), replay("candidate", text("done"))
    )
    assert (verdict.stage, verdict.outcome, verdict.judge, verdict.weight) == (
        "deterministic",
        "equivalent",
        "deterministic",
        2.0,
    )
    assert judge.seen == []
    assert errors == []


def test_stage2_counts_only_confident_equivalents() -> None:
    base, cand = replay("baseline", text("hello there")), replay("candidate", text("hi there"))
    confident = JudgeCascade(FixedEquivalence(EquivalenceResult(equivalent=True, confidence=0.95)), PrefersText())
    assert decide(confident, base, cand)[0].stage == "equivalence"
    unsure = JudgeCascade(FixedEquivalence(EquivalenceResult(equivalent=True, confidence=0.5)), PrefersText())
    verdict, _ = decide(unsure, base, cand)
    assert verdict.stage == "judge"
    assert verdict.details["stage2"]["confidence"] == 0.5


def test_stage2_failure_is_recorded_and_the_pair_goes_on() -> None:
    cascade = JudgeCascade(FixedEquivalence(JudgeError("malformed JSON")), PrefersText())
    verdict, errors = decide(cascade, replay("baseline", text("a")), replay("candidate", text("best")))
    assert verdict.stage == "judge"
    assert verdict.outcome == "candidate"
    assert len(errors) == 1
    assert errors[0].stage == "judge"
    assert "malformed JSON" in errors[0].message


def test_positions_are_seeded_and_mapped_back() -> None:
    coins = Counter(candidate_is_a(7, f"p{i}") for i in range(400))
    assert 150 < coins[True] < 250
    assert candidate_is_a(7, "p1") == candidate_is_a(7, "p1")
    for seed in range(6):
        judge = PrefersText()
        verdict, _ = decide(
            JudgeCascade(None, judge, seed=seed), replay("baseline", text("meh")), replay("candidate", text("best"))
        )
        assert verdict.outcome == "candidate"
        assert verdict.candidate_position == ("A" if candidate_is_a(seed, POINT.pair_id) else "B")
        assert judge.seen[0][0 if verdict.candidate_position == "A" else 1] == "best"


def test_both_orders_disagreeing_is_a_tie() -> None:
    class AlwaysA:
        name = "position-biased"

        async def compare(self, point: de.ReplayPoint, a: TurnOutput, b: TurnOutput) -> PairwiseResult:
            return PairwiseResult(winner="A", confidence=0.8)

    verdict, _ = decide(
        JudgeCascade(None, AlwaysA(), order="both"), replay("baseline", text("x")), replay("candidate", text("y"))
    )
    assert (verdict.outcome, verdict.candidate_position) == ("tie", "both")
    assert verdict.details["position_inconsistent"] is True
    consistent, _ = decide(
        JudgeCascade(None, PrefersText(), order="both"),
        replay("baseline", text("x")),
        replay("candidate", text("best")),
    )
    assert consistent.outcome == "candidate"


def test_failed_replay_and_failed_judge_are_error_verdicts() -> None:
    verdict, _ = decide(
        JudgeCascade(None, PrefersText()),
        replay("baseline", text("x"), error="429 after 6 attempts"),
        replay("candidate", text("y")),
    )
    assert (verdict.stage, verdict.outcome) == ("error", "error")
    assert "baseline replay failed: 429 after 6 attempts" in (verdict.error or "")

    class Broken:
        name = "broken"

        async def compare(self, point: de.ReplayPoint, a: TurnOutput, b: TurnOutput) -> PairwiseResult:
            raise JudgeError("answer is not JSON")

    verdict, errors = decide(
        JudgeCascade(None, Broken()), replay("baseline", text("x")), replay("candidate", text("y"))
    )
    assert verdict.outcome == "error"
    assert "answer is not JSON" in (verdict.error or "")
    assert errors[0].pair_id == POINT.pair_id


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
def test_simulated_equivalence_rule(a: str, b: str, equivalent: bool) -> None:
    result = anyio.run(SimulatedEquivalenceJudge().equivalent, POINT, text(a), text(b))
    assert result.equivalent is equivalent
    assert result.reasoning.startswith("simulated rule")


def test_simulated_judge_prefers_following_the_recording() -> None:
    recorded = POINT.recorded
    wrong = TurnOutput(
        steps=(Step(tool_calls=(ToolCall(id="z", name="get_reservation", arguments='{"id": "X"}'),)),),
        final_text="Done",
    )
    result = anyio.run(SimulatedPairwiseJudge().compare, POINT, wrong, recorded)
    assert result.winner == "B"
    assert "1/1 recorded calls followed" in result.reasoning
