"""``openai:`` through the real ``openai`` SDK against the fake OpenAI server: requests, responses, usage, streaming,
errors and retries, and a whole tau-bench replay."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import delta_eval as de
from delta_eval.adapters.base import json_body
from delta_eval.adapters.openai_chat import ChatCompletionsAdapter, body_json, decode_usage
from delta_eval.adapters.registry import create_adapter
from delta_eval.adapters.simulated import SimulatedBehaviour
from delta_eval.exceptions import (
    AuthenticationError,
    BadRequestError,
    ConfigError,
    ContextLengthError,
    RateLimitError,
    TransientError,
)
from delta_eval.pricing import Price, cost
from delta_eval.schema import MediaPart, Message, ToolCall, Usage
from delta_eval.testing.servers.http import JSONReply, StreamReply
from delta_eval.testing.servers.openai import FakeOpenAIServer
from tests.adapters.support import ASK, CALL, FAST, TOOL_ROUND, call, request

KEY = "sk-test-not-a-real-key"


def options(server: FakeOpenAIServer, **more: object) -> dict[str, object]:
    return {"base_url": server.base_url, "api_key": KEY, **more}


def weather_model(req: de.ModelRequest) -> Message:
    """Calls the weather tool first, then answers with what it returned."""
    if req.messages[-1].role == "tool":
        return Message(role="assistant", content=f"It is {json.loads(req.messages[-1].content or '{}')['temp_c']} C.")
    return Message(role="assistant", tool_calls=(CALL,))


def test_a_tool_round_goes_out_and_comes_back_in_openai_shape() -> None:
    with FakeOpenAIServer(respond=weather_model, api_key=KEY) as server:
        first = call("openai:gpt-4.1-mini", options(server), request("openai:gpt-4.1-mini", temperature=0.2, seed=7))
        second = call("openai:gpt-4.1-mini", options(server), request("openai:gpt-4.1-mini", TOOL_ROUND))
    assert first.response.message.tool_calls == (CALL,)
    assert first.response.finish_reason == "tool_calls"
    assert second.response.message.content == "It is 18 C."
    sent_first, sent_second = (r.json() for r in server.requests)
    assert sent_first["messages"][0] == {"role": "system", "content": "You are a weather bot."}
    assert sent_first["tools"][0]["function"]["name"] == "get_weather"
    assert (sent_first["temperature"], sent_first["seed"]) == (0.2, 7)
    assert sent_second["messages"][2]["tool_calls"][0] == {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},  # exactly as the model wrote them
    }
    assert sent_second["messages"][3] == {"role": "tool", "tool_call_id": "call_1", "content": '{"temp_c":18}'}
    assert server.requests[0].headers["authorization"] == "<redacted>"  # the log never holds the key
    assert first.response.request_id == "req_000001"
    assert first.response.served_model == "gpt-4.1-mini"


def test_usage_from_the_wire_is_pinned_field_by_field() -> None:
    # The reference's turn-2 response: 95 prompt tokens of which 64 cached, 9 completion tokens.
    wire = {
        "id": "chatcmpl-2", "object": "chat.completion", "created": 1767225600, "model": "gpt-x",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "It is 18 °C in Paris.", "refusal": None},
                     "logprobs": None, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 95, "completion_tokens": 9, "total_tokens": 104,
                  "prompt_tokens_details": {"cached_tokens": 64}, "completion_tokens_details": {"reasoning_tokens": 0}},
    }  # fmt: skip
    with FakeOpenAIServer() as server:
        server.enqueue(JSONReply(wire))
        result = call("openai:gpt-4.1", options(server), request("openai:gpt-4.1", TOOL_ROUND))
    usage = result.response.usage
    assert usage == Usage(input_tokens=95, cached_input_tokens=64, output_tokens=9)
    assert result.response.provider_finish_reason == "stop"
    # cached tokens are part of the prompt: 31 at the input rate, 64 at the cached rate, counted once
    price = Price(input=2.0, cached_input=0.5, output=8.0)
    assert cost(usage, price) == pytest.approx((31 * 2.0 + 64 * 0.5 + 9 * 8.0) / 1e6)
    reasoning = {"prompt_tokens": 10, "completion_tokens": 50, "total_tokens": 60,
                 "completion_tokens_details": {"reasoning_tokens": 40}}  # fmt: skip
    from openai.types import CompletionUsage

    assert decode_usage(CompletionUsage.model_validate(reasoning)) == Usage(
        input_tokens=10, output_tokens=50, reasoning_tokens=40
    )


def test_streaming_reassembles_text_and_tool_calls_and_times_the_first_token() -> None:
    with FakeOpenAIServer(respond=weather_model) as server:
        server.enqueue(StreamReply(FakeOpenAIServer()._chat_stream(_answer(CALL)), first_delay_s=0.15))
        calls = call("openai:gpt-4.1", options(server), request("openai:gpt-4.1", stream=True))
        text = call("openai:gpt-4.1", options(server), request("openai:gpt-4.1", TOOL_ROUND, stream=True))
    r = calls.response
    assert r.message.tool_calls == (CALL,)  # argument fragments joined in order
    assert r.finish_reason == "tool_calls"
    assert r.ttft_ms is not None
    assert r.ttft_ms >= 140
    assert r.usage.input_tokens > 0  # from the final usage chunk
    assert text.response.message.content == "It is 18 C."
    sent = server.requests[-1].json()
    assert (sent["stream"], sent["stream_options"]) == (True, {"include_usage": True})


def _answer(tool_call: ToolCall) -> object:
    from delta_eval.testing.servers.provider import Answer, Route

    return Answer(
        route=Route("gpt-4.1", True, "chat"),
        model="gpt-4.1",
        message=Message(role="assistant", tool_calls=(tool_call,)),
        usage=Usage(input_tokens=61, output_tokens=17),
        finish="tool_calls",
        thinking=False,
        response_id="000009",
    )


def test_a_dropped_stream_is_retried_and_its_partial_answer_never_cached(tmp_path: Path) -> None:
    from delta_eval.store.cache import SQLiteCache

    with FakeOpenAIServer(respond=weather_model) as server:
        events = FakeOpenAIServer()._chat_stream(_answer(CALL))
        server.enqueue(StreamReply(events[:3], drop=True), StreamReply(events[:-3]))  # cut, then no finish reason
        cache = SQLiteCache(tmp_path / "cache.sqlite")
        result = call("openai:gpt-4.1", options(server), request("openai:gpt-4.1", stream=True), cache=cache)
        assert result.attempts == 3
        assert result.response.message.tool_calls == (CALL,)
        assert len(cache) == 1  # only the whole answer
        cache.close()


@pytest.mark.parametrize(
    ("status", "kind", "error", "retried"),
    [
        (429, "rate_limit", RateLimitError, True),
        (500, "server", TransientError, True),
        (503, "server", TransientError, True),
        (408, "server", TransientError, True),
        (400, "context_length", ContextLengthError, False),
        (400, "bad_request", BadRequestError, False),
        (401, "auth", AuthenticationError, False),
        (403, "auth", AuthenticationError, False),
        (404, "not_found", BadRequestError, False),
    ],
)
def test_errors_map_to_the_retry_rules(status: int, kind: str, error: type[Exception], retried: bool) -> None:
    with FakeOpenAIServer(respond=weather_model) as server:
        server.enqueue(*[server.error(status, kind, f"failure {status}")] * 4)
        with pytest.raises(error) as info:
            call("openai:gpt-4.1", options(server), request("openai:gpt-4.1"))
    assert len(server.requests) == (FAST.max_attempts if retried else 1)  # the SDK never retried on its own
    assert f"failure {status}" in str(info.value)
    assert "request id req_err" in str(info.value)
    assert info.value.status == status


def test_retry_after_is_honoured_and_the_call_then_succeeds() -> None:
    with FakeOpenAIServer(respond=weather_model) as server:
        limited = server.error(429, "rate_limit", "slow down")
        limited.headers["retry-after-ms"] = "300"
        server.enqueue(limited)
        result = call("openai:gpt-4.1", options(server), request("openai:gpt-4.1"))
    assert result.attempts == 2
    assert result.response.message.tool_calls == (CALL,)


def test_a_server_that_is_gone_is_a_retryable_connection_error() -> None:
    server = FakeOpenAIServer().start()
    url = server.base_url
    server.stop()
    with pytest.raises(TransientError, match="no response"):
        call("openai:gpt-4.1", {"base_url": url, "api_key": KEY}, request("openai:gpt-4.1"))


def test_reasoning_models_get_their_own_rules_said_once() -> None:
    model = "openai:gpt-5.4-mini"  # a reasoning model by the catalogue, not by its name
    with FakeOpenAIServer(respond=weather_model) as server:
        from delta_eval.adapters.registry import create_adapter

        adapter = create_adapter(model, {"api_key": KEY})
        kwargs = adapter.encode(request(model, temperature=0.2, max_tokens=300, reasoning_budget=4000))  # type: ignore[attr-defined]
        assert "temperature" not in kwargs
        assert kwargs["max_completion_tokens"] == 300
        assert kwargs["reasoning_effort"] == "medium"
        adapter.encode(request(model, temperature=0.2))  # type: ignore[attr-defined]
        assert adapter.notes == [
            "temperature=0.2 dropped: openai:gpt-5.4-mini takes no sampling parameters (temperature, top_p)",
            "reasoning_budget=4000 sent as reasoning effort 'medium' (the model takes no budget)",
        ]
        # Behind another base URL (a proxy, this fake) a catalogued reasoning model still gets max_completion_tokens,
        # which the fake server, like OpenAI, insists on.
        result = call(model, options(server), request(model, temperature=0.2, max_tokens=300))
        assert result.response.message.tool_calls == (CALL,)
        assert "max_tokens" not in server.requests[-1].json()
        with pytest.raises(BadRequestError, match="max_completion_tokens"):
            call(model, options(server, max_tokens_field="max_tokens"), request(model, max_tokens=300))


def test_keys_come_from_the_environment_and_never_reach_a_message(
    monkeypatch: pytest.MonkeyPatch, no_provider_keys: None
) -> None:
    with pytest.raises(ConfigError, match="set OPENAI_API_KEY"):
        call("openai:gpt-4.1", {}, request("openai:gpt-4.1"))
    with FakeOpenAIServer(respond=weather_model, api_key=KEY) as server:
        monkeypatch.setenv("MY_OPENAI_KEY", KEY)
        ok = call("openai:gpt-4.1", {"base_url": server.base_url, "api_key_env": "MY_OPENAI_KEY"},
                  request("openai:gpt-4.1"))  # fmt: skip
        assert ok.response.message.tool_calls == (CALL,)
        with pytest.raises(AuthenticationError) as info:
            call("openai:gpt-4.1", {"base_url": server.base_url, "api_key": "sk-wrong-key"}, request("openai:gpt-4.1"))
        # a server echoing the key it refused: the message says ***, never the key
        server.enqueue(server.error(401, "auth", f"Incorrect API key provided: {KEY}"))
        with pytest.raises(AuthenticationError) as echoed:
            call("openai:gpt-4.1", options(server), request("openai:gpt-4.1"))
    assert "sk-wrong-key" not in str(info.value)
    assert KEY not in str(echoed.value)
    assert "***" in str(echoed.value)


def test_an_openai_compatible_server_needs_no_key_and_takes_the_budget_field_it_names(
    no_provider_keys: None,
) -> None:
    model = "openai:Qwen2.5-7B-Instruct"
    with FakeOpenAIServer(respond=weather_model) as server:
        result = call(model, {"base_url": server.base_url}, request(model, max_tokens=64))
        older = call(
            model, {"base_url": server.base_url, "max_tokens_field": "max_tokens"}, request(model, max_tokens=64)
        )
    assert result.response.message.tool_calls == older.response.message.tool_calls == (CALL,)
    current, old = (r.json() for r in server.requests)
    assert (current["max_completion_tokens"], "max_tokens" in current) == (64, False)
    assert (old["max_tokens"], "max_completion_tokens" in old) == (64, False)


def test_a_whole_tau_bench_conversation_replays_with_tool_rounds(
    tmp_path: Path, tau_conversations: list[de.Conversation], monkeypatch: pytest.MonkeyPatch
) -> None:
    convs = [c for c in tau_conversations if sum(1 for m in c.messages if m.tool_calls) >= 3][:2]
    behaviour = {"baseline": SimulatedBehaviour(), "candidate": SimulatedBehaviour(reword_rate=1.0, seed=3)}
    monkeypatch.setenv("FAKE_OPENAI_KEY", KEY)
    with FakeOpenAIServer(recordings=tau_conversations, behaviour=behaviour, api_key=KEY) as server:
        opts = {"base_url": server.base_url, "api_key_env": "FAKE_OPENAI_KEY"}
        result = de.run(
            conversations=convs,
            baseline=de.Variant(model="openai:baseline", provider_options=opts),
            candidate=de.Variant(model="openai:candidate", provider_options=opts, params={"stream": True}),
            prices={"openai:baseline": Price(input=1.0, output=2.0)},
            out=tmp_path / "run",
        )
    assert result.status == "completed"
    assert result.counts.pairs == result.counts.pairs_planned > 0
    assert result.counts.errors == 0
    con = result.connect()
    # the faithful baseline says what production said, tool rounds included
    rows = con.execute(
        "SELECT b.final_text = r.final_text, b.n_tool_calls = r.n_tool_calls FROM replays b JOIN replays r "
        "USING (pair_id) WHERE b.side = 'baseline' AND r.side = 'recorded' AND NOT b.hit_tool_cap"
    ).fetchall()
    assert rows
    assert all(same_text and same_calls for same_text, same_calls in rows)
    rounds = [r.json()["messages"] for r in server.requests]
    assert any(m["role"] == "tool" for messages in rounds for m in messages)
    costs = con.execute("SELECT side, min(cost_usd), min(input_tokens), max(ttft_ms) FROM replays "
                        "WHERE side <> 'recorded' GROUP BY side ORDER BY side").fetchall()  # fmt: skip
    (_base_side, base_cost, base_tokens, base_ttft), (_cand_side, cand_cost, cand_tokens, cand_ttft) = costs
    assert base_cost is not None
    assert base_cost > 0
    assert cand_cost is None  # openai:candidate has no price: unknown, never 0
    assert base_tokens > 0
    assert cand_tokens > 0
    assert base_ttft is None
    assert cand_ttft is not None
    assert con.execute("SELECT count(*) FROM replays WHERE served_model = 'candidate'").fetchone()[0] > 0


def test_arguments_that_are_not_json_are_kept_as_written_and_flagged() -> None:
    broken = ToolCall(id="call_9", name="get_weather", arguments='{"city": "Paris"')  # the model stopped short
    with FakeOpenAIServer(respond=lambda req: Message(role="assistant", tool_calls=(broken,))) as server:
        for stream in (False, True):
            result = call("openai:gpt-4.1", options(server), request("openai:gpt-4.1", stream=stream))
            [kept] = result.response.message.tool_calls
            assert kept.arguments == '{"city": "Paris"'
            assert not kept.arguments_valid


@pytest.mark.parametrize(
    ("messages", "params"),
    [
        (TOOL_ROUND, {"temperature": 0.2, "seed": 7, "extra": {"user": "u1", "logit_bias": {"50256": -100}}}),
        (ASK, {"stream": True}),  # the streamed body is built around the same kept messages
        ((*ASK, Message(role="user", content="a\x00delta-eval-kept-0\x00b")), {}),  # a text that holds a stand-in
        ((Message(role="user", content="see", media=(MediaPart.from_url("image", "https://e.com/a.png"),)),), {}),
        (TOOL_ROUND, {"extra": {"messages": [{"role": "user", "content": "replaced"}], "tools": []}}),
    ],
)
def test_the_body_built_from_kept_messages_is_the_bodys_json_byte_for_byte(
    messages: tuple[Message, ...], params: dict[str, object]
) -> None:
    adapter = create_adapter("openai:gpt-4.1-mini", {"base_url": "http://127.0.0.1:9/v1", "api_key": KEY})
    assert isinstance(adapter, ChatCompletionsAdapter)
    for _ in range(2):  # the second time from the kept JSON of the first
        body = adapter.encode(request("openai:gpt-4.1-mini", messages, **params))
        if params.get("stream"):
            body = adapter.stream_body(body)
        assert body_json(body) == json_body(body)
        assert json.loads(body_json(body)) == json.loads(json.dumps(body))


def test_reasoning_is_read_from_extra_fields_from_a_declared_field_or_not_at_all() -> None:
    from openai.types.chat import ChatCompletionMessage

    from delta_eval.adapters.openai_chat import _reasoning_text

    class Declared(ChatCompletionMessage):  # an SDK version that declares the field
        reasoning: str | None = None

    plain = {"role": "assistant", "content": "hi"}
    assert _reasoning_text(ChatCompletionMessage.model_validate(plain)) is None
    extra = ChatCompletionMessage.model_validate({**plain, "reasoning_content": "looked it up"})
    assert _reasoning_text(extra) == "looked it up"
    assert _reasoning_text(Declared.model_validate({**plain, "reasoning": "thought"})) == "thought"
    assert _reasoning_text(Declared.model_validate(plain)) is None
