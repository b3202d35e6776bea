from __future__ import annotations

import json

import anyio
import pytest

import delta_eval as de
from delta_eval.adapters.client import ModelClient
from delta_eval.adapters.limits import ModelLimiter
from delta_eval.calls import ModelRequest, ModelResponse
from delta_eval.exceptions import BadRequestError, RateLimitError
from delta_eval.pricing import Price
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


def run(r: Replayer) -> tuple[de.Replay, de.ErrorRecord | None]:
    side = anyio.run(r.replay, first_point(), "candidate")
    return side.replay, side.error


def test_matching_call_gets_the_recorded_result() -> None:
    r, adapter = replayer([tool_call_message("get_reservation", '{"id":"ABC123"}', "x9"), "It is HAT001."])
    replay, error = run(r)
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
    replay, _ = run(r)
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
    replay, error = run(r)
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
    replay, _ = run(r)
    res = replay.output.steps[0].tool_results[0]
    assert (res.source, res.content) == ("custom", "custom anything at 0")


def test_provider_failure_after_retries_is_an_error_replay_and_row() -> None:
    r, adapter = replayer([RateLimitError("slow down", retry_after=0.0)] * 6)
    replay, error = run(r)
    assert replay.finish_reason == "error"
    assert replay.error_type == "RateLimitError"
    assert error is not None
    assert error.stage == "replay"
    assert error.attempts == 6
    assert error.pair_id == "c1#0"
    assert len(adapter.requests) == 6


def test_non_retryable_failure_is_not_retried() -> None:
    r, adapter = replayer([BadRequestError("context too long", status=400)])
    replay, error = run(r)
    assert error is not None
    assert error.attempts == 1
    assert len(adapter.requests) == 1
    assert "context too long" in (replay.error or "")


def test_template_error_is_recorded_without_calling_the_model() -> None:
    adapter = ScriptedAdapter("scripted:m", [])
    variant = de.Variant(model="scripted:m", name="candidate", system_prompt="{{nope}}")
    r = Replayer(ModelClient(adapter, ModelLimiter(1), FAST), variant, RecordedToolSimulator())
    replay, error = run(r)
    assert replay.finish_reason == "error"
    assert replay.error_type == "RecordError"
    assert error is not None
    assert error.field == "metadata.nope"
    assert adapter.requests == []


class DictCache:
    """The response-cache protocol in memory."""

    def __init__(self) -> None:
        self.entries: dict[str, ModelResponse] = {}

    def get(self, key: str) -> ModelResponse | None:
        return self.entries.get(key)

    def put(self, key: str, model: str, response: ModelResponse) -> None:
        self.entries[key] = response


@pytest.mark.parametrize("cached", [False, True])
def test_usage_and_cost_accumulate_whether_answers_are_paid_or_cached(cached: bool) -> None:
    cache = DictCache()
    script: list[object] = [tool_call_message("get_reservation", '{"id":"ABC123"}'), "done"]
    price = Price(input=1.0, output=2.0)
    if cached:
        # A first replay pays for the answers; the one under test gets them from the cache.
        warm = ScriptedAdapter("scripted:m", list(script))
        anyio.run(
            Replayer(
                ModelClient(warm, ModelLimiter(4), FAST, cache),
                de.Variant(model="scripted:m", name="candidate"),
                RecordedToolSimulator(),
            ).replay,
            first_point(),
            "candidate",
        )
        script = []
    adapter = ScriptedAdapter("scripted:m", script)
    client = ModelClient(adapter, ModelLimiter(4), FAST, cache)
    variant = de.Variant(model="scripted:m", name="candidate")
    replay, error = run(Replayer(client, variant, RecordedToolSimulator(), prices={"scripted:m": price}))
    assert error is None
    assert (replay.model_calls, replay.cached_calls) == (2, 2 if cached else 0)
    assert len(adapter.requests) == (0 if cached else 2)
    # what producing the turn cost, counted once per call, cached or not
    assert (replay.usage.input_tokens, replay.usage.output_tokens) == (20, 10)
    assert replay.cost_usd == pytest.approx((20 * 1.0 + 10 * 2.0) / 1e6)
    unpriced, _ = run(
        Replayer(
            ModelClient(ScriptedAdapter("scripted:m", ["x"]), ModelLimiter(1), FAST),
            variant,
            RecordedToolSimulator(),
        )
    )
    assert unpriced.cost_usd is None  # no price: unknown, not zero


def test_served_model_request_ids_and_reasoning_state_carry_through_the_turn() -> None:
    state = de.ReasoningState(provider="scripted", data={"signature": "sig-1"}, summary="look it up first")

    def answer(request: ModelRequest) -> ModelResponse:
        calls = sum(1 for m in request.messages if m.role == "tool")
        message = (
            de.Message(
                role="assistant",
                tool_calls=tool_call_message("get_reservation", '{"id":"ABC123"}').tool_calls,
                reasoning=state,
            )
            if calls == 0
            else de.Message(role="assistant", content="It is HAT001.")
        )
        return ModelResponse(message=message, served_model="m-2026-01-01", request_id=f"req-{calls}")

    class Answering(ScriptedAdapter):
        async def generate(self, request: ModelRequest) -> ModelResponse:
            self.requests.append(request)
            return answer(request)

    adapter = Answering("scripted:m", [])
    replay, error = run(
        Replayer(ModelClient(adapter, ModelLimiter(1), FAST), de.Variant(model="scripted:m"), RecordedToolSimulator())
    )
    assert error is None
    assert (replay.served_model, replay.request_ids) == ("m-2026-01-01", ("req-0", "req-1"))
    # the second call gets the assistant's first message back with its reasoning state, as the provider sent it
    sent_back = adapter.requests[1].messages[-2]
    assert sent_back.reasoning == state
    assert sent_back.tool_calls[0].name == "get_reservation"


def test_a_failing_tool_simulator_ends_the_replay_not_the_run() -> None:
    def broken(call: ToolCall, ctx: ToolContext) -> str:
        raise RuntimeError("simulator bug")

    replay, error = run(replayer([tool_call_message("get_reservation"), "ok"], simulator=broken)[0])
    assert replay.finish_reason == "error"
    assert error is not None
    assert (error.error_type, error.stage) == ("ToolSimulationError", "replay")
    assert "simulator bug" in error.message
