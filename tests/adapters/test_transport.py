"""What the SDK clients run on: aiohttp's transport under the ``openai`` and ``anthropic`` SDKs where aiohttp is
installed (httpx's default transport otherwise), httpx for google-genai in every case (its own aiohttp path would
skip the rate-limit header hooks), and uvloop's event loop for a run, and for a fake server, where uvloop is
installed."""

from __future__ import annotations

import asyncio
import json

import pytest
from openai.types.chat import ChatCompletion

import delta_eval.adapters.base as base
import delta_eval.sync as sync
from delta_eval.adapters.base import typed_body
from delta_eval.adapters.registry import create_adapter
from delta_eval.exceptions import TransientError
from delta_eval.sync import run_loop
from delta_eval.testing import FakeAnthropicServer, FakeGeminiServer
from delta_eval.testing.servers.openai import FakeOpenAIServer
from tests.adapters.support import call, request


def transport_module(sdk_client: object) -> str:
    return type(sdk_client._client._transport).__module__  # type: ignore[attr-defined]


@pytest.mark.parametrize("model", ["openai:gpt-4.1", "anthropic:claude-sonnet-4-6"])
def test_the_sdk_clients_ride_on_aiohttp_where_it_is_installed(model: str) -> None:
    pytest.importorskip("aiohttp")
    servers = {"openai": FakeOpenAIServer, "anthropic": FakeAnthropicServer}
    with servers[model.split(":")[0]]() as server:
        url = server.base_url if isinstance(server, FakeOpenAIServer) else server.url
        options = {"base_url": url, "api_key": "k"}
        adapter = create_adapter(model, options)
        assert transport_module(adapter.clients.first).endswith("httpx_aiohttp.transport")  # type: ignore[attr-defined]
        result = call(model, options, request(model))
    assert result.response.message.tool_calls or result.response.message.content


def test_without_aiohttp_the_sdk_clients_keep_httpx(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base, "installed", lambda module: module != "aiohttp")
    adapter = create_adapter("openai:gpt-4.1", {"base_url": "http://127.0.0.1:9/v1", "api_key": "k"})
    assert transport_module(adapter.clients.first).split(".")[0] == "httpx2"  # type: ignore[attr-defined]


def test_gemini_keeps_httpx_whatever_is_installed() -> None:
    with FakeGeminiServer() as server:
        adapter = create_adapter("gemini:gemini-3.5-flash", {"base_url": server.url, "api_key": "k"})
        client = adapter.clients.first._api_client  # type: ignore[attr-defined]
        assert not client._use_aiohttp()
        result = call("gemini:gemini-3.5-flash", {"base_url": server.url, "api_key": "k"}, request("gemini:m"))
    assert result.response.message.tool_calls or result.response.message.content


def test_a_run_loop_is_uvloops_where_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("uvloop")

    async def loop_module() -> str:
        return type(asyncio.get_running_loop()).__module__

    assert run_loop(loop_module).startswith("uvloop")
    monkeypatch.setattr(sync, "installed", lambda module: module != "uvloop")
    assert run_loop(loop_module).startswith("asyncio")


def test_a_fake_servers_loop_is_uvloops_where_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake servers' own thread runs uvloop's loop too (a benchmark's server shares the machine with the run it
    serves), and serves the SDKs either way."""
    pytest.importorskip("uvloop")
    for kind in ("uvloop", "asyncio"):
        with FakeOpenAIServer() as server:
            assert server._loop is not None
            assert type(server._loop).__module__.startswith(kind)
            done = call("openai:gpt-4.1", {"base_url": server.base_url, "api_key": "k"}, request("gpt-4.1"))
            assert done.response.message.role == "assistant"
            assert done.response.usage is not None
        monkeypatch.setattr(sync, "installed", lambda module: module != "uvloop")


COMPLETION = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1700000000,
    "model": "baseline",
    "choices": [
        {
            "index": 0,
            "finish_reason": "tool_calls",
            "message": {
                "role": "assistant",
                "content": None,
                "reasoning_content": "look it up",
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
                ],
            },
        }
    ],
    "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12},
}


def test_a_response_body_reads_as_the_sdk_reads_it() -> None:
    """The one-pass reading gives the SDK's own object, extra fields included; a body off the type is read the
    SDK's lenient way, and one that is not a JSON object is a failed call."""
    body = json.dumps(COMPLETION).encode()
    fast = typed_body(ChatCompletion, body, model="openai:m")
    assert fast == ChatCompletion.construct(**COMPLETION)
    assert fast.choices[0].message.model_extra == {"reasoning_content": "look it up"}
    odd = {**COMPLETION, "choices": [{**COMPLETION["choices"][0], "finish_reason": "eos"}]}  # type: ignore[dict-item]
    assert typed_body(ChatCompletion, json.dumps(odd).encode(), model="openai:m").choices[0].finish_reason == "eos"
    with pytest.raises(TransientError, match="not a JSON object"):
        typed_body(ChatCompletion, b"<html>bad gateway</html>", model="openai:m")
