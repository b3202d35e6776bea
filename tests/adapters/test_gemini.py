"""``gemini:`` through the real ``google-genai`` SDK against the fake Gemini server."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

import delta_eval as de
from delta_eval.adapters.gemini import encode_contents
from delta_eval.adapters.gemini_schema import sanitize
from delta_eval.adapters.registry import create_adapter
from delta_eval.adapters.simulated import SimulatedBehaviour
from delta_eval.calls import ModelRequest
from delta_eval.exceptions import BadRequestError, ConfigError, ContentFilterError, RateLimitError, TransientError
from delta_eval.schema import Message, ReasoningState, ToolCall, ToolSpec, Usage
from delta_eval.testing.servers.gemini import FakeGeminiServer, normalise
from delta_eval.testing.servers.http import JSONReply, StreamReply
from tests.adapters.support import ASK, FAST, call, request

KEY = "gemini-test-not-a-real-key"
MODEL = "gemini:gemini-2.5-flash"
GCALL = ToolCall(id="gemini_0_get_weather", name="get_weather", arguments='{"city": "Paris"}')
ROUND = (
    *ASK,
    Message(role="assistant", tool_calls=(GCALL,)),
    Message(role="tool", tool_call_id=GCALL.id, name="get_weather", content='{"temp_c":18}'),
)


def weather(req: ModelRequest) -> Message:
    if req.messages[-1].role == "tool":
        return Message(role="assistant", content="It is 18 C.")
    return Message(role="assistant", tool_calls=(GCALL,))


def options(server: FakeGeminiServer, **more: object) -> dict[str, object]:
    return {"base_url": server.url, "api_key": KEY, **more}


def test_a_tool_round_as_function_call_and_response_parts() -> None:
    with FakeGeminiServer(respond=weather, api_key=KEY) as server:
        first = call(MODEL, options(server), request(MODEL, temperature=0.2, max_tokens=256, seed=5))
        second = call(MODEL, options(server), request(MODEL, ROUND))
    assert first.response.message.tool_calls == (GCALL,)  # Gemini gave no id: one is made up, stable
    assert (first.response.finish_reason, first.response.provider_finish_reason) == ("tool_calls", "STOP")
    assert second.response.message.content == "It is 18 C."
    req = server.requests[1]
    assert req.path == "/v1beta/models/gemini-2.5-flash:generateContent"  # v1 has no systemInstruction nor tools
    assert req.headers["x-goog-api-key"] == "<redacted>"
    body = normalise(req.json())
    assert body["systemInstruction"]["parts"] == [{"text": "You are a weather bot."}]
    assert body["contents"] == [
        {"role": "user", "parts": [{"text": "Weather in Paris?"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "get_weather",
                                                         "response": {"output": '{"temp_c":18}'}}}]},
    ]  # fmt: skip
    declaration = body["tools"][0]["functionDeclarations"][0]
    assert declaration["parametersJsonSchema"]["required"] == ["city"]
    config = normalise(server.requests[0].json())["generationConfig"]
    assert (config["temperature"], config["maxOutputTokens"], config["seed"]) == (0.2, 256, 5)


def test_usage_from_the_wire_is_pinned_thoughts_counted_once() -> None:
    wire = {
        "candidates": [{"content": {"role": "model", "parts": [{"text": "It is 18 °C in Paris."}]},
                        "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 90, "cachedContentTokenCount": 64, "candidatesTokenCount": 9,
                          "thoughtsTokenCount": 40, "totalTokenCount": 139},
        "modelVersion": "gemini-x", "responseId": "r2",
    }  # fmt: skip
    folded = {**wire, "usageMetadata": {"promptTokenCount": 90, "candidatesTokenCount": 49, "thoughtsTokenCount": 40,
                                        "totalTokenCount": 139}}  # fmt: skip
    with FakeGeminiServer() as server:
        server.enqueue(JSONReply(wire), JSONReply(folded))
        r = call(MODEL, options(server), request(MODEL)).response
        f = call(MODEL, options(server), request(MODEL)).response
    assert r.usage == Usage(input_tokens=90, cached_input_tokens=64, output_tokens=49, reasoning_tokens=40)
    assert f.usage == Usage(input_tokens=90, output_tokens=49, reasoning_tokens=40)  # total shows thoughts inside
    assert (r.served_model, r.request_id) == ("gemini-x", "r2")


def test_tool_schemas_are_reduced_to_what_gemini_takes_and_said_once() -> None:
    code = {"type": "string", "pattern": "^[A-Z0-9]{6}$", "description": "Reservation code"}
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {"code": code, "kind": {"const": "flight"}, "pattern": {"type": "integer", "default": 1}},
        "required": ["code"],
    }
    clean, changes = sanitize(schema)
    assert clean == {
        "type": "object",
        "properties": {
            "code": {"type": "string", "description": "Reservation code (pattern: ^[A-Z0-9]{6}$)"},
            "kind": {"enum": ["flight"]},
            "pattern": {"type": "integer", "description": "default: 1"},  # a property named like a keyword stays
        },
        "required": ["code"],
    }
    assert changes == [
        "$schema dropped (an annotation)",
        "properties.code.pattern moved into the description",
        "properties.kind.const became an enum of one value",
        "properties.pattern.default moved into the description",
    ]
    tool = ToolSpec(name="lookup", description="Find a reservation", parameters=schema)
    adapter = create_adapter(MODEL, {"api_key": KEY})
    for _ in range(3):
        _, config = adapter.encode(ModelRequest(model=MODEL, messages=ASK, tools=(tool,)))  # type: ignore[attr-defined]
    assert config.tools[0].function_declarations[0].parameters_json_schema == clean
    assert len(adapter.notes) == 1
    assert adapter.notes[0].startswith("tool lookup: schema adapted for Gemini: $schema dropped")
    anyio.run(adapter.aclose)


def test_a_thinking_model_gets_its_thought_signatures_back(
    tmp_path: Path, tau_conversations: list[de.Conversation]
) -> None:
    conv = next(c for c in tau_conversations if sum(1 for m in c.messages if m.tool_calls) >= 3)
    with FakeGeminiServer(recordings=tau_conversations, behaviour=SimulatedBehaviour(reasoning_tokens=40),
                          api_key=KEY) as server:  # fmt: skip
        opts = options(server)
        # Gemini 3 takes both a budget and a level (2.5 Flash refuses a thinking level).
        model = "gemini:gemini-3-flash-preview"
        result = de.run(
            conversations=[conv],
            baseline=de.Variant(model=model, provider_options=opts, params={"reasoning_budget": 512}),
            candidate=de.Variant(model=model, name="streamed", provider_options=opts,
                                 params={"reasoning_effort": "low", "stream": True}),
            out=tmp_path / "run",
        )  # fmt: skip
    assert result.status == "completed"
    assert result.counts.errors == 0  # the server refuses a function call resent without its thought signature
    con = result.connect()
    assert (
        con.execute(
            "SELECT count(*) FROM (SELECT unnest(steps) AS s FROM replays WHERE side <> 'recorded') "
            "WHERE s.reasoning = 'Checking the policy before calling the tool.'"
        ).fetchone()[0]
        > 0
    )
    sent = [normalise(r.json()) for r in server.requests]
    assert any("thoughtSignature" in p for b in sent for c in b["contents"] if c["role"] == "model" for p in c["parts"])
    configs = {json.dumps(b["generationConfig"].get("thinkingConfig"), sort_keys=True) for b in sent}
    assert configs == {
        json.dumps({"thinkingBudget": 512, "includeThoughts": True}, sort_keys=True),
        json.dumps({"thinkingLevel": "LOW", "includeThoughts": True}, sort_keys=True),
    }


def test_signatures_go_only_to_the_model_that_made_them() -> None:
    parts = [{"text": "t", "thought": True}, {"function_call": {"name": "get_weather", "args": {"city": "Paris"}},
                                              "thought_signature": "c2ln"}]  # fmt: skip
    state = ReasoningState(provider="gemini", model="gemini-2.5-flash", data={"parts": parts})
    history = (*ASK, Message(role="assistant", tool_calls=(GCALL,), reasoning=state))
    assert encode_contents(history, "gemini-2.5-flash")[1][1]["parts"] == parts
    assert encode_contents(history, "gemini-2.5-pro")[1][1]["parts"] == [
        {"function_call": {"name": "get_weather", "args": {"city": "Paris"}}}
    ]


def test_streaming_and_a_cut_stream() -> None:
    with FakeGeminiServer(respond=weather) as server:
        streamed = call(MODEL, options(server), request(MODEL, ROUND, stream=True))
        assert streamed.response.message.content == "It is 18 C."
        assert streamed.response.ttft_ms is not None
        assert server.requests[-1].path.endswith(":streamGenerateContent")
        assert server.requests[-1].query == {"alt": "sse"}
        no_finish = {"candidates": [{"content": {"role": "model", "parts": [{"text": "It is"}]}, "index": 0}]}
        from delta_eval.testing.servers.provider import sse

        server.enqueue(StreamReply([sse(no_finish).replace(b"\n\n", b"\r\n\r\n")]))
        retried = call(MODEL, options(server), request(MODEL, ROUND, stream=True))
    assert retried.attempts == 2  # a stream without a finish reason is retried, not kept
    assert retried.response.message.content == "It is 18 C."


@pytest.mark.parametrize(
    ("status", "error", "retried"),
    [
        (429, RateLimitError, True),
        (500, TransientError, True),
        (503, TransientError, True),
        (400, BadRequestError, False),
    ],
)
def test_errors_map_to_the_retry_rules(status: int, error: type[Exception], retried: bool) -> None:
    with FakeGeminiServer(respond=weather) as server:
        server.enqueue(*[server.error(status, "x", f"failure {status}")] * 4)
        with pytest.raises(error) as info:
            call(MODEL, options(server), request(MODEL))
    assert len(server.requests) == (FAST.max_attempts if retried else 1)
    assert f"failure {status}" in str(info.value)


def test_retry_info_in_the_body_is_the_wait() -> None:
    limited = SimulatedBehaviour(rate_limit_rate=1.0, retry_after_s=7.0)
    with FakeGeminiServer(respond=weather, behaviour=limited) as server, pytest.raises(RateLimitError) as info:
        call(MODEL, options(server), request(MODEL), retry=de.RetryPolicy(max_attempts=1))
    assert info.value.retry_after == 7.0  # type: ignore[attr-defined]


def test_blocked_prompts_and_refused_answers() -> None:
    blocked = {"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {"promptTokenCount": 5}}
    malformed = {"candidates": [{"content": {"role": "model", "parts": []}, "finishReason": "MALFORMED_FUNCTION_CALL",
                                 "index": 0}]}  # fmt: skip
    with FakeGeminiServer() as server:
        server.enqueue(JSONReply(blocked), JSONReply(malformed))
        with pytest.raises(ContentFilterError, match="SAFETY"):
            call(MODEL, options(server), request(MODEL))
        with pytest.raises(BadRequestError, match="MALFORMED_FUNCTION_CALL"):
            call(MODEL, options(server), request(MODEL))


def test_the_key_comes_from_the_environment(no_provider_keys: None, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="GEMINI_API_KEY"):
        create_adapter(MODEL, {})
    monkeypatch.setenv("GEMINI_API_KEY", KEY)
    with FakeGeminiServer(respond=weather, api_key=KEY) as server:
        assert call(MODEL, {"base_url": server.url}, request(MODEL)).response.message.tool_calls == (GCALL,)
