"""Sessions on the bundled tau-bench airline data: rolled forward by the simulated user, judged on the outcome."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import delta_eval as de
from delta_eval.adapters.client import ModelClient
from delta_eval.adapters.limits import ModelLimiter
from delta_eval.adapters.retry import RetryPolicy
from delta_eval.adapters.simulated import SimulatedAdapter
from delta_eval.judges.session import goal_reached
from delta_eval.replay.session import SESSION_ENDS, SessionTools, session_point, session_turns
from delta_eval.replay.tools import ToolContext
from delta_eval.schema import Conversation, Replay, ToolCall
from delta_eval.store.folder import RunFolder
from delta_eval.store.tables import TABLES

READS = ["get_*", "search_*", "list_*", "calculate", "think"]
#: The airline's write actions: the candidate of these tests never makes them.
WRITES = ["book_reservation", "cancel_reservation", "update_reservation_flights", "update_reservation_baggages",
          "update_reservation_passengers", "send_certificate"]  # fmt: skip


@pytest.fixture(scope="module")
def airline() -> list[Conversation]:
    data = de.demo.DATA
    good, bad = de.read_conversations(
        data / "gpt-4o-airline.json",
        messages="traj",
        id="{task_id}/{trial}",
        metadata={"reward": "reward", "actions": "info.task.actions", "instruction": "info.task.instruction"},
        tools=data / "airline_tools.json",
    ).load()
    assert bad == []
    return good


def _writes(conv: Conversation) -> bool:
    return any(a["name"] in WRITES for a in conv.metadata["actions"])


def _recorded_write(conv: Conversation) -> bool:
    """The task needs a write action, and the recorded agent made every write action it needed."""
    point = session_point(conv)
    return _writes(conv) and point is not None and goal_reached(point.recorded, conv.metadata["actions"], READS)[0]


def _replays(out: Path) -> list[Replay]:
    return [TABLES["replays"].parse(row) for row in RunFolder(out).read("replays").to_pylist()]


def session_config(out: Path, *, scripted: bool = False, **session: Any) -> de.RunConfig:
    return de.RunConfig(
        baseline=de.Variant(model="simulated:baseline"),
        candidate=de.Variant(model="simulated:candidate", provider_options={"skip_tools": WRITES}),
        mode="session",
        session={
            "user": "simulated:user",
            "scripted": scripted,
            "goal": "instruction",
            "stop_tools": ["transfer_to_human_agents"],
            "expected": "actions",
            "ignore": READS,
            **session,
        },
        out=out,
    )


def test_the_recorded_rest_of_a_conversation_is_its_session_transcript(airline: list[Conversation]) -> None:
    conv = airline[0]
    point = session_point(conv)
    assert point is not None
    assert point.pair_id == f"{conv.id}#session"
    users = [m.content for m in conv.messages if m.role == "user"]
    assert [m.content for m in point.context if m.role == "user"] == users[:1]
    answered = [step.user for _, step in session_turns(point.recorded) if step is not None]
    assert answered == users[1:]
    calls = [c.name for m in conv.messages for c in m.tool_calls]
    assert [c.name for c in point.recorded.tool_calls] == calls


def test_a_candidate_that_skips_the_write_action_loses_on_the_goal_and_the_decision(
    airline: list[Conversation], tmp_path: Path
) -> None:
    booked = [c for c in airline if _recorded_write(c)]
    assert len(booked) >= 3
    result = de.run(session_config(tmp_path / "run"), conversations=booked, progress=False)
    con = de.open_run(tmp_path / "run")
    assert con.execute("SELECT count(*) FROM errors").fetchone() == (0,)
    ends = con.execute("SELECT DISTINCT finish_reason FROM replays WHERE side != 'recorded'").fetchall()
    assert {e for (e,) in ends} <= set(SESSION_ENDS) - {"error"}
    replays = {(r.conversation_id, r.side): r for r in _replays(tmp_path / "run")}
    for conv in booked:
        base, cand = replays[(conv.id, "baseline")], replays[(conv.id, "candidate")]
        # One simulated user for both sides: it opened both the same way and played the user in every answer.
        said = [[(s.user, s.user_source) for s in r.output.steps if s.user is not None] for r in (base, cand)]
        assert said[0]
        assert said[1]
        assert said[0][0] == said[1][0]
        assert {source for side in said for _, source in side} == {"simulated"}
        assert not goal_reached(cand.output, conv.metadata["actions"], READS)[0]
        assert not {c.name for c in cand.output.tool_calls} & set(WRITES)
    verdicts = con.execute("SELECT outcome, judge, candidate_scores, baseline_scores FROM verdicts").fetchall()
    assert len(verdicts) == len(booked)
    assert all(outcome in ("baseline", "equivalent") for outcome, *_ in verdicts)
    lost = [v for v in verdicts if v[1] == "outcome"]
    assert len(lost) >= 3  # where the baseline reached the goal, the candidate lost on it
    for outcome, _, cand_scores, base_scores in lost:
        assert outcome == "baseline"
        assert '"goal_reached":0.0' in cand_scores
        assert '"goal_reached":1.0' in base_scores
    decision = result.decision()
    assert decision.outcome == "REJECTED"
    # Each side's share of goals reached, over the sessions where both were checked, and a gate on it.
    goals = decision.goals
    assert goals["candidate"].value == 0.0
    assert goals["baseline"].value is not None
    assert goals["baseline"].value >= len(lost) / len(booked)
    assert goals["baseline"].n == len(booked)
    assert "goal reached" in str(decision)
    gated = result.decision(de.DecisionRule(gates=[de.Gate(metric="goal_missed_rate", max=0.0)]))
    [gate] = gated.gates
    assert gate.passed is False
    assert gated.decided_by == "gate goal_missed_rate: candidate - baseline <= 0"


def test_sides_that_do_the_same_are_equivalent_and_every_tool_result_says_its_source(
    airline: list[Conversation], tmp_path: Path
) -> None:
    sample = [c for c in airline if not _writes(c)][:12]
    config = session_config(tmp_path / "run", scripted=True).model_copy(
        update={"candidate": de.Variant(model="simulated:candidate")}
    )
    de.run(config, conversations=sample, progress=False)
    con = de.open_run(tmp_path / "run")
    assert con.execute("SELECT count(*) FROM errors").fetchone() == (0,)
    rolled = [r for r in _replays(tmp_path / "run") if r.side != "recorded"]
    sources = {res.source for r in rolled for step in r.output.steps for res in step.tool_results}
    assert sources <= {"recorded", "simulated", "llm"}
    assert "recorded" in sources
    outcomes = con.execute("SELECT stage, outcome, count(*) FROM verdicts GROUP BY ALL").fetchall()
    assert outcomes == [("deterministic", "equivalent", len(sample))]  # the same calls and the same end


def test_only_recorded_users_end_a_session_that_left_the_recording(airline: list[Conversation], tmp_path: Path) -> None:
    booked = [c for c in airline if _recorded_write(c)][:3]
    de.run(session_config(tmp_path / "run", user=None, goal=None), conversations=booked, progress=False)
    con = de.open_run(tmp_path / "run")
    ends = dict(con.execute("SELECT side, list(DISTINCT finish_reason) FROM replays GROUP BY ALL").fetchall())
    assert ends["candidate"] == ["off_recording"]
    rolled = [r for r in _replays(tmp_path / "run") if r.side != "recorded"]
    assert {step.user_source for r in rolled for step in r.output.steps if step.user is not None} == {"recorded"}


@pytest.mark.anyio
async def test_a_call_made_again_gets_the_next_recorded_result_and_an_unrecorded_one_an_llm_result() -> None:
    get = ToolCall(id="1", name="get", arguments='{"id": "X"}')
    client = ModelClient(SimulatedAdapter("simulated:tools"), ModelLimiter(1), RetryPolicy())
    tools = SessionTools([(get, "old"), (get.model_copy(update={"id": "2"}), "new")], llm=client)
    point = session_point(Conversation(id="c", messages=(de.Message(role="user", content="hi"),
                                                         de.Message(role="assistant", content="hello"))))  # fmt: skip
    assert point is not None
    ctx = ToolContext(point=point, position=0)
    got = [await tools(get.model_copy(update={"arguments": '{"id": "X"}'}), ctx) for _ in range(3)]
    assert [(r.content, r.source) for r in got] == [("old", "recorded"), ("new", "recorded"), ("new", "recorded")]
    other = await tools(ToolCall(id="3", name="cancel", arguments='{"id": "X"}'), ctx)
    assert other.source == "llm"
    assert other.content == '{"error": "not found"}'  # the simulated tool simulator: no recorded example of it
    again = await tools(ToolCall(id="4", name="get", arguments='{"id": "Y"}'), ctx)
    assert (again.content, again.source) == ("old", "llm")  # a result shaped as the recorded ones


def test_the_simulators_calls_are_priced_as_their_own_roles_once_each_and_counted_in_the_run_cost(
    airline: list[Conversation], tmp_path: Path
) -> None:
    from delta_eval.analysis.report import render_report

    sample = [c for c in airline if _recorded_write(c)][:4]
    prices = {"simulated:user": {"input": 1.0, "output": 4.0}, "simulated:tools": {"input": 2.0, "output": 8.0}}
    config = session_config(tmp_path / "run", tool_model="simulated:tools").model_copy(
        update={
            "candidate": de.Variant(model="simulated:candidate", provider_options={"change_args_rate": 0.5}),
            "prices": prices,
        }
    )
    result = de.run(config, conversations=sample, progress=False)
    con = de.open_run(tmp_path / "run")
    assert con.execute("SELECT count(*) FROM errors").fetchone() == (0,)
    rows = con.execute(
        "SELECT role, side, request_key, cached, input_tokens, output_tokens, cost_usd FROM simulator_calls"
    ).fetchall()
    roles = {r[0] for r in rows}
    assert roles == {"user_simulator", "tool_simulator"}
    for role, _, _, _, tin, tout, usd in rows:  # priced at the run's prices for the simulator's own model
        p = prices["simulated:user" if role == "user_simulator" else "simulated:tools"]
        assert usd == pytest.approx((tin * p["input"] + tout * p["output"]) / 1e6)
    # Both sides asked the user the same first question: one call, asked by each side, counted once.
    keys = [(r[0], r[2]) for r in rows]
    assert len(set(keys)) < len(keys)
    counted = result.counts.simulating
    for role in roles:
        distinct = {k: usd for (rl, _, k, _, _, _, usd) in rows if rl == role}
        assert counted[role].calls == len(distinct)
        assert counted[role].cost_usd == pytest.approx(sum(distinct.values()))
        assert counted[role].pairs == len(sample) if role == "user_simulator" else counted[role].pairs >= 1
    # The sides' own costs leave them out (the simulated sides cost nothing); the run's cost has them.
    assert con.execute("SELECT sum(cost_usd) FROM replays").fetchone() == (0.0,)
    text = render_report(result)
    whole = sum(s.cost_usd or 0.0 for s in counted.values())
    assert whole > 0
    assert f"run cost     {whole:.4f} USD (both sides, the judges, the session simulators)" in text
    assert "  user simulator " in text
    assert "  tool simulator " in text
    summary = de.analyze(tmp_path / "run").summary(decision=False)
    assert set(summary["simulating"]) == roles


def test_each_turns_checks_are_the_sessions_own_so_the_gates_count_sessions(
    airline: list[Conversation], tmp_path: Path
) -> None:
    from delta_eval.metrics.decision import DecisionRule
    from delta_eval.metrics.gates import Gate

    booked = [c for c in airline if _recorded_write(c)][:6]
    # Scripted: the recorded user answers while a side makes the recorded calls; the candidate never writes, so at
    # the turn the recording wrote it answers in text (text instead of action), and leaves the recording there.
    result = de.run(session_config(tmp_path / "run", scripted=True), conversations=booked, progress=False)
    rows = {(r.conversation_id, r.side): r for r in _replays(tmp_path / "run")}
    for conv in booked:
        base, cand = rows[(conv.id, "baseline")], rows[(conv.id, "candidate")]
        assert (base.matches_recorded, base.text_instead_of_action, base.no_decision) == (True, False, False)
        assert (cand.matches_recorded, cand.text_instead_of_action, cand.no_decision) == (False, True, False)
        assert cand.invalid_tool_calls == base.invalid_tool_calls == 0
    gate = Gate(metric="text_instead_of_action_rate", max=0.0)
    decision = result.decision(DecisionRule(gates=(gate,)))
    sides = decision.sides
    assert sides["candidate"].turns == sides["baseline"].turns == len(booked)  # sessions are the units
    assert sides["candidate"].text_instead_of_action_rate.value == 1.0
    assert sides["baseline"].text_instead_of_action_rate.value == 0.0
    assert sides["baseline"].matches_recorded_rate.value == 1.0
    (checked,) = decision.gates
    assert checked.passed is False
    assert decision.outcome == "REJECTED"


def test_a_sessions_invalid_calls_and_silent_turns_add_up_over_its_turns() -> None:
    from delta_eval.replay.session import session_checks
    from delta_eval.schema import TurnOutput

    def turn(k: int, **checks: Any) -> Replay:
        return Replay(pair_id="p", conversation_id="c", turn_index=k, side="candidate", variant="v", model="m",
                      output=TurnOutput(), finish_reason="stop", **checks)  # fmt: skip

    turns = [
        turn(0, invalid_tool_calls=1, tool_call_problems=("book: no such tool",), no_decision=False),
        turn(1, no_decision=True, matches_recorded=True),
        turn(2, invalid_tool_calls=2, tool_call_problems=("a: x", "b: y"), no_decision=False),
    ]
    got = session_checks(turns, on_recording=False)
    assert got["invalid_tool_calls"] == 3
    assert got["tool_call_problems"] == ("turn 1: book: no such tool", "turn 3: a: x", "turn 3: b: y")
    assert got["no_decision"] is True
    assert got["text_instead_of_action"] is False
    assert got["matches_recorded"] is False
    assert session_checks(turns[:1], on_recording=True)["no_decision"] is False


def test_sessions_repeat_over_epochs_and_stop_early_as_turn_runs_do(
    airline: list[Conversation], tmp_path: Path
) -> None:
    sample = airline[:6]
    epochs = de.run(session_config(tmp_path / "epochs").model_copy(update={"epochs": 2}), conversations=sample,
                    progress=False)  # fmt: skip
    con = de.open_run(tmp_path / "epochs")
    assert con.execute("SELECT count(*) FROM errors").fetchone() == (0,)
    per_epoch = con.execute("SELECT epoch, count(*) FROM verdicts GROUP BY epoch ORDER BY epoch").fetchall()
    assert per_epoch == [(1, len(sample)), (2, len(sample))]  # one session per conversation and epoch
    assert set(epochs.decision().epochs) == {1, 2}

    stopped = de.run(session_config(tmp_path / "stop").model_copy(update={"stop_early": True}), conversations=sample,
                     progress=False)  # fmt: skip
    assert stopped.status == "completed"
    assert 0 < stopped.counts.pairs <= len(sample)


def test_a_screened_session_run_checks_its_gates_on_the_first_sessions(
    airline: list[Conversation], tmp_path: Path
) -> None:
    passing = {"conversations": 3, "gates": [{"metric": "error_rate", "max": 0.5, "test": "point"}]}
    failing = {"conversations": 3, "gates": [{"metric": "latency_p95_s", "max": 0.0, "test": "point"}]}
    counts = {}
    for name, screen in (("passing", passing), ("failing", failing)):
        config = session_config(tmp_path / name).model_copy(update={"screen": de.Screen.model_validate(screen)})
        result = de.run(config, conversations=airline[:6], progress=False)
        con = de.open_run(tmp_path / name)
        assert con.execute("SELECT count(*) FROM errors").fetchone() == (0,)
        counts[name] = (con.execute("SELECT count(*) FROM verdicts").fetchone(), bool(result.manifest.screened_out))
    assert counts["passing"] == ((6,), False)  # passed the screen: every session
    assert counts["failing"] == ((3,), True)  # stopped after the sessions of the screen


@pytest.mark.anyio
async def test_both_sides_asking_the_tool_model_the_same_call_at_once_pay_once_and_are_counted_so(
    tmp_path: Path,
) -> None:
    """Both sides make the same call the recording never made, at the same moment: the tool model is asked once
    (the second side waits for the first's answer), both sides log it, and the run's simulator spend counts the
    one call paid."""
    import anyio

    from delta_eval.replay.simulator_log import SimulatorLog
    from delta_eval.store.cache import SQLiteCache
    from delta_eval.store.manifest import RunCounts

    client = ModelClient(SimulatedAdapter("simulated:tools"), ModelLimiter(4), RetryPolicy(),
                         SQLiteCache(tmp_path / "cache.sqlite"))  # fmt: skip
    point = session_point(Conversation(id="c", messages=(de.Message(role="user", content="hi"),
                                                         de.Message(role="assistant", content="hello"))))  # fmt: skip
    assert point is not None
    logs: dict[str, SimulatorLog] = {"baseline": SimulatorLog(point, "baseline"),
                                     "candidate": SimulatorLog(point, "candidate")}  # fmt: skip
    call = ToolCall(id="1", name="cancel", arguments='{"id": "X"}')

    async def side(name: str) -> None:
        tools = SessionTools([], llm=client, namespace="c@1", log=logs[name])
        await tools(call, ToolContext(point=point, position=0))

    async with anyio.create_task_group() as tg:
        for name in logs:
            tg.start_soon(side, name)
    rows = [c.model_dump() for log in logs.values() for c in log.calls]
    table = TABLES["simulator_calls"].to_arrow([c for log in logs.values() for c in log.calls])
    counted = RunCounts.tally(TABLES["verdicts"].to_arrow([]), TABLES["errors"].to_arrow([]),
                              simulator_calls=table).simulating["tool_simulator"]  # fmt: skip
    assert len(rows) == 2
    assert counted.calls == client.stats.made == 1
    # A call's row held by several pairs (a baseline session shared by several candidates' pairs) is one call.
    shared = [c.model_copy(update={"pair_id": f"c#session~{k}"}) for c in logs["baseline"].calls for k in "ab"]
    again = RunCounts.tally(TABLES["verdicts"].to_arrow([]), TABLES["errors"].to_arrow([]),
                            simulator_calls=TABLES["simulator_calls"].to_arrow(shared)).simulating  # fmt: skip
    assert again["tool_simulator"].calls == 1
