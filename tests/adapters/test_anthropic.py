"""``anthropic:`` through the real ``anthropic`` SDK against the fake Anthropic server."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

import delta_eval as de
from delta_eval.adapters.anthropic import encode_messages
from delta_eval.adapters.registry import create_adapter
from delta_eval.adapters.simulated import SimulatedBehaviour
from delta_eval.exceptions import AuthenticationError, BadRequestError, ConfigError, RateLimitError, TransientError
from delta_eval.pricing import Price, cost
from delta_eval.schema import Message, ReasoningState, ToolCall, Usage
from delta_eval.testing.servers.anthropic import FakeAnthropicServer
from delta_eval.testing.servers.http import JSONReply, StreamReply
from tests.adapters.support import ASK, CALL, FAST, TOOL_ROUND, call, request
from tests.adapters.test_openai_chat import weather_model

KEY = "sk-ant-test-not-a-real-key"
MODEL = "anthropic:claude-sonnet-4-6"  # takes both a thinking budget and adaptive thinking


def options(server: FakeAnthropicServer, **more: object) -> dict[str, object]:
    return {"base_url": server.url, "api_key": KEY, **more}


def test_a_tool_round_as_blocks_with_the_system_prompt_on_top() -> None:
    with FakeAnthropicServer(respond=weather_model, api_key=KEY) as server:
        first = call(MODEL, options(server), request(MODEL, max_tokens=512))
        # The wire shape without prompt-cache breakpoints (those are tests/adapters/test_prompt_cache.py's).
        second = call(MODEL, options(server, prompt_cache=False), request(MODEL, TOOL_ROUND, max_tokens=512))
    assert first.response.message.tool_calls == (CALL,)
    assert (first.response.finish_reason, first.response.provider_finish_reason) == ("tool_calls", "tool_use")
    assert second.response.message.content == "It is 18 C."
    sent = server.requests[1]
    body = sent.json()
    assert body["system"] == "You are a weather bot."
    assert body["max_tokens"] == 512
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "call_1", "name": "get_weather",
                                           "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": '{"temp_c":18}'}]},
    ]  # fmt: skip
    assert body["tools"][0]["input_schema"]["required"] == ["city"]
    assert sent.headers["anthropic-version"] == "2026-10-21"
    assert sent.headers["authorization"] == "<redacted>"
    assert first.response.request_id == "req_000001"


def test_consecutive_results_and_a_following_user_message_make_one_user_turn() -> None:
    two = (ToolCall(id="a", name="f", arguments="{}"), ToolCall(id="b", name="g", arguments='{"x": 1}'))
    history = (
        *ASK,
        Message(role="assistant", content="Checking both.", tool_calls=two),
        Message(role="tool", tool_call_id="a", content="A"),
        Message(role="tool", tool_call_id="b", content="B"),
        Message(role="user", content="and?"),
    )
    system, messages = encode_messages(history, "claude-sonnet-4-5")
    assert system == "You are a weather bot."
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert [b["type"] for b in messages[1]["content"]] == ["text", "tool_use", "tool_use"]
    assert messages[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "a", "content": "A"},
        {"type": "tool_result", "tool_use_id": "b", "content": "B"},
        {"type": "text", "text": "and?"},
    ]


def test_usage_from_the_wire_is_pinned_and_cache_writes_priced_apart() -> None:
    wire = {
        "id": "msg_2", "type": "message", "role": "assistant", "model": "claude-x",
        "content": [{"type": "text", "text": "It is 18 °C in Paris."}], "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 450, "output_tokens": 12, "cache_creation_input_tokens": 1000,
                  "cache_read_input_tokens": 2000, "output_tokens_details": {"thinking_tokens": 5}},
    }  # fmt: skip
    with FakeAnthropicServer() as server:
        server.enqueue(JSONReply(wire))
        r = call(MODEL, options(server), request(MODEL, TOOL_ROUND, max_tokens=64)).response
    assert r.usage == Usage(
        input_tokens=3450, cached_input_tokens=2000, cache_write_tokens=1000, output_tokens=12, reasoning_tokens=5
    )
    assert (r.finish_reason, r.served_model) == ("stop", "claude-x")
    price = Price(input=3.0, cached_input=0.3, cache_write=3.75, output=15.0)
    assert cost(r.usage, price) == pytest.approx((450 * 3.0 + 2000 * 0.3 + 1000 * 3.75 + 12 * 15.0) / 1e6)


def test_rules_of_the_current_api_are_applied_and_said_once() -> None:
    adapter = create_adapter(MODEL, {"api_key": KEY})
    kwargs = adapter.encode(request(MODEL, temperature=0.3, seed=1, reasoning_budget=2000, max_tokens=1000))  # type: ignore[attr-defined]
    assert "temperature" not in kwargs
    assert "seed" not in kwargs
    assert kwargs["thinking"] == {"type": "enabled", "budget_tokens": 2000}
    assert kwargs["max_tokens"] == 2000 + 8192  # above the budget
    adapter.encode(request(MODEL, tool_choice="required", reasoning_effort="high"))  # type: ignore[attr-defined]
    assert adapter.notes == [
        "max_tokens raised to 10192: it must exceed the thinking budget of 2000",
        "seed dropped: Anthropic takes none",
        "temperature dropped: Anthropic's API version 2026-10-21 takes no sampling parameters",
        "max_tokens not set; Anthropic requires one: 8192 sent",
        "tool_choice 'required' dropped: with thinking on, Anthropic allows only auto or none",
    ]
    effort = adapter.encode(request(MODEL, reasoning_effort="high", parallel_tool_calls=False))  # type: ignore[attr-defined]
    assert (effort["thinking"], effort["output_config"]) == ({"type": "adaptive"}, {"effort": "high"})
    assert effort["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    anyio.run(adapter.aclose)
    with FakeAnthropicServer(respond=weather_model) as server:
        # the fake server answers 400 to temperature or a missing max_tokens, as Anthropic does
        ok = call(MODEL, options(server), request(MODEL, temperature=0.3))
        assert ok.response.message.tool_calls == (CALL,)


def test_a_thinking_model_keeps_its_signed_thinking_across_tool_rounds(
    tmp_path: Path, tau_conversations: list[de.Conversation]
) -> None:
    conv = next(c for c in tau_conversations if sum(1 for m in c.messages if m.tool_calls) >= 3)
    with FakeAnthropicServer(recordings=tau_conversations, behaviour=SimulatedBehaviour(reasoning_tokens=30),
                             api_key=KEY) as server:  # fmt: skip
        opts = options(server)
        result = de.run(
            conversations=[conv],
            baseline=de.Variant(model=MODEL, provider_options=opts, params={"reasoning_budget": 1024}),
            candidate=de.Variant(model=MODEL, name="streamed", provider_options=opts,
                                 params={"reasoning_budget": 1024, "stream": True}),
            out=tmp_path / "run",
        )  # fmt: skip
    assert result.status == "completed"
    assert result.counts.errors == 0  # the server refuses a tool round whose thinking did not come back unmodified
    con = result.connect()
    thoughts = con.execute(
        "SELECT count(*) FROM (SELECT unnest(steps) AS s FROM replays WHERE side <> 'recorded') "
        "WHERE s.reasoning LIKE 'The policy says%'"
    ).fetchone()[0]
    assert thoughts > 0
    sent = [m for r in server.requests for m in r.json()["messages"] if m["role"] == "assistant"]
    assert any(b.get("type") == "thinking" for m in sent for b in m["content"])


def test_thinking_is_never_sent_to_another_model() -> None:
    blocks = [{"type": "thinking", "thinking": "t", "signature": "s"}, {"type": "tool_use", "id": "call_1",
              "name": "get_weather", "input": {"city": "Paris"}}]  # fmt: skip
    state = ReasoningState(provider="anthropic", model="claude-sonnet-4-5", data={"content": blocks})
    history = (*ASK, Message(role="assistant", tool_calls=(CALL,), reasoning=state))
    assert encode_messages(history, "claude-sonnet-4-5")[1][1]["content"] == blocks
    assert encode_messages(history, "claude-haiku-4-5")[1][1]["content"] == [blocks[1]]


def test_streaming_is_reassembled_timed_and_a_cut_stream_retried() -> None:
    with FakeAnthropicServer(respond=weather_model) as server:
        timed = call(MODEL, options(server), request(MODEL, stream=True, max_tokens=99))
        assert timed.response.message.tool_calls == (CALL,)  # input_json fragments joined
        assert timed.response.ttft_ms is not None
        answer = server.requests[-1]
        events = list(server.encode_stream(_answer()))
        server.enqueue(StreamReply(events[:4], drop=True), StreamReply(events[:-2]))
        retried = call(MODEL, options(server), request(MODEL, TOOL_ROUND, stream=True, max_tokens=99))
    assert answer.json()["stream"] is True
    assert retried.attempts == 3
    assert retried.response.message.content == "It is 18 C."


def _answer() -> object:
    from delta_eval.testing.servers.provider import Answer, Route

    return Answer(
        route=Route("claude-sonnet-4-5", True),
        model="claude-sonnet-4-5",
        message=Message(role="assistant", content="partial"),
        usage=Usage(input_tokens=10, output_tokens=2),
        finish="stop",
        thinking=False,
        response_id="000042",
    )


@pytest.mark.parametrize(
    ("status", "kind", "error", "retried"),
    [
        (429, "rate_limit", RateLimitError, True),
        (529, "overloaded", TransientError, True),
        (500, "server", TransientError, True),
        (400, "bad_request", BadRequestError, False),
        (401, "auth", AuthenticationError, False),
    ],
)
def test_errors_map_to_the_retry_rules(status: int, kind: str, error: type[Exception], retried: bool) -> None:
    with FakeAnthropicServer(respond=weather_model) as server:
        server.enqueue(*[server.error(status, kind, f"failure {kind}")] * 4)
        with pytest.raises(error) as info:
            call(MODEL, options(server), request(MODEL, max_tokens=10))
    assert len(server.requests) == (FAST.max_attempts if retried else 1)
    assert f"failure {kind}" in str(info.value)
    assert info.value.status == status


def test_an_error_event_inside_a_stream_is_retried() -> None:
    from delta_eval.testing.servers.provider import sse

    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    with FakeAnthropicServer(respond=weather_model) as server:
        server.enqueue(StreamReply([sse(overloaded, event="error")]))
        result = call(MODEL, options(server), request(MODEL, stream=True, max_tokens=10))
    assert result.attempts == 2
    assert result.response.message.tool_calls == (CALL,)


def test_the_key_comes_from_anthropic_api_key(no_provider_keys: None, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
        create_adapter(MODEL, {})
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    with FakeAnthropicServer(respond=weather_model, api_key=KEY) as server:
        assert call(MODEL, {"base_url": server.url}, request(MODEL)).response.message.tool_calls == (CALL,)
