"""``vertex:`` (Gemini on Vertex AI) through the real ``google-genai`` SDK against the fake Gemini server."""

from __future__ import annotations

import pytest

from delta_eval.adapters.registry import create_adapter
from delta_eval.exceptions import AuthenticationError, ConfigError
from delta_eval.testing.servers.gemini import FakeGeminiServer, normalise
from tests.adapters.support import FAST, call, request
from tests.adapters.test_gemini import GCALL, ROUND, weather

TOKEN = "ya29.vertex-test-token-not-real"
MODEL = "vertex:gemini-2.5-flash"


def test_a_tool_round_goes_to_the_project_and_location_with_a_bearer_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOOGLE_VERTEX_ACCESS_TOKEN", TOKEN)
    with FakeGeminiServer(respond=weather, access_token=TOKEN) as server:
        opts = {"base_url": server.url, "project": "my-proj", "location": "europe-west4"}
        first = call(MODEL, opts, request(MODEL, max_tokens=256))
        second = call(MODEL, opts, request(MODEL, ROUND, stream=True))
    assert first.response.message.tool_calls == (GCALL,)
    assert first.response.finish_reason == "tool_calls"
    assert second.response.message.content == "It is 18 C."
    assert second.response.ttft_ms is not None
    paths = [r.path for r in server.requests]
    base = "/v1beta1/projects/my-proj/locations/europe-west4/publishers/google/models/gemini-2.5-flash"
    assert paths == [f"{base}:generateContent", f"{base}:streamGenerateContent"]
    assert server.requests[1].query.get("alt") == "sse"
    assert server.requests[0].headers["authorization"] == "<redacted>"
    assert "x-goog-api-key" not in server.requests[0].headers
    body = normalise(server.requests[1].json())
    assert body["contents"][1]["parts"][0]["functionCall"]["name"] == "get_weather"  # Gemini's encoding, reused


def test_project_and_location_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "env-proj")
    monkeypatch.setenv("GOOGLE_CLOUD_LOCATION", "us-east5")
    monkeypatch.setenv("MY_TOKEN", TOKEN)
    with FakeGeminiServer(respond=weather, access_token=TOKEN) as server:
        call(MODEL, {"base_url": server.url, "access_token_env": "MY_TOKEN", "api_version": "v1"}, request(MODEL))
    assert server.requests[0].path.startswith("/v1/projects/env-proj/locations/us-east5/publishers/google/models/")


def test_express_mode_takes_an_api_key_and_no_project(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "env-proj")
    with FakeGeminiServer(respond=weather, api_key="express-key") as server:
        result = call(MODEL, {"base_url": server.url, "api_key": "express-key"}, request(MODEL))
    assert result.response.message.tool_calls == (GCALL,)
    assert server.requests[0].path == "/v1beta1/publishers/google/models/gemini-2.5-flash:generateContent"


def test_a_wrong_token_is_refused_and_never_echoed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOOGLE_VERTEX_ACCESS_TOKEN", "ya29.wrong-token-0123456789")
    with FakeGeminiServer(respond=weather, access_token=TOKEN) as server, pytest.raises(AuthenticationError) as info:
        call(MODEL, {"base_url": server.url, "project": "p", "location": "l"}, request(MODEL), retry=FAST)
    assert "wrong-token" not in str(info.value)


def test_no_project_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
    with pytest.raises(ConfigError, match="GOOGLE_CLOUD_PROJECT"):
        create_adapter(MODEL, {"base_url": "http://127.0.0.1:9"})
