"""Rebuild the model catalogue snapshot shipped in the wheel (``delta_eval/catalog/models.json``).

The source is LiteLLM's ``model_prices_and_context_window.json`` (MIT), the most complete maintained record of
per-model capabilities we found: besides prices and limits it says which reasoning efforts a model takes, whether
it thinks adaptively, refuses sampling parameters, takes parallel tool calls, and when it is retired. pydantic's
``genai-prices`` has prices and context windows only; models.dev is not published on a registry we can reach.

What LiteLLM does not record (Gemini's thinking level vs budget and the budget ranges, Anthropic's budget floor) is
derived here by family, from the providers' documentation (URLs beside each rule), so the snapshot the adapters
read is plain data.

Run (a package registry is all it needs)::

    python scripts/update_catalog.py            # downloads the litellm wheel, writes the snapshot, prints a summary
    python scripts/update_catalog.py --from PATH/model_prices_and_context_window.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent.parent / "delta_eval" / "catalog" / "models.json"
LITELLM = "litellm"
DATA = "litellm/model_prices_and_context_window_backup.json"

# LiteLLM provider -> our model-id prefix. Gemini API entries are keyed "gemini/<name>".
PROVIDERS = {"openai": "openai", "anthropic": "anthropic", "gemini": "gemini"}
# Entries that are not chat models an agent would be replayed on.
SKIP = re.compile(r"(^ft:|audio|realtime|tts|transcribe|image|search|live|lyria|robotics|computer-use|embedding|"
                  r"deep-research|container|codex-mini|moderation|gemma|learnlm|gemini-exp|gemini-gemma)")  # fmt: skip
ANTHROPIC_BUDGET_MIN = 1024  # https://docs.anthropic.com/en/docs/build-with-claude/extended-thinking
# Where LiteLLM's record disagrees with the provider's own model page, the page wins.
CORRECTIONS: list[tuple[str, dict[str, Any], str]] = [
    # "gpt-5-pro defaults to (and only supports) reasoning.effort: high"
    (r"^openai:gpt-5-pro(-\d{4}-\d{2}-\d{2})?$", {"efforts": ["high"], "thinking_off": False},
     "https://platform.openai.com/docs/models/gpt-5-pro"),
    # the ChatGPT snapshot is a non-reasoning chat model: it takes no reasoning_effort
    (r"^openai:gpt-5(\.\d+)?-chat(-latest)?$", {"reasoning": False, "efforts": [], "thinking_off": True},
     "https://platform.openai.com/docs/models/gpt-5-chat-latest"),
]  # fmt: skip


def per_million(value: Any) -> float | None:
    """A per-token price as dollars per million tokens (rounded off float noise)."""
    return None if value is None else round(float(value) * 1e6, 6)


def efforts_openai(e: dict[str, Any]) -> list[str]:
    """``reasoning_effort`` values an OpenAI model takes (https://platform.openai.com/docs/guides/reasoning)."""
    if not e.get("supports_reasoning"):
        return []
    if e.get("reasoning_effort_levels"):
        return list(e["reasoning_effort_levels"])
    out = ["none"] if e.get("supports_none_reasoning_effort") else []
    out += ["minimal"] if e.get("supports_minimal_reasoning_effort") else []  # o-series and gpt-5.1+ refuse it
    out += [] if e.get("supports_low_reasoning_effort") is False else ["low"]
    out += ["medium", "high"]
    out += ["xhigh"] if e.get("supports_xhigh_reasoning_effort") else []
    out += ["max"] if e.get("supports_max_reasoning_effort") else []
    return out


def efforts_anthropic(e: dict[str, Any]) -> list[str]:
    """``output_config.effort`` values (https://docs.anthropic.com/en/docs/build-with-claude/effort)."""
    if not e.get("supports_output_config"):
        return []
    out = ["low", "medium", "high"]
    out += ["xhigh"] if e.get("supports_xhigh_reasoning_effort") else []
    out += ["max"] if e.get("supports_max_reasoning_effort") else []
    return out


def gemini_thinking(name: str, e: dict[str, Any]) -> dict[str, Any]:
    """Gemini's thinking controls by generation (https://ai.google.dev/gemini-api/docs/thinking): 2.5 takes a
    ``thinkingBudget`` (ranges per model below), 3 and later a ``thinkingLevel`` (thinking cannot be turned off),
    2.0 and older no thinking configuration at all."""
    version = re.match(r"gemini-(\d+)(?:\.(\d+))?", name)
    major, minor = (int(version.group(1)), int(version.group(2) or 0)) if version else (0, 0)
    latest = name.endswith("-latest")  # an alias of the current generation
    if not e.get("supports_reasoning") or ((major, minor) < (2, 5) and not latest):
        return {"reasoning": False}
    if (major, minor) == (2, 5):
        if "pro" in name:
            return {"reasoning": True, "budget": True, "budget_min": 128, "budget_max": 32768, "thinking_off": False}
        if "lite" in name:
            return {"reasoning": True, "budget": True, "budget_min": 512, "budget_max": 24576, "thinking_off": True}
        return {"reasoning": True, "budget": True, "budget_min": 1, "budget_max": 24576, "thinking_off": True}
    if "pro" in name and (major, minor) == (3, 0):
        levels = ["low", "high"]  # Gemini 3 Pro: low and high only
    elif "pro" in name:
        levels = ["low", "medium", "high"]
    else:
        levels = [] if e.get("supports_minimal_reasoning_effort") is False else ["minimal"]
        levels += ["low", "medium", "high"]
    levels += ["xhigh"] if e.get("supports_xhigh_reasoning_effort") else []
    return {"reasoning": True, "efforts": levels, "thinking_off": False}


def normalise(prefix: str, name: str, e: dict[str, Any]) -> dict[str, Any]:
    """One catalogue entry in the fields :class:`delta_eval.catalog.ModelInfo` reads."""
    reasoning = bool(e.get("supports_reasoning"))
    out: dict[str, Any] = {"reasoning": reasoning}
    if prefix == "openai":
        efforts = efforts_openai(e)
        out.update(
            efforts=efforts,
            thinking_off=not reasoning or "none" in efforts,
            # Reasoning models refuse temperature/top_p and stop (https://platform.openai.com/docs/guides/reasoning)
            sampling=e.get("supports_sampling_params", not reasoning),
            stop=not reasoning,
            parallel_tool_calls=bool(e.get("supports_parallel_function_calling", not reasoning)),
        )
    elif prefix == "anthropic":
        adaptive = bool(e.get("supports_adaptive_thinking"))
        budget = reasoning and (not adaptive or bool(e.get("supports_legacy_thinking")))
        out.update(
            efforts=efforts_anthropic(e),
            adaptive=adaptive,
            budget=budget,
            budget_min=ANTHROPIC_BUDGET_MIN if budget else None,
            budget_max=(e.get("max_output_tokens") or 0) - 1 if budget and e.get("max_output_tokens") else None,
            thinking_off=not e.get("thinking_always_on", False),
            thinking_default=bool(e.get("thinking_always_on") or e.get("thinking_on_by_default")),
            sampling=e.get("supports_sampling_params", True) is not False,
        )
    else:
        out.update(gemini_thinking(name, e))
        out["sampling"] = e.get("supports_sampling_params", True) is not False
    out.update(
        tools=bool(e.get("supports_function_calling", False)),
        structured_output=bool(e.get("supports_response_schema", False)),
        max_output_tokens=e.get("max_output_tokens"),
        context_window=e.get("max_input_tokens"),
        deprecation_date=e.get("deprecation_date"),
        prompt_cache_min_tokens=int(e["prompt_cache_min_tokens"]) if e.get("prompt_cache_min_tokens") else None,
    )
    if e.get("input_cost_per_token") is not None and e.get("output_cost_per_token") is not None:
        price = {"input": per_million(e["input_cost_per_token"]), "output": per_million(e["output_cost_per_token"])}
        for ours, theirs in (
            ("cached_input", "cache_read_input_token_cost"),
            ("cache_write", "cache_creation_input_token_cost"),
            ("reasoning", "output_cost_per_reasoning_token"),
        ):
            if e.get(theirs) is not None:
                price[ours] = per_million(e[theirs])
        out["price"] = price
    return {k: v for k, v in out.items() if v is not None and v != []}


def build(data: dict[str, Any], version: str) -> dict[str, Any]:
    """The snapshot: ``{"as_of", "source", "models": {"prefix:name": entry}}``."""
    models: dict[str, Any] = {}
    for key, entry in data.items():
        if not isinstance(entry, dict) or entry.get("mode") not in ("chat", "responses"):
            continue
        prefix = PROVIDERS.get(entry.get("litellm_provider", ""))
        if prefix is None:
            continue
        name = key.split("/", 1)[1] if "/" in key else key
        if prefix == "gemini" and not name.startswith("gemini-"):
            continue
        if SKIP.search(name):
            continue
        key = f"{prefix}:{name}"
        models[key] = normalise(prefix, name, entry)
        for pattern, patch, _source in CORRECTIONS:
            if re.match(pattern, key):
                models[key] = {k: v for k, v in {**models[key], **patch}.items() if v is not None and v != []}
    return {
        "as_of": dt.date.today().isoformat(),
        "source": f"{LITELLM} {version} model_prices_and_context_window.json (MIT), normalised by "
        "scripts/update_catalog.py",
        "models": dict(sorted(models.items())),
    }


def download() -> tuple[dict[str, Any], str]:
    """LiteLLM's data file from the newest wheel on the package index."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp, LITELLM], check=True)
        wheel = next(Path(tmp).glob("litellm-*.whl"))
        version = wheel.name.split("-")[1]
        with zipfile.ZipFile(wheel) as z:
            return json.loads(z.read(DATA)), version


def main() -> None:
    """Write the snapshot and print how many models of each provider it holds."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="source", type=Path, help="a model_prices_and_context_window.json to read")
    parser.add_argument("--version", default="(local file)", help="the litellm version the file came with")
    args = parser.parse_args()
    data, version = (json.loads(args.source.read_text()), args.version) if args.source else download()
    snapshot = build(data, version)
    OUT.write_text(json.dumps(snapshot, indent=1) + "\n")
    counts: dict[str, int] = {}
    for model in snapshot["models"]:
        counts[model.split(":")[0]] = counts.get(model.split(":")[0], 0) + 1
    print(f"{OUT}: {len(snapshot['models'])} models as of {snapshot['as_of']} ({counts})")


if __name__ == "__main__":
    main()
