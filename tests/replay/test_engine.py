from __future__ import annotations

import json

import anyio
import pytest

import delta_eval as de
from delta_eval.adapters.client import ModelClient
from delta_eval.adapters.limits import ModelLimiter
from delta_eval.exceptions import BadRequestError, RateLimitError
from delta_eval.replay.engine import Replayer
from delta_eval.replay.points import replay_points
from delta_eval.replay.tools import DIVERGED_MESSAGE, RecordedToolSimulator, ToolContext
from delta_eval.schema import Message, ToolCall
from delta_eval.testing import ScriptedAdapter, tool_call_message
from tests.conftest import tool_turn_conversation

FAST = de.RetryPolicy(initial_wait=0.0, max_wait=0.0)


def replayer(
    script: list[object], max_tool_rounds: int = 5, simulator: object = None
) -> tuple[Replayer, ScriptedAdapter]:
    adapter = ScriptedAdapter("scripted:m", script)  # type: ignore[arg-type]
    client = ModelClient(adapter, ModelLimiter(4), FAST)
    variant = de.Variant(model="scripted:m", name="candidate")
    return Replayer(client, variant, simulator or RecordedToolSimulator(), max_tool_rounds), adapter


def first_point() -> de.ReplayPoint:
    return next(iter(replay_points(tool_turn_conversation())))


def test_matching_call_gets_the_recorded_result() -> None:
    r, adapter = replayer([tool_call_message("get_reservation", '{"id":"ABC123"}', "x9"), "It is HAT001."])
    replay, error = anyio.run(r.replay, first_point(), "candidate")
    assert error is None
    assert replay.output.final_text == "It is HAT001."
    result = replay.output.steps[0].tool_results[0]
    assert (result.source, result.content, result.call_id) == ("recorded", '{"flight": "HAT001"}', "x9")
    assert replay.model_calls == 2
    assert replay.finish_reason == "stop"
    # the second request carries the call and its result
    second = adapter.requests[1].messages
    assert second[-2].tool_calls[0].id == "x9"
    assert second[-1] == Message(role="tool", tool_call_id="x9", name="get_reservation", content='{"flight": "HAT001"}')


def test_diverging_call_gets_a_non_success_result() -> None:
    r, _ = replayer([tool_call_message("get_reservation", '{"id":"ZZZ"}'), "Sorry."])
    replay, _ = anyio.run(r.replay, first_point(), "candidate")
    result = replay.output.steps[0].tool_results[0]
    assert result.source == "simulated"
    assert json.loads(result.content)["message"] == DIVERGED_MESSAGE
    assert "do not tell the user that this action succeeded" in DIVERGED_MESSAGE


def test_once_diverged_later_calls_are_simulated_too() -> None:
    point = first_point()
    sim = RecordedToolSimulator()
    call = ToolCall(id="a", name="get_reservation", arguments='{"id": "ABC123"}')
    assert sim(call, ToolContext(point=point, position=0)).source == "recorded"
    assert sim(call, ToolContext(point=point, position=0, diverged=True)).source == "simulated"
    assert sim(call, ToolContext(point=point, position=1)).source == "simulated"


def test_tool_cap_marks_the_turn_and_stops() -> None:
    calls = [tool_call_message("get_reservation", '{"id":"ABC123"}', f"c{i}") for i in range(4)]
    r, adapter = replayer(calls, max_tool_rounds=2)
    replay, error = anyio.run(r.replay, first_point(), "candidate")
    assert error is None
    assert replay.hit_tool_cap
    assert replay.finish_reason == "tool_cap"
    assert len(replay.output.steps) == 3
    assert replay.output.steps[-1].tool_results == ()
    assert len(adapter.requests) == 3  # two rounds with results, then the capped one; never retried


def test_custom_simulator_sync_or_async() -> None:
    async def simulator(call: ToolCall, ctx: ToolContext) -> str:
        return f"custom {call.name} at {ctx.position}"

    r, _ = replayer([tool_call_message("anything"), "ok"], simulator=simulator)
    replay, _ = anyio.run(r.replay, first_point(), "candidate")
    res = replay.output.steps[0].tool_results[0]
    assert (res.source, res.content) == ("custom", "custom anything at 0")


def test_provider_failure_after_retries_is_an_error_replay_and_row() -> None:
    r, adapter = replayer([RateLimitError("slow down", retry_after=0.0)] * 6)
    replay, error = anyio.run(r.replay, first_point(), "candidate")
    assert replay.finish_reason == "error"
    assert replay.error_type == "RateLimitError"
    assert error is not None
    assert error.stage == "replay"
    assert error.attempts == 6
    assert error.pair_id == "c1#0"
    assert len(adapter.requests) == 6


def test_non_retryable_failure_is_not_retried() -> None:
    r, adapter = replayer([BadRequestError("context too long", status=400)])
    replay, error = anyio.run(r.replay, first_point(), "candidate")
    assert error is not None
    assert error.attempts == 1
    assert len(adapter.requests) == 1
    assert "context too long" in (replay.error or "")


def test_template_error_is_recorded_without_calling_the_model() -> None:
    adapter = ScriptedAdapter("scripted:m", [])
    variant = de.Variant(model="scripted:m", name="candidate", system_prompt="{{nope}}")
    r = Replayer(ModelClient(adapter, ModelLimiter(1), FAST), variant, RecordedToolSimulator())
    replay, error = anyio.run(r.replay, first_point(), "candidate")
    assert replay.finish_reason == "error"
    assert replay.error_type == "RecordError"
    assert error is not None
    assert error.field == "metadata.nope"
    assert adapter.requests == []


@pytest.mark.parametrize("cached", [False, True])
def test_usage_and_cost_accumulate(cached: bool) -> None:
    r, _ = replayer([tool_call_message("get_reservation", '{"id":"ABC123"}'), "done"])
    replay, _ = anyio.run(r.replay, first_point(), "candidate")
    assert replay.usage.input_tokens == 20
    assert replay.usage.output_tokens == 10
    assert replay.cost_usd is None  # scripted:m has no price: unknown, not zero
