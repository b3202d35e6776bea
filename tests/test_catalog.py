"""The model catalogue: the shipped snapshot, how it is built from LiteLLM's data, lookups, overrides, the listing."""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import given
from hypothesis import strategies as st

from delta_eval.catalog import CATALOG_AS_OF, EFFORT_ORDER, ModelInfo, ModelOverride, Price, catalog, model_info
from delta_eval.cli import main
from delta_eval.pricing import price_for

ROOT = Path(__file__).resolve().parent.parent


def builder() -> ModuleType:
    spec = importlib.util.spec_from_file_location("update_catalog", ROOT / "scripts" / "update_catalog.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_snapshot_is_dated_and_every_entry_reads() -> None:
    assert dt.date.fromisoformat(CATALOG_AS_OF)
    table = catalog()
    assert {key.split(":")[0] for key in table} == {"openai", "anthropic", "gemini"}
    assert len(table) > 50
    for info in table.values():
        assert info.known
        assert list(info.efforts) == sorted(info.efforts, key=EFFORT_ORDER.index)  # increasing order
        if info.budget:
            assert info.budget_min is not None
            assert info.budget_max is None or info.budget_max > info.budget_min


def test_the_builder_derives_each_familys_thinking_controls() -> None:
    build = builder().build
    per_token = {"input_cost_per_token": 2e-06, "output_cost_per_token": 8e-06, "mode": "chat"}
    data = {
        "o9": {**per_token, "litellm_provider": "openai", "supports_reasoning": True},
        "gpt-9": {**per_token, "litellm_provider": "openai", "supports_reasoning": True,
                  "supports_none_reasoning_effort": True, "supports_xhigh_reasoning_effort": True},
        "gpt-4.9": {**per_token, "litellm_provider": "openai", "supports_parallel_function_calling": True},
        "claude-x-5": {**per_token, "litellm_provider": "anthropic", "supports_reasoning": True,
                       "supports_adaptive_thinking": True, "supports_output_config": True,
                       "supports_sampling_params": False, "thinking_always_on": True, "max_output_tokens": 64000},
        "claude-x-4-5": {**per_token, "litellm_provider": "anthropic", "supports_reasoning": True,
                         "max_output_tokens": 64000, "cache_read_input_token_cost": 3e-07},
        "gemini/gemini-2.5-pro": {**per_token, "litellm_provider": "gemini", "supports_reasoning": True},
        "gemini/gemini-3-pro": {**per_token, "litellm_provider": "gemini", "supports_reasoning": True},
        "gemini/gemini-3.5-flash": {**per_token, "litellm_provider": "gemini", "supports_reasoning": True,
                                    "supports_minimal_reasoning_effort": False},
        "gemini/gemini-2.0-flash": {**per_token, "litellm_provider": "gemini"},
        "gpt-audio": {**per_token, "litellm_provider": "openai"},  # not an agent's chat model
        "gemini/gemma-3": {**per_token, "litellm_provider": "gemini"},
        "text-embedding-3": {**per_token, "litellm_provider": "openai", "mode": "embedding"},
    }  # fmt: skip
    models = build(data, "test")["models"]
    assert set(models) == {"openai:o9", "openai:gpt-9", "openai:gpt-4.9", "anthropic:claude-x-5",
                           "anthropic:claude-x-4-5", "gemini:gemini-2.5-pro", "gemini:gemini-3-pro",
                           "gemini:gemini-3.5-flash", "gemini:gemini-2.0-flash"}  # fmt: skip
    o9, gpt9, gpt49 = models["openai:o9"], models["openai:gpt-9"], models["openai:gpt-4.9"]
    assert (o9["efforts"], o9["sampling"], o9["stop"], o9["parallel_tool_calls"]) == (
        ["low", "medium", "high"], False, False, False)  # fmt: skip
    assert (gpt9["efforts"], gpt9["thinking_off"]) == (["none", "low", "medium", "high", "xhigh"], True)
    assert (gpt49["reasoning"], gpt49["sampling"], gpt49["parallel_tool_calls"]) == (False, True, True)
    adaptive, budget = models["anthropic:claude-x-5"], models["anthropic:claude-x-4-5"]
    assert (adaptive["adaptive"], adaptive["budget"], adaptive["thinking_off"], adaptive["sampling"]) == (
        True, False, False, False)  # fmt: skip
    assert (budget["budget"], budget["budget_min"], budget["budget_max"], budget.get("efforts")) == (
        True, 1024, 63999, None)  # fmt: skip
    assert budget["price"] == {"input": 2.0, "output": 8.0, "cached_input": 0.3}
    assert models["gemini:gemini-2.5-pro"].items() >= {"budget": True, "budget_min": 128, "thinking_off": False}.items()
    assert models["gemini:gemini-3-pro"]["efforts"] == ["low", "high"]
    assert models["gemini:gemini-3.5-flash"]["efforts"] == ["low", "medium", "high"]
    assert models["gemini:gemini-2.0-flash"]["reasoning"] is False


def test_the_shipped_snapshot_is_what_the_builder_makes_of_its_source_fields() -> None:
    # Rebuilding one entry from the snapshot's own fields would need LiteLLM's file; instead check the JSON is the
    # builder's output shape: no field the reader does not know.
    data = json.loads((ROOT / "delta_eval" / "catalog" / "models.json").read_text())
    fields = set(ModelInfo.model_fields)
    assert all(set(entry) <= fields for entry in data["models"].values())


@pytest.mark.parametrize(
    ("model", "key"),
    [
        ("openai-responses:o3-2025-04-16", "openai:o3"),
        ("anthropic:claude-sonnet-4-5-20250929", "anthropic:claude-sonnet-4-5-20250929"),
        ("anthropic-vertex:claude-opus-4-8@20261001", "anthropic:claude-opus-4-8"),
        ("anthropic-bedrock:us.anthropic.claude-opus-4-8-v1:0", "anthropic:claude-opus-4-8"),
        ("vertex:gemini-3.5-flash", "gemini:gemini-3.5-flash"),
        ("gemini:models/gemini-3.5-flash", "gemini:gemini-3.5-flash"),
    ],
)
def test_ids_of_every_place_a_model_runs_find_its_entry(model: str, key: str) -> None:
    info = model_info(model)
    assert info.known
    assert info.model == model
    assert info.price == catalog()[key].price


def test_overrides_apply_by_model_id_or_by_catalogue_key() -> None:
    info = model_info("openai:gpt-4.1", {"openai:gpt-4.1": ModelOverride(price=Price(input=1.0, output=2.0))})
    assert (info.price, info.sampling, info.known) == (Price(input=1.0, output=2.0), True, True)
    assert "override" in info.source
    unknown = model_info("openai:mine", {"openai:mine": ModelOverride(reasoning=True, efforts=("low",))})
    assert (unknown.known, unknown.efforts, unknown.sampling) == (True, ("low",), False)


@given(st.sampled_from(EFFORT_ORDER), st.sets(st.sampled_from(EFFORT_ORDER), min_size=1))
def test_the_closest_effort_is_one_the_model_takes_and_exact_when_it_can(wanted: str, takes: set[str]) -> None:
    efforts = tuple(e for e in EFFORT_ORDER if e in takes)
    got = ModelInfo(model="m", efforts=efforts).closest_effort(wanted)  # type: ignore[arg-type]
    assert got in efforts
    if wanted in efforts:
        assert got == wanted
    distance = abs(EFFORT_ORDER.index(got) - EFFORT_ORDER.index(wanted))  # type: ignore[arg-type]
    assert all(abs(EFFORT_ORDER.index(e) - EFFORT_ORDER.index(wanted)) >= distance for e in efforts)


def test_prices_come_from_the_catalogue_and_the_run_overrides_them() -> None:
    assert price_for("anthropic:claude-opus-4-8") == catalog()["anthropic:claude-opus-4-8"].price
    assert price_for("openai:gpt-9-unknown") is None
    mine = Price(input=0.5, output=1.0)
    assert price_for("openai:gpt-4.1", {"openai:gpt-4.1": mine}) == mine
    assert price_for("openai:anything", {"openai:*": mine}) == mine
    assert price_for("simulated:x") == Price(input=0.0, output=0.0)


def test_delta_eval_models_lists_capabilities_and_prices_with_the_date(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "claude-opus-4-8"]) == 0
    out = capsys.readouterr().out
    assert f"Model catalogue of {CATALOG_AS_OF}" in out
    assert "anthropic:claude-opus-4-8" in out
    assert "adaptive" in out
    assert "5 in / 25 out" in out
    assert main(["models", "gemini-2.5-pro"]) == 0  # retired on 2026-12-01: left out unless asked
    assert "gemini:gemini-2.5-pro" not in capsys.readouterr().out
    assert main(["models", "gemini-2.5-pro", "--retired", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["as_of"] == CATALOG_AS_OF
    [entry] = data["models"]
    assert (entry["budget_min"], entry["thinking_off"], entry["deprecation_date"]) == (128, False, "2026-12-01")


def test_vertex_version_suffixes_find_the_model() -> None:
    assert model_info("anthropic-vertex:claude-sonnet-4-6@default").known
    assert model_info("anthropic-vertex:claude-sonnet-4-5@20250929").known


def test_an_azure_deployment_is_priced_as_the_model_it_serves() -> None:
    from delta_eval.adapters.registry import create_adapter

    adapter = create_adapter(
        "azure:eval-deployment",
        {"endpoint": "https://x.openai.azure.com", "api_key": "k", "v1": True, "base_model": "gpt-4.1"},
    )
    assert price_for("azure:eval-deployment") is None  # the name alone says nothing
    assert price_for("azure:eval-deployment", info=adapter.info) == catalog()["openai:gpt-4.1"].price
