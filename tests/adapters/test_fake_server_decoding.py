"""How the fake servers read requests cheaply without reading them differently: bodies parsed as ``json.loads``
parses them, and the parts a conversation's requests repeat decoded once, to the very same canonical objects."""

from __future__ import annotations

import json

import httpx
import pytest

from delta_eval.calls import ModelRequest
from delta_eval.schema import Message
from delta_eval.testing.servers.anthropic import FakeAnthropicServer
from delta_eval.testing.servers.decoded import DecodedParts
from delta_eval.testing.servers.gemini import FakeGeminiServer
from delta_eval.testing.servers.http import parse_json
from delta_eval.testing.servers.openai import FakeOpenAIServer

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}}}]


@pytest.mark.parametrize(
    "body",
    [
        b'{"a": [1, 2.0, true, null], "b": "\\u00e9\xc3\xa9"}',
        b'{"a": 1, "a": 2}',  # the last value wins
        b'{"a": 123456789012345678901234567890}',
        b'{"a": "\\ud800"}',  # a lone surrogate
        b'{"a": 1e400}',  # infinity
        b'{"a": NaN}',
        b"\xef\xbb\xbf{}",  # a byte order mark
        '{"a": "é"}'.encode("utf-16"),
    ],
)
def test_a_body_parses_to_what_json_loads_gives(body: bytes) -> None:
    parsed, expected = parse_json(body), json.loads(body)
    assert repr(parsed) == repr(expected)


def test_a_body_that_is_not_json_fails_as_json_loads_fails() -> None:
    with pytest.raises(json.JSONDecodeError):
        parse_json(b'{"a": 1} trailing')


def test_a_part_equal_to_one_decoded_gets_the_object_built_then_and_only_then() -> None:
    memo = DecodedParts[object]()
    first = memo.get({"n": 1}, object)
    assert memo.get({"n": 1}, object) is first
    # Equal under ==, not the same JSON (or the reverse): built anew.
    assert memo.get({"n": 1.0}, object) is not first
    assert memo.get({"n": True}, object) is not first
    nan = memo.get({"n": float("nan")}, object)
    assert memo.get({"n": float("nan")}, object) is not nan  # a parsed NaN is not equal to another
    assert memo.get({"n": None}, object) is not nan  # though both are encoded as null


def test_the_repeated_history_of_a_conversation_decodes_to_the_same_objects() -> None:
    seen: list[ModelRequest] = []

    def respond(request: ModelRequest) -> Message:
        seen.append(request)
        return Message(role="assistant", content=f"answer {len(seen)}")

    history = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    later = [*history, {"role": "assistant", "content": "answer 1"}, {"role": "user", "content": "and?"}]
    with FakeOpenAIServer(respond=respond) as server:
        for messages in (history, later):
            body = {"model": "gpt-4.1-mini", "messages": messages, "tools": TOOLS}
            httpx.post(f"{server.base_url}/chat/completions", json=body).raise_for_status()
    first, second = seen
    assert second.messages[:2] == first.messages
    assert all(a is b for a, b in zip(first.messages, second.messages[:2], strict=True))
    assert second.tools is first.tools
    assert second.params is first.params
    # The log keeps each request's bytes; its parsed body only while it was answered.
    assert "data" not in vars(server.requests[0])
    assert server.requests[0].json()["messages"] == history


def test_anthropic_requests_sharing_a_history_decode_it_to_the_same_objects() -> None:
    seen: list[ModelRequest] = []

    def respond(request: ModelRequest) -> Message:
        seen.append(request)
        return Message(role="assistant", content=f"answer {len(seen)}")

    history = [{"role": "user", "content": "hi"}]
    later = [*history, {"role": "assistant", "content": [{"type": "text", "text": "answer 1"}]},
             {"role": "user", "content": "and?"}]  # fmt: skip
    tools = [{"name": "get_weather", "input_schema": {"type": "object", "properties": {}}}]
    with FakeAnthropicServer(respond=respond) as server:
        for messages in (history, later):
            body = {"model": "claude-sonnet-4-5", "max_tokens": 64, "system": "Be brief.", "messages": messages,
                    "tools": tools}  # fmt: skip
            httpx.post(f"{server.url}/v1/messages", json=body).raise_for_status()
    first, second = seen
    assert second.messages[:2] == first.messages
    assert all(a is b for a, b in zip(first.messages, second.messages[:2], strict=True))
    assert second.tools is first.tools
    assert second.params is first.params


def test_gemini_requests_sharing_a_history_decode_it_to_the_same_objects() -> None:
    seen: list[ModelRequest] = []

    def respond(request: ModelRequest) -> Message:
        seen.append(request)
        return Message(role="assistant", content=f"answer {len(seen)}")

    history = [{"role": "user", "parts": [{"text": "hi"}]}]
    later = [
        *history,
        {"role": "model", "parts": [{"text": "answer 1"}]},
        {"role": "user", "parts": [{"text": "and?"}]},
    ]
    tools = [{"function_declarations": [{"name": "get_weather", "parameters": {"type": "object", "properties": {}}}]}]
    with FakeGeminiServer(respond=respond) as server:
        for contents in (history, later):
            body = {"contents": contents, "system_instruction": {"parts": [{"text": "Be brief."}]}, "tools": tools}
            httpx.post(f"{server.url}/v1beta/models/gemini-2.5-flash:generateContent", json=body).raise_for_status()
    first, second = seen
    assert second.messages[:2] == first.messages
    assert all(a is b for a, b in zip(first.messages, second.messages[:2], strict=True))
    assert second.tools is first.tools
    assert second.params is first.params
