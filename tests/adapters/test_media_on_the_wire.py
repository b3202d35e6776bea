"""Media parts on the wire: each adapter sends an image in its provider's own shape, through its real SDK, to a fake
server that checks the shape from the provider's documentation; the fakes refuse malformed parts; what a provider
cannot take goes as a placeholder naming kind, media type and hash, said once in the adapter's notes."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from delta_eval.adapters.registry import create_adapter
from delta_eval.schema import MediaPart, Message, ToolCall
from delta_eval.testing import FakeAnthropicServer, FakeGeminiServer, FakeOpenAIServer
from delta_eval.testing.servers.gemini import normalise
from delta_eval.testing.servers.provider import FakeProviderServer
from tests.adapters.support import call, request
from tests.adapters.test_all_providers import CASES, IDS

#: A 1x1 PNG.
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
IMAGE = MediaPart.from_base64("image", PNG, "image/png")
URL_IMAGE = MediaPart.from_url("image", "https://example.com/cat.png", "image/png")
LOOK = ToolCall(id="call_1", name="get_weather", arguments='{"city":"Paris"}')


def with_media(*parts: MediaPart) -> tuple[Message, ...]:
    return (
        Message(role="system", content="You describe pictures."),
        Message(role="user", content="What is in this picture?", media=parts),
    )


def _bytes(value: str) -> bytes:
    # Google's SDK may send bytes in the URL-safe alphabet; both decode to the same bytes.
    return base64.b64decode(value.replace("-", "+").replace("_", "/") + "=" * (-len(value) % 4))


def first_user_parts(body: dict[str, Any]) -> list[Any]:
    """The content parts of the first user message of a request body, whatever the provider."""
    if "contents" in body:  # read as Gemini reads it (either spelling of its keys)
        return list(normalise(body)["contents"][0]["parts"])
    if "input" in body:
        return list(next(i for i in body["input"] if i.get("role") == "user")["content"])
    return list(next(m for m in body["messages"] if m["role"] == "user")["content"])


def image_sent(body: dict[str, Any], part: MediaPart) -> bool:
    """Whether ``body`` carries ``part`` first in its user message, in the provider's own shape."""
    sent = first_user_parts(body)[0]
    data_url = part.data_url or ""
    if "contents" in body:  # Gemini: inlineData (base64 of the bytes) or fileData
        if part.data is not None:
            inline = sent.get("inlineData", {})
            return inline.get("mimeType") == part.media_type and _bytes(inline.get("data", "")) == _bytes(PNG)
        return sent == {"fileData": {"mimeType": part.media_type, "fileUri": part.url}}
    if "input" in body:  # Responses
        return sent == {"type": "input_image", "image_url": part.url or data_url, "detail": "auto"}
    if sent.get("type") == "image_url":  # Chat Completions
        return bool(sent == {"type": "image_url", "image_url": {"url": part.url or data_url}})
    source = (
        {"type": "base64", "media_type": part.media_type, "data": part.data}
        if part.data is not None
        else {"type": "url", "url": part.url}
    )
    return bool(sent == {"type": "image", "source": source})  # Anthropic


@pytest.mark.parametrize(("model", "server_class", "options"), CASES, ids=IDS)
@pytest.mark.parametrize("part", [IMAGE, URL_IMAGE], ids=["bytes", "url"])
def test_an_image_goes_in_the_providers_shape_and_the_fake_takes_it(
    model: str, server_class: type[FakeProviderServer], options: Callable[[Any], dict[str, Any]], part: MediaPart
) -> None:
    with server_class() as server:
        result = call(model, options(server), request(model, with_media(part), max_tokens=50))
        body = server.requests[-1].json()
    assert result.response.message.content or result.response.message.tool_calls
    assert image_sent(body, part)
    # The text follows the image, and the bytes never travel as the placeholder.
    assert part.placeholder not in json.dumps(body)


@pytest.mark.parametrize(("model", "server_class", "options"), CASES, ids=IDS)
def test_an_image_in_a_tool_result_is_sent_or_named(
    model: str, server_class: type[FakeProviderServer], options: Callable[[Any], dict[str, Any]]
) -> None:
    history = (
        *with_media(),
        Message(role="assistant", tool_calls=(LOOK,)),
        Message(role="tool", tool_call_id="call_1", name="get_weather", content="a radar map", media=(IMAGE,)),
    )
    with server_class() as server:
        call(model, options(server), request(model, history, max_tokens=50))
        text = json.dumps(server.requests[-1].json())
    if server_class is FakeAnthropicServer:  # a tool_result takes image blocks
        assert '"type": "image"' in text
        assert IMAGE.placeholder not in text
    else:  # the others take text: the placeholder names the image
        assert IMAGE.placeholder in text
        assert PNG not in text


@pytest.mark.parametrize(
    ("model", "part", "shape"),
    [
        ("openai:gpt-4.1", MediaPart.from_bytes("audio", b"RIFF....WAVE", "audio/wav"),
         {"type": "input_audio", "input_audio": {"data": base64.b64encode(b"RIFF....WAVE").decode(), "format": "wav"}}),
        ("openai:gpt-4.1", MediaPart.from_bytes("file", b"%PDF-1.4", "application/pdf", filename="a.pdf"),
         {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBERi0xLjQ=", "filename": "a.pdf"}}),
        ("openai-responses:gpt-4.1", MediaPart.from_bytes("file", b"%PDF-1.4", "application/pdf", filename="a.pdf"),
         {"type": "input_file", "file_data": "data:application/pdf;base64,JVBERi0xLjQ=", "filename": "a.pdf"}),
        ("anthropic:claude-sonnet-4-5", MediaPart.from_bytes("file", b"%PDF-1.4", "application/pdf"),
         {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0xLjQ="}}),
        ("anthropic:claude-sonnet-4-5", MediaPart.from_bytes("file", b"notes", "text/plain"),
         {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "notes"}}),
    ],
)  # fmt: skip
def test_audio_and_files_go_in_the_providers_shape(model: str, part: MediaPart, shape: dict[str, Any]) -> None:
    server_class = FakeAnthropicServer if model.startswith("anthropic") else FakeOpenAIServer
    with server_class() as server:
        options = {"base_url": server.base_url if isinstance(server, FakeOpenAIServer) else server.url, "api_key": "k"}
        call(model, options, request(model, with_media(part), max_tokens=50))
        body = server.requests[-1].json()
    assert first_user_parts(body)[0] == shape


@pytest.mark.parametrize(
    ("model", "part"),
    [
        ("anthropic:claude-sonnet-4-5", MediaPart.from_bytes("audio", b"RIFF", "audio/wav")),
        ("openai-responses:gpt-4.1", MediaPart.from_bytes("audio", b"RIFF", "audio/wav")),
        ("openai:gpt-4.1", MediaPart.from_url("file", "https://example.com/a.pdf", "application/pdf")),
        ("gemini:gemini-2.5-flash", MediaPart.from_url("image", "https://example.com/a")),  # no media type
        # read back from a run's tables without its bytes
        ("openai:gpt-4.1", IMAGE.model_copy(update={"data": None})),
    ],
)
def test_what_a_provider_cannot_take_goes_as_its_placeholder_said_once(model: str, part: MediaPart) -> None:
    adapter = create_adapter(model, {"api_key": "k"})
    req = request(model, with_media(part, part), max_tokens=50)
    body = adapter.encode(req)
    assert json.dumps(body, default=repr).count(part.placeholder) == 2  # both parts, named
    said = [n for n in adapter.notes if "sent as placeholder text" in n]
    assert len(said) == 1
    adapter.encode(req)
    assert [n for n in adapter.notes if "sent as placeholder text" in n] == said


def _post(server: FakeProviderServer, path: str, body: dict[str, Any]) -> httpx.Response:
    headers = {"anthropic-version": "2023-06-01", "x-api-key": "k", "authorization": "Bearer k",
               "x-goog-api-key": "k"}  # fmt: skip
    return httpx.post(server.url + path, json=body, headers=headers, timeout=10)


CHAT = "/v1/chat/completions"
RESPONSES = "/v1/responses"
MESSAGES = "/v1/messages"
GEMINI = "/v1beta/models/gemini-2.5-flash:generateContent"


def _chat(part: Any, role: str = "user") -> dict[str, Any]:
    return {"model": "gpt-4.1", "messages": [{"role": role, "content": [part]}]}


def _responses(part: Any) -> dict[str, Any]:
    return {"model": "gpt-4.1", "input": [{"role": "user", "content": [part]}]}


def _messages(block: Any) -> dict[str, Any]:
    return {"model": "claude-sonnet-4-5", "max_tokens": 50, "messages": [{"role": "user", "content": [block]}]}


def _tool_result(block: Any) -> dict[str, Any]:
    use = {"type": "tool_use", "id": "t1", "name": "f", "input": {}}
    result = {"type": "tool_result", "tool_use_id": "t1", "content": [block]}
    return {"model": "claude-sonnet-4-5", "max_tokens": 50, "messages": [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": [use]},
        {"role": "user", "content": [result]}]}  # fmt: skip


def _gemini(part: Any) -> dict[str, Any]:
    return {"contents": [{"role": "user", "parts": [part]}]}


PNG_URL = f"data:image/png;base64,{PNG}"
PNG_SOURCE = {"type": "base64", "media_type": "image/png", "data": PNG}
MALFORMED = [
    (FakeOpenAIServer, CHAT, _chat({"type": "image_url", "image_url": {"url": "ftp://example.com/a.png"}})),
    (FakeOpenAIServer, CHAT, _chat({"type": "image_url", "image_url": {"url": "data:image/png;base64,@@"}})),
    (FakeOpenAIServer, CHAT, _chat({"type": "image_url", "image_url": {"url": PNG_URL, "detail": "huge"}})),
    (FakeOpenAIServer, CHAT, _chat({"type": "image_url", "image_url": {"url": PNG_URL}}, role="system")),
    (FakeOpenAIServer, CHAT, _chat({"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "ogg"}})),
    (FakeOpenAIServer, CHAT, _chat({"type": "file", "file": {"filename": "a.pdf"}})),
    (FakeOpenAIServer, CHAT, _chat({"type": "image", "url": PNG_URL})),
    (FakeOpenAIServer, RESPONSES, _responses({"type": "input_image", "image_url": PNG_URL})),  # no detail
    (FakeOpenAIServer, RESPONSES, _responses({"type": "input_image", "image_url": "nope", "detail": "auto"})),
    (FakeOpenAIServer, RESPONSES, _responses({"type": "input_file", "filename": "a.pdf"})),
    (FakeAnthropicServer, MESSAGES, _messages({"type": "image", "source": {"type": "base64", "media_type": "image/bmp",
                                                                           "data": PNG}})),
    (FakeAnthropicServer, MESSAGES, _messages({"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                           "data": "not base64!"}})),
    (FakeAnthropicServer, MESSAGES, _messages({"type": "image", "source": {"type": "url"}})),
    (FakeAnthropicServer, MESSAGES, _messages({"type": "document", "source": PNG_SOURCE})),
    (FakeAnthropicServer, MESSAGES, _tool_result({"type": "tool_use", "id": "x", "name": "f", "input": {}})),
    (FakeGeminiServer, GEMINI, _gemini({"inlineData": {"data": PNG}})),
    (FakeGeminiServer, GEMINI, _gemini({"inlineData": {"mimeType": "image/png", "data": "%%%"}})),
    (FakeGeminiServer, GEMINI, _gemini({"fileData": {"fileUri": "https://example.com/a.png"}})),
    (FakeGeminiServer, GEMINI, _gemini({"text": "hi", "inlineData": {"mimeType": "image/png", "data": PNG}})),
]  # fmt: skip
WELL_FORMED = [
    (FakeOpenAIServer, CHAT, _chat({"type": "image_url", "image_url": {"url": PNG_URL, "detail": "low"}})),
    (FakeOpenAIServer, CHAT, _chat({"type": "file", "file": {"file_id": "file-abc"}})),
    (FakeOpenAIServer, RESPONSES, _responses({"type": "input_image", "file_id": "file-abc", "detail": "high"})),
    (FakeOpenAIServer, RESPONSES, _responses({"type": "input_file", "file_url": "https://example.com/a.pdf"})),
    (FakeAnthropicServer, MESSAGES, _messages({"type": "image", "source": {"type": "url",
                                                                           "url": "https://example.com/a.png"}})),
    (FakeAnthropicServer, MESSAGES, _tool_result({"type": "image", "source": PNG_SOURCE})),
    (FakeGeminiServer, GEMINI, _gemini({"inlineData": {"mimeType": "image/png", "data": PNG.replace("+", "-")}})),
    (FakeGeminiServer, GEMINI, _gemini({"fileData": {"mimeType": "application/pdf",
                                                     "fileUri": "https://example.com/a.pdf"}})),
]  # fmt: skip


@pytest.mark.parametrize(("server_class", "path", "body"), MALFORMED)
def test_the_fakes_refuse_a_malformed_media_part(
    server_class: type[FakeProviderServer], path: str, body: dict[str, Any]
) -> None:
    with server_class() as server:
        reply = _post(server, path, body)
    assert reply.status_code == 400, reply.text


@pytest.mark.parametrize(("server_class", "path", "body"), WELL_FORMED)
def test_the_fakes_take_the_documented_media_shapes(
    server_class: type[FakeProviderServer], path: str, body: dict[str, Any]
) -> None:
    with server_class() as server:
        reply = _post(server, path, body)
    assert reply.status_code == 200, reply.text
