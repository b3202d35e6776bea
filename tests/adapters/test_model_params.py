"""Provider-neutral parameters become what each model generation takes, from the catalogue, never a refused field."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from delta_eval.adapters.registry import AdapterContext, create_adapter
from delta_eval.catalog import ModelOverride, model_info
from tests.adapters.support import request

KEY = {"api_key": "test-key"}


def encode(model: str, options: dict[str, Any] | None = None, context: AdapterContext | None = None,
           **params: Any) -> tuple[Any, list[str]]:  # fmt: skip
    adapter = create_adapter(model, {**KEY, **(options or {})}, context)
    try:
        body = adapter.encode(request(model, **params))  # type: ignore[attr-defined]
    finally:
        anyio.run(adapter.aclose)
    return body, adapter.notes


def thinking_config(model: str, **params: Any) -> tuple[dict[str, Any] | None, list[str]]:
    (_, config), notes = encode(model, **params)
    thinking = config.thinking_config
    return (thinking.model_dump(exclude_none=True) if thinking is not None else None), notes


# -- Gemini ----------------------------------------------------------------------------------------------------


def test_gemini_25_takes_a_budget_for_an_effort_never_a_level() -> None:
    thinking, notes = thinking_config("gemini:gemini-2.5-flash-lite", reasoning_effort="low")
    assert thinking == {"thinking_budget": 2048, "include_thoughts": True}
    assert any("thinking budget of 2048" in n for n in notes)


def test_gemini_25_pro_cannot_turn_thinking_off_and_budgets_stay_in_range() -> None:
    thinking, notes = thinking_config("gemini:gemini-2.5-pro", reasoning_budget=0)
    assert thinking == {"thinking_budget": 128, "include_thoughts": True}
    assert any("cannot turn it off" in n for n in notes)
    assert thinking_config("gemini:gemini-2.5-flash-lite", reasoning_budget=100)[0] == {
        "thinking_budget": 512,
        "include_thoughts": True,
    }
    off = {"thinking_budget": 0, "include_thoughts": False}
    assert thinking_config("gemini:gemini-2.5-flash-lite", reasoning_budget=0)[0] == off
    assert thinking_config("gemini:gemini-2.5-flash", reasoning_budget=99_999)[0] == {
        "thinking_budget": 24576,
        "include_thoughts": True,
    }


def test_gemini_3_takes_a_level_from_its_own_list() -> None:
    thinking, notes = thinking_config("gemini:gemini-3.1-pro-preview", reasoning_effort="minimal")
    assert thinking == {"thinking_level": "LOW", "include_thoughts": True}  # Gemini 3 Pro has no MINIMAL
    assert any("'minimal' sent as 'low'" in n for n in notes)
    assert thinking_config("gemini:gemini-3.5-flash", reasoning_budget=20000)[0] == {
        "thinking_level": "HIGH",
        "include_thoughts": True,
    }
    # Gemini 3 cannot turn thinking off: "none" becomes its lowest level, said once
    thinking, notes = thinking_config("gemini:gemini-3.5-flash", reasoning_effort="none")
    assert thinking == {"thinking_level": "MINIMAL", "include_thoughts": True}
    assert any("cannot turn reasoning off" in n for n in notes)


def test_a_gemini_model_that_does_not_think_gets_no_thinking_config() -> None:
    context = AdapterContext(models={"gemini:gemini-2.0-flash": ModelOverride(reasoning=False)})
    (_, config), notes = encode("gemini:gemini-2.0-flash", context=context, reasoning_budget=1024)
    assert config.thinking_config is None
    assert any("thinking configuration" in n for n in notes)


def test_gemini_is_called_on_v1beta_where_its_features_are_documented() -> None:
    adapter = create_adapter("gemini:gemini-3.5-flash", KEY)
    assert adapter.options.api_version == "v1beta"  # type: ignore[attr-defined]
    anyio.run(adapter.aclose)


# -- Anthropic ---------------------------------------------------------------------------------------------------


def test_claude_45_gets_a_budget_for_an_effort_never_adaptive_thinking() -> None:
    body, notes = encode("anthropic:claude-haiku-4-5", reasoning_effort="high", max_tokens=32000)
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 16384}
    assert "output_config" not in body
    assert any("thinking budget of 16384" in n for n in notes)


def test_adaptive_only_claude_gets_adaptive_thinking_for_a_budget() -> None:
    body, notes = encode("anthropic:claude-opus-4-8", reasoning_budget=4096, max_tokens=8000)
    assert body["thinking"] == {"type": "adaptive"}
    assert body["output_config"] == {"effort": "medium"}
    assert any("sent as reasoning effort 'medium'" in n for n in notes)
    body, _ = encode("anthropic:claude-opus-4-8", reasoning_budget=0)
    assert "thinking" not in body  # it thinks only when asked; adaptive-only models refuse "disabled"
    body, _ = encode("anthropic:claude-sonnet-4-6", reasoning_effort="none")
    assert body["thinking"] == {"type": "disabled"}
    body, _ = encode("anthropic:claude-opus-4-8", reasoning_effort="minimal")
    assert body["output_config"] == {"effort": "low"}


def test_claude_whose_thinking_is_always_on_is_never_sent_disabled() -> None:
    body, notes = encode("anthropic:claude-sonnet-5-5", reasoning_budget=0)
    assert body["thinking"] == {"type": "adaptive"}
    assert body["output_config"] == {"effort": "low"}
    assert any("cannot be told to turn it off" in n for n in notes)


def test_claude_46_takes_both_a_budget_and_an_effort() -> None:
    assert encode("anthropic:claude-sonnet-4-6", reasoning_budget=500, max_tokens=9000)[0]["thinking"] == {
        "type": "enabled",
        "budget_tokens": 1024,  # Anthropic's minimum
    }
    body, _ = encode("anthropic:claude-sonnet-4-6", reasoning_effort="high")
    assert (body["thinking"], body["output_config"]) == ({"type": "adaptive"}, {"effort": "high"})


# -- OpenAI ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["openai:gpt-6-sol", "openai:gpt-5.6", "openai-responses:gpt-6-luna", "openai:o3"])
def test_reasoning_models_are_known_by_the_catalogue_not_by_their_name(model: str) -> None:
    body, notes = encode(model, temperature=0.0, top_p=0.5, stop=("END",), parallel_tool_calls=False)
    assert not {"temperature", "top_p", "stop"} & set(body)
    assert any("temperature=0.0 dropped" in n for n in notes)
    if model == "openai:o3":
        assert "parallel_tool_calls" not in body  # o-series take no parallel_tool_calls switch


def test_o_series_take_no_minimal_effort_and_budget_zero_is_their_lowest() -> None:
    body, _notes = encode("openai:o3", reasoning_budget=0)
    assert body["reasoning_effort"] == "low"
    body, _ = encode("openai:gpt-5.4-mini", reasoning_budget=0)
    assert body["reasoning_effort"] == "none"  # gpt-5.1 and later can turn reasoning off
    body, _ = encode("openai:gpt-5-mini", reasoning_effort="none")
    assert body["reasoning_effort"] == "minimal"  # gpt-5 cannot; minimal is its lowest


def test_a_model_that_does_not_reason_gets_no_effort() -> None:
    body, notes = encode("openai:gpt-4.1", reasoning_effort="high", temperature=0.2, stop=("END",))
    assert "reasoning_effort" not in body
    assert (body["temperature"], body["stop"]) == (0.2, ["END"])
    assert notes == ["reasoning effort 'high' dropped: openai:gpt-4.1 takes no reasoning effort"]


def test_reasoning_summaries_are_opt_in() -> None:
    body, _ = encode("openai-responses:gpt-5.5", reasoning_effort="low")
    assert body["reasoning"] == {"effort": "low"}
    assert body["include"] == ["reasoning.encrypted_content"]
    body, _ = encode("openai-responses:gpt-5.5", reasoning_summary="auto")
    assert body["reasoning"] == {"summary": "auto"}


def test_an_unknown_model_gets_conservative_defaults_and_one_note() -> None:
    body, notes = encode("openai:gpt-9-preview", temperature=0.0, reasoning_effort="low", stop=("x",))
    assert not {"temperature", "reasoning_effort", "stop"} & set(body)
    catalogue = [n for n in notes if "not in the model catalogue" in n]
    assert len(catalogue) == 1
    # a self-hosted server's models are described once, by a glob
    described = AdapterContext(models={"openai:Qwen/*": ModelOverride(sampling=True, reasoning=True, efforts=("low",))})
    body, notes = encode("openai:Qwen/Qwen3-8B", {"base_url": "http://127.0.0.1:9/v1"}, described, temperature=0.3,
                         reasoning_effort="low")  # fmt: skip
    assert (body["temperature"], body["reasoning_effort"], notes) == (0.3, "low", [])


def test_the_run_can_describe_a_model_the_catalogue_lacks() -> None:
    context = AdapterContext(models={"openai:gpt-9-preview": ModelOverride(reasoning=True, efforts=("low", "high"))})
    body, notes = encode("openai:gpt-9-preview", context=context, reasoning_effort="medium")
    assert body["reasoning_effort"] == "high"
    assert not any("not in the model catalogue" in n for n in notes)


def test_azure_deployments_take_the_rules_of_the_model_they_serve() -> None:
    options = {"endpoint": "https://example.openai.azure.com", "api_version": "2025-04-01-preview",
               "base_model": "o3"}  # fmt: skip
    body, _ = encode("azure:my-reasoner", options, temperature=0.2, max_tokens=100)
    assert "temperature" not in body
    assert body["max_completion_tokens"] == 100


def test_retired_models_are_said_once() -> None:
    _, notes = encode("anthropic:claude-sonnet-4-5")
    assert any("retired by its provider on 2026-11-30" in n for n in notes)
    assert model_info("anthropic:claude-sonnet-4-5").retired()
