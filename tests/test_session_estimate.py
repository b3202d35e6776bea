"""The cost estimate of a session run: agent turns from the recording, the simulators' calls, judges on whole
transcripts; kept in the run's manifest and set beside what the run cost."""

from __future__ import annotations

from pathlib import Path

import pytest

import delta_eval as de
from delta_eval.analysis.report import render_report
from delta_eval.replay.points import recorded_calls
from delta_eval.replay.session import recorded_turn_points, session_point
from delta_eval.schema import Conversation
from tests.test_session_runs import READS, airline

PRICE = {"input": 1.0, "output": 4.0}
MODELS = ("simulated:baseline", "simulated:candidate", "simulated:user", "simulated:tools")


def config(out: Path, **session: object) -> de.RunConfig:
    given = {"user": "simulated:user", "scripted": False, "tool_model": "simulated:tools", "expected": "actions"}
    return de.RunConfig(
        baseline=de.Variant(model="simulated:baseline"),
        candidate=de.Variant(model="simulated:candidate", provider_options={"change_args_rate": 0.1}),
        mode="session",
        session=de.Session.model_validate({**given, "ignore": READS, **session}),
        prices=dict.fromkeys(MODELS, PRICE),
        max_tool_rounds=10,
        out=out,
    )


def _turns(conversations: list[Conversation], max_turns: int) -> list[list[int]]:
    """Per session, the model calls of each recorded agent turn (at most ``max_turns``)."""
    out = []
    for conv in conversations:
        point = session_point(conv)
        assert point is not None
        out.append([recorded_calls(t.recorded, 10) for t, _ in recorded_turn_points(point, max_turns)])
    return out


def test_a_session_run_is_estimated_from_its_recorded_turns_and_its_simulators_calls(tmp_path: Path) -> None:
    conversations = airline(8)
    est = de.estimate(config(tmp_path / "run"), conversations=conversations)
    assert (est.conversations, est.pairs) == (8, 8)
    turns = _turns(conversations, 20)
    for side in ("baseline", "candidate"):
        part = est.part(side)
        assert part.pairs == 8  # sessions, not turns
        assert part.calls == sum(map(sum, turns))
    user = est.part("user simulator")
    # A goal summary per conversation, and per side an answer after every agent turn (the last: the stop token).
    assert user.calls == 8 + 2 * sum(len(t) for t in turns)
    assert user.low_usd is not None
    assert user.cost_usd is not None
    assert user.high_usd is not None
    assert 0 < user.low_usd < user.cost_usd <= user.high_usd
    tool = est.part("tool simulator")
    assert tool.low_usd == 0.0
    assert tool.cost_usd is not None
    assert tool.high_usd is not None
    assert 0 < tool.cost_usd < tool.high_usd
    assert any(n.startswith("session mode: 8 sessions") for n in est.notes)
    assert any(n.startswith("user simulator:") for n in est.notes)
    assert any(n.startswith("tool simulator: 10%") for n in est.notes)

    # The cap on turns and a goal read from the record: fewer calls, and no summary.
    capped = de.estimate(config(tmp_path / "run", max_turns=2, goal="instruction"), conversations=conversations)
    short = _turns(conversations, 2)
    assert capped.part("baseline").calls == sum(map(sum, short)) < est.part("baseline").calls
    assert capped.part("user simulator").calls == 2 * sum(min(len(t), 1) for t in short)
    # Scripted: the recorded user may answer all the way, so the range starts at the goal summary alone.
    scripted = de.estimate(config(tmp_path / "run", scripted=True), conversations=conversations)
    assert scripted.part("user simulator").cost_usd == pytest.approx(user.cost_usd)
    low = scripted.part("user simulator").low_usd
    assert low is not None
    assert low < user.low_usd


def test_a_session_run_keeps_its_estimate_and_the_report_sets_it_beside_the_actual_cost(tmp_path: Path) -> None:
    conversations = airline(6)
    result = de.run(config(tmp_path / "run"), conversations=conversations, progress=False)
    assert result.counts.errors == 0
    kept = result.manifest.estimate
    assert kept is not None
    assert kept["pairs"] == 6
    assert {p["part"] for p in kept["parts"]} >= {"baseline", "candidate", "user simulator", "tool simulator"}
    assert not any(n.startswith("no cost estimate") for n in result.manifest.notes)
    text = render_report(result)
    table = text[text.index("cost estimate vs actual") :].splitlines()
    for part in ("baseline", "candidate", "user simulator", "tool simulator"):
        row = next(line for line in table if line.strip().startswith(part))
        assert "unknown" not in row  # an actual cost beside each part's estimate


def test_the_estimate_command_estimates_sessions_with_mode_session(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from delta_eval.cli import main

    path = tmp_path / "sessions.toml"
    path.write_text(
        f"""
out = "{tmp_path / "run"}"

[source]
path = "{de.demo.DEMO_CONVERSATIONS}"
messages = "traj"
id = "{{task_id}}/{{trial}}"
tools = "{de.demo.DEMO_TOOLS}"
metadata = {{ instruction = "info.task.instruction" }}

[sample]
n = 3

[baseline]
model = "simulated:base"

[candidate]
model = "simulated:cand"

[session]
user = "simulated:user"
goal = "instruction"
"""
    )
    assert main(["estimate", str(path), "--json"]) == 0
    turns = json.loads(capsys.readouterr().out)
    assert main(["estimate", str(path), "--mode", "session", "--json"]) == 0
    sessions = json.loads(capsys.readouterr().out)
    assert sessions["pairs"] == 3 < turns["pairs"]  # one pair per conversation, not per turn
    assert "user simulator" in {p["part"] for p in sessions["parts"]}
    assert "user simulator" not in {p["part"] for p in turns["parts"]}
    assert any(n.startswith("session mode:") for n in sessions["notes"])


def test_what_a_session_run_on_real_model_ids_costs_is_inside_the_estimates_range(tmp_path: Path) -> None:
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "estimate.py"
    spec = importlib.util.spec_from_file_location("estimate_bench", path)
    assert spec is not None
    assert spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    # gpt-4.1-mini and gpt-4.1 (which skips and changes calls) on the fake OpenAI server, gpt-4.1-mini as the user
    figures = bench.compare(tmp_path / "run", n=8, seed=7, mode="session")
    est, actual = figures["estimate"], figures["actual"]
    assert {p.part for p in est.parts} == {"baseline", "candidate", "user simulator"}
    for part in est.parts:
        spent = actual[part.part]
        assert spent is not None
        assert part.low_usd <= spent <= part.high_usd, (part.part, part.low_usd, spent, part.high_usd)
    assert figures["result"].manifest.estimate["total_usd"] == pytest.approx(est.total_usd, rel=1e-4)


def test_the_estimate_prices_a_session_run_s_judges_with_the_rubric_the_run_gives_them() -> None:
    from delta_eval.estimate import _JudgeCounts
    from delta_eval.judges.prompts import Rubric, pairwise_instructions
    from delta_eval.judges.session import SESSION_RUBRIC

    judges = de.Judges(equivalence=None, judge=de.PairwiseJudge(model="openai:gpt-4.1"))
    turn = _JudgeCounts(judges, None, {})
    session = _JudgeCounts(judges, None, {}, SESSION_RUBRIC)
    [t], [s] = turn.prompts, session.prompts
    said = {
        "turn": t.count.text(pairwise_instructions(Rubric.default()).text),
        "session": s.count.text(pairwise_instructions(Rubric.parse(SESSION_RUBRIC)).text),
    }
    assert said["turn"] != said["session"]
    assert s.fixed - t.fixed == said["session"] - said["turn"]  # the same framing, the session rubric's instructions
