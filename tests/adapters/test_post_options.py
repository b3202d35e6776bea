"""The OpenAI adapters call the SDK's request() with the options its post() would make (post_options)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx2
import openai
from openai._types import NotGiven

from delta_eval.adapters.openai_common import REQUEST_OPTIONS, post_options


def options_of_post(path: str, content: bytes) -> Any:
    """The options the SDK's own post() hands its request()."""
    client = openai.AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="k", max_retries=0)
    seen: list[Any] = []

    async def request(cast_to: Any, options: Any, **kwargs: Any) -> None:
        seen.append(options)

    client.request = request  # type: ignore[method-assign]
    asyncio.run(client.post(path, content=content, cast_to=httpx2.Response, options=REQUEST_OPTIONS))
    return seen[0]


def fields(options: Any) -> dict[str, Any]:
    """The options' fields, each "not given" alike (the SDK's NotGiven has no equality)."""
    return {k: "NOT_GIVEN" if isinstance(v, NotGiven) else v for k, v in options.__dict__.items()}


def test_the_options_are_those_of_post() -> None:
    for path in ("/chat/completions", "/responses"):
        ours, sdks = post_options(path, b'{"a":1}'), options_of_post(path, b'{"a":1}')
        assert type(ours) is type(sdks)
        assert fields(ours) == fields(sdks)
        assert ours.model_fields_set == sdks.model_fields_set


def test_each_call_has_options_of_its_own() -> None:
    first = post_options("/chat/completions", b"1")
    first.headers["Authorization"] = "Bearer refreshed"  # type: ignore[index]  # as the SDK's key refresh may
    first.security["admin_api_key_auth"] = True  # type: ignore[typeddict-unknown-key]
    first.params["api-version"] = "2025-01-01"  # type: ignore[index]  # as a hook adding to the query may
    second = post_options("/chat/completions", b"2")
    assert (second.content, first.content) == (b"2", b"1")
    assert second.headers == {"Content-Type": "application/json"}
    assert second.security == {"bearer_auth": True}
    assert second.params == {}
    assert (
        second.model_fields_set == first.model_fields_set == options_of_post("/chat/completions", b"2").model_fields_set
    )
