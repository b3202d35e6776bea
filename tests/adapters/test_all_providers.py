"""What every adapter promises, checked for each one through its real SDK against its fake server."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import delta_eval as de
from delta_eval.adapters.simulated import SimulatedBehaviour
from delta_eval.exceptions import ContextLengthError, RateLimitError, TransientError
from delta_eval.testing import FakeAnthropicServer, FakeGeminiServer, FakeOpenAIServer
from delta_eval.testing.servers.provider import FakeProviderServer
from tests.adapters.support import call, request

Case = tuple[str, type[FakeProviderServer], Callable[[Any], dict[str, Any]]]
CASES: list[Case] = [
    ("openai:gpt-4.1", FakeOpenAIServer, lambda s: {"base_url": s.base_url, "api_key": "k"}),
    ("openai-responses:gpt-4.1", FakeOpenAIServer, lambda s: {"base_url": s.base_url, "api_key": "k"}),
    ("azure:dep", FakeOpenAIServer, lambda s: {"endpoint": s.url, "api_key": "k", "api_version": "2024-10-21"}),
    ("anthropic:claude-sonnet-4-5", FakeAnthropicServer, lambda s: {"base_url": s.url, "api_key": "k"}),
    ("gemini:gemini-2.5-flash", FakeGeminiServer, lambda s: {"base_url": s.url, "api_key": "k"}),
    ("vertex:gemini-2.5-flash", FakeGeminiServer,
     lambda s: {"base_url": s.url, "project": "p", "location": "l", "access_token": "ya29.token"}),
    # (the fake's seeded failures are drawn per model name: this one's draws retry to success within 20 attempts)
    ("anthropic-vertex:claude-sonnet-4-5", FakeAnthropicServer,
     lambda s: {"base_url": s.url + "/v1", "project": "p", "location": "l", "access_token": "ya29.token"}),
    ("bedrock:anthropic.claude-sonnet-4-5-20250929-v1:0", FakeAnthropicServer,
     lambda s: {"base_url": s.url, "aws_access_key": "a", "aws_secret_key": "b", "region": "us-east-1"}),
]  # fmt: skip
IDS = [case[0].split(":")[0] for case in CASES]


@pytest.mark.parametrize(("model", "server_class", "options"), CASES, ids=IDS)
def test_the_wait_a_provider_asks_for_is_read(
    model: str, server_class: type[FakeProviderServer], options: Callable[[Any], dict[str, Any]]
) -> None:
    limited = SimulatedBehaviour(rate_limit_rate=1.0, retry_after_s=2.5)
    with server_class(behaviour=limited) as server, pytest.raises(RateLimitError) as info:
        call(model, options(server), request(model, max_tokens=50), retry=de.RetryPolicy(max_attempts=1))
    assert info.value.retry_after == 2.5  # type: ignore[attr-defined]
    assert len(server.requests) == 1  # and the SDK did not retry on its own


@pytest.mark.parametrize(("model", "server_class", "options"), CASES, ids=IDS)
def test_a_dropped_stream_and_a_5xx_are_retried_and_a_long_prompt_is_not(
    model: str, server_class: type[FakeProviderServer], options: Callable[[Any], dict[str, Any]]
) -> None:
    flaky = SimulatedBehaviour(dropped_stream_rate=0.5, server_error_rate=0.3, seed=1)
    with server_class(behaviour=flaky) as server:
        for k in range(6):
            req = request(model, max_tokens=50, stream=True, seed=k if model.startswith("openai:") else None)
            result = call(model, options(server), req, retry=de.RetryPolicy(initial_wait=0.0, max_attempts=20))
            assert result.response.message.content or result.response.message.tool_calls
        failures = len(server.requests) - 6
    assert failures > 0  # some attempts failed and were retried to success
    tiny = SimulatedBehaviour(context_window=5)
    with server_class(behaviour=tiny) as server, pytest.raises(ContextLengthError):
        call(model, options(server), request(model, max_tokens=50))
    assert not issubclass(ContextLengthError, TransientError)
