"""A turn that neither calls a tool nor writes any text is its own outcome, "no decision": flagged on the replay,
stored, counted per side, gated against the baseline, and derived for runs written before the flag existed."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest

import delta_eval as de
from delta_eval.adapters.registry import AdapterContext, register_adapter
from delta_eval.analysis.report import render_report
from delta_eval.demo import demo_config, demo_conversations
from delta_eval.metrics import DecisionRule, Gate, decide, evaluate_gates, side_metrics
from delta_eval.metrics.sides import no_decision_of
from delta_eval.replay.checks import check_output
from delta_eval.schema import Message, ReasoningState, Step, ToolCall, TurnOutput
from delta_eval.store.folder import RunFolder
from delta_eval.testing import ScriptedAdapter, registered_adapters
from tests.replay.test_engine import first_point, replayer

ACTED = TurnOutput(steps=(Step(tool_calls=(ToolCall(id="1", name="f", arguments="{}"),)),))


def test_neither_a_call_nor_text_is_no_decision_not_text_instead_of_action() -> None:
    for silent in (TurnOutput(), TurnOutput(final_text="  \n"), TurnOutput(final_text=None, final_reasoning="hmm")):
        checks = check_output(silent, (), ACTED)
        assert (checks.no_decision, checks.text_instead_of_action, checks.matches_recorded) == (True, False, False)
    talked = check_output(TurnOutput(final_text="Shall I?"), (), ACTED)
    assert (talked.no_decision, talked.text_instead_of_action) == (False, True)
    assert check_output(ACTED, (), ACTED).no_decision is False


@pytest.mark.parametrize(
    "reply",
    [
        Message(role="assistant", content=""),
        Message(role="assistant", content=None, reasoning=ReasoningState(provider="openai", summary="thinking")),
    ],
    ids=["empty", "only-reasoning"],
)
def test_a_replayed_turn_that_says_nothing_is_flagged_and_stored(reply: Message, tmp_path: Path) -> None:
    r, _ = replayer([reply])
    side = anyio.run(r.replay, first_point(), "candidate")
    assert side.error is None
    assert side.replay.no_decision is True
    assert side.replay.text_instead_of_action is False
    folder = RunFolder(tmp_path)
    folder.add("replays", [side.replay])
    folder.commit()
    [row] = folder.read("replays").to_pylist()
    assert row["no_decision"] is True
    spoke, _ = replayer(["It is HAT001."])
    assert anyio.run(spoke.replay, first_point(), "candidate").replay.no_decision is False


def replay(side: str, conv: str, pair: str, **fields: object) -> dict[str, object]:
    row: dict[str, object] = {"side": side, "conversation_id": conv, "pair_id": pair, "error": None,
                              "latency_ms": 1000.0, "cost_usd": 0.01, "n_tool_calls": 1, "invalid_tool_calls": 0,
                              "matches_recorded": True, "text_instead_of_action": False, "no_decision": False,
                              "final_text": None}  # fmt: skip
    row.update(fields)
    return row


def rows(silent_every: int, *, stored: bool = True) -> list[dict[str, object]]:
    out = []
    for c in range(40):
        for t in range(4):
            pair = f"c{c}#{t}"
            out.append(replay("recorded", f"c{c}", pair))
            out.append(replay("baseline", f"c{c}", pair))
            silent = (4 * c + t) % silent_every == 0
            fields: dict[str, object] = {"n_tool_calls": 0 if silent else 1, "final_text": "" if silent else None}
            fields["no_decision"] = silent if stored else None  # None: a run written before the column existed
            out.append(replay("candidate", f"c{c}", pair, **fields))
    return out


def verdicts() -> list[dict[str, object]]:
    return [{"outcome": "candidate", "conversation_id": f"c{c}", "pair_id": f"c{c}#{t}", "stratum": "s"}
            for c in range(40) for t in range(4)]  # fmt: skip


@pytest.mark.parametrize("stored", [True, False], ids=["flag", "derived"])
def test_no_decision_is_counted_per_side_and_gated_against_the_baseline(stored: bool) -> None:
    replays = rows(silent_every=8, stored=stored)
    sides = side_metrics(replays)
    assert sides["candidate"].no_decision_rate.value == pytest.approx(1 / 8)
    assert sides["baseline"].no_decision_rate.value == 0.0
    assert "no decision 12.5%" in sides["candidate"].summary()
    [gate] = evaluate_gates([Gate(metric="no_decision_rate", max=0.02)], verdicts(), sides, replays=replays)
    assert (gate.value, gate.candidate, gate.baseline) == (pytest.approx(1 / 8), pytest.approx(1 / 8), 0.0)
    assert gate.passed is False
    d = decide(verdicts(), replays, DecisionRule(gates=(Gate(metric="no_decision_rate", max=0.02),)))
    assert (d.outcome, d.decided_by) == ("REJECTED", "gate no_decision_rate: candidate - baseline <= 0.02")
    assert any("no decision 12.5%" in line for line in d.lines())


def test_a_gate_passes_when_both_sides_go_silent_alike() -> None:
    replays = rows(silent_every=8)
    for r in replays:
        if r["side"] == "baseline":
            twin = next(x for x in replays if x["side"] == "candidate" and x["pair_id"] == r["pair_id"])
            r.update(no_decision=twin["no_decision"], n_tool_calls=twin["n_tool_calls"])
    [gate] = evaluate_gates([Gate(metric="no_decision_rate", max=0.0)], verdicts(), side_metrics(replays),
                            replays=replays)  # fmt: skip
    assert gate.value == 0.0
    assert gate.passed is True


def test_rows_without_the_flag_or_the_output_are_unknown_not_silent() -> None:
    assert no_decision_of({"error": None, "n_tool_calls": 0}) is None
    assert no_decision_of({"error": None, "no_decision": None, "n_tool_calls": 0, "final_text": None}) is True
    assert no_decision_of({"error": None, "n_tool_calls": 2, "final_text": None}) is False
    sides = side_metrics([{"side": "candidate", "pair_id": "p", "conversation_id": "c", "error": None,
                           "latency_ms": 1.0, "n_tool_calls": 0}])  # fmt: skip
    assert sides["candidate"].no_decision_rate.value is None


def test_the_gate_is_known_to_rules() -> None:
    assert "no_decision_rate" in de.metrics.gates.METRICS
    assert Gate(metric="no_decision_rate", max=0.0).label == "no_decision_rate: candidate - baseline <= 0"


def test_a_run_whose_candidate_goes_silent_says_so_in_its_rows_decision_and_report(tmp_path: Path) -> None:
    cfg = demo_config(tmp_path / "run", n=12, latency_ms=0.0, judges="rule")
    silent = de.Variant(model="silent:m", name="candidate")

    def factory(model: str, options: Mapping[str, Any], context: AdapterContext) -> ScriptedAdapter:
        return ScriptedAdapter(model, lambda request: Message(role="assistant", content=""))

    with registered_adapters():
        register_adapter("silent", factory)
        result = de.run(cfg.model_copy(update={"candidate": silent}), conversations=demo_conversations())
    con = result.connect()
    by_side = dict(con.sql("SELECT side, bool_and(no_decision) FROM replays WHERE side <> 'recorded' GROUP BY side")
                   .fetchall())  # fmt: skip
    assert by_side == {"baseline": False, "candidate": True}
    rule = DecisionRule(gates=(Gate(metric="no_decision_rate", max=0.0),))
    [gate] = result.decision(rule).gates
    assert gate.candidate == 1.0
    assert gate.passed is False
    report = render_report(result)
    assert "no decision" in report
