"""Each reader reads image, file and audio parts as media parts (named by the hash of their bytes, or of their URL),
not as placeholders; a part the record names only by a provider's file id stays a placeholder; a malformed one is
an error naming its field."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from delta_eval.chat_format import parse_messages
from delta_eval.exceptions import RecordError
from delta_eval.ingest.native import native_conversation
from delta_eval.mapping import FieldMapping
from delta_eval.schema import MediaPart, Message

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
PDF = "JVBERi0xLjQ="  # %PDF-1.4
WAV = "UklGRiQAAABXQVZF"
IMAGE = MediaPart.from_base64("image", PNG, "image/png")
URL = "https://example.com/cat.png"


def read(fmt: str, body: dict[str, Any]) -> tuple[Message, ...]:
    return native_conversation(FieldMapping(message_format=fmt), fmt, body, source="s", label="r").messages


def test_openai_chat_reads_images_audio_and_files() -> None:
    msgs = parse_messages([
        {"role": "user", "content": [
            {"type": "text", "text": "compare "},
            {"type": "image_url", "image_url": {"url": URL, "detail": "low"}},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
            {"type": "input_audio", "input_audio": {"data": WAV, "format": "wav"}},
            {"type": "file", "file": {"file_data": f"data:application/pdf;base64,{PDF}", "filename": "a.pdf"}},
            {"type": "file", "file": {"file_id": "file-123"}},
            {"type": "text", "text": "these"},
        ]},
        {"role": "assistant", "content": "done"},
    ])  # fmt: skip
    user = msgs[0]
    assert user.content == "compare [file: file-123]these"  # an upload known by id only: named
    assert user.media == (
        MediaPart(kind="image", sha256=hashlib.sha256(URL.encode()).hexdigest(), url=URL),
        IMAGE,
        MediaPart.from_base64("audio", WAV, "audio/wav"),
        MediaPart.from_base64("file", PDF, "application/pdf", filename="a.pdf"),
    )


def test_anthropic_reads_images_documents_and_an_image_in_a_tool_result() -> None:
    msgs = read("anthropic", {"messages": [
        {"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
            {"type": "image", "source": {"type": "url", "url": URL}},
            {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": PDF}},
            {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "notes"}},
            {"type": "document", "source": {"type": "file", "file_id": "file_1"}},
            {"type": "text", "text": "what is this?"},
        ]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "snap", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
            {"type": "text", "text": "the screen"}]}]},
        {"role": "assistant", "content": "a cat"},
    ]})  # fmt: skip
    user, _, tool, _ = msgs
    assert [p.kind for p in user.media] == ["image", "image", "file", "file"]
    assert user.media[0] == IMAGE
    assert user.media[1].url == URL
    assert user.media[2] == MediaPart.from_base64("file", PDF, "application/pdf")
    assert user.media[3] == MediaPart.from_bytes("file", b"notes", "text/plain")
    assert user.content == "[document: unknown type]what is this?"
    assert (tool.role, tool.content, tool.media) == ("tool", "the screen", (IMAGE,))


def test_gemini_reads_inline_data_and_file_data() -> None:
    msgs = read("gemini", {"contents": [
        {"role": "user", "parts": [
            {"inlineData": {"mimeType": "image/png", "data": PNG}},
            {"file_data": {"mime_type": "application/pdf", "file_uri": "gs://bucket/a.pdf"}},
            {"inlineData": {"mimeType": "audio/wav", "data": WAV}},
            {"text": "summarise"},
        ]},
        {"role": "model", "parts": [{"text": "ok"}]},
    ]})  # fmt: skip
    assert msgs[0].content == "summarise"
    assert [(p.kind, p.media_type) for p in msgs[0].media] == [
        ("image", "image/png"), ("file", "application/pdf"), ("audio", "audio/wav")]  # fmt: skip
    assert msgs[0].media[0] == IMAGE
    assert msgs[0].media[1].url == "gs://bucket/a.pdf"


def test_openai_responses_reads_input_images_files_and_audio() -> None:
    msgs = read("openai-responses", {"input": [
        {"role": "user", "content": [
            {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}", "detail": "auto"},
            {"type": "input_image", "image_url": URL, "detail": "high"},
            {"type": "input_file", "file_data": f"data:application/pdf;base64,{PDF}", "filename": "a.pdf"},
            {"type": "input_file", "file_url": "https://example.com/a.pdf"},
            {"type": "input_image", "file_id": "file-9", "detail": "auto"},
            {"type": "input_text", "text": "look"},
        ]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "seen"}]},
    ]})  # fmt: skip
    user = msgs[0]
    assert user.content == "[image: unknown type]look"
    assert user.media[0] == IMAGE
    assert user.media[1].url == URL
    assert user.media[2] == MediaPart.from_base64("file", PDF, "application/pdf", filename="a.pdf")
    assert user.media[3].url == "https://example.com/a.pdf"


@pytest.mark.parametrize(
    ("fmt", "body", "field"),
    [
        ("anthropic", {"messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "not base64!"}}]}]},
         "messages[0].content[0].source.data"),
        ("gemini", {"contents": [{"role": "user", "parts": [{"inlineData": {"mimeType": "image/png"}}]}]},
         "contents[0].parts[0].inlineData.data"),
        ("openai-responses", {"input": [{"role": "user", "content": [
            {"type": "input_image", "image_url": "data:image/png,raw", "detail": "auto"}]}]},
         "input[0].content[0].image_url"),
    ],
)  # fmt: skip
def test_a_malformed_media_part_is_an_error_naming_its_field(fmt: str, body: dict[str, Any], field: str) -> None:
    with pytest.raises(RecordError) as info:
        read(fmt, body)
    assert info.value.field == field
