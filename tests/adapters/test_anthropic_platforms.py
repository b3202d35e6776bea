"""``anthropic-vertex:`` and ``bedrock:`` through the real ``anthropic`` SDK's Vertex AI and Bedrock clients against
the fake Anthropic server standing in for each platform."""

from __future__ import annotations

import pytest

import delta_eval as de
from delta_eval.adapters.registry import create_adapter
from delta_eval.adapters.simulated import SimulatedBehaviour
from delta_eval.exceptions import AuthenticationError, ConfigError, RateLimitError
from delta_eval.testing.servers.anthropic import FakeAnthropicServer
from delta_eval.testing.servers.anthropic_platforms import event_frame
from tests.adapters.support import CALL, FAST, TOOL_ROUND, call, request
from tests.adapters.test_openai_chat import weather_model

TOKEN = "ya29.anthropic-vertex-token-not-real"
VERTEX = "anthropic-vertex:claude-sonnet-4-5@20250929"
BEDROCK = "bedrock:anthropic.claude-sonnet-4-5-20250929-v1:0"
ONCE = de.RetryPolicy(max_attempts=1)
AWS = {"aws_access_key": "AKIAFAKEFAKEFAKEFAKE", "aws_secret_key": "fake-secret-0123456789", "region": "us-east-1"}


def vertex_options(server: FakeAnthropicServer, **more: object) -> dict[str, object]:
    return {"base_url": server.url + "/v1", "project": "my-proj", "location": "us-east5", "access_token": TOKEN,
            **more}  # fmt: skip


@pytest.mark.parametrize("stream", [False, True])
def test_vertex_moves_the_model_into_the_path_and_names_its_version(stream: bool) -> None:
    with FakeAnthropicServer(respond=weather_model, api_key=TOKEN) as server:
        first = call(VERTEX, vertex_options(server), request(VERTEX, max_tokens=512, stream=stream))
        second = call(VERTEX, vertex_options(server), request(VERTEX, TOOL_ROUND, max_tokens=512, stream=stream))
    assert first.response.message.tool_calls == (CALL,)
    assert first.response.finish_reason == "tool_calls"
    assert second.response.message.content == "It is 18 C."
    method = "streamRawPredict" if stream else "rawPredict"
    sent = server.requests[1]
    model_path = "/v1/projects/my-proj/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929"
    assert sent.path == f"{model_path}:{method}"
    body = sent.json()
    assert "model" not in body
    assert body["anthropic_version"] == "vertex-2023-10-16"
    assert body["messages"][1]["content"][0]["type"] == "tool_use"  # the Messages encoding, reused
    assert sent.headers["authorization"] == "<redacted>"


def test_vertex_project_and_location_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_VERTEX_PROJECT_ID", "sdk-proj")
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
    monkeypatch.setenv("CLOUD_ML_REGION", "europe-west1")
    monkeypatch.setenv("GOOGLE_VERTEX_ACCESS_TOKEN", TOKEN)
    with FakeAnthropicServer(respond=weather_model, api_key=TOKEN) as server:
        call(VERTEX, {"base_url": server.url + "/v1"}, request(VERTEX, max_tokens=64))
    assert server.requests[0].path.startswith("/v1/projects/sdk-proj/locations/europe-west1/")


def test_a_wrong_vertex_token_is_refused_and_never_echoed() -> None:
    with FakeAnthropicServer(respond=weather_model, api_key=TOKEN) as server:
        options = vertex_options(server, access_token="ya29.wrong-0123456789")
        with pytest.raises(AuthenticationError) as e:
            call(VERTEX, options, request(VERTEX, max_tokens=64), retry=FAST)
    assert "wrong-0123456789" not in str(e.value)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("prefix", ["bedrock", "anthropic-bedrock"])
def test_bedrock_signs_invokes_and_streams_event_stream_frames(prefix: str, stream: bool) -> None:
    model = f"{prefix}:anthropic.claude-sonnet-4-5-20250929-v1:0"
    with FakeAnthropicServer(respond=weather_model) as server:
        options = {"base_url": server.url, **AWS, "aws_session_token": "fake-session-token"}
        first = call(model, options, request(model, max_tokens=512, stream=stream))
        second = call(model, options, request(model, TOOL_ROUND, max_tokens=512, stream=stream))
    assert first.response.message.tool_calls == (CALL,)
    assert second.response.message.content == "It is 18 C."
    assert first.response.usage.output_tokens > 0
    sent = server.requests[1]
    path = "invoke-with-response-stream" if stream else "invoke"
    assert sent.path in (f"/model/anthropic.claude-sonnet-4-5-20250929-v1:0/{path}",
                         f"/model/anthropic.claude-sonnet-4-5-20250929-v1%3A0/{path}")  # fmt: skip
    body = sent.json()
    assert "model" not in body
    assert "stream" not in body
    assert body["anthropic_version"] == "bedrock-2023-05-31"
    assert (sent.headers["authorization"], sent.headers["x-amz-security-token"]) == ("<redacted>", "<redacted>")
    assert "x-amz-date" in sent.headers
    if stream:
        assert first.response.ttft_ms is not None


def test_bedrock_takes_an_api_key_as_a_bearer_token() -> None:
    with FakeAnthropicServer(respond=weather_model, api_key="bedrock-api-key-0123") as server:
        options = {"base_url": server.url, "api_key": "bedrock-api-key-0123", "region": "us-west-2"}
        result = call(BEDROCK, options, request(BEDROCK, max_tokens=64))
    assert result.response.message.tool_calls == (CALL,)
    with pytest.raises(ConfigError, match="not both"):
        create_adapter(BEDROCK, {"api_key": "k", **AWS})


def test_bedrock_errors_are_read_from_its_own_shape() -> None:
    limited = SimulatedBehaviour(rate_limit_rate=1.0, retry_after_s=2.0)
    with FakeAnthropicServer(behaviour=limited) as server, pytest.raises(RateLimitError) as info:
        call(BEDROCK, {"base_url": server.url, **AWS}, request(BEDROCK, max_tokens=64), retry=ONCE)
    assert "Rate limit" in str(info.value)
    assert info.value.retry_after == 2.0  # type: ignore[attr-defined]
    assert "fake-secret" not in str(info.value)
    body = server.requests[0].json()
    assert body["anthropic_version"] == "bedrock-2023-05-31"


def test_the_fake_refuses_a_body_that_names_the_model_or_a_wrong_version() -> None:
    import httpx

    with FakeAnthropicServer(respond=weather_model, api_key="t") as server:
        url = f"{server.url}/v1/projects/p/locations/l/publishers/anthropic/models/m:rawPredict"
        headers = {"authorization": "Bearer t"}
        ok = {"anthropic_version": "vertex-2023-10-16", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}
        assert httpx.post(url, json=ok, headers=headers).status_code == 200
        assert httpx.post(url, json={**ok, "model": "m"}, headers=headers).status_code == 400
        assert httpx.post(url, json={**ok, "anthropic_version": "2026-10-21"}, headers=headers).status_code == 400
        assert httpx.post(url, json=ok).status_code == 401


def test_an_event_frame_is_what_botocore_decodes() -> None:
    from botocore.eventstream import EventStreamBuffer

    buffer = EventStreamBuffer()
    buffer.add_data(event_frame({"type": "message_stop"}))
    (message,) = list(buffer)
    assert message.headers[":event-type"] == "chunk"
    assert b"bytes" in message.payload


def test_no_region_anywhere_is_a_config_error(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    with pytest.raises(ConfigError, match="region"):
        create_adapter(BEDROCK, {"aws_access_key": "a", "aws_secret_key": "b"})
