"""The SDK clients keep the URLs they join: the request an SDK builds is the one it built before, for each base URL."""

from __future__ import annotations

import asyncio

import httpx2
import openai
from openai._models import FinalRequestOptions

from delta_eval.adapters.kept_urls import kept_urls
from delta_eval.adapters.openai_common import REQUEST_OPTIONS, OpenAIOptions, make_client


def built(client: openai.AsyncOpenAI, path: str = "/chat/completions") -> httpx2.Request:
    options = FinalRequestOptions.construct(method="post", url=path, content=b"{}", **REQUEST_OPTIONS)  # type: ignore[arg-type]
    return client._build_request(options)


def test_a_kept_request_is_the_sdks_own() -> None:
    async def both() -> tuple[httpx2.Request, httpx2.Request]:
        kept = make_client(OpenAIOptions(base_url="http://127.0.0.1:9/v1", api_key="k"), "openai:m")
        plain = openai.AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="k", max_retries=0, timeout=600.0)
        built(kept)  # a first call joins and keeps its URLs
        return built(kept), built(plain)

    kept, plain = asyncio.run(both())
    assert str(kept.url) == str(plain.url) == "http://127.0.0.1:9/v1/chat/completions"
    assert kept.headers.raw == plain.headers.raw


def test_a_client_given_a_new_base_url_joins_again() -> None:
    async def urls() -> list[str]:
        client = make_client(OpenAIOptions(base_url="http://127.0.0.1:9/v1", api_key="k"), "openai:m")
        first = str(built(client).url)
        client.base_url = "http://127.0.0.1:9/v2"  # type: ignore[assignment]
        return [first, str(built(client).url), str(built(client, "/responses").url)]

    assert asyncio.run(urls()) == [
        "http://127.0.0.1:9/v1/chat/completions",
        "http://127.0.0.1:9/v2/chat/completions",
        "http://127.0.0.1:9/v2/responses",
    ]


def test_the_http_client_keeps_its_joins_by_base_url() -> None:
    client = kept_urls(httpx2.AsyncClient)(base_url="http://h/a")
    first = client._merge_url("/x")
    assert client._merge_url("/x") is first
    client.base_url = "http://h/b"
    assert str(client._merge_url("/x")) == "http://h/b/x"
    assert str(client._merge_url(httpx2.URL("/y"))) == "http://h/b/y"  # a URL object is joined as before
    assert kept_urls(httpx2.AsyncClient) is type(client)  # one class, made once
