"""Every current model of the catalogue, with every params combination the README shows, through the real SDK to a
fake server that refuses what that real model refuses (its rules are the fakes' own, written from the providers'
documentation apart from the catalogue): no call may be refused.

This is where the adapters' mapping (from the catalogue) and the providers' rules (from their documentation) meet;
a wrong catalogue entry or a wrong mapping shows up as a refused call naming the model, the params and the reason.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import anyio
import pytest

from delta_eval.adapters.registry import create_adapter
from delta_eval.calls import GenerateParams, ModelRequest, ResponseFormat
from delta_eval.catalog import catalog
from delta_eval.exceptions import ProviderError
from delta_eval.schema import Message
from delta_eval.testing import FakeAnthropicServer, FakeGeminiServer, FakeOpenAIServer
from delta_eval.testing.servers.model_rules import known_families
from tests.adapters.support import ASK, WEATHER

README = Path(__file__).resolve().parents[2] / "README.md"
VERDICT = ResponseFormat(
    name="verdict",
    json_schema={
        "type": "object",
        "properties": {"same": {"type": "boolean"}},
        "required": ["same"],
        "additionalProperties": False,
    },
)


def readme_params() -> list[dict[str, Any]]:
    """Every distinct ``params = {...}`` of the README, plus what the judges send by default (temperature 0 and a
    JSON schema for the equivalence judge's verdict)."""
    import tomllib

    found = re.findall(r"params = (\{[^}\n]*\})", README.read_text())
    params = [tomllib.loads(f"p = {inline}")["p"] for inline in found]
    params += [{"temperature": 0.0, "response_format": VERDICT}, {}]
    unique: dict[str, dict[str, Any]] = {repr(sorted(p.items())): p for p in params}
    return list(unique.values())


PARAMS = readme_params()


def current(prefix: str) -> list[str]:
    return sorted(name.split(":", 1)[1] for name, info in catalog().items() if name.startswith(f"{prefix}:")
                  and not info.retired())  # fmt: skip


def answer(request: ModelRequest) -> Message:
    return Message(role="assistant", content='{"same": true}')


def refused(model: str, options: dict[str, Any]) -> list[str]:
    """The README params combinations the fake refuses for ``model``, each with the fake's reason."""
    failures: list[str] = []

    async def go() -> None:
        adapter = create_adapter(model, options)
        try:
            for params in PARAMS:
                request = ModelRequest(model=model, messages=ASK, tools=(WEATHER,), params=GenerateParams(**params))
                try:
                    await adapter.generate(request)
                except ProviderError as exc:
                    failures.append(f"{model} {params}: {exc}")
        finally:
            await adapter.aclose()

    anyio.run(go)
    return failures


def test_the_readme_shows_the_params_this_test_sends() -> None:
    assert {"reasoning_budget": 2048, "max_tokens": 4096} in PARAMS
    assert {"reasoning_effort": "medium", "stream": True} in PARAMS
    assert {"temperature": 0.2, "max_tokens": 1024} in PARAMS
    assert len(PARAMS) >= 8


@pytest.mark.parametrize("prefix", ["openai", "openai-responses"])
def test_every_current_openai_model_takes_what_the_adapter_sends(prefix: str) -> None:
    with FakeOpenAIServer(respond=answer, verified_organization=False) as server:
        options = {"base_url": server.base_url, "api_key": "k"}
        failures = [f for name in current("openai") for f in refused(f"{prefix}:{name}", options)]
    assert failures == []


def test_every_current_openai_model_on_azure_takes_what_the_adapter_sends() -> None:
    failures = []
    with FakeOpenAIServer(respond=answer) as server:
        for version in ("2024-10-21", "2025-04-01-preview"):
            for name in current("openai"):
                # a deployment named after its model, as the fake's rules read the deployment's name
                options = {"endpoint": server.url, "api_key": "k", "api_version": version, "base_model": name}
                failures += refused(f"azure:{name}", options)
    assert failures == []


def test_every_current_anthropic_model_takes_what_the_adapter_sends() -> None:
    with FakeAnthropicServer(respond=answer) as server:
        options = {"base_url": server.url, "api_key": "k"}
        failures = [f for name in current("anthropic") for f in refused(f"anthropic:{name}", options)]
    assert failures == []


def test_every_current_gemini_model_takes_what_the_adapter_sends() -> None:
    with FakeGeminiServer(respond=answer) as server:
        options = {"base_url": server.url, "api_key": "k"}
        failures = [f for name in current("gemini") for f in refused(f"gemini:{name}", options)]
    assert failures == []


@pytest.mark.parametrize("family", known_families(), ids=lambda f: f"{f.provider}:{f.name}")
def test_every_family_the_fakes_know_gets_nothing_it_refuses(family: Any) -> None:
    # Families the catalogue no longer lists (retired: Gemini 2.0, Claude 3.x/4.0) are described by the user; the
    # adapter's conservative defaults for an unknown model must pass as well.
    server_class = {"openai": FakeOpenAIServer, "anthropic": FakeAnthropicServer, "gemini": FakeGeminiServer}
    with server_class[family.provider](respond=answer) as server:
        base = server.base_url if isinstance(server, FakeOpenAIServer) else server.url
        options = {"base_url": base, "api_key": "k"}
        prefixes = ["openai", "openai-responses"] if family.provider == "openai" else [family.provider]
        failures = [f for prefix in prefixes for name in family.examples for f in refused(f"{prefix}:{name}", options)]
    assert failures == []


def test_every_current_model_on_vertex_takes_what_the_adapter_sends() -> None:
    token = {"project": "p", "location": "l", "access_token": "ya29.catalogue-test"}
    with FakeAnthropicServer(respond=answer) as server:
        options = {"base_url": server.url + "/v1", **token}
        failures = [f for name in current("anthropic") for f in refused(f"anthropic-vertex:{name}", options)]
    with FakeGeminiServer(respond=answer) as server:
        options = {"base_url": server.url, **token}
        failures += [f for name in current("gemini") for f in refused(f"vertex:{name}", options)]
    assert failures == []
