"""``openai-responses:`` and ``azure:`` through the real ``openai`` SDK against the fake OpenAI server."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

import delta_eval as de
from delta_eval.adapters.registry import create_adapter
from delta_eval.adapters.simulated import SimulatedBehaviour
from delta_eval.exceptions import BadRequestError, ConfigError, RateLimitError
from delta_eval.schema import Message, ReasoningState, Usage
from delta_eval.testing.servers.http import JSONReply
from delta_eval.testing.servers.openai import FakeOpenAIServer
from tests.adapters.support import ASK, CALL, TOOL_ROUND, call, request
from tests.adapters.test_openai_chat import KEY, weather_model


def options(server: FakeOpenAIServer, **more: object) -> dict[str, object]:
    return {"base_url": server.base_url, "api_key": KEY, **more}


def test_a_tool_round_as_function_call_items() -> None:
    with FakeOpenAIServer(respond=weather_model, api_key=KEY) as server:
        first = call("openai-responses:gpt-4.1", options(server), request("openai-responses:gpt-4.1", max_tokens=99))
        second = call("openai-responses:gpt-4.1", options(server), request("openai-responses:gpt-4.1", TOOL_ROUND))
    assert first.response.message.tool_calls == (CALL,)
    assert first.response.finish_reason == "tool_calls"
    assert second.response.message.content == "It is 18 C."
    sent = server.requests[1].json()
    assert sent["instructions"] == "You are a weather bot."
    assert sent["store"] is False
    assert sent["input"] == [
        {"role": "user", "content": "Weather in Paris?"},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city":"Paris"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": '{"temp_c":18}'},
    ]
    assert server.requests[0].json()["max_output_tokens"] == 99
    assert server.requests[0].json()["tools"][0] == {
        "type": "function",
        "name": "get_weather",
        "description": "Current weather",
        "parameters": WEATHER_PARAMS,
        "strict": False,
    }


WEATHER_PARAMS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def test_usage_and_status_from_the_wire_are_pinned() -> None:
    # The reference's turn-1 response of a reasoning model: 61 input tokens, 40 output of which 24 reasoning.
    wire = {
        "id": "resp_1", "object": "response", "created_at": 1767225600, "status": "completed", "model": "gpt-x",
        "output": [
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAAB..."},
            {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather",
             "arguments": '{"city":"Paris"}', "status": "completed"},
        ],
        "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "error": None, "incomplete_details": None,
        "usage": {"input_tokens": 61, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 40,
                  "output_tokens_details": {"reasoning_tokens": 24}, "total_tokens": 101},
    }  # fmt: skip
    incomplete = {**wire, "status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}, "output": []}
    with FakeOpenAIServer() as server:
        server.enqueue(JSONReply(wire), JSONReply(incomplete))
        r = call("openai-responses:o4-mini", options(server), request("openai-responses:o4-mini")).response
        cut = call("openai-responses:o4-mini", options(server), request("openai-responses:o4-mini")).response
    assert r.usage == Usage(input_tokens=61, output_tokens=40, reasoning_tokens=24)
    assert r.message.tool_calls == (CALL,)
    assert r.message.reasoning == ReasoningState(
        provider="openai-responses",
        model="o4-mini",
        data={"items": [{"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAAB..."}]},
    )
    assert (cut.finish_reason, cut.provider_finish_reason) == ("length", "max_output_tokens")
    sent = server.requests[0].json()
    assert sent["include"] == ["reasoning.encrypted_content"]  # a reasoning model: its state is asked for


def test_reasoning_items_go_back_so_a_thinking_model_continues_its_turn(
    tmp_path: Path, tau_conversations: list[de.Conversation]
) -> None:
    conv = next(c for c in tau_conversations if sum(1 for m in c.messages if m.tool_calls) >= 3)
    thinking = SimulatedBehaviour(reasoning_tokens=24)
    # A verified organisation: the adapter asks for reasoning summaries, which OpenAI refuses to unverified ones.
    with FakeOpenAIServer(recordings=tau_conversations, behaviour=thinking, api_key=KEY,
                          verified_organization=True) as server:  # fmt: skip
        opts = options(server)
        result = de.run(
            conversations=[conv],
            baseline=de.Variant(model="openai-responses:o4-mini", provider_options=opts),
            candidate=de.Variant(model="openai-responses:o4-mini", name="streamed", provider_options=opts,
                                 params={"stream": True, "reasoning_effort": "low"}),
            out=tmp_path / "run",
        )  # fmt: skip
    assert result.status == "completed"
    assert result.counts.errors == 0  # the server refuses a function_call sent back without its reasoning item
    con = result.connect()
    summaries = con.execute(
        "SELECT count(*) FROM (SELECT unnest(steps) AS s FROM replays WHERE side <> 'recorded') "
        "WHERE s.reasoning IS NOT NULL"
    ).fetchone()[0]
    assert summaries > 0  # the reasoning summaries are on the replays
    rounds = [r.json()["input"] for r in server.requests]
    assert any(item.get("type") == "reasoning" for items in rounds for item in items)
    # The candidate's calls (streamed); the baseline's run concurrently, so the order of requests is not fixed.
    streamed = [r.json() for r in server.requests if r.json().get("stream")]
    assert streamed
    assert all(body["reasoning"] == {"effort": "low"} for body in streamed)  # summaries are opt-in


def test_reasoning_state_is_dropped_for_another_provider_or_model() -> None:
    from delta_eval.adapters.openai_responses import encode_input

    state = ReasoningState(provider="openai-responses", model="o4-mini", data={"items": [{"type": "reasoning"}]})
    history = (*ASK, Message(role="assistant", tool_calls=(CALL,), reasoning=state))
    assert encode_input(history, "o4-mini")[1][1] == {"type": "reasoning"}
    for other in ("o3", "gpt-4.1"):
        assert all(item.get("type") != "reasoning" for item in encode_input(history, other)[1])
    gemini = history[-1].model_copy(update={"reasoning": ReasoningState(provider="gemini", model="o4-mini")})
    assert all(item.get("type") != "reasoning" for item in encode_input((*ASK, gemini), "o4-mini")[1])


def test_a_failed_response_and_an_error_status_are_mapped() -> None:
    failed = {
        "id": "resp_9", "object": "response", "created_at": 1, "status": "failed", "model": "gpt-4.1", "output": [],
        "error": {"code": "server_error", "message": "boom"}, "incomplete_details": None, "parallel_tool_calls": True,
        "tool_choice": "auto", "tools": [],
    }  # fmt: skip
    with FakeOpenAIServer(respond=weather_model) as server:
        server.enqueue(JSONReply(failed))
        retried = call("openai-responses:gpt-4.1", options(server), request("openai-responses:gpt-4.1"))
        server.enqueue(*[server.error(429, "rate_limit", "slow")] * 4)
        with pytest.raises(RateLimitError):
            call("openai-responses:gpt-4.1", options(server), request("openai-responses:gpt-4.1"))
        server.enqueue(server.error(400, "context_length", "too long"))
        with pytest.raises(BadRequestError):
            call("openai-responses:gpt-4.1", options(server), request("openai-responses:gpt-4.1"))
    assert retried.attempts == 2  # a failed response is a server error: retried
    assert retried.response.message.tool_calls == (CALL,)


def test_parameters_the_responses_api_lacks_are_said_once() -> None:
    adapter = create_adapter("openai-responses:gpt-4.1", {"api_key": KEY})
    kwargs = adapter.encode(request("openai-responses:gpt-4.1", seed=3, stop=("END",), tool_choice="required"))  # type: ignore[attr-defined]
    assert "seed" not in kwargs
    assert "stop" not in kwargs
    assert kwargs["tool_choice"] == "required"
    assert adapter.notes == [
        "seed=3 dropped: the Responses API takes no seed",
        "stop sequences dropped: the Responses API takes none",
    ]
    anyio.run(adapter.aclose)


@pytest.mark.parametrize("v1", [False, True])
def test_azure_deployments_by_the_classic_or_the_v1_api(v1: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", KEY)
    with FakeOpenAIServer(respond=weather_model, api_key=KEY) as server:
        opts: dict[str, object] = {"endpoint": server.azure_endpoint}
        opts.update({"v1": True} if v1 else {"api_version": "2024-10-21"})
        chat = call("azure:gpt-4o-eval", opts, request("azure:gpt-4o-eval", max_tokens=50))
        responses = call("azure-responses:gpt-4o-eval", opts, request("azure-responses:gpt-4o-eval"))
    assert chat.response.message.tool_calls == (CALL,)
    assert responses.response.message.tool_calls == (CALL,)
    first, second = server.requests
    if v1:
        assert first.path == "/openai/v1/chat/completions"
        assert first.json()["model"] == "gpt-4o-eval"
        assert first.headers["authorization"] == "<redacted>"
    else:
        assert first.path == "/openai/deployments/gpt-4o-eval/chat/completions"
        assert first.query == {"api-version": "2024-10-21"}
        assert first.headers["api-key"] == "<redacted>"
        assert second.path == "/openai/responses"
    assert first.json()["max_completion_tokens"] == 50


def test_azure_says_what_is_missing(no_provider_keys: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AZURE_OPENAI_ENDPOINT", raising=False)
    monkeypatch.delenv("OPENAI_API_VERSION", raising=False)
    with pytest.raises(ConfigError, match="AZURE_OPENAI_ENDPOINT"):
        create_adapter("azure:d", {"api_key": KEY})
    with pytest.raises(ConfigError, match="api_version"):
        create_adapter("azure:d", {"api_key": KEY, "endpoint": "https://x.openai.azure.com"})
    with pytest.raises(ConfigError, match="AZURE_OPENAI_API_KEY"):
        create_adapter("azure:d", {"endpoint": "https://x.openai.azure.com", "v1": True})
    with pytest.raises(ConfigError, match="bad provider_options for azure:d"):
        create_adapter("azure:d", {"endpoint": "https://x", "api_vesion": "2024-10-21"})


def test_a_stream_without_its_completed_event_is_retried_never_kept(tmp_path: Path) -> None:
    from delta_eval.store.cache import SQLiteCache
    from delta_eval.testing.servers.http import StreamReply
    from delta_eval.testing.servers.provider import Answer, Route

    answer = Answer(
        route=Route("gpt-4.1", True, "responses"),
        model="gpt-4.1",
        message=Message(role="assistant", content="partial answer"),
        usage=Usage(input_tokens=10, output_tokens=3),
        finish="stop",
        thinking=False,
        response_id="000077",
    )
    with FakeOpenAIServer(respond=weather_model) as server:
        events = server.encode_stream(answer)
        server.enqueue(StreamReply(events[:-1]))  # everything but response.completed, then a clean end
        cache = SQLiteCache(tmp_path / "cache.sqlite")
        result = call(
            "openai-responses:gpt-4.1", options(server), request("openai-responses:gpt-4.1", stream=True), cache=cache
        )
        assert result.attempts == 2
        assert result.response.message.tool_calls == (CALL,)  # the retry's whole answer, not the partial one
        assert result.response.ttft_ms is not None
        assert len(cache) == 1
        cache.close()
