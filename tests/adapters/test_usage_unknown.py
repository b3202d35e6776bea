"""A reply without token usage (a proxy that strips it, a server that ignores ``include_usage``, a Gemini reply
without ``usageMetadata``) is unknown usage, never 0 tokens and $0: through each real SDK against the fakes."""

from __future__ import annotations

import pytest

from delta_eval.adapters.client import CallResult
from delta_eval.pricing import Spend, cost, price_for
from delta_eval.schema import Usage
from delta_eval.testing.servers.anthropic import FakeAnthropicServer
from delta_eval.testing.servers.gemini import FakeGeminiServer
from delta_eval.testing.servers.openai import FakeOpenAIServer
from delta_eval.testing.servers.provider import FakeProviderServer
from tests.adapters.support import ASK, call, request

KEY = "sk-test-not-a-real-key"
WIRES = {
    "openai:gpt-4.1-mini": FakeOpenAIServer,
    "openai-responses:gpt-4.1-mini": FakeOpenAIServer,
    "anthropic:claude-sonnet-4-5": FakeAnthropicServer,
    "gemini:gemini-2.5-flash": FakeGeminiServer,
}


def _call(model: str, server: FakeProviderServer, *, stream: bool) -> CallResult:
    url = server.base_url if isinstance(server, FakeOpenAIServer) else server.url
    return call(model, {"base_url": url, "api_key": KEY}, request(model, ASK, stream=stream, max_tokens=100))


@pytest.mark.parametrize("stream", [False, True], ids=["body", "stream"])
@pytest.mark.parametrize("model", list(WIRES))
def test_a_reply_without_usage_is_unknown_and_costs_unknown(model: str, stream: bool) -> None:
    with WIRES[model](usage=False) as server:
        result = _call(model, server, stream=stream)
    assert result.response.message.content  # the answer itself came through
    assert result.response.usage is None
    assert cost(result.response.usage, price_for(model)) is None
    spend = Spend()
    spend.add(Usage(input_tokens=10), cost_usd=0.01)
    spend.add(result.response.usage, cost_usd=cost(result.response.usage, price_for(model)))
    assert (spend.usage, spend.cost_usd, spend.unknown_usage) == (None, None, 1)


def test_the_openai_stream_of_a_server_ignoring_include_usage_has_no_usage_chunk() -> None:
    with FakeOpenAIServer(usage=False) as server:
        result = _call("openai:gpt-4.1-mini", server, stream=True)
        sent = server.requests[-1].json()
    assert sent["stream_options"] == {"include_usage": True}  # asked for, and ignored
    assert result.response.usage is None


@pytest.mark.parametrize("model", list(WIRES))
def test_a_reply_with_usage_still_reports_it(model: str) -> None:
    with WIRES[model]() as server:
        usage = _call(model, server, stream=False).response.usage
    assert usage is not None
    assert usage.input_tokens > 0
