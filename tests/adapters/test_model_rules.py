"""The fake servers refuse what each real model refuses (and accept what it accepts), with the provider's own status
and error body; the Responses fake carries every field and event OpenAI's spec marks required; usage arrives where
each provider puts it. Requests here are raw HTTP, independent of the adapters, except where an adapter's reading
of the wire is the point."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest

from delta_eval.adapters.registry import create_adapter
from delta_eval.adapters.simulated import SimulatedBehaviour
from delta_eval.calls import ModelRequest
from delta_eval.schema import Message, ToolCall
from delta_eval.testing.servers.anthropic import FakeAnthropicServer
from delta_eval.testing.servers.gemini import FakeGeminiServer
from delta_eval.testing.servers.http import StreamReply
from delta_eval.testing.servers.model_rules import known_families
from delta_eval.testing.servers.openai import FakeOpenAIServer
from delta_eval.testing.servers.provider import sse
from tests.adapters.support import call, request

CALL = ToolCall(id="call_1", name="get_weather", arguments='{"city":"Paris"}')
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


def hello(req: ModelRequest) -> Message:
    return Message(role="assistant", content="hello")


@pytest.fixture(scope="module")
def openai_server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(respond=hello) as server:
        yield server


@pytest.fixture(scope="module")
def anthropic_server() -> Iterator[FakeAnthropicServer]:
    with FakeAnthropicServer(respond=hello) as server:
        yield server


@pytest.fixture(scope="module")
def gemini_server() -> Iterator[FakeGeminiServer]:
    with FakeGeminiServer(respond=hello) as server:
        yield server


def chat(server: FakeOpenAIServer, model: str, **extra: Any) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], **extra}
    return httpx.post(f"{server.base_url}/chat/completions", json=body, timeout=10)


def responses(server: FakeOpenAIServer, model: str, **extra: Any) -> httpx.Response:
    return httpx.post(f"{server.base_url}/responses", json={"model": model, "input": "hi", **extra}, timeout=10)


def messages(server: FakeAnthropicServer, model: str, **extra: Any) -> httpx.Response:
    body = {"model": model, "max_tokens": 4096, "messages": [{"role": "user", "content": "hi"}], **extra}
    # The older API version, which still takes sampling parameters: what is refused here is the model's doing.
    return httpx.post(f"{server.url}/v1/messages", json=body, headers={"anthropic-version": "2023-06-01"}, timeout=10)


def generate(server: FakeGeminiServer, model: str, body: dict[str, Any], version: str = "v1beta") -> httpx.Response:
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}], **body}
    return httpx.post(f"{server.url}/{version}/models/{model}:generateContent", json=body, timeout=10)


def thinking(**config: Any) -> dict[str, Any]:
    return {"generationConfig": {"thinkingConfig": config}}


# -- OpenAI -------------------------------------------------------------------------------------------------------

# (family, model, extra body, refused param or None when accepted)
OPENAI_CHAT: list[tuple[str, str, dict[str, Any], str | None]] = [
    ("gpt-4o", "gpt-4o", {"reasoning_effort": "low"}, "reasoning_effort"),
    ("gpt-4o", "gpt-4o-mini", {"temperature": 0.2, "stop": ["x"], "max_tokens": 100}, None),
    ("gpt-4.1", "gpt-4.1", {"reasoning_effort": "high"}, "reasoning_effort"),
    ("gpt-4.1", "gpt-4.1-mini", {"temperature": 0.2, "presence_penalty": 0.5, "logprobs": True}, None),
    ("gpt-5-chat", "gpt-5-chat-latest", {"reasoning_effort": "low"}, "reasoning_effort"),
    ("gpt-5-chat", "gpt-5-chat-latest", {"temperature": 0.2}, None),
    ("o-series", "o3", {"temperature": 0.2}, "temperature"),
    ("o-series", "o4-mini", {"top_p": 0.5}, "top_p"),
    ("o-series", "o3", {"stop": ["x"]}, "stop"),
    ("o-series", "o3-mini", {"tools": TOOLS, "parallel_tool_calls": False}, "parallel_tool_calls"),
    ("o-series", "o1", {"presence_penalty": 0.5}, "presence_penalty"),
    ("o-series", "o4-mini", {"frequency_penalty": 0.5}, "frequency_penalty"),
    ("o-series", "o3", {"logprobs": True}, "logprobs"),
    ("o-series", "o4-mini", {"reasoning_effort": "minimal"}, "reasoning_effort"),
    ("o-series", "o3", {"reasoning_effort": "none"}, "reasoning_effort"),
    ("o-series", "o3", {"max_tokens": 100}, "max_tokens"),
    ("o-series", "o4-mini", {"reasoning_effort": "high", "max_completion_tokens": 100, "temperature": 1}, None),
    ("gpt-5", "gpt-5", {"reasoning_effort": "none"}, "reasoning_effort"),
    ("gpt-5", "gpt-5-mini", {"temperature": 0.2}, "temperature"),
    ("gpt-5", "gpt-5-nano", {"max_tokens": 100}, "max_tokens"),
    ("gpt-5", "gpt-5-mini", {"reasoning_effort": "minimal", "tools": TOOLS, "parallel_tool_calls": True}, None),
    ("gpt-5-pro", "gpt-5-pro", {"reasoning_effort": "low"}, "reasoning_effort"),
    ("gpt-5-pro", "gpt-5-pro", {"reasoning_effort": "high"}, None),
    ("gpt-5.1", "gpt-5.1", {"reasoning_effort": "minimal"}, "reasoning_effort"),
    ("gpt-5.1", "gpt-5.1", {"reasoning_effort": "xhigh"}, "reasoning_effort"),
    ("gpt-5.1", "gpt-5.1", {"reasoning_effort": "low", "temperature": 0.2}, "temperature"),
    ("gpt-5.1", "gpt-5.1", {"reasoning_effort": "medium", "logprobs": True}, "logprobs"),
    ("gpt-5.1", "gpt-5.1", {"reasoning_effort": "none", "temperature": 0.2, "logprobs": True}, None),
    ("gpt-5.1", "gpt-5.1", {"temperature": 0.2}, None),  # its default effort is none
    ("gpt-5.2-5.5", "gpt-5.4", {"reasoning_effort": "minimal"}, "reasoning_effort"),
    ("gpt-5.2-5.5", "gpt-5.5", {"reasoning_effort": "high", "top_p": 0.5}, "top_p"),
    ("gpt-5.2-5.5", "gpt-5.2", {"max_tokens": 10}, "max_tokens"),
    ("gpt-5.2-5.5", "gpt-5.4-mini", {"reasoning_effort": "xhigh"}, None),
    ("gpt-5.6", "gpt-5.6", {"reasoning_effort": "none", "temperature": 0.2}, "temperature"),
    ("gpt-5.6", "gpt-5.6", {"reasoning_effort": "minimal"}, "reasoning_effort"),
    ("gpt-5.6", "gpt-5.6", {"reasoning_effort": "none"}, None),
    ("gpt-6", "gpt-6", {"temperature": 0.2}, "temperature"),
    ("gpt-6", "gpt-6-mini", {"reasoning_effort": "minimal"}, "reasoning_effort"),
    ("gpt-6", "gpt-6", {"reasoning_effort": "high", "max_completion_tokens": 100}, None),
]


@pytest.mark.parametrize(("family", "model", "extra", "param"), OPENAI_CHAT)
def test_openai_chat_completions_refuses_what_the_model_refuses(
    openai_server: FakeOpenAIServer, family: str, model: str, extra: dict[str, Any], param: str | None
) -> None:
    reply = chat(openai_server, model, **extra)
    if param is None:
        assert reply.status_code == 200, reply.text
        return
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["type"], error["param"]) == ("invalid_request_error", param)
    assert error["code"] in ("unsupported_parameter", "unsupported_value")
    assert param in error["message"] or str(extra.get(param)) in error["message"]


OPENAI_RESPONSES: list[tuple[str, str, dict[str, Any], str | None]] = [
    ("o-series", "o3", {"reasoning": {"effort": "minimal"}}, "reasoning.effort"),
    ("gpt-4o", "gpt-4o", {"reasoning": {"effort": "low"}}, "reasoning.effort"),
    ("gpt-5.1", "gpt-5.1", {"reasoning": {"effort": "low"}, "temperature": 0.5}, "temperature"),
    ("gpt-5", "gpt-5", {"reasoning": {"effort": "minimal"}, "max_output_tokens": 100}, None),
]


@pytest.mark.parametrize(("family", "model", "extra", "param"), OPENAI_RESPONSES)
def test_openai_responses_refuses_what_the_model_refuses(
    openai_server: FakeOpenAIServer, family: str, model: str, extra: dict[str, Any], param: str | None
) -> None:
    reply = responses(openai_server, model, **extra)
    assert reply.status_code == (200 if param is None else 400), reply.text
    if param is not None:
        assert reply.json()["error"]["param"] == param


def test_reasoning_summaries_are_refused_to_an_unverified_organisation(openai_server: FakeOpenAIServer) -> None:
    reply = responses(openai_server, "o4-mini", reasoning={"effort": "low", "summary": "auto"})
    assert reply.status_code == 400
    assert reply.json()["error"] == {
        "message": reply.json()["error"]["message"],
        "type": "invalid_request_error",
        "param": "reasoning.summary",
        "code": "unsupported_value",
    }
    assert reply.json()["error"]["message"].startswith("Your organization must be verified")
    with FakeOpenAIServer(respond=hello, verified_organization=True) as verified:
        assert responses(verified, "o4-mini", reasoning={"effort": "low", "summary": "auto"}).status_code == 200


def test_an_unknown_model_is_accepted(openai_server: FakeOpenAIServer, gemini_server: FakeGeminiServer) -> None:
    assert (
        chat(openai_server, "my-fine-tune", temperature=0.3, reasoning_effort="minimal", stop=["x"]).status_code == 200
    )
    assert generate(gemini_server, "gemini-9-ultra", thinking(thinkingLevel="LOW", thinkingBudget=5)).status_code == 200


# -- Azure classic api-versions -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "extra", "refused"),
    [
        ("2024-10-21", {"stream": True, "stream_options": {"include_usage": True}}, "stream_options"),
        ("2024-10-21", {"reasoning_effort": "low"}, "reasoning_effort"),
        ("2024-10-21", {"max_completion_tokens": 10, "seed": 1, "tools": TOOLS, "parallel_tool_calls": True}, None),
        ("2025-04-01-preview", {"stream": True, "stream_options": {"include_usage": True}}, None),
    ],
)
def test_azure_refuses_what_its_api_version_does_not_declare(
    openai_server: FakeOpenAIServer, version: str, extra: dict[str, Any], refused: str | None
) -> None:
    url = f"{openai_server.url}/openai/deployments/gpt-4o/chat/completions?api-version={version}"
    reply = httpx.post(url, json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], **extra})
    if refused is None:
        assert reply.status_code == 200, reply.text
        return
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["message"] == f"Unrecognized request argument supplied: {refused}"
    assert (error["type"], error["code"]) == ("invalid_request_error", None)


def test_the_azure_adapter_sends_only_what_its_api_version_declares() -> None:
    with FakeOpenAIServer(respond=hello) as server:
        options = {"endpoint": server.url, "api_key": "k", "api_version": "2024-10-21"}

        async def go() -> tuple[Any, list[str]]:
            adapter = create_adapter("azure:o3", options)  # a reasoning deployment: it takes an effort
            try:
                return await adapter.generate(request("azure:o3", stream=True, reasoning_effort="low")), adapter.notes
            finally:
                await adapter.aclose()

        response, notes = anyio.run(go)
    assert response.message.content == "hello"
    sent = server.requests[-1].json()
    assert "stream_options" not in sent
    assert "reasoning_effort" not in sent
    assert "stream_options dropped: Azure api-version 2024-10-21 does not declare it" in notes
    assert "reasoning_effort dropped: Azure api-version 2024-10-21 does not declare it" in notes


# -- Anthropic ----------------------------------------------------------------------------------------------------

ENABLED = {"type": "enabled", "budget_tokens": 2048}
ADAPTIVE = {"thinking": {"type": "adaptive"}, "output_config": {"effort": "high"}}
ANTHROPIC: list[tuple[str, str, dict[str, Any], str | None]] = [
    ("claude-3-5-haiku", "claude-3-5-haiku-20241022", {"thinking": ENABLED}, "thinking"),
    ("claude-3-5-haiku", "claude-3-5-haiku-20241022", {"temperature": 0.2}, None),
    ("claude-3-7-sonnet", "claude-3-7-sonnet-20250219", {"thinking": {"type": "adaptive"}}, "adaptive"),
    (
        "claude-3-7-sonnet",
        "claude-3-7-sonnet-20250219",
        {"thinking": {"type": "enabled", "budget_tokens": 512}},
        "1024",
    ),
    ("claude-3-7-sonnet", "claude-3-7-sonnet-20250219", {"thinking": ENABLED}, None),
    ("claude-4", "claude-sonnet-4-20250514", {"thinking": {"type": "adaptive"}}, "adaptive"),
    ("claude-4", "claude-opus-4-1", {"output_config": {"effort": "low"}}, "effort"),
    ("claude-4", "claude-opus-4", {"thinking": ENABLED, "temperature": 1}, None),
    ("claude-4-5", "claude-sonnet-4-5", {"output_config": {"effort": "low"}}, "effort"),
    ("claude-4-5", "claude-haiku-4-5-20251001", {"thinking": {"type": "adaptive"}}, "adaptive"),
    ("claude-4-5", "claude-sonnet-4-5", {"thinking": ENABLED}, None),
    ("claude-opus-4-5", "claude-opus-4-5", {"thinking": {"type": "adaptive"}}, "adaptive"),
    ("claude-opus-4-5", "claude-opus-4-5", {"thinking": ENABLED, "output_config": {"effort": "medium"}}, None),
    ("claude-4-6", "claude-opus-4-6", ADAPTIVE, None),
    ("claude-4-6", "claude-sonnet-4-6", {"thinking": ENABLED}, None),
    ("claude-4-6", "claude-sonnet-4-6", {"thinking": {"type": "enabled", "budget_tokens": 100}}, "1024"),
    ("claude-adaptive-only", "claude-opus-4-7", {"thinking": ENABLED}, "thinking.type.enabled"),
    ("claude-adaptive-only", "claude-sonnet-5", {"thinking": {"type": "disabled"}}, "thinking.type.disabled"),
    ("claude-adaptive-only", "claude-opus-4-8", {"temperature": 0.5}, "temperature"),
    ("claude-adaptive-only", "claude-haiku-5-5", {"top_k": 5}, "top_k"),
    ("claude-adaptive-only", "claude-opus-5", ADAPTIVE, None),
]


@pytest.mark.parametrize(("family", "model", "extra", "refusal"), ANTHROPIC)
def test_anthropic_refuses_what_the_model_refuses(
    anthropic_server: FakeAnthropicServer, family: str, model: str, extra: dict[str, Any], refusal: str | None
) -> None:
    reply = messages(anthropic_server, model, **extra)
    if refusal is None:
        assert reply.status_code == 200, reply.text
        return
    assert reply.status_code == 400
    body = reply.json()
    assert (body["type"], body["error"]["type"]) == ("error", "invalid_request_error")
    assert refusal in body["error"]["message"]


# -- Gemini -------------------------------------------------------------------------------------------------------

GEMINI: list[tuple[str, str, dict[str, Any], str | None]] = [
    ("gemini-2.0-flash", "gemini-2.0-flash", thinking(thinkingBudget=0), "thinking_config is not supported"),
    ("gemini-2.0-flash", "gemini-2.0-flash-lite", {"generationConfig": {"temperature": 0.2}}, None),
    ("gemini-2.5-pro", "gemini-2.5-pro", thinking(thinkingBudget=0), "only works in thinking mode"),
    ("gemini-2.5-pro", "gemini-2.5-pro", thinking(thinkingBudget=64), "between 128 and 32768"),
    ("gemini-2.5-pro", "gemini-2.5-pro", thinking(thinkingBudget=40000), "between 128 and 32768"),
    ("gemini-2.5-pro", "gemini-2.5-pro", thinking(thinkingLevel="HIGH"), "Thinking level is not supported"),
    ("gemini-2.5-pro", "gemini-2.5-pro", thinking(thinkingBudget=-1), None),
    ("gemini-2.5-pro", "gemini-2.5-pro", thinking(thinking_budget=128), None),  # snake_case is read too
    ("gemini-2.5-flash-lite", "gemini-2.5-flash-lite", thinking(thinkingBudget=100), "between 512 and 24576"),
    ("gemini-2.5-flash-lite", "gemini-2.5-flash-lite", thinking(thinkingBudget=0), None),
    ("gemini-2.5-flash-lite", "gemini-2.5-flash-lite", thinking(thinkingBudget=512), None),
    ("gemini-2.5-flash", "gemini-2.5-flash", thinking(thinkingBudget=30000), "between 0 and 24576"),
    ("gemini-2.5-flash", "gemini-2.5-flash", thinking(thinkingLevel="LOW"), "Thinking level is not supported"),
    ("gemini-2.5-flash", "gemini-2.5-flash", thinking(thinkingBudget=0), None),
    ("gemini-2.5-flash", "gemini-2.5-flash", thinking(thinkingBudget=-1, includeThoughts=True), None),
    ("gemini-3-pro", "gemini-3-pro-preview", thinking(thinkingLevel="MINIMAL"), "MINIMAL is not supported"),
    ("gemini-3-pro", "gemini-3-pro-preview", thinking(thinkingLevel="MEDIUM"), "MEDIUM is not supported"),
    ("gemini-3.1-pro", "gemini-3.1-pro-preview", thinking(thinkingLevel="MINIMAL"), "MINIMAL is not supported"),
    ("gemini-3.1-pro", "gemini-3.1-pro-preview", thinking(thinkingLevel="MEDIUM"), None),
    ("gemini-3-pro", "gemini-3-pro-preview", thinking(thinkingLevel="LOW", thinkingBudget=1024), "only set one"),
    ("gemini-3-pro", "gemini-3-pro-preview", thinking(thinkingLevel="LOW"), None),
    ("gemini-3-pro", "gemini-3-pro-preview", thinking(thinkingBudget=1024), None),  # accepted for compatibility
    ("gemini-3-flash", "gemini-3-flash-preview", thinking(thinkingLevel="HIGH", thinkingBudget=-1), "only set one"),
    ("gemini-3-flash", "gemini-3-flash-preview", thinking(thinkingLevel="MINIMAL"), None),
    ("gemini-3-flash", "gemini-3.5-flash", thinking(thinkingLevel="medium"), None),
]


@pytest.mark.parametrize(("family", "model", "body", "refusal"), GEMINI)
def test_gemini_refuses_what_the_model_refuses(
    gemini_server: FakeGeminiServer, family: str, model: str, body: dict[str, Any], refusal: str | None
) -> None:
    reply = generate(gemini_server, model, body)
    if refusal is None:
        assert reply.status_code == 200, reply.text
        return
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert (error["code"], error["status"]) == (400, "INVALID_ARGUMENT")
    assert refusal in error["message"]


@pytest.mark.parametrize(
    ("body", "unknown"),
    [
        ({"systemInstruction": {"parts": [{"text": "be brief"}]}}, '"systemInstruction"'),
        ({"system_instruction": {"parts": [{"text": "be brief"}]}}, '"system_instruction"'),
        ({"tools": [{"functionDeclarations": [{"name": "f"}]}]}, '"tools"'),
        ({"toolConfig": {"functionCallingConfig": {"mode": "AUTO"}}}, '"toolConfig"'),
        (thinking(thinkingBudget=512), "\"thinkingConfig\" at 'generation_config'"),
        ({"generationConfig": {"responseMimeType": "application/json"}}, '"responseMimeType"'),
        ({"generationConfig": {"temperature": 0.2, "maxOutputTokens": 10}}, None),
    ],
)
def test_gemini_v1_refuses_what_only_v1beta_defines(
    gemini_server: FakeGeminiServer, body: dict[str, Any], unknown: str | None
) -> None:
    assert generate(gemini_server, "gemini-2.5-flash", body, "v1beta").status_code == 200
    reply = generate(gemini_server, "gemini-2.5-flash", body, "v1")
    if unknown is None:
        assert reply.status_code == 200
        return
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["status"] == "INVALID_ARGUMENT"
    assert error["message"].startswith(f"Invalid JSON payload received. Unknown name {unknown}")


# -- every family is checked both ways ----------------------------------------------------------------------------


def test_every_known_family_has_a_refused_and_an_accepted_case() -> None:
    cases = OPENAI_CHAT + OPENAI_RESPONSES + ANTHROPIC + GEMINI
    refused = {family for family, _, _, outcome in cases if outcome is not None}
    accepted = {family for family, _, _, outcome in cases if outcome is None}
    names = {family.name for family in known_families()}
    assert names - refused == set()
    assert names - accepted == set()
    for family in known_families():
        assert family.source.startswith("https://"), family.name
        assert all(family.matches(model) for model in family.examples), family.name


# -- Responses: every field and event the spec marks required ---------------------------------------------------

# Hand lists of the ``required`` arrays in openai/openai-openapi's openapi.yaml (the Response schema's allOf, the
# output items and the stream events), so the test needs no copy of the spec.
RESPONSE = {
    "id",
    "object",
    "created_at",
    "error",
    "incomplete_details",
    "instructions",
    "metadata",
    "model",
    "output",
    "parallel_tool_calls",
    "temperature",
    "tool_choice",
    "tools",
    "top_p",
}
USAGE = {"input_tokens", "input_tokens_details", "output_tokens", "output_tokens_details", "total_tokens"}
ITEMS = {
    "message": {"content", "id", "role", "status", "type"},
    "function_call": {"arguments", "call_id", "name", "type"},
    "reasoning": {"id", "summary", "type"},
}
OUTPUT_TEXT = {"annotations", "logprobs", "text", "type"}
EVENTS = {
    "response.created": {"response"},
    "response.in_progress": {"response"},
    "response.output_item.added": {"item", "output_index"},
    "response.content_part.added": {"content_index", "item_id", "output_index", "part"},
    "response.output_text.delta": {"content_index", "delta", "item_id", "logprobs", "output_index"},
    "response.output_text.done": {"content_index", "item_id", "logprobs", "output_index", "text"},
    "response.content_part.done": {"content_index", "item_id", "output_index", "part"},
    "response.output_item.done": {"item", "output_index"},
    "response.function_call_arguments.delta": {"delta", "item_id", "output_index"},
    "response.function_call_arguments.done": {"arguments", "item_id", "name", "output_index"},
    "response.reasoning_summary_part.added": {"item_id", "output_index", "part", "summary_index"},
    "response.reasoning_summary_text.delta": {"delta", "item_id", "output_index", "summary_index"},
    "response.reasoning_summary_text.done": {"item_id", "output_index", "summary_index", "text"},
    "response.reasoning_summary_part.done": {"item_id", "output_index", "part", "summary_index"},
    "response.completed": {"response"},
}


def both(req: ModelRequest) -> Message:
    return Message(role="assistant", content="Let me check the weather for you.", tool_calls=(CALL,))


def check_response(response: dict[str, Any]) -> None:
    assert RESPONSE - set(response) == set()
    for item in response["output"]:
        assert ITEMS[item["type"]] - set(item) == set(), item["type"]
        for part in item.get("content") or []:
            assert OUTPUT_TEXT - set(part) == set()
    if response["status"] == "completed":
        assert USAGE - set(response["usage"]) == set()


def test_the_responses_fake_carries_every_required_field_and_event() -> None:
    body = {
        "model": "o4-mini",
        "input": "Weather in Paris?",
        "instructions": "Be brief.",
        "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}],
        "metadata": {"run": "t"},
    }
    thinks = SimulatedBehaviour(reasoning_tokens=10)
    with FakeOpenAIServer(respond=both, behaviour=thinks) as server:
        whole = httpx.post(f"{server.base_url}/responses", json=body).json()
        streamed = httpx.post(f"{server.base_url}/responses", json={**body, "stream": True}).text
    check_response(whole)
    assert (whole["instructions"], whole["metadata"], whole["tools"]) == ("Be brief.", {"run": "t"}, body["tools"])
    assert [item["type"] for item in whole["output"]] == ["reasoning", "message", "function_call"]
    events = [json.loads(line[6:]) for line in streamed.splitlines() if line.startswith("data: ")]
    assert {event["type"] for event in events} == set(EVENTS)
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    for event in events:
        assert (EVENTS[event["type"]] | {"type", "sequence_number"}) - set(event) == set(), event["type"]
        if "response" in event:
            check_response(event["response"])
        if "item" in event:
            assert ITEMS[event["item"]["type"]] - set(event["item"]) == set()


# -- usage where each provider puts it ------------------------------------------------------------------------------


def test_a_chat_stream_carries_usage_only_when_asked(openai_server: FakeOpenAIServer) -> None:
    def chunks(**extra: Any) -> list[Any]:
        text = chat(openai_server, "gpt-4.1", stream=True, **extra).text
        return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]

    assert all("usage" not in chunk for chunk in chunks())
    asked = chunks(stream_options={"include_usage": True})
    assert [("usage" in chunk) for chunk in asked] == [False] * (len(asked) - 1) + [True]
    assert asked[-1]["choices"] == []


def test_anthropic_streams_the_final_output_count_in_message_delta() -> None:
    with FakeAnthropicServer(respond=hello) as server:
        text = httpx.post(
            f"{server.url}/v1/messages",
            json={
                "model": "claude-sonnet-4-5",
                "max_tokens": 100,
                "stream": True,
                "messages": [{"role": "user", "content": "hi"}],
            },
        ).text
        events = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]
        start = next(e for e in events if e["type"] == "message_start")["message"]["usage"]
        delta = next(e for e in events if e["type"] == "message_delta")["usage"]
        assert start["output_tokens"] == 1
        assert start["input_tokens"] > 0
        assert delta["output_tokens"] > 1
        # The adapter reads the final count, not message_start's placeholder.
        server.enqueue(StreamReply([sse(e, event=e["type"]) for e in events]))
        result = call(
            "anthropic:claude-sonnet-4-5",
            {"base_url": server.url, "api_key": "k"},
            request("anthropic:claude-sonnet-4-5", stream=True),
        )
    assert result.response.usage.output_tokens == delta["output_tokens"]


def test_gemini_streams_usage_on_each_chunk_and_the_adapter_reads_the_totals() -> None:
    thinks = SimulatedBehaviour(reasoning_tokens=40)
    with FakeGeminiServer(respond=hello, behaviour=thinks) as server:
        url = f"{server.url}/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
        text = httpx.post(url, json={"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}).text
        chunks = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]
        assert len(chunks) > 1
        assert all("usageMetadata" in chunk for chunk in chunks)
        final = chunks[-1]["usageMetadata"]
        assert final["thoughtsTokenCount"] == 40
        assert final["totalTokenCount"] > chunks[0]["usageMetadata"]["totalTokenCount"]
        server.enqueue(StreamReply([sse(chunk) for chunk in chunks]))
        result = call(
            "gemini:gemini-2.5-flash",
            {"base_url": server.url, "api_key": "k"},
            request("gemini:gemini-2.5-flash", stream=True),
        )
    usage = result.response.usage
    assert (usage.input_tokens, usage.reasoning_tokens) == (final["promptTokenCount"], 40)
    assert usage.output_tokens == final["candidatesTokenCount"] + 40


def test_the_chat_adapter_reads_the_usage_of_the_last_chunk() -> None:
    with FakeOpenAIServer(respond=hello) as server:
        result = call(
            "openai:gpt-4.1", {"base_url": server.base_url, "api_key": "k"}, request("openai:gpt-4.1", stream=True)
        )
        sent = server.requests[-1].json()
    assert sent["stream_options"] == {"include_usage": True}
    assert result.response.usage.output_tokens > 0
    assert result.response.usage.input_tokens > 0
