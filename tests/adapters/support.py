"""Helpers for adapter tests: a real SDK client against a fake provider server, called through a ModelClient."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio

import delta_eval as de
from delta_eval.adapters.client import CallResult, ModelClient
from delta_eval.adapters.limits import ModelLimiter
from delta_eval.adapters.registry import create_adapter
from delta_eval.calls import GenerateParams, ModelRequest
from delta_eval.schema import Message, ToolCall, ToolSpec

FAST = de.RetryPolicy(initial_wait=0.0, max_wait=0.0, max_attempts=4)

WEATHER = ToolSpec(
    name="get_weather",
    description="Current weather",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
ASK = (Message(role="system", content="You are a weather bot."), Message(role="user", content="Weather in Paris?"))
CALL = ToolCall(id="call_1", name="get_weather", arguments='{"city":"Paris"}')
TOOL_ROUND = (
    *ASK,
    Message(role="assistant", tool_calls=(CALL,)),
    Message(role="tool", tool_call_id="call_1", name="get_weather", content='{"temp_c":18}'),
)


def request(model: str, messages: tuple[Message, ...] = ASK, **params: Any) -> ModelRequest:
    return ModelRequest(model=model, messages=messages, tools=(WEATHER,), params=GenerateParams(**params))


def call(
    model: str,
    options: Mapping[str, Any],
    req: ModelRequest,
    *,
    retry: de.RetryPolicy = FAST,
    cache: Any = None,
) -> CallResult:
    """One call through the real adapter (and its SDK), the run's retry policy and an optional cache."""

    async def go() -> CallResult:
        adapter = create_adapter(model, options)
        try:
            return await ModelClient(adapter, ModelLimiter(4), retry, cache).generate(req)
        finally:
            await adapter.aclose()

    return anyio.run(go)
